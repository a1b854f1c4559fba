//! OCP Microscaling (MX v1.0) blocks: 32 elements sharing one E8M0 scale.

use super::Overflow;
use super::block_kernels::{BlockQuantize, BlockRule, E8M0_VALUES, element_lanes};
use super::block_scale::{
    BlockError, E8M0_NAN, ScaleRule, amax_or_clear, check_len, e8m0_scale, pow2, scale_down,
};
use super::decode_kernels::Decoder;
use super::encode_lanes::Encoder;
use super::format::Format;
use super::pack::{fp4_packed_len, fp6_packed_len, unpack_fp4, unpack_fp6};
use super::round::{Round, Subnormals};
use crate::arch::{self, F32s, Kernel, Real, Simd, U32s};
use crate::rng::{Erased, RandomBits};

/// Elements per MX block.
pub const MX_BLOCK: usize = 32;

/// The element grid of MXINT8: `k / 64` for `|k| <= 127`, as a format
/// (precision 7, one binade `[1, 2)`, subnormals `k / 64` below it).
pub(super) const INT8_GRID: Format = match Format::cpfloat(7, 0, 0, true) {
    Ok(f) => f,
    Err(_) => panic!("the MXINT8 grid is a valid format"),
};

/// The element format of an MX block (see [`Mx`] for the table).
///
/// ```
/// use tessera_core::fp::{Format, MxFormat};
///
/// assert_eq!(MxFormat::E2M1.element(), Some(Format::E2M1FN));
/// assert_eq!((MxFormat::Int8.bits(), MxFormat::Int8.max()), (8, 127.0 / 64.0));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum MxFormat {
    /// MXFP8 with OCP E4M3 elements ([`Format::E4M3FN`]).
    E4M3,
    /// MXFP8 with OCP E5M2 elements ([`Format::E5M2`]).
    E5M2,
    /// MXFP6 with E2M3 elements ([`Format::E2M3FN`]).
    E2M3,
    /// MXFP6 with E3M2 elements ([`Format::E3M2FN`]).
    E3M2,
    /// MXFP4 with E2M1 elements ([`Format::E2M1FN`]).
    E2M1,
    /// MXINT8: two's complement bytes `k`, value `k / 64`.
    Int8,
}

impl MxFormat {
    /// Every MX element format.
    pub const ALL: [Self; 6] = [
        Self::E4M3,
        Self::E5M2,
        Self::E2M3,
        Self::E3M2,
        Self::E2M1,
        Self::Int8,
    ];

    /// The floating-point element format (`None` for INT8).
    ///
    /// ```
    /// use tessera_core::fp::{Format, MxFormat};
    ///
    /// assert_eq!(MxFormat::E4M3.element(), Some(Format::E4M3FN));
    /// assert_eq!(MxFormat::Int8.element(), None);
    /// ```
    #[must_use]
    pub const fn element(self) -> Option<Format> {
        match self {
            Self::E4M3 => Some(Format::E4M3FN),
            Self::E5M2 => Some(Format::E5M2),
            Self::E2M3 => Some(Format::E2M3FN),
            Self::E3M2 => Some(Format::E3M2FN),
            Self::E2M1 => Some(Format::E2M1FN),
            Self::Int8 => None,
        }
    }

    /// The elements' values as a format (INT8's is `k / 64`).
    const fn grid(self) -> Format {
        match self.element() {
            Some(f) => f,
            None => INT8_GRID,
        }
    }

    /// Bits per element code.
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    ///
    /// assert_eq!((MxFormat::E5M2.bits(), MxFormat::E3M2.bits(), MxFormat::E2M1.bits()), (8, 6, 4));
    /// ```
    #[must_use]
    pub const fn bits(self) -> u32 {
        match self {
            Self::Int8 => 8,
            _ => self.grid().bits(),
        }
    }

    /// The exponent of the elements' largest binade (the spec's
    /// `emax_elem`).
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    ///
    /// assert_eq!((MxFormat::E4M3.emax(), MxFormat::E5M2.emax(), MxFormat::Int8.emax()), (8, 15, 0));
    /// ```
    #[must_use]
    pub const fn emax(self) -> i32 {
        self.grid().emax()
    }

