//! What to plan: the model, the machine, the numerics and the
//! parallelism.

use serde::Serialize;
use tessera_core::fp::{Format, MxFormat};

use super::PlanError;
use super::assumptions::PlanAssumptions;
use super::table::{LayerCosts, ModelTable};
use crate::IpuSpec;
use crate::ipu::Encoding;
use crate::model::quant::Recipe;
use crate::model::{Compute, NetworkConfig};
use crate::names::unit_names;
use crate::pod::{Algorithms, Distribution, Layout, PodSpec};
use crate::train::{LowFamily, OptimizerConfig, PrecisionMode, TrainConfig};

/// Compute and weight precision, as Graphcore names them: `compute.weights`
/// (`compute` being what the matrix products take).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum Precision {
    /// `32.32`: f32 everywhere.
    #[serde(rename = "32.32")]
    Fp32,
    /// `16.32`: FP16 compute, weights and gradients, an f32 master copy
    /// and f32 optimizer state.
    #[serde(rename = "16.32")]
    Mixed,
    /// `16.16`: FP16 compute, weights, gradients and optimizer state, no
    /// master copy (stochastic rounding makes it train).
    #[serde(rename = "16.16")]
    Half,
    /// `8.16`: FP8 products (E4M3 weights and activations, E5M2
    /// gradients, each tensor with its own scale), otherwise `16.16`.
    #[serde(rename = "8.16")]
    Fp8Half,
    /// `8.32`: FP8 products, otherwise `16.32`.
    #[serde(rename = "8.32")]
    Fp8Mixed,
    /// `mxfp8.16`: products of OCP MXFP8 blocks, otherwise `16.16`.
    #[serde(rename = "mxfp8.16")]
    Mxfp8,
    /// `mxfp6.16`: products of OCP MXFP6 blocks, otherwise `16.16`.
    #[serde(rename = "mxfp6.16")]
    Mxfp6,
    /// `mxfp4.16`: products of OCP MXFP4 blocks, otherwise `16.16`.
    #[serde(rename = "mxfp4.16")]
    Mxfp4,
}

/// Bytes per parameter, and the activations' encoding, of a [`Precision`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PrecisionBytes {
    /// Weights.
    pub weights: u64,
    /// Gradients (accumulated, and on the links).
    pub gradients: u64,
    /// The master copy (0: none).
    pub master: u64,
    /// Each optimizer state tensor.
    pub optimizer_state: u64,
    /// Activations (stashed for the backward pass, exchanged between
    /// tiles and stages): the products' inputs in a low-precision mode.
    pub activation: Encoding,
}

impl Precision {
    /// Every precision.
    pub const ALL: [Self; 8] = [
        Self::Fp32,
        Self::Mixed,
        Self::Half,
        Self::Fp8Half,
        Self::Fp8Mixed,
        Self::Mxfp8,
        Self::Mxfp6,
        Self::Mxfp4,
    ];

    /// The encoding of the matrix products' inputs (FP8 in E4M3 for
    /// `8.16` and `8.32`, its gradients' E5M2 the same size and price;
    /// MXFP6's E2M3 stands for E3M2 alike).
    ///
    /// ```
    /// use tessera_core::fp::MxFormat;
    /// use tessera_sim::ipu::Encoding;
    /// use tessera_sim::plan::Precision;
    ///
    /// assert_eq!(Precision::Mxfp4.products(), Encoding::Mx(MxFormat::E2M1));
    /// assert_eq!(Precision::Half.products(), Encoding::F16);
    /// ```
    #[must_use]
    pub const fn products(self) -> Encoding {
        match self {
            Self::Fp32 => Encoding::F32,
            Self::Mixed | Self::Half => Encoding::F16,
            Self::Fp8Half | Self::Fp8Mixed => Encoding::Scalar(Format::E4M3FN),
            Self::Mxfp8 => Encoding::Mx(MxFormat::E4M3),
            Self::Mxfp6 => Encoding::Mx(MxFormat::E2M3),
            Self::Mxfp4 => Encoding::Mx(MxFormat::E2M1),
        }
    }

