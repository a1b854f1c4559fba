//! The thread transport against the core's in-memory executor, Gloo and
//! nccl-tests style: ranks 1..=16, counts 0, 1, p - 1, p, large and odd,
//! every algorithm, collective, operation, element type and order, bit for
//! bit; groups and the hierarchical all-reduce; deadlines, aborts, panics
//! and mismatched calls.

use std::time::{Duration, Instant};

use tessera_collectives::fault::{Fault, Faulty};
use tessera_collectives::{
    Cause, Collectives, CommError, Communicator, Mismatch, Options, ReplicaGroup, ThreadWorld,
    fragment,
};
use tessera_core::collective::{
    self, Algorithm, Collective, CollectiveSchedule, Op, Order, ReduceOp, Reducer, tree_sum,
};
use tessera_core::fp::{Element, Rounding, bf16, f16};

/// Generous: these never expire unless something hangs.
const LONG: Duration = Duration::from_secs(60);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Values {
    /// Small integers: every sum, mean of powers of two, max and min is
    /// exact in every format, so there is an independent expected value.
    Exact,
    /// Fractions of mixed magnitudes: f32 sums depend on the order, which
    /// the comparison with the executor then checks.
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

#[derive(Clone, Copy, Debug)]
struct Case {
    algorithm: Algorithm,
    collective: Collective,
    op: ReduceOp,
    order: Order,
    len: usize,
    values: Values,
}

impl Case {
    fn schedule(&self, p: usize) -> CollectiveSchedule {
        CollectiveSchedule::new(self.algorithm, self.collective, p, self.len)
            .unwrap()
            .with_order(self.order)
    }

    fn options(&self) -> Options {
        Options::new()
            .with_algorithm(self.algorithm)
            .with_order(self.order)
            .with_timeout(LONG)
    }
}

fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.load().to_bits()).collect()
}

/// The core executor's buffers for the same case.
fn reference<T: Element>(p: usize, case: &Case) -> Vec<Vec<T>> {
    let mut bufs: Vec<Vec<T>> = (0..p).map(|r| input(case.values, r, case.len)).collect();
    execute(&case.schedule(p), case.op, &mut bufs);
    bufs
}

/// Runs `s` with `op` on `bufs` in the core executor.
fn execute<T: Element>(s: &CollectiveSchedule, op: ReduceOp, bufs: &mut [Vec<T>]) {
    let mut refs: Vec<&mut [T]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let mut scratch = vec![0.0f32; s.scratch_len::<T>(op)];
    collective::execute(s, &Reducer::new(op), &mut refs, &mut scratch, |_| {}).unwrap();
}

/// The positions of rank `r`'s buffer that the collective specifies.
fn specified(p: usize, c: Collective, len: usize, r: usize) -> std::ops::Range<usize> {
    match c {
        Collective::ReduceScatter => fragment(len, p, r),
        Collective::Reduce { root } if root != r => 0..0,
        _ => 0..len,
    }
}

/// Runs every case on a world of `p` threads (one world for all of them)
/// and compares each rank's result with the executor's, bit for bit, and
/// for exact inputs with the exact answer.
fn check<T: Element + Send + Sync>(p: usize, cases: &[Case]) {
    let results = ThreadWorld::run(p, |comm| {
        let mut c = Collectives::new(comm);
        cases
            .iter()
            .map(|case| {
                c.set_options(case.options());
                let mut x: Vec<T> = input(case.values, c.rank(), case.len);
                let report = c
                    .run(case.collective, &mut x, Reducer::new(case.op))
                    .unwrap_or_else(|e| panic!("rank {} {case:?}: {e}", c.rank()));
                assert_eq!(report.algorithm, case.algorithm);
                x
            })
            .collect::<Vec<_>>()
    })
    .unwrap();
    let results: Vec<Vec<Vec<T>>> = results.into_iter().map(Result::unwrap).collect();
    for (k, case) in cases.iter().enumerate() {
        let want = reference::<T>(p, case);
        for r in 0..p {
            let at = specified(p, case.collective, case.len, r);
            assert_eq!(
                bits(&results[r][k][at.clone()]),
                bits(&want[r][at.clone()]),
                "{} p={p} rank {r} {case:?}",
                T::NAME
            );
            if case.values == Values::Exact {
                for i in at {
                    let exact = exact_value(p, case, r, i);
                    assert_eq!(
                        results[r][k][i].load(),
                        T::store(exact, Rounding::Nearest, 0).load(),
                        "{} p={p} rank {r} element {i} {case:?}",
                        T::NAME
                    );
                }
            }
        }
    }
}

/// The exact answer for integer inputs (Mean: the f32 quotient, rounded
/// to the format like the executor; exact whenever representable).
fn exact_value(p: usize, case: &Case, r: usize, i: usize) -> f32 {
    let v = |q| value(Values::Exact, q, i);
    match case.collective {
        Collective::AllGather => v(fragment_owner(case.len, p, i)),
        Collective::Broadcast { root } => v(root),
        _ => {
            let _ = r;
            match case.op {
                ReduceOp::Sum => (0..p).map(v).sum(),
                ReduceOp::Mean => (0..p).map(v).sum::<f32>() / p as f32,
                ReduceOp::Max => (0..p).map(v).fold(f32::MIN, f32::max),
                ReduceOp::Min => (0..p).map(v).fold(f32::MAX, f32::min),
            }
        }
    }
}

fn fragment_owner(len: usize, p: usize, i: usize) -> usize {
    i / len.div_ceil(p)
}

fn collectives(p: usize) -> Vec<Collective> {
    vec![
        Collective::AllReduce,
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::Reduce { root: p - 1 },
        Collective::Broadcast { root: p / 2 },
        Collective::Reduce { root: 0 },
    ]
}

