//! `tessera plan`'s report: the plan as text, and its scaling chart.

use std::fmt::Write as _;
use std::path::PathBuf;

use tessera_sim::plan::{Calibrated, Plan, Schedule};
use tessera_sim::pod::ScalingRow;

use crate::cli::Failure;
use crate::cli::output;
use crate::cli::plot::{Series, stacked_bars};
use crate::cli::train::{percent, seconds};

/// What calibrating the layers took.
pub(super) struct CalibrationRun {
    /// Distinct layers compiled.
    pub(super) compiled: usize,
    /// Rows answered from the cache.
    pub(super) hits: usize,
    /// Wall-clock seconds.
    pub(super) seconds: f64,
}

/// The step's parts per Pod size of the plan's scaling table, in
/// milliseconds, as stacked bars: what does not depend on the Pod
/// (compute, optimizer, host input, ...), the all-reduce over IPU-Links and
/// over GW-Links, and the sync.
pub(super) fn scaling_chart(plan: &Plan, path: &std::path::Path) -> Result<(), Failure> {
    let rows = &plan.scaling;
    let categories: Vec<String> = rows
        .iter()
        .map(|r| format!("{} ({:.1}%)", r.pod, 100.0 * r.efficiency))
        .collect();
    let part = |name: &str, f: &dyn Fn(&ScalingRow) -> f64| Series {
        name: name.into(),
        points: rows.iter().map(|r| (0.0, 1e3 * f(r))).collect(),
    };
    let parts = [
        part("compute and the rest", &|r| {
            r.step_s - r.all_reduce.total() - r.sync_s
        }),
        part("all-reduce (IPU-Links)", &|r| r.all_reduce.ipu_link_s),
        part("all-reduce (GW-Links)", &|r| r.all_reduce.gw_link_s),
        part("sync", &|r| r.sync_s),
    ];
    stacked_bars(
        path,
        (
            &format!("{}: step time by Pod (efficiency per IPU)", plan.model),
            "ms per step",
        ),
        &categories,
        &parts,
    )
    .map_err(Failure::Job)
}

/// Bytes in decimal units (as "900 MB per IPU").
fn bytes(b: u64) -> String {
    let x = b as f64;
    if x >= 1e9 {
        format!("{:.2} GB", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.1} MB", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} kB", x / 1e3)
    } else {
        format!("{b} B")
    }
}

/// `n` with thousands separated by commas.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A count with an SI suffix: `25.56 M`.
fn count(n: u64) -> String {
    let x = n as f64;
    if x >= 1e9 {
        format!("{:.2} G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2} M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1} k", x / 1e3)
    } else {
        n.to_string()
    }
}

/// The plan as a readable report.
pub(super) fn report(
    p: &Plan,
    svg: Option<&PathBuf>,
    calibration: Option<&CalibrationRun>,
) -> String {
    let mut o = String::new();
    header(&mut o, p);
    memory(&mut o, p);
    timing(&mut o, p);
    scaling(&mut o, p);
    if let Some(c) = &p.calibration {
        calibrated(&mut o, p, c, calibration);
    }
    if let Some(path) = svg {
        let _ = writeln!(o, "wrote        {}", path.display());
    }
    o
}

/// The model, the batch, the numerics and the assumptions.
fn header(o: &mut String, p: &Plan) {
    let a = &p.assumptions;
    let _ = writeln!(
        o,
        "plan         {} on {} ({} {} IPUs)",
        p.model, p.pod, p.pod_ipus, p.ipu
    );
    let _ = writeln!(
        o,
        "model        {} parameters; {}FLOP forward, {}FLOP backward per sample",
        count(p.params),
        count(p.flops_per_sample.forward),
        count(p.flops_per_sample.backward)
    );
    let _ = writeln!(
        o,
        "batch        micro-batch {} x accumulation {} x {} = global batch {}",
        p.micro_batch,
        p.gradient_accumulation,
        output::plural(p.replicas as u64, "replica"),
        p.global_batch
    );
    let mut how = vec![format!("{}, {}", p.precision, p.optimizer)];
    if p.precision.products().conversion().is_some() {
        how.push(format!("products: {}", p.products));
    }
    if p.ipus_per_replica > 1 {
        how.push(format!(
            "{} IPUs per replica ({} pipeline)",
            p.ipus_per_replica, p.schedule
        ));
    }
    for (on, what) in [
        (p.recompute, "recomputation"),
        (p.replicated_tensor_sharding, "replicated tensor sharding"),
        (p.offload_optimizer_state, "optimizer state offloaded"),
    ] {
        if on {
            how.push(what.into());
        }
    }
    let _ = writeln!(o, "numerics     {}", how.join(", "));
    let _ = writeln!(
        o,
        "assumptions  {} matmul plans, matmul efficiency {:.0}%, tile imbalance {:.2}{}",
        a.matmul_plan.name(),
        100.0 * a.matmul_efficiency,
        a.tile_imbalance,
        a.exchange_element_bytes
            .map_or_else(String::new, |b| format!(", {b}-byte exchange"))
    );
}

