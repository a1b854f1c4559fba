//! Exact sums, dot products and matrix products (`exact_sum`, `exact_dot`,
//! `exact_gemm`): against a big-integer rational oracle on adversarial
//! inputs (cancellation, huge dynamic range, subnormals, infinities and
//! NaN), SIMD against the scalar twin on every backend, and invariance
//! under any split and order (proptest).

use std::cmp::Ordering;

use proptest::prelude::*;
use tessera_core::fp::{Element, bf16, f16};
use tessera_core::kernels::{self, ExactDot, ExactSum, GemmShape, scalar};

use crate::kernels::on_every_backend;

// ---------------------------------------------------------------------------
// The oracle: sums of dyadic rationals as big integers in units of 2^-298.

const W: usize = 10;

/// A two's-complement integer of `W` 64-bit words (640 bits).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Big([u64; W]);

impl Big {
    const ZERO: Big = Big([0; W]);

    /// `sig * 2^shift`.
    fn shifted(sig: u128, shift: u32) -> Big {
        let mut out = [0u64; W];
        let k = (shift / 64) as usize;
        let r = shift % 64;
        let words = [sig as u64, (sig >> 64) as u64, 0];
        let mut carry = 0u64;
        for (i, w) in words.iter().enumerate() {
            let v = if r == 0 { *w } else { (w << r) | carry };
            carry = if r == 0 { 0 } else { w >> (64 - r) };
            if k + i < W {
                out[k + i] |= v;
            }
        }
        Big(out)
    }

    /// An f32 magnitude pattern's value (`0x7f80_0000` reads as 2^128):
    /// the significand and `shift` with value `sig * 2^(shift - 149)`.
    fn parts(bits: u32) -> (u128, u32) {
        let exp = bits >> 23;
        let man = bits & 0x007f_ffff;
        if exp == 0 {
            (u128::from(man), 0)
        } else {
            (u128::from(man | 0x0080_0000), exp - 1)
        }
    }

    fn of_bits(bits: u32) -> Big {
        let (sig, shift) = Big::parts(bits);
        Big::shifted(sig, shift + 149)
    }

    /// `|x * y|` for finite `x`, `y`.
    fn of_product(x: f32, y: f32) -> Big {
        let (sx, ex) = Big::parts(x.to_bits() & 0x7fff_ffff);
        let (sy, ey) = Big::parts(y.to_bits() & 0x7fff_ffff);
        Big::shifted(sx * sy, ex + ey)
    }

    fn add(self, other: Big) -> Big {
        let mut out = [0u64; W];
        let mut carry = 0u128;
        for ((o, a), b) in out.iter_mut().zip(self.0).zip(other.0) {
            let s = u128::from(a) + u128::from(b) + carry;
            *o = s as u64;
            carry = s >> 64;
        }
        Big(out)
    }

    fn neg(self) -> Big {
        let mut one = [0u64; W];
        one[0] = 1;
        Big(self.0.map(|l| !l)).add(Big(one))
    }

    fn is_negative(self) -> bool {
        self.0[W - 1] >> 63 == 1
    }

    fn cmp_unsigned(self, other: Big) -> Ordering {
        self.0.iter().rev().cmp(other.0.iter().rev())
    }
}

