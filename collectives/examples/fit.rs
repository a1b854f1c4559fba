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
//!
//! `--terms FILE...` fits each algorithm's cost per rank count
//! ([`fit::fit_algorithm`]) to the thread-transport times of
//! `tessera bench allreduce --json` runs (the best of the files for each
//! algorithm, rank count and size), prints the table for
//! `cost::Fitted::THREADS`, and for every size and rank count the
//! algorithm the fitted model picks and its measured time over the best;
//! `--terms --mpi FILE...` does the same with the MPI transport's times
//! (`--transport mpi` runs) for `cost::Fitted::PROCESSES`:
//!
//! ```text
//! for i in 1 2 3; do target/release/tessera bench allreduce --json > run$i.jsonl; done
//! cargo run --release -p tessera-collectives --example fit -- --terms run*.jsonl
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use tessera_collectives::cost::{AlgorithmCost, Fitted, Ports, bus_factor, terms};
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

/// Bytes of a rank's buffer charged at `beta_cached` in `--terms` fits:
/// the 1 MiB L2 of a core of the machine `Fitted::THREADS` comes from.
const CACHE: f64 = 1_048_576.0;

/// The bench's thread-transport times: `(algorithm, ranks, elements)` ->
/// the best seconds over the files.
type Times = BTreeMap<(usize, usize, usize), f64>;

/// Reads `allreduce_<algorithm>_p<ranks>` records of `tessera bench
/// allreduce --json` output: those over MPI (`_mpi`) if `mpi`, else the
/// others.
fn read_bench(files: &[String], mpi: bool) -> Times {
    let mut times = Times::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{file}: {e}"));
        for line in text.lines().filter(|l| l.starts_with('{')) {
            let v: serde_json::Value = serde_json::from_str(line).expect("a JSON record");
            let kernel = v["kernel"].as_str().unwrap_or_default();
            let kernel = match kernel.strip_suffix("_mpi") {
                Some(k) if mpi => k,
                None if !mpi => kernel,
                _ => continue,
            };
            let Some((label, p)) = kernel
                .strip_prefix("allreduce_")
                .and_then(|k| k.rsplit_once("_p"))
                .and_then(|(label, p)| Some((label, p.parse::<usize>().ok()?)))
            else {
                continue;
            };
            let Some(a) = Algorithm::ALL.iter().position(|a| name(*a) == label) else {
                continue;
            };
            let n = v["elements"].as_u64().expect("elements") as usize;
            let t = v["seconds"].as_f64().expect("seconds");
            let best = times.entry((a, p, n)).or_insert(f64::INFINITY);
            *best = best.min(t);
        }
    }
    times
}

/// The bench's name of `a`.
const fn name(a: Algorithm) -> &'static str {
    match a {
        Algorithm::Ring => "ring",
        Algorithm::BidirectionalRing => "bidirectional_ring",
        Algorithm::DoubleBinaryTree => "double_binary_tree",
        Algorithm::HalvingDoubling => "halving_doubling",
    }
}

/// Fits every algorithm per rank count, prints the table and how the
/// fitted model's choice compares with the measured best.
fn terms_main(files: &[String], mpi: bool) {
    let times = read_bench(files, mpi);
    let ranks: BTreeSet<usize> = times.keys().map(|k| k.1).collect();
    let mut table = Vec::new();
    for &p in &ranks {
        let mut costs = Vec::new();
        for (a, &algorithm) in Algorithm::ALL.iter().enumerate() {
            let samples: Vec<Sample> = times
                .iter()
                .filter(|(k, _)| k.0 == a && k.1 == p)
                .map(|(k, &seconds)| Sample {
                    len: k.2,
                    terms: terms(algorithm, Collective::AllReduce, p, k.2, 4, Ports::Single)
                        .expect("a schedule"),
                    seconds,
                })
                .collect();
            let f = fit::fit_algorithm(&samples, CACHE).expect("enough sizes for a fit");
            println!(
                "p={p} {algorithm:?}: alpha {:.2} us, beta {:.4} ns/B cached, {:.4} streamed; \
                 rms error {:.1}%, max {:.1}%",
                f.cost.alpha * 1e6,
                f.cost.beta_cached * 1e9,
                f.cost.beta_streamed * 1e9,
                f.rms_error * 100.0,
                f.max_error * 100.0
            );
            costs.push(f.cost);
        }
        table.push((p, costs));
    }
    let table_name = if mpi { "PROCESSES" } else { "THREADS" };
    println!("\nconst {table_name}_RANKS: &[(usize, [AlgorithmCost; 4])] = &[");
    for (p, costs) in &table {
        println!("    (\n        {p},\n        [");
        for c in costs {
            println!(
                "            cost({:.3e}, {:.3e}, {:.3e}),",
                c.alpha, c.beta_cached, c.beta_streamed
            );
        }
        println!("        ],\n    ),");
    }
    println!("];\n");
    choices(&times, &table);
}

/// For every rank count and size: the fitted model's pick, the measured
/// best, and the pick's measured time over the best's.
fn choices(times: &Times, table: &[(usize, Vec<AlgorithmCost>)]) {
    let mut worst = 1.0f64;
    for (p, costs) in table {
        let ranks: &'static [(usize, [AlgorithmCost; 4])] =
            Box::leak(Box::new([(*p, [costs[0], costs[1], costs[2], costs[3]])]));
        let fitted = Fitted {
            cache: CACHE,
            ranks,
        };
        let sizes: BTreeSet<usize> = times.keys().filter(|k| k.1 == *p).map(|k| k.2).collect();
        for n in sizes {
            let measured = |a: usize| times.get(&(a, *p, n)).copied().unwrap_or(f64::INFINITY);
            let predicted = |a: usize| {
                let algorithm = Algorithm::ALL[a];
                let t = terms(algorithm, Collective::AllReduce, *p, n, 4, Ports::Single)
                    .expect("a schedule");
                fitted.seconds(algorithm, *p, n * 4, &t).expect("fitted")
            };
            let pick = (0..4)
                .min_by(|&a, &b| predicted(a).total_cmp(&predicted(b)))
                .expect("4");
            let best = (0..4)
                .min_by(|&a, &b| measured(a).total_cmp(&measured(b)))
                .expect("4");
            let ratio = measured(pick) / measured(best);
            worst = worst.max(ratio);
            println!(
                "p={p} {:>10} B: picks {:<18} best {:<18} {ratio:.3}x",
                n * 4,
                name(Algorithm::ALL[pick]),
                name(Algorithm::ALL[best])
            );
        }
    }
    println!("worst pick: {worst:.3}x the best");
}

fn main() {
    #[cfg(feature = "mpi")]
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        mpi_main();
        return;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--terms") {
        let mpi = args.get(1).map(String::as_str) == Some("--mpi");
        terms_main(&args[1 + usize::from(mpi)..], mpi);
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
