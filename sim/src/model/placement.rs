//! Where a replica's layers run: spread over every tile of the replica's
//! IPUs, or placed on its IPUs (model sharding, pipeline stages) block by
//! block: stages cut only between top-level layers
//! ([`NetworkConfig::blocks`]), never inside a residual body, as a device
//! mapping names them or balanced by the blocks' forward flops (an MLP's
//! blocks are its dense layers). A block of parallel branches mapped to a
//! list of IPUs puts each branch on its own IPU: one concurrent pipeline
//! stage (TF IPU's `[s0, [s1a, s1b], s2]`), or, for comparison, one stage
//! per branch in branch order. One validator ([`Placement::validate`])
//! checks any placement against the network; and the cycles each stage of
//! a placed model spends forward and backward.

use core::ops::Range;

use super::device_mapping::{DeviceMapping, MappingEntry};
use super::error::{MappingError, ModelError};
use super::network::{NetLayer, NetworkConfig, Op, branch_of_ops};
use crate::ipu::{Profile, Target, Tile};

/// Where the layers of a replica's model run (a network's flattened
/// layers, placed block by block by [`Placement::network`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Every layer over every tile of the replica's IPUs.
    #[default]
    Spread,
    /// Layer `l` on IPU `ipus[l]` of the replica (its tiles only), IPUs
    /// non-decreasing from layer to layer: contiguous stages, activations
    /// and their gradients crossing IPU-Links between them.
    Ipus(Vec<u32>),
    /// A network's flattened layer `l` on IPU `ipus[l]` in pipeline stage
    /// `stages[l]` (both non-decreasing): a stage of parallel branches has
    /// a part on each branch's IPU, run concurrently (TF IPU's concurrent
    /// pipeline stages), and an IPU may hold parts of successive stages.
    Stages {
        /// Each layer's IPU.
        ipus: Vec<u32>,
        /// Each layer's stage.
        stages: Vec<u32>,
    },
}

/// Where one stage runs on one IPU: a stage has one part, or one per IPU
/// of its concurrent branches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Part {
    /// The stage.
    pub stage: usize,
    /// The IPU of the replica.
    pub ipu: u32,
}

impl Placement {
    /// Checks the placement against the model and the replica's IPUs: it
    /// names one of `target`'s IPUs for every flattened layer of `config`,
    /// non-decreasing, one per block but for parallel branches (one per
    /// branch), and stages that do not go back.
    ///
    /// # Errors
    /// [`ModelError::Placement`] naming the layer or IPU that is wrong.
    ///
    /// ```
    /// use tessera_sim::ipu::Target;
    /// use tessera_sim::model::{Activation, MlpConfig, ModelError, Placement};
    /// use tessera_sim::IpuSpec;
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![8, 4], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let one_ipu = Target::single(IpuSpec::MK2_GC200);
    /// assert!(Placement::Spread.validate(&net, &one_ipu).is_ok());
    /// let two = Placement::Ipus(vec![0, 0, 1]);
    /// assert!(matches!(two.validate(&net, &one_ipu), Err(ModelError::Placement { .. })));
    /// ```
    pub fn validate(&self, config: &NetworkConfig, target: &Target) -> Result<(), ModelError> {
        let Some(per_op) = self.ipus() else {
            return Ok(());
        };
        let ops = config.ops(1)?;
        let layers = ops.len();
        let stages_go_back = match self {
            Self::Stages { stages, .. } => {
                stages.len() != layers || stages.windows(2).any(|w| w[1] < w[0])
            }
            _ => false,
        };
        let cut_block = config.blocks()?.into_iter().find(|r| {
            let branch = branch_of_ops(&ops[r.clone()]);
            let Some(ipus) = per_op.get(r.clone()) else {
                return false;
            };
            // Within a branch (or a block without branches) one IPU.
            (1..r.len()).any(|i| branch[i] == branch[i - 1] && ipus[i] != ipus[i - 1])
        });
        let reason = if per_op.len() != layers {
            format!("{} layers placed, the model has {layers}", per_op.len())
        } else if let Some(l) = per_op.iter().position(|&i| i >= target.ipus()) {
            let ipus = target.ipus();
            format!(
                "layer {l} is on IPU {}, but a replica has {ipus} IPUs",
                per_op[l]
            )
        } else if let Some(l) = per_op.windows(2).position(|w| w[1] < w[0]) {
            let (now, before) = (per_op[l + 1], per_op[l]);
            format!(
                "layer {} is on IPU {now} after layer {l} on IPU {before}: stages must be \
                 contiguous, in increasing IPU order",
                l + 1
            )
        } else if stages_go_back {
            "the layers' stages are not one per layer, non-decreasing".to_owned()
        } else if let Some(r) = cut_block {
            format!("layers {r:?} form one block, cut between IPUs")
        } else {
            return Ok(());
        };
        Err(ModelError::Placement { reason })
    }

