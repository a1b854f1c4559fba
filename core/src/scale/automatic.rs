//! [`AutomaticLossScaler`]: Graphcore PopART's automatic loss scaling
//! (ALS), driven by a two-bin histogram of the gradients.

use core::num::NonZeroU32;

use super::{
    BinCounts, BinEdge, GradSlice, GradStats, LossScaler, ScalerConfigError, StepDecision,
    reciprocal, unscale_grads, usable_scale,
};

/// Which steps' histogram counts an [`AutomaticLossScaler`] update uses
/// when `update_period` is above 1 (with period 1 both are the same).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HistogramWindow {
    /// PopART: the update happens on the *first* step of each period
    /// (steps `0, P, 2P, ...` counting from 0) and uses that step's counts
    /// only; the counts of the other steps are ignored, so they need not be
    /// computed ([`AutomaticLossScaler::needs_histogram`] is `false` on
    /// them). PopART runs the histogram ops and the update only on those
    /// steps (`executeOpNTimesEveryMTimes`); with period 2 its scales are
    /// `10, 20, 20, 40, 40, ...` from 10 when nothing overflows.
    #[default]
    UpdateStep,
    /// The counts of all `P` steps of a period are summed and the update
    /// happens on the *last* step of each period (steps `P-1, 2P-1, ...`).
    Period,
}

/// The hyperparameters of an [`AutomaticLossScaler`]; [`Default`] follows
/// Tessera's design notes (PopART's ALS with its bin edge at 0.125 of the
/// f16 range).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AutomaticConfig {
    /// The first scale (2^16, as GradScaler; PopART starts from the
    /// optimizer's `lossScaling`, which has no default).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub init_scale: f32,
    /// PopART's `binEdgeLocation`: the bin edge is `f32(65504 *
    /// location)`, in `[0, 1]`. 0.125 (edge 8188) by default, as Tessera's
    /// design notes fix it; later PopART releases default to 0.0625.
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub bin_edge_location: f32,
    /// PopART's `thresholdUpperCountProportion`, in `[0, 1]` (1e-7): the
    /// scale halves when `upper / (upper + lower) > threshold`.
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub threshold: f32,
    /// PopART's `updatePeriod`: steps per update (1).
    pub update_period: NonZeroU32,
    /// Which steps' counts an update uses (see [`HistogramWindow`]).
    pub window: HistogramWindow,
    /// Halving never goes below it (`None`: no bound).
    #[cfg_attr(feature = "serde", serde(default, with = "crate::exact"))]
    pub min_scale: Option<f32>,
    /// Doubling never goes above it (`None`: no bound). Later PopART
    /// releases clip the loss scale at 2^15 when the loss or the weights are
    /// f16; set `Some(32768.0)` for that.
    #[cfg_attr(feature = "serde", serde(default, with = "crate::exact"))]
    pub max_scale: Option<f32>,
    /// Skip the optimizer step when the gradients hold an infinity or NaN
    /// (`true`). PopART's ALS never skips; `false` reproduces that, at the
    /// risk of writing infinities into the weights.
    pub skip_non_finite: bool,
}

impl AutomaticConfig {
    /// The defaults (see the fields).
    pub const DEFAULT: Self = Self {
        init_scale: 65536.0,
        bin_edge_location: 0.125,
        threshold: 1e-7,
        update_period: NonZeroU32::MIN,
        window: HistogramWindow::UpdateStep,
        min_scale: None,
        max_scale: None,
        skip_non_finite: true,
    };

    /// Checks every field (see [`AutomaticLossScaler::new`]).
    ///
    /// ```
    /// use tessera_core::scale::AutomaticConfig;
    ///
    /// assert!(AutomaticConfig::default().validate().is_ok());
    /// assert!(AutomaticConfig { threshold: 2.0, ..AutomaticConfig::default() }.validate().is_err());
    /// ```
    ///
    /// # Errors
    /// The first invalid field, in the order: [`ScalerConfigError::Scale`],
    /// [`ScalerConfigError::BinEdgeLocation`], [`ScalerConfigError::Threshold`],
    /// [`ScalerConfigError::MinScale`], [`ScalerConfigError::MaxScale`],
    /// [`ScalerConfigError::BoundsOrder`], [`ScalerConfigError::ScaleOutsideBounds`].
    pub fn validate(&self) -> Result<(), ScalerConfigError> {
        self.checked_edge().map(|_| ())
    }

