//! SSE2, the x86-64 baseline: eight lanes as two 128-bit registers. SSE2
//! lacks unsigned comparisons, a 32-bit multiply and per-lane shifts; they
//! are built from what it has (the per-lane shifts, used only on the rare
//! f16 subnormal path of stochastic rounding, lane by lane).

use core::arch::x86_64::{
    __m128, __m128i, _mm_add_epi32, _mm_add_ps, _mm_and_si128, _mm_andnot_si128, _mm_castps_si128,
    _mm_castsi128_ps, _mm_cmpeq_epi32, _mm_cmpgt_epi32, _mm_cmpunord_ps, _mm_cvtsi32_si128,
    _mm_cvttps_epi32, _mm_div_ps, _mm_loadu_ps, _mm_loadu_si128, _mm_movemask_ps, _mm_mul_epu32,
    _mm_mul_ps, _mm_or_si128, _mm_packs_epi32, _mm_packus_epi16, _mm_set1_epi16, _mm_set1_epi32,
    _mm_set1_ps, _mm_setr_epi32, _mm_setzero_si128, _mm_shuffle_epi32, _mm_sll_epi32, _mm_sqrt_ps,
    _mm_srl_epi32, _mm_srli_epi64, _mm_storel_epi64, _mm_storeu_ps, _mm_storeu_si128,
    _mm_sub_epi32, _mm_sub_ps, _mm_unpackhi_epi16, _mm_unpacklo_epi16, _mm_unpacklo_epi32,
    _mm_xor_si128,
};

use super::super::lanes::{F32s, Real, Simd, U32s, eight_lane_items};
use super::{assign_ops, packed_io};

/// The backend (see the module docs).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sse2;

/// Eight f32 lanes, lanes 0 to 3 in the first register.
#[derive(Clone, Copy, Debug)]
pub(crate) struct F([__m128; 2]);

/// Eight u32 lanes, lanes 0 to 3 in the first register.
#[derive(Clone, Copy, Debug)]
pub(crate) struct U([__m128i; 2]);

/// Binary operators applied to both halves.
macro_rules! pair_ops {
    ($Ty:ident: $($Trait:ident $method:ident $op:expr),* $(,)?) => {$(
        impl core::ops::$Trait for $Ty {
            type Output = Self;
            #[inline(always)]
            fn $method(self, rhs: Self) -> Self {
                // SAFETY: SSE2 is part of every x86-64 target.
                unsafe { Self([$op(self.0[0], rhs.0[0]), $op(self.0[1], rhs.0[1])]) }
            }
        }
    )*};
}

pair_ops!(F: Add add _mm_add_ps, Sub sub _mm_sub_ps, Mul mul _mm_mul_ps, Div div _mm_div_ps);
pair_ops!(U: Add add _mm_add_epi32, Sub sub _mm_sub_epi32,
    BitAnd bitand _mm_and_si128, BitOr bitor _mm_or_si128, BitXor bitxor _mm_xor_si128);
assign_ops!(F);
assign_ops!(U, bitor);

impl core::ops::Mul for U {
    type Output = Self;
    #[inline(always)]
    fn mul(self, rhs: Self) -> Self {
        Self([mul_lo(self.0[0], rhs.0[0]), mul_lo(self.0[1], rhs.0[1])])
    }
}

/// The low 32 bits of four 32-bit products (SSE2 multiplies the even
/// lanes to 64 bits; the odd lanes are shifted down and multiplied too).
#[inline(always)]
fn mul_lo(a: __m128i, b: __m128i) -> __m128i {
    // SAFETY: SSE2 is part of every x86-64 target.
    unsafe {
        let even = _mm_mul_epu32(a, b);
        let odd = _mm_mul_epu32(_mm_srli_epi64::<32>(a), _mm_srli_epi64::<32>(b));
        _mm_unpacklo_epi32(
            _mm_shuffle_epi32::<0b1000>(even),
            _mm_shuffle_epi32::<0b1000>(odd),
        )
    }
}

impl U {
    #[inline(always)]
    fn map(self, f: impl Fn(__m128i) -> __m128i) -> Self {
        Self([f(self.0[0]), f(self.0[1])])
    }

