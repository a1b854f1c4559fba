//! The trainer: instances feeding replicas on host threads, each replica
//! stepping in lockstep with the others, and what the run reports.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Instant;

use serde::Serialize;
use tessera_collectives::{Collectives, CommError, Communicator, ThreadCommunicator, ThreadWorld};

use super::TrainError;
use super::checkpoint::{self, ResumeState};
use super::comm::{self, InstanceLink, ReplicaComm};
use super::config::TrainConfig;
use super::cost::{OptimizerMemory, StepTime, step_time};
use super::divergence::{Divergence, Streak};
use super::params::FlatParams;
use super::pipeline::{Schedule, StageMemory, step_cycles};
use super::replica::{Replica, StepOutcome};
use crate::data::{Dataset, Infeed, MicroBatch, Outfeed};
use crate::ipu::MemorySummary;
use crate::model::{
    Compute, Model, ModelConfig, NetworkConfig, Placement, Recomputation, StageCycles,
};
use crate::pod::Layout;

/// One optimizer step as the host sees it.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
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
    /// continues from [`Continuation::sim_seconds`]).
    pub sim_seconds: f64,
    /// Host seconds since this process's run (or resume) began.
    pub wall_seconds: f64,
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

/// Where a resumed run's records continue from: how its history (the
/// records of the steps before its checkpoint) ends.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Continuation {
    /// The last step's [`StepRecord::sim_seconds`].
    pub sim_seconds: f64,
    /// Consecutive bad steps (see [`Divergence`]) at the end.
    pub bad_steps: u64,
}

/// Where a run starts and what it writes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// Resume from this checkpoint.
    pub resume: Option<PathBuf>,
    /// Write a checkpoint here at the end (and after every
    /// `checkpoint_every` epochs), atomically.
    pub checkpoint: Option<PathBuf>,
    /// Epochs between checkpoints (0: only at the end).
    pub checkpoint_every: u64,
    /// Stop (with a checkpoint, as at the end) after this many epochs of
    /// the run, as if it had been interrupted there: the learning-rate
    /// schedule is still the whole run's, so resuming gives bitwise the
    /// uninterrupted run.
    pub stop_after_epochs: Option<u64>,
    /// When to stop the run as diverged (with [`TrainError::Diverged`],
    /// writing no further checkpoint).
    pub divergence: Divergence,
    /// A resumed run's history, which its records continue.
    pub continuation: Continuation,
}

/// Memory of one replica.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryReport {
    /// The model's tensors, vertices, code and exchange buffers per tile.
    pub model: MemorySummary,
    /// The optimizer's state and master weights.
    pub optimizer: OptimizerMemory,
    /// The activation stashes of each stage (one stage when not
    /// pipelined).
    pub activations: Vec<StageMemory>,
    /// A network's recomputation from checkpoints
    /// ([`TrainConfig::recompute_checkpoints`]): its memory, and the
    /// cycles of the last training micro-batch (0 before one has run).
    pub recomputation: Option<Recomputation>,
}

impl MemoryReport {
    /// Bytes of the fullest tile: model, optimizer share and activation
    /// stashes together.
    #[must_use]
    pub fn max_tile_bytes(&self) -> u64 {
        self.model.max + self.optimizer.per_tile_bytes + self.stash_per_tile()
    }

    /// The largest activation stash per tile of an IPU: its stages'
    /// (parts of successive stages on one IPU add up).
    #[must_use]
    pub fn stash_per_tile(&self) -> u64 {
        super::pipeline::busiest_ipu_stash(&self.activations)
    }

    /// Whether it fits a tile.
    pub(crate) fn check(&self) -> Result<(), TrainError> {
        let needed = self.max_tile_bytes();
        if needed > self.model.capacity {
            return Err(TrainError::OutOfTileMemory {
                needed,
                available: self.model.capacity,
                stash: self.stash_per_tile(),
            });
        }
        Ok(())
    }
}

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
}

impl Summary {
    /// Simulated samples per second on the Pod.
    #[must_use]
    pub fn simulated_samples_per_second(&self) -> f64 {
        self.global_batch as f64 / self.step_time.total()
    }

    /// Samples per second of host time.
    #[must_use]
    pub fn wall_samples_per_second(&self) -> f64 {
        (self.steps.len() * self.global_batch) as f64 / self.wall_seconds.max(1e-9)
    }
}

