//! One replica's thread: its steps epoch by epoch, and on the first
//! replica the records, evaluations and checkpoints.

use std::sync::mpsc::Receiver;
use std::time::Instant;

use super::TrainError;
use super::checkpoint::{self, ResumeState};
use super::comm::ReplicaComm;
use super::divergence::Streak;
use super::evaluate::Evaluation;
use super::options::RunOptions;
use super::records::{Event, Observer, Report, Summary};
use super::replica::Replica;
use super::trainer::Trainer;
use crate::data::MicroBatch;
use crate::model::{Model, StageCycles};

/// What every replica thread of an instance shares.
pub(super) struct RunContext<'a> {
    pub(super) trainer: &'a Trainer,
    pub(super) options: &'a RunOptions,
    pub(super) observer: Observer<'a>,
    pub(super) resume: Option<&'a ResumeState>,
    pub(super) init: &'a [Vec<f32>],
    pub(super) first_step: u64,
    /// The step the run stops before (`total` unless interrupted).
    pub(super) stop: u64,
    /// Steps of the whole run (the learning-rate schedule's length).
    pub(super) total: u64,
}

impl RunContext<'_> {
    /// One replica's thread: its steps, and on the first replica the
    /// records, evaluations and checkpoints.
    pub(super) fn replica(
        &self,
        global: usize,
        comm: ReplicaComm,
        model: Model,
        rx: &Receiver<MicroBatch>,
    ) -> Result<Option<Summary>, TrainError> {
        let t = self.trainer;
        let config = &t.config;
        let started = Instant::now();
        let mut replica = Replica::new(config, &t.flat, comm, model, self.init, self.resume)?;
        let reporter = global == 0;
        let target = t.layout.replica_target()?;
        let spec = *target.spec();
        let mut evaluation = Evaluation::new(&t.test, &t.network, target);
        let time_of =
            |stages: &[StageCycles], checkpointed| t.step_time(&spec, (stages, checkpointed));
        let mut report = Report::new(config, self.options.continuation.sim_seconds);
        let mut streak = Streak::new(self.options.divergence, self.options.continuation.bad_steps);
        let mut batches = Vec::with_capacity(config.gradient_accumulation);
        // Until a step has run (a resumed run with nothing left): no compute.
        let mut time = time_of(&[], 0);
        let mut stop = self.stop;
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
                    let record = evaluation.run(&mut replica, epoch)?;
                    report.epochs.push(record);
                    (self.observer)(Event::Epoch(&record));
                }
                if step + 1 < self.stop && self.interrupted(&mut replica)? {
                    stop = step + 1;
                    break;
                }
                let every = self.options.checkpoint_every;
                if every > 0 && (epoch + 1).is_multiple_of(every) && step + 1 < self.stop {
                    self.checkpoint(&mut replica, step + 1, reporter)?;
                }
            }
        }
        if !replica.replicas_agree()? {
            return Err(TrainError::ReplicaDrift {
                step: stop.saturating_sub(1),
            });
        }
        self.checkpoint(&mut replica, stop.max(self.first_step), reporter)?;
        if !reporter {
            return Ok(None);
        }
        report.flush(self.observer);
        let test = evaluation.run(&mut replica, stop / t.steps_per_epoch.max(1))?;
        let memory = t.memory_report(&replica.model, &target);
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
            interrupted: stop < self.stop,
        }))
    }

    /// Whether any replica's [`RunOptions::interrupt`] is raised: the
    /// largest of their flags, so that every replica (over threads and MPI
    /// processes) stops at the same epoch's end. No collective without an
    /// interrupt.
    fn interrupted(&self, replica: &mut Replica<'_>) -> Result<bool, TrainError> {
        let Some(flag) = &self.options.interrupt else {
            return Ok(false);
        };
        Ok(replica.any_replica(flag.is_raised())?)
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
