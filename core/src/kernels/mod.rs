//! Vector kernels over slices: axpy, scale, add, fused unscale-and-check,
//! f16/bf16 accumulation, and dot, sum of squares and max-abs reductions
//! with a fixed order and exactly combined partials; matrix products
//! ([`gemm`]) in a fixed order.
//!
//! Every kernel is one generic function over the storage format
//! ([`Element`]: `f32`, [`f16`] or [`bf16`]), as in `half`'s slice traits
//! and `gemm`'s element types: it widens to f32 (exactly), computes in f32
//! and, for the element-wise kernels, stores with a [`Rounding`] (see
//! [Rounding](#rounding)). Each has a scalar twin of the same name and
//! signature in [`scalar`], which is its definition.
//!
//! ```
//! use tessera_core::kernels::{self, ExactSum, BLOCK};
//!
//! let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25).collect();
//! let whole = kernels::sum_of_squares(&x);
//!
//! // Split at a block boundary (over threads, tiles or replicas) and merge
//! // the partials in any order: the same bits.
//! let (a, b) = x.split_at(2 * BLOCK);
//! let mut sum: ExactSum = kernels::sum_of_squares_partial(b);
//! sum.merge(&kernels::sum_of_squares_partial(a));
//! assert_eq!(sum.to_f32().to_bits(), whole.to_bits());
//! ```
//!
//! # Which function do I want
//!
//! | to | over `&[T]`, `T` = f32, f16 or bf16 | a piece of a split slice |
//! |---|---|---|
//! | `y += a x` | [`axpy`] | (element-wise: any piece) |
//! | `x *= a` | [`scale`] | |
//! | `y += x` | [`add`] | |
//! | unscale gradients, find inf/NaN | [`unscale_and_check`] | |
//! | widen and add into an f32 accumulator | [`accumulate`] | |
//! | `x . y` | [`dot`] | [`dot_partial`] |
//! | `x . x` | [`sum_of_squares`] | [`sum_of_squares_partial`] |
//! | `max |x|` | [`max_abs`] | [`max_abs_partial`] |
//! | `C += A B` (f32 only) | [`gemm`] (scratch: [`gemm_scratch_len`]) | |
//! | `sum x`, exact in any order | [`exact_sum`] | [`exact_sum_partial`] |
//! | `x . y`, exact in any order | [`exact_dot`] | [`exact_dot_partial`] |
//! | exact states `+= A B` (a weight gradient over samples) | [`exact_gemm`] | [`merge_exact`], [`round_exact`] |
//! | exact states `+= A^T B`, products rounded to f32 | [`exact_sum_products`] | [`ExactSum::merge`] |
//!
//! The `*_partial` forms return an exact sum ([`ExactSum`], [`ExactDot`])
//! or a [`MaxAbs`] to merge across pieces, threads and replicas; [`scalar`] holds
//! every kernel's scalar twin under the same name.
//!
//! # Rounding
//!
//! The element-wise kernels that write `T` ([`axpy`], [`scale`], [`add`],
//! [`unscale_and_check`]) take a [`Rounding`]: how the f32 result is
//! rounded to f16 or bf16, element `i` of the written slice at position
//! `i`. For f32 it has no effect (the f32 arithmetic already rounded to
//! nearest, ties to even) and `Rounding::Nearest` is the value to pass, as
//! [`Element::store`] does.
//!
//! # Determinism
//!
//! The SIMD kernels equal their [`scalar`] twins bit for bit on every
//! backend ([`crate::arch`]); the tests compare them. No kernel uses a
//! fused multiply-add: a product is rounded to f32, then added.
//!
//! Reductions (`dot` and `sum_of_squares`, over every format) use this
//! order, a function of the element index alone:
//!
//! 1. The slice is cut into blocks of [`BLOCK`] (256) elements from its
//!    start; the last block may be shorter.
//! 2. Within a block, [`LANES`] (8) f32 lane sums start at `+0.0`; lane `j`
//!    adds the terms of elements `j, j + 8, j + 16, ...` of the block in
//!    increasing order (`lane = lane + term`, the term being `x * y` or
//!    `x * x` rounded to f32). A short last block has lanes with fewer
//!    terms; the SIMD code pads them with `+0.0` terms, which changes
//!    nothing because a lane sum is never `-0.0`.
//! 3. The block partial is `((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 +
//!    l7))` in f32.
//! 4. Block partials are added *exactly* into an [`ExactSum`], which is
//!    rounded once to f32 (to nearest, ties to even) at the end.
//!
//! Because step 4 is exact integer arithmetic, any split of a slice at
//! multiples of [`BLOCK`] (counted from the slice's start) into pieces whose
//! `*_partial` results are merged in any order gives bitwise the result of
//! one call. The f32 rounding of steps 2 and 3 is inside a block only, so a
//! block partial can overflow to infinity (or give NaN from `inf - inf`)
//! even where the exact total is finite; it does so the same way for every
//! split.
//!
//! The exact reductions ([`exact_sum`], [`exact_dot`], [`exact_gemm`])
//! need no order: every term (a value, or the product of two, exact in
//! f64) is added exactly to an integer state, rounded once at the end, so
//! the result depends on the multiset of terms alone: any split, aligned
//! or not, any order of merging, any backend.
//!
//! `max_abs` is order-free: it is the maximum of the bit patterns
//! `bits & 0x7fff_ffff`, which orders magnitudes exactly and puts every NaN
//! above infinity, so any split, block-aligned or not, gives the same
//! result ([`MaxAbs`]).
//!
//! Element-wise kernels have no order to fix; those that round
//! stochastically use random bits addressed by position (element `i` of the
//! written slice uses position `first_index + i`, see [`Rounding`]), so a
//! slice processed in pieces, each with its own `first_index`, gives the same
//! bits as one call.
//!
//! # Numerics
//!
//! - NaN: Rust leaves the sign and payload of an arithmetic NaN unspecified
//!   (and x86 and Arm pick differently when two NaNs meet), so every NaN a
//!   kernel writes or returns is the canonical quiet NaN `f32::NAN`
//!   (`0x7fc0_0000`); in f16/bf16 storage it is that value rounded (f16
//!   `0x7e00`, bf16 `0x7fc0`). Reductions propagate NaN: a NaN term, or
//!   `+inf` and `-inf` terms, give NaN.
//! - Signed zero: element-wise kernels follow IEEE (`-0.0 + -0.0 = -0.0`);
//!   a reduction whose exact total is zero returns `+0.0`, as does an empty
//!   slice.
//! - Overflow: element-wise results overflow to infinity as IEEE f32
//!   arithmetic does; f16/bf16 stores follow the [`Rounding`] (round to
//!   nearest gives infinity, stochastic rounding its [`Overflow`] policy).
//! - Loss scaling: [`unscale_and_check`] reports whether any *unscaled*
//!   value is non-finite (see its docs for how that relates to PyTorch).
//!
//! [`Element`]: crate::fp::Element
//! [`Element::store`]: crate::fp::Element::store
//! [`f16`]: struct@crate::fp::f16
//! [`bf16`]: struct@crate::fp::bf16
//! [`Rounding`]: crate::fp::Rounding
//! [`Overflow`]: crate::fp::Overflow

mod elementwise;
mod exact;
mod exact_lanes;
mod exact_reduce;
mod fixed;
mod gemm;
mod reduce;
pub mod scalar;

pub use elementwise::{accumulate, add, axpy, scale, unscale_and_check};
pub use exact::{ExactDot, ExactSum};
pub use exact_reduce::{
    exact_dot, exact_dot_partial, exact_gemm, exact_sum, exact_sum_partial, exact_sum_products,
    merge_exact, round_exact,
};
pub use gemm::{GemmShape, gemm, gemm_scratch_len};
pub use reduce::{
    MaxAbs, dot, dot_partial, max_abs, max_abs_partial, sum_of_squares, sum_of_squares_partial,
};

/// Elements per reduction block. Split slices at multiples of this (counted
/// from the start of the whole slice) for split-invariant reductions.
pub const BLOCK: usize = 256;

/// f32 lanes per block (the SIMD width the order is defined with).
pub const LANES: usize = 8;

const _: () = assert!(BLOCK.is_multiple_of(LANES));
