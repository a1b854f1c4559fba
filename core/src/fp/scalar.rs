//! Scalar `const fn` twins of every conversion kernel.
//!
//! These are the definitions: the SIMD kernels must equal them bit for bit
//! (the tests check every f16/bf16 input and, in CI, every f32 input), and
//! the round-to-nearest ones equal the `half` crate's conversions.

use half::{bf16, f16};

use super::{Format, Overflow, Round};
use crate::rng::{RandomBits, RandomStream};

/// f32 bit pattern of the largest finite f16, 65504.
pub(crate) const F16_MAX_AS_F32: u32 = 0x477f_e000;
/// f32 bit pattern of the smallest f16 subnormal, 2^-24.
pub(crate) const F16_MIN_SUBNORMAL_AS_F32: u32 = 0x3380_0000;
/// f32 bit pattern of the largest finite bf16.
pub(crate) const BF16_MAX_AS_F32: u32 = 0x7f7f_0000;

/// f32 -> f16, round to nearest, ties to even. NaN becomes a quiet NaN with
/// its sign and the top of its payload; overflow gives infinity.
///
/// ```
/// use tessera_core::fp::{f16, scalar};
///
/// const H: f16 = scalar::f32_to_f16(1.0 / 3.0);
/// assert_eq!(H, f16::from_f32(1.0 / 3.0)); // the `half` crate's rounding
/// ```
#[must_use]
pub const fn f32_to_f16(x: f32) -> f16 {
    f16::from_bits(f32_bits_to_f16_bits(x.to_bits()))
}

pub(crate) const fn f32_bits_to_f16_bits(bits: u32) -> u16 {
    let sign = ((bits >> 16) & 0x8000) as u16;
    let abs = bits & 0x7fff_ffff;
    let exp = (abs >> 23) as i32;
    let man = abs & 0x007f_ffff;
    if exp == 0xff {
        let quiet = if man == 0 { 0 } else { 0x0200 };
        return sign | 0x7c00 | quiet | (man >> 13) as u16;
    }
    // Exponent of x in f16's bias.
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    if e <= 0 {
        // f16 subnormal (or zero): keep 10 - (1 - e) significant bits.
        let shift = 14 - e; // >= 14
        if shift > 24 {
            return sign;
        }
        let sig = man | 0x0080_0000;
        let kept = sig >> shift;
        let half_ulp = 1u32 << (shift - 1);
        let rest = sig & ((1u32 << shift) - 1);
        let up = rest > half_ulp || (rest == half_ulp && kept & 1 == 1);
        return sign | (kept + up as u32) as u16;
    }
    // Normal: drop 13 bits; a carry out of the mantissa correctly bumps the
    // exponent (and reaches infinity from the largest binade).
    let kept = ((e as u32) << 10) | (man >> 13);
    let rest = man & 0x1fff;
    let up = rest > 0x1000 || (rest == 0x1000 && kept & 1 == 1);
    sign | (kept + up as u32) as u16
}

/// f32 -> bf16, round to nearest, ties to even. NaN becomes a quiet NaN with
/// its sign and the top of its payload; overflow gives infinity.
///
/// ```
/// use tessera_core::fp::{bf16, scalar};
///
/// assert_eq!(scalar::f32_to_bf16(1.0 / 3.0), bf16::from_f32(1.0 / 3.0));
/// ```
#[must_use]
pub const fn f32_to_bf16(x: f32) -> bf16 {
    bf16::from_bits(f32_bits_to_bf16_bits(x.to_bits()))
}

pub(crate) const fn f32_bits_to_bf16_bits(bits: u32) -> u16 {
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 0x0040) as u16;
    }
    let rounding = 0x7fff + ((bits >> 16) & 1);
    (bits.wrapping_add(rounding) >> 16) as u16
}

/// f16 -> f32 (exact). A NaN is quieted, keeping its sign and payload.
///
/// ```
/// use tessera_core::fp::{f16, scalar};
///
/// assert_eq!(scalar::f16_to_f32(f16::MAX), 65504.0);
/// ```
#[must_use]
pub const fn f16_to_f32(h: f16) -> f32 {
    f32::from_bits(f16_bits_to_f32_bits(h.to_bits()))
}

pub(crate) const fn f16_bits_to_f32_bits(h: u16) -> u32 {
    let h = h as u32;
    let sign = (h & 0x8000) << 16;
    let exp = (h >> 10) & 0x1f;
    let man = h & 0x03ff;
    if exp == 0x1f {
        let quiet = if man == 0 { 0 } else { 0x0040_0000 };
        return sign | 0x7f80_0000 | quiet | (man << 13);
    }
    if exp == 0 {
        if man == 0 {
            return sign;
        }
        // Subnormal: normalise so the leading one lands on the hidden bit.
        let shift = man.leading_zeros() - 21; // man < 2^10: leading one to bit 10
        let exp = 113 - shift; // 127 - 14 - shift
        return sign | (exp << 23) | (((man << shift) & 0x03ff) << 13);
    }
    sign | ((exp + 112) << 23) | (man << 13)
}