    /// The largest element value.
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    ///
    /// assert_eq!((MxFormat::E4M3.max(), MxFormat::E2M3.max()), (448.0, 7.5));
    /// ```
    #[must_use]
    pub const fn max(self) -> f32 {
        self.grid().max()
    }

    /// Code bytes for `n` elements (packed for FP6 and FP4).
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    ///
    /// assert_eq!((MxFormat::E4M3.codes_len(40), MxFormat::E3M2.codes_len(40), MxFormat::E2M1.codes_len(40)), (40, 30, 20));
    /// ```
    #[must_use]
    pub const fn codes_len(self, n: usize) -> usize {
        match self.bits() {
            4 => fp4_packed_len(n),
            6 => fp6_packed_len(n),
            _ => n,
        }
    }

    /// The E8M0 code of the scale `rule` gives a block whose largest
    /// magnitude is `amax` (255 if it is NaN or infinite); see
    /// [`ScaleRule`].
    ///
    /// ```
    /// use tessera_core::fp::{MxFormat, ScaleRule};
    ///
    /// // 6.0 = 1.5 x 2^2 fits E2M1 (emax 2) with scale 2^0.
    /// assert_eq!(MxFormat::E2M1.block_scale(ScaleRule::Floor, 6.0), 127);
    /// assert_eq!(MxFormat::E2M1.block_scale(ScaleRule::Floor, 0.0), 0); // 2^-127
    /// assert_eq!(MxFormat::E2M1.block_scale(ScaleRule::Floor, f32::INFINITY), 255);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn block_scale(self, rule: ScaleRule, amax: f32) -> u8 {
        let grid = self.grid();
        e8m0_scale(rule, amax, grid.emax(), grid.max(), grid.mantissa_bits())
    }

    /// The code of `q` (already divided by the block's scale) rounded by
    /// `round`'s mode and subnormal handling, saturating; element `index`
    /// of `bits`.
    ///
    /// ```
    /// use tessera_core::fp::{MxFormat, Round};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(0, 0);
    /// assert_eq!(MxFormat::E2M1.encode_element(7.0, Round::NEAREST_EVEN, &s, 0), 0x7); // 6, saturated
    /// assert_eq!(MxFormat::Int8.encode_element(-0.5, Round::NEAREST_EVEN, &s, 0), 0xe0); // -32
    /// ```
    #[must_use]
    #[inline(always)]
    pub fn encode_element<B: RandomBits + ?Sized>(
        self,
        q: f32,
        round: Round,
        bits: &B,
        index: u64,
    ) -> u8 {
        let round = round.with_overflow(Overflow::Saturate);
        match self.element() {
            Some(f) => f.encode_with(q, round, bits, index) as u8,
            None => {
                let keep = round.with_subnormals(Subnormals::Keep);
                let v = INT8_GRID.chop_with(q, keep, bits, index);
                // An integer in -127..=127 (exactly).
                (v * 64.0) as i32 as i8 as u8
            }
        }
    }

    /// The value of element code `code` (unscaled), exactly.
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    ///
    /// assert_eq!(MxFormat::E4M3.decode_element(0x7e), 448.0);
    /// assert_eq!(MxFormat::Int8.decode_element(0x80), -2.0);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn decode_element(self, code: u8) -> f32 {
        match self.element() {
            Some(f) => f.decode(code as u32),
            None => code as i8 as f32 / 64.0,
        }
    }

    /// Unpacks (FP6, FP4) or copies one block's codes from its bytes.
    pub(super) fn load(self, bytes: &[u8], codes: &mut [u8]) {
        match self.bits() {
            4 => unpack_fp4(bytes, codes),
            6 => unpack_fp6(bytes, codes),
            _ => codes.copy_from_slice(bytes),
        }
    }

    /// Decodes `dst.len()` elements from their codes (laid out as
    /// [`Mx::quantize`] writes them) and block scales: element `i` is
    /// `P_i * 2^s` of its block, exactly (every value a quantize can
    /// produce is a finite f32; codes and scales from elsewhere beyond
    /// f32's range give infinity); a NaN scale gives NaN for its whole
    /// block.
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    ///
    /// let mut x = [0.0f32; 3];
    /// // E2M1 codes 1.0, -6.0, 0.5 (packed two per byte), scale 2^2.
    /// MxFormat::E2M1.dequantize(&[0xf2, 0x01], &[129], &mut x)?;
    /// assert_eq!(x, [4.0, -24.0, 2.0]);
    /// # Ok::<(), tessera_core::fp::BlockError>(())
    /// ```
    ///
    /// # Errors
    /// [`BlockError::Length`] unless `codes.len() == self.codes_len(n)` and
    /// `scales.len() == Mx::scales_len(n)` for `n = dst.len()`.
    pub fn dequantize(
        self,
        codes: &[u8],
        scales: &[u8],
        dst: &mut [f32],
    ) -> Result<(), BlockError> {
        check_len("codes", self.codes_len(dst.len()), codes.len())?;
        check_len("scales", Mx::scales_len(dst.len()), scales.len())?;
        arch::dispatch(MxDequantize {
            format: self,
            codes,
            scales,
            dst,
        });
        Ok(())
    }
}

