//! What the SIMD kernels of MX and NVFP4 quantize (in `mx.rs` and
//! `nvfp4.rs`, dispatched to the active backend; their scalar twins are
//! the block loops there) share.
//!
//! Quantize reads each full block once into lanes: the amax by an
//! unsigned max of the magnitude patterns, the scale by the scalar rule
//! (once per block), then the elements scaled and rounded by
//! [`Encoder`]; lanes the encoder does not cover, and partial last
//! blocks, take the twin. Dequantize reads the elements' values from a
//! 256-entry table and multiplies by the block's scale as the twin does.

use super::code_kernels::patch;
use super::encode_lanes::{Encoder, LaneBits};
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

/// Rounds the scaled lanes of one full block into `out` (one code a
/// byte): `scaled` maps an input vector to the values to round, `adjust`
/// maps the encoder's codes to the block's, and `twin(i)` is element
/// `i`'s code by the scalar twin.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn encode_block<S: Simd, L: LaneBits>(
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
            codes = patch::<S>(
                codes,
                fallback,
                #[inline(always)]
                |i| u32::from(twin(k * S::LANES + i)),
            );
        }
        S::store_bytes(codes, o);
    }
}