    /// The trainer's recipe of its quantised products (`None` for
    /// `32.32`, `16.32` and `16.16`).
    ///
    /// ```
    /// use tessera_sim::model::quant::Recipe;
    /// use tessera_sim::plan::Precision;
    ///
    /// assert_eq!(Precision::Fp8Mixed.recipe(), Some(Recipe::FP8));
    /// assert_eq!(Precision::Half.recipe(), None);
    /// ```
    #[must_use]
    pub const fn recipe(self) -> Option<Recipe> {
        match self {
            Self::Fp32 | Self::Mixed | Self::Half => None,
            Self::Fp8Half | Self::Fp8Mixed => Some(Recipe::FP8),
            Self::Mxfp8 => Some(Recipe::MXFP8),
            Self::Mxfp6 => Some(Recipe::MXFP6),
            Self::Mxfp4 => Some(Recipe::MXFP4),
        }
    }

    /// The trainer's arithmetic in this precision.
    ///
    /// ```
    /// use tessera_sim::model::{Compute, quant::Recipe};
    /// use tessera_sim::plan::Precision;
    ///
    /// assert_eq!(Precision::Mxfp4.compute(), Compute::Quantised(Recipe::MXFP4));
    /// assert_eq!(Precision::Fp32.compute(), Compute::F32);
    /// ```
    #[must_use]
    pub const fn compute(self) -> Compute {
        match (self, self.recipe()) {
            (_, Some(r)) => Compute::Quantised(r),
            (Self::Fp32, None) => Compute::F32,
            (_, None) => Compute::F16,
        }
    }

    /// Its bytes (see the [`assumptions`](super::assumptions) module).
    ///
    /// ```
    /// use tessera_sim::plan::Precision;
    ///
    /// let b = Precision::Mixed.bytes(); // 16.32: f16 weights, an f32 master
    /// assert_eq!((b.weights, b.gradients, b.master, b.optimizer_state), (2, 2, 4, 4));
    /// assert_eq!(Precision::Half.bytes().master, 0);
    /// ```
    #[must_use]
    pub const fn bytes(self) -> PrecisionBytes {
        let (weights, master, optimizer_state) = match self {
            Self::Fp32 => (4, 0, 4),
            Self::Mixed | Self::Fp8Mixed => (2, 4, 4),
            Self::Half | Self::Fp8Half | Self::Mxfp8 | Self::Mxfp6 | Self::Mxfp4 => (2, 0, 2),
        };
        PrecisionBytes {
            weights,
            gradients: weights,
            master,
            optimizer_state,
            activation: self.products(),
        }
    }
}

impl PrecisionBytes {
    /// Bytes of the activations that take `f16_bytes` in 16-bit values
    /// (the unit of the [`ModelTable`]'s activation and boundary bytes):
    /// the same elements in [`PrecisionBytes::activation`]'s encoding.
    ///
    /// ```
    /// use tessera_sim::plan::Precision;
    ///
    /// assert_eq!(Precision::Fp32.bytes().activation_bytes(1024), 2048);
    /// assert_eq!(Precision::Fp8Half.bytes().activation_bytes(1024), 512);
    /// // 512 FP6 codes in 384 bytes and 16 E8M0 scales.
    /// assert_eq!(Precision::Mxfp6.bytes().activation_bytes(1024), 400);
    /// ```
    #[must_use]
    pub const fn activation_bytes(&self, f16_bytes: u64) -> u64 {
        let e = self.activation;
        let codes = (f16_bytes as u128 * e.element_bits() as u128).div_ceil(16);
        let scales = match e.block() {
            Some(block) => f16_bytes.div_ceil(2).div_ceil(block) as u128,
            None => 0,
        };
        let bytes = codes + scales;
        if bytes > u64::MAX as u128 {
            u64::MAX
        } else {
            bytes as u64
        }
    }
}

