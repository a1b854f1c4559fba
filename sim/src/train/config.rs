//! What a training run is: the model, the Pod and its distribution, the
//! batch arithmetic, the precision, the loss scaling and the optimizer,
//! with PopTorch's names. [`TrainConfig::validate`] checks it once.

use tessera_core::optim::{
    AdamWConfig, Decay, LambConfig, LarsConfig, LrSchedule, Optimizer, SgdConfig,
};
use tessera_core::scale::{
    AutomaticConfig, AutomaticLossScaler, DynamicConfig, DynamicLossScaler, StaticLossScaler,
};

use super::TrainError;
use super::pipeline::Pipeline;
use super::precision::PrecisionMode;
use crate::data::{BatchPlan, OutputMode};
use crate::model::{Activation, MlpConfig, ModelConfig, NetworkConfig};
use crate::names::unit_names;
use crate::pod::{Distribution, Layout, PodSpec};

/// The optimizer and its hyperparameters (for parameters that are not
/// excluded; see [`TrainConfig::exclude_bias_and_norm`]): the core's
/// [`OptimizerConfig`], with the defaults this simulator trains with in
/// [`NamedOptimizer`].
pub use tessera_core::optim::OptimizerConfig;

/// The simulator's named optimizers, tuned for its default job.
pub trait NamedOptimizer: Sized {
    /// The optimizer named `name` (`sgd`, `adamw`, `lamb`, `lars`) with
    /// the hyperparameters that train the default job (the digits MLP, 40
    /// epochs, 20 warm-up steps, cosine decay; test accuracy measured with
    /// `tessera train --optimizer NAME`):
    ///
    /// | optimizer | lr | momentum | weight decay | accuracy |
    /// |---|---|---|---|---|
    /// | `sgd` | 0.1 | 0.9 | 0 | 98.05% |
    /// | `adamw` | 0.005 | (0.9, 0.999) | 0.01 | 98.05% |
    /// | `lamb` | 0.005 | (0.9, 0.999) | 0.01 | 98.05% |
    /// | `lars` | 1 | 0.9 | 0.0001 | 97.77% |
    ///
    /// LARS adapts its step by the trust ratio only under weight decay
    /// (timm's rule), so without decay it would be SGD with momentum.
    ///
    /// # Errors
    /// A message naming the unknown optimizer.
    ///
    /// ```
    /// use tessera_sim::train::{NamedOptimizer, OptimizerConfig};
    ///
    /// let sgd = OptimizerConfig::default_named("sgd").unwrap();
    /// assert!(matches!(sgd, OptimizerConfig::Sgd(c) if c.lr == 0.1 && c.momentum == 0.9));
    /// assert!(OptimizerConfig::default_named("adam").unwrap_err().contains("`adam`"));
    /// ```
    fn default_named(name: &str) -> Result<Self, String>;

    /// [`NamedOptimizer::default_named`] with learning rate `lr`.
    ///
    /// # Errors
    /// A message naming the unknown optimizer.
    ///
    /// ```
    /// use tessera_sim::train::{NamedOptimizer, OptimizerConfig};
    ///
    /// let lamb = OptimizerConfig::named("lamb", 0.02).unwrap();
    /// assert!(matches!(lamb, OptimizerConfig::Lamb(c) if c.lr == 0.02));
    /// ```
    fn named(name: &str, lr: f32) -> Result<Self, String>;
}

impl NamedOptimizer for OptimizerConfig {
    fn default_named(name: &str) -> Result<Self, String> {
        Ok(match name {
            "sgd" => Self::Sgd(SgdConfig {
                lr: 0.1,
                momentum: 0.9,
                ..SgdConfig::default()
            }),
            "adamw" => Self::AdamW(AdamWConfig {
                lr: 0.005,
                ..AdamWConfig::default()
            }),
            "lamb" => default_lamb(),
            "lars" => Self::Lars(LarsConfig {
                lr: 1.0,
                momentum: 0.9,
                weight_decay: 1e-4,
                ..LarsConfig::default()
            }),
            _ => {
                return Err(format!(
                    "unknown optimizer `{name}`: expected sgd, adamw, lamb or lars"
                ));
            }
        })
    }

