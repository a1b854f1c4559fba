//! What `tessera train` and `tessera scale` share: the job's options (the
//! same names as flags and as keys of a `--config` TOML file), their
//! conversion into a [`TrainConfig`], the call that runs a trainer, the
//! progress bar and the run directory's files.

use std::fmt::Display;
use std::io::{self, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::{Deserialize, Serialize};

use tessera_core::scale::{AutomaticConfig, DynamicConfig};
use tessera_sim::checkpoint::write_atomic;
use tessera_sim::data::{Dataset, OutputMode, Source};
use tessera_sim::model::{
    Activation, BnGroup, DeviceMapping, NetworkConfig, NetworkFile, NetworkFileError,
};
use tessera_sim::pod::PodSpec;
use tessera_sim::train::{
    Event, GradReduction, LossScaling, LrDecay, NamedOptimizer, Observer, OptimizerConfig,
    PrecisionMode, RESNET_MINI_BLOCKS, RESNET_MINI_WIDTHS, RunOptions, Schedule, Summary,
    TrainConfig, TrainError, Trainer,
};

use super::Failure;

/// The options of a training job. Each is a flag (`--device-iterations`,
/// or `--device_iterations`) and a key of a `--config` TOML file
/// (`device_iterations = 4`); a flag overrides the file, the file the
/// default job ([`TrainConfig::default`]). Enumerations are kept as the
/// text given and parsed by [`JobArgs::resolve`], so the file and the
/// flags share one grammar (flags are checked as they are parsed too).
#[derive(Clone, Debug, Default, PartialEq, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct JobArgs {
    /// The data set: digits, synthetic:SAMPLES:FEATURES:CLASSES[:SEED],
    /// images:SAMPLES:CxHxW:CLASSES[:SEED], csv:PATH (label in the last
    /// column), idx:IMAGES:LABELS or
    /// npy:INPUTS:LABELS [default: digits]
    #[arg(long, value_name = "SOURCE", value_parser = checked::<Source>, help_heading = "Data")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) data: Option<String>,

    /// Fraction of the data held out for testing [default: 0.2]
    #[arg(
        long,
        alias = "test_fraction",
        value_name = "F",
        allow_negative_numbers = true,
        help_heading = "Data"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) test_fraction: Option<f64>,

    /// The model: mlp (the --hidden layers), resnet-mini (a residual
    /// network over the images; its own defaults for the optimizer,
    /// learning rate, warm-up and epochs) or a network FILE.toml (as
    /// resnet-mini, its layers from the file) [default: mlp]
    #[arg(long, value_name = "MODEL", help_heading = "Model")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) model: Option<ModelArg>,

    /// resnet-mini: channels per stage [default: 16,32 with resnet-mini]
    #[arg(
        long,
        value_name = "W,W",
        value_delimiter = ',',
        value_parser = whole::<usize, 1>,
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) widths: Option<Vec<usize>>,

    /// resnet-mini: residual blocks of each stage, comma separated (as
    /// many as --widths) [default: 1,1 with resnet-mini]
    #[arg(
        long,
        value_name = "B,B",
        value_delimiter = ',',
        value_parser = whole::<usize, 0>,
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) blocks: Option<Vec<usize>>,

    /// resnet-mini: add, before the final batch norm and pool, a block of
    /// two parallel branches (batch norm, ReLU and a 3x3 convolution;
    /// batch norm, ReLU and a 1x1 convolution) of C channels each,
    /// concatenated by channels [default: none]
    #[arg(
        long,
        value_name = "C",
        value_parser = whole::<usize, 1>,
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) branches: Option<usize>,

    /// resnet-mini: batch-norm statistics per replica or over all
    /// replicas [default: replica with resnet-mini]
    #[arg(long, value_enum, alias = "bn_group", help_heading = "Model")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) bn_group: Option<BnGroupArg>,

    /// Hidden layer widths, comma separated [default: 128,64]
    #[arg(
        long,
        value_name = "W,W",
        value_delimiter = ',',
        value_parser = whole::<usize, 1>,
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) hidden: Option<Vec<usize>>,

    /// The hidden layers' activation [default: relu]
    #[arg(long, value_enum, help_heading = "Model")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) activation: Option<ActivationArg>,

    /// Batch norm after each hidden layer [default: false]
    #[arg(
        long,
        alias = "batch_norm",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) batch_norm: Option<bool>,

    /// The Pod: m2000, pod16, pod64, pod128, pod256 or podN (N a multiple
    /// of 64) [default: pod16]
    #[arg(long, value_parser = checked::<PodSpec>, help_heading = "Pod")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pod: Option<String>,

    /// Host processes (PopRun's --num-instances) [default: 4]
    #[arg(long, value_name = "N", value_parser = whole::<usize, 1>, help_heading = "Pod")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) instances: Option<usize>,

    /// Replicas per instance (PopTorch's replicationFactor) [default: 4]
    #[arg(
        long,
        alias = "replication_factor",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Pod"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) replication_factor: Option<usize>,

    /// IPUs per replica, a power of two [default: 1]
    #[arg(
        long,
        alias = "ipus_per_replica",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Pod"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) ipus_per_replica: Option<usize>,

    /// Place the layers on P IPUs per replica as pipeline stages (sets
    /// --ipus-per-replica; the stages balanced by parameter memory unless
    /// --device-mapping says otherwise)
    #[arg(
        long,
        alias = "pipeline_stages",
        value_name = "P",
        value_parser = whole::<usize, 1>,
        help_heading = "Model parallelism"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) pipeline_stages: Option<usize>,

    /// The stages' schedule: grouped, interleaved or sequential (sharded)
    /// [default: interleaved when pipelined]
    #[arg(
        long,
        value_name = "SCHEDULE",
        value_parser = checked::<Schedule>,
        help_heading = "Model parallelism"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) schedule: Option<String>,

    /// The IPU of each layer (a network's top-level blocks, the head
    /// last), comma separated, non-decreasing (0,0,1); a network's block of
    /// parallel branches may take a list, one IPU per branch, run as one
    /// concurrent stage (0,[1,2],3)
    #[arg(
        long,
        alias = "device_mapping",
        value_name = "I,I",
        value_parser = DeviceMapping::from_str,
        help_heading = "Model parallelism"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) device_mapping: Option<DeviceMapping>,

    /// Branches mapped to a list of IPUs run as a stage per branch, in
    /// branch order, instead of one concurrent stage (for comparison)
    /// [default: false]
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Model parallelism"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) serial_branches: Option<bool>,

    /// Recompute activations in the backward pass, keeping only stage
    /// inputs [default: false]
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Model parallelism"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) recompute: Option<bool>,

    /// With --recompute on a network that is not pipelined: the blocks
    /// (top-level layers, the head last, from 0) whose input is kept as a
    /// recomputation checkpoint, increasing from 1 (2,5)
    #[arg(
        long,
        alias = "recompute_checkpoints",
        value_name = "B,B",
        value_delimiter = ',',
        value_parser = whole::<usize, 1>,
        help_heading = "Model parallelism"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) recompute_checkpoints: Option<Vec<usize>>,

    /// Samples per micro-batch [default: 8]
    #[arg(
        long,
        alias = "micro_batch",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Batch"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) micro_batch: Option<usize>,

    /// Micro-batches per replica per step (gradientAccumulation) [default: 1]
    #[arg(
        long,
        alias = "gradient_accumulation",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Batch"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) gradient_accumulation: Option<usize>,

    /// Steps per host call (deviceIterations) [default: 4]
    #[arg(
        long,
        alias = "device_iterations",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Batch"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) device_iterations: Option<usize>,

    /// Compute.weights precision: 32.32, 16.32, 16.16 (stochastic
    /// rounding) or 16.16-rn [default: 16.16]
    #[arg(long, value_parser = checked::<PrecisionMode>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) precision: Option<String>,

    /// off, static:SCALE, dynamic (GradScaler, growth every 200 steps) or
    /// automatic (PopART's histogram) [default: dynamic]
    #[arg(
        long,
        alias = "loss_scaling",
        value_name = "MODE",
        value_parser = checked::<LossScalingArg>,
        help_heading = "Numerics"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) loss_scaling: Option<String>,

    /// How gradients are combined over micro-batches and replicas: sum,
    /// mean or running-mean [default: mean]
    #[arg(long, value_parser = checked::<GradReduction>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) reduction: Option<String>,

    /// sgd (momentum 0.9), adamw, lamb or lars (momentum 0.9), each with
    /// its own defaults for --lr and --weight-decay [default: lamb]
    #[arg(long, value_parser = ["sgd", "adamw", "lamb", "lars"], help_heading = "Optimizer")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) optimizer: Option<String>,

    /// Learning rate after the warm-up [default: the optimizer's: sgd 0.1,
    /// adamw 0.005, lamb 0.005, lars 1]
    #[arg(
        long,
        value_name = "LR",
        allow_negative_numbers = true,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lr: Option<f32>,

    /// Weight decay [default: the optimizer's: sgd 0, adamw 0.01, lamb
    /// 0.01, lars 0.0001]
    #[arg(
        long,
        alias = "weight_decay",
        value_name = "WD",
        allow_negative_numbers = true,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) weight_decay: Option<f32>,

    /// Clip the global gradient norm to this [default: no clipping]
    #[arg(
        long,
        alias = "max_grad_norm",
        value_name = "NORM",
        allow_negative_numbers = true,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) max_grad_norm: Option<f32>,

    /// Steps of linear learning-rate warm-up [default: 20]
    #[arg(
        long,
        alias = "warmup_steps",
        value_name = "STEPS",
        value_parser = whole::<u64, 0>,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) warmup_steps: Option<u64>,

    /// The learning rate after the warm-up: constant or cosine (to 0 at
    /// the last step) [default: cosine]
    #[arg(
        long,
        alias = "lr_schedule",
        value_name = "SCHEDULE",
        value_parser = checked::<LrDecay>,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) lr_schedule: Option<String>,

    /// Passes over the training set [default: 40; scale: 5]
    #[arg(long, value_name = "N", value_parser = whole::<u64, 1>, help_heading = "Run")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) epochs: Option<u64>,

    /// Seed of the weights, the shuffles and stochastic rounding [default: 42]
    #[arg(long, value_name = "N", value_parser = whole::<u64, 0>, help_heading = "Run")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) seed: Option<u64>,

    /// Shard the optimizer state over each instance's replicas [default: false]
    #[arg(
        long,
        alias = "replicated_tensor_sharding",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Run"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) replicated_tensor_sharding: Option<bool>,

    /// Keep the optimizer state in streaming memory [default: false]
    #[arg(
        long,
        alias = "offload_optimizer_state",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Run"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) offload_optimizer_state: Option<bool>,

    /// Which step losses the outfeed keeps: all, sum, final or every:N
    /// (outputMode) [default: all]
    #[arg(
        long,
        alias = "output_mode",
        value_name = "MODE",
        value_parser = checked::<OutputMode>,
        help_heading = "Run"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) output_mode: Option<String>,

    /// Check every N steps that the replicas' weights are bitwise
    /// identical (0: only at the end) [default: 50]
    #[arg(
        long,
        alias = "check_replicas_every",
        value_name = "N",
        value_parser = whole::<u64, 0>,
        help_heading = "Run"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) check_replicas_every: Option<u64>,
}

