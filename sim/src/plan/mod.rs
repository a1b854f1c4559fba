//! The planner: before renting a Pod, whether a model fits and how fast it
//! will train.
//!
//! A model is a table of layers ([`ModelTable`]: built in for ResNet-50 and
//! BERT-Large, from the trainer's MLP, or read from a TOML file); a
//! [`PlanConfig`] says on what (a [`crate::pod::PodSpec`], Mk2 or
//! Bow IPUs) and how (precision, optimizer, micro-batch, gradient
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
//! MLP ([`ModelTable::from_mlp`]) as `tessera train` does: the tests hold
//! the two within 10% on the default digits job and a deeper synthetic
//! MLP. The default, [`PlanAssumptions::ipu`], assumes Poplar's balanced
//! matmul plans and FP16 exchange instead of the simulator's simpler
//! implementation.
//!
//! Tables for other models are TOML files of `[[layer]]` rows (the
//! format and the conventions, FLOPs and bytes per sample, are in the
//! [`model`] module).
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
mod config;
mod error;
pub mod memory;
pub mod model;
mod split;
pub mod time;

use serde::Serialize;

pub use assumptions::{MatmulPlan, PlanAssumptions};
pub use builtin::{Builtin, bert_large, resnet50};
pub use config::{
    DEFAULT_DEVICE_ITERATIONS, Optimizer, PlanConfig, Precision, PrecisionBytes, Schedule, ipu_name,
};
pub use error::PlanError;
pub use memory::MemoryBreakdown;
pub use model::{Gemm, Layer, LayerRef, ModelTable, ModelTableError, Tied};
pub use time::StepBreakdown;

use crate::pod::{CollectiveTime, PodSpec, Prefetch, ScalingRow, scaling_table_with};

/// Micro-batches Poplar's host streams prefetch ahead of compute (its
/// `exchange.enablePrefetch` engine option is on by default).
const POPLAR_PREFETCH_DEPTH: usize = 1;
use memory::{StageShape, stage_memory, stage_params, stashed};
use time::{CostModel, LayerCost};

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
    /// the replicas' IPUs' FP16 peak.
    pub flops_utilisation: f64,
    /// Weak scaling over POD16, POD64, POD128 and POD256 of this plan's
    /// replica (each Pod filled with replicas), by
    /// [`crate::pod::scaling_table_with`].
    pub scaling: Vec<ScalingRow>,
    /// The assumptions used.
    pub assumptions: PlanAssumptions,
}

/// The Pods of [`Plan::scaling`].
fn scaling_pods(ipu: crate::IpuSpec) -> Vec<PodSpec> {
    let mut pods = vec![PodSpec::pod16(), PodSpec::pod64()];
    pods.extend([2, 4].into_iter().filter_map(|n| PodSpec::pods(n).ok()));
    pods.into_iter().map(|p| p.with_ipu(ipu)).collect()
}

