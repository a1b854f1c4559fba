//! NVIDIA's NVFP4: blocks of 16 E2M1 elements, each block with an E4M3
//! (OCP E4M3, [`Format::E4M3FN`]) scale, and one f32 scale per tensor, as
//! NVIDIA defines it (the NVFP4 blog, Transformer Engine's recipe, cuBLAS's
//! block scaling).

use super::Overflow;
use super::block_kernels::{BlockQuantize, BlockRule, E4M3_VALUES, FiniteAmax, element_lanes};
use super::block_scale::{BlockError, amax_or_clear, check_len};
use super::decode_kernels::Decoder;
use super::encode_lanes::Encoder;
use super::format::Format;
use super::pack::fp4_packed_len;
use super::round::{Mode, Round, Subnormals};
use crate::arch::{self, F32s, Kernel, Real, Simd, U32s};
use crate::rng::{Erased, RandomBits};

/// Elements per NVFP4 block.
pub const NVFP4_BLOCK: usize = 16;

/// The E4M3 block scale's NaN code.
const SCALE_NAN: u8 = 0x7f;

/// NVFP4 quantization settings: the element rounding.
///
/// With tensor scale `t`, block `b`'s scale `S_b` and element `P_i`, the
/// value is `P_i * S_b * t`:
///
/// 1. `t = fl(amax / 2688)` (`2688 = 448 * 6`, the largest E4M3 times the
///    largest E2M1), from the tensor's largest finite magnitude: its own
///    pass over the tensor ([`Nvfp4::tensor_scale`]), since every block
///    needs it before its scale can be chosen. For amax 0, `t = 1`
///    (Transformer Engine's choice); `t` is at least 2^-149.
/// 2. per block, read once (amax, then elements, from cache): its amax; `S_b = E4M3(fl(fl(amax_b / 6) / t))`,
///    rounded to nearest even and saturating at 448; then each element
///    rounds `fl(x_i / fl(S_b * t))` (f32 operations) to E2M1 by the
///    [`Round`]'s mode and subnormal handling, saturating at 6. A block
///    whose scale rounds to 0 keeps only its signs (every element `±0`).
///    A NaN or infinite element makes the block's scale NaN (`0x7f`) and its
///    codes 0, so the whole block decodes to NaN; the tensor scale ignores
///    such elements.
/// 3. dequantize: `fl(fl(P_i * S_b) * t)`; `P_i * S_b` is exact (at most
///    6 significant bits), so only the tensor scale rounds.
///
/// The element's f32 quotient rounds once before the E2M1 rounding (the
/// hardware recipes round it too, multiplying by an f32 reciprocal): the
/// E2M1 result is that of the exact quotient except where the exact
/// quotient lies within f32's rounding of an E2M1 rounding boundary.
///
/// Storage: `n` elements take [`Nvfp4::codes_len`]`(n)` bytes (two codes a
/// byte, [`pack_fp4`](super::pack_fp4)'s order) and
/// [`Nvfp4::scales_len`]`(n) = ceil(n / 16)` scale bytes; a last block of
/// `r < 16` elements is scaled by its own amax. Element `i` reads the random
/// bits of position `first_index + i`, so pieces quantized separately with
/// the same tensor scale, starting on block boundaries, give the same bytes
/// as the whole.
///
/// ```
/// use tessera_core::fp::{Nvfp4, Round};
/// use tessera_core::rng::RandomStream;
///
/// let mut x = vec![0.5f32; 20];
/// x[0] = -5.25; // the amax: 2688 x 2^-9
/// let nv = Nvfp4::new(Round::NEAREST_EVEN);
/// let t = Nvfp4::tensor_scale(&x);
/// assert_eq!(t, 2f32.powi(-9));
/// let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
/// let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
/// nv.quantize(&x, t, &mut codes, &mut scales, &RandomStream::new(0, 0), 0)?;
/// let mut y = vec![0.0f32; x.len()];
/// Nvfp4::dequantize(&codes, &scales, t, &mut y)?;
/// // Block 0's scale is 448, its grid 448 t = 0.875 times E2M1's values.
/// assert_eq!((y[0], y[1]), (-5.25, 0.4375));
/// # Ok::<(), tessera_core::fp::BlockError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Nvfp4 {
    /// How elements round (its overflow policy is not used: elements
    /// saturate at 6).
    pub round: Round,
}

