//! A big-integer reference for exact sums.

use super::*;

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
