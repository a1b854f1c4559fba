//! The scalar twins of the optimizers' kernels: the same element formula
//! on one lane throughout, with the same IEEE operations in the same
//! order. They define the kernels (the tests compare the two bit for bit)
//! and are kept off the optimizers' own surface.
//!
//! ```
//! use tessera_core::optim::{Param, Precision, Sgd, SgdConfig, Step, reference};
//!
//! let sgd = Sgd::new(SgdConfig::default())?;
//! let g = [1.0f32; 20];
//! let (mut fast, mut slow) = ([1.0f32; 20], [1.0f32; 20]);
//! let (mut b1, mut b2) = ([0.0f32; 20], [0.0f32; 20]);
//! let precision = Precision::default();
//! sgd.step(Step::first(), &precision, &mut Param::new(0, &mut fast, &g, [&mut b1]));
//! reference::sgd_step(&sgd, Step::first(), &precision, &mut Param::new(0, &mut slow, &g, [&mut b2]));
//! assert_eq!(fast, slow);
//! # Ok::<(), tessera_core::optim::ConfigError>(())
//! ```

use crate::fp::Element;

use super::{AdamW, Lamb, Lars, Param, Partials, Precision, Sgd, Step, StepError};

/// The twin of [`Sgd::step`].
///
/// ```
/// use tessera_core::optim::{reference, Sgd, SgdConfig, Param, Precision, Step};
///
/// let o = Sgd::new(SgdConfig { momentum: 0.9, ..SgdConfig::default() })?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, _], [a2, _]) = (&mut s1, &mut s2);
/// let (step, precision) = (Step::first(), Precision::default());
/// o.step(step, &precision, &mut Param::new(0, &mut w1, &g, [a1]));
/// reference::sgd_step(&o, step, &precision, &mut Param::new(0, &mut w2, &g, [a2]));
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
pub fn sgd_step<W: Element, G: Element, S: Element>(
    sgd: &Sgd,
    step: Step,
    precision: &Precision,
    p: &mut Param<'_, W, G, S, 1>,
) {
    sgd.run(step, precision, p, true);
}

/// The twin of [`AdamW::step`].
///
/// # Errors
/// As [`AdamW::step`].
///
/// ```
/// use tessera_core::optim::{reference, AdamW, AdamWConfig, Param, Precision, Step};
///
/// let o = AdamW::new(AdamWConfig::default())?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, b1], [a2, b2]) = (&mut s1, &mut s2);
/// let (step, precision) = (Step::first(), Precision::default());
/// o.step(step, &precision, &mut Param::new(0, &mut w1, &g, [a1, b1]))?;
/// reference::adamw_step(&o, step, &precision, &mut Param::new(0, &mut w2, &g, [a2, b2]))?;
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::StepError>(())
/// ```
pub fn adamw_step<W: Element, G: Element, S: Element, const N: usize>(
    adamw: &AdamW,
    step: Step,
    precision: &Precision,
    p: &mut Param<'_, W, G, S, N>,
) -> Result<(), StepError> {
    adamw.run(step, precision, p, true)
}

/// The twin of [`Lamb::partials`].
///
/// ```
/// use tessera_core::optim::{reference, Lamb, LambConfig, Param, Precision, Step};
///
/// let o = Lamb::new(LambConfig::default())?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, b1], [a2, b2]) = (&mut s1, &mut s2);
/// let step = Step::first();
/// let fast = o.partials(step, &Param::new(0, &mut w1, &g, [a1, b1]));
/// let slow = reference::lamb_partials(&o, step, &Param::new(0, &mut w2, &g, [a2, b2]));
/// assert_eq!(fast, slow);
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
#[must_use]
pub fn lamb_partials<W: Element, G: Element, S: Element>(
    lamb: &Lamb,
    step: Step,
    p: &Param<'_, W, G, S, 2>,
) -> Partials {
    lamb.partials_on(step, p, true)
}

/// The twin of [`Lamb::apply`].
///
/// ```
/// use tessera_core::optim::{reference, Lamb, LambConfig, Param, Precision, Step};
///
/// let o = Lamb::new(LambConfig::default())?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, b1], [a2, b2]) = (&mut s1, &mut s2);
/// let (step, precision) = (Step::first(), Precision::default());
/// let totals = o.partials(step, &Param::new(0, &mut w1, &g, [&mut *a1, &mut *b1]));
/// o.apply(step, &totals, &precision, &mut Param::new(0, &mut w1, &g, [a1, b1]));
/// reference::lamb_apply(&o, step, &totals, &precision, &mut Param::new(0, &mut w2, &g, [a2, b2]));
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
pub fn lamb_apply<W: Element, G: Element, S: Element>(
    lamb: &Lamb,
    step: Step,
    totals: &Partials,
    precision: &Precision,
    p: &mut Param<'_, W, G, S, 2>,
) {
    lamb.apply_on(step, totals, precision, p, true);
}

