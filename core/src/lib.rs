//! Tessera's kernels: the numerics of mixed-precision, data-parallel
//! training as `no_std` functions over slices.
//!
//! - [`fp`]: number formats (f16, bf16, TF32, every FP8, FP6 and FP4 of
//!   ml_dtypes and OCP, E8M0, Graphcore's F143/F152, any CPFloat format),
//!   every rounding mode (exactly unbiased stochastic rounding included),
//!   MX and NVFP4 blocks; SIMD on every backend with scalar `const fn`
//!   twins.
//! - [`rng`]: position-addressed random bits (counter-based), with
//!   `rand_core` impls for sequential use.
//! - [`kernels`]: vector kernels (axpy, scale, add, dot, sum of squares,
//!   max-abs, fused unscale-and-check, accumulation) with fixed-order,
//!   split-invariant reductions.
//! - [`scale`]: loss scaling: static, dynamic (`torch.amp.GradScaler`) and
//!   automatic (PopART's histogram rule), with the unscale-and-check step.
//! - [`optim`]: SGD, AdamW, LAMB and LARS over f32/f16/bf16 storage, with a
//!   two-phase API so tiles and replicas can each own a piece; gradient
//!   accumulation.
//! - [`loss`]: softmax cross-entropy and CTC, with gradients.
//! - [`collective`]: the pure parts of all-reduce: ring, bidirectional
//!   ring, double binary tree and halving-doubling schedules, reduction
//!   ops, an in-memory executor and a deterministic summation order.
//!
//! # Quick start
//!
//! f16 weights without a master copy, LAMB with timm's `max_grad_norm`, a
//! warm-up-plus-cosine schedule and dynamic loss scaling; the optimizer's
//! whole state is a [`StateDict`](optim::StateDict) to save (with the
//! `serde` feature, the optimizer and scaler serialize themselves):
//!
//! ```
//! use tessera_core::fp::f16;
//! use tessera_core::optim::{Decay, Group, LambConfig, LrSchedule, OwnedOptimizer, Tensor};
//! use tessera_core::scale::{DynamicLossScaler, GradSlice};
//!
//! let groups = vec![Group { config: LambConfig::default().into(), params: vec![(0, 4)] }];
//! let mut optimizer = OwnedOptimizer::new(groups)?.with_max_grad_norm(1.0)?;
//! let schedule = LrSchedule { warmup: 2, decay: Decay::Cosine { final_factor: 0.0 }, total: 10 };
//! let mut scaler = DynamicLossScaler::default();
//! let mut w = vec![f16::ONE; 4];
//! for step in 0..10 {
//!     // Gradients of the scaled loss, from your backward pass:
//!     let mut g = vec![0.5 * scaler.scale(); 4];
//!     let stats = scaler.unscale([GradSlice::from(&mut g)]);
//!     let params = &mut [Tensor::new(0, &mut w, &g)];
//!     optimizer.step_on(scaler.update(stats), schedule.factor(step), params)?;
//! }
//! assert!(w[0] < f16::ONE);
//! let saved = optimizer.state_dict(); // resume with OwnedOptimizer::from_state_dict(saved)
//! assert_eq!(saved.counter.applied_steps(), 10);
//! # Ok::<(), tessera_core::optim::StepError>(())
//! ```
//!
//! Low-precision formats: encode, decode, round in place (chop), and MX
//! blocks, each a SIMD kernel equal bit for bit to its scalar twin:
//!
//! ```
//! use tessera_core::fp::{self, Format, Mx, MxFormat, Round};
//! use tessera_core::rng::RandomStream;
//!
//! let (x, bits) = ([1.5f32, -2.0, 5.0, 0.3], RandomStream::new(7, 0));
//! let mut codes = [0u8; 4]; // one E4M3FN (OCP FP8) code a byte
//! let _ = fp::encode_slice(Format::E4M3FN, &x, &mut codes, Round::STOCHASTIC, &bits, 0);
//! let mut y = [0f32; 4];
//! fp::decode_slice(Format::E4M3FN, &codes, &mut y);
//! assert!(y[..3] == x[..3] && (y[3] == 0.28125 || y[3] == 0.3125)); // unbiased
//! let (mut packed, mut scales) = ([0u8; 2], [0u8; 1]); // MXFP4: two codes a byte, an E8M0 scale
//! Mx::new(MxFormat::E2M1).quantize(&x, &mut packed, &mut scales, &bits, 0)?;
//! MxFormat::E2M1.dequantize(&packed, &scales, &mut y)?;
//! assert_eq!(y, [1.5, -2.0, 4.0, 0.5]); // scale 2^0; 5 ties to even
//! # Ok::<(), tessera_core::fp::BlockError>(())
//! ```
//!
//! Below the owned optimizer every piece is a function over slices:
//! conversions in [`fp`], kernels in [`kernels`], the typed optimizers in
//! [`optim`]; each module's docs open with a "which function do I want"
//! table.
//!
//! # Cargo features
//!
//! - `std` (default): implies `alloc`; nothing in the kernels needs it.
//! - `alloc`: heap-backed conveniences (`optim::OwnedOptimizer`); no kernel
//!   allocates.
//! - `serde`: `Serialize`/`Deserialize` for the optimizers (their settings,
//!   schedules, step counter and the owned optimizer's state dict),
//!   `Precision` and the loss scalers, exact through JSON and TOML
//!   (infinities and NaN included).
//! - `bytemuck`: `fp::Element` and `fp::HalfFloat` imply `bytemuck::Pod`
//!   (off by default: it brings `bytemuck`'s derive macros into the build).
//!
//! With `default-features = false` the crate is `no_std` and pulls no `std`
//! feature of any dependency.
//!
//! # Determinism
//!
//! Every kernel gives bitwise the same result on every backend (scalar,
//! portable, SSE2, AVX2 + F16C, AVX-512): each SIMD kernel has a scalar
//! twin that defines it, and the tests compare them bit for bit. No kernel uses fused
//! multiply-add on any path. Reductions use one fixed order (see
//! [`kernels`]) and combine block partials exactly, so a block-aligned split
//! of a slice over threads, tiles or replicas gives the same bits as one
//! call. Random bits are addressed by position, never drawn in sequence.
//!
//! # Numerics
//!
//! - Rounding: round to nearest even equals the `half` crate for all 2^32
//!   f32 inputs; stochastic rounding is exactly unbiased, with random bits
//!   covering every discarded bit (see [`fp`]).
//! - NaN stays NaN (quieted, sign and top payload kept); infinities stay;
//!   finite overflow follows [`fp::Overflow`] in stochastic rounding and
//!   gives infinity in round to nearest.
//! - Random bits: element `i` of a conversion with `first_index` uses the
//!   bits of element `first_index + i` of its stream (see [`fp`] for which
//!   bits and [`rng`] for the generator).
//!
//! # Fast paths
//!
//! [`arch`]: the CPU is detected on the first kernel call, also without
//! `std`, and the fastest backend it can run is used (SSE2, AVX2 + F16C,
//! AVX-512 with its BF16 conversion where present); when the build's
//! target features already include the best backend, the choice is made
//! at compile time. No `RUSTFLAGS` are needed, and every backend gives the
//! same bits.

#![no_std]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

/// The README's example, run as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;

/// `TryFrom<$state>` and `From<$t> for $state` through a checked
/// constructor and a getter: the forms serde's `try_from`/`into` read and
/// write a type with invariants through.
macro_rules! via_state {
    ($t:ty, $state:ty, $error:ty, $from:ident, $to:ident) => {
        impl TryFrom<$state> for $t {
            type Error = $error;
            fn try_from(state: $state) -> Result<Self, $error> {
                Self::$from(state)
            }
        }

        impl From<$t> for $state {
            fn from(x: $t) -> Self {
                x.$to()
            }
        }
    };
}
pub(crate) use via_state;

pub mod arch;
pub mod collective;
#[cfg(feature = "serde")]
mod exact;
pub mod fp;
pub mod kernels;
pub mod loss;
pub mod optim;
pub mod rng;
pub mod scale;
