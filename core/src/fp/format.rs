//! Number formats as data: exponent and mantissa widths, bias, specials.
//!
//! A [`Format`] is a small `Copy` value with `const` presets. Every
//! operation on it is a `const fn` marked `#[inline(always)]` where it sits
//! on a hot path, so a kernel called with a preset (a constant) folds the
//! format's parameters at compile time, and one called with a format chosen
//! at run time pays a few loads and compares per element (see
//! ARCHITECTURE.md, "Number formats").
//!
//! Figures (checked against the sources cited on each preset):
//! ml_dtypes' `finfo` tables and type docs, the OCP 8-bit floating point
//! specification (OFP8, rev. 1.0, 2023) and Microscaling formats
//! specification (MX, v1.0, 2023), Graphcore's Poplar `Quarter.hpp` docs
//! and the FNUZ RFC of StableHLO (2023), and CPFloat's `optstruct`
//! (Fasi and Mikaitis, ACM TOMS 2023).

use core::fmt;

/// How a format encodes NaN (and whether it has infinities).
///
/// ```
/// use tessera_core::fp::{Format, NanEncoding};
///
/// assert_eq!(Format::E5M2.nan_encoding(), NanEncoding::Ieee);
/// assert_eq!(Format::E4M3FN.nan_encoding(), NanEncoding::AllOnes);
/// assert_eq!(Format::E4M3FNUZ.nan_encoding(), NanEncoding::NegativeZero);
/// assert_eq!(Format::E2M1FN.nan_encoding(), NanEncoding::None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum NanEncoding {
    /// IEEE 754: the all-ones exponent field is infinity (mantissa 0) and
    /// NaN (mantissa not 0). The only kind with infinities.
    Ieee,
    /// ml_dtypes' `fn` types and OCP E4M3: no infinities; the all-ones
    /// pattern (either sign; the whole byte for unsigned E8M0) is NaN, and
    /// the rest of the top binade holds finite values.
    AllOnes,
    /// The `fnuz` types (Graphcore's F143/F152): no infinities, no negative
    /// zero; the negative-zero pattern (sign bit alone) is the one NaN.
    NegativeZero,
    /// No NaN and no infinities (OCP FP6 and FP4): every pattern is finite.
    None,
}

/// Why a format description was refused.
///
/// ```
/// use tessera_core::fp::{Format, FormatError};
///
/// assert_eq!(
///     Format::cpfloat(25, -126, 127, true),
///     Err(FormatError::Precision { precision: 25 })
/// );
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatError {
    /// The precision (significand bits, the implicit one included) must be
    /// 2 to 24 (f32's; at least one mantissa bit, which IEEE NaN needs).
    Precision {
        /// What was asked for.
        precision: u32,
    },
    /// The exponent range must satisfy `-126 <= emin <= emax <= 127` (f32's
    /// normal range).
    ExponentRange {
        /// The smallest normal exponent asked for.
        emin: i32,
        /// The largest exponent asked for.
        emax: i32,
    },
    /// A Graphcore scale bias must be in `-32..=31`.
    ScaleBias {
        /// What was asked for.
        scale: i32,
    },
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Precision { precision } => {
                write!(f, "precision {precision} is outside 2..=24")
            }
            Self::ExponentRange { emin, emax } => write!(
                f,
                "exponent range emin {emin}, emax {emax} is not within -126 <= emin <= emax <= 127"
            ),
            Self::ScaleBias { scale } => write!(f, "scale bias {scale} is outside -32..=31"),
        }
    }
}

impl core::error::Error for FormatError {}

