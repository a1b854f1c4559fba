//! Optimizers for large-batch, mixed-precision training: [`Sgd`],
//! [`AdamW`], [`Lamb`] and [`Lars`], as fused kernels over slices.
//!
//! # The shape of a step
//!
//! A parameter is a [`Param`]: its weights, its gradients and the
//! optimizer's state tensors (`N` of them: none or one for SGD and LARS,
//! two for AdamW and LAMB), each stored as f32, f16 or bf16 (any
//! [`Element`]), plus an id (which addresses its random bits) and the
//! offset of the slices within the whole tensor. Every formula is computed
//! in f32; 16-bit values are rounded on the store as the [`Precision`] says.
//!
//! Optimizers whose update depends on norms of the whole tensor (LAMB's and
//! LARS's trust ratios) run in two phases, so that tiles and replicas can
//! each own a piece:
//!
//! 1. `partials` over any piece that starts at a multiple of
//!    [`BLOCK`](crate::kernels::BLOCK) returns [`Partials`]: exact sums of
//!    squares of the weights, the gradients and the update. Combine the
//!    pieces' partials with [`Partials::merge`] (across tiles, or across
//!    replicas by all-reducing [`Partials::limbs`]) in any order.
//! 2. `apply` with the combined partials updates any piece (no alignment
//!    needed).
//!
//! Because the partial sums are exact (see [`crate::kernels`]), any
//! block-aligned partition gives bitwise the result of one `step` call over
//! the whole tensor. SGD and AdamW need no statistics; their `apply` takes
//! none.
//!
//! ```
//! use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
//!
//! let lamb = Lamb::new(LambConfig::default()).unwrap();
//! let mut w = vec![0.5f32; 1000];
//! let g = vec![0.1f32; 1000];
//! let (mut m, mut v) = (vec![0.0f32; 1000], vec![0.0f32; 1000]);
//! let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
//! lamb.step(Step::new(1), &Precision::default(), &mut p);
//! assert!(w[0] < 0.5);
//! ```
//!
//! # Precision modes
//!
//! - f32 weights: `Param<f32, G, S, N>`.
//! - f16/bf16 weights without a master copy: `Param<f16, ...>`; the update is
//!   computed in f32 and stored with [`Precision::weights`], stochastic
//!   rounding by default.
//! - f16 weights with an f32 master copy: run the step on the master
//!   (`Param<f32, ...>`) and round the model copy to nearest with
//!   [`fp::f32_to_half_slice`](crate::fp::f32_to_half_slice).
//! - Optimizer state in f32 or 16 bits: the `S` type; 16-bit state is
//!   stored with [`Precision::state`].
//! - Gradients in any format: the `G` type. Multiply them on load by
//!   [`Step::grad_scale`] (for a global gradient-norm clip, see
//!   [`clip_scale`]).
//!
//! # Random bits
//!
//! Stochastic rounding of element `i` of parameter `id` at step `t` uses
//! position `offset + i` of `RandomStream::new(seed, t).substream(id)` for
//! the weights and of its `substream(1 + k)` for state tensor `k`. So
//! replicas that apply the same update get bitwise identical weights, and a
//! piece rounds exactly as it would inside the whole tensor.
//!
//! # Skipped steps
//!
//! When loss scaling finds an overflow the caller does not call the
//! optimizer at all; nothing here is touched, and `t` counts applied steps.

mod accumulate;
mod adamw;
mod drive;
mod error;
mod lamb;
mod lars;
mod real;
mod sgd;

pub use accumulate::Accumulation;
pub use adamw::{AdamW, AdamWConfig};
pub use error::ConfigError;
pub use lamb::{Lamb, LambConfig};
pub use lars::{Lars, LarsConfig};
pub use sgd::{Sgd, SgdConfig};

use crate::fp::{Element, Overflow, Rounding, Stochastic};
use crate::kernels::ExactSum;
use crate::rng::RandomStream;

