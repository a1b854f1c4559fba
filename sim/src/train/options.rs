//! Where a run starts and what it writes.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::divergence::Divergence;

/// Where a resumed run's records continue from: how its history (the
/// records of the steps before its checkpoint) ends.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Continuation {
    /// The last step's [`StepRecord::sim_seconds`](super::StepRecord::sim_seconds).
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
    /// When to stop the run as diverged (with [`TrainError::Diverged`](super::TrainError::Diverged),
    /// writing no further checkpoint).
    pub divergence: Divergence,
    /// A resumed run's history, which its records continue.
    pub continuation: Continuation,
    /// Stop at the end of the epoch in which this is raised, with a
    /// checkpoint, as [`RunOptions::stop_after_epochs`] would have there
    /// ([`Summary::interrupted`](super::Summary::interrupted) says so).
    pub interrupt: Option<Interrupt>,
}

/// A flag that stops a run at the end of the epoch in which it is raised
/// ([`RunOptions::interrupt`]): what a Ctrl-C handler raises, so that an
/// interrupted run keeps its work. At each epoch's end the replicas
/// (over threads and MPI processes) take the largest of their flags, so
/// they all stop at the same step.
///
/// ```
/// use tessera_sim::train::Interrupt;
///
/// let flag = Interrupt::default();
/// let handler = flag.clone(); // the same flag, for a signal handler
/// assert!(!flag.is_raised());
/// handler.raise();
/// assert!(flag.is_raised());
/// ```
#[derive(Clone, Debug, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    /// Raises the flag.
    ///
    /// ```
    /// use tessera_sim::train::Interrupt;
    ///
    /// let flag = Interrupt::default();
    /// flag.raise();
    /// assert!(flag.is_raised());
    /// ```
    pub fn raise(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether the flag is raised.
    ///
    /// ```
    /// use tessera_sim::train::Interrupt;
    ///
    /// assert!(!Interrupt::default().is_raised());
    /// ```
    #[must_use]
    pub fn is_raised(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// The flag itself, for a signal handler that sets an `AtomicBool`
    /// (`signal_hook::flag::register`).
    ///
    /// ```
    /// use std::sync::atomic::Ordering;
    /// use tessera_sim::train::Interrupt;
    ///
    /// let flag = Interrupt::default();
    /// flag.flag().store(true, Ordering::Relaxed);
    /// assert!(flag.is_raised());
    /// ```
    #[must_use]
    pub fn flag(&self) -> &Arc<AtomicBool> {
        &self.0
    }
}

/// Two interrupts are equal when they are the same flag.
impl PartialEq for Interrupt {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}