/// Every algorithm x collective x operation x order on the small counts.
fn small_cases(p: usize, values: Values) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut lens = vec![0, 1, p.saturating_sub(1), p, 2 * p + 3];
    lens.dedup();
    for &len in &lens {
        for algorithm in Algorithm::ALL {
            for collective in collectives(p) {
                // Fractional inputs test the summation order: Sum and Mean.
                // Max and Min are exact in either order (one code path).
                let ops: &[ReduceOp] = match (collective.reduces(), values) {
                    (false, _) => &[ReduceOp::Sum],
                    (true, Values::Exact) => &ReduceOp::ALL,
                    (true, Values::Fuzzy) => &[ReduceOp::Sum, ReduceOp::Mean],
                };
                for &op in ops {
                    let orders: &[Order] = if op.depends_on_order() && collective.reduces() {
                        &[Order::Schedule, Order::Deterministic, Order::Free]
                    } else {
                        &[Order::Schedule]
                    };
                    for &order in orders {
                        cases.push(Case {
                            algorithm,
                            collective,
                            op,
                            order,
                            len,
                            values,
                        });
                    }
                }
            }
        }
    }
    cases
}

/// Large and odd counts: fewer operations, every algorithm.
fn large_cases(p: usize, values: Values) -> Vec<Case> {
    let mut cases = Vec::new();
    for len in [1000, 10007] {
        for algorithm in Algorithm::ALL {
            for collective in [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
                Collective::Broadcast { root: p - 1 },
                Collective::Reduce { root: p / 2 },
            ] {
                for (op, order) in [
                    (ReduceOp::Sum, Order::Schedule),
                    (ReduceOp::Sum, Order::Deterministic),
                    (ReduceOp::Sum, Order::Free),
                    (ReduceOp::Mean, Order::Schedule),
                    (ReduceOp::Mean, Order::Free),
                    (ReduceOp::Max, Order::Schedule),
                ] {
                    if !collective.reduces() && op != ReduceOp::Sum
                        || !collective.reduces() && order != Order::Schedule
                    {
                        continue;
                    }
                    cases.push(Case {
                        algorithm,
                        collective,
                        op,
                        order,
                        len,
                        values,
                    });
                }
            }
        }
    }
    cases
}

#[test]
fn every_algorithm_collective_op_and_type_matches_the_executor_for_1_to_16_ranks() {
    for p in 1..=16 {
        for values in [Values::Exact, Values::Fuzzy] {
            let cases = small_cases(p, values);
            check::<f32>(p, &cases);
            check::<f16>(p, &cases);
            check::<bf16>(p, &cases);
        }
    }
}

#[test]
fn large_and_odd_counts_match_the_executor() {
    for p in [2, 3, 5, 8, 13, 16] {
        check::<f32>(p, &large_cases(p, Values::Fuzzy));
        check::<f32>(p, &large_cases(p, Values::Exact));
        check::<f16>(p, &large_cases(p, Values::Exact));
        check::<bf16>(p, &large_cases(p, Values::Fuzzy));
    }
}

/// All-reduce results of every rank for each `(algorithm, order)`.
fn all_reduce_everywhere<T: Element + Send + Sync>(
    p: usize,
    inputs: &[Vec<T>],
    options: &[Options],
    op: ReduceOp,
) -> Vec<Vec<Vec<T>>> {
    let results = ThreadWorld::run(p, |comm| {
        let mut c = Collectives::new(comm);
        options
            .iter()
            .map(|&o| {
                c.set_options(o);
                let mut x = inputs[c.rank()].clone();
                c.all_reduce(&mut x, Reducer::new(op)).unwrap();
                x
            })
            .collect::<Vec<_>>()
    })
    .unwrap();
    results.into_iter().map(Result::unwrap).collect()
}

#[test]
fn deterministic_order_is_the_same_for_every_algorithm_and_rank_count() {
    // C contributions; rank r of p holds contributions r m .. (r + 1) m
    // (m = C / p a power of two) and passes their tree_sum: the all-reduce
    // is bitwise tree_sum of all C, for every p and algorithm.
    for (c, ps) in [(16usize, &[1usize, 2, 4, 8, 16][..]), (24, &[3, 6, 12][..])] {
        let len = 333;
        let contributions: Vec<Vec<f32>> = (0..c).map(|j| input(Values::Fuzzy, j, len)).collect();
        let all: Vec<&[f32]> = contributions.iter().map(|x| &x[..]).collect();
        let mut want = vec![0.0f32; len];
        tree_sum(&all, &mut want);
        for &p in ps {
            let m = c / p;
            let inputs: Vec<Vec<f32>> = (0..p)
                .map(|r| {
                    let mut s = vec![0.0f32; len];
                    tree_sum(&all[r * m..(r + 1) * m], &mut s);
                    s
                })
                .collect();
            let mut opts: Vec<Options> = Algorithm::ALL
                .iter()
                .map(|&a| Options::new().with_algorithm(a).deterministic())
                .collect();
            // The cost model's choice in deterministic mode, too.
            opts.push(Options::new().deterministic());
            let got = all_reduce_everywhere(p, &inputs, &opts, ReduceOp::Sum);
            for (r, per_rank) in got.iter().enumerate() {
                for (k, x) in per_rank.iter().enumerate() {
                    assert_eq!(bits(x), bits(&want), "C={c} p={p} rank {r} {:?}", opts[k]);
                }
            }
        }
    }
}

/// Contributions of mixed magnitudes, with cancellations, subnormals and
/// the odd infinity and NaN.
fn hard_value(r: usize, i: usize) -> f32 {
    let x = value(Values::Fuzzy, r, i);
    match (i * 7 + r) % 29 {
        0 => x * 1e30,
        1 => x * 1e-41,
        2 if i.is_multiple_of(5) => f32::INFINITY,
        3 if i.is_multiple_of(97) => f32::NAN,
        _ => x,
    }
}