// `16.16` also reads the trainer's `16.16-sr` and `16.16-rn`: the same bytes.
unit_names!(
    Precision in "tessera_sim::plan",
    "precision",
    "32.32, 16.32, 16.16, 8.16, 8.32, mxfp8.16, mxfp6.16 or mxfp4.16",
    {
        Fp32 => "32.32",
        Mixed => "16.32",
        Half => "16.16" | "16.16-sr" | "16.16-rn",
        Fp8Half => "8.16",
        Fp8Mixed => "8.32",
        Mxfp8 => "mxfp8.16",
        Mxfp6 => "mxfp6.16",
        Mxfp4 => "mxfp4.16",
    }
);

// A quantised mode by its family's name (a recipe chosen role by role is
// priced as its family's).
impl From<PrecisionMode> for Precision {
    fn from(p: PrecisionMode) -> Self {
        match p {
            PrecisionMode::Fp32 => Self::Fp32,
            PrecisionMode::Mixed => Self::Mixed,
            PrecisionMode::Half(_) => Self::Half,
            PrecisionMode::Low(l) => match l.family {
                LowFamily::Fp8 if l.master => Self::Fp8Mixed,
                LowFamily::Fp8 => Self::Fp8Half,
                LowFamily::Mxfp8 => Self::Mxfp8,
                LowFamily::Mxfp6 => Self::Mxfp6,
                LowFamily::Mxfp4 => Self::Mxfp4,
            },
        }
    }
}

/// The optimizer, for its state and its kernels' cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Optimizer {
    /// SGD with momentum: one state tensor.
    Sgd,
    /// AdamW: two.
    AdamW,
    /// LAMB: two, and per-tensor norms.
    Lamb,
    /// LARS: one, and per-tensor norms.
    Lars,
}

impl Optimizer {
    /// State tensors per parameter.
    ///
    /// ```
    /// use tessera_sim::plan::Optimizer;
    ///
    /// assert_eq!(Optimizer::Sgd.state_tensors(), 1);
    /// assert_eq!(Optimizer::Lamb.state_tensors(), 2);
    /// ```
    #[must_use]
    pub const fn state_tensors(self) -> u64 {
        match self {
            Self::Sgd | Self::Lars => 1,
            Self::AdamW | Self::Lamb => 2,
        }
    }

    /// Whether it needs per-tensor norms (a second kernel, as the
    /// trainer's cost of LAMB and LARS).
    ///
    /// ```
    /// use tessera_sim::plan::Optimizer;
    ///
    /// assert!(Optimizer::Lars.needs_norms() && !Optimizer::AdamW.needs_norms());
    /// ```
    #[must_use]
    pub const fn needs_norms(self) -> bool {
        matches!(self, Self::Lamb | Self::Lars)
    }
}

unit_names!(Optimizer in "tessera_sim::plan", "optimizer", "sgd, adamw, lamb or lars", {
    Sgd => "sgd",
    AdamW => "adamw",
    Lamb => "lamb",
    Lars => "lars",
});

impl From<&OptimizerConfig> for Optimizer {
    fn from(o: &OptimizerConfig) -> Self {
        match o {
            OptimizerConfig::Sgd(_) => Self::Sgd,
            OptimizerConfig::AdamW(_) => Self::AdamW,
            OptimizerConfig::Lamb(_) => Self::Lamb,
            OptimizerConfig::Lars(_) => Self::Lars,
        }
    }
}

/// The pipeline schedule: the trainer's ([`crate::train::Schedule`]),
/// with its memory behaviour here in the [`assumptions`](super::assumptions)
/// module.
pub use crate::train::Schedule;

/// [`PlanConfig::device_iterations`] unless set: the trainer's default.
pub const DEFAULT_DEVICE_ITERATIONS: usize = 4;