/// The twin of [`Lamb::partials_into`].
///
/// ```
/// use tessera_core::optim::{reference, Lamb, LambConfig, Param, Precision, Step};
///
/// let o = Lamb::new(LambConfig::default())?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, b1], [a2, b2]) = (&mut s1, &mut s2);
/// let (step, precision) = (Step::first(), Precision::default());
/// let (mut u1, mut u2) = (vec![0.0f32; 20], vec![0.0f32; 20]);
/// let fast = o.partials_into(step, &precision, &mut Param::new(0, &mut w1, &g, [a1, b1]), &mut u1);
/// let slow = reference::lamb_partials_into(&o, step, &precision, &mut Param::new(0, &mut w2, &g, [a2, b2]), &mut u2);
/// assert_eq!((fast, u1), (slow, u2));
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
pub fn lamb_partials_into<W: Element, G: Element, S: Element>(
    lamb: &Lamb,
    step: Step,
    precision: &Precision,
    p: &mut Param<'_, W, G, S, 2>,
    update: &mut [f32],
) -> Partials {
    lamb.partials_into_on(step, precision, p, update, true)
}

/// The twin of [`Lamb::apply_update`].
///
/// ```
/// use tessera_core::optim::{reference, Lamb, LambConfig, Param, Precision, Step};
///
/// let o = Lamb::new(LambConfig::default())?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, b1], [a2, b2]) = (&mut s1, &mut s2);
/// let (step, precision) = (Step::first(), Precision::default());
/// let mut u = vec![0.0f32; 20];
/// let totals = o.partials_into(step, &precision, &mut Param::new(0, &mut w1, &g, [&mut *a1, &mut *b1]), &mut u);
/// w2.clone_from(&w1);
/// a2.clone_from(a1);
/// b2.clone_from(b1);
/// o.apply_update(step, &totals, &precision, &mut Param::new(0, &mut w1, &g, [a1, b1]), &u);
/// reference::lamb_apply_update(&o, step, &totals, &precision, &mut Param::new(0, &mut w2, &g, [a2, b2]), &u);
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
pub fn lamb_apply_update<W: Element, G: Element, S: Element>(
    lamb: &Lamb,
    step: Step,
    totals: &Partials,
    precision: &Precision,
    p: &mut Param<'_, W, G, S, 2>,
    update: &[f32],
) {
    lamb.finish(step, totals, precision, p, update, true);
}

/// The twin of [`Lars::partials`].
///
/// ```
/// use tessera_core::optim::{reference, Lars, LarsConfig, Param, Precision, Step};
///
/// let o = Lars::new(LarsConfig { weight_decay: 1e-4, ..LarsConfig::default() })?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, _], [a2, _]) = (&mut s1, &mut s2);
/// let step = Step::first();
/// let fast = o.partials(step, &Param::new(0, &mut w1, &g, [a1]));
/// assert_eq!(fast, reference::lars_partials(&o, step, &Param::new(0, &mut w2, &g, [a2])));
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
#[must_use]
pub fn lars_partials<W: Element, G: Element, S: Element>(
    lars: &Lars,
    step: Step,
    p: &Param<'_, W, G, S, 1>,
) -> Partials {
    lars.partials_on(step, p, true)
}

/// The twin of [`Lars::apply`].
///
/// ```
/// use tessera_core::optim::{reference, Lars, LarsConfig, Param, Precision, Step};
///
/// let o = Lars::new(LarsConfig { weight_decay: 1e-4, ..LarsConfig::default() })?;
/// let g: Vec<f32> = (0..20).map(|i| i as f32 * 0.01).collect();
/// let (mut w1, mut w2) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// let mut s1 = [vec![0.0f32; 20], vec![0.0f32; 20]];
/// let mut s2 = s1.clone();
/// let ([a1, _], [a2, _]) = (&mut s1, &mut s2);
/// let (step, precision) = (Step::first(), Precision::default());
/// let totals = o.partials(step, &Param::new(0, &mut w1, &g, [&mut *a1]));
/// o.apply(step, &totals, &precision, &mut Param::new(0, &mut w1, &g, [a1]));
/// reference::lars_apply(&o, step, &totals, &precision, &mut Param::new(0, &mut w2, &g, [a2]));
/// assert_eq!((w1, s1), (w2, s2));
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
pub fn lars_apply<W: Element, G: Element, S: Element>(
    lars: &Lars,
    step: Step,
    totals: &Partials,
    precision: &Precision,
    p: &mut Param<'_, W, G, S, 1>,
) {
    lars.run(step, totals, precision, p, true);
}
