//! Prints the simulator benchmarks: `cargo run --release -p tessera-sim
//! --example sim_bench [PARAMS]` (default 16 Mi parameters).

use tessera_sim::IpuSpec;
use tessera_sim::bench::{LambBench, ipu_scaling, lamb_overhead};

fn main() {
    let params = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(16 << 20);
    let r = lamb_overhead(&LambBench {
        params,
        ..LambBench::default()
    })
    .expect("LAMB benchmark");
    println!("{}", serde_json::to_string_pretty(&r).expect("json"));
    let rows = ipu_scaling(IpuSpec::MK2_GC200, params, &[1, 2, 4, 8, 16], 3).expect("scaling");
    println!("{}", serde_json::to_string_pretty(&rows).expect("json"));
}
