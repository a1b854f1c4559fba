//! Model parallelism inside a replica: layers placed on its IPUs as
//! stages, run one after the other (sharded) or pipelined over the
//! accumulated micro-batches, with optional recomputation; the cycles of
//! a step and the activation memory each schedule needs.
//!
//! With `P` stages and `G` micro-batches (gradient accumulation), stage
//! `s` taking `f_s` cycles forward and `b_s` backward per micro-batch
//! (from the simulator's engine, [`Mlp::stage_cycles`](crate::model::Mlp::stage_cycles)):
//!
//! | schedule | cycles of a step | micro-batches whose activations stage `s` keeps |
//! |---|---|---|
//! | [`Schedule::Sequential`] (sharding) | `G * sum_s (f_s + b_s)` | 1 |
//! | [`Schedule::Grouped`] | `(G + P - 1) * (max_s f_s + max_s b_s)`: each pipeline cycle runs its forward passes, then its backward passes | `min(2(P - s) - 1, G)` (PopART's stash: the cycles between a micro-batch's forward and backward pass on the stage) |
//! | [`Schedule::Interleaved`] | `N * max_s (f_s + b_s)`, `N = 2(P - 1) + (G - (P - 1))` pipeline cycles | `P - s` |
//!
//! Recomputation keeps only each stage's input for the backward pass and
//! runs the stage's forward pass again before it (`b_s` grows by `f_s`):
//! a stage keeps `k` inputs and one live set of activations instead of `k`
//! sets. The numerics do not change: each micro-batch's gradients are the
//! same whatever runs when, and they are summed in the micro-batches'
//! order.

use core::fmt;
use core::str::FromStr;

use serde::Serialize;

use crate::model::{MlpConfig, NetworkConfig, Placement, StageActivations, StageCycles};

/// PopART's pipeline schedules.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Each pipeline cycle's forward passes grouped, then its backward
    /// passes: the most activation memory.
    Grouped,
    /// One forward and one backward per pipeline cycle once full
    /// ("1F1B"): the least memory of the overlapping schedules.
    #[default]
    Interleaved,
    /// One stage at a time, as if sharded (for debugging; the model
    /// sharding of non-pipelined models).
    Sequential,
}

impl Schedule {
    /// Its name: `grouped`, `interleaved`, `sequential`.
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Grouped => "grouped",
            Self::Interleaved => "interleaved",
            Self::Sequential => "sequential",
        }
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Schedule {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "grouped" => Ok(Self::Grouped),
            "interleaved" => Ok(Self::Interleaved),
            "sequential" | "sharded" => Ok(Self::Sequential),
            _ => Err(format!(
                "unknown schedule `{s}`: expected grouped, interleaved or sequential"
            )),
        }
    }
}

/// Layers placed on the replica's IPUs (`ipus_per_replica` of them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pipeline {
    /// How the stages run.
    pub schedule: Schedule,
    /// Layer `l` on IPU `device_mapping[l]` (non-decreasing; a network's
    /// top-level layer `l`, its head last); `None`: stages balanced over
    /// every IPU of the replica (an MLP's by parameter memory, a
    /// network's by forward flops).
    pub device_mapping: Option<Vec<u32>>,
}

impl Pipeline {
    /// The placement of `model`'s layers on `ipus` IPUs.
    ///
    /// # Errors
    /// [`ModelError::Placement`](crate::model::ModelError::Placement) if
    /// there are more IPUs than layers to place automatically.
    pub fn placement(
        &self,
        model: &MlpConfig,
        ipus: u32,
    ) -> Result<Placement, crate::model::ModelError> {
        match &self.device_mapping {
            Some(m) => Ok(Placement::Ipus(m.clone())),
            None => Placement::by_memory(model, ipus),
        }
    }
}