/// What to plan. [`PlanConfig::new`] gives the defaults; change fields,
/// then [`PlanConfig::plan`](super::PlanConfig::plan).
#[derive(Clone, Debug, PartialEq)]
pub struct PlanConfig {
    /// The model.
    pub model: ModelTable,
    /// The Pod (its IPUs are replaced by [`PlanConfig::ipu`]).
    pub pod: PodSpec,
    /// The IPU (Mk2 GC200 or Bow).
    pub ipu: IpuSpec,
    /// Compute and weight precision.
    pub precision: Precision,
    /// The optimizer.
    pub optimizer: Optimizer,
    /// Samples per micro-batch.
    pub micro_batch: usize,
    /// Micro-batches per replica per step (also the pipeline's).
    pub gradient_accumulation: usize,
    /// Steps per run of the device (PopTorch's `device_iterations`): input
    /// streams ahead of compute within a run, so only each run's first
    /// micro-batch waits for all of its input.
    pub device_iterations: usize,
    /// The algorithms the Pod's collectives are priced with.
    pub collectives: Algorithms,
    /// Replicas.
    pub replicas: usize,
    /// IPUs per replica: the pipeline's stages (a power of two).
    pub ipus_per_replica: usize,
    /// The pipeline schedule (when `ipus_per_replica > 1`).
    pub schedule: Schedule,
    /// Recompute activations in the backward pass from checkpoints.
    pub recompute: bool,
    /// Shard optimizer state and master weights over the replicas of an
    /// IPU-Link domain.
    pub replicated_tensor_sharding: bool,
    /// Keep optimizer state and master weights in streaming memory.
    pub offload_optimizer_state: bool,
    /// Efficiency factors and assumptions.
    pub assumptions: PlanAssumptions,
    /// Layers priced on the simulator ([`Calibration::price_model`] for
    /// this model, micro-batch, precision and IPU): their rows take their
    /// cycles and fullest tile from it instead of the assumptions.
    ///
    /// [`Calibration::price_model`]: super::Calibration::price_model
    pub layer_costs: Option<LayerCosts>,
}

impl PlanConfig {
    /// `model` data-parallel over every IPU of `pod` (one replica per
    /// IPU), its own IPU, `16.16`, LAMB, micro-batch 8, no accumulation,
    /// no pipelining, recomputation, sharding or offloading, the
    /// [`PlanAssumptions::ipu`] assumptions.
    ///
    /// ```
    /// use tessera_sim::plan::{Builtin, PlanConfig, Precision};
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let c = PlanConfig::new(Builtin::Resnet50.table(), PodSpec::pod16());
    /// assert_eq!((c.replicas, c.micro_batch, c.precision), (16, 8, Precision::Half));
    /// assert!(c.validate().is_ok());
    /// ```
    #[must_use]
    pub fn new(model: ModelTable, pod: PodSpec) -> Self {
        Self {
            ipu: *pod.ipu(),
            replicas: pod.ipus(),
            model,
            pod,
            precision: Precision::Half,
            optimizer: Optimizer::Lamb,
            micro_batch: 8,
            gradient_accumulation: 1,
            device_iterations: DEFAULT_DEVICE_ITERATIONS,
            collectives: Algorithms::Gcl,
            ipus_per_replica: 1,
            schedule: Schedule::default(),
            recompute: false,
            replicated_tensor_sharding: false,
            offload_optimizer_state: false,
            assumptions: PlanAssumptions::ipu(),
            layer_costs: None,
        }
    }

