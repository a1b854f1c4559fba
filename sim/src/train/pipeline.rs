//! Model parallelism inside a replica: layers placed on its IPUs as
//! stages, run one after the other (sharded) or pipelined over the
//! accumulated micro-batches, with optional recomputation; the cycles of
//! a step and the activation memory each schedule needs.
//!
//! With `P` stages and `G` micro-batches (gradient accumulation), stage
//! `s` taking `f_s` cycles forward and `b_s` backward per micro-batch
//! (from the simulator's engine, [`Model::stage_cycles`](crate::model::Model::stage_cycles)):
//!
//! | schedule | cycles of a step | micro-batches whose activations stage `s` keeps |
//! |---|---|---|
//! | [`Schedule::Sequential`] (sharding) | `G * sum_s (f_s + b_s)` | 1 |
//! | [`Schedule::Grouped`] | `(G + P - 1) * (max_s f_s + max_s b_s)`: each pipeline cycle runs its forward passes, then its backward passes | `min(2(P - s) - 1, G)` (PopART's stash: the cycles between a micro-batch's forward and backward pass on the stage) |
//! | [`Schedule::Interleaved`] | `N * max_s (f_s + b_s)`, `N = 2(P - 1) + (G - (P - 1))` pipeline cycles | `P - s` |
//!
//! A concurrent stage (a block of parallel branches, one IPU per branch)
//! runs its parts at once, and an IPU may hold parts of successive
//! stages: with `f_i`, `b_i` the sums over the parts on IPU `i`, the
//! overlapping schedules take `max_i` where the table takes `max_s`
//! (each IPU runs its parts one after the other within a pipeline cycle),
//! and the sequential schedule sums over the stages the slowest part of
//! each. With one part per stage on its own IPU these are the table's.
//! `P` counts a concurrent stage once: the pipeline is shorter and the
//! stages before it keep fewer micro-batches than with a stage per
//! branch.
//!
//! Recomputation keeps only each stage's input for the backward pass and
//! runs the stage's forward pass again before it (`b_s` grows by `f_s`):
//! a stage keeps `k` inputs and one live set of activations instead of `k`
//! sets. The numerics do not change: each micro-batch's gradients are the
//! same whatever runs when, and they are summed in the micro-batches'
//! order.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::model::{DeviceMapping, ModelError, NetworkConfig, Placement, StageCycles};
use crate::names::unit_names;

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

unit_names!(Schedule in "tessera_sim::train", "schedule", "grouped, interleaved or sequential", {
    Grouped => "grouped",
    Interleaved => "interleaved",
    Sequential => "sequential" | "sharded",
});

/// Layers placed on the replica's IPUs (`ipus_per_replica` of them).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Pipeline {
    /// How the stages run.
    pub schedule: Schedule,
    /// Layer `l` on IPU `device_mapping[l]` (non-decreasing; a network's
    /// top-level layer `l`, its head last, a block of parallel branches
    /// on a list of IPUs, one per branch); `None`: stages balanced over
    /// every IPU of the replica by forward flops, branches whole.
    pub device_mapping: Option<DeviceMapping>,
    /// Branches mapped to a list of IPUs run as a stage per branch, in
    /// branch order, instead of one concurrent stage (TF IPU's flat
    /// stage list instead of the nested one: for comparison).
    pub serial_branches: bool,
}

impl Pipeline {
    /// The placement of `network`'s blocks on `ipus` IPUs: the device
    /// mapping's (one IPU per top-level layer and the head; an MLP's
    /// layers are its blocks), or balanced by forward flops on
    /// `micro_batch` samples.
    ///
    /// # Errors
    /// [`ModelError::DeviceMapping`] naming the block that is wrong.
    ///
    /// ```
    /// use tessera_sim::train::{Pipeline, TrainConfig};
    ///
    /// // The default MLP (two hidden layers and the head) balanced over 2 IPUs.
    /// let network = TrainConfig::default().model(64, 10).network();
    /// let placement = Pipeline::default().placement(&network, 2, 8).unwrap();
    /// assert_eq!(placement.stages(), 2);
    /// ```
    pub fn placement(
        &self,
        network: &NetworkConfig,
        ipus: u32,
        micro_batch: usize,
    ) -> Result<Placement, ModelError> {
        match &self.device_mapping {
            Some(m) => Placement::network(network, m, ipus, !self.serial_branches),
            None => Placement::network_balanced(network, ipus, micro_batch),
        }
    }
}

/// Pipeline cycles of `g` micro-batches over `p` stages: `2(p - 1) + (g -
/// (p - 1))` (ramp-up, main, ramp-down), for `g >= p - 1`.
///
/// ```
/// use tessera_sim::train::pipeline_cycles;
///
/// // 4 stages, 8 micro-batches: 3 cycles of ramp-up, 5 full, 3 of ramp-down.
/// assert_eq!(pipeline_cycles(4, 8), 11);
/// assert_eq!(pipeline_cycles(1, 8), 8); // one stage: no bubble
/// ```
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
    ///
    /// ```
    /// use tessera_sim::train::StepCycles;
    ///
    /// let c = StepCycles { compute: 80, bubble: 30, recompute: 10 };
    /// assert_eq!(c.total(), 120);
    /// ```
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.compute + self.bubble + self.recompute
    }
}

