//! Running a [`Kernel`] on the active backend (the one place that knows
//! every backend).

use super::Backend;
use super::kernel::Kernel;
use super::lanes::Simd;

/// Runs `kernel` on the [active](super::active) backend.
#[inline]
pub(crate) fn dispatch<K: Kernel>(kernel: K) -> K::Output {
    match super::active() {
        Backend::Scalar => kernel.scalar(),
        #[cfg(target_arch = "x86_64")]
        backend => super::x86::dispatch(backend, kernel),
        #[cfg(not(target_arch = "x86_64"))]
        _ => kernel.run::<super::portable::Portable>(),
    }
}

/// Runs `f` inside the [active](super::active) backend's entry function,
/// compiled with its target features ([`Backend::target_features`]): a
/// plain loop in `f`, if the closure is `#[inline(always)]` and everything
/// it calls is inlined too, is then vectorised for this CPU as
/// `-C target-cpu=native` would (the benchmarks' naive references use it).
/// The scalar and portable backends run `f` as the build compiled it.
///
/// ```
/// use tessera_core::arch;
///
/// // A plain loop, vectorised for this CPU's backend.
/// let x = vec![1.5f32; 1000];
/// let sum = arch::with_backend_features(|| x.iter().map(|v| v * 2.0).sum::<f32>());
/// assert_eq!(sum, 3000.0);
/// ```
#[inline]
pub fn with_backend_features<R>(f: impl FnOnce() -> R) -> R {
    struct Call<F>(F);
    impl<R, F: FnOnce() -> R> Kernel for Call<F> {
        type Output = R;
        #[inline(always)]
        fn run<S: Simd>(self) -> R {
            (self.0)()
        }
        fn scalar(self) -> R {
            (self.0)()
        }
    }
    dispatch(Call(f))
}
