//! The memory model: what one pipeline stage's IPU holds, and its fullest
//! tile.
//!
//! | part | bytes on the stage's IPU |
//! |---|---|
//! | weights | its layers' parameters (and tied copies of another stage's) x the precision's weight bytes |
//! | gradients | the same x gradient bytes (the accumulated gradients) |
//! | master weights | its own parameters x master bytes (`16.32`), over the shards with replicated tensor sharding; 0 when offloaded |
//! | optimizer state | its own parameters x state tensors x state bytes, sharded and offloaded alike |
//! | activations | per stashed micro-batch, the stage's input and every layer's stash (or, recomputing, the input and the checkpoints, plus one segment's stash for the micro-batch in its backward pass), x the micro-batch, x 2 in `32.32` |
//! | code and exchange | per tile, [`code_bytes_per_tile`](super::PlanAssumptions::code_bytes_per_tile) + [`code_bytes_per_layer_per_tile`](super::PlanAssumptions::code_bytes_per_layer_per_tile) x layers + the most a tile receives in one phase (its exchange buffers) |
//!
//! The fullest tile holds the tensors' mean per tile times
//! [`tile_imbalance`](super::PlanAssumptions::tile_imbalance), plus its
//! code and exchange bytes, or, with layers priced on the simulator
//! ([`super::calibrate`]), the fullest tile of the stage's largest layer
//! graph if that is more; the stage fits if that is at most the tile's
//! memory.

use core::ops::Range;

use serde::Serialize;

use super::assumptions::PlanAssumptions;
use super::config::{PlanConfig, Schedule};
use super::table::ModelTable;

/// Bytes on one IPU, by what holds them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct MemoryBreakdown {
    /// Weights (the compute copy).
    pub weights: u64,
    /// Accumulated gradients.
    pub gradients: u64,
    /// The f32 master copy (`16.32`).
    pub master_weights: u64,
    /// Optimizer state.
    pub optimizer_state: u64,
    /// Activations stashed for the backward pass.
    pub activations: u64,
    /// Code, vertex state and exchange buffers.
    pub code_and_exchange: u64,
}

impl MemoryBreakdown {
    /// Bytes in all.
    ///
    /// ```
    /// use tessera_sim::plan::MemoryBreakdown;
    ///
    /// let m = MemoryBreakdown { weights: 10, gradients: 10, activations: 30, ..Default::default() };
    /// assert_eq!(m.total(), 50);
    /// ```
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.weights
            .saturating_add(self.gradients)
            .saturating_add(self.master_weights)
            .saturating_add(self.optimizer_state)
            .saturating_add(self.activations)
            .saturating_add(self.code_and_exchange)
    }

    /// The parts with their names, for reports.
    ///
    /// ```
    /// use tessera_sim::plan::MemoryBreakdown;
    ///
    /// let m = MemoryBreakdown { weights: 10, gradients: 10, activations: 30, ..Default::default() };
    /// let parts = m.parts();
    /// assert_eq!(parts[4], ("activations", 30));
    /// assert_eq!(parts.iter().map(|p| p.1).sum::<u64>(), m.total());
    /// ```
    #[must_use]
    pub const fn parts(&self) -> [(&'static str, u64); 6] {
        [
            ("weights", self.weights),
            ("gradients", self.gradients),
            ("master weights", self.master_weights),
            ("optimizer state", self.optimizer_state),
            ("activations", self.activations),
            ("code and exchange", self.code_and_exchange),
        ]
    }

    /// The largest part and its bytes (the first of equals).
    ///
    /// ```
    /// use tessera_sim::plan::MemoryBreakdown;
    ///
    /// let m = MemoryBreakdown { weights: 10, gradients: 10, activations: 30, ..Default::default() };
    /// assert_eq!(m.largest(), ("activations", 30));
    /// assert_eq!(MemoryBreakdown::default().largest(), ("weights", 0));
    /// ```
    #[must_use]
    pub fn largest(&self) -> (&'static str, u64) {
        self.parts()
            .into_iter()
            .fold(("weights", 0), |a, p| if p.1 > a.1 { p } else { a })
    }
}

/// Micro-batches stage `stage` of `stages` stashes under `schedule`: the
/// trainer's [`crate::train::stashed`] with as many micro-batches as the
/// pipeline holds at once (Interleaved's by the
/// [`interleaved_stash_fraction`](PlanAssumptions::interleaved_stash_fraction)
/// assumption, whose default 0.5 gives the trainer's `P - s`).
#[must_use]
pub(crate) fn stashed(
    schedule: Schedule,
    stage: usize,
    stages: usize,
    assumptions: &PlanAssumptions,
) -> u64 {
    let grouped = 2 * (stages - stage) as u64 - 1;
    match schedule {
        _ if stages == 1 => 1,
        Schedule::Grouped => grouped,
        Schedule::Interleaved => {
            ((grouped as f64 * assumptions.interleaved_stash_fraction).ceil() as u64).max(1)
        }
        Schedule::Sequential => 1,
    }
}

