//! The SIMD kernels of MX and NVFP4 quantize and dequantize, dispatched
//! to the active backend; their scalar twins are the block loops of
//! `mx.rs` and `nvfp4.rs`.
//!
//! Quantize reads each full block once into lanes: the amax by an
//! unsigned max of the magnitude patterns, the scale by the scalar rule
//! (once per block), then the elements scaled and rounded by
//! [`Encoder`]; lanes the encoder does not cover, and partial last
//! blocks, take the twin. Dequantize reads the elements' values from a
//! 256-entry table and multiplies by the block's scale as the twin does.

use super::Overflow;
use super::block_scale::{pow2, scale_down};
use super::code_kernels::patch;
use super::encode_lanes::{Encoder, LaneBits, SourceBits, StreamBits};
use super::format::Format;
use super::mx::{INT8_GRID, MX_BLOCK, Mx, MxFormat};
use super::nvfp4::{NVFP4_BLOCK, Nvfp4};
use super::round::{Mode, Subnormals};
use crate::arch::{F32s, Kernel, Real, Simd, U32s};
use crate::rng::RandomBits;

/// The largest magnitude pattern of `block` (a multiple of `S::LANES`
/// long), NaN and infinity included (they are the patterns from
/// `0x7f80_0000` up).
#[inline(always)]
fn amax_bits<S: Simd>(block: &[f32]) -> u32 {
    let mut m = S::U::splat(0);
    for v in block.chunks_exact(S::LANES) {
        m = m.max(S::F::load(v).to_bits() & S::U::splat(0x7fff_ffff));
    }
    let mut lanes = [0u32; 16];
    m.write_to(&mut lanes);
    lanes.into_iter().fold(0, u32::max)
}

/// Rounds the scaled lanes of one full block into `out` (one code a
/// byte): `scaled` maps an input vector to the values to round, `adjust`
/// maps the encoder's codes to the block's, and `twin(i)` is element
/// `i`'s code by the scalar twin.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn encode_block<S: Simd, L: LaneBits>(
    encoder: &Encoder,
    mode: Mode,
    block: &[f32],
    out: &mut [u8],
    bits: &L,
    index: u64,
    scaled: impl Fn(S::F) -> S::F,
    adjust: impl Fn(S::U) -> S::U,
    mut twin: impl FnMut(usize) -> u8,
) {
    for (k, (v, o)) in block
        .chunks_exact(S::LANES)
        .zip(out.chunks_exact_mut(S::LANES))
        .enumerate()
    {
        let at = index.wrapping_add((k * S::LANES) as u64);
        let (codes, fallback) = encoder.encode::<S, L>(mode, scaled(S::F::load(v)), bits, at);
        let mut codes = adjust(codes);
        if fallback.any() {
            codes = patch::<S>(codes, fallback, |i| u32::from(twin(k * S::LANES + i)));
        }
        S::store_bytes(codes, o);
    }
}

/// MX quantize's arguments (checked).
pub(super) struct MxQuantize<'a, B: ?Sized> {
    pub(super) mx: Mx,
    pub(super) src: &'a [f32],
    pub(super) codes: &'a mut [u8],
    pub(super) scales: &'a mut [u8],
    pub(super) bits: &'a B,
    pub(super) first_index: u64,
}

impl<B: RandomBits + ?Sized> Kernel for MxQuantize<'_, B> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        match (self.bits.as_stream(), self.mx.round.mode) {
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
        let Self {
            mx,
            src,
            codes,
            scales,
            bits,
            first_index,
        } = self;
        let per_block = mx.format.codes_len(MX_BLOCK);
        for (b, ((block, out), scale)) in src
            .chunks(MX_BLOCK)
            .zip(codes.chunks_mut(per_block))
            .zip(scales)
            .enumerate()
        {
            let mut unpacked = [0u8; MX_BLOCK];
            let unpacked = &mut unpacked[..block.len()];
            let index = first_index.wrapping_add((b * MX_BLOCK) as u64);
            *scale = mx.quantize_block(block, unpacked, bits, index);
            mx.format.store(unpacked, out);
        }
    }
}

