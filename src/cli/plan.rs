//! `tessera plan --model MODEL [OPTIONS]`: whether a model fits on a Pod
//! and how fast it trains, before renting one ([`tessera_sim::plan`]).

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tessera_sim::IpuSpec;
use tessera_sim::model::{MlpConfig, NetworkFile, NetworkFileError};
use tessera_sim::plan::{
    Builtin, Calibrated, Calibration, ModelTable, Optimizer, Plan, PlanAssumptions, PlanConfig,
    Precision, Schedule,
};
use tessera_sim::pod::{Algorithms, PodSpec, ScalingRow};
use tessera_sim::train::{RESNET_MINI_BLOCKS, RESNET_MINI_WIDTHS, TrainConfig};

use super::Failure;
use super::job;
use super::output::{self, one_line};
use super::parse;
use super::plot::{Series, stacked_bars};
use super::train::{percent, seconds};

/// The models `--model` takes besides a file, for messages.
const MODELS: &str = "resnet50, bert-large-128, bert-large-384, mlp, \
                      mlp:INPUTS:WIDTH,WIDTH:CLASSES, resnet-mini or a FILE.toml (a network or a table of costs)";

/// The IPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum IpuArg {
    /// Mk2 GC200: 1.33 GHz, 250 TFLOPS FP16.
    Mk2,
    /// Bow: the GC200 at 1.85 GHz, 350 TFLOPS FP16.
    Bow,
}

/// Which assumptions price the plan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum AssumptionsArg {
    /// A real IPU with Poplar: balanced matmul plans, FP16 exchange,
    /// matmul efficiency 0.75.
    Ipu,
    /// The simulator's own MLP implementation, to compare with `tessera
    /// train` (use with --model mlp).
    Simulator,
}

/// How layers are priced.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum LayerCostsArg {
    /// By the assumptions (matmul efficiency, the cut of each product).
    Assumed,
    /// Each layer the model describes compiled on the simulated IPU (all
    /// tiles) and its cycles and fullest tile read from the engine; the
    /// rest by the assumptions.
    Simulated,
}

/// What calibrating the layers took.
struct CalibrationRun {
    /// Distinct layers compiled.
    compiled: usize,
    /// Rows answered from the cache.
    hits: usize,
    /// Wall-clock seconds.
    seconds: f64,
}

/// Which algorithms price the Pod's collectives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum CollectivesArg {
    /// Graphcore GCL's rings, one way or both, whichever is cheaper.
    Gcl,
    /// The cheapest algorithm, each routed over the Pod's links.
    Auto,
    /// The ring.
    Ring,
    /// The bidirectional ring.
    BidirectionalRing,
    /// Halving-doubling.
    HalvingDoubling,
    /// The double binary tree.
    DoubleBinaryTree,
}

impl From<CollectivesArg> for Algorithms {
    fn from(c: CollectivesArg) -> Self {
        use tessera_collectives::Algorithm as A;
        match c {
            CollectivesArg::Gcl => Self::Gcl,
            CollectivesArg::Auto => Self::Auto,
            CollectivesArg::Ring => Self::Only(A::Ring),
            CollectivesArg::BidirectionalRing => Self::Only(A::BidirectionalRing),
            CollectivesArg::HalvingDoubling => Self::Only(A::HalvingDoubling),
            CollectivesArg::DoubleBinaryTree => Self::Only(A::DoubleBinaryTree),
        }
    }
}

/// Arguments of `tessera plan`.
#[derive(Clone, Debug, Args)]
pub(super) struct PlanArgs {
    /// The model: resnet50 (v1.5, 224x224), bert-large-128, bert-large-384
    /// (pre-training), mlp (the default job's digits MLP),
    /// mlp:INPUTS:WIDTH,WIDTH:CLASSES, resnet-mini (the trainer's, on the
    /// digits' 1x8x8 images and 10 classes), or a FILE.toml: a network
    /// (as `train --model` reads) or a table of layer costs
    #[arg(long, value_name = "MODEL")]
    model: String,

