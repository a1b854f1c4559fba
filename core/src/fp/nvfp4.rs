//! NVIDIA's NVFP4: blocks of 16 E2M1 elements, each block with an E4M3
//! (OCP E4M3, [`Format::E4M3FN`]) scale, and one f32 scale per tensor, as
//! NVIDIA defines it (the NVFP4 blog, Transformer Engine's recipe, cuBLAS's
//! block scaling).

use super::Overflow;
use super::block_kernels::{amax_bits, encode_block};
use super::block_scale::{BlockError, amax_or_clear, check_len};
use super::encode_lanes::{Encoder, LaneBits, SourceBits, StreamBits};
use super::format::Format;
use super::pack::fp4_packed_len;
use super::round::{Mode, Round};
use crate::arch::{self, Kernel, Real, Simd};
use crate::rng::RandomBits;

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
    /// magnitude, at least 2^-149; 1 if that is 0.
    ///
    /// ```
    /// use tessera_core::fp::Nvfp4;
    ///
    /// assert_eq!(Nvfp4::tensor_scale(&[-2688.0, 1.0, f32::NAN]), 1.0);
    /// assert_eq!(Nvfp4::tensor_scale(&[0.0; 4]), 1.0);
    /// ```
    #[must_use]
    pub fn tensor_scale(x: &[f32]) -> f32 {
        let amax = x
            .iter()
            .map(|v| v.to_bits() & 0x7fff_ffff)
            .filter(|a| *a < 0x7f80_0000)
            .max()
            .unwrap_or(0);
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
    pub const fn block_scale(amax: f32, t: f32) -> u8 {
        let nearest = Round::NEAREST_EVEN.with_overflow(Overflow::Saturate);
        let stream = crate::rng::RandomStream::new(0, 0);
        Format::E4M3FN.encode(amax / 6.0 / t, nearest, stream, 0) as u8
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
        arch::dispatch(Nvfp4Quantize {
            nv: self,
            src,
            t,
            codes,
            scales,
            bits,
            first_index,
        });
        Ok(())
    }

    /// One block: its scale code, its element codes (unpacked) in `codes`.
    #[inline(always)]
    pub(super) fn quantize_block<B: RandomBits + ?Sized>(
        self,
        block: &[f32],
        t: f32,
        codes: &mut [u8],
        bits: &B,
        index: u64,
    ) -> u8 {
        let Some(amax) = amax_or_clear(block, codes) else {
            return SCALE_NAN;
        };
        let scale = Self::block_scale(amax, t);
        let divisor = Format::E4M3FN.decode(u32::from(scale)) * t;
        let round = self.round.with_overflow(Overflow::Saturate);
        for (i, (x, c)) in block.iter().zip(codes.iter_mut()).enumerate() {
            let q = if divisor == 0.0 {
                *x * 0.0
            } else {
                *x / divisor
            };
            let at = index.wrapping_add(i as u64);
            *c = Format::E2M1FN.encode_with(q, round, bits, at) as u8;
        }
        scale
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

/// The checks shared by quantize and dequantize of `n` elements.
fn check_args(n: usize, t: f32, codes: usize, scales: usize) -> Result<(), BlockError> {
    if !(t > 0.0 && t.is_finite()) {
        return Err(BlockError::TensorScale { scale: t });
    }
    check_len("codes", Nvfp4::codes_len(n), codes)?;
    check_len("scales", Nvfp4::scales_len(n), scales)
}

// The SIMD kernels (see `block_kernels.rs`).

/// NVFP4 quantize's arguments (checked).
struct Nvfp4Quantize<'a, B: ?Sized> {
    nv: Nvfp4,
    src: &'a [f32],
    t: f32,
    codes: &'a mut [u8],
    scales: &'a mut [u8],
    bits: &'a B,
    first_index: u64,
}

impl<B: RandomBits + ?Sized> Kernel for Nvfp4Quantize<'_, B> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        match (self.bits.as_stream(), self.nv.round.mode) {
            (Some(s), Mode::NearestEven) => self.lanes::<S, _>(Mode::NearestEven, &StreamBits(s)),
            (Some(s), Mode::Stochastic) => self.lanes::<S, _>(Mode::Stochastic, &StreamBits(s)),
            (Some(s), mode) => self.lanes::<S, _>(mode, &StreamBits(s)),
            (None, mode) => {
                let bits = SourceBits(self.bits);
                self.lanes::<S, _>(mode, &bits);
            }
        }
    }

    fn scalar(self) {
        self.blocks(|nv, block, t, codes, bits, index| {
            nv.quantize_block(block, t, codes, bits, index)
        });
    }
}