    /// Pipeline stages: the IPUs used in turn (1 when spread), a
    /// concurrent stage counting once.
    ///
    /// ```
    /// use tessera_sim::model::Placement;
    ///
    /// assert_eq!(Placement::Spread.stages(), 1);
    /// assert_eq!(Placement::Ipus(vec![0, 0, 1, 3]).stages(), 3);
    /// ```
    #[must_use]
    pub fn stages(&self) -> usize {
        match self {
            Self::Spread => 1,
            Self::Ipus(ipus) => {
                let mut used: Vec<u32> = ipus.clone();
                used.dedup();
                used.len()
            }
            Self::Stages { stages, .. } => stages.last().map_or(1, |&s| s as usize + 1),
        }
    }

    /// Each layer's IPU, unless spread.
    ///
    /// ```
    /// use tessera_sim::model::Placement;
    ///
    /// assert_eq!(Placement::Spread.ipus(), None);
    /// assert_eq!(Placement::Ipus(vec![0, 1]).ipus(), Some(&[0, 1][..]));
    /// ```
    #[must_use]
    pub fn ipus(&self) -> Option<&[u32]> {
        match self {
            Self::Spread => None,
            Self::Ipus(ipus) | Self::Stages { ipus, .. } => Some(ipus),
        }
    }

    /// The parts of the stages, in the layers' order: one per stage, or
    /// one per IPU of a concurrent stage.
    ///
    /// ```
    /// use tessera_sim::model::{Part, Placement};
    ///
    /// assert_eq!(Placement::Spread.parts(), [Part::default()]);
    /// let two = Placement::Ipus(vec![0, 0, 1]).parts();
    /// assert_eq!(two, [Part { stage: 0, ipu: 0 }, Part { stage: 1, ipu: 1 }]);
    /// ```
    #[must_use]
    pub fn parts(&self) -> Vec<Part> {
        self.parts_of_layers().0
    }

