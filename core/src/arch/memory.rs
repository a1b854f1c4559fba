//! Memory steps every backend shares (streaming stores, prefetches), and
//! the portable backend's steps chosen at compile time by
//! `cfg(target_feature)`.

use wide::u32x8;

/// Narrows eight lanes holding 16-bit patterns to `[u16; 8]`.
#[must_use]
#[inline(always)]
pub(crate) fn narrow_u16(v: u32x8) -> [u16; 8] {
    #[cfg(all(target_arch = "x86_64", target_feature = "avx2"))]
    {
        use core::arch::x86_64::{
            __m128i, __m256i, _mm256_castsi256_si128, _mm256_packus_epi32, _mm256_permute4x64_epi64,
        };
        let v: __m256i = v.into();
        // Every lane is below 2^16, so the unsigned saturation never acts;
        // the permute gathers the two 128-bit halves' packed words.
        // SAFETY: this code is compiled only when the target has AVX2 (the
        // cfg above), so every CPU the binary may run on has the instructions.
        let low: __m128i = unsafe {
            let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(v, v));
            _mm256_castsi256_si128(packed)
        };
        bytemuck::cast(low)
    }
    #[cfg(not(all(target_arch = "x86_64", target_feature = "avx2")))]
    {
        let a = v.to_array();
        core::array::from_fn(|i| a[i] as u16)
    }
}

/// F16C conversions: one instruction each way for eight lanes.
#[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
pub(crate) mod f16c {
    use core::arch::x86_64::{
        __m128i, __m256, _MM_FROUND_TO_NEAREST_INT, _mm256_cvtph_ps, _mm256_cvtps_ph,
    };
    use wide::f32x8;

    /// f32 -> f16, round to nearest even (the hardware's NaN quieting keeps
    /// the sign and the top of the payload, as `half` does).
    #[must_use]
    #[inline(always)]
    pub(crate) fn f32_to_f16(x: f32x8) -> [u16; 8] {
        let x: __m256 = x.into();
        // SAFETY: compiled only when the target has F16C (the module's cfg).
        bytemuck::cast(unsafe { _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x) })
    }

    /// f32 -> f16, rounding toward zero: for lanes in f16's normal range
    /// this keeps the top 10 mantissa bits, the same as clearing the low 13
    /// bits of the f32 pattern and converting exactly.
    #[must_use]
    #[inline(always)]
    pub(crate) fn f32_to_f16_truncate(x: f32x8) -> [u16; 8] {
        use core::arch::x86_64::_MM_FROUND_TO_ZERO;
        let x: __m256 = x.into();
        // SAFETY: compiled only when the target has F16C (the module's cfg).
        bytemuck::cast(unsafe { _mm256_cvtps_ph::<_MM_FROUND_TO_ZERO>(x) })
    }

    /// f16 -> f32 (exact; NaN quieted).
    #[must_use]
    #[inline(always)]
    pub(crate) fn f16_to_f32(h: [u16; 8]) -> f32x8 {
        let h: __m128i = bytemuck::cast(h);
        // SAFETY: compiled only when the target has F16C (the module's cfg).
        unsafe { _mm256_cvtph_ps(h) }.into()
    }
}

/// Output slices at least this large are written with non-temporal
/// (streaming) stores: they cannot stay in a typical last-level cache
/// anyway, and skipping the read-for-ownership of every line saves up to a
/// third of a conversion's memory traffic. Smaller outputs are written
/// normally so that a caller reading them next finds them in cache.
pub(crate) const STREAMING_BYTES: usize = 16 << 20;

/// Whether a kernel writing `dst` should use [`store_streaming`].
#[must_use]
#[inline]
pub(crate) fn wants_streaming<T>(dst: &[T]) -> bool {
    cfg!(target_arch = "x86_64") && size_of_val(dst) >= STREAMING_BYTES
}

/// Copies `src` to `dst` (of the same length, a multiple of 16 bytes):
/// with non-temporal stores if `dst` is 16-byte aligned on x86_64, with
/// ordinary stores otherwise. A kernel that streams calls [`store_fence`]
/// before it returns.
///
/// # Panics
/// If the lengths differ or are not a multiple of 16 bytes.
#[inline(always)]
pub(crate) fn store_streaming<T: super::Plain>(dst: &mut [T], src: &[T]) {
    assert!(dst.len() == src.len() && size_of_val(dst).is_multiple_of(16));
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let out = dst.as_mut_ptr().cast::<__m128i>();
        if out.is_aligned() {
            let from = src.as_ptr().cast::<__m128i>();
            for k in 0..size_of_val(src) / 16 {
                // SAFETY: `from` points to `src`, readable for its whole
                // length (loadu needs no alignment); `out` points to `dst`,
                // valid for writes of the same size and 16-byte aligned
                // (just checked); SSE2 is part of every x86_64 target.
                unsafe { _mm_stream_si128(out.add(k), _mm_loadu_si128(from.add(k))) };
            }
            return;
        }
    }
    dst.copy_from_slice(src);
}

/// Orders earlier streaming stores before any later store, so another
/// thread that synchronises with this one sees the data.
#[inline]
pub(crate) fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SSE is part of every x86_64 target.
    unsafe {
        core::arch::x86_64::_mm_sfence();
    }
}

/// Hints the CPU to bring the cache line holding `x[at]` into cache, if
/// `at` is in bounds (a prefetch of an address is never a fault, but this
/// keeps to addresses inside the slice).
#[inline(always)]
pub(crate) fn prefetch<T>(x: &[T], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if at < x.len() {
        use core::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
        // SAFETY: the pointer is inside `x`; a prefetch reads nothing
        // architecturally and cannot fault. SSE is part of every x86_64 target.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(x.as_ptr().add(at).cast()) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (x, at);
}

/// How far ahead streaming kernels prefetch: far enough to cover memory
/// latency at memory bandwidth, near enough to stay in L1.
pub(crate) const PREFETCH_BYTES: usize = 4096;

/// Prefetches the line [`PREFETCH_BYTES`] after element `at` of `x`:
/// kernels whose arithmetic per vector is long enough that the hardware
/// prefetcher alone falls behind call it once per vector.
#[inline(always)]
pub(crate) fn prefetch_ahead<T>(x: &[T], at: usize) {
    prefetch(x, at + PREFETCH_BYTES / size_of::<T>().max(1));
}
