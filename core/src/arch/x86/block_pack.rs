//! [`BlockPack`] on x86-64: AVX2 and AVX-512 (which include SSSE3 and
//! SSE4.1) pack code bytes by multiply-adds of byte and word pairs and one
//! byte shuffle; SSE2 keeps the portable form. Every `unsafe` block here
//! relies on the module invariant of [`super`].

use core::arch::x86_64::{
    __m128i, _mm_cvtsi128_si64, _mm_extract_epi32, _mm_loadu_si128, _mm_madd_epi16,
    _mm_maddubs_epi16, _mm_packus_epi16, _mm_set1_epi16, _mm_set1_epi32, _mm_setr_epi8,
    _mm_shuffle_epi8, _mm_stream_si128,
};

use super::super::block_pack::BlockPack;
use super::avx2::Avx2;
use super::avx512::Avx512;
use super::sse2::Sse2;

impl BlockPack for Sse2 {}

/// `BlockPack` by [`pack_fp4`] and [`pack_fp6`] for each backend listed,
/// streaming codes ([`stream_codes`]) where marked.
macro_rules! packs_by_shuffles {
    ($(impl$([$($g:tt)*])? for $backend:ty, streaming: $streams:literal;)*) => {$(
        impl$(<$($g)*>)? BlockPack for $backend {
            #[inline(always)]
            fn pack_fp4_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
                pack_fp4(codes, n, out);
            }

            #[inline(always)]
            fn pack_fp6_bytes(codes: &[u8; 16], n: usize, out: &mut [u8]) {
                pack_fp6(codes, n, out);
            }

            #[inline(always)]
            fn stream_codes(codes: &[u8], out: &mut [u8]) {
                stream_codes(codes, out, $streams);
            }
        }
    )*};
}

packs_by_shuffles! {
    impl for Avx2, streaming: false;
    impl[const BF16: bool] for Avx512<BF16>, streaming: true;
}

/// [`BlockPack::stream_codes`]: non-temporal 16-byte stores if `streams`
/// and `out` is 16-byte aligned.
#[inline(always)]
fn stream_codes(codes: &[u8], out: &mut [u8], streams: bool) {
    assert!(codes.len() == out.len() && codes.len().is_multiple_of(16));
    let to = out.as_mut_ptr().cast::<__m128i>();
    if !streams || !to.is_aligned() {
        return out.copy_from_slice(codes);
    }
    for (k, c) in codes.chunks_exact(16).enumerate() {
        // SAFETY: the module invariant (SSE2); `c` holds the 16 bytes
        // read, `to.add(k)` the 16 written (within `out`, as long as
        // `codes`), 16-byte aligned (checked above).
        unsafe { _mm_stream_si128(to.add(k), _mm_loadu_si128(c.as_ptr().cast())) };
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
