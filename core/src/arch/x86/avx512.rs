//! AVX-512 (F, BW, VL): sixteen lanes in one 512-bit register; f16
//! conversions by `vcvtph2ps`/`vcvtps2ph` on 512 bits; with `BF16`, f32 ->
//! bf16 rounding by AVX512-BF16's `vcvtneps2bf16`. Every `unsafe` block
//! here relies on the module invariant of [`super`].
//!
//! Reductions keep the eight-lane order (see `crate::kernels`): sixteen
//! terms are added to the eight lane sums as two 256-bit halves, in index
//! order.

use core::arch::x86_64::{
    __m128i, __m256, __m256i, __m512, __m512i, __mmask16, _CMP_UNORD_Q, _MM_FROUND_NO_EXC,
    _MM_FROUND_TO_NEAREST_INT, _MM_FROUND_TO_ZERO, _mm_storeu_si128, _mm_stream_si128,
    _mm256_castpd_ps, _mm256_loadu_si256, _mm256_storeu_si256, _mm512_add_epi32, _mm512_add_ps,
    _mm512_and_si512, _mm512_castps_pd, _mm512_castps_si512, _mm512_castps512_ps256,
    _mm512_castsi256_si512, _mm512_castsi512_ps, _mm512_cmp_ps_mask, _mm512_cmpeq_epu32_mask,
    _mm512_cmpgt_epu32_mask, _mm512_cmplt_epu32_mask, _mm512_cvtepi32_epi8, _mm512_cvtepi32_epi16,
    _mm512_cvtepu16_epi32, _mm512_cvtneps_pbh, _mm512_cvtph_ps, _mm512_cvtps_ph,
    _mm512_cvttps_epi32, _mm512_div_ps, _mm512_extractf64x4_pd, _mm512_inserti64x4,
    _mm512_loadu_ps, _mm512_loadu_si512, _mm512_mask_blend_epi32, _mm512_maskz_set1_epi32,
    _mm512_max_epu32, _mm512_min_epu32, _mm512_mul_ps, _mm512_mullo_epi32, _mm512_or_si512,
    _mm512_permutex2var_epi16, _mm512_permutex2var_epi32, _mm512_set1_epi32, _mm512_set1_ps,
    _mm512_setr_epi32, _mm512_sll_epi32, _mm512_sllv_epi32, _mm512_sqrt_ps, _mm512_srl_epi32,
    _mm512_srlv_epi32, _mm512_storeu_ps, _mm512_storeu_si512, _mm512_sub_epi32, _mm512_sub_ps,
    _mm512_test_epi32_mask, _mm512_xor_si512,
};

use super::super::lanes::{F32s, Real, Simd, U32s};
use super::avx2;
use super::{assign_ops, binary_ops, lane_fns, not_and_shifts, packed_io};
use crate::fp::lanes as formulas;
use crate::rng::{BlockKeys, GroupDraws};

/// The backend; `BF16` selects the bf16 conversion instruction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Avx512<const BF16: bool>;

/// Sixteen f32 lanes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct F(__m512);

/// Sixteen u32 lanes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct U(__m512i);

binary_ops!(F: Add add _mm512_add_ps, Sub sub _mm512_sub_ps, Mul mul _mm512_mul_ps,
    Div div _mm512_div_ps);
binary_ops!(U: Add add _mm512_add_epi32, Sub sub _mm512_sub_epi32, Mul mul _mm512_mullo_epi32,
    BitAnd bitand _mm512_and_si512, BitOr bitor _mm512_or_si512,
    BitXor bitxor _mm512_xor_si512);
assign_ops!(F);
assign_ops!(U, bitor);
not_and_shifts!(U, _mm512_sll_epi32, _mm512_srl_epi32);

impl U {
    /// The mask of lanes set in `k`, as lanes.
    #[inline(always)]
    fn from_mask(k: __mmask16) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_maskz_set1_epi32(k, -1) })
    }

    /// The lanes of the mask `self` that are set, as a mask register.
    #[inline(always)]
    fn to_mask(self) -> __mmask16 {
        // SAFETY: the module invariant.
        unsafe { _mm512_test_epi32_mask(self.0, self.0) }
    }

    /// Lanes 0 to 7 from `lo`, 8 to 15 from `hi`.
    #[inline(always)]
    fn concat(lo: avx2::U, hi: avx2::U) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo.0), hi.0) })
    }
}