    #[inline(always)]
    fn lanes(self) -> [u32; 8] {
        let mut out = [0; 8];
        self.write_to(&mut out);
        out
    }

    /// Lane-by-lane `f` (for the per-lane shifts).
    #[inline(always)]
    fn zip_lanes(self, rhs: Self, f: impl Fn(u32, u32) -> u32) -> Self {
        let (a, b) = (self.lanes(), rhs.lanes());
        Self::from_slice(&core::array::from_fn::<u32, 8, _>(
            #[inline(always)]
            |i| f(a[i], b[i]),
        ))
    }

    /// The sign bits of the eight lanes.
    #[inline(always)]
    fn signs(self) -> i32 {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            let [lo, hi] = self.0;
            _mm_movemask_ps(_mm_castsi128_ps(lo)) | _mm_movemask_ps(_mm_castsi128_ps(hi)) << 4
        }
    }
}

impl core::ops::Not for U {
    type Output = Self;
    #[inline(always)]
    fn not(self) -> Self {
        self ^ Self::splat(u32::MAX)
    }
}

impl core::ops::Shl<u32> for U {
    type Output = Self;
    #[inline(always)]
    fn shl(self, n: u32) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            let count = _mm_cvtsi32_si128(n as i32);
            self.map(
                #[inline(always)]
                |v| _mm_sll_epi32(v, count),
            )
        }
    }
}

impl core::ops::Shr<u32> for U {
    type Output = Self;
    #[inline(always)]
    fn shr(self, n: u32) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            let count = _mm_cvtsi32_si128(n as i32);
            self.map(
                #[inline(always)]
                |v| _mm_srl_epi32(v, count),
            )
        }
    }
}

impl U32s for U {
    const LANES: usize = 8;

    #[inline(always)]
    fn splat(x: u32) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            let v = _mm_set1_epi32(x as i32);
            Self([v, v])
        }
    }

    #[inline(always)]
    fn iota() -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe { Self([_mm_setr_epi32(0, 1, 2, 3), _mm_setr_epi32(4, 5, 6, 7)]) }
    }

    #[inline(always)]
    fn from_slice(x: &[u32]) -> Self {
        let x = &x[..8];
        // SAFETY: `x` holds the 32 bytes read (loadu needs no alignment).
        unsafe {
            Self([
                _mm_loadu_si128(x.as_ptr().cast()),
                _mm_loadu_si128(x.as_ptr().add(4).cast()),
            ])
        }
    }

    #[inline(always)]
    fn write_to(self, out: &mut [u32]) {
        let out = &mut out[..8];
        // SAFETY: `out` holds the 32 bytes written.
        unsafe {
            _mm_storeu_si128(out.as_mut_ptr().cast(), self.0[0]);
            _mm_storeu_si128(out.as_mut_ptr().add(4).cast(), self.0[1]);
        }
    }

    #[inline(always)]
    fn simd_eq(self, rhs: Self) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            Self([
                _mm_cmpeq_epi32(self.0[0], rhs.0[0]),
                _mm_cmpeq_epi32(self.0[1], rhs.0[1]),
            ])
        }
    }

    #[inline(always)]
    fn simd_lt(self, rhs: Self) -> Self {
        rhs.simd_gt(self)
    }

    #[inline(always)]
    fn simd_gt(self, rhs: Self) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            // Unsigned order is the signed order with the sign bits flipped.
            let flip = Self::splat(0x8000_0000);
            let (a, b) = (self ^ flip, rhs ^ flip);
            Self([
                _mm_cmpgt_epi32(a.0[0], b.0[0]),
                _mm_cmpgt_epi32(a.0[1], b.0[1]),
            ])
        }
    }

    #[inline(always)]
    fn select(self, if_true: Self, if_false: Self) -> Self {
        let (m, t, f) = (self.0, if_true.0, if_false.0);
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            Self([
                _mm_or_si128(_mm_and_si128(m[0], t[0]), _mm_andnot_si128(m[0], f[0])),
                _mm_or_si128(_mm_and_si128(m[1], t[1]), _mm_andnot_si128(m[1], f[1])),
            ])
        }
    }

    #[inline(always)]
    fn min(self, rhs: Self) -> Self {
        self.simd_gt(rhs).select(rhs, self)
    }

    #[inline(always)]
    fn max(self, rhs: Self) -> Self {
        self.simd_gt(rhs).select(self, rhs)
    }

    #[inline(always)]
    fn unbounded_shl(self, rhs: Self) -> Self {
        self.zip_lanes(
            rhs,
            #[inline(always)]
            |a, s| a.checked_shl(s).unwrap_or(0),
        )
    }

    #[inline(always)]
    fn unbounded_shr(self, rhs: Self) -> Self {
        self.zip_lanes(
            rhs,
            #[inline(always)]
            |a, s| a.checked_shr(s).unwrap_or(0),
        )
    }

    #[inline(always)]
    fn any(self) -> bool {
        self.signs() != 0
    }

    #[inline(always)]
    fn all(self) -> bool {
        self.signs() == 0xff
    }
}

