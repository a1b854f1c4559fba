//! The rounded GEMM against an f64 oracle that rounds with
//! `Format::chop`, the product-exactness claim on every pair of values of
//! the narrow formats, and proptest properties.

use std::vec;
use std::vec::Vec;

use core::num::NonZeroUsize;

use proptest::prelude::*;

use super::super::block_oracle::{Gen, float_values, round_to};
use super::{MatmulAccumulator, MatmulError, RoundedMatmul, exact_products};
use crate::fp::{Format, Mode, Round};
use crate::rng::RandomStream;

/// The named formats of 8 bits and fewer with a sign (all but E8M0).
pub(in crate::fp) const NARROW: [Format; 10] = [
    Format::E3M4,
    Format::E4M3,
    Format::E4M3FN,
    Format::E4M3FNUZ,
    Format::E4M3B11FNUZ,
    Format::E5M2,
    Format::E5M2FNUZ,
    Format::E2M3FN,
    Format::E3M2FN,
    Format::E2M1FN,
];

fn finite_values(f: Format, step: usize) -> Vec<f32> {
    (0..1u32 << f.bits())
        .step_by(step)
        .map(|c| f.decode(c))
        .filter(|v| v.is_finite())
        .collect()
}

#[test]
fn products_are_exact_where_claimed() {
    for f in NARROW {
        assert!(exact_products(f), "{f:?}");
        let v = finite_values(f, 1);
        for a in &v {
            for b in &v {
                assert_eq!(
                    f64::from(a * b),
                    f64::from(*a) * f64::from(*b),
                    "{f:?} {a} {b}"
                );
            }
        }
    }
    assert!(exact_products(Format::F16));
    let (a, b) = (
        finite_values(Format::F16, 97),
        finite_values(Format::F16, 89),
    );
    for x in &a {
        for y in &b {
            assert_eq!(f64::from(x * y), f64::from(*x) * f64::from(*y));
        }
    }
    assert!(!exact_products(Format::BF16) && !exact_products(Format::TF32));
    assert!(!exact_products(Format::F32));
    let tiny = Format::BF16.min_subnormal();
    assert_eq!(tiny * tiny, 0.0); // why bf16 is excluded
}

/// The oracle: f64 sums (exact for the test data: checked), converted
/// to f32 rounding to odd (or to nearest for 23- and 24-bit
/// accumulators), rounded with `Format::chop`.
fn oracle_dot(
    acc: MatmulAccumulator,
    a: &[f32],
    b: &[f32],
    stream: RandomStream,
    index: u64,
) -> f32 {
    let to_f32 = |sum: f64| {
        let r = sum as f32;
        if acc.format.precision() > 22 || f64::from(r) == sum || r.to_bits() & 1 == 1 {
            return r;
        }
        // Step one pattern toward `sum`.
        if f64::from(r).abs() > sum.abs() {
            f32::from_bits(r.to_bits() - 1)
        } else {
            f32::from_bits(r.to_bits() + 1)
        }
    };
    let mut total = 0.0f32;
    let mut part = 0.0f32;
    for t in 0..a.len() {
        let p = f64::from(a[t]) * f64::from(b[t]);
        let sum = f64::from(part) + p;
        assert_eq!(
            sum - p,
            f64::from(part),
            "test data must keep f64 sums exact"
        );
        part = acc
            .format
            .chop(to_f32(sum), acc.round, stream, index + t as u64);
        if acc.promote_every.is_some_and(|k| (t + 1) % k.get() == 0) {
            total = (f64::from(total) + f64::from(part)) as f32;
            part = 0.0;
        }
    }
    match acc.promote_every {
        None => part,
        Some(_) => (f64::from(total) + f64::from(part)) as f32,
    }
}

/// The claim behind round-to-odd, checked without it: for deterministic
/// modes each addition rounds the exact (f64) sum once to the
/// accumulator's values, listed from the format's parameters.
fn exact_dot(acc: MatmulAccumulator, values: &[f64], a: &[f32], b: &[f32]) -> f32 {
    let mut total = 0.0f32;
    let mut part = 0.0f64;
    for t in 0..a.len() {
        let sum = part + f64::from(a[t]) * f64::from(b[t]);
        part = round_to(values, sum, acc.round.mode);
        if acc.promote_every.is_some_and(|k| (t + 1) % k.get() == 0) {
            total = (f64::from(total) + part) as f32;
            part = 0.0;
        }
    }
    match acc.promote_every {
        None => part as f32,
        Some(_) => (f64::from(total) + part) as f32,
    }
}