/// Where a job writes and how it reports: the flags `train` and `scale`
/// share that are not part of the job itself.
#[derive(Clone, Debug, Default, Args)]
pub(super) struct OutputArgs {
    /// Read job options from this TOML file (the keys are the option
    /// names in snake_case: `device_iterations = 4`); flags override it
    #[arg(long, value_name = "FILE.toml")]
    pub(super) config: Option<PathBuf>,

    /// The run directory's name, under --runs-dir [default: train: default; scale: scale]
    #[arg(long)]
    pub(super) name: Option<String>,

    /// Where run directories go [default: runs]
    #[arg(long, alias = "runs_dir", value_name = "DIR")]
    pub(super) runs_dir: Option<PathBuf>,

    /// No progress bar (there is none either when stderr is not a terminal)
    #[arg(long, alias = "no_progress")]
    pub(super) no_progress: bool,

    /// Print the final report as JSON on stdout instead of text
    #[arg(long)]
    pub(super) json: bool,
}

impl OutputArgs {
    /// The directory of a new run that writes `files` (names): `RUNS_DIR/NAME`,
    /// created. One holding an earlier run's files is never silently
    /// reused: `overwrite` deletes them first; without `--name` the run
    /// moves on to `NAME-2`, `NAME-3`, ... and says so on stderr; with
    /// `--name` it is refused, the message ending with `hint`.
    pub(super) fn new_run_dir(
        &self,
        default_name: &str,
        files: &[&str],
        overwrite: bool,
        hint: &str,
    ) -> Result<PathBuf, Failure> {
        let dir = self.run_dir_path(default_name)?;
        let found = existing(&dir, files);
        if found.is_empty() {
            return create_dir(dir);
        }
        if overwrite {
            for name in files {
                let path = dir.join(name);
                if let Err(e) = std::fs::remove_file(&path)
                    && e.kind() != io::ErrorKind::NotFound
                {
                    return Err(Failure::Job(format!(
                        "--overwrite: cannot delete {}: {e}",
                        path.display()
                    )));
                }
            }
            return Ok(dir);
        }
        if self.name.is_none() {
            let next = (2u32..)
                .map(|k| dir.with_file_name(format!("{default_name}-{k}")))
                .find(|d| existing(d, files).is_empty())
                .expect("a free name");
            eprintln!(
                "tessera: {} holds an earlier run; this one goes to {} (--name NAME to \
                 choose, --overwrite to replace {})",
                dir.display(),
                next.display(),
                dir.display()
            );
            return create_dir(next);
        }
        Err(Failure::Usage(format!(
            "--name {}: {} already holds a run ({}): give another --name, --overwrite to \
             replace it{hint}",
            self.name.as_deref().unwrap_or(default_name),
            dir.display(),
            found.join(", "),
        )))
    }

