//! Vector kernels: every SIMD kernel against its scalar twin bit for bit
//! on every backend the CPU can run, `ExactSum` against a big-integer
//! reference, partition invariance of the reductions, the documented
//! semantics (order, NaN, found_inf) and pinned outputs.

use std::cmp::Ordering;

use proptest::prelude::*;
use tessera_core::fp::{HalfFloat, Overflow, Rounding, Stochastic, bf16, f16};
use tessera_core::kernels::{self, BLOCK, ExactSum, LANES, MaxAbs, scalar};
use tessera_core::rng::RandomStream;

// ---------------------------------------------------------------------------
// Backends.

use tessera_core::arch::{self, Backend};

/// Runs `check` on every backend this CPU can run, forced on this thread,
/// and prints which ran; backends the CPU lacks are skipped with a printed
/// line (forcing one is an error, which is how they are found).
pub(crate) fn on_every_backend(test: &str, check: impl Fn()) {
    let mut ran = Vec::new();
    for backend in Backend::ALL {
        // Printed first, so a failure's captured output names the backend.
        println!("{test}: {backend}");
        match arch::with_backend(backend, &check) {
            Ok(()) => ran.push(backend.name()),
            Err(e) => println!("{test}: skipped {backend}: {e}"),
        }
    }
    println!("{test}: ran on {}", ran.join(", "));
}

#[test]
fn forcing_a_backend_the_cpu_lacks_is_an_error() {
    for backend in Backend::ALL {
        let result = arch::with_backend(backend, || kernels::sum_of_squares(&[3.0]));
        if backend.is_available() {
            assert_eq!(result, Ok(9.0));
        } else {
            assert_eq!(result, Err(arch::BackendError::Unavailable(backend)));
            assert_eq!(
                arch::force(Some(backend)),
                Err(arch::BackendError::Unavailable(backend))
            );
        }
        assert_eq!(Backend::from_name(backend.name()), Ok(backend));
    }
    assert_eq!(Backend::from_name("avx3"), Err(arch::BackendError::Unknown));
    assert!(Backend::Scalar.is_available() && arch::best().is_available());
}

// ---------------------------------------------------------------------------
// Data.

use crate::support::Gen;

const SPECIAL_F32: [f32; 22] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    f32::from_bits(0xffc0_1234), // negative quiet NaN with payload
    f32::from_bits(0x7f80_0001), // signalling NaN
    f32::MIN_POSITIVE,
    -f32::MIN_POSITIVE,
    f32::from_bits(1), // smallest subnormal
    f32::from_bits(0x807f_ffff),
    f32::MAX,
    f32::MIN,
    65504.0,
    65520.0,
    -1.0e-8,
    3.0,
    0.1,
    1.0e30,
    -2.5e-39,
];

#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Special values mixed with moderate ones.
    Special,
    /// Exponents in -30..=30.
    Moderate,
    /// Any bit pattern.
    Bits,
    /// Huge and tiny values: lane overflow, cancellation, subnormals.
    Extreme,
}

const KINDS: [Kind; 4] = [Kind::Special, Kind::Moderate, Kind::Bits, Kind::Extreme];

fn f32_data(kind: Kind, n: usize, seed: u64) -> Vec<f32> {
    let mut g = Gen(seed ^ 0x006b_6572_6e65_6c73);
    (0..n)
        .map(|_| match kind {
            Kind::Special => {
                if g.below(3) == 0 {
                    SPECIAL_F32[g.below(SPECIAL_F32.len() as u64) as usize]
                } else {
                    g.in_range(-10, 10)
                }
            }
            Kind::Moderate => g.in_range(-30, 30),
            Kind::Bits => f32::from_bits(g.next() as u32),
            Kind::Extreme => match g.below(4) {
                0 => g.in_range(120, 127),
                1 => f32::from_bits(g.next() as u32 & 0x807f_ffff),
                2 => g.in_range(-126, -100),
                _ => g.in_range(-5, 5),
            },
        })
        .collect()
}

/// Bit access for the two 16-bit formats.
trait Bits16: HalfFloat {
    fn from_bits16(b: u16) -> Self;
    fn bits16(self) -> u16;
}

impl Bits16 for f16 {
    fn from_bits16(b: u16) -> Self {
        f16::from_bits(b)
    }
    fn bits16(self) -> u16 {
        self.to_bits()
    }
}

impl Bits16 for bf16 {
    fn from_bits16(b: u16) -> Self {
        bf16::from_bits(b)
    }
    fn bits16(self) -> u16 {
        self.to_bits()
    }
}

fn half_data<H: Bits16>(kind: Kind, n: usize, seed: u64) -> Vec<H> {
    match kind {
        Kind::Bits => {
            let mut g = Gen(seed ^ 0x6269_7473);
            (0..n).map(|_| H::from_bits16(g.next() as u16)).collect()
        }
        Kind::Moderate => f32_data(Kind::Moderate, n, seed)
            .into_iter()
            .map(|v| H::from_f32(v * 1.0e-5))
            .collect(),
        _ => f32_data(kind, n, seed)
            .into_iter()
            .map(H::from_f32)
            .collect(),
    }
}

/// Lengths 0..=70 and larger ones around and between block boundaries,
/// including runs that take the four-block interleaved path.
fn lengths() -> impl Iterator<Item = usize> {
    (0..=70).chain([
        255,
        256,
        257,
        263,
        511,
        512,
        1000,
        4 * BLOCK - 1,
        4 * BLOCK,
        4 * BLOCK + 5,
        5 * BLOCK,
        8 * BLOCK + 9,
        9 * BLOCK + 255,
    ])
}

fn assert_bits_eq(simd: &[f32], reference: &[f32], what: &str) {
    assert_eq!(simd.len(), reference.len());
    for (i, (s, r)) in simd.iter().zip(reference).enumerate() {
        assert_eq!(
            s.to_bits(),
            r.to_bits(),
            "{what}: element {i}: simd {s:e} vs scalar {r:e}"
        );
    }
}

fn assert_half_eq<H: Bits16>(simd: &[H], reference: &[H], what: &str) {
    assert_eq!(simd.len(), reference.len());
    for (i, (s, r)) in simd.iter().zip(reference).enumerate() {
        assert_eq!(
            s.bits16(),
            r.bits16(),
            "{what}: element {i}: simd {s:?} vs scalar {r:?}"
        );
    }
}

const FACTORS: [f32; 9] = [
    0.0,
    -0.0,
    1.0,
    1.5,
    -3.25e-3,
    1.0e30,
    f32::MIN_POSITIVE,
    f32::INFINITY,
    f32::NAN,
];

const INV_SCALES: [f32; 9] = [
    1.0,
    0.5,
    1.0 / 65536.0,
    2.0,
    1.0e30,
    0.0,
    f32::INFINITY,
    f32::NAN,
    -1.0,
];

fn roundings() -> [Rounding; 5] {
    let sr = |seed, overflow, first_index| Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(seed, 3), overflow),
        first_index,
    };
    [
        Rounding::Nearest,
        sr(1, Overflow::Infinity, 0),
        sr(2, Overflow::Saturate, 12_345),
        // Crosses a 2^32 block of random positions mid-slice.
        sr(3, Overflow::Infinity, (1 << 32) - 13),
        // Wraps around the end of the position space.
        sr(4, Overflow::Saturate, u64::MAX - 5),
    ]
}

// ---------------------------------------------------------------------------
// A big-integer reference for exact sums.

const W: usize = 6;

