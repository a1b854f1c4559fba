//! The owned-state convenience (`alloc`): parameter groups as data, the
//! state tensors and the step counter kept inside, global clipping as an
//! option, one call per step.

use alloc::vec::Vec;

use half::{bf16, f16};

use crate::fp::Element;
use crate::scale::StepDecision;

use super::error::{StepError, check};
use super::{GradNorm, Optimizer, OptimizerConfig, Param, Precision, Step, StepCounter};

/// One parameter group: its settings and its parameters' ids and lengths.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub struct Group {
    /// The group's hyperparameters.
    pub config: OptimizerConfig,
    /// `(id, length)` of each parameter; the id addresses its random bits.
    pub params: Vec<(u64, usize)>,
}

/// A parameter's weights in any storage format.
#[derive(Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub enum Weights<'a> {
    /// f32 (or an f32 master copy).
    F32(&'a mut [f32]),
    /// f16 without a master copy.
    F16(&'a mut [f16]),
    /// bf16 without a master copy.
    Bf16(&'a mut [bf16]),
}

/// A parameter's gradients in any storage format.
#[derive(Clone, Copy, Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub enum Grads<'a> {
    /// f32.
    F32(&'a [f32]),
    /// f16.
    F16(&'a [f16]),
    /// bf16.
    Bf16(&'a [bf16]),
}

macro_rules! from_slices {
    ($($t:ty => $v:ident),*) => {$(
        impl<'a> From<&'a mut [$t]> for Weights<'a> {
            fn from(w: &'a mut [$t]) -> Self {
                Self::$v(w)
            }
        }
        impl<'a> From<&'a mut alloc::vec::Vec<$t>> for Weights<'a> {
            fn from(w: &'a mut alloc::vec::Vec<$t>) -> Self {
                Self::$v(w)
            }
        }
        impl<'a> From<&'a [$t]> for Grads<'a> {
            fn from(g: &'a [$t]) -> Self {
                Self::$v(g)
            }
        }
        impl<'a> From<&'a alloc::vec::Vec<$t>> for Grads<'a> {
            fn from(g: &'a alloc::vec::Vec<$t>) -> Self {
                Self::$v(g)
            }
        }
    )*};
}
from_slices!(f32 => F32, f16 => F16, bf16 => Bf16);

/// One parameter of a step: its id, weights and gradients.
#[derive(Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub struct Tensor<'a> {
    /// The id it was registered with in its [`Group`].
    pub id: u64,
    /// The weights, updated in place.
    pub weights: Weights<'a>,
    /// The gradients (unscaled by any loss scale).
    pub grads: Grads<'a>,
}

impl<'a> Tensor<'a> {
    /// Parameter `id` with these weights and gradients.
    ///
    /// ```
    /// use tessera_core::fp::f16;
    /// use tessera_core::optim::{Grads, Tensor, Weights};
    ///
    /// let mut w = vec![f16::ONE; 4];
    /// let g = vec![0.5f32; 4];
    /// let t = Tensor::new(3, &mut w, &g); // f16 weights, f32 gradients
    /// assert!(matches!((t.id, &t.weights, &t.grads), (3, Weights::F16(_), Grads::F32(_))));
    /// ```
    pub fn new(id: u64, weights: impl Into<Weights<'a>>, grads: impl Into<Grads<'a>>) -> Self {
        Self {
            id,
            weights: weights.into(),
            grads: grads.into(),
        }
    }

    fn len(&self) -> (usize, usize) {
        let w = match &self.weights {
            Weights::F32(w) => w.len(),
            Weights::F16(w) => w.len(),
            Weights::Bf16(w) => w.len(),
        };
        let g = match self.grads {
            Grads::F32(g) => g.len(),
            Grads::F16(g) => g.len(),
            Grads::Bf16(g) => g.len(),
        };
        (w, g)
    }
}

