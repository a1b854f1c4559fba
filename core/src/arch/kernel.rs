//! [`Kernel`]: a kernel written once, generic over the backend's lanes,
//! with its scalar twin; [`kernel!`] defines one.
//!
//! Kernels are written once, generic over [`Simd`], and must be
//! `#[inline(always)]` all the way down: a backend's operations compile to
//! its instructions only once inlined into the backend's entry function,
//! which carries the `#[target_feature]`s (the model of `pulp`'s
//! `WithSimd`, which faer uses).

use super::lanes::Simd;

/// A kernel written once for every backend.
pub(crate) trait Kernel: Sized {
    type Output;
    /// The kernel on backend `S`. Implementations must be
    /// `#[inline(always)]` (see the module docs).
    fn run<S: Simd>(self) -> Self::Output;
    /// The scalar twin.
    fn scalar(self) -> Self::Output;
}

/// Defines a [`Kernel`]: a struct of the kernel's arguments, its body on
/// backend `S` (always inlined) and its scalar twin.
///
/// ```ignore
/// kernel! {
///     Scale<'a> { a: f32, x: &'a mut [f32] } -> ();
///     run<S>(k) { /* k.a, k.x, lanes of S */ }
///     scalar(k) { scalar::scale(k.a, k.x) }
/// }
/// ```
macro_rules! kernel {
    (
        $Name:ident<'a $(, $G:ident: $Bound:path)*> { $($field:ident: $ty:ty),* $(,)? } -> $Out:ty;
        run<$S:ident>($k:ident) $run:block
        scalar($k2:ident) $scalar:block
    ) => {
        struct $Name<'a $(, $G)*> {
            $($field: $ty),*
        }

        impl<'a $(, $G: $Bound)*> $crate::arch::Kernel for $Name<'a $(, $G)*> {
            type Output = $Out;

            #[inline(always)]
            fn run<$S: $crate::arch::Simd>(self) -> $Out {
                let $k = self;
                $run
            }

            fn scalar(self) -> $Out {
                let $k2 = self;
                $scalar
            }
        }
    };
}
pub(crate) use kernel;