/// A 384-bit two's-complement integer in units of 2^-149.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Big([u64; W]);

impl Big {
    const ZERO: Big = Big([0; W]);

    /// The value of a non-negative f32 bit pattern up to `0x7f80_0000`, the
    /// last read as 2^128 (the formula continues past `f32::MAX`).
    fn of_bits(bits: u32) -> Big {
        assert!(bits <= 0x7f80_0000);
        let exp = bits >> 23;
        let man = bits & 0x007f_ffff;
        let (sig, shift) = if exp == 0 {
            (man, 0)
        } else {
            (man | 0x0080_0000, exp - 1)
        };
        let mut out = [0u64; W];
        let v = u128::from(sig) << (shift % 64);
        let k = (shift / 64) as usize;
        out[k] |= v as u64;
        out[k + 1] |= (v >> 64) as u64;
        Big(out)
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
        Big(self.0.map(|l| !l)).add(Big([1, 0, 0, 0, 0, 0]))
    }

    fn sub(self, other: Big) -> Big {
        self.add(other.neg())
    }

    fn is_negative(self) -> bool {
        self.0[W - 1] >> 63 == 1
    }

    /// Compares two non-negative values.
    fn cmp_unsigned(self, other: Big) -> Ordering {
        self.0.iter().rev().cmp(other.0.iter().rev())
    }
}

/// The exact sum of `values` rounded to nearest even, by brute force:
/// binary search for the f32 neighbours of the big-integer total.
fn reference_sum(values: &[f32]) -> f32 {
    let (mut pos_inf, mut neg_inf, mut nan) = (false, false, false);
    let mut total = Big::ZERO;
    for &v in values {
        if v.is_nan() {
            nan = true;
        } else if v == f32::INFINITY {
            pos_inf = true;
        } else if v == f32::NEG_INFINITY {
            neg_inf = true;
        } else {
            let b = Big::of_bits(v.to_bits() & 0x7fff_ffff);
            total = if v.is_sign_negative() {
                total.sub(b)
            } else {
                total.add(b)
            };
        }
    }
    if nan || (pos_inf && neg_inf) {
        return f32::NAN;
    }
    if pos_inf {
        return f32::INFINITY;
    }
    if neg_inf {
        return f32::NEG_INFINITY;
    }
    let negative = total.is_negative();
    let magnitude = if negative { total.neg() } else { total };
    let sign = u32::from(negative) << 31;
    let (mut lo, mut hi) = (0u32, 0x7f80_0000u32);
    if Big::of_bits(hi).cmp_unsigned(magnitude) != Ordering::Greater {
        return f32::from_bits(sign | 0x7f80_0000);
    }
    // Invariant: value(lo) <= magnitude < value(hi).
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if Big::of_bits(mid).cmp_unsigned(magnitude) == Ordering::Greater {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let below = magnitude.sub(Big::of_bits(lo));
    let above = Big::of_bits(hi).sub(magnitude);
    let pick = match below.cmp_unsigned(above) {
        Ordering::Less => lo,
        Ordering::Greater => hi,
        Ordering::Equal if lo % 2 == 0 => lo,
        Ordering::Equal => hi,
    };
    f32::from_bits(sign | pick)
}

fn exact_sum(values: &[f32]) -> ExactSum {
    let mut s = ExactSum::new();
    for &v in values {
        s.add(v);
    }
    s
}

fn same_f32(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits()
}

/// `2^e` as f32 (normal or subnormal).
fn pow2(e: i32) -> f32 {
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (e + 149))
    }
}

// ---------------------------------------------------------------------------
// ExactSum.

#[test]
fn exact_sum_reference_checks_itself() {
    // The reference agrees with f32 addition where that is exact.
    assert!(same_f32(reference_sum(&[1.5, 2.25]), 3.75));
    assert!(same_f32(reference_sum(&[]), 0.0));
    assert!(same_f32(reference_sum(&[-3.0]), -3.0));
    assert!(same_f32(reference_sum(&[f32::MAX]), f32::MAX));
    assert!(same_f32(
        reference_sum(&[f32::from_bits(1)]),
        f32::from_bits(1)
    ));
}

#[test]
fn exact_sum_edge_cases() {
    let cases: Vec<(Vec<f32>, f32)> = vec![
        (vec![], 0.0),
        (vec![-0.0, -0.0], 0.0), // an exact zero is +0.0
        (vec![2.5, -2.5], 0.0),
        // Ties to even at 1.0: 1 + 2^-24 is halfway to 1 + 2^-23.
        (vec![1.0, pow2(-24)], 1.0),
        (vec![1.0, 3.0 * pow2(-24)], 1.0 + pow2(-22)),
        (vec![1.0, pow2(-24), pow2(-149)], 1.0 + pow2(-23)),
        (vec![1.0, pow2(-24), -pow2(-149)], 1.0),
        (vec![16_777_216.0, 1.0], 16_777_216.0),
        (vec![16_777_216.0, 1.0, pow2(-149)], 16_777_218.0),
        (vec![-16_777_216.0, -3.0], -16_777_220.0),
        // Subnormal results, exact.
        (vec![1.0, pow2(-149), -1.0], pow2(-149)),
        (
            vec![f32::MIN_POSITIVE, -pow2(-149)],
            f32::from_bits(0x007f_ffff),
        ),
        (
            vec![1.0e38, 1.0e38, -1.0e38, -1.0e38, pow2(-149)],
            pow2(-149),
        ),
        (
            vec![f32::from_bits(0x007f_ffff), pow2(-149)],
            f32::MIN_POSITIVE,
        ),
        // Overflow, and no intermediate overflow.
        (vec![f32::MAX, f32::MAX], f32::INFINITY),
        (vec![f32::MAX, f32::MAX, -f32::MAX], f32::MAX),
        (vec![f32::MAX, pow2(103)], f32::INFINITY), // tie: to even = 2^128
        (vec![f32::MAX, pow2(103), -pow2(-149)], f32::MAX),
        (vec![f32::MAX, pow2(102)], f32::MAX),
        (vec![f32::MIN, -pow2(103)], f32::NEG_INFINITY),
        // Specials.
        (vec![f32::INFINITY, 1.0], f32::INFINITY),
        (vec![f32::NEG_INFINITY, f32::MAX], f32::NEG_INFINITY),
        (vec![f32::INFINITY, f32::NEG_INFINITY], f32::NAN),
        (vec![1.0, f32::from_bits(0xffc0_1234)], f32::NAN),
    ];
    for (values, expected) in cases {
        let got = exact_sum(&values).to_f32();
        assert!(
            same_f32(got, expected),
            "{values:?}: got {got:e} ({:#010x}), want {expected:e}",
            got.to_bits()
        );
        assert!(same_f32(reference_sum(&values), expected), "{values:?}");
    }
}

#[test]
fn exact_sum_matches_f64_where_f64_is_exact() {
    // Magnitudes in [2^-10, 2^11) are multiples of 2^-33; 1024 of them sum
    // below 2^21, so the f64 total is exact and one cast rounds it correctly.
    let mut g = Gen(7);
    for n in [1, 2, 3, 10, 100, 1024] {
        for _ in 0..50 {
            let values: Vec<f32> = (0..n).map(|_| g.in_range(-10, 10)).collect();
            let f64_sum: f64 = values.iter().map(|&v| f64::from(v)).sum();
            let want = f64_sum as f32;
            let got = exact_sum(&values).to_f32();
            assert!(same_f32(got, want), "n={n}: {got:e} vs {want:e}");
        }
    }
}