/// An optimizer that owns its state: f32 state tensors per parameter and
/// the step counter, for groups of parameters with their own settings,
/// with an optional global gradient-norm clip over all of them (timm's
/// `max_grad_norm`).
///
/// ```
/// use tessera_core::optim::{Group, LambConfig, OwnedOptimizer, Tensor};
///
/// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(0, 4), (1, 2)] }];
/// let mut opt = OwnedOptimizer::new(groups)?.with_max_grad_norm(1.0)?;
/// let (mut w0, mut w1) = (vec![1.0f32; 4], vec![half::f16::ONE; 2]);
/// let (g0, g1) = (vec![0.5f32; 4], vec![0.5f32; 2]);
/// opt.step(1.0, &mut [Tensor::new(0, &mut w0, &g0), Tensor::new(1, &mut w1, &g1)])?;
/// assert_eq!(opt.applied_steps(), 1);
/// assert!(w0[0] < 1.0 && w1[0] < half::f16::ONE);
/// # Ok::<(), tessera_core::optim::StepError>(())
/// ```
///
/// Its whole state is a [`StateDict`] ([`state_dict`](Self::state_dict),
/// [`load_state_dict`](Self::load_state_dict)); with the `serde` feature
/// the optimizer itself serializes as its state dict, and a run resumed
/// from one continues bitwise.
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(try_from = "StateDict", into = "StateDict")
)]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub struct OwnedOptimizer {
    groups: Vec<(Optimizer, Vec<(u64, usize)>)>,
    precision: Precision,
    max_grad_norm: Option<f32>,
    counter: StepCounter,
    /// Per parameter (in group order): its id and state tensors.
    state: Vec<(u64, Vec<Vec<f32>>)>,
}

/// Everything an [`OwnedOptimizer`] holds: its settings, its step counter
/// and every parameter's state tensors (PyTorch's `state_dict`).
///
/// ```
/// use tessera_core::optim::{AdamWConfig, Group, OwnedOptimizer};
///
/// let groups = vec![Group { config: AdamWConfig::default().into(), params: vec![(7, 3)] }];
/// let dict = OwnedOptimizer::new(groups)?.state_dict();
/// assert_eq!((dict.state[0].id, dict.state[0].tensors.len()), (7, 2));
/// assert_eq!(OwnedOptimizer::from_state_dict(dict.clone())?.state_dict(), dict);
/// # Ok::<(), tessera_core::optim::StepError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub struct StateDict {
    /// The parameter groups, with their current settings.
    pub groups: Vec<Group>,
    /// How 16-bit tensors are stored, and the seed.
    pub precision: Precision,
    /// The global gradient-norm clip, if any.
    #[cfg_attr(feature = "serde", serde(default, with = "crate::exact"))]
    pub max_grad_norm: Option<f32>,
    /// The steps applied so far.
    pub counter: StepCounter,
    /// Every parameter's state tensors, in group order.
    pub state: Vec<ParamState>,
}

/// One parameter's state tensors in a [`StateDict`].
///
/// ```
/// use tessera_core::optim::ParamState;
///
/// let s = ParamState { id: 3, tensors: vec![vec![0.0; 4]] };
/// assert_eq!(s.tensors[0].len(), 4);
/// ```
#[derive(Clone, Debug, PartialEq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub struct ParamState {
    /// The parameter's id.
    pub id: u64,
    /// Its state tensors (`[m, v]` for AdamW and LAMB, the momentum
    /// buffer for SGD and LARS), serialized as their bit patterns.
    #[cfg_attr(feature = "serde", serde(with = "crate::exact::bits"))]
    pub tensors: Vec<Vec<f32>>,
}

impl OwnedOptimizer {
    /// Validates the groups and allocates zeroed state; stores 16-bit
    /// weights as [`Precision::default`] says, without clipping (see
    /// [`with_precision`](Self::with_precision) and
    /// [`with_max_grad_norm`](Self::with_max_grad_norm)).
    ///
    /// ```
    /// use tessera_core::optim::{Group, OwnedOptimizer, SgdConfig};
    ///
    /// let groups = vec![Group { config: SgdConfig::default().into(), params: vec![(0, 8), (1, 2)] }];
    /// let opt = OwnedOptimizer::new(groups)?;
    /// assert_eq!(opt.ids().collect::<Vec<_>>(), [0, 1]);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// [`StepError::Config`] for a bad setting, [`StepError::DuplicateId`]
    /// if an id is in two places.
    pub fn new(groups: Vec<Group>) -> Result<Self, StepError> {
        let mut state: Vec<(u64, Vec<Vec<f32>>)> = Vec::new();
        let mut built = Vec::with_capacity(groups.len());
        for group in groups {
            let optimizer = Optimizer::new(group.config).map_err(StepError::Config)?;
            for &(id, len) in &group.params {
                if state.iter().any(|(seen, _)| *seen == id) {
                    return Err(StepError::DuplicateId { id });
                }
                let zeros = alloc::vec![alloc::vec![0.0; len]; optimizer.state_tensors()];
                state.push((id, zeros));
            }
            built.push((optimizer, group.params));
        }
        Ok(Self {
            groups: built,
            precision: Precision::default(),
            max_grad_norm: None,
            counter: StepCounter::default(),
            state,
        })
    }