/// A binary floating-point format of at most 32 bits whose values f32
/// holds exactly: the layout of its encodings and its special values.
///
/// Encodings are `u32` with the format's bits in the low
/// [`Format::bits`]: sign (if [`Format::is_signed`]), then the exponent
/// field, then the mantissa field. A value with exponent field `e >= 1`
/// (`>= 0` for formats without zero) and mantissa field `f` is
/// `2^(e - bias) * (1 + f / 2^m)`; field 0 holds zero and the subnormals
/// `2^(1 - bias) * f / 2^m`.
///
/// | preset | bits | bias | max | min normal | min subnormal | NaN | inf |
/// |---|---|---|---|---|---|---|---|
/// | [`E3M4`](Format::E3M4) | 8 | 3 | 15.5 | 2^-2 | 2^-6 | IEEE | yes |
/// | [`E4M3`](Format::E4M3) | 8 | 7 | 240 | 2^-6 | 2^-9 | IEEE | yes |
/// | [`E4M3FN`](Format::E4M3FN) | 8 | 7 | 448 | 2^-6 | 2^-9 | `S.1111.111` | no |
/// | [`E4M3FNUZ`](Format::E4M3FNUZ), [`F143`](Format::F143) | 8 | 8 | 240 | 2^-7 | 2^-10 | `0x80` | no |
/// | [`E4M3B11FNUZ`](Format::E4M3B11FNUZ) | 8 | 11 | 30 | 2^-10 | 2^-13 | `0x80` | no |
/// | [`E5M2`](Format::E5M2) | 8 | 15 | 57344 | 2^-14 | 2^-16 | IEEE | yes |
/// | [`E5M2FNUZ`](Format::E5M2FNUZ), [`F152`](Format::F152) | 8 | 16 | 57344 | 2^-15 | 2^-17 | `0x80` | no |
/// | [`E8M0FNU`](Format::E8M0FNU) (unsigned, no zero) | 8 | 127 | 2^127 | 2^-127 | none | `0xff` | no |
/// | [`E2M3FN`](Format::E2M3FN) | 6 | 1 | 7.5 | 1 | 2^-3 | none | no |
/// | [`E3M2FN`](Format::E3M2FN) | 6 | 3 | 28 | 2^-2 | 2^-4 | none | no |
/// | [`E2M1FN`](Format::E2M1FN) | 4 | 1 | 6 | 1 | 2^-1 | none | no |
/// | [`F16`](Format::F16) | 16 | 15 | 65504 | 2^-14 | 2^-24 | IEEE | yes |
/// | [`BF16`](Format::BF16) | 16 | 127 | 3.3895e38 | 2^-126 | 2^-133 | IEEE | yes |
/// | [`TF32`](Format::TF32) | 19 | 127 | 3.4028e38 | 2^-126 | 2^-136 | IEEE | yes |
///
/// ```
/// use tessera_core::fp::Format;
///
/// let f = Format::E4M3FN;
/// assert_eq!((f.bits(), f.bias(), f.max()), (8, 7, 448.0));
/// assert_eq!(f.decode(0x7e), 448.0);
/// assert!(f.decode(0x7f).is_nan());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Format {
    exponent_bits: u32,
    mantissa_bits: u32,
    bias: i32,
    /// The exponent of the largest finite binade.
    emax: i32,
    signed: bool,
    nan: NanEncoding,
    subnormals: bool,
    /// False only for formats whose exponent field 0 is a normal binade
    /// (E8M0).
    zero: bool,
}

impl Format {
    /// Sign, `exponent_bits`, `mantissa_bits`, `bias`, specials as `nan`
    /// says, subnormals: the shape of every named 8-bit and smaller format.
    const fn layout(exponent_bits: u32, mantissa_bits: u32, bias: i32, nan: NanEncoding) -> Self {
        let top = (1 << exponent_bits) - 1;
        // The top field is all specials for IEEE; for AllOnes only its
        // all-ones mantissa is (the whole field when there is no mantissa).
        let top_finite = match nan {
            NanEncoding::Ieee => top - 1,
            NanEncoding::AllOnes if mantissa_bits == 0 => top - 1,
            _ => top,
        };
        Self {
            exponent_bits,
            mantissa_bits,
            bias,
            emax: top_finite - bias,
            signed: true,
            nan,
            subnormals: true,
            zero: true,
        }
    }

