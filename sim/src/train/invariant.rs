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
//!   integers (16-bit limbs in f32, exact in any order for up to 256
//!   replicas), through the hierarchical all-reduce;
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
use super::comm::ReplicaComm;
use super::config::{GradReduction, TrainConfig};
use super::params::FlatParams;
use crate::ipu::IpuSpec;
use crate::model::{MicroBatchOutput, Model, NetLayer, NetworkConfig, Op};
use crate::pod::Layout;

/// Bytes per element of an exact state on the wire: [`WIRE_VALUES`] f32
/// values, against 2 or 4 for a gradient.
pub(crate) const EXACT_WIRE_BYTES: u64 = 4 * WIRE_VALUES as u64;

/// Refuses what `--batch-invariant` cannot make invariant.
pub(crate) fn check(config: &TrainConfig) -> Result<(), TrainError> {
    let refuse = |why: &str| Err(TrainError::Invalid(format!("--batch-invariant: {why}")));
    let net_bn = config.network.as_ref().is_some_and(has_batch_norm);
    if config.batch_norm || net_bn {
        return refuse(
            "batch norm's statistics depend on the micro-batch; use a model without batch norm",
        );
    }
    if config.replicas > MAX_REPLICAS {
        return refuse(&format!(
            "{} replicas: exact sums merge over at most {MAX_REPLICAS}",
            config.replicas
        ));
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

    /// Replaces the sums by their merge over every replica: each state
    /// as [`WIRE_VALUES`] f32 values ([`encode`]) summed exactly.
    fn all_reduce(&mut self, comm: &mut ReplicaComm) -> Result<(), CommError> {
        let states = self.sums.iter().flatten().chain([&self.loss]);
        let count = self.sums.iter().map(Vec::len).sum::<usize>() + 1;
        let mut wire = Vec::with_capacity(count * WIRE_VALUES + 2);
        for s in states {
            encode(s, &mut wire);
        }
        // The count in two 16-bit halves (below 2^32 samples).
        wire.extend([(self.correct & 0xffff) as f32, (self.correct >> 16) as f32]);
        comm.all_reduce(&mut wire, ReduceOp::Sum)?;
        let (states, count) = wire.split_at(wire.len() - 2);
        let mut states = states.chunks_exact(WIRE_VALUES).map(decode);
        for s in self.sums.iter_mut().flatten() {
            *s = states.next().expect("one state per element");
        }
        self.loss = states.next().expect("the loss's state");
        self.correct = count[0] as u64 + ((count[1] as u64) << 16);
        Ok(())
    }
}

/// The most replicas whose encoded states sum exactly: 16-bit limbs in
/// f32 stay below 2^24.
pub(crate) const MAX_REPLICAS: usize = 256;

/// Digits of an [`ExactSum`] below the signed top one, each below 2^32.
const LOW_DIGITS: usize = ExactSum::LIMBS - 4;

/// f32 values per state on the wire: two 16-bit halves per low digit,
/// four 16-bit quarters of the signed top digit, three presence flags.
pub(crate) const WIRE_VALUES: usize = 2 * LOW_DIGITS + 4 + 3;

/// Appends `s` as [`WIRE_VALUES`] integers below 2^16 held in f32, whose
/// element-wise sums over at most [`MAX_REPLICAS`] states are exact in
/// any order and [`decode`] to the states' merge.
pub(crate) fn encode(s: &ExactSum, out: &mut Vec<f32>) {
    let limbs = s.limbs();
    for &d in &limbs[..LOW_DIGITS] {
        out.extend([(d & 0xffff) as f32, (d >> 16) as f32]);
    }
    let top = limbs[LOW_DIGITS] as u64;
    out.extend((0..4).map(|q| ((top >> (16 * q)) & 0xffff) as f32));
    // Infinities and NaN: only their presence matters to the rounding.
    out.extend(
        limbs[LOW_DIGITS + 1..]
            .iter()
            .map(|&c| f32::from(u8::from(c != 0))),
    );
}

/// The merge of the states whose [`encode`]d values summed to `wire`.
pub(crate) fn decode(wire: &[f32]) -> ExactSum {
    let mut limbs = [0i64; ExactSum::LIMBS];
    for (l, halves) in limbs.iter_mut().zip(wire.chunks_exact(2).take(LOW_DIGITS)) {
        *l = halves[0] as i64 + ((halves[1] as i64) << 16);
    }
    let quarters = &wire[2 * LOW_DIGITS..2 * LOW_DIGITS + 4];
    let top = (0..4).fold(0u64, |t, q| {
        t.wrapping_add((quarters[q] as u64) << (16 * q))
    });
    limbs[LOW_DIGITS] = top as i64;
    for (l, &c) in limbs[LOW_DIGITS + 1..]
        .iter_mut()
        .zip(&wire[2 * LOW_DIGITS + 4..])
    {
        *l = c as i64;
    }
    ExactSum::from_limbs(limbs)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipu::{IpuSpec, Target};
    use crate::model::Compute;

    /// The cost's count, from the layers' shapes, is the model's.
    #[test]
    fn the_cost_counts_the_models_additions() {
        let net = NetworkConfig {
            layers: vec![
                NetLayer::Conv {
                    channels: 4,
                    kernel: 3,
                    stride: 2,
                    padding: 1,
                },
                NetLayer::GlobalAvgPool,
                NetLayer::Dense {
                    width: 8,
                    batch_norm: false,
                },
            ],
            ..NetworkConfig::resnet_mini([2, 6, 6], 3, &[4], &[1])
        };
        let target = Target::single(IpuSpec::MK2_GC200);
        let model = Model::new(&net, target, 3, Compute::F32).unwrap();
        assert_eq!(exact_additions(&net, 3), model.exact_additions());
        assert!(!has_batch_norm(&net));
    }

    /// States of both signs, across the range, with infinities and NaN,
    /// summed on the wire as f32 in any order: their exact merge.
    #[test]
    fn encoded_states_sum_to_their_merge() {
        let values = [
            [1.0e30f32, -3.5, 1.0e-40, 7.0],
            [-1.0e30, 2.0, -f32::MAX, 0.0],
            [f32::MAX, -1.0e-45, 0.25, f32::INFINITY],
            [-0.0, 1.0, f32::NAN, -1.0e20],
        ];
        let states: Vec<ExactSum> = values
            .iter()
            .map(|v| {
                let mut s = ExactSum::new();
                v.iter().for_each(|&x| s.add(x));
                s
            })
            .collect();
        let mut merged = ExactSum::new();
        states.iter().for_each(|s| merged.merge(s));
        let mut wire = vec![0.0f32; WIRE_VALUES];
        for s in states.iter().rev() {
            let mut one = Vec::new();
            encode(s, &mut one);
            wire.iter_mut().zip(one).for_each(|(w, x)| *w += x);
        }
        let back = decode(&wire);
        assert_eq!(back.to_f32().to_bits(), merged.to_f32().to_bits());
        // Without the specials: the same finite total, limb for limb.
        let finite: Vec<ExactSum> = values
            .iter()
            .map(|v| {
                let mut s = ExactSum::new();
                v.iter().filter(|x| x.is_finite()).for_each(|&x| s.add(x));
                s
            })
            .collect();
        let mut merged = ExactSum::new();
        finite.iter().for_each(|s| merged.merge(s));
        let mut wire = vec![0.0f32; WIRE_VALUES];
        for s in &finite {
            let mut one = Vec::new();
            encode(s, &mut one);
            wire.iter_mut().zip(one).for_each(|(w, x)| *w += x);
        }
        assert_eq!(decode(&wire), merged);
    }
}