/// bf16 -> f32 (exact). A NaN is quieted, keeping its sign and payload.
///
/// ```
/// use tessera_core::fp::{bf16, scalar};
///
/// assert_eq!(scalar::bf16_to_f32(bf16::from_bits(0x4049)), 3.140625);
/// ```
#[must_use]
pub const fn bf16_to_f32(h: bf16) -> f32 {
    f32::from_bits(bf16_bits_to_f32_bits(h.to_bits()))
}

pub(crate) const fn bf16_bits_to_f32_bits(h: u16) -> u32 {
    let bits = (h as u32) << 16;
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        bits | 0x0040_0000
    } else {
        bits
    }
}

/// f32 -> f16 with stochastic rounding, using the random bits of element
/// `index` of `stream` (see [the module docs](super) for the rule):
/// [`Format::F16`]'s [`encode`](Format::encode) with
/// [`Round::STOCHASTIC`] and `overflow`.
///
/// ```
/// use tessera_core::fp::{self, Overflow, Stochastic, f16, scalar};
/// use tessera_core::rng::RandomStream;
///
/// // The twin of `f32_to_half_sr_slice`: element i uses position i.
/// let (stream, x) = (RandomStream::new(8, 0), [0.1f32, 0.2, 0.3]);
/// let mut fast = [f16::ZERO; 3];
/// fp::f32_to_half_sr_slice(&x, &mut fast, Stochastic::new(stream, Overflow::Infinity), 0);
/// for i in 0..3 {
///     assert_eq!(fast[i], scalar::f32_to_f16_sr(x[i], stream, i as u64, Overflow::Infinity));
/// }
/// ```
#[must_use]
pub const fn f32_to_f16_sr(x: f32, stream: RandomStream, index: u64, overflow: Overflow) -> f16 {
    let round = Round::STOCHASTIC.with_overflow(overflow);
    f16::from_bits(Format::F16.encode(x, round, stream, index) as u16)
}

/// [`f32_to_f16_sr`] with the random bits of element `index` of any
/// position-addressed source, so tests can enumerate them.
///
/// ```
/// use tessera_core::fp::{Overflow, f16, scalar};
/// use tessera_core::rng::RandomBits;
///
/// struct Fixed(u16);
/// impl RandomBits for Fixed {
///     fn half_bits(&self, _: u64) -> u16 { self.0 }
///     fn word(&self, _: u64, _: u32) -> u32 { 0 }
/// }
/// // Halfway between 1 and the next f16 (spacing 2^-10): the top random
/// // bit of the 13 decides.
/// let x = 1.0 + 2f32.powi(-11);
/// assert_eq!(scalar::f32_to_f16_sr_with(x, &Fixed(0x0000), 0, Overflow::Infinity), f16::ONE);
/// assert_ne!(scalar::f32_to_f16_sr_with(x, &Fixed(0xffff), 0, Overflow::Infinity), f16::ONE);
/// ```
#[must_use]
pub fn f32_to_f16_sr_with<B: RandomBits + ?Sized>(
    x: f32,
    bits: &B,
    index: u64,
    overflow: Overflow,
) -> f16 {
    let round = Round::STOCHASTIC.with_overflow(overflow);
    f16::from_bits(Format::F16.encode_with(x, round, bits, index) as u16)
}

/// f32 -> bf16 with stochastic rounding, using the random bits of element
/// `index` of `stream` (see [the module docs](super) for the rule).
///
/// ```
/// use tessera_core::fp::{Overflow, bf16, scalar};
/// use tessera_core::rng::RandomStream;
///
/// let b = scalar::f32_to_bf16_sr(1.0, RandomStream::new(0, 0), 5, Overflow::Infinity);
/// assert_eq!(b, bf16::ONE); // representable values never move
/// ```
#[must_use]
pub const fn f32_to_bf16_sr(x: f32, stream: RandomStream, index: u64, overflow: Overflow) -> bf16 {
    let round = Round::STOCHASTIC.with_overflow(overflow);
    bf16::from_bits(Format::BF16.encode(x, round, stream, index) as u16)
}

/// [`f32_to_bf16_sr`] with the random bits of element `index` of any
/// position-addressed source (bf16 reads only the 16 half bits).
///
/// ```
/// use tessera_core::fp::{Overflow, bf16, scalar};
/// use tessera_core::rng::RandomBits;
///
/// struct Fixed(u16);
/// impl RandomBits for Fixed {
///     fn half_bits(&self, _: u64) -> u16 { self.0 }
///     fn word(&self, _: u64, _: u32) -> u32 { 0 }
/// }
/// let x = 1.0 + 2f32.powi(-8); // halfway between two bf16 values
/// assert_eq!(scalar::f32_to_bf16_sr_with(x, &Fixed(0), 0, Overflow::Infinity), bf16::ONE);
/// assert_ne!(scalar::f32_to_bf16_sr_with(x, &Fixed(0xffff), 0, Overflow::Infinity), bf16::ONE);
/// ```
#[must_use]
pub fn f32_to_bf16_sr_with<B: RandomBits + ?Sized>(
    x: f32,
    bits: &B,
    index: u64,
    overflow: Overflow,
) -> bf16 {
    let round = Round::STOCHASTIC.with_overflow(overflow);
    bf16::from_bits(Format::BF16.encode_with(x, round, bits, index) as u16)
}