    /// ml_dtypes `float8_e3m4`: IEEE-like, bias 3.
    pub const E3M4: Self = Self::layout(3, 4, 3, NanEncoding::Ieee);
    /// ml_dtypes `float8_e4m3`: IEEE-like E4M3 (infinities, bias 7).
    pub const E4M3: Self = Self::layout(4, 3, 7, NanEncoding::Ieee);
    /// ml_dtypes `float8_e4m3fn`, OCP OFP8 E4M3 (the MXFP8 element).
    pub const E4M3FN: Self = Self::layout(4, 3, 7, NanEncoding::AllOnes);
    /// ml_dtypes `float8_e4m3fnuz` (bias 8, NaN `0x80`).
    pub const E4M3FNUZ: Self = Self::layout(4, 3, 8, NanEncoding::NegativeZero);
    /// ml_dtypes `float8_e4m3b11fnuz` (bias 11, NaN `0x80`).
    pub const E4M3B11FNUZ: Self = Self::layout(4, 3, 11, NanEncoding::NegativeZero);
    /// ml_dtypes `float8_e5m2`, OCP OFP8 E5M2 (IEEE-like).
    pub const E5M2: Self = Self::layout(5, 2, 15, NanEncoding::Ieee);
    /// ml_dtypes `float8_e5m2fnuz` (bias 16, NaN `0x80`).
    pub const E5M2FNUZ: Self = Self::layout(5, 2, 16, NanEncoding::NegativeZero);
    /// ml_dtypes `float8_e8m0fnu`, OCP MX's E8M0 scale: unsigned powers of
    /// two `2^-127..=2^127`, no zero, NaN `0xff`.
    pub const E8M0FNU: Self = Self {
        signed: false,
        subnormals: false,
        zero: false,
        ..Self::layout(8, 0, 127, NanEncoding::AllOnes)
    };
    /// ml_dtypes `float6_e2m3fn`, OCP MX FP6 E2M3: no NaN, no infinities.
    pub const E2M3FN: Self = Self::layout(2, 3, 1, NanEncoding::None);
    /// ml_dtypes `float6_e3m2fn`, OCP MX FP6 E3M2: no NaN, no infinities.
    pub const E3M2FN: Self = Self::layout(3, 2, 3, NanEncoding::None);
    /// ml_dtypes `float4_e2m1fn`, OCP MX FP4 E2M1: no NaN, no infinities.
    pub const E2M1FN: Self = Self::layout(2, 1, 1, NanEncoding::None);
    /// Graphcore's F143 (Poplar `QuarterMetadata::Format::F143`) with
    /// scale bias 0: the layout of [`E4M3FNUZ`](Format::E4M3FNUZ). See
    /// [`Format::with_scale_bias`].
    pub const F143: Self = Self::E4M3FNUZ;
    /// Graphcore's F152 with scale bias 0: the layout of
    /// [`E5M2FNUZ`](Format::E5M2FNUZ).
    pub const F152: Self = Self::E5M2FNUZ;
    /// IEEE binary16 (`f16`).
    pub const F16: Self = Self::layout(5, 10, 15, NanEncoding::Ieee);
    /// bfloat16.
    pub const BF16: Self = Self::layout(8, 7, 127, NanEncoding::Ieee);
    /// NVIDIA's TensorFloat-32: f32's range, 10 mantissa bits (19 bits).
    pub const TF32: Self = Self::layout(8, 10, 127, NanEncoding::Ieee);
    /// IEEE binary32 (`f32`) itself: every operation is exact on it.
    pub const F32: Self = Self::layout(8, 23, 127, NanEncoding::Ieee);