impl Nvfp4 {
    /// NVFP4 with element rounding `round`.
    ///
    /// ```
    /// use tessera_core::fp::{Nvfp4, Round};
    ///
    /// assert_eq!(Nvfp4::new(Round::STOCHASTIC).round, Round::STOCHASTIC);
    /// ```
    #[must_use]
    pub const fn new(round: Round) -> Self {
        Self { round }
    }

    /// Code bytes for `n` elements (two per byte).
    ///
    /// ```
    /// use tessera_core::fp::Nvfp4;
    ///
    /// assert_eq!(Nvfp4::codes_len(33), 17);
    /// ```
    #[must_use]
    pub const fn codes_len(n: usize) -> usize {
        fp4_packed_len(n)
    }

    /// Scale bytes for `n` elements: `ceil(n / 16)`.
    ///
    /// ```
    /// use tessera_core::fp::Nvfp4;
    ///
    /// assert_eq!(Nvfp4::scales_len(33), 3);
    /// ```
    #[must_use]
    pub const fn scales_len(n: usize) -> usize {
        n.div_ceil(NVFP4_BLOCK)
    }

    /// The tensor scale of `x`: `fl(amax / 2688)` of its largest finite
    /// magnitude (found in lanes), at least 2^-149; 1 if that is 0.
    ///
    /// ```
    /// use tessera_core::fp::Nvfp4;
    ///
    /// assert_eq!(Nvfp4::tensor_scale(&[-2688.0, 1.0, f32::NAN]), 1.0);
    /// assert_eq!(Nvfp4::tensor_scale(&[0.0; 4]), 1.0);
    /// ```
    #[must_use]
    pub fn tensor_scale(x: &[f32]) -> f32 {
        let amax = arch::dispatch(FiniteAmax(x));
        if amax == 0 {
            return 1.0;
        }
        let t = f32::from_bits(amax) / 2688.0;
        t.max(f32::from_bits(1))
    }

    /// The E4M3 code of the scale of a block with largest finite magnitude
    /// `amax`, under tensor scale `t`.
    ///
    /// ```
    /// use tessera_core::fp::Nvfp4;
    ///
    /// // 6 * 448 * t: the largest scale.
    /// assert_eq!(Nvfp4::block_scale(2688.0, 1.0), 0x7e);
    /// assert_eq!(Nvfp4::block_scale(6.0, 1.0), 0x38); // 1.0
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn block_scale(amax: f32, t: f32) -> u8 {
        e4m3_nearest(amax / 6.0 / t)
    }

    /// Quantizes `src` with tensor scale `t` (from
    /// [`Nvfp4::tensor_scale`] of the whole tensor) into packed E2M1 codes
    /// and E4M3 block scales; element `i` reads the random bits of position
    /// `first_index + i`.
    ///
    /// ```
    /// use tessera_core::fp::{Nvfp4, Round};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let x = [6.0f32, -1.0, 0.4, 2.9];
    /// let (mut codes, mut scales) = ([0u8; 2], [0u8; 1]);
    /// Nvfp4::new(Round::NEAREST_EVEN).quantize(&x, 1.0, &mut codes, &mut scales, &RandomStream::new(0, 0), 0)?;
    /// assert_eq!(scales, [0x38]); // 6 / 6 = 1.0
    /// assert_eq!(codes, [0xa7, 0x51]); // 6, -1 | 0.5, 3
    /// # Ok::<(), tessera_core::fp::BlockError>(())
    /// ```
    ///
    /// # Errors
    /// [`BlockError::TensorScale`] unless `t` is positive and finite;
    /// [`BlockError::Length`] unless `codes.len() == Nvfp4::codes_len(n)`
    /// and `scales.len() == Nvfp4::scales_len(n)` for `n = src.len()`.
    pub fn quantize<B: RandomBits + ?Sized>(
        self,
        src: &[f32],
        t: f32,
        codes: &mut [u8],
        scales: &mut [u8],
        bits: &B,
        first_index: u64,
    ) -> Result<(), BlockError> {
        check_args(src.len(), t, codes.len(), scales.len())?;
        self.quantize_checked(src, t, codes, scales, &Erased(bits), first_index);
        Ok(())
    }

