//! The planner: before renting a Pod, whether a model fits and how fast it
//! will train.
//!
//! A model is a table of layers ([`ModelTable`]: built in for ResNet-50 and
//! BERT-Large, from the trainer's MLP, or read from a TOML file); a
//! [`PlanConfig`] says on what (a [`crate::pod::PodSpec`], Mk2, Bow or
//! C600 IPUs) and how (precision, FP8 and MX included, optimizer, micro-batch, gradient
//! accumulation, replicas, IPUs per replica as pipeline stages, the
//! schedule, recomputation, replicated tensor sharding, offloading); the
//! [`Plan`] answers: per stage and its fullest tile, whether it fits and
//! what takes the memory; the step's time by part and the throughput; the
//! pipeline's stage-steps; and how it scales over POD16 to POD256.
//!
//! ```
//! use tessera_sim::plan::{Builtin, PlanConfig, Precision, Optimizer};
//! use tessera_sim::pod::PodSpec;
//!
//! let mut config = PlanConfig::new(Builtin::Resnet50.table(), PodSpec::pod16());
//! config.micro_batch = 16;
//! config.precision = Precision::Half;
//! config.optimizer = Optimizer::Sgd;
//! config.recompute = true;
//! let plan = config.plan()?;
//! assert!(plan.fits, "worst tile {} B", plan.worst.bytes);
//! assert_eq!(plan.global_batch, 16 * 16);
//! assert!(plan.samples_per_second > 0.0);
//! for (part, seconds) in plan.step.parts() {
//!     println!("{part:24} {:8.3} ms", seconds * 1e3);
//! }
//! assert_eq!(plan.scaling.len(), 4); // POD16, POD64, POD128, POD256
//! # Ok::<(), tessera_sim::plan::PlanError>(())
//! ```
//!
//! # The model
//!
//! Time: every layer's forward and backward pass as the phases the
//! simulator's engine runs (an exchange, a compute set, a sync), priced
//! with the IPU's own cost table, so the fixed costs of small layers and
//! the FLOP term of large ones come from one model ([`time`]'s docs); the
//! pipeline, the collectives ([`Layout`](crate::pod::Layout)), the
//! optimizer, offloading and host IO as the trainer's
//! [`StepTime`](crate::train::StepTime). Memory: per stage, the parts of
//! [`MemoryBreakdown`] and the fullest tile ([`memory`]'s docs). Every
//! efficiency factor and assumption is in [`PlanAssumptions`], documented
//! with its source ([`assumptions`]'s docs).
//!
//! With [`PlanAssumptions::simulator`] the planner prices the trainer's
//! MLP ([`ModelTable::from_network`] of its dense blocks) as `tessera
//! train` does: the tests hold the two within 10% on the default digits
//! job and a deeper synthetic MLP. The default, [`PlanAssumptions::ipu`], assumes Poplar's balanced
//! matmul plans and FP16 exchange instead of the simulator's simpler
//! implementation.
//!
//! The trainer's convolutional networks ([`ModelTable::from_network`])
//! are priced by the assumptions 43% below the trainer (resnet-mini); with
//! their layer costs from the whole network compiled on the simulator
//! ([`Calibration::price_model`]) the test holds them within 10% too.
//!
//! Tables for other models are TOML files of `[[layer]]` rows (the
//! format and the conventions, FLOPs and bytes per sample, are in the
//! [`table`] module).
//!
//! # Limits
//!
//! What the model leaves out, so far: overlap of any two parts of a step
//! (the trainer charges none either); residual tensors crossing a stage
//! boundary besides the boundary layer's output; a speed difference
//! between the Grouped and Interleaved schedules (only their memory
//! differs); batch norm's group-sum phases in the MLP table; Poplar's
//! liveness analysis beyond the stash, the code and the largest exchange
//! buffer. The scaling table charges an all-reduce of the gradients for
//! every Pod, also with replicated tensor sharding, and keeps the plan's
//! optimizer and offload time (which sharding over more replicas would
//! shorten). With several IPUs per replica the trainer spreads the MLP's
//! tiles over them; the planner pipelines it.
//!
//! # Determinism
//!
//! A plan is a pure function of its configuration.

pub mod assumptions;
pub mod builtin;
pub mod calibrate;
mod compare;
mod config;
mod error;
pub mod memory;
pub mod network;
mod network_costs;
mod planner;
mod split;
pub mod table;
pub mod time;

use serde::Serialize;

pub use assumptions::{MatmulPlan, PlanAssumptions};
pub use builtin::{Builtin, bert_large, resnet50};
pub use calibrate::{Calibration, CalibrationError};
pub use compare::{AssumedPlan, Calibrated, CalibratedLayer};
pub use config::{
    DEFAULT_DEVICE_ITERATIONS, Optimizer, PlanConfig, Precision, PrecisionBytes, Schedule, ipu_name,
};
pub use error::PlanError;
pub use memory::MemoryBreakdown;
pub use table::{
    Gemm, Layer, LayerCosts, LayerRef, ModelTable, ModelTableError, SimLayer, SimulatedCost, Tied,
};
pub use time::StepBreakdown;

use crate::pod::{PodSpec, ScalingRow};

/// Micro-batches Poplar's host streams prefetch ahead of compute (its
/// `exchange.enablePrefetch` engine option is on by default).
const POPLAR_PREFETCH_DEPTH: usize = 1;