/// MX quantization settings: the element format, the scale rule and the
/// element rounding; quantize with [`Mx::quantize`], dequantize with
/// [`MxFormat::dequantize`].
///
/// | format | element ([`MxFormat`]) | element bits | block | scale | element max | element `emax` |
/// |---|---|---|---|---|---|---|
/// | MXFP8 | [`E4M3`](MxFormat::E4M3) ([`Format::E4M3FN`]) | 8 | 32 | E8M0 | 448 | 8 |
/// | MXFP8 | [`E5M2`](MxFormat::E5M2) ([`Format::E5M2`]) | 8 | 32 | E8M0 | 57344 | 15 |
/// | MXFP6 | [`E2M3`](MxFormat::E2M3) ([`Format::E2M3FN`]) | 6 | 32 | E8M0 | 7.5 | 2 |
/// | MXFP6 | [`E3M2`](MxFormat::E3M2) ([`Format::E3M2FN`]) | 6 | 32 | E8M0 | 28 | 4 |
/// | MXFP4 | [`E2M1`](MxFormat::E2M1) ([`Format::E2M1FN`]) | 4 | 32 | E8M0 | 6 | 2 |
/// | MXINT8 | [`Int8`](MxFormat::Int8) (two's complement, `k / 64`) | 8 | 32 | E8M0 | 127/64 | 0 |
/// | NVFP4 ([`Nvfp4`](super::Nvfp4)) | E2M1 | 4 | 16 | E4M3 and an f32 tensor scale | 6 | |
///
/// A block's value `i` is `P_i * 2^s`: element `P_i` times the scale
/// `2^s`, E8M0 code `s + 127` (`0..=254`; 255 is NaN).
///
/// # Quantize, block by block
///
/// Each block is read from memory once: its amax, then its elements, from
/// the 32 inputs in cache. For each block:
/// 1. its largest magnitude `amax`; if an element is NaN or infinite, the
///    scale is NaN (255), the element codes are 0, and the whole block
///    decodes to NaN. This is the spec's rule (a NaN, or a scale that
///    cannot be represented, as `floor(log2 inf)` cannot, makes the scale
///    NaN), applied to every element rather than only through the amax,
///    so it holds for all element formats alike: an infinity is not kept even by E5M2, which
///    has infinities, and FP6, FP4 and INT8, which have no NaN, never see
///    one.
/// 2. the scale `2^s` by the [`ScaleRule`] (the spec's Floor by default),
///    saturating at `2^-127` and at `2^(127 - emax)` (so every block
///    decodes to finite f32 values);
/// 3. each element rounds `x_i / 2^s` into the element format by the
///    [`Round`]'s mode and subnormal handling, always saturating at the
///    element's max (the spec clamps; `round.overflow` is not used).
///    `x_i / 2^s` is exact unless it is below 2^-126, 2^110 below every
///    element's smallest value, where its sign times 2^-149 stands in:
///    every deterministic mode gives the exact result, and stochastic modes
///    round up with probability below 2^-133 instead of below 2^-110.
///
/// MXINT8 elements are the integers `-127..=127` over 64 (two's
/// complement bytes); quantize never produces `-128` (`-2`, which the spec
/// allows), keeping the range symmetric as microxcaling does, and
/// dequantize reads it as `-2`. INT8 has no subnormals: `Subnormals::Flush`
/// is ignored for it.
///
/// # Layout, partial blocks and random bits
///
/// `n` elements take [`Mx::scales_len`]`(n) = ceil(n / 32)` scale bytes and
/// [`MxFormat::codes_len`]`(n)` code bytes: one byte per element for the
/// 8-bit formats, and the OCP packing of [`pack_fp6`](super::pack_fp6) and
/// [`pack_fp4`](super::pack_fp4) (a little-endian bit stream) for FP6 and
/// FP4, so block `b` starts at byte `24 b` (FP6) or `16 b` (FP4). A last
/// block of `r < 32` elements has a scale from its `r` elements (as if
/// padded with zeros, which is what microxcaling does) and `r` codes.
///
/// Element `i` of `src` reads the random bits of position `first_index +
/// i`: quantizing a tensor whole or in pieces that start on block
/// boundaries (multiples of 32 elements), each with its `first_index`,
/// gives the same bytes.
///
/// ```
/// use tessera_core::fp::{Mode, Mx, MxFormat, Round, ScaleRule};
/// use tessera_core::rng::RandomStream;
///
/// let mx = Mx::new(MxFormat::E2M1).with_rule(ScaleRule::Rceil).with_round(Round::new(Mode::Stochastic));
/// let x: Vec<f32> = (0..40).map(|i| i as f32 * 0.37 - 7.0).collect();
/// let mut codes = vec![0u8; mx.format.codes_len(x.len())];
/// let mut scales = vec![0u8; Mx::scales_len(x.len())];
/// mx.quantize(&x, &mut codes, &mut scales, &RandomStream::new(7, 0), 0)?;
/// let mut y = vec![0.0f32; x.len()];
/// mx.format.dequantize(&codes, &scales, &mut y)?;
/// // Stochastic rounding: each value lands on one of its two neighbours.
/// assert!(x.iter().zip(&y).all(|(a, b)| (a - b).abs() <= 2.0));
/// # Ok::<(), tessera_core::fp::BlockError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Mx {
    /// The element format.
    pub format: MxFormat,
    /// How the block scale is chosen.
    pub rule: ScaleRule,
    /// How elements round (its overflow policy is not used: elements
    /// saturate).
    pub round: Round,
}

