//! The `sim` suite: what simulating an IPU costs on the host.
//!
//! - `lamb_sim`: a LAMB step of `n` f32 parameters mapped over the 1,472
//!   tiles of a simulated Mk2 GC200 (phase 1 per tile, a tree of exact
//!   partials over the exchange, phase 2 per tile), against the fused core
//!   kernel (`Lamb::step`) on the same data in the same run. The ratio is
//!   kernel time / simulator time: above 1 the simulator is faster (it runs
//!   tiles on every host core), and the bound is "within 1.5x",
//!   a ratio of at least 0.67.
//! - `lamb_sim_<k>ipu` and `superstep_<k>ipu`: the same step, and an empty
//!   superstep, on 1 to 16 IPUs, each against the 1-IPU run, to show how
//!   the engine's overhead grows with the tile count (`elements` is then
//!   the number of tiles).

use tessera_sim::IpuSpec;
use tessera_sim::bench::{LambBench, ipu_scaling, lamb_overhead};

use super::report::Sink;
use super::{BenchError, Plan, Record, Suite};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "sim",
    about: "simulator overhead: LAMB over 1,472 simulated tiles vs the plain kernel; 1 to 16 IPUs",
    run,
};

/// LAMB's minimum traffic per f32 parameter: read w, g, m, v; write w, m, v.
const LAMB_BYTES: f64 = 28.0;

const IPUS: [u32; 5] = [1, 2, 4, 8, 16];

fn scaling_names(ipus: u32) -> (&'static str, &'static str) {
    match ipus {
        1 => ("lamb_sim_1ipu", "superstep_1ipu"),
        2 => ("lamb_sim_2ipu", "superstep_2ipu"),
        4 => ("lamb_sim_4ipu", "superstep_4ipu"),
        8 => ("lamb_sim_8ipu", "superstep_8ipu"),
        _ => ("lamb_sim_16ipu", "superstep_16ipu"),
    }
}

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let params = match &plan.elements {
        Some(sizes) => sizes[0].get(),
        None if plan.quick => 1 << 20,
        None => 16 << 20,
    };
    let samples = if plan.quick { 3 } else { 7 };
    sink.start(&format!(
        "sim: best of {samples} runs; lamb_sim vs the fused core kernel (ratio = kernel time / \
         simulator time); scaling rows vs 1 IPU (elements = tiles)"
    ))?;
    let simulator = |e: tessera_sim::bench::BenchError| BenchError::Simulator(e.to_string());
    let r = lamb_overhead(&LambBench {
        params,
        samples,
        ..LambBench::default()
    })
    .map_err(simulator)?;
    let gbps = |seconds: f64| LAMB_BYTES * params as f64 / seconds / 1e9;
    sink.record(&Record {
        suite: SUITE.name,
        kernel: "lamb_sim",
        elements: params,
        seconds: r.sim_seconds,
        gbps: gbps(r.sim_seconds),
        reference: "lamb_kernel",
        ratio: r.plain_seconds / r.sim_seconds,
        reference_seconds: r.plain_seconds,
        reference_gbps: gbps(r.plain_seconds),
    })?;
    let ipus: &[u32] = if plan.quick { &IPUS[..3] } else { &IPUS };
    let rows = ipu_scaling(IpuSpec::MK2_GC200, params, ipus, samples).map_err(simulator)?;
    let Some(one) = rows.first() else {
        return Ok(());
    };
    for row in &rows {
        let (lamb, superstep) = scaling_names(row.ipus);
        sink.record(&Record {
            suite: SUITE.name,
            kernel: lamb,
            elements: row.tiles as usize,
            seconds: row.lamb_seconds,
            gbps: gbps(row.lamb_seconds),
            reference: "lamb_sim_1ipu",
            ratio: one.lamb_seconds / row.lamb_seconds,
            reference_seconds: one.lamb_seconds,
            reference_gbps: gbps(one.lamb_seconds),
        })?;
        sink.record(&Record {
            suite: SUITE.name,
            kernel: superstep,
            elements: row.tiles as usize,
            seconds: row.empty_superstep_seconds,
            gbps: 0.0,
            reference: "superstep_1ipu",
            ratio: one.empty_superstep_seconds / row.empty_superstep_seconds,
            reference_seconds: one.empty_superstep_seconds,
            reference_gbps: 0.0,
        })?;
    }
    Ok(())
}
