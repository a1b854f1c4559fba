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
    /// ```
    /// use tessera_core::optim::{Group, Optimize, OwnedOptimizer, SgdConfig, StepError, Tensor};
    ///
    /// let sgd = SgdConfig { lr: 0.5, momentum: 0.9, ..SgdConfig::default() };
    /// let groups = vec![Group { config: sgd.into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups.clone())?;
    /// let (mut w, g) = (vec![1.0f32, 2.0], vec![1.0f32, -1.0]);
    /// // Half the base rate: w - 0.25 g.
    /// Optimize::step(&mut opt, 0.5, &mut [Tensor::new(0, &mut w, &g)])?;
    /// assert_eq!(w, [0.75, 2.25]);
    /// // A parameter the optimizer was not given is refused.
    /// assert!(Optimize::step(&mut opt, 1.0, &mut [Tensor::new(7, &mut w, &g)]).is_err());
    /// # Ok::<(), StepError>(())
    /// ```
    ///
    /// # Errors
    /// Parameters that do not match the optimizer's.
    fn step(&mut self, lr_scale: f32, params: &mut [Tensor<'_>]) -> Result<Step, StepError>;

    /// The base learning rate (the first group's, where groups differ).
    ///
    /// ```
    /// use tessera_core::optim::{Group, Optimize, OwnedOptimizer, SgdConfig, StepError, Tensor};
    ///
    /// let sgd = SgdConfig { lr: 0.5, momentum: 0.9, ..SgdConfig::default() };
    /// let groups = vec![Group { config: sgd.into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups.clone())?;
    /// assert_eq!(opt.learning_rate(), 0.5);
    /// # Ok::<(), StepError>(())
    /// ```
    fn learning_rate(&self) -> f32;

    /// Sets the base learning rate (of every group).
    ///
    /// ```
    /// use tessera_core::optim::{Group, Optimize, OwnedOptimizer, SgdConfig, StepError, Tensor};
    ///
    /// let sgd = SgdConfig { lr: 0.5, momentum: 0.9, ..SgdConfig::default() };
    /// let groups = vec![Group { config: sgd.into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups.clone())?;
    /// opt.set_learning_rate(0.125)?;
    /// assert_eq!(opt.learning_rate(), 0.125);
    /// assert!(opt.set_learning_rate(f32::NAN).is_err());
    /// assert_eq!(opt.learning_rate(), 0.125); // unchanged
    /// # Ok::<(), StepError>(())
    /// ```
    ///
    /// # Errors
    /// A rate the optimizer refuses; then nothing changes.
    fn set_learning_rate(&mut self, lr: f32) -> Result<(), StepError>;

    /// The whole state, to save.
    ///
    /// ```
    /// use tessera_core::optim::{Group, Optimize, OwnedOptimizer, SgdConfig, StepError, Tensor};
    ///
    /// let sgd = SgdConfig { lr: 0.5, momentum: 0.9, ..SgdConfig::default() };
    /// let groups = vec![Group { config: sgd.into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups.clone())?;
    /// let g = vec![1.0f32, -1.0];
    /// let mut w = vec![1.0f32, 2.0];
    /// opt.step(1.0, &mut [Tensor::new(0, &mut w, &g)])?;
    /// // A fresh optimizer given the saved state (momentum buffers included)
    /// // takes the same next step.
    /// let mut restored = OwnedOptimizer::new(groups)?;
    /// Optimize::load_state(&mut restored, Optimize::state(&opt))?;
    /// let mut v = w.clone();
    /// opt.step(1.0, &mut [Tensor::new(0, &mut w, &g)])?;
    /// restored.step(1.0, &mut [Tensor::new(0, &mut v, &g)])?;
    /// assert_eq!(w, v);
    /// # Ok::<(), StepError>(())
    /// ```
    fn state(&self) -> Self::State;

    /// Restores a saved state.
    ///
    /// ```
    /// use tessera_core::optim::{Group, Optimize, OwnedOptimizer, SgdConfig, StepError, Tensor};
    ///
    /// let sgd = SgdConfig { lr: 0.5, momentum: 0.9, ..SgdConfig::default() };
    /// let groups = vec![Group { config: sgd.into(), params: vec![(0, 2)] }];
    /// let mut opt = OwnedOptimizer::new(groups.clone())?;
    /// // The state of an optimizer over other parameters is refused.
    /// let other = vec![Group { config: sgd.into(), params: vec![(1, 3)] }];
    /// let theirs = Optimize::state(&OwnedOptimizer::new(other)?);
    /// assert!(Optimize::load_state(&mut opt, theirs).is_err());
    /// # Ok::<(), StepError>(())
    /// ```
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