    /// The run directory's path, `RUNS_DIR/NAME`. A name that is empty or
    /// not one path component is refused.
    pub(super) fn run_dir_path(&self, default_name: &str) -> Result<PathBuf, Failure> {
        let name = self.name.as_deref().unwrap_or(default_name);
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\'])
            && Path::new(name).file_name().is_some();
        if !plain {
            return Err(Failure::Usage(format!(
                "--name `{name}` is not a plain directory name"
            )));
        }
        Ok(self
            .runs_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs"))
            .join(name))
    }

    /// Whether to draw a progress bar.
    pub(super) fn progress(&self) -> bool {
        !self.no_progress && !self.json && io::stderr().is_terminal()
    }
}

/// Those of `files` (names) that exist in `dir`.
fn existing(dir: &Path, files: &[&str]) -> Vec<String> {
    files
        .iter()
        .filter(|f| dir.join(f).exists())
        .map(|f| (*f).to_owned())
        .collect()
}

/// Creates the run directory `dir` (and its parents).
pub(super) fn create_dir(dir: PathBuf) -> Result<PathBuf, Failure> {
    std::fs::create_dir_all(&dir).map_err(|e| {
        Failure::Usage(format!(
            "cannot create the run directory {}: {e}",
            dir.display()
        ))
    })?;
    Ok(dir)
}

/// The hidden layers' activation, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ActivationArg {
    /// max(x, 0)
    Relu,
    /// GELU (tanh approximation)
    Gelu,
}

impl From<ActivationArg> for Activation {
    fn from(a: ActivationArg) -> Self {
        match a {
            ActivationArg::Relu => Self::Relu,
            ActivationArg::Gelu => Self::Gelu,
        }
    }
}

impl From<Activation> for ActivationArg {
    fn from(a: Activation) -> Self {
        match a {
            Activation::Relu => Self::Relu,
            Activation::Gelu => Self::Gelu,
        }
    }
}

/// The model, as named on the command line (and in a config file: the
/// same text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub(super) enum ModelArg {
    /// The multi-layer perceptron of --hidden
    Mlp,
    /// A small pre-activation residual network with batch norm
    ResnetMini,
    /// A network file (`NetworkFile`)
    File(PathBuf),
}

impl FromStr for ModelArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mlp" => Ok(Self::Mlp),
            "resnet-mini" => Ok(Self::ResnetMini),
            _ if s.ends_with(".toml") => Ok(Self::File(PathBuf::from(s))),
            _ => Err(format!(
                "unknown model `{s}`: expected mlp, resnet-mini or a network FILE.toml"
            )),
        }
    }
}

impl TryFrom<String> for ModelArg {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ModelArg> for String {
    fn from(m: ModelArg) -> Self {
        match m {
            ModelArg::Mlp => "mlp".into(),
            ModelArg::ResnetMini => "resnet-mini".into(),
            ModelArg::File(path) => path.display().to_string(),
        }
    }
}

/// Batch norm's replica group, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum BnGroupArg {
    /// Each replica's micro-batch
    Replica,
    /// Every replica's micro-batch of the same accumulation step
    All,
}

impl From<BnGroupArg> for BnGroup {
    fn from(a: BnGroupArg) -> Self {
        match a {
            BnGroupArg::Replica => Self::Replica,
            BnGroupArg::All => Self::All,
        }
    }
}

impl From<BnGroup> for BnGroupArg {
    fn from(a: BnGroup) -> Self {
        match a {
            BnGroup::Replica => Self::Replica,
            BnGroup::All => Self::All,
        }
    }
}

/// The images' shape a network reads from `source`: synthetic images'
/// own, 1x8x8 for the digits.
fn image_shape(source: &Source) -> Result<[usize; 3], Failure> {
    match source {
        Source::Images { shape, .. } => Ok([shape.0, shape.1, shape.2]),
        Source::Digits => Ok([1, 8, 8]),
        _ => Err(Failure::Usage(format!(
            "model: resnet-mini reads images (digits or images:SAMPLES:CxHxW:CLASSES), not {source}"
        ))),
    }
}

/// `--loss-scaling`'s grammar: `off`, `static:SCALE`, `dynamic`,
/// `automatic`.
struct LossScalingArg(LossScaling);

impl FromStr for LossScalingArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("unknown loss scaling `{s}`: expected off, static:SCALE, dynamic or automatic")
        };
        Ok(Self(match s {
            "off" => LossScaling::Off,
            "dynamic" => LossScaling::Dynamic(default_dynamic()),
            "automatic" => LossScaling::Automatic(AutomaticConfig::default()),
            _ => {
                let scale = s.strip_prefix("static:").ok_or_else(bad)?;
                let scale: f32 = scale.parse().map_err(|_| bad())?;
                if !(scale.is_finite() && scale > 0.0) {
                    return Err(format!(
                        "static loss scale {scale} is not a finite positive number"
                    ));
                }
                LossScaling::Static(scale)
            }
        }))
    }
}

/// The default job's dynamic loss scaling (GradScaler's with a shorter
/// growth interval).
fn default_dynamic() -> DynamicConfig {
    match TrainConfig::default().loss_scaling {
        LossScaling::Dynamic(c) => c,
        _ => DynamicConfig::default(),
    }
}

