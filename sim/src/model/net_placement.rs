//! A [`NetworkConfig`]'s layers placed on a replica's IPUs block by block:
//! stages cut only between top-level layers ([`NetworkConfig::blocks`]),
//! never inside a residual body, as a device mapping names them or
//! balanced by the blocks' forward flops. A block of parallel branches
//! mapped to a list of IPUs puts each branch on its own IPU: one
//! concurrent pipeline stage (TF IPU's `[s0, [s1a, s1b], s2]`), or, for
//! comparison, one stage per branch in branch order.

use super::device_mapping::{DeviceMapping, MappingEntry};
use super::error::{MappingError, ModelError};
use super::network::{NetLayer, NetworkConfig, Op, branch_of_ops};
use super::placement::{Placement, contiguous_split};

/// What a top-level layer is, for messages.
pub(super) fn describe(layer: Option<&NetLayer>) -> String {
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