impl Mx {
    /// `format` with the spec's Floor scale and round to nearest even.
    ///
    /// ```
    /// use tessera_core::fp::{Mx, MxFormat, Round, ScaleRule};
    ///
    /// let mx = Mx::new(MxFormat::E4M3);
    /// assert_eq!((mx.rule, mx.round), (ScaleRule::Floor, Round::NEAREST_EVEN));
    /// ```
    #[must_use]
    pub const fn new(format: MxFormat) -> Self {
        Self {
            format,
            rule: ScaleRule::Floor,
            round: Round::NEAREST_EVEN,
        }
    }

    /// The same with scale rule `rule`.
    ///
    /// ```
    /// use tessera_core::fp::{Mx, MxFormat, ScaleRule};
    ///
    /// assert_eq!(Mx::new(MxFormat::E5M2).with_rule(ScaleRule::Ceil).rule, ScaleRule::Ceil);
    /// ```
    #[must_use]
    pub const fn with_rule(self, rule: ScaleRule) -> Self {
        Self { rule, ..self }
    }

    /// The same with element rounding `round`.
    ///
    /// ```
    /// use tessera_core::fp::{Mx, MxFormat, Round};
    ///
    /// assert_eq!(Mx::new(MxFormat::E5M2).with_round(Round::STOCHASTIC).round, Round::STOCHASTIC);
    /// ```
    #[must_use]
    pub const fn with_round(self, round: Round) -> Self {
        Self { round, ..self }
    }