/// A value parser that checks the text parses as a `T` and keeps the text.
fn checked<T: FromStr>(s: &str) -> Result<String, String>
where
    T::Err: Display,
{
    s.parse::<T>()
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// A whole-number type a [`whole`] value parser can produce.
pub(super) trait Whole: TryFrom<u64> + Clone + Send + Sync + 'static {
    /// The largest value.
    const MAX: u64;
}

impl Whole for u32 {
    const MAX: u64 = u32::MAX as u64;
}

impl Whole for u64 {
    const MAX: u64 = u64::MAX;
}

impl Whole for usize {
    const MAX: u64 = usize::MAX as u64;
}

/// The value parser of a count, a width or a seed: a whole number of at
/// least `MIN` that fits `T`. Its message says what is allowed, as clap
/// shows it: `invalid value '-1' for '--epochs <N>': expected a whole
/// number >= 1`.
pub(super) fn whole<T: Whole, const MIN: u64>(s: &str) -> Result<T, String> {
    let range = if T::MAX == u64::MAX {
        format!("expected a whole number >= {MIN}")
    } else {
        format!("expected a whole number from {MIN} to {}", T::MAX)
    };
    let t = s.trim();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(range);
    }
    match digits.parse::<u64>() {
        Ok(n) if n >= MIN => {
            T::try_from(n).map_err(|_| format!("expected a whole number from {MIN} to {}", T::MAX))
        }
        Ok(_) => Err(range),
        Err(_) => Err(format!("expected a whole number from {MIN} to {}", T::MAX)),
    }
}

/// Parses option `name`'s text, naming the option on failure (flags are
/// checked by clap as they are parsed: this finds a config file's).
fn parse<T: FromStr>(name: &str, s: &str) -> Result<T, Failure>
where
    T::Err: Display,
{
    s.parse::<T>()
        .map_err(|e| Failure::Usage(format!("{name}: {e}")))
}

/// A job: the configuration and the data it trains on.
#[derive(Clone, Debug)]
pub(super) struct Job {
    pub(super) config: TrainConfig,
    pub(super) source: Source,
    /// Where the network came from, if the model is one.
    pub(super) network: Option<NetworkSource>,
}

/// Where a job's network came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum NetworkSource {
    /// resnet-mini of these stage widths and block counts, with a block
    /// of parallel branches of this many channels each if given.
    ResnetMini(Vec<usize>, Vec<usize>, Option<usize>),
    /// A network file, its path made absolute (as config.toml records it),
    /// and its head's classes if it gives them (checked against the data).
    File(PathBuf, Option<usize>),
}

impl JobArgs {
    /// These options (the flags) over those of the TOML file at `path`,
    /// if any.
    pub(super) fn over_file(self, path: Option<&Path>) -> Result<Self, Failure> {
        match path {
            Some(path) => {
                let file = read_config(path)?;
                // Name the file in errors of its values.
                if let Err(Failure::Usage(e)) = file.resolve_unchecked(&TrainConfig::default()) {
                    return Err(Failure::Usage(format!("{}: {e}", path.display())));
                }
                Ok(self.over(file))
            }
            None => Ok(self),
        }
    }

    /// These options, with `base`'s where these have none.
    pub(super) fn over(self, base: Self) -> Self {
        // Every field is optional: the merge is field by field, listed
        // without `..` so a new option cannot be forgotten.
        macro_rules! merge {
            ($($field:ident),* $(,)?) => {
                Self { $($field: self.$field.or(base.$field)),* }
            };
        }
        merge!(
            data,
            test_fraction,
            model,
            widths,
            blocks,
            branches,
            bn_group,
            hidden,
            activation,
            batch_norm,
            pod,
            instances,
            replication_factor,
            ipus_per_replica,
            pipeline_stages,
            schedule,
            device_mapping,
            serial_branches,
            recompute,
            recompute_checkpoints,
            micro_batch,
            gradient_accumulation,
            device_iterations,
            precision,
            loss_scaling,
            reduction,
            optimizer,
            lr,
            weight_decay,
            max_grad_norm,
            warmup_steps,
            lr_schedule,
            epochs,
            seed,
            replicated_tensor_sharding,
            offload_optimizer_state,
            output_mode,
            check_replicas_every,
        )
    }

    /// The effective options as TOML, for `config.toml`, checked to read
    /// back to the same options.
    ///
    /// # Errors
    /// A usage error if they do not: found before the run, not after it.
    pub(super) fn to_toml(&self) -> Result<String, Failure> {
        let refused = |e: &dyn Display| {
            Failure::Usage(format!(
                "the options cannot be written to config.toml and read back: {}",
                one_line(&e.to_string())
            ))
        };
        let text = toml::to_string(self).map_err(|e| refused(&e))?;
        toml::from_str::<Self>(&text).map_err(|e| refused(&e))?;
        Ok(text)
    }

    /// The job: defaults from `base` where an option is absent; every
    /// option parsed and its combinations checked that need no data.
    pub(super) fn resolve(&self, base: &TrainConfig) -> Result<Job, Failure> {
        let job = self.resolve_unchecked(base)?;
        job.config.validate().map_err(usage)?;
        Ok(job)
    }

