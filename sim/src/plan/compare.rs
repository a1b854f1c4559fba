//! The simulator's layer costs beside the assumptions' ([`Calibrated`]),
//! for a plan priced with [`PlanConfig::layer_costs`].

use serde::Serialize;

use super::config::PlanConfig;
use super::table::{SimLayer, SimulatedCost};
use super::time::{LayerCost, StepBreakdown};
use super::{Plan, WorstTile};

/// One distinct simulated layer (a [`SimLayer`] the model may use on
/// several rows, or a row of a network priced in the whole network), its
/// cycles per micro-batch by the assumptions and on the simulator.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibratedLayer {
    /// The layer, if priced on its own (`None`: priced in its network).
    pub layer: Option<SimLayer>,
    /// [`SimLayer::describe`], or the row's name.
    pub description: String,
    /// The first row that is this layer.
    pub first: String,
    /// Rows that are this layer.
    pub rows: usize,
    /// The first row's forward cycles by the assumptions (a later row
    /// may differ by where its input lies).
    pub assumed_forward_cycles: u64,
    /// Its backward cycles by the assumptions.
    pub assumed_backward_cycles: u64,
    /// On the simulator.
    pub simulated: SimulatedCost,
}

/// What the plan would be by the assumptions alone.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct AssumedPlan {
    /// Whether every stage fits.
    pub fits: bool,
    /// The fullest tile.
    pub worst: WorstTile,
    /// The step by part.
    pub step: StepBreakdown,
    /// Seconds per step.
    pub step_s: f64,
    /// Samples per second.
    pub samples_per_second: f64,
}

/// The simulated layers beside the assumed, and the plan by the
/// assumptions alone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Calibrated {
    /// Samples per micro-batch the layers were priced at.
    pub micro_batch: usize,
    /// Per distinct simulated layer, in the model's order.
    pub layers: Vec<CalibratedLayer>,
    /// Rows priced on the simulator, of all the model's rows.
    pub simulated_rows: usize,
    /// Forward and backward cycles of a micro-batch over those rows by the
    /// assumptions.
    pub assumed_cycles: u64,
    /// The same on the simulator.
    pub simulated_cycles: u64,
    /// The plan by the assumptions alone.
    pub assumed: AssumedPlan,
}

impl Calibrated {
    /// The comparison for `config`, whose rows cost `assumed` by the
    /// assumptions and `simulated` on the simulator; `without` is its plan
    /// by the assumptions alone.
    pub(crate) fn new(
        config: &PlanConfig,
        (assumed, simulated): (&[LayerCost], &[Option<SimulatedCost>]),
        without: &Plan,
    ) -> Self {
        let mut layers: Vec<CalibratedLayer> = Vec::new();
        let (mut assumed_cycles, mut simulated_cycles, mut simulated_rows) = (0u64, 0u64, 0);
        let rows = config.model.layers().iter().zip(assumed).zip(simulated);
        for ((row, a), s) in rows {
            let Some(s) = s else {
                continue;
            };
            let sim = row.sim.filter(|_| config.model.network().is_none());
            simulated_rows += 1;
            assumed_cycles = assumed_cycles.saturating_add(a.forward.saturating_add(a.backward));
            simulated_cycles =
                simulated_cycles.saturating_add(s.forward_cycles.saturating_add(s.backward_cycles));
            let description = sim.map_or_else(|| row.name.clone(), |l| l.describe());
            if let Some(seen) = layers.iter_mut().find(|l| sim.is_some() && l.layer == sim) {
                seen.rows += 1;
                continue;
            }
            layers.push(CalibratedLayer {
                layer: sim,
                description,
                first: row.name.clone(),
                rows: 1,
                assumed_forward_cycles: a.forward,
                assumed_backward_cycles: a.backward,
                simulated: *s,
            });
        }
        Self {
            micro_batch: config.micro_batch,
            layers,
            simulated_rows,
            assumed_cycles,
            simulated_cycles,
            assumed: AssumedPlan {
                fits: without.fits,
                worst: without.worst,
                step: without.step,
                step_s: without.step_s,
                samples_per_second: without.samples_per_second,
            },
        }
    }
}