/// The cycles of `g` micro-batches over the stages' `parts` with
/// `schedule` (a model that is not pipelined is one stage; no parts take
/// no cycles): the overlapping schedules per pipeline cycle the busiest
/// IPU's sum over its parts, the sequential one each stage's slowest part
/// (the formulas are the `pipeline` module's).
///
/// ```
/// use tessera_sim::model::{Part, StageCycles};
/// use tessera_sim::train::{Schedule, step_cycles};
///
/// // Two stages on two IPUs, 10 forward and 20 backward cycles each, 4 micro-batches.
/// let parts: Vec<StageCycles> = (0..2)
///     .map(|s| StageCycles { part: Part { stage: s, ipu: s as u32 }, forward: 10, backward: 20 })
///     .collect();
/// let c = step_cycles(&parts, 4, Schedule::Interleaved, false);
/// assert_eq!((c.compute, c.bubble, c.recompute), (4 * 30, 30, 0));
/// let r = step_cycles(&parts, 4, Schedule::Interleaved, true);
/// assert_eq!(r.recompute, 5 * 10); // each of the 5 pipeline cycles runs a forward again
/// ```
#[must_use]
pub fn step_cycles(
    parts: &[StageCycles],
    g: usize,
    schedule: Schedule,
    recompute: bool,
) -> StepCycles {
    if parts.is_empty() {
        return StepCycles::default();
    }
    let p = parts.iter().map(|s| s.part.stage + 1).max().unwrap_or(1);
    // The most any IPU spends on `cost` of its parts.
    let busiest = |cost: &dyn Fn(&StageCycles) -> u64| {
        busiest_ipu(parts.iter().map(|s| (s.part.ipu, cost(s))))
    };
    let timed = |recompute: bool| -> (u64, u64) {
        let back = |s: &StageCycles| s.backward + if recompute { s.forward } else { 0 };
        let g64 = g as u64;
        match schedule {
            Schedule::Sequential => {
                let t: u64 = (0..p)
                    .map(|stage| {
                        let of = parts.iter().filter(|s| s.part.stage == stage);
                        of.map(|s| s.forward + back(s)).max().unwrap_or(0)
                    })
                    .sum();
                (g64 * t, g64 * t)
            }
            Schedule::Grouped => {
                let f = busiest(&|s| s.forward);
                let b = busiest(&back);
                ((g + p - 1) as u64 * (f + b), g64 * (f + b))
            }
            Schedule::Interleaved => {
                let c = busiest(&|s| s.forward + back(s));
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
///
/// ```
/// use tessera_sim::train::{Schedule, stashed};
///
/// // The first of 4 stages keeps 4 micro-batches interleaved (1F1B), 7 grouped.
/// assert_eq!(stashed(Schedule::Interleaved, 0, 4, 8), 4);
/// assert_eq!(stashed(Schedule::Grouped, 0, 4, 8), 7);
/// assert_eq!(stashed(Schedule::Sequential, 0, 4, 8), 1);
/// ```
#[must_use]
pub fn stashed(schedule: Schedule, s: usize, p: usize, g: usize) -> usize {
    match schedule {
        Schedule::Sequential => 1,
        Schedule::Grouped => (2 * (p - s) - 1).min(g),
        Schedule::Interleaved => (p - s).min(g),
    }
    .max(1)
}

/// The largest per-IPU sum of `(ipu, amount)` pairs (0 for none): what
/// the busiest IPU does or holds when it runs several stage parts.
pub(super) fn busiest_ipu(amounts: impl IntoIterator<Item = (u32, u64)>) -> u64 {
    let mut on: BTreeMap<u32, u64> = BTreeMap::new();
    for (ipu, amount) in amounts {
        *on.entry(ipu).or_default() += amount;
    }
    on.into_values().max().unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::model::Part;

    /// Stage `stage` on IPU `ipu`: `f` forward, `b` backward.
    fn on(stage: usize, ipu: u32, f: u64, b: u64) -> StageCycles {
        StageCycles {
            part: Part { stage, ipu },
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
        let stages = [on(0, 0, 10, 20), on(1, 1, 12, 18), on(2, 2, 8, 30)];
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
    fn a_concurrent_stage_takes_its_slowest_part_and_ipus_add_their_parts() {
        // TF IPU's [s0, [s1a, s1b], s2] on [0, [1, 2], 3]: three stages.
        let concurrent = [
            on(0, 0, 10, 20),
            on(1, 1, 12, 18),
            on(1, 2, 8, 30),
            on(2, 3, 9, 9),
        ];
        // Serialised: [s0, s1a, s1b, s2] on [0, 1, 2, 3], four stages.
        let serial = [
            on(0, 0, 10, 20),
            on(1, 1, 12, 18),
            on(2, 2, 8, 30),
            on(3, 3, 9, 9),
        ];
        let time = |parts: &[StageCycles], schedule| step_cycles(parts, 6, schedule, false);
        // Interleaved: the busiest IPU (38) per cycle, 8 cycles against 9.
        let (c, s) = (
            time(&concurrent, Schedule::Interleaved),
            time(&serial, Schedule::Interleaved),
        );
        assert_eq!((c.total(), c.bubble), (8 * 38, 2 * 38));
        assert_eq!((s.total(), s.bubble), (9 * 38, 3 * 38));
        // Sequential: the branches' slower part, not their sum.
        let seq = time(&concurrent, Schedule::Sequential);
        assert_eq!(seq.total(), 6 * (30 + 38 + 18));
        assert_eq!(
            time(&serial, Schedule::Sequential).total(),
            6 * (30 + 30 + 38 + 18)
        );
        // Grouped: the busiest IPU forward and backward, 8 cycles.
        assert_eq!(time(&concurrent, Schedule::Grouped).total(), 8 * (12 + 30));
        // TF IPU's own [0, [1, 2], 2]: IPU 2 runs s1b and s2 in turn.
        let shared = [concurrent[0], concurrent[1], concurrent[2], on(2, 2, 9, 9)];
        let i = time(&shared, Schedule::Interleaved);
        assert_eq!(i.total(), 8 * (38 + 18));
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