    /// [`JobArgs::resolve`] without checking the combinations (the
    /// distribution, say, which `scale` replaces).
    pub(super) fn resolve_unchecked(&self, base: &TrainConfig) -> Result<Job, Failure> {
        let source = match &self.data {
            Some(s) => parse::<Source>("data", s)?,
            None => Source::Digits,
        };
        let (mut c, network) = self.model_over(base, &source)?;
        if let Some(s) = &self.pod {
            c.pod = parse("pod", s)?;
        }
        let instances = self.instances.unwrap_or(base.instances);
        let per_instance = self
            .replication_factor
            .unwrap_or(base.replicas_per_instance());
        c.instances = instances;
        c.replicas = instances.checked_mul(per_instance).ok_or_else(|| {
            Failure::Usage(format!(
                "{instances} instances x {per_instance} replicas is too many replicas"
            ))
        })?;
        self.model_parallelism_over(&mut c)?;
        set(&mut c.recompute, self.recompute);
        if let Some(b) = &self.recompute_checkpoints {
            c.recompute_checkpoints.clone_from(b);
        }
        set(&mut c.micro_batch, self.micro_batch);
        set(&mut c.gradient_accumulation, self.gradient_accumulation);
        set(&mut c.device_iterations, self.device_iterations);
        if let Some(h) = &self.hidden {
            c.hidden.clone_from(h);
        }
        if let Some(a) = self.activation {
            c.activation = a.into();
        }
        set(&mut c.batch_norm, self.batch_norm);
        if let Some(s) = &self.precision {
            c.precision = parse("precision", s)?;
        }
        if let Some(s) = &self.loss_scaling {
            c.loss_scaling = parse::<LossScalingArg>("loss_scaling", s)?.0;
        }
        if let Some(s) = &self.reduction {
            c.reduction = parse("reduction", s)?;
        }
        // Another optimizer brings its own defaults; a given --lr wins.
        if let Some(name) = self.optimizer.as_deref()
            && name != base.optimizer.name()
        {
            c.optimizer = OptimizerConfig::default_named(name)
                .map_err(|e| Failure::Usage(format!("optimizer: {e}")))?;
        }
        if let Some(lr) = self.lr {
            c.optimizer = c.optimizer.with_lr(lr);
        }
        if let Some(wd) = self.weight_decay {
            c.optimizer = c.optimizer.with_weight_decay(wd);
        }
        if self.max_grad_norm.is_some() {
            c.max_grad_norm = self.max_grad_norm;
        }
        set(&mut c.warmup_steps, self.warmup_steps);
        if let Some(s) = &self.lr_schedule {
            c.lr_schedule = parse("lr_schedule", s)?;
        }
        set(&mut c.epochs, self.epochs);
        set(&mut c.seed, self.seed);
        set(&mut c.test_fraction, self.test_fraction);
        set(
            &mut c.replicated_tensor_sharding,
            self.replicated_tensor_sharding,
        );
        set(&mut c.offload_optimizer_state, self.offload_optimizer_state);
        if let Some(s) = &self.output_mode {
            c.output_mode = parse("output_mode", s)?;
        }
        set(&mut c.check_replicas_every, self.check_replicas_every);
        Ok(Job {
            config: c,
            source,
            network,
        })
    }
}

impl JobArgs {
    /// The model-parallelism options over `c`: IPUs per replica, the
    /// pipeline (stages, schedule, device mapping, serialised branches).
    fn model_parallelism_over(&self, c: &mut TrainConfig) -> Result<(), Failure> {
        set(&mut c.ipus_per_replica, self.ipus_per_replica);
        set(&mut c.ipus_per_replica, self.pipeline_stages);
        if self.pipeline_stages.is_some()
            || self.schedule.is_some()
            || self.device_mapping.is_some()
        {
            let mut p = c.pipeline.clone().unwrap_or_default();
            if let Some(s) = &self.schedule {
                p.schedule = parse("schedule", s)?;
            }
            if let Some(m) = &self.device_mapping {
                p.device_mapping = Some(m.clone());
            }
            c.pipeline = Some(p);
        }
        match (&mut c.pipeline, self.serial_branches) {
            (Some(p), Some(serial)) => p.serial_branches = serial,
            (None, Some(true)) => {
                return Err(Failure::Usage(
                    "--serial-branches applies to a pipelined network's branches mapped to a \
                     list of IPUs (--pipeline-stages, --device-mapping 0,[1,2],3)"
                        .into(),
                ));
            }
            _ => {}
        }
        Ok(())
    }

    /// `base`, or resnet-mini's defaults when a network is asked for over
    /// an MLP `base`, with the network's options applied; where the
    /// network came from.
    fn model_over(
        &self,
        base: &TrainConfig,
        source: &Source,
    ) -> Result<(TrainConfig, Option<NetworkSource>), Failure> {
        let resnet = match &self.model {
            Some(ModelArg::ResnetMini) => true,
            Some(ModelArg::Mlp) => false,
            Some(ModelArg::File(path)) => return self.network_file(path, base, source),
            None => base.network.is_some(),
        };
        let net_options = [
            ("--widths", self.widths.is_some()),
            ("--blocks", self.blocks.is_some()),
            ("--branches", self.branches.is_some()),
            ("--bn-group", self.bn_group.is_some()),
        ];
        if !resnet {
            if let Some((flag, _)) = net_options.iter().find(|(_, given)| *given) {
                return Err(Failure::Usage(format!(
                    "{flag} is an option of --model resnet-mini, not of the MLP"
                )));
            }
            let mut c = base.clone();
            c.network = None;
            return Ok((c, None));
        }
        if let Some(flag) = self.mlp_option() {
            return Err(Failure::Usage(format!(
                "{flag} is an option of the MLP (--model mlp), not of --model resnet-mini: \
                 its layers are set by --widths and --blocks"
            )));
        }
        let input = image_shape(source)?;
        let mut c = network_base(base, input);
        let widths = self
            .widths
            .clone()
            .unwrap_or_else(|| RESNET_MINI_WIDTHS.to_vec());
        let blocks = self
            .blocks
            .clone()
            .unwrap_or_else(|| RESNET_MINI_BLOCKS.to_vec());
        let old = c
            .network
            .take()
            .unwrap_or_else(|| NetworkConfig::resnet_mini(input, 0, &[], &[]));
        let mut net = resnet_mini(input, old.classes, &widths, &blocks, self.branches)?;
        net.bn_group = self.bn_group.map_or(old.bn_group, BnGroup::from);
        c.network = Some(net);
        Ok((
            c,
            Some(NetworkSource::ResnetMini(widths, blocks, self.branches)),
        ))
    }