    fn named(name: &str, lr: f32) -> Result<Self, String> {
        Self::default_named(name).map(|o| o.with_lr(lr))
    }
}

/// The default job's optimizer: `default_named("lamb")`.
fn default_lamb() -> OptimizerConfig {
    OptimizerConfig::Lamb(LambConfig {
        lr: 0.005,
        ..LambConfig::default()
    })
}

/// Loss scaling.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LossScaling {
    /// None (scale 1).
    Off,
    /// A constant scale.
    Static(f32),
    /// `torch.amp.GradScaler`'s dynamic scaling.
    Dynamic(DynamicConfig),
    /// PopART's automatic (histogram) loss scaling.
    Automatic(AutomaticConfig),
}

impl LossScaling {
    /// How the command line writes it: `off`, `static:S`, `dynamic`,
    /// `automatic`.
    ///
    /// ```
    /// use tessera_sim::train::LossScaling;
    ///
    /// assert_eq!(LossScaling::Static(128.0).describe(), "static:128");
    /// assert_eq!(LossScaling::Off.describe(), "off");
    /// ```
    #[must_use]
    pub fn describe(&self) -> String {
        match self {
            Self::Static(s) => format!("static:{s}"),
            other => other.name().to_owned(),
        }
    }

    /// Its name, as on the command line.
    ///
    /// ```
    /// use tessera_sim::train::{LossScaling, TrainConfig};
    ///
    /// assert_eq!(LossScaling::Static(8.0).name(), "static");
    /// assert_eq!(TrainConfig::default().loss_scaling.name(), "dynamic");
    /// ```
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Static(_) => "static",
            Self::Dynamic(_) => "dynamic",
            Self::Automatic(_) => "automatic",
        }
    }

    fn validate(&self) -> Result<(), TrainError> {
        let checked = match *self {
            Self::Off => Ok(()),
            Self::Static(s) => StaticLossScaler::new(s).map(drop),
            Self::Dynamic(c) => DynamicLossScaler::new(c).map(drop),
            Self::Automatic(c) => AutomaticLossScaler::new(c).map(drop),
        };
        checked.map_err(TrainError::LossScaling)
    }
}

/// How micro-batch and replica gradients are combined
/// (`accumulationAndReplicationReductionType` with
/// `MeanReductionStrategy`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum GradReduction {
    /// The sum over every micro-batch of every replica.
    Sum,
    /// The sum divided by the number of micro-batches over all replicas
    /// (`Mean` with `MeanReductionStrategy.Post`).
    #[default]
    PostMean,
    /// A running mean over each replica's micro-batches
    /// (`s = f/(f+1) s + g/(f+1)`), then the mean over replicas (`Mean`
    /// with `MeanReductionStrategy.Running`). Its order is sequential, so
    /// unlike the other two it changes in the last bits with the split of
    /// the batch over replicas.
    RunningMean,
}

unit_names!(GradReduction in "tessera_sim::train", "reduction", "sum, mean (post-mean) or running-mean", {
    Sum => "sum",
    PostMean => "mean" | "post-mean",
    RunningMean => "running-mean",
});

/// How the learning rate moves over the run, after the linear warm-up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum LrDecay {
    /// The optimizer's learning rate throughout.
    Constant,
    /// Cosine decay from the learning rate to 0 at the last step.
    #[default]
    Cosine,
}

impl LrDecay {
    /// The learning-rate factor of step `step` (0-based) of `total`, after
    /// `warmup` steps of linear warm-up: computed in f64 with `libm`, so the
    /// same on every platform.
    ///
    /// ```
    /// use tessera_sim::train::LrDecay;
    ///
    /// assert_eq!(LrDecay::Constant.factor(50, 100, 10), 1.0);
    /// assert_eq!(LrDecay::Cosine.factor(0, 100, 0), 1.0);
    /// assert_eq!(LrDecay::Cosine.factor(50, 100, 0), 0.5); // half-way
    /// ```
    #[must_use]
    pub fn factor(self, step: u64, total: u64, warmup: u64) -> f32 {
        self.schedule(total, warmup).factor(step)
    }

