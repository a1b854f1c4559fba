//! Collectives: every schedule checked symbolically (who holds which
//! contributions, step by step), the executor against exact answers as
//! Gloo and nccl-tests do (small-integer inputs, bit for bit, ranks 1..=16
//! and more, every algorithm x collective x op x dtype x order), NaN and
//! signed zero, stochastic rounding independent of the algorithm and the
//! fragmenting, the deterministic order's bitwise identity across
//! algorithms and rank counts on arbitrary f32, byte counts against
//! SEMANTICS.md section 4, errors and panics.

use proptest::prelude::*;
use tessera_core::collective::{
    self, Algorithm, Collective, CollectiveSchedule, Error, Kind, Op, Order, ReduceOp, Reducer,
    Span, Transfer, tree_sum,
};
use tessera_core::fp::{self, Element, Overflow, Rounding, Stochastic, bf16, f16};
use tessera_core::rng::RandomStream;

// ---------------------------------------------------------------------------
// Data and helpers.

use crate::support::Gen;

fn collectives(p: usize) -> Vec<Collective> {
    let mut c = vec![
        Collective::ReduceScatter,
        Collective::AllGather,
        Collective::AllReduce,
    ];
    let mut roots = vec![0, p - 1, p / 2];
    roots.dedup();
    for root in roots {
        c.push(Collective::Reduce { root });
        c.push(Collective::Broadcast { root });
    }
    c
}

fn counts(p: usize) -> Vec<usize> {
    let mut n = vec![0, 1, p.saturating_sub(1), p, p + 1, 2 * p + 3];
    n.sort_unstable();
    n.dedup();
    n
}

fn bits<T: Element>(x: T) -> u32 {
    let mut b = [0u8; 4];
    b[..size_of::<T>()].copy_from_slice(bytemuck::bytes_of(&x));
    u32::from_le_bytes(b)
}

fn assert_bits_eq<T: Element>(got: &[T], want: &[T], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(
            bits(*g),
            bits(*w),
            "{what}: element {i}: got {g:?}, want {w:?}"
        );
    }
}

/// Runs `s` in place, with scratch full of garbage, returning the transfers.
fn exec<T: Element>(s: &CollectiveSchedule, red: &Reducer, bufs: &mut [Vec<T>]) -> Vec<Transfer> {
    let mut scratch = vec![f32::from_bits(0x7fa0_beef); s.scratch_len::<T>(red.op)];
    let mut refs: Vec<&mut [T]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let mut transfers = Vec::new();
    collective::execute(s, red, &mut refs, &mut scratch, |t| transfers.push(t)).unwrap();
    transfers
}

/// Small integers (and signed zeros): every sum of up to 32 of them is exact
/// in f32, f16 and bf16.
fn small_ints<T: Element>(p: usize, n: usize, seed: u64) -> Vec<Vec<T>> {
    let mut g = Gen(seed);
    (0..p)
        .map(|_| {
            (0..n)
                .map(|_| {
                    let v = g.below(17) as f32 - 8.0;
                    let v = if v == 0.0 && g.below(2) == 0 { -0.0 } else { v };
                    T::store(v, Rounding::Nearest, 0)
                })
                .collect()
        })
        .collect()
}

/// Random bit patterns (copies must move bits unchanged, NaN payloads too).
fn random_bits<T: Element>(p: usize, n: usize, seed: u64) -> Vec<Vec<T>> {
    let mut g = Gen(seed);
    (0..p)
        .map(|_| {
            let mut v = vec![T::default(); n];
            for b in bytemuck::cast_slice_mut::<T, u8>(&mut v) {
                *b = g.next() as u8;
            }
            v
        })
        .collect()
}

/// The reduction of element `i` over the ranks, computed independently of
/// the crate: exact for small integers (f64 sums), `total_cmp` for Max/Min.
fn expected<T: Element>(inputs: &[Vec<T>], red: &Reducer) -> Vec<T> {
    let p = inputs.len();
    let n = inputs[0].len();
    (0..n)
        .map(|i| {
            let xs: Vec<f32> = inputs.iter().map(|b| b[i].load()).collect();
            let nan = xs.iter().any(|x| x.is_nan());
            let x = match red.op {
                ReduceOp::Sum => xs
                    .iter()
                    .map(|&x| f64::from(x))
                    .reduce(|a, b| a + b)
                    .unwrap() as f32,
                ReduceOp::Mean => {
                    let s = xs
                        .iter()
                        .map(|&x| f64::from(x))
                        .reduce(|a, b| a + b)
                        .unwrap() as f32;
                    s / p as f32
                }
                ReduceOp::Max if nan => f32::NAN,
                ReduceOp::Min if nan => f32::NAN,
                ReduceOp::Max => *xs.iter().max_by(|a, b| a.total_cmp(b)).unwrap(),
                ReduceOp::Min => *xs.iter().min_by(|a, b| a.total_cmp(b)).unwrap(),
            };
            T::store(x, red.rounding, i)
        })
        .collect()
}