/// What a stage's memory depends on besides the configuration.
#[derive(Clone, Debug)]
pub(crate) struct StageShape {
    /// The stage's layers.
    pub(crate) layers: Range<usize>,
    /// Its index and the stage count.
    pub(crate) stage: usize,
    pub(crate) stages: usize,
    /// Shards of optimizer state and master weights.
    pub(crate) shards: u64,
    /// The most bytes a tile receives in one phase of the stage.
    pub(crate) received: u64,
    /// The fullest tile of the stage's largest layer graph built on the
    /// simulator (0 without calibration).
    pub(crate) simulated_tile: u64,
    /// Tiles of the IPU, and bytes per tile.
    pub(crate) tiles: u64,
}

/// Parameters of `layers` (own), and those of tied layers whose owner is
/// outside them (copies held here).
pub(crate) fn stage_params(model: &ModelTable, layers: &Range<usize>) -> (u64, u64) {
    let all = model.layers();
    let own = all[layers.clone()]
        .iter()
        .fold(0u64, |a, l| a.saturating_add(l.params));
    let tied = all[layers.clone()]
        .iter()
        .filter_map(|l| l.tied.as_ref())
        .filter(|t| {
            !all[layers.clone()]
                .iter()
                .any(|owner| owner.name == t.layer)
        })
        .fold(0u64, |a, t| a.saturating_add(t.params));
    (own, tied)
}

/// The stage's bytes by part, and its fullest tile's bytes.
pub(crate) fn stage_memory(config: &PlanConfig, shape: &StageShape) -> (MemoryBreakdown, u64) {
    let a = &config.assumptions;
    let bytes = config.precision.bytes();
    let model = &config.model;
    let layers = &model.layers()[shape.layers.clone()];
    let (own, tied) = stage_params(model, &shape.layers);
    let sharded = own.div_ceil(shape.shards.max(1));
    let mul = u64::saturating_mul;
    let sum = |v: &mut dyn Iterator<Item = u64>| v.fold(0u64, u64::saturating_add);
    let on_chip = !config.offload_optimizer_state;
    let batch = config.micro_batch as u64;
    let input = match shape.layers.start {
        0 => model.input_bytes(),
        i => model.layers()[i - 1].boundary_bytes(),
    };
    let stash = stashed(config.schedule, shape.stage, shape.stages, a);
    let per_sample = if config.recompute {
        let segment = a
            .recompute_segment
            .unwrap_or_else(|| (layers.len() as f64).sqrt().ceil() as usize)
            .max(1);
        let checkpoints = sum(&mut layers
            .chunks(segment)
            .rev()
            .skip(1)
            .map(|c| c.last().map_or(0, |l| l.boundary_bytes())));
        let live = layers
            .chunks(segment)
            .map(|c| sum(&mut c.iter().map(|l| l.activation_bytes)))
            .max()
            .unwrap_or(0);
        // The stashed micro-batches' checkpoints, and one segment live.
        mul(stash, input.saturating_add(checkpoints)).saturating_add(live)
    } else {
        let all = sum(&mut layers.iter().map(|l| l.activation_bytes));
        mul(stash, input.saturating_add(all))
    };
    let code_per_tile = a
        .code_bytes_per_tile
        .saturating_add(mul(a.code_bytes_per_layer_per_tile, layers.len() as u64))
        .saturating_add(shape.received);
    let held = own.saturating_add(tied);
    let m = MemoryBreakdown {
        weights: mul(held, bytes.weights),
        gradients: mul(held, bytes.gradients),
        master_weights: if on_chip {
            mul(sharded, bytes.master)
        } else {
            0
        },
        optimizer_state: if on_chip {
            mul(
                sharded,
                config.optimizer.state_tensors() * bytes.optimizer_state,
            )
        } else {
            0
        },
        // 16-bit table bytes to the precision's.
        activations: bytes.activation_bytes(per_sample.saturating_mul(batch)),
        code_and_exchange: code_per_tile.saturating_mul(shape.tiles),
    };
    let tensors = m.total().saturating_sub(m.code_and_exchange);
    let spread = (tensors as f64 / shape.tiles.max(1) as f64 * a.tile_imbalance).ceil() as u64;
    // A simulated layer's fullest tile (its working set, with its own code
    // and exchange buffers) replaces the assumed code and exchange where
    // larger: an upper bound, its own weights and stash counted twice.
    (
        m,
        spread.saturating_add(code_per_tile.max(shape.simulated_tile)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stashes_by_schedule() {
        let a = PlanAssumptions::ipu();
        let grouped: Vec<u64> = (0..4)
            .map(|s| stashed(Schedule::Grouped, s, 4, &a))
            .collect();
        assert_eq!(grouped, [7, 5, 3, 1]);
        let inter: Vec<u64> = (0..4)
            .map(|s| stashed(Schedule::Interleaved, s, 4, &a))
            .collect();
        assert_eq!(inter, [4, 3, 2, 1]);
        assert!((0..4).all(|s| stashed(Schedule::Sequential, s, 4, &a) == 1));
        assert_eq!(stashed(Schedule::Grouped, 0, 1, &a), 1);
    }

    #[test]
    fn breakdown_arithmetic() {
        let m = MemoryBreakdown {
            weights: 1,
            gradients: 2,
            master_weights: 3,
            optimizer_state: 40,
            activations: 5,
            code_and_exchange: 6,
        };
        assert_eq!(m.total(), 57);
        assert_eq!(m.largest(), ("optimizer state", 40));
    }
}
