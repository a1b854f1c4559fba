//! Scalar `const fn` twins of every conversion kernel.
//!
//! These are the definitions: the SIMD kernels must equal them bit for bit
//! (the tests check every f16/bf16 input and, in CI, every f32 input), and
//! the round-to-nearest ones equal the `half` crate's conversions.

use half::{bf16, f16};

use super::Overflow;
use crate::rng::RandomStream;

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
/// `index` of `stream` (see [the module docs](super) for the rule).
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
pub fn f32_to_f16_sr(x: f32, stream: RandomStream, index: u64, overflow: Overflow) -> f16 {
    f32_to_f16_sr_with(
        x,
        stream.half_bits(index),
        |k| stream.word(index, k),
        overflow,
    )
}

/// [`f32_to_f16_sr`] with the element's random bits given explicitly, so
/// tests can enumerate them: `half` is its 16 bits (the least significant
/// random bits of the add-then-truncate rule, the most significant of the
/// tiny-value rule), and `extra(k)` its word `k` for `k` = 1 to 4, read
/// only where more than 16 bits are needed.
///
/// ```
/// use tessera_core::fp::{Overflow, f16, scalar};
///
/// // Halfway between 1 and the next f16 (spacing 2^-10): the top random
/// // bit decides.
/// let x = 1.0 + 2f32.powi(-11);
/// assert_eq!(scalar::f32_to_f16_sr_with(x, 0x0000, |_| 0, Overflow::Infinity), f16::ONE);
/// assert_ne!(scalar::f32_to_f16_sr_with(x, 0xffff, |_| 0, Overflow::Infinity), f16::ONE);
/// ```
#[must_use]
pub fn f32_to_f16_sr_with(
    x: f32,
    half: u16,
    extra: impl Fn(u32) -> u32,
    overflow: Overflow,
) -> f16 {
    let bits = x.to_bits();
    let abs = bits & 0x7fff_ffff;
    let exp = abs >> 23;
    if exp == 0xff {
        return f32_to_f16(x);
    }
    let rounded = if exp >= 103 {
        let discarded = f16_discarded_bits(exp);
        let mut random = u32::from(half);
        if discarded > 16 {
            random |= extra(1) << 16;
        }
        let mask = low_mask(discarded);
        (abs + (random & mask)) & !mask
    } else if tiny_rounds_away(abs, half, extra) {
        F16_MIN_SUBNORMAL_AS_F32
    } else {
        0
    };
    let rounded = saturate(rounded, F16_MAX_AS_F32, overflow);
    f16::from_bits(f32_bits_to_f16_bits((bits & 0x8000_0000) | rounded))
}

/// The f32 bits that f16 discards for a value with biased f32 exponent
/// `exp` in `103..255`: 13 for f16 normals, `126 - exp` (14 to 23) where the
/// result is an f16 subnormal.
#[must_use]
pub(crate) const fn f16_discarded_bits(exp: u32) -> u32 {
    if exp >= 113 { 13 } else { 126 - exp }
}

/// For `0 <= abs < 2^-24` (the f32 bits of a magnitude below the smallest
/// f16 subnormal): whether stochastic rounding goes to 2^-24 rather than 0.
///
/// The probability must be `abs / 2^-24 = m / 2^s` with `m` the f32
/// significand (below 2^24) and `s = 126 - max(exp, 1)` (24 to 125). It is
/// exactly that: read an `s`-bit uniform `U` whose most significant 16 bits
/// are `half`, followed by words 1, 2, 3, 4 (most significant first), and
/// round away iff `U < m`. The words are read only while the bits so far
/// tie with `m` (probability 2^-16 after `half`).
pub(crate) fn tiny_rounds_away(abs: u32, half: u16, extra: impl Fn(u32) -> u32) -> bool {
    let (m, s) = tiny_significand_and_scale(abs);
    let top = m.checked_shr(s - 16).unwrap_or(0);
    let half = u32::from(half);
    if half != top {
        return half < top;
    }
    let mut remaining = s - 16;
    let mut word = 1;
    loop {
        let take = remaining.min(32);
        let drawn = extra(word) >> (32 - take);
        remaining -= take;
        let target = m.checked_shr(remaining).unwrap_or(0) & low_mask(take);
        if drawn != target {
            return drawn < target;
        }
        if remaining == 0 {
            return false;
        }
        word += 1;
    }
}

/// `(m, s)` with `abs = m * 2^-(s + 24)` for a finite magnitude below 2^-24.
#[inline]
pub(crate) const fn tiny_significand_and_scale(abs: u32) -> (u32, u32) {
    let exp = abs >> 23;
    if exp == 0 {
        (abs, 125)
    } else {
        ((abs & 0x007f_ffff) | 0x0080_0000, 126 - exp)
    }
}

const fn low_mask(bits: u32) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1 << bits) - 1
    }
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
    f32_to_bf16_sr_with(x, stream.half_bits(index), overflow)
}

/// [`f32_to_bf16_sr`] with the element's 16 random bits given explicitly.
///
/// ```
/// use tessera_core::fp::{Overflow, bf16, scalar};
///
/// let x = 1.0 + 2f32.powi(-8); // halfway between two bf16 values
/// assert_eq!(scalar::f32_to_bf16_sr_with(x, 0, Overflow::Infinity), bf16::ONE);
/// assert_ne!(scalar::f32_to_bf16_sr_with(x, 0xffff, Overflow::Infinity), bf16::ONE);
/// ```
#[must_use]
pub const fn f32_to_bf16_sr_with(x: f32, half: u16, overflow: Overflow) -> bf16 {
    let bits = x.to_bits();
    let abs = bits & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        return f32_to_bf16(x);
    }
    let rounded = (abs + half as u32) & 0xffff_0000;
    let rounded = saturate(rounded, BF16_MAX_AS_F32, overflow);
    bf16::from_bits((((bits & 0x8000_0000) | rounded) >> 16) as u16)
}

#[inline]
const fn saturate(rounded: u32, max: u32, overflow: Overflow) -> u32 {
    match overflow {
        Overflow::Saturate if rounded > max => max,
        _ => rounded,
    }
}
