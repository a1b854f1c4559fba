//! LAMB (You et al., "Large Batch Optimization for Deep Learning: Training
//! BERT in 76 minutes", arXiv 1904.00962), with the options of timm's
//! `Lamb`, PopART's `LAMB` and torch-optimizer's `Lamb` as explicit flags.

use crate::fp::Element;

use super::drive::{self, Fused, Terms, Update};
use super::error::{ConfigError, check, non_negative, unit};
use super::real::Real;
use super::{Norms, Param, Partials, Precision, Step, bias_correction};

/// LAMB's hyperparameters. `Default` is timm's `Lamb` (except its global
/// gradient clip, which spans all parameters: see [`super::clip_scale`]).
///
/// Per element, in f32, with `g` already multiplied by the step's
/// `grad_scale`:
///
/// ```text
/// m = b1 m + b3 g                      b3 = 1 - b1 with grad_averaging, else 1
/// v = b2 v + (1 - b2) (g g)
/// r = (m c1) / (sqrt(v) c2 + eps)     c1 = 1 / bc1, c2 = 1 / sqrt(bc2), bc = 1 - b^t
///                                      (bc = 1 without bias_correction)
/// w' = w + (-lr wd) w  if decoupled_decay, else w
/// u = r + wd w'         unless decoupled_decay or wd = 0
/// w = w' - lr (u ratio)
/// ```
///
/// and per tensor `ratio = phi(||w'||) / ||u||` with `phi(z) = clamp(z,
/// min_weight_norm, max_weight_norm)`; the ratio is 1 when either norm is
/// 0, when `max_weight_norm` is 0 (PopART's way to turn it off, used for
/// biases), or when `weight_decay` is 0 and `always_adapt` is off (timm);
/// with `trust_clip` it is at most 1.
#[derive(Clone, Copy, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct LambConfig {
    /// Learning rate (default 1e-3).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub lr: f32,
    /// `(b1, b2)`, each in `[0, 1)` (default (0.9, 0.999)).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub betas: (f32, f32),
    /// Added to the denominator (default 1e-6, timm; PopART uses 1e-6 too).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub eps: f32,
    /// Weight decay (default 0.01).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub weight_decay: f32,
    /// Divide the moments by `1 - b^t` (default on; off in torch-optimizer).
    pub bias_correction: bool,
    /// Scale the gradient by `1 - b1` in the first moment (default on).
    pub grad_averaging: bool,
    /// Decay the weights directly (`w += (-lr wd) w`) instead of adding
    /// `wd w` to the update (default off).
    pub decoupled_decay: bool,
    /// Adapt (apply the trust ratio) even when `weight_decay` is 0 (default
    /// off: timm gives such groups ratio 1).
    pub always_adapt: bool,
    /// Clip the trust ratio at 1 (default off).
    pub trust_clip: bool,
    /// Lower clamp of `||w||` in the ratio (default 0).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub min_weight_norm: f32,
    /// Upper clamp of `||w||` in the ratio; 0 disables the ratio (default
    /// infinity; PopART uses 65500, torch-optimizer 10).
    #[cfg_attr(feature = "serde", serde(with = "crate::exact"))]
    pub max_weight_norm: f32,
}

impl Default for LambConfig {
    fn default() -> Self {
        Self {
            lr: 1e-3,
            betas: (0.9, 0.999),
            eps: 1e-6,
            weight_decay: 0.01,
            bias_correction: true,
            grad_averaging: true,
            decoupled_decay: false,
            always_adapt: false,
            trust_clip: false,
            min_weight_norm: 0.0,
            max_weight_norm: f32::INFINITY,
        }
    }
}

impl LambConfig {
    /// The same settings for parameters excluded from weight decay and
    /// adaptation (biases, normalisation): `weight_decay` 0, `always_adapt`
    /// off, `max_weight_norm` 0, so the update is Adam's.
    ///
    /// ```
    /// use tessera_core::optim::LambConfig;
    ///
    /// let bias = LambConfig::default().excluded();
    /// assert_eq!(bias.weight_decay, 0.0);
    /// ```
    #[must_use]
    pub const fn excluded(self) -> Self {
        Self {
            weight_decay: 0.0,
            always_adapt: false,
            max_weight_norm: 0.0,
            ..self
        }
    }
}

/// A validated LAMB optimizer for one parameter group.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Lamb {
    config: LambConfig,
}

