//! Arithmetic written once for one lane (`f32`) and for every backend's
//! lanes.
//!
//! Each optimizer states its per-element formula once, generic over
//! [`Real`]; the dispatched kernel runs it on the active backend's lanes
//! and its scalar twin on `f32`. Both perform the same IEEE operations in
//! the same order (every operation is correctly rounded, and there is no
//! fused multiply-add), so they agree bit for bit.

pub(crate) use crate::arch::Real;

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