    /// [`Placement::parts`], and each layer's part (an index into them;
    /// none when spread: every layer is in the one part, so look a layer
    /// up as `of.get(l)`, part 0 when absent).
    ///
    /// ```
    /// use tessera_sim::model::Placement;
    ///
    /// let (parts, of) = Placement::Ipus(vec![0, 0, 1]).parts_of_layers();
    /// assert_eq!((parts.len(), of), (2, vec![0, 0, 1]));
    /// assert!(Placement::Spread.parts_of_layers().1.is_empty());
    /// ```
    #[must_use]
    pub fn parts_of_layers(&self) -> (Vec<Part>, Vec<usize>) {
        let Some(ipus) = self.ipus() else {
            return (vec![Part::default()], Vec::new());
        };
        let (mut parts, mut of): (Vec<Part>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut stage = 0;
        for (l, &ipu) in ipus.iter().enumerate() {
            stage = match self {
                Self::Stages { stages, .. } => stages[l] as usize,
                // A stage per IPU in turn.
                _ => stage + usize::from(l > 0 && ipus[l - 1] != ipu),
            };
            let part = Part { stage, ipu };
            let i = parts.iter().position(|p| *p == part).unwrap_or_else(|| {
                parts.push(part);
                parts.len() - 1
            });
            of.push(i);
        }
        (parts, of)
    }

    /// The tiles layer `l` runs on.
    pub(crate) fn tiles(&self, l: usize, target: &Target) -> Range<Tile> {
        match self.ipus() {
            None => 0..target.tiles(),
            Some(ipus) => {
                let per = target.spec().tiles();
                ipus[l] * per..(ipus[l] + 1) * per
            }
        }
    }
}

/// The IPU of each of `weight.len() >= ipus` items in contiguous
/// stages over `ipus` IPUs (at least one item each) minimising the
/// heaviest stage, the earliest cut where several give the same stages'
/// weights (dynamic programming over the split points).
///
/// Time `O(ipus * items)`: the lightest heaviest stage of the first `m`
/// items in `k` stages, `best[k][m]`, grows with `m`, and the last
/// stage's weight shrinks as its start moves right, so the best start
/// (where the two cross) only moves right as `m` grows.
fn contiguous_split(weight: &[u128], ipus: u32) -> Vec<u32> {
    let n = weight.len();
    let ipus = (ipus.max(1) as usize).min(n.max(1));
    let prefix: Vec<u128> = core::iter::once(0)
        .chain(weight.iter().scan(0u128, |s, &w| {
            *s = s.saturating_add(w);
            Some(*s)
        }))
        .collect();
    let stage = |start: usize, end: usize| prefix[end] - prefix[start];
    // best[k][m] for m >= k; `u128::MAX` where no split reaches (k > m).
    let mut best = vec![vec![u128::MAX; n + 1]];
    best[0][0] = 0;
    for k in 1..=ipus {
        let prev = &best[k - 1];
        let mut level = vec![u128::MAX; n + 1];
        // The first start past `k - 1` whose earlier stages weigh more
        // than its last stage: the crossing.
        let mut cross = k - 1;
        for (end, best_end) in level.iter_mut().enumerate().skip(k) {
            while cross < end && prev[cross] <= stage(cross, end) {
                cross += 1;
            }
            let before = (cross > k - 1).then(|| stage(cross - 1, end));
            let after = (cross < end).then(|| prev[cross]);
            *best_end = before.into_iter().chain(after).min().expect("a start");
        }
        best.push(level);
    }
    let mut ipu_of = vec![0u32; n];
    let mut end = n;
    for k in (1..=ipus).rev() {
        // The earliest start that reaches the best (every k <= n items
        // split into k non-empty stages).
        let start = (k - 1..end)
            .find(|&s| best[k - 1][s].max(stage(s, end)) == best[k][end])
            .expect("a split of n >= ipus items");
        ipu_of[start..end].fill((k - 1) as u32);
        end = start;
    }
    ipu_of
}

/// What a top-level layer is, for messages.
fn describe(layer: Option<&NetLayer>) -> String {
    match layer {
        None => "head".into(),
        Some(NetLayer::Dense { width, .. }) => format!("dense -> {width}"),
        Some(NetLayer::Conv {
            channels,
            kernel,
            stride,
            ..
        }) => format!("conv {kernel}x{kernel} s{stride} -> {channels}"),
        Some(NetLayer::BnAct) => "batch norm".into(),
        Some(NetLayer::Pool(p)) => format!("{:?} pool", p.kind).to_lowercase(),
        Some(NetLayer::GlobalAvgPool) => "global average pool".into(),
        Some(NetLayer::Residual(_)) => "residual block".into(),
        Some(NetLayer::Branches(b)) => format!("{} parallel branches", b.len()),
    }
}

impl Placement {
    /// Block `b` of `config` (top-level layer, the head last) on IPU
    /// `mapping[b]` of a replica of `ipus` IPUs, as a placement of its
    /// flattened layers; a block of parallel branches mapped to a list of
    /// IPUs has branch `i` on the list's IPU `i` (its split with the
    /// first branch, its concat with the last), as one concurrent stage
    /// if `concurrent`, else one stage per branch.
    ///
    /// # Errors
    /// [`ModelError::DeviceMapping`] naming the block; the network's own
    /// errors.
    ///
    /// ```
    /// use tessera_sim::model::{Activation, DeviceMapping, MlpConfig, ModelError, Placement};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![8, 4], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let mapping = DeviceMapping::from(vec![0, 1, 1]);
    /// assert_eq!(Placement::network(&net, &mapping, 2, true)?, Placement::Ipus(vec![0, 1, 1]));
    /// let short = DeviceMapping::from(vec![0, 1]);
    /// assert!(matches!(Placement::network(&net, &short, 2, true), Err(ModelError::DeviceMapping(_))));
    /// # Ok::<(), ModelError>(())
    /// ```
    pub fn network(
        config: &NetworkConfig,
        mapping: &DeviceMapping,
        ipus: u32,
        concurrent: bool,
    ) -> Result<Self, ModelError> {
        let blocks = config.blocks()?;
        check_mapping(config, mapping, ipus, blocks.len()).map_err(ModelError::DeviceMapping)?;
        let ops = config.ops(1)?;
        let (mut per_op, mut stages) = (Vec::new(), Vec::new());
        // The stage and the IPU the previous block ended on, and whether
        // its stage was concurrent.
        let mut last: Option<(u32, u32, bool)> = None;
        for (range, entry) in blocks.iter().zip(&mapping.0) {
            let list = entry.ipus();
            let branches = matches!(entry, MappingEntry::Branches(_));
            let stage = match last {
                None => 0,
                Some((s, ipu, was)) if !branches && !was && ipu == list[0] => s,
                Some((s, ..)) => s + 1,
            };
            let branch = branch_of_ops(&ops[range.clone()]);
            per_op.extend(branch.iter().map(|&b| list[b.min(list.len() - 1)]));
            stages.extend(core::iter::repeat_n(stage, range.len()));
            last = Some((stage, list[list.len() - 1], branches));
        }
        let has_branches = mapping.flat().is_none();
        Ok(if concurrent && has_branches {
            Self::Stages {
                ipus: per_op,
                stages,
            }
        } else {
            Self::Ipus(per_op)
        })
    }

