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
//! - `conv_stack`: the stand-in for `resnet-mini` ([`conv`]): a 3x3
//!   convolution of 16 channels, batch norm with ReLU and a 2x2 max pool
//!   on 8 samples of 8x8, forward and backward, the engines' run time
//!   against the same layers computed directly (`elements`: the
//!   convolution's outputs).
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
use std::time::{Duration, Instant};

use tessera_sim::IpuSpec;
use tessera_sim::bench::{LambBench, ipu_scaling, lamb_overhead};
use tessera_sim::model::Compute;

use super::conv;
use super::report::Sink;
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

/// One training micro-batch of each MLP on one simulated Mk2 against the
/// same kernels called directly (see the module docs).
fn training_steps(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let settings = Settings {
        samples: NonZeroUsize::new(if plan.quick { 3 } else { 7 }).expect("nonzero"),
        min_sample: Duration::from_millis(if plan.quick { 20 } else { 100 }),
    };
    let widths: &[(usize, &str)] = if plan.quick { &WIDTHS[..1] } else { &WIDTHS };
    for &(width, name) in widths {
        let case = Case::new(step::mlp_config(256, width), MICRO_BATCH, Compute::F16);
        let mut sim = case
            .simulated(IpuSpec::MK2_GC200)
            .map_err(|e| BenchError::Simulator(e.to_string()))?;
        let mut direct = Direct::new(&case);
        let [s, d] = timing::compare(
            settings,
            &mut [
                &mut || {
                    black_box(sim.step(&case));
                },
                &mut || {
                    black_box(direct.step());
                },
            ],
        )[..] else {
            unreachable!("two functions timed")
        };
        sink.record(&Record {
            suite: SUITE.name,
            kernel: name,
            elements: case.params.iter().map(Vec::len).sum(),
            seconds: s.best,
            gbps: 0.0,
            reference: "direct",
            ratio: d.best / s.best,
            reference_seconds: d.best,
            reference_gbps: 0.0,
        })?;
    }
    Ok(())
}

/// The convolutional stand-in for `resnet-mini` ([`conv::Stack`]): the
/// engines' run time against the direct layers, best of `samples`
/// interleaved samples.
fn conv_stack(samples: usize, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let stack = conv::Stack::new();
    let direct = conv::Direct::new(&stack);
    let (mut sim, mut reference) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..samples {
        let run = stack
            .simulated(IpuSpec::MK2_GC200)
            .map_err(|e| BenchError::Simulator(e.to_string()))?;
        sim = sim.min(run);
        // Enough calls for the timer's resolution.
        let calls = 16;
        let started = Instant::now();
        for _ in 0..calls {
            black_box(direct.step());
        }
        reference = reference.min(started.elapsed().as_secs_f64() / f64::from(calls));
    }
    sink.record(&Record {
        suite: SUITE.name,
        kernel: "conv_stack",
        elements: stack.conv.n * stack.conv.conv.out_channels * 64,
        seconds: sim,
        gbps: 0.0,
        reference: "direct",
        ratio: reference / sim,
        reference_seconds: reference,
        reference_gbps: 0.0,
    })
}

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let params = match &plan.elements {
        Some(sizes) => sizes[0].get(),
        None if plan.quick => 1 << 20,
        None => 16 << 20,
    };
    let samples = if plan.quick { 3 } else { 7 };
    sink.start(&format!(
        "sim: best of {samples} runs; mlp*_step: a training micro-batch (256-W-W-10, 8 samples, \
         16.16) on one Mk2 vs the same kernels called directly (ratio = direct time / simulator \
         time; elements = parameters); conv_stack: conv 3x3 + batch norm + max pool, the \
         engines' run time vs direct; lamb_sim vs the fused core kernel (ratio = kernel time / \
         simulator time); scaling rows vs 1 IPU (elements = tiles)"
    ))?;
    training_steps(plan, sink)?;
    conv_stack(samples, sink)?;
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