#[test]
fn order_free_all_reduce_is_the_same_for_every_algorithm_rank_order_and_arrival() {
    for p in 1..=8 {
        let len = 1000;
        let inputs: Vec<Vec<f32>> = (0..p)
            .map(|r| (0..len).map(|i| hard_value(r, i)).collect())
            .collect();
        // The executor's answer (the oracle of core's tests).
        let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, p, len)
            .unwrap()
            .with_order(Order::Free);
        let mut want = inputs.clone();
        execute(&s, ReduceOp::Sum, &mut want);
        let mut opts: Vec<Options> = Algorithm::ALL
            .iter()
            .map(|&a| Options::new().with_algorithm(a).with_order(Order::Free))
            .collect();
        opts.push(Options::new().with_order(Order::Free));
        // Both rank orders: the contributions reversed over the ranks.
        let reversed: Vec<Vec<f32>> = inputs.iter().rev().cloned().collect();
        for ins in [&inputs, &reversed] {
            let got = all_reduce_everywhere(p, ins, &opts, ReduceOp::Sum);
            for (r, per_rank) in got.iter().enumerate() {
                for (k, x) in per_rank.iter().enumerate() {
                    assert_eq!(bits(x), bits(&want[0]), "p={p} rank {r} {:?}", opts[k]);
                }
            }
        }
        // Arrival order: one rank at a time stalls before an exchange, so
        // its messages arrive last.
        for algorithm in Algorithm::ALL {
            for late in 0..p.min(3) {
                let got = ThreadWorld::run(p, |comm| {
                    let fault = (comm.rank() == late)
                        .then_some((1, Fault::Stall(Duration::from_millis(5))));
                    let opts = Options::new()
                        .with_algorithm(algorithm)
                        .with_order(Order::Free);
                    let mut c = Collectives::new(Faulty::new(comm, fault)).with_options(opts);
                    let mut x = inputs[c.rank()].clone();
                    c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
                    x
                })
                .unwrap();
                for x in got {
                    assert_eq!(
                        bits(&x.unwrap()),
                        bits(&want[0]),
                        "p={p} {algorithm:?} late {late}"
                    );
                }
            }
        }
    }
}

#[test]
fn order_free_f16_and_bf16_round_once_from_the_grid() {
    for p in [1, 3, 4, 7] {
        let len = 700;
        for algorithm in Algorithm::ALL {
            let opts = [Options::new()
                .with_algorithm(algorithm)
                .with_order(Order::Free)];
            let h: Vec<Vec<f16>> = (0..p).map(|r| input(Values::Fuzzy, r, len)).collect();
            let b: Vec<Vec<bf16>> = (0..p).map(|r| input(Values::Fuzzy, r, len)).collect();
            let f: Vec<Vec<f32>> = h
                .iter()
                .map(|x| x.iter().map(|v| v.load()).collect())
                .collect();
            let g: Vec<Vec<f32>> = b
                .iter()
                .map(|x| x.iter().map(|v| v.load()).collect())
                .collect();
            let want_h = &all_reduce_everywhere(p, &f, &opts, ReduceOp::Mean)[0][0];
            let want_b = &all_reduce_everywhere(p, &g, &opts, ReduceOp::Mean)[0][0];
            for x in &all_reduce_everywhere(p, &h, &opts, ReduceOp::Mean) {
                let want: Vec<f16> = want_h.iter().map(|&v| f16::from_f32(v)).collect();
                assert_eq!(bits(&x[0]), bits(&want), "f16 p={p} {algorithm:?}");
            }
            for x in &all_reduce_everywhere(p, &b, &opts, ReduceOp::Mean) {
                let want: Vec<bf16> = want_b.iter().map(|&v| bf16::from_f32(v)).collect();
                assert_eq!(bits(&x[0]), bits(&want), "bf16 p={p} {algorithm:?}");
            }
        }
    }
}

#[test]
fn schedule_order_differs_between_algorithms_but_not_between_ranks() {
    // The point of the deterministic order: without it the bits depend on
    // the algorithm (this input shows it), though never on the rank.
    let p = 7;
    let len = 2000;
    let inputs: Vec<Vec<f32>> = (0..p).map(|r| input(Values::Fuzzy, r, len)).collect();
    let opts: Vec<Options> = Algorithm::ALL
        .iter()
        .map(|&a| Options::new().with_algorithm(a).with_order(Order::Schedule))
        .collect();
    let got = all_reduce_everywhere(p, &inputs, &opts, ReduceOp::Sum);
    for per_rank in &got {
        for (k, x) in per_rank.iter().enumerate() {
            assert_eq!(bits(x), bits(&got[0][k]));
        }
    }
    let distinct: std::collections::HashSet<Vec<u32>> = got[0].iter().map(|x| bits(x)).collect();
    assert!(
        distinct.len() > 1,
        "every algorithm summed in the same order"
    );
}

#[test]
fn out_of_place_equals_in_place_and_leaves_the_input() {
    let p = 5;
    let results = ThreadWorld::run(p, |comm| {
        let mut c = Collectives::new(comm);
        let input: Vec<f16> = self::input(Values::Fuzzy, c.rank(), 777);
        let mut out = vec![f16::ZERO; 777];
        c.all_reduce_into(&input, &mut out, Reducer::new(ReduceOp::Mean))
            .unwrap();
        let mut inplace = input.clone();
        c.all_reduce(&mut inplace, Reducer::new(ReduceOp::Mean))
            .unwrap();
        assert_eq!(input, self::input::<f16>(Values::Fuzzy, c.rank(), 777));
        assert_eq!(bits(&out), bits(&inplace));
        out
    })
    .unwrap();
    let first = bits(results[0].as_ref().unwrap());
    for r in results {
        assert_eq!(bits(&r.unwrap()), first);
    }
}

#[test]
fn stochastic_rounding_gives_the_same_bits_on_every_rank() {
    use tessera_core::fp::{Overflow, Stochastic};
    use tessera_core::rng::RandomStream;
    let rounding = Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(42, 7), Overflow::Infinity),
        first_index: 1000,
    };
    let p = 6;
    let len = 501;
    let results = ThreadWorld::run(p, |comm| {
        let mut c = Collectives::new(comm).with_options(Options::new().deterministic());
        let mut x: Vec<bf16> = input(Values::Fuzzy, c.rank(), len);
        c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum).with_rounding(rounding))
            .unwrap();
        x
    })
    .unwrap();
    let s =
        CollectiveSchedule::new(Algorithm::HalvingDoubling, Collective::AllReduce, p, len).unwrap();
    let red = Reducer::new(ReduceOp::Sum).with_rounding(rounding);
    let mut bufs: Vec<Vec<bf16>> = (0..p).map(|r| input(Values::Fuzzy, r, len)).collect();
    let mut refs: Vec<&mut [bf16]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let mut scratch = vec![0.0f32; s.scratch_len::<bf16>(ReduceOp::Sum)];
    collective::execute(&s, &red, &mut refs, &mut scratch, |_| {}).unwrap();
    for r in results {
        assert_eq!(bits(&r.unwrap()), bits(&bufs[0]));
    }
}