impl Lamb {
    /// Validates `config`.
    ///
    /// ```
    /// use tessera_core::optim::{Lamb, LambConfig};
    ///
    /// assert!(Lamb::new(LambConfig::default()).is_ok());
    /// assert!(Lamb::new(LambConfig { eps: f32::NAN, ..LambConfig::default() }).is_err());
    /// ```
    ///
    /// # Errors
    /// A [`ConfigError`] naming the first field that is NaN, infinite where
    /// it must be finite, or out of range (`lr`, `eps`, `weight_decay`,
    /// `min_weight_norm` >= 0; betas in `[0, 1)`; `min_weight_norm <=
    /// max_weight_norm` unless the latter is 0).
    pub fn new(config: LambConfig) -> Result<Self, ConfigError> {
        non_negative("lr", config.lr)?;
        unit("betas.0", config.betas.0)?;
        unit("betas.1", config.betas.1)?;
        non_negative("eps", config.eps)?;
        non_negative("weight_decay", config.weight_decay)?;
        non_negative("min_weight_norm", config.min_weight_norm)?;
        check(
            "max_weight_norm",
            config.max_weight_norm,
            0.0,
            f32::INFINITY,
            false,
        )?;
        if config.max_weight_norm != 0.0 && config.min_weight_norm > config.max_weight_norm {
            return Err(ConfigError::Conflict {
                reason: "min_weight_norm is above max_weight_norm",
            });
        }
        Ok(Self { config })
    }