    /// [`Nvfp4::quantize`]'s kernels, instantiated once, in this crate,
    /// for every caller's source of bits (as `fp::encode_slice`'s).
    fn quantize_checked(
        self,
        src: &[f32],
        t: f32,
        codes: &mut [u8],
        scales: &mut [u8],
        bits: &dyn RandomBits,
        first_index: u64,
    ) {
        arch::dispatch(BlockQuantize {
            rule: Nvfp4Blocks { nv: self, t },
            src,
            codes,
            scales,
            bits,
            first_index,
            mode: self.round.mode,
        });
    }

    /// Decodes `dst.len()` elements from packed E2M1 codes, E4M3 block
    /// scales and tensor scale `t`: `fl(fl(P_i * S_b) * t)` (the first
    /// product exact); a NaN block scale gives NaN for its block.
    ///
    /// ```
    /// use tessera_core::fp::Nvfp4;
    ///
    /// let mut y = [0.0f32; 2];
    /// Nvfp4::dequantize(&[0xa7], &[0x38], 0.5, &mut y)?;
    /// assert_eq!(y, [3.0, -0.5]);
    /// # Ok::<(), tessera_core::fp::BlockError>(())
    /// ```
    ///
    /// # Errors
    /// As [`Nvfp4::quantize`], for `n = dst.len()`.
    pub fn dequantize(
        codes: &[u8],
        scales: &[u8],
        t: f32,
        dst: &mut [f32],
    ) -> Result<(), BlockError> {
        check_args(dst.len(), t, codes.len(), scales.len())?;
        arch::dispatch(Nvfp4Dequantize {
            codes,
            scales,
            t,
            dst,
        });
        Ok(())
    }
}

/// The E4M3 code of `q` (nonnegative, or `+inf`) rounded to nearest
/// even, saturating at 448 (`0x43e0_0000`): `Format::E4M3FN.encode` with saturation,
/// specialised (the block scale of every block).
#[inline(always)]
const fn e4m3_nearest(q: f32) -> u8 {
    let bits = q.to_bits();
    if bits >= 0x43e0_0000 {
        0x7e
    } else if bits < 0x3c80_0000 {
        // The subnormal grid 2^-9: round `q * 2^9` (exact) to an integer,
        // nearest even, by adding and subtracting 2^23.
        (q * 512.0 + 8_388_608.0 - 8_388_608.0) as u8
    } else {
        // Round off the 20 low bits, nearest even; a carry moves the
        // exponent. The rebias 127 - 7 leaves the code.
        let r = bits + 0x7_ffff + ((bits >> 20) & 1);
        ((r >> 20) - (120 << 3)) as u8
    }
}

/// [`e4m3_nearest`] in lanes, bitwise.
#[inline(always)]
fn e4m3_nearest_lanes<S: Simd>(q: S::F) -> S::U {
    let s = <S::U as U32s>::splat;
    let bits = q.to_bits();
    // `2^23 + k` for the rounded integer `k`.
    let magic = <S::F as Real>::splat(8_388_608.0);
    let subnormal = (q * <S::F as Real>::splat(512.0) + magic).to_bits() - s(0x4b00_0000);
    let r = bits + s(0x7_ffff) + ((bits >> 20) & s(1));
    let normal = (r >> 20) - s(120 << 3);
    let code = bits.simd_lt(s(0x3c80_0000)).select(subnormal, normal);
    bits.simd_ge(s(0x43e0_0000)).select(s(0x7e), code)
}

/// The checks shared by quantize and dequantize of `n` elements.
fn check_args(n: usize, t: f32, codes: usize, scales: usize) -> Result<(), BlockError> {
    if !(t > 0.0 && t.is_finite()) {
        return Err(BlockError::TensorScale { scale: t });
    }
    check_len("codes", Nvfp4::codes_len(n), codes)?;
    check_len("scales", Nvfp4::scales_len(n), scales)
}

// The SIMD kernels (see `block_kernels.rs`).

/// NVFP4 with its tensor scale `t`: the shared block loop's rule.
#[derive(Clone, Copy)]
struct Nvfp4Blocks {
    nv: Nvfp4,
    t: f32,
}