    /// The plan of the trainer's run `config` on data of `inputs` features
    /// and `classes` classes: its network ([`ModelTable::from_network`];
    /// an MLP's dense blocks), Pod,
    /// precision, optimizer, batch arithmetic, replicas, sharding and
    /// offloading, priced with [`PlanAssumptions::simulator`] so that
    /// [`Plan::step`](super::Plan::step) is comparable with the trainer's
    /// [`StepTime`](crate::train::StepTime), with the trainer's pipeline
    /// schedule and recomputation. (IPUs per replica are pipeline stages
    /// here even when the trainer spreads every layer over them, without
    /// [`TrainConfig::pipeline`]; replicated tensor sharding shards over an
    /// IPU-Link domain here, over an instance's replicas in the trainer.)
    ///
    /// # Errors
    /// [`PlanError::Model`] for a zero width or a network the trainer
    /// refuses.
    ///
    /// ```
    /// use tessera_sim::plan::{Optimizer, PlanConfig, Precision};
    /// use tessera_sim::train::TrainConfig;
    ///
    /// let train = TrainConfig::default();
    /// let plan = PlanConfig::for_trainer(&train, 64, 10).unwrap();
    /// assert_eq!((plan.replicas, plan.micro_batch), (train.replicas, train.micro_batch));
    /// assert_eq!((plan.precision, plan.optimizer), (Precision::Half, Optimizer::Lamb));
    /// ```
    pub fn for_trainer(
        config: &TrainConfig,
        inputs: usize,
        classes: usize,
    ) -> Result<Self, PlanError> {
        let model = match &config.network {
            Some(net) => ModelTable::from_network(&NetworkConfig {
                classes,
                ..net.clone()
            })?,
            None => ModelTable::from_network(&config.model(inputs, classes).network())?,
        };
        Ok(Self {
            precision: config.precision.into(),
            optimizer: (&config.optimizer).into(),
            micro_batch: config.micro_batch,
            gradient_accumulation: config.gradient_accumulation,
            device_iterations: config.device_iterations,
            replicas: config.replicas,
            ipus_per_replica: config.ipus_per_replica,
            replicated_tensor_sharding: config.replicated_tensor_sharding,
            offload_optimizer_state: config.offload_optimizer_state,
            schedule: config
                .pipeline
                .as_ref()
                .map_or_else(Schedule::default, |p| p.schedule),
            recompute: config.recompute,
            assumptions: PlanAssumptions::simulator(),
            ..Self::new(model, config.pod.clone())
        })
    }

    /// The Pod built of [`PlanConfig::ipu`].
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::plan::{Builtin, PlanConfig};
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let mut c = PlanConfig::new(Builtin::Resnet50.table(), PodSpec::pod16());
    /// c.ipu = IpuSpec::BOW;
    /// assert_eq!((c.machine().ipu(), c.machine().ipus()), (&IpuSpec::BOW, 16));
    /// ```
    #[must_use]
    pub fn machine(&self) -> PodSpec {
        self.pod.clone().with_ipu(self.ipu)
    }

    /// Checks the configuration and places the replicas.
    ///
    /// # Errors
    /// In this order: [`PlanError::Zero`] (micro-batch, accumulation,
    /// replicas, IPUs per replica); [`PlanError::GlobalBatchOverflow`];
    /// [`PlanError::MicroBatchTooLarge`]; [`PlanError::Assumption`];
    /// [`PlanError::Pod`] (too many IPUs for the Pod, IPUs per replica not a
    /// power of two, a replica larger than an IPU-Link domain);
    /// [`PlanError::MoreStagesThanLayers`];
    /// [`PlanError::AccumulationBelowStages`] (pipelined schedules only).
    ///
    /// ```
    /// use tessera_sim::plan::{Builtin, PlanConfig, PlanError};
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let ok = PlanConfig::new(Builtin::Resnet50.table(), PodSpec::pod16());
    /// assert_eq!(ok.validate().unwrap().replicas(), 16);
    /// let none = PlanConfig { micro_batch: 0, ..ok.clone() };
    /// assert_eq!(none.validate().unwrap_err(), PlanError::Zero("micro_batch"));
    /// let piped = PlanConfig { replicas: 8, ipus_per_replica: 2, ..ok };
    /// assert!(matches!(
    ///     piped.validate(),
    ///     Err(PlanError::AccumulationBelowStages { accumulation: 1, stages: 2 })
    /// ));
    /// ```
    pub fn validate(&self) -> Result<Layout, PlanError> {
        for (value, field) in [
            (self.micro_batch, "micro_batch"),
            (self.gradient_accumulation, "gradient_accumulation"),
            (self.replicas, "replicas"),
            (self.ipus_per_replica, "ipus_per_replica"),
            (self.device_iterations, "device_iterations"),
        ] {
            if value == 0 {
                return Err(PlanError::Zero(field));
            }
        }
        let global = self
            .micro_batch
            .checked_mul(self.gradient_accumulation)
            .and_then(|n| n.checked_mul(self.replicas));
        if global.is_none() {
            return Err(PlanError::GlobalBatchOverflow {
                micro_batch: self.micro_batch,
                accumulation: self.gradient_accumulation,
                replicas: self.replicas,
            });
        }
        self.check_micro_batch()?;
        self.assumptions.validate()?;
        let layout = Distribution {
            instances: 1,
            replicas: self.replicas,
            ipus_per_replica: self.ipus_per_replica,
        }
        .layout(&self.machine())?
        .with_algorithms(self.collectives);
        let stages = self.ipus_per_replica;
        let layers = self.model.layers().len();
        if stages > layers {
            return Err(PlanError::MoreStagesThanLayers { stages, layers });
        }
        if stages > 1
            && self.schedule != Schedule::Sequential
            && self.gradient_accumulation < stages
        {
            return Err(PlanError::AccumulationBelowStages {
                accumulation: self.gradient_accumulation,
                stages,
            });
        }
        Ok(layout)
    }
}

