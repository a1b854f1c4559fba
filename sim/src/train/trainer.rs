//! The trainer: a run's configuration checked against its data before
//! anything is built, and the figures its replicas share.

use std::sync::Arc;

use super::TrainError;
use super::checkpoint;
use super::config::TrainConfig;
use super::cost::{StepTime, step_time};
use super::fit::MemoryReport;
use super::invariant;
use super::params::FlatParams;
use super::pipeline::{Schedule, step_cycles};
use super::precision::PrecisionMode;
use crate::data::Dataset;
use crate::model::{Model, ModelConfig, NetworkConfig, Placement, StageCycles};
use crate::pod::Layout;

/// A validated training run over a data set.
#[derive(Debug)]
pub struct Trainer {
    pub(super) config: TrainConfig,
    pub(super) layout: Layout,
    pub(super) model: ModelConfig,
    /// The network every replica builds (an MLP's dense blocks).
    pub(super) network: NetworkConfig,
    pub(super) data: Arc<Dataset>,
    pub(super) train: Arc<Dataset>,
    pub(super) test: Arc<Dataset>,
    pub(super) flat: FlatParams,
    pub(super) placement: Placement,
    pub(super) steps_per_epoch: u64,
}

impl Trainer {
    /// Checks `config` against `data` (split into train and test sets).
    ///
    /// # Errors
    /// The first problem found: the distribution, the batch arithmetic
    /// (a global batch larger than the training set, say), a
    /// hyperparameter.
    ///
    /// ```
    /// use tessera_sim::data::digits;
    /// use tessera_sim::train::{TrainConfig, TrainError, Trainer};
    ///
    /// assert!(Trainer::new(TrainConfig::default(), digits()).is_ok());
    /// let held = TrainConfig { test_fraction: 0.0, ..TrainConfig::default() };
    /// assert!(matches!(Trainer::new(held, digits()), Err(TrainError::Invalid(_))));
    /// ```
    pub fn new(config: TrainConfig, data: Dataset) -> Result<Self, TrainError> {
        let layout = config.validate()?;
        if config.batch_invariant {
            invariant::check(&config)?;
        }
        let (train, test) = data.split(config.test_fraction, config.seed)?;
        let plan = config.batch_plan();
        plan.validate(train.len())?;
        let model = config.model_config(data.features(), data.classes())?;
        model.validate()?;
        // From here on the one network (an MLP's dense blocks).
        let network = model.network();
        let placement = match &config.pipeline {
            None => Placement::Spread,
            Some(p) => p.placement(&network, config.ipus_per_replica as u32, config.micro_batch)?,
        };
        placement.validate(&network, &layout.replica_target()?)?;
        config.check_checkpoints(network.blocks()?.len())?;
        if let Some(p) = &config.pipeline {
            let stages = placement.stages();
            let g = config.gradient_accumulation;
            if p.schedule != Schedule::Sequential && g < stages {
                return Err(TrainError::Invalid(format!(
                    "a pipeline of {stages} stages needs gradient_accumulation >= {stages}, \
                     got {g} (or use the sequential schedule)"
                )));
            }
        }
        super::fit::check(&config, &layout, &network, &placement)?;
        let flat = FlatParams::new(network.params()?, config.shards());
        let steps_per_epoch = plan.steps_per_epoch(train.len()) as u64;
        if test.is_empty() {
            return Err(TrainError::Invalid(format!(
                "test_fraction {} leaves no test sample of {}",
                config.test_fraction,
                data.len()
            )));
        }
        if steps_per_epoch.checked_mul(config.epochs).is_none() {
            return Err(TrainError::Invalid(format!(
                "{} epochs of {steps_per_epoch} steps are more steps than can be counted",
                config.epochs
            )));
        }
        Ok(Self {
            config,
            layout,
            model,
            network,
            data: Arc::new(data),
            train: Arc::new(train),
            test: Arc::new(test),
            flat,
            placement,
            steps_per_epoch,
        })
    }

    /// The configuration.
    ///
    /// ```
    /// use tessera_sim::data::digits;
    /// use tessera_sim::train::{TrainConfig, Trainer};
    ///
    /// let trainer = Trainer::new(TrainConfig::default(), digits()).unwrap();
    /// assert_eq!(trainer.config(), &TrainConfig::default());
    /// ```
    #[must_use]
    pub const fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The model.
    ///
    /// ```
    /// use tessera_sim::data::digits;
    /// use tessera_sim::model::ModelConfig;
    /// use tessera_sim::train::{TrainConfig, Trainer};
    ///
    /// let trainer = Trainer::new(TrainConfig::default(), digits()).unwrap();
    /// // The MLP's inputs and classes come from the data set.
    /// assert!(matches!(trainer.model(), ModelConfig::Mlp(m) if m.inputs == 64 && m.classes == 10));
    /// ```
    #[must_use]
    pub const fn model(&self) -> &ModelConfig {
        &self.model
    }

