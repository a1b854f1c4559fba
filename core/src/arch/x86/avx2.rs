//! AVX2 + F16C: eight lanes in one 256-bit register; f16 conversions by
//! F16C's `vcvtph2ps`/`vcvtps2ph`. Every `unsafe` block here relies on the
//! module invariant of [`super`].

use core::arch::x86_64::{
    __m128i, __m256, __m256i, _CMP_UNORD_Q, _MM_FROUND_TO_NEAREST_INT, _MM_FROUND_TO_ZERO,
    _mm_loadu_si128, _mm_storel_epi64, _mm_storeu_si128, _mm256_add_epi32, _mm256_add_ps,
    _mm256_and_si256, _mm256_blendv_epi8, _mm256_castps_si256, _mm256_castsi256_ps,
    _mm256_castsi256_si128, _mm256_cmp_ps, _mm256_cmpeq_epi32, _mm256_cmpgt_epi32,
    _mm256_cvtepu16_epi32, _mm256_cvtph_ps, _mm256_cvtps_ph, _mm256_cvttps_epi32, _mm256_div_ps,
    _mm256_loadu_ps, _mm256_loadu_si256, _mm256_max_epu32, _mm256_min_epu32, _mm256_movemask_ps,
    _mm256_mul_ps, _mm256_mullo_epi32, _mm256_or_si256, _mm256_packus_epi16, _mm256_packus_epi32,
    _mm256_permute4x64_epi64, _mm256_permutevar8x32_epi32, _mm256_set1_epi32, _mm256_set1_ps,
    _mm256_setr_epi8, _mm256_setr_epi32, _mm256_shuffle_epi8, _mm256_sll_epi32, _mm256_sllv_epi32,
    _mm256_sqrt_ps, _mm256_srl_epi32, _mm256_srlv_epi32, _mm256_storeu_ps, _mm256_storeu_si256,
    _mm256_sub_epi32, _mm256_sub_ps, _mm256_xor_si256,
};

use super::super::lanes::{F32s, Real, Simd, U32s, eight_lane_items};
use super::{assign_ops, binary_ops, lane_fns, not_and_shifts, packed_io};

/// The backend (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx2;

/// Eight f32 lanes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct F(pub(super) __m256);

/// Eight u32 lanes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct U(pub(super) __m256i);

binary_ops!(F: Add add _mm256_add_ps, Sub sub _mm256_sub_ps, Mul mul _mm256_mul_ps,
    Div div _mm256_div_ps);
binary_ops!(U: Add add _mm256_add_epi32, Sub sub _mm256_sub_epi32, Mul mul _mm256_mullo_epi32,
    BitAnd bitand _mm256_and_si256, BitOr bitor _mm256_or_si256,
    BitXor bitxor _mm256_xor_si256);
assign_ops!(F);
assign_ops!(U, bitor);
not_and_shifts!(U, _mm256_sll_epi32, _mm256_srl_epi32);

impl U32s for U {
    const LANES: usize = 8;

    #[inline(always)]
    fn splat(x: u32) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_set1_epi32(x as i32) })
    }

    #[inline(always)]
    fn iota() -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7) })
    }

    #[inline(always)]
    fn from_slice(x: &[u32]) -> Self {
        let x = &x[..8];
        // SAFETY: the module invariant; `x` holds the 32 bytes read.
        Self(unsafe { _mm256_loadu_si256(x.as_ptr().cast()) })
    }

    #[inline(always)]
    fn write_to(self, out: &mut [u32]) {
        let out = &mut out[..8];
        // SAFETY: the module invariant; `out` holds the 32 bytes written.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), self.0) }
    }

    // `vpsllvd` and `vpsrlvd` give 0 for counts from 32 on.
    lane_fns!(simd_eq _mm256_cmpeq_epi32, min _mm256_min_epu32, max _mm256_max_epu32,
        unbounded_shl _mm256_sllv_epi32, unbounded_shr _mm256_srlv_epi32);
    #[inline(always)]
    fn simd_lt(self, rhs: Self) -> Self {
        rhs.simd_gt(self)
    }

    #[inline(always)]
    fn simd_gt(self, rhs: Self) -> Self {
        // Unsigned order is the signed order with the sign bits flipped.
        let flip = Self::splat(0x8000_0000);
        let (a, b) = (self ^ flip, rhs ^ flip);
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_cmpgt_epi32(a.0, b.0) })
    }

    #[inline(always)]
    fn simd_lt_i32(self, rhs: Self) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_cmpgt_epi32(rhs.0, self.0) })
    }

    #[inline(always)]
    fn select(self, if_true: Self, if_false: Self) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_blendv_epi8(if_false.0, if_true.0, self.0) })
    }

    #[inline(always)]
    fn any(self) -> bool {
        // SAFETY: the module invariant.
        unsafe { _mm256_movemask_ps(_mm256_castsi256_ps(self.0)) != 0 }
    }

    #[inline(always)]
    fn all(self) -> bool {
        // SAFETY: the module invariant.
        unsafe { _mm256_movemask_ps(_mm256_castsi256_ps(self.0)) == 0xff }
    }

    #[inline(always)]
    fn max_rows(rows: &[Self]) -> Self {
        Self(super::max_rows::max_rows(&core::array::from_fn(|r| {
            rows[r].0
        })))
    }
}