    /// A format as CPFloat describes one: `precision` significand bits
    /// (the implicit one included, 2 to 24), normal exponents
    /// `emin..=emax` (within f32's `-126..=127`), subnormals or not;
    /// IEEE infinities and NaN. Its encodings use the fewest exponent bits
    /// that hold the range with bias `1 - emin`; exponent fields above
    /// `emax` other than all ones (present only when `emin != 1 - emax`)
    /// decode to NaN. Without subnormals, codes with exponent field 0 and
    /// a mantissa other than 0 are never produced (decoding gives their
    /// IEEE subnormal value).
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// // CPFloat's binary16 parameters give f16.
    /// assert_eq!(Format::cpfloat(11, -14, 15, true), Ok(Format::F16));
    /// let p3 = Format::cpfloat(3, -6, 7, true)?;
    /// assert_eq!((p3.max(), p3.min_subnormal()), (224.0, 2f32.powi(-8)));
    /// # Ok::<(), tessera_core::fp::FormatError>(())
    /// ```
    ///
    /// # Errors
    /// [`FormatError::Precision`] or [`FormatError::ExponentRange`].
    pub const fn cpfloat(
        precision: u32,
        emin: i32,
        emax: i32,
        subnormals: bool,
    ) -> Result<Self, FormatError> {
        if precision < 2 || precision > 24 {
            return Err(FormatError::Precision { precision });
        }
        if emin < -126 || emax > 127 || emin > emax {
            return Err(FormatError::ExponentRange { emin, emax });
        }
        // Fields 1..=emax - emin + 1 are finite; the all-ones field above.
        let fields = (emax - emin + 2) as u32;
        let exponent_bits = 32 - fields.leading_zeros();
        Ok(Self {
            emax,
            subnormals,
            ..Self::layout(exponent_bits, precision - 1, 1 - emin, NanEncoding::Ieee)
        })
    }

    /// The format with a Graphcore scale bias `scale` (`-32..=31`): an
    /// encoding's value is multiplied by `2^scale`, as Poplar's `quarter`
    /// type defines it (`d = q * pow(2, s)`), so the exponent bias drops by
    /// `scale`.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// let f = Format::F143.with_scale_bias(-4)?;
    /// assert_eq!(f.max(), 240.0 / 16.0);
    /// assert_eq!(f.bias(), 12);
    /// # Ok::<(), tessera_core::fp::FormatError>(())
    /// ```
    ///
    /// # Errors
    /// [`FormatError::ScaleBias`] outside `-32..=31`;
    /// [`FormatError::ExponentRange`] if the scaled range leaves f32's.
    pub const fn with_scale_bias(self, scale: i32) -> Result<Self, FormatError> {
        if scale < -32 || scale > 31 {
            return Err(FormatError::ScaleBias { scale });
        }
        let scaled = Self {
            bias: self.bias - scale,
            emax: self.emax + scale,
            ..self
        };
        let emin = scaled.emin();
        let lowest = if scaled.subnormals {
            emin - scaled.mantissa_bits as i32
        } else {
            emin
        };
        if lowest < -149 || scaled.emax > 127 {
            return Err(FormatError::ExponentRange {
                emin,
                emax: scaled.emax,
            });
        }
        Ok(scaled)
    }

    /// Width of an encoding in bits.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!((Format::E2M1FN.bits(), Format::E8M0FNU.bits(), Format::TF32.bits()), (4, 8, 19));
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn bits(self) -> u32 {
        self.signed as u32 + self.exponent_bits + self.mantissa_bits
    }