/// Whether it fits, what overflows, and each stage's memory by part.
fn memory(o: &mut String, p: &Plan) {
    let w = &p.worst;
    if p.fits {
        let _ = writeln!(
            o,
            "memory       FITS: fullest tile {} B of {} B ({:.1}%), stage {} (IPU {} of each replica)",
            thousands(w.bytes),
            thousands(w.capacity),
            100.0 * w.fraction,
            w.stage,
            w.stage
        );
    } else {
        let _ = writeln!(
            o,
            "memory       DOES NOT FIT: fullest tile {} B of {} B ({:.1}%), stage {}",
            thousands(w.bytes),
            thousands(w.capacity),
            100.0 * w.fraction,
            w.stage
        );
        for v in &p.overflows {
            let ipu = if v.ipu_bytes_over > 0 {
                format!(", its IPU {} over", bytes(v.ipu_bytes_over))
            } else {
                String::new()
            };
            let _ = writeln!(
                o,
                "  stage {}: a tile needs {} B more{ipu}; the largest part is {} ({})",
                v.stage,
                thousands(v.tile_bytes_over),
                v.largest,
                bytes(v.largest_bytes)
            );
        }
    }
    stage_table(o, p);
}

/// A row per stage: its layers and memory by part.
fn stage_table(o: &mut String, p: &Plan) {
    let layers: Vec<String> = p
        .stages
        .iter()
        .map(|s| {
            if s.layers == 1 {
                s.first_layer.clone()
            } else {
                format!("{} .. {} ({})", s.first_layer, s.last_layer, s.layers)
            }
        })
        .collect();
    let width = layers.iter().map(String::len).max().unwrap_or(0).max(6);
    let _ = writeln!(
        o,
        "  {:<5} {:<width$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9} {:>12}",
        "stage",
        "layers",
        "params",
        "weights",
        "grads",
        "master",
        "opt state",
        "activations",
        "code+exch",
        "IPU",
        "fullest tile"
    );
    for (s, layers) in p.stages.iter().zip(&layers) {
        let m = &s.memory;
        let _ = writeln!(
            o,
            "  {:<5} {:<width$} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>9} {:>9} {:>12}",
            s.stage,
            layers,
            count(s.params),
            bytes(m.weights),
            bytes(m.gradients),
            bytes(m.master_weights),
            bytes(m.optimizer_state),
            bytes(m.activations),
            bytes(m.code_and_exchange),
            bytes(m.total()),
            if s.fits {
                thousands(s.worst_tile_bytes)
            } else {
                format!("{} !", thousands(s.worst_tile_bytes))
            }
        );
    }
}

/// Throughput, the step by part, and the pipeline.
fn timing(o: &mut String, p: &Plan) {
    let _ = writeln!(
        o,
        "throughput   {:.0} samples/s; {:.1}% of the IPUs' {} peak",
        p.samples_per_second,
        100.0 * p.flops_utilisation,
        p.utilisation_peak
    );
    let _ = writeln!(
        o,
        "step time    {} per step (parts that take no time not shown)",
        seconds(p.step_s)
    );
    for (part, t) in p.step.parts().into_iter().filter(|&(_, t)| t > 0.0) {
        let _ = writeln!(
            o,
            "  {part:<24} {:>11} {:>6.1}%",
            seconds(t),
            percent(t, p.step_s)
        );
    }
    let (stages, g) = (p.ipus_per_replica, p.gradient_accumulation);
    let pipeline = if stages == 1 {
        let n = p.pipeline_steps;
        format!(
            "none: {n} micro-batch{} one after the other",
            if n == 1 { "" } else { "es" }
        )
    } else if p.schedule == Schedule::Sequential {
        format!(
            "{stages} stages run one at a time: {g} x {stages} = {} stage-steps",
            p.pipeline_steps
        )
    } else {
        format!(
            "{stages} stages, {g} micro-batches: N = 2(P-1) + (G-(P-1)) = {} stage-steps",
            p.pipeline_steps
        )
    };
    let _ = writeln!(o, "pipeline     {pipeline}");
    let per: Vec<String> = p
        .stages
        .iter()
        .map(|s| format!("stage {} {}", s.stage, seconds(s.micro_batch_s)))
        .collect();
    let _ = writeln!(o, "  per micro-batch: {}", per.join(", "));
}

