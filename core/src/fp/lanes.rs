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

/// Whether every lane of `abs` lies in `low..=low + span`.
#[must_use]
#[inline(always)]
pub(crate) fn all_within(abs: u32x8, low: u32, span: u32) -> bool {
    let offset = abs - u32x8::splat(low);
    offset
        .max(u32x8::splat(span))
        .simd_eq(u32x8::splat(span))
        .all()
}

/// The f32 magnitudes whose f16 stochastic rounding is plain: f16 normal
/// results (from 2^-14) up to 65504, so 13 discarded bits and no overflow.
pub(crate) const F16_PLAIN_LOW: u32 = 0x3880_0000;
/// See [`F16_PLAIN_LOW`].
pub(crate) const F16_PLAIN_SPAN: u32 = F16_MAX_AS_F32 - F16_PLAIN_LOW;

/// The stochastic rounding of f32 magnitudes `abs` (finite) onto the f16
/// grid, as f32 bit patterns, with each lane's 16 random bits in the low
/// half of `half` and its word 1 from `word1` (called only if some lane
/// needs more than 16 bits). The second value marks lanes the scalar rule
/// must decide: magnitudes below 2^-24 whose 16 bits tie (probability
/// 2^-16 per such lane).
#[must_use]
#[inline(always)]
pub(crate) fn f16_sr_magnitudes(
    abs: u32x8,
    half: u32x8,
    word1: impl FnOnce() -> u32x8,
    overflow: Overflow,
) -> (u32x8, u32x8) {
    let half = half & u32x8::splat(0xffff);
    let exp: u32x8 = abs >> 23;
    // Discarded bits: 13 for f16 normals, 126 - exp in the f16 subnormal range.
    let discarded = exp
        .simd_ge(u32x8::splat(113))
        .select(u32x8::splat(13), u32x8::splat(126) - exp);
    let mut random = half;
    let long = exp.simd_ge(u32x8::splat(103)) & exp.simd_le(u32x8::splat(109));
    if long.any() {
        random |= word1() << 16;
    }
    let mask = u32x8::splat(1).unbounded_shl(discarded) - u32x8::splat(1);
    let mut rounded = (abs + (random & mask)) & !mask;

    let tiny = abs.simd_lt(u32x8::splat(103 << 23)) & abs.simd_ne(u32x8::splat(0));
    let mut undecided = u32x8::splat(0);
    if tiny.any() {
        let subnormal = exp.simd_eq(u32x8::splat(0));
        let m = subnormal.select(
            abs,
            (abs & u32x8::splat(0x007f_ffff)) | u32x8::splat(0x0080_0000),
        );
        let s = u32x8::splat(126) - exp.max(u32x8::splat(1));
        let top = m.unbounded_shr(s - u32x8::splat(16));
        let away = half.simd_lt(top);
        let tiny_result = away.select(u32x8::splat(F16_MIN_SUBNORMAL_AS_F32), u32x8::splat(0));
        rounded = tiny.select(tiny_result, rounded);
        undecided = tiny & half.simd_eq(top);
    }
    (saturate(rounded, F16_MAX_AS_F32, overflow), undecided)
}

/// The stochastic rounding of f32 magnitudes `abs` (finite) onto the bf16
/// grid, as f32 bit patterns, with each lane's 16 random bits in the low
/// half of `half`.
#[must_use]
#[inline(always)]
pub(crate) fn bf16_sr_magnitudes(abs: u32x8, half: u32x8, overflow: Overflow) -> u32x8 {
    let rounded = (abs + (half & u32x8::splat(0xffff))) & u32x8::splat(0xffff_0000);
    saturate(rounded, BF16_MAX_AS_F32, overflow)
}

#[inline(always)]
fn saturate(rounded: u32x8, max: u32, overflow: Overflow) -> u32x8 {
    match overflow {
        Overflow::Infinity => rounded,
        Overflow::Saturate => rounded.min(u32x8::splat(max)),
    }
}
