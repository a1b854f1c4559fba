//! Loss scaling: static, dynamic (`torch.amp.GradScaler`) and automatic
//! (Graphcore PopART's histogram-driven ALS), and the unscale-and-check
//! step over many gradient slices of mixed types.
//!
//! # A training step
//!
//! 1. Multiply the loss by [`scale`](LossScaler::scale) and run the backward
//!    pass in f16/bf16/f32.
//! 2. [`unscale_grads`] (or [`LossScaler::unscale`]) multiplies every
//!    gradient by `inv_scale = f32(1 / f64(scale))` with the fused kernel
//!    and returns [`GradStats`]: `found_inf`, and for automatic scaling the
//!    histogram counts.
//! 3. Combine the stats of every replica ([`GradStats::merge`]: logical or
//!    and integer sums; [`GradStats::to_words`] for a sum all-reduce), so
//!    all replicas decide alike.
//! 4. `update` the scaler once with the combined stats. It returns a
//!    [`StepDecision`]: on [`StepDecision::Skip`] the optimizer must not
//!    run, leaving weights and optimizer state (moments, step counts) as
//!    they were; on [`StepDecision::Apply`] it runs.
//!
//! ```
//! use tessera_core::fp::f16;
//! use tessera_core::scale::{DynamicLossScaler, GradSlice, GradStats, LossScaler, StepDecision};
//!
//! let mut scaler = DynamicLossScaler::default(); // GradScaler: 2^16, x2 / 2000 steps, x0.5
//! // Gradients of `loss * scaler.scale()`, on two replicas:
//! let (mut w0, mut b0) = ([65536.0f32, -32768.0], [f16::from_f32(16384.0)]);
//! let (mut w1, mut b1) = ([131072.0f32, 0.0], [f16::INFINITY]);
//! let s0 = scaler.unscale([GradSlice::from(&mut w0), GradSlice::from(&mut b0)]);
//! let s1 = scaler.unscale([GradSlice::from(&mut w1), GradSlice::from(&mut b1)]);
//! assert_eq!(w0, [1.0, -0.5]);
//! assert!(!s0.found_inf && s1.found_inf);
//!
//! // All-reduce, then one update on every replica: all skip, all back off.
//! let stats: GradStats = s0.merge(s1);
//! assert_eq!(scaler.update(stats), StepDecision::Skip);
//! assert_eq!(scaler.scale(), 32768.0);
//! ```
//!
//! # The scalers
//!
//! | type | scale moves | source |
//! |---|---|---|
//! | [`StaticLossScaler`] | never | Graphcore recipes (ResNet-50: 128, BERT: 4096) |
//! | [`DynamicLossScaler`] | x`growth_factor` after `growth_interval` good steps in a row, x`backoff_factor` on an overflow | `torch.amp.GradScaler`, its CPU kernel `_amp_update_scale_cpu_`; apex `LossScaler` bounds; Megatron/NeMo hysteresis |
//! | [`AutomaticLossScaler`] | x0.5 or x2 every `update_period` steps, from the fraction of gradient elements above a bin edge | PopART `AutomaticLossScale`, `LossScaleUpdateOpx` |
//!
//! Each type's docs give its state machine as pseudocode; the formulas:
//!
//! - `inv_scale = f32(1 / f64(scale))` (GradScaler's
//!   `scale.double().reciprocal().float()`).
//! - GradScaler's products are `f32(f64(scale) * factor)`: PyTorch's CPU
//!   kernel multiplies the `float` scale by the `double` factor and stores
//!   the product into the `float` tensor.
//! - ALS scales by exact powers of two; its test is `upper / (upper +
//!   lower) > threshold`, decided exactly on integer counts.
//!
//! All scales are f32, and every scaler keeps its scale finite and positive
//! with a finite reciprocal: growth to infinity is refused (GradScaler's own
//! rule), and so is a backoff to a scale whose reciprocal overflows (where
//! GradScaler would end in a state it cannot leave; see
//! [`DynamicLossScaler`]). Hyperparameters are validated once by fallible
//! constructors returning [`ScalerConfigError`]; `update` never fails.
//!
//! # Numerics of the unscale step
//!
//! - `found_inf` is the result of [`kernels::unscale_and_check`]: whether
//!   any *unscaled* (stored) value is infinite or NaN. For scales of at least 1 this is exactly
//!   PyTorch's test of the inputs; for scales below 1 it also catches
//!   finite gradients that the unscaling overflows.
//! - f16/bf16 gradients are widened, multiplied in f32 and rounded once to
//!   their storage with each slice's [`Rounding`](crate::fp::Rounding)
//!   (round to nearest, or stochastic with per-position random bits).
//! - Histogram counts are of the values *before* unscaling (PopART's
//!   histograms see the scaled gradients), with `|x| >= edge`, infinities
//!   and NaN in the upper bin; exact for every storage type.
//! - Everything returned for combining is exact (a flag and integers), so
//!   the merged result is independent of how tensors are split across
//!   threads, tiles, micro-batches and replicas.
//!
//! [`kernels::unscale_and_check`]: crate::kernels::unscale_and_check

