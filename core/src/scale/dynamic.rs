//! [`DynamicLossScaler`]: `torch.amp.GradScaler`'s state machine, with
//! apex/Megatron bounds and hysteresis as options.

use core::num::NonZeroU32;

use super::{
    GradSlice, GradStats, LossScaler, ScalerConfigError, StepDecision, reciprocal, unscale_grads,
    usable_scale,
};

/// When the hysteresis budget of a [`DynamicLossScaler`] is refilled.
///
/// Both agree when `hysteresis` is 1 (the default, which is plain
/// GradScaler).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum HysteresisReset {
    /// Refill on every step without an overflow, so the scale backs off
    /// only after `hysteresis` *consecutive* overflowing steps (and on every
    /// further consecutive one). This is the semantics in Tessera's design
    /// notes, NeMo's `GradScaler(hysteresis=..)` (built on apex's
    /// model-parallel GradScaler) and DeepSpeed with
    /// `consecutive_hysteresis=True`.
    #[default]
    OnGoodStep,
    /// Refill only when the growth interval completes, so overflows count
    /// against the budget even when good steps separate them; once it is
    /// spent, every overflow backs off until the next growth. This is
    /// Megatron-LM's `DynamicGradScaler` and DeepSpeed's default.
    OnGrowth,
}

/// The hyperparameters of a [`DynamicLossScaler`]; [`Default`] is
/// `torch.amp.GradScaler`'s, with the apex/Megatron options off.
///
/// Fill in the fields with struct update syntax and let
/// [`DynamicLossScaler::new`] validate them:
///
/// ```
/// use core::num::NonZeroU32;
/// use tessera_core::scale::{DynamicConfig, DynamicLossScaler};
///
/// let scaler = DynamicLossScaler::new(DynamicConfig {
///     growth_interval: NonZeroU32::new(1000).unwrap(),
///     min_scale: Some(1.0),
///     ..DynamicConfig::default()
/// })?;
/// assert_eq!(scaler.scale(), 65536.0);
/// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DynamicConfig {
    /// The first scale (GradScaler: `init_scale`, 2^16).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub init_scale: f32,
    /// Multiplier after `growth_interval` good steps in a row (2.0); must be
    /// finite and above 1.
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub growth_factor: f64,
    /// Multiplier on an overflow (0.5); must be in `(0, 1)`.
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub backoff_factor: f64,
    /// Good steps in a row before the scale grows (2000); at most
    /// `i32::MAX`.
    pub growth_interval: NonZeroU32,
    /// apex `min_loss_scale` / Megatron `min_scale`: a backoff never goes
    /// below it (`None`, the default: no bound).
    #[cfg_attr(feature = "serde", serde(default, with = "crate::exact"))]
    pub min_scale: Option<f32>,
    /// apex `max_loss_scale` (2^24 in apex; `None`, the default, as
    /// GradScaler): growth never goes above it.
    #[cfg_attr(feature = "serde", serde(default, with = "crate::exact"))]
    pub max_scale: Option<f32>,
    /// Overflowing steps it takes to back off (1, the default, backs off on
    /// every overflow as GradScaler does); see [`HysteresisReset`].
    pub hysteresis: NonZeroU32,
    /// When the hysteresis budget is refilled.
    pub hysteresis_reset: HysteresisReset,
}

impl DynamicConfig {
    /// `torch.amp.GradScaler()`'s defaults: init 2^16, growth 2, backoff
    /// 0.5, interval 2000, no bounds, no hysteresis.
    pub const GRAD_SCALER: Self = Self {
        init_scale: 65536.0,
        growth_factor: 2.0,
        backoff_factor: 0.5,
        growth_interval: NonZeroU32::new(2000).unwrap(),
        min_scale: None,
        max_scale: None,
        hysteresis: NonZeroU32::MIN,
        hysteresis_reset: HysteresisReset::OnGoodStep,
    };

    /// apex `amp` (`LossScaler("dynamic")`): GradScaler's defaults with
    /// `max_loss_scale` 2^24.
    pub const APEX: Self = Self {
        max_scale: Some(16_777_216.0),
        ..Self::GRAD_SCALER
    };

