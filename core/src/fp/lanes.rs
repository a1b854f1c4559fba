//! Eight-lane conversion steps shared by the slice kernels.
//!
//! Bit patterns travel in `u32x8` lanes (f16/bf16 patterns in the low 16
//! bits). Each step has a portable `wide` form; where the target has F16C
//! the f16 steps use the hardware instruction instead (see `arch`). Every
//! form equals the scalar twin in [`super::scalar`] bit for bit.

use wide::{f32x8, u32x8};

use super::Overflow;
use super::scalar::{BF16_MAX_AS_F32, F16_MAX_AS_F32, F16_MIN_SUBNORMAL_AS_F32};

/// f32 bits -> f16 bits, round to nearest even, in plain integer and f32
/// SIMD arithmetic (after F. Giesen's `float_to_half_fast3_rtne`, with NaN
/// payloads kept as `half` keeps them).
#[must_use]
#[inline(always)]
#[cfg_attr(all(target_arch = "x86_64", target_feature = "f16c"), allow(dead_code))]
pub(crate) fn f32_to_f16_portable(bits: u32x8) -> u32x8 {
    let sign = bits & u32x8::splat(0x8000_0000);
    let abs = bits ^ sign;
    // Normal results: rebias, then round on the 13 dropped bits; a carry
    // bumps the exponent and reaches infinity from the largest binade.
    let odd = (abs >> 13) & u32x8::splat(1);
    let normal = (abs - u32x8::splat(112 << 23) + u32x8::splat(0xfff) + odd) >> 13;
    // Subnormal results: adding 0.5 lines the f16 subnormal grid up with
    // f32's last mantissa bits, and the f32 adder rounds to nearest even.
    let magic = u32x8::splat(126 << 23);
    let sum = f32x8::from_bits(abs) + f32x8::from_bits(magic);
    let subnormal = sum.to_bits() - magic;
    // Infinity and NaN (quiet bit set, top of the payload kept).
    let is_nan = abs.simd_gt(u32x8::splat(0x7f80_0000));
    let nan = u32x8::splat(0x7e00) | ((abs >> 13) & u32x8::splat(0x03ff));
    let special = is_nan.select(nan, u32x8::splat(0x7c00));
    let out = abs
        .simd_lt(u32x8::splat(113 << 23))
        .select(subnormal, normal);
    let out = abs.simd_ge(u32x8::splat(143 << 23)).select(special, out);
    out | (sign >> 16)
}

/// f16 bits -> f32 bits (exact), portable.
#[must_use]
#[inline(always)]
#[cfg_attr(all(target_arch = "x86_64", target_feature = "f16c"), allow(dead_code))]
pub(crate) fn f16_to_f32_portable(h: u32x8) -> u32x8 {
    let shifted: u32x8 = (h & u32x8::splat(0x7fff)) << 13;
    let exp = shifted & u32x8::splat(0x0f80_0000);
    let rebiased = shifted + u32x8::splat(112 << 23);
    // Infinity and NaN: move to f32's top exponent and quiet a NaN.
    let quiet: u32x8 = (shifted & u32x8::splat(0x007f_e000))
        .simd_ne(u32x8::splat(0))
        .select(u32x8::splat(0x0040_0000), u32x8::splat(0));
    let special = (rebiased + u32x8::splat(112 << 23)) | quiet;
    // Zero and subnormal: exact renormalisation by an f32 subtraction.
    let magic = u32x8::splat(113 << 23);
    let small =
        (f32x8::from_bits(rebiased + u32x8::splat(1 << 23)) - f32x8::from_bits(magic)).to_bits();
    let out = exp
        .simd_eq(u32x8::splat(0x0f80_0000))
        .select(special, rebiased);
    let out = exp.simd_eq(u32x8::splat(0)).select(small, out);
    out | ((h & u32x8::splat(0x8000)) << 16)
}

/// f32 bits -> bf16 bits, round to nearest even (quiet NaN kept).
#[must_use]
#[inline(always)]
pub(crate) fn f32_to_bf16_lanes(bits: u32x8) -> u32x8 {
    let rounded = (bits + u32x8::splat(0x7fff) + ((bits >> 16) & u32x8::splat(1))) >> 16;
    let nan = (bits >> 16) | u32x8::splat(0x0040);
    let is_nan: u32x8 = (bits & u32x8::splat(0x7fff_ffff)).simd_gt(u32x8::splat(0x7f80_0000));
    is_nan.select(nan, rounded)
}

