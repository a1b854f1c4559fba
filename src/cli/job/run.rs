//! Running a job's trainer (in this process, or as one instance under
//! `mpirun`), its failures as exit statuses, and the progress bar.

use std::sync::atomic::{AtomicU64, Ordering};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tessera_sim::train::{Event, Observer, RunOptions, Summary, TrainError, Trainer};

use crate::cli::Failure;
use crate::cli::output::one_line;

/// A [`TrainError`] as a [`Failure`]: the job's own failures (a
/// collective, drifting replicas, a panic) exit with status 1, a diverged
/// run with 3, everything the user can fix (the configuration, the data,
/// a checkpoint) with 2.
pub(in crate::cli) fn usage(e: TrainError) -> Failure {
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
pub(in crate::cli) fn run_job(
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
pub(in crate::cli) struct Progress {
    bar: ProgressBar,
    epochs: u64,
    global_batch: usize,
    seen: AtomicU64,
}

impl Progress {
    /// A bar over `trainer`'s steps, drawn if `show`; `label` leads it.
    pub(in crate::cli) fn new(show: bool, trainer: &Trainer, label: &str) -> Self {
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
    pub(in crate::cli) fn observe(&self, event: Event<'_>) {
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
    pub(in crate::cli) fn finish(&self) {
        self.bar.finish_and_clear();
    }
}
