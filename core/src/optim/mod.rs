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
//! lamb.step(Step::first(), &Precision::default(), &mut p);
//! assert!(w[0] < 0.5);
//! ```
//!
//! # Which type do I want
//!
//! | to | use |
//! |---|---|
//! | train parameter groups, state and counter kept for you (`alloc`) | `OwnedOptimizer` with `Group`s, one `step` per step; save with `state_dict` |
//! | pick the optimizer at run time over your own state slices | [`Optimizer`] from an [`OptimizerConfig`] |
//! | one known optimizer over slices, fastest | [`Sgd`], [`AdamW`], [`Lamb`], [`Lars`] with a [`Param`] |
//! | split a tensor over tiles or replicas | `partials` per piece, [`Partials::merge`], then `apply` |
//! | warm-up and decay | [`LrSchedule`]'s `factor(step)` as [`Step::with_lr_scale`] |
//! | clip by the global gradient norm | [`GradNorm`], then [`Step::with_grad_scale`] |
//! | count steps, skip on overflow | [`StepCounter`], [`StepCounter::step_for`] |
//! | store f16/bf16 weights and state | [`Precision`] (a [`Round`] each) |
//! | accumulate micro-batch gradients | [`Accumulation`] |
//! | adapt to a framework's optimizer trait (`alloc`) | the `Optimize` trait |
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
//! [`StepCounter::step_for`] turns a scaler's decision into the next step
//! or none, and `OwnedOptimizer::step_on` skips by itself.
//!
//! # One interface
//!
//! - [`Optimizer`] (with [`OptimizerConfig`]) runs any of the four,
//!   chosen at run time; the typed optimizers stay for callers that know
//!   theirs.
//! - [`Step`] carries the step number and the learning-rate factor of a
//!   [`LrSchedule`]; [`GradNorm`] gives timm's `max_grad_norm` clip as its
//!   gradient multiplier.
//! - `OwnedOptimizer` (feature `alloc`) keeps the state and the counter
//!   for parameter groups (`Group`), checking the parameters' ids.
//! - [`reference`](mod@reference) holds the kernels' scalar twins.

mod accumulate;
mod adamw;
mod clip;
mod drive;
mod error;
mod lamb;
mod lars;
#[cfg(feature = "alloc")]
mod optimize;
mod optimizer;
#[cfg(feature = "alloc")]
mod owned;
mod real;
pub mod reference;
mod schedule;
mod sgd;

pub use accumulate::Accumulation;
pub use adamw::{AdamW, AdamWConfig};
pub use clip::{GradNorm, clip_scale};
pub use error::{ConfigError, StepError};
pub use lamb::{Lamb, LambConfig};
pub use lars::{Lars, LarsConfig};
#[cfg(feature = "alloc")]
pub use optimize::Optimize;
pub use optimizer::{Optimizer, OptimizerConfig};
#[cfg(feature = "alloc")]
pub use owned::{Grads, Group, OwnedOptimizer, ParamState, StateDict, Tensor, Weights};
pub use schedule::{Decay, LrSchedule};
pub use sgd::{Sgd, SgdConfig};

use crate::fp::{Element, Round, Rounding};
use crate::kernels::ExactSum;
use crate::rng::RandomStream;