impl<B: RandomBits + ?Sized> Nvfp4Quantize<'_, B> {
    /// Runs `block(nv, block, t, unpacked codes, bits, index)` on every
    /// block, storing its scale and packing its codes.
    #[inline(always)]
    fn blocks(self, mut block: impl FnMut(Nvfp4, &[f32], f32, &mut [u8], &B, u64) -> u8) {
        for (b, ((x, out), scale)) in self
            .src
            .chunks(NVFP4_BLOCK)
            .zip(self.codes.chunks_mut(NVFP4_BLOCK / 2))
            .zip(self.scales)
            .enumerate()
        {
            let mut unpacked = [0u8; NVFP4_BLOCK];
            let unpacked = &mut unpacked[..x.len()];
            let index = self.first_index.wrapping_add((b * NVFP4_BLOCK) as u64);
            *scale = block(self.nv, x, self.t, unpacked, self.bits, index);
            super::pack::pack_fp4(unpacked, out);
        }
    }

    #[inline(always)]
    fn lanes<S: Simd, L: LaneBits>(self, mode: Mode, lane_bits: &L) {
        let round = self.nv.round.with_overflow(Overflow::Saturate);
        let encoder = Encoder::new(Format::E2M1FN, round);
        self.blocks(
            #[inline(always)]
            |nv, block, t, codes, bits, index| {
                let amax = if block.len() == NVFP4_BLOCK {
                    amax_bits::<S>(block)
                } else {
                    u32::MAX
                };
                if amax >= 0x7f80_0000 {
                    return nv.quantize_block(block, t, codes, bits, index);
                }
                let amax = f32::from_bits(amax);
                let scale = Nvfp4::block_scale(amax, t);
                let divisor = Format::E4M3FN.decode(u32::from(scale)) * t;
                let d = <S::F as Real>::splat(divisor);
                encode_block::<S, L>(
                    &encoder,
                    mode,
                    block,
                    codes,
                    lane_bits,
                    index,
                    #[inline(always)]
                    |x: S::F| {
                        if divisor == 0.0 {
                            x * <S::F as Real>::splat(0.0)
                        } else {
                            x / d
                        }
                    },
                    #[inline(always)]
                    |c| c,
                    #[inline(always)]
                    |i: usize| {
                        let q = if divisor == 0.0 {
                            block[i] * 0.0
                        } else {
                            block[i] / divisor
                        };
                        let at = index.wrapping_add(i as u64);
                        Format::E2M1FN.encode_with(q, round, bits, at) as u8
                    },
                );
                scale
            },
        );
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

    #[inline(always)]
    fn run<S: Simd>(self) {
        let values: [f32; 16] = core::array::from_fn(|c| Format::E2M1FN.decode(c as u32));
        self.blocks(
            #[inline(always)]
            |c| values[usize::from(c & 0xf)],
        );
    }

    fn scalar(self) {
        self.blocks(|c| Format::E2M1FN.decode(u32::from(c)));
    }
}

impl Nvfp4Dequantize<'_> {
    /// Element `i` of each block is `value(code) * scale * t`.
    #[inline(always)]
    fn blocks(self, value: impl Fn(u8) -> f32) {
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
                *d = value(*c) * s * self.t;
            }
        }
    }
}

#[cfg(test)]
#[path = "nvfp4_tests.rs"]
mod tests;
