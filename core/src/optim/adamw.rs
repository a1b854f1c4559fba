//! AdamW (Loshchilov and Hutter, "Decoupled Weight Decay Regularization",
//! ICLR 2019) with PyTorch's `AdamW` semantics and defaults.

use crate::fp::Element;

use super::drive::{self, Update};
use super::error::{ConfigError, StepError, non_negative, unit};
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
/// v_max = max(v_max, v)                                 with amsgrad
/// w = w - (lr / bc1) (m / (sqrt(v) c2 + eps))          c2 = 1 / sqrt(bc2)
/// ```
///
/// with `v_max` in place of `v` in the last line under `amsgrad`, and `g`
/// negated first under `maximize` (both as `torch.optim.AdamW`).
///
/// ```
/// use tessera_core::optim::{AdamW, AdamWConfig, Param, Precision, Step};
///
/// let adamw = AdamW::new(AdamWConfig { amsgrad: true, ..AdamWConfig::default() })?;
/// let (mut w, g) = ([1.0f32; 4], [0.5f32; 4]);
/// let (mut m, mut v, mut v_max) = ([0.0f32; 4], [0.0f32; 4], [0.0f32; 4]);
/// let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v, &mut v_max]);
/// adamw.step(Step::first(), &Precision::default(), &mut p)?;
/// assert!(w[0] < 1.0 && v_max[0] == v[0]);
/// # Ok::<(), tessera_core::optim::StepError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct AdamWConfig {
    /// Learning rate (default 1e-3).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub lr: f32,
    /// `(b1, b2)`, each in `[0, 1)` (default (0.9, 0.999)).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub betas: (f32, f32),
    /// Added to the denominator (default 1e-8).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub eps: f32,
    /// Decoupled weight decay (default 0.01).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub weight_decay: f32,
    /// Divide by the running maximum of `v` (a third state tensor;
    /// default off).
    pub amsgrad: bool,
    /// Ascend the gradient instead of descending it (default off).
    pub maximize: bool,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-8,
            weight_decay: 0.01,
            amsgrad: false,
            maximize: false,
        }
    }
}

impl AdamWConfig {
    /// The same settings without weight decay (for biases and
    /// normalisation parameters).
    ///
    /// ```
    /// use tessera_core::optim::AdamWConfig;
    ///
    /// assert_eq!(AdamWConfig::default().excluded().weight_decay, 0.0);
    /// ```
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
    /// ```
    /// use tessera_core::optim::{AdamW, AdamWConfig};
    ///
    /// assert!(AdamW::new(AdamWConfig { betas: (0.9, 1.0), ..AdamWConfig::default() }).is_err());
    /// ```
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
    ///
    /// ```
    /// use tessera_core::optim::{AdamW, AdamWConfig};
    ///
    /// assert_eq!(AdamW::new(AdamWConfig::default())?.config().betas, (0.9, 0.999));
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn config(&self) -> &AdamWConfig {
        &self.config
    }