#[test]
fn replica_groups_reduce_within_their_members() {
    for (p, group) in [
        (8, ReplicaGroup::Consecutive(2)),
        (8, ReplicaGroup::Consecutive(4)),
        (8, ReplicaGroup::Orthogonal(2)),
        (12, ReplicaGroup::Orthogonal(3)),
        (6, ReplicaGroup::Consecutive(3)),
        (5, ReplicaGroup::All),
    ] {
        let results = ThreadWorld::run(p, |comm| {
            let c = Collectives::new(comm);
            let mut g = c.in_group(group).unwrap();
            let mut x: Vec<f32> = input(Values::Exact, c.rank(), 50);
            g.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
            // A second collective on the same view, then the whole world.
            let mut y = vec![g.rank() as f32; 3];
            g.broadcast(&mut y, g.size() - 1).unwrap();
            assert_eq!(y, vec![(g.size() - 1) as f32; 3]);
            drop(g);
            c.barrier().unwrap();
            x
        })
        .unwrap();
        for (r, x) in results.into_iter().enumerate() {
            let members: Vec<usize> = group.members(r, p).unwrap().collect();
            let want: Vec<f32> = (0..50)
                .map(|i| members.iter().map(|&q| value(Values::Exact, q, i)).sum())
                .collect();
            assert_eq!(x.unwrap(), want, "p={p} {group:?} rank {r}");
        }
    }
}

fn hierarchical<T: Element + Send + Sync>(
    p: usize,
    k: usize,
    len: usize,
    values: Values,
    opts: Options,
    op: ReduceOp,
) -> Vec<Vec<T>> {
    let results = ThreadWorld::run(p, |comm| {
        let mut c = Collectives::new(comm).with_options(opts);
        let mut x: Vec<T> = input(values, c.rank(), len);
        let report = c
            .hierarchical_all_reduce(&mut x, Reducer::new(op), k)
            .unwrap();
        assert!(report.all_gather.steps > 0 || k == 1);
        x
    })
    .unwrap();
    results.into_iter().map(Result::unwrap).collect()
}

#[test]
fn hierarchical_all_reduce_is_exact_and_deterministic() {
    for (p, k) in [(8, 4), (8, 2), (12, 4), (6, 3), (4, 1), (4, 4), (9, 3)] {
        for op in ReduceOp::ALL {
            let len = 2 * p + 5;
            let want: Vec<f32> = (0..len)
                .map(|i| {
                    exact_value(
                        p,
                        &Case {
                            algorithm: Algorithm::Ring,
                            collective: Collective::AllReduce,
                            op,
                            order: Order::Schedule,
                            len,
                            values: Values::Exact,
                        },
                        0,
                        i,
                    )
                })
                .collect();
            let check_all = |got: Vec<Vec<f32>>| {
                for (r, x) in got.into_iter().enumerate() {
                    assert_eq!(x, want, "p={p} k={k} {op:?} rank {r}");
                }
            };
            check_all(hierarchical::<f32>(
                p,
                k,
                len,
                Values::Exact,
                Options::new(),
                op,
            ));
            let h16: Vec<Vec<f32>> =
                hierarchical::<f16>(p, k, len, Values::Exact, Options::new(), op)
                    .into_iter()
                    .map(|x| x.iter().map(|v| v.load()).collect())
                    .collect();
            // f16 holds these sums and (rounded) means exactly as f32 rounds
            // them to f16.
            for x in h16 {
                let w: Vec<f32> = want.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
                assert_eq!(x, w, "f16 p={p} k={k} {op:?}");
            }
        }
        // Deterministic, k a power of two: bitwise the flat all-reduce.
        if k.is_power_of_two() {
            let len = 1001;
            let det = Options::new().deterministic();
            let h = hierarchical::<f32>(p, k, len, Values::Fuzzy, det, ReduceOp::Sum);
            let inputs: Vec<Vec<f32>> = (0..p).map(|r| input(Values::Fuzzy, r, len)).collect();
            let flat = all_reduce_everywhere(p, &inputs, &[det], ReduceOp::Sum);
            for r in 0..p {
                assert_eq!(bits(&h[r]), bits(&flat[r][0]), "p={p} k={k} rank {r}");
            }
            let h16 = hierarchical::<bf16>(p, k, len, Values::Fuzzy, det, ReduceOp::Mean);
            let in16: Vec<Vec<bf16>> = (0..p).map(|r| input(Values::Fuzzy, r, len)).collect();
            let flat16 = all_reduce_everywhere(p, &in16, &[det], ReduceOp::Mean);
            for r in 0..p {
                assert_eq!(
                    bits(&h16[r]),
                    bits(&flat16[r][0]),
                    "bf16 p={p} k={k} rank {r}"
                );
            }
        }
    }
}

#[test]
fn a_group_size_that_does_not_divide_is_an_error_on_every_rank() {
    let results = ThreadWorld::run(6, |comm| {
        let mut c = Collectives::new(comm);
        let mut x = vec![1.0f32; 10];
        c.hierarchical_all_reduce(&mut x, Reducer::new(ReduceOp::Sum), 4)
    })
    .unwrap();
    for r in results {
        assert!(matches!(r.unwrap(), Err(CommError::Group(_))));
    }
}

/// A rank's all-reduce result and the error of its next operation.
type Outcome = (Result<Vec<f32>, CommError>, Option<CommError>);

/// Runs an all-reduce on `p` threads with `fault` injected at rank
/// `faulty`'s exchange `at`; returns each rank's outcome (`None`: the
/// thread panicked) and its next operation's error.
#[allow(clippy::too_many_arguments)]
fn faulted(
    p: usize,
    algorithm: Algorithm,
    order: Order,
    faulty: usize,
    at: usize,
    fault: Fault,
    timeout: Duration,
    len: usize,
) -> Vec<Option<Outcome>> {
    let results = ThreadWorld::run(p, |comm| {
        let f = (comm.rank() == faulty).then_some((at, fault));
        let mut c = Collectives::new(Faulty::new(comm, f)).with_options(
            Options::new()
                .with_algorithm(algorithm)
                .with_order(order)
                .with_timeout(timeout),
        );
        let mut x: Vec<f32> = input(Values::Exact, c.rank(), len);
        let r = c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum));
        let next = c.barrier().err();
        (r.map(|_| x), next)
    })
    .unwrap();
    results.into_iter().map(Result::ok).collect()
}

