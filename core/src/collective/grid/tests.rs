use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::super::{Algorithm, Collective, CollectiveSchedule, Order, ReduceOp, Reducer};
use super::{GRID_BITS, GRID_BLOCK};
use crate::kernels::ExactSum;

/// The order-free all-reduce of `inputs` (one buffer per rank) by
/// `algorithm`, checked to be the same on every rank.
fn all_reduce(algorithm: Algorithm, inputs: &[Vec<f32>]) -> Vec<f32> {
    let (p, n) = (inputs.len(), inputs[0].len());
    let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n)
        .unwrap()
        .with_order(Order::Free);
    let mut bufs: Vec<Vec<f32>> = inputs.to_vec();
    let mut refs: Vec<&mut [f32]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
    let sum = Reducer::new(ReduceOp::Sum);
    let mut scratch = vec![0.0f32; s.scratch_len::<f32>(ReduceOp::Sum)];
    super::super::execute(&s, &sum, &mut refs, &mut scratch, |_| {}).unwrap();
    for b in &bufs[1..] {
        assert_eq!(bits(b), bits(&bufs[0]), "{algorithm:?} p {p}: ranks differ");
    }
    bufs.swap_remove(0)
}

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

/// `|x| = m 2^e` with `m` an integer below `2^24`.
fn parts(x: f32) -> (i128, i32) {
    let b = x.to_bits();
    let (field, frac) = (((b >> 23) & 0xff) as i32, i128::from(b & 0x7f_ffff));
    let (m, e) = if field == 0 {
        (frac, -149)
    } else {
        (frac | 1 << 23, field - 150)
    };
    (if x < 0.0 { -m } else { m }, e)
}

/// The oracle, in integers: the block's grid from the exponents of its
/// finite values, each value rounded to it (ties to even), the exact
/// integer sum rounded once to f32 through [`ExactSum`].
fn oracle(inputs: &[Vec<f32>], i: usize) -> f32 {
    let block = i / GRID_BLOCK * GRID_BLOCK;
    let end = (block + GRID_BLOCK).min(inputs[0].len());
    let mut bound = -149 + GRID_BITS; // E: every finite |x| < 2^E
    for x in inputs.iter().flat_map(|b| &b[block..end]) {
        if x.is_finite() && *x != 0.0 {
            let (m, e) = parts(*x);
            bound = bound.max(e + 128 - m.unsigned_abs().leading_zeros() as i32);
        }
    }
    let g = (bound - GRID_BITS).max(-149);
    let column: Vec<f32> = inputs.iter().map(|b| b[i]).collect();
    if column.iter().any(|x| x.is_nan())
        || (column.contains(&f32::INFINITY) && column.contains(&f32::NEG_INFINITY))
    {
        return f32::NAN;
    }
    if let Some(inf) = column.iter().find(|x| x.is_infinite()) {
        return *inf;
    }
    let mut total: i128 = 0;
    for &x in &column {
        let (m, e) = parts(x);
        total += if e >= g {
            m << (e - g)
        } else {
            let k = (g - e).min(100);
            let (q, r, half) = (m >> k, m & ((1 << k) - 1), 1i128 << (k - 1));
            q + i128::from(r > half || (r == half && q & 1 == 1))
        };
    }
    // total 2^g, exactly, in 16-bit pieces, rounded once.
    let mut exact = ExactSum::new();
    let (negative, mut t) = (total < 0, total.unsigned_abs());
    let mut shift = g;
    while t != 0 {
        if t & 0xffff == 0 {
            (t, shift) = (t >> 16, shift + 16);
            continue;
        }
        let piece =
            (t & 0xffff) as f32 * 2f32.powi(shift.max(-126)) * 2f32.powi((shift + 126).min(0));
        exact.add(if negative { -piece } else { piece });
        t >>= 16;
        shift += 16;
    }
    exact.to_f32()
}

fn check_against_oracle(inputs: &[Vec<f32>]) {
    let n = inputs[0].len();
    let want: Vec<f32> = (0..n).map(|i| oracle(inputs, i)).collect();
    for algorithm in Algorithm::ALL {
        let got = all_reduce(algorithm, inputs);
        assert_eq!(bits(&got), bits(&want), "{algorithm:?} p {}", inputs.len());
    }
}