/// One parameter tensor, or a piece of one, as an optimizer sees it.
#[derive(Debug)]
pub struct Param<'a, W, G, S, const N: usize> {
    /// The weights, updated in place.
    pub weights: &'a mut [W],
    /// The gradients, read only.
    pub grads: &'a [G],
    /// The optimizer's state tensors, updated in place.
    pub state: [&'a mut [S]; N],
    /// The parameter's id: it addresses the random bits of its stores.
    pub id: u64,
    /// Where element 0 of these slices sits in the whole tensor.
    pub offset: u64,
}

impl<'a, W: Element, G: Element, S: Element, const N: usize> Param<'a, W, G, S, N> {
    /// A whole tensor (offset 0).
    #[must_use]
    pub fn new(id: u64, weights: &'a mut [W], grads: &'a [G], state: [&'a mut [S]; N]) -> Self {
        Self {
            weights,
            grads,
            state,
            id,
            offset: 0,
        }
    }

    /// The same parameter seen as the piece starting at `offset`.
    #[must_use]
    pub fn at_offset(self, offset: u64) -> Self {
        Self { offset, ..self }
    }

    /// # Panics
    /// If the slices differ in length.
    fn check_lengths(&self) {
        let n = self.weights.len();
        assert_eq!(
            self.grads.len(),
            n,
            "param {}: grads and weights differ in length",
            self.id
        );
        for (k, s) in self.state.iter().enumerate() {
            assert_eq!(
                s.len(),
                n,
                "param {}: state {k} and weights differ in length",
                self.id
            );
        }
    }
}

/// What phase 1 returns: exact sums of squares of the weights `w`, the
/// gradients `g` and the update `u` (each as the optimizer defines it; a
/// sum an optimizer does not need is zero).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Partials {
    /// Sum of squares of the weights.
    pub w_sq: ExactSum,
    /// Sum of squares of the gradients (after [`Step::grad_scale`]).
    pub g_sq: ExactSum,
    /// Sum of squares of the update.
    pub u_sq: ExactSum,
}

impl Partials {
    /// Adds another piece's partials (exact, so order does not matter).
    pub fn merge(&mut self, other: &Self) {
        self.w_sq.merge(&other.w_sq);
        self.g_sq.merge(&other.g_sq);
        self.u_sq.merge(&other.u_sq);
    }

    /// The three sums' limbs, in the order `w`, `g`, `u`, for an integer
    /// all-reduce across replicas.
    #[must_use]
    pub fn limbs(&self) -> [[i64; ExactSum::LIMBS]; 3] {
        [self.w_sq.limbs(), self.g_sq.limbs(), self.u_sq.limbs()]
    }

    /// Rebuilds partials from (summed) [`Partials::limbs`].
    #[must_use]
    pub fn from_limbs(limbs: [[i64; ExactSum::LIMBS]; 3]) -> Self {
        let [w, g, u] = limbs.map(ExactSum::from_limbs);
        Self {
            w_sq: w,
            g_sq: g,
            u_sq: u,
        }
    }

    /// The Euclidean norms: the square root of each sum rounded to f32.
    #[must_use]
    pub fn norms(&self) -> Norms {
        Norms {
            w: libm::sqrtf(self.w_sq.to_f32()),
            g: libm::sqrtf(self.g_sq.to_f32()),
            u: libm::sqrtf(self.u_sq.to_f32()),
        }
    }
}

/// Norms of a whole tensor, from [`Partials::norms`].
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Norms {
    /// `||w||`.
    pub w: f32,
    /// `||g||`.
    pub g: f32,
    /// `||u||`.
    pub u: f32,
}

/// The step being applied.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// The 1-based count of applied steps (Adam's `t`; skipped steps do not
    /// count).
    pub t: u64,
    /// Every gradient is multiplied by this on load: 1, or the reciprocal
    /// of a global clipping factor ([`clip_scale`]).
    pub grad_scale: f32,
}

impl Step {
    /// Step `t` (1-based) with unscaled gradients.
    ///
    /// # Panics
    /// If `t` is 0.
    #[must_use]
    pub const fn new(t: u64) -> Self {
        assert!(t > 0, "steps count from 1");
        Self { t, grad_scale: 1.0 }
    }

