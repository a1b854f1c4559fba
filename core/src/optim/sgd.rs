//! SGD with momentum, dampening, Nesterov momentum and weight decay, with
//! PyTorch's `SGD` semantics.

use crate::fp::Element;

use super::drive::{self, Update};
use super::error::{ConfigError, non_negative, unit};
use super::real::Real;
use super::{Param, Precision, Step};

/// SGD's hyperparameters; `Default` is PyTorch's (with `lr` 1e-3).
///
/// Per element, in f32, with `g` already multiplied by the step's
/// `grad_scale`:
///
/// ```text
/// d = g + wd w                          (when wd != 0)
/// buf = d                               on step 1, else
/// buf = momentum buf + (1 - dampening) d
/// d = d + momentum buf  with nesterov, else d = buf    (when momentum != 0)
/// w = w - lr d
/// ```
///
/// with `g` negated first under `maximize` (as `torch.optim.SGD`).
///
/// ```
/// use tessera_core::optim::{Param, Precision, Sgd, SgdConfig, Step};
///
/// let sgd = Sgd::new(SgdConfig { lr: 0.1, momentum: 0.9, ..SgdConfig::default() })?;
/// let (mut w, g, mut buf) = ([1.0f32; 3], [0.5f32; 3], [0.0f32; 3]);
/// sgd.step(Step::first(), &Precision::default(), &mut Param::new(0, &mut w, &g, [&mut buf]));
/// assert_eq!(w, [0.95; 3]);
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SgdConfig {
    /// Learning rate (default 1e-3).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub lr: f32,
    /// Momentum in `[0, 1)` (default 0: no buffer is read or written).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub momentum: f32,
    /// Dampening in `[0, 1]` (default 0).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub dampening: f32,
    /// L2 weight decay added to the gradient (default 0).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub weight_decay: f32,
    /// Nesterov momentum (default off; needs momentum > 0 and dampening 0).
    pub nesterov: bool,
    /// Ascend the gradient instead of descending it (default off).
    pub maximize: bool,
}

impl Default for SgdConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            maximize: false,
        }
    }
}

impl SgdConfig {
    /// The same settings without weight decay.
    ///
    /// ```
    /// use tessera_core::optim::SgdConfig;
    ///
    /// let c = SgdConfig { weight_decay: 1e-4, ..SgdConfig::default() };
    /// assert_eq!(c.excluded().weight_decay, 0.0);
    /// ```
    #[must_use]
    pub const fn excluded(self) -> Self {
        Self {
            weight_decay: 0.0,
            ..self
        }
    }
}

/// A validated SGD optimizer for one parameter group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sgd {
    config: SgdConfig,
}

impl Sgd {
    /// Validates `config`.
    ///
    /// ```
    /// use tessera_core::optim::{Sgd, SgdConfig};
    ///
    /// assert!(Sgd::new(SgdConfig { nesterov: true, ..SgdConfig::default() }).is_err()); // needs momentum
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first bad field, or a conflict for
    /// Nesterov momentum without momentum or with dampening (as PyTorch).
    pub fn new(config: SgdConfig) -> Result<Self, ConfigError> {
        non_negative("lr", config.lr)?;
        unit("momentum", config.momentum)?;
        super::error::check("dampening", config.dampening, 0.0, 1.0, false)?;
        non_negative("weight_decay", config.weight_decay)?;
        if config.nesterov && (config.momentum == 0.0 || config.dampening != 0.0) {
            return Err(ConfigError::Conflict {
                reason: "Nesterov momentum requires a momentum and zero dampening",
            });
        }
        Ok(Self { config })
    }