/// Adversarial columns: cancellation, huge dynamic range, subnormals,
/// overflow, infinities, NaN, signed zeros, values off the grid.
fn adversarial(p: usize) -> Vec<Vec<f32>> {
    let columns: [&[f32]; 12] = [
        &[1e30, 1.0, -1e30, 0.5, 3.0],
        &[f32::MAX, f32::MAX, -f32::MAX, 1.0],
        &[f32::MAX, f32::MAX],
        &[1e-45, 1e-45, -3e-45, 1.1754942e-38, 5e-40],
        &[f32::INFINITY, 1.0, -5.0],
        &[f32::INFINITY, f32::NEG_INFINITY],
        &[f32::NAN, 1.0, f32::INFINITY],
        &[-0.0, -0.0, -0.0],
        &[16_777_216.0, 1.0, 1.0, -16_777_216.0],
        &[1.0, 2f32.powi(-30), 2f32.powi(-31) * 3.0, -1.0],
        &[0.1, 0.2, 0.3, -0.6, 1e-7],
        &[3.0e38, 1e-38, -3.0e38, 7e-39],
    ];
    let mut inputs = vec![vec![0.0f32; 2 * GRID_BLOCK + 17]; p];
    for (r, buf) in inputs.iter_mut().enumerate() {
        for (i, x) in buf.iter_mut().enumerate() {
            let column = columns[i % columns.len()];
            // Rank r takes the column's values r, r + p, ... added up
            // in its own position of the column: here, one each.
            *x = column.get(r).copied().unwrap_or(0.0);
            if i >= GRID_BLOCK && i % 7 == 0 {
                *x *= 2f32.powi(-(i as i32 % 60)); // blocks of mixed range
            }
        }
    }
    inputs
}

#[test]
fn every_algorithm_and_rank_count_gives_the_oracle_on_adversarial_inputs() {
    for p in 1..=8 {
        check_against_oracle(&adversarial(p));
    }
}

#[test]
fn values_on_the_grid_sum_exactly() {
    // Within 2^9 of the block's bound: the exact sum rounded once.
    let inputs: Vec<Vec<f32>> = (0..5)
        .map(|r| {
            (0..100)
                .map(|i| (1.0 + (i * r) as f32 / 7.0) * if r % 2 == 0 { 1.0 } else { -1.000_1 })
                .collect()
        })
        .collect();
    let got = all_reduce(Algorithm::Ring, &inputs);
    for (i, &x) in got.iter().enumerate() {
        let mut exact = ExactSum::new();
        inputs.iter().for_each(|b| exact.add(b[i]));
        assert_eq!(x.to_bits(), exact.to_f32().to_bits(), "position {i}");
    }
}

#[test]
fn the_ring_sends_the_plain_bytes_at_two_ranks_and_under_one_and_a_half_times_beyond() {
    // The module docs' table: (1 + 2 (p - 2) + (p - 1)) f against 2 (p - 1) f.
    for p in 2..=16usize {
        let n = 1024 * p;
        let bytes = |order| {
            let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, p, n)
                .unwrap()
                .with_order(order);
            let mut total = 0;
            s.transfers::<f32>(ReduceOp::Sum, |t| total += t.bytes);
            total
        };
        let (free, plain) = (bytes(Order::Free), bytes(Order::Schedule));
        assert_eq!(free * 2 * (p - 1), plain * (3 * p - 4), "p {p}");
        assert!(free * 2 < plain * 3);
    }
}

/// Values about the grid `2^g`: on it and off it, ties, the bounds
/// of the f32 rounding (`2^(g + 23)`, `2^(g + 22)`) and of the block
/// (`2^(g + 32)`), zeros, subnormals, infinities and NaN.
fn about_grid(g: i32) -> Vec<f32> {
    let p = |k: i32| 2f64.powi(k);
    let mut v: Vec<f64> = vec![0.0, -0.0, 1.0, 3.0, 5.0, 0.5, 1.5, 2.5, 0.25, 0.75, 1e-7];
    v.extend([0.5, 0.75, 1.0, 1.25, 1.5, 1.75].map(|m| m * p(23)));
    v.extend([
        p(23) - 1.0,
        p(23) - 0.5,
        p(22) + 0.5,
        p(22) - 0.25,
        p(24) - 1.0,
        p(24) - 2.0,
    ]);
    v.extend([p(31), p(32) - p(8), 12_345_678.5, 1_234_567.25, 3.0 * p(29)]);
    let mut out: Vec<f32> = Vec::new();
    for x in v {
        let x = (x * p(g)) as f32;
        out.extend([x, -x]);
    }
    out.extend([
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        f32::from_bits(1),
        -1e-45,
    ]);
    out.retain(|x| !x.is_finite() || (f64::from(x.abs()) < p(g + 32)));
    out
}

