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

/// Stochastic rounding at a fixed stream and offset.
fn sr_rounding() -> Rounding {
    Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(7, 3), Overflow::Saturate),
        first_index: 1_000_003,
    }
}

mod bytes;
mod deterministic;
mod errors;
mod exact;
mod schedules;
mod special;
mod stochastic;
