//! When a run has diverged: Keras' `TerminateOnNaN`, with the patience
//! loss scaling needs (a dynamic scaler skips steps while it backs off).

use super::TrainError;
use super::replica::StepOutcome;

/// Stop a run as diverged after `steps` consecutive bad steps: steps that
/// loss scaling skipped (non-finite gradients) or whose loss was not
/// finite. A good step starts the count again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Divergence {
    /// Consecutive bad steps that stop the run (0: never).
    pub steps: u64,
}

impl Divergence {
    /// The default patience: 20 steps, more than GradScaler's initial
    /// scale 2^16 needs to back off to 1 (16 halvings), and fewer than the
    /// default job runs in two epochs.
    pub const DEFAULT_STEPS: u64 = 20;

    /// Never stop.
    pub const NEVER: Self = Self { steps: 0 };
}

impl Default for Divergence {
    fn default() -> Self {
        Self {
            steps: Self::DEFAULT_STEPS,
        }
    }
}

/// The count of consecutive bad steps.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Streak {
    limit: Divergence,
    bad: u64,
}

impl Streak {
    /// A count that starts at `bad` (a resumed run's bad steps before its
    /// checkpoint).
    pub(crate) const fn new(limit: Divergence, bad: u64) -> Self {
        Self { limit, bad }
    }

    /// Counts step `step`; [`TrainError::Diverged`] when it makes `limit`
    /// bad steps in a row.
    pub(crate) fn observe(&mut self, step: u64, outcome: &StepOutcome) -> Result<(), TrainError> {
        if outcome.skipped || !outcome.loss.is_finite() {
            self.bad += 1;
        } else {
            self.bad = 0;
        }
        if self.limit.steps > 0 && self.bad >= self.limit.steps {
            return Err(TrainError::Diverged {
                step,
                steps: self.bad,
                loss: outcome.loss,
                loss_scale: outcome.loss_scale,
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(loss: f32, skipped: bool) -> StepOutcome {
        StepOutcome {
            loss,
            accuracy: 0.0,
            loss_scale: 1.0,
            lr: 0.0,
            skipped,
            stages: Vec::new(),
            checkpointed_cycles: 0,
            quant: Vec::new(),
        }
    }

    #[test]
    fn consecutive_skipped_or_non_finite_steps_stop_the_run() {
        let mut s = Streak::new(Divergence { steps: 3 }, 1);
        assert!(s.observe(10, &outcome(f32::NAN, false)).is_ok());
        let e = s.observe(11, &outcome(2.0, true)).unwrap_err();
        assert!(
            matches!(
                e,
                TrainError::Diverged {
                    step: 11,
                    steps: 3,
                    ..
                }
            ),
            "{e}"
        );
        // A good step starts again; `NEVER` never stops.
        let mut s = Streak::new(Divergence { steps: 2 }, 0);
        for (step, (loss, skipped)) in [(1.0, true), (1.0, false), (f32::INFINITY, false)]
            .into_iter()
            .enumerate()
        {
            assert!(s.observe(step as u64, &outcome(loss, skipped)).is_ok());
        }
        let mut s = Streak::new(Divergence::NEVER, 0);
        for step in 0..100 {
            assert!(s.observe(step, &outcome(f32::NAN, true)).is_ok());
        }
    }
}
