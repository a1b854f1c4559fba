//! The simulated time of a training step on the Pod.
//!
//! | part | model |
//! |---|---|
//! | compute, pipeline bubble, recompute | the cycles of the replica's forward and backward engine (the [`ipu`](crate::ipu) cost table) per stage and micro-batch, combined by the pipeline schedule (see [`step_cycles`](super::step_cycles)); one stage when not pipelined |
//! | gradient reduction | [`Layout::all_reduce_time`] of the gradients (2 bytes an element in f16 compute, 4 in f32); with replicated tensor sharding, [`Layout::reduce_scatter_time`] of the gradients and [`Layout::all_gather_time`] of the weights |
//! | optimizer | the LAMB kernels' costs (`lamb_partials` + `lamb_apply`) over the elements a tile owns, the replica's tiles sharing its parameters (or its shard) evenly; SGD and AdamW charged `lamb_apply` only |
//! | offload | optimizer state (and f32 master weights) read from and written back to streaming memory every step at the host link's rate ([`IpuParams::host_bytes_per_second`](crate::IpuParams::host_bytes_per_second)), not overlapped with compute (assumption) |
//! | sync | one Pod-wide sync per step ([`Layout::sync_time`]) |
//! | host IO | the step's samples (f32 inputs, u32 labels) through [`Layout::host_io_time`], streamed ahead of compute by the infeed ([`Layout::host_input_wait`]): charged for the first micro-batch of each run of `device_iterations` steps, and where the link is slower than compute |

use serde::Serialize;

use super::config::{OptimizerConfig, TrainConfig};
use super::fit::state_bytes_per_element;
use super::pipeline::StepCycles;
use super::precision::PrecisionMode;
use crate::IpuSpec;
use crate::pod::{Layout, Prefetch};

/// Simulated seconds of one optimizer step, by part.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct StepTime {
    /// Forward and backward passes of every micro-batch.
    pub compute_s: f64,
    /// Pipeline ramp-up and ramp-down (stages idle).
    pub bubble_s: f64,
    /// Forward passes run again for recomputation.
    pub recompute_s: f64,
    /// Gradient reduction (and the weights' all-gather) over IPU-Links.
    pub ipu_link_s: f64,
    /// The same over GW-Links (between POD64s).
    pub gw_link_s: f64,
    /// The optimizer's kernels.
    pub optimizer_s: f64,
    /// Optimizer state to and from streaming memory.
    pub offload_s: f64,
    /// The step's Pod-wide sync.
    pub sync_s: f64,
    /// Inputs and labels from the host.
    pub host_io_s: f64,
}

impl StepTime {
    /// Seconds in all (the parts run one after the other).
    ///
    /// ```
    /// use tessera_sim::train::StepTime;
    ///
    /// let t = StepTime { compute_s: 0.5, sync_s: 0.25, ..StepTime::default() };
    /// assert_eq!(t.total(), 0.75);
    /// ```
    #[must_use]
    pub fn total(&self) -> f64 {
        self.compute_s
            + self.bubble_s
            + self.recompute_s
            + self.ipu_link_s
            + self.gw_link_s
            + self.optimizer_s
            + self.offload_s
            + self.sync_s
            + self.host_io_s
    }

    /// The parts with their names, for reports.
    ///
    /// ```
    /// use tessera_sim::train::StepTime;
    ///
    /// let t = StepTime { compute_s: 0.5, host_io_s: 0.125, ..StepTime::default() };
    /// assert_eq!(t.parts()[0], ("compute", 0.5));
    /// assert_eq!(t.parts().iter().map(|(_, s)| s).sum::<f64>(), t.total());
    /// ```
    #[must_use]
    pub fn parts(&self) -> [(&'static str, f64); 9] {
        [
            ("compute", self.compute_s),
            ("pipeline bubble", self.bubble_s),
            ("recompute", self.recompute_s),
            ("all-reduce (IPU-Links)", self.ipu_link_s),
            ("all-reduce (GW-Links)", self.gw_link_s),
            ("optimizer", self.optimizer_s),
            ("offload", self.offload_s),
            ("sync", self.sync_s),
            ("host IO", self.host_io_s),
        ]
    }
}

/// The simulated time of one step whose micro-batches took `cycles` (by
/// the pipeline schedule), for `elements` parameters over `shards`.
pub(crate) fn step_time(
    config: &TrainConfig,
    layout: &Layout,
    spec: &IpuSpec,
    features: usize,
    elements: u64,
    shards: u64,
    cycles: StepCycles,
) -> StepTime {
    let grad_bytes = elements * config.precision.compute_bytes();
    let weight_bytes = elements
        * match config.precision {
            PrecisionMode::Fp32 => 4,
            _ => 2,
        };
    let comm = if config.replicated_tensor_sharding {
        let rs = layout.reduce_scatter_time(grad_bytes);
        let ag = layout.all_gather_time(weight_bytes);
        (rs.ipu_link_s + ag.ipu_link_s, rs.gw_link_s + ag.gw_link_s)
    } else {
        let ar = layout.all_reduce_time(grad_bytes);
        (ar.ipu_link_s, ar.gw_link_s)
    };
    let owned = elements.div_ceil(shards.max(1));
    let tiles = u64::from(spec.tiles()) * config.ipus_per_replica as u64;
    let per_tile = owned.div_ceil(tiles);
    let costs = spec.costs();
    let workers = spec.workers_per_tile();
    let kernel = |k: &crate::ipu::KernelCost| {
        u64::from(spec.params().compute_set_cycles)
            + u64::from(workers) * k.multi_thread_cycles(per_tile, workers)
    };
    let optimizer_cycles = match config.optimizer {
        OptimizerConfig::Lamb(_) | OptimizerConfig::Lars(_) => {
            kernel(&costs.lamb_partials) + kernel(&costs.lamb_apply)
        }
        OptimizerConfig::Sgd(_) | OptimizerConfig::AdamW(_) => kernel(&costs.lamb_apply),
    };
    let offload_s = if config.offload_optimizer_state {
        let bytes = state_bytes_per_element(&config.optimizer, config.precision) * owned;
        2.0 * bytes as f64 / spec.params().host_bytes_per_second as f64
    } else {
        0.0
    };
    let samples = (config.micro_batch * config.gradient_accumulation) as u64;
    let io_bytes = samples * (4 * features as u64 + 4);
    let busy = spec.seconds(cycles.compute + cycles.bubble + cycles.recompute);
    let prefetch = Prefetch {
        micro_batches_per_step: config.gradient_accumulation,
        steps_per_run: config.device_iterations,
        depth: config.infeed_capacity,
    };
    StepTime {
        compute_s: spec.seconds(cycles.compute),
        bubble_s: spec.seconds(cycles.bubble),
        recompute_s: spec.seconds(cycles.recompute),
        ipu_link_s: comm.0,
        gw_link_s: comm.1,
        optimizer_s: spec.seconds(optimizer_cycles),
        offload_s,
        sync_s: layout.sync_time(),
        host_io_s: layout.host_input_wait(io_bytes, busy, prefetch),
    }
}
