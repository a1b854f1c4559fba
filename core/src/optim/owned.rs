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
pub struct Group {
    /// The group's hyperparameters.
    pub config: OptimizerConfig,
    /// `(id, length)` of each parameter; the id addresses its random bits.
    pub params: Vec<(u64, usize)>,
}

/// A parameter's weights in any storage format.
#[derive(Debug)]
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
/// use tessera_core::optim::{Group, LambConfig, OwnedOptimizer, Precision, Tensor};
///
/// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(0, 4), (1, 2)] }];
/// let mut opt = OwnedOptimizer::new(groups, Precision::default(), Some(1.0))?;
/// let (mut w0, mut w1) = (vec![1.0f32; 4], vec![half::f16::ONE; 2]);
/// let (g0, g1) = (vec![0.5f32; 4], vec![0.5f32; 2]);
/// opt.step(1.0, &mut [Tensor::new(0, &mut w0, &g0), Tensor::new(1, &mut w1, &g1)])?;
/// assert_eq!(opt.applied_steps(), 1);
/// assert!(w0[0] < 1.0 && w1[0] < half::f16::ONE);
/// # Ok::<(), tessera_core::optim::StepError>(())
/// ```
#[derive(Clone, Debug)]
pub struct OwnedOptimizer {
    groups: Vec<(Optimizer, Vec<(u64, usize)>)>,
    precision: Precision,
    max_grad_norm: Option<f32>,
    counter: StepCounter,
    /// Per parameter (in group order): its id and state tensors.
    state: Vec<(u64, Vec<Vec<f32>>)>,
}

impl OwnedOptimizer {
    /// Validates the groups and allocates zeroed state.
    ///
    /// # Errors
    /// [`StepError::Config`] for a bad setting (or a `max_grad_norm` that
    /// is not finite and > 0), [`StepError::DuplicateId`] if an id is in
    /// two places.
    pub fn new(
        groups: Vec<Group>,
        precision: Precision,
        max_grad_norm: Option<f32>,
    ) -> Result<Self, StepError> {
        if let Some(max) = max_grad_norm {
            check("max_grad_norm", max, f32::MIN_POSITIVE, f32::MAX, false)
                .map_err(StepError::Config)?;
        }
        let mut state: Vec<(u64, Vec<Vec<f32>>)> = Vec::new();
        let mut built = Vec::with_capacity(groups.len());
        for group in groups {
            let optimizer = Optimizer::new(group.config).map_err(StepError::Config)?;
            for &(id, len) in &group.params {
                if state.iter().any(|(seen, _)| *seen == id) {
                    return Err(StepError::DuplicateId { id });
                }
                state.push((
                    id,
                    alloc::vec![alloc::vec![0.0; len]; optimizer.state_tensors()],
                ));
            }
            built.push((optimizer, group.params));
        }
        Ok(Self {
            groups: built,
            precision,
            max_grad_norm,
            counter: StepCounter::default(),
            state,
        })
    }

    /// How many steps were applied.
    #[must_use]
    pub const fn applied_steps(&self) -> u64 {
        self.counter.applied_steps()
    }

    /// The step counter (to save with the state).
    #[must_use]
    pub const fn counter(&self) -> StepCounter {
        self.counter
    }

    /// Parameter `id`'s state tensors (`[m, v]` for AdamW and LAMB, the
    /// momentum buffer for SGD and LARS).
    #[must_use]
    pub fn state(&self, id: u64) -> Option<&[Vec<f32>]> {
        self.state
            .iter()
            .find(|(seen, _)| *seen == id)
            .map(|(_, s)| s.as_slice())
    }

    /// Restores a saved counter and state (as from
    /// [`OwnedOptimizer::counter`] and [`OwnedOptimizer::state`]).
    ///
    /// # Errors
    /// [`StepError::UnknownId`], or [`StepError::Length`] /
    /// [`StepError::StateTensors`] if the shapes differ; then nothing is
    /// changed.
    pub fn restore(
        &mut self,
        counter: StepCounter,
        state: Vec<(u64, Vec<Vec<f32>>)>,
    ) -> Result<(), StepError> {
        for (id, tensors) in &state {
            let id = *id;
            let slot = self.slot(id)?;
            let (expected, got) = (slot.len(), tensors.len());
            if expected != got {
                return Err(StepError::StateTensors { id, expected, got });
            }
            for (s, t) in slot.iter().zip(tensors) {
                if s.len() != t.len() {
                    let (expected, got) = (s.len(), t.len());
                    return Err(StepError::Length { id, expected, got });
                }
            }
        }
        for (id, tensors) in state {
            *self.slot(id)? = tensors;
        }
        self.counter = counter;
        Ok(())
    }

    /// One step over `params` (every parameter, for a correct global
    /// clip) at the groups' learning rates times `lr_scale` (a
    /// [`Schedule`](super::Schedule)'s factor); returns the step applied.
    ///
    /// # Errors
    /// [`StepError::UnknownId`], [`StepError::DuplicateId`] or
    /// [`StepError::Length`], before anything is written.
    pub fn step(&mut self, lr_scale: f32, params: &mut [Tensor<'_>]) -> Result<Step, StepError> {
        self.check(params)?;
        let mut step = self.counter.next_step().with_lr_scale(lr_scale);
        if let Some(max) = self.max_grad_norm {
            let mut norm = GradNorm::new();
            for t in params.iter() {
                match t.grads {
                    Grads::F32(g) => norm.add(g),
                    Grads::F16(g) => norm.add_f16(g),
                    Grads::Bf16(g) => norm.add_bf16(g),
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