impl PlanConfig {
    /// Checks that a micro-batch's figures stay within
    /// [`ModelTable::LIMIT`]: with the table's own numbers within it, the
    /// planner's arithmetic then neither overflows nor loses its integers.
    fn check_micro_batch(&self) -> Result<(), PlanError> {
        let model = &self.model;
        let (fwd, bwd) = model.flops_per_sample();
        let mut figures: Vec<(&'static str, Option<&str>, u64)> = vec![
            ("input_bytes", None, model.input_bytes()),
            ("flops_forward", None, fwd),
            ("flops_backward", None, bwd),
            ("activation_bytes", None, model.activation_bytes()),
        ];
        for l in model.layers() {
            figures.push(("output bytes", Some(&l.name), l.boundary_bytes()));
            figures.push(("output elements", Some(&l.name), l.output_elements()));
        }
        let batch = self.micro_batch as u64;
        match figures
            .into_iter()
            .find(|f| batch.checked_mul(f.2).is_none_or(|b| b > ModelTable::LIMIT))
        {
            Some((field, layer, per_sample)) => Err(PlanError::MicroBatchTooLarge {
                micro_batch: self.micro_batch,
                field,
                layer: layer.map(str::to_owned),
                per_sample,
            }),
            None => Ok(()),
        }
    }
}