fn exact_sum(p: usize, len: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (0..p).map(|q| value(Values::Exact, q, i)).sum())
        .collect()
}

#[test]
fn a_rank_that_aborts_or_panics_mid_all_reduce_fails_every_rank_cleanly() {
    // Every algorithm, fault steps spread over the run; a short timeout
    // that must not be what ends it: failures propagate at once (a
    // timeout would show as `Timeout` or `Unresponsive`, not as the
    // faulty rank's failure).
    let timeout = Duration::from_secs(5);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    for p in [2usize, 3, 5, 8] {
        for algorithm in Algorithm::ALL {
            let s =
                CollectiveSchedule::new(algorithm, Collective::AllReduce, p, 3 * p + 1).unwrap();
            for fault in [Fault::Abort, Fault::Panic] {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                let faulty = (seed % p as u64) as usize;
                // A step at which the faulty rank communicates.
                let exchanges = (0..s.steps())
                    .filter(|&k| {
                        s.ops(faulty, k)
                            .iter()
                            .any(|o| matches!(o, Op::Send { .. } | Op::Recv { .. }))
                    })
                    .count();
                let at = ((seed >> 8) % exchanges as u64) as usize;
                let start = Instant::now();
                let out = faulted(
                    p,
                    algorithm,
                    Order::Schedule,
                    faulty,
                    at,
                    fault,
                    timeout,
                    3 * p + 1,
                );
                assert!(
                    start.elapsed() < timeout,
                    "{p} {algorithm:?} {fault:?}: failure took {:?}",
                    start.elapsed()
                );
                let cause = match fault {
                    Fault::Abort => Cause::Aborted,
                    _ => Cause::Panicked,
                };
                let want = exact_sum(p, 3 * p + 1);
                for (r, o) in out.into_iter().enumerate() {
                    let ctx =
                        format!("p={p} {algorithm:?} {fault:?} rank {faulty} at {at}: rank {r}");
                    if r == faulty {
                        match (fault, o) {
                            (Fault::Panic, None) => {}
                            (Fault::Abort, Some((Err(CommError::Aborted { rank }), _))) => {
                                assert_eq!(rank, faulty, "{ctx}");
                            }
                            (_, o) => panic!("{ctx}: {o:?}"),
                        }
                        continue;
                    }
                    let (result, next) = o.unwrap_or_else(|| panic!("{ctx}: panicked"));
                    match result {
                        // Finished before the fault reached it: then right.
                        Ok(x) => assert_eq!(x, want, "{ctx}"),
                        Err(e) => assert_eq!(
                            e,
                            CommError::PeerFailed {
                                rank: faulty,
                                cause
                            },
                            "{ctx}"
                        ),
                    }
                    // Aborted, and it says so.
                    assert_eq!(
                        next,
                        Some(CommError::PeerFailed {
                            rank: faulty,
                            cause
                        }),
                        "{ctx}"
                    );
                }
            }
        }
    }
}

/// Elements enough for messages lent in place (the thread transport lends
/// bodies of 64 KiB and more).
const LENT: usize = 300_007;

/// Elements enough for 2 ranks' ring messages to travel as pieces (of
/// 512Ki elements), lent in place.
const PIECES: usize = 1_100_003;

#[test]
fn large_messages_lent_in_place_match_the_executor() {
    for p in [2, 3, 4] {
        let mut cases = Vec::new();
        for algorithm in Algorithm::ALL {
            for (collective, order) in [
                (Collective::AllReduce, Order::Schedule),
                (Collective::AllReduce, Order::Deterministic),
                (Collective::AllReduce, Order::Free),
                (Collective::ReduceScatter, Order::Schedule),
                (Collective::AllGather, Order::Schedule),
                (Collective::Broadcast { root: p - 1 }, Order::Schedule),
            ] {
                cases.push(Case {
                    algorithm,
                    collective,
                    op: ReduceOp::Sum,
                    order,
                    len: LENT,
                    values: Values::Fuzzy,
                });
            }
        }
        if p == 2 {
            for algorithm in [Algorithm::Ring, Algorithm::BidirectionalRing] {
                for (collective, order) in [
                    (Collective::AllReduce, Order::Schedule),
                    (Collective::AllReduce, Order::Free),
                    (Collective::AllGather, Order::Schedule),
                ] {
                    cases.push(Case {
                        algorithm,
                        collective,
                        op: ReduceOp::Sum,
                        order,
                        len: PIECES,
                        values: Values::Fuzzy,
                    });
                }
            }
        }
        check::<f32>(p, &cases);
        check::<f16>(p, &cases[..2]);
    }
}

#[test]
fn faults_while_bodies_are_lent_fail_every_rank_cleanly() {
    let timeout = Duration::from_secs(10);
    for p in [2usize, 3] {
        let want = exact_sum(p, PIECES);
        for algorithm in [Algorithm::Ring, Algorithm::HalvingDoubling] {
            for (fault, at) in [(Fault::Abort, 1), (Fault::Panic, 2), (Fault::Abort, 3)] {
                let faulty = at % p;
                let out = faulted(
                    p,
                    algorithm,
                    Order::Schedule,
                    faulty,
                    at,
                    fault,
                    timeout,
                    PIECES,
                );
                let cause = match fault {
                    Fault::Abort => Cause::Aborted,
                    _ => Cause::Panicked,
                };
                let failed = CommError::PeerFailed {
                    rank: faulty,
                    cause,
                };
                for (r, o) in out.into_iter().enumerate() {
                    let ctx = format!("p={p} {algorithm:?} {fault:?} at {at}: rank {r}");
                    if r == faulty {
                        assert!(fault == Fault::Panic || o.is_some(), "{ctx}");
                        continue;
                    }
                    let (result, next) = o.unwrap_or_else(|| panic!("{ctx}: panicked"));
                    match result {
                        Ok(x) => assert!(x == want, "{ctx}: wrong sum reported"),
                        Err(e) => assert_eq!(e, failed, "{ctx}"),
                    }
                    assert_eq!(next, Some(failed), "{ctx}");
                }
            }
        }
    }
}

