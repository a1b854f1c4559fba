//! Measures all-reduce times on this machine and fits the cost model's
//! alpha and beta by least squares, printing the fit and its error.
//!
//! ```text
//! cargo run --release -p tessera-collectives --example fit [RANKS...]
//! # the MPI transport (each rank runs the same program):
//! cargo build --release -p tessera-collectives --features mpi --example fit
//! mpirun -n 4 --oversubscribe target/release/examples/fit
//! ```
//!
//! Threads: one world per rank count (default 2 and 4), every algorithm,
//! f32 buffers of 4 KiB to 64 MiB (the largest only with 2 ranks), with
//! the memcpy bandwidth of the same machine for reference.

use std::time::Instant;

use tessera_collectives::cost::{Ports, bus_factor};
use tessera_collectives::fit::{self, Plan, Sample};
use tessera_core::collective::{Algorithm, Collective};

fn report(transport: &str, p: usize, algorithm: Algorithm, samples: &[Sample]) {
    let f = fit::fit(samples, false).expect("enough samples for a fit");
    println!(
        "{transport} p={p} {algorithm:?}: alpha {:.2} us, beta {:.4} ns/B ({:.2} GB/s), \
         rms error {:.1}%, max {:.1}%",
        f.alpha * 1e6,
        f.beta * 1e9,
        1.0 / f.beta / 1e9,
        f.rms_error * 100.0,
        f.max_error * 100.0
    );
    // Caches: one beta cannot fit buffers that stay in cache and buffers
    // that stream from memory; fit the two regimes apart as well.
    for (name, keep) in [
        (
            "<= 1 MiB",
            &(|b: usize| b <= 1 << 20) as &dyn Fn(usize) -> bool,
        ),
        (">= 4 MiB", &|b: usize| b >= 4 << 20),
    ] {
        let part: Vec<Sample> = samples
            .iter()
            .filter(|s| keep(s.len * 4))
            .copied()
            .collect();
        if let Ok(f) = fit::fit(&part, false) {
            println!(
                "  {name}: alpha {:.2} us, beta {:.4} ns/B ({:.2} GB/s), rms error {:.1}%, max {:.1}%",
                f.alpha * 1e6,
                f.beta * 1e9,
                1.0 / f.beta / 1e9,
                f.rms_error * 100.0,
                f.max_error * 100.0
            );
        }
    }
    for s in samples {
        let bytes = s.len * 4;
        println!(
            "  {bytes:>10} B  {:>11.1} us  fitted {:>11.1} us  busbw {:>6.2} GB/s",
            s.seconds * 1e6,
            f.seconds(&s.terms) * 1e6,
            bytes as f64 / s.seconds * bus_factor(Collective::AllReduce, p) / 1e9
        );
    }
}

/// memcpy bandwidth (read + write counted once, as a copy's bytes).
fn memcpy_gbs(bytes: usize) -> f64 {
    let src = vec![1u8; bytes];
    let mut dst = vec![0u8; bytes];
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        best = best.min(t.elapsed().as_secs_f64());
        std::hint::black_box(&mut dst);
    }
    bytes as f64 / best / 1e9
}

fn main() {
    #[cfg(feature = "mpi")]
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        mpi_main();
        return;
    }
    let ranks: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let ranks = if ranks.is_empty() { vec![2, 4] } else { ranks };
    println!("memcpy of 64 MiB: {:.2} GB/s", memcpy_gbs(64 << 20));
    for &p in &ranks {
        let max = if p <= 2 { 24 } else { 22 };
        let sizes: Vec<usize> = (10..=max).step_by(2).map(|k| 1usize << k).collect();
        for algorithm in Algorithm::ALL {
            let mut plan = Plan::new(algorithm, sizes.clone());
            plan.reps = 5;
            plan.ports = Ports::Single;
            let samples = fit::measure_threads(p, &plan).expect("measuring");
            report("threads", p, algorithm, &samples);
        }
    }
}

#[cfg(feature = "mpi")]
fn mpi_main() {
    use tessera_collectives::Communicator;
    use tessera_collectives::mpi::{self, MpiCommunicator};
    let universe = mpi::initialize().expect("MPI initialises");
    let comm = MpiCommunicator::world(&universe);
    let sizes: Vec<usize> = (4..=22).step_by(2).map(|k| 1usize << k).collect();
    for algorithm in Algorithm::ALL {
        let mut plan = Plan::new(algorithm, sizes.clone());
        plan.reps = 5;
        let samples = fit::measure(&comm, &plan).expect("measuring");
        if comm.rank() == 0 {
            report("mpi", comm.size(), algorithm, &samples);
        }
    }
}
