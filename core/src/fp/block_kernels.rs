//! What the SIMD kernels of MX and NVFP4 quantize and dequantize (in
//! `mx.rs` and `nvfp4.rs`, dispatched to the active backend; their scalar
//! twins are the block loops there) share.
//!
//! Quantize reads each full block once into lanes: the amax by an
//! unsigned max of the magnitude patterns, the scale by the scalar rule
//! (once per block), then the elements scaled and rounded by
//! [`Encoder`] and packed in lanes; lanes the encoder does not cover take
//! the twin, and blocks with NaN or infinity and partial last blocks take
//! the twin whole. Dequantize unpacks a vector of codes at a time, decodes
//! them by [`Decoder`](super::decode_kernels::Decoder) and multiplies by
//! the block's scale as the twin does.

use super::code_kernels::patch;
use super::decode_kernels::{Decoder, load_codes};
use super::encode_lanes::{Encoder, LaneBits};
use super::format::Format;
use super::pack::{pack_fp4_lanes, pack_fp6_lanes, unpack_fp4_lanes, unpack_fp6_lanes};
use super::round::Mode;
use crate::arch::{F32s, Simd, U32s};

/// The largest magnitude pattern of `block` (a multiple of `S::LANES`
/// long), NaN and infinity included (they are the patterns from
/// `0x7f80_0000` up).
#[inline(always)]
pub(super) fn amax_bits<S: Simd>(block: &[f32]) -> u32 {
    let mut m = S::U::splat(0);
    for v in block.chunks_exact(S::LANES) {
        m = m.max(S::F::load(v).to_bits() & S::U::splat(0x7fff_ffff));
    }
    let mut lanes = [0u32; 16];
    m.write_to(&mut lanes);
    lanes.into_iter().fold(0, u32::max)
}

/// Rounds the scaled lanes of one full block and stores their codes in
/// `out`, packed as `bits`-bit codes (4, 6 or 8): `scaled` maps an input
/// vector to the values to round, `adjust` maps the encoder's codes to
/// the block's, and `twin(i)` is element `i`'s code by the scalar twin.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn encode_block<S: Simd, L: LaneBits>(
    encoder: &Encoder,
    mode: Mode,
    block: &[f32],
    out: &mut [u8],
    code_bits: u32,
    bits: &L,
    index: u64,
    scaled: impl Fn(S::F) -> S::F,
    adjust: impl Fn(S::U) -> S::U,
    mut twin: impl FnMut(usize) -> u8,
) {
    for (k, v) in block.chunks_exact(S::LANES).enumerate() {
        let at = index.wrapping_add((k * S::LANES) as u64);
        let (codes, fallback) = encoder.encode::<S, L>(mode, scaled(S::F::load(v)), bits, at);
        let mut codes = adjust(codes);
        if fallback.any() {
            codes = patch::<S>(
                codes,
                fallback,
                #[inline(always)]
                |i| u32::from(twin(k * S::LANES + i)),
            );
        }
        store_elements::<S>(codes, code_bits, out, k);
    }
}

/// Stores vector `k` of a block's codes (`bits`-bit: 4, 6 or 8) into the
/// block's bytes `out`, packed as [`pack_fp4`](super::pack_fp4) and
/// [`pack_fp6`](super::pack_fp6) do.
#[inline(always)]
fn store_elements<S: Simd>(codes: S::U, bits: u32, out: &mut [u8], k: usize) {
    match bits {
        4 => pack_fp4_lanes::<S>(codes, &mut out[k * S::LANES / 2..]),
        6 => pack_fp6_lanes::<S>(codes, &mut out[k * S::LANES * 3 / 4..]),
        _ => S::store_bytes(codes, &mut out[k * S::LANES..]),
    }
}

/// Vector `k` of a block's `bits`-bit codes (4, 6 or 8) from the block's
/// bytes `block`, one per lane.
#[inline(always)]
pub(super) fn element_lanes<S: Simd>(bits: u32, block: &[u8], k: usize) -> S::U {
    match bits {
        4 => unpack_fp4_lanes::<S>(&block[k * S::LANES / 2..]),
        6 => unpack_fp6_lanes::<S>(&block[k * S::LANES * 3 / 4..]),
        _ => load_codes::<S, u8>(&block[k * S::LANES..]),
    }
}

/// The values of every 8-bit code of `format` (the block scales'), by
/// lanes: a table each call builds once, read once per block.
#[inline(always)]
pub(super) fn scale_table<S: Simd>(format: Format) -> [f32; 256] {
    let mut table = [0f32; 256];
    match Decoder::new(format) {
        Some(d) => {
            for (k, t) in table.chunks_exact_mut(S::LANES).enumerate() {
                let codes = S::U::iota() + S::U::splat((k * S::LANES) as u32);
                d.decode::<S>(codes).store(t);
            }
        }
        None => {
            for (c, t) in table.iter_mut().enumerate() {
                *t = format.decode(c as u32);
            }
        }
    }
    table
}
