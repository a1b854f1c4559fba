//! The MPI transport under `mpirun` (feature `mpi`; `harness = false`).
//!
//! Run directly (`cargo test -p tessera-collectives --features mpi --test
//! mpi`), it starts itself under `mpirun -n 4 --oversubscribe` (plus
//! `--allow-run-as-root` as root; `TESSERA_MPI_RANKS` changes the count,
//! `MPIRUN` the launcher). Under `mpirun` every rank runs every check and
//! panics on the first failure, which makes `mpirun` end the job with an
//! error. Checks: every algorithm, collective, operation, element type and
//! order against the in-memory executor, bit for bit, and against exact
//! sums; deterministic mode against the executor and across algorithms;
//! groups and the hierarchical all-reduce; point-to-point; aborts,
//! timeouts and mismatched calls at random steps (every rank must fail or
//! be right, none may hang); a stall blamed on the rank that stopped
//! whichever rank times out first, and on no rank when ranks wait for each
//! other; a rank that panics in a collective ending the job at once (an
//! inner `mpirun` job started by rank 0); then the cost model's alpha and
//! beta fitted to this transport's timings. With `TESSERA_MPI_CHECKS=orders`
//! only the deterministic and order-free all-reduce checks run (cheap enough
//! for every rank count from 1 to 8).

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use tessera_collectives::fault::{Fault, Faulty};
use tessera_collectives::fit::{self, Plan};
use tessera_collectives::mpi::{self, MpiCommunicator};
use tessera_collectives::{
    Cause, Collectives, CommError, Communicator, Incoming, Options, Outgoing, ReplicaGroup,
    fragment,
};
use tessera_core::collective::{
    self, Algorithm, Collective, CollectiveSchedule, Op, Order, ReduceOp, Reducer, tree_sum,
};
use tessera_core::fp::{Element, Rounding, bf16, f16};

const LONG: Duration = Duration::from_secs(60);

fn main() -> ExitCode {
    let under_mpirun = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !under_mpirun {
        return launch();
    }
    let universe = mpi::initialize().expect("MPI initialises once");
    let comm = MpiCommunicator::world(&universe);
    if std::env::var(INNER_JOB).as_deref() == Ok("panic") {
        return panicking_job(comm);
    }
    let rank = comm.rank();
    let start = Instant::now();
    let mut passed = 0;
    let comm = run_all(comm, &mut passed);
    comm.barrier(LONG).expect("final barrier");
    if rank == 0 {
        println!(
            "mpi: {} ranks, {:.1} s\n{passed} passed, 0 failed",
            comm.size(),
            start.elapsed().as_secs_f64()
        );
    }
    ExitCode::SUCCESS
}

/// The environment variable that makes this binary run an inner job's
/// case instead of the checks (see [`panic_ends_the_job`]).
const INNER_JOB: &str = "TESSERA_MPI_INNER_JOB";

/// `mpirun -n RANKS --oversubscribe [--allow-run-as-root] THIS-BINARY`.
fn mpirun(ranks: &str) -> Command {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mpirun = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let mut cmd = Command::new(&mpirun);
    cmd.args(["-n", ranks, "--oversubscribe"]);
    // Open MPI refuses root without this (CI runs as root).
    if std::env::var("USER").as_deref() == Ok("root")
        || Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"))
    {
        cmd.arg("--allow-run-as-root");
    }
    cmd.arg(exe);
    cmd
}

