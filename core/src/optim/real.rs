//! Arithmetic written once for one lane (`f32`) and eight (`f32x8`).
//!
//! Each optimizer states its per-element formula once, generic over
//! [`Real`]; the SIMD kernel runs it on `f32x8` and its scalar twin on
//! `f32`. Both perform the same IEEE operations in the same order (every
//! operation here is correctly rounded, and there is no fused multiply-add),
//! so they agree bit for bit.

use core::ops::{Add, Div, Mul, Sub};

use wide::f32x8;

/// f32 arithmetic on one lane or eight.
pub(crate) trait Real:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    /// `x` in every lane.
    fn splat(x: f32) -> Self;
    /// Correctly rounded square root.
    fn sqrt(self) -> Self;
}

impl Real for f32 {
    #[inline(always)]
    fn splat(x: f32) -> Self {
        x
    }

    #[inline(always)]
    fn sqrt(self) -> Self {
        libm::sqrtf(self)
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