    /// `config`'s blocks over `ipus` IPUs in contiguous stages balanced by
    /// their forward flops on `micro_batch` samples (the cycles they
    /// cost, roughly), every IPU holding at least one block.
    ///
    /// # Errors
    /// [`ModelError::DeviceMapping`] if there are more IPUs than blocks;
    /// the network's own errors.
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelError, Placement};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![8, 4], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// assert_eq!(Placement::network_balanced(&net, 3, 8)?, Placement::Ipus(vec![0, 1, 2]));
    /// assert!(matches!(Placement::network_balanced(&net, 4, 8), Err(ModelError::DeviceMapping(_))));
    /// # Ok::<(), ModelError>(())
    /// ```
    pub fn network_balanced(
        config: &NetworkConfig,
        ipus: u32,
        micro_batch: usize,
    ) -> Result<Self, ModelError> {
        let blocks = config.blocks()?;
        if ipus.max(1) as usize > blocks.len() {
            return Err(ModelError::DeviceMapping(MappingError::TooManyIpus {
                ipus,
                blocks: blocks.len(),
            }));
        }
        let flops = op_flops(&config.ops(micro_batch.max(1))?, micro_batch.max(1), config);
        let weight: Vec<u128> = blocks
            .iter()
            .map(|r| flops[r.clone()].iter().sum())
            .collect();
        let mapping = contiguous_split(&weight, ipus);
        Self::network(config, &mapping.into(), ipus.max(1), false)
    }

    /// The device mapping of `config`'s blocks this placement of its
    /// flattened layers makes (`None` when spread).
    ///
    /// ```
    /// use tessera_sim::model::{Activation, DeviceMapping, MlpConfig, Placement};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![8, 4], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let mapping = DeviceMapping::from(vec![0, 0, 1]);
    /// let placement = Placement::network(&net, &mapping, 2, true).unwrap();
    /// assert_eq!(placement.network_mapping(&net), Some(mapping));
    /// assert_eq!(Placement::Spread.network_mapping(&net), None);
    /// ```
    #[must_use]
    pub fn network_mapping(&self, config: &NetworkConfig) -> Option<DeviceMapping> {
        let per_op = self.ipus()?;
        let blocks = config.blocks().ok()?;
        let entries = blocks.iter().map(|r| {
            let mut used = per_op.get(r.clone())?.to_vec();
            used.dedup();
            Some(match used[..] {
                [ipu] => MappingEntry::Ipu(ipu),
                _ => MappingEntry::Branches(used),
            })
        });
        entries.collect::<Option<Vec<_>>>().map(DeviceMapping)
    }
}