/// Starts this binary under mpirun and returns its status.
fn launch() -> ExitCode {
    let ranks = std::env::var("TESSERA_MPI_RANKS").unwrap_or_else(|_| "4".into());
    let mpirun = std::env::var("MPIRUN").unwrap_or_else(|_| "mpirun".into());
    let mut cmd = self::mpirun(&ranks);
    cmd.args(std::env::args_os().skip(1));
    eprintln!("mpi tests: running {cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("mpi tests FAILED: {mpirun} exited with {s}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("mpi tests FAILED: cannot run {mpirun}: {e} (install openmpi-bin)");
            ExitCode::FAILURE
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Values {
    Exact,
    Fuzzy,
}

fn value(kind: Values, r: usize, i: usize) -> f32 {
    match kind {
        Values::Exact => ((r * 7 + i * 3) % 11) as f32 - 5.0,
        Values::Fuzzy => {
            let mut h = (r as u64) << 32 | i as u64;
            h = h.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            h ^= h >> 29;
            h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
            h ^= h >> 32;
            let unit = (h & 0xff_ffff) as f32 / (1 << 24) as f32 * 2.0 - 1.0;
            unit * [1.0, 1e-3, 1e3, 0.37][(h >> 30) as usize % 4]
        }
    }
}

fn input<T: Element>(kind: Values, r: usize, len: usize) -> Vec<T> {
    (0..len)
        .map(|i| T::store(value(kind, r, i), Rounding::Nearest, 0))
        .collect()
}

fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.load().to_bits()).collect()
}

/// The in-memory executor's buffers (every rank computes all of them).
fn reference<T: Element>(s: &CollectiveSchedule, op: ReduceOp, values: Values) -> Vec<Vec<T>> {
    let p = s.size();
    let mut bufs: Vec<Vec<T>> = (0..p).map(|r| input(values, r, s.len())).collect();
    let mut refs: Vec<&mut [T]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let mut scratch = vec![0.0f32; s.scratch_len::<T>(op)];
    collective::execute(s, &Reducer::new(op), &mut refs, &mut scratch, |_| {})
        .expect("the executor runs");
    bufs
}

fn exact<T: Element>(p: usize, c: Collective, op: ReduceOp, len: usize, i: usize) -> f32 {
    let v = |q| value(Values::Exact, q, i);
    let x = match c {
        Collective::AllGather => v(i / len.div_ceil(p)),
        Collective::Broadcast { root } => v(root),
        _ => match op {
            ReduceOp::Sum => (0..p).map(v).sum(),
            ReduceOp::Mean => (0..p).map(v).sum::<f32>() / p as f32,
            ReduceOp::Max => (0..p).map(v).fold(f32::MIN, f32::max),
            ReduceOp::Min => (0..p).map(v).fold(f32::MAX, f32::min),
        },
    };
    T::store(x, Rounding::Nearest, 0).load()
}

fn specified(p: usize, c: Collective, len: usize, r: usize) -> std::ops::Range<usize> {
    match c {
        Collective::ReduceScatter => fragment(len, p, r),
        Collective::Reduce { root } if root != r => 0..0,
        _ => 0..len,
    }
}

/// The environment variable that limits a run to a named set of checks:
/// `orders` runs only the deterministic and order-free all-reduces, whose
/// claim is bits independent of the rank count (CI runs it for P = 1..8).
const CHECKS: &str = "TESSERA_MPI_CHECKS";

fn run_all(comm: MpiCommunicator, passed: &mut usize) -> MpiCommunicator {
    let mut c = Collectives::new(comm);
    match std::env::var(CHECKS).as_deref() {
        Err(_) => {}
        Ok("orders") => {
            deterministic(&mut c, passed);
            order_free(&mut c, passed);
            return c.into_inner();
        }
        Ok(other) => panic!("{CHECKS}={other:?}: the only named set is \"orders\""),
    }
    every_case::<f32>(&mut c, passed);
    every_case::<f16>(&mut c, passed);
    every_case::<bf16>(&mut c, passed);
    deterministic(&mut c, passed);
    order_free(&mut c, passed);
    groups(&mut c, passed);
    point_to_point(&c, passed);
    let mut comm = c.into_inner();
    comm = faults(comm, passed);
    comm = stalls_are_blamed_on_the_rank_that_stopped(comm, passed);
    comm = waits_in_a_cycle_name_nobody(comm, passed);
    comm = mismatches(comm, passed);
    panic_ends_the_job(&comm, passed);
    fit_model(&comm, passed);
    comm
}

