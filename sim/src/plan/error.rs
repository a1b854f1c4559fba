//! Why a plan cannot be made.

use core::fmt;

use super::table::ModelTableError;
use crate::pod::PodError;

/// Why a [`PlanConfig`](super::PlanConfig) cannot be planned. A plan that
/// does not fit in memory is not an error: it is a [`Plan`](super::Plan)
/// with `fits == false`.
#[derive(Clone, Debug, PartialEq)]
pub enum PlanError {
    /// A count that must be at least 1 is 0 (the field named).
    Zero(&'static str),
    /// The replicas do not fit on the Pod, or their IPUs are not a power of
    /// two, or a replica is larger than an IPU-Link domain (see
    /// [`PodError`]).
    Pod(PodError),
    /// More pipeline stages (IPUs per replica) than layers: every stage
    /// needs at least one.
    MoreStagesThanLayers {
        /// Stages asked for.
        stages: usize,
        /// Layers of the model.
        layers: usize,
    },
    /// A pipeline of `stages` stages needs at least as many micro-batches
    /// per step (gradient accumulation) to fill.
    AccumulationBelowStages {
        /// Micro-batches per step.
        accumulation: usize,
        /// Pipeline stages.
        stages: usize,
    },
    /// An assumption out of its range (see
    /// [`PlanAssumptions`](super::PlanAssumptions)).
    Assumption {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// The model table is invalid.
    Model(ModelTableError),
    /// `micro_batch x gradient_accumulation x replicas` samples per step
    /// cannot be counted (a 64-bit overflow).
    GlobalBatchOverflow {
        /// Samples per micro-batch.
        micro_batch: usize,
        /// Micro-batches per step.
        accumulation: usize,
        /// Replicas.
        replicas: usize,
    },
    /// A micro-batch's figure (`micro_batch` times a per-sample figure of
    /// the model: its total FLOPs or stashed bytes, the host's input, a
    /// layer's output) above [`ModelTable::LIMIT`](super::ModelTable::LIMIT).
    MicroBatchTooLarge {
        /// Samples per micro-batch.
        micro_batch: usize,
        /// The per-sample figure.
        field: &'static str,
        /// The layer it is of, if one layer's.
        layer: Option<String>,
        /// Its value per sample.
        per_sample: u64,
    },
    /// [`PlanConfig::layer_costs`](super::PlanConfig::layer_costs) were
    /// priced for another configuration.
    LayerCostsMismatch {
        /// What differs: `layers`, `micro-batch`, `compute precision`, `IPU`.
        what: &'static str,
        /// Its value in the layer costs.
        priced: String,
        /// Its value in the configuration.
        planned: String,
    },
}

impl fmt::Display for PlanError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Zero(field) => write!(f, "{field} must be at least 1"),
            Self::Pod(e) => write!(f, "{e}"),
            Self::MoreStagesThanLayers { stages, layers } => write!(
                f,
                "{stages} pipeline stages (IPUs per replica) for a model of {layers} layers: \
                 every stage needs a layer"
            ),
            Self::AccumulationBelowStages {
                accumulation,
                stages,
            } => write!(
                f,
                "gradient accumulation {accumulation} is below the {stages} pipeline stages: \
                 a pipeline of P stages needs at least P micro-batches per step"
            ),
            Self::Assumption { field, value } => {
                write!(f, "assumption {field} = {value} is out of range")
            }
            Self::Model(e) => write!(f, "{e}"),
            Self::GlobalBatchOverflow {
                micro_batch,
                accumulation,
                replicas,
            } => write!(
                f,
                "micro-batch {micro_batch} x accumulation {accumulation} x {replicas} replicas \
                 is more samples per step than can be counted"
            ),
            Self::MicroBatchTooLarge {
                micro_batch,
                field,
                layer,
                per_sample,
            } => {
                write!(f, "micro-batch {micro_batch} x ")?;
                if let Some(layer) = layer {
                    write!(f, "layer `{layer}`'s ")?;
                }
                write!(
                    f,
                    "{field} {per_sample} per sample is above the planner's limit of 2^53 = {} \
                     per micro-batch",
                    super::ModelTable::LIMIT
                )
            }
            Self::LayerCostsMismatch {
                what,
                priced,
                planned,
            } => write!(
                f,
                "the simulated layer costs were priced for {what} {priced}, the plan is for \
                 {planned}"
            ),
        }
    }
}

impl core::error::Error for PlanError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Pod(e) => Some(e),
            Self::Model(e) => Some(e),
            _ => None,
        }
    }
}

impl From<PodError> for PlanError {
    fn from(e: PodError) -> Self {
        Self::Pod(e)
    }
}

impl From<ModelTableError> for PlanError {
    fn from(e: ModelTableError) -> Self {
        Self::Model(e)
    }
}