impl Real for F {
    #[inline(always)]
    fn splat(x: f32) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_set1_ps(x) })
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_sqrt_ps(self.0) })
    }
}

impl F32s for F {
    type Bits = U;

    #[inline(always)]
    fn to_bits(self) -> U {
        // SAFETY: the module invariant.
        U(unsafe { _mm256_castps_si256(self.0) })
    }

    #[inline(always)]
    fn from_bits(bits: U) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_castsi256_ps(bits.0) })
    }

    #[inline(always)]
    fn is_nan(self) -> U {
        // SAFETY: the module invariant.
        Self(unsafe { _mm256_cmp_ps::<_CMP_UNORD_Q>(self.0, self.0) }).to_bits()
    }

    #[inline(always)]
    fn load(x: &[f32]) -> Self {
        let x = &x[..8];
        // SAFETY: the module invariant; `x` holds the 32 bytes read.
        Self(unsafe { _mm256_loadu_ps(x.as_ptr()) })
    }

    #[inline(always)]
    fn store(self, out: &mut [f32]) {
        let out = &mut out[..8];
        // SAFETY: the module invariant; `out` holds the 32 bytes written.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), self.0) }
    }

    #[inline(always)]
    fn trunc_small(self) -> U {
        // SAFETY: the module invariant.
        U(unsafe { _mm256_cvttps_epi32(self.0) })
    }
}

impl Simd for Avx2 {
    type H = __m128i;
    eight_lane_items!(F, U);

    #[inline(always)]
    fn outline<R>(f: impl FnOnce() -> R) -> R {
        // SAFETY: the module invariant.
        unsafe { outline(f) }
    }

    packed_io!(__m128i, 8, _mm_loadu_si128, _mm_storeu_si128);

    #[inline(always)]
    fn pack(u: U) -> __m128i {
        // Every lane is below 2^16, so the unsigned saturation never acts;
        // the permute gathers the two 128-bit halves' packed words.
        // SAFETY: the module invariant.
        unsafe {
            let packed = _mm256_permute4x64_epi64::<0b1000>(_mm256_packus_epi32(u.0, u.0));
            _mm256_castsi256_si128(packed)
        }
    }

    #[inline(always)]
    fn store_bytes(u: U, out: &mut [u8]) {
        let out = &mut out[..8];
        // Every lane is below 2^8: the shuffle gathers each 128-bit half's
        // low bytes into its first 32 bits, the permute joins the halves.
        // SAFETY: the module invariant; `out` holds the 8 bytes written.
        unsafe {
            let low_bytes = _mm256_setr_epi8(
                0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, //
                0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
            );
            let bytes = _mm256_shuffle_epi8(u.0, low_bytes);
            let joined =
                _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0));
            _mm_storel_epi64(out.as_mut_ptr().cast(), _mm256_castsi256_si128(joined));
        }
    }

    #[inline(always)]
    fn store_bytes4(u: [U; 4], out: &mut [u8]) {
        let out = &mut out[..32];
        // Every lane is below 2^8, so no saturating pack acts; the packs
        // work in 128-bit halves, leaving each vector's four-byte pieces
        // at dwords (v, v + 4): the permute puts them in order.
        // SAFETY: the module invariant; `out` holds the 32 bytes written.
        unsafe {
            let words01 = _mm256_packus_epi32(u[0].0, u[1].0);
            let words23 = _mm256_packus_epi32(u[2].0, u[3].0);
            let bytes = _mm256_packus_epi16(words01, words23);
            let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
            let ordered = _mm256_permutevar8x32_epi32(bytes, order);
            _mm256_storeu_si256(out.as_mut_ptr().cast(), ordered);
        }
    }

    #[inline(always)]
    fn unpack(h: __m128i) -> U {
        // SAFETY: the module invariant.
        U(unsafe { _mm256_cvtepu16_epi32(h) })
    }

    #[inline(always)]
    fn f16_to_f32(h: __m128i) -> F {
        // SAFETY: the module invariant (F16C).
        F(unsafe { _mm256_cvtph_ps(h) })
    }

    #[inline(always)]
    fn f32_to_f16(x: F) -> __m128i {
        // The hardware's NaN quieting keeps the sign and the top of the
        // payload, as the scalar twin does.
        // SAFETY: the module invariant (F16C).
        unsafe { _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(x.0) }
    }

    #[inline(always)]
    fn f16_truncate_normal(x: F) -> __m128i {
        // SAFETY: the module invariant (F16C).
        unsafe { _mm256_cvtps_ph::<_MM_FROUND_TO_ZERO>(x.0) }
    }
}

/// [`Simd::outline`]'s function: AVX2's features, never inlined.
#[target_feature(enable = "avx2,f16c")]
#[inline(never)]
unsafe fn outline<R>(f: impl FnOnce() -> R) -> R {
    f()
}