mod automatic;
mod constant;
mod dynamic;
mod error;
mod unscale;

pub use automatic::{AutomaticConfig, AutomaticLossScaler, AutomaticState, HistogramWindow};
pub use constant::StaticLossScaler;
pub use dynamic::{DynamicConfig, DynamicLossScaler, DynamicState, HysteresisReset};
pub use error::ScalerConfigError;
pub use unscale::{BinCounts, BinEdge, GradSlice, GradStats, unscale_grads};

/// What the optimizer must do with a step, as decided by a scaler's
/// `update` from the replicas' combined statistics.
///
/// ```
/// use tessera_core::scale::{DynamicLossScaler, StepDecision};
///
/// let mut scaler = DynamicLossScaler::default();
/// assert_eq!(scaler.update(false), StepDecision::Apply { inv_scale: 1.0 / 65536.0 });
/// assert_eq!(scaler.update(true), StepDecision::Skip);
/// ```
#[must_use = "a skipped step must not run the optimizer"]
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum StepDecision {
    /// Run the optimizer step.
    Apply {
        /// `f32(1 / f64(scale))` of the scale this step's gradients were
        /// computed with. Gradients that went through [`unscale_grads`]
        /// already carry it: use them as they are. An optimizer that takes
        /// still-scaled gradients (a static scale removed at the update, or
        /// unscaling fused into the update) multiplies them by it.
        inv_scale: f32,
    },
    /// Skip the optimizer step: the gradients held an infinity or NaN.
    /// Weights and optimizer state (moments, step count) must be left
    /// bitwise unchanged.
    Skip,
}

impl StepDecision {
    /// Whether the step is to be skipped.
    ///
    /// ```
    /// use tessera_core::scale::StepDecision;
    ///
    /// assert!(StepDecision::Skip.is_skip());
    /// ```
    #[must_use]
    pub const fn is_skip(self) -> bool {
        matches!(self, Self::Skip)
    }

    /// The step's `inv_scale` if it is to be applied.
    ///
    /// ```
    /// use tessera_core::scale::StepDecision;
    ///
    /// assert_eq!(StepDecision::Apply { inv_scale: 0.5 }.inv_scale(), Some(0.5));
    /// assert_eq!(StepDecision::Skip.inv_scale(), None);
    /// ```
    #[must_use]
    pub const fn inv_scale(self) -> Option<f32> {
        match self {
            Self::Apply { inv_scale } => Some(inv_scale),
            Self::Skip => None,
        }
    }
}

/// What a trainer needs from any of the three scalers: one name per
/// action (`scale`, `inv_scale`, `histogram_edge`, `unscale`, `update`),
/// each also an inherent method of every scaler, so none needs this trait
/// imported.
///
/// With [`StepCounter::step_for`](crate::optim::StepCounter::step_for),
/// the decision becomes the optimizer's next step (or none):
///
/// ```
/// use half::f16;
/// use tessera_core::optim::{Param, Precision, Sgd, SgdConfig, StepCounter};
/// use tessera_core::scale::{DynamicLossScaler, GradSlice};
///
/// let sgd = Sgd::new(SgdConfig::default())?;
/// let mut scaler = DynamicLossScaler::default();
/// let mut counter = StepCounter::default();
/// let (mut w, mut buf) = (vec![1.0f32; 2], vec![0.0f32; 2]);
/// // Gradients of the loss times 2^16: 0.5 each, then an overflow.
/// for grads in [vec![f16::from_f32(32768.0); 2], vec![f16::INFINITY; 2]] {
///     let mut g = grads.clone();
///     let stats = scaler.unscale([GradSlice::from(&mut g)]);
///     let g: Vec<f32> = g.iter().map(|x| x.to_f32()).collect();
///     if let Some(step) = counter.step_for(scaler.update(stats)) {
///         sgd.step(step, &Precision::default(), &mut Param::new(0, &mut w, &g, [&mut buf]));
///     }
/// }
/// assert_eq!(counter.applied_steps(), 1); // the overflow skipped its step
/// assert_eq!(w[0], 1.0 - 1e-3 * 0.5);
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
pub trait LossScaler {
    /// The current loss scale (multiply the loss by it).
    ///
    /// ```
    /// use tessera_core::scale::{LossScaler, StaticLossScaler};
    ///
    /// let s: &dyn LossScaler = &StaticLossScaler::new(128.0)?;
    /// assert_eq!(s.scale(), 128.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    fn scale(&self) -> f32;

