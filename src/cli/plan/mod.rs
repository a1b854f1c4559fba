//! `tessera plan --model MODEL [OPTIONS]`: whether a model fits on a Pod
//! and how fast it trains, before renting one ([`tessera_sim::plan`]).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use tessera_sim::IpuSpec;
use tessera_sim::model::{MlpConfig, NetworkFile, NetworkFileError};
use tessera_sim::plan::{
    Builtin, Calibration, ModelTable, Optimizer, PlanAssumptions, PlanConfig, Precision, Schedule,
};
use tessera_sim::pod::{Algorithms, PodSpec};
use tessera_sim::train::{RESNET_MINI_BLOCKS, RESNET_MINI_WIDTHS, TrainConfig};

mod report;

use super::Failure;
use super::job;
use super::output::{self, one_line};
use super::parse;
use report::{CalibrationRun, report, scaling_chart};

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
    /// C600: a Mk2 IPU with FP8 units, 1.486 GHz, 280 TFLOPS FP16, 560
    /// TFLOPS FP8.
    C600,
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

    /// resnet-mini: channels per stage, at most 4096 [default: 16,32]
    #[arg(
        long,
        value_name = "W,W",
        value_delimiter = ',',
        value_parser = parse::whole::<usize, 1>,
    )]
    widths: Option<Vec<usize>>,

    /// resnet-mini: residual blocks of each stage (as many as --widths);
    /// 6 layers each, the network at most 4096 layers [default: 1,1]
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
    /// of 64, at most 65536)
    #[arg(long, default_value = "pod16", help_heading = "Machine")]
    pod: PodSpec,

    /// The IPU
    #[arg(long, value_enum, default_value_t = IpuArg::Mk2, help_heading = "Machine")]
    ipu: IpuArg,

    /// Compute.weights precision: 32.32, 16.32, 16.16, 8.16, 8.32 (FP8
    /// products), mxfp8.16, mxfp6.16 or mxfp4.16 (OCP MX products)
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

    /// IPUs per replica: the pipeline's stages, a power of two, at most
    /// the Pod's IPUs
    #[arg(
        long,
        alias = "ipus_per_replica",
        value_name = "N",
        value_parser = parse::whole::<usize, 1>,
        default_value_t = 1,
        help_heading = "Parallelism"
    )]
    ipus_per_replica: usize,

    /// The pipeline schedule: grouped, interleaved or sequential (of a
    /// pipeline: --ipus-per-replica 2 or more) [default: interleaved]
    #[arg(long, help_heading = "Parallelism")]
    schedule: Option<Schedule>,

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
        if stages > self.pod.ipus() {
            return Err(Failure::Usage(format!(
                "--ipus-per-replica {stages}: at most the Pod's {} IPUs (--pod); \
                 a replica's stages run on IPUs of the Pod",
                self.pod.ipus()
            )));
        }
        if let Some(schedule) = self.schedule
            && stages < 2
        {
            return Err(Failure::Usage(format!(
                "--schedule {schedule} schedules a pipeline's stages, and there is one: give \
                 --ipus-per-replica P (2 or more)"
            )));
        }
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
                IpuArg::C600 => IpuSpec::C600,
            },
            precision: self.precision,
            optimizer: self.optimizer,
            micro_batch: self.micro_batch,
            gradient_accumulation: accumulation,
            device_iterations: self.device_iterations,
            collectives: self.collectives.into(),
            replicas,
            ipus_per_replica: stages,
            schedule: self.schedule.unwrap_or(Schedule::Interleaved),
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
        return ModelTable::from_network(&digits.network()).map_err(|e| usage(e.to_string()));
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
        let classes = number(classes)?;
        if classes < 2 {
            return Err(usage(format!(
                "--model {name}: {classes} classes; a classifier needs at least 2 (as \
                 `tessera train` refuses data of one class)"
            )));
        }
        let config = MlpConfig {
            inputs: number(inputs)?,
            hidden,
            classes,
            ..TrainConfig::default().model(1, 1)
        };
        return ModelTable::from_network(&config.network())
            .map_err(|e| usage(format!("--model {name}: {e}")));
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
    Err(usage(format!(
        "--model {name}: unknown model `{name}`: expected {MODELS}"
    )))
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
}