/// One parameter tensor, or a piece of one, as an optimizer sees it.
///
/// ```
/// use tessera_core::optim::{Param, Precision, Sgd, SgdConfig, Step};
/// use tessera_core::fp::f16;
///
/// // f16 weights, f32 gradients, one f32 momentum buffer.
/// let (mut w, g, mut buf) = ([f16::ONE; 4], [0.5f32; 4], [0.0f32; 4]);
/// let mut p = Param::new(3, &mut w, &g, [&mut buf]);
/// Sgd::new(SgdConfig::default())?.step(Step::first(), &Precision::default(), &mut p);
/// assert!(w[0] < f16::ONE);
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
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
    ///
    /// ```
    /// use tessera_core::optim::Param;
    ///
    /// let (mut w, g, mut m, mut v) = ([0.0f32; 8], [1.0f32; 8], [0.0f32; 8], [0.0f32; 8]);
    /// let p = Param::new(7, &mut w, &g, [&mut m, &mut v]);
    /// assert_eq!((p.id, p.offset, p.state.len()), (7, 0, 2));
    /// ```
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
    ///
    /// ```
    /// use tessera_core::optim::Param;
    ///
    /// // Elements 256.. of parameter 7, as a tile that owns them sees them.
    /// let (mut w, g, mut buf) = ([0.0f32; 64], [1.0f32; 64], [0.0f32; 64]);
    /// let piece = Param::new(7, &mut w, &g, [&mut buf]).at_offset(256);
    /// assert_eq!(piece.offset, 256);
    /// ```
    #[must_use]
    pub fn at_offset(self, offset: u64) -> Self {
        Self { offset, ..self }
    }

    /// The same parameter with state tensors `pick` (increasing indices).
    pub(crate) fn pick<const K: usize>(&mut self, pick: [usize; K]) -> Param<'_, W, G, S, K> {
        let mut chosen = self
            .state
            .iter_mut()
            .enumerate()
            .filter(|(k, _)| pick.contains(k))
            .map(|(_, s)| &mut **s);
        let state = core::array::from_fn(|_| chosen.next().expect("picked state tensor"));
        Param {
            weights: &mut *self.weights,
            grads: self.grads,
            state,
            id: self.id,
            offset: self.offset,
        }
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
///
/// ```
/// use tessera_core::optim::{Lamb, LambConfig, Param, Partials, Step};
///
/// let lamb = Lamb::new(LambConfig::default())?;
/// let (mut w, g, mut m, mut v) = ([3.0f32; 4], [4.0f32; 4], [0.0f32; 4], [0.0f32; 4]);
/// let partials: Partials = lamb.partials(Step::first(), &Param::new(0, &mut w, &g, [&mut m, &mut v]));
/// assert_eq!(partials.g_sq.to_f32(), 64.0);
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
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
    ///
    /// ```
    /// use tessera_core::optim::Partials;
    /// use tessera_core::kernels::sum_of_squares_partial;
    ///
    /// let mut a = Partials { g_sq: sum_of_squares_partial(&[3.0]), ..Partials::default() };
    /// let b = Partials { g_sq: sum_of_squares_partial(&[4.0]), ..Partials::default() };
    /// a.merge(&b);
    /// assert_eq!(a.norms().g, 5.0);
    /// ```
    pub fn merge(&mut self, other: &Self) {
        self.w_sq.merge(&other.w_sq);
        self.g_sq.merge(&other.g_sq);
        self.u_sq.merge(&other.u_sq);
    }

    /// The three sums' limbs, in the order `w`, `g`, `u`, for an integer
    /// all-reduce across replicas.
    ///
    /// ```
    /// use tessera_core::optim::Partials;
    /// use tessera_core::kernels::sum_of_squares_partial;
    ///
    /// // Two replicas' partials summed as integers, as an all-reduce would.
    /// let (a, b) = ([1.0f32; 3], [2.0f32; 5]);
    /// let limbs = |x: &[f32]| Partials { w_sq: sum_of_squares_partial(x), ..Partials::default() }.limbs();
    /// let (la, lb) = (limbs(&a), limbs(&b));
    /// let summed = core::array::from_fn(|k| core::array::from_fn(|j| la[k][j] + lb[k][j]));
    /// assert_eq!(Partials::from_limbs(summed).w_sq.to_f32(), 23.0);
    /// ```
    #[must_use]
    pub fn limbs(&self) -> [[i64; ExactSum::LIMBS]; 3] {
        [self.w_sq.limbs(), self.g_sq.limbs(), self.u_sq.limbs()]
    }

    /// Rebuilds partials from (summed) [`Partials::limbs`].
    ///
    /// ```
    /// use tessera_core::optim::Partials;
    ///
    /// let p = Partials::default();
    /// assert_eq!(Partials::from_limbs(p.limbs()), p);
    /// ```
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
    ///
    /// ```
    /// use tessera_core::optim::Partials;
    /// use tessera_core::kernels::sum_of_squares_partial;
    ///
    /// let p = Partials { u_sq: sum_of_squares_partial(&[6.0, 8.0]), ..Partials::default() };
    /// assert_eq!((p.norms().u, p.norms().w), (10.0, 0.0));
    /// ```
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
///
/// ```
/// use tessera_core::optim::{Lamb, LambConfig, Norms};
///
/// let lamb = Lamb::new(LambConfig::default())?;
/// assert_eq!(lamb.trust_ratio(Norms { w: 2.0, g: 1.0, u: 4.0 }), 0.5);
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Norms {
    /// `||w||`.
    pub w: f32,
    /// `||g||`.
    pub g: f32,
    /// `||u||`.
    pub u: f32,
}