#[test]
fn exact_sum_limbs_round_trip_and_integer_all_reduce() {
    let mut g = Gen(11);
    let parts: Vec<Vec<f32>> = (0..7)
        .map(|k| f32_data(KINDS[k % 4], 50 + k * 13, g.next()))
        .collect();
    let sums: Vec<ExactSum> = parts.iter().map(|p| exact_sum(p)).collect();
    for s in &sums {
        assert_eq!(ExactSum::from_limbs(s.limbs()), *s);
    }
    // Element-wise integer sum of the limbs, as an MPI_SUM all-reduce does.
    let mut limbs = [0i64; ExactSum::LIMBS];
    for s in &sums {
        for (l, v) in limbs.iter_mut().zip(s.limbs()) {
            *l = l.wrapping_add(v);
        }
    }
    let mut merged = ExactSum::new();
    for s in &sums {
        merged.merge(s);
    }
    assert_eq!(ExactSum::from_limbs(limbs), merged);
    let all: Vec<f32> = parts.concat();
    assert_eq!(merged, exact_sum(&all));

    // Unnormalised digits are accepted: 2^33 units in digit 0 is 2 in digit 1.
    let mut a = [0i64; ExactSum::LIMBS];
    a[0] = 1 << 33;
    let mut b = [0i64; ExactSum::LIMBS];
    b[1] = 2;
    assert_eq!(ExactSum::from_limbs(a), ExactSum::from_limbs(b));
    assert!(same_f32(ExactSum::from_limbs(b).to_f32(), pow2(-149 + 33)));
    // Negative totals: digits below the top stay in 0..2^32.
    let neg = exact_sum(&[-1.0]).limbs();
    assert!(neg[..9].iter().all(|&d| (0..1 << 32).contains(&d)));
    assert!(neg[9] < 0);
    assert_eq!(ExactSum::default(), ExactSum::new());
}

fn shuffle<T>(v: &mut [T], seed: u64) {
    let mut g = Gen(seed);
    for i in (1..v.len()).rev() {
        let j = g.below(i as u64 + 1) as usize;
        v.swap(i, j);
    }
}