/// Weak scaling over the Pods.
fn scaling(o: &mut String, p: &Plan) {
    let _ = writeln!(
        o,
        "scaling      weak: every Pod filled with {}-IPU replicas, micro-batch {} x accumulation {} each",
        p.ipus_per_replica, p.micro_batch, p.gradient_accumulation
    );
    let _ = writeln!(
        o,
        "  {:<8} {:>8} {:>12} {:>12} {:>10} {:>12} {:>10}",
        "pod", "replicas", "all-reduce", "of which GW", "sync", "samples/s", "efficiency"
    );
    let per_step = p.micro_batch as f64 * p.gradient_accumulation as f64;
    for r in &p.scaling {
        let _ = writeln!(
            o,
            "  {:<8} {:>8} {:>12} {:>12} {:>10} {:>12.0} {:>9.1}%",
            r.pod,
            r.replicas,
            seconds(r.all_reduce.total()),
            seconds(r.all_reduce.gw_link_s),
            seconds(r.sync_s),
            r.replicas as f64 * per_step / r.step_s,
            100.0 * r.efficiency
        );
    }
}

/// The layers priced on the simulator beside the assumptions, and the
/// plan by the assumptions alone.
fn calibrated(o: &mut String, p: &Plan, c: &Calibrated, run: Option<&CalibrationRun>) {
    let how = run.map_or_else(String::new, |r| {
        format!(
            ", {} compiled in {:.1} s ({} from the cache)",
            output::plural(r.compiled as u64, "layer"),
            r.seconds,
            r.hits
        )
    });
    let _ = writeln!(
        o,
        "layer costs  simulated: {} of {} rows on the simulated {}, micro-batch {}{how}",
        c.simulated_rows,
        p.stages.iter().map(|s| s.layers).sum::<usize>(),
        p.ipu,
        c.micro_batch
    );
    let width = c
        .layers
        .iter()
        .map(|l| l.description.len())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        o,
        "  {:<width$} {:>4} {:>10} {:>10} {:>10} {:>10} {:>6} {:>12}",
        "layer", "rows", "fwd assum", "bwd assum", "fwd sim", "bwd sim", "sim/as", "sim tile B"
    );
    for l in &c.layers {
        let (a, s) = (
            l.assumed_forward_cycles + l.assumed_backward_cycles,
            l.simulated.forward_cycles + l.simulated.backward_cycles,
        );
        let _ = writeln!(
            o,
            "  {:<width$} {:>4} {:>10} {:>10} {:>10} {:>10} {:>6.2} {:>12}",
            l.description,
            l.rows,
            thousands(l.assumed_forward_cycles),
            thousands(l.assumed_backward_cycles),
            thousands(l.simulated.forward_cycles),
            thousands(l.simulated.backward_cycles),
            s as f64 / a.max(1) as f64,
            thousands(l.simulated.max_tile_bytes)
        );
    }
    let _ = writeln!(
        o,
        "  all {} rows: {} cycles per micro-batch assumed, {} simulated ({:.2}x)",
        c.simulated_rows,
        thousands(c.assumed_cycles),
        thousands(c.simulated_cycles),
        c.simulated_cycles as f64 / c.assumed_cycles.max(1) as f64
    );
    let a = &c.assumed;
    let fit = |fits: bool, fraction: f64| {
        format!(
            "{} ({:.1}% of a tile)",
            if fits { "fits" } else { "DOES NOT FIT" },
            100.0 * fraction
        )
    };
    let _ = writeln!(
        o,
        "  assumed      {:.0} samples/s, step {} (compute {}), {}",
        a.samples_per_second,
        seconds(a.step_s),
        seconds(a.step.compute_s),
        fit(a.fits, a.worst.fraction)
    );
    let _ = writeln!(
        o,
        "  simulated    {:.0} samples/s, step {} (compute {}), {}",
        p.samples_per_second,
        seconds(p.step_s),
        seconds(p.step.compute_s),
        fit(p.fits, p.worst.fraction)
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn number_formats() {
        assert_eq!(thousands(638_976), "638,976");
        assert_eq!(thousands(12), "12");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(bytes(940_572_672), "940.6 MB");
        assert_eq!(count(25_557_032), "25.56 M");
    }
}