/// A name for `ipu`: `Mk2 GC200`, `Bow`, `C600` ([`IpuSpec::PRESETS`]), or
/// `custom IPU`.
///
/// ```
/// use tessera_sim::{IpuParams, IpuSpec};
/// use tessera_sim::plan::ipu_name;
///
/// assert_eq!(ipu_name(&IpuSpec::BOW), "Bow");
/// let small = IpuSpec::new(IpuParams { tiles: 4, ..IpuParams::default() }).unwrap();
/// assert_eq!(ipu_name(&small), "custom IPU");
/// ```
#[must_use]
pub fn ipu_name(ipu: &IpuSpec) -> &'static str {
    IpuSpec::PRESETS
        .iter()
        .find(|(_, preset)| preset == ipu)
        .map_or("custom IPU", |(name, _)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::Builtin;
    use crate::pod::PodError;
    use crate::train::NamedOptimizer;

    #[test]
    fn names_round_trip() {
        for p in Precision::ALL {
            assert_eq!(p.name().parse::<Precision>(), Ok(p));
        }
        assert_eq!("16.16-rn".parse::<Precision>(), Ok(Precision::Half));
        assert!("16.8".parse::<Precision>().is_err());
        for o in [
            Optimizer::Sgd,
            Optimizer::AdamW,
            Optimizer::Lamb,
            Optimizer::Lars,
        ] {
            assert_eq!(o.name().parse::<Optimizer>(), Ok(o));
        }
        assert!("adam".parse::<Optimizer>().is_err());
        for s in [
            Schedule::Grouped,
            Schedule::Interleaved,
            Schedule::Sequential,
        ] {
            assert_eq!(s.name().parse::<Schedule>(), Ok(s));
        }
        assert!("1f1b".parse::<Schedule>().is_err());
        assert_eq!(Precision::from(PrecisionMode::HALF_SR), Precision::Half);
        assert_eq!(Precision::from(PrecisionMode::Mixed), Precision::Mixed);
        for p in Precision::ALL {
            let mode = p.name().parse::<PrecisionMode>().unwrap();
            assert_eq!(Precision::from(mode), p, "{p}");
        }
        assert_eq!(
            Optimizer::from(&OptimizerConfig::named("lars", 0.1).unwrap()),
            Optimizer::Lars
        );
        assert_eq!(ipu_name(&IpuSpec::BOW), "Bow");
        assert_eq!(ipu_name(&IpuSpec::C600), "C600");
    }

    #[test]
    fn a_micro_batch_beyond_the_limit_is_a_typed_error() {
        let resnet = Builtin::Resnet50.table();
        let (_, bwd) = resnet.flops_per_sample();
        // The largest micro-batch whose backward FLOPs (its largest
        // figure) are within 2^53 plans, with finite figures; one more
        // sample is refused.
        let most = (ModelTable::LIMIT / bwd) as usize;
        let ok = PlanConfig {
            micro_batch: most,
            replicas: 1,
            ..PlanConfig::new(resnet.clone(), PodSpec::pod16())
        };
        let plan = ok.plan().unwrap();
        assert!(plan.step_s.is_finite() && plan.samples_per_second.is_finite());
        let e = PlanConfig {
            micro_batch: most + 1,
            ..ok
        }
        .validate()
        .unwrap_err();
        assert_eq!(
            e,
            PlanError::MicroBatchTooLarge {
                micro_batch: most + 1,
                field: "flops_backward",
                layer: None,
                per_sample: bwd,
            }
        );
        assert!(
            e.to_string().starts_with(&format!(
                "micro-batch {} x flops_backward {bwd} per sample is above the planner's limit",
                most + 1
            )),
            "{e}"
        );
    }

    #[test]
    fn validation_names_what_is_wrong() {
        let ok = PlanConfig::new(Builtin::Resnet50.table(), PodSpec::pod16());
        ok.validate().unwrap();
        let zero = PlanConfig {
            micro_batch: 0,
            ..ok.clone()
        };
        assert_eq!(zero.validate(), Err(PlanError::Zero("micro_batch")));
        let big = PlanConfig {
            replicas: 8,
            ipus_per_replica: 4,
            gradient_accumulation: 4,
            ..ok.clone()
        };
        assert_eq!(
            big.validate(),
            Err(PlanError::Pod(PodError::TooManyIpus {
                replicas: 8,
                ipus_per_replica: 4,
                available: 16
            }))
        );
        let few = PlanConfig {
            replicas: 4,
            ipus_per_replica: 4,
            gradient_accumulation: 3,
            ..ok.clone()
        };
        assert_eq!(
            few.validate(),
            Err(PlanError::AccumulationBelowStages {
                accumulation: 3,
                stages: 4
            })
        );
        // Sequential does not pipeline: no minimum.
        let seq = PlanConfig {
            schedule: Schedule::Sequential,
            ..few
        };
        assert!(seq.validate().is_ok());
        let tiny = crate::plan::ModelTable::new(
            "one",
            4,
            vec![Builtin::Resnet50.table().layers()[55].clone()],
        )
        .unwrap();
        let stages = PlanConfig {
            model: tiny,
            replicas: 1,
            ipus_per_replica: 2,
            gradient_accumulation: 2,
            ..ok
        };
        assert_eq!(
            stages.validate(),
            Err(PlanError::MoreStagesThanLayers {
                stages: 2,
                layers: 1
            })
        );
    }
}
