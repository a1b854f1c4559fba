//! The outfeed: values a training run reports per step (loss, accuracy),
//! kept according to an output mode and readable while the run goes on.

use std::fmt;
use std::ops::AddAssign;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard};

use super::DataError;

/// Which of the per-step values an [`Outfeed`] keeps (PopTorch's
/// `outputMode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputMode {
    /// Every value, in the order pushed.
    All,
    /// One entry: the sum of every value so far, with the latest step.
    Sum,
    /// One entry: the latest value and its step.
    Final,
    /// The values of steps `N - 1, 2N - 1, ...` (`(step + 1) % N == 0`);
    /// `EveryN(0)` keeps what `EveryN(1)` keeps (every value).
    EveryN(usize),
}

impl FromStr for OutputMode {
    type Err = DataError;

    /// `all`, `sum`, `final` or `every:N` with `N >= 1`.
    fn from_str(s: &str) -> Result<Self, DataError> {
        match s {
            "all" => Ok(Self::All),
            "sum" => Ok(Self::Sum),
            "final" => Ok(Self::Final),
            _ => s
                .strip_prefix("every:")
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n >= 1)
                .map(Self::EveryN)
                .ok_or_else(|| DataError::BadOutputMode(s.to_owned())),
        }
    }
}

impl fmt::Display for OutputMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Sum => f.write_str("sum"),
            Self::Final => f.write_str("final"),
            Self::EveryN(n) => write!(f, "every:{n}"),
        }
    }
}

/// A shared, clonable log of `(step, value)` pairs filtered by an
/// [`OutputMode`]: the trainer pushes, a monitor reads snapshots while the
/// run goes on. Clones share the same log.
///
/// ```
/// use tessera_sim::data::{OutputMode, Outfeed};
///
/// let losses = Outfeed::new(OutputMode::Sum);
/// let reader = losses.clone();
/// for step in 0..4 {
///     losses.push(step, 0.5f32);
/// }
/// assert_eq!(reader.snapshot(), vec![(3, 2.0)]);
/// ```
#[derive(Debug)]
pub struct Outfeed<T> {
    mode: OutputMode,
    entries: Arc<Mutex<Vec<(usize, T)>>>,
}

impl<T> Clone for Outfeed<T> {
    fn clone(&self) -> Self {
        Self {
            mode: self.mode,
            entries: Arc::clone(&self.entries),
        }
    }
}

impl<T: AddAssign + Copy + Default> Outfeed<T> {
    /// An empty outfeed keeping values by `mode`.
    ///
    /// ```
    /// use tessera_sim::data::{OutputMode, Outfeed};
    ///
    /// assert!(Outfeed::<f32>::new(OutputMode::All).snapshot().is_empty());
    /// ```
    #[must_use]
    pub fn new(mode: OutputMode) -> Self {
        Self {
            mode,
            entries: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// The output mode.
    ///
    /// ```
    /// use tessera_sim::data::{OutputMode, Outfeed};
    ///
    /// assert_eq!(Outfeed::<f32>::new(OutputMode::EveryN(5)).mode(), OutputMode::EveryN(5));
    /// ```
    #[must_use]
    pub fn mode(&self) -> OutputMode {
        self.mode
    }

    /// The log, even if a thread panicked while holding it (every update
    /// leaves it consistent).
    fn entries(&self) -> MutexGuard<'_, Vec<(usize, T)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Records `value` of step `step` according to the mode. Sums add in
    /// push order (pushes from one thread keep the sum deterministic).
    ///
    /// ```
    /// use tessera_sim::data::{OutputMode, Outfeed};
    ///
    /// let every2 = Outfeed::new(OutputMode::EveryN(2));
    /// let last = Outfeed::new(OutputMode::Final);
    /// for step in 0..5 {
    ///     every2.push(step, step as f32);
    ///     last.push(step, step as f32);
    /// }
    /// assert_eq!(every2.snapshot(), vec![(1, 1.0), (3, 3.0)]);
    /// assert_eq!(last.snapshot(), vec![(4, 4.0)]);
    /// ```
    pub fn push(&self, step: usize, value: T) {
        let mut entries = self.entries();
        match self.mode {
            OutputMode::All => entries.push((step, value)),
            OutputMode::Sum => {
                let mut sum = entries.first().map_or_else(T::default, |&(_, s)| s);
                sum += value;
                entries.clear();
                entries.push((step, sum));
            }
            OutputMode::Final => {
                entries.clear();
                entries.push((step, value));
            }
            OutputMode::EveryN(n) => {
                if (step + 1).is_multiple_of(n.max(1)) {
                    entries.push((step, value));
                }
            }
        }
    }

    /// A copy of what is kept now.
    ///
    /// ```
    /// use tessera_sim::data::{OutputMode, Outfeed};
    ///
    /// let all = Outfeed::new(OutputMode::All);
    /// all.push(0, 1u32);
    /// assert_eq!(all.snapshot(), vec![(0, 1)]);
    /// assert_eq!(all.snapshot(), vec![(0, 1)]); // still kept
    /// ```
    #[must_use]
    pub fn snapshot(&self) -> Vec<(usize, T)> {
        self.entries().clone()
    }

    /// What is kept now, leaving the outfeed empty (a host call's outputs,
    /// taken after the call).
    ///
    /// ```
    /// use tessera_sim::data::{OutputMode, Outfeed};
    ///
    /// let all = Outfeed::new(OutputMode::All);
    /// all.push(0, 1u32);
    /// all.push(1, 2);
    /// assert_eq!(all.take(), vec![(0, 1), (1, 2)]);
    /// assert!(all.snapshot().is_empty());
    /// ```
    #[must_use]
    pub fn take(&self) -> Vec<(usize, T)> {
        std::mem::take(&mut *self.entries())
    }
}