/// Every algorithm x collective x operation x order, counts 0, 1, p - 1,
/// p, 1000 and 10007, against the executor and the exact answer.
fn every_case<T: Element>(c: &mut Collectives<MpiCommunicator>, passed: &mut usize) {
    let (p, r) = (c.size(), c.rank());
    let mut n = 0;
    for len in [0, 1, p - 1, p, 1000, 10007] {
        for algorithm in Algorithm::ALL {
            for collective in [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
                Collective::Reduce { root: p - 1 },
                Collective::Broadcast { root: p / 2 },
            ] {
                let ops: &[ReduceOp] = if collective.reduces() {
                    &ReduceOp::ALL
                } else {
                    &[ReduceOp::Sum]
                };
                for &op in ops {
                    for order in [Order::Schedule, Order::Deterministic, Order::Free] {
                        if order != Order::Schedule && !collective.reduces() {
                            continue;
                        }
                        for values in [Values::Exact, Values::Fuzzy] {
                            if len > p && values == Values::Fuzzy && op != ReduceOp::Sum {
                                continue;
                            }
                            c.set_options(
                                Options::new()
                                    .with_algorithm(algorithm)
                                    .with_order(order)
                                    .with_timeout(LONG),
                            );
                            let mut x: Vec<T> = input(values, r, len);
                            let report = c
                                .run(collective, &mut x, Reducer::new(op))
                                .unwrap_or_else(|e| {
                                    panic!("rank {r}: {} {algorithm:?} {collective:?} {op:?} {order:?} n={len}: {e}", T::NAME)
                                });
                            assert_eq!(report.algorithm, algorithm);
                            let s = CollectiveSchedule::new(algorithm, collective, p, len)
                                .unwrap()
                                .with_order(order);
                            let want = reference::<T>(&s, op, values);
                            let at = specified(p, collective, len, r);
                            let ctx = || {
                                format!(
                                    "rank {r}: {} {algorithm:?} {collective:?} {op:?} {order:?} {values:?} n={len}",
                                    T::NAME
                                )
                            };
                            assert_eq!(
                                bits(&x[at.clone()]),
                                bits(&want[r][at.clone()]),
                                "{}",
                                ctx()
                            );
                            if values == Values::Exact {
                                for i in at {
                                    assert_eq!(
                                        x[i].load(),
                                        exact::<T>(p, collective, op, len, i),
                                        "{} element {i}",
                                        ctx()
                                    );
                                }
                            }
                            n += 1;
                        }
                    }
                }
            }
        }
    }
    if r == 0 {
        println!(
            "every case, {}: {n} collectives match the executor",
            T::NAME
        );
    }
    *passed += 1;
}

/// Deterministic mode: bitwise the single-process executor's result and
/// the same for every algorithm; with each rank holding the tree sum of
/// its contributions, tree_sum of all of them.
fn deterministic(c: &mut Collectives<MpiCommunicator>, passed: &mut usize) {
    let (p, r) = (c.size(), c.rank());
    let len = 4097;
    let m = 4;
    let contributions: Vec<Vec<f32>> = (0..p * m).map(|j| input(Values::Fuzzy, j, len)).collect();
    let all: Vec<&[f32]> = contributions.iter().map(|x| &x[..]).collect();
    let mut want = vec![0.0f32; len];
    tree_sum(&all, &mut want);
    let mut mine = vec![0.0f32; len];
    tree_sum(&all[r * m..(r + 1) * m], &mut mine);
    for algorithm in Algorithm::ALL {
        c.set_options(
            Options::new()
                .with_algorithm(algorithm)
                .deterministic()
                .with_timeout(LONG),
        );
        let mut x = mine.clone();
        c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
        assert_eq!(
            bits(&x),
            bits(&want),
            "rank {r}: deterministic {algorithm:?}"
        );
        // And the executor's deterministic all-reduce of the same inputs.
        let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, len)
            .unwrap()
            .with_order(Order::Deterministic);
        let mut bufs: Vec<Vec<f32>> = (0..p)
            .map(|q| {
                let mut v = vec![0.0f32; len];
                tree_sum(&all[q * m..(q + 1) * m], &mut v);
                v
            })
            .collect();
        execute_sum(&s, &mut bufs);
        assert_eq!(bits(&x), bits(&bufs[r]), "rank {r}: executor {algorithm:?}");
    }
    // The cost model's choice in deterministic mode.
    c.set_options(Options::new().deterministic().with_timeout(LONG));
    let mut x = mine.clone();
    c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
    assert_eq!(bits(&x), bits(&want), "rank {r}: deterministic auto");
    // Out of place: the same bits, the input untouched.
    let mut out = vec![0.0f32; len];
    let before = mine.clone();
    c.all_reduce_into(&mine, &mut out, Reducer::new(ReduceOp::Sum))
        .unwrap();
    assert_eq!(bits(&out), bits(&want), "rank {r}: out of place");
    assert_eq!(bits(&mine), bits(&before));
    if r == 0 {
        println!(
            "deterministic: every algorithm, in place and out of place, equals tree_sum of {} contributions",
            p * m
        );
    }
    *passed += 1;
}