impl Nvfp4Blocks {
    /// The element rounding: the settings', saturating.
    #[inline(always)]
    fn round(self) -> Round {
        self.nv.round.with_overflow(Overflow::Saturate)
    }
}

/// Element `x` divided by the block's divisor `fl(S_b * t)` (0 when the
/// scale rounds to 0: only the sign stays).
#[inline(always)]
fn quotient<R: Real>(x: R, divisor: f32) -> R {
    if divisor == 0.0 {
        x * R::splat(0.0)
    } else {
        x / R::splat(divisor)
    }
}

/// What a finite block's elements need: the divisor `fl(S_b * t)`, and
/// for nearest-even rounding its reciprocal (0 where it is not used).
#[derive(Clone, Copy)]
struct Divisor {
    d: f32,
    /// `fl(1 / d)`, where `d` and it are f32 normals.
    reciprocal: f32,
}

/// Whether an f32 magnitude pattern is within 8 units of a multiple of
/// 2^21: every E2M1 value, midpoint and power of two has at most three
/// significant bits, so it is such a multiple.
#[inline(always)]
fn near_e2m1_boundary<S: Simd>(abs: S::U) -> S::U {
    let s = <S::U as U32s>::splat;
    ((abs + s(8)) & s(0x001f_ffff)).simd_lt(s(16))
}

impl BlockRule for Nvfp4Blocks {
    const BLOCK: usize = NVFP4_BLOCK;
    type Scale = Divisor;

    #[inline(always)]
    fn code_bits(self) -> u32 {
        4
    }

    #[inline(always)]
    fn encoder(self) -> Encoder {
        Encoder::new(Format::E2M1FN, self.round())
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
            return SCALE_NAN;
        };
        let scale = self.scale_code(amax);
        let divisor = self.block_scale(scale);
        for (i, (x, c)) in block.iter().zip(codes.iter_mut()).enumerate() {
            *c = self.twin_element(&divisor, *x, bits, index.wrapping_add(i as u64));
        }
        scale
    }

    #[inline(always)]
    fn scale_code(self, amax: f32) -> u8 {
        Nvfp4::block_scale(amax, self.t)
    }

    #[inline(always)]
    fn scale_codes<S: Simd>(self, amax: S::U) -> Option<S::U> {
        let splat = <S::F as Real>::splat;
        let q = S::F::from_bits(amax) / splat(6.0) / splat(self.t);
        Some(e4m3_nearest_lanes::<S>(q))
    }

    #[inline(always)]
    fn block_scale(self, code: u8) -> Divisor {
        let d = E4M3_VALUES[usize::from(code)] * self.t;
        let reciprocal = 1.0 / d;
        let nearest =
            self.nv.round.mode == Mode::NearestEven && self.nv.round.subnormals == Subnormals::Keep;
        let usable = nearest && d.is_normal() && reciprocal.is_normal();
        Divisor {
            d,
            reciprocal: if usable { reciprocal } else { 0.0 },
        }
    }

    /// The divisors `fl(S_b * t)` (the E4M3 scale decoded in lanes) and,
    /// for nearest-even, their reciprocals where both are f32 normals (else
    /// 0), as [`BlockRule::block_scale`] computes them.
    #[inline(always)]
    fn scale_lanes<S: Simd>(self, codes: S::U) -> [S::F; 2] {
        let (s, f) = (<S::U as U32s>::splat, <S::F as Real>::splat);
        // Codes 0..=0x7e: subnormal `c 2^-9` (`c` exactly, by the 2^23
        // magic number), normal `2^(c >> 3 - 7) (1 + (c & 7) / 8)`.
        let small = (S::F::from_bits(codes | s(0x4b00_0000)) - f(8_388_608.0)) * f(1.0 / 512.0);
        let normal = S::F::from_bits((codes << 20) + s(120 << 23));
        let value = S::F::from_bits(
            codes
                .simd_lt(s(8))
                .select(small.to_bits(), normal.to_bits()),
        );
        let d = value * f(self.t);
        let r = f(1.0) / d;
        let is_normal = |v: S::F| (v.to_bits() - s(0x0080_0000)).simd_lt(s(0x7f00_0000));
        let usable = is_normal(d) & is_normal(r);
        let nearest =
            self.nv.round.mode == Mode::NearestEven && self.nv.round.subnormals == Subnormals::Keep;
        let r = if nearest {
            usable.select(r.to_bits(), s(0))
        } else {
            s(0)
        };
        [d, S::F::from_bits(r)]
    }

    #[inline(always)]
    fn fast_scale(self, _code: u8, lanes: [f32; 2]) -> Divisor {
        Divisor {
            d: lanes[0],
            reciprocal: lanes[1],
        }
    }

    /// `fl(x / d)`; for nearest-even, `fl(x * fl(1 / d))` where that is
    /// normal and not within 8 units of a multiple of 2^21: it is then
    /// within 6 units of `fl(x / d)` (relative errors below 2^-24 each,
    /// twice at a power of two), no E2M1 rounding boundary lies between
    /// the two, and both round to the same code (a multiply instead of a
    /// division, which costs several times more).
    #[inline(always)]
    fn scaled<S: Simd>(self, divisor: &Divisor, x: S::F) -> S::F {
        if divisor.reciprocal != 0.0 {
            let q = x * <S::F as Real>::splat(divisor.reciprocal);
            let abs = q.to_bits() & <S::U as U32s>::splat(0x7fff_ffff);
            let normal = abs.simd_ge(<S::U as U32s>::splat(0x0080_0000));
            if !(near_e2m1_boundary::<S>(abs) & normal).any() {
                return q;
            }
        }
        quotient(x, divisor.d)
    }

    #[inline(always)]
    fn adjust<S: Simd>(self, codes: S::U) -> S::U {
        codes
    }

    #[inline(always)]
    fn twin_element<B: RandomBits + ?Sized>(
        self,
        divisor: &Divisor,
        x: f32,
        bits: &B,
        at: u64,
    ) -> u8 {
        Format::E2M1FN.encode_with(quotient(x, divisor.d), self.round(), bits, at) as u8
    }
}

