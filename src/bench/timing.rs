//! Wall-clock timing of a kernel against its references in the same run.
//!
//! Every function is warmed up and calibrated on its own (calls per sample
//! doubled until a sample lasts at least [`Settings::min_sample`]), then the
//! samples are taken in interleaved rounds (subject, reference 1, reference 2,
//! subject, ...), so that a change in machine load while the benchmark runs
//! hits all of them alike. The reported time per call is the best sample:
//! on a shared machine the fastest run is the one least disturbed by others,
//! and the median is kept beside it for a sense of the spread.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::{Duration, Instant};

/// How much to time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settings {
    /// Timed samples per function; the best is reported.
    pub(crate) samples: NonZeroUsize,
    /// A sample repeats the function until it lasts at least this long, so
    /// that short kernels are not lost in the timer's resolution.
    pub(crate) min_sample: Duration,
}

/// The time per call of one function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Measurement {
    /// Seconds per call in the fastest sample.
    pub(crate) best: f64,
    /// Seconds per call in the median sample.
    pub(crate) median: f64,
    /// Calls per sample (after calibration).
    pub(crate) calls: u64,
}

/// The most calls a sample makes, however fast the function.
const MAX_CALLS: u64 = 1 << 20;

/// Times every function in `fns` as the [module docs](self) describe and
/// returns one measurement per function, in order.
///
/// The functions should use [`black_box`] on their inputs and outputs; this
/// harness additionally hides each call behind a `dyn FnMut`.
pub(crate) fn compare(settings: Settings, fns: &mut [&mut dyn FnMut()]) -> Vec<Measurement> {
    let calls: Vec<u64> = fns
        .iter_mut()
        .map(|f| calibrate(&mut **f, settings.min_sample))
        .collect();
    let mut per_call: Vec<Vec<f64>> = vec![Vec::with_capacity(settings.samples.get()); fns.len()];
    for _ in 0..settings.samples.get() {
        for ((f, &n), times) in fns.iter_mut().zip(&calls).zip(&mut per_call) {
            times.push(run(&mut **f, n).as_secs_f64() / n as f64);
        }
    }
    per_call
        .into_iter()
        .zip(calls)
        .map(|(mut times, calls)| {
            times.sort_by(f64::total_cmp);
            Measurement {
                best: times[0],
                median: times[times.len() / 2],
                calls,
            }
        })
        .collect()
}

/// Warms `f` up and returns how many calls make a sample of at least
/// `min_sample`.
fn calibrate(f: &mut dyn FnMut(), min_sample: Duration) -> u64 {
    // The first call touches fresh pages and fills caches and predictors.
    run(f, 1);
    let mut calls = 1;
    while calls < MAX_CALLS && run(f, calls) < min_sample {
        calls *= 2;
    }
    calls
}

/// Calls `f` `calls` times and returns the elapsed time.
fn run(f: &mut dyn FnMut(), calls: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..calls {
        black_box(&mut *f)();
    }
    start.elapsed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_measurement_per_function_with_positive_times() {
        let settings = Settings {
            samples: NonZeroUsize::new(3).unwrap(),
            min_sample: Duration::from_micros(50),
        };
        let mut a = vec![0u64; 256];
        let mut b = vec![0u64; 256];
        let mut fill_a = || a.fill(black_box(1));
        let mut fill_b = || b.fill(black_box(2));
        let m = compare(settings, &mut [&mut fill_a, &mut fill_b]);
        assert_eq!(m.len(), 2);
        for m in m {
            assert!(m.best > 0.0 && m.best <= m.median);
            assert!(m.calls >= 1);
        }
    }
}