/// The executor's Sum all-reduce by `s` of `bufs`, in place.
fn execute_sum(s: &CollectiveSchedule, bufs: &mut [Vec<f32>]) {
    let mut refs: Vec<&mut [f32]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let mut scratch = vec![0.0f32; s.scratch_len::<f32>(ReduceOp::Sum)];
    let sum = Reducer::new(ReduceOp::Sum);
    collective::execute(s, &sum, &mut refs, &mut scratch, |_| {}).unwrap();
}

/// Order-free mode on contributions of every magnitude, with infinities
/// and NaN: the executor's bits for every algorithm and the cost model's
/// choice, and the same with the contributions reversed over the ranks.
fn order_free(c: &mut Collectives<MpiCommunicator>, passed: &mut usize) {
    let (p, r) = (c.size(), c.rank());
    let len = 3001;
    let hard = |q: usize| -> Vec<f32> {
        let x: Vec<f32> = input(Values::Fuzzy, q, len);
        x.iter()
            .enumerate()
            .map(|(i, &v)| match (i * 7 + q) % 29 {
                0 => v * 1e30,
                1 => v * 1e-41,
                2 if i.is_multiple_of(5) => f32::INFINITY,
                3 if i.is_multiple_of(97) => f32::NAN,
                _ => v,
            })
            .collect()
    };
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, p, len)
        .unwrap()
        .with_order(Order::Free);
    let mut want: Vec<Vec<f32>> = (0..p).map(hard).collect();
    execute_sum(&s, &mut want);
    let choices = Algorithm::ALL.map(Some).into_iter().chain([None]);
    for algorithm in choices {
        for mine in [hard(r), hard(p - 1 - r)] {
            let o = Options::new().with_order(Order::Free).with_timeout(LONG);
            c.set_options(algorithm.map_or(o, |a| o.with_algorithm(a)));
            let mut x = mine;
            c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
            assert_eq!(
                bits(&x),
                bits(&want[0]),
                "rank {r}: order-free {algorithm:?}"
            );
        }
    }
    if r == 0 {
        println!("order-free: every algorithm and both rank orders give the executor's bits");
    }
    *passed += 1;
}

