//! Running a trainer: instances feeding replicas on host threads, each
//! replica stepping in lockstep with the others.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use tessera_collectives::{Collectives, CommError, Communicator, ThreadCommunicator, ThreadWorld};

use super::TrainError;
use super::checkpoint::{self, ResumeState};
use super::comm::{self, InstanceLink, ReplicaComm};
use super::epochs::RunContext;
use super::options::RunOptions;
use super::records::{Observer, Summary};
use super::trainer::Trainer;
use crate::data::{Infeed, MicroBatch};
use crate::model::Model;

impl Trainer {
    /// Runs every instance and replica on threads of this process.
    ///
    /// # Errors
    /// A [`TrainError`]: the first failure of any replica (the others stop
    /// with it).
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
    /// // 24 training samples in global batches of 4: 6 steps.
    /// assert_eq!(summary.steps.len(), 6);
    /// assert!((0.0..=1.0).contains(&summary.test.test_accuracy));
    /// ```
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
    ///
    /// ```
    /// use tessera_collectives::ThreadCommunicator;
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
    /// let trainer = Trainer::new(config, data).unwrap();
    /// let one = trainer.run_instance::<ThreadCommunicator>(0, None, &RunOptions::default(), &|_| {});
    /// // One instance: it is instance 0 and returns the summary, the same as `run`'s.
    /// let all = trainer.run(&RunOptions::default(), &|_| {}).unwrap();
    /// assert_eq!(one.unwrap().unwrap().fingerprint, all.fingerprint);
    /// ```
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
        let init = self.network.init(config.seed).expect("a validated model");
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
        let compute = config.precision.compute();
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
