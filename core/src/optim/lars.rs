//! LARS (You, Gitman and Ginsburg, "Large Batch Training of Convolutional
//! Networks", arXiv 1708.03888) with timm's `Lars` options, including
//! LARC clipping.

use crate::fp::Element;

use super::drive::{self, Terms};
use super::error::{ConfigError, check, non_negative, unit};
use super::real::Real;
use super::sgd::{Decay, Momentum, SgdConfig, run_momentum};
use super::{Norms, Param, Partials, Precision, Step};

/// LARS's hyperparameters; `Default` is timm's `Lars`.
///
/// Per tensor, when `weight_decay != 0` or `always_adapt`:
///
/// ```text
/// ratio = trust_coeff ||w|| / (||g|| + ||w|| wd + eps)   (1 if either norm is 0)
/// ratio = min(ratio / lr, 1)                            with trust_clip (LARC)
/// ```
///
/// and per element `d = (g + wd w) ratio` (otherwise `d = g`), followed by
/// momentum SGD on `d` exactly as [`super::Sgd`]: `buf = momentum buf + (1 -
/// dampening) d` (`buf = d` on step 1), `w = w - lr buf` (or Nesterov's).
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LarsConfig {
    /// Learning rate (default 1.0).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub lr: f32,
    /// Momentum in `[0, 1)` (default 0).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub momentum: f32,
    /// Dampening in `[0, 1]` (default 0).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub dampening: f32,
    /// Weight decay (default 0).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub weight_decay: f32,
    /// Nesterov momentum (default off).
    pub nesterov: bool,
    /// The trust coefficient `eta` (default 0.001).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub trust_coeff: f32,
    /// Added to the ratio's denominator (default 1e-8).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub eps: f32,
    /// LARC: clip the ratio to `min(ratio / lr, 1)` (default off).
    pub trust_clip: bool,
    /// Adapt even when `weight_decay` is 0 (default off).
    pub always_adapt: bool,
}

impl Default for LarsConfig {
    fn default() -> Self {
        Self {
            lr: 1.0,
            momentum: 0.0,
            dampening: 0.0,
            weight_decay: 0.0,
            nesterov: false,
            trust_coeff: 0.001,
            eps: 1e-8,
            trust_clip: false,
            always_adapt: false,
        }
    }
}

impl LarsConfig {
    /// The same settings for parameters excluded from weight decay and
    /// adaptation (Graphcore's ResNet recipe excludes beta, gamma, bias).
    ///
    /// ```
    /// use tessera_core::optim::LarsConfig;
    ///
    /// let c = LarsConfig { weight_decay: 1e-4, ..LarsConfig::default() };
    /// assert_eq!(c.excluded().weight_decay, 0.0);
    /// ```
    #[must_use]
    pub const fn excluded(self) -> Self {
        Self {
            weight_decay: 0.0,
            always_adapt: false,
            ..self
        }
    }

    const fn sgd(&self) -> SgdConfig {
        SgdConfig {
            lr: self.lr,
            momentum: self.momentum,
            dampening: self.dampening,
            weight_decay: self.weight_decay,
            nesterov: self.nesterov,
            maximize: false,
        }
    }
}

/// A validated LARS optimizer for one parameter group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lars {
    config: LarsConfig,
}

impl Lars {
    /// Validates `config`.
    ///
    /// ```
    /// use tessera_core::optim::{Lars, LarsConfig};
    ///
    /// assert!(Lars::new(LarsConfig { momentum: 1.0, ..LarsConfig::default() }).is_err());
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first bad field (as [`super::Sgd::new`],
    /// plus `trust_coeff`, `eps` >= 0; LARC needs `lr > 0`).
    pub fn new(config: LarsConfig) -> Result<Self, ConfigError> {
        super::Sgd::new(config.sgd())?;
        unit("momentum", config.momentum)?;
        non_negative("trust_coeff", config.trust_coeff)?;
        non_negative("eps", config.eps)?;
        if config.trust_clip {
            check("lr", config.lr, f32::MIN_POSITIVE, f32::MAX, false)?;
        }
        Ok(Self { config })
    }

    /// The validated settings.
    ///
    /// ```
    /// use tessera_core::optim::{Lars, LarsConfig};
    ///
    /// assert_eq!(Lars::new(LarsConfig::default())?.config().trust_coeff, 0.001);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn config(&self) -> &LarsConfig {
        &self.config
    }