/// The exact sum of the terms `(x, y)` (products; `y = 1` for values)
/// rounded to nearest even by brute force: binary search for the f32
/// neighbours of the big-integer total.
fn reference(terms: &[(f32, f32)]) -> f32 {
    let (mut pos_inf, mut neg_inf, mut nan) = (false, false, false);
    let mut total = Big::ZERO;
    for &(x, y) in terms {
        let p = f64::from(x) * f64::from(y); // only its class and sign
        if p.is_nan() {
            nan = true;
        } else if p == f64::INFINITY {
            pos_inf = true;
        } else if p == f64::NEG_INFINITY {
            neg_inf = true;
        } else {
            let b = Big::of_product(x, y);
            let negative = x.is_sign_negative() != y.is_sign_negative();
            total = total.add(if negative { b.neg() } else { b });
        }
    }
    if nan || (pos_inf && neg_inf) {
        return f32::NAN;
    }
    if pos_inf || neg_inf {
        return if pos_inf {
            f32::INFINITY
        } else {
            f32::NEG_INFINITY
        };
    }
    let negative = total.is_negative();
    let magnitude = if negative { total.neg() } else { total };
    let sign = u32::from(negative) << 31;
    let (mut lo, mut hi) = (0u32, 0x7f80_0000u32);
    if Big::of_bits(hi).cmp_unsigned(magnitude) != Ordering::Greater {
        return f32::from_bits(sign | hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if Big::of_bits(mid).cmp_unsigned(magnitude) == Ordering::Greater {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let below = magnitude.add(Big::of_bits(lo).neg());
    let above = Big::of_bits(hi).add(magnitude.neg());
    let pick = match below.cmp_unsigned(above) {
        Ordering::Less => lo,
        Ordering::Greater => hi,
        Ordering::Equal if lo % 2 == 0 => lo,
        Ordering::Equal => hi,
    };
    if pick == 0 && magnitude == Big::ZERO {
        return 0.0; // an exact zero is +0.0
    }
    f32::from_bits(sign | pick)
}

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

#[test]
fn the_oracle_checks_itself() {
    let one = |v: &[f32]| reference(&v.iter().map(|&x| (x, 1.0)).collect::<Vec<_>>());
    assert!(same(one(&[1.5, 2.25]), 3.75));
    assert!(same(one(&[]), 0.0));
    assert!(same(one(&[-0.0]), 0.0));
    assert!(same(one(&[f32::MAX, f32::MAX]), f32::INFINITY));
    assert!(same(one(&[1.0, 2f32.powi(-24)]), 1.0)); // tie to even
    assert!(same(reference(&[(3.0, -0.5)]), -1.5));
    let tiny = f32::from_bits(1);
    assert!(same(reference(&[(tiny, tiny)]), 0.0)); // 2^-298 rounds to +0
    assert!(same(reference(&[(tiny, -tiny)]), -0.0));
    assert!(same(
        reference(&[(1e30, 1e30), (-1e30, 1e30), (2.0, 3.0)]),
        6.0
    ));
}

// ---------------------------------------------------------------------------
// Adversarial inputs.

/// xorshift64*.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A finite f32 with its exponent field in `lo..=hi` (0: subnormal).
    fn exponent_in(&mut self, lo: u32, hi: u32) -> f32 {
        let r = self.next();
        let e = lo + (r % u64::from(hi - lo + 1)) as u32;
        let man = (r >> 20) as u32 & 0x007f_ffff;
        f32::from_bits(((r >> 63) as u32) << 31 | e << 23 | man)
    }
}

/// The kinds of data: each defeats a different shortcut.
const KINDS: [&str; 7] = [
    "narrow",      // one binade or two: the fast path
    "wide",        // every exponent, subnormals included
    "cancelling",  // huge values and their negatives, small ones between
    "subnormal",   // subnormals and the smallest normals
    "outlier",     // narrow, with one value 2^30 below per block
    "special",     // narrow, with infinities and NaN sprinkled
    "overflowing", // near f32::MAX: partial sums beyond f32
];

fn data(kind: &str, n: usize, seed: u64) -> Vec<f32> {
    let mut g = Gen(seed | 1);
    let mut v: Vec<f32> = (0..n)
        .map(|i| match kind {
            "narrow" => g.exponent_in(126, 127),
            "wide" => g.exponent_in(0, 254),
            "cancelling" => match i % 3 {
                0 => g.exponent_in(200, 230),
                _ => g.exponent_in(90, 130),
            },
            "subnormal" => g.exponent_in(0, 2),
            "outlier" if i % 200 == 7 => g.exponent_in(96, 97),
            "special" if i % 97 == 5 => [f32::INFINITY, f32::NEG_INFINITY, f32::NAN][i % 3],
            "overflowing" => g.exponent_in(253, 254),
            _ => g.exponent_in(126, 127),
        })
        .collect();
    if kind == "cancelling" {
        // Append the negatives of the huge values, then shuffle.
        let huge: Vec<f32> = v.iter().step_by(3).map(|x| -x).collect();
        v.extend(huge);
        for i in (1..v.len()).rev() {
            v.swap(i, g.below(i as u64 + 1) as usize);
        }
        v.truncate(n);
    }
    v
}

const SIZES: [usize; 6] = [0, 1, 7, 255, 256, 1000];

fn check_sum<T: Element>(x: &[T], what: &str) {
    let terms: Vec<(f32, f32)> = x.iter().map(|v| (v.load(), 1.0)).collect();
    let want = reference(&terms);
    let twin = scalar::exact_sum(x);
    assert!(same(twin, want), "{what}: twin {twin:e} oracle {want:e}");
    on_every_backend(what, || {
        assert_eq!(
            kernels::exact_sum_partial(x),
            scalar::exact_sum_partial(x),
            "{what}"
        );
        let mut d = ExactDot::new();
        x.iter().for_each(|v| d.add(v.load()));
        assert!(same(d.to_f32(), want), "{what}: ExactDot::add");
    });
}

fn check_dot<T: Element>(x: &[T], y: &[T], what: &str) {
    let terms: Vec<(f32, f32)> = x.iter().zip(y).map(|(a, b)| (a.load(), b.load())).collect();
    let want = reference(&terms);
    let twin = scalar::exact_dot(x, y);
    assert!(same(twin, want), "{what}: twin {twin:e} oracle {want:e}");
    on_every_backend(what, || {
        assert_eq!(
            kernels::exact_dot_partial(x, y),
            scalar::exact_dot_partial(x, y),
            "{what}"
        );
    });
}

#[test]
fn exact_sums_match_the_oracle_on_every_backend() {
    for (k, kind) in KINDS.iter().enumerate() {
        for n in SIZES {
            let x = data(kind, n, 7 + k as u64 * 31 + n as u64);
            check_sum(&x, &format!("sum f32 {kind} {n}"));
            for scale in [1.0, 2f32.powi(-120)] {
                let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v * scale)).collect();
                check_sum(&h, &format!("sum f16 {kind} {n} x{scale:e}"));
            }
            let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
            check_sum(&b, &format!("sum bf16 {kind} {n}"));
        }
    }
}