    /// The training and test sets.
    ///
    /// ```
    /// use tessera_sim::data::{DIGITS_SAMPLES, digits};
    /// use tessera_sim::train::{TrainConfig, Trainer};
    ///
    /// let trainer = Trainer::new(TrainConfig::default(), digits()).unwrap();
    /// let (train, test) = trainer.sets();
    /// assert_eq!(train.len() + test.len(), DIGITS_SAMPLES);
    /// assert!(test.len() < train.len()); // a test fraction of 0.2
    /// ```
    #[must_use]
    pub fn sets(&self) -> (&Dataset, &Dataset) {
        (&self.train, &self.test)
    }

    /// Where each replica's layers run.
    ///
    /// ```
    /// use tessera_sim::data::digits;
    /// use tessera_sim::model::Placement;
    /// use tessera_sim::train::{TrainConfig, Trainer};
    ///
    /// let trainer = Trainer::new(TrainConfig::default(), digits()).unwrap();
    /// assert_eq!(trainer.placement(), &Placement::Spread); // not pipelined
    /// ```
    #[must_use]
    pub const fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Optimizer steps per epoch (drop-last).
    ///
    /// ```
    /// use tessera_sim::data::digits;
    /// use tessera_sim::train::{TrainConfig, Trainer};
    ///
    /// let config = TrainConfig::default();
    /// let global = config.batch_plan().global_batch();
    /// let trainer = Trainer::new(config, digits()).unwrap();
    /// assert_eq!(trainer.steps_per_epoch(), (trainer.sets().0.len() / global) as u64);
    /// ```
    #[must_use]
    pub const fn steps_per_epoch(&self) -> u64 {
        self.steps_per_epoch
    }

    /// The steps run before the checkpoint at `path`, checked to be of
    /// this run: where a run resumed from it starts.
    ///
    /// # Errors
    /// As resuming from it: [`TrainError::Checkpoint`] if it cannot be
    /// read, [`TrainError::CheckpointMismatch`] if it is another run's or
    /// beyond this run's end.
    ///
    /// ```
    /// use std::path::Path;
    /// use tessera_sim::data::digits;
    /// use tessera_sim::train::{TrainConfig, TrainError, Trainer};
    ///
    /// let trainer = Trainer::new(TrainConfig::default(), digits()).unwrap();
    /// let missing = trainer.resume_point(Path::new("no/such/checkpoint.safetensors"));
    /// assert!(matches!(missing, Err(TrainError::Checkpoint(_))));
    /// ```
    pub fn resume_point(&self, path: &std::path::Path) -> Result<u64, TrainError> {
        let total = self.steps_per_epoch * self.config.epochs;
        checkpoint::resume_point(path, &self.config, &self.data, total)
    }

    /// The schedule of the replica's stages (sequential when not
    /// pipelined: one stage, or sharded).
    pub(super) fn schedule(&self) -> Schedule {
        self.config
            .pipeline
            .as_ref()
            .map_or(Schedule::Sequential, |p| p.schedule)
    }

    /// A step's simulated time on IPUs `spec` from its stages' cycles per
    /// micro-batch.
    pub(super) fn step_time(
        &self,
        spec: &crate::ipu::IpuSpec,
        (stages, checkpointed): (&[StageCycles], u64),
    ) -> StepTime {
        let config = &self.config;
        let g = config.gradient_accumulation;
        // From checkpoints: the segments' forward cycles, not the stage's.
        let whole = config.recompute && config.recompute_checkpoints.is_empty();
        let mut cycles = step_cycles(stages, g, self.schedule(), whole);
        cycles.recompute += g as u64 * checkpointed;
        let elements = self.flat.elements() as u64;
        if config.batch_invariant {
            let additions = invariant::exact_additions(&self.network, config.micro_batch);
            let ipus = config.ipus_per_replica;
            cycles.compute += invariant::exact_cycles(spec, ipus, (additions, g as u64), elements);
        }
        let mut time = step_time(
            config,
            &self.layout,
            spec,
            self.network.inputs(),
            elements,
            config.shards() as u64,
            cycles,
        );
        if config.batch_invariant {
            let weight_bytes = elements
                * if config.precision == PrecisionMode::Fp32 {
                    4
                } else {
                    2
                };
            let sharded = config.replicated_tensor_sharding.then_some(weight_bytes);
            (time.ipu_link_s, time.gw_link_s) =
                invariant::exact_link_seconds(&self.layout, elements, sharded);
        }
        time
    }

    /// The memory of a replica whose model is `model`: its stashes from
    /// its graph's activation tensors.
    pub(super) fn memory_report(&self, model: &Model, target: &crate::ipu::Target) -> MemoryReport {
        let mut report = super::fit::memory_report(
            &self.config,
            self.flat.elements() as u64,
            (model.memory().summary(10), model.stage_activations()),
            target.spec(),
        );
        let checkpoints = &self.config.recompute_checkpoints;
        if !checkpoints.is_empty() {
            // Checked by `Trainer::new`: the network's blocks.
            report.recomputation = model.recomputation(checkpoints).ok();
        }
        report
    }
}