    /// resnet-mini: channels per stage [default: 16,32]
    #[arg(
        long,
        value_name = "W,W",
        value_delimiter = ',',
        value_parser = parse::whole::<usize, 1>,
    )]
    widths: Option<Vec<usize>>,

    /// resnet-mini: residual blocks of each stage (as many as --widths)
    /// [default: 1,1]
    #[arg(
        long,
        value_name = "B,B",
        value_delimiter = ',',
        value_parser = parse::whole::<usize, 0>,
    )]
    blocks: Option<Vec<usize>>,

    /// resnet-mini: add, before the final batch norm and pool, a block of
    /// two parallel branches of C channels each (as `train --branches`)
    /// [default: none]
    #[arg(long, value_name = "C", value_parser = parse::whole::<usize, 1>)]
    branches: Option<usize>,

    /// The Pod: m2000, pod16, pod64, pod128, pod256 or podN (N a multiple
    /// of 64)
    #[arg(long, default_value = "pod16", help_heading = "Machine")]
    pod: PodSpec,

    /// The IPU
    #[arg(long, value_enum, default_value_t = IpuArg::Mk2, help_heading = "Machine")]
    ipu: IpuArg,

    /// Compute.weights precision: 32.32, 16.32 or 16.16
    #[arg(long, default_value = "16.16", help_heading = "Numerics")]
    precision: Precision,

    /// The optimizer: sgd, adamw, lamb or lars
    #[arg(long, default_value = "lamb", help_heading = "Numerics")]
    optimizer: Optimizer,

    /// Samples per micro-batch
    #[arg(
        long,
        alias = "micro_batch",
        value_name = "N",
        value_parser = parse::whole::<usize, 1>,
        default_value_t = 8,
        help_heading = "Batch"
    )]
    micro_batch: usize,

    /// Micro-batches per replica per step [default: 1; with pipelining, 4 x
    /// the IPUs per replica]
    #[arg(
        long,
        alias = "gradient_accumulation",
        value_name = "N",
        value_parser = parse::whole::<usize, 1>,
        help_heading = "Batch"
    )]
    gradient_accumulation: Option<usize>,

    /// Steps per run of the device: host input streams ahead of compute
    /// within a run (as `tessera train`)
    #[arg(
        long,
        alias = "device_iterations",
        value_name = "N",
        value_parser = parse::whole::<usize, 1>,
        default_value_t = tessera_sim::plan::DEFAULT_DEVICE_ITERATIONS,
        help_heading = "Batch"
    )]
    device_iterations: usize,

    /// Replicas [default: as many as fill the Pod]
    #[arg(
        long,
        value_name = "N",
        value_parser = parse::whole::<usize, 1>,
        help_heading = "Parallelism"
    )]
    replicas: Option<usize>,

    /// IPUs per replica: the pipeline's stages, a power of two
    #[arg(
        long,
        alias = "ipus_per_replica",
        value_name = "N",
        value_parser = parse::whole::<usize, 1>,
        default_value_t = 1,
        help_heading = "Parallelism"
    )]
    ipus_per_replica: usize,

    /// The pipeline schedule: grouped, interleaved or sequential
    #[arg(long, default_value = "interleaved", help_heading = "Parallelism")]
    schedule: Schedule,

    /// Recompute activations in the backward pass from checkpoints
    #[arg(long, help_heading = "Memory")]
    recompute: bool,

    /// Shard optimizer state and master weights over the replicas of an
    /// IPU-Link domain
    #[arg(long, alias = "replicated_tensor_sharding", help_heading = "Memory")]
    replicated_tensor_sharding: bool,

    /// Keep optimizer state and master weights in streaming memory
    #[arg(long, alias = "offload_optimizer_state", help_heading = "Memory")]
    offload_optimizer_state: bool,

    /// The efficiency factors and assumptions
    #[arg(long, value_enum, default_value_t = AssumptionsArg::Ipu)]
    assumptions: AssumptionsArg,

    /// How layers are priced: by the assumptions, or compiled on the
    /// simulated IPU (minutes for ResNet-50) where the model describes them
    #[arg(long, value_enum, default_value_t = LayerCostsArg::Assumed)]
    layer_costs: LayerCostsArg,

    /// The collectives' algorithms, routed over the Pod's IPU-Links and
    /// GW-Links
    #[arg(long, value_enum, default_value_t = CollectivesArg::Gcl, help_heading = "Machine")]
    collectives: CollectivesArg,

    /// Print the plan as one JSON object instead of a report
    #[arg(long)]
    json: bool,

    /// Also draw the scaling curve (samples/s over IPUs) into this SVG file
    #[arg(long, value_name = "PATH")]
    svg: Option<PathBuf>,
}