fn groups(c: &mut Collectives<MpiCommunicator>, passed: &mut usize) {
    let (p, r) = (c.size(), c.rank());
    c.set_options(Options::new().with_timeout(LONG));
    for group in [
        ReplicaGroup::Consecutive(2),
        ReplicaGroup::Orthogonal(2),
        ReplicaGroup::All,
    ] {
        if group.group_size(p).is_err() {
            continue;
        }
        let mut g = c.in_group(group).unwrap();
        let mut x: Vec<f32> = input(Values::Exact, r, 100);
        g.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
        let members: Vec<usize> = group.members(r, p).unwrap().collect();
        for (i, &v) in x.iter().enumerate() {
            let want: f32 = members.iter().map(|&q| value(Values::Exact, q, i)).sum();
            assert_eq!(v, want, "rank {r} {group:?} element {i}");
        }
    }
    if p.is_multiple_of(2) {
        for (k, det) in [(2, false), (2, true), (1, false)] {
            let len = 3001;
            let mut opts = Options::new().with_timeout(LONG);
            if det {
                opts = opts.deterministic();
            }
            c.set_options(opts);
            let mut h: Vec<f32> = input(Values::Fuzzy, r, len);
            c.hierarchical_all_reduce(&mut h, Reducer::new(ReduceOp::Sum), k)
                .unwrap();
            let mut flat: Vec<f32> = input(Values::Fuzzy, r, len);
            c.all_reduce(&mut flat, Reducer::new(ReduceOp::Sum))
                .unwrap();
            if det {
                assert_eq!(
                    bits(&h),
                    bits(&flat),
                    "rank {r}: hierarchical k={k} deterministic"
                );
            }
            let mut e: Vec<bf16> = input(Values::Exact, r, len);
            c.hierarchical_all_reduce(&mut e, Reducer::new(ReduceOp::Mean), k)
                .unwrap();
            for (i, v) in e.iter().enumerate() {
                let want = exact::<bf16>(p, Collective::AllReduce, ReduceOp::Mean, len, i);
                assert_eq!(
                    v.load(),
                    want,
                    "rank {r}: hierarchical mean k={k} element {i}"
                );
            }
        }
    }
    if r == 0 {
        println!("groups and hierarchical all-reduce: exact");
    }
    *passed += 1;
}

fn point_to_point(c: &Collectives<MpiCommunicator>, passed: &mut usize) {
    let comm = c.comm();
    let (p, r) = (comm.size(), comm.rank());
    let (next, prev) = ((r + 1) % p, (r + p - 1) % p);
    // Small and large (split into frame and body) messages, two per peer
    // and tag in one exchange: they arrive in order. (A lone large `send`
    // would wait for its receiver, as MPI's standard-mode send does: every
    // rank sending first would deadlock, so rings use `exchange`.)
    for len in [0usize, 5, 40_000, 300_000] {
        let data: Vec<u32> = (0..len as u32).map(|i| i ^ r as u32).collect();
        let tail = [len as u32, r as u32];
        let mut recvs = [Incoming::new(prev, 9), Incoming::new(prev, 9)];
        comm.exchange(
            &[
                Outgoing::new(next, 9, bytemuck::cast_slice(&data)),
                Outgoing {
                    to: next,
                    tag: 9,
                    header: bytemuck::cast_slice(&tail[..1]),
                    body: bytemuck::cast_slice(&tail[1..]),
                },
            ],
            &mut recvs,
            LONG,
        )
        .unwrap();
        let got: Vec<u32> = recvs[0]
            .message
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert!(
            got.iter()
                .enumerate()
                .all(|(i, &v)| v == i as u32 ^ prev as u32)
        );
        assert_eq!(got.len(), len);
        assert_eq!(
            recvs[1].message,
            [
                bytemuck::bytes_of(&tail[0]),
                bytemuck::bytes_of(&(prev as u32))
            ]
            .concat()
        );
    }
    // Small messages sent before they are received.
    comm.send_slice(next, 10, &[r as u64; 3], LONG).unwrap();
    let mut small = [0u64; 3];
    comm.recv_slice(prev, 10, &mut small, LONG).unwrap();
    assert_eq!(small, [prev as u64; 3]);
    comm.barrier(LONG).unwrap();
    if r == 0 {
        println!("point to point: ordered, small and split messages");
    }
    *passed += 1;
}

