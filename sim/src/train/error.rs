//! [`TrainError`]: why a training run could not start or did not finish.

use std::fmt;
use std::path::PathBuf;

use tessera_collectives::CommError;

use crate::checkpoint::CheckpointError;
use crate::data::DataError;
use crate::model::ModelError;
use crate::pod::PodError;

/// Why a training run could not start, or stopped. Each variant carries
/// what the user needs to fix it.
#[derive(Debug)]
pub enum TrainError {
    /// The Pod or the distribution over it is impossible.
    Pod(PodError),
    /// The data set or the batch arithmetic is wrong.
    Data(DataError),
    /// The model could not be built or run (out of tile memory, say).
    Model(ModelError),
    /// An optimizer hyperparameter was refused.
    Optimizer(tessera_core::optim::ConfigError),
    /// A loss-scaling setting (or a saved scaler state) was refused.
    LossScaling(tessera_core::scale::ScalerConfigError),
    /// A count that must be at least 1 is 0.
    Zero(&'static str),
    /// Another setting is out of range.
    Invalid(String),
    /// A collective between replicas failed (a timeout, or another replica
    /// failed first).
    Collective(CommError),
    /// The replicas' weights differ: determinism is broken.
    ReplicaDrift {
        /// The step after which the check failed.
        step: u64,
    },
    /// A checkpoint could not be written or read, or is damaged.
    Checkpoint(CheckpointError),
    /// A checkpoint belongs to a run with other settings that change the
    /// result (or holds progress this run cannot have made).
    CheckpointMismatch {
        /// The checkpoint.
        path: PathBuf,
        /// Every setting that differs.
        differences: Vec<Difference>,
    },
    /// A checkpoint does not hold the state this run needs: a tensor is
    /// missing, extra, of another type or shape, or not finite.
    Resume {
        /// The checkpoint.
        path: PathBuf,
        /// What is wrong, naming the tensor.
        source: CheckpointError,
    },
    /// A tile would not hold the model, the optimizer's share and the
    /// activation stashes of the pipeline schedule.
    OutOfTileMemory {
        /// Bytes the fullest tile needs.
        needed: u64,
        /// Bytes a tile has.
        available: u64,
        /// Of `needed`, the activation stashes.
        stash: u64,
    },
    /// The run diverged: `steps` consecutive steps up to `step` were
    /// skipped by loss scaling or had a non-finite loss (see
    /// [`Divergence`](super::Divergence)).
    Diverged {
        /// The step that made the count (0-based).
        step: u64,
        /// The consecutive bad steps.
        steps: u64,
        /// The loss of step `step`.
        loss: f32,
        /// The loss scale step `step` ran with.
        loss_scale: f32,
    },
    /// This process's replicas would need more host memory than there is
    /// (found before allocating it).
    OutOfHostMemory {
        /// Bytes they would allocate, at least.
        needed: u64,
        /// Bytes available.
        available: u64,
        /// Where `available` comes from.
        source: &'static str,
        /// Replicas in this process.
        replicas: usize,
    },
    /// A replica thread panicked (a bug: please report it).
    Panicked(String),
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Pod(e) => write!(f, "{e}"),
            Self::Data(e) => write!(f, "{e}"),
            Self::Model(e) => write!(f, "model: {e}"),
            Self::Optimizer(e) => write!(f, "optimizer: {e}"),
            Self::LossScaling(e) => write!(f, "loss scaling: {e}"),
            Self::Zero(what) => write!(f, "{what} must be at least 1"),
            Self::Invalid(what) => f.write_str(what),
            Self::Collective(e) => write!(f, "collective failed: {e}"),
            Self::ReplicaDrift { step } => write!(
                f,
                "replicas hold different weights after step {step}: replicated weights must be bitwise identical"
            ),
            Self::Checkpoint(e) => write!(f, "{e}"),
            Self::CheckpointMismatch { path, differences } => {
                write!(
                    f,
                    "checkpoint {} is from another run, with settings that change the result: ",
                    path.display()
                )?;
                for (i, d) in differences.iter().enumerate() {
                    write!(f, "{}{d}", if i > 0 { "; " } else { "" })?;
                }
                Ok(())
            }
            Self::Resume { path, source } => {
                write!(f, "cannot resume from {}: {source}", path.display())
            }
            Self::OutOfTileMemory {
                needed,
                available,
                stash,
            } => write!(
                f,
                "out of tile memory: the fullest tile needs {needed} bytes ({stash} of them \
                 activation stashes of the pipeline), a tile has {available}; try recomputation, \
                 the interleaved schedule, a smaller micro-batch or more IPUs per replica"
            ),
            Self::Diverged {
                step,
                steps,
                loss,
                loss_scale,
            } => write!(
                f,
                "the run diverged: the {steps} steps {} to {step} were all skipped for \
                 non-finite gradients or had a non-finite loss (step {step}: loss {loss}, \
                 loss scale {loss_scale}); try a smaller learning rate or gradient clipping",
                (step + 1).saturating_sub(*steps)
            ),
            Self::OutOfHostMemory {
                needed,
                available,
                source,
                replicas,
            } => write!(
                f,
                "out of host memory: the {replicas} replicas of this process need at least \
                 {needed} bytes ({:.1} GB: their engines' tensors, weights, gradients and \
                 optimizer state), {available} bytes ({:.1} GB) are available ({source}); use \
                 fewer replicas per process, a smaller model or micro-batch, or set {} to \
                 another cap",
                *needed as f64 / 1e9,
                *available as f64 / 1e9,
                super::HOST_MEMORY_VARIABLE
            ),
            Self::Panicked(what) => write!(f, "a replica thread panicked: {what}"),
        }
    }
}

impl std::error::Error for TrainError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Pod(e) => Some(e),
            Self::Data(e) => Some(e),
            Self::Model(e) => Some(e),
            Self::Optimizer(e) => Some(e),
            Self::LossScaling(e) => Some(e),
            Self::Collective(e) => Some(e),
            Self::Checkpoint(e) | Self::Resume { source: e, .. } => Some(e),
            _ => None,
        }
    }
}

/// A setting whose value in a checkpoint differs from the resuming run's.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    /// The setting, by its option name (`epochs`, `lr`).
    pub setting: String,
    /// The checkpoint's value (`none` when it has none).
    pub checkpoint: String,
    /// This run's value.
    pub now: String,
}

impl fmt::Display for Difference {
    /// `epochs: checkpoint 4, now 10`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: checkpoint {}, now {}",
            self.setting, self.checkpoint, self.now
        )
    }
}

impl From<DataError> for TrainError {
    fn from(e: DataError) -> Self {
        Self::Data(e)
    }
}

impl From<ModelError> for TrainError {
    fn from(e: ModelError) -> Self {
        Self::Model(e)
    }
}

impl From<CommError> for TrainError {
    fn from(e: CommError) -> Self {
        Self::Collective(e)
    }
}

impl From<CheckpointError> for TrainError {
    fn from(e: CheckpointError) -> Self {
        Self::Checkpoint(e)
    }
}

impl From<PodError> for TrainError {
    fn from(e: PodError) -> Self {
        Self::Pod(e)
    }
}
