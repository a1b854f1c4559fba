//! The trainer's model: an MLP or a convolutional network, described
//! ([`ModelConfig`]) and built for a replica ([`Model`]).

use super::{
    Compute, GroupSum, MicroBatchOutput, Mlp, MlpConfig, ModelError, Network, NetworkConfig,
    ParamSpec, Placement, StageCycles,
};
use crate::ipu;

/// A model the trainer can build.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModelConfig {
    /// A multi-layer perceptron.
    Mlp(MlpConfig),
    /// A convolutional network.
    Network(NetworkConfig),
}

impl ModelConfig {
    /// Features per sample.
    #[must_use]
    pub fn inputs(&self) -> usize {
        match self {
            Self::Mlp(c) => c.inputs,
            Self::Network(c) => c.inputs(),
        }
    }

    /// The parameters, in order.
    ///
    /// # Errors
    /// A network's [`NetworkConfig::validate`] errors.
    pub fn params(&self) -> Result<Vec<ParamSpec>, ModelError> {
        match self {
            Self::Mlp(c) => Ok(c.params()),
            Self::Network(c) => c.params(),
        }
    }

    /// The initial parameters of `seed`.
    ///
    /// # Panics
    /// If a network does not validate (check it first).
    #[must_use]
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        match self {
            Self::Mlp(c) => c.init(seed),
            Self::Network(c) => c.init(seed).expect("a validated network"),
        }
    }

    /// Checks the sizes.
    ///
    /// # Errors
    /// As [`MlpConfig::validate`] and [`NetworkConfig::validate`].
    pub fn validate(&self) -> Result<(), ModelError> {
        match self {
            Self::Mlp(c) => c.validate(),
            Self::Network(c) => c.validate(),
        }
    }

    /// The MLP, if it is one.
    #[must_use]
    pub const fn mlp(&self) -> Option<&MlpConfig> {
        match self {
            Self::Mlp(c) => Some(c),
            Self::Network(_) => None,
        }
    }
}

/// One replica's model.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)] // a few per process, never moved in loops
pub enum Model {
    /// An MLP.
    Mlp(Mlp),
    /// A convolutional network.
    Network(Network),
}

/// Forwards a method to the model of either kind.
macro_rules! either {
    ($self:expr, $m:ident => $e:expr) => {
        match $self {
            Model::Mlp($m) => $e,
            Model::Network($m) => $e,
        }
    };
}

impl Model {
    /// Builds `config` for micro-batches of `micro_batch` on `target`,
    /// its layers placed by `placement`.
    ///
    /// # Errors
    /// As [`Mlp::placed`] and [`Network::new`].
    pub fn placed(
        config: &ModelConfig,
        target: ipu::Target,
        placement: &Placement,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        Ok(match config {
            ModelConfig::Mlp(c) => {
                Self::Mlp(Mlp::placed(c, target, placement, micro_batch, compute)?)
            }
            ModelConfig::Network(c) => {
                Self::Network(Network::placed(c, target, placement, micro_batch, compute)?)
            }
        })
    }

    /// Its configuration.
    #[must_use]
    pub fn config(&self) -> ModelConfig {
        match self {
            Self::Mlp(m) => ModelConfig::Mlp(m.config().clone()),
            Self::Network(m) => ModelConfig::Network(m.config().clone()),
        }
    }

    /// The arithmetic.
    #[must_use]
    pub const fn compute(&self) -> Compute {
        either!(self, m => m.compute())
    }

    /// Samples per micro-batch.
    #[must_use]
    pub const fn micro_batch(&self) -> usize {
        either!(self, m => m.micro_batch())
    }

    /// The stages' cycles of the last training micro-batch.
    #[must_use]
    pub fn stage_cycles(&self) -> Option<&[StageCycles]> {
        either!(self, m => m.stage_cycles())
    }

    /// A network's activations of one micro-batch per stage, from its
    /// graph's tensors (`None` for an MLP, whose stashes are sized by
    /// formula).
    #[must_use]
    pub fn stage_activations(&self) -> Option<&[super::StageActivations]> {
        match self {
            Self::Mlp(_) => None,
            Self::Network(n) => Some(n.stage_activations()),
        }
    }

    /// A network's recomputation from `checkpoints` (`None` for an MLP).
    #[must_use]
    pub fn recomputation(
        &self,
        checkpoints: &[usize],
    ) -> Option<Result<super::Recomputation, ModelError>> {
        match self {
            Self::Mlp(_) => None,
            Self::Network(n) => Some(n.recomputation(checkpoints)),
        }
    }

    /// Sets the parameters.
    ///
    /// # Errors
    /// [`ModelError::ParamCount`], [`ModelError::ParamLength`].
    pub fn set_params(&mut self, params: &[&[f32]]) -> Result<(), ModelError> {
        either!(self, m => m.set_params(params))
    }

    /// One micro-batch's forward and backward pass.
    ///
    /// # Errors
    /// As [`Mlp::train_micro_batch`].
    pub fn train_micro_batch(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
        scale: f32,
        group: &mut dyn GroupSum,
        grads: &mut [Vec<f32>],
    ) -> Result<MicroBatchOutput, ModelError> {
        either!(self, m => m.train_micro_batch(inputs, labels, scale, group, grads))
    }

    /// One micro-batch's losses and correct predictions.
    ///
    /// # Errors
    /// As [`Mlp::evaluate`].
    pub fn evaluate(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
    ) -> Result<MicroBatchOutput, ModelError> {
        either!(self, m => m.evaluate(inputs, labels))
    }

    /// The batch-norm running statistics.
    #[must_use]
    pub fn buffers(&self) -> Vec<(String, Vec<f32>)> {
        either!(self, m => m.buffers())
    }

    /// Restores buffers.
    ///
    /// # Errors
    /// [`ModelError::UnknownBuffer`], [`ModelError::ParamLength`].
    pub fn set_buffers(&mut self, buffers: &[(String, Vec<f32>)]) -> Result<(), ModelError> {
        either!(self, m => m.set_buffers(buffers))
    }

    /// The last run's profile.
    #[must_use]
    pub const fn last_profile(&self) -> Option<&ipu::Profile> {
        either!(self, m => m.last_profile())
    }

    /// Every tile's memory in the training program.
    #[must_use]
    pub fn memory(&self) -> ipu::MemoryUsage {
        either!(self, m => m.memory())
    }
}