fn any_f32() -> impl Strategy<Value = f32> {
    prop_oneof![
        any::<u32>().prop_map(f32::from_bits),
        // Finite values of all magnitudes, with a sign.
        (0u32..0x7f80_0000, any::<bool>())
            .prop_map(|(b, s)| f32::from_bits(b | u32::from(s) << 31)),
        (-30i32..30, any::<u32>()).prop_map(|(e, m)| pow2(e) * (1.0 + (m >> 9) as f32 * pow2(-23))),
        prop::sample::select(SPECIAL_F32.to_vec()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn exact_sum_equals_big_integer_reference(values in prop::collection::vec(any_f32(), 0..40)) {
        let got = exact_sum(&values).to_f32();
        let want = reference_sum(&values);
        prop_assert!(same_f32(got, want), "{:?}: {:e} vs {:e}", values, got, want);
    }

    /// Totals at, just above and just below a halfway point between two
    /// f32 values (including subnormal, top-binade and overflowing ones).
    #[test]
    fn exact_sum_rounds_near_ties_like_the_reference(
        base in (0u32..0x7f80_0000).prop_map(f32::from_bits),
        negative in any::<bool>(),
        nudge in prop::sample::select(vec![0i8, 1, -1, 2, -2]),
        split in any::<bool>(),
    ) {
        let base = if negative { -base } else { base };
        // Half an ulp of `base` (base's exponent minus 24), if representable.
        let exp = ((base.to_bits() >> 23) & 0xff).max(1) as i32 - 127;
        prop_assume!(exp - 24 >= -149);
        let half_ulp = pow2(exp - 24).copysign(base);
        let mut values = vec![base];
        if split && exp - 25 >= -149 {
            values.extend([pow2(exp - 25).copysign(base); 2]);
        } else {
            values.push(half_ulp);
        }
        if nudge != 0 {
            values.push(f32::from(nudge) * pow2(-149));
        }
        let got = exact_sum(&values).to_f32();
        let want = reference_sum(&values);
        prop_assert!(same_f32(got, want), "{:?}: {:e} vs {:e}", values, got, want);
    }

    #[test]
    fn exact_sum_cancellation_leaves_the_small_terms(
        big in prop::collection::vec((0u32..0x7f80_0000).prop_map(f32::from_bits), 1..20),
        small in prop::collection::vec(any_f32().prop_filter("finite", |v| v.is_finite()), 0..5),
        seed in any::<u64>(),
    ) {
        let mut values: Vec<f32> = big.iter().flat_map(|&b| [b, -b]).chain(small.iter().copied()).collect();
        shuffle(&mut values, seed);
        prop_assert!(same_f32(exact_sum(&values).to_f32(), reference_sum(&small)));
        prop_assert!(same_f32(exact_sum(&values).to_f32(), exact_sum(&small).to_f32()));
    }

    #[test]
    fn exact_sum_is_order_and_grouping_free(
        values in prop::collection::vec(any_f32(), 0..60),
        seed in any::<u64>(),
    ) {
        let whole = exact_sum(&values);
        let mut shuffled = values.clone();
        shuffle(&mut shuffled, seed);
        // Random groups, summed separately and merged in a random order.
        let mut g = Gen(seed);
        let mut groups: Vec<ExactSum> = Vec::new();
        let mut rest = &shuffled[..];
        while !rest.is_empty() {
            let k = 1 + g.below(rest.len() as u64) as usize;
            groups.push(exact_sum(&rest[..k]));
            rest = &rest[k..];
        }
        shuffle(&mut groups, seed ^ 1);
        let mut merged = ExactSum::new();
        for s in &groups {
            merged.merge(s);
        }
        prop_assert_eq!(merged, whole);
        prop_assert_eq!(exact_sum(&shuffled), whole);
        prop_assert!(same_f32(merged.to_f32(), whole.to_f32()));
    }
}

// ---------------------------------------------------------------------------
// SIMD against scalar twins.

#[test]
fn f32_elementwise_kernels_match_scalar_twins() {
    on_every_backend("f32_elementwise_kernels_match_scalar_twins", || {
        for n in lengths() {
            for (k, kind) in KINDS.into_iter().enumerate() {
                let x = f32_data(kind, n, 100 + k as u64);
                let y = f32_data(kind, n, 200 + n as u64);
                let ctx = |what: &str| format!("{what} n={n} {kind:?}");
                for a in FACTORS {
                    let (mut s, mut r) = (y.clone(), y.clone());
                    kernels::axpy(a, &x, &mut s, Rounding::Nearest);
                    scalar::axpy(a, &x, &mut r, Rounding::Nearest);
                    assert_bits_eq(&s, &r, &ctx(&format!("axpy a={a}")));

                    let (mut s, mut r) = (x.clone(), x.clone());
                    kernels::scale(a, &mut s, Rounding::Nearest);
                    scalar::scale(a, &mut r, Rounding::Nearest);
                    assert_bits_eq(&s, &r, &ctx(&format!("scale a={a}")));
                }
                let (mut s, mut r) = (y.clone(), y.clone());
                kernels::add(&x, &mut s, Rounding::Nearest);
                scalar::add(&x, &mut r, Rounding::Nearest);
                assert_bits_eq(&s, &r, &ctx("add"));

                for inv in INV_SCALES {
                    let (mut s, mut r) = (x.clone(), x.clone());
                    let fs = kernels::unscale_and_check(&mut s, inv, Rounding::Nearest);
                    let fr = scalar::unscale_and_check(&mut r, inv, Rounding::Nearest);
                    assert_eq!(fs, fr, "{}", ctx(&format!("unscale_and_check inv={inv}")));
                    assert_bits_eq(&s, &r, &ctx(&format!("unscale_and_check inv={inv}")));
                }
            }
        }
    });
}

fn check_half_elementwise<H: Bits16>() {
    for n in lengths() {
        for (k, kind) in KINDS.into_iter().enumerate() {
            let x: Vec<H> = half_data(kind, n, 300 + k as u64);
            let y: Vec<H> = half_data(kind, n, 400 + n as u64);
            let acc = f32_data(kind, n, 500 + k as u64);
            let ctx = |what: &str| format!("{what} {} n={n} {kind:?}", H::NAME);

            let (mut s, mut r) = (acc.clone(), acc.clone());
            kernels::accumulate(&x, &mut s);
            scalar::accumulate(&x, &mut r);
            assert_bits_eq(&s, &r, &ctx("accumulate"));

            for rounding in roundings() {
                for a in [1.5, -0.0, 3.0e-3, 1.0e5, f32::NAN] {
                    let (mut s, mut r) = (y.clone(), y.clone());
                    kernels::axpy(a, &x, &mut s, rounding);
                    scalar::axpy(a, &x, &mut r, rounding);
                    assert_half_eq(&s, &r, &ctx(&format!("axpy a={a} {rounding:?}")));

                    let (mut s, mut r) = (x.clone(), x.clone());
                    kernels::scale(a, &mut s, rounding);
                    scalar::scale(a, &mut r, rounding);
                    assert_half_eq(&s, &r, &ctx(&format!("scale a={a} {rounding:?}")));
                }
                let (mut s, mut r) = (y.clone(), y.clone());
                kernels::add(&x, &mut s, rounding);
                scalar::add(&x, &mut r, rounding);
                assert_half_eq(&s, &r, &ctx(&format!("add {rounding:?}")));

                for inv in [1.0, 0.25, 1.0 / 65536.0, 4.0, f32::INFINITY, f32::NAN] {
                    let (mut s, mut r) = (x.clone(), x.clone());
                    let fs = kernels::unscale_and_check(&mut s, inv, rounding);
                    let fr = scalar::unscale_and_check(&mut r, inv, rounding);
                    let what = ctx(&format!("unscale_and_check inv={inv} {rounding:?}"));
                    assert_eq!(fs, fr, "{what}");
                    assert_half_eq(&s, &r, &what);
                }
            }
        }
    }
}

#[test]
fn f16_elementwise_kernels_match_scalar_twins() {
    on_every_backend("f16_elementwise_kernels_match_scalar_twins", || {
        check_half_elementwise::<f16>();
    });
}

#[test]
fn bf16_elementwise_kernels_match_scalar_twins() {
    on_every_backend("bf16_elementwise_kernels_match_scalar_twins", || {
        check_half_elementwise::<bf16>();
    });
}

#[test]
fn f32_reductions_match_scalar_twins() {
    on_every_backend("f32_reductions_match_scalar_twins", || {
        for n in lengths() {
            for (k, kind) in KINDS.into_iter().enumerate() {
                let x = f32_data(kind, n, 600 + k as u64);
                let y = f32_data(kind, n, 700 + n as u64);
                let ctx = format!("n={n} {kind:?}");
                assert_eq!(
                    kernels::dot_partial(&x, &y),
                    scalar::dot_partial(&x, &y),
                    "dot {ctx}"
                );
                assert!(
                    same_f32(kernels::dot(&x, &y), scalar::dot(&x, &y)),
                    "dot {ctx}"
                );
                assert_eq!(
                    kernels::sum_of_squares_partial(&x),
                    scalar::sum_of_squares_partial(&x),
                    "sum_of_squares {ctx}"
                );
                assert!(
                    same_f32(kernels::sum_of_squares(&x), scalar::sum_of_squares(&x)),
                    "sum_of_squares {ctx}"
                );
                assert_eq!(
                    kernels::max_abs_partial(&x),
                    scalar::max_abs_partial(&x),
                    "max_abs {ctx}"
                );
                assert!(
                    same_f32(kernels::max_abs(&x), scalar::max_abs(&x)),
                    "max_abs {ctx}"
                );
            }
        }
    });
}

fn check_half_reductions<H: Bits16>() {
    for n in lengths() {
        for (k, kind) in KINDS.into_iter().enumerate() {
            let x: Vec<H> = half_data(kind, n, 800 + k as u64);
            let y: Vec<H> = half_data(kind, n, 900 + n as u64);
            let ctx = format!("{} n={n} {kind:?}", H::NAME);
            assert_eq!(
                kernels::dot_partial(&x, &y),
                scalar::dot_partial(&x, &y),
                "dot {ctx}"
            );
            assert!(
                same_f32(kernels::dot(&x, &y), scalar::dot(&x, &y)),
                "dot {ctx}"
            );
            assert_eq!(
                kernels::sum_of_squares_partial(&x),
                scalar::sum_of_squares_partial(&x),
                "sum_of_squares {ctx}"
            );
            assert!(
                same_f32(kernels::sum_of_squares(&x), scalar::sum_of_squares(&x)),
                "sum_of_squares {ctx}"
            );
            assert_eq!(
                kernels::max_abs_partial(&x),
                scalar::max_abs_partial(&x),
                "max_abs {ctx}"
            );
            assert!(
                same_f32(kernels::max_abs(&x), scalar::max_abs(&x)),
                "max_abs {ctx}"
            );
        }
    }
}

#[test]
fn f16_reductions_match_scalar_twins() {
    on_every_backend("f16_reductions_match_scalar_twins", || {
        check_half_reductions::<f16>();
    });
}

#[test]
fn bf16_reductions_match_scalar_twins() {
    on_every_backend("bf16_reductions_match_scalar_twins", || {
        check_half_reductions::<bf16>();
    });
}

/// Every one of the 65,536 values of each format through the element-wise
/// kernels (lengths cover SIMD chunks and the scalar tail).
#[test]
fn every_half_value_through_the_kernels() {
    on_every_backend("every_half_value_through_the_kernels", || {
        fn check<H: Bits16>() {
            let all: Vec<H> = (0..=u16::MAX)
                .map(H::from_bits16)
                .chain([H::from_bits16(0x3c00)])
                .collect();
            let rev: Vec<H> = all.iter().rev().copied().collect();
            let sr = Rounding::Stochastic {
                sr: Stochastic::new(RandomStream::new(9, 9), Overflow::Infinity),
                first_index: 77,
            };
            for rounding in [Rounding::Nearest, sr] {
                let (mut s, mut r) = (rev.clone(), rev.clone());
                kernels::axpy(0.75, &all, &mut s, rounding);
                scalar::axpy(0.75, &all, &mut r, rounding);
                assert_half_eq(&s, &r, &format!("axpy {}", H::NAME));
                let (mut s, mut r) = (all.clone(), all.clone());
                let fs = kernels::unscale_and_check(&mut s, 0.5, rounding);
                let fr = scalar::unscale_and_check(&mut r, 0.5, rounding);
                assert!(fs && fr);
                assert_half_eq(&s, &r, &format!("unscale_and_check {}", H::NAME));
            }
            let acc: Vec<f32> = (0..all.len()).map(|i| i as f32 * 0.5 - 3000.0).collect();
            let (mut s, mut r) = (acc.clone(), acc);
            kernels::accumulate(&all, &mut s);
            scalar::accumulate(&all, &mut r);
            assert_bits_eq(&s, &r, &format!("accumulate {}", H::NAME));
            assert!(same_f32(kernels::dot(&all, &rev), scalar::dot(&all, &rev)));
            assert!(kernels::max_abs(&all).is_nan());
        }
        check::<f16>();
        check::<bf16>();
    });
}

// ---------------------------------------------------------------------------
// Partition invariance.

/// Cuts `0..n` at the block boundaries chosen by `picks`.
fn block_cuts(n: usize, picks: &[usize]) -> Vec<usize> {
    let blocks = n.div_ceil(BLOCK);
    let mut cuts: Vec<usize> = picks
        .iter()
        .map(|&p| (p % (blocks + 1) * BLOCK).min(n))
        .chain([0, n])
        .collect();
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

/// Partials of the pieces between `cuts`, merged in an order given by
/// `seed`, both with `merge` and as an integer all-reduce of the limbs.
fn merged(
    cuts: &[usize],
    seed: u64,
    partial: impl Fn(usize, usize) -> ExactSum,
) -> (ExactSum, ExactSum) {
    let mut parts: Vec<ExactSum> = cuts.windows(2).map(|w| partial(w[0], w[1])).collect();
    shuffle(&mut parts, seed);
    let mut sum = ExactSum::new();
    let mut limbs = [0i64; ExactSum::LIMBS];
    for p in &parts {
        sum.merge(p);
        for (l, v) in limbs.iter_mut().zip(p.limbs()) {
            *l = l.wrapping_add(v);
        }
    }
    (sum, ExactSum::from_limbs(limbs))
}

fn kind_of(k: u8) -> Kind {
    KINDS[usize::from(k) % KINDS.len()]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn f32_reductions_are_partition_invariant(
        n in 0usize..3000,
        picks in prop::collection::vec(any::<usize>(), 0..8),
        kind in any::<u8>(),
        seed in any::<u64>(),
    ) {
        let x = f32_data(kind_of(kind), n, seed);
        let y = f32_data(kind_of(kind), n, seed ^ 5);
        let cuts = block_cuts(n, &picks);

        let whole = kernels::dot_partial(&x, &y);
        let (m, l) = merged(&cuts, seed, |a, b| kernels::dot_partial(&x[a..b], &y[a..b]));
        prop_assert_eq!(m, whole);
        prop_assert_eq!(l, whole);
        prop_assert!(same_f32(m.to_f32(), kernels::dot(&x, &y)));

        let whole = kernels::sum_of_squares_partial(&x);
        let (m, l) = merged(&cuts, seed, |a, b| kernels::sum_of_squares_partial(&x[a..b]));
        prop_assert_eq!(m, whole);
        prop_assert_eq!(l, whole);
        prop_assert!(same_f32(m.to_f32(), kernels::sum_of_squares(&x)));

        // max_abs does not even need block-aligned cuts.
        let mut g = Gen(seed);
        let mut m = MaxAbs::new();
        let mut rest = &x[..];
        while !rest.is_empty() {
            let k = 1 + g.below(rest.len() as u64) as usize;
            m.merge(&MaxAbs::from_bits(kernels::max_abs_partial(&rest[..k]).to_bits()));
            rest = &rest[k..];
        }
        prop_assert_eq!(m, kernels::max_abs_partial(&x));
        prop_assert!(same_f32(m.to_f32(), kernels::max_abs(&x)));
    }

    #[test]
    fn half_reductions_are_partition_invariant(
        n in 0usize..3000,
        picks in prop::collection::vec(any::<usize>(), 0..8),
        kind in any::<u8>(),
        seed in any::<u64>(),
    ) {
        let x: Vec<f16> = half_data(kind_of(kind), n, seed);
        let y: Vec<f16> = half_data(kind_of(kind), n, seed ^ 5);
        let b: Vec<bf16> = half_data(kind_of(kind), n, seed ^ 9);
        let cuts = block_cuts(n, &picks);

        let (m, l) = merged(&cuts, seed, |a, e| kernels::dot_partial(&x[a..e], &y[a..e]));
        prop_assert_eq!(m, kernels::dot_partial(&x, &y));
        prop_assert_eq!(l, m);
        prop_assert!(same_f32(m.to_f32(), kernels::dot(&x, &y)));

        let (m, l) = merged(&cuts, seed, |a, e| kernels::sum_of_squares_partial(&b[a..e]));
        prop_assert_eq!(m, kernels::sum_of_squares_partial(&b));
        prop_assert_eq!(l, m);
        prop_assert!(same_f32(m.to_f32(), kernels::sum_of_squares(&b)));

        let mut mx = MaxAbs::new();
        for w in cuts.windows(2) {
            mx.merge(&kernels::max_abs_partial(&b[w[0]..w[1]]));
        }
        prop_assert!(same_f32(mx.to_f32(), kernels::max_abs(&b)));
    }

    /// Element-wise kernels with stochastic rounding over pieces, each with
    /// its own offset, write the same bits as one call.
    #[test]
    fn stochastic_rounding_kernels_are_split_invariant(
        n in 0usize..600,
        cuts in prop::collection::vec(any::<usize>(), 0..6),
        seed in any::<u64>(),
        first_index in prop_oneof![Just(0u64), any::<u64>(), Just((1u64 << 32) - 20)],
    ) {
        let x: Vec<bf16> = half_data(Kind::Moderate, n, seed);
        let y: Vec<bf16> = half_data(Kind::Special, n, seed ^ 3);
        let sr = Stochastic::new(RandomStream::new(seed, 1), Overflow::Saturate);
        let rounding = |offset: usize| Rounding::Stochastic {
            sr,
            first_index: first_index.wrapping_add(offset as u64),
        };
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (n + 1)).chain([0, n]).collect();
        cuts.sort_unstable();
        cuts.dedup();

        let mut whole = y.clone();
        kernels::axpy(-0.3, &x, &mut whole, rounding(0));
        let mut pieces = y.clone();
        for w in cuts.windows(2) {
            kernels::axpy(-0.3, &x[w[0]..w[1]], &mut pieces[w[0]..w[1]], rounding(w[0]));
        }
        prop_assert!(whole.iter().zip(&pieces).all(|(a, b)| a.to_bits() == b.to_bits()));

        let mut whole = x.clone();
        let f_whole = kernels::unscale_and_check(&mut whole, 0.125, rounding(0));
        let mut pieces = x.clone();
        let mut f_pieces = false;
        for w in cuts.windows(2) {
            f_pieces |= kernels::unscale_and_check(&mut pieces[w[0]..w[1]], 0.125, rounding(w[0]));
        }
        prop_assert_eq!(f_whole, f_pieces);
        prop_assert!(whole.iter().zip(&pieces).all(|(a, b)| a.to_bits() == b.to_bits()));
    }

    /// For `inv_scale` finite and at most 1 the check on the results equals
    /// PyTorch's check on the inputs.
    #[test]
    fn found_inf_matches_pytorch_for_inv_scale_at_most_one(
        x in prop::collection::vec(any_f32(), 0..40),
        inv in (0u32..=0x3f80_0000).prop_map(f32::from_bits),
    ) {
        let inputs_bad = x.iter().any(|v| !v.is_finite());
        let mut y = x.clone();
        prop_assert_eq!(kernels::unscale_and_check(&mut y, inv, Rounding::Nearest), inputs_bad);
        let mut h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let h_bad = h.iter().any(|v| !v.to_f32().is_finite());
        prop_assert_eq!(kernels::unscale_and_check(&mut h, inv, Rounding::Nearest), h_bad);
    }
}

// ---------------------------------------------------------------------------
// Documented semantics.

#[test]
fn reduction_order_is_lanes_then_tree_then_exact_blocks() {
    on_every_backend(
        "reduction_order_is_lanes_then_tree_then_exact_blocks",
        || {
            // Elements 0, 8 and 16 share lane 0 of block 0: 2^24 + 1 rounds to 2^24
            // twice.
            let mut x = vec![0.0f32; 3 * BLOCK];
            x[0] = 16_777_216.0;
            x[8] = 1.0;
            x[16] = 1.0;
            let ones = vec![1.0f32; x.len()];
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_216.0));
            // Lanes 0, 1 and 2 meet in the tree: (2^24 + 1) + (1 + 0) rounds twice
            // too.
            let mut x = vec![0.0f32; 3 * BLOCK];
            x[0] = 16_777_216.0;
            x[1] = 1.0;
            x[2] = 1.0;
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_216.0));
            // Lanes 0 and 2 meet only at the root: 2^24 + (1 + 1) is exact.
            x[1] = 0.0;
            x[3] = 1.0;
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_218.0));
            // In different blocks the partials add exactly.
            let mut x = vec![0.0f32; 3 * BLOCK];
            x[0] = 16_777_216.0;
            x[BLOCK] = 1.0;
            x[2 * BLOCK] = 1.0;
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_218.0));
            assert!(same_f32(
                kernels::sum_of_squares(&[1.0e30, 1.0]),
                f32::INFINITY
            )); // 1e60 overflows f32
            // Cancellation across blocks is exact.
            let mut x = vec![0.0f32; 2 * BLOCK + 1];
            x[0] = 1.0e30;
            x[BLOCK] = 1.0;
            x[2 * BLOCK] = -1.0e30;
            assert!(same_f32(kernels::dot(&x, &vec![1.0; x.len()]), 1.0));
        },
    );
}

