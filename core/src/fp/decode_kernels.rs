//! The SIMD kernel of [`decode_slice`](super::decode_slice), and
//! [`Decoder`], the lane form of [`Format::decode`] that MX and NVFP4
//! dequantize share.
//!
//! A code of up to 8 bits decodes by arithmetic on lanes rather than by a
//! table load per element: its exponent and mantissa fields shifted into
//! an f32 pattern and rebiased by an integer add (normal values), or its
//! mantissa converted to f32 and multiplied by a power of two
//! (subnormals, exact); NaN, infinity and the `fnuz` NaN are masks. Wider
//! formats, and formats whose values leave f32's normal exponents (none
//! of the named ones), loop over the twin.

use super::NanEncoding;
use super::code::Code;
use super::format::Format;
use crate::arch::{F32s, Kernel, Real, Simd, U32s, each_vector};

/// A format of up to 8 bits folded into the constants of its lane
/// decoding (see the module docs).
#[derive(Clone, Copy)]
pub(crate) struct Decoder {
    /// The exponent and mantissa bits.
    mag_mask: u32,
    /// Moves the sign bit to bit 31 (with `sign_bit` 0 if unsigned).
    sign_shift: u32,
    sign_bit: u32,
    mantissa_bits: u32,
    /// `23 - mantissa_bits`.
    man_shift: u32,
    /// Added to a normal value's shifted fields: `(127 - bias) << 23`.
    rebias: u32,
    /// A zero-field value is `(man | implicit) * 2^sub_exp`: its f32
    /// pattern `(man | implicit) << sub_shift` where every such value is
    /// an f32 subnormal, else a product by `sub_scale` (an f32 subnormal
    /// operand would cost a microcode assist on every vector).
    implicit: u32,
    sub_shift: Option<u32>,
    sub_scale: f32,
    /// Exponent fields above this are NaN.
    nan_field: u32,
    /// The all-ones field (IEEE formats: infinity and NaN), else above 255.
    ieee_field: u32,
    /// The one magnitude that is NaN (`fn` formats), else above 255.
    nan_magnitude: u32,
    /// Whether negative zero is NaN (`fnuz`).
    nan_negative_zero: bool,
}

impl Decoder {
    /// The lane decoder of `f`, or `None` where the lanes do not cover it
    /// (over 8 bits, or values outside f32's normal exponents).
    #[must_use]
    pub(crate) const fn new(f: Format) -> Option<Self> {
        let (e, m, bias) = (f.exponent_bits(), f.mantissa_bits(), f.bias());
        let sub_exp = if f.has_zero() { f.emin() } else { -bias } - m as i32;
        if f.bits() > 8 || 1 - bias < -126 || f.emax() > 127 || sub_exp < -149 {
            return None;
        }
        let all_ones = (1 << e) - 1;
        let nan = f.emax() + bias;
        let nan_field = if nan < all_ones {
            nan as u32
        } else {
            all_ones as u32
        };
        Some(Self {
            mag_mask: (1 << (e + m)) - 1,
            sign_shift: 31 - (e + m),
            sign_bit: if f.is_signed() { 0x8000_0000 } else { 0 },
            mantissa_bits: m,
            man_shift: 23 - m,
            rebias: ((127 - bias) as u32) << 23,
            implicit: if f.has_zero() { 0 } else { 1 << m },
            // Every `man | implicit` (below 2^m, or 2^(m + 1) without a
            // zero) times 2^sub_exp is below 2^-126.
            sub_shift: if sub_exp + m as i32 + !f.has_zero() as i32 <= -126 {
                Some((sub_exp + 149) as u32)
            } else {
                None
            },
            sub_scale: super::block_scale::pow2(sub_exp),
            nan_field,
            ieee_field: match f.nan_encoding() {
                NanEncoding::Ieee => all_ones as u32,
                _ => u32::MAX,
            },
            nan_magnitude: match f.nan_encoding() {
                NanEncoding::AllOnes => (1 << (e + m)) - 1,
                _ => u32::MAX,
            },
            nan_negative_zero: matches!(f.nan_encoding(), NanEncoding::NegativeZero),
        })
    }

    /// The values of the codes in `c`'s lanes (bits above the format's
    /// ignored), bitwise equal to [`Format::decode`].
    #[inline(always)]
    pub(crate) fn decode<S: Simd>(&self, c: S::U) -> S::F {
        let s = <S::U as U32s>::splat;
        let zero = s(0);
        let sign = (c << self.sign_shift) & s(self.sign_bit);
        let mag = c & s(self.mag_mask);
        let field = mag >> self.mantissa_bits;
        let man = mag & s((1 << self.mantissa_bits) - 1);
        let normal = (mag << self.man_shift) + s(self.rebias);
        let small = match self.sub_shift {
            Some(shift) => (man | s(self.implicit)) << shift,
            None => {
                // `man | implicit` (below 2^8) to f32 exactly, then scaled.
                let magic = s(0x4b00_0000);
                let small =
                    S::F::from_bits(man | s(self.implicit) | magic) - S::F::from_bits(magic);
                (small * <S::F as Real>::splat(self.sub_scale)).to_bits()
            }
        };
        let value = field.simd_eq(zero).select(small, normal) | sign;
        let mut nan = field.simd_gt(s(self.nan_field)) | mag.simd_eq(s(self.nan_magnitude));
        if self.nan_negative_zero {
            nan |= sign.simd_ne(zero) & mag.simd_eq(zero);
        }
        let value = nan.select(sign | s(0x7fc0_0000), value);
        // IEEE: infinity, or NaN keeping the mantissa as payload.
        let payload = man
            .simd_ne(zero)
            .select(s(0x0040_0000) | (man << self.man_shift), zero);
        let ieee = field.simd_eq(s(self.ieee_field));
        S::F::from_bits(ieee.select(sign | s(0x7f80_0000) | payload, value))
    }
}

/// The first `S::LANES` codes of `src` in u32 lanes.
#[inline(always)]
pub(crate) fn load_codes<S: Simd, C: Code>(src: &[C]) -> S::U {
    let mut lanes = [0u32; 16];
    for (l, c) in lanes.iter_mut().zip(&src[..S::LANES]) {
        *l = c.code();
    }
    S::U::from_slice(&lanes)
}

/// [`decode_slice`](super::decode_slice)'s arguments.
pub(super) struct DecodeCodes<'a, C> {
    pub(super) format: Format,
    pub(super) src: &'a [C],
    pub(super) dst: &'a mut [f32],
}

impl<C: Code> Kernel for DecodeCodes<'_, C> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        let Some(decoder) = Decoder::new(self.format) else {
            return self.scalar();
        };
        let Self { format, src, dst } = self;
        let body = each_vector::<S>(
            src.len(),
            #[inline(always)]
            |at| {
                decoder
                    .decode::<S>(load_codes::<S, C>(&src[at..]))
                    .store(&mut dst[at..])
            },
        );
        Self {
            format,
            src: &src[body..],
            dst: &mut dst[body..],
        }
        .scalar();
    }

    fn scalar(self) {
        for (c, d) in self.src.iter().zip(self.dst) {
            *d = self.format.decode(c.code());
        }
    }
}