#[test]
fn exact_dots_match_the_oracle_on_every_backend() {
    for (k, kind) in KINDS.iter().enumerate() {
        for n in SIZES {
            let x = data(kind, n, 3 + k as u64 * 17 + n as u64);
            let y = data(KINDS[(k + 1) % KINDS.len()], n, 5 + n as u64);
            check_dot(&x, &y, &format!("dot f32 {kind} {n}"));
            check_dot(&x, &x, &format!("dot f32 {kind} squared {n}"));
            for scale in [1.0, 2f32.powi(-120)] {
                let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v * scale)).collect();
                check_dot(&h, &h, &format!("dot f16 {kind} {n} x{scale:e}"));
            }
            let b: Vec<bf16> = y.iter().map(|&v| bf16::from_f32(v)).collect();
            let c: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
            check_dot(&b, &c, &format!("dot bf16 {kind} {n}"));
        }
    }
}

#[test]
fn exact_edge_cases() {
    let tiny = f32::from_bits(1);
    let cases: [(&[(f32, f32)], f32); 9] = [
        (&[(1e20, 1e20), (1.0, 0.5), (-1e20, 1e20)], 0.5),
        (&[(tiny, tiny)], 0.0),
        (
            &[(f32::MAX, f32::MAX), (-f32::MAX, f32::MAX), (3.0, 1.0)],
            3.0,
        ),
        (&[(f32::MAX, 2.0)], f32::INFINITY),
        (&[(f32::INFINITY, 0.0)], f32::NAN),
        (&[(f32::INFINITY, -1.0), (1.0, 1.0)], f32::NEG_INFINITY),
        (&[(f32::INFINITY, 1.0), (f32::INFINITY, -1.0)], f32::NAN),
        (
            &[(f32::MIN_POSITIVE, 0.5), (tiny, -1.0)],
            f32::from_bits(0x003f_ffff),
        ),
        (&[(-0.0, 1.0), (-0.0, 1.0)], 0.0),
    ];
    for (terms, want) in cases {
        let (x, y): (Vec<f32>, Vec<f32>) = terms.iter().copied().unzip();
        assert!(same(reference(terms), want), "{terms:?} oracle");
        check_dot(&x, &y, &format!("{terms:?}"));
        assert!(same(kernels::exact_dot(&x, &y), want), "{terms:?}");
    }
}

// ---------------------------------------------------------------------------
// Matrix products and the rank-with-several-contributions API.

fn gemm_reference(shape: GemmShape, a: &[f32], b: &[f32]) -> Vec<f32> {
    let (at, bt) = (shape.a_transposed, shape.b_transposed);
    let ai = |i: usize, p: usize| if at { p * shape.m + i } else { i * shape.k + p };
    let bi = |p: usize, j: usize| if bt { j * shape.k + p } else { p * shape.n + j };
    let mut out = Vec::new();
    for i in 0..shape.m {
        for j in 0..shape.n {
            let terms: Vec<(f32, f32)> = (0..shape.k).map(|p| (a[ai(i, p)], b[bi(p, j)])).collect();
            out.push(reference(&terms));
        }
    }
    out
}

#[test]
fn exact_gemm_matches_the_oracle_and_the_twin() {
    for (s, (m, k, n)) in [(3, 5, 2), (2, 300, 3), (1, 1, 1), (4, 0, 2)]
        .into_iter()
        .enumerate()
    {
        for (at, bt) in [(false, false), (true, false), (false, true), (true, true)] {
            let shape = GemmShape {
                m,
                k,
                n,
                a_transposed: at,
                b_transposed: bt,
            };
            let a = data(KINDS[s % 7], m * k, 11 + s as u64);
            let b = data(KINDS[(s + 2) % 7], k * n, 13 + s as u64);
            let want = gemm_reference(shape, &a, &b);
            let mut twin = vec![ExactDot::new(); m * n];
            scalar::exact_gemm(shape, &a, &b, &mut twin);
            let mut got = vec![0.0f32; m * n];
            kernels::round_exact(&twin, &mut got);
            for (g, w) in got.iter().zip(&want) {
                assert!(same(*g, *w), "{shape:?}: {g:e} vs {w:e}");
            }
            on_every_backend("exact_gemm", || {
                let mut fast = vec![ExactDot::new(); m * n];
                kernels::exact_gemm(shape, &a, &b, &mut fast);
                assert_eq!(fast, twin, "{shape:?}");
            });
        }
    }
}