    /// Checks every field (see [`DynamicLossScaler::new`]).
    ///
    /// ```
    /// use tessera_core::scale::DynamicConfig;
    ///
    /// assert!(DynamicConfig::APEX.validate().is_ok());
    /// assert!(DynamicConfig { backoff_factor: 1.5, ..DynamicConfig::default() }.validate().is_err());
    /// ```
    ///
    /// # Errors
    /// The first invalid field, in the order: [`ScalerConfigError::Scale`],
    /// [`ScalerConfigError::GrowthFactor`], [`ScalerConfigError::BackoffFactor`],
    /// [`ScalerConfigError::GrowthInterval`], then the bounds:
    /// [`ScalerConfigError::MinScale`],
    /// [`ScalerConfigError::MaxScale`], [`ScalerConfigError::BoundsOrder`],
    /// [`ScalerConfigError::ScaleOutsideBounds`].
    pub fn validate(&self) -> Result<(), ScalerConfigError> {
        if !usable_scale(self.init_scale) {
            return Err(ScalerConfigError::Scale(self.init_scale));
        }
        if !(self.growth_factor > 1.0 && self.growth_factor.is_finite()) {
            return Err(ScalerConfigError::GrowthFactor(self.growth_factor));
        }
        if !(self.backoff_factor > 0.0 && self.backoff_factor < 1.0) {
            return Err(ScalerConfigError::BackoffFactor(self.backoff_factor));
        }
        if i32::try_from(self.growth_interval.get()).is_err() {
            return Err(ScalerConfigError::GrowthInterval(
                self.growth_interval.get(),
            ));
        }
        super::check_bounds(self.init_scale, self.min_scale, self.max_scale)
    }
}

impl Default for DynamicConfig {
    /// [`DynamicConfig::GRAD_SCALER`].
    fn default() -> Self {
        Self::GRAD_SCALER
    }
}

/// Dynamic loss scaling with exactly `torch.amp.GradScaler`'s state machine
/// (CPU kernel `_amp_update_scale_cpu_`), plus apex's optional bounds and
/// hysteresis.
///
/// Each step, after the (all-reduced) overflow check, call
/// [`update`](Self::update) once:
///
/// ```text
/// found_inf:  growth_tracker = 0
///             hysteresis_tracker -= 1 (not below 0)
///             if hysteresis_tracker == 0:
///                 new = f32(f64(scale) * backoff_factor)
///                 new = max(new, min_scale)              (if min_scale)
///                 if f32(1 / f64(new)) is finite: scale = new
///             -> Skip
/// otherwise:  hysteresis_tracker = hysteresis            (OnGoodStep)
///             growth_tracker += 1
///             if growth_tracker == growth_interval:
///                 new = f32(f64(scale) * growth_factor)
///                 new = min(new, max_scale)              (if max_scale)
///                 if new is finite: scale = new
///                 growth_tracker = 0
///                 hysteresis_tracker = hysteresis        (both resets)
///             -> Apply { inv_scale: f32(1 / f64(scale before the update)) }
/// ```
///
/// The products are formed in f64 and rounded once to f32, because
/// PyTorch's CPU kernel multiplies the `float` scale by the `double`
/// factors and stores the `double` result into the `float` tensor. With the
/// default factors (powers of two) this is exact unless it over- or
/// underflows; with others (1.5, 0.7) it can differ from an f32 product.
///
/// With the defaults (`hysteresis` 1, no bounds) the sequence of scales is
/// GradScaler's bit for bit, with one deliberate exception: GradScaler
/// backs off without a floor, so after 144 overflows in a row (from 2^16
/// by halves) its scale reaches `2^-128`, where `inv_scale` overflows
/// to infinity; every later unscaled gradient is then infinite or NaN and it
/// never recovers (its scale ends at 0). Tessera refuses a backoff whose
/// reciprocal would not be finite, just as GradScaler itself refuses growth
/// to infinity, so the scale and `inv_scale` are always finite and positive.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "DynamicState", into = "DynamicState")
)]
pub struct DynamicLossScaler {
    config: DynamicConfig,
    scale: f32,
    growth_tracker: i32,
    hysteresis_tracker: u32,
}

/// A [`DynamicLossScaler`]'s saved state: its settings, its scale and
/// both trackers ([`DynamicLossScaler::state`],
/// [`DynamicLossScaler::from_state`]).
///
/// ```
/// use tessera_core::scale::{DynamicConfig, DynamicLossScaler, DynamicState};
///
/// let state = DynamicState { config: DynamicConfig::default(), scale: 1024.0, growth_tracker: 5, hysteresis_tracker: 1 };
/// assert_eq!(DynamicLossScaler::from_state(state)?.growth_tracker(), 5);
/// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct DynamicState {
    /// The hyperparameters.
    pub config: DynamicConfig,
    /// The current scale.
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub scale: f32,
    /// Good steps in a row since the last growth or overflow.
    pub growth_tracker: i32,
    /// Overflows still allowed before a backoff.
    pub hysteresis_tracker: u32,
}

crate::via_state!(
    DynamicLossScaler,
    DynamicState,
    ScalerConfigError,
    from_state,
    state
);

