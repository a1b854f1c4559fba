//! `exp`, `ln` and `ln_1p` for f32 without `std`: the same bits on every
//! platform.
//!
//! `core` has no transcendental functions, and platform `libm`s differ in
//! their last bit, so the loss kernels use these. Each is a range reduction
//! and a fixed polynomial evaluated in f64 (plain IEEE multiplies and adds,
//! never a fused multiply-add), rounded once to f32 at the end:
//!
//! | function | reduction | polynomial | error before the final rounding |
//! |---|---|---|---|
//! | [`exp`] | `x = k ln 2 + r`, `k` the nearest integer to `x / ln 2`, `\|r\| <= ln 2 / 2` | Taylor series of `e^r` to degree 9 | below `2^-36` relative |
//! | [`ln`] | `x = 2^e m`, `m` in `[sqrt(1/2), sqrt(2)]` | `2 atanh(s)`, `s = (m - 1) / (m + 1)`, odd series to `s^13` | below `2^-38` relative |
//! | [`ln_1p`] | `u = 1 + x` in f64 | `ln(u) * x / (u - 1)` (exact when `u == 1 + x`) | below `2^-37` relative |
//!
//! So each result is the exact value rounded to nearest f32 except where
//! the exact value lies within that tiny relative distance of a rounding
//! boundary: the error is at most `0.5 + 2^-12` ulp everywhere, including
//! subnormal results. The tests check this against `std`'s f64 functions on
//! dense sweeps, and on all 2^32 inputs in an `#[ignore]`d test.
//!
//! Special values follow IEEE 754 and C99: NaN gives NaN (always the
//! canonical quiet NaN `f32::NAN`), `exp(-inf) = 0`, `exp(+inf) = +inf`,
//! `ln(±0) = -inf`, `ln(x < 0) = NaN`, `ln(+inf) = +inf`, `ln_1p(-1) = -inf`,
//! `ln_1p(x < -1) = NaN`; `exp` overflows to `+inf` for `x > 88.72283` and
//! underflows to `+0` for `x < -103.97208`, as correct rounding does;
//! `ln_1p(-0.0) = -0.0`.

use core::f64::consts::{LN_2, LOG2_E, SQRT_2};

/// `e^x`, rounded to f32 with at most `0.5 + 2^-12` ulp of error.
///
/// ```
/// use tessera_core::loss::math;
///
/// assert_eq!(math::exp(0.0), 1.0);
/// assert_eq!(math::exp(1.0), core::f32::consts::E);
/// assert_eq!(math::exp(-200.0), 0.0);
/// assert_eq!(math::exp(89.0), f32::INFINITY);
/// ```
#[must_use]
pub const fn exp(x: f32) -> f32 {
    if x.is_nan() {
        return f32::NAN;
    }
    // e^89 > f32::MAX and e^-104 < 2^-150 (half the smallest subnormal):
    // the results are +inf and +0 however they are computed, and the range
    // in between keeps 2^k a normal f64 below.
    if x > 89.0 {
        return f32::INFINITY;
    }
    if x < -104.0 {
        return 0.0;
    }
    let x = x as f64;
    let k = round_to_int(x * LOG2_E);
    // |k| <= 151, so k ln 2 carries an absolute error below 2^-44: far
    // below what the f32 result can see.
    let r = x - k as f64 * LN_2;
    // Taylor series to degree 9; |r| <= ln 2 / 2 bounds the truncation
    // error by r^10 / 10! < 2^-37, relative to e^r >= 2^-1/2: < 2^-36.
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0
                    + r * (1.0 / 24.0
                        + r * (1.0 / 120.0
                            + r * (1.0 / 720.0
                                + r * (1.0 / 5040.0
                                    + r * (1.0 / 40320.0 + r * (1.0 / 362_880.0)))))))));
    // 2^k is a normal f64 for -152 <= k <= 129 and the product is exact:
    // the only rounding of the scaled result is the final one to f32
    // (subnormal f32 results included).
    let two_k = f64::from_bits(((k + 1023) as u64) << 52);
    (p * two_k) as f32
}