/// The input of one step: its number, its learning-rate factor and the
/// gradients' multiplier. Build the first with [`Step::first`] and each
/// next one with [`Step::next`] (or let [`StepCounter`] count), so the
/// number is never 0 and no constructor can fail.
///
/// The learning rate of a step is the group's configured `lr` times
/// [`Step::lr_scale`]: a [`LrSchedule`] gives the factor (PyTorch's
/// `LambdaLR` and PopTorch's schedulers scale each group's base rate the
/// same way), so a schedule never rebuilds an optimizer, and groups with
/// different base rates share one factor. For optax's absolute
/// schedules, configure `lr` 1 and pass the rate as the factor.
///
/// ```
/// use tessera_core::optim::Step;
///
/// let step = Step::first().with_lr_scale(0.5);
/// assert_eq!((step.t(), step.lr_scale()), (1, 0.5));
/// assert_eq!(step.next().t(), 2);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    /// The 1-based count of applied steps (Adam's `t`).
    t: u64,
    lr_scale: f32,
    grad_scale: f32,
}

impl Step {
    /// Step 1 at the configured learning rate, gradients unscaled.
    ///
    /// ```
    /// use tessera_core::optim::Step;
    ///
    /// assert_eq!(Step::first(), Step::after(0));
    /// assert_eq!((Step::first().lr_scale(), Step::first().grad_scale()), (1.0, 1.0));
    /// ```
    #[must_use]
    pub const fn first() -> Self {
        Self::after(0)
    }

    /// The step after `applied` applied steps (so `t = applied + 1`;
    /// skipped steps do not count).
    ///
    /// ```
    /// use tessera_core::optim::Step;
    ///
    /// assert_eq!(Step::after(9).t(), 10);
    /// ```
    #[must_use]
    pub const fn after(applied: u64) -> Self {
        Self {
            t: applied.saturating_add(1),
            lr_scale: 1.0,
            grad_scale: 1.0,
        }
    }

    /// The following step, with the same factors.
    ///
    /// ```
    /// use tessera_core::optim::Step;
    ///
    /// let s = Step::first().with_lr_scale(0.1).next();
    /// assert_eq!((s.t(), s.lr_scale()), (2, 0.1));
    /// ```
    #[must_use]
    pub const fn next(self) -> Self {
        Self {
            t: self.t.saturating_add(1),
            ..self
        }
    }

    /// The 1-based step number (Adam's `t`).
    ///
    /// ```
    /// use tessera_core::optim::Step;
    ///
    /// assert_eq!(Step::after(41).t(), 42);
    /// ```
    #[must_use]
    pub const fn t(&self) -> u64 {
        self.t
    }

    /// The learning-rate factor (1 unless set).
    ///
    /// ```
    /// use tessera_core::optim::{Decay, LrSchedule, Step};
    ///
    /// let schedule = LrSchedule { warmup: 4, decay: Decay::Constant, total: 100 };
    /// assert_eq!(Step::first().with_lr_scale(schedule.factor(0)).lr_scale(), 0.25);
    /// ```
    #[must_use]
    pub const fn lr_scale(&self) -> f32 {
        self.lr_scale
    }