    /// The core's [`LrSchedule`] of `total` steps with `warmup` steps of
    /// warm-up.
    ///
    /// ```
    /// use tessera_sim::train::LrDecay;
    ///
    /// let s = LrDecay::Cosine.schedule(100, 10);
    /// assert_eq!((s.total, s.warmup), (100, 10));
    /// assert_eq!(s.factor(60), LrDecay::Cosine.factor(60, 100, 10));
    /// ```
    #[must_use]
    pub const fn schedule(self, total: u64, warmup: u64) -> LrSchedule {
        let decay = match self {
            Self::Constant => Decay::Constant,
            Self::Cosine => Decay::Cosine { final_factor: 0.0 },
        };
        LrSchedule {
            warmup,
            decay,
            total,
        }
    }
}

unit_names!(LrDecay in "tessera_sim::train", "schedule", "constant or cosine", {
    Constant => "constant",
    Cosine => "cosine",
});

/// One training run.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainConfig {
    /// Hidden widths, activation and batch norm (`inputs` and `classes`
    /// come from the data set).
    pub hidden: Vec<usize>,
    /// The hidden layers' activation.
    pub activation: Activation,
    /// Batch norm with statistics over all replicas.
    pub batch_norm: bool,
    /// The Pod.
    pub pod: PodSpec,
    /// Host processes (PopRun `--num-instances`).
    pub instances: usize,
    /// Replicas over all instances (`replicationFactor` x instances).
    pub replicas: usize,
    /// IPUs per replica (a power of two).
    pub ipus_per_replica: usize,
    /// Samples per micro-batch.
    pub micro_batch: usize,
    /// Micro-batches per replica per step (`gradientAccumulation`).
    pub gradient_accumulation: usize,
    /// Steps per host call (`deviceIterations`).
    pub device_iterations: usize,
    /// How gradients are combined.
    pub reduction: GradReduction,
    /// Compute and weight precision.
    pub precision: PrecisionMode,
    /// The optimizer.
    pub optimizer: OptimizerConfig,
    /// Linear learning-rate warm-up over this many steps (0: none).
    pub warmup_steps: u64,
    /// The learning rate after the warm-up.
    pub lr_schedule: LrDecay,
    /// Global gradient-norm clip (`None`: off).
    pub max_grad_norm: Option<f32>,
    /// Biases and batch-norm parameters get no weight decay and no
    /// adaptation (Graphcore's and timm's recipes).
    pub exclude_bias_and_norm: bool,
    /// Loss scaling.
    pub loss_scaling: LossScaling,
    /// Passes over the training set.
    pub epochs: u64,
    /// Seed of the initial weights, the shuffles and stochastic rounding.
    pub seed: u64,
    /// Fraction of the data set held out for testing.
    pub test_fraction: f64,
    /// Shard the optimizer state (and f32 master weights) over the
    /// replicas of each instance (PopTorch's replicated tensor sharding).
    pub replicated_tensor_sharding: bool,
    /// Keep the optimizer state in streaming memory (off-chip) between
    /// steps.
    pub offload_optimizer_state: bool,
    /// What the outfeed keeps of the per-step loss (`outputMode`).
    pub output_mode: OutputMode,
    /// Check every this many steps that all replicas hold bitwise the same
    /// weights (0: never).
    pub check_replicas_every: u64,
    /// Micro-batches the infeed runs ahead of the replicas.
    pub infeed_capacity: usize,
    /// Layers placed on the replica's IPUs as stages, sharded or pipelined
    /// (`None`: every layer spread over all the replica's tiles).
    pub pipeline: Option<Pipeline>,
    /// Keep only stage inputs (or the replica's input) for the backward
    /// pass and recompute the rest.
    pub recompute: bool,
    /// With `recompute` on a model that is not pipelined: the blocks
    /// ([`NetworkConfig::blocks`]; an MLP's layers) whose input is kept as a
    /// recomputation checkpoint (TF IPU's `recomputation_checkpoint`),
    /// increasing from 1; empty: the whole forward pass recomputed from
    /// the input.
    pub recompute_checkpoints: Vec<usize>,
    /// A convolutional network instead of the MLP of `hidden`,
    /// `activation` and `batch_norm` (its `classes` replaced by the data
    /// set's).
    pub network: Option<NetworkConfig>,
    /// Weights bitwise the same for every cut of the global batch into
    /// instances, replicas and micro-batches (exact gradient sums; see
    /// the `invariant` module).
    pub batch_invariant: bool,
}