/// The natural logarithm, rounded to f32 with at most `0.5 + 2^-12` ulp of
/// error.
///
/// ```
/// use tessera_core::loss::math;
///
/// assert_eq!(math::ln(1.0), 0.0);
/// assert_eq!(math::ln(2.0), core::f32::consts::LN_2);
/// assert_eq!(math::ln(0.0), f32::NEG_INFINITY);
/// assert!(math::ln(-1.0).is_nan());
/// ```
#[must_use]
pub const fn ln(x: f32) -> f32 {
    if x.is_nan() || x < 0.0 {
        return f32::NAN;
    }
    if x == 0.0 {
        return f32::NEG_INFINITY;
    }
    if x == f32::INFINITY {
        return f32::INFINITY;
    }
    // Every f32, subnormals included, is a normal f64.
    ln_f64(x as f64) as f32
}

/// `ln(1 + x)`, accurate for small `x`, rounded to f32 with at most
/// `0.5 + 2^-12` ulp of error.
///
/// ```
/// use tessera_core::loss::math;
///
/// assert_eq!(math::ln_1p(0.0), 0.0);
/// assert_eq!(math::ln_1p(1e-10), 1e-10);
/// assert_eq!(math::ln_1p(-1.0), f32::NEG_INFINITY);
/// ```
#[must_use]
pub const fn ln_1p(x: f32) -> f32 {
    if x.is_nan() || x < -1.0 {
        return f32::NAN;
    }
    if x == -1.0 {
        return f32::NEG_INFINITY;
    }
    if x == f32::INFINITY {
        return f32::INFINITY;
    }
    let x = x as f64;
    let u = 1.0 + x;
    if u == 1.0 {
        // |x| < 2^-53: ln(1 + x) = x - x^2/2 + ... is x to far better than
        // f32 precision (and -0.0 stays -0.0).
        return x as f32;
    }
    // The quotient x / (u - 1) corrects for the rounding of 1 + x
    // (Goldberg's method); it is exactly 1 where 1 + x is exact in f64,
    // which is every f32 x with 2^-29 <= |x| < 2^53.
    (ln_f64(u) * (x / (u - 1.0))) as f32
}

/// `ln(x)` for a positive, finite, normal f64, with a relative error below
/// `2^-38`.
const fn ln_f64(x: f64) -> f64 {
    let bits = x.to_bits();
    let mut e = ((bits >> 52) & 0x7ff) as i64 - 1023;
    let mut m = f64::from_bits((bits & 0x000f_ffff_ffff_ffff) | (1023 << 52));
    if m > SQRT_2 {
        m *= 0.5;
        e += 1;
    }
    // m in [sqrt(1/2), sqrt(2)]: |s| <= 0.1716, s^2 <= 0.0295, and the
    // series 2 (s + s^3/3 + ... + s^13/13) of 2 atanh(s) = ln(m) stops with
    // a relative truncation error below s^14 / 15 < 2^-39. m - 1 is exact.
    // Adding e ln 2 at most doubles it (see below).
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    let series = s
        * (2.0
            + z * (2.0 / 3.0
                + z * (2.0 / 5.0
                    + z * (2.0 / 7.0 + z * (2.0 / 9.0 + z * (2.0 / 11.0 + z * (2.0 / 13.0)))))));
    // For e != 0, |e ln 2| >= ln 2 >= 2 |series|: the sum is at least half
    // the larger term, so relative errors at most double.
    e as f64 * LN_2 + series
}

/// `y` rounded to the nearest integer (ties away from zero), for
/// `|y| < 2^31`.
const fn round_to_int(y: f64) -> i64 {
    if y >= 0.0 {
        (y + 0.5) as i64
    } else {
        (y - 0.5) as i64
    }
}