    /// Scale bytes for `n` elements: `ceil(n / 32)`.
    ///
    /// ```
    /// use tessera_core::fp::Mx;
    ///
    /// assert_eq!((Mx::scales_len(64), Mx::scales_len(65), Mx::scales_len(0)), (2, 3, 0));
    /// ```
    #[must_use]
    pub const fn scales_len(n: usize) -> usize {
        n.div_ceil(MX_BLOCK)
    }

    /// Quantizes `src` into element codes and E8M0 block scales, block by
    /// block (amax, scale and elements from one read of each block);
    /// element `i` reads the random bits of position `first_index + i` of
    /// `bits` (only stochastic modes read them).
    ///
    /// ```
    /// use tessera_core::fp::{Mx, MxFormat};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let mx = Mx::new(MxFormat::E4M3);
    /// let x = [1.0f32, -3.0, 0.1, 500.0];
    /// let (mut codes, mut scales) = ([0u8; 4], [0u8; 1]);
    /// mx.quantize(&x, &mut codes, &mut scales, &RandomStream::new(0, 0), 0)?;
    /// assert_eq!(scales, [127 + 8 - 8]); // floor(log2 500) - emax = 0
    /// let mut y = [0.0f32; 4];
    /// mx.format.dequantize(&codes, &scales, &mut y)?;
    /// assert_eq!(y, [1.0, -3.0, 0.1015625, 448.0]); // 500 saturates
    /// # Ok::<(), tessera_core::fp::BlockError>(())
    /// ```
    ///
    /// # Errors
    /// [`BlockError::Length`] unless `codes.len() == self.format.codes_len(n)`
    /// and `scales.len() == Mx::scales_len(n)` for `n = src.len()`; nothing
    /// is written then.
    pub fn quantize<B: RandomBits + ?Sized>(
        self,
        src: &[f32],
        codes: &mut [u8],
        scales: &mut [u8],
        bits: &B,
        first_index: u64,
    ) -> Result<(), BlockError> {
        check_len("codes", self.format.codes_len(src.len()), codes.len())?;
        check_len("scales", Self::scales_len(src.len()), scales.len())?;
        self.quantize_checked(src, codes, scales, &Erased(bits), first_index);
        Ok(())
    }

    /// [`Mx::quantize`]'s kernels, instantiated once, in this crate, for
    /// every caller's source of bits (as `fp::encode_slice`'s).
    fn quantize_checked(
        self,
        src: &[f32],
        codes: &mut [u8],
        scales: &mut [u8],
        bits: &dyn RandomBits,
        first_index: u64,
    ) {
        arch::dispatch(BlockQuantize {
            rule: self,
            src,
            codes,
            scales,
            bits,
            first_index,
            mode: self.round.mode,
        });
    }
}

// The SIMD kernels (see `block_kernels.rs`).

/// What a finite MX block's elements need of its scale `2^e`.
#[derive(Clone, Copy)]
pub(super) struct MxScale {
    e: i32,
    /// Magnitude patterns `1..=tiny` scale below f32's normals (below
    /// `2^(e - 126)`): the twin's sign-and-2^-149 stand-in.
    tiny: u32,
    /// `2^-e`.
    factor: f32,
}

impl BlockRule for Mx {
    const BLOCK: usize = MX_BLOCK;
    type Scale = MxScale;

    #[inline(always)]
    fn code_bits(self) -> u32 {
        self.format.bits()
    }

    #[inline(always)]
    fn encoder(self) -> Encoder {
        let round = match self.format {
            MxFormat::Int8 => self.round.with_subnormals(Subnormals::Keep),
            _ => self.round,
        };
        Encoder::new(self.format.grid(), round.with_overflow(Overflow::Saturate))
    }