#[test]
fn deterministic_mode_fails_cleanly_too() {
    let out = faulted(
        6,
        Algorithm::DoubleBinaryTree,
        Order::Deterministic,
        3,
        4,
        Fault::Abort,
        LONG,
        19,
    );
    for (r, o) in out.into_iter().enumerate() {
        let (result, next) = o.unwrap();
        if r == 3 {
            assert_eq!(result, Err(CommError::Aborted { rank: 3 }));
        } else if let Err(e) = result {
            assert_eq!(
                e,
                CommError::PeerFailed {
                    rank: 3,
                    cause: Cause::Aborted
                }
            );
        }
        assert!(next.is_some());
    }
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

#[test]
fn a_rank_that_stops_responding_times_out_every_rank_within_the_deadline() {
    let timeout = Duration::from_millis(300);
    let p = 4;
    let start = Instant::now();
    let out = faulted(
        p,
        Algorithm::Ring,
        Order::Schedule,
        2,
        1,
        Fault::Stall(Duration::from_millis(1500)),
        timeout,
        13,
    );
    let elapsed = start.elapsed();
    let mut timeouts = 0;
    for (r, o) in out.into_iter().enumerate() {
        let (result, next) = o.unwrap();
        let e = result.expect_err("a stalled ring cannot finish");
        // Every error names the stalled rank: the others', its own when it
        // wakes, and those of the ranks that time out first, whichever
        // rank they waited for.
        assert!(names_unresponsive(&e, 2), "rank {r}: {e:?}");
        if let CommError::Timeout { rank, waited, .. } = e {
            assert_eq!(rank, r);
            // The deadline, plus scheduling delays on a loaded machine.
            assert!(waited <= timeout + Duration::from_secs(2), "{waited:?}");
            timeouts += 1;
        }
        assert!(
            next.is_some_and(|e| names_unresponsive(&e, 2)),
            "rank {r}: {next:?}"
        );
    }
    assert!(timeouts >= 1);
    // Everyone is done when the staller wakes, not much later.
    assert!(
        elapsed < Duration::from_millis(1500) + Duration::from_secs(5),
        "{elapsed:?}"
    );
}

/// Rank 2 stalls in a world of 4 while rank `first` starts the
/// all-reduce `delay` before the others, so that `first`'s deadline
/// passes first: the race in which the first rank to time out used to
/// name the live rank it waited for (rank 0 waits for 3, 3 for 2).
/// Returns each rank's error (`None`: it finished) and its next
/// operation's.
fn stall_with_first(
    first: usize,
    algorithm: Algorithm,
) -> Vec<(Option<CommError>, Option<CommError>)> {
    let delay = Duration::from_millis(150);
    let stall = Fault::Stall(Duration::from_millis(1500));
    ThreadWorld::run(4, |comm| {
        let r = comm.rank();
        if r != first {
            std::thread::sleep(delay);
        }
        let fault = (r == 2).then_some((1, stall));
        let opts = Options::new()
            .with_algorithm(algorithm)
            .with_timeout(Duration::from_millis(400));
        let mut c = Collectives::new(Faulty::new(comm, fault)).with_options(opts);
        let mut x: Vec<f32> = input(Values::Exact, r, 1001);
        let result = c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).err();
        (result, c.barrier().err())
    })
    .unwrap()
    .into_iter()
    .map(|r| r.expect("no rank panics"))
    .collect()
}

#[test]
fn a_stall_is_blamed_on_the_rank_that_stopped_whichever_rank_times_out_first() {
    for algorithm in [Algorithm::Ring, Algorithm::HalvingDoubling] {
        for first in [0, 1, 3] {
            for (r, (result, next)) in stall_with_first(first, algorithm).into_iter().enumerate() {
                let ctx = format!("{algorithm:?}, rank {first} first: rank {r}");
                if let Some(e) = result {
                    assert!(names_unresponsive(&e, 2), "{ctx}: {e:?}");
                }
                let next = next.unwrap_or_else(|| panic!("{ctx}: not aborted"));
                assert!(names_unresponsive(&next, 2), "{ctx}: then {next:?}");
            }
        }
    }
}

#[test]
fn ranks_that_wait_for_each_other_name_nobody() {
    // Every rank waits for the next, none sends: no rank stopped, so no
    // rank may be named.
    let results = ThreadWorld::run(3, |comm| {
        let (r, p) = (comm.rank(), comm.size());
        let e = comm
            .recv_vec((r + 1) % p, 5, Duration::from_millis(300))
            .expect_err("nothing was sent");
        (e, comm.check().expect_err("aborted"))
    })
    .unwrap();
    let mut timeouts = 0;
    for (r, result) in results.into_iter().enumerate() {
        let (e, next) = result.unwrap();
        match e {
            CommError::Timeout { rank, peer, .. } => {
                assert_eq!((rank, peer), (r, None), "{e}");
                timeouts += 1;
            }
            CommError::Stalled { rank } => assert_eq!(rank, r),
            other => panic!("rank {r}: {other:?}"),
        }
        assert_eq!(next, CommError::Stalled { rank: r });
    }
    assert!(timeouts >= 1);
}

#[test]
fn a_rank_that_panics_inside_a_collective_fails_the_others_at_once() {
    // The panicking rank's communicator outlives the panic (borrowed, the
    // panic caught): the others must not wait for its drop or their
    // deadlines.
    let start = Instant::now();
    let results = ThreadWorld::run(3, |comm| {
        let r = comm.rank();
        let fault = (r == 1).then_some((0, Fault::Panic));
        let opts = Options::new().with_timeout(LONG);
        let mut c = Collectives::new(Faulty::new(&comm, fault)).with_options(opts);
        let mut x = vec![1.0f32; 100];
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).err()
        }));
        if r == 1 {
            assert!(caught.is_err(), "rank 1 panics");
            // Still holding its communicator, it waits for the others.
            std::thread::sleep(Duration::from_secs(3));
            return None;
        }
        caught.expect("only rank 1 panics")
    })
    .unwrap();
    for (r, e) in results.into_iter().enumerate() {
        if r != 1 {
            let failed = CommError::PeerFailed {
                rank: 1,
                cause: Cause::Panicked,
            };
            assert_eq!(e.unwrap(), Some(failed), "rank {r}");
        }
    }
    // The panicking rank's 3 s, not a minute's deadline.
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn a_short_stall_within_the_deadline_is_harmless() {
    let out = faulted(
        3,
        Algorithm::HalvingDoubling,
        Order::Schedule,
        1,
        0,
        Fault::Stall(Duration::from_millis(50)),
        LONG,
        10,
    );
    let want = exact_sum(3, 10);
    for o in out {
        let (result, next) = o.unwrap();
        assert_eq!(result.unwrap(), want);
        assert_eq!(next, None);
    }
}