impl U32s for U {
    const LANES: usize = 16;

    #[inline(always)]
    fn splat(x: u32) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_set1_epi32(x as i32) })
    }

    #[inline(always)]
    fn iota() -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15) })
    }

    #[inline(always)]
    fn from_slice(x: &[u32]) -> Self {
        let x = &x[..16];
        // SAFETY: the module invariant; `x` holds the 64 bytes read.
        Self(unsafe { _mm512_loadu_si512(x.as_ptr().cast()) })
    }

    #[inline(always)]
    fn write_to(self, out: &mut [u32]) {
        let out = &mut out[..16];
        // SAFETY: the module invariant; `out` holds the 64 bytes written.
        unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), self.0) }
    }

    #[inline(always)]
    fn simd_eq(self, rhs: Self) -> Self {
        // SAFETY: the module invariant.
        Self::from_mask(unsafe { _mm512_cmpeq_epu32_mask(self.0, rhs.0) })
    }

    #[inline(always)]
    fn simd_lt(self, rhs: Self) -> Self {
        // SAFETY: the module invariant.
        Self::from_mask(unsafe { _mm512_cmplt_epu32_mask(self.0, rhs.0) })
    }

    #[inline(always)]
    fn simd_gt(self, rhs: Self) -> Self {
        // SAFETY: the module invariant.
        Self::from_mask(unsafe { _mm512_cmpgt_epu32_mask(self.0, rhs.0) })
    }

    #[inline(always)]
    fn select(self, if_true: Self, if_false: Self) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_mask_blend_epi32(self.to_mask(), if_false.0, if_true.0) })
    }

    // `vpsllvd` and `vpsrlvd` give 0 for counts from 32 on.
    lane_fns!(min _mm512_min_epu32, max _mm512_max_epu32,
        unbounded_shl _mm512_sllv_epi32, unbounded_shr _mm512_srlv_epi32);
    #[inline(always)]
    fn all_le(self, limit: u32) -> bool {
        // SAFETY: the module invariant.
        unsafe { _mm512_cmpgt_epu32_mask(self.0, Self::splat(limit).0) == 0 }
    }

    /// A tree of `vpermt2d` and `vpmaxud`: each level halves the lanes
    /// per row and joins two vectors of rows into one, rows in order.
    #[inline(always)]
    fn max_rows(rows: &[Self]) -> Self {
        // Level `k` (rows of `g = 16 >> k` lanes): output lane `o` is the
        // max of lanes `r g + w` and `r g + g / 2 + w` of the pair's 32,
        // `r = o / (g / 2)`, `w = o % (g / 2)`.
        const fn index(g: usize, second: bool) -> [i32; 16] {
            let mut idx = [0; 16];
            let mut o = 0;
            while o < 16 {
                let (r, w) = (o / (g / 2), o % (g / 2));
                idx[o] = (r * g + w + if second { g / 2 } else { 0 }) as i32;
                o += 1;
            }
            idx
        }
        const INDEX: [[[i32; 16]; 2]; 4] = [
            [index(16, false), index(16, true)],
            [index(8, false), index(8, true)],
            [index(4, false), index(4, true)],
            [index(2, false), index(2, true)],
        ];
        let mut v = [Self::splat(0); 16];
        v.copy_from_slice(&rows[..16]);
        let mut n = 16;
        for [lo, hi] in &INDEX {
            // SAFETY: the module invariant; the index arrays hold 64 bytes.
            let (lo, hi) = unsafe {
                (
                    _mm512_loadu_si512(lo.as_ptr().cast()),
                    _mm512_loadu_si512(hi.as_ptr().cast()),
                )
            };
            for i in 0..n / 2 {
                let (a, b) = (v[2 * i].0, v[2 * i + 1].0);
                // SAFETY: the module invariant.
                let (x, y) = unsafe {
                    (
                        _mm512_permutex2var_epi32(a, lo, b),
                        _mm512_permutex2var_epi32(a, hi, b),
                    )
                };
                v[i] = Self(x).max(Self(y));
            }
            n /= 2;
        }
        v[0]
    }

    #[inline(always)]
    fn any(self) -> bool {
        self.to_mask() != 0
    }

    #[inline(always)]
    fn all(self) -> bool {
        self.to_mask() == 0xffff
    }
}

