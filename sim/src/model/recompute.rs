//! Explicit recomputation checkpoints for a network that is not
//! pipelined, as TF IPU's `recomputation_checkpoint`: the user marks
//! blocks whose input is kept; the blocks between two checkpoints form a
//! segment, and with recomputation only the checkpoints are kept through
//! the forward pass, each segment's forward running again just before its
//! backward (the last segment's backward follows its forward at once, so
//! its activations are still there and it is not run again).
//!
//! What is modelled: the simulator's engine allocates every tensor once,
//! statically, and runs each forward once, so the numerics cannot change.
//! The time added is the engine-measured forward cycles of the recomputed
//! segments; the memory is counted from the sizes and tile mappings of
//! the tensors each layer's backward pass reads: without recomputation
//! all of them live at once, with it the checkpoints' tensors and one
//! segment's at a time. Neither figure comes from freeing memory.

use core::ops::Range;

use super::activations::{TileBytes, sum};
use super::error::{CheckpointError, ModelError};
use super::placement::StageCycles;

/// What recomputation from checkpoints costs and saves per micro-batch.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Recomputation {
    /// The segments, as ranges of blocks.
    pub segments: Vec<Range<usize>>,
    /// Forward cycles run again (every segment but the last), from the
    /// engine's profile of the last training micro-batch.
    pub cycles: u64,
    /// Bytes on the fullest tile of every tensor the backward pass reads
    /// (all live without recomputation).
    pub activations_per_tile: u64,
    /// Bytes on the fullest tile of the checkpoints' tensors and, at
    /// most, one segment's.
    pub kept_per_tile: u64,
}

impl Recomputation {
    /// Bytes per tile recomputation saves (negative: it costs).
    ///
    /// ```
    /// use tessera_sim::model::Recomputation;
    ///
    /// let r = Recomputation { segments: vec![0..2, 2..4], cycles: 100, activations_per_tile: 5000, kept_per_tile: 3000 };
    /// assert_eq!(r.saved_per_tile(), 2000);
    /// assert_eq!(Recomputation { kept_per_tile: 6000, ..r }.saved_per_tile(), -1000);
    /// ```
    #[must_use]
    pub fn saved_per_tile(&self) -> i64 {
        self.activations_per_tile as i64 - self.kept_per_tile as i64
    }
}

/// Checks `checkpoints` against a network of `blocks` blocks: each in
/// `1..blocks`, increasing.
///
/// # Errors
/// [`ModelError::Checkpoint`] naming the first wrong one.
///
/// ```
/// use tessera_sim::model::{ModelError, check_checkpoints};
///
/// assert!(check_checkpoints(4, &[1, 3]).is_ok());
/// assert!(matches!(check_checkpoints(4, &[0]), Err(ModelError::Checkpoint(_))));
/// assert!(matches!(check_checkpoints(4, &[2, 2]), Err(ModelError::Checkpoint(_))));
/// ```
pub fn check_checkpoints(blocks: usize, checkpoints: &[usize]) -> Result<(), ModelError> {
    let mut previous = 0;
    for &c in checkpoints {
        let e = if c == 0 || c >= blocks {
            CheckpointError::OutOfRange { block: c, blocks }
        } else if c <= previous {
            CheckpointError::NotIncreasing { block: c, previous }
        } else {
            previous = c;
            continue;
        };
        return Err(ModelError::Checkpoint(e));
    }
    Ok(())
}

/// The recomputation of a network of `blocks` (ranges of its layers)
/// from `checkpoints`, its layers' `(read by backward, input)` bytes per
/// tile and forward cycles per layer.
///
/// # Errors
/// [`ModelError::Checkpoint`] naming the checkpoint.
pub(super) fn recomputation(
    blocks: &[Range<usize>],
    layers: &[(TileBytes, TileBytes)],
    layer_cycles: &[StageCycles],
    checkpoints: &[usize],
) -> Result<Recomputation, ModelError> {
    let n = blocks.len();
    check_checkpoints(n, checkpoints)?;
    let starts: Vec<usize> = core::iter::once(0)
        .chain(checkpoints.iter().copied())
        .collect();
    let segments: Vec<Range<usize>> = starts
        .iter()
        .zip(starts.iter().skip(1).chain([&n]))
        .map(|(&a, &b)| a..b)
        .collect();
    let ops = |seg: &Range<usize>| blocks[seg.start].start..blocks[seg.end - 1].end;
    let max = |m: &TileBytes| m.values().copied().max().unwrap_or(0);
    let all = sum(layers.iter().map(|l| &l.0));
    let kept_inputs = sum(checkpoints.iter().map(|&c| &layers[blocks[c].start].1));
    let per_segment: Vec<TileBytes> = segments
        .iter()
        .map(|s| sum(layers[ops(s)].iter().map(|l| &l.0)))
        .collect();
    // Per tile: the checkpoints and the fullest segment there.
    let mut peak = kept_inputs.clone();
    for tile in per_segment.iter().flat_map(|m| m.keys()) {
        let most = per_segment.iter().filter_map(|m| m.get(tile)).max();
        let at = kept_inputs.get(tile).copied().unwrap_or(0);
        peak.insert(*tile, at + most.copied().unwrap_or(0));
    }
    let last = segments.len() - 1;
    let cycles = segments[..last]
        .iter()
        .flat_map(|s| layer_cycles.get(ops(s)).unwrap_or_default())
        .map(|c| c.forward)
        .sum();
    Ok(Recomputation {
        segments,
        cycles,
        activations_per_tile: max(&all),
        kept_per_tile: max(&peak),
    })
}