    /// The first of the MLP's options given, if any.
    fn mlp_option(&self) -> Option<&'static str> {
        [
            ("--hidden", self.hidden.is_some()),
            ("--activation", self.activation.is_some()),
            ("--batch-norm", self.batch_norm.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag))
    }

    /// [`JobArgs::model_over`] for the network file at `path`: its network
    /// with resnet-mini's hyperparameters, `--bn-group` applied.
    fn network_file(
        &self,
        path: &Path,
        base: &TrainConfig,
        source: &Source,
    ) -> Result<(TrainConfig, Option<NetworkSource>), Failure> {
        let shown = path.display();
        let resnet_option = [
            ("--widths", self.widths.is_some()),
            ("--blocks", self.blocks.is_some()),
            ("--branches", self.branches.is_some()),
        ]
        .into_iter()
        .find_map(|(flag, given)| given.then_some(flag));
        if let Some(flag) = resnet_option.or_else(|| self.mlp_option()) {
            return Err(Failure::Usage(format!(
                "{flag} is not an option of a network file (--model {shown}): its layers are the file's"
            )));
        }
        let file = NetworkFile::read(path).map_err(|e| {
            Failure::Usage(match e {
                NetworkFileError::CostTable { .. } => format!(
                    "--model {shown}: describes costs (a planner's table with `input_bytes`), \
                     not a network: train needs `input` and layers of a `kind` (docs/training.md)"
                ),
                e => one_line(&e.to_string()),
            })
        })?;
        let input = file.network.input;
        if let Ok(shape) = image_shape(source)
            && shape != input
        {
            return Err(Failure::Usage(format!(
                "--model {shown}: its input is {input:?} (channels, height, width) but the data's \
                 images are {shape:?}"
            )));
        }
        let mut c = network_base(base, input);
        let old = c.network.take().map(|n| n.classes).unwrap_or_default();
        let bn_group = self.bn_group.map_or(file.network.bn_group, BnGroup::from);
        c.network = Some(NetworkConfig {
            classes: old,
            bn_group,
            ..file.network
        });
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let classes = file.classes_given.then_some(file.network.classes);
        Ok((c, Some(NetworkSource::File(absolute, classes))))
    }
}

/// resnet-mini on `input` images of `classes` classes: stages of `widths`
/// channels and `blocks` residual blocks, and a block of parallel branches
/// of `branches` channels each if given (`--widths`, `--blocks`,
/// `--branches` of `train`, `scale` and `plan`).
pub(super) fn resnet_mini(
    input: [usize; 3],
    classes: usize,
    widths: &[usize],
    blocks: &[usize],
    branches: Option<usize>,
) -> Result<NetworkConfig, Failure> {
    if widths.len() != blocks.len() {
        return Err(Failure::Usage(format!(
            "--widths {widths:?} and --blocks {blocks:?}: give as many block counts as widths"
        )));
    }
    let net = NetworkConfig::resnet_mini(input, classes, widths, blocks);
    Ok(match branches {
        Some(channels) => net.with_branches(channels),
        None => net,
    })
}

/// `base` if it has a network, else resnet-mini's job for `input` images
/// (its hyperparameters).
fn network_base(base: &TrainConfig, input: [usize; 3]) -> TrainConfig {
    if base.network.is_some() {
        base.clone()
    } else {
        TrainConfig::resnet_mini(input)
    }
}

/// `*field = value` if there is one.
fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

impl Job {
    /// Every option of this job, written out: what `--config` reads back
    /// to the same job.
    pub(super) fn effective(&self) -> JobArgs {
        let c = &self.config;
        JobArgs {
            data: Some(self.source.to_string()),
            test_fraction: Some(c.test_fraction),
            model: Some(match &self.network {
                None => ModelArg::Mlp,
                Some(NetworkSource::ResnetMini(..)) => ModelArg::ResnetMini,
                Some(NetworkSource::File(path, _)) => ModelArg::File(path.clone()),
            }),
            widths: self.resnet().map(|r| r.0.clone()),
            blocks: self.resnet().map(|r| r.1.clone()),
            branches: self.resnet().and_then(|r| r.2),
            bn_group: c.network.as_ref().map(|n| n.bn_group.into()),
            // The MLP's options only for the MLP: a network refuses them.
            hidden: self.network.is_none().then(|| c.hidden.clone()),
            activation: self.network.is_none().then(|| c.activation.into()),
            batch_norm: self.network.is_none().then_some(c.batch_norm),
            pod: Some(c.pod.name().to_ascii_lowercase()),
            instances: Some(c.instances),
            replication_factor: Some(c.replicas_per_instance()),
            ipus_per_replica: Some(c.ipus_per_replica),
            pipeline_stages: c.pipeline.as_ref().map(|_| c.ipus_per_replica),
            schedule: c.pipeline.as_ref().map(|p| p.schedule.to_string()),
            device_mapping: c.pipeline.as_ref().and_then(|p| p.device_mapping.clone()),
            serial_branches: Some(c.pipeline.as_ref().is_some_and(|p| p.serial_branches)),
            recompute: Some(c.recompute),
            recompute_checkpoints: (!c.recompute_checkpoints.is_empty())
                .then(|| c.recompute_checkpoints.clone()),
            micro_batch: Some(c.micro_batch),
            gradient_accumulation: Some(c.gradient_accumulation),
            device_iterations: Some(c.device_iterations),
            precision: Some(c.precision.to_string()),
            loss_scaling: Some(c.loss_scaling.describe()),
            reduction: Some(c.reduction.to_string()),
            optimizer: Some(c.optimizer.name().to_owned()),
            lr: Some(c.optimizer.lr()),
            weight_decay: Some(c.optimizer.weight_decay()),
            max_grad_norm: c.max_grad_norm,
            warmup_steps: Some(c.warmup_steps),
            lr_schedule: Some(c.lr_schedule.to_string()),
            epochs: Some(c.epochs),
            seed: Some(c.seed),
            replicated_tensor_sharding: Some(c.replicated_tensor_sharding),
            offload_optimizer_state: Some(c.offload_optimizer_state),
            output_mode: Some(c.output_mode.to_string()),
            check_replicas_every: Some(c.check_replicas_every),
        }
    }

    /// resnet-mini's widths, blocks and branch channels, if it is the model.
    fn resnet(&self) -> Option<(&Vec<usize>, &Vec<usize>, Option<usize>)> {
        match &self.network {
            Some(NetworkSource::ResnetMini(w, b, c)) => Some((w, b, *c)),
            _ => None,
        }
    }

    /// Loads the data set, refusing one whose classes are not those a
    /// network file's head names.
    pub(super) fn load(&self) -> Result<Dataset, Failure> {
        let data = self
            .source
            .load()
            .map_err(|e| Failure::Usage(format!("data: {e}")))?;
        if let Some(NetworkSource::File(path, Some(classes))) = &self.network
            && *classes != data.classes()
        {
            return Err(Failure::Usage(format!(
                "--model {}: its head has {classes} classes (`classes`) but the data has {}; \
                 leave `classes` out to take the data's",
                path.display(),
                data.classes()
            )));
        }
        Ok(data)
    }