    #[inline(always)]
    fn quantize_block<B: RandomBits + ?Sized>(
        self,
        block: &[f32],
        codes: &mut [u8],
        bits: &B,
        index: u64,
    ) -> u8 {
        let Some(amax) = amax_or_clear(block, codes) else {
            return E8M0_NAN;
        };
        let scale = self.format.block_scale(self.rule, amax);
        let s = i32::from(scale) - 127;
        for (i, (x, c)) in block.iter().zip(codes.iter_mut()).enumerate() {
            let at = index.wrapping_add(i as u64);
            *c = self
                .format
                .encode_element(scale_down(*x, s), self.round, bits, at);
        }
        scale
    }

    #[inline(always)]
    fn scale_code(self, amax: f32) -> u8 {
        self.format.block_scale(self.rule, amax)
    }

    /// [`e8m0_scale`] in lanes on the biased exponent fields (offset by
    /// 256 so the clamp is unsigned); nonzero f32 subnormal amaxes (and
    /// Rceil ratios) are left to the scalar rule.
    #[inline(always)]
    fn scale_codes<S: Simd>(self, amax: S::U) -> Option<S::U> {
        let s = <S::U as U32s>::splat;
        let grid = self.format.grid();
        let emax = grid.emax() as u32;
        let subnormal = |a: S::U| (a - s(1)).simd_lt(s(0x007f_ffff)).any();
        if subnormal(amax) {
            return None;
        }
        let one_if = |m: S::U| m & s(1);
        let fraction = amax & s(0x007f_ffff);
        // `floor(log2 amax) + 127 + 256 - emax`, for amax normal.
        let floor = (amax >> 23) + s(256 - emax);
        let biased = match self.rule {
            ScaleRule::Floor => floor,
            ScaleRule::Ceil => floor + one_if(fraction.simd_ne(s(0))),
            ScaleRule::Even => {
                let half = s(1 << (22 - grid.mantissa_bits()));
                floor + one_if((fraction + half).simd_ge(s(1 << 23)))
            }
            ScaleRule::Rceil => {
                let ratio = <S::F as Real>::splat(1.0 / grid.max());
                let r = (S::F::from_bits(amax) * ratio).to_bits();
                if subnormal(r) {
                    return None;
                }
                (r >> 23) + s(256) + one_if((r & s(0x007f_ffff)).simd_ne(s(0)))
            }
        };
        Some(biased.max(s(256)).min(s(256 + 254 - emax)) - s(256))
    }

    #[inline(always)]
    fn block_scale(self, code: u8) -> MxScale {
        let e = i32::from(code) - 127;
        let small = if e - 126 >= -149 {
            pow2(e - 126).to_bits()
        } else {
            0
        };
        MxScale {
            e,
            tiny: small.saturating_sub(1),
            factor: pow2(-e),
        }
    }

    /// `2^-e` (the first lanes; the second are not used): f32 bits
    /// `(254 - c) << 23` for codes `c` up to 253, and `2^-127` for 254.
    #[inline(always)]
    fn scale_lanes<S: Simd>(self, codes: S::U) -> [S::F; 2] {
        let s = <S::U as U32s>::splat;
        let normal = (s(254) - codes) << 23;
        let factor = codes.simd_lt(s(254)).select(normal, s(1 << 22));
        [S::F::from_bits(factor), S::F::from_bits(s(0))]
    }

    /// Without the stand-in (`tiny` 0): a quotient below 2^-126 (or 0, where
    /// the product underflows) rounds as the stand-in does. Every MX
    /// element's smallest value is at least 2^-16 (E5M2's), so both lie
    /// below half of it: nearest-even gives zero with the input's sign;
    /// the exactly stochastic rule's tiny rule sees a 16-bit fraction of 0
    /// for both, rounding down unless the lane's 16 random bits are 0 too,
    /// and such a tie goes to the twin (the input and `e`).
    #[inline(always)]
    fn fast_scale(self, code: u8, lanes: [f32; 2]) -> MxScale {
        MxScale {
            e: i32::from(code) - 127,
            tiny: 0,
            factor: lanes[0],
        }
    }