impl Real for F {
    #[inline(always)]
    fn splat(x: f32) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            let v = _mm_set1_ps(x);
            Self([v, v])
        }
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe { Self([_mm_sqrt_ps(self.0[0]), _mm_sqrt_ps(self.0[1])]) }
    }
}

impl F32s for F {
    type Bits = U;

    #[inline(always)]
    fn to_bits(self) -> U {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe { U([_mm_castps_si128(self.0[0]), _mm_castps_si128(self.0[1])]) }
    }

    #[inline(always)]
    fn from_bits(bits: U) -> Self {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe { Self([_mm_castsi128_ps(bits.0[0]), _mm_castsi128_ps(bits.0[1])]) }
    }

    #[inline(always)]
    fn is_nan(self) -> U {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            let [lo, hi] = self.0;
            Self([_mm_cmpunord_ps(lo, lo), _mm_cmpunord_ps(hi, hi)]).to_bits()
        }
    }

    #[inline(always)]
    fn load(x: &[f32]) -> Self {
        let x = &x[..8];
        // SAFETY: `x` holds the 32 bytes read.
        unsafe { Self([_mm_loadu_ps(x.as_ptr()), _mm_loadu_ps(x.as_ptr().add(4))]) }
    }

    #[inline(always)]
    fn store(self, out: &mut [f32]) {
        let out = &mut out[..8];
        // SAFETY: `out` holds the 32 bytes written.
        unsafe {
            _mm_storeu_ps(out.as_mut_ptr(), self.0[0]);
            _mm_storeu_ps(out.as_mut_ptr().add(4), self.0[1]);
        }
    }

    #[inline(always)]
    fn trunc_small(self) -> U {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe { U([_mm_cvttps_epi32(self.0[0]), _mm_cvttps_epi32(self.0[1])]) }
    }
}

impl Simd for Sse2 {
    type H = __m128i;
    eight_lane_items!(F, U);

    packed_io!(__m128i, 8, _mm_loadu_si128, _mm_storeu_si128);

    #[inline(always)]
    fn pack(u: U) -> __m128i {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            // SSE2 packs with signed saturation only: move 0..2^16 to the
            // signed range, pack exactly, and flip the top bit back.
            let bias = U::splat(0x8000);
            let v = u - bias;
            _mm_xor_si128(_mm_packs_epi32(v.0[0], v.0[1]), _mm_set1_epi16(i16::MIN))
        }
    }

    #[inline(always)]
    fn store_bytes(u: U, out: &mut [u8]) {
        let out = &mut out[..8];
        // Every lane is below 2^8, so neither saturating pack acts.
        // SAFETY: SSE2 is part of every x86-64 target; `out` holds the 8
        // bytes written.
        unsafe {
            let words = _mm_packs_epi32(u.0[0], u.0[1]);
            _mm_storel_epi64(out.as_mut_ptr().cast(), _mm_packus_epi16(words, words));
        }
    }

    #[inline(always)]
    fn unpack(h: __m128i) -> U {
        // SAFETY: SSE2 is part of every x86-64 target.
        unsafe {
            let zero = _mm_setzero_si128();
            U([_mm_unpacklo_epi16(h, zero), _mm_unpackhi_epi16(h, zero)])
        }
    }
}