#[test]
fn mismatched_calls_fail_on_every_rank() {
    // Rank 1 differs in length, element type, operation, algorithm or
    // collective, or (6) in operation inside the order-free ring's meeting
    // of bodies lent mutably to many; every rank returns an error, none
    // waits for the deadline.
    for what in 0..7 {
        let start = Instant::now();
        let results = ThreadWorld::run(4, |comm| {
            let odd = comm.rank() == 1;
            let mut opts = Options::new()
                .with_timeout(LONG)
                .with_algorithm(Algorithm::Ring);
            if odd && what == 3 {
                opts = opts.with_algorithm(Algorithm::HalvingDoubling);
            }
            if what == 6 {
                opts = opts.with_order(Order::Free);
            }
            let mut c = Collectives::new(comm).with_options(opts);
            // 8: a length the 4 ranks divide, so the order-free ring meets.
            let len = match what {
                0 if odd => 11,
                6 => 8,
                _ => 10,
            };
            let op = match what {
                2 if odd => ReduceOp::Max,
                6 if odd => ReduceOp::Mean,
                _ => ReduceOp::Sum,
            };
            match what {
                1 if odd => c.all_reduce(&mut vec![f16::ONE; len], Reducer::new(op)),
                4 if odd => c.broadcast(&mut vec![1.0f32; len], 0),
                5 if odd => c
                    .all_reduce(&mut vec![1.0f32; len], Reducer::new(op))
                    .and_then(|_| c.all_reduce(&mut vec![1.0f32; len], Reducer::new(op))),
                5 => c.broadcast(&mut vec![1.0f32; len], 5),
                _ => c.all_reduce(&mut vec![1.0f32; len], Reducer::new(op)),
            }
            .map(|_| ())
        })
        .unwrap();
        assert!(start.elapsed() < Duration::from_secs(20), "case {what}");
        let errors: Vec<CommError> = results
            .into_iter()
            .map(|r| r.unwrap().expect_err("a mismatched call succeeded"))
            .collect();
        assert!(
            errors
                .iter()
                .any(|e| matches!(e, CommError::CallMismatch { .. } | CommError::Schedule(_))),
            "case {what}: {errors:?}"
        );
        if what == 0 {
            assert!(
                errors.iter().any(|e| matches!(
                    e,
                    CommError::CallMismatch {
                        what: Mismatch::Length { .. },
                        ..
                    }
                )),
                "{errors:?}"
            );
        }
        if what == 1 {
            assert!(
                errors.iter().any(|e| matches!(
                    e,
                    CommError::CallMismatch {
                        what: Mismatch::ElementType { .. },
                        ..
                    }
                )),
                "{errors:?}"
            );
        }
    }
}

#[test]
fn a_zero_length_call_among_longer_ones_is_a_length_mismatch() {
    // A zero-length call sends nothing of its own; it must still meet the
    // others' first messages, and they its, like any other length.
    let p = 4;
    for algorithm in Algorithm::ALL {
        for collective in collectives(p) {
            for zero in [0, 2, 3] {
                let start = Instant::now();
                let results = ThreadWorld::run(p, |comm| {
                    let len = if comm.rank() == zero { 0 } else { 10 };
                    let opts = Options::new().with_algorithm(algorithm).with_timeout(LONG);
                    let mut c = Collectives::new(comm).with_options(opts);
                    let mut x = vec![1.0f32; len];
                    c.run(collective, &mut x, Reducer::new(ReduceOp::Sum)).err()
                })
                .unwrap();
                let ctx = format!("{algorithm:?} {collective:?}, rank {zero} zero-length");
                let errors: Vec<Option<CommError>> =
                    results.into_iter().map(|r| r.unwrap()).collect();
                // The zero-length rank fails, and a rank that fails does so
                // on the mismatch, not on a peer's exit or a deadline. (A
                // rank that needs nothing from the zero-length one may
                // finish, as with any mismatch it does not meet.)
                assert!(errors[zero].is_some(), "{ctx}: {errors:?}");
                for e in errors.iter().flatten() {
                    assert!(
                        matches!(
                            e,
                            CommError::CallMismatch {
                                what: Mismatch::Length { .. },
                                ..
                            } | CommError::PeerFailed {
                                cause: Cause::Mismatch,
                                ..
                            }
                        ),
                        "{ctx}: {errors:?}"
                    );
                }
                assert!(
                    start.elapsed() < Duration::from_secs(20),
                    "{ctx}: {:?}",
                    start.elapsed()
                );
            }
        }
    }
}

#[test]
fn a_rank_that_leaves_makes_its_waiters_fail_at_once() {
    let start = Instant::now();
    let results = ThreadWorld::run(3, |comm| {
        if comm.rank() == 0 {
            drop(comm);
            return None;
        }
        let mut c = Collectives::new(comm).with_options(Options::new().with_timeout(LONG));
        Some(
            c.all_reduce(&mut [1.0f32; 4], Reducer::new(ReduceOp::Sum))
                .map(|_| ()),
        )
    })
    .unwrap();
    assert!(start.elapsed() < Duration::from_secs(20));
    for r in results.into_iter().skip(1) {
        assert_eq!(
            r.unwrap().unwrap(),
            Err(CommError::PeerFailed {
                rank: 0,
                cause: Cause::Exited
            })
        );
    }
}

#[test]
fn an_abort_handle_stops_a_blocked_receive_from_another_thread() {
    let mut comms = ThreadWorld::new(2).unwrap().into_communicators();
    let b = comms.pop().unwrap();
    let a = comms.pop().unwrap();
    let handle = b.abort_handle();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        handle.abort();
    });
    let mut buf = [0u8; 4];
    assert_eq!(
        a.recv(1, 0, &mut buf, LONG),
        Err(CommError::PeerFailed {
            rank: 1,
            cause: Cause::Aborted
        })
    );
    assert_eq!(b.check(), Err(CommError::Aborted { rank: 1 }));
    t.join().unwrap();
}

