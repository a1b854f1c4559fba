//! The block kernels' lane steps on x86-64: [`BlockPack`] on AVX2 and
//! AVX-512 (which include SSSE3 and SSE4.1) packs code bytes by
//! multiply-adds of byte and word pairs and one byte shuffle (SSE2 keeps
//! the portable form), and AVX2's transposing `U32s::max_rows`. Every
//! `unsafe` block here relies on the module invariant of [`super`].

use core::arch::x86_64::{
    __m128i, __m256i, _mm_cvtsi128_si64, _mm_extract_epi32, _mm_loadu_si128, _mm_madd_epi16,
    _mm_maddubs_epi16, _mm_packus_epi16, _mm_set1_epi16, _mm_set1_epi32, _mm_setr_epi8,
    _mm_shuffle_epi8, _mm256_max_epu32, _mm256_permute2x128_si256, _mm256_unpackhi_epi32,
    _mm256_unpackhi_epi64, _mm256_unpacklo_epi32, _mm256_unpacklo_epi64,
};

use super::super::block_pack::BlockPack;
use super::avx2::{self, Avx2};
use super::avx512::Avx512;
use super::sse2::Sse2;

impl BlockPack for Sse2 {}

impl BlockPack for Avx2 {
    #[inline(always)]
    fn pack_fp4_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
        pack_fp4(codes, n, out);
    }

    #[inline(always)]
    fn pack_fp6_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
        pack_fp6(codes, n, out);
    }
}

impl<const BF16: bool> BlockPack for Avx512<BF16> {
    #[inline(always)]
    fn pack_fp4_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
        pack_fp4(codes, n, out);
    }

    #[inline(always)]
    fn pack_fp6_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
        pack_fp6(codes, n, out);
    }
}

/// Byte pairs `(a, b)` of `codes` as 16-bit `a + m b` (`m` at most 64, so
/// `pmaddubsw` never saturates).
#[inline(always)]
fn byte_pairs(codes: &[u8; 16], m: i16) -> __m128i {
    // SAFETY: the module invariant (SSSE3 is part of AVX2 and AVX-512);
    // `codes` holds the 16 bytes read.
    unsafe {
        _mm_maddubs_epi16(
            _mm_loadu_si128(codes.as_ptr().cast()),
            _mm_set1_epi16(m << 8 | 1),
        )
    }
}

/// Writes the first `len` (at most 12) bytes of `v` to `out`.
#[inline(always)]
fn store_low(v: __m128i, len: usize, out: &mut [u8]) {
    let out = &mut out[..len];
    // SAFETY: the module invariant (SSE4.1 is part of AVX2 and AVX-512).
    let (lo, hi) = unsafe { (_mm_cvtsi128_si64(v), _mm_extract_epi32::<2>(v)) };
    let k = len.min(8);
    out[..k].copy_from_slice(&lo.to_le_bytes()[..k]);
    out[k..].copy_from_slice(&hi.to_le_bytes()[..len - k]);
}

/// [`BlockPack::pack_fp4_bytes`]: `a + 16 b` per byte pair, the words'
/// low bytes together.
#[inline(always)]
fn pack_fp4(codes: &[u8; 16], n: usize, out: &mut [u8]) {
    let pairs = byte_pairs(codes, 16);
    // SAFETY: the module invariant. (Every word is below 2^8.)
    store_low(unsafe { _mm_packus_epi16(pairs, pairs) }, n / 2, out);
}

/// [`BlockPack::pack_fp6_bytes`]: `a + 64 b` per byte pair (12 bits),
/// `p + 4096 q` per word pair (24 bits), the dwords' three low bytes
/// together.
#[inline(always)]
fn pack_fp6(codes: &[u8; 16], n: usize, out: &mut [u8]) {
    let pairs = byte_pairs(codes, 64);
    // SAFETY: the module invariant (SSSE3 is part of AVX2 and AVX-512).
    let packed = unsafe {
        let quads = _mm_madd_epi16(pairs, _mm_set1_epi32(0x1000 << 16 | 1));
        let order = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
        _mm_shuffle_epi8(quads, order)
    };
    store_low(packed, n * 3 / 4, out);
}

/// AVX2's `U32s::max_rows` (eight rows): the rows' lanes interleaved by
/// pairs of rows, then of pairs, then 128-bit halves, the max taken at
/// each level (lane `r` of the result: the max of row `r`).
#[inline(always)]
pub(super) fn max_rows(rows: &[avx2::U]) -> avx2::U {
    /// Lanes `4 h + j` (`h` the 128-bit half): the max of rows `a` (`j`
    /// even) or `b` (`j` odd) over lanes `4 h + j / 2` and `4 h + j / 2 + 2`.
    #[inline(always)]
    fn pairs(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the module invariant.
        unsafe { _mm256_max_epu32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b)) }
    }
    /// Lanes `4 h + j`: row `j` of four over half `h`, from two `pairs`.
    #[inline(always)]
    fn quads(a: __m256i, b: __m256i) -> __m256i {
        // SAFETY: the module invariant.
        unsafe { _mm256_max_epu32(_mm256_unpacklo_epi64(a, b), _mm256_unpackhi_epi64(a, b)) }
    }
    let r = &rows[..8];
    let low = quads(pairs(r[0].0, r[1].0), pairs(r[2].0, r[3].0));
    let high = quads(pairs(r[4].0, r[5].0), pairs(r[6].0, r[7].0));
    // SAFETY: the module invariant.
    avx2::U(unsafe {
        _mm256_max_epu32(
            _mm256_permute2x128_si256::<0x20>(low, high),
            _mm256_permute2x128_si256::<0x31>(low, high),
        )
    })
}