/// `mapping` has an entry per block (`blocks` of them), IPUs below
/// `ipus`, lists only for parallel branches (one IPU per branch,
/// increasing), and each entry's IPUs at or after the previous entry's.
fn check_mapping(
    config: &NetworkConfig,
    mapping: &DeviceMapping,
    ipus: u32,
    blocks: usize,
) -> Result<(), MappingError> {
    if mapping.len() != blocks {
        return Err(MappingError::Length {
            blocks,
            got: mapping.len(),
        });
    }
    let layer = |b: usize| describe(config.layers.get(b));
    for (block, entry) in mapping.0.iter().enumerate() {
        if let Some(&ipu) = entry.ipus().iter().find(|&&i| i >= ipus) {
            let layer = layer(block);
            return Err(MappingError::Ipu {
                block,
                layer,
                ipu,
                ipus,
            });
        }
        let MappingEntry::Branches(list) = entry else {
            continue;
        };
        let Some(NetLayer::Branches(branches)) = config.layers.get(block) else {
            let (layer, ipus) = (layer(block), list.clone());
            return Err(MappingError::NotBranches { block, layer, ipus });
        };
        if list.len() != branches.len() || list.windows(2).any(|w| w[1] <= w[0]) {
            return Err(MappingError::BranchIpus {
                block,
                branches: branches.len(),
                ipus: list.clone(),
            });
        }
    }
    let out_of_order = mapping
        .0
        .windows(2)
        .position(|w| w[1].ipus()[0] < w[0].ipus()[w[0].ipus().len() - 1]);
    if let Some(b) = out_of_order {
        let (now, before) = (&mapping.0[b + 1], &mapping.0[b]);
        return Err(MappingError::Order {
            block: b + 1,
            layer: layer(b + 1),
            ipu: now.ipus()[0],
            previous: before.ipus()[before.ipus().len() - 1],
        });
    }
    Ok(())
}

/// Each flattened layer's forward flops on `n` samples: a product's
/// multiply-adds twice, a pooling window's reads, batch norm's few
/// operations per element; a residual's start nothing, its sum one per
/// element; parallel branches' split and steps nothing, their concat one
/// per element.
fn op_flops(ops: &[Op], n: usize, config: &NetworkConfig) -> Vec<u128> {
    let [_, h, w] = config.input;
    let mut rows = (n * h * w) as u128;
    let mut channels = config.input[0] as u128;
    // The shapes where open parallel branches split.
    let mut splits = Vec::new();
    ops.iter()
        .map(|op| match op {
            Op::Dense { fan_in, width, .. } => {
                channels = *width as u128;
                2 * rows * (*fan_in as u128) * channels
            }
            Op::Conv(s) => {
                (rows, channels) = (s.out_rows() as u128, s.conv.out_channels as u128);
                2 * rows * (s.patch() as u128) * channels
            }
            Op::Pool(_, s) => {
                rows = s.out_rows() as u128;
                rows * (s.patch() as u128)
            }
            Op::BnAct { .. } => 8 * rows * channels,
            Op::Join => rows * channels,
            Op::Fork => 0,
            Op::Split => {
                splits.push((rows, channels));
                0
            }
            Op::NextBranch => {
                (rows, channels) = *splits.last().expect("a split before every branch");
                0
            }
            Op::Concat { channels: each } => {
                splits.pop();
                channels = each.iter().sum::<usize>() as u128;
                rows * channels
            }
            Op::Head { fan_in, classes } => 2 * (n * fan_in * classes) as u128,
        })
        .collect()
}

/// Cycles of one stage on one IPU (a [`Part`]) for one micro-batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageCycles {
    /// Where: the stage and its IPU.
    pub part: Part,
    /// The forward pass (and, on the last stage, the loss).
    pub forward: u64,
    /// The backward pass.
    pub backward: u64,
}