    /// Width of the exponent field.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::E5M2.exponent_bits(), 5);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn exponent_bits(self) -> u32 {
        self.exponent_bits
    }

    /// Width of the mantissa (trailing significand) field.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::E5M2.mantissa_bits(), 2);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn mantissa_bits(self) -> u32 {
        self.mantissa_bits
    }

    /// Significand bits, the implicit one included (CPFloat's precision).
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::BF16.precision(), 8);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn precision(self) -> u32 {
        self.mantissa_bits + 1
    }

    /// The exponent bias.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::E4M3B11FNUZ.bias(), 11);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn bias(self) -> i32 {
        self.bias
    }

    /// The exponent of the smallest normal binade.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!((Format::F16.emin(), Format::E8M0FNU.emin()), (-14, -127));
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn emin(self) -> i32 {
        if self.zero { 1 - self.bias } else { -self.bias }
    }

    /// The exponent of the largest finite binade.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!((Format::E4M3.emax(), Format::E4M3FN.emax()), (7, 8));
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn emax(self) -> i32 {
        self.emax
    }

    /// Whether encodings carry a sign bit (all but E8M0).
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert!(!Format::E8M0FNU.is_signed());
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn is_signed(self) -> bool {
        self.signed
    }

    /// How NaN is encoded.
    ///
    /// ```
    /// use tessera_core::fp::{Format, NanEncoding};
    ///
    /// assert_eq!(Format::F152.nan_encoding(), NanEncoding::NegativeZero);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn nan_encoding(self) -> NanEncoding {
        self.nan
    }

    /// Whether the format has infinities (exactly the IEEE kind).
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert!(Format::E5M2.has_infinities() && !Format::E4M3FN.has_infinities());
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn has_infinities(self) -> bool {
        matches!(self.nan, NanEncoding::Ieee)
    }

    /// Whether the format has a NaN.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert!(Format::E4M3FNUZ.has_nan() && !Format::E2M1FN.has_nan());
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn has_nan(self) -> bool {
        !matches!(self.nan, NanEncoding::None)
    }

    /// Whether the format has subnormals.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert!(Format::E2M1FN.has_subnormals() && !Format::E8M0FNU.has_subnormals());
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn has_subnormals(self) -> bool {
        self.subnormals
    }

    /// Whether zero is a value (false only for E8M0).
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert!(Format::E2M1FN.has_zero() && !Format::E8M0FNU.has_zero());
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn has_zero(self) -> bool {
        self.zero
    }

    /// The largest finite value.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::E5M2FNUZ.max(), 57344.0);
    /// assert_eq!(Format::E2M3FN.max(), 7.5);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn max(self) -> f32 {
        f32::from_bits(self.max_bits())
    }

    /// [`Format::max`] as f32 bits.
    #[inline(always)]
    pub(crate) const fn max_bits(self) -> u32 {
        let m = self.mantissa_bits;
        // The top binade's largest mantissa field: all ones, less the NaN
        // pattern for AllOnes formats.
        let top = match self.nan {
            NanEncoding::AllOnes if m > 0 => (1 << m) - 2,
            _ => (1 << m) - 1,
        };
        pattern(self.emax, (1 << 23) | (top << (23 - m)))
    }

    /// The smallest positive normal value.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::E3M2FN.min_normal(), 0.25);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn min_normal(self) -> f32 {
        f32::from_bits(pattern(self.emin(), 1 << 23))
    }

    /// The smallest positive value: the smallest subnormal, or the
    /// smallest normal for formats without subnormals.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::E2M1FN.min_subnormal(), 0.5);
    /// assert_eq!(Format::E8M0FNU.min_subnormal(), 2f32.powi(-127));
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn min_subnormal(self) -> f32 {
        f32::from_bits(pattern(self.min_exponent(), 1 << 23))
    }

    /// The exponent of the smallest positive value.
    #[inline(always)]
    pub(crate) const fn min_exponent(self) -> i32 {
        if self.subnormals {
            self.emin() - self.mantissa_bits as i32
        } else {
            self.emin()
        }
    }
}

/// The f32 bits of `2^exp * sig / 2^23` for a significand `sig` with its
/// leading one at bit 23, exactly (the caller guarantees that f32 holds
/// the value: `exp >= -126`, or the bits shifted out below 2^-149 are 0).
#[inline(always)]
pub(crate) const fn pattern(exp: i32, sig: u32) -> u32 {
    if exp >= -126 {
        (((exp + 127) as u32) << 23) | (sig & 0x007f_ffff)
    } else {
        sig >> (-126 - exp)
    }
}
