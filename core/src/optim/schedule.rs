//! Learning-rate schedules: the factor [`Step::lr_scale`](super::Step)
//! carries, so a schedule never rebuilds an optimizer.

use super::error::{ConfigError, check};

/// A learning-rate schedule over `total` steps: linear warm-up, then
/// constant, cosine or polynomial decay. [`LrSchedule::factor`] gives the
/// factor of a step; each group's rate is its configured `lr` times it.
///
/// | here | PopTorch / PyTorch | timm | optax |
/// |---|---|---|---|
/// | `Decay::Constant`, `warmup` 0 | no scheduler | no scheduler | `constant_schedule` |
/// | `warmup` n | `LinearLR(start_factor=1/n, total_iters=n)` | `warmup_t=n, warmup_prefix=True` | `linear_schedule` |
/// | `Decay::Cosine { final_factor }` | `CosineAnnealingLR(eta_min=final_factor lr)` | `CosineLRScheduler(lr_min=final_factor lr)` | `warmup_cosine_decay_schedule(end_value=final_factor peak)` |
/// | `Decay::Polynomial { power, final_factor }` | `PolynomialLR(power)` (final 0) | `PolyLRScheduler(power, lr_min)` | `polynomial_schedule` |
///
/// Warm-up here starts at `1 / warmup` (step 0 already moves the
/// weights) and reaches 1 at step `warmup - 1`; optax's and
/// Hugging Face's linear warm-up start at 0, one step behind. Decay spans
/// steps `warmup..total` and holds its final value after `total`
/// (optax's; timm's cosine would restart).
///
/// ```
/// use tessera_core::optim::{Decay, LrSchedule};
///
/// let schedule = LrSchedule { warmup: 10, decay: Decay::Cosine { final_factor: 0.0 }, total: 110 };
/// assert_eq!(schedule.factor(0), 0.1);
/// assert_eq!(schedule.factor(9), 1.0);
/// assert_eq!(schedule.factor(10), 1.0);
/// assert_eq!(schedule.factor(60), 0.5);
/// assert!(schedule.factor(109) < 1e-3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LrSchedule {
    /// Steps of linear warm-up (0: none).
    pub warmup: u64,
    /// What follows the warm-up.
    pub decay: Decay,
    /// Steps in all, warm-up included.
    pub total: u64,
}

/// The decay after the warm-up, over `x` going from 0 to 1.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Decay {
    /// Factor 1 throughout.
    Constant,
    /// `f + (1 - f) (1 + cos(pi x)) / 2`.
    Cosine {
        /// `f`: the factor at the end.
        #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
        final_factor: f32,
    },
    /// `f + (1 - f) (1 - x)^power`; power 1 is linear decay.
    Polynomial {
        /// The exponent (> 0).
        #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
        power: f32,
        /// `f`: the factor at the end.
        #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
        final_factor: f32,
    },
}

impl LrSchedule {
    /// A constant factor 1.
    pub const CONSTANT: Self = Self {
        warmup: 0,
        decay: Decay::Constant,
        total: 0,
    };

    /// Checks the factors: `final_factor` in `[0, 1]`, `power` finite and
    /// > 0.
    ///
    /// ```
    /// use tessera_core::optim::{Decay, LrSchedule};
    ///
    /// let cosine = LrSchedule { warmup: 10, decay: Decay::Cosine { final_factor: 0.1 }, total: 100 };
    /// assert!(cosine.validate().is_ok());
    /// let bad = LrSchedule { decay: Decay::Cosine { final_factor: 2.0 }, ..cosine };
    /// assert!(bad.validate().is_err());
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] naming the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.decay {
            Decay::Constant => Ok(()),
            Decay::Cosine { final_factor } => check("final_factor", final_factor, 0.0, 1.0, false),
            Decay::Polynomial {
                power,
                final_factor,
            } => {
                check("power", power, f32::MIN_POSITIVE, f32::MAX, false)?;
                check("final_factor", final_factor, 0.0, 1.0, false)
            }
        }
    }

    /// The factor of step `step` (0-based, counting every step taken,
    /// skipped or not, as PyTorch's schedulers do), computed in f64 with
    /// `libm` and rounded once, so it is the same on every platform.
    ///
    /// ```
    /// use tessera_core::optim::{Decay, LrSchedule};
    ///
    /// let s = LrSchedule { warmup: 2, decay: Decay::Cosine { final_factor: 0.0 }, total: 12 };
    /// assert_eq!((s.factor(0), s.factor(1), s.factor(2)), (0.5, 1.0, 1.0));
    /// assert_eq!((s.factor(7), s.factor(12)), (0.5, 0.0)); // half-way, then the end
    /// ```
    #[must_use]
    pub fn factor(&self, step: u64) -> f32 {
        if step < self.warmup {
            return ((step + 1) as f64 / self.warmup as f64) as f32;
        }
        let span = self.total.saturating_sub(self.warmup).max(1) as f64;
        let x = ((step - self.warmup) as f64 / span).min(1.0);
        let (f, shape) = match self.decay {
            Decay::Constant => return 1.0,
            Decay::Cosine { final_factor } => (
                final_factor,
                0.5 * (1.0 + libm::cos(core::f64::consts::PI * x)),
            ),
            Decay::Polynomial {
                power,
                final_factor,
            } => (final_factor, libm::pow(1.0 - x, f64::from(power))),
        };
        let f = f64::from(f);
        (f + (1.0 - f) * shape) as f32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings, schedules and the step counter survive a JSON round trip.
    #[cfg(feature = "serde")]
    #[test]
    fn state_round_trips_through_serde() {
        use crate::optim::{AdamWConfig, OptimizerConfig, StepCounter};
        let config = OptimizerConfig::from(AdamWConfig {
            amsgrad: true,
            ..AdamWConfig::default()
        });
        let schedule = LrSchedule {
            warmup: 3,
            decay: Decay::Polynomial {
                power: 2.0,
                final_factor: 0.5,
            },
            total: 9,
        };
        let saved = (config, schedule, StepCounter::resumed(12));
        let text = serde_json::to_string(&saved).unwrap();
        let back: (OptimizerConfig, LrSchedule, StepCounter) = serde_json::from_str(&text).unwrap();
        assert_eq!(back, saved);
    }

    #[test]
    fn polynomial_decay_is_linear_at_power_one_and_holds_its_end() {
        let s = LrSchedule {
            warmup: 0,
            decay: Decay::Polynomial {
                power: 1.0,
                final_factor: 0.1,
            },
            total: 10,
        };
        assert_eq!(s.factor(0), 1.0);
        assert_eq!(s.factor(5), 0.55);
        assert_eq!(s.factor(10), 0.1);
        assert_eq!(s.factor(1000), 0.1);
        assert!(s.validate().is_ok());
        let bad = LrSchedule {
            decay: Decay::Polynomial {
                power: 0.0,
                final_factor: 0.1,
            },
            ..s
        };
        assert!(bad.validate().is_err());
    }
}