/// The cycles of a training run's profile by stage part ([`Placement::parts`]):
/// every compute set and exchange named after a layer goes to that
/// layer's part, forward or backward by its name; the rest (the loss,
/// host transfers, the parameters' staging, syncs) is shared out in
/// proportion, so that the parts add up to the profile's total (the
/// sharded, one-after-the-other time).
pub(crate) fn stage_cycles(profile: &Profile, placement: &Placement) -> Vec<StageCycles> {
    let (parts, part_of) = placement.parts_of_layers();
    let mut out: Vec<StageCycles> = parts
        .into_iter()
        .map(|part| StageCycles {
            part,
            ..StageCycles::default()
        })
        .collect();
    let named = profile
        .compute_sets
        .iter()
        .map(|c| (c.name.as_str(), c.cycles))
        .chain(
            profile
                .exchanges
                .iter()
                .map(|e| (e.name.as_str(), e.cycles)),
        );
    let mut attributed = 0u64;
    for (name, cycles) in named {
        let Some((layer, part)) = layer_of(name) else {
            continue;
        };
        let s = &mut out[part_of.get(layer).copied().unwrap_or(0)];
        if is_backward(part) {
            s.backward += cycles;
        } else {
            s.forward += cycles;
        }
        attributed += cycles;
    }
    let rest = profile.total_cycles.saturating_sub(attributed);
    if attributed == 0 {
        out[0].forward += rest;
        return out;
    }
    // Share the rest out in proportion, the rounding on the last stage.
    let mut given = 0;
    let last = out.len() - 1;
    for (i, s) in out.iter_mut().enumerate() {
        let own = s.forward + s.backward;
        let share = if i == last {
            rest - given
        } else {
            (u128::from(rest) * u128::from(own) / u128::from(attributed)) as u64
        };
        given += share;
        // Forward and backward keep their proportions.
        let f = if own == 0 {
            share
        } else {
            (u128::from(share) * u128::from(s.forward) / u128::from(own)) as u64
        };
        s.forward += f;
        s.backward += share - f;
    }
    out
}

/// `layerN.rest` as `(N, rest)`.
fn layer_of(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("layer")?;
    let dot = rest.find('.')?;
    Some((rest[..dot].parse().ok()?, &rest[dot + 1..]))
}

