//! AVX2's transposing `U32s::max_rows` (the block kernels' amaxes of eight
//! blocks at once), on raw registers. Every `unsafe` block here relies on
//! the module invariant of [`super`].

use core::arch::x86_64::{
    __m256i, _mm256_max_epu32, _mm256_permute2x128_si256, _mm256_unpackhi_epi32,
    _mm256_unpackhi_epi64, _mm256_unpacklo_epi32, _mm256_unpacklo_epi64,
};

/// AVX2's `U32s::max_rows` (eight rows): the rows' lanes interleaved by
/// pairs of rows, then of pairs, then 128-bit halves, the max taken at
/// each level (lane `r` of the result: the max of row `r`).
#[inline(always)]
pub(super) fn max_rows(r: &[__m256i; 8]) -> __m256i {
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
    let low = quads(pairs(r[0], r[1]), pairs(r[2], r[3]));
    let high = quads(pairs(r[4], r[5]), pairs(r[6], r[7]));
    // SAFETY: the module invariant.
    unsafe {
        _mm256_max_epu32(
            _mm256_permute2x128_si256::<0x20>(low, high),
            _mm256_permute2x128_si256::<0x31>(low, high),
        )
    }
}