    /// The same step with gradients multiplied by `grad_scale` on load.
    #[must_use]
    pub const fn with_grad_scale(self, grad_scale: f32) -> Self {
        Self { grad_scale, ..self }
    }
}

/// How a 16-bit tensor is rounded when an optimizer stores it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StoreRounding {
    /// Round to nearest even: updates smaller than half an ulp are lost.
    Nearest,
    /// Stochastic rounding: unbiased, so small updates survive on average.
    Stochastic(Overflow),
}

/// How an optimizer stores 16-bit weights and state, and the seed of its
/// stochastic rounding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Precision {
    /// Rounding of 16-bit weights (ignored for f32).
    pub weights: StoreRounding,
    /// Rounding of 16-bit optimizer state (ignored for f32).
    pub state: StoreRounding,
    /// The seed of the stochastic-rounding streams; the same on every
    /// replica so replicated weights stay identical.
    pub seed: u64,
}

impl Default for Precision {
    /// Stochastic rounding with infinities on overflow, seed 0.
    fn default() -> Self {
        Self {
            weights: StoreRounding::Stochastic(Overflow::Infinity),
            state: StoreRounding::Stochastic(Overflow::Infinity),
            seed: 0,
        }
    }
}

impl Precision {
    /// The stream whose position `i` rounds weight element `i` of parameter
    /// `id` at step `t`; state tensor `k` uses its `substream(1 + k)`.
    #[must_use]
    pub const fn weight_stream(&self, id: u64, t: u64) -> RandomStream {
        RandomStream::new(self.seed, t).substream(id)
    }

    fn roundings<const N: usize>(&self, id: u64, t: u64, offset: u64) -> (Rounding, [Rounding; N]) {
        let stream = self.weight_stream(id, t);
        let rounding = |how: StoreRounding, stream: RandomStream| match how {
            StoreRounding::Nearest => Rounding::Nearest,
            StoreRounding::Stochastic(overflow) => Rounding::Stochastic {
                sr: Stochastic::new(stream, overflow),
                first_index: offset,
            },
        };
        (
            rounding(self.weights, stream),
            core::array::from_fn(|k| rounding(self.state, stream.substream(1 + k as u64))),
        )
    }
}

/// The gradient multiplier of a global gradient-norm clip (as timm's LAMB
/// and `clip_grad_norm_`): `1 / max(||g|| / max_norm, 1)`, where `||g||` is
/// the square root of `g_sq`, the exact sum of squares of every gradient
/// (merge [`crate::kernels::sum_of_squares_partial`] over all parameters
/// and replicas). Pass it as [`Step::grad_scale`].
#[must_use]
pub fn clip_scale(g_sq: &ExactSum, max_norm: f32) -> f32 {
    let norm = libm::sqrtf(g_sq.to_f32());
    let factor = norm / max_norm;
    if factor > 1.0 { 1.0 / factor } else { 1.0 }
}

/// Whether Graphcore's and timm's recipes exclude a parameter from weight
/// decay and trust-ratio adaptation, judged by name: biases and
/// normalisation parameters (names ending in `bias`, `beta` or `gamma`, or
/// containing `norm`, `bn` or `ln` as a path component). Give such
/// parameters a config made with the optimizer's `excluded()`.
#[must_use]
pub fn is_bias_or_norm(name: &str) -> bool {
    let last = name.rsplit(['.', '/']).next().unwrap_or(name);
    let ends = ["bias", "beta", "gamma"].iter().any(|s| last.ends_with(s));
    let component = name.split(['.', '/', '_']).any(|c| {
        c.contains("norm")
            || c == "bn"
            || c == "ln"
            || c.starts_with("bn") && c[2..].bytes().all(|b| b.is_ascii_digit())
    });
    ends || component
}

/// `1 - beta^t` in f64, rounded to f32 (the bias correction's divisor).
fn bias_correction(beta: f32, t: u64) -> f64 {
    let t = i32::try_from(t).unwrap_or(i32::MAX);
    1.0 - libm::pow(f64::from(beta), f64::from(t))
}