/// The nonnegative values of the accumulator formats the exact check uses.
fn accumulator_values(f: Format) -> Option<Vec<f64>> {
    let bf16_max = f64::from(f32::from_bits(0x7f7f_0000));
    match f {
        Format::F16 => Some(float_values(5, 10, 15, 65504.0)),
        Format::BF16 => Some(float_values(8, 7, 127, bf16_max)),
        Format::E5M2 => Some(float_values(5, 2, 15, 57344.0)),
        Format::E4M3FN => Some(float_values(4, 3, 7, 448.0)),
        _ => None,
    }
}

fn matrix(g: &mut Gen, values: &[f32], len: usize) -> Vec<f32> {
    (0..len)
        .map(|_| values[g.below(values.len() as u64) as usize])
        .collect()
}

#[test]
fn gemm_matches_the_oracle() {
    let mut g = Gen(31);
    let stream = RandomStream::new(6, 1);
    let (m, n, k) = (3, 4, 37);
    for input in [Format::E4M3FN, Format::E5M2, Format::E2M1FN] {
        // Inputs up to 2^6: sums stay within f64's exact span.
        let values: Vec<f32> = finite_values(input, 1)
            .into_iter()
            .filter(|v| v.abs() <= 64.0)
            .collect();
        let (a, b) = (
            matrix(&mut g, &values, m * k),
            matrix(&mut g, &values, k * n),
        );
        for format in [
            Format::F16,
            Format::BF16,
            Format::E5M2,
            Format::E4M3FN,
            Format::TF32,
            Format::F32,
        ] {
            let exact = accumulator_values(format);
            for mode in [
                Mode::NearestEven,
                Mode::TowardZero,
                Mode::Up,
                Mode::ToOdd,
                Mode::Stochastic,
                Mode::StochasticBits(4),
            ] {
                for every in [None, NonZeroUsize::new(1), NonZeroUsize::new(4)] {
                    let round = Round::new(mode).with_overflow(crate::fp::Overflow::Saturate);
                    let acc = MatmulAccumulator::new(format, round).promote_every(every);
                    let mm = RoundedMatmul::new(input, acc);
                    let mut c = vec![0.0f32; m * n];
                    mm.gemm((m, n, k), &a, &b, &mut c, &stream, 100).unwrap();
                    for i in 0..m {
                        for j in 0..n {
                            let col: Vec<f32> = (0..k).map(|t| b[t * n + j]).collect();
                            let index = 100 + ((i * n + j) * k) as u64;
                            let row = &a[i * k..(i + 1) * k];
                            let want = oracle_dot(acc, row, &col, stream, index);
                            assert_eq!(
                                c[i * n + j].to_bits(),
                                want.to_bits(),
                                "{input:?} {format:?} {mode:?} {every:?}"
                            );
                            if let (Some(v), false) = (&exact, mode.is_stochastic()) {
                                let sure = exact_dot(acc, v, row, &col);
                                assert_eq!(
                                    c[i * n + j].to_bits(),
                                    sure.to_bits(),
                                    "{format:?} {mode:?}"
                                );
                            }
                        }
                    }
                    // Rows split: the same bits.
                    let mut lower = vec![0.0f32; n];
                    mm.gemm(
                        (1, n, k),
                        &a[2 * k..],
                        &b,
                        &mut lower,
                        &stream,
                        100 + (2 * n * k) as u64,
                    )
                    .unwrap();
                    assert_eq!(&c[2 * n..], &lower[..]);
                }
            }
        }
    }
}

#[test]
fn round_to_odd_makes_the_sum_exactly_rounded() {
    let s = RandomStream::new(0, 0);
    let bf16 = |mode| {
        RoundedMatmul::new(
            Format::F32,
            MatmulAccumulator::new(Format::BF16, Round::new(mode)),
        )
    };
    // 1 + 2^-30: f32's nearest sum is 1, but the exact sum is above it,
    // so toward +inf the bf16 result is 1 + 2^-7.
    let got = bf16(Mode::Up).dot(&[1.0, 2f32.powi(-30)], &[1.0, 1.0], &s, 0);
    assert_eq!(got, Ok(1.0 + 2f32.powi(-7)));
    // 1 + 2^-8 + 2^-28: f32's nearest sum 1 + 2^-8 is a bf16 tie (which
    // goes down to even); the exact sum is above the tie: up.
    let p = 2f32.powi(-8) * (1.0 + 2f32.powi(-20));
    let got = bf16(Mode::NearestEven).dot(&[1.0, p], &[1.0, 1.0], &s, 0);
    assert_eq!(got, Ok(1.0 + 2f32.powi(-7)));
}