#[test]
fn reductions_handle_special_values() {
    on_every_backend("reductions_handle_special_values", || {
        assert!(same_f32(kernels::dot::<f32>(&[], &[]), 0.0));
        assert!(same_f32(kernels::sum_of_squares::<f32>(&[]), 0.0));
        assert!(same_f32(kernels::max_abs::<f32>(&[]), 0.0));
        assert!(same_f32(kernels::dot(&[-0.0; 20], &[1.0; 20]), 0.0));
        assert!(same_f32(kernels::max_abs(&[-0.0]), 0.0));
        assert!(same_f32(
            kernels::max_abs(&[-3.0, 2.0, f32::from_bits(1)]),
            3.0
        ));
        assert!(same_f32(
            kernels::max_abs(&[1.0, f32::NEG_INFINITY]),
            f32::INFINITY
        ));
        // NaN propagates, as the canonical NaN, wherever it sits.
        for at in [0, 7, 8, 300] {
            let mut x = vec![1.0f32; 301];
            x[at] = f32::from_bits(0xffc0_1234);
            assert_eq!(kernels::max_abs(&x).to_bits(), 0x7fc0_0000);
            assert_eq!(kernels::dot(&x, &x).to_bits(), 0x7fc0_0000);
            assert_eq!(kernels::sum_of_squares(&x).to_bits(), 0x7fc0_0000);
        }
        // +inf and -inf in different blocks: NaN; in one: inf.
        let mut x = vec![0.0f32; 2 * BLOCK];
        x[0] = f32::INFINITY;
        x[BLOCK] = f32::NEG_INFINITY;
        assert!(kernels::dot(&x, &vec![1.0; x.len()]).is_nan());
        assert_eq!(kernels::dot(&[f32::MAX; 4], &[2.0; 4]), f32::INFINITY);
        assert_eq!(kernels::dot(&[f32::MAX; 4], &[-2.0; 4]), f32::NEG_INFINITY);
        // Inf * 0 is NaN.
        assert!(kernels::dot(&[f32::INFINITY], &[0.0]).is_nan());
        let h = [f16::from_f32(-2.0), f16::from_f32(3.0), f16::NAN];
        assert!(same_f32(kernels::max_abs(&h[..2]), 3.0));
        assert!(kernels::max_abs(&h).is_nan());
        assert!(same_f32(kernels::sum_of_squares(&h[..2]), 13.0));
        // f16 squares are exact in f32: 65504^2 does not overflow.
        assert!(same_f32(
            kernels::sum_of_squares(&[f16::MAX]),
            65504.0 * 65504.0
        ));
    });
}