impl Default for TrainConfig {
    /// The default job: the digits MLP on a POD16 (4 instances x 4
    /// replicas), `16.16` with stochastic rounding, LAMB, dynamic loss
    /// scaling.
    fn default() -> Self {
        Self {
            hidden: vec![128, 64],
            activation: Activation::Relu,
            batch_norm: false,
            pod: PodSpec::pod16(),
            instances: 4,
            replicas: 16,
            ipus_per_replica: 1,
            micro_batch: 8,
            gradient_accumulation: 1,
            device_iterations: 4,
            reduction: GradReduction::PostMean,
            precision: PrecisionMode::HALF_SR,
            optimizer: default_lamb(),
            warmup_steps: 20,
            lr_schedule: LrDecay::Cosine,
            max_grad_norm: None,
            exclude_bias_and_norm: true,
            loss_scaling: LossScaling::Dynamic(DynamicConfig {
                growth_interval: core::num::NonZeroU32::new(200)
                    .unwrap_or(core::num::NonZeroU32::MIN),
                ..DynamicConfig::default()
            }),
            epochs: 40,
            seed: 42,
            test_fraction: 0.2,
            replicated_tensor_sharding: false,
            offload_optimizer_state: false,
            output_mode: OutputMode::All,
            check_replicas_every: 50,
            infeed_capacity: 64,
            pipeline: None,
            recompute: false,
            recompute_checkpoints: Vec::new(),
            network: None,
            batch_invariant: false,
        }
    }
}

/// resnet-mini's channels per stage in [`TrainConfig::resnet_mini`].
pub const RESNET_MINI_WIDTHS: [usize; 2] = [16, 32];

/// resnet-mini's residual blocks per stage in [`TrainConfig::resnet_mini`].
pub const RESNET_MINI_BLOCKS: [usize; 2] = [1, 1];

impl TrainConfig {
    /// The default job with resnet-mini for `input` images
    /// ([`NetworkConfig::resnet_mini`] of [`RESNET_MINI_WIDTHS`] and
    /// [`RESNET_MINI_BLOCKS`], batch norm per replica) and the
    /// hyperparameters that train it on the digits.
    ///
    /// ```
    /// use tessera_sim::train::TrainConfig;
    ///
    /// let c = TrainConfig::resnet_mini([1, 8, 8]);
    /// assert_eq!(c.network.as_ref().unwrap().input, [1, 8, 8]);
    /// assert_eq!(c.micro_batch * c.gradient_accumulation, 8);
    /// assert!(c.validate().is_ok());
    /// ```
    #[must_use]
    pub fn resnet_mini(input: [usize; 3]) -> Self {
        let network =
            NetworkConfig::resnet_mini(input, 0, &RESNET_MINI_WIDTHS, &RESNET_MINI_BLOCKS);
        Self {
            network: Some(network),
            optimizer: OptimizerConfig::Lamb(LambConfig {
                lr: 0.01,
                ..LambConfig::default()
            }),
            epochs: 20,
            // The default job's global batch of 128 on its 16 replicas,
            // in micro-batches of 4: at 8 a tile holds too many of the
            // feature maps' exchange buffers.
            micro_batch: 4,
            gradient_accumulation: 2,
            ..Self::default()
        }
    }