impl PlanConfig {
    /// Plans the configuration.
    ///
    /// # Errors
    /// [`PlanConfig::validate`]'s. A model that does not fit is not an
    /// error: see [`Plan::fits`] and [`Plan::overflows`].
    pub fn plan(&self) -> Result<Plan, PlanError> {
        let layout = self.validate()?;
        let pod = self.machine();
        let spec = *pod.ipu();
        let stages = self.ipus_per_replica;
        let batch = self.micro_batch as u64;
        let accumulation = self.gradient_accumulation as u64;
        let bytes = self.precision.bytes();
        let model = &self.model;
        let layers = model.layers();
        let cost = CostModel::new(&spec, stages, self.precision, &self.assumptions);
        let mut costs: Vec<LayerCost> = Vec::with_capacity(layers.len());
        for i in 0..layers.len() {
            let in_tiles = costs.last().map_or(1, |c| c.out_tiles);
            costs.push(cost.layer(model, i, batch, in_tiles));
        }
        let recompute = u64::from(self.recompute);
        let ranges = {
            let times: Vec<f64> = costs
                .iter()
                .map(|c| c.forward as f64 * (1 + recompute) as f64 + c.backward as f64)
                .collect();
            let per_param = bytes.weights
                + bytes.gradients
                + if self.offload_optimizer_state {
                    0
                } else {
                    bytes.master + self.optimizer.state_tensors() * bytes.optimizer_state
                };
            // A tied layer will hold a copy of its owner's weights (and
            // gradients) on another stage.
            let memory: Vec<f64> = layers
                .iter()
                .map(|l| {
                    let tied = l.tied.as_ref().map_or(0, |t| t.params);
                    l.params as f64 * per_param as f64
                        + tied as f64 * (bytes.weights + bytes.gradients) as f64
                        + l.activation_bytes as f64 * batch as f64
                })
                .collect();
            split::split(&times, &memory, stages)
        };
        let shards = if self.replicated_tensor_sharding {
            layout.replicas_per_domain() as u64
        } else {
            1
        };
        let tiles = u64::from(spec.tiles());
        let capacity = spec.memory_per_tile();
        let mut plans = Vec::with_capacity(stages);
        let mut stage_params_max = 0;
        let mut optimizer_cycles = 0;
        let mut offload_s: f64 = 0.0;
        for (s, range) in ranges.iter().enumerate() {
            let c = &costs[range.clone()];
            let forward = c.iter().fold(0u64, |a, c| a.saturating_add(c.forward));
            let backward = c.iter().fold(0u64, |a, c| a.saturating_add(c.backward));
            let mut extra = 0u64;
            if s == 0 {
                extra = cost.host(batch.saturating_mul(model.input_bytes()));
            }
            if s + 1 == stages {
                extra = extra.saturating_add(cost.loss(costs[layers.len() - 1].out_block));
            }
            let total = forward
                .saturating_mul(1 + recompute)
                .saturating_add(backward)
                .saturating_add(extra);
            let received = c.iter().map(|c| c.received_bytes).max().unwrap_or(0);
            let (memory, worst) = stage_memory(
                self,
                &StageShape {
                    layers: range.clone(),
                    stage: s,
                    stages,
                    shards,
                    received,
                    tiles,
                },
            );
            let (own, _) = stage_params(model, range);
            stage_params_max = stage_params_max.max(own);
            let owned = own.div_ceil(shards);
            optimizer_cycles =
                optimizer_cycles.max(cost.optimizer(owned, self.optimizer.needs_norms()));
            if self.offload_optimizer_state {
                let state = bytes.master + self.optimizer.state_tensors() * bytes.optimizer_state;
                let seconds =
                    2.0 * state as f64 * owned as f64 / spec.params().host_bytes_per_second as f64;
                offload_s = offload_s.max(seconds);
            }
            plans.push(StagePlan {
                stage: s,
                first_layer: layers[range.start].name.clone(),
                last_layer: layers[range.end - 1].name.clone(),
                layers: range.len(),
                params: own,
                memory,
                worst_tile_bytes: worst,
                fits: worst <= capacity,
                stashed_micro_batches: stashed(self.schedule, s, stages, &self.assumptions),
                forward_s: spec.seconds(forward),
                backward_s: spec.seconds(backward),
                recompute_s: spec.seconds(forward.saturating_mul(recompute)),
                micro_batch_s: spec.seconds(total),
            });
        }
        // The pipeline.
        let slowest = plans.iter().map(|p| p.micro_batch_s).fold(0.0, f64::max);
        let sum: f64 = plans.iter().map(|p| p.micro_batch_s).sum();
        let pipelined = stages > 1 && self.schedule != Schedule::Sequential;
        let p = stages as u64;
        let pipeline_steps = if pipelined {
            2 * (p - 1) + (accumulation - (p - 1))
        } else {
            accumulation * p
        };
        let boundaries: Vec<f64> = ranges[..stages - 1]
            .iter()
            .enumerate()
            .map(|(s, r)| {
                let b = batch
                    .saturating_mul(layers[r.end - 1].boundary_bytes())
                    .saturating_mul(cost.activation_bytes() / 2);
                // Activations forward, their gradients backward.
                2.0 * spec.seconds(cost.boundary(b, s, stages))
            })
            .collect();
        let (compute_s, bubble_s, stage_exchange_s) = if pipelined {
            let link = boundaries.iter().copied().fold(0.0, f64::max);
            (
                accumulation as f64 * slowest,
                (p - 1) as f64 * slowest,
                pipeline_steps as f64 * link,
            )
        } else {
            (
                accumulation as f64 * sum,
                0.0,
                accumulation as f64 * boundaries.iter().fold(0.0, |a, b| a + b),
            )
        };
        // The Pod.
        let grad_bytes = stage_params_max
            .saturating_mul(bytes.gradients)
            .saturating_mul(p);
        let all_reduce = if self.replicated_tensor_sharding {
            let rs = layout.reduce_scatter_time(grad_bytes);
            let ag = layout.all_gather_time(
                stage_params_max
                    .saturating_mul(bytes.weights)
                    .saturating_mul(p),
            );
            CollectiveTime {
                ipu_link_s: rs.ipu_link_s + ag.ipu_link_s,
                gw_link_s: rs.gw_link_s + ag.gw_link_s,
            }
        } else {
            layout.all_reduce_time(grad_bytes)
        };
        let step = StepBreakdown {
            compute_s,
            bubble_s,
            stage_exchange_s,
            sync_s: layout.sync_time(),
            all_reduce,
            optimizer_s: spec.seconds(optimizer_cycles),
            offload_s,
            host_io_s: layout.host_input_wait(
                batch
                    .saturating_mul(accumulation)
                    .saturating_mul(model.input_bytes()),
                compute_s + bubble_s + stage_exchange_s,
                Prefetch {
                    micro_batches_per_step: self.gradient_accumulation,
                    steps_per_run: self.device_iterations,
                    depth: POPLAR_PREFETCH_DEPTH,
                },
            ),
        };
        let step_s = step.total();
        let global_batch = self
            .micro_batch
            .saturating_mul(self.gradient_accumulation)
            .saturating_mul(self.replicas);
        let samples_per_second = global_batch as f64 / step_s;
        let (fwd, bwd) = model.flops_per_sample();
        let peak = spec.peak_fp16_flops() * self.replicas as f64 * stages as f64;
        let flops_utilisation = samples_per_second * (fwd + bwd) as f64 / peak;
        let pod_independent = step_s - step.all_reduce.total() - step.sync_s;
        let pods: Vec<PodSpec> = scaling_pods(spec)
            .into_iter()
            .filter(|pod| pod.ipus() >= stages && pod.domain_ipus() >= stages)
            .collect();
        let scaling =
            scaling_table_with(&pods, stages, self.collectives, grad_bytes, pod_independent)?;
        let worst = plans
            .iter()
            .fold(None::<&StagePlan>, |w, p| match w {
                Some(w) if w.worst_tile_bytes >= p.worst_tile_bytes => Some(w),
                _ => Some(p),
            })
            .map_or(
                WorstTile {
                    stage: 0,
                    bytes: 0,
                    capacity,
                    fraction: 0.0,
                },
                |w| WorstTile {
                    stage: w.stage,
                    bytes: w.worst_tile_bytes,
                    capacity,
                    fraction: w.worst_tile_bytes as f64 / capacity as f64,
                },
            );
        let overflows: Vec<Overflow> = plans
            .iter()
            .filter(|p| !p.fits)
            .map(|p| {
                let (largest, largest_bytes) = p.memory.largest();
                Overflow {
                    stage: p.stage,
                    tile_bytes_over: p.worst_tile_bytes - capacity,
                    ipu_bytes_over: p.memory.total().saturating_sub(spec.total_memory()),
                    largest,
                    largest_bytes,
                }
            })
            .collect();
        Ok(Plan {
            model: model.name().to_owned(),
            pod: pod.name().to_owned(),
            pod_ipus: pod.ipus(),
            ipu: ipu_name(&spec),
            precision: self.precision,
            optimizer: self.optimizer,
            schedule: self.schedule,
            micro_batch: self.micro_batch,
            gradient_accumulation: self.gradient_accumulation,
            replicas: self.replicas,
            ipus_per_replica: stages,
            recompute: self.recompute,
            replicated_tensor_sharding: self.replicated_tensor_sharding,
            offload_optimizer_state: self.offload_optimizer_state,
            global_batch,
            params: model.params(),
            flops_per_sample: Flops {
                forward: fwd,
                backward: bwd,
            },
            fits: overflows.is_empty(),
            worst,
            overflows,
            stages: plans,
            pipeline_steps,
            step,
            step_s,
            samples_per_second,
            flops_utilisation,
            scaling,
            assumptions: self.assumptions,
        })
    }
}