    /// The job's distribution and batch on one line.
    pub(super) fn distribution(&self) -> String {
        let c = &self.config;
        format!(
            "{}: {} x {} replica{} x {} IPU{}; micro-batch {} x accumulation {} = global batch {}",
            c.pod.name(),
            plural(c.instances as u64, "instance"),
            c.replicas_per_instance(),
            if c.replicas_per_instance() == 1 {
                ""
            } else {
                "s"
            },
            c.ipus_per_replica,
            if c.ipus_per_replica == 1 { "" } else { "s" },
            c.micro_batch,
            c.gradient_accumulation,
            c.batch_plan().global_batch(),
        )
    }

    /// The job's model, numerics and length on one line.
    pub(super) fn numerics(&self) -> String {
        let c = &self.config;
        let model = match &self.network {
            Some(NetworkSource::ResnetMini(w, b, branches)) => format!(
                "resnet-mini widths {w:?} blocks {b:?}{}",
                branches.map_or(String::new(), |c| format!(
                    " + branches 3x3|1x1 of {c} channels"
                ))
            ),
            Some(NetworkSource::File(path, _)) => format!("network {}", path.display()),
            None => format!(
                "hidden {:?} {:?}{}",
                c.hidden,
                c.activation,
                if c.batch_norm { " + batch norm" } else { "" }
            ),
        };
        format!(
            "{model}; {}, {} lr {}, {} loss scaling; {}, seed {}",
            c.precision,
            c.optimizer.name(),
            c.optimizer.lr(),
            c.loss_scaling.name(),
            plural(c.epochs, "epoch"),
            c.seed,
        )
    }
}

/// `n thing` or `n things`.
pub(super) fn plural(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// Reads job options from a TOML file; an unknown key is an error naming
/// it.
fn read_config(path: &Path) -> Result<JobArgs, Failure> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Failure::Usage(format!("--config {}: cannot read: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        let message = one_line(e.message());
        Failure::Usage(match line {
            Some(line) => format!("{}: line {line}: {message}", path.display()),
            None => format!("{}: {message}", path.display()),
        })
    })
}

/// `text` on one line: its lines trimmed and joined.
pub(super) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// A [`TrainError`] as a [`Failure`]: the job's own failures (a
/// collective, drifting replicas, a panic) exit with status 1, a diverged
/// run with 3, everything the user can fix (the configuration, the data,
/// a checkpoint) with 2.
pub(super) fn usage(e: TrainError) -> Failure {
    let message = one_line(&e.to_string());
    match e {
        TrainError::Collective(_) | TrainError::ReplicaDrift { .. } | TrainError::Panicked(_) => {
            Failure::Job(message)
        }
        TrainError::Diverged { .. } => Failure::Diverged(message),
        _ => Failure::Usage(message),
    }
}

/// Runs `trainer`; `None` when this process is not the one that reports.
pub(super) fn run_job(
    trainer: &Trainer,
    options: &RunOptions,
    observer: Observer<'_>,
) -> Result<Option<Summary>, TrainError> {
    #[cfg(feature = "mpi")]
    if crate::bench::allreduce::launched_by_mpirun() {
        return run_under_mpirun(trainer, options, observer);
    }
    trainer.run(options, observer).map(Some)
}

/// Under `mpirun`, this process is one instance (its MPI rank) of as many
/// as there are processes: its replicas run on its threads, and the
/// instances' collectives go over MPI. Only rank 0 gets the summary (the
/// others then neither print nor write).
#[cfg(feature = "mpi")]
fn run_under_mpirun(
    trainer: &Trainer,
    options: &RunOptions,
    observer: Observer<'_>,
) -> Result<Option<Summary>, TrainError> {
    use tessera_collectives::Communicator as _;
    use tessera_collectives::mpi::{self as tmpi, MpiCommunicator};

    let universe = tmpi::initialize()
        .ok_or_else(|| TrainError::Invalid("MPI was already initialised".to_owned()))?;
    let comm = MpiCommunicator::world(&universe);
    let (rank, size) = (comm.rank(), comm.size());
    let instances = trainer.config().instances;
    if size != instances {
        return Err(TrainError::Invalid(format!(
            "mpirun started {size} processes but the run has {instances} instances: \
             give --instances {size}, or mpirun -n {instances}"
        )));
    }
    let comm = (size > 1).then_some(comm);
    trainer.run_instance(rank, comm, options, observer)
}

/// A progress bar on stderr over a run's steps, fed by the trainer's
/// events (on a replica thread).
pub(super) struct Progress {
    bar: ProgressBar,
    epochs: u64,
    global_batch: usize,
    seen: AtomicU64,
}

impl Progress {
    /// A bar over `trainer`'s steps, drawn if `show`; `label` leads it.
    pub(super) fn new(show: bool, trainer: &Trainer, label: &str) -> Self {
        let c = trainer.config();
        let total = trainer.steps_per_epoch() * c.epochs;
        let bar = if show {
            ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr())
        } else {
            ProgressBar::hidden()
        };
        bar.set_style(
            ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} steps  {msg}")
                .expect("the template parses")
                .progress_chars("=> "),
        );
        bar.set_prefix(label.to_owned());
        Self {
            bar,
            epochs: c.epochs,
            global_batch: c.batch_plan().global_batch(),
            seen: AtomicU64::new(0),
        }
    }

    /// Reports one event.
    pub(super) fn observe(&self, event: Event<'_>) {
        match event {
            Event::Step(r) => {
                let seen = self.seen.fetch_add(1, Ordering::Relaxed) + 1;
                let rate = (seen as f64 * self.global_batch as f64) / r.wall_seconds.max(1e-9);
                self.bar.set_message(format!(
                    "epoch {}/{}  loss {:.4}  {} samples/s (wall)",
                    r.epoch + 1,
                    self.epochs,
                    r.loss,
                    rate.round()
                ));
                self.bar.set_position(r.step + 1);
            }
            Event::Epoch(r) => self.bar.println(format!(
                "epoch {}/{}: test loss {:.4}, accuracy {:.2}%",
                r.epoch + 1,
                self.epochs,
                r.test_loss,
                100.0 * r.test_accuracy
            )),
        }
    }

    /// Removes the bar.
    pub(super) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// Writes `text` to stdout; a closed stdout is [`Failure::Closed`].
pub(super) fn print(text: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| {
            if e.kind() == io::ErrorKind::BrokenPipe {
                Failure::Closed
            } else {
                Failure::Job(format!("cannot write to stdout: {e}"))
            }
        })
}

/// Writes `bytes` to `path` atomically.
pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    write_atomic(path, bytes).map_err(|e| Failure::Job(write_failed(path, &e)))
}