impl Pipeline {
    /// The placement of `network`'s blocks on `ipus` IPUs: the device
    /// mapping's (one IPU per top-level layer and the head), or balanced
    /// by forward flops on `micro_batch` samples.
    ///
    /// # Errors
    /// [`ModelError::DeviceMapping`](crate::model::ModelError::DeviceMapping)
    /// naming the block that is wrong.
    pub fn network_placement(
        &self,
        network: &NetworkConfig,
        ipus: u32,
        micro_batch: usize,
    ) -> Result<Placement, crate::model::ModelError> {
        match &self.device_mapping {
            Some(m) => Placement::network(network, m, ipus),
            None => Placement::network_balanced(network, ipus, micro_batch),
        }
    }
}

/// Pipeline cycles of `g` micro-batches over `p` stages: `2(p - 1) + (g -
/// (p - 1))` (ramp-up, main, ramp-down), for `g >= p - 1`.
#[must_use]
pub const fn pipeline_cycles(p: usize, g: usize) -> usize {
    2 * (p - 1) + (g + 1 - p)
}

/// A step's cycles by what they are spent on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepCycles {
    /// Useful compute: every stage busy.
    pub compute: u64,
    /// Pipeline ramp-up and ramp-down, stages idle.
    pub bubble: u64,
    /// Forward passes run again for recomputation.
    pub recompute: u64,
}

impl StepCycles {
    /// All of them.
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.compute + self.bubble + self.recompute
    }
}

/// The cycles of `g` micro-batches over `stages` with `schedule` (a model
/// that is not pipelined is one stage; no stages take no cycles).
#[must_use]
pub fn step_cycles(
    stages: &[StageCycles],
    g: usize,
    schedule: Schedule,
    recompute: bool,
) -> StepCycles {
    if stages.is_empty() {
        return StepCycles::default();
    }
    let timed = |recompute: bool| -> (u64, u64) {
        let back = |s: &StageCycles| s.backward + if recompute { s.forward } else { 0 };
        let p = stages.len();
        let g64 = g as u64;
        match schedule {
            Schedule::Sequential => {
                let t: u64 = stages.iter().map(|s| s.forward + back(s)).sum();
                (g64 * t, g64 * t)
            }
            Schedule::Grouped => {
                let f = stages.iter().map(|s| s.forward).max().unwrap_or(0);
                let b = stages.iter().map(back).max().unwrap_or(0);
                ((g + p - 1) as u64 * (f + b), g64 * (f + b))
            }
            Schedule::Interleaved => {
                let c = stages
                    .iter()
                    .map(|s| s.forward + back(s))
                    .max()
                    .unwrap_or(0);
                (pipeline_cycles(p, g) as u64 * c, g64 * c)
            }
        }
    };
    let (plain, ideal) = timed(false);
    let (with, _) = timed(recompute);
    StepCycles {
        compute: ideal,
        bubble: plain - ideal,
        recompute: with - plain,
    }
}

/// Micro-batches whose activations stage `s` of `p` keeps with `g`
/// micro-batches in flight.
#[must_use]
pub fn stashed(schedule: Schedule, s: usize, p: usize, g: usize) -> usize {
    match schedule {
        Schedule::Sequential => 1,
        Schedule::Grouped => (2 * (p - s) - 1).min(g),
        Schedule::Interleaved => (p - s).min(g),
    }
    .max(1)
}

/// The activation memory of one stage.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StageMemory {
    /// The stage.
    pub stage: usize,
    /// Micro-batches whose activations (or, with recomputation, inputs)
    /// it keeps.
    pub stashed: usize,
    /// Bytes of activations it keeps beyond the one set the graph holds
    /// (the stashes), spread over its IPU's tiles: per tile.
    pub stash_bytes_per_tile: u64,
    /// Bytes recomputation saves on the stage (negative: it costs, as with
    /// one micro-batch in flight, where the input copy is extra).
    pub recompute_saves_bytes: i64,
}