    fn checked_edge(&self) -> Result<BinEdge, ScalerConfigError> {
        if !usable_scale(self.init_scale) {
            return Err(ScalerConfigError::Scale(self.init_scale));
        }
        let edge = BinEdge::from_f16_location(self.bin_edge_location)?;
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(ScalerConfigError::Threshold(self.threshold));
        }
        super::check_bounds(self.init_scale, self.min_scale, self.max_scale)?;
        Ok(edge)
    }
}

impl Default for AutomaticConfig {
    /// [`AutomaticConfig::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Automatic loss scaling as in Graphcore PopART (`AutomaticLossScale`
/// transform, `LossScaleUpdateOpx`): the scale follows a histogram of the
/// scaled gradients instead of waiting for overflows.
///
/// Each step the caller counts, per tracked gradient, the elements below
/// and at-or-above the bin edge ([`BinEdge::count`], or
/// [`unscale_grads`](super::unscale_grads) with
/// [`bin_edge`](Self::bin_edge)), sums the counts over tracked tensors and
/// gradient-accumulation micro-batches, all-reduces them over replicas
/// (integer sums) and calls [`update`](Self::update) once:
///
/// ```text
/// if this step ends a window (see HistogramWindow):
///     (u, l) = the window's upper and lower counts
///     if u > threshold * (u + l):       (exactly; u / (u + l) > threshold)
///         new = max(scale * 0.5, min_scale);  if f32(1 / f64(new)) is finite: scale = new
///     else:
///         new = min(scale * 2, max_scale);    if new is finite: scale = new
/// -> Skip if found_inf (and skip_non_finite), else Apply { inv_scale of the old scale }
/// ```
///
/// - Zero counts (nothing tracked, or all-zero windows): `0 > threshold * 0`
///   is false, so the scale *doubles*, as in PopART (whose test
///   `test_auto_loss_scaling_clip_final_loss_scale` relies on it). Bound it
///   with `max_scale` if a run can have empty windows.
/// - The scale is an f32 and changes by exact factors of 2; it never becomes
///   infinite (doubling past `f32::MAX` is refused, as GradScaler refuses
///   growth) nor so small that its reciprocal overflows (halving is refused
///   there); `min_scale`/`max_scale` clamp as apex's bounds do.
/// - The decision is exact integer arithmetic on the counts and the binary
///   value of `threshold` ([`BinCounts::upper_fraction_exceeds`]). PopART
///   computes `u > f * l` in f32 with `f = t / (1 - t)` and counts cast to
///   f32, which can differ when counts exceed 2^24 or the proportion is
///   within rounding of the threshold.
///
/// ```
/// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler, BinCounts, GradStats};
///
/// let mut als = AutomaticLossScaler::new(AutomaticConfig { init_scale: 1024.0, ..Default::default() })?;
/// let calm = GradStats { found_inf: false, bins: BinCounts { lower: 1_000_000, upper: 0 } };
/// let _ = als.update(calm);
/// assert_eq!(als.scale(), 2048.0);
/// let hot = GradStats { found_inf: false, bins: BinCounts { lower: 1_000_000, upper: 1 } };
/// let _ = als.update(hot); // 1e-6 of the elements near the top: back off
/// assert_eq!(als.scale(), 1024.0);
/// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "AutomaticState", into = "AutomaticState")
)]
pub struct AutomaticLossScaler {
    config: AutomaticConfig,
    edge: BinEdge,
    scale: f32,
    step_in_period: u32,
    window_counts: BinCounts,
}

/// An [`AutomaticLossScaler`]'s saved state: its settings, its scale and
/// where it is in its period ([`AutomaticLossScaler::state`],
/// [`AutomaticLossScaler::from_state`]).
///
/// ```
/// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler, AutomaticState, BinCounts};
///
/// let state = AutomaticState {
///     config: AutomaticConfig::default(),
///     scale: 512.0,
///     step_in_period: 0,
///     window_counts: BinCounts::default(),
/// };
/// assert_eq!(AutomaticLossScaler::from_state(state)?.scale(), 512.0);
/// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AutomaticState {
    /// The hyperparameters.
    pub config: AutomaticConfig,
    /// The current scale.
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub scale: f32,
    /// Steps taken in the current update period.
    pub step_in_period: u32,
    /// The counts gathered so far in the current window.
    pub window_counts: BinCounts,
}

