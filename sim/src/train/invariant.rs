//! `--batch-invariant`: the weights bitwise the same for every cut of the
//! global batch into instances, replicas and micro-batches.
//!
//! Every sum over samples that reaches the weights is exact:
//! - the loss gradient of each sample is seeded with `scale / B` (`B` the
//!   global batch), not `scale / micro_batch`, so the mean is taken once,
//!   the same way for every cut;
//! - each weight's and bias's gradient is the exact sum of its per-sample
//!   products ([`Model::add_exact_grads`]), accumulated over the
//!   micro-batches in [`ExactSum`] states;
//! - the replicas' states are merged exactly: their limbs summed as
//!   integers (8-bit limbs in f32, exact in any order), through the
//!   hierarchical all-reduce;
//! - each element is rounded once to f32 before the loss scaler and the
//!   optimizer; the loss and the accuracy are exact sums too, and the
//!   automatic loss scaler's histogram counts the rounded gradient.
//!
//! Batch norm's statistics are the micro-batch's by definition, so a model
//! with batch norm is refused; so is `--reduction sum`, whose value (a sum
//! of micro-batch means) changes with the cut.

use tessera_collectives::{CommError, ReduceOp};
use tessera_core::kernels::ExactSum;

use super::TrainError;
use super::comm::{ReplicaComm, from_limb_sums, to_limbs};
use super::config::{GradReduction, TrainConfig};
use super::params::FlatParams;
use crate::ipu::IpuSpec;
use crate::model::{MicroBatchOutput, Model, NetLayer, NetworkConfig, Op};
use crate::pod::Layout;

/// Bytes per element of an exact state on the wire: its [`ExactSum::LIMBS`]
/// 64-bit integers (an `MPI_SUM` of `i64`), against 2 or 4 for a gradient.
pub(crate) const EXACT_WIRE_BYTES: u64 = 8 * ExactSum::LIMBS as u64;

/// Refuses what `--batch-invariant` cannot make invariant.
pub(crate) fn check(config: &TrainConfig) -> Result<(), TrainError> {
    let refuse = |why: &str| Err(TrainError::Invalid(format!("--batch-invariant: {why}")));
    let net_bn = config.network.as_ref().is_some_and(has_batch_norm);
    if config.batch_norm || net_bn {
        return refuse(
            "batch norm's statistics depend on the micro-batch; use a model without batch norm",
        );
    }
    if config.reduction == GradReduction::Sum {
        return refuse(
            "--reduction sum adds micro-batch means, which depend on the micro-batch; use mean",
        );
    }
    Ok(())
}

/// Whether any layer of `net` normalises by batch statistics.
pub(crate) fn has_batch_norm(net: &NetworkConfig) -> bool {
    fn any(layers: &[NetLayer]) -> bool {
        layers.iter().any(|l| match l {
            NetLayer::Dense { batch_norm, .. } => *batch_norm,
            NetLayer::BnAct => true,
            NetLayer::Residual(body) => any(body),
            NetLayer::Branches(bs) => bs.iter().any(|b| any(b)),
            NetLayer::Conv { .. } | NetLayer::Pool(_) | NetLayer::GlobalAvgPool => false,
        })
    }
    any(&net.layers)
}

/// The loss gradient's seed of every sample: `scale / B` for a global
/// batch of `B` samples, whatever the cut.
pub(crate) fn sample_scale(config: &TrainConfig, scale: f32) -> f32 {
    let global = config.micro_batch * config.gradient_accumulation * config.replicas;
    scale / global as f32
}

/// One replica's exact sums of a step.
pub(crate) struct ExactGrads {
    /// Per parameter.
    sums: Vec<Vec<ExactSum>>,
    loss: ExactSum,
    correct: u64,
}

impl ExactGrads {
    pub(crate) fn new(flat: &FlatParams) -> Self {
        let sums = flat
            .specs()
            .iter()
            .map(|s| vec![ExactSum::new(); s.len()])
            .collect();
        Self {
            sums,
            loss: ExactSum::new(),
            correct: 0,
        }
    }

    /// Adds the micro-batch `model` just ran (its output `out`).
    pub(crate) fn add(&mut self, model: &Model, out: &MicroBatchOutput) -> Result<(), TrainError> {
        model.add_exact_grads(&mut self.sums)?;
        self.loss.merge(&out.losses);
        self.correct += out.correct as u64;
        Ok(())
    }