/// Checks the buffers after `s` ran on `inputs`, given the expected
/// reduction `want` (for reducing collectives).
fn check_result<T: Element>(
    s: &CollectiveSchedule,
    inputs: &[Vec<T>],
    out: &[Vec<T>],
    want: &[T],
    what: &str,
) {
    let p = s.size();
    match s.collective() {
        Collective::AllReduce => {
            for (r, b) in out.iter().enumerate() {
                assert_bits_eq(b, want, &format!("{what} rank {r}"));
            }
        }
        Collective::ReduceScatter => {
            for (r, b) in out.iter().enumerate() {
                let f = s.fragment(r);
                assert_bits_eq(&b[f.clone()], &want[f], &format!("{what} rank {r}"));
            }
        }
        Collective::Reduce { root } => {
            assert_bits_eq(&out[root], want, &format!("{what} root {root}"));
        }
        Collective::AllGather => {
            let mut all = vec![T::default(); s.len()];
            for (j, input) in inputs.iter().enumerate() {
                let f = s.fragment(j);
                all[f.clone()].copy_from_slice(&input[f]);
            }
            for (r, b) in out.iter().enumerate().take(p) {
                assert_bits_eq(b, &all, &format!("{what} rank {r}"));
            }
        }
        Collective::Broadcast { root } => {
            for (r, b) in out.iter().enumerate() {
                assert_bits_eq(b, &inputs[root], &format!("{what} rank {r}"));
            }
        }
    }
}

/// Runs one case with small-integer (reductions) or random-bit (copies)
/// inputs and checks it bit for bit; also out of place.
fn run_case<T: Element>(s: &CollectiveSchedule, red: &Reducer, seed: u64) {
    let (p, n) = (s.size(), s.len());
    let inputs = if s.collective().reduces() {
        small_ints::<T>(p, n, seed)
    } else {
        random_bits::<T>(p, n, seed)
    };
    let want = if s.collective().reduces() {
        expected(&inputs, red)
    } else {
        Vec::new()
    };
    let what = format!(
        "{:?} {:?} {:?} {} p={p} n={n} {:?}",
        s.algorithm(),
        s.collective(),
        s.order(),
        <T as Element>::NAME,
        red.op
    );
    let mut out = inputs.clone();
    let transfers = exec(s, red, &mut out);
    check_result(s, &inputs, &out, &want, &what);

    // Out of place: the same bits, inputs untouched.
    let mut out2: Vec<Vec<T>> = (0..p).map(|_| vec![T::default(); n]).collect();
    let ins: Vec<&[T]> = inputs.iter().map(|b| &b[..]).collect();
    let mut outs: Vec<&mut [T]> = out2.iter_mut().map(|b| &mut b[..]).collect();
    let mut scratch = vec![0.0f32; s.scratch_len::<T>(red.op)];
    collective::execute_into(s, red, &ins, &mut outs, &mut scratch, |_| {}).unwrap();
    check_result(s, &inputs, &out2, &want, &format!("{what} out of place"));

    // The executor reports what CollectiveSchedule::transfers computes.
    let mut planned = Vec::new();
    s.transfers::<T>(red.op, |t| planned.push(t));
    assert_eq!(transfers, planned, "{what}: transfers");
}

// ---------------------------------------------------------------------------
// Schedules, checked symbolically.

fn mask(r: tessera_core::collective::Ranks, p: usize) -> u64 {
    r.iter(p).fold(0, |m, x| m | 1 << x)
}

fn positions(span: Span) -> impl Iterator<Item = usize> {
    span.runs().flatten()
}

fn overlap(a: Span, b: Span) -> bool {
    a.runs()
        .any(|x| b.runs().any(|y| x.start < y.end && y.start < x.end))
}

/// A schedule replayed on sets: which contributions each rank's partial
/// covers at each padded position, who holds finished values, and how
/// often each position was finalized.
struct Replay<'s> {
    s: &'s CollectiveSchedule,
    what: String,
    held: Vec<Vec<u64>>,
    done: Vec<Vec<bool>>,
    finalized: Vec<usize>,
}

impl<'s> Replay<'s> {
    /// The state before the first step.
    fn new(s: &'s CollectiveSchedule) -> Self {
        let (p, np) = (s.size(), s.padded_len());
        let what = format!(
            "{:?} {:?} p={p} n={}",
            s.algorithm(),
            s.collective(),
            s.len()
        );
        let mut held = vec![vec![0u64; np]; p];
        let mut done = vec![vec![false; np]; p];
        match s.collective() {
            Collective::AllGather => {
                for (j, d) in done.iter_mut().enumerate() {
                    d[j * s.fragment_len()..(j + 1) * s.fragment_len()].fill(true);
                }
            }
            Collective::Broadcast { root } => done[root].fill(true),
            _ => {
                for (r, h) in held.iter_mut().enumerate() {
                    h.fill(1 << r);
                }
            }
        }
        Self {
            s,
            what,
            held,
            done,
            finalized: vec![0; np],
        }
    }

