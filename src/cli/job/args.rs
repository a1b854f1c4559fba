//! The options of a training job, as flags and as `--config` keys.

use std::str::FromStr;

use clap::Args;
use serde::{Deserialize, Serialize};
use tessera_sim::data::{OutputMode, Source};
use tessera_sim::model::DeviceMapping;
use tessera_sim::model::quant::{Accumulator, RoleQuant};
use tessera_sim::pod::PodSpec;
use tessera_sim::train::{GradReduction, LrDecay, PrecisionMode, Schedule};

use super::values::{ActivationArg, BnGroupArg, LossScalingArg, ModelArg, checked};
use crate::cli::parse::{Widths, whole, widths};

/// The options of a training job. Each is a flag (`--device-iterations`,
/// or `--device_iterations`) and a key of a `--config` TOML file
/// (`device_iterations = 4`); a flag overrides the file, the file the
/// default job ([`TrainConfig::default`]). Enumerations are kept as the
/// text given and parsed by [`JobArgs::resolve`], so the file and the
/// flags share one grammar (flags are checked as they are parsed too).
#[derive(Clone, Debug, Default, PartialEq, Args, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(in crate::cli) struct JobArgs {
    /// The data set: digits, synthetic:SAMPLES:FEATURES:CLASSES[:SEED],
    /// images:SAMPLES:CxHxW:CLASSES[:SEED], csv:PATH (label in the last
    /// column), idx:IMAGES:LABELS or
    /// npy:INPUTS:LABELS [default: digits]. At least 2 classes; labels
    /// below 1024; at most 256 MiB per file (before and after gunzip)
    /// and per generated data set
    #[arg(long, value_name = "SOURCE", value_parser = checked::<Source>, help_heading = "Data")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) data: Option<String>,

    /// Fraction of the data held out for testing [default: 0.2]
    #[arg(
        long,
        alias = "test_fraction",
        value_name = "F",
        allow_negative_numbers = true,
        help_heading = "Data"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) test_fraction: Option<f64>,

    /// The model: mlp (the --hidden layers), resnet-mini (a residual
    /// network over the images; its own defaults for the optimizer,
    /// learning rate, warm-up and epochs) or a network FILE.toml (as
    /// resnet-mini, its layers from the file). A network has at most 4096
    /// layers (a residual block's start and end count), nested at most 32
    /// deep, and is refused at once when its parameters and activations
    /// cannot fit its replica's tiles [default: mlp]
    #[arg(long, value_name = "MODEL", help_heading = "Model")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) model: Option<ModelArg>,

    /// resnet-mini: channels per stage, at most 4096 [default: 16,32 with
    /// resnet-mini]
    #[arg(
        long,
        value_name = "W,W",
        value_delimiter = ',',
        value_parser = whole::<usize, 1>,
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) widths: Option<Vec<usize>>,

    /// resnet-mini: residual blocks of each stage, comma separated (as
    /// many as --widths); 6 layers each, the network at most 4096 layers
    /// [default: 1,1 with resnet-mini]
    #[arg(
        long,
        value_name = "B,B",
        value_delimiter = ',',
        value_parser = whole::<usize, 0>,
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) blocks: Option<Vec<usize>>,

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
    pub(in crate::cli) branches: Option<usize>,

    /// resnet-mini: batch-norm statistics per replica or over all
    /// replicas [default: replica with resnet-mini]
    #[arg(long, value_enum, alias = "bn_group", help_heading = "Model")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) bn_group: Option<BnGroupArg>,

    /// Hidden layer widths, comma separated ('' for none: a linear model);
    /// at most 4095 layers (with the head, 4096) [default: 128,64]
    #[arg(
        long,
        value_name = "W,W",
        value_parser = widths,
        overrides_with = "hidden",
        help_heading = "Model"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) hidden: Option<Widths>,

    /// The hidden layers' activation [default: relu]
    #[arg(long, value_enum, help_heading = "Model")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) activation: Option<ActivationArg>,

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
    pub(in crate::cli) batch_norm: Option<bool>,

    /// The Pod: m2000, pod16, pod64, pod128, pod256 or podN (N a multiple
    /// of 64, at most 65536) [default: pod16]
    #[arg(long, value_parser = checked::<PodSpec>, help_heading = "Pod")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) pod: Option<String>,

    /// The Pod's IPU: mk2 (GC200, 1.33 GHz), bow (1.85 GHz) or c600 (a
    /// Mk2 IPU with FP8 units, 1.486 GHz) [default: mk2]
    #[arg(long, value_parser = ["mk2", "bow", "c600"], help_heading = "Pod")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) ipu: Option<String>,

    /// Host processes (PopRun's --num-instances) [default: 4]
    #[arg(long, value_name = "N", value_parser = whole::<usize, 1>, help_heading = "Pod")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) instances: Option<usize>,

    /// Replicas per instance (PopTorch's replicationFactor) [default: 4]
    #[arg(
        long,
        alias = "replication_factor",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Pod"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) replication_factor: Option<usize>,

    /// IPUs per replica, a power of two [default: 1]
    #[arg(
        long,
        alias = "ipus_per_replica",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Pod"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) ipus_per_replica: Option<usize>,

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
    pub(in crate::cli) pipeline_stages: Option<usize>,

    /// The stages' schedule: grouped, interleaved or sequential (sharded)
    /// [default: interleaved when pipelined]
    #[arg(
        long,
        value_name = "SCHEDULE",
        value_parser = checked::<Schedule>,
        help_heading = "Model parallelism"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) schedule: Option<String>,

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
    pub(in crate::cli) device_mapping: Option<DeviceMapping>,

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
    pub(in crate::cli) serial_branches: Option<bool>,

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
    pub(in crate::cli) recompute: Option<bool>,

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
    pub(in crate::cli) recompute_checkpoints: Option<Vec<usize>>,

    /// Samples per micro-batch [default: 8]
    #[arg(
        long,
        alias = "micro_batch",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Batch"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) micro_batch: Option<usize>,

    /// Micro-batches per replica per step (gradientAccumulation) [default: 1]
    #[arg(
        long,
        alias = "gradient_accumulation",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Batch"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) gradient_accumulation: Option<usize>,

    /// Steps per host call (deviceIterations) [default: 4]
    #[arg(
        long,
        alias = "device_iterations",
        value_name = "N",
        value_parser = whole::<usize, 1>,
        help_heading = "Batch"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) device_iterations: Option<usize>,

    /// Compute.weights precision: 32.32, 16.32, 16.16 (stochastic
    /// rounding), 16.16-rn, or quantised products 8.16, 8.32, mxfp8.16,
    /// mxfp6.16, mxfp4.16 [default: 16.16]
    #[arg(long, value_parser = checked::<PrecisionMode>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) precision: Option<String>,

    /// With a quantised --precision: the weights' FORMAT[:ROUNDING[:SCALING]]
    /// (formats e4m3, e4m3fn, f143, e5m2, f152, e2m3, e3m2, e2m1, ...;
    /// rounding nearest, stochastic or toward-zero; scaling tensor,
    /// delayed[N] (an amax history of N steps, default 16), mx or nvfp4)
    /// [default: the precision's recipe]
    #[arg(long, alias = "quant_weights", value_name = "Q", value_parser = checked::<RoleQuant>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) quant_weights: Option<String>,

    /// As --quant-weights, for the layers' inputs (activations)
    #[arg(long, alias = "quant_activations", value_name = "Q", value_parser = checked::<RoleQuant>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) quant_activations: Option<String>,

    /// As --quant-weights, for the gradients of the layers' outputs
    #[arg(long, alias = "quant_gradients", value_name = "Q", value_parser = checked::<RoleQuant>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) quant_gradients: Option<String>,

    /// With a quantised --precision: where the products accumulate: f32,
    /// f16 (rounded after every addition) or f16:K (promoted to f32 every
    /// K additions) [default: f32]
    #[arg(long, alias = "quant_accumulate", value_name = "ACC", value_parser = checked::<Accumulator>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) quant_accumulate: Option<String>,

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
    pub(in crate::cli) loss_scaling: Option<String>,

    /// How gradients are combined over micro-batches and replicas: sum,
    /// mean or running-mean [default: mean]
    #[arg(long, value_parser = checked::<GradReduction>, help_heading = "Numerics")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) reduction: Option<String>,

    /// sgd (momentum 0.9), adamw, lamb or lars (momentum 0.9), each with
    /// its own defaults for --lr and --weight-decay [default: lamb]
    #[arg(long, value_parser = ["sgd", "adamw", "lamb", "lars"], help_heading = "Optimizer")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) optimizer: Option<String>,

    /// Learning rate after the warm-up [default: the optimizer's: sgd 0.1,
    /// adamw 0.005, lamb 0.005, lars 1]
    #[arg(
        long,
        value_name = "LR",
        allow_negative_numbers = true,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "shortest")]
    pub(in crate::cli) lr: Option<f32>,

    /// Weight decay [default: the optimizer's: sgd 0, adamw 0.01, lamb
    /// 0.01, lars 0.0001]
    #[arg(
        long,
        alias = "weight_decay",
        value_name = "WD",
        allow_negative_numbers = true,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "shortest")]
    pub(in crate::cli) weight_decay: Option<f32>,

    /// Clip the global gradient norm to this [default: no clipping]
    #[arg(
        long,
        alias = "max_grad_norm",
        value_name = "NORM",
        allow_negative_numbers = true,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "shortest")]
    pub(in crate::cli) max_grad_norm: Option<f32>,

    /// Steps of linear learning-rate warm-up [default: 20]
    #[arg(
        long,
        alias = "warmup_steps",
        value_name = "STEPS",
        value_parser = whole::<u64, 0>,
        help_heading = "Optimizer"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) warmup_steps: Option<u64>,

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
    pub(in crate::cli) lr_schedule: Option<String>,

    /// Passes over the training set [default: 40; scale: 5]
    #[arg(long, value_name = "N", value_parser = whole::<u64, 1>, help_heading = "Run")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) epochs: Option<u64>,

    /// Seed of the weights, the shuffles and stochastic rounding [default: 42]
    #[arg(long, value_name = "N", value_parser = whole::<u64, 0>, help_heading = "Run")]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) seed: Option<u64>,

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
    pub(in crate::cli) replicated_tensor_sharding: Option<bool>,

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
    pub(in crate::cli) offload_optimizer_state: Option<bool>,

    /// Weights bitwise the same for every cut of the global batch into
    /// instances, replicas and micro-batches: exact gradient sums, rounded
    /// once [default: false]
    #[arg(
        long,
        alias = "batch_invariant",
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        help_heading = "Run"
    )]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(in crate::cli) batch_invariant: Option<bool>,

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
    pub(in crate::cli) output_mode: Option<String>,

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
    pub(in crate::cli) check_replicas_every: Option<u64>,
}

/// An `f32` option as the f64 of its shortest decimal (`0.005`, not the
/// widened `0.004999999888241291` a JSON number would show); read back
/// into an `f32` it is the same value.
fn shortest<S: serde::Serializer>(x: &Option<f32>, s: S) -> Result<S::Ok, S::Error> {
    let shown = x.map(|x| {
        x.to_string()
            .parse::<f64>()
            .expect("an f32's Display parses")
    });
    shown.serialize(s)
}
