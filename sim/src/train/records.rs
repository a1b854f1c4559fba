//! What a run reports: a record per step and per epoch as it goes, to an
//! observer, and the summary at the end.

use std::time::Instant;

use serde::Serialize;

use super::config::TrainConfig;
use super::cost::StepTime;
use super::fit::MemoryReport;
use super::replica::StepOutcome;
use crate::data::Outfeed;
use crate::model::quant::TensorQuant;

/// One optimizer step as the host sees it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepRecord {
    /// Steps before this one (0-based, over the whole run).
    pub step: u64,
    /// The epoch.
    pub epoch: u64,
    /// Mean cross-entropy over the global batch.
    pub loss: f32,
    /// Fraction of the global batch predicted right.
    pub accuracy: f32,
    /// The loss scale the step ran with.
    pub loss_scale: f32,
    /// The learning rate applied (0 if skipped).
    pub lr: f32,
    /// Whether loss scaling skipped the update (an overflow).
    pub skipped: bool,
    /// Simulated seconds on the Pod since the run began (a resumed run
    /// continues from [`Continuation::sim_seconds`](super::Continuation::sim_seconds)).
    pub sim_seconds: f64,
    /// Host seconds since this process's run (or resume) began.
    pub wall_seconds: f64,
    /// With quantised products: each quantised operand of the first
    /// replica's last micro-batch, its scale and what its rounding lost.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub quant: Vec<TensorQuant>,
}

/// The test set after an epoch.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EpochRecord {
    /// The epoch (0-based).
    pub epoch: u64,
    /// Mean cross-entropy on the test set.
    pub test_loss: f32,
    /// Fraction of the test set predicted right.
    pub test_accuracy: f32,
}

/// What the trainer reports while it runs, from the first replica.
#[derive(Clone, Copy, Debug)]
pub enum Event<'a> {
    /// A step, delivered with the others of its host call (device
    /// iterations) when the call ends.
    Step(&'a StepRecord),
    /// An epoch's evaluation.
    Epoch(&'a EpochRecord),
}

/// The observer type: called on the first replica's thread.
pub type Observer<'a> = &'a (dyn Fn(Event<'_>) + Sync);

/// What a finished run reports.
#[derive(Debug)]
pub struct Summary {
    /// Every step run.
    pub steps: Vec<StepRecord>,
    /// Every epoch's evaluation.
    pub epochs: Vec<EpochRecord>,
    /// The final weights, per parameter (as f32), in
    /// [`NetworkConfig::params`](crate::model::NetworkConfig::params) order.
    pub weights: Vec<Vec<f32>>,
    /// FNV-1a of the final weights' bits as stored (f32, or f16 as a
    /// zero-extended 32-bit little-endian word), parameter by parameter in
    /// [`NetworkConfig::params`](crate::model::NetworkConfig::params) order: equal exactly when the weights are.
    pub fingerprint: u64,
    /// The final test set evaluation.
    pub test: EpochRecord,
    /// Simulated time of one step, by part.
    pub step_time: StepTime,
    /// Memory of one replica.
    pub memory: MemoryReport,
    /// Samples per optimizer step.
    pub global_batch: usize,
    /// Host seconds of the run.
    pub wall_seconds: f64,
    /// A Chrome trace of one micro-batch's forward and backward pass.
    pub trace: Option<serde_json::Value>,
    /// The per-step losses, kept by the configured output mode.
    pub outfeed: Outfeed<f32>,
    /// Whether [`RunOptions::interrupt`](super::RunOptions::interrupt)
    /// stopped the run before its last step (its checkpoint is where the
    /// run stopped).
    pub interrupted: bool,
}

impl Summary {
    /// Simulated samples per second on the Pod.
    ///
    /// ```
    /// use tessera_sim::data::Source;
    /// use tessera_sim::train::{RunOptions, TrainConfig, Trainer};
    ///
    /// let data = Source::Synthetic { samples: 32, features: 4, classes: 2, seed: 1 }.load().unwrap();
    /// let config = TrainConfig {
    ///     hidden: vec![4],
    ///     instances: 1,
    ///     replicas: 1,
    ///     micro_batch: 4,
    ///     device_iterations: 1,
    ///     epochs: 1,
    ///     test_fraction: 0.25,
    ///     ..TrainConfig::default()
    /// };
    /// let summary = Trainer::new(config, data).unwrap().run(&RunOptions::default(), &|_| {}).unwrap();
    /// let rate = summary.simulated_samples_per_second();
    /// assert_eq!(rate, summary.global_batch as f64 / summary.step_time.total());
    /// ```
    #[must_use]
    pub fn simulated_samples_per_second(&self) -> f64 {
        self.global_batch as f64 / self.step_time.total()
    }

    /// Samples per second of host time.
    ///
    /// ```
    /// use tessera_sim::data::Source;
    /// use tessera_sim::train::{RunOptions, TrainConfig, Trainer};
    ///
    /// let data = Source::Synthetic { samples: 32, features: 4, classes: 2, seed: 1 }.load().unwrap();
    /// let config = TrainConfig {
    ///     hidden: vec![4],
    ///     instances: 1,
    ///     replicas: 1,
    ///     micro_batch: 4,
    ///     device_iterations: 1,
    ///     epochs: 1,
    ///     test_fraction: 0.25,
    ///     ..TrainConfig::default()
    /// };
    /// let summary = Trainer::new(config, data).unwrap().run(&RunOptions::default(), &|_| {}).unwrap();
    /// assert!(summary.wall_samples_per_second() > 0.0);
    /// ```
    #[must_use]
    pub fn wall_samples_per_second(&self) -> f64 {
        (self.steps.len() * self.global_batch) as f64 / self.wall_seconds.max(1e-9)
    }
}

/// The first replica's records, flushed to the observer per host call.
pub(super) struct Report {
    pub(super) steps: Vec<StepRecord>,
    pub(super) epochs: Vec<EpochRecord>,
    pending: usize,
    sim_seconds: f64,
    pub(super) trace: Option<serde_json::Value>,
    pub(super) outfeed: Outfeed<f32>,
}

impl Report {
    /// Records whose simulated time starts at `sim_seconds`.
    pub(super) fn new(config: &TrainConfig, sim_seconds: f64) -> Self {
        Self {
            steps: Vec::new(),
            epochs: Vec::new(),
            pending: 0,
            sim_seconds,
            trace: None,
            outfeed: Outfeed::new(config.output_mode),
        }
    }

    pub(super) fn step(
        &mut self,
        step: u64,
        epoch: u64,
        o: &StepOutcome,
        seconds: f64,
        started: Instant,
    ) {
        self.sim_seconds += seconds;
        self.outfeed.push(step as usize, o.loss);
        self.steps.push(StepRecord {
            step,
            epoch,
            loss: o.loss,
            accuracy: o.accuracy,
            loss_scale: o.loss_scale,
            lr: o.lr,
            skipped: o.skipped,
            sim_seconds: self.sim_seconds,
            wall_seconds: started.elapsed().as_secs_f64(),
            quant: o.quant.clone(),
        });
        self.pending += 1;
    }

    pub(super) fn flush(&mut self, observer: Observer<'_>) {
        for r in &self.steps[self.steps.len() - self.pending..] {
            observer(Event::Step(r));
        }
        self.pending = 0;
    }
}