/// A validated training run over a data set.
#[derive(Debug)]
pub struct Trainer {
    config: TrainConfig,
    layout: Layout,
    model: ModelConfig,
    /// The network every replica builds (an MLP's dense blocks).
    network: NetworkConfig,
    data: Arc<Dataset>,
    train: Arc<Dataset>,
    test: Arc<Dataset>,
    flat: FlatParams,
    placement: Placement,
    steps_per_epoch: u64,
}

/// The observer type: called on the first replica's thread.
pub type Observer<'a> = &'a (dyn Fn(Event<'_>) + Sync);

impl Trainer {
    /// Checks `config` against `data` (split into train and test sets).
    ///
    /// # Errors
    /// The first problem found: the distribution, the batch arithmetic
    /// (a global batch larger than the training set, say), a
    /// hyperparameter.
    pub fn new(config: TrainConfig, data: Dataset) -> Result<Self, TrainError> {
        let layout = config.validate()?;
        let (train, test) = data.split(config.test_fraction, config.seed)?;
        let plan = config.batch_plan();
        plan.validate(train.len())?;
        let model = config.model_config(data.features(), data.classes())?;
        model.validate()?;
        let ipus = config.ipus_per_replica as u32;
        let placement = match (&config.pipeline, &model) {
            (None, _) => Placement::Spread,
            (Some(p), ModelConfig::Mlp(mlp)) => p.placement(mlp, ipus)?,
            (Some(p), ModelConfig::Network(net)) => {
                p.network_placement(net, ipus, config.micro_batch)?
            }
        };
        let network = model.network();
        placement.validate(&network, &layout.replica_target()?)?;
        check_checkpoints(&config, &model)?;
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
        super::fit::check(&config, &layout, &model, &placement)?;
        let flat = FlatParams::new(model.params()?, config.shards());
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
    #[must_use]
    pub const fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The model.
    #[must_use]
    pub const fn model(&self) -> &ModelConfig {
        &self.model
    }

    /// The training and test sets.
    #[must_use]
    pub fn sets(&self) -> (&Dataset, &Dataset) {
        (&self.train, &self.test)
    }

    /// Where each replica's layers run.
    #[must_use]
    pub const fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Optimizer steps per epoch (drop-last).
    #[must_use]
    pub const fn steps_per_epoch(&self) -> u64 {
        self.steps_per_epoch
    }

    /// Runs every instance and replica on threads of this process.
    ///
    /// # Errors
    /// A [`TrainError`]: the first failure of any replica (the others stop
    /// with it).
    pub fn run(&self, options: &RunOptions, observer: Observer<'_>) -> Result<Summary, TrainError> {
        let k = self.config.instances;
        if k == 1 {
            return self
                .run_instance::<ThreadCommunicator>(0, None, options, observer)
                .map(|s| s.expect("instance 0 reports"));
        }
        let comms = ThreadWorld::new(k)?.into_communicators();
        let results: Vec<Result<Option<Summary>, TrainError>> = std::thread::scope(|s| {
            let mut comms = comms.into_iter();
            let first = comms.next().expect("k > 1");
            let others: Vec<_> = comms
                .enumerate()
                .map(|(i, c)| s.spawn(move || self.run_instance(i + 1, Some(c), options, &|_| {})))
                .collect();
            let mut results = vec![self.run_instance(0, Some(first), options, observer)];
            results.extend(others.into_iter().map(joined));
            results
        });
        combine(results).map(|s| s.expect("instance 0 reports"))
    }

    /// The checkpoint `options` resume from (read against `model`'s
    /// buffers), the step the run starts at and the step it stops before,
    /// of `total`.
    fn span(
        &self,
        options: &RunOptions,
        model: &Model,
        total: u64,
    ) -> Result<(Option<ResumeState>, u64, u64), TrainError> {
        let resume = options
            .resume
            .as_ref()
            .map(|path| {
                let buffers = model.buffers();
                checkpoint::resume(path, &self.config, &self.data, &self.flat, &buffers, total)
            })
            .transpose()?;
        let first_step = resume.as_ref().map_or(0, |r| r.steps);
        let stop = options
            .stop_after_epochs
            .map_or(total, |e| total.min(self.steps_per_epoch * e));
        Ok((resume, first_step, stop))
    }

    /// Runs instance `instance` (its replicas on threads of this process),
    /// `instances` being its rank among the instances (`None` with one
    /// instance): with an MPI communicator, one process of `mpirun`.
    /// `instances` is only used on the calling thread (as MPI requires of
    /// a communicator), which serves the instance's collectives while
    /// other threads run the replicas and the infeed. Instance 0 returns
    /// the summary.
    ///
    /// # Errors
    /// As [`Trainer::run`].
    pub fn run_instance<C: Communicator>(
        &self,
        instance: usize,
        instances: Option<C>,
        options: &RunOptions,
        observer: Observer<'_>,
    ) -> Result<Option<Summary>, TrainError> {
        let config = &self.config;
        let m = config.replicas_per_instance();
        let target = self.layout.replica_target()?;
        let models = self.replica_models(target, m)?;
        self.memory_report(&models[0], &target).check()?;
        let total = self.steps_per_epoch * config.epochs;
        let (resume, first_step, stop) = self.span(options, &models[0], total)?;
        let steps = stop.saturating_sub(first_step);
        let init = self.model.init(config.seed);
        let plan = config.batch_plan();
        let a = config.gradient_accumulation;
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..m).map(|_| self.infeed_channel()).unzip();
        let locals = ThreadWorld::new(m)?.into_communicators();
        let (link, served) = InstanceLink::new();
        let mut link = instances.is_some().then_some(link);
        let run = RunContext {
            trainer: self,
            options,
            observer,
            resume: resume.as_ref(),
            init: &init,
            first_step,
            stop,
            total,
        };
        let start = (
            first_step / self.steps_per_epoch,
            (first_step % self.steps_per_epoch) as usize,
        );
        let wanted = steps as usize * m * a;
        let mut instances = instances.map(|c| Collectives::new(c).with_options(comm::options()));
        let (served_result, mut results) = std::thread::scope(|s| {
            let handles: Vec<_> = locals
                .into_iter()
                .zip(models)
                .zip(receivers)
                .enumerate()
                .map(|(local, ((comm, mlp), rx))| {
                    let inter = if local == 0 { link.take() } else { None };
                    let global = instance * m + local;
                    let run = &run;
                    std::thread::Builder::new()
                        .name(format!("replica-{global}"))
                        .spawn_scoped(s, move || {
                            run.replica(global, ReplicaComm::new(comm, inter), mlp, &rx)
                        })
                        .expect("spawning a replica thread")
                })
                .collect();
            // The instance's host feeds its replicas.
            let train = Arc::clone(&self.train);
            let feeder = std::thread::Builder::new()
                .name(format!("host-{instance}"))
                .spawn_scoped(s, move || {
                    let infeed = Infeed::start(
                        train,
                        plan,
                        instance,
                        config.seed,
                        start,
                        config.infeed_capacity,
                    );
                    feed(infeed.take(wanted), instance * m, &senders);
                    Ok(None)
                })
                .expect("spawning the host thread");
            let served_result = match &mut instances {
                Some(c) => comm::serve(c, &served),
                None => Ok(()),
            };
            drop(served);
            let mut results: Vec<Result<Option<Summary>, TrainError>> =
                handles.into_iter().map(joined).collect();
            results.push(joined(feeder));
            (served_result, results)
        });
        if let Err(e) = served_result {
            results.push(Err(e.into()));
        }
        // Divergence stops every replica of every instance at the same
        // step, with no collective pending: nothing to abort.
        let failed =
            |r: &Result<_, _>| r.is_err() && !matches!(r, Err(TrainError::Diverged { .. }));
        if results.iter().any(failed)
            && let Some(c) = &instances
        {
            // Let the other instances stop now rather than at a timeout.
            c.comm().abort();
        }
        combine(results)
    }
}

/// Hands each micro-batch to its replica's queue (replicas numbered from
/// `first_replica`), until one is gone: that replica stopped with an
/// error, which its join reports.
fn feed(
    micro_batches: impl Iterator<Item = MicroBatch>,
    first_replica: usize,
    senders: &[SyncSender<MicroBatch>],
) {
    for mb in micro_batches {
        if senders[mb.replica - first_replica].send(mb).is_err() {
            break;
        }
    }
}

impl Trainer {
    /// One model per replica of an instance, `m` of them, on `target`.
    fn replica_models(
        &self,
        target: crate::ipu::Target,
        m: usize,
    ) -> Result<Vec<Model>, TrainError> {
        let config = &self.config;
        let compute = if config.precision.f16_compute() {
            Compute::F16
        } else {
            Compute::F32
        };
        (0..m)
            .map(|_| {
                Model::placed(
                    &self.network,
                    target,
                    &self.placement,
                    config.micro_batch,
                    compute,
                )
                .map_err(TrainError::from)
            })
            .collect()
    }

    /// A replica's bounded queue of micro-batches from the host: a host
    /// call's micro-batches (at most an epoch's) times the accumulation.
    fn infeed_channel(&self) -> (SyncSender<MicroBatch>, Receiver<MicroBatch>) {
        let config = &self.config;
        let calls = config.device_iterations.min(self.steps_per_epoch as usize);
        sync_channel::<MicroBatch>(config.gradient_accumulation * calls.max(1))
    }
}

impl Trainer {
    /// The steps run before the checkpoint at `path`, checked to be of
    /// this run: where a run resumed from it starts.
    ///
    /// # Errors
    /// As resuming from it: [`TrainError::Checkpoint`] if it cannot be
    /// read, [`TrainError::CheckpointMismatch`] if it is another run's or
    /// beyond this run's end.
    pub fn resume_point(&self, path: &std::path::Path) -> Result<u64, TrainError> {
        let total = self.steps_per_epoch * self.config.epochs;
        checkpoint::resume_point(path, &self.config, &self.data, total)
    }

    /// The schedule of the replica's stages (sequential when not
    /// pipelined: one stage, or sharded).
    fn schedule(&self) -> Schedule {
        self.config
            .pipeline
            .as_ref()
            .map_or(Schedule::Sequential, |p| p.schedule)
    }

    /// A step's simulated time on IPUs `spec` from its stages' cycles per
    /// micro-batch.
    fn step_time(
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
        step_time(
            config,
            &self.layout,
            spec,
            self.model.inputs(),
            self.flat.elements() as u64,
            config.shards() as u64,
            cycles,
        )
    }

    /// The memory of a replica whose model is `model`: a network's
    /// stashes from its graph's activation tensors.
    fn memory_report(&self, model: &Model, target: &crate::ipu::Target) -> MemoryReport {
        let mut report = super::fit::memory_report(
            &self.config,
            &self.model,
            &self.placement,
            self.flat.elements() as u64,
            (model.memory().summary(10), model.stage_activations()),
            target,
        );
        let checkpoints = &self.config.recompute_checkpoints;
        if !checkpoints.is_empty() {
            // Checked by `Trainer::new`: a network's blocks.
            report.recomputation = model.recomputation(checkpoints).ok();
        }
        report
    }
}

/// Recomputation checkpoints only with `recompute`, on a network that is
/// not pipelined, at its block boundaries in order.
fn check_checkpoints(config: &TrainConfig, model: &ModelConfig) -> Result<(), TrainError> {
    let c = &config.recompute_checkpoints;
    if c.is_empty() {
        return Ok(());
    }
    let invalid = |why: &str| {
        Err(TrainError::Invalid(format!(
            "recompute_checkpoints {c:?}: {why}"
        )))
    };
    let ModelConfig::Network(net) = model else {
        return invalid(
            "checkpoints are a network's block boundaries; the MLP recomputes whole stages",
        );
    };
    if !config.recompute {
        return invalid("checkpoints need recomputation (--recompute)");
    }
    if config.pipeline.is_some() {
        return invalid(
            "a pipeline's stage inputs are its checkpoints; give checkpoints without --pipeline-stages",
        );
    }
    crate::model::check_checkpoints(net.blocks()?.len(), c)?;
    Ok(())
}

/// The result of a joined thread, a panic as [`TrainError::Panicked`].
fn joined<T>(h: std::thread::ScopedJoinHandle<'_, Result<T, TrainError>>) -> Result<T, TrainError> {
    h.join().unwrap_or_else(|p| {
        let what = p
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| p.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(TrainError::Panicked(what))
    })
}

/// The summary among threads' results, or the error that caused the
/// others.
fn combine(
    results: Vec<Result<Option<Summary>, TrainError>>,
) -> Result<Option<Summary>, TrainError> {
    let mut summary = None;
    let mut errors = Vec::new();
    for r in results {
        match r {
            Ok(Some(s)) => summary = Some(s),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    first_cause(errors).map_or(Ok(summary), Err)
}

/// The error that caused the others: not one reporting that a peer failed
/// or went away.
fn first_cause(errors: Vec<TrainError>) -> Option<TrainError> {
    let secondary = |e: &TrainError| {
        matches!(
            e,
            TrainError::Collective(CommError::PeerFailed { .. } | CommError::Aborted { .. })
        ) || matches!(e, TrainError::Model(crate::model::ModelError::Group { .. }))
    };
    let mut errors = errors;
    match errors.iter().position(|e| !secondary(e)) {
        Some(i) => Some(errors.swap_remove(i)),
        None => errors.into_iter().next(),
    }
}

/// What every replica thread of an instance shares.
struct RunContext<'a> {
    trainer: &'a Trainer,
    options: &'a RunOptions,
    observer: Observer<'a>,
    resume: Option<&'a ResumeState>,
    init: &'a [Vec<f32>],
    first_step: u64,
    /// The step the run stops before (`total` unless interrupted).
    stop: u64,
    /// Steps of the whole run (the learning-rate schedule's length).
    total: u64,
}

impl RunContext<'_> {
    /// One replica's thread: its steps, and on the first replica the
    /// records, evaluations and checkpoints.
    fn replica(
        &self,
        global: usize,
        comm: ReplicaComm,
        mlp: Model,
        rx: &Receiver<MicroBatch>,
    ) -> Result<Option<Summary>, TrainError> {
        let t = self.trainer;
        let config = &t.config;
        let started = Instant::now();
        let mut replica = Replica::new(config, &t.flat, comm, mlp, self.init, self.resume)?;
        let reporter = global == 0;
        let spec = *t.layout.replica_target()?.spec();
        let time_of =
            |stages: &[StageCycles], checkpointed| t.step_time(&spec, (stages, checkpointed));
        let mut report = Report::new(config, self.options.continuation.sim_seconds);
        let mut streak = Streak::new(self.options.divergence, self.options.continuation.bad_steps);
        let mut batches = Vec::with_capacity(config.gradient_accumulation);
        // Until a step has run (a resumed run with nothing left): no compute.
        let mut time = time_of(&[], 0);
        for step in self.first_step..self.stop {
            batches.clear();
            for _ in 0..config.gradient_accumulation {
                batches.push(rx.recv().map_err(|_| {
                    TrainError::Invalid("the infeed stopped before the run's last step".into())
                })?);
            }
            let outcome = replica.step(&batches, step, self.total)?;
            let epoch = step / t.steps_per_epoch;
            let in_epoch = step % t.steps_per_epoch;
            if reporter {
                time = time_of(&outcome.stages, outcome.checkpointed_cycles);
                if report.trace.is_none() {
                    report.trace = replica.model.last_profile().map(|p| p.chrome_trace());
                }
                report.step(step, epoch, &outcome, time.total(), started);
                let call_ends = (in_epoch + 1).is_multiple_of(config.device_iterations as u64)
                    || in_epoch + 1 == t.steps_per_epoch;
                if call_ends {
                    report.flush(self.observer);
                }
            }
            if let Err(diverged) = streak.observe(step, &outcome) {
                // Every replica sees the same outcome and stops here.
                report.flush(self.observer);
                return Err(diverged);
            }
            let every = config.check_replicas_every;
            if every > 0 && (step + 1).is_multiple_of(every) && !replica.replicas_agree()? {
                return Err(TrainError::ReplicaDrift { step });
            }
            if in_epoch + 1 == t.steps_per_epoch {
                if reporter {
                    let record = evaluate(&mut replica, &t.layout, &t.test, epoch)?;
                    report.epochs.push(record);
                    (self.observer)(Event::Epoch(&record));
                }
                let every = self.options.checkpoint_every;
                if every > 0 && (epoch + 1).is_multiple_of(every) && step + 1 < self.stop {
                    self.checkpoint(&mut replica, step + 1, reporter)?;
                }
            }
        }
        if !replica.replicas_agree()? {
            return Err(TrainError::ReplicaDrift {
                step: self.stop.saturating_sub(1),
            });
        }
        self.checkpoint(&mut replica, self.stop.max(self.first_step), reporter)?;
        if !reporter {
            return Ok(None);
        }
        report.flush(self.observer);
        let test = evaluate(
            &mut replica,
            &t.layout,
            &t.test,
            self.stop / t.steps_per_epoch.max(1),
        )?;
        let memory = t.memory_report(&replica.model, &t.layout.replica_target()?);
        Ok(Some(Summary {
            steps: report.steps,
            epochs: report.epochs,
            weights: t.flat.unflatten(&replica.weights.to_f32(), |x| x),
            fingerprint: replica.weights.fingerprint(&t.flat),
            test,
            step_time: time,
            memory,
            global_batch: config.batch_plan().global_batch(),
            wall_seconds: started.elapsed().as_secs_f64(),
            trace: report.trace,
            outfeed: report.outfeed,
        }))
    }

    /// Writes a checkpoint after `steps` steps if asked to and the state is
    /// finite (every replica takes part: the state may be sharded).
    fn checkpoint(
        &self,
        replica: &mut Replica<'_>,
        steps: u64,
        reporter: bool,
    ) -> Result<(), TrainError> {
        let Some(path) = &self.options.checkpoint else {
            return Ok(());
        };
        let (master, state) = replica.gather_state()?;
        if !reporter {
            return Ok(());
        }
        let weights = replica.weights.to_f32();
        let weights16 = match &replica.weights {
            super::replica::Weights::F16(w) => Some(w.clone()),
            super::replica::Weights::F32(_) => None,
        };
        let saved = ResumeState {
            steps,
            applied: replica.counter.applied_steps(),
            master: master.unwrap_or(weights),
            weights16,
            state,
            buffers: replica.model.buffers(),
            scaler: replica.scaler.state(),
        };
        if !saved.is_finite() {
            // Keep the last finite checkpoint: this state cannot be resumed.
            return Ok(());
        }
        let t = self.trainer;
        checkpoint::build(&t.config, &t.data, &t.flat, &saved).save(path)?;
        Ok(())
    }
}

/// The first replica's records, flushed to the observer per host call.
struct Report {
    steps: Vec<StepRecord>,
    epochs: Vec<EpochRecord>,
    pending: usize,
    sim_seconds: f64,
    trace: Option<serde_json::Value>,
    outfeed: Outfeed<f32>,
}

impl Report {
    /// Records whose simulated time starts at `sim_seconds`.
    fn new(config: &TrainConfig, sim_seconds: f64) -> Self {
        Self {
            steps: Vec::new(),
            epochs: Vec::new(),
            pending: 0,
            sim_seconds,
            trace: None,
            outfeed: Outfeed::new(config.output_mode),
        }
    }

    fn step(&mut self, step: u64, epoch: u64, o: &StepOutcome, seconds: f64, started: Instant) {
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
        });
        self.pending += 1;
    }

    fn flush(&mut self, observer: Observer<'_>) {
        for r in &self.steps[self.steps.len() - self.pending..] {
            observer(Event::Step(r));
        }
        self.pending = 0;
    }
}

