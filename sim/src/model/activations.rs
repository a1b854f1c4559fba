//! What a built (or sizing) graph's stages keep of one micro-batch: the
//! bytes per tile of the tensors each layer's backward pass reads, and of
//! its input, summed per stage part of the placement (a pipeline's
//! stashes, recomputation's savings).

use std::collections::{BTreeMap, BTreeSet};

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
    let count = |to: &mut TileBytes, t: TensorId| {
        let size = g.dtype(t).size();
        for i in g.mapping(t) {
            *to.entry(i.tile).or_default() += (i.range.end - i.range.start) * size;
        }
    };
    let mut seen = BTreeSet::new();
    kept.iter()
        .map(|k| {
            let (mut saved, mut input) = (TileBytes::new(), TileBytes::new());
            for &t in &k.saved {
                if seen.insert(t) {
                    count(&mut saved, t);
                }
            }
            count(&mut input, k.input);
            (saved, input)
        })
        .collect()
}

/// The sum of `maps`, tile by tile.
pub(super) fn sum<'a>(maps: impl IntoIterator<Item = &'a TileBytes>) -> TileBytes {
    let mut out = TileBytes::new();
    maps.into_iter().for_each(|m| add(&mut out, m));
    out
}

/// `m` added into `to`, tile by tile.
fn add(to: &mut TileBytes, m: &TileBytes) {
    for (&t, &b) in m {
        *to.entry(t).or_default() += b;
    }
}

/// The total and the fullest tile's bytes of `m`.
pub(super) fn total_and_max(m: &TileBytes) -> (u64, u64) {
    (m.values().sum(), m.values().copied().max().unwrap_or(0))
}

/// Each stage part's [`StageActivations`] from the layers' [`layer_bytes`]
/// placed by `placement`, in one pass over the layers.
pub(super) fn stage_activations(
    layers: &[(TileBytes, TileBytes)],
    placement: &Placement,
) -> Vec<StageActivations> {
    let (parts, of_layer) = placement.parts_of_layers();
    // Per part: its layers' saved bytes tile by tile, its first input.
    let mut saved = vec![TileBytes::new(); parts.len()];
    let mut input: Vec<Option<&TileBytes>> = vec![None; parts.len()];
    for (l, (s, i)) in layers.iter().enumerate() {
        let p = of_layer.get(l).map_or(0, |&p| p);
        add(&mut saved[p], s);
        input[p].get_or_insert(i);
    }
    parts
        .into_iter()
        .zip(saved.iter().zip(input))
        .map(|(part, (saved, input))| {
            let (bytes, max_tile_bytes) = total_and_max(saved);
            let (input_bytes, input_max_tile_bytes) = input.map_or((0, 0), total_and_max);
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