impl<B: RandomBits + ?Sized> MxQuantize<'_, B> {
    #[inline(always)]
    fn lanes<S: Simd, L: LaneBits>(self, mode: Mode, lane_bits: &L) {
        let Self {
            mx,
            src,
            codes,
            scales,
            bits,
            first_index,
        } = self;
        let format = mx.format;
        let int8 = format == MxFormat::Int8;
        let (grid, mut round) = match format.element() {
            Some(f) => (f, mx.round),
            None => (INT8_GRID, mx.round.with_subnormals(Subnormals::Keep)),
        };
        round = round.with_overflow(Overflow::Saturate);
        let encoder = Encoder::new(grid, round);
        let per_block = format.codes_len(MX_BLOCK);
        let s = <S::U as U32s>::splat;
        for (b, ((block, out), scale)) in src
            .chunks(MX_BLOCK)
            .zip(codes.chunks_mut(per_block))
            .zip(scales.iter_mut())
            .enumerate()
        {
            let mut unpacked = [0u8; MX_BLOCK];
            let index = first_index.wrapping_add((b * MX_BLOCK) as u64);
            let amax = if block.len() == MX_BLOCK {
                amax_bits::<S>(block)
            } else {
                u32::MAX
            };
            if amax >= 0x7f80_0000 {
                let unpacked = &mut unpacked[..block.len()];
                *scale = mx.quantize_block(block, unpacked, bits, index);
                format.store(unpacked, out);
                continue;
            }
            *scale = format.block_scale(mx.rule, f32::from_bits(amax));
            let e = i32::from(*scale) - 127;
            // Below 2^(e - 126) the scaled value is below f32's normals:
            // the twin's sign-and-2^-149 stand-in.
            let small = if e - 126 >= -149 {
                pow2(e - 126).to_bits()
            } else {
                0
            };
            let factor = <S::F as Real>::splat(pow2(-e));
            let scaled = |x: S::F| {
                let bits = x.to_bits();
                let abs = bits & s(0x7fff_ffff);
                let tiny = abs.simd_lt(s(small)) & abs.simd_ne(s(0));
                let stand_in = (bits & s(0x8000_0000)) | s(1);
                S::F::from_bits(tiny.select(stand_in, (x * factor).to_bits()))
            };
            // INT8: sign and magnitude `k` to two's complement.
            let adjust = |c: S::U| {
                if int8 {
                    let negative = (c & s(0x100)).simd_ne(s(0));
                    let k = c & s(0xff);
                    negative.select(s(0) - k, k) & s(0xff)
                } else {
                    c
                }
            };
            let twin = |i: usize| {
                let at = index.wrapping_add(i as u64);
                format.encode_element(scale_down(block[i], e), mx.round, bits, at)
            };
            encode_block::<S, L>(
                &encoder,
                mode,
                block,
                &mut unpacked,
                lane_bits,
                index,
                scaled,
                adjust,
                twin,
            );
            format.store(&unpacked, out);
        }
    }
}

/// MX dequantize's arguments (checked).
pub(super) struct MxDequantize<'a> {
    pub(super) format: MxFormat,
    pub(super) codes: &'a [u8],
    pub(super) scales: &'a [u8],
    pub(super) dst: &'a mut [f32],
}

impl Kernel for MxDequantize<'_> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        let values: [f32; 256] = core::array::from_fn(|c| self.format.decode_element(c as u8));
        self.blocks(|c| values[usize::from(c)]);
    }

    fn scalar(self) {
        let format = self.format;
        self.blocks(|c| format.decode_element(c));
    }
}

impl MxDequantize<'_> {
    /// Element `i` of each block is `value(code) * scale`.
    #[inline(always)]
    fn blocks(self, value: impl Fn(u8) -> f32) {
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
                *d = value(*c) * x;
            }
        }
    }
}

/// NVFP4 quantize's arguments (checked).
pub(super) struct Nvfp4Quantize<'a, B: ?Sized> {
    pub(super) nv: Nvfp4,
    pub(super) src: &'a [f32],
    pub(super) t: f32,
    pub(super) codes: &'a mut [u8],
    pub(super) scales: &'a mut [u8],
    pub(super) bits: &'a B,
    pub(super) first_index: u64,
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
        self.blocks(|nv, block, t, codes, bits, index| {
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
            let scaled = |x: S::F| {
                if divisor == 0.0 {
                    x * <S::F as Real>::splat(0.0)
                } else {
                    x / d
                }
            };
            let twin = |i: usize| {
                let q = if divisor == 0.0 {
                    block[i] * 0.0
                } else {
                    block[i] / divisor
                };
                let at = index.wrapping_add(i as u64);
                Format::E2M1FN.encode_with(q, round, bits, at) as u8
            };
            encode_block::<S, L>(
                &encoder,
                mode,
                block,
                codes,
                lane_bits,
                index,
                scaled,
                |c| c,
                twin,
            );
            scale
        });
    }
}

/// NVFP4 dequantize's arguments (checked).
pub(super) struct Nvfp4Dequantize<'a> {
    pub(super) codes: &'a [u8],
    pub(super) scales: &'a [u8],
    pub(super) t: f32,
    pub(super) dst: &'a mut [f32],
}

impl Kernel for Nvfp4Dequantize<'_> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        let values: [f32; 16] = core::array::from_fn(|c| Format::E2M1FN.decode(c as u32));
        self.blocks(|c| values[usize::from(c & 0xf)]);
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