impl PlanArgs {
    pub(super) fn run(self) -> Result<(), Failure> {
        if let Some(path) = &self.svg {
            output::output_file("--svg", path)?;
        }
        let mut config = self.config()?;
        let calibration = if self.layer_costs == LayerCostsArg::Simulated {
            Some(calibrate(&mut config)?)
        } else {
            None
        };
        let plan = config
            .plan()
            .map_err(|e| Failure::Usage(one_line(&e.to_string())))?;
        if let Some(path) = &self.svg {
            scaling_chart(&plan, path)?;
        }
        let out = if self.json {
            let mut line = serde_json::to_string(&plan).expect("a plan serializes");
            line.push('\n');
            line
        } else {
            report(&plan, self.svg.as_ref(), calibration.as_ref())
        };
        output::print(&out)
    }

    /// The configuration the flags describe.
    fn config(&self) -> Result<PlanConfig, Failure> {
        let model = if self.model == "resnet-mini" {
            resnet_mini(
                self.widths.as_deref(),
                self.blocks.as_deref(),
                self.branches,
            )?
        } else if let Some(flag) = [
            ("--widths", self.widths.is_some()),
            ("--blocks", self.blocks.is_some()),
            ("--branches", self.branches.is_some()),
        ]
        .iter()
        .find_map(|(flag, given)| given.then_some(flag))
        {
            return Err(Failure::Usage(format!(
                "{flag} is an option of --model resnet-mini, not of {}",
                self.model
            )));
        } else {
            model(&self.model)?
        };
        let stages = self.ipus_per_replica;
        let accumulation = self.gradient_accumulation.unwrap_or(if stages > 1 {
            stages.saturating_mul(4)
        } else {
            1
        });
        let replicas = self
            .replicas
            .unwrap_or_else(|| (self.pod.ipus() / stages.max(1)).max(1));
        Ok(PlanConfig {
            ipu: match self.ipu {
                IpuArg::Mk2 => IpuSpec::MK2_GC200,
                IpuArg::Bow => IpuSpec::BOW,
            },
            precision: self.precision,
            optimizer: self.optimizer,
            micro_batch: self.micro_batch,
            gradient_accumulation: accumulation,
            device_iterations: self.device_iterations,
            collectives: self.collectives.into(),
            replicas,
            ipus_per_replica: stages,
            schedule: self.schedule,
            recompute: self.recompute,
            replicated_tensor_sharding: self.replicated_tensor_sharding,
            offload_optimizer_state: self.offload_optimizer_state,
            assumptions: match self.assumptions {
                AssumptionsArg::Ipu => PlanAssumptions::ipu(),
                AssumptionsArg::Simulator => PlanAssumptions::simulator(),
            },
            ..PlanConfig::new(model, self.pod.clone())
        })
    }
}