/// Whether a layer's compute set or exchange belongs to the backward pass.
fn is_backward(part: &str) -> bool {
    // The MLP's products and activations; a convolution's patches'
    // gradient, their sum into the input's and its move home; pooling's
    // and the residual sum's gradients; batch norm's (and its group's).
    [
        "dw",
        "db",
        "da",
        "dz",
        "activation_grad",
        "bn.grad",
        "dcols",
        "col2im",
        "dx",
        "pool_grad",
        "grad_sum",
    ]
    .iter()
    .any(|p| part.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The quadratic dynamic programme `contiguous_split` replaced: every
    /// start tried for every end, the first of the lightest kept.
    fn contiguous_split_quadratic(weight: &[u128], ipus: u32) -> Vec<u32> {
        let n = weight.len();
        let ipus = (ipus.max(1) as usize).min(n.max(1));
        let mut best: Vec<Vec<Option<(u128, usize)>>> = vec![vec![None; n + 1]; ipus + 1];
        best[0][0] = Some((0, 0));
        let prefix: Vec<u128> = core::iter::once(0)
            .chain(weight.iter().scan(0u128, |s, &w| {
                *s = s.saturating_add(w);
                Some(*s)
            }))
            .collect();
        for k in 1..=ipus {
            for end in k..=n {
                for start in (k - 1)..end {
                    let Some((prev, _)) = best[k - 1][start] else {
                        continue;
                    };
                    let cost = prev.max(prefix[end] - prefix[start]);
                    if best[k][end].is_none_or(|(b, _)| cost < b) {
                        best[k][end] = Some((cost, start));
                    }
                }
            }
        }
        let mut ipu_of = vec![0u32; n];
        let mut end = n;
        for k in (1..=ipus).rev() {
            let (_, start) = best[k][end].expect("a split");
            ipu_of[start..end].fill((k - 1) as u32);
            end = start;
        }
        ipu_of
    }

    proptest::proptest! {
        /// The linear split cuts where the quadratic one did, ties
        /// (equal weights, zeros) included.
        #[test]
        fn the_linear_split_is_the_quadratic_one(
            weight in proptest::collection::vec(
                proptest::prop_oneof![0u128..4, 0u128..1000, proptest::strategy::Just(u128::MAX / 3)],
                1..40,
            ),
            ipus in 1u32..10,
        ) {
            let ipus = ipus.min(weight.len() as u32);
            proptest::prop_assert_eq!(
                contiguous_split(&weight, ipus),
                contiguous_split_quadratic(&weight, ipus)
            );
        }
    }

    #[test]
    fn an_mlps_layers_are_balanced_as_blocks() {
        // Dense blocks of 64x512, 512x512, 512x512 and the 512x10 head:
        // contiguous stages balanced by forward flops.
        let net = crate::model::MlpConfig {
            inputs: 64,
            hidden: vec![512; 3],
            classes: 10,
            activation: crate::model::Activation::Relu,
            batch_norm: false,
        }
        .network();
        let balanced = |ipus| Placement::network_balanced(&net, ipus, 8);
        assert_eq!(balanced(1).unwrap(), Placement::Ipus(vec![0; 4]));
        assert_eq!(balanced(2).unwrap(), Placement::Ipus(vec![0, 0, 1, 1]));
        let p = balanced(4).unwrap();
        assert_eq!((p.stages(), p), (4, Placement::Ipus(vec![0, 1, 2, 3])));
        assert!(matches!(
            balanced(5),
            Err(ModelError::DeviceMapping(MappingError::TooManyIpus { .. }))
        ));
    }

    #[test]
    fn names_split_into_layer_and_pass() {
        assert_eq!(layer_of("layer12.dw.gather"), Some((12, "dw.gather")));
        assert_eq!(layer_of("loss"), None);
        assert!(is_backward("activation_grad") && is_backward("bn.grad_sums"));
        assert!(!is_backward("fwd.gather") && !is_backward("bn.stats") && !is_backward("bias_act"));
    }

    #[test]
    fn a_networks_compute_sets_and_exchanges_split_into_forward_and_backward() {
        use crate::ipu::{IpuParams, IpuSpec};
        use crate::model::{Compute, Model, NetLayer, NetworkConfig, NoGroup, Pool2d, PoolKind};
        // Every kind of layer: convolutions (one strided), batch norm, a
        // max and an average pool, parallel branches, a residual block,
        // the head.
        let mut net = NetworkConfig::resnet_mini([2, 6, 6], 3, &[4, 8], &[1, 1]);
        let pool = |kind| {
            NetLayer::Pool(Pool2d {
                kind,
                kernel: (2, 2),
                stride: 1,
                padding: 0,
            })
        };
        net.layers.insert(1, pool(PoolKind::Max));
        net.layers.insert(2, pool(PoolKind::Avg));
        let conv = |kernel: usize| NetLayer::Conv {
            channels: 2,
            kernel,
            stride: 1,
            padding: kernel / 2,
        };
        let branches = vec![vec![NetLayer::BnAct, conv(3)], vec![conv(1)]];
        net.layers.insert(3, NetLayer::Branches(branches));
        let spec = IpuSpec::new(IpuParams {
            tiles: 16,
            ..IpuParams::default()
        })
        .unwrap();
        let mut model = Model::new(&net, Target::single(spec), 2, Compute::F32).unwrap();
        let params = net.init(1).unwrap();
        let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
        model.set_params(&refs).unwrap();
        let mut grads = vec![Vec::new(); params.len()];
        let x: Vec<f32> = (0..2 * 72).map(|i| (i % 7) as f32 / 7.0).collect();
        model
            .train_micro_batch(&x, &[0, 2], 1.0, &mut NoGroup, &mut grads)
            .unwrap();
        let profile = model.last_profile().unwrap();
        // The graph is built forward, then the loss (its compute set) and
        // the parameters' staging (its exchange), then backward: the
        // names before are forward, after backward.
        let sets: Vec<&str> = profile
            .compute_sets
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let exchanges: Vec<&str> = profile.exchanges.iter().map(|e| e.name.as_str()).collect();
        let mut parts = std::collections::BTreeSet::new();
        for (names, boundary) in [(&sets, "loss"), (&exchanges, "params.stage")] {
            let at = names.iter().position(|n| *n == boundary).unwrap();
            for (i, name) in names.iter().enumerate() {
                let Some((_, part)) = layer_of(name) else {
                    continue;
                };
                assert_eq!(is_backward(part), i > at, "{name}");
                let head = part.split('.').next().unwrap_or(part);
                parts.insert(head.trim_end_matches(|c: char| c.is_ascii_digit()));
            }
        }
        // The network's own backward names are among them.
        for p in [
            "dcols",
            "col2im",
            "dx_join",
            "dx_split",
            "pool_grad",
            "grad_sum",
            "dw",
            "da",
        ] {
            assert!(parts.contains(p), "{p} in {parts:?}");
        }
    }
}
