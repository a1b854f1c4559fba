//! [`TrainError`]: why a training run could not start or did not finish.

use std::fmt;

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
    LossScaling(tessera_core::scale::ConfigError),
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
    /// A checkpoint could not be written or read.
    Checkpoint(CheckpointError),
    /// A checkpoint belongs to another run (different model, optimizer,
    /// precision or data).
    CheckpointMismatch {
        /// The setting that differs.
        what: String,
        /// The checkpoint's value.
        saved: String,
        /// This run's value.
        now: String,
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
            Self::CheckpointMismatch { what, saved, now } => write!(
                f,
                "the checkpoint is from another run: its {what} is {saved}, this run's is {now}"
            ),
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
            Self::Checkpoint(e) => Some(e),
            _ => None,
        }
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
