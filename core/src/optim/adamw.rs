//! AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization",
//! ICLR 2019) with PyTorch's `AdamW` semantics and defaults.

use crate::fp::Element;

use super::drive::{self, Update};
use super::error::{ConfigError, non_negative, unit};
use super::real::Real;
use super::{Param, Precision, Step, bias_correction};

/// AdamW's hyperparameters; `Default` is PyTorch's.
///
/// Per element, in f32, with `g` already multiplied by the step's
/// `grad_scale` and `bc = 1 - b^t`:
///
/// ```text
/// w = w (1 - lr wd)
/// m = b1 m + (1 - b1) g
/// v = b2 v + (1 - b2) (g g)
/// w = w - (lr / bc1) (m / (sqrt(v) c2 + eps))          c2 = 1 / sqrt(bc2)
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// Learning rate (default 1e-3).
    pub lr: f32,
    /// `(b1, b2)`, each in `[0, 1)` (default (0.9, 0.999)).
    pub betas: (f32, f32),
    /// Added to the denominator (default 1e-8).
    pub eps: f32,
    /// Decoupled weight decay (default 0.01).
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.01,
        }
    }
}

impl AdamWConfig {
    /// The same settings without weight decay (for biases and
    /// normalisation parameters).
    #[must_use]
    pub const fn excluded(self) -> Self {
        Self {
            weight_decay: 0.0,
            ..self
        }
    }
}

/// A validated AdamW optimizer for one parameter group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamW {
    config: AdamWConfig,
}

impl AdamW {
    /// Validates `config`.
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first field that is NaN, infinite or out
    /// of range (`lr`, `eps`, `weight_decay` >= 0; betas in `[0, 1)`).
    pub fn new(config: AdamWConfig) -> Result<Self, ConfigError> {
        non_negative("lr", config.lr)?;
        unit("betas.0", config.betas.0)?;
        unit("betas.1", config.betas.1)?;
        non_negative("eps", config.eps)?;
        non_negative("weight_decay", config.weight_decay)?;
        Ok(Self { config })
    }

    /// The validated settings.
    #[must_use]
    pub const fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// Updates a parameter (or any piece of one). State: `[m, v]`.
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn step<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
    ) {
        drive::apply(&self.update(step), p, precision, step.t, false);
    }

    /// The scalar twin of [`AdamW::step`].
    pub fn step_scalar<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
    ) {
        drive::apply(&self.update(step), p, precision, step.t, true);
    }

    fn update(&self, step: Step) -> Apply {
        let c = &self.config;
        let (b1, b2) = c.betas;
        Apply {
            grad_scale: step.grad_scale,
            // torch.optim.AdamW's `param.mul_(1 - lr * weight_decay)`
            // (torch/optim/adamw.py), the factor a Python float (f64)
            // rounded once to f32.
            decay: (1.0 - f64::from(c.lr) * f64::from(c.weight_decay)) as f32,
            b1,
            c1: 1.0 - b1,
            b2,
            c2: 1.0 - b2,
            inv_bc2_sqrt: (1.0 / libm::sqrt(bias_correction(b2, step.t))) as f32,
            eps: c.eps,
            step_size: (f64::from(c.lr) / bias_correction(b1, step.t)) as f32,
        }
    }
}

struct Apply {
    grad_scale: f32,
    decay: f32,
    b1: f32,
    c1: f32,
    b2: f32,
    c2: f32,
    inv_bc2_sqrt: f32,
    eps: f32,
    step_size: f32,
}

impl Update<2> for Apply {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, g: T, [m, v]: [T; 2]) -> (T, [T; 2]) {
        let g = g * T::splat(self.grad_scale);
        let w = w * T::splat(self.decay);
        let m = T::splat(self.b1) * m + T::splat(self.c1) * g;
        let v = T::splat(self.b2) * v + T::splat(self.c2) * (g * g);
        let denom = v.sqrt() * T::splat(self.inv_bc2_sqrt) + T::splat(self.eps);
        (w - T::splat(self.step_size) * (m / denom), [m, v])
    }
}