    /// The same optimizer storing 16-bit tensors as `precision` says.
    ///
    /// ```
    /// use tessera_core::optim::{Group, OwnedOptimizer, Precision, SgdConfig};
    ///
    /// let groups = vec![Group { config: SgdConfig::default().into(), params: vec![(0, 8)] }];
    /// let opt = OwnedOptimizer::new(groups)?.with_precision(Precision { seed: 7, ..Precision::default() });
    /// assert_eq!(opt.state_dict().precision.seed, 7);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    #[must_use]
    pub fn with_precision(self, precision: Precision) -> Self {
        Self { precision, ..self }
    }

    /// The same optimizer with a global gradient-norm clip at `max`
    /// (timm's `max_grad_norm`).
    ///
    /// ```
    /// use tessera_core::optim::{Group, OwnedOptimizer, SgdConfig};
    ///
    /// let groups = vec![Group { config: SgdConfig::default().into(), params: vec![(0, 8)] }];
    /// assert!(OwnedOptimizer::new(groups.clone())?.with_max_grad_norm(1.0).is_ok());
    /// assert!(OwnedOptimizer::new(groups)?.with_max_grad_norm(f32::NAN).is_err());
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// [`StepError::Config`] unless `max` is finite and > 0.
    pub fn with_max_grad_norm(self, max: f32) -> Result<Self, StepError> {
        check("max_grad_norm", max, f32::MIN_POSITIVE, f32::MAX, false)
            .map_err(StepError::Config)?;
        Ok(Self {
            max_grad_norm: Some(max),
            ..self
        })
    }