crate::via_state!(
    AutomaticLossScaler,
    AutomaticState,
    ScalerConfigError,
    from_state,
    state
);

impl AutomaticLossScaler {
    /// A scaler at `config.init_scale`, at the start of a period.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// let scaler = AutomaticLossScaler::new(AutomaticConfig { init_scale: 512.0, ..AutomaticConfig::default() })?;
    /// assert_eq!(scaler.scale(), 512.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    ///
    /// # Errors
    /// The first invalid field (see [`AutomaticConfig::validate`]): an
    /// initial scale or bound that is not a usable scale, a bin-edge
    /// location or threshold outside `[0, 1]` (or NaN), `min_scale >
    /// max_scale`, or an initial scale outside the bounds.
    pub fn new(config: AutomaticConfig) -> Result<Self, ScalerConfigError> {
        let edge = config.checked_edge()?;
        Ok(Self {
            config,
            edge,
            scale: config.init_scale,
            step_in_period: 0,
            window_counts: BinCounts::default(),
        })
    }

    /// A scaler in a saved state (from [`state`](Self::state)), to resume a
    /// run bitwise where it stopped. With the `serde` feature the scaler
    /// itself serializes as its [`AutomaticState`] and is checked here
    /// when read back.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// let mut scaler = AutomaticLossScaler::new(AutomaticConfig::default())?;
    /// scaler.update(false);
    /// assert_eq!(AutomaticLossScaler::from_state(scaler.state())?, scaler);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new) with `state.scale` as the initial scale, and
    /// [`ScalerConfigError::Counter`] for a `step_in_period` outside
    /// `0..update_period`.
    pub fn from_state(state: AutomaticState) -> Result<Self, ScalerConfigError> {
        let AutomaticState {
            config,
            scale,
            step_in_period,
            window_counts,
        } = state;
        let mut scaler = Self::new(AutomaticConfig {
            init_scale: scale,
            ..config
        })?;
        let period = config.update_period.get();
        if step_in_period >= period {
            return Err(ScalerConfigError::Counter {
                name: "step_in_period",
                value: i64::from(step_in_period),
                max: i64::from(period) - 1,
            });
        }
        scaler.config = config;
        scaler.step_in_period = step_in_period;
        scaler.window_counts = window_counts;
        Ok(scaler)
    }

    /// Everything that [`from_state`](Self::from_state) needs to resume.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// let state = AutomaticLossScaler::new(AutomaticConfig::default())?.state();
    /// assert_eq!((state.scale, state.step_in_period), (65536.0, 0));
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn state(&self) -> AutomaticState {
        AutomaticState {
            config: self.config,
            scale: self.scale,
            step_in_period: self.step_in_period,
            window_counts: self.window_counts,
        }
    }