    /// Sends and receives match one to one, and no rank receives where it
    /// sends.
    fn check_matching(&self, step: usize, ops: &[Vec<Op>]) {
        let what = &self.what;
        let mut recvs: Vec<(usize, usize, Span, Kind)> = Vec::new();
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                if let Op::Recv { from, span, kind } = *op {
                    assert_ne!(from, r, "{what} step {step}: rank {r} receives from itself");
                    recvs.push((from, r, span, kind));
                }
            }
        }
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                if let Op::Send { to, span, kind } = *op {
                    let k = recvs
                        .iter()
                        .position(|&m| m == (r, to, span, kind))
                        .unwrap_or_else(|| {
                            panic!("{what} step {step}: unmatched send {r}->{to} {span:?}")
                        });
                    recvs.swap_remove(k);
                    for other in o {
                        if let Op::Recv { span: rs, .. } = *other {
                            assert!(
                                !overlap(span, rs),
                                "{what} step {step}: rank {r} sends and receives {span:?}"
                            );
                        }
                    }
                }
            }
        }
        assert!(
            recvs.is_empty(),
            "{what} step {step}: unmatched receives {recvs:?}"
        );
    }

    /// Applies the step's receives against the state before the step:
    /// reductions combine exactly what the sender and receiver hold
    /// (disjoint, adjacent), copies move finished values.
    fn receive(&mut self, step: usize, ops: &[Vec<Op>]) {
        let (p, np, what) = (self.s.size(), self.s.padded_len(), &self.what);
        let (held0, done0) = (self.held.clone(), self.done.clone());
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                let Op::Recv { from, span, kind } = *op else {
                    continue;
                };
                assert!(
                    positions(span).all(|x| x < np),
                    "{what}: span beyond padding"
                );
                match kind {
                    Kind::Reduce { covers, onto, .. } => {
                        assert!(self.s.collective().reduces(), "{what}: reduce in a copy");
                        let (c, h) = (mask(covers, p), mask(onto, p));
                        assert_eq!(c & h, 0, "{what} step {step}: overlapping sets");
                        let adjacent = (covers.start + covers.len) % p == onto.start % p
                            || (onto.start + onto.len) % p == covers.start % p;
                        assert!(adjacent, "{what} step {step}: sets not adjacent");
                        for x in positions(span) {
                            assert_eq!(
                                held0[from][x], c,
                                "{what} step {step}: {from}->{r} at {x}: sender holds other"
                            );
                            assert_eq!(
                                self.held[r][x], h,
                                "{what} step {step}: {from}->{r} at {x}: receiver holds other"
                            );
                            assert!(
                                !done0[from][x] && !self.done[r][x],
                                "{what}: reduce of a finished value"
                            );
                            self.held[r][x] |= c;
                        }
                    }
                    Kind::Copy => {
                        for x in positions(span) {
                            assert!(
                                done0[from][x],
                                "{what} step {step}: {from}->{r} copies unfinished {x}"
                            );
                            self.done[r][x] = true;
                        }
                    }
                }
            }
        }
    }

    /// Applies the step's finalizations: each from all contributions.
    fn finalize(&mut self, step: usize, ops: &[Vec<Op>]) {
        let p = self.s.size();
        let full: u64 = if p == 64 { !0 } else { (1 << p) - 1 };
        for (r, o) in ops.iter().enumerate() {
            for op in o {
                if let Op::Finalize { span } = *op {
                    for x in positions(span) {
                        assert_eq!(
                            self.held[r][x], full,
                            "{} step {step}: rank {r} finalizes {x} early",
                            self.what
                        );
                        assert!(!self.done[r][x]);
                        self.done[r][x] = true;
                        self.finalized[x] += 1;
                    }
                }
            }
        }
    }

    /// Every position finalized once and the collective's postcondition.
    fn check_result(&self) {
        let (s, what, done) = (self.s, &self.what, &self.done);
        let f = s.fragment_len();
        for x in 0..s.padded_len() {
            if s.collective().reduces() {
                let n = self.finalized[x];
                assert_eq!(n, 1, "{what}: position {x} finalized {n} times");
            }
            match s.collective() {
                Collective::AllReduce | Collective::AllGather | Collective::Broadcast { .. } => {
                    assert!(
                        done.iter().all(|d| d[x]),
                        "{what}: position {x} missing somewhere"
                    );
                }
                Collective::ReduceScatter => {
                    assert!(done[x / f][x], "{what}: {x} not at its owner");
                }
                Collective::Reduce { root } => {
                    assert!(done[root][x], "{what}: {x} not at the root")
                }
            }
        }
    }
}

/// Replays `s` on sets ([`Replay`]): sends and receives match, no rank
/// receives where it sends, reductions combine exactly what the sender and
/// receiver hold (disjoint, adjacent), copies move finished values, every
/// position is finalized once from all contributions, and the collective's
/// postcondition holds.
fn check_schedule(s: &CollectiveSchedule) {
    let mut replay = Replay::new(s);
    let mut any_op_in_last = false;
    for step in 0..s.steps() {
        let ops: Vec<Vec<Op>> = (0..s.size()).map(|r| s.ops(r, step).to_vec()).collect();
        any_op_in_last |= step + 1 == s.steps() && ops.iter().any(|o| !o.is_empty());
        replay.check_matching(step, &ops);
        replay.receive(step, &ops);
        replay.finalize(step, &ops);
    }
    // With f >= 2 no span is empty, and then steps() is tight.
    if s.fragment_len() >= 2 && s.size() > 1 {
        assert!(any_op_in_last, "{}: the last step is idle", replay.what);
    }
    replay.check_result();
}

#[test]
fn schedules_are_consistent() {
    for p in (1..=33).chain([48, 64]) {
        let ns: Vec<usize> = if p <= 17 {
            counts(p)
        } else {
            vec![p + 1, 3 * p - 1]
        };
        for algorithm in Algorithm::ALL {
            for c in collectives(p) {
                for &n in &ns {
                    let s = CollectiveSchedule::new(algorithm, c, p, n).unwrap();
                    check_schedule(&s);
                    check_schedule(&s.with_order(Order::Deterministic));
                }
            }
        }
    }
}

#[test]
fn step_counts() {
    let steps = |a, c, p| CollectiveSchedule::new(a, c, p, 100).unwrap().steps();
    for p in 2..=16usize {
        let lg = p.ilog2() as usize;
        let fold = if p.is_power_of_two() { 0 } else { 2 };
        assert_eq!(
            steps(Algorithm::Ring, Collective::AllReduce, p),
            2 * (p - 1)
        );
        assert_eq!(
            steps(Algorithm::BidirectionalRing, Collective::ReduceScatter, p),
            p - 1
        );
        assert_eq!(
            steps(Algorithm::HalvingDoubling, Collective::AllReduce, p),
            2 * lg + fold
        );
        assert_eq!(
            steps(Algorithm::HalvingDoubling, Collective::ReduceScatter, p),
            lg + fold
        );
    }
    for a in Algorithm::ALL {
        assert_eq!(steps(a, Collective::AllReduce, 1), 1);
        assert_eq!(steps(a, Collective::AllGather, 1), 0);
    }
}