#[test]
fn elementwise_nan_is_canonical_and_signed_zero_is_kept() {
    on_every_backend(
        "elementwise_nan_is_canonical_and_signed_zero_is_kept",
        || {
            let payload = f32::from_bits(0xffc0_1234);
            let x = vec![payload; 19];
            let mut y = vec![f32::from_bits(0x7f80_0001); 19];
            kernels::axpy(2.0, &x, &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x7fc0_0000));
            let mut y = x.clone();
            kernels::scale(3.0, &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x7fc0_0000));
            let mut y = vec![f32::INFINITY; 19];
            kernels::add(&[f32::NEG_INFINITY; 19], &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x7fc0_0000));

            let mut y = vec![-0.0f32; 19];
            kernels::add(&[-0.0; 19], &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x8000_0000));
            let mut y = vec![-0.0f32; 19];
            kernels::axpy(-1.0, &[0.0; 19], &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x8000_0000));

            let mut h = vec![f16::from_bits(0xfe55); 19];
            kernels::scale(1.0, &mut h, Rounding::Nearest);
            assert!(h.iter().all(|v| v.to_bits() == 0x7e00));
            let mut b = vec![bf16::from_bits(0xffd5); 19];
            kernels::scale(1.0, &mut b, Rounding::Nearest);
            assert!(b.iter().all(|v| v.to_bits() == 0x7fc0));
        },
    );
}

#[test]
fn unscale_and_check_reports_non_finite_results() {
    on_every_backend("unscale_and_check_reports_non_finite_results", || {
        let check = |x: &[f32], inv: f32| {
            let mut y = x.to_vec();
            let found = kernels::unscale_and_check(&mut y, inv, Rounding::Nearest);
            (found, y)
        };
        for n in [1, 8, 9, 40] {
            let mut x: Vec<f32> = (0..n).map(|i| i as f32 - 4.5).collect();
            assert!(!check(&x, 0.5).0);
            assert_eq!(check(&x, 0.5).1[0], -2.25);
            x[n - 1] = f32::INFINITY;
            let (found, y) = check(&x, 0.5);
            assert!(found);
            assert_eq!(y[n - 1], f32::INFINITY);
            x[n - 1] = f32::NAN;
            assert!(check(&x, 1.0).0);
            // Inf * 0 = NaN: flagged.
            x[n - 1] = f32::INFINITY;
            let (found, y) = check(&x, 0.0);
            assert!(found);
            assert_eq!(y[n - 1].to_bits(), 0x7fc0_0000);
            // A finite value that overflows when unscaled with inv_scale > 1:
            // flagged here (PyTorch checks the inputs and would not flag it).
            x[n - 1] = f32::MAX;
            assert!(check(&x, 2.0).0);
            x[n - 1] = 1.0e38;
            assert!(!check(&x, 2.0).0);
            // A non-finite inv_scale makes every result non-finite.
            assert!(check(&x, f32::INFINITY).0);
            assert!(check(&x, f32::NAN).0);
        }
        assert!(!check(&[], f32::NAN).0);

        // 16-bit storage: the stored value is checked, so f16 overflow counts.
        let mut h = vec![f16::from_f32(1000.0); 11];
        assert!(!kernels::unscale_and_check(&mut h, 2.0, Rounding::Nearest));
        assert!(h.iter().all(|v| v.to_f32() == 2000.0));
        let mut h = vec![f16::from_f32(40000.0); 11];
        assert!(kernels::unscale_and_check(&mut h, 2.0, Rounding::Nearest));
        assert!(h.iter().all(|v| v.is_infinite()));
        let sat = Rounding::Stochastic {
            sr: Stochastic::new(RandomStream::new(1, 1), Overflow::Saturate),
            first_index: 0,
        };
        let mut h = vec![f16::from_f32(40000.0); 11];
        assert!(!kernels::unscale_and_check(&mut h, 2.0, sat));
        assert!(h.iter().all(|v| *v == f16::MAX));
        let mut b = vec![bf16::from_f32(3.0e38); 11];
        assert!(kernels::unscale_and_check(&mut b, 2.0, Rounding::Nearest));
    });
}