/// A weight gradient `X^T D` over 12 samples: the same states for every
/// cut into micro-batches, every order of merging, and as an integer
/// all-reduce of the limbs over "ranks".
#[test]
fn weight_gradients_are_the_same_however_the_batch_is_cut() {
    let (samples, inputs, outputs) = (12, 5, 3);
    let x = data("cancelling", samples * inputs, 21);
    let d = data("wide", samples * outputs, 22);
    let grad = |from: usize, to: usize, acc: &mut [ExactDot]| {
        let shape = GemmShape {
            m: inputs,
            k: to - from,
            n: outputs,
            a_transposed: true,
            b_transposed: false,
        };
        kernels::exact_gemm(
            shape,
            &x[from * inputs..to * inputs],
            &d[from * outputs..to * outputs],
            acc,
        );
    };
    let mut whole = vec![ExactDot::new(); inputs * outputs];
    grad(0, samples, &mut whole);
    for micro in [1, 2, 3, 4, 6] {
        // One accumulator, micro-batches in reverse.
        let mut acc = vec![ExactDot::new(); inputs * outputs];
        for start in (0..samples).step_by(micro).rev() {
            grad(start, start + micro, &mut acc);
        }
        assert_eq!(acc, whole, "micro-batch {micro}");
        // One state per micro-batch ("ranks"), all-reduced as integers.
        let mut limbs = vec![[0i64; ExactDot::LIMBS]; inputs * outputs];
        for start in (0..samples).step_by(micro) {
            let mut part = vec![ExactDot::new(); inputs * outputs];
            grad(start, start + micro, &mut part);
            for (l, s) in limbs.iter_mut().zip(&part) {
                for (a, b) in l.iter_mut().zip(s.limbs()) {
                    *a = a.wrapping_add(b);
                }
            }
        }
        let reduced: Vec<ExactDot> = limbs.into_iter().map(ExactDot::from_limbs).collect();
        assert_eq!(reduced, whole, "limbs, micro-batch {micro}");
    }
    let mut merged = vec![ExactDot::new(); inputs * outputs];
    let mut half = vec![ExactDot::new(); inputs * outputs];
    grad(6, 12, &mut half);
    grad(0, 6, &mut merged);
    kernels::merge_exact(&mut merged, &half);
    assert_eq!(merged, whole);
}

// ---------------------------------------------------------------------------
// Any split, any order.

fn arb_values() -> impl Strategy<Value = Vec<f32>> {
    let value = prop_oneof![
        3 => -1.0e3f32..1.0e3,
        1 => any::<u32>().prop_map(f32::from_bits),
        1 => (0u32..0x0100_0000).prop_map(f32::from_bits),
    ];
    prop::collection::vec(value, 0..700)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Pieces cut anywhere, in a shuffled order, merged: the state of the
    /// whole, for sums and dots.
    #[test]
    fn any_split_and_order_gives_the_same_state(
        x in arb_values(),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        rotate in any::<prop::sample::Index>(),
    ) {
        let mut at: Vec<usize> = cuts.iter().map(|c| c.index(x.len() + 1)).collect();
        at.extend([0, x.len()]);
        at.sort_unstable();
        let mut pieces: Vec<(usize, usize)> = at.windows(2).map(|w| (w[0], w[1])).collect();
        let r = rotate.index(pieces.len());
        pieces.rotate_left(r);
        pieces.reverse();
        let y: Vec<f32> = x.iter().rev().copied().collect();
        let (mut sum, mut dot) = (ExactSum::new(), ExactDot::new());
        for &(a, b) in &pieces {
            sum.merge(&kernels::exact_sum_partial(&x[a..b]));
            dot.merge(&kernels::exact_dot_partial(&x[a..b], &y[a..b]));
        }
        prop_assert_eq!(sum, kernels::exact_sum_partial(&x));
        prop_assert_eq!(dot, kernels::exact_dot_partial(&x, &y));
        // Reversed order of the terms themselves.
        let back: Vec<f32> = x.iter().rev().copied().collect();
        prop_assert_eq!(kernels::exact_sum(&back).to_bits(), kernels::exact_sum(&x).to_bits());
    }
}
