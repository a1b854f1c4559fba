//! [`Optimize`]: the one-call interface that a framework's optimizer trait
//! wraps in a few lines.

use super::{OwnedOptimizer, StateDict, Step, StepError, Tensor};

/// An optimizer that updates every parameter in one call, with a learning
/// rate to read and set and a state to save: the shape of candle-nn's
/// `Optimizer` (`step`, `learning_rate`, `set_learning_rate`) and of burn's
/// (`step` at a learning rate, `to_record`/`load_record`).
///
/// An adapter to a framework's trait is a struct holding the parameters and
/// the optimizer; here over plain vectors, for a trait shaped like
/// candle-nn's:
///
/// ```
/// use tessera_core::optim::{Group, LambConfig, Optimize, OwnedOptimizer, StepError, Tensor};
///
/// /// A framework's optimizer trait (candle-nn's, over plain vectors).
/// trait FrameworkOptimizer {
///     fn step(&mut self, grads: &[Vec<f32>]) -> Result<(), StepError>;
///     fn learning_rate(&self) -> f64;
///     fn set_learning_rate(&mut self, lr: f64);
/// }
///
/// /// The adapter: the parameters (id, weights) and any `Optimize`.
/// struct Adapter<O> {
///     optimizer: O,
///     vars: Vec<(u64, Vec<f32>)>,
/// }
///
/// impl<O: Optimize> FrameworkOptimizer for Adapter<O> {
///     fn step(&mut self, grads: &[Vec<f32>]) -> Result<(), StepError> {
///         let mut params: Vec<Tensor<'_>> =
///             self.vars.iter_mut().zip(grads).map(|((id, w), g)| Tensor::new(*id, w, g)).collect();
///         self.optimizer.step(1.0, &mut params).map(|_| ())
///     }
///     fn learning_rate(&self) -> f64 {
///         self.optimizer.learning_rate().into()
///     }
///     fn set_learning_rate(&mut self, lr: f64) {
///         self.optimizer.set_learning_rate(lr as f32).expect("a usable learning rate");
///     }
/// }
///
/// let groups = vec![Group { config: LambConfig::default().into(), params: vec![(0, 3), (1, 2)] }];
/// let mut adapter = Adapter {
///     optimizer: OwnedOptimizer::new(groups)?,
///     vars: vec![(0, vec![1.0; 3]), (1, vec![-1.0; 2])],
/// };
/// adapter.set_learning_rate(0.01);
/// adapter.step(&[vec![0.5; 3], vec![-0.5; 2]])?;
/// assert_eq!(adapter.learning_rate(), f64::from(0.01f32));
/// assert!(adapter.vars[0].1[0] < 1.0 && adapter.vars[1].1[0] > -1.0);
/// # Ok::<(), StepError>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub trait Optimize {
    /// What [`state`](Self::state) saves and
    /// [`load_state`](Self::load_state) restores.
    type State;

    /// One step over every parameter at the base learning rate times
    /// `lr_scale`; returns the step applied.
    ///
    /// # Errors
    /// Parameters that do not match the optimizer's.
    fn step(&mut self, lr_scale: f32, params: &mut [Tensor<'_>]) -> Result<Step, StepError>;

    /// The base learning rate (the first group's, where groups differ).
    fn learning_rate(&self) -> f32;

    /// Sets the base learning rate (of every group).
    ///
    /// # Errors
    /// A rate the optimizer refuses; then nothing changes.
    fn set_learning_rate(&mut self, lr: f32) -> Result<(), StepError>;

    /// The whole state, to save.
    fn state(&self) -> Self::State;

    /// Restores a saved state.
    ///
    /// # Errors
    /// A state of other parameters; then nothing changes.
    fn load_state(&mut self, state: Self::State) -> Result<(), StepError>;
}

impl Optimize for OwnedOptimizer {
    type State = StateDict;

    fn step(&mut self, lr_scale: f32, params: &mut [Tensor<'_>]) -> Result<Step, StepError> {
        Self::step(self, lr_scale, params)
    }

    fn learning_rate(&self) -> f32 {
        self.lr()
    }

    fn set_learning_rate(&mut self, lr: f32) -> Result<(), StepError> {
        self.set_lr(lr)
    }

    fn state(&self) -> StateDict {
        self.state_dict()
    }

    fn load_state(&mut self, state: StateDict) -> Result<(), StepError> {
        self.load_state_dict(state)
    }
}
