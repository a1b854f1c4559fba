//! Block scales: the OCP MX shared-scale rules ([`ScaleRule`]), the
//! block's amax, exact scaling by a power of two, and the errors of the
//! block functions ([`BlockError`]). Shared by [`Mx`](super::Mx) and
//! [`Nvfp4`](super::Nvfp4).

use core::fmt;

/// E8M0's bias: code `c` (`0..=254`) is `2^(c - 127)`.
const E8M0_BIAS: i32 = 127;
/// E8M0's NaN code.
pub(crate) const E8M0_NAN: u8 = 0xff;

/// How an MX block's E8M0 scale `2^s` is chosen from the block's largest
/// magnitude `amax` (finite) and the element format's largest exponent
/// `emax` (E4M3 8, E5M2 15, E2M3 2, E3M2 4, E2M1 2, INT8 0).
///
/// | rule | `s` | source |
/// |---|---|---|
/// | [`Floor`](ScaleRule::Floor) | `floor(log2 amax) - emax` | OCP MX v1.0 section 6.3 |
/// | [`Ceil`](ScaleRule::Ceil) | `ceil(log2 amax) - emax` | torchao `ScaleCalculationMode.CEIL` |
/// | [`Rceil`](ScaleRule::Rceil) | `ceil(log2 r)`, `r = fl(amax * fl(1 / max))` | cuBLAS/cuDNN `quantize_round_up(amax / max)`, as Transformer Engine and torchao compute it |
/// | [`Even`](ScaleRule::Even) | `floor(log2 amax') - emax`, `amax'` = amax rounded to the element's precision, ties up | torchao `ScaleCalculationMode.EVEN` |
///
/// Every rule then clamps `s` to `-127..=127 - emax`. Below (amax 0,
/// tiny or subnormal) the scale saturates at E8M0's smallest, `2^-127`
/// (microxcaling and torchao do the same). Above, it saturates at
/// `2^(127 - emax)`, the largest scale whose elements all decode to finite
/// f32 values: Floor never exceeds it; Ceil, Rceil and Even do only for
/// amax above `2^127`, where an element rounding up to `2^emax` would
/// decode to `2^128`. Saturating keeps such a block finite, its largest
/// elements clamped to the element max (microxcaling gives a NaN scale
/// where `s > 127`, and torchao where its E8M0 conversion overflows,
/// Even's included; Tessera never turns a finite block into NaN). Even
/// is computed on exact exponents, not by adding to the f32 pattern.
///
/// ```
/// use tessera_core::fp::{MxFormat, ScaleRule};
///
/// // amax 300 for E4M3 (max 448 = 1.75 x 2^8): floor(log2 300) = 8.
/// let scale = |rule| MxFormat::E4M3.block_scale(rule, 300.0);
/// assert_eq!(scale(ScaleRule::Floor), 127); // 2^0
/// assert_eq!(scale(ScaleRule::Ceil), 128); // 2^1
/// assert_eq!(scale(ScaleRule::Rceil), 127); // 300 / 448 <= 1
/// assert_eq!(scale(ScaleRule::Even), 127);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum ScaleRule {
    /// The spec's: `floor(log2 amax) - emax`. Elements of the top binade
    /// above the format's max (E4M3: 464 to 511) saturate.
    #[default]
    Floor,
    /// `ceil(log2 amax) - emax`: nothing saturates, one binade of range
    /// is lost when amax is not a power of two.
    Ceil,
    /// The smallest power of two at least `fl(amax * fl(1 / max))` (f32
    /// arithmetic): what NVIDIA's hardware conversion `cvt.rp.satfinite.ue8m0`
    /// computes from Transformer Engine's operands.
    Rceil,
    /// Floor of amax rounded (ties up) to the element's significand
    /// precision (INT8: 7 bits), so an amax just below a power of two takes
    /// the next scale.
    Even,
}

/// Why a block function refused its arguments.
///
/// ```
/// use tessera_core::fp::{BlockError, Mx, MxFormat};
/// use tessera_core::rng::RandomStream;
///
/// let mx = Mx::new(MxFormat::E4M3);
/// let mut codes = [0u8; 31];
/// let mut scales = [0u8; 1];
/// let err = mx.quantize(&[1.0; 32], &mut codes, &mut scales, &RandomStream::new(0, 0), 0);
/// assert_eq!(err, Err(BlockError::Length { what: "codes", expected: 32, got: 31 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BlockError {
    /// A slice has the wrong length for the number of elements.
    Length {
        /// Which slice: `"codes"`, `"scales"` or `"dst"`.
        what: &'static str,
        /// The length it must have.
        expected: usize,
        /// Its length.
        got: usize,
    },
    /// An NVFP4 tensor scale must be positive and finite.
    TensorScale {
        /// What was given.
        scale: f32,
    },
}