    /// The counts gathered so far in the current window (zero with
    /// [`HistogramWindow::UpdateStep`]).
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler, BinCounts};
    ///
    /// let scaler = AutomaticLossScaler::new(AutomaticConfig::default())?;
    /// assert_eq!(scaler.window_counts(), BinCounts::default());
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn window_counts(&self) -> BinCounts {
        self.window_counts
    }

    /// The hyperparameters.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// let scaler = AutomaticLossScaler::new(AutomaticConfig::default())?;
    /// assert_eq!(scaler.config().bin_edge_location, 0.125);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn config(&self) -> &AutomaticConfig {
        &self.config
    }

    /// The current loss scale (multiply the loss by it).
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// assert_eq!(AutomaticLossScaler::new(AutomaticConfig::default())?.scale(), 65536.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn scale(&self) -> f32 {
        self.scale
    }

    /// `f32(1 / f64(scale))`.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// let scaler = AutomaticLossScaler::new(AutomaticConfig { init_scale: 4.0, ..AutomaticConfig::default() })?;
    /// assert_eq!(scaler.inv_scale(), 0.25);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn inv_scale(&self) -> f32 {
        reciprocal(self.scale)
    }

    /// The histogram's bin edge, `f32(65504 * bin_edge_location)`.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// assert_eq!(AutomaticLossScaler::new(AutomaticConfig::default())?.bin_edge().value(), 8188.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn bin_edge(&self) -> BinEdge {
        self.edge
    }

    /// The step's position in the current period, `0..update_period`.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// assert_eq!(AutomaticLossScaler::new(AutomaticConfig::default())?.step_in_period(), 0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn step_in_period(&self) -> u32 {
        self.step_in_period
    }

    /// Whether [`update`](Self::update) will use this step's counts: always
    /// with [`HistogramWindow::Period`], only on the first step of each
    /// period with [`HistogramWindow::UpdateStep`].
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// assert!(AutomaticLossScaler::new(AutomaticConfig::default())?.needs_histogram());
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn needs_histogram(&self) -> bool {
        match self.config.window {
            HistogramWindow::UpdateStep => self.step_in_period == 0,
            HistogramWindow::Period => true,
        }
    }

    /// The bin edge whose counts this step's update will use, if it needs
    /// them.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler};
    ///
    /// let scaler = AutomaticLossScaler::new(AutomaticConfig::default())?;
    /// assert_eq!(scaler.histogram_edge().map(|e| e.value()), Some(8188.0));
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn histogram_edge(&self) -> Option<BinEdge> {
        self.needs_histogram().then_some(self.edge)
    }

    /// Unscales `grads` by [`inv_scale`](Self::inv_scale), counting the
    /// histogram when this step needs it: the statistics to combine across
    /// replicas before [`update`](Self::update).
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler, GradSlice};
    ///
    /// let scaler = AutomaticLossScaler::new(AutomaticConfig { init_scale: 2.0, ..AutomaticConfig::default() })?;
    /// let mut g = [20000.0f32, 2.0];
    /// let stats = scaler.unscale([GradSlice::from(&mut g)]);
    /// assert_eq!((stats.bins.upper, stats.bins.lower, g), (1, 1, [10000.0, 1.0])); // counted before unscaling
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn unscale<'a>(&self, grads: impl IntoIterator<Item = GradSlice<'a>>) -> GradStats {
        unscale_grads(grads, self.inv_scale(), self.histogram_edge())
    }

    /// Ends a step with its statistics, combined over tracked tensors,
    /// micro-batches and replicas: updates the scale when the step closes a
    /// window (see the type's docs) and says whether the optimizer step
    /// must be skipped.
    ///
    /// [`StepDecision::Apply`] carries `inv_scale` of the scale *this* step
    /// was computed with.
    ///
    /// ```
    /// use tessera_core::scale::{AutomaticConfig, AutomaticLossScaler, BinCounts, GradStats, StepDecision};
    ///
    /// let mut scaler = AutomaticLossScaler::new(AutomaticConfig::default())?;
    /// // A third of the gradients above the edge: far over the threshold, so the scale halves.
    /// let stats = GradStats { found_inf: false, bins: BinCounts { lower: 2, upper: 1 } };
    /// assert_eq!(scaler.update(stats), StepDecision::Apply { inv_scale: 1.0 / 65536.0 });
    /// assert_eq!(scaler.scale(), 32768.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    pub fn update(&mut self, stats: impl Into<GradStats>) -> StepDecision {
        let stats = stats.into();
        let inv_scale = self.inv_scale();
        let period = self.config.update_period.get();
        match self.config.window {
            HistogramWindow::UpdateStep => {
                if self.step_in_period == 0 {
                    self.adjust(stats.bins);
                }
            }
            HistogramWindow::Period => {
                self.window_counts = self.window_counts.merge(stats.bins);
                if self.step_in_period + 1 == period {
                    self.adjust(self.window_counts);
                    self.window_counts = BinCounts::default();
                }
            }
        }
        self.step_in_period = (self.step_in_period + 1) % period;
        if stats.found_inf && self.config.skip_non_finite {
            StepDecision::Skip
        } else {
            StepDecision::Apply { inv_scale }
        }
    }

    fn adjust(&mut self, counts: BinCounts) {
        if counts.upper_fraction_exceeds(self.config.threshold) {
            let mut new = self.scale * 0.5;
            if let Some(min) = self.config.min_scale {
                new = new.max(min);
            }
            if usable_scale(new) {
                self.scale = new;
            }
        } else {
            let mut new = self.scale * 2.0;
            if let Some(max) = self.config.max_scale {
                new = new.min(max);
            }
            if new.is_finite() {
                self.scale = new;
            }
        }
    }
}

impl LossScaler for AutomaticLossScaler {
    fn scale(&self) -> f32 {
        self.scale
    }

    fn histogram_edge(&self) -> Option<BinEdge> {
        Self::histogram_edge(self)
    }

    fn update(&mut self, stats: GradStats) -> StepDecision {
        Self::update(self, stats)
    }
}