    /// Phase 1 over a block-aligned piece: partial sums of `||w||^2` and
    /// `||g||^2` (the update's sum is zero). State: `[momentum buffer]`.
    ///
    /// ```
    /// use tessera_core::optim::{Lars, LarsConfig, Param, Step};
    ///
    /// let lars = Lars::new(LarsConfig { weight_decay: 1e-4, ..LarsConfig::default() })?;
    /// let (mut w, g, mut buf) = ([3.0f32; 4], [4.0f32; 4], [0.0f32; 4]);
    /// let partials = lars.partials(Step::first(), &Param::new(0, &mut w, &g, [&mut buf]));
    /// assert_eq!(partials.norms().w, 6.0);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If the slices differ in length or the offset is not block-aligned.
    #[must_use]
    pub fn partials<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        p: &Param<'_, W, G, S, 1>,
    ) -> Partials {
        self.partials_on(step, p, false)
    }

    pub(super) fn partials_on<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        p: &Param<'_, W, G, S, 1>,
        scalar: bool,
    ) -> Partials {
        drive::partials(&Squares(step.grad_scale), p, scalar)
    }

    /// Phase 2: updates a piece given the whole tensor's merged partials.
    ///
    /// ```
    /// use tessera_core::optim::{Lars, LarsConfig, Param, Precision, Step};
    ///
    /// let lars = Lars::new(LarsConfig { weight_decay: 1e-4, ..LarsConfig::default() })?;
    /// let (mut w, g, mut buf) = ([1.0f32; 4], [0.5f32; 4], [0.0f32; 4]);
    /// let mut p = Param::new(0, &mut w, &g, [&mut buf]);
    /// let totals = lars.partials(Step::first(), &p);
    /// lars.apply(Step::first(), &totals, &Precision::default(), &mut p);
    /// assert!(w[0] < 1.0);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn apply<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        totals: &Partials,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 1>,
    ) {
        self.run(step, totals, precision, p, false);
    }

    /// Both phases over one whole tensor.
    ///
    /// ```
    /// use tessera_core::optim::{Lars, LarsConfig, Param, Precision, Step};
    ///
    /// let lars = Lars::new(LarsConfig { weight_decay: 1e-4, momentum: 0.9, ..LarsConfig::default() })?;
    /// let (mut w, g, mut buf) = ([1.0f32; 4], [0.5f32; 4], [0.0f32; 4]);
    /// lars.step(Step::first(), &Precision::default(), &mut Param::new(0, &mut w, &g, [&mut buf]));
    /// assert!(w[0] < 1.0 && buf[0] > 0.0);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If the slices differ in length or `p.offset` is not block-aligned.
    pub fn step<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 1>,
    ) {
        let totals = self.partials(step, p);
        self.apply(step, &totals, precision, p);
    }

    /// The trust ratio for a tensor with these norms at the configured
    /// learning rate, or `None` when the tensor is not adapted (no decay
    /// term either, as timm).
    ///
    /// ```
    /// use tessera_core::optim::{Lars, LarsConfig, Norms};
    ///
    /// let norms = Norms { w: 2.0, g: 1.0, u: 0.0 };
    /// assert_eq!(Lars::new(LarsConfig::default())?.trust_ratio(norms), None); // no decay: not adapted
    /// let decayed = Lars::new(LarsConfig { weight_decay: 0.5, eps: 0.0, ..LarsConfig::default() })?;
    /// assert_eq!(decayed.trust_ratio(norms), Some(0.001 * 2.0 / 2.0));
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub fn trust_ratio(&self, norms: Norms) -> Option<f32> {
        self.ratio_at(norms, self.config.lr)
    }

    fn ratio_at(&self, norms: Norms, lr: f32) -> Option<f32> {
        let c = &self.config;
        if c.weight_decay == 0.0 && !c.always_adapt {
            return None;
        }
        let (w, g) = (norms.w, norms.g);
        let ratio = if w > 0.0 && g > 0.0 {
            c.trust_coeff * w / (g + w * c.weight_decay + c.eps)
        } else {
            1.0
        };
        Some(if c.trust_clip {
            (ratio / lr).min(1.0)
        } else {
            ratio
        })
    }

    pub(super) fn run<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        totals: &Partials,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 1>,
        scalar: bool,
    ) {
        let ratio = self.ratio_at(totals.norms(), step.lr(self.config.lr));
        let decay = Decay {
            grad_scale: step.grad_scale,
            weight_decay: if ratio.is_some() {
                self.config.weight_decay
            } else {
                0.0
            },
            ratio: ratio.unwrap_or(1.0),
        };
        let momentum = Momentum::new(&self.config.sgd(), step);
        run_momentum(decay, momentum, step, precision, p, scalar);
    }
}

/// Phase 1's terms: `w^2` and `(g s)^2`.
struct Squares(f32);

impl Terms<1> for Squares {
    const READS_STATE: bool = false;

    #[inline(always)]
    fn terms<T: Real>(&self, w: T, g: T, _: [T; 1]) -> [T; 3] {
        let g = g * T::splat(self.0);
        [w * w, g * g, T::splat(0.0)]
    }
}