/// Every algorithm, a random rank aborting at a random exchange; then a
/// rank that stops responding. Every rank fails naming the culprit (or
/// finished before the fault reached it, with the right answer), none
/// hangs; then all go on with a fresh communicator.
fn faults(mut comm: MpiCommunicator, passed: &mut usize) -> MpiCommunicator {
    let (p, r) = (comm.size(), comm.rank());
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    for algorithm in Algorithm::ALL {
        for order in [Order::Schedule, Order::Deterministic] {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = 5000 + (seed % 1000) as usize;
            let faulty = (seed % p as u64) as usize;
            let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, len).unwrap();
            let exchanges = (0..s.steps())
                .filter(|&k| {
                    s.ops(faulty, k)
                        .iter()
                        .any(|o| matches!(o, Op::Send { .. } | Op::Recv { .. }))
                })
                .count();
            let at = ((seed >> 16) % exchanges as u64) as usize;
            let opts = Options::new()
                .with_algorithm(algorithm)
                .with_order(order)
                .with_timeout(Duration::from_secs(20));
            let fault = (r == faulty).then_some((at, Fault::Abort));
            let mut c = Collectives::new(Faulty::new(comm, fault)).with_options(opts);
            let start = Instant::now();
            let mut x: Vec<f32> = input(Values::Exact, r, len);
            let result = c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum));
            let next = c.barrier();
            let ctx =
                format!("rank {r}: {algorithm:?} {order:?}, rank {faulty} aborts at exchange {at}");
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "{ctx}: took {:?}",
                start.elapsed()
            );
            if r == faulty {
                assert_eq!(
                    result.map(|_| ()),
                    Err(CommError::Aborted { rank: faulty }),
                    "{ctx}"
                );
            } else {
                match result {
                    Ok(_) => {
                        for (i, &v) in x.iter().enumerate() {
                            assert_eq!(
                                v,
                                exact::<f32>(p, Collective::AllReduce, ReduceOp::Sum, len, i),
                                "{ctx}"
                            );
                        }
                    }
                    Err(e) => assert_eq!(
                        e,
                        CommError::PeerFailed {
                            rank: faulty,
                            cause: Cause::Aborted
                        },
                        "{ctx}"
                    ),
                }
                assert_eq!(
                    next,
                    Err(CommError::PeerFailed {
                        rank: faulty,
                        cause: Cause::Aborted
                    }),
                    "{ctx}"
                );
            }
            comm = c.into_inner().into_inner().duplicate();
        }
    }
    if r == 0 {
        println!("faults: aborts at random steps of every algorithm fail every rank cleanly");
    }
    *passed += 1;
    comm
}

/// Whether `e` names `rank` as the one that stopped responding.
fn names_unresponsive(e: &CommError, rank: usize) -> bool {
    match *e {
        CommError::Timeout { peer, .. } => peer == Some(rank),
        CommError::PeerFailed {
            rank: failed,
            cause: Cause::Unresponsive,
        } => failed == rank,
        _ => false,
    }
}