#[test]
fn pair_sums_are_the_grid_sums_on_every_backend() {
    use crate::arch::{self, Backend};
    for g in [-149, -140, -127, -126, -103, -40, -1, 0, 17, 95, 96] {
        let values = about_grid(g);
        let n = values.len();
        // Every pair of values, once each way: position k pairs value
        // k / n with value k % n, in blocks of one exponent.
        let a: Vec<f32> = (0..n * n).map(|k| values[k / n]).collect();
        let b: Vec<f32> = (0..n * n).map(|k| values[k % n]).collect();
        let exps = vec![g as f32; super::blocks(n * n)];
        let twin: Vec<u32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                let q = super::round_to_grid(x, g) + super::round_to_grid(y, g);
                super::from_grid(q, g).to_bits()
            })
            .collect();
        let three: Vec<u32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                let (x, y) = (super::round_to_grid(x, g), super::round_to_grid(y, g));
                super::from_grid(y + x - x, g).to_bits()
            })
            .collect();
        for backend in Backend::ALL {
            // A backend this CPU lacks is an error: nothing to check.
            let _ = arch::with_backend(backend, || {
                let mut x = a.clone();
                super::pair_sum_in_place(&mut x, &b, &exps, 0);
                assert_eq!(bits(&x), twin, "pair_sum_in_place g {g} {backend}");
                // The f64 sums of any count: the same pair, then a
                // third contribution that cancels the first.
                let mut x = a.clone();
                super::sum_in_place(&mut x, &[&b[..]], &exps, 0);
                assert_eq!(bits(&x), twin, "sum_in_place g {g} {backend}");
                let neg: Vec<f32> = a.iter().map(|x| -x).collect();
                let mut x = b.clone();
                super::sum_in_place(&mut x, &[&a[..], &neg[..]], &exps, 0);
                assert_eq!(bits(&x), three, "sum_in_place of 3, g {g} {backend}");
            });
        }
    }
}

#[test]
fn pair_exponents_are_the_max_of_both_blocks() {
    let a: Vec<f32> = (0..700).map(|i| (i as f32 - 350.0) * 1e-3).collect();
    let mut b: Vec<f32> = (0..700).map(|i| i as f32 * 1e-6).collect();
    b[600] = f32::INFINITY;
    b[601] = 3e5;
    b[650] = f32::NAN;
    // From position 100: a first block in part, then whole ones.
    let mut got = [0.0f32; 3];
    super::pair_exponents(&a[100..], &b[100..], 100, &mut got);
    let mut want = [0.0f32; 3];
    for (k, w) in want.iter_mut().enumerate() {
        let run = (k * GRID_BLOCK).max(100)..((k + 1) * GRID_BLOCK).min(700);
        *w = super::block_exponent(&a[run.clone()]).max(super::block_exponent(&b[run]));
    }
    assert_eq!(got, want);
    assert_eq!(want[2], 19.0 - 32.0); // 3e5 < 2^19
}

fn value() -> impl Strategy<Value = f32> {
    prop_oneof![
        8 => -1e3f32..1e3,
        2 => any::<f32>(),
        1 => -1e-40f32..1e-40,
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// The ranks' contributions permuted, any algorithm and rank count:
    /// the same bits, the oracle's.
    #[test]
    fn order_and_algorithm_do_not_matter(
        columns in prop::collection::vec(prop::collection::vec(value(), 1..=8), 1..40),
        rotate in 0usize..8,
    ) {
        let p = columns.iter().map(Vec::len).min().unwrap();
        let inputs: Vec<Vec<f32>> = (0..p).map(|r| columns.iter().map(|c| c[r]).collect()).collect();
        check_against_oracle(&inputs);
        let mut permuted = inputs.clone();
        permuted.rotate_left(rotate % p);
        permuted.reverse();
        for algorithm in Algorithm::ALL {
            prop_assert_eq!(bits(&all_reduce(algorithm, &permuted)), bits(&all_reduce(Algorithm::Ring, &inputs)));
        }
    }

    /// Grid sums merge exactly: contributions summed in any grouping
    /// (each group's grid sum, then the groups') give the same integers.
    #[test]
    fn grid_sums_split_and_merge_exactly(
        values in prop::collection::vec(value(), 2..64),
        cut in 1usize..63,
    ) {
        let cut = cut.min(values.len() - 1);
        let g = super::block_exponent(&values) as i32;
        let q: Vec<f64> = values.iter().map(|&x| super::round_to_grid(x, g)).collect();
        let forward = q.iter().fold(0.0f64, |a, &b| a + b);
        let backward = q.iter().rev().fold(0.0f64, |a, &b| a + b);
        let (a, b) = q.split_at(cut);
        let split = b.iter().sum::<f64>() + a.iter().sum::<f64>();
        prop_assert_eq!(forward.to_bits() , backward.to_bits());
        if !forward.is_nan() {
            prop_assert_eq!(forward.to_bits(), split.to_bits());
        }
    }
}
