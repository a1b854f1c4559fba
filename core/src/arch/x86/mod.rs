//! The x86-64 backends and their entry points.
//!
//! # Safety
//!
//! The lane types of the AVX2 and AVX-512 backends wrap registers whose
//! operations need those instruction sets. Their values are created only
//! by kernels monomorphised for the backend, and those run only from the
//! backend's entry function below, which [`dispatch`] calls after the
//! backend was found available ([`Backend::is_available`]: detected at run
//! time, or guaranteed by the build's target features). The types are
//! private to `arch`, so no other code can instantiate a kernel with them.
//! SSE2 is part of every x86-64 target, so the SSE2 backend needs no such
//! check. Every `unsafe` block in these modules relies on that argument,
//! and their `SAFETY` comments refer to it as "the module invariant".

mod avx2;
mod avx512;
mod block_pack;
mod max_rows;
mod sse2;

use super::Backend;
use super::kernel::Kernel;

/// Binary operator impls: `$Trait::$method` of `$Ty` by `$intrinsic`.
macro_rules! binary_ops {
    ($Ty:ident: $($Trait:ident $method:ident $intrinsic:ident),* $(,)?) => {$(
        impl core::ops::$Trait for $Ty {
            type Output = Self;
            #[inline(always)]
            fn $method(self, rhs: Self) -> Self {
                // SAFETY: the module invariant (see `arch::x86`).
                Self(unsafe { $intrinsic(self.0, rhs.0) })
            }
        }
    )*};
}
pub(super) use binary_ops;

/// Methods `fn $name(self, rhs: Self) -> Self` by `$intrinsic` on the
/// wrapped registers (inside a trait impl).
macro_rules! lane_fns {
    ($($name:ident $intrinsic:ident),* $(,)?) => {$(
        #[inline(always)]
        fn $name(self, rhs: Self) -> Self {
            // SAFETY: the module invariant (see `arch::x86`).
            Self(unsafe { $intrinsic(self.0, rhs.0) })
        }
    )*};
}
pub(super) use lane_fns;

/// `Not` (xor with all ones) and shifts by a count held in a register
/// (`$sll`, `$srl`) for the u32 lanes `$U` wrapping one register.
macro_rules! not_and_shifts {
    ($U:ident, $sll:ident, $srl:ident) => {
        impl core::ops::Not for $U {
            type Output = Self;
            #[inline(always)]
            fn not(self) -> Self {
                self ^ <Self as U32s>::splat(u32::MAX)
            }
        }

        impl core::ops::Shl<u32> for $U {
            type Output = Self;
            #[inline(always)]
            fn shl(self, n: u32) -> Self {
                // SAFETY: the module invariant (see `arch::x86`).
                Self(unsafe { $sll(self.0, core::arch::x86_64::_mm_cvtsi32_si128(n as i32)) })
            }
        }

        impl core::ops::Shr<u32> for $U {
            type Output = Self;
            #[inline(always)]
            fn shr(self, n: u32) -> Self {
                // SAFETY: the module invariant (see `arch::x86`).
                Self(unsafe { $srl(self.0, core::arch::x86_64::_mm_cvtsi32_si128(n as i32)) })
            }
        }
    };
}
pub(super) use not_and_shifts;

/// `Simd::load_h` and `Simd::store_h` for `$n` 16-bit values in the
/// register type `$H`, by unaligned loads and stores.
macro_rules! packed_io {
    ($H:ty, $n:literal, $loadu:ident, $storeu:ident) => {
        #[inline(always)]
        fn load_h(x: &[u16]) -> $H {
            let x = &x[..$n];
            // SAFETY: the module invariant; `x` holds the bytes read (the
            // load needs no alignment).
            unsafe { $loadu(x.as_ptr().cast()) }
        }

        #[inline(always)]
        fn store_h(h: $H, out: &mut [u16]) {
            let out = &mut out[..$n];
            // SAFETY: the module invariant; `out` holds the bytes written.
            unsafe { $storeu(out.as_mut_ptr().cast(), h) }
        }
    };
}
pub(super) use packed_io;

/// `AddAssign` (and `BitOrAssign`) from `Add` (and `BitOr`).
macro_rules! assign_ops {
    ($Ty:ident) => {
        impl core::ops::AddAssign for $Ty {
            #[inline(always)]
            fn add_assign(&mut self, rhs: Self) {
                *self = *self + rhs;
            }
        }
    };
    ($Ty:ident, bitor) => {
        $crate::arch::x86::assign_ops!($Ty);
        impl core::ops::BitOrAssign for $Ty {
            #[inline(always)]
            fn bitor_assign(&mut self, rhs: Self) {
                *self = *self | rhs;
            }
        }
    };
}
pub(super) use assign_ops;

/// Runs `kernel` on `backend`, a vector backend this CPU can run.
#[inline]
pub(crate) fn dispatch<K: Kernel>(backend: Backend, kernel: K) -> K::Output {
    match backend {
        Backend::Scalar => run_scalar(kernel),
        Backend::Portable => run_portable(kernel),
        Backend::Sse2 => run_sse2(kernel),
        // SAFETY: `backend` is active, so it was found available (see
        // `arch::active`): this CPU has AVX2 and F16C.
        Backend::Avx2 => unsafe { run_avx2(kernel) },
        // SAFETY: as above, with AVX-512 F, BW and VL.
        Backend::Avx512 => unsafe { run_avx512(kernel) },
        // SAFETY: as above, with AVX512-BF16 too.
        Backend::Avx512Bf16 => unsafe { run_avx512bf16(kernel) },
    }
}

// Each backend's kernel is a function of its own, never inlined into
// `dispatch`: without optimisation (a downstream debug build, the doc
// tests) every inlined copy keeps its own stack slots, and the three
// backends below inlined together made `dispatch`'s frame about 9.9 MB,
// past the main thread's 8 MiB.

#[inline(never)]
fn run_scalar<K: Kernel>(kernel: K) -> K::Output {
    kernel.scalar()
}

#[inline(never)]
fn run_portable<K: Kernel>(kernel: K) -> K::Output {
    kernel.run::<super::portable::Portable>()
}

#[inline(never)]
fn run_sse2<K: Kernel>(kernel: K) -> K::Output {
    kernel.run::<sse2::Sse2>()
}

/// # Safety
/// The CPU must have AVX2 and F16C.
#[target_feature(enable = "avx2,f16c")]
unsafe fn run_avx2<K: Kernel>(kernel: K) -> K::Output {
    kernel.run::<avx2::Avx2>()
}

/// # Safety
/// The CPU must have AVX2, F16C and AVX-512 F, BW and VL.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl")]
unsafe fn run_avx512<K: Kernel>(kernel: K) -> K::Output {
    kernel.run::<avx512::Avx512<false>>()
}

/// # Safety
/// The CPU must have what [`run_avx512`] needs, and AVX512-BF16.
#[target_feature(enable = "avx2,f16c,avx512f,avx512bw,avx512vl,avx512bf16")]
unsafe fn run_avx512bf16<K: Kernel>(kernel: K) -> K::Output {
    kernel.run::<avx512::Avx512<true>>()
}
