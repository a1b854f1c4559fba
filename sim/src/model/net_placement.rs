//! A [`NetworkConfig`]'s layers placed on a replica's IPUs block by block:
//! stages cut only between top-level layers ([`NetworkConfig::blocks`]),
//! never inside a residual body, as a device mapping names them or
//! balanced by the blocks' forward flops.

use core::fmt;
use std::collections::BTreeMap;

use super::ModelError;
use super::layers::network::Kept;
use super::network::{NetLayer, NetworkConfig, Op};
use super::placement::{Placement, contiguous_split};
use crate::ipu::{Graph, TensorId, Tile};

/// Why a network's device mapping is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingError {
    /// Not one IPU per top-level layer and the head.
    Length {
        /// Entries needed: the top-level layers and the head.
        blocks: usize,
        /// Entries given.
        got: usize,
    },
    /// A block mapped beyond the replica's IPUs.
    Ipu {
        /// The block (top-level layer; the last is the head).
        block: usize,
        /// What it is (`residual block`, `conv 3x3 s1 -> 16`, `head`).
        layer: String,
        /// The IPU named.
        ipu: u32,
        /// IPUs of a replica.
        ipus: u32,
    },
    /// A block on an IPU before its predecessor's.
    Order {
        /// The block.
        block: usize,
        /// What it is.
        layer: String,
        /// Its IPU.
        ipu: u32,
        /// The previous block's IPU.
        previous: u32,
    },
    /// More IPUs to balance over than blocks.
    TooManyIpus {
        /// IPUs of a replica.
        ipus: u32,
        /// Blocks of the network.
        blocks: usize,
    },
}

impl fmt::Display for MappingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length { blocks, got } => write!(
                f,
                "the device mapping has {got} entries; the network needs {blocks}, one per \
                 top-level layer and one for the head"
            ),
            Self::Ipu {
                block,
                layer,
                ipu,
                ipus,
            } => write!(
                f,
                "block {block} ({layer}) is mapped to IPU {ipu}, but a replica has {ipus} IPUs \
                 (0..{ipus})"
            ),
            Self::Order {
                block,
                layer,
                ipu,
                previous,
            } => write!(
                f,
                "block {block} ({layer}) is on IPU {ipu} after block {} on IPU {previous}: \
                 stages must be contiguous, in increasing IPU order",
                block - 1
            ),
            Self::TooManyIpus { ipus, blocks } => write!(
                f,
                "{ipus} IPUs but only {blocks} blocks (top-level layers and the head): every \
                 IPU needs one"
            ),
        }
    }
}

impl std::error::Error for MappingError {}

/// What a top-level layer is, for messages.
pub(super) fn describe(layer: Option<&NetLayer>) -> String {
    match layer {
        None => "head".into(),
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
    }
}

impl Placement {
    /// Block `b` of `config` (top-level layer, the head last) on IPU
    /// `mapping[b]` of a replica of `ipus` IPUs, as a placement of its
    /// flattened layers.
    ///
    /// # Errors
    /// [`ModelError::DeviceMapping`] naming the block; the network's own
    /// errors.
    pub fn network(config: &NetworkConfig, mapping: &[u32], ipus: u32) -> Result<Self, ModelError> {
        let blocks = config.blocks()?;
        let err = |e| Err(ModelError::DeviceMapping(e));
        if mapping.len() != blocks.len() {
            return err(MappingError::Length {
                blocks: blocks.len(),
                got: mapping.len(),
            });
        }
        let layer = |b: usize| describe(config.layers.get(b));
        if let Some(b) = mapping.iter().position(|&i| i >= ipus) {
            return err(MappingError::Ipu {
                block: b,
                layer: layer(b),
                ipu: mapping[b],
                ipus,
            });
        }
        if let Some(b) = mapping.windows(2).position(|w| w[1] < w[0]) {
            return err(MappingError::Order {
                block: b + 1,
                layer: layer(b + 1),
                ipu: mapping[b + 1],
                previous: mapping[b],
            });
        }
        let mut per_op = Vec::new();
        for (range, &ipu) in blocks.iter().zip(mapping) {
            per_op.extend(core::iter::repeat_n(ipu, range.len()));
        }
        Ok(Self::Ipus(per_op))
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
        Self::network(config, &mapping, ipus.max(1))
    }