impl fmt::Display for BlockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Length {
                what,
                expected,
                got,
            } => write!(f, "{what}: {got} entries where {expected} are needed"),
            Self::TensorScale { scale } => {
                write!(f, "tensor scale {scale} is not positive and finite")
            }
        }
    }
}

impl core::error::Error for BlockError {}

/// `Err(Length)` unless `got == expected`.
pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), BlockError> {
    if got == expected {
        Ok(())
    } else {
        Err(BlockError::Length {
            what,
            expected,
            got,
        })
    }
}

/// The largest magnitude of `block`, or `None` if an element is NaN or
/// infinite.
#[inline(always)]
pub(crate) fn finite_amax(block: &[f32]) -> Option<f32> {
    // Magnitude patterns order as the magnitudes; NaN and infinity are
    // the patterns from 0x7f80_0000 up.
    let max = block
        .iter()
        .fold(0, |m, x| m.max(x.to_bits() & 0x7fff_ffff));
    (max < 0x7f80_0000).then(|| f32::from_bits(max))
}

/// [`finite_amax`] of `block`; when it is `None`, `codes` (the block's
/// element codes) are cleared: a NaN-scaled block stores zeros.
#[inline(always)]
pub(crate) fn amax_or_clear(block: &[f32], codes: &mut [u8]) -> Option<f32> {
    let amax = finite_amax(block);
    if amax.is_none() {
        codes.fill(0);
    }
    amax
}

/// `floor(log2 |x|)` of a finite nonzero magnitude pattern, exactly (f32
/// subnormals included).
#[inline(always)]
pub(crate) const fn exponent(abs: u32) -> i32 {
    if abs < 0x0080_0000 {
        31 - abs.leading_zeros() as i32 - 149
    } else {
        (abs >> 23) as i32 - 127
    }
}

/// The significand of a finite nonzero magnitude pattern below its
/// leading one, as 23 bits (f32 subnormals normalised).
#[inline(always)]
const fn fraction(abs: u32) -> u32 {
    if abs < 0x0080_0000 {
        (abs << (abs.leading_zeros() - 8)) & 0x007f_ffff
    } else {
        abs & 0x007f_ffff
    }
}

/// `2^k` as f32, for `-149 <= k <= 127`.
#[inline(always)]
pub(crate) const fn pow2(k: i32) -> f32 {
    if k >= -126 {
        f32::from_bits(((k + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (k + 149))
    }
}

/// The E8M0 code of the scale `rule` gives a block of largest finite
/// magnitude `amax`, for elements of largest exponent `emax`, largest
/// value `max` and `mantissa_bits` significand bits below the leading one.
#[inline(always)]
pub(crate) const fn e8m0_scale(
    rule: ScaleRule,
    amax: f32,
    emax: i32,
    max: f32,
    mantissa_bits: u32,
) -> u8 {
    let abs = amax.to_bits() & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        return E8M0_NAN;
    }
    let s = match rule {
        _ if abs == 0 => -E8M0_BIAS,
        ScaleRule::Floor => exponent(abs) - emax,
        ScaleRule::Ceil => exponent(abs) + (fraction(abs) != 0) as i32 - emax,
        ScaleRule::Even => {
            // Round the significand to `mantissa_bits` bits, ties up.
            let carry = fraction(abs) + (1 << (22 - mantissa_bits)) >= 1 << 23;
            exponent(abs) + carry as i32 - emax
        }
        ScaleRule::Rceil => {
            let r = (amax.abs() * (1.0 / max)).to_bits();
            if r == 0 {
                -E8M0_BIAS
            } else {
                exponent(r) + (fraction(r) != 0) as i32
            }
        }
    };
    // The largest scale whose elements all decode to finite f32 values.
    let top = E8M0_BIAS - emax;
    let s = if s < -E8M0_BIAS {
        -E8M0_BIAS
    } else if s > top {
        top
    } else {
        s
    };
    (s + E8M0_BIAS) as u8
}

/// `x * 2^-s` for an E8M0 exponent `s`: exact where the result is at
/// least 2^-126 (f32 normal); below that, `x`'s sign times 2^-149, a
/// stand-in in the same open interval `(0, smallest element)` that every
/// deterministic mode rounds as it would the exact value (the quotient is
/// then below every element format's smallest value by a factor 2^110).
#[inline(always)]
pub(crate) const fn scale_down(x: f32, s: i32) -> f32 {
    let bits = x.to_bits();
    let abs = bits & 0x7fff_ffff;
    if abs == 0 || abs >= 0x7f80_0000 {
        return x;
    }
    if exponent(abs) - s < -126 {
        return f32::from_bits((bits & 0x8000_0000) | 1);
    }
    x * pow2(-s)
}