    /// Every gradient is multiplied by this on load: 1, or the reciprocal
    /// of a global clipping factor ([`GradNorm::clip_scale`]).
    ///
    /// ```
    /// use tessera_core::optim::{GradNorm, Step};
    ///
    /// let clip = GradNorm::of([&[3.0f32, 4.0][..]]).clip_scale(1.0);
    /// assert_eq!(Step::first().with_grad_scale(clip).grad_scale(), 0.2);
    /// ```
    #[must_use]
    pub const fn grad_scale(&self) -> f32 {
        self.grad_scale
    }

    /// The same step with the learning rate multiplied by `lr_scale`.
    ///
    /// ```
    /// use tessera_core::optim::Step;
    ///
    /// assert_eq!(Step::first().with_lr_scale(0.5).lr(0.1), 0.05);
    /// ```
    #[must_use]
    pub const fn with_lr_scale(self, lr_scale: f32) -> Self {
        Self { lr_scale, ..self }
    }

    /// The same step with gradients multiplied by `grad_scale` on load.
    ///
    /// ```
    /// use tessera_core::optim::Step;
    ///
    /// // timm's LAMB divides by max(||g|| / max_grad_norm, 1): here ||g|| = 4.
    /// let step = Step::first().with_grad_scale(1.0 / 4.0);
    /// assert_eq!(step.grad_scale(), 0.25);
    /// ```
    #[must_use]
    pub const fn with_grad_scale(self, grad_scale: f32) -> Self {
        Self { grad_scale, ..self }
    }

    /// The learning rate of this step for a group configured with `lr`:
    /// `lr * lr_scale` in f32 (exactly `lr` when the factor is 1).
    ///
    /// ```
    /// use tessera_core::optim::Step;
    ///
    /// assert_eq!(Step::first().lr(1e-3), 1e-3);
    /// assert_eq!(Step::first().with_lr_scale(0.5).lr(1e-3), 5e-4);
    /// ```
    #[must_use]
    pub fn lr(&self, lr: f32) -> f32 {
        lr * self.lr_scale
    }
}

/// The optimizer's step counter: how many steps were applied. It lives
/// with the optimizer state (and is saved with it), so callers never
/// number steps by hand.
///
/// ```
/// use tessera_core::optim::StepCounter;
///
/// let mut counter = StepCounter::default();
/// let step = counter.next_step();
/// assert_eq!(step.t(), 1);
/// counter.applied(step); // after the optimizer ran; skip it on overflow
/// assert_eq!(counter.next_step().t(), 2);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct StepCounter {
    applied: u64,
}

impl StepCounter {
    /// A counter that has seen `applied` steps (to resume a run).
    ///
    /// ```
    /// use tessera_core::optim::StepCounter;
    ///
    /// assert_eq!(StepCounter::resumed(100).next_step().t(), 101);
    /// ```
    #[must_use]
    pub const fn resumed(applied: u64) -> Self {
        Self { applied }
    }

    /// How many steps were applied.
    ///
    /// ```
    /// use tessera_core::optim::StepCounter;
    ///
    /// let mut c = StepCounter::default();
    /// c.applied(c.next_step());
    /// assert_eq!(c.applied_steps(), 1);
    /// ```
    #[must_use]
    pub const fn applied_steps(&self) -> u64 {
        self.applied
    }

    /// The input of the next step (factors 1).
    ///
    /// ```
    /// use tessera_core::optim::{Step, StepCounter};
    ///
    /// assert_eq!(StepCounter::default().next_step(), Step::first());
    /// ```
    #[must_use]
    pub const fn next_step(&self) -> Step {
        Step::after(self.applied)
    }

