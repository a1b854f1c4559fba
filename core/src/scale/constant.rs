//! [`StaticLossScaler`]: a constant loss scale.

use super::{
    GradSlice, GradStats, LossScaler, ScalerConfigError, StepDecision, reciprocal, unscale_grads,
    usable_scale,
};

/// A constant loss scale, as in Graphcore's recipes (128 for ResNet-50,
/// 4096 for BERT).
///
/// The loss is multiplied by [`scale`](Self::scale) before the backward
/// pass. The factor is removed either by unscaling the gradients
/// ([`unscale_grads`](super::unscale_grads) with
/// [`inv_scale`](Self::inv_scale)) or, as PopART does, at the update: SGD
/// with learning rate [`fold_into_lr`](Self::fold_into_lr)`(lr)` =
/// `lr / scale` on the scaled gradients takes the same step.
///
/// ```
/// use tessera_core::scale::StaticLossScaler;
///
/// let s = StaticLossScaler::new(128.0)?;
/// assert_eq!(s.inv_scale(), 0.0078125);
/// assert_eq!(s.fold_into_lr(0.1), 0.1 / 128.0);
/// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "f32", into = "f32")
)]
pub struct StaticLossScaler {
    scale: f32,
}

crate::via_state!(StaticLossScaler, f32, ScalerConfigError, new, scale);

impl StaticLossScaler {
    /// A constant scale.
    ///
    /// ```
    /// use tessera_core::scale::StaticLossScaler;
    ///
    /// assert!(StaticLossScaler::new(4096.0).is_ok());
    /// assert!(StaticLossScaler::new(0.0).is_err());
    /// ```
    ///
    /// # Errors
    /// [`ScalerConfigError::Scale`] unless `scale` is finite, positive and has a
    /// finite reciprocal (see [`ScalerConfigError`]).
    pub fn new(scale: f32) -> Result<Self, ScalerConfigError> {
        if usable_scale(scale) {
            Ok(Self { scale })
        } else {
            Err(ScalerConfigError::Scale(scale))
        }
    }

    /// The loss scale.
    ///
    /// ```
    /// use tessera_core::scale::StaticLossScaler;
    ///
    /// assert_eq!(StaticLossScaler::new(128.0)?.scale(), 128.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn scale(self) -> f32 {
        self.scale
    }

    /// `f32(1 / f64(scale))`, the factor that unscales a gradient (computed
    /// as GradScaler computes its `inv_scale`).
    ///
    /// ```
    /// use tessera_core::scale::StaticLossScaler;
    ///
    /// assert_eq!(StaticLossScaler::new(4.0)?.inv_scale(), 0.25);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn inv_scale(self) -> f32 {
        reciprocal(self.scale)
    }

    /// `lr / scale`, correctly rounded in f32: the learning rate that
    /// removes the scale at an SGD update on still-scaled gradients.
    ///
    /// ```
    /// use tessera_core::scale::StaticLossScaler;
    ///
    /// assert_eq!(StaticLossScaler::new(128.0)?.fold_into_lr(1.0), 0.0078125);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn fold_into_lr(self, lr: f32) -> f32 {
        lr / self.scale
    }

    /// Unscales `grads` by [`inv_scale`](Self::inv_scale): the
    /// statistics to combine across replicas before
    /// [`update`](Self::update).
    ///
    /// ```
    /// use tessera_core::scale::{GradSlice, StaticLossScaler};
    ///
    /// let scaler = StaticLossScaler::new(128.0)?;
    /// let mut g = [256.0f32];
    /// assert!(!scaler.unscale([GradSlice::from(&mut g)]).found_inf);
    /// assert_eq!(g, [2.0]);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn unscale<'a>(&self, grads: impl IntoIterator<Item = GradSlice<'a>>) -> GradStats {
        unscale_grads(grads, self.inv_scale(), None)
    }

    /// Ends a step: [`StepDecision::Skip`] if the gradients held an
    /// infinity or NaN (so they cannot poison the weights), else
    /// [`StepDecision::Apply`]. The scale never changes. (PopART's static
    /// scaling applies every step; pass `false` for that.) `stats` is the
    /// combined [`GradStats`] or just `found_inf`.
    ///
    /// ```
    /// use tessera_core::scale::{StaticLossScaler, StepDecision};
    ///
    /// let mut scaler = StaticLossScaler::new(128.0)?;
    /// assert_eq!(scaler.update(true), StepDecision::Skip); // the scale never moves
    /// assert_eq!(scaler.scale(), 128.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    pub fn update(&mut self, stats: impl Into<GradStats>) -> StepDecision {
        if stats.into().found_inf {
            StepDecision::Skip
        } else {
            StepDecision::Apply {
                inv_scale: self.inv_scale(),
            }
        }
    }
}

impl Default for StaticLossScaler {
    /// A scale of 1: no loss scaling.
    fn default() -> Self {
        Self { scale: 1.0 }
    }
}

impl LossScaler for StaticLossScaler {
    fn scale(&self) -> f32 {
        self.scale
    }

    fn update(&mut self, stats: GradStats) -> StepDecision {
        Self::update(self, stats)
    }
}