    /// `f32(1 / f64(scale))`, the factor that unscales the gradients.
    ///
    /// ```
    /// use tessera_core::scale::{DynamicLossScaler, LossScaler};
    ///
    /// assert_eq!(LossScaler::inv_scale(&DynamicLossScaler::default()), 1.0 / 65536.0);
    /// ```
    #[must_use]
    fn inv_scale(&self) -> f32 {
        reciprocal(self.scale())
    }

    /// The bin edge whose counts this step's update will use, if any (only
    /// [`AutomaticLossScaler`] uses one, and only on the steps that need
    /// it).
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler, DynamicLossScaler, LossScaler};
    ///
    /// assert!(LossScaler::histogram_edge(&DynamicLossScaler::default()).is_none());
    /// // ALS counts the histogram on the first step of its period.
    /// let als = AutomaticLossScaler::new(AutomaticConfig::default())?;
    /// assert!(LossScaler::histogram_edge(&als).is_some());
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    fn histogram_edge(&self) -> Option<BinEdge> {
        None
    }

    /// Unscales `grads` by [`inv_scale`](Self::inv_scale), collecting the
    /// histogram [`histogram_edge`](Self::histogram_edge) asks for: the
    /// statistics to combine across replicas before
    /// [`update`](Self::update).
    ///
    /// ```
    /// use tessera_core::scale::{GradSlice, LossScaler, StaticLossScaler};
    ///
    /// fn unscale_all<S: LossScaler>(scaler: &S, g: &mut [f32]) -> bool {
    ///     LossScaler::unscale(scaler, [GradSlice::from(g)]).found_inf
    /// }
    /// let mut g = [256.0f32, f32::NAN];
    /// assert!(unscale_all(&StaticLossScaler::new(256.0)?, &mut g));
    /// assert_eq!(g[0], 1.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    fn unscale<'a, I>(&self, grads: I) -> GradStats
    where
        I: IntoIterator<Item = GradSlice<'a>>,
        Self: Sized,
    {
        unscale_grads(grads, self.inv_scale(), self.histogram_edge())
    }

    /// Ends a step with the combined statistics: moves the scale and says
    /// whether the optimizer step must be skipped (each type's inherent
    /// `update`, which also takes just `found_inf`).
    ///
    /// ```
    /// use tessera_core::scale::{DynamicLossScaler, GradStats, LossScaler, StaticLossScaler};
    ///
    /// let mut scalers: [Box<dyn LossScaler>; 2] =
    ///     [Box::new(StaticLossScaler::default()), Box::new(DynamicLossScaler::default())];
    /// for s in &mut scalers {
    ///     assert!(s.update(GradStats::from(true)).is_skip());
    /// }
    /// assert_eq!(scalers[1].scale(), 32768.0); // backed off
    /// ```
    fn update(&mut self, stats: GradStats) -> StepDecision;
}

/// `f32(1 / f64(scale))`: GradScaler's `inv_scale`.
fn reciprocal(scale: f32) -> f32 {
    (1.0 / f64::from(scale)) as f32
}

/// A finite, positive scale with a finite f32 reciprocal.
fn usable_scale(scale: f32) -> bool {
    scale.is_finite() && scale > 0.0 && reciprocal(scale).is_finite()
}

/// Validates optional `[min, max]` bounds and the initial scale within them.
fn check_bounds(init: f32, min: Option<f32>, max: Option<f32>) -> Result<(), ScalerConfigError> {
    if let Some(min) = min
        && !usable_scale(min)
    {
        return Err(ScalerConfigError::MinScale(min));
    }
    if let Some(max) = max
        && !usable_scale(max)
    {
        return Err(ScalerConfigError::MaxScale(max));
    }
    if let (Some(min), Some(max)) = (min, max)
        && min > max
    {
        return Err(ScalerConfigError::BoundsOrder { min, max });
    }
    if min.is_some_and(|min| init < min) || max.is_some_and(|max| init > max) {
        return Err(ScalerConfigError::ScaleOutsideBounds {
            scale: init,
            min,
            max,
        });
    }
    Ok(())
}
