//! The portable backend: eight lanes through `wide`, whose types use what
//! the build's target features give them (two SSE2 registers on a default
//! x86-64 build, NEON on aarch64, AVX2 in a `target-cpu=native` build).
//! F16C, when the build enables it, converts f16.

use wide::{f32x8, u32x8};

use super::lanes::{F32s, Real, Simd, U32s, eight_lane_items};
use super::memory;

/// See the module docs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Portable;

impl U32s for u32x8 {
    const LANES: usize = 8;

    #[inline(always)]
    fn splat(x: u32) -> Self {
        u32x8::splat(x)
    }

    #[inline(always)]
    fn iota() -> Self {
        u32x8::new([0, 1, 2, 3, 4, 5, 6, 7])
    }

    #[inline(always)]
    fn from_slice(x: &[u32]) -> Self {
        let x: [u32; 8] = x[..8].try_into().expect("eight lanes");
        u32x8::new(x)
    }

    #[inline(always)]
    fn write_to(self, out: &mut [u32]) {
        out[..8].copy_from_slice(&self.to_array());
    }

    #[inline(always)]
    fn simd_eq(self, rhs: Self) -> Self {
        u32x8::simd_eq(self, rhs)
    }

    #[inline(always)]
    fn simd_lt(self, rhs: Self) -> Self {
        u32x8::simd_lt(self, rhs)
    }

    #[inline(always)]
    fn simd_gt(self, rhs: Self) -> Self {
        u32x8::simd_gt(self, rhs)
    }

    #[inline(always)]
    fn select(self, if_true: Self, if_false: Self) -> Self {
        u32x8::select(self, if_true, if_false)
    }

    #[inline(always)]
    fn min(self, rhs: Self) -> Self {
        u32x8::min(self, rhs)
    }

    #[inline(always)]
    fn max(self, rhs: Self) -> Self {
        u32x8::max(self, rhs)
    }

    #[inline(always)]
    fn unbounded_shl(self, rhs: Self) -> Self {
        u32x8::unbounded_shl(self, rhs)
    }

    #[inline(always)]
    fn unbounded_shr(self, rhs: Self) -> Self {
        u32x8::unbounded_shr(self, rhs)
    }

    #[inline(always)]
    fn any(self) -> bool {
        u32x8::any(self)
    }

    #[inline(always)]
    fn all(self) -> bool {
        u32x8::all(self)
    }
}

impl Real for f32x8 {
    #[inline(always)]
    fn splat(x: f32) -> Self {
        f32x8::splat(x)
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        f32x8::sqrt(self)
    }
}

impl F32s for f32x8 {
    type Bits = u32x8;

    #[inline(always)]
    fn to_bits(self) -> u32x8 {
        f32x8::to_bits(self)
    }

    #[inline(always)]
    fn from_bits(bits: u32x8) -> Self {
        f32x8::from_bits(bits)
    }

    #[inline(always)]
    fn is_nan(self) -> u32x8 {
        f32x8::to_bits(f32x8::is_nan(self))
    }

    #[inline(always)]
    fn load(x: &[f32]) -> Self {
        let x: [f32; 8] = x[..8].try_into().expect("eight lanes");
        f32x8::from(x)
    }

    #[inline(always)]
    fn store(self, out: &mut [f32]) {
        out[..8].copy_from_slice(&self.to_array());
    }

    #[inline(always)]
    fn trunc_small(self) -> u32x8 {
        bytemuck::cast(f32x8::fast_trunc_int(self))
    }
}

impl Simd for Portable {
    type H = [u16; 8];
    eight_lane_items!(f32x8, u32x8);

    #[inline(always)]
    fn load_h(x: &[u16]) -> [u16; 8] {
        x[..8].try_into().expect("eight lanes")
    }

    #[inline(always)]
    fn store_h(h: [u16; 8], out: &mut [u16]) {
        out[..8].copy_from_slice(&h);
    }

    #[inline(always)]
    fn pack(u: u32x8) -> [u16; 8] {
        memory::narrow_u16(u)
    }

    #[inline(always)]
    fn unpack(h: [u16; 8]) -> u32x8 {
        u32x8::from(wide::u16x8::new(h))
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    #[inline(always)]
    fn f16_to_f32(h: [u16; 8]) -> f32x8 {
        memory::f16c::f16_to_f32(h)
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    #[inline(always)]
    fn f32_to_f16(x: f32x8) -> [u16; 8] {
        memory::f16c::f32_to_f16(x)
    }

    #[cfg(all(target_arch = "x86_64", target_feature = "f16c"))]
    #[inline(always)]
    fn f16_truncate_normal(x: f32x8) -> [u16; 8] {
        memory::f16c::f32_to_f16_truncate(x)
    }
}