/// A rank that stops responding: the others time out within the deadline,
/// naming it. Then rank 2 stalls while rank `first` starts the all-reduce
/// before the others, so that its deadline passes first (rank 0 waits for
/// 3, which waits for 2): every error names rank 2, whichever rank times
/// out first, and no live rank is told that it failed.
fn stalls_are_blamed_on_the_rank_that_stopped(
    comm: MpiCommunicator,
    passed: &mut usize,
) -> MpiCommunicator {
    let (p, r) = (comm.size(), comm.rank());
    // A rank that stops responding: the others time out within the
    // deadline; it finds the world aborted when it wakes.
    let timeout = Duration::from_millis(500);
    let stall = (r == p - 1).then_some((1, Fault::Stall(Duration::from_secs(2))));
    let mut c = Collectives::new(Faulty::new(comm, stall)).with_options(
        Options::new()
            .with_algorithm(Algorithm::Ring)
            .with_timeout(timeout),
    );
    let mut x: Vec<f32> = input(Values::Exact, r, 1000);
    let start = Instant::now();
    let result = c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum));
    match result {
        Err(CommError::Timeout { rank, peer, waited }) => {
            assert_eq!((rank, peer), (r, Some(p - 1)));
            assert!(
                waited < timeout + Duration::from_secs(2),
                "rank {r}: waited {waited:?}"
            );
        }
        Err(CommError::PeerFailed {
            rank,
            cause: Cause::Unresponsive,
        }) => assert_eq!(rank, p - 1, "rank {r}"),
        other => panic!("rank {r}: a stalled peer gave {other:?}"),
    }
    assert!(
        start.elapsed() < Duration::from_secs(15),
        "rank {r}: {:?}",
        start.elapsed()
    );
    let mut comm = c.into_inner().into_inner().duplicate();
    let stalled = 2 % p;
    for first in (0..p).filter(|&q| q != stalled) {
        comm.barrier(LONG).unwrap();
        if r != first {
            std::thread::sleep(Duration::from_millis(300));
        }
        let fault = (r == stalled).then_some((1, Fault::Stall(Duration::from_secs(3))));
        let opts = Options::new()
            .with_algorithm(Algorithm::Ring)
            .with_timeout(Duration::from_secs(1));
        let mut c = Collectives::new(Faulty::new(comm, fault)).with_options(opts);
        let mut x: Vec<f32> = input(Values::Exact, r, 1000);
        let e = c
            .all_reduce(&mut x, Reducer::new(ReduceOp::Sum))
            .expect_err("a stalled ring cannot finish");
        let ctx = format!("rank {r}, rank {first} first, rank {stalled} stalled");
        assert!(names_unresponsive(&e, stalled), "{ctx}: {e:?}");
        let next = c.barrier().expect_err("aborted");
        assert!(names_unresponsive(&next, stalled), "{ctx}: then {next:?}");
        comm = c.into_inner().into_inner().duplicate();
    }
    if r == 0 {
        println!("stalls: every error names the stalled rank, whichever rank times out first");
    }
    *passed += 1;
    comm
}

/// Every rank waits for the next and none sends: no rank stopped, so
/// every error names nobody.
fn waits_in_a_cycle_name_nobody(comm: MpiCommunicator, passed: &mut usize) -> MpiCommunicator {
    let (p, r) = (comm.size(), comm.rank());
    let e = comm
        .recv_vec((r + 1) % p, 5, Duration::from_millis(500))
        .expect_err("nothing was sent");
    match e {
        CommError::Timeout { rank, peer, .. } => assert_eq!((rank, peer), (r, None), "{e}"),
        CommError::Stalled { rank } => assert_eq!(rank, r),
        other => panic!("rank {r}: {other:?}"),
    }
    assert_eq!(comm.check(), Err(CommError::Stalled { rank: r }));
    if r == 0 {
        println!("waits in a cycle: no rank is named");
    }
    *passed += 1;
    comm.duplicate()
}

/// Runs an inner job of 4 ranks (`mpirun` from rank 0, with this job's
/// MPI environment removed) in which rank 2 panics inside an all-reduce
/// whose timeout is a minute ([`panicking_job`]): the job must end, with
/// an error, within seconds (it took 70 s when the panicking rank waited
/// in `MPI_Finalize` for peers that waited for it).
fn panic_ends_the_job(comm: &MpiCommunicator, passed: &mut usize) {
    if comm.rank() == 0 {
        // `timeout` ends a job that hangs, so that the check fails rather
        // than blocks.
        let inner = mpirun("4");
        let mut cmd = Command::new("timeout");
        cmd.arg("40")
            .arg(inner.get_program())
            .args(inner.get_args());
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy().into_owned();
            if ["OMPI_", "PMIX_", "PMI_", "OPAL_"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                cmd.env_remove(name);
            }
        }
        cmd.env(INNER_JOB, "panic");
        let start = Instant::now();
        let out = cmd.output().expect("runs mpirun for the inner job");
        let took = start.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "the inner job succeeded: {stderr}");
        assert!(
            stderr.contains("injected fault: rank 2 panics"),
            "the inner job did not panic: {stderr}"
        );
        assert!(
            took < Duration::from_secs(20),
            "the inner job took {took:?} to end after rank 2 panicked: {stderr}"
        );
        println!(
            "panic: a rank that panics in an all-reduce ends a job of 4 in {:.1} s",
            took.as_secs_f64()
        );
    }
    comm.barrier(LONG)
        .expect("every rank waits for the inner job");
    *passed += 1;
}