/// Prices `config`'s described layers on its simulated IPU into
/// `config.layer_costs`.
fn calibrate(config: &mut PlanConfig) -> Result<CalibrationRun, Failure> {
    let started = std::time::Instant::now();
    let mut calibration = Calibration::new(config.ipu);
    let costs = calibration
        .price_model(&config.model, config.micro_batch, config.precision)
        .map_err(|e| Failure::Usage(one_line(&format!("--layer-costs simulated: {e}"))))?;
    config.layer_costs = Some(costs);
    Ok(CalibrationRun {
        compiled: calibration.compiled(),
        hits: calibration.hits(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The step's parts per Pod size of the plan's scaling table, in
/// milliseconds, as stacked bars: what does not depend on the Pod
/// (compute, optimizer, host input, ...), the all-reduce over IPU-Links and
/// over GW-Links, and the sync.
fn scaling_chart(plan: &Plan, path: &std::path::Path) -> Result<(), Failure> {
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

/// The table of resnet-mini of `widths` and `blocks` (the trainer's
/// defaults where not given), with a block of parallel branches of
/// `branches` channels each if given, on the digits' 1x8x8 images and 10
/// classes.
fn resnet_mini(
    widths: Option<&[usize]>,
    blocks: Option<&[usize]>,
    branches: Option<usize>,
) -> Result<ModelTable, Failure> {
    let widths = widths.unwrap_or(&RESNET_MINI_WIDTHS);
    let blocks = blocks.unwrap_or(&RESNET_MINI_BLOCKS);
    let net = job::resnet_mini([1, 8, 8], 10, widths, blocks, branches)?;
    ModelTable::from_network(&net).map_err(|e| Failure::Usage(one_line(&e.to_string())))
}

/// The model `--model` names.
fn model(name: &str) -> Result<ModelTable, Failure> {
    if let Some(b) = Builtin::named(name) {
        return Ok(b.table());
    }
    let usage = |m: String| Failure::Usage(one_line(&m));
    if name == "mlp" {
        let digits = TrainConfig::default().model(64, 10);
        return ModelTable::from_mlp(&digits).map_err(|e| usage(e.to_string()));
    }
    if let Some(spec) = name.strip_prefix("mlp:") {
        let bad = || {
            usage(format!(
                "--model {name}: expected mlp:INPUTS:WIDTH,WIDTH:CLASSES with whole numbers"
            ))
        };
        let parts: Vec<&str> = spec.split(':').collect();
        let [inputs, hidden, classes] = parts[..] else {
            return Err(bad());
        };
        let number = |s: &str| s.trim().parse::<usize>().map_err(|_| bad());
        let hidden = if hidden.is_empty() {
            Vec::new()
        } else {
            hidden.split(',').map(number).collect::<Result<_, _>>()?
        };
        let config = MlpConfig {
            inputs: number(inputs)?,
            hidden,
            classes: number(classes)?,
            ..TrainConfig::default().model(1, 1)
        };
        return ModelTable::from_mlp(&config).map_err(|e| usage(format!("--model {name}: {e}")));
    }
    let path = PathBuf::from(name);
    if path.extension().is_some_and(|e| e == "toml") || path.exists() {
        return match NetworkFile::read(&path) {
            Ok(file) => ModelTable::from_network(&file.network)
                .map(|t| t.named(file.name))
                .map_err(|e| usage(format!("{}: {e}", path.display()))),
            Err(NetworkFileError::CostTable { .. }) => {
                ModelTable::read(&path).map_err(|e| usage(e.to_string()))
            }
            Err(e) => Err(usage(e.to_string())),
        };
    }
    Err(usage(format!("unknown model `{name}`: expected {MODELS}")))
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
fn report(p: &Plan, svg: Option<&PathBuf>, calibration: Option<&CalibrationRun>) -> String {
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
        "throughput   {:.0} samples/s; {:.1}% of the IPUs' FP16 peak",
        p.samples_per_second,
        100.0 * p.flops_utilisation
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
    fn models_by_name() {
        assert_eq!(model("resnet50").unwrap().params(), 25_557_032);
        assert_eq!(model("mlp").unwrap().layers().len(), 3);
        let m = model("mlp:256:256,256:16").unwrap();
        assert_eq!(m.layers().len(), 3);
        assert_eq!(m.layers()[0].params, 256 * 256 + 256);
        assert_eq!(model("mlp:4::2").unwrap().layers().len(), 1);
        for bad in [
            "mlp:1:2",
            "mlp:x:1:2",
            "mlp:4:0:2",
            "resnet",
            "no-such-model",
        ] {
            assert!(matches!(model(bad), Err(Failure::Usage(_))), "{bad}");
        }
        assert!(matches!(
            model("/no/such/dir/model.toml"),
            Err(Failure::Usage(m)) if m.contains("cannot read")
        ));
    }

    #[test]
    fn number_formats() {
        assert_eq!(thousands(638_976), "638,976");
        assert_eq!(thousands(12), "12");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(bytes(940_572_672), "940.6 MB");
        assert_eq!(count(25_557_032), "25.56 M");
    }
}
