//! CPU backends and how one is chosen.
//!
//! Every kernel exists once, written over lane types ([`Backend`]s differ
//! only in which instructions implement them), plus its scalar twin. The
//! CPU's features are detected once, on the first kernel call (with
//! `cpuid` and `xgetbv`, so a `no_std` build gets the fast paths too), and
//! the fastest backend it can run is cached; when the build's target
//! features already guarantee the best backend, the choice is made at
//! compile time. Every backend gives bitwise the scalar
//! twin's results, so the choice changes speed only.
//!
//! A backend can be forced, for tests and comparisons: process-wide with
//! [`force`] or the environment variable `TESSERA_BACKEND` (read once, on
//! the first kernel call: `scalar`, `portable`, `sse2`, `avx2`, `avx512`,
//! `avx512bf16`), or on one thread with `with_backend`. Forcing a backend
//! the CPU cannot run is an error, never a silent fallback.
//!
//! ```
//! use tessera_core::arch::{self, Backend};
//! use tessera_core::kernels;
//!
//! let x = [0.5f32; 1000];
//! let fast = kernels::sum_of_squares(&x);
//! let twin = arch::with_backend(Backend::Scalar, || kernels::sum_of_squares(&x)).unwrap();
//! assert_eq!(fast.to_bits(), twin.to_bits());
//! assert!(Backend::ALL.iter().any(|b| b.is_available() && *b == arch::best()));
//! ```
//!
//! All `unsafe` in the crate lives in this module.

mod backend;
mod block_pack;
mod cast;
#[cfg(target_arch = "x86_64")]
mod cpuid;
mod dispatch;
mod kernel;
pub(crate) mod lanes;
pub(crate) mod memory;
mod portable;
#[cfg(target_arch = "x86_64")]
mod x86;

#[cfg(feature = "std")]
pub use backend::with_backend;
pub use backend::{Backend, BackendError, active, backend_from_env, best, force};

pub(crate) use cast::{Plain, cast, cast_slice, cast_slice_mut};
#[cfg(feature = "alloc")]
pub(crate) use cast::{bytes_of, read_unaligned};
pub(crate) use dispatch::dispatch;
pub use dispatch::with_backend_features;
pub(crate) use kernel::{Kernel, kernel};
pub(crate) use lanes::{F32s, Real, Simd, U32s, each_vector};
pub(crate) use memory::{prefetch, prefetch_ahead, store_fence, store_streaming, wants_streaming};
pub(crate) use portable::Portable;
