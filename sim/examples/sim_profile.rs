//! Prints the profile of one simulated LAMB step and writes its JSON and
//! Chrome trace: `cargo run --release -p tessera-sim --example
//! sim_profile [IPUS] [PARAMS] [OUT_DIR]`.

use core::num::NonZeroU64;

use tessera_core::optim::{Lamb, LambConfig};
use tessera_sim::IpuSpec;
use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Target};
use tessera_sim::kernels::lamb::{LambOptions, lamb};

fn main() {
    let mut args = std::env::args().skip(1);
    let ipus: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let n: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(16 << 20);
    let out = args.next();
    let target = Target::new(IpuSpec::MK2_GC200, ipus).expect("target");
    let mut g = Graph::new(target);
    let grain = NonZeroU64::new(256).expect("nonzero");
    let w = g
        .add_tensor("w", DType::F32, &[n], Mapping::linear(grain))
        .expect("w");
    let t: Vec<_> = ["g", "m", "v"]
        .iter()
        .map(|name| {
            g.add_tensor(name, DType::F32, &[n], Mapping::Like(w))
                .expect("tensor")
        })
        .collect();
    let opts = LambOptions::new(Lamb::new(LambConfig::default()).expect("lamb"));
    let lp = lamb::<f32, f32, f32>(&mut g, "lamb", w, t[0], [t[1], t[2]], &opts).expect("lamb");
    let mut e = Engine::new(g, lp.program, EngineOptions::default()).expect("engine");
    let mut p = e.run();
    for _ in 0..40 {
        p = e.run();
    }
    println!("{p}");
    if let Some(dir) = out {
        std::fs::write(format!("{dir}/profile.json"), p.to_json()).expect("write");
        std::fs::write(format!("{dir}/trace.json"), p.chrome_trace().to_string()).expect("write");
    }
}