// ---------------------------------------------------------------------------
// Exact results.

fn matrix<T: Element>(
    ps: impl Iterator<Item = usize>,
    ns: impl Fn(usize) -> Vec<usize>,
    ops: &[ReduceOp],
) {
    for p in ps {
        for algorithm in Algorithm::ALL {
            for c in collectives(p) {
                for n in ns(p) {
                    for order in [Order::Schedule, Order::Deterministic] {
                        let s = CollectiveSchedule::new(algorithm, c, p, n)
                            .unwrap()
                            .with_order(order);
                        let these: &[ReduceOp] = if c.reduces() { ops } else { &[ReduceOp::Sum] };
                        for &op in these {
                            run_case::<T>(&s, &Reducer::new(op), (p * 1000 + n) as u64);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn exact_small_counts_f32() {
    matrix::<f32>(1..=16, counts, &ReduceOp::ALL);
}

#[test]
fn exact_small_counts_f16() {
    matrix::<f16>(1..=16, counts, &ReduceOp::ALL);
}

#[test]
fn exact_small_counts_bf16() {
    matrix::<bf16>(1..=16, counts, &ReduceOp::ALL);
}

#[test]
fn exact_large_counts() {
    let ps = [1, 2, 3, 5, 8, 13, 16].into_iter();
    matrix::<f32>(
        ps.clone(),
        |_| vec![1000, 10007],
        &[ReduceOp::Sum, ReduceOp::Max],
    );
    matrix::<bf16>(ps, |_| vec![10007], &[ReduceOp::Mean, ReduceOp::Min]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random groups, lengths, roots and orders: exact answers.
    #[test]
    fn exact_random_cases(
        p in 1usize..=16,
        n in 0usize..300,
        alg in 0usize..4,
        which in 0usize..5,
        root in 0usize..16,
        det in any::<bool>(),
        op in 0usize..4,
        seed in any::<u64>(),
    ) {
        let root = root % p;
        let c = [
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::AllReduce,
            Collective::Reduce { root },
            Collective::Broadcast { root },
        ][which];
        let order = if det { Order::Deterministic } else { Order::Schedule };
        let s = CollectiveSchedule::new(Algorithm::ALL[alg], c, p, n).unwrap().with_order(order);
        let red = Reducer::new(ReduceOp::ALL[op]);
        run_case::<f32>(&s, &red, seed);
        run_case::<f16>(&s, &red, seed);
    }

    /// The deterministic order is `tree_sum` of the ranks' inputs, for
    /// arbitrary f32 and any algorithm.
    #[test]
    fn deterministic_is_tree_sum(
        p in 1usize..=16,
        n in 0usize..100,
        alg in 0usize..4,
        seed in any::<u64>(),
    ) {
        let mut g = Gen(seed);
        let inputs: Vec<Vec<f32>> = (0..p).map(|_| (0..n).map(|_| g.in_range(-30, 30)).collect()).collect();
        let refs: Vec<&[f32]> = inputs.iter().map(|b| &b[..]).collect();
        let mut want = vec![0.0f32; n];
        tree_sum(&refs, &mut want);
        let s = CollectiveSchedule::new(Algorithm::ALL[alg], Collective::AllReduce, p, n)
            .unwrap()
            .with_order(Order::Deterministic);
        let mut out = inputs.clone();
        exec(&s, &Reducer::new(ReduceOp::Sum), &mut out);
        for b in &out {
            assert_bits_eq(b, &want, "deterministic all-reduce");
        }
    }
}

// ---------------------------------------------------------------------------
// NaN and signed zero.

fn special_case<T: Element>(algorithm: Algorithm, p: usize, order: Order) {
    let n = 6;
    let nan_in = T::store(f32::from_bits(0x7f80_0001), Rounding::Nearest, 0); // signalling
    let neg_nan = T::store(f32::from_bits(0xffc0_1234), Rounding::Nearest, 0);
    let inf = T::store(f32::INFINITY, Rounding::Nearest, 0);
    let ninf = T::store(f32::NEG_INFINITY, Rounding::Nearest, 0);
    let z = T::store(0.0, Rounding::Nearest, 0);
    let nz = T::store(-0.0, Rounding::Nearest, 0);
    let one = T::store(1.0, Rounding::Nearest, 0);
    // Columns: 0 a NaN on the last rank; 1 a negative NaN on rank 0;
    // 2 +inf and -inf; 3 all -0.0; 4 -0.0 and +0.0; 5 +inf and ones.
    let inputs: Vec<Vec<T>> = (0..p)
        .map(|r| {
            vec![
                if r == p - 1 { nan_in } else { one },
                if r == 0 { neg_nan } else { one },
                if r == 0 {
                    inf
                } else if r == p - 1 {
                    ninf
                } else {
                    one
                },
                nz,
                if r % 2 == 0 { nz } else { z },
                if r == p / 2 { inf } else { one },
            ]
        })
        .collect();
    let canon = T::store(f32::NAN, Rounding::Nearest, 0);
    for op in ReduceOp::ALL {
        let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n)
            .unwrap()
            .with_order(order);
        let red = Reducer::new(op);
        let mut out = inputs.clone();
        exec(&s, &red, &mut out);
        let b = &out[p / 2];
        let what = format!("{algorithm:?} {} p={p} {op:?}", T::NAME);
        assert_eq!(bits(b[0]), bits(canon), "{what}: NaN");
        assert_eq!(bits(b[1]), bits(canon), "{what}: negative NaN");
        if p > 1 && op.depends_on_order() {
            assert_eq!(bits(b[2]), bits(canon), "{what}: inf - inf");
        }
        // All -0.0: -0.0 for every op (a sum of -0.0s, -0.0 / p, max, min).
        assert_eq!(bits(b[3]), bits(nz), "{what}: -0");
        // -0.0 and +0.0 mixed: +0.0 except for Min (or a single rank's -0.0).
        let mixed = if p == 1 || op == ReduceOp::Min { nz } else { z };
        assert_eq!(bits(b[4]), bits(mixed), "{what}: mixed zeros");
        if op != ReduceOp::Min {
            assert_eq!(bits(b[5]), bits(inf), "{what}: +inf");
        }
        for (r, o) in out.iter().enumerate() {
            assert_bits_eq(o, b, &format!("{what}: rank {r} differs"));
        }
    }
}

#[test]
fn nan_and_signed_zero() {
    for p in [1, 2, 3, 4, 7, 16] {
        for algorithm in Algorithm::ALL {
            for order in [Order::Schedule, Order::Deterministic] {
                special_case::<f32>(algorithm, p, order);
                special_case::<f16>(algorithm, p, order);
                special_case::<bf16>(algorithm, p, order);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Stochastic rounding: addressed by the global element index.

fn sr_rounding() -> Rounding {
    Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(7, 3), Overflow::Saturate),
        first_index: 1_000_003,
    }
}

/// Contributions `1 + k * 2^-10` (f16) or `1 + k * 2^-7` (bf16), random
/// signs: their f32 sums are exact, but need rounding to 16 bits.
fn fine_grid<T: Element>(p: usize, n: usize, bits: i32, seed: u64) -> Vec<Vec<T>> {
    let mut g = Gen(seed);
    let unit = 2f32.powi(-bits);
    (0..p)
        .map(|_| {
            (0..n)
                .map(|_| {
                    let v = 1.0 + g.below(1 << bits) as f32 * unit;
                    T::store(if g.below(2) == 0 { v } else { -v }, Rounding::Nearest, 0)
                })
                .collect()
        })
        .collect()
}

fn sr_case<T: Element + fp::HalfFloat>(grid_bits: i32) {
    let n = 997;
    for p in [2, 3, 4, 6, 8, 16] {
        let inputs = fine_grid::<T>(p, n, grid_bits, p as u64);
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            // The oracle: exact f32 sums (Mean: one division), rounded by the
            // fp module's slice kernel with the same stream and first index.
            let sums: Vec<f32> = (0..n)
                .map(|i| {
                    let s = inputs.iter().map(|b| f64::from(b[i].load())).sum::<f64>() as f32;
                    op.finish(s, p)
                })
                .collect();
            let Rounding::Stochastic { sr, first_index } = sr_rounding() else {
                unreachable!()
            };
            let mut want = vec![T::default(); n];
            fp::f32_to_half_sr_slice(&sums, &mut want, sr, first_index);
            let mut nearest = vec![T::default(); n];
            fp::f32_to_half_slice(&sums, &mut nearest);
            assert_ne!(want, nearest, "the test must round something up");
            let red = Reducer::new(op).with_rounding(sr_rounding());
            for algorithm in Algorithm::ALL {
                for order in [Order::Schedule, Order::Deterministic] {
                    for c in [
                        Collective::AllReduce,
                        Collective::ReduceScatter,
                        Collective::Reduce { root: p - 1 },
                    ] {
                        let s = CollectiveSchedule::new(algorithm, c, p, n)
                            .unwrap()
                            .with_order(order);
                        let mut out = inputs.clone();
                        exec(&s, &red, &mut out);
                        check_result(
                            &s,
                            &inputs,
                            &out,
                            &want,
                            &format!("SR {} {algorithm:?} {c:?} p={p}", <T as Element>::NAME),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn stochastic_rounding_independent_of_algorithm() {
    sr_case::<f16>(10);
    sr_case::<bf16>(7);
}

/// The same exact sums over 4 ranks and over 8 (each contribution split
/// into two exact halves): fragments of different sizes, the same bits.
#[test]
fn stochastic_rounding_independent_of_fragmenting() {
    let n = 1001;
    let four = fine_grid::<f16>(4, n, 10, 99);
    let eight: Vec<Vec<f16>> = four
        .iter()
        .flat_map(|b| {
            let sign = |x: f16| if x.to_f32() < 0.0 { -1.0 } else { 1.0 };
            let frac: Vec<f16> = b
                .iter()
                .map(|&x| f16::from_f32(x.to_f32() - sign(x)))
                .collect();
            let unit: Vec<f16> = b.iter().map(|&x| f16::from_f32(sign(x))).collect();
            [frac, unit]
        })
        .collect();
    let red = Reducer::new(ReduceOp::Sum).with_rounding(sr_rounding());
    let mut results = Vec::new();
    for (inputs, p) in [(&four, 4), (&eight, 8)] {
        for algorithm in Algorithm::ALL {
            let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n).unwrap();
            let mut out = inputs.clone();
            exec(&s, &red, &mut out);
            results.push(out.swap_remove(0));
        }
    }
    for r in &results[1..] {
        assert_bits_eq(r, &results[0], "SR across rank counts and algorithms");
    }
}

// ---------------------------------------------------------------------------
// The deterministic order across algorithms and rank counts.

/// `C` arbitrary f32 contributions; for every `p` with `C = m * p`, `m` a
/// power of two (and `p = 1`), each rank passes `tree_sum` of its `m`: every
/// algorithm's all-reduce, reduce-scatter and reduce give `tree_sum` of all
/// `C`, bitwise.
#[test]
fn deterministic_across_algorithms_and_rank_counts() {
    let n = 1000;
    for total in [16usize, 24, 20, 12, 7] {
        let mut g = Gen(total as u64);
        let contributions: Vec<Vec<f32>> = (0..total)
            .map(|_| (0..n).map(|_| g.in_range(-24, 24)).collect())
            .collect();
        let refs: Vec<&[f32]> = contributions.iter().map(|c| &c[..]).collect();
        let mut want = vec![0.0f32; n];
        tree_sum(&refs, &mut want);
        let mut rank_counts = vec![1];
        let mut m = 1;
        while m <= total {
            if total % m == 0 {
                rank_counts.push(total / m);
            }
            m *= 2;
        }
        rank_counts.dedup();
        for &p in &rank_counts {
            let m = total / p;
            let inputs: Vec<Vec<f32>> = (0..p)
                .map(|r| {
                    let mut x = vec![0.0f32; n];
                    tree_sum(&refs[r * m..(r + 1) * m], &mut x);
                    x
                })
                .collect();
            for algorithm in Algorithm::ALL {
                for c in [
                    Collective::AllReduce,
                    Collective::ReduceScatter,
                    Collective::Reduce { root: p / 2 },
                ] {
                    let s = CollectiveSchedule::new(algorithm, c, p, n)
                        .unwrap()
                        .with_order(Order::Deterministic);
                    let mut out = inputs.clone();
                    exec(&s, &Reducer::new(ReduceOp::Sum), &mut out);
                    check_result(
                        &s,
                        &inputs,
                        &out,
                        &want,
                        &format!("deterministic C={total} p={p} {algorithm:?} {c:?}"),
                    );
                }
            }
        }
        // The test is not vacuous: the ring's own order differs somewhere.
        if total == 16 {
            let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 16, n).unwrap();
            assert_eq!(s.order(), Order::Schedule);
            let mut out = contributions.clone();
            exec(&s, &Reducer::new(ReduceOp::Sum), &mut out);
            assert!(
                out[0]
                    .iter()
                    .zip(&want)
                    .any(|(a, b)| a.to_bits() != b.to_bits())
            );
        }
    }
}

/// 16-bit contributions, one per rank: every algorithm, the same bits.
#[test]
fn deterministic_half_across_algorithms() {
    fn case<T: Element>() {
        let n = 513;
        for p in [3, 5, 8, 11, 16] {
            let mut g = Gen(p as u64);
            let inputs: Vec<Vec<T>> = (0..p)
                .map(|_| {
                    (0..n)
                        .map(|_| T::store(g.in_range(-8, 8), Rounding::Nearest, 0))
                        .collect()
                })
                .collect();
            let mut first: Option<Vec<T>> = None;
            for algorithm in Algorithm::ALL {
                for op in [ReduceOp::Sum, ReduceOp::Mean] {
                    let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n)
                        .unwrap()
                        .with_order(Order::Deterministic);
                    let mut out = inputs.clone();
                    exec(&s, &Reducer::new(op).with_rounding(sr_rounding()), &mut out);
                    if op == ReduceOp::Sum {
                        match &first {
                            None => first = Some(out[0].clone()),
                            Some(f) => assert_bits_eq(
                                &out[0],
                                f,
                                &format!("{} p={p} {algorithm:?}", T::NAME),
                            ),
                        }
                    }
                    for o in &out[1..] {
                        assert_bits_eq(o, &out[0], "ranks differ");
                    }
                }
            }
        }
    }
    case::<f16>();
    case::<bf16>();
}

#[test]
fn tree_sum_order() {
    let c: Vec<[f32; 1]> = [1.0f32, 1.0e8, -1.0e8, 1.0, 3.0]
        .iter()
        .map(|&x| [x])
        .collect();
    let refs: Vec<&[f32]> = c.iter().map(|x| &x[..]).collect();
    let mut out = [0.0f32];
    // C = 5: ((c0 + c1) + c2) + (c3 + c4).
    tree_sum(&refs, &mut out);
    assert_eq!(out[0], ((1.0f32 + 1.0e8) + -1.0e8) + (1.0 + 3.0));
    tree_sum(&refs[..4], &mut out);
    assert_eq!(out[0], (1.0f32 + 1.0e8) + (-1.0e8 + 1.0));
    tree_sum::<f32>(&[], &mut out);
    assert_eq!(out[0].to_bits(), 0);
    // Pinned: C = 6 seeded values.
    let mut g = Gen(2024);
    let c: Vec<Vec<f32>> = (0..6).map(|_| vec![g.in_range(-20, 20)]).collect();
    let refs: Vec<&[f32]> = c.iter().map(|x| &x[..]).collect();
    tree_sum(&refs, &mut out);
    let v: Vec<f32> = c.iter().map(|x| x[0]).collect();
    assert_eq!(out[0], ((v[0] + v[1]) + (v[2] + v[3])) + (v[4] + v[5]));
}

// ---------------------------------------------------------------------------
// Bytes on the wire (SEMANTICS.md section 4).

fn sent(s: &CollectiveSchedule, op: ReduceOp, elem: usize) -> Vec<usize> {
    let mut v = vec![0; s.size()];
    let mut f = |t: Transfer| v[t.from] += if elem == 4 { t.bytes / 4 } else { t.bytes };
    match elem {
        4 => s.transfers::<f32>(op, &mut f),
        _ => s.transfers::<f16>(op, &mut f),
    }
    v
}

#[test]
fn bytes_match_the_formulas() {
    let sum = ReduceOp::Sum;
    for p in 2..=16usize {
        for n in [p * 5, p * 5 + 1, 1000, 10007, p - 1] {
            let sched = |a, c| CollectiveSchedule::new(a, c, p, n).unwrap();
            let f = n.div_ceil(p);
            let (h0, h1) = (f - f / 2, f / 2);
            // Ring all-reduce: 2 n (p - 1) / p per rank, padding counted.
            for a in [Algorithm::Ring, Algorithm::BidirectionalRing] {
                assert_eq!(
                    sent(&sched(a, Collective::AllReduce), sum, 4),
                    vec![2 * (p - 1) * f; p]
                );
                assert_eq!(
                    sent(&sched(a, Collective::ReduceScatter), sum, 4),
                    vec![(p - 1) * f; p]
                );
                assert_eq!(
                    sent(&sched(a, Collective::AllGather), sum, 4),
                    vec![(p - 1) * f; p]
                );
                let total = |c| sent(&sched(a, c), sum, 4).iter().sum::<usize>();
                assert_eq!(total(Collective::Reduce { root: 1 }), (p - 1) * p * f);
                assert_eq!(total(Collective::Broadcast { root: 1 }), (p - 1) * p * f);
            }
            let chain = sent(
                &sched(Algorithm::Ring, Collective::Reduce { root: 0 }),
                sum,
                4,
            );
            assert_eq!(chain[0], 0);
            assert!(chain[1..].iter().all(|&x| x == p * f));
            // 16-bit ring all-reduce: the first hop of a reduction carries a
            // 16-bit contribution, later hops f32 partial sums, the
            // all-gather 16-bit results; Max partials stay 16-bit.
            let ring = sched(Algorithm::Ring, Collective::AllReduce);
            assert_eq!(
                sent(&ring, sum, 2),
                vec![f * 2 + f * 4 * (p - 2) + (p - 1) * f * 2; p]
            );
            assert_eq!(sent(&ring, ReduceOp::Max, 2), vec![2 * (p - 1) * f * 2; p]);
            // Halving-doubling: the same per rank for powers of two; for
            // others the fold and unfold move whole buffers.
            let hd = |c| sent(&sched(Algorithm::HalvingDoubling, c), sum, 4);
            let big = 1 << p.ilog2();
            let r = p - big;
            if r == 0 {
                assert_eq!(hd(Collective::AllReduce), vec![2 * (p - 1) * f; p]);
                assert_eq!(hd(Collective::ReduceScatter), vec![(p - 1) * f; p]);
                assert_eq!(hd(Collective::AllGather), vec![(p - 1) * f; p]);
            }
            let total = |v: Vec<usize>| v.iter().sum::<usize>();
            assert_eq!(
                total(hd(Collective::AllReduce)),
                2 * r * p * f + 2 * p * f * (big - 1)
            );
            assert_eq!(
                total(hd(Collective::ReduceScatter)),
                r * p * f + p * f * (big - 1) + r * f
            );
            assert_eq!(
                total(hd(Collective::AllGather)),
                r * f + p * f * (big - 1) + r * p * f
            );
            // Double binary tree: every edge of each tree carries every
            // chunk up and down (all-reduce), or once (all-gather).
            let dbt = |c| total(sent(&sched(Algorithm::DoubleBinaryTree, c), sum, 4));
            assert_eq!(dbt(Collective::AllReduce), 2 * (p - 1) * p * (h0 + h1));
            assert_eq!(dbt(Collective::AllGather), (p - 1) * p * (h0 + h1));
        }
    }
}

/// What the deterministic order costs on the wire (elements of the
/// reduction phase relative to the schedule's own order), as documented.
#[test]
fn deterministic_cost() {
    let elements = |a, c, p, order| {
        let s = CollectiveSchedule::new(a, c, p, p * 64)
            .unwrap()
            .with_order(order);
        let mut e = 0;
        s.transfers::<f32>(ReduceOp::Sum, |t| {
            if matches!(t.kind, Kind::Reduce { .. }) {
                e += t.elements;
            }
        });
        e
    };
    let ratio = |a, c, p| {
        elements(a, c, p, Order::Deterministic) as f64 / elements(a, c, p, Order::Schedule) as f64
    };
    // Ring reduce-scatter: sum over messages of the subtrees covered.
    for (p, want) in [
        (2, 1.0),
        (3, 4.0 / 3.0),
        (4, 18.0 / 12.0),
        (8, 120.0 / 56.0),
        (16, 696.0 / 240.0),
    ] {
        assert_eq!(
            ratio(Algorithm::Ring, Collective::ReduceScatter, p),
            want,
            "p={p}"
        );
        assert_eq!(
            ratio(Algorithm::BidirectionalRing, Collective::ReduceScatter, p),
            want,
            "p={p}"
        );
    }
    for p in 1..=16 {
        assert_eq!(
            ratio(Algorithm::HalvingDoubling, Collective::AllReduce, p.max(2)),
            1.0
        );
        // Max needs no order: one partial per message.
        let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, p, 100)
            .unwrap()
            .with_order(Order::Deterministic);
        s.transfers::<f32>(ReduceOp::Max, |t| assert_eq!(t.partials, 1));
        assert_eq!(s.scratch_len::<f32>(ReduceOp::Max), 0);
        let d = CollectiveSchedule::new(Algorithm::DoubleBinaryTree, Collective::AllReduce, p, 100)
            .unwrap();
        let det = d.with_order(Order::Deterministic);
        let expected_scratch = if p > 2 { (p - 1) * 100 } else { 0 };
        assert_eq!(det.scratch_len::<f32>(ReduceOp::Sum), expected_scratch);
        assert_eq!(
            d.scratch_len::<f16>(ReduceOp::Sum),
            if p > 1 { p * 100 } else { 100 }
        );
    }
    let dbt: Vec<(usize, f64)> = [4, 8, 16]
        .into_iter()
        .map(|p| {
            (
                p,
                ratio(Algorithm::DoubleBinaryTree, Collective::AllReduce, p),
            )
        })
        .collect();
    for &(p, r) in &dbt {
        assert!(r > 1.0 && r < 3.0, "DBT p={p}: {r}");
    }
    println!("deterministic order, reduction-phase elements / schedule order: DBT {dbt:?}");
}

// ---------------------------------------------------------------------------
// Errors and panics.

#[test]
fn errors() {
    let ar = Collective::AllReduce;
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, ar, 0, 10),
        Err(Error::NoRanks)
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, ar, CollectiveSchedule::MAX_RANKS + 1, 10),
        Err(Error::TooManyRanks {
            size: CollectiveSchedule::MAX_RANKS + 1,
            max: CollectiveSchedule::MAX_RANKS
        })
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, Collective::Reduce { root: 4 }, 4, 10),
        Err(Error::RankOutOfRange { rank: 4, size: 4 })
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, Collective::Broadcast { root: 9 }, 4, 10),
        Err(Error::RankOutOfRange { rank: 9, size: 4 })
    );
    assert_eq!(
        CollectiveSchedule::new(Algorithm::Ring, ar, 3, usize::MAX / 2),
        Err(Error::TooLong {
            len: usize::MAX / 2,
            size: 3
        })
    );

    let s = CollectiveSchedule::new(Algorithm::Ring, ar, 3, 4).unwrap();
    let red = Reducer::new(ReduceOp::Sum);
    let mut a = [1.0f32; 4];
    let mut b = [2.0f32; 4];
    let mut c = [3.0f32; 5];
    let mut bufs = [&mut a[..], &mut b[..]];
    assert_eq!(
        collective::execute(&s, &red, &mut bufs, &mut [], |_| {}),
        Err(Error::BufferCount {
            expected: 3,
            found: 2
        })
    );
    let mut d = [4.0f32; 4];
    let mut bufs = [&mut a[..], &mut c[..], &mut d[..]];
    assert_eq!(
        collective::execute(&s, &red, &mut bufs, &mut [], |_| {}),
        Err(Error::BufferLength {
            rank: 1,
            expected: 4,
            found: 5
        })
    );
    let mut h: Vec<Vec<f16>> = vec![vec![f16::ONE; 4]; 3];
    let mut hb: Vec<&mut [f16]> = h.iter_mut().map(|x| &mut x[..]).collect();
    let mut small = [0.0f32; 11];
    assert_eq!(
        collective::execute(&s, &red, &mut hb, &mut small, |_| {}),
        Err(Error::ScratchTooSmall {
            needed: 12,
            available: 11
        })
    );
    // Nothing was written.
    assert!(h.iter().all(|x| x.iter().all(|&v| v == f16::ONE)));
    assert_eq!(a, [1.0; 4]);
    let ins: [&[f32]; 3] = [&[1.0; 4], &[1.0; 4], &[1.0; 3]];
    let mut o: Vec<Vec<f32>> = vec![vec![0.0; 4]; 3];
    let mut ob: Vec<&mut [f32]> = o.iter_mut().map(|x| &mut x[..]).collect();
    assert_eq!(
        collective::execute_into(&s, &red, &ins, &mut ob, &mut [], |_| {}),
        Err(Error::BufferLength {
            rank: 2,
            expected: 4,
            found: 3
        })
    );
    for e in [
        Error::NoRanks,
        Error::TooManyRanks { size: 1, max: 0 },
        Error::RankOutOfRange { rank: 5, size: 4 },
        Error::TooLong { len: 1, size: 2 },
        Error::BufferCount {
            expected: 1,
            found: 2,
        },
        Error::BufferLength {
            rank: 1,
            expected: 2,
            found: 3,
        },
        Error::ScratchTooSmall {
            needed: 1,
            available: 0,
        },
    ] {
        let msg = e.to_string();
        assert!(!msg.is_empty() && !msg.ends_with('.'), "{msg}");
        let _: &dyn std::error::Error = &e;
    }
}

#[test]
#[should_panic(expected = "rank 4 of a group of 4")]
fn ops_panics_on_a_rank_outside_the_group() {
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    let _ = s.ops(4, 0);
}

#[test]
#[should_panic(expected = "step 6 of a 6-step schedule")]
fn ops_panics_on_a_step_past_the_end() {
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    let _ = s.ops(0, 6);
}

#[test]
#[should_panic(expected = "tree_sum: contribution 1 has 2 elements, out 3")]
fn tree_sum_panics_on_a_length_mismatch() {
    let mut out = [0.0f32; 3];
    tree_sum::<f32>(&[&[1.0; 3], &[1.0; 2]], &mut out);
}

#[test]
fn fragments_and_padding() {
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 10).unwrap();
    assert_eq!((s.fragment_len(), s.padded_len()), (3, 12));
    assert_eq!(s.fragment(3), 9..10);
    let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 8, 3).unwrap();
    assert_eq!(s.fragment(2), 2..3);
    assert_eq!(s.fragment(5), 3..3);
    // Wire counts include padding, payload does not.
    let mut e = (0, 0);
    s.transfers::<f32>(ReduceOp::Sum, |t| {
        e.0 += t.elements;
        e.1 += t.payload;
    });
    assert_eq!(e, (2 * 7 * 8, 2 * 7 * 3));
    let empty =
        CollectiveSchedule::new(Algorithm::DoubleBinaryTree, Collective::AllReduce, 5, 0).unwrap();
    for step in 0..empty.steps() {
        for r in 0..5 {
            assert!(empty.ops(r, step).is_empty());
        }
    }
}