    /// Records that `step` was applied.
    ///
    /// ```
    /// use tessera_core::optim::StepCounter;
    ///
    /// let mut c = StepCounter::default();
    /// let step = c.next_step();
    /// c.applied(step);
    /// c.applied(step); // idempotent: the counter records the step's number
    /// assert_eq!(c.applied_steps(), 1);
    /// ```
    pub const fn applied(&mut self, step: Step) {
        self.applied = step.t;
    }

    /// A loss scaler's decision as the optimizer's next step: `None` on
    /// [`StepDecision::Skip`](crate::scale::StepDecision::Skip), else the
    /// next step, counted as applied (so run it). Skipping cannot be
    /// forgotten, and skipped steps do not count.
    ///
    /// ```
    /// use tessera_core::optim::StepCounter;
    /// use tessera_core::scale::StepDecision;
    ///
    /// let mut c = StepCounter::default();
    /// assert_eq!(c.step_for(StepDecision::Skip), None);
    /// assert_eq!(c.step_for(StepDecision::Apply { inv_scale: 1.0 }).map(|s| s.t()), Some(1));
    /// assert_eq!(c.applied_steps(), 1);
    /// ```
    #[must_use = "run the optimizer with the step, or skip it on None"]
    pub const fn step_for(&mut self, decision: crate::scale::StepDecision) -> Option<Step> {
        if decision.is_skip() {
            return None;
        }
        let step = self.next_step();
        self.applied(step);
        Some(step)
    }
}

/// How an optimizer stores 16-bit weights and state (any [`Round`]:
/// stochastic rounding by default, so updates smaller than half an ulp
/// survive on average; to nearest they are lost), and the seed of its
/// stochastic rounding.
///
/// ```
/// use tessera_core::fp::{Overflow, Round};
/// use tessera_core::optim::Precision;
///
/// // Saturating stochastic rounding, the same seed on every replica.
/// let p = Precision {
///     weights: Round::STOCHASTIC.with_overflow(Overflow::Saturate),
///     state: Round::NEAREST_EVEN,
///     seed: 1234,
/// };
/// assert_ne!(p, Precision::default());
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Precision {
    /// Rounding of 16-bit weights (ignored for f32).
    pub weights: Round,
    /// Rounding of 16-bit optimizer state (ignored for f32).
    pub state: Round,
    /// The seed of the stochastic-rounding streams; the same on every
    /// replica so replicated weights stay identical.
    pub seed: u64,
}

impl Default for Precision {
    /// Stochastic rounding with infinities on overflow, seed 0.
    fn default() -> Self {
        Self {
            weights: Round::STOCHASTIC,
            state: Round::STOCHASTIC,
            seed: 0,
        }
    }
}

impl Precision {
    /// The stream whose position `i` rounds weight element `i` of parameter
    /// `id` at step `t`; state tensor `k` uses its `substream(1 + k)`.
    ///
    /// ```
    /// use tessera_core::optim::Precision;
    /// use tessera_core::rng::RandomStream;
    ///
    /// let p = Precision { seed: 5, ..Precision::default() };
    /// assert_eq!(p.weight_stream(2, 10), RandomStream::new(5, 10).substream(2));
    /// ```
    #[must_use]
    pub const fn weight_stream(&self, id: u64, t: u64) -> RandomStream {
        RandomStream::new(self.seed, t).substream(id)
    }

    fn roundings<const N: usize>(&self, id: u64, t: u64, offset: u64) -> (Rounding, [Rounding; N]) {
        let stream = self.weight_stream(id, t);
        let rounding = |how: Round, stream: RandomStream| Rounding::new(how, stream, offset);
        (
            rounding(self.weights, stream),
            core::array::from_fn(|k| rounding(self.state, stream.substream(1 + k as u64))),
        )
    }
}

/// `1 - beta^t` in f64, rounded to f32 (the bias correction's divisor).
fn bias_correction(beta: f32, t: u64) -> f64 {
    let t = i32::try_from(t).unwrap_or(i32::MAX);
    1.0 - libm::pow(f64::from(beta), f64::from(t))
}