    /// The device mapping of `config`'s blocks this placement of its
    /// flattened layers makes (`None` when spread).
    #[must_use]
    pub fn network_mapping(&self, config: &NetworkConfig) -> Option<Vec<u32>> {
        let Self::Ipus(per_op) = self else {
            return None;
        };
        let blocks = config.blocks().ok()?;
        blocks
            .iter()
            .map(|r| per_op.get(r.start).copied())
            .collect()
    }
}

/// Each flattened layer's forward flops on `n` samples: a product's
/// multiply-adds twice, a pooling window's reads, batch norm's few
/// operations per element; a residual's start nothing, its sum one per
/// element.
fn op_flops(ops: &[Op], n: usize, config: &NetworkConfig) -> Vec<u128> {
    let [_, h, w] = config.input;
    let mut rows = (n * h * w) as u128;
    let mut channels = config.input[0] as u128;
    ops.iter()
        .map(|op| match op {
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
            Op::Head { fan_in, classes } => 2 * (n * fan_in * classes) as u128,
        })
        .collect()
}

/// One stage's activations of one micro-batch, from the tensors of the
/// built graph: what its backward pass reads of its forward's, and its
/// input (all a stage keeps with recomputation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageActivations {
    /// Bytes of the tensors the backward pass reads.
    pub bytes: u64,
    /// Of those, the most on one tile.
    pub max_tile_bytes: u64,
    /// Bytes of the stage's input.
    pub input_bytes: u64,
    /// Of those, the most on one tile.
    pub input_max_tile_bytes: u64,
}

/// Bytes on each tile.
pub(super) type TileBytes = BTreeMap<Tile, u64>;

/// Per layer of `kept`, the bytes on each tile in `g` of what its
/// backward pass reads (a tensor read by several layers counted at the
/// first) and of its input.
pub(super) fn layer_bytes(g: &Graph, kept: &[Kept]) -> Vec<(TileBytes, TileBytes)> {
    let add = |to: &mut TileBytes, t: TensorId| {
        let size = g.dtype(t).size();
        for i in g.mapping(t) {
            *to.entry(i.tile).or_default() += (i.range.end - i.range.start) * size;
        }
    };
    let mut seen = Vec::new();
    kept.iter()
        .map(|k| {
            let (mut saved, mut input) = (TileBytes::new(), TileBytes::new());
            for &t in &k.saved {
                if !seen.contains(&t) {
                    seen.push(t);
                    add(&mut saved, t);
                }
            }
            add(&mut input, k.input);
            (saved, input)
        })
        .collect()
}

/// The sum of `maps`, tile by tile.
pub(super) fn sum<'a>(maps: impl IntoIterator<Item = &'a TileBytes>) -> TileBytes {
    let mut out = TileBytes::new();
    for m in maps {
        for (&t, &b) in m {
            *out.entry(t).or_default() += b;
        }
    }
    out
}

/// The total and the fullest tile's bytes of `m`.
pub(super) fn total_and_max(m: &TileBytes) -> (u64, u64) {
    (m.values().sum(), m.values().copied().max().unwrap_or(0))
}

/// Each stage's [`StageActivations`] from the layers' [`layer_bytes`]
/// placed by `placement`.
pub(super) fn stage_activations(
    layers: &[(TileBytes, TileBytes)],
    placement: &Placement,
) -> Vec<StageActivations> {
    (0..placement.stages())
        .map(|s| {
            let of: Vec<&(TileBytes, TileBytes)> = layers
                .iter()
                .enumerate()
                .filter(|(l, _)| placement.stage_of(*l) == s)
                .map(|(_, k)| k)
                .collect();
            let (bytes, max_tile_bytes) = total_and_max(&sum(of.iter().map(|k| &k.0)));
            let (input_bytes, input_max_tile_bytes) =
                of.first().map_or((0, 0), |k| total_and_max(&k.1));
            StageActivations {
                bytes,
                max_tile_bytes,
                input_bytes,
                input_max_tile_bytes,
            }
        })
        .collect()
}