/// bf16 bits -> f32 bits (exact, NaN quieted).
#[must_use]
#[inline(always)]
pub(crate) fn bf16_to_f32_lanes(h: u32x8) -> u32x8 {
    let bits: u32x8 = h << 16;
    let is_nan: u32x8 = (bits & u32x8::splat(0x7fff_ffff)).simd_gt(u32x8::splat(0x7f80_0000));
    bits | is_nan.select(u32x8::splat(0x0040_0000), u32x8::splat(0))
}

/// Which lanes hold a finite magnitude below 2^-24 other than zero: the
/// lanes whose f16 stochastic rounding takes the "tiny" rule.
#[must_use]
#[inline(always)]
pub(crate) fn tiny_lanes(abs: u32x8) -> u32x8 {
    abs.simd_lt(u32x8::splat(103 << 23)) & abs.simd_ne(u32x8::splat(0))
}

/// The stochastic rounding of f32 magnitudes `abs` (finite) onto the f16
/// grid, as f32 bit patterns, with word-0 random bits `r`; the second value
/// marks lanes the scalar rule must decide (the tiny rule needs more than
/// 32 random bits, which happens with probability 2^-32 per tiny lane).
#[must_use]
#[inline(always)]
pub(crate) fn f16_sr_magnitudes(abs: u32x8, r: u32x8, overflow: Overflow) -> (u32x8, u32x8) {
    let exp: u32x8 = abs >> 23;
    // Discarded bits: 13 for f16 normals, 126 - exp in the f16 subnormal range.
    let discarded = exp
        .simd_ge(u32x8::splat(113))
        .select(u32x8::splat(13), u32x8::splat(126) - exp);
    let mask = u32x8::splat(1).unbounded_shl(discarded) - u32x8::splat(1);
    let mut rounded = (abs + (r & mask)) & !mask;

    let tiny = tiny_lanes(abs);
    let mut undecided = u32x8::splat(0);
    if tiny.any() {
        let (m, s) = tiny_significand_and_scale_x8(abs);
        let r_shift = u32x8::splat(32).saturating_sub(s);
        let m_shift = s.saturating_sub(u32x8::splat(32));
        let m_high = m.unbounded_shr(m_shift);
        let r_high = r >> r_shift;
        let away = r_high.simd_lt(m_high);
        let tiny_result = away.select(u32x8::splat(F16_MIN_SUBNORMAL_AS_F32), u32x8::splat(0));
        rounded = tiny.select(tiny_result, rounded);
        undecided = tiny & m_shift.simd_ne(u32x8::splat(0)) & r.simd_eq(m_high);
    }
    (saturate(rounded, F16_MAX_AS_F32, overflow), undecided)
}

/// The decomposition of `scalar::tiny_significand_and_scale`, on eight lanes.
#[inline(always)]
fn tiny_significand_and_scale_x8(abs: u32x8) -> (u32x8, u32x8) {
    let exp: u32x8 = abs >> 23;
    let subnormal = exp.simd_eq(u32x8::splat(0));
    let m = subnormal.select(
        abs,
        (abs & u32x8::splat(0x007f_ffff)) | u32x8::splat(0x0080_0000),
    );
    let s = u32x8::splat(126) - exp.max(u32x8::splat(1));
    (m, s)
}

/// The stochastic rounding of f32 magnitudes `abs` (finite) onto the bf16
/// grid, as f32 bit patterns.
#[must_use]
#[inline(always)]
pub(crate) fn bf16_sr_magnitudes(abs: u32x8, r: u32x8, overflow: Overflow) -> u32x8 {
    let rounded = (abs + (r & u32x8::splat(0xffff))) & u32x8::splat(0xffff_0000);
    saturate(rounded, BF16_MAX_AS_F32, overflow)
}

#[inline(always)]
fn saturate(rounded: u32x8, max: u32, overflow: Overflow) -> u32x8 {
    match overflow {
        Overflow::Infinity => rounded,
        Overflow::Saturate => rounded.min(u32x8::splat(max)),
    }
}