#[test]
fn accumulate_widens_exactly() {
    on_every_backend("accumulate_widens_exactly", || {
        let src: Vec<f16> = (0..37)
            .map(|i| f16::from_f32(i as f32 * 0.125 - 2.0))
            .collect();
        let mut acc = vec![1.0f32; 37];
        kernels::accumulate(&src, &mut acc);
        for (i, a) in acc.iter().enumerate() {
            assert_eq!(*a, i as f32 * 0.125 - 1.0);
        }
        let sub = [f16::from_bits(1); 9]; // 2^-24
        let mut acc = [0.0f32; 9];
        kernels::accumulate(&sub, &mut acc);
        assert!(acc.iter().all(|&a| a == pow2(-24)));
    });
}

#[test]
#[should_panic(expected = "axpy: length mismatch")]
fn axpy_panics_on_length_mismatch() {
    kernels::axpy(1.0, &[1.0; 3], &mut [0.0; 4], Rounding::Nearest);
}

#[test]
#[should_panic(expected = "add: length mismatch")]
fn add_panics_on_length_mismatch() {
    kernels::add(&[1.0; 9], &mut [0.0; 8], Rounding::Nearest);
}

#[test]
#[should_panic(expected = "dot: length mismatch")]
fn dot_panics_on_length_mismatch() {
    let _ = kernels::dot(&[1.0; 3], &[0.0; 4]);
}

#[test]
#[should_panic(expected = "dot: length mismatch")]
fn dot_of_f16_panics_on_length_mismatch() {
    let _ = kernels::dot(&[f16::ONE; 3], &[f16::ONE; 2]);
}

#[test]
#[should_panic(expected = "accumulate: length mismatch")]
fn accumulate_panics_on_length_mismatch() {
    kernels::accumulate(&[bf16::ONE; 3], &mut [0.0; 2]);
}

#[test]
#[should_panic(expected = "axpy: length mismatch")]
fn axpy_of_bf16_panics_on_length_mismatch() {
    kernels::axpy(1.0, &[bf16::ONE; 3], &mut [bf16::ONE; 2], Rounding::Nearest);
}

#[test]
#[should_panic(expected = "add: length mismatch")]
fn add_of_f16_panics_on_length_mismatch() {
    kernels::add(&[f16::ONE; 3], &mut [f16::ONE; 2], Rounding::Nearest);
}

#[test]
fn scalar_twins_panic_like_the_kernels() {
    assert!(std::panic::catch_unwind(|| scalar::dot(&[1.0], &[])).is_err());
    assert!(
        std::panic::catch_unwind(|| scalar::axpy(1.0, &[1.0], &mut [], Rounding::Nearest)).is_err()
    );
}

// ---------------------------------------------------------------------------
// Value stability: a change here is a breaking change.

/// FNV-1a over 32-bit words.
fn fnv(words: impl IntoIterator<Item = u32>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ u64::from(w)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn pinned_outputs() {
    on_every_backend("pinned_outputs", || {
        let n = 1000;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let y: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 0.5)).collect();
        let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let b: Vec<bf16> = y.iter().map(|&v| bf16::from_f32(v)).collect();
        let sr = Rounding::Stochastic {
            sr: Stochastic::new(RandomStream::new(2024, 7), Overflow::Infinity),
            first_index: 5,
        };
        let mut axpy_sr = b.clone();
        kernels::axpy(0.37, &b, &mut axpy_sr, sr);
        let mut axpy_f32 = y.clone();
        kernels::axpy(-1.25, &x, &mut axpy_f32, Rounding::Nearest);

        let got = [
            u64::from(kernels::dot(&x, &y).to_bits()),
            u64::from(kernels::sum_of_squares(&x).to_bits()),
            u64::from(kernels::max_abs(&x).to_bits()),
            u64::from(kernels::dot(&h, &h).to_bits()),
            u64::from(kernels::sum_of_squares(&b).to_bits()),
            fnv(axpy_sr.iter().map(|v| u32::from(v.to_bits()))),
            fnv(axpy_f32.iter().map(|v| v.to_bits())),
            fnv(kernels::dot_partial(&x, &y)
                .limbs()
                .iter()
                .flat_map(|&l| [l as u32, (l >> 32) as u32])),
        ];
        let pinned: [u64; 8] = [
            0xbfb0_6f8d,
            0x430f_e4f7,
            0x3f26_6667,
            0x430f_e248,
            0x409d_f355,
            0x8557_89ea_5ee8_f19a,
            0x575d_0f86_af77_a404,
            0xe938_d411_1d22_5997,
        ];
        assert_eq!(got, pinned, "got {got:#x?}");
        // The twins give the same, by construction and by the tests above.
        assert_eq!(u64::from(scalar::dot(&x, &y).to_bits()), pinned[0]);
        assert_eq!(LANES, 8);
        assert_eq!(BLOCK, 256);
    });
}

// ---------------------------------------------------------------------------
// Optimizers on every backend: each step, forced onto a backend, gives
// bitwise the scalar backend's (the scalar twins') weights and state.

use tessera_core::fp::{Element, Round};
use tessera_core::optim::{
    Accumulation, AdamW, AdamWConfig, Lamb, LambConfig, Lars, LarsConfig, Param, Partials,
    Precision, Sgd, SgdConfig, Step,
};

/// Weights, gradients and state with special values mixed in.
fn optimizer_data<E: Element>(n: usize, seed: u64, scale: f32) -> Vec<E> {
    f32_data(Kind::Special, n, seed)
        .into_iter()
        .map(|v| E::store(v * scale, Rounding::Nearest, 0))
        .collect()
}

fn bytes<E: Element>(x: &[E]) -> Vec<u8> {
    bytemuck::cast_slice(x).to_vec()
}