/// `cannot write PATH: WHY` for a failed [`write_atomic`] of `path`: the
/// file the user named and what the system said (the error's own text
/// names the temporary file and the checkpoint module it comes from).
pub(crate) fn write_failed(path: &Path, e: &(dyn std::error::Error + 'static)) -> String {
    let why = e
        .source()
        .map_or_else(|| e.to_string(), ToString::to_string);
    one_line(&format!("cannot write {}: {why}", path.display()))
}

/// Checks, before any work, that `flag`'s output file `path` can be
/// created: its directory exists, and the path is not a directory.
///
/// # Errors
/// A usage error naming the flag, the path and what is wrong.
pub(super) fn output_file(flag: &str, path: &Path) -> Result<(), Failure> {
    let bad = |why: String| Err(Failure::Usage(format!("{flag} {}: {why}", path.display())));
    if path.is_dir() || path.file_name().is_none() {
        return bad("is a directory; give a file name".into());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => bad(format!("{} is not a directory", dir.display())),
        Err(e) => bad(format!(
            "its directory {} cannot be used: {e}",
            dir.display()
        )),
    }
}

/// A JSON line of `record` with `"kind": kind` first.
pub(super) fn tagged<T: Serialize>(kind: &str, record: &T) -> String {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        kind: &'a str,
        #[serde(flatten)]
        record: &'a T,
    }
    serde_json::to_string(&Tagged { kind, record }).expect("records serialize")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(args: &JobArgs) -> Job {
        args.resolve(&TrainConfig::default()).unwrap()
    }

    #[test]
    fn no_options_is_the_default_job() {
        let j = job(&JobArgs::default());
        assert_eq!(j.config, TrainConfig::default());
        assert_eq!(j.source, Source::Digits);
    }

    #[test]
    fn the_effective_options_resolve_to_the_same_job_through_toml() {
        let args = JobArgs {
            data: Some("synthetic:300:8:3:1".into()),
            hidden: Some(vec![16]),
            activation: Some(ActivationArg::Gelu),
            precision: Some("16.32".into()),
            loss_scaling: Some("static:1024.5".into()),
            optimizer: Some("adamw".into()),
            lr: Some(0.003),
            weight_decay: Some(0.05),
            max_grad_norm: Some(1.5),
            reduction: Some("running-mean".into()),
            lr_schedule: Some("constant".into()),
            output_mode: Some("every:3".into()),
            pod: Some("m2000".into()),
            instances: Some(2),
            replication_factor: Some(2),
            test_fraction: Some(0.3),
            ..JobArgs::default()
        };
        for args in [JobArgs::default(), args] {
            let first = job(&args);
            let text = toml::to_string(&first.effective()).unwrap();
            let back: JobArgs = toml::from_str(&text).unwrap();
            let second = job(&back);
            assert_eq!(first.config, second.config, "{text}");
            assert_eq!(first.source, second.source, "{text}");
        }
    }

    #[test]
    fn the_defaults_in_the_help_are_the_default_job() {
        use clap::{CommandFactory, Parser};

        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            job: JobArgs,
        }
        let table = toml::Table::try_from(job(&JobArgs::default()).effective()).unwrap();
        let mut checked = 0;
        for arg in Wrapper::command().get_arguments() {
            let id = arg.get_id().as_str();
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let Some(default) = help
                .split_once("[default: ")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map(|(d, _)| d.split(';').next().unwrap_or(d))
            else {
                continue;
            };
            if default.contains(' ') {
                continue; // a description, not a value
            }
            if default == "none" {
                assert!(!table.contains_key(id), "--{id}: none by default");
                checked += 1;
                continue;
            }
            let value = match &table[id] {
                toml::Value::String(s) => s.clone(),
                toml::Value::Array(a) => a
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                // f32 options are f64 in a table: compare as f32.
                &toml::Value::Float(x) => {
                    let given: f64 = default.parse().unwrap();
                    assert_eq!(given as f32, x as f32, "--{id}");
                    default.to_owned()
                }
                other => other.to_string(),
            };
            assert_eq!(default, value, "--{id}");
            checked += 1;
        }
        assert!(checked >= 25, "{checked} defaults checked");
    }

    #[test]
    fn each_optimizer_has_the_defaults_its_help_states_and_lr_wins() {
        use clap::CommandFactory;

        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            job: JobArgs,
        }
        let command = Wrapper::command();
        let help = |id: &str| {
            let arg = command.get_arguments().find(|a| a.get_id() == id);
            one_line(&arg.and_then(|a| a.get_help()).unwrap().to_string())
        };
        let (lr_help, wd_help) = (help("lr"), help("weight_decay"));
        for name in ["sgd", "adamw", "lamb", "lars"] {
            let args = JobArgs {
                optimizer: Some(name.into()),
                ..JobArgs::default()
            };
            let o = job(&args).config.optimizer;
            assert_eq!(o, OptimizerConfig::default_named(name).unwrap());
            assert!(lr_help.contains(&format!("{name} {}", o.lr())), "{lr_help}");
            let wd = o.weight_decay();
            assert!(wd_help.contains(&format!("{name} {wd}")), "{wd_help}");
            let given = JobArgs {
                lr: Some(0.25),
                ..args
            };
            assert_eq!(job(&given).config.optimizer, o.with_lr(0.25));
        }
    }

    #[test]
    fn flags_override_the_file_and_keep_what_they_do_not_set() {
        let file = JobArgs {
            epochs: Some(3),
            seed: Some(7),
            ..JobArgs::default()
        };
        let flags = JobArgs {
            epochs: Some(5),
            micro_batch: Some(4),
            ..JobArgs::default()
        };
        let merged = flags.over(file);
        assert_eq!(
            (merged.epochs, merged.seed, merged.micro_batch),
            (Some(5), Some(7), Some(4))
        );
    }

    #[test]
    fn bad_values_name_the_option() {
        for (args, needle) in [
            (
                JobArgs {
                    precision: Some("8.8".into()),
                    ..JobArgs::default()
                },
                "precision: unknown precision",
            ),
            (
                JobArgs {
                    loss_scaling: Some("static:-1".into()),
                    ..JobArgs::default()
                },
                "loss_scaling: static loss scale -1",
            ),
            (
                JobArgs {
                    replication_factor: Some(8),
                    ..JobArgs::default()
                },
                "the Pod has 16",
            ),
        ] {
            match args.resolve(&TrainConfig::default()) {
                Err(Failure::Usage(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