    /// Merges every replica's sums (over `comm`, when `replicas > 1`),
    /// writes the gradients rounded once into `grads` (flat) and returns
    /// the loss sum and the correct count; the sums start again at zero.
    pub(crate) fn reduce(
        &mut self,
        comm: &mut ReplicaComm,
        replicas: usize,
        flat: &FlatParams,
        grads: &mut [f32],
    ) -> Result<(f32, u64), CommError> {
        if replicas > 1 {
            self.all_reduce(comm)?;
        }
        for (i, s) in self.sums.iter_mut().enumerate() {
            for (g, x) in grads[flat.range(i)].iter_mut().zip(s.iter_mut()) {
                *g = x.to_f32();
                *x = ExactSum::new();
            }
        }
        let out = (self.loss.to_f32(), self.correct);
        (self.loss, self.correct) = (ExactSum::new(), 0);
        Ok(out)
    }

    /// Replaces the sums by their merge over every replica: the limbs as
    /// 64-bit words, summed (wrapping) through f32 limbs of 8 bits.
    fn all_reduce(&mut self, comm: &mut ReplicaComm) -> Result<(), CommError> {
        let states = self.sums.iter().flatten().chain([&self.loss]);
        let mut words: Vec<u64> = states.flat_map(|s| s.limbs().map(|l| l as u64)).collect();
        words.push(self.correct);
        let mut limbs = to_limbs(&words);
        comm.all_reduce(&mut limbs, ReduceOp::Sum)?;
        let words = from_limb_sums(&limbs);
        let mut states = words
            .chunks_exact(ExactSum::LIMBS)
            .map(|w| ExactSum::from_limbs(core::array::from_fn(|k| w[k] as i64)));
        for s in self.sums.iter_mut().flatten() {
            *s = states.next().expect("one state per element");
        }
        self.loss = states.next().expect("the loss's state");
        self.correct = *words.last().expect("the count");
        Ok(())
    }
}

/// Exact additions per micro-batch of `net` at `micro_batch` samples:
/// every weight's and bias's per-row products ([`Model::exact_additions`]).
pub(crate) fn exact_additions(net: &NetworkConfig, micro_batch: usize) -> u64 {
    let Ok(ops) = net.ops(micro_batch) else {
        return 0;
    };
    let n = micro_batch as u64;
    ops.iter()
        .map(|op| match op {
            Op::Dense { fan_in, width, .. } => n * (*fan_in as u64 + 1) * *width as u64,
            Op::Head { fan_in, classes } => n * (*fan_in as u64 + 1) * *classes as u64,
            Op::Conv(s) => (s.out_rows() * s.patch() * s.conv.out_channels) as u64,
            _ => 0,
        })
        .sum()
}

/// The cycles of a step's exact sums on a replica's tiles: every product
/// of `additions` per micro-batch (times `g` micro-batches) added into an
/// exact state, and every one of `elements` states rounded once, each at
/// [`Kernel::MergeExact`](crate::ipu::Kernel::MergeExact)'s cost per sum,
/// spread evenly over the replica's tiles and their workers.
pub(crate) fn exact_cycles(
    spec: &IpuSpec,
    ipus: usize,
    (additions, g): (u64, u64),
    elements: u64,
) -> u64 {
    let tiles = u64::from(spec.tiles()) * ipus as u64;
    let workers = spec.workers_per_tile();
    let cost = spec.costs().merge_exact;
    let per_tile = (additions * g + elements).div_ceil(tiles.max(1));
    u64::from(spec.params().compute_set_cycles)
        + u64::from(workers) * cost.multi_thread_cycles(per_tile, workers)
}

/// The links' seconds of a step's gradient exchange when the exact states
/// of `elements` parameters cross them instead of the gradients
/// (`EXACT_WIRE_BYTES` each), and `weight_bytes` of weights are gathered
/// after a sharded update: `(IPU-Links, GW-Links)`.
pub(crate) fn exact_link_seconds(
    layout: &Layout,
    elements: u64,
    sharded: Option<u64>,
) -> (f64, f64) {
    let bytes = elements * EXACT_WIRE_BYTES;
    match sharded {
        Some(weight_bytes) => {
            let rs = layout.reduce_scatter_time(bytes);
            let ag = layout.all_gather_time(weight_bytes);
            (rs.ipu_link_s + ag.ipu_link_s, rs.gw_link_s + ag.gw_link_s)
        }
        None => {
            let ar = layout.all_reduce_time(bytes);
            (ar.ipu_link_s, ar.gw_link_s)
        }
    }
}