    /// The number of state tensors: `[m, v]`, or `[m, v, v_max]` with
    /// `amsgrad`.
    ///
    /// ```
    /// use tessera_core::optim::{AdamW, AdamWConfig};
    ///
    /// let amsgrad = AdamWConfig { amsgrad: true, ..AdamWConfig::default() };
    /// assert_eq!(AdamW::new(amsgrad)?.state_tensors(), 3);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn state_tensors(&self) -> usize {
        if self.config.amsgrad { 3 } else { 2 }
    }

    /// Updates a parameter (or any piece of one). State: `[m, v]`, or `[m,
    /// v, v_max]` with `amsgrad`.
    ///
    /// ```
    /// use tessera_core::optim::{AdamW, AdamWConfig, Param, Precision, Step, StepError};
    ///
    /// let amsgrad = AdamW::new(AdamWConfig { amsgrad: true, ..AdamWConfig::default() })?;
    /// let (mut w, g, mut m, mut v) = ([1.0f32; 4], [0.5f32; 4], [0.0f32; 4], [0.0f32; 4]);
    /// // Two state tensors where amsgrad keeps three: refused, nothing written.
    /// let e = amsgrad.step(Step::first(), &Precision::default(), &mut Param::new(3, &mut w, &g, [&mut m, &mut v]));
    /// assert_eq!(e, Err(StepError::StateTensors { id: 3, expected: 3, got: 2 }));
    /// assert_eq!(w, [1.0; 4]);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Errors
    /// [`StepError::StateTensors`] if `N` is not
    /// [`AdamW::state_tensors`]; then nothing is written.
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn step<W: Element, G: Element, S: Element, const N: usize>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, N>,
    ) -> Result<(), StepError> {
        self.run(step, precision, p, false)
    }

    pub(super) fn run<W: Element, G: Element, S: Element, const N: usize>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, N>,
        scalar: bool,
    ) -> Result<(), StepError> {
        let expected = self.state_tensors();
        if N != expected {
            let (id, got) = (p.id, N);
            return Err(StepError::StateTensors { id, expected, got });
        }
        let update = self.update(step);
        if !self.config.amsgrad {
            drive::apply(&update, &mut p.pick([0, 1]), precision, step.t, scalar);
            return Ok(());
        }
        // AMSGrad in three passes, as torch's: the moments, then `v_max =
        // maximum(v_max, v)` on the stored values, then the weights from
        // the stored `m` and `v_max` (the same values for f32 state).
        drive::apply(
            &Moments(&update),
            &mut p.pick([0, 1]),
            precision,
            step.t,
            scalar,
        );
        let (moments, rest) = p.state.split_at_mut(2);
        running_max(rest[0], moments[1]);
        drive::apply(
            &Finish(&update),
            &mut p.pick([0, 2]),
            precision,
            step.t,
            scalar,
        );
        Ok(())
    }

    fn update(&self, step: Step) -> Apply {
        let c = &self.config;
        let (b1, b2) = c.betas;
        let lr = step.lr(c.lr);
        Apply {
            grad_scale: signed(step.grad_scale, c.maximize),
            // torch.optim.AdamW's `param.mul_(1 - lr * weight_decay)`
            // (torch/optim/adamw.py), the factor a Python float (f64)
            // rounded once to f32.
            decay: (1.0 - f64::from(lr) * f64::from(c.weight_decay)) as f32,
            b1,
            c1: 1.0 - b1,
            b2,
            c2: 1.0 - b2,
            inv_bc2_sqrt: (1.0 / libm::sqrt(bias_correction(b2, step.t))) as f32,
            eps: c.eps,
            step_size: (f64::from(lr) / bias_correction(b1, step.t)) as f32,
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

impl Apply {
    /// `(w decayed, m, v)`: the formula up to the denominator.
    #[inline(always)]
    fn moments<T: Real>(&self, w: T, g: T, m: T, v: T) -> (T, T, T) {
        let g = g * T::splat(self.grad_scale);
        let w = w * T::splat(self.decay);
        let m = T::splat(self.b1) * m + T::splat(self.c1) * g;
        let v = T::splat(self.b2) * v + T::splat(self.c2) * (g * g);
        (w, m, v)
    }

    #[inline(always)]
    fn finish<T: Real>(&self, w: T, m: T, v: T) -> T {
        let denom = v.sqrt() * T::splat(self.inv_bc2_sqrt) + T::splat(self.eps);
        w - T::splat(self.step_size) * (m / denom)
    }
}

impl Update<2> for Apply {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, g: T, [m, v]: [T; 2]) -> (T, [T; 2]) {
        let (w, m, v) = self.moments(w, g, m, v);
        (self.finish(w, m, v), [m, v])
    }
}

/// AMSGrad's first pass: the moments only (the weights are stored back
/// unchanged, exactly).
struct Moments<'a>(&'a Apply);

impl Update<2> for Moments<'_> {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, g: T, [m, v]: [T; 2]) -> (T, [T; 2]) {
        let (_, m, v) = self.0.moments(w, g, m, v);
        (w, [m, v])
    }
}

/// AMSGrad's last pass: decay and step from `[m, v_max]` (stored back
/// unchanged, exactly).
struct Finish<'a>(&'a Apply);

impl Update<2> for Finish<'_> {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, _: T, [m, v_max]: [T; 2]) -> (T, [T; 2]) {
        let w = w * T::splat(self.0.decay);
        (self.0.finish(w, m, v_max), [m, v_max])
    }
}

/// `torch.maximum(v_max, v, out=v_max)`: NaN in either gives NaN.
fn running_max<S: Element>(v_max: &mut [S], v: &[S]) {
    assert_eq!(v_max.len(), v.len(), "AdamW: v_max and v differ in length");
    for (a, &b) in v_max.iter_mut().zip(v) {
        let (x, y) = (a.load(), b.load());
        if !x.is_nan() && (y.is_nan() || y > x) {
            *a = b;
        }
    }
}

/// The gradient multiplier with PyTorch's `maximize` (`-grad`): negating
/// the factor negates every product exactly.
pub(super) const fn signed(grad_scale: f32, maximize: bool) -> f32 {
    if maximize { -grad_scale } else { grad_scale }
}
