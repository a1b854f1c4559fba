//! Where a run starts and what it writes.

use std::path::PathBuf;

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
}