    /// The model for data of `inputs` features and `classes` classes.
    ///
    /// ```
    /// use tessera_sim::train::TrainConfig;
    ///
    /// let m = TrainConfig::default().model(64, 10);
    /// assert_eq!((m.inputs, m.hidden, m.classes), (64, vec![128, 64], 10));
    /// ```
    #[must_use]
    pub fn model(&self, inputs: usize, classes: usize) -> MlpConfig {
        MlpConfig {
            inputs,
            hidden: self.hidden.clone(),
            classes,
            activation: self.activation,
            batch_norm: self.batch_norm,
        }
    }

    /// The model for data of `inputs` features and `classes` classes: the
    /// network if there is one, else the MLP.
    ///
    /// # Errors
    /// [`TrainError::Invalid`] if the network's input is not `inputs`
    /// features.
    ///
    /// ```
    /// use tessera_sim::model::ModelConfig;
    /// use tessera_sim::train::{TrainConfig, TrainError};
    ///
    /// let net = TrainConfig::resnet_mini([1, 8, 8]);
    /// assert!(matches!(net.model_config(64, 10), Ok(ModelConfig::Network(n)) if n.classes == 10));
    /// assert!(matches!(net.model_config(63, 10), Err(TrainError::Invalid(_))));
    /// assert!(matches!(TrainConfig::default().model_config(64, 10), Ok(ModelConfig::Mlp(_))));
    /// ```
    pub fn model_config(&self, inputs: usize, classes: usize) -> Result<ModelConfig, TrainError> {
        let Some(net) = &self.network else {
            return Ok(ModelConfig::Mlp(self.model(inputs, classes)));
        };
        let [c, h, w] = net.input;
        if net.inputs() != inputs {
            return Err(TrainError::Invalid(format!(
                "the network's input of {c}x{h}x{w} = {} features does not match the data's {inputs}",
                net.inputs()
            )));
        }
        Ok(ModelConfig::Network(NetworkConfig {
            classes,
            ..net.clone()
        }))
    }

    /// Checks the recomputation checkpoints against a model of `blocks`
    /// blocks ([`NetworkConfig::blocks`]): only with `recompute`, not
    /// pipelined, at its block boundaries in order.
    pub(crate) fn check_checkpoints(&self, blocks: usize) -> Result<(), TrainError> {
        let c = &self.recompute_checkpoints;
        if c.is_empty() {
            return Ok(());
        }
        let invalid = |why: &str| {
            Err(TrainError::Invalid(format!(
                "recompute_checkpoints {c:?}: {why}"
            )))
        };
        if !self.recompute {
            return invalid("checkpoints need recomputation (--recompute)");
        }
        if self.pipeline.is_some() {
            return invalid(
                "a pipeline's stage inputs are its checkpoints; give checkpoints without --pipeline-stages",
            );
        }
        crate::model::check_checkpoints(blocks, c)?;
        Ok(())
    }

    /// Replicas fed by each instance.
    ///
    /// ```
    /// use tessera_sim::train::TrainConfig;
    ///
    /// // The default job: 16 replicas fed by 4 instances.
    /// assert_eq!(TrainConfig::default().replicas_per_instance(), 4);
    /// ```
    #[must_use]
    pub const fn replicas_per_instance(&self) -> usize {
        match self.replicas.checked_div(self.instances) {
            Some(r) => r,
            None => 0,
        }
    }

    /// Replicas sharing the optimizer state: each instance's replicas with
    /// replicated tensor sharding, else 1.
    ///
    /// ```
    /// use tessera_sim::train::TrainConfig;
    ///
    /// let mut c = TrainConfig::default();
    /// assert_eq!(c.shards(), 1);
    /// c.replicated_tensor_sharding = true;
    /// assert_eq!(c.shards(), c.replicas_per_instance());
    /// ```
    #[must_use]
    pub const fn shards(&self) -> usize {
        if self.replicated_tensor_sharding {
            self.replicas_per_instance()
        } else {
            1
        }
    }