    /// Sets every group's base learning rate to `lr` (as assigning
    /// `group["lr"]` for each of a PyTorch optimizer's `param_groups`).
    ///
    /// ```
    /// use tessera_core::optim::{Group, OwnedOptimizer, SgdConfig};
    ///
    /// let groups = vec![Group { config: SgdConfig::default().into(), params: vec![(0, 8)] }];
    /// let mut opt = OwnedOptimizer::new(groups)?;
    /// opt.set_lr(0.5)?;
    /// assert_eq!(opt.state_dict().groups[0].config.lr(), 0.5);
    /// assert!(opt.set_lr(-1.0).is_err());
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// [`StepError::Config`] if a group refuses `lr`; then nothing is
    /// changed.
    pub fn set_lr(&mut self, lr: f32) -> Result<(), StepError> {
        let built = self
            .groups
            .iter()
            .map(|(o, _)| Optimizer::new(o.config().with_lr(lr)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(StepError::Config)?;
        for ((o, _), new) in self.groups.iter_mut().zip(built) {
            *o = new;
        }
        Ok(())
    }

    /// The base learning rate of the first group (0 without groups).
    ///
    /// ```
    /// use tessera_core::optim::{Group, OwnedOptimizer, SgdConfig};
    ///
    /// let groups = vec![Group { config: SgdConfig { lr: 0.1, ..SgdConfig::default() }.into(), params: vec![] }];
    /// assert_eq!(OwnedOptimizer::new(groups)?.lr(), 0.1);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    #[must_use]
    pub fn lr(&self) -> f32 {
        self.groups.first().map_or(0.0, |(o, _)| o.config().lr())
    }

    /// The ids of the parameters, in group order.
    ///
    /// ```
    /// use tessera_core::optim::{Group, LambConfig, OwnedOptimizer};
    ///
    /// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(4, 1), (2, 1)] }];
    /// assert_eq!(OwnedOptimizer::new(groups)?.ids().collect::<Vec<_>>(), [4, 2]);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    pub fn ids(&self) -> impl Iterator<Item = u64> + '_ {
        self.state.iter().map(|(id, _)| *id)
    }

    /// How many steps were applied.
    ///
    /// ```
    /// use tessera_core::optim::{Group, OwnedOptimizer, SgdConfig};
    ///
    /// let groups = vec![Group { config: SgdConfig::default().into(), params: vec![] }];
    /// assert_eq!(OwnedOptimizer::new(groups)?.applied_steps(), 0);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    #[must_use]
    pub const fn applied_steps(&self) -> u64 {
        self.counter.applied_steps()
    }

    /// Parameter `id`'s state tensors (`[m, v]` for AdamW and LAMB, the
    /// momentum buffer for SGD and LARS).
    ///
    /// ```
    /// use tessera_core::optim::{Group, LambConfig, OwnedOptimizer};
    ///
    /// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(4, 3)] }];
    /// let opt = OwnedOptimizer::new(groups)?;
    /// assert_eq!(opt.state(4).map(<[_]>::len), Some(2));
    /// assert!(opt.state(5).is_none());
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    #[must_use]
    pub fn state(&self, id: u64) -> Option<&[Vec<f32>]> {
        self.state
            .iter()
            .find(|(seen, _)| *seen == id)
            .map(|(_, s)| s.as_slice())
    }

    /// Everything this optimizer holds, to save (a copy).
    ///
    /// ```
    /// use tessera_core::optim::{Group, LambConfig, OwnedOptimizer};
    ///
    /// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(4, 3)] }];
    /// let dict = OwnedOptimizer::new(groups)?.state_dict();
    /// assert_eq!((dict.counter.applied_steps(), dict.state.len()), (0, 1));
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    #[must_use]
    pub fn state_dict(&self) -> StateDict {
        StateDict {
            groups: self
                .groups
                .iter()
                .map(|(o, params)| Group {
                    config: o.config(),
                    params: params.clone(),
                })
                .collect(),
            precision: self.precision,
            max_grad_norm: self.max_grad_norm,
            counter: self.counter,
            state: self
                .state
                .iter()
                .map(|(id, tensors)| ParamState {
                    id: *id,
                    tensors: tensors.clone(),
                })
                .collect(),
        }
    }

    /// An optimizer in a saved state, checked as [`new`](Self::new) checks
    /// its groups, with every parameter's state present and shaped as its
    /// group says.
    ///
    /// ```
    /// use tessera_core::optim::{Group, LambConfig, OwnedOptimizer, Tensor};
    ///
    /// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups)?;
    /// let (mut w, g) = (vec![1.0f32; 2], vec![0.5f32; 2]);
    /// opt.step(1.0, &mut [Tensor::new(0, &mut w, &g)])?;
    /// assert_eq!(OwnedOptimizer::from_state_dict(opt.state_dict())?, opt);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// As [`new`](Self::new) and [`with_max_grad_norm`](Self::with_max_grad_norm);
    /// [`StepError::UnknownId`] or [`StepError::DuplicateId`] for a state
    /// entry, [`StepError::Missing`] for parameters without one,
    /// [`StepError::StateTensors`] or [`StepError::Length`] for a shape
    /// that differs.
    pub fn from_state_dict(dict: StateDict) -> Result<Self, StepError> {
        let mut opt = Self::new(dict.groups)?.with_precision(dict.precision);
        if let Some(max) = dict.max_grad_norm {
            opt = opt.with_max_grad_norm(max)?;
        }
        let mut seen = Vec::with_capacity(dict.state.len());
        for ParamState { id, tensors } in dict.state {
            if seen.contains(&id) {
                return Err(StepError::DuplicateId { id });
            }
            seen.push(id);
            let slot = opt.slot(id)?;
            let (expected, got) = (slot.len(), tensors.len());
            if expected != got {
                return Err(StepError::StateTensors { id, expected, got });
            }
            if let Some((s, t)) = slot.iter().zip(&tensors).find(|(s, t)| s.len() != t.len()) {
                let (expected, got) = (s.len(), t.len());
                return Err(StepError::Length { id, expected, got });
            }
            *slot = tensors;
        }
        let ids: Vec<u64> = opt.ids().filter(|id| !seen.contains(id)).collect();
        if !ids.is_empty() {
            return Err(StepError::Missing { ids });
        }
        opt.counter = dict.counter;
        Ok(opt)
    }

    /// Replaces everything with a saved state (settings, counter and state
    /// tensors) of the same parameters: the same ids with the same lengths,
    /// grouped alike.
    ///
    /// ```
    /// use tessera_core::optim::{Group, LambConfig, OwnedOptimizer, Tensor};
    ///
    /// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups.clone())?;
    /// let saved = opt.state_dict();
    /// let (mut w, g) = (vec![1.0f32; 2], vec![0.5f32; 2]);
    /// opt.step(1.0, &mut [Tensor::new(0, &mut w, &g)])?;
    /// opt.load_state_dict(saved)?;
    /// assert_eq!(opt, OwnedOptimizer::new(groups)?);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// As [`from_state_dict`](Self::from_state_dict), and
    /// [`StepError::Layout`] for other parameters than this optimizer's;
    /// then nothing is changed.
    pub fn load_state_dict(&mut self, dict: StateDict) -> Result<(), StepError> {
        let loaded = Self::from_state_dict(dict)?;
        let layout = |o: &Self| -> Vec<Vec<(u64, usize)>> {
            o.groups.iter().map(|(_, p)| p.clone()).collect()
        };
        if layout(&loaded) != layout(self) {
            return Err(StepError::Layout);
        }
        *self = loaded;
        Ok(())
    }

    /// One step over every registered parameter at the groups' learning
    /// rates times `lr_scale` (a [`LrSchedule`](super::LrSchedule)'s
    /// factor); returns the step applied.
    ///
    /// ```
    /// use tessera_core::optim::{Group, SgdConfig, OwnedOptimizer, StepError, Tensor};
    ///
    /// let groups = vec![Group { config: SgdConfig::default().into(), params: vec![(0, 2), (1, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups)?;
    /// let (mut w, g) = (vec![1.0f32; 2], vec![0.5f32; 2]);
    /// // Parameter 1 is left out: refused, nothing written, nothing counted.
    /// let e = opt.step(1.0, &mut [Tensor::new(0, &mut w, &g)]).unwrap_err();
    /// assert_eq!(e, StepError::Missing { ids: vec![1] });
    /// assert_eq!((w[0], opt.applied_steps()), (1.0, 0));
    /// # Ok::<(), StepError>(())
    /// ```
    ///
    /// # Errors
    /// [`StepError::UnknownId`], [`StepError::DuplicateId`],
    /// [`StepError::Length`] or [`StepError::Missing`] (a registered
    /// parameter left out, which would clip over a subset and shift its
    /// bias correction), before anything is written.
    pub fn step(&mut self, lr_scale: f32, params: &mut [Tensor<'_>]) -> Result<Step, StepError> {
        self.check(params)?;
        let mut step = self.counter.next_step().with_lr_scale(lr_scale);
        if let Some(max) = self.max_grad_norm {
            let mut norm = GradNorm::new();
            for t in params.iter() {
                match t.grads {
                    Grads::F32(g) => norm.add(g),
                    Grads::F16(g) => norm.add(g),
                    Grads::Bf16(g) => norm.add(g),
                }
            }
            step = step.with_grad_scale(norm.clip_scale(max));
        }
        for t in params.iter_mut() {
            let optimizer = self.optimizer_of(t.id)?;
            let precision = self.precision;
            let state = self.slot(t.id)?;
            run_any(&optimizer, step, &precision, t, state)?;
        }
        self.counter.applied(step);
        Ok(step)
    }

    /// [`OwnedOptimizer::step`] if the loss scaler's `decision` applies
    /// the step, nothing (and no count) if it skips it: `None`.
    ///
    /// ```
    /// use tessera_core::optim::{Group, OwnedOptimizer, SgdConfig, Tensor};
    /// use tessera_core::scale::StepDecision;
    ///
    /// let groups = vec![Group { config: SgdConfig::default().into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups)?;
    /// let (mut w, g) = (vec![1.0f32; 2], vec![0.5f32; 2]);
    /// assert_eq!(opt.step_on(StepDecision::Skip, 1.0, &mut [Tensor::new(0, &mut w, &g)])?, None);
    /// assert_eq!(opt.applied_steps(), 0);
    /// # Ok::<(), tessera_core::optim::StepError>(())
    /// ```
    ///
    /// # Errors
    /// As [`OwnedOptimizer::step`].
    pub fn step_on(
        &mut self,
        decision: StepDecision,
        lr_scale: f32,
        params: &mut [Tensor<'_>],
    ) -> Result<Option<Step>, StepError> {
        if decision.is_skip() {
            return Ok(None);
        }
        self.step(lr_scale, params).map(Some)
    }

    fn check(&self, params: &[Tensor<'_>]) -> Result<(), StepError> {
        for (k, t) in params.iter().enumerate() {
            if params[..k].iter().any(|u| u.id == t.id) {
                return Err(StepError::DuplicateId { id: t.id });
            }
            let expected = self
                .groups
                .iter()
                .flat_map(|(_, p)| p)
                .find(|(id, _)| *id == t.id)
                .ok_or(StepError::UnknownId { id: t.id })?
                .1;
            let (w, g) = t.len();
            for got in [w, g] {
                if got != expected {
                    return Err(StepError::Length {
                        id: t.id,
                        expected,
                        got,
                    });
                }
            }
        }
        // Every given id is registered and none twice: equal counts mean
        // every registered one is given.
        if params.len() != self.state.len() {
            let ids = self
                .ids()
                .filter(|id| params.iter().all(|t| t.id != *id))
                .collect();
            return Err(StepError::Missing { ids });
        }
        Ok(())
    }

    fn optimizer_of(&self, id: u64) -> Result<Optimizer, StepError> {
        self.groups
            .iter()
            .find(|(_, p)| p.iter().any(|(seen, _)| *seen == id))
            .map(|(o, _)| *o)
            .ok_or(StepError::UnknownId { id })
    }

    fn slot(&mut self, id: u64) -> Result<&mut Vec<Vec<f32>>, StepError> {
        self.state
            .iter_mut()
            .find(|(seen, _)| *seen == id)
            .map(|(_, s)| s)
            .ok_or(StepError::UnknownId { id })
    }
}

crate::via_state!(
    OwnedOptimizer,
    StateDict,
    StepError,
    from_state_dict,
    state_dict
);

/// Runs `optimizer` on a tensor of any storage with f32 state.
fn run_any(
    optimizer: &Optimizer,
    step: Step,
    precision: &Precision,
    t: &mut Tensor<'_>,
    state: &mut [Vec<f32>],
) -> Result<(), StepError> {
    macro_rules! on {
        ($w:expr, $g:expr) => {
            run_typed(optimizer, step, precision, t.id, $w, $g, state)
        };
    }
    match (&mut t.weights, t.grads) {
        (Weights::F32(w), Grads::F32(g)) => on!(w, g),
        (Weights::F32(w), Grads::F16(g)) => on!(w, g),
        (Weights::F32(w), Grads::Bf16(g)) => on!(w, g),
        (Weights::F16(w), Grads::F32(g)) => on!(w, g),
        (Weights::F16(w), Grads::F16(g)) => on!(w, g),
        (Weights::F16(w), Grads::Bf16(g)) => on!(w, g),
        (Weights::Bf16(w), Grads::F32(g)) => on!(w, g),
        (Weights::Bf16(w), Grads::F16(g)) => on!(w, g),
        (Weights::Bf16(w), Grads::Bf16(g)) => on!(w, g),
    }
}

fn run_typed<W: Element, G: Element>(
    optimizer: &Optimizer,
    step: Step,
    precision: &Precision,
    id: u64,
    weights: &mut [W],
    grads: &[G],
    state: &mut [Vec<f32>],
) -> Result<(), StepError> {
    match state {
        [a] => optimizer.step(step, precision, &mut Param::new(id, weights, grads, [a])),
        [a, b] => optimizer.step(step, precision, &mut Param::new(id, weights, grads, [a, b])),
        [a, b, c] => optimizer.step(
            step,
            precision,
            &mut Param::new(id, weights, grads, [a, b, c]),
        ),
        _ => Err(StepError::StateTensors {
            id,
            expected: optimizer.state_tensors(),
            got: state.len(),
        }),
    }
}