/// The inner job of [`panic_ends_the_job`]: rank 2 panics at its second
/// exchange of a ring all-reduce; the others wait for it (a minute's
/// timeout). Only the job's end ends them.
fn panicking_job(comm: MpiCommunicator) -> ExitCode {
    let r = comm.rank();
    let fault = (r == 2).then_some((1, Fault::Panic));
    let opts = Options::new()
        .with_algorithm(Algorithm::Ring)
        .with_timeout(LONG);
    let mut c = Collectives::new(Faulty::new(comm, fault)).with_options(opts);
    let mut x: Vec<f32> = input(Values::Exact, r, 1000);
    let result = c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum));
    eprintln!("inner job: rank {r}: {result:?}");
    ExitCode::FAILURE
}

/// Ranks called with different lengths (one of them zero) or element
/// types: an error on every rank.
fn mismatches(mut comm: MpiCommunicator, passed: &mut usize) -> MpiCommunicator {
    let r = comm.rank();
    for what in 0..3 {
        let mut c = Collectives::new(comm).with_options(
            Options::new()
                .with_algorithm(Algorithm::Ring)
                .with_timeout(Duration::from_secs(20)),
        );
        let odd = r == 1;
        let start = Instant::now();
        let result = match what {
            0 | 2 => {
                let odd_len = if what == 0 { 11 } else { 0 };
                c.all_reduce(
                    &mut vec![1.0f32; if odd { odd_len } else { 10 }],
                    Reducer::new(ReduceOp::Sum),
                )
                .map(|_| ())
            }
            _ if odd => c
                .all_reduce(&mut [f16::ONE; 10], Reducer::new(ReduceOp::Sum))
                .map(|_| ()),
            _ => c
                .all_reduce(&mut [1.0f32; 10], Reducer::new(ReduceOp::Sum))
                .map(|_| ()),
        };
        let e = result.expect_err("a mismatched call succeeded");
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "rank {r}, case {what}: {e:?} after {:?}",
            start.elapsed()
        );
        assert!(
            matches!(
                e,
                CommError::CallMismatch { .. }
                    | CommError::PeerFailed {
                        cause: Cause::Mismatch,
                        ..
                    }
            ),
            "rank {r}: {e:?}"
        );
        comm = c.into_inner().duplicate();
    }
    if r == 0 {
        println!("mismatched calls: every rank fails");
    }
    *passed += 1;
    comm
}

/// Alpha and beta of this transport, fitted to ring all-reduce timings.
fn fit_model(comm: &MpiCommunicator, passed: &mut usize) {
    let quick = std::env::var_os("TESSERA_MPI_FIT").is_none();
    let sizes: Vec<usize> = if quick {
        vec![1 << 4, 1 << 8, 1 << 12, 1 << 16, 1 << 18]
    } else {
        (2..=24).step_by(2).map(|k| 1usize << k).collect()
    };
    for algorithm in [Algorithm::Ring, Algorithm::HalvingDoubling] {
        let mut plan = Plan::new(algorithm, sizes.clone());
        plan.reps = if quick { 3 } else { 10 };
        let samples = fit::measure(comm, &plan).expect("measuring");
        let f = fit::fit(&samples, false).expect("fitting");
        if comm.rank() == 0 {
            println!(
                "fit, MPI {algorithm:?} all-reduce, {} ranks: alpha {:.2} us, beta {:.4} ns/B ({:.2} GB/s), rms error {:.1}%, max {:.1}%",
                comm.size(),
                f.alpha * 1e6,
                f.beta * 1e9,
                1.0 / f.beta / 1e9,
                f.rms_error * 100.0,
                f.max_error * 100.0
            );
            for s in &samples {
                println!(
                    "  {:>10} B  measured {:>10.1} us  fitted {:>10.1} us",
                    s.len * 4,
                    s.seconds * 1e6,
                    f.seconds(&s.terms) * 1e6
                );
            }
        }
    }
    *passed += 1;
}