    /// The validated settings.
    ///
    /// ```
    /// use tessera_core::optim::{Sgd, SgdConfig};
    ///
    /// assert_eq!(Sgd::new(SgdConfig::default())?.config().lr, 1e-3);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn config(&self) -> &SgdConfig {
        &self.config
    }

    /// Updates a parameter (or any piece of one). State: `[momentum
    /// buffer]`, untouched when momentum is 0.
    ///
    /// ```
    /// use tessera_core::optim::{Param, Precision, Sgd, SgdConfig, Step};
    ///
    /// let sgd = Sgd::new(SgdConfig { lr: 0.1, momentum: 0.9, ..SgdConfig::default() })?;
    /// let (mut w, g, mut buf) = ([1.0f32; 2], [0.5f32; 2], [0.0f32; 2]);
    /// sgd.step(Step::first(), &Precision::default(), &mut Param::new(0, &mut w, &g, [&mut buf]));
    /// assert_eq!((w, buf), ([0.95; 2], [0.5; 2]));
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn step<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 1>,
    ) {
        self.run(step, precision, p, false);
    }

    pub(super) fn run<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 1>,
        scalar: bool,
    ) {
        let c = &self.config;
        let d = Decay {
            grad_scale: super::adamw::signed(step.grad_scale, c.maximize),
            weight_decay: c.weight_decay,
            ratio: 1.0,
        };
        run_momentum(d, Momentum::new(c, step), step, precision, p, scalar);
    }
}

/// The gradient SGD and LARS feed to momentum: `(g s + wd w) ratio`, with
/// the decay term only when `weight_decay != 0` and the multiply only when
/// `ratio != 1` (PyTorch and timm skip them, which matters for signed zeros
/// and non-finite weights).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Decay {
    pub(crate) grad_scale: f32,
    pub(crate) weight_decay: f32,
    pub(crate) ratio: f32,
}

impl Decay {
    #[inline(always)]
    fn direction<T: Real>(&self, w: T, g: T) -> T {
        let g = g * T::splat(self.grad_scale);
        // torch.optim.SGD's `grad.add(param, alpha=weight_decay)`
        // (torch/optim/sgd.py) and timm's Lars `grad.add(p,
        // alpha=weight_decay).mul_(trust_ratio)` (timm/optim/lars.py):
        // ATen's add is `g + wd w` (unfused, as every path here).
        let d = if self.weight_decay != 0.0 {
            g + T::splat(self.weight_decay) * w
        } else {
            g
        };
        if self.ratio != 1.0 {
            d * T::splat(self.ratio)
        } else {
            d
        }
    }
}

/// Momentum SGD's constants for one step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Momentum {
    lr: f32,
    momentum: f32,
    keep: f32,
    nesterov: bool,
    first: bool,
}

impl Momentum {
    pub(crate) fn new(c: &SgdConfig, step: Step) -> Self {
        Self {
            lr: step.lr(c.lr),
            momentum: c.momentum,
            keep: 1.0 - c.dampening,
            nesterov: c.nesterov,
            first: step.t == 1,
        }
    }
}

struct WithBuffer(Decay, Momentum);

impl Update<1> for WithBuffer {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, g: T, [buf]: [T; 1]) -> (T, [T; 1]) {
        let Self(decay, m) = self;
        let d = decay.direction(w, g);
        let buf = if m.first {
            d
        } else {
            T::splat(m.momentum) * buf + T::splat(m.keep) * d
        };
        let d = if m.nesterov {
            d + T::splat(m.momentum) * buf
        } else {
            buf
        };
        (w - T::splat(m.lr) * d, [buf])
    }
}

struct Plain(Decay, f32);

impl Update<0> for Plain {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, g: T, _: [T; 0]) -> (T, [T; 0]) {
        (w - T::splat(self.1) * self.0.direction(w, g), [])
    }
}

/// Runs momentum SGD on the direction `d`; without momentum the buffer is
/// neither read nor written.
pub(crate) fn run_momentum<W: Element, G: Element, S: Element>(
    d: Decay,
    m: Momentum,
    step: Step,
    precision: &Precision,
    p: &mut Param<'_, W, G, S, 1>,
    scalar: bool,
) {
    if m.momentum == 0.0 {
        let mut plain: Param<'_, W, G, S, 0> = Param {
            weights: &mut *p.weights,
            grads: p.grads,
            state: [],
            id: p.id,
            offset: p.offset,
        };
        drive::apply(&Plain(d, m.lr), &mut plain, precision, step.t, scalar);
    } else {
        drive::apply(&WithBuffer(d, m), p, precision, step.t, scalar);
    }
}
