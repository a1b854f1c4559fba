//! Conversion steps on lanes, shared by the slice kernels of every
//! backend.
//!
//! Bit patterns travel in u32 lanes (f16/bf16 patterns in the low 16
//! bits). These are the portable forms; backends with conversion
//! instructions (F16C, AVX512-BF16) use those instead (see
//! `arch::lanes::Simd`). Every form equals the scalar twin in
//! [`super::scalar`] bit for bit.

use crate::arch::{F32s, U32s};

use super::Overflow;
use super::scalar::{BF16_MAX_AS_F32, F16_MAX_AS_F32, F16_MIN_SUBNORMAL_AS_F32};

/// f32 bits -> f16 bits, round to nearest even, in plain integer and f32
/// SIMD arithmetic (after F. Giesen's `float_to_half_fast3_rtne`, with NaN
/// payloads kept as `half` keeps them).
#[must_use]
#[inline(always)]
pub(crate) fn f32_to_f16_bits<F: F32s>(bits: F::Bits) -> F::Bits {
    let s = <F::Bits as U32s>::splat;
    let sign = bits & s(0x8000_0000);
    let abs = bits ^ sign;
    // Normal results: rebias, then round on the 13 dropped bits; a carry
    // bumps the exponent and reaches infinity from the largest binade.
    let odd = (abs >> 13) & s(1);
    let normal = (abs - s(112 << 23) + s(0xfff) + odd) >> 13;
    // Subnormal results: adding 0.5 lines the f16 subnormal grid up with
    // f32's last mantissa bits, and the f32 adder rounds to nearest even.
    let magic = s(126 << 23);
    let sum = F::from_bits(abs) + F::from_bits(magic);
    let subnormal = sum.to_bits() - magic;
    // Infinity and NaN (quiet bit set, top of the payload kept).
    let is_nan = abs.simd_gt(s(0x7f80_0000));
    let nan = s(0x7e00) | ((abs >> 13) & s(0x03ff));
    let special = is_nan.select(nan, s(0x7c00));
    let out = abs.simd_lt(s(113 << 23)).select(subnormal, normal);
    let out = abs.simd_ge(s(143 << 23)).select(special, out);
    out | (sign >> 16)
}

/// f16 bits -> f32 bits (exact), portable.
#[must_use]
#[inline(always)]
pub(crate) fn f16_to_f32_bits<F: F32s>(h: F::Bits) -> F::Bits {
    let s = <F::Bits as U32s>::splat;
    let shifted: F::Bits = (h & s(0x7fff)) << 13;
    let exp = shifted & s(0x0f80_0000);
    let rebiased = shifted + s(112 << 23);
    // Infinity and NaN: move to f32's top exponent and quiet a NaN.
    let quiet: F::Bits = (shifted & s(0x007f_e000))
        .simd_ne(s(0))
        .select(s(0x0040_0000), s(0));
    let special = (rebiased + s(112 << 23)) | quiet;
    // Zero and subnormal: exact renormalisation by an f32 subtraction.
    let magic = s(113 << 23);
    let small = (F::from_bits(rebiased + s(1 << 23)) - F::from_bits(magic)).to_bits();
    let out = exp.simd_eq(s(0x0f80_0000)).select(special, rebiased);
    let out = exp.simd_eq(s(0)).select(small, out);
    out | ((h & s(0x8000)) << 16)
}

/// f32 bits -> bf16 bits, round to nearest even (quiet NaN kept).
#[must_use]
#[inline(always)]
pub(crate) fn f32_to_bf16_bits<F: F32s>(bits: F::Bits) -> F::Bits {
    let s = <F::Bits as U32s>::splat;
    let rounded = (bits + s(0x7fff) + ((bits >> 16) & s(1))) >> 16;
    let nan = (bits >> 16) | s(0x0040);
    let is_nan: F::Bits = (bits & s(0x7fff_ffff)).simd_gt(s(0x7f80_0000));
    is_nan.select(nan, rounded)
}

/// bf16 bits -> f32 bits (exact, NaN quieted).
#[must_use]
#[inline(always)]
pub(crate) fn bf16_to_f32_bits<F: F32s>(h: F::Bits) -> F::Bits {
    let s = <F::Bits as U32s>::splat;
    let bits: F::Bits = h << 16;
    let is_nan: F::Bits = (bits & s(0x7fff_ffff)).simd_gt(s(0x7f80_0000));
    bits | is_nan.select(s(0x0040_0000), s(0))
}

/// Whether every lane of `abs` lies in `low..=low + span`.
#[must_use]
#[inline(always)]
pub(crate) fn all_within<U: U32s>(abs: U, low: u32, span: u32) -> bool {
    (abs - U::splat(low)).all_le(span)
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
pub(crate) fn f16_sr_magnitudes<U: U32s>(
    abs: U,
    half: U,
    word1: impl FnOnce() -> U,
    overflow: Overflow,
) -> (U, U) {
    let half = half & U::splat(0xffff);
    let exp = abs >> 23;
    // Discarded bits: 13 for f16 normals, 126 - exp in the f16 subnormal range.
    let discarded = exp
        .simd_ge(U::splat(113))
        .select(U::splat(13), U::splat(126) - exp);
    let mut random = half;
    let long = exp.simd_ge(U::splat(103)) & exp.simd_le(U::splat(109));
    if long.any() {
        random |= word1() << 16;
    }
    let mask = U::splat(1).unbounded_shl(discarded) - U::splat(1);
    let mut rounded = (abs + (random & mask)) & !mask;

    let tiny = abs.simd_lt(U::splat(103 << 23)) & abs.simd_ne(U::splat(0));
    let mut undecided = U::splat(0);
    if tiny.any() {
        let subnormal = exp.simd_eq(U::splat(0));
        let m = subnormal.select(abs, (abs & U::splat(0x007f_ffff)) | U::splat(0x0080_0000));
        let s = U::splat(126) - exp.max(U::splat(1));
        let top = m.unbounded_shr(s - U::splat(16));
        let away = half.simd_lt(top);
        let tiny_result = away.select(U::splat(F16_MIN_SUBNORMAL_AS_F32), U::splat(0));
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
pub(crate) fn bf16_sr_magnitudes<U: U32s>(abs: U, half: U, overflow: Overflow) -> U {
    let rounded = (abs + (half & U::splat(0xffff))) & U::splat(0xffff_0000);
    saturate(rounded, BF16_MAX_AS_F32, overflow)
}

#[inline(always)]
fn saturate<U: U32s>(rounded: U, max: u32, overflow: Overflow) -> U {
    match overflow {
        Overflow::Infinity => rounded,
        Overflow::Saturate => rounded.min(U::splat(max)),
    }
}