    /// The validated settings.
    ///
    /// ```
    /// use tessera_core::optim::{Lamb, LambConfig};
    ///
    /// assert_eq!(Lamb::new(LambConfig::default())?.config().eps, 1e-6);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub const fn config(&self) -> &LambConfig {
        &self.config
    }

    /// Phase 1 over a piece starting at a multiple of
    /// [`BLOCK`](crate::kernels::BLOCK): the partial sums of `||w'||^2`,
    /// `||g||^2` and `||u||^2`.
    ///
    /// ```
    /// use tessera_core::kernels::BLOCK;
    /// use tessera_core::optim::{Lamb, LambConfig, Param, Partials, Precision, Step};
    ///
    /// // A tensor owned by two tiles: each runs phase 1 on its piece, the
    /// // partials merge, and each applies phase 2 with the totals.
    /// let lamb = Lamb::new(LambConfig::default())?;
    /// let n = 2 * BLOCK;
    /// let (mut w, g) = (vec![0.5f32; n], vec![0.1f32; n]);
    /// let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    /// let (step, precision) = (Step::first(), Precision::default());
    /// let (mut w_whole, mut m_whole, mut v_whole) = (w.clone(), m.clone(), v.clone());
    /// lamb.step(step, &precision, &mut Param::new(0, &mut w_whole, &g, [&mut m_whole, &mut v_whole]));
    ///
    /// let ((w0, w1), (m0, m1), (v0, v1)) = (w.split_at_mut(BLOCK), m.split_at_mut(BLOCK), v.split_at_mut(BLOCK));
    /// let mut p0 = Param::new(0, w0, &g[..BLOCK], [m0, v0]);
    /// let mut p1 = Param::new(0, w1, &g[BLOCK..], [m1, v1]).at_offset(BLOCK as u64);
    /// let mut totals: Partials = lamb.partials(step, &p0);
    /// totals.merge(&lamb.partials(step, &p1));
    /// lamb.apply(step, &totals, &precision, &mut p0);
    /// lamb.apply(step, &totals, &precision, &mut p1);
    /// assert_eq!(w, w_whole);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If the slices differ in length or the offset is not block-aligned.
    #[must_use]
    pub fn partials<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        p: &Param<'_, W, G, S, 2>,
    ) -> Partials {
        self.partials_on(step, p, false)
    }

    /// Phase 2: updates a piece given the whole tensor's merged partials.
    ///
    /// ```
    /// use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
    ///
    /// let lamb = Lamb::new(LambConfig::default())?;
    /// let (mut w, g, mut m, mut v) = ([1.0f32; 8], [0.5f32; 8], [0.0f32; 8], [0.0f32; 8]);
    /// let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
    /// let totals = lamb.partials(Step::first(), &p);
    /// lamb.apply(Step::first(), &totals, &Precision::default(), &mut p);
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
        p: &mut Param<'_, W, G, S, 2>,
    ) {
        self.apply_on(step, totals, precision, p, false);
    }

    /// Both phases over one whole tensor.
    ///
    /// ```
    /// use tessera_core::fp::f16;
    /// use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
    ///
    /// // f16 weights without a master copy, stochastically rounded.
    /// let lamb = Lamb::new(LambConfig { lr: 0.01, ..LambConfig::default() })?;
    /// let (mut w, g) = (vec![f16::ONE; 64], vec![0.5f32; 64]);
    /// let (mut m, mut v) = (vec![0.0f32; 64], vec![0.0f32; 64]);
    /// lamb.step(Step::first(), &Precision::default(), &mut Param::new(0, &mut w, &g, [&mut m, &mut v]));
    /// assert!(w.iter().all(|x| *x < f16::ONE));
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If the slices differ in length or `p.offset` is not block-aligned.
    pub fn step<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
    ) {
        let totals = self.partials(step, p);
        self.apply(step, &totals, precision, p);
    }

    /// Phase 1, fused with the state update: stores the new moments `m`,
    /// `v` (rounded as `precision.state` says) and the update `u` before the
    /// trust ratio into `update`, and returns the same partials as
    /// [`Lamb::partials`]. Finish with [`Lamb::apply_update`]. The moments
    /// are written here, so run it once per step; the results are bitwise
    /// those of [`Lamb::partials`] followed by [`Lamb::apply`], with the
    /// element formula computed once instead of twice (it is bound by one
    /// division and one square root per element).
    ///
    /// ```
    /// use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
    ///
    /// let lamb = Lamb::new(LambConfig::default())?;
    /// let (step, precision) = (Step::first(), Precision::default());
    /// let (mut w, g, mut m, mut v) = ([1.0f32; 8], [0.5f32; 8], [0.0f32; 8], [0.0f32; 8]);
    /// let (mut w2, mut m2, mut v2) = (w, m, v);
    /// lamb.step(step, &precision, &mut Param::new(0, &mut w2, &g, [&mut m2, &mut v2]));
    /// let mut update = [0.0f32; 8];
    /// let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
    /// let totals = lamb.partials_into(step, &precision, &mut p, &mut update);
    /// lamb.apply_update(step, &totals, &precision, &mut p, &update);
    /// assert_eq!(w, w2); // bitwise the two-phase step
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If the slices or `update` differ in length, or the offset is not
    /// block-aligned.
    pub fn partials_into<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
        update: &mut [f32],
    ) -> Partials {
        self.partials_into_on(step, precision, p, update, false)
    }

    /// Phase 2 after [`Lamb::partials_into`]: `w = w' - lr (u ratio)` from
    /// the stored update; the state is not touched.
    ///
    /// ```
    /// use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
    ///
    /// let lamb = Lamb::new(LambConfig::default())?;
    /// let (mut w, g, mut m, mut v) = ([1.0f32; 4], [0.5f32; 4], [0.0f32; 4], [0.0f32; 4]);
    /// let mut update = [0.0f32; 4];
    /// let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
    /// let totals = lamb.partials_into(Step::first(), &Precision::default(), &mut p, &mut update);
    /// lamb.apply_update(Step::first(), &totals, &Precision::default(), &mut p, &update);
    /// assert!(w[0] < 1.0);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    ///
    /// # Panics
    /// If `update` and the weights differ in length.
    pub fn apply_update<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        totals: &Partials,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
        update: &[f32],
    ) {
        self.finish(step, totals, precision, p, update, false);
    }

    pub(super) fn partials_on<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        p: &Param<'_, W, G, S, 2>,
        scalar: bool,
    ) -> Partials {
        drive::partials(&self.coefficients(step), p, scalar)
    }

    pub(super) fn apply_on<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        totals: &Partials,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
        scalar: bool,
    ) {
        let update = self.update(step, totals.norms());
        drive::apply(&update, p, precision, step.t, scalar);
    }

    pub(super) fn partials_into_on<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
        update: &mut [f32],
        scalar: bool,
    ) -> Partials {
        let c = self.coefficients(step);
        drive::partials_into(&c, p, update, precision, step.t, scalar)
    }

    pub(super) fn finish<W: Element, G: Element, S: Element>(
        &self,
        step: Step,
        totals: &Partials,
        precision: &Precision,
        p: &mut Param<'_, W, G, S, 2>,
        update: &[f32],
        scalar: bool,
    ) {
        let apply = self.update(step, totals.norms());
        let mut finish: Param<'_, W, f32, S, 0> = Param {
            weights: &mut *p.weights,
            grads: update,
            state: [],
            id: p.id,
            offset: p.offset,
        };
        drive::apply(&ApplyStored(apply), &mut finish, precision, step.t, scalar);
    }

    /// The trust ratio for a tensor with these norms.
    ///
    /// ```
    /// use tessera_core::optim::{Lamb, LambConfig, Norms};
    ///
    /// let lamb = Lamb::new(LambConfig::default())?;
    /// assert_eq!(lamb.trust_ratio(Norms { w: 3.0, g: 1.0, u: 6.0 }), 0.5);
    /// # Ok::<(), tessera_core::optim::ConfigError>(())
    /// ```
    #[must_use]
    pub fn trust_ratio(&self, norms: Norms) -> f32 {
        let c = &self.config;
        let adapt = (c.weight_decay != 0.0 || c.always_adapt) && c.max_weight_norm != 0.0;
        if !adapt {
            return 1.0;
        }
        let w = norms.w.clamp(c.min_weight_norm, c.max_weight_norm);
        let ratio = if w > 0.0 && norms.u > 0.0 {
            w / norms.u
        } else {
            1.0
        };
        if c.trust_clip { ratio.min(1.0) } else { ratio }
    }

    fn coefficients(&self, step: Step) -> Coefficients {
        let c = &self.config;
        let (b1, b2) = c.betas;
        let (bc1, bc2) = if c.bias_correction {
            (bias_correction(b1, step.t), bias_correction(b2, step.t))
        } else {
            (1.0, 1.0)
        };
        let decoupled = c.decoupled_decay && c.weight_decay != 0.0;
        let lr = step.lr(c.lr);
        Coefficients {
            grad_scale: step.grad_scale,
            b1,
            b3: if c.grad_averaging { 1.0 - b1 } else { 1.0 },
            b2,
            c2: 1.0 - b2,
            inv_bc1: (1.0 / bc1) as f32,
            inv_bc2_sqrt: (1.0 / libm::sqrt(bc2)) as f32,
            eps: c.eps,
            // timm's `p.add_(p, alpha=-lr * weight_decay)` (timm/optim/lamb.py),
            // `-lr wd` a Python float (f64) rounded once to f32: `w (1 - lr
            // wd)` with `1 - lr wd` rounded instead drifts by that rounding
            // every step (-1.7e-4 relative after 10^4 steps at lr wd = 1e-4).
            decay: decoupled.then(|| (-(f64::from(lr) * f64::from(c.weight_decay))) as f32),
            coupled_wd: (!c.decoupled_decay && c.weight_decay != 0.0).then_some(c.weight_decay),
        }
    }

    fn update(&self, step: Step, norms: Norms) -> Apply {
        Apply {
            c: self.coefficients(step),
            lr: step.lr(self.config.lr),
            ratio: self.trust_ratio(norms),
        }
    }
}