#[test]
fn point_to_point_messages_keep_order_per_tag_and_check_lengths() {
    let results = ThreadWorld::run(3, |comm| {
        let (r, p) = (comm.rank(), comm.size());
        let next = (r + 1) % p;
        let prev = (r + p - 1) % p;
        for k in 0..5u64 {
            comm.send_slice(next, 1, &[k, r as u64], LONG).unwrap();
        }
        comm.send(next, 2, b"tag two", LONG).unwrap();
        // Tag 2 overtakes tag 1; within tag 1 the order holds.
        assert_eq!(comm.recv_vec(prev, 2, LONG).unwrap(), b"tag two");
        for k in 0..5u64 {
            let mut got = [0u64; 2];
            comm.recv_slice(prev, 1, &mut got, LONG).unwrap();
            assert_eq!(got, [k, prev as u64]);
        }
        comm.barrier(LONG).unwrap();
        assert_eq!(
            comm.send(p, 0, &[], LONG),
            Err(CommError::RankOutOfRange { rank: p, size: p })
        );
        // Ranks leave a barrier at different moments: one still inside may
        // already see the abort that rank 1 raises below.
        let mismatch = Err(CommError::PeerFailed {
            rank: 1,
            cause: Cause::Mismatch,
        });
        let after = comm.barrier(LONG);
        assert!(after.is_ok() || after == mismatch, "{after:?}");
        // A wrong length aborts the world.
        match r {
            0 => comm.send(1, 3, &[1, 2, 3], LONG).unwrap(),
            1 => {
                let mut two = [0u8; 2];
                assert_eq!(
                    comm.recv(0, 3, &mut two, LONG),
                    Err(CommError::LengthMismatch {
                        rank: 1,
                        peer: 0,
                        expected: 2,
                        found: 3
                    })
                );
            }
            _ => {}
        }
        assert_eq!(comm.barrier(LONG), mismatch);
    })
    .unwrap();
    for r in results {
        r.unwrap();
    }
}

#[test]
fn errors_display_their_data() {
    let e = CommError::Timeout {
        rank: 3,
        peer: Some(1),
        waited: Duration::from_millis(1500),
    };
    assert_eq!(
        e.to_string(),
        "rank 3 timed out after 1.500 s waiting for rank 1"
    );
    let e = CommError::Timeout {
        rank: 3,
        peer: None,
        waited: Duration::from_millis(1500),
    };
    assert_eq!(
        e.to_string(),
        "rank 3 timed out after 1.500 s; no single rank stopped (the ranks waited for each other, or kept moving)"
    );
    assert_eq!(
        CommError::Stalled { rank: 2 }.to_string(),
        "rank 2's communicator is aborted: a rank timed out, and no single rank was found to have stopped"
    );
    assert_eq!(
        CommError::PeerFailed {
            rank: 2,
            cause: Cause::Panicked
        }
        .to_string(),
        "rank 2 failed: it panicked"
    );
    assert_eq!(
        CommError::CallMismatch {
            rank: 0,
            peer: 1,
            what: Mismatch::Length {
                ours: 10,
                theirs: 11
            }
        }
        .to_string(),
        "ranks 0 and 1 called mismatched collectives: buffer length 10 here, 11 there"
    );
    let boxed: Box<dyn std::error::Error> = Box::new(CommError::Aborted { rank: 0 });
    assert_eq!(boxed.to_string(), "rank 0's communicator is aborted");
    assert!(ThreadWorld::new(0).is_err());
}

/// The order-free ring over 3 and 4 ranks meets once per piece, lending
/// to every peer at once (`exchange_mut_many`), also through `Faulty`:
/// with no fault the bits and the traffic are the bare transport's, in one
/// exchange; a fault there strikes the meeting itself (an abort fails
/// every rank, naming the faulty one; a stall changes no bit).
#[test]
fn faults_strike_the_order_free_rings_meetings() {
    let opts = Options::new()
        .with_algorithm(Algorithm::Ring)
        .with_order(Order::Free)
        .with_timeout(LONG);
    let sum = Reducer::new(ReduceOp::Sum);
    for p in [3, 4] {
        // A length the ranks divide (else the ring holds contributions aside).
        let len = 3000;
        let inputs: Vec<Vec<f32>> = (0..p).map(|r| input(Values::Fuzzy, r, len)).collect();
        let bare = ThreadWorld::run(p, |comm| {
            let mut c = Collectives::new(comm).with_options(opts);
            let mut x = inputs[c.rank()].clone();
            let report = c.all_reduce(&mut x, sum).unwrap();
            (x, report.messages, report.bytes)
        })
        .unwrap();
        let run = |fault: Option<(usize, Fault)>| {
            ThreadWorld::run(p, |comm| {
                let fault = (comm.rank() == 1).then_some(fault).flatten();
                let mut c = Collectives::new(Faulty::new(comm, fault)).with_options(opts);
                let mut x = inputs[c.rank()].clone();
                let report = c.all_reduce(&mut x, sum);
                (x, report, c.comm().calls())
            })
            .unwrap()
        };
        for (r, (got, want)) in run(None).into_iter().zip(&bare).enumerate() {
            let (x, report, calls) = got.unwrap();
            let (y, messages, bytes) = want.as_ref().unwrap();
            let report = report.unwrap();
            assert_eq!(bits(&x), bits(y), "p={p} rank {r}");
            assert_eq!((report.messages, report.bytes), (*messages, *bytes));
            assert_eq!(calls, 1, "p={p} rank {r}: one meeting");
        }
        for (r, got) in run(Some((0, Fault::Stall(Duration::from_millis(20)))))
            .into_iter()
            .enumerate()
        {
            let (x, report, _) = got.unwrap();
            report.unwrap();
            assert_eq!(
                bits(&x),
                bits(&bare[r].as_ref().unwrap().0),
                "p={p} rank {r}"
            );
        }
        for (r, got) in run(Some((0, Fault::Abort))).into_iter().enumerate() {
            let e = got.unwrap().1.expect_err("aborted");
            match e {
                CommError::Aborted { rank: 1 } => assert_eq!(r, 1),
                CommError::PeerFailed { rank: 1, .. } => assert_ne!(r, 1),
                other => panic!("p={p} rank {r}: {other:?}"),
            }
        }
    }
}