    /// `x * 2^-e`, or [`scale_down`]'s stand-in below f32's normals.
    #[inline(always)]
    fn scaled<S: Simd>(self, scale: &MxScale, x: S::F) -> S::F {
        let s = <S::U as U32s>::splat;
        let bits = x.to_bits();
        // Zero wraps to the top: not tiny.
        let tiny = ((bits & s(0x7fff_ffff)) - s(1)).simd_lt(s(scale.tiny));
        let stand_in = (bits & s(0x8000_0000)) | s(1);
        let product = (x * <S::F as Real>::splat(scale.factor)).to_bits();
        S::F::from_bits(tiny.select(stand_in, product))
    }

    /// INT8: the encoder's sign and magnitude `k` to two's complement.
    #[inline(always)]
    fn adjust<S: Simd>(self, c: S::U) -> S::U {
        if self.format != MxFormat::Int8 {
            return c;
        }
        let s = <S::U as U32s>::splat;
        let negative = (c & s(0x100)).simd_ne(s(0));
        let k = c & s(0xff);
        negative.select(s(0) - k, k) & s(0xff)
    }

    #[inline(always)]
    fn twin_element<B: RandomBits + ?Sized>(
        self,
        scale: &MxScale,
        x: f32,
        bits: &B,
        at: u64,
    ) -> u8 {
        self.format
            .encode_element(scale_down(x, scale.e), self.round, bits, at)
    }
}

/// MX dequantize's arguments (checked).
struct MxDequantize<'a> {
    format: MxFormat,
    codes: &'a [u8],
    scales: &'a [u8],
    dst: &'a mut [f32],
}

impl Kernel for MxDequantize<'_> {
    type Output = ();

    /// Full blocks in lanes, then a partial last block by the twin.
    #[inline(always)]
    fn run<S: Simd>(self) {
        // `None`: INT8, two's complement bytes over 64.
        let decoder = match self.format.element().map(Decoder::new) {
            None => None,
            Some(Some(d)) => Some(d),
            Some(None) => return self.scalar(),
        };
        let Self {
            format,
            codes,
            scales,
            dst,
        } = self;
        let s = <S::U as U32s>::splat;
        let (per_block, bits) = (format.codes_len(MX_BLOCK), format.bits());
        let full = dst.len() / MX_BLOCK;
        for ((out, bytes), scale) in dst
            .chunks_exact_mut(MX_BLOCK)
            .zip(codes.chunks_exact(per_block))
            .zip(scales)
        {
            let x = <S::F as Real>::splat(E8M0_VALUES[usize::from(*scale)]);
            for (k, o) in out.chunks_exact_mut(S::LANES).enumerate() {
                let c = element_lanes::<S>(bits, bytes, k);
                let value = match decoder {
                    Some(d) => d.decode::<S>(c),
                    None => {
                        // `c as i8` exactly, by the 2^23 magic number.
                        let magic = S::F::from_bits(s(0x4b00_0080));
                        let k = S::F::from_bits(((c & s(0xff)) ^ s(0x80)) | s(0x4b00_0000)) - magic;
                        k / <S::F as Real>::splat(64.0)
                    }
                };
                (value * x).store(o);
            }
        }
        MxDequantize {
            format,
            codes: &codes[full * per_block..],
            scales: &scales[full..],
            dst: &mut dst[full * MX_BLOCK..],
        }
        .scalar();
    }

    fn scalar(self) {
        let per_block = self.format.codes_len(MX_BLOCK);
        for ((out, bytes), scale) in self
            .dst
            .chunks_mut(MX_BLOCK)
            .zip(self.codes.chunks(per_block))
            .zip(self.scales)
        {
            let mut block = [0u8; MX_BLOCK];
            let block = &mut block[..out.len()];
            self.format.load(bytes, block);
            let x = Format::E8M0FNU.decode(u32::from(*scale));
            for (d, c) in out.iter_mut().zip(block.iter()) {
                *d = self.format.decode_element(*c) * x;
            }
        }
    }
}

#[cfg(test)]
#[path = "mx_tests.rs"]
mod tests;