/// The per-step constants of the element formula.
#[derive(Clone, Copy, Debug)]
struct Coefficients {
    grad_scale: f32,
    b1: f32,
    b3: f32,
    b2: f32,
    c2: f32,
    inv_bc1: f32,
    inv_bc2_sqrt: f32,
    eps: f32,
    /// `-lr wd` for decoupled decay.
    decay: Option<f32>,
    coupled_wd: Option<f32>,
}

impl Coefficients {
    /// The element formula up to the update.
    #[inline(always)]
    fn moments<T: Real>(&self, w: T, g: T, m: T, v: T) -> Moments<T> {
        let g = g * T::splat(self.grad_scale);
        let m = T::splat(self.b1) * m + T::splat(self.b3) * g;
        let v = T::splat(self.b2) * v + T::splat(self.c2) * (g * g);
        let denom = v.sqrt() * T::splat(self.inv_bc2_sqrt) + T::splat(self.eps);
        let r = (m * T::splat(self.inv_bc1)) / denom;
        let w = match self.decay {
            Some(decay) => w + T::splat(decay) * w,
            None => w,
        };
        let u = match self.coupled_wd {
            Some(wd) => r + T::splat(wd) * w,
            None => r,
        };
        Moments { g, w, m, v, u }
    }
}

/// One element's values after [`Coefficients::moments`].
struct Moments<T> {
    /// The scaled gradient.
    g: T,
    /// The weight after decoupled decay (`w'`).
    w: T,
    m: T,
    v: T,
    /// The update before the trust ratio.
    u: T,
}

impl Terms<2> for Coefficients {
    #[inline(always)]
    fn terms<T: Real>(&self, w: T, g: T, [m, v]: [T; 2]) -> [T; 3] {
        let Moments { g, w, u, .. } = self.moments(w, g, m, v);
        [w * w, g * g, u * u]
    }
}

/// Phase 2's element formula.
struct Apply {
    c: Coefficients,
    lr: f32,
    ratio: f32,
}

impl Update<2> for Apply {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, g: T, [m, v]: [T; 2]) -> (T, [T; 2]) {
        let Moments { w, m, v, u, .. } = self.c.moments(w, g, m, v);
        (w - T::splat(self.lr) * (u * T::splat(self.ratio)), [m, v])
    }
}

impl Fused<2> for Coefficients {
    #[inline(always)]
    fn fused<T: Real>(&self, w: T, g: T, [m, v]: [T; 2]) -> ([T; 2], T, [T; 3]) {
        let Moments { g, w, m, v, u } = self.moments(w, g, m, v);
        ([m, v], u, [w * w, g * g, u * u])
    }
}

/// Phase 2's element formula with the update already computed: the
/// "gradient" lane carries `u`.
struct ApplyStored(Apply);

impl Update<0> for ApplyStored {
    #[inline(always)]
    fn update<T: Real>(&self, w: T, u: T, _: [T; 0]) -> (T, [T; 0]) {
        let Apply { c, lr, ratio } = &self.0;
        let w = match c.decay {
            Some(decay) => w + T::splat(decay) * w,
            None => w,
        };
        (w - T::splat(*lr) * (u * T::splat(*ratio)), [])
    }
}
