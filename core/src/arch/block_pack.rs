//! The block kernels' packing of sub-byte codes (OCP MX's bit stream, as
//! `fp::pack_fp4` and `fp::pack_fp6` lay it out) from a vector's code
//! bytes. The provided methods are the portable form, on two 64-bit
//! words; backends with byte multiply-adds and shuffles override them
//! (`x86::block_pack`) with the same bytes.

use super::Portable;

/// Packing of 8 or 16 code bytes, a supertrait of [`Simd`](super::Simd)
/// so the block kernels reach the backend's form.
pub(crate) trait BlockPack {
    /// Packs the first `n` (8 or 16) bytes of `codes` (each below 16) two
    /// per byte into the first `n / 2` bytes of `out`.
    #[inline(always)]
    fn pack_fp4_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
        for (eight, out) in codes[..n]
            .chunks_exact(8)
            .zip(out[..n / 2].chunks_exact_mut(4))
        {
            let x = u64::from_le_bytes(eight.try_into().unwrap_or_default());
            // Nibble pairs into bytes, then the bytes together.
            let x = (x | x >> 4) & 0x00ff_00ff_00ff_00ff;
            let x = (x | x >> 8) & 0x0000_ffff_0000_ffff;
            let x = (x | x >> 16) as u32;
            out.copy_from_slice(&x.to_le_bytes());
        }
    }

    /// Packs the first `n` (8 or 16) bytes of `codes` (each below 64) four
    /// per three bytes into the first `3 n / 4` bytes of `out`.
    #[inline(always)]
    fn pack_fp6_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
        for (eight, out) in codes[..n]
            .chunks_exact(8)
            .zip(out[..n * 3 / 4].chunks_exact_mut(6))
        {
            let x = u64::from_le_bytes(eight.try_into().unwrap_or_default());
            // Pairs of 6 bits into 12, then 24, then 48.
            let x = (x & 0x003f_003f_003f_003f) | (x & 0x3f00_3f00_3f00_3f00) >> 2;
            let x = (x & 0x0000_0fff_0000_0fff) | (x & 0x0fff_0000_0fff_0000) >> 4;
            let x = (x & 0x00ff_ffff) | (x & 0x00ff_ffff_0000_0000) >> 8;
            out.copy_from_slice(&x.to_le_bytes()[..6]);
        }
    }

    /// Writes `codes` (a multiple of 16 bytes) to `out` (as long), an
    /// output too large to stay in cache (`arch::wants_streaming`): with
    /// non-temporal stores where the backend has them (AVX-512, as
    /// `Simd::stream_bytes4`) and `out` is 16-byte aligned, else plainly.
    /// A kernel that streams calls `arch::store_fence` before it returns.
    #[inline(always)]
    fn stream_codes(codes: &[u8], out: &mut [u8]) {
        out.copy_from_slice(codes);
    }
}

impl BlockPack for Portable {}