impl Real for F {
    #[inline(always)]
    fn splat(x: f32) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_set1_ps(x) })
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_sqrt_ps(self.0) })
    }
}

impl F32s for F {
    type Bits = U;

    #[inline(always)]
    fn to_bits(self) -> U {
        // SAFETY: the module invariant.
        U(unsafe { _mm512_castps_si512(self.0) })
    }

    #[inline(always)]
    fn from_bits(bits: U) -> Self {
        // SAFETY: the module invariant.
        Self(unsafe { _mm512_castsi512_ps(bits.0) })
    }

    #[inline(always)]
    fn is_nan(self) -> U {
        // SAFETY: the module invariant.
        U::from_mask(unsafe { _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(self.0, self.0) })
    }

    #[inline(always)]
    fn load(x: &[f32]) -> Self {
        let x = &x[..16];
        // SAFETY: the module invariant; `x` holds the 64 bytes read.
        Self(unsafe { _mm512_loadu_ps(x.as_ptr()) })
    }

    #[inline(always)]
    fn store(self, out: &mut [f32]) {
        let out = &mut out[..16];
        // SAFETY: the module invariant; `out` holds the 64 bytes written.
        unsafe { _mm512_storeu_ps(out.as_mut_ptr(), self.0) }
    }

    #[inline(always)]
    fn trunc_small(self) -> U {
        // SAFETY: the module invariant.
        U(unsafe { _mm512_cvttps_epi32(self.0) })
    }
}

impl<const BF16: bool> Simd for Avx512<BF16> {
    const LANES: usize = 16;
    type F = F;
    type U = U;
    type U8 = avx2::U;
    type H = __m256i;
    type Acc = avx2::F;

    packed_io!(__m256i, 16, _mm256_loadu_si256, _mm256_storeu_si256);

    #[inline(always)]
    fn outline<R>(f: impl FnOnce() -> R) -> R {
        // SAFETY: the module invariant (with `BF16`, AVX512-BF16 too).
        unsafe { if BF16 { outline_bf16(f) } else { outline(f) } }
    }

    #[inline(always)]
    fn pack(u: U) -> __m256i {
        // SAFETY: the module invariant. (`vpmovdw` truncates each lane.)
        unsafe { _mm512_cvtepi32_epi16(u.0) }
    }