/// Runs `step` over fresh copies of one parameter's data (weights,
/// gradients, `N` state tensors, as a piece at `offset`) and returns the
/// bytes of the weights and state afterwards.
fn after_step<W: Element, G: Element, S: Element, const N: usize>(
    n: usize,
    offset: u64,
    step: &dyn Fn(&mut Param<'_, W, G, S, N>),
) -> Vec<Vec<u8>> {
    let mut w: Vec<W> = optimizer_data(n, 1, 1.0);
    let g: Vec<G> = optimizer_data(n, 2, 0.1);
    let mut state: [Vec<S>; N] = core::array::from_fn(|k| optimizer_data(n, 3 + k as u64, 0.01));
    let mut p = Param::new(9, &mut w, &g, state.each_mut().map(|s| &mut s[..])).at_offset(offset);
    step(&mut p);
    let mut out = vec![bytes(&w)];
    out.extend(state.iter().map(|s| bytes(s)));
    out
}

/// Every optimizer's step with storage `W`, `G`, `S`.
fn optimizer_steps<W: Element, G: Element, S: Element>(precision: Precision) -> Vec<Vec<u8>> {
    let step = Step::after(2).with_grad_scale(0.5);
    let sgd = |momentum, nesterov, weight_decay| {
        Sgd::new(SgdConfig {
            lr: 0.1,
            momentum,
            nesterov,
            weight_decay,
            ..SgdConfig::default()
        })
        .unwrap()
    };
    let adamw = AdamW::new(AdamWConfig::default()).unwrap();
    let lamb = Lamb::new(LambConfig::default()).unwrap();
    let lars = Lars::new(LarsConfig {
        momentum: 0.9,
        weight_decay: 1e-4,
        ..LarsConfig::default()
    })
    .unwrap();
    let mut out = Vec::new();
    for (n, offset) in [(37, 0), (1000, 512), (300, 5)] {
        for (momentum, nesterov, wd) in [(0.0, false, 0.0), (0.9, true, 1e-4), (0.9, false, 0.0)] {
            let sgd = sgd(momentum, nesterov, wd);
            out.extend(after_step::<W, G, S, 1>(n, offset, &|p| {
                sgd.step(step, &precision, p);
            }));
        }
        out.extend(after_step::<W, G, S, 2>(n, offset, &|p| {
            adamw.step(step, &precision, p).unwrap();
        }));
        let aligned = offset / BLOCK as u64 * BLOCK as u64;
        out.extend(after_step::<W, G, S, 2>(n, aligned, &|p| {
            lamb.step(step, &precision, p);
        }));
        out.extend(after_step::<W, G, S, 2>(n, aligned, &|p| {
            let mut update = vec![0.0f32; p.weights.len()];
            let totals: Partials = lamb.partials_into(step, &precision, p, &mut update);
            lamb.apply_update(step, &totals, &precision, p, &update);
        }));
        out.extend(after_step::<W, G, S, 1>(n, aligned, &|p| {
            lars.step(step, &precision, p);
        }));
        out.extend(after_step::<W, G, W, 0>(n, offset, &|p| {
            for mode in [Accumulation::RunningMean, Accumulation::PostMean] {
                mode.add(2, p.grads, p.weights, &precision, p.id);
                mode.finish(3, p.weights, &precision, p.id);
            }
        }));
    }
    out
}

#[test]
fn optimizers_match_the_scalar_backend_on_every_backend() {
    fn check<W: Element, G: Element, S: Element>() {
        for rounding in [
            Round::NEAREST_EVEN,
            Round::STOCHASTIC,
            Round::STOCHASTIC.with_overflow(Overflow::Saturate),
        ] {
            let precision = Precision {
                weights: rounding,
                state: rounding,
                seed: 11,
            };
            let scalar =
                arch::with_backend(Backend::Scalar, || optimizer_steps::<W, G, S>(precision))
                    .unwrap();
            let what = format!("{} {} {} {rounding:?}", W::NAME, G::NAME, S::NAME);
            on_every_backend(&format!("optimizers {what}"), || {
                assert!(optimizer_steps::<W, G, S>(precision) == scalar, "{what}");
            });
        }
    }
    check::<f32, f32, f32>();
    check::<f16, f16, f16>();
    check::<bf16, bf16, bf16>();
    check::<f32, f16, bf16>();
    check::<bf16, f32, f16>();
}

// ---------------------------------------------------------------------------
// Matrix products on every backend.

use tessera_core::kernels::GemmShape;

/// `kernels::gemm` on fresh output and scratch.
fn gemm_of(shape: GemmShape, a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut c = vec![f32::from_bits(0x7fc0_0001); shape.m * shape.n];
    let mut scratch = vec![0.0; kernels::gemm_scratch_len(&shape)];
    kernels::gemm(shape, a, b, &mut c, &mut scratch);
    c
}

#[test]
fn gemm_matches_its_scalar_twin_on_every_backend() {
    let mut g = Gen(77);
    let mut cases = Vec::new();
    for (m, k, n) in [
        (0, 3, 4),
        (3, 0, 5),
        (1, 1, 1),
        (5, 7, 33),
        (9, 64, 70),
        (4, 300, 17),
        (6, 600, 70),
    ] {
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            cases.push((m, k, n, ta, tb));
        }
    }
    for _ in 0..40 {
        let dim = |g: &mut Gen| g.below(40) as usize + 1;
        cases.push((
            dim(&mut g),
            dim(&mut g),
            dim(&mut g),
            g.below(2) == 0,
            g.below(2) == 0,
        ));
    }
    let inputs: Vec<_> = cases
        .into_iter()
        .enumerate()
        .map(|(c, (m, k, n, a_transposed, b_transposed))| {
            let shape = GemmShape {
                m,
                k,
                n,
                a_transposed,
                b_transposed,
            };
            let kind = KINDS[c % KINDS.len()];
            let (a, b) = (
                f32_data(kind, m * k, c as u64),
                f32_data(kind, k * n, 1000 + c as u64),
            );
            let mut twin = vec![0.0; m * n];
            scalar::gemm(shape, &a, &b, &mut twin);
            (shape, a, b, twin)
        })
        .collect();
    on_every_backend("gemm", || {
        for (shape, a, b, twin) in &inputs {
            assert_bits_eq(&gemm_of(*shape, a, b), twin, &format!("gemm {shape:?}"));
        }
    });
}

#[test]
fn gemm_sums_in_increasing_p_without_fma() {
    // 1 + 2^-24 products: (0 + 1) + 2^-24 rounds back to 1 each time in
    // increasing p, where an FMA or another order would keep them.
    let k = 5;
    let a = vec![1.0f32; 3 * k];
    let mut b = vec![pow2(-24); k * 17];
    b[..17].fill(1.0);
    let shape = GemmShape {
        m: 3,
        k,
        n: 17,
        a_transposed: false,
        b_transposed: false,
    };
    on_every_backend("gemm order", || {
        assert!(gemm_of(shape, &a, &b).iter().all(|&c| c == 1.0));
        // With the small terms first they add up before meeting 1.
        let mut b2 = vec![pow2(-24); k * 17];
        b2[(k - 1) * 17..].fill(1.0);
        let want = 1.0 + 4.0 * pow2(-24);
        assert!(gemm_of(shape, &a, &b2).iter().all(|&c| c == want));
    });
    // x * y + z with an FMA differs from the rounded product added:
    // 1 + 2^-12 squared is 1 + 2^-11 + 2^-24; minus (1 + 2^-11) that is 0
    // after rounding the product, 2^-24 with an FMA.
    let x = 1.0 + pow2(-12);
    let shape = GemmShape {
        m: 1,
        k: 2,
        n: 16,
        a_transposed: false,
        b_transposed: true,
    };
    let a = [-(1.0 + pow2(-11)), x];
    let b: Vec<f32> = (0..16).flat_map(|_| [1.0, x]).collect();
    on_every_backend("gemm without fma", || {
        assert!(gemm_of(shape, &a, &b).iter().all(|&c| c == 0.0));
    });
}
