//! A network's layer costs measured on the simulator as the trainer
//! builds it: the whole network ([`Network`]) compiled on one simulated
//! IPU at the micro-batch, one training micro-batch run, and each compute
//! set and exchange of its profile charged to the table row of the layer
//! its name starts with (`layer{l}.`), before the loss to the forward
//! pass, after it to the backward pass, a sync per compute set.
//!
//! The convolutions' relayouts into blocks of whole channels, batch
//! norm's group sums and col2im's gathers are what the network's layers
//! cost beyond their products and vector work; the assumptions do not
//! see them (resnet-mini's compute is 43% below the trainer's by the
//! assumptions), so a network's plan takes its costs from here with
//! `--layer-costs simulated`. The loss and the staging of the parameters
//! (`loss`, `params.stage`) belong to no row: the planner prices the loss
//! itself.

use std::collections::HashMap;

use super::table::{LayerCosts, ModelTable, SimulatedCost};
use crate::IpuSpec;
use crate::ipu::{Profile, Target};
use crate::model::{Compute, Model, ModelError, NetworkConfig, NoGroup};

/// `table`'s rows (made of `network` by
/// [`ModelTable::from_network`]) priced from one training micro-batch
/// of `network` on one `ipu`.
///
/// # Errors
/// The simulator's, when the network cannot be built (it does not fit
/// the IPU's tiles at this micro-batch, say).
pub(super) fn network_costs(
    ipu: IpuSpec,
    (table, network): (&ModelTable, &NetworkConfig),
    micro_batch: usize,
    compute: Compute,
) -> Result<LayerCosts, ModelError> {
    let mut net = Model::new(network, Target::single(ipu), micro_batch, compute)?;
    let params = network.init(0)?;
    let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    net.set_params(&refs)?;
    let mut grads = vec![Vec::new(); params.len()];
    let inputs = vec![0.0; micro_batch * network.inputs()];
    let labels = vec![0; micro_batch];
    net.train_micro_batch(&inputs, &labels, 1.0, &mut NoGroup, &mut grads)?;
    let profile = net.last_profile().expect("a micro-batch ran");
    let max_tile_bytes = net.memory().summary(1).max;
    let sync = Target::single(ipu).sync_cycles();
    let rows = charged(table, profile, sync);
    Ok(LayerCosts {
        micro_batch,
        f16: compute.f16(),
        recipe: compute.recipe(),
        ipu,
        layers: rows
            .into_iter()
            .map(|(forward_cycles, backward_cycles)| {
                Some(SimulatedCost {
                    forward_cycles,
                    backward_cycles,
                    max_tile_bytes,
                })
            })
            .collect(),
    })
}

/// Each row's `(forward, backward)` cycles in `profile`: its layer's
/// compute sets (and a `sync` each) and exchanges, the profile listing
/// them as the graph made them, forward pass first. A layer without a row
/// (a residual block's start, whose backward pass adds the block's two
/// gradients) is charged to the next row.
fn charged(table: &ModelTable, profile: &Profile, sync: u64) -> Vec<(u64, u64)> {
    let numbers: Vec<usize> = table
        .layers()
        .iter()
        .map(|l| layer_number(&l.name).expect("rows named layer{l}"))
        .collect();
    let row_of: HashMap<usize, usize> = numbers.iter().enumerate().map(|(r, &l)| (l, r)).collect();
    let row = |name: &str| {
        let l = layer_number(name.split('.').next()?)?;
        row_of
            .get(&l)
            .copied()
            .or_else(|| numbers.iter().position(|&n| n > l))
    };
    let mut out = vec![(0u64, 0u64); numbers.len()];
    let mut backward = false;
    for cs in &profile.compute_sets {
        if cs.name == "loss" {
            backward = true;
        }
        let cycles = cs.cycles + cs.executions * sync;
        charge(&mut out, row(&cs.name), backward, cycles);
    }
    // Exchanges too are listed as the graph made them: the staging of
    // the parameters (`params.stage`) after the forward pass.
    backward = false;
    for ex in &profile.exchanges {
        charge(&mut out, row(&ex.name), backward, ex.cycles);
        backward |= ex.name == "params.stage";
    }
    out
}

/// Adds `cycles` to row `row`'s forward or backward pass, if there is one.
fn charge(out: &mut [(u64, u64)], row: Option<usize>, backward: bool, cycles: u64) {
    if let Some(r) = row {
        let slot = if backward {
            &mut out[r].1
        } else {
            &mut out[r].0
        };
        *slot = slot.saturating_add(cycles);
    }
}

/// `l` of `layer{l}`.
fn layer_number(name: &str) -> Option<usize> {
    name.strip_prefix("layer")?.parse().ok()
}