/// The test set through the first replica's inference program, in
/// micro-batches (the last, shorter one through a model of its size).
fn evaluate(
    replica: &mut Replica<'_>,
    layout: &Layout,
    test: &Dataset,
    epoch: u64,
) -> Result<EpochRecord, TrainError> {
    let mb = replica.model.micro_batch();
    let full = test.len() / mb * mb;
    let mut loss = 0.0f64;
    let mut correct = 0usize;
    let (mut inputs, mut labels) = (Vec::new(), Vec::new());
    let indices: Vec<usize> = (0..test.len()).collect();
    for chunk in indices[..full].chunks(mb) {
        test.gather(chunk, &mut inputs, &mut labels);
        let out = replica.model.evaluate(&inputs, &labels)?;
        loss += f64::from(out.loss_sum);
        correct += out.correct;
    }
    if full < test.len() {
        let rest = &indices[full..];
        let mut tail = Model::placed(
            replica.model.config(),
            layout.replica_target()?,
            &Placement::Spread,
            rest.len(),
            replica.model.compute(),
        )?;
        let weights = replica.weights.to_f32();
        let params = replica.flat.unflatten(&weights, |x| x);
        let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
        tail.set_params(&refs)?;
        tail.set_buffers(&replica.model.buffers())?;
        test.gather(rest, &mut inputs, &mut labels);
        let out = tail.evaluate(&inputs, &labels)?;
        loss += f64::from(out.loss_sum);
        correct += out.correct;
    }
    Ok(EpochRecord {
        epoch,
        test_loss: (loss / test.len() as f64) as f32,
        test_accuracy: correct as f32 / test.len() as f32,
    })
}
