//! Times a thread-transport all-reduce of one size (profiling aid).
//!
//! ```text
//! cargo run --release -p tessera-collectives --example allreduce_big -- [RANKS] [MIB] [REPS]
//! ```

use std::time::Instant;

use tessera_collectives::{Algorithm, Collectives, Options, ReduceOp, Reducer, ThreadWorld};

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let p = args.first().copied().unwrap_or(2);
    let mib = args.get(1).copied().unwrap_or(64);
    let reps = args.get(2).copied().unwrap_or(10);
    let len = mib << 18;
    let times = ThreadWorld::run(p, |comm| {
        let mut c =
            Collectives::new(comm).with_options(Options::new().with_algorithm(Algorithm::Ring));
        let mut x = vec![1.0f32; len];
        let mut best = f64::INFINITY;
        for _ in 0..reps {
            c.barrier().unwrap();
            let t = Instant::now();
            c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    })
    .unwrap();
    let t = times.into_iter().map(Result::unwrap).fold(0.0, f64::max);
    let busbw = (len * 4) as f64 / t * 2.0 * (p as f64 - 1.0) / p as f64 / 1e9;
    println!(
        "p={p} {mib} MiB ring all-reduce: {:.2} ms, busbw {busbw:.2} GB/s",
        t * 1e3
    );
}