/// NVFP4 dequantize's arguments (checked).
struct Nvfp4Dequantize<'a> {
    codes: &'a [u8],
    scales: &'a [u8],
    t: f32,
    dst: &'a mut [f32],
}

impl Kernel for Nvfp4Dequantize<'_> {
    type Output = ();

    /// Full blocks in lanes, then a partial last block by the twin.
    #[inline(always)]
    fn run<S: Simd>(self) {
        let Some(decoder) = Decoder::new(Format::E2M1FN) else {
            return self.scalar();
        };
        let Self {
            codes,
            scales,
            t,
            dst,
        } = self;
        let full = dst.len() / NVFP4_BLOCK;
        let tensor = <S::F as Real>::splat(t);
        for ((out, bytes), scale) in dst
            .chunks_exact_mut(NVFP4_BLOCK)
            .zip(codes.chunks_exact(NVFP4_BLOCK / 2))
            .zip(scales)
        {
            let x = <S::F as Real>::splat(E4M3_VALUES[usize::from(*scale)]);
            for (k, o) in out.chunks_exact_mut(S::LANES).enumerate() {
                let value = decoder.decode::<S>(element_lanes::<S>(4, bytes, k));
                (value * x * tensor).store(o);
            }
        }
        Nvfp4Dequantize {
            codes: &codes[full * NVFP4_BLOCK / 2..],
            scales: &scales[full..],
            t,
            dst: &mut dst[full * NVFP4_BLOCK..],
        }
        .scalar();
    }

    /// Element `i` of each block is `value(code) * scale * t`.
    fn scalar(self) {
        for ((out, bytes), scale) in self
            .dst
            .chunks_mut(NVFP4_BLOCK)
            .zip(self.codes.chunks(NVFP4_BLOCK / 2))
            .zip(self.scales)
        {
            let mut block = [0u8; NVFP4_BLOCK];
            let block = &mut block[..out.len()];
            super::pack::unpack_fp4(bytes, block);
            let s = Format::E4M3FN.decode(u32::from(*scale));
            for (d, c) in out.iter_mut().zip(block.iter()) {
                *d = Format::E2M1FN.decode(u32::from(*c)) * s * self.t;
            }
        }
    }
}

#[cfg(test)]
#[path = "nvfp4_tests.rs"]
mod tests;