#[test]
fn errors_carry_their_data() {
    let mm = RoundedMatmul::new(
        Format::E2M1FN,
        MatmulAccumulator::new(Format::F16, Round::NEAREST_EVEN),
    );
    let s = RandomStream::new(0, 0);
    let mut c = [0.0f32; 4];
    assert_eq!(
        mm.gemm((2, 2, 3), &[1.0; 6], &[1.0; 5], &mut c, &s, 0),
        Err(MatmulError::Length {
            operand: "b",
            expected: 6,
            got: 5
        })
    );
    assert_eq!(
        mm.gemm((2, 2, 1), &[1.0, 2.5], &[1.0; 2], &mut c, &s, 0),
        Err(MatmulError::NotRepresentable {
            operand: "a",
            index: 1,
            value: 2.5
        })
    );
    assert_eq!(mm.dot(&[], &[], &s, 0), Ok(0.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn f32_accumulator_promoted_every_addition_is_the_f32_dot(
        pairs in prop::collection::vec((-1e6f32..1e6, -1e6f32..1e6), 0..50),
    ) {
        let (a, b): (Vec<f32>, Vec<f32>) = pairs.into_iter().unzip();
        let acc = MatmulAccumulator::new(Format::F32, Round::NEAREST_EVEN).promote_every(NonZeroUsize::new(1));
        let got = RoundedMatmul::new(Format::F32, acc).dot(&a, &b, &RandomStream::new(0, 0), 0).unwrap();
        let mut want = 0.0f32;
        for (x, y) in a.iter().zip(&b) {
            want += x * y;
        }
        prop_assert_eq!(got.to_bits(), want.to_bits());
    }

    #[test]
    fn promoting_past_the_end_is_never_promoting(
        codes in prop::collection::vec((any::<u8>(), any::<u8>()), 1..40),
        seed in any::<u64>(),
    ) {
        let f = Format::E4M3FN;
        let fin = |c: u8| { let v = f.decode(u32::from(c)); if v.is_nan() { 0.0 } else { v } };
        let (a, b): (Vec<f32>, Vec<f32>) = codes.iter().map(|(x, y)| (fin(*x), fin(*y))).unzip();
        let acc = MatmulAccumulator::new(Format::BF16, Round::STOCHASTIC);
        let s = RandomStream::new(seed, 0);
        let never = RoundedMatmul::new(f, acc).dot(&a, &b, &s, 9).unwrap();
        let late = RoundedMatmul::new(f, acc.promote_every(NonZeroUsize::new(a.len()))).dot(&a, &b, &s, 9).unwrap();
        // Promoting once at the end adds the part to +0.0: equal values.
        prop_assert!(never == late);
    }
}

/// The lane kernel against its scalar twin on every backend this CPU has:
/// widths that take blocks, single vectors and the padded last columns;
/// accumulators with and without a lane rule; sums that overflow, NaNs
/// and infinities.
#[test]
fn gemm_lanes_equal_the_twin_on_every_backend() {
    use crate::arch::{self, Backend};
    use crate::fp::Overflow;

    let mut g = Gen(26);
    let stream = RandomStream::new(3, 0);
    for (m, n, k, hi) in [(2, 75, 40, 4), (1, 9, 130, 9)] {
        let mut a: Vec<f32> = (0..m * k).map(|_| g.float(-12, hi)).collect();
        let mut b: Vec<f32> = (0..k * n).map(|_| g.float(-12, hi)).collect();
        // NaNs of both signs meet; an infinity times a zero is one more.
        let last = a.len() - 2;
        a[3] = f32::NAN;
        a[last] = -f32::NAN;
        (b[2 * n + 1], b[4 * n + 2]) = (f32::INFINITY, -f32::INFINITY);
        for format in [Format::F16, Format::BF16, Format::E4M3FN, Format::F32] {
            for every in [None, NonZeroUsize::new(7)] {
                for overflow in [Overflow::Infinity, Overflow::Saturate] {
                    let round = Round::NEAREST_EVEN.with_overflow(overflow);
                    let acc = MatmulAccumulator::new(format, round).promote_every(every);
                    let mm = RoundedMatmul::new(Format::F32, acc);
                    let run = |backend| {
                        let mut c = vec![0.0f32; m * n];
                        arch::with_backend(backend, || {
                            mm.gemm((m, n, k), &a, &b, &mut c, &stream, 5).unwrap();
                        })
                        .unwrap();
                        c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
                    };
                    let twin = run(Backend::Scalar);
                    for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
                        assert_eq!(run(backend), twin, "{backend:?} {format:?} {every:?}");
                    }
                }
            }
        }
    }
}