impl DynamicLossScaler {
    /// A scaler at `config.init_scale` with both trackers fresh (growth 0,
    /// hysteresis full).
    ///
    /// ```
    /// use tessera_core::scale::{DynamicConfig, DynamicLossScaler};
    ///
    /// let scaler = DynamicLossScaler::new(DynamicConfig { init_scale: 1024.0, ..DynamicConfig::default() })?;
    /// assert_eq!(scaler.scale(), 1024.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    ///
    /// # Errors
    /// The first invalid field (see [`DynamicConfig::validate`]): an initial
    /// scale or bound that is not a usable scale (finite, positive, with a
    /// finite reciprocal), a growth factor not above 1, a backoff factor
    /// outside `(0, 1)`, a growth interval above `i32::MAX`, `min_scale >
    /// max_scale`, or an initial scale outside the bounds.
    pub fn new(config: DynamicConfig) -> Result<Self, ScalerConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            scale: config.init_scale,
            growth_tracker: 0,
            hysteresis_tracker: config.hysteresis.get(),
        })
    }

    /// A scaler in a saved state (from [`state`](Self::state)), to resume a
    /// run bitwise where it stopped. With the `serde` feature the scaler
    /// itself serializes as its [`DynamicState`] and is checked here when
    /// read back.
    ///
    /// ```
    /// use tessera_core::scale::{DynamicLossScaler, StepDecision};
    ///
    /// let mut scaler = DynamicLossScaler::default();
    /// scaler.update(true); // an overflow: back off
    /// let resumed = DynamicLossScaler::from_state(scaler.state())?;
    /// assert_eq!((resumed, resumed.scale()), (scaler, 32768.0));
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new) with `state.scale` as the initial scale, and
    /// [`ScalerConfigError::Counter`] for a tracker outside
    /// `0..growth_interval` or `0..=hysteresis`.
    pub fn from_state(state: DynamicState) -> Result<Self, ScalerConfigError> {
        let DynamicState {
            config,
            scale,
            growth_tracker,
            hysteresis_tracker,
        } = state;
        let mut scaler = Self::new(DynamicConfig {
            init_scale: scale,
            ..config
        })?;
        let growth_max = i64::from(config.growth_interval.get()) - 1;
        if !(0..=growth_max).contains(&i64::from(growth_tracker)) {
            return Err(ScalerConfigError::Counter {
                name: "growth_tracker",
                value: i64::from(growth_tracker),
                max: growth_max,
            });
        }
        if hysteresis_tracker > config.hysteresis.get() {
            return Err(ScalerConfigError::Counter {
                name: "hysteresis_tracker",
                value: i64::from(hysteresis_tracker),
                max: i64::from(config.hysteresis.get()),
            });
        }
        scaler.config = config;
        scaler.growth_tracker = growth_tracker;
        scaler.hysteresis_tracker = hysteresis_tracker;
        Ok(scaler)
    }

    /// Everything that [`from_state`](Self::from_state) needs to resume.
    ///
    /// ```
    /// use tessera_core::scale::DynamicLossScaler;
    ///
    /// let state = DynamicLossScaler::default().state();
    /// assert_eq!((state.scale, state.growth_tracker, state.hysteresis_tracker), (65536.0, 0, 1));
    /// ```
    #[must_use]
    pub const fn state(&self) -> DynamicState {
        DynamicState {
            config: self.config,
            scale: self.scale,
            growth_tracker: self.growth_tracker,
            hysteresis_tracker: self.hysteresis_tracker,
        }
    }

    /// The hyperparameters.
    ///
    /// ```
    /// use tessera_core::scale::{DynamicConfig, DynamicLossScaler};
    ///
    /// assert_eq!(*DynamicLossScaler::default().config(), DynamicConfig::GRAD_SCALER);
    /// ```
    #[must_use]
    pub const fn config(&self) -> &DynamicConfig {
        &self.config
    }

    /// The current loss scale (multiply the loss by it).
    ///
    /// ```
    /// use tessera_core::scale::DynamicLossScaler;
    ///
    /// assert_eq!(DynamicLossScaler::default().scale(), 65536.0);
    /// ```
    #[must_use]
    pub const fn scale(&self) -> f32 {
        self.scale
    }

    /// `f32(1 / f64(scale))`, GradScaler's `inv_scale`.
    ///
    /// ```
    /// use tessera_core::scale::DynamicLossScaler;
    ///
    /// assert_eq!(DynamicLossScaler::default().inv_scale(), 1.0 / 65536.0);
    /// ```
    #[must_use]
    pub fn inv_scale(&self) -> f32 {
        reciprocal(self.scale)
    }

    /// Good steps since the last overflow or growth (GradScaler's
    /// `_growth_tracker`), in `0..growth_interval`.
    ///
    /// ```
    /// use tessera_core::scale::DynamicLossScaler;
    ///
    /// let mut scaler = DynamicLossScaler::default();
    /// let _ = scaler.update(false);
    /// assert_eq!(scaler.growth_tracker(), 1);
    /// ```
    #[must_use]
    pub const fn growth_tracker(&self) -> i32 {
        self.growth_tracker
    }

    /// Overflows still absorbed before a backoff, in `0..=hysteresis`
    /// (Megatron's `_hysteresis_tracker`, held at 0 where Megatron's goes
    /// negative; both back off when it is at most 0).
    ///
    /// ```
    /// use tessera_core::scale::DynamicLossScaler;
    ///
    /// assert_eq!(DynamicLossScaler::default().hysteresis_tracker(), 1);
    /// ```
    #[must_use]
    pub const fn hysteresis_tracker(&self) -> u32 {
        self.hysteresis_tracker
    }

    /// Unscales `grads` by [`inv_scale`](Self::inv_scale): the
    /// statistics to combine across replicas before
    /// [`update`](Self::update).
    ///
    /// ```
    /// use tessera_core::scale::{DynamicLossScaler, GradSlice};
    ///
    /// let scaler = DynamicLossScaler::default();
    /// let mut g = [65536.0f32, f32::INFINITY];
    /// assert!(scaler.unscale([GradSlice::from(&mut g)]).found_inf);
    /// assert_eq!(g[0], 1.0);
    /// ```
    #[must_use]
    pub fn unscale<'a>(&self, grads: impl IntoIterator<Item = GradSlice<'a>>) -> GradStats {
        unscale_grads(grads, self.inv_scale(), None)
    }

    /// Ends a step: moves the state machine (see the type's docs) on this
    /// step's `found_inf`, combined over every replica, and says whether
    /// the optimizer step must be skipped.
    ///
    /// [`StepDecision::Apply`] carries `inv_scale` of the scale *this* step
    /// was computed with (the one its gradients were unscaled by). `stats`
    /// is the combined [`GradStats`] or just `found_inf`.
    ///
    /// ```
    /// use tessera_core::scale::{DynamicLossScaler, StepDecision};
    ///
    /// let mut scaler = DynamicLossScaler::default();
    /// assert_eq!(scaler.update(true), StepDecision::Skip);
    /// assert_eq!(scaler.scale(), 32768.0); // backed off
    /// assert_eq!(scaler.update(false), StepDecision::Apply { inv_scale: 1.0 / 32768.0 });
    /// ```
    pub fn update(&mut self, stats: impl Into<GradStats>) -> StepDecision {
        let found_inf = stats.into().found_inf;
        let inv_scale = self.inv_scale();
        let hysteresis = self.config.hysteresis.get();
        if found_inf {
            self.growth_tracker = 0;
            self.hysteresis_tracker = self.hysteresis_tracker.saturating_sub(1);
            if self.hysteresis_tracker == 0 {
                self.back_off();
            }
            StepDecision::Skip
        } else {
            if self.config.hysteresis_reset == HysteresisReset::OnGoodStep {
                self.hysteresis_tracker = hysteresis;
            }
            let successful = self.growth_tracker + 1;
            // Validation keeps the interval within i32.
            if i64::from(successful) == i64::from(self.config.growth_interval.get()) {
                self.grow();
                self.growth_tracker = 0;
                self.hysteresis_tracker = hysteresis;
            } else {
                self.growth_tracker = successful;
            }
            StepDecision::Apply { inv_scale }
        }
    }

    fn back_off(&mut self) {
        let mut new = (f64::from(self.scale) * self.config.backoff_factor) as f32;
        if let Some(min) = self.config.min_scale {
            new = new.max(min);
        }
        if usable_scale(new) {
            self.scale = new;
        }
    }

    fn grow(&mut self) {
        let mut new = (f64::from(self.scale) * self.config.growth_factor) as f32;
        if let Some(max) = self.config.max_scale {
            new = new.min(max);
        }
        if new.is_finite() {
            self.scale = new;
        }
    }
}

impl Default for DynamicLossScaler {
    /// A fresh scaler with [`DynamicConfig::GRAD_SCALER`].
    fn default() -> Self {
        let config = DynamicConfig::GRAD_SCALER;
        Self {
            config,
            scale: config.init_scale,
            growth_tracker: 0,
            hysteresis_tracker: config.hysteresis.get(),
        }
    }
}

impl LossScaler for DynamicLossScaler {
    fn scale(&self) -> f32 {
        self.scale
    }

    fn update(&mut self, stats: GradStats) -> StepDecision {
        Self::update(self, stats)
    }
}