    /// The batch arithmetic.
    ///
    /// ```
    /// use tessera_sim::train::TrainConfig;
    ///
    /// let p = TrainConfig::default().batch_plan();
    /// assert_eq!((p.instances, p.replicas_per_instance, p.micro_batch), (4, 4, 8));
    /// ```
    #[must_use]
    pub const fn batch_plan(&self) -> BatchPlan {
        BatchPlan {
            instances: self.instances,
            replicas_per_instance: self.replicas_per_instance(),
            micro_batch: self.micro_batch,
            accumulation: self.gradient_accumulation,
            device_iterations: self.device_iterations,
        }
    }

    /// The distribution over the Pod.
    ///
    /// # Errors
    /// [`TrainError::Pod`] saying which numbers disagree.
    ///
    /// ```
    /// use tessera_sim::pod::PodError;
    /// use tessera_sim::train::{TrainConfig, TrainError};
    ///
    /// assert!(TrainConfig::default().layout().is_ok());
    /// let odd = TrainConfig { replicas: 6, ..TrainConfig::default() };
    /// let want = PodError::InstancesDoNotDivideReplicas { instances: 4, replicas: 6 };
    /// assert!(matches!(odd.layout(), Err(TrainError::Pod(e)) if e == want));
    /// ```
    pub fn layout(&self) -> Result<Layout, TrainError> {
        Distribution {
            instances: self.instances,
            replicas: self.replicas,
            ipus_per_replica: self.ipus_per_replica,
        }
        .layout(&self.pod)
        .map_err(TrainError::Pod)
    }

    /// Checks everything that does not need the data: the distribution,
    /// the optimizer, the loss scaling, the counts.
    ///
    /// # Errors
    /// The first problem, as a [`TrainError`] carrying the numbers.
    ///
    /// ```
    /// use tessera_sim::train::{TrainConfig, TrainError};
    ///
    /// assert!(TrainConfig::default().validate().is_ok());
    /// let none = TrainConfig { micro_batch: 0, ..TrainConfig::default() };
    /// assert!(matches!(none.validate(), Err(TrainError::Zero("micro_batch"))));
    /// let held = TrainConfig { test_fraction: 1.0, ..TrainConfig::default() };
    /// assert!(matches!(held.validate(), Err(TrainError::Invalid(_))));
    /// ```
    pub fn validate(&self) -> Result<Layout, TrainError> {
        let layout = self.layout()?;
        for (value, name) in [
            (self.micro_batch, "micro_batch"),
            (self.gradient_accumulation, "gradient_accumulation"),
            (self.device_iterations, "device_iterations"),
            (self.infeed_capacity, "infeed_capacity"),
        ] {
            if value == 0 {
                return Err(TrainError::Zero(name));
            }
        }
        if self.epochs == 0 {
            return Err(TrainError::Zero("epochs"));
        }
        if let Some(i) = self.hidden.iter().position(|&h| h == 0) {
            return Err(TrainError::Invalid(format!(
                "hidden = {:?}: hidden layer {i} has width 0; every width must be >= 1",
                self.hidden
            )));
        }
        if !(self.test_fraction > 0.0 && self.test_fraction < 1.0) {
            return Err(TrainError::Invalid(format!(
                "test_fraction {} is not in (0, 1)",
                self.test_fraction
            )));
        }
        if let Some(n) = self.max_grad_norm
            && !(n.is_finite() && n > 0.0)
        {
            return Err(TrainError::Invalid(format!(
                "max_grad_norm {n} is not a finite positive number"
            )));
        }
        Optimizer::new(self.optimizer).map_err(TrainError::Optimizer)?;
        self.loss_scaling.validate()?;
        if let PrecisionMode::Low(l) = self.precision {
            l.recipe
                .check()
                .map_err(|e| TrainError::Invalid(format!("precision {}: {e}", self.precision)))?;
        }
        Ok(layout)
    }
}