    #[inline(always)]
    fn store_bytes(u: U, out: &mut [u8]) {
        let out = &mut out[..16];
        // SAFETY: the module invariant; `out` holds the 16 bytes written.
        // (`vpmovdb` truncates each lane.)
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(u.0)) }
    }

    #[inline(always)]
    fn store_bytes4(u: [U; 4], out: &mut [u8]) {
        // Four `vpmovdb` stores: measured faster than packing into one
        // 64-byte store, which splits a cache line wherever `out` is not
        // 64-byte aligned.
        let out = &mut out[..64];
        for (v, c) in u.iter().enumerate() {
            Self::store_bytes(*c, &mut out[16 * v..]);
        }
    }

    #[inline(always)]
    fn stream_bytes4(u: [U; 4], out: &mut [u8]) {
        let out = &mut out[..64];
        if !out.as_ptr().cast::<__m128i>().is_aligned() {
            return Self::store_bytes4(u, out);
        }
        for (v, c) in u.iter().enumerate() {
            // SAFETY: the module invariant; `out` holds the 64 bytes
            // written and is 16-byte aligned (checked above).
            unsafe {
                _mm_stream_si128(out[16 * v..].as_mut_ptr().cast(), _mm512_cvtepi32_epi8(c.0))
            }
        }
    }

    #[inline(always)]
    fn unpack(h: __m256i) -> U {
        // SAFETY: the module invariant.
        U(unsafe { _mm512_cvtepu16_epi32(h) })
    }

    #[inline(always)]
    fn acc_zero() -> avx2::F {
        <avx2::F as Real>::splat(0.0)
    }

    #[inline(always)]
    fn accumulate(acc: avx2::F, terms: F) -> avx2::F {
        // SAFETY: the module invariant.
        let (lo, hi): (__m256, __m256) = unsafe {
            (
                _mm512_castps512_ps256(terms.0),
                _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(terms.0))),
            )
        };
        (acc + avx2::F(lo)) + avx2::F(hi)
    }

    #[inline(always)]
    fn acc_lanes(acc: avx2::F) -> [f32; 8] {
        let mut out = [0.0; 8];
        acc.store(&mut out);
        out
    }

    #[inline(always)]
    fn group_halves(words: avx2::U, k: usize) -> U {
        debug_assert_eq!(k, 0, "one vector per group of 16");
        U::concat(words, words >> 16)
    }

    #[inline(always)]
    fn keyed_halves(keys: &BlockKeys, index: u64) -> U {
        if index & 8 == 0 {
            Self::group_halves(keys.words_lanes(index >> 1), 0)
        } else {
            // The second half of one group, then the first of the next.
            let first: avx2::U = keys.words_lanes((index & !15) >> 1);
            U::concat(first >> 16, keys.words_lanes(index.wrapping_add(8) >> 1))
        }
    }

    /// Per 32 elements: one sixteen-lane draw of word 0, whose 16-bit
    /// halves one `vpermt2w` per vector puts in place, together with word
    /// 1's low halves above them.
    #[inline(always)]
    fn group_random(draws: &GroupDraws, index: u64, wide: bool) -> [U; 4] {
        /// Vector `h` of a word 0 draw's two: dword `d` takes the draw's
        /// 16-bit word `16 h + 2 (d % 8) + d / 8` (half `d / 8` of lane
        /// `8 h + d % 8`), then the low word of word 1's lane `d`.
        const fn order(h: usize) -> [u16; 32] {
            let mut idx = [0; 32];
            let mut d = 0;
            while d < 16 {
                idx[2 * d] = (16 * h + 2 * (d % 8) + d / 8) as u16;
                idx[2 * d + 1] = (32 + 2 * d) as u16;
                d += 1;
            }
            idx
        }
        const ORDER: [[u16; 32]; 2] = [order(0), order(1)];
        let mut out = [U::splat(0); 4];
        for g in 0..2 {
            let at = index.wrapping_add(32 * g as u64);
            let words: U = draws.word0(at);
            for h in 0..2 {
                let at = at.wrapping_add(16 * h as u64);
                let high = if wide { draws.word1(at) } else { U::splat(0) };
                // SAFETY: the module invariant; the index array holds 64
                // bytes.
                out[2 * g + h] = U(unsafe {
                    let idx = _mm512_loadu_si512(ORDER[h].as_ptr().cast());
                    _mm512_permutex2var_epi16(words.0, idx, high.0)
                });
            }
        }
        out
    }

    #[inline(always)]
    fn f16_to_f32(h: __m256i) -> F {
        // SAFETY: the module invariant.
        F(unsafe { _mm512_cvtph_ps(h) })
    }

    #[inline(always)]
    fn f32_to_f16(x: F) -> __m256i {
        // SAFETY: the module invariant.
        unsafe { _mm512_cvtps_ph::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(x.0) }
    }

    #[inline(always)]
    fn f16_truncate_normal(x: F) -> __m256i {
        // SAFETY: the module invariant.
        unsafe { _mm512_cvtps_ph::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(x.0) }
    }

    #[inline(always)]
    fn f32_to_bf16(x: F) -> __m256i {
        let bits = x.to_bits();
        // `vcvtneps2bf16` rounds to nearest even and quiets NaN as the twin
        // does, but reads f32 subnormals as zero: those chunks take the
        // formula.
        let exp = bits & U::splat(0x7f80_0000);
        let subnormal =
            exp.simd_eq(U::splat(0)) & (bits & U::splat(0x007f_ffff)).simd_ne(U::splat(0));
        if !BF16 || subnormal.any() {
            return Self::pack(formulas::f32_to_bf16_bits::<F>(bits));
        }
        // SAFETY: the module invariant (BF16 is set only for the backend
        // whose entry function enables AVX512-BF16).
        unsafe { core::mem::transmute::<_, __m256i>(_mm512_cvtneps_pbh(x.0)) }
    }
}

/// [`Simd::outline`]'s function: AVX-512's features, never inlined.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl")]
#[inline(never)]
unsafe fn outline<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// [`Simd::outline`]'s function with AVX512-BF16 too.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512bf16")]
#[inline(never)]
unsafe fn outline_bf16<R>(f: impl FnOnce() -> R) -> R {
    f()
}
