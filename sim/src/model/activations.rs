//! What a built (or sizing) graph's stages keep of one micro-batch: the
//! bytes per tile of the tensors each layer's backward pass reads, and of
//! its input, summed per stage part of the placement (a pipeline's
//! stashes, recomputation's savings).

use std::collections::BTreeMap;

use super::layers::network::Kept;
use super::placement::{Part, Placement};
use crate::ipu::{Graph, TensorId, Tile};

/// One stage part's activations of one micro-batch, from the tensors of
/// the built graph: what its backward pass reads of its forward's, and its
/// input (all a stage keeps with recomputation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageActivations {
    /// The stage and its IPU.
    pub part: Part,
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

/// Each stage part's [`StageActivations`] from the layers' [`layer_bytes`]
/// placed by `placement`.
pub(super) fn stage_activations(
    layers: &[(TileBytes, TileBytes)],
    placement: &Placement,
) -> Vec<StageActivations> {
    let (parts, of_layer) = placement.parts_of_layers();
    parts
        .into_iter()
        .enumerate()
        .map(|(i, part)| {
            let of: Vec<&(TileBytes, TileBytes)> = layers
                .iter()
                .enumerate()
                .filter(|&(l, _)| of_layer.get(l).map_or(0, |&p| p) == i)
                .map(|(_, k)| k)
                .collect();
            let (bytes, max_tile_bytes) = total_and_max(&sum(of.iter().map(|k| &k.0)));
            let (input_bytes, input_max_tile_bytes) =
                of.first().map_or((0, 0), |k| total_and_max(&k.1));
            StageActivations {
                part,
                bytes,
                max_tile_bytes,
                input_bytes,
                input_max_tile_bytes,
            }
        })
        .collect()
}
