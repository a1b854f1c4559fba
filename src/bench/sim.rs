//! The `sim` suite: what simulating an IPU costs on the host.
//!
//! - `mlp<W>_step`: one training micro-batch (forward, loss, backward) of
//!   the MLP `256-W-W-10` at micro-batch 8 in the default job's `16.16`
//!   arithmetic on one simulated Mk2, for W = 256, 512, 1024, against the
//!   same products and element-wise kernels called directly
//!   ([`step::Direct`], reference `direct`; the same gradients bit for
//!   bit). The ratio is direct time / simulator time: the target,
//!   "within 3x", is a ratio of at least 0.33. `elements` is the
//!   parameter count.
//! - `resnet_mini_step`: one training micro-batch of `resnet-mini` as the
//!   trainer builds it (8x8 digits, channels 16 and 32, one residual block
//!   per stage, 10 classes) at its micro-batch of 4 in `16.16` on one
//!   simulated Mk2, against the same convolutions (im2col and products),
//!   batch norm, pooling, residual and element-wise kernels called
//!   directly ([`resnet::Direct`], reference `direct`); ratio and
//!   `elements` as for the MLP rows.
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

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use tessera_sim::IpuSpec;
use tessera_sim::bench::{LambBench, ipu_scaling, lamb_overhead};
use tessera_sim::model::Compute;

use super::report::Sink;
use super::resnet;
use super::step::{self, Case, Direct};
use super::timing::{self, Settings};
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

/// The MLP widths measured, and each row's name.
const WIDTHS: [(usize, &str); 3] = [
    (256, "mlp256_step"),
    (512, "mlp512_step"),
    (1024, "mlp1024_step"),
];

/// The trainer's default micro-batch.
const MICRO_BATCH: usize = 8;

/// Times a simulated step against its direct reference, samples
/// interleaved, and records row `kernel` (ratio = direct / simulated).
fn record_step(
    settings: Settings,
    (kernel, elements): (&'static str, usize),
    (sim, direct): (&mut dyn FnMut(), &mut dyn FnMut()),
    sink: &mut dyn Sink,
) -> Result<(), BenchError> {
    let [s, d] = timing::compare(settings, &mut [sim, direct])[..] else {
        unreachable!("two functions timed")
    };
    sink.record(&Record {
        suite: SUITE.name,
        kernel,
        elements,
        seconds: s.best,
        gbps: 0.0,
        reference: "direct",
        ratio: d.best / s.best,
        reference_seconds: d.best,
        reference_gbps: 0.0,
    })
}

/// resnet-mini's micro-batch size in the trainer.
const RESNET_MICRO_BATCH: usize = 4;

/// One training micro-batch of each MLP and of resnet-mini on one
/// simulated Mk2 against the same kernels called directly (see the module
/// docs).
fn training_steps(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let settings = Settings {
        samples: NonZeroUsize::new(if plan.quick { 3 } else { 7 }).expect("nonzero"),
        min_sample: Duration::from_millis(if plan.quick { 20 } else { 100 }),
    };
    let simulator = |e: tessera_sim::model::ModelError| BenchError::Simulator(e.to_string());
    let widths: &[(usize, &str)] = if plan.quick { &WIDTHS[..1] } else { &WIDTHS };
    for &(width, name) in widths {
        let case = Case::new(step::mlp_config(256, width), MICRO_BATCH, Compute::F16);
        let mut sim = case.simulated(IpuSpec::MK2_GC200).map_err(simulator)?;
        let mut direct = Direct::new(&case);
        record_step(
            settings,
            (name, case.params.iter().map(Vec::len).sum()),
            (
                &mut || {
                    black_box(sim.step(&case));
                },
                &mut || {
                    black_box(direct.step());
                },
            ),
            sink,
        )?;
    }
    let case = resnet::case(resnet::resnet_mini(), RESNET_MICRO_BATCH, Compute::F16);
    let mut sim = case.simulated(IpuSpec::MK2_GC200).map_err(simulator)?;
    let mut direct = resnet::Direct::new(&case);
    record_step(
        settings,
        ("resnet_mini_step", case.param_count()),
        (
            &mut || {
                black_box(sim.step(&case));
            },
            &mut || {
                black_box(direct.step());
            },
        ),
        sink,
    )
}

/// The largest `--elements` of this suite: LAMB's buffers of 48Mi
/// parameters fit one Mk2's tiles, 56Mi do not.
pub(crate) const MAX_PARAMS: usize = 48 << 20;

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    if let Some(n) = plan
        .elements
        .iter()
        .flatten()
        .find(|n| n.get() > MAX_PARAMS)
    {
        return Err(BenchError::Unavailable(format!(
            "--elements {n}: the sim suite takes at most {MAX_PARAMS} (48Mi) parameters \
             (LAMB's buffers must fit one Mk2's tile memory)"
        )));
    }
    let params = match &plan.elements {
        Some(sizes) => sizes[0].get(),
        None if plan.quick => 1 << 20,
        None => 16 << 20,
    };
    let samples = if plan.quick { 3 } else { 7 };
    sink.start(&format!(
        "sim: best of {samples} runs; mlp*_step: a training micro-batch (256-W-W-10, 8 samples, \
         16.16) on one Mk2 vs the same kernels called directly (ratio = direct time / simulator \
         time; elements = parameters); resnet_mini_step: a training micro-batch of \
         resnet-mini (4 samples, 16.16) likewise; lamb_sim vs the fused core kernel (ratio = kernel time / \
         simulator time); scaling rows vs 1 IPU (elements = tiles)"
    ))?;
    training_steps(plan, sink)?;
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
