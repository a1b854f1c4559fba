//! What memory allows an all-reduce of threads on this machine: the
//! ceiling against which `tessera bench allreduce` (thread transport) is
//! judged.
//!
//! ```text
//! cargo run --release -p tessera-collectives --example allreduce_bound -- [RANKS] [MIB] [REPS]
//! ```
//!
//! For a buffer of `MIB` MiB of f32 per rank (default 2 ranks, 64 MiB, best
//! of 10), it times:
//!
//! - `memcpy`: `copy_from_slice` of the buffer on one thread (the suite's
//!   reference), and the same bytes copied by `RANKS` threads at once, a
//!   `1/RANKS` share each (what all the cores can copy together);
//! - `zero-copy`: the least traffic an in-place Sum all-reduce of `RANKS`
//!   buffers in one address space can have: thread `r` adds fragment `r` of
//!   every buffer and writes the sum into fragment `r` of every buffer
//!   (reads and writes each buffer's bytes once). It is safe Rust because one
//!   caller lends all the buffers at once (`chunks_mut`, scoped threads); a
//!   transport whose ranks each hold their own buffer and only meet through
//!   a communicator cannot do this without unsafe sharing;
//! - `transport ring`: `Collectives::all_reduce` with the ring over a
//!   `ThreadWorld`, which copies every message once into the receiver's
//!   mailbox;
//! - `transport ring, sliced`: the same as calls on slices of `RANKS` x
//!   512 KiB (512 KiB messages), as the suite's `ring_chunked`.
//!
//! Each line gives busbw (= algbw x 2 (p - 1) / p) and its ratio to the
//! one-thread memcpy's bytes per second.

use std::hint::black_box;
use std::time::Instant;

use tessera_collectives::cost::bus_factor;
use tessera_collectives::{
    Algorithm, Collective, Collectives, Options, ReduceOp, Reducer, ThreadWorld,
};

fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Thread `r` sums fragment `r` of every buffer and writes the sum back into
/// each: every buffer byte is read once and written once.
fn zero_copy_all_reduce(bufs: &mut [Vec<f32>]) {
    let p = bufs.len();
    let n = bufs[0].len();
    let f = n.div_ceil(p);
    // frags[r][q] = fragment r of buffer q.
    let mut frags: Vec<Vec<&mut [f32]>> = (0..p).map(|_| Vec::with_capacity(p)).collect();
    for b in bufs.iter_mut() {
        for (r, frag) in b.chunks_mut(f).enumerate() {
            frags[r].push(frag);
        }
    }
    std::thread::scope(|s| {
        for mut mine in frags {
            s.spawn(move || {
                // Blocks that stay in L1: read every buffer's block, add,
                // write the sum to every buffer.
                const BLOCK: usize = 2048;
                let len = mine.first().map_or(0, |b| b.len());
                let mut acc = [0.0f32; BLOCK];
                let mut at = 0;
                while at < len {
                    let end = (at + BLOCK).min(len);
                    let acc = &mut acc[..end - at];
                    acc.copy_from_slice(&mine[0][at..end]);
                    for b in &mine[1..] {
                        for (a, x) in acc.iter_mut().zip(&b[at..end]) {
                            *a += *x;
                        }
                    }
                    for b in &mut mine {
                        b[at..end].copy_from_slice(acc);
                    }
                    at = end;
                }
            });
        }
    });
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let p = args.first().copied().unwrap_or(2).max(1);
    let mib = args.get(1).copied().unwrap_or(64);
    let reps = args.get(2).copied().unwrap_or(10);
    let n = mib << 18;
    let bytes = n * 4;
    let factor = bus_factor(Collective::AllReduce, p);

    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    let memcpy = best(reps, || {
        black_box(&mut dst).copy_from_slice(black_box(&src));
    });
    let memcpy_gbps = bytes as f64 / memcpy / 1e9;
    println!(
        "memcpy, 1 thread:            {:>9.2} ms  {memcpy_gbps:>6.2} GB/s",
        memcpy * 1e3
    );
    let share = n.div_ceil(p);
    let together = best(reps, || {
        std::thread::scope(|s| {
            for (d, c) in dst.chunks_mut(share).zip(src.chunks(share)) {
                s.spawn(move || black_box(d).copy_from_slice(black_box(c)));
            }
        });
    });
    println!(
        "memcpy, {p} threads:           {:>9.2} ms  {:>6.2} GB/s ({:.2}x one thread)",
        together * 1e3,
        bytes as f64 / together / 1e9,
        memcpy / together
    );
    drop((src, dst));

    let line = |name: &str, t: f64| {
        let busbw = bytes as f64 / t * factor / 1e9;
        println!(
            "{name:<28} {:>9.2} ms  busbw {busbw:>6.2} GB/s  {:.2}x memcpy",
            t * 1e3,
            busbw / memcpy_gbps
        );
    };

    let mut bufs: Vec<Vec<f32>> = (0..p).map(|r| vec![r as f32 + 1.0; n]).collect();
    zero_copy_all_reduce(&mut bufs);
    let expected = (p * (p + 1) / 2) as f32;
    assert!(bufs.iter().all(|b| b.iter().all(|&x| x == expected)));
    for b in &mut bufs {
        b.fill(0.0);
    }
    line(
        &format!("zero-copy, p={p}"),
        best(reps, || zero_copy_all_reduce(&mut bufs)),
    );
    drop(bufs);

    for (name, chunk) in [("transport ring", n), ("transport ring, sliced", p << 17)] {
        let times = ThreadWorld::run(p, |comm| {
            let opts = Options::new().with_algorithm(Algorithm::Ring);
            let mut c = Collectives::new(comm).with_options(opts);
            let mut x = vec![0.0f32; n];
            let mut t = Vec::with_capacity(reps + 1);
            for _ in 0..=reps {
                c.barrier().unwrap();
                let start = Instant::now();
                for part in x.chunks_mut(chunk) {
                    c.all_reduce(part, Reducer::new(ReduceOp::Sum)).unwrap();
                }
                t.push(start.elapsed().as_secs_f64());
            }
            t
        })
        .unwrap();
        let times: Vec<Vec<f64>> = times.into_iter().map(Result::unwrap).collect();
        let t = (1..=reps)
            .map(|i| times.iter().map(|r| r[i]).fold(0.0, f64::max))
            .fold(f64::INFINITY, f64::min);
        line(&format!("{name}, p={p}"), t);
    }
}