/// Each stage's activation memory: activations are f32 in the simulator
/// (`z` and the activation per hidden layer, the logits of the last), the
/// stage input `micro_batch x fan_in` f32.
#[must_use]
pub fn stage_memory(
    model: &MlpConfig,
    placement: &Placement,
    micro_batch: usize,
    g: usize,
    schedule: Schedule,
    recompute: bool,
    tiles_per_stage: u64,
) -> Vec<StageMemory> {
    let layers = model.layers();
    let p = placement.stages();
    let mut acts = vec![0u64; p];
    let mut input = vec![None; p];
    for (l, &(fan_in, width)) in layers.iter().enumerate() {
        let s = placement.stage_of(l);
        let sets = if l + 1 < layers.len() { 2 } else { 1 };
        acts[s] += (micro_batch * width * sets * 4) as u64;
        input[s].get_or_insert((micro_batch * fan_in * 4) as u64);
    }
    (0..p)
        .map(|s| {
            let k = stashed(schedule, s, p, g) as u64;
            let inputs = input[s].unwrap_or(0);
            let plain = (k - 1) * acts[s];
            let with = k * inputs;
            let extra = if recompute { with } else { plain };
            StageMemory {
                stage: s,
                stashed: k as usize,
                stash_bytes_per_tile: extra.div_ceil(tiles_per_stage.max(1)),
                recompute_saves_bytes: plain as i64 - with as i64,
            }
        })
        .collect()
}

/// Each stage's activation memory from its activations measured in the
/// built graph (a network's): as [`stage_memory`], the stash per tile
/// `(k - 1)` times the fullest tile's activations, or with recomputation
/// `k` times its input's.
#[must_use]
pub(crate) fn measured_stage_memory(
    stages: &[StageActivations],
    g: usize,
    schedule: Schedule,
    recompute: bool,
) -> Vec<StageMemory> {
    let p = stages.len();
    stages
        .iter()
        .enumerate()
        .map(|(s, a)| {
            let k = stashed(schedule, s, p, g) as u64;
            let (plain, with) = ((k - 1) * a.bytes, k * a.input_bytes);
            StageMemory {
                stage: s,
                stashed: k as usize,
                stash_bytes_per_tile: if recompute {
                    k * a.input_max_tile_bytes
                } else {
                    (k - 1) * a.max_tile_bytes
                },
                recompute_saves_bytes: plain as i64 - with as i64,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn st(f: u64, b: u64) -> StageCycles {
        StageCycles {
            forward: f,
            backward: b,
        }
    }

    #[test]
    fn pipeline_cycles_follow_the_formula() {
        // N = 2(P-1) + (G-(P-1)).
        assert_eq!(pipeline_cycles(1, 8), 8);
        assert_eq!(pipeline_cycles(4, 4), 7);
        assert_eq!(pipeline_cycles(4, 16), 19);
        let stages = [st(10, 20), st(12, 18), st(8, 30)];
        let i = step_cycles(&stages, 6, Schedule::Interleaved, false);
        assert_eq!(i.total(), 8 * 38);
        assert_eq!((i.compute, i.bubble, i.recompute), (6 * 38, 2 * 38, 0));
        let r = step_cycles(&stages, 6, Schedule::Interleaved, true);
        assert_eq!(r.total(), 8 * 46);
        assert_eq!(r.recompute, 8 * 8);
        let g = step_cycles(&stages, 6, Schedule::Grouped, false);
        assert_eq!(g.total(), 8 * (12 + 30));
        let s = step_cycles(&stages, 6, Schedule::Sequential, false);
        assert_eq!((s.total(), s.bubble), (6 * 98, 0));
    }

    #[test]
    fn schedules_stash_as_documented() {
        assert_eq!(
            (0..4)
                .map(|s| stashed(Schedule::Grouped, s, 4, 8))
                .collect::<Vec<_>>(),
            [7, 5, 3, 1]
        );
        assert_eq!(stashed(Schedule::Grouped, 0, 4, 4), 4);
        assert_eq!(
            (0..4)
                .map(|s| stashed(Schedule::Interleaved, s, 4, 8))
                .collect::<Vec<_>>(),
            [4, 3, 2, 1]
        );
        assert_eq!(stashed(Schedule::Sequential, 2, 4, 8), 1);
    }
}