/// FLOPs per sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Flops {
    /// Forward.
    pub forward: u64,
    /// Backward.
    pub backward: u64,
}

/// One pipeline stage (the whole model without pipelining).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StagePlan {
    /// The stage, from 0; also the replica's IPU it runs on.
    pub stage: usize,
    /// Its first layer's name.
    pub first_layer: String,
    /// Its last layer's name.
    pub last_layer: String,
    /// Its layers.
    pub layers: usize,
    /// Parameters it owns.
    pub params: u64,
    /// Bytes on its IPU, by part.
    pub memory: MemoryBreakdown,
    /// Bytes on its fullest tile.
    pub worst_tile_bytes: u64,
    /// Whether the fullest tile fits.
    pub fits: bool,
    /// Micro-batches whose activations it stashes.
    pub stashed_micro_batches: u64,
    /// Seconds of one micro-batch's forward passes.
    pub forward_s: f64,
    /// Seconds of one micro-batch's backward passes.
    pub backward_s: f64,
    /// Seconds of one micro-batch's recomputation.
    pub recompute_s: f64,
    /// Seconds of one micro-batch on the stage in all (with the host's
    /// input on the first stage and the loss on the last).
    pub micro_batch_s: f64,
}

/// The fullest tile of the plan.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct WorstTile {
    /// Its stage (and the replica's IPU).
    pub stage: usize,
    /// Its bytes.
    pub bytes: u64,
    /// A tile's memory.
    pub capacity: u64,
    /// `bytes / capacity`.
    pub fraction: f64,
}

/// A stage that does not fit, and what takes its memory.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Overflow {
    /// The stage.
    pub stage: usize,
    /// Bytes its fullest tile needs beyond a tile's memory.
    pub tile_bytes_over: u64,
    /// Bytes its IPU holds beyond the IPU's memory (0 if only the tile
    /// overflows).
    pub ipu_bytes_over: u64,
    /// The largest part of its memory.
    pub largest: &'static str,
    /// That part's bytes.
    pub largest_bytes: u64,
}

/// What the planner predicts (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Plan {
    /// The model's name.
    pub model: String,
    /// The Pod's name.
    pub pod: String,
    /// Its IPUs.
    pub pod_ipus: usize,
    /// The IPU's name.
    pub ipu: &'static str,
    /// Compute and weight precision.
    pub precision: Precision,
    /// How the IPU runs the precision's products
    /// ([`ProductPath::describe`](crate::ipu::ProductPath::describe)):
    /// `FP8 units`, or `converted to FP16 ...` on an IPU without FP8 units.
    pub products: &'static str,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// The pipeline schedule.
    pub schedule: Schedule,
    /// Samples per micro-batch.
    pub micro_batch: usize,
    /// Micro-batches per replica per step.
    pub gradient_accumulation: usize,
    /// Replicas.
    pub replicas: usize,
    /// IPUs per replica (pipeline stages).
    pub ipus_per_replica: usize,
    /// Recomputation.
    pub recompute: bool,
    /// Replicated tensor sharding.
    pub replicated_tensor_sharding: bool,
    /// Optimizer state in streaming memory.
    pub offload_optimizer_state: bool,
    /// Samples per step: micro-batch x accumulation x replicas.
    pub global_batch: usize,
    /// The model's parameters.
    pub params: u64,
    /// Its FLOPs per sample.
    pub flops_per_sample: Flops,
    /// Whether every stage's fullest tile fits.
    pub fits: bool,
    /// The fullest tile.
    pub worst: WorstTile,
    /// The stages that do not fit.
    pub overflows: Vec<Overflow>,
    /// Every stage.
    pub stages: Vec<StagePlan>,
    /// Stage-steps of a step: `2(P - 1) + (G - (P - 1))` for `P` stages
    /// and `G` micro-batches pipelined; `G P` with the Sequential schedule;
    /// `G` without pipelining.
    pub pipeline_steps: u64,
    /// The step's seconds by part.
    pub step: StepBreakdown,
    /// Seconds per step.
    pub step_s: f64,
    /// Samples per second over all replicas.
    pub samples_per_second: f64,
    /// Achieved FLOPs (forward and backward, without recomputation) over
    /// the replicas' IPUs' peak of the units that run the products
    /// ([`Plan::utilisation_peak`]).
    pub flops_utilisation: f64,
    /// Which peak [`Plan::flops_utilisation`] is of: `FP8` where the
    /// IPU's FP8 units run the products (the C600 in `8.16`, `8.32`),
    /// `FP16` otherwise (converted FP8 and MX products run as FP16).
    pub utilisation_peak: &'static str,
    /// Weak scaling over POD16, POD64, POD128 and POD256 of this plan's
    /// replica (each Pod filled with replicas), by
    /// [`crate::pod::scaling_table_with`].
    pub scaling: Vec<ScalingRow>,
    /// The assumptions used.
    pub assumptions: PlanAssumptions,
    /// With [`PlanConfig::layer_costs`]: the simulated layers beside the
    /// assumed ones, and the plan by the assumptions alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub calibration: Option<Calibrated>,
}

/// The Pods of [`Plan::scaling`].
fn scaling_pods(ipu: crate::IpuSpec) -> Vec<PodSpec> {
    let mut pods = vec![PodSpec::pod16(), PodSpec::pod64()];
    pods.extend([2, 4].into_iter().filter_map(|n| PodSpec::pods(n).ok()));
    pods.into_iter().map(|p| p.with_ipu(ipu)).collect()
}
