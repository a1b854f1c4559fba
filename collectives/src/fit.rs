//! Fitting the cost model to measurements: time collectives over message
//! sizes, then fit alpha and beta (and gamma) by least squares.
//!
//! A measurement's predicted time is `latency alpha + bandwidth beta +
//! reduce gamma`, with the coefficients ([`Terms`]) of the algorithm's
//! closed form ([`crate::cost::terms`]). The fit minimises the *relative*
//! squared error `sum ((predicted - measured) / measured)^2`, so that
//! microsecond messages count as much as second-long ones, and reports the
//! root-mean-square and worst relative error.
//!
//! ```no_run
//! use tessera_collectives::Algorithm;
//! use tessera_collectives::fit::{self, Plan};
//!
//! let plan = Plan::new(Algorithm::Ring, vec![1 << 10, 1 << 14, 1 << 18, 1 << 22]);
//! let samples = fit::measure_threads(4, &plan).unwrap();
//! let f = fit::fit(&samples, false).unwrap();
//! println!("alpha {:.2} us, beta {:.3} ns/B, rms error {:.1}%",
//!     f.alpha * 1e6, f.beta * 1e9, f.rms_error * 100.0);
//! ```

use std::time::{Duration, Instant};

use tessera_core::collective::{Algorithm, Collective, ReduceOp, Reducer};

use crate::collectives::{Collectives, Options};
use crate::comm::Communicator;
use crate::cost::{AlgorithmCost, Ports, Terms, terms};
use crate::error::{CommError, ConfigError};
use crate::thread::ThreadWorld;

/// One timed collective.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// Elements per rank (f32).
    pub len: usize,
    /// The cost model's coefficients for it.
    pub terms: Terms,
    /// Measured seconds: the best repetition of the slowest rank.
    pub seconds: f64,
}

/// Fitted parameters and how well they fit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fit {
    /// Seconds per message.
    pub alpha: f64,
    /// Seconds per byte through a port (with reductions folded in when
    /// gamma is not fitted).
    pub beta: f64,
    /// Seconds per byte combined, if fitted.
    pub gamma: Option<f64>,
    /// Root-mean-square relative error of the fitted times.
    pub rms_error: f64,
    /// Largest relative error.
    pub max_error: f64,
    /// Samples used.
    pub samples: usize,
}

impl Fit {
    /// The fitted time of `terms` (gamma 0 if not fitted).
    ///
    /// ```
    /// use tessera_collectives::cost::Terms;
    /// use tessera_collectives::fit::Fit;
    ///
    /// let f = Fit { alpha: 1e-6, beta: 1e-9, gamma: None, rms_error: 0.0, max_error: 0.0, samples: 4 };
    /// let t = Terms { latency: 2.0, bandwidth: 1e6, reduce: 5e5 };
    /// assert!((f.seconds(&t) - (2e-6 + 1e-3)).abs() < 1e-12);
    /// ```
    #[must_use]
    pub fn seconds(&self, terms: &Terms) -> f64 {
        let gamma = self.gamma.unwrap_or(0.0);
        if self.gamma.is_some() {
            terms.latency * self.alpha + terms.bandwidth * self.beta + terms.reduce * gamma
        } else {
            terms.latency * self.alpha + terms.bandwidth * self.beta
        }
    }
}

/// Fits alpha and beta (and gamma if `with_gamma`) to `samples` by
/// weighted least squares (relative error), with every coefficient at
/// least zero (a fit that wants a negative latency, as buffers that stream
/// from memory can, gets alpha 0 instead).
///
/// Without gamma the model is `latency alpha + bandwidth beta`: the
/// reductions' cost is folded into beta, which is then an all-reduce's
/// effective seconds per byte. Fitting gamma needs samples whose reduce and
/// bandwidth coefficients are not proportional (for instance all-gather
/// and all-reduce together).
///
/// ```
/// use tessera_collectives::cost::terms;
/// use tessera_collectives::fit::{self, Sample};
/// use tessera_collectives::{Algorithm, Collective, Ports};
///
/// // Times made from alpha = 2 us and beta = 1 ns per byte are fitted back.
/// let samples: Vec<Sample> = [1 << 10, 1 << 14, 1 << 18, 1 << 20]
///     .into_iter()
///     .map(|len| {
///         let terms = terms(Algorithm::Ring, Collective::AllReduce, 4, len, 4, Ports::Single).unwrap();
///         Sample { len, terms, seconds: 2e-6 * terms.latency + 1e-9 * terms.bandwidth }
///     })
///     .collect();
/// let f = fit::fit(&samples, false).unwrap();
/// assert!((f.alpha / 2e-6 - 1.0).abs() < 1e-3 && (f.beta / 1e-9 - 1.0).abs() < 1e-3);
/// assert!(f.rms_error < 1e-3);
/// ```
///
/// # Errors
/// [`ConfigError::Samples`] with fewer samples than unknowns, or samples
/// that do not determine them (all of one size, say); and for a negative or
/// zero measured time ([`ConfigError::NotPositive`]).
pub fn fit(samples: &[Sample], with_gamma: bool) -> Result<Fit, ConfigError> {
    let k = if with_gamma { 3 } else { 2 };
    let row = |s: &Sample| -> [f64; 3] {
        [
            s.terms.latency,
            s.terms.bandwidth,
            if with_gamma { s.terms.reduce } else { 0.0 },
        ]
    };
    let (coef, rms_error, max_error) = least_squares(samples, k, row)?;
    Ok(Fit {
        alpha: coef[0],
        beta: coef[1],
        gamma: with_gamma.then_some(coef[2]),
        rms_error,
        max_error,
        samples: samples.len(),
    })
}

/// One algorithm's fitted [`AlgorithmCost`] and how well it fits.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostFit {
    /// The cost.
    pub cost: AlgorithmCost,
    /// Root-mean-square relative error of the fitted times.
    pub rms_error: f64,
    /// Largest relative error.
    pub max_error: f64,
}

/// Fits one algorithm's [`AlgorithmCost`] to `samples` of it (f32
/// all-reduces over one rank count) as [`fit`] does alpha and beta, with
/// the bandwidth term split: the share `c = min(1, cache / bytes)` of a
/// buffer of `bytes` per rank at `beta_cached`, the rest at
/// `beta_streamed` ([`crate::cost::Fitted`]).
///
/// ```
/// use tessera_collectives::cost::terms;
/// use tessera_collectives::fit::{self, Sample};
/// use tessera_collectives::{Algorithm, Collective, Ports};
///
/// let samples: Vec<Sample> = [1 << 10, 1 << 14, 1 << 18, 1 << 20]
///     .into_iter()
///     .map(|len| {
///         let terms = terms(Algorithm::Ring, Collective::AllReduce, 4, len, 4, Ports::Single).unwrap();
///         Sample { len, terms, seconds: 2e-6 * terms.latency + 1e-9 * terms.bandwidth }
///     })
///     .collect();
/// let f = fit::fit_algorithm(&samples, 1_048_576.0).unwrap();
/// assert!((f.cost.alpha / 2e-6 - 1.0).abs() < 1e-2);
/// assert!(f.rms_error < 1e-2);
/// ```
///
/// # Errors
/// As [`fit`]; [`ConfigError::Samples`] also when the samples do not span
/// both sides of `cache`.
pub fn fit_algorithm(samples: &[Sample], cache: f64) -> Result<CostFit, ConfigError> {
    let row = |s: &Sample| -> [f64; 3] {
        let bytes = (s.len * 4) as f64;
        let cached = if bytes > 0.0 {
            (cache / bytes).min(1.0)
        } else {
            1.0
        };
        [
            s.terms.latency,
            s.terms.bandwidth * cached,
            s.terms.bandwidth * (1.0 - cached),
        ]
    };
    let (coef, rms_error, max_error) = least_squares(samples, 3, row)?;
    Ok(CostFit {
        cost: AlgorithmCost {
            alpha: coef[0],
            beta_cached: coef[1],
            beta_streamed: coef[2],
        },
        rms_error,
        max_error,
    })
}

/// The coefficients `x` (the first `k` of three, each at least zero) that
/// minimise `sum ((row(s) . x - s.seconds) / s.seconds)^2`, with the
/// root-mean-square and largest relative error.
fn least_squares(
    samples: &[Sample],
    k: usize,
    row: impl Fn(&Sample) -> [f64; 3],
) -> Result<([f64; 3], f64, f64), ConfigError> {
    let singular = ConfigError::Samples {
        found: samples.len(),
        needed: k,
    };
    if samples.len() < k {
        return Err(singular);
    }
    if let Some(bad) = samples
        .iter()
        .find(|s| !(s.seconds.is_finite() && s.seconds > 0.0))
    {
        return Err(ConfigError::NotPositive {
            field: "seconds",
            value: bad.seconds,
        });
    }
    // Normal equations of the weighted problem: rows and target divided by
    // the measured time. Columns are scaled to unit size first so that
    // latencies (~1) and byte counts (~1e8) do not ruin the conditioning.
    let mut scale = [0.0f64; 3];
    for s in samples {
        let x = row(s);
        for j in 0..k {
            scale[j] = scale[j].max((x[j] / s.seconds).abs());
        }
    }
    if scale[..k].contains(&0.0) {
        return Err(singular);
    }
    let mut a = [[0.0f64; 3]; 3];
    let mut b = [0.0f64; 3];
    for s in samples {
        let x = row(s);
        let w: Vec<f64> = (0..k).map(|j| x[j] / s.seconds / scale[j]).collect();
        for i in 0..k {
            for j in 0..k {
                a[i][j] += w[i] * w[j];
            }
            b[i] += w[i];
        }
    }
    solve(a, b, k).ok_or(singular)?;
    // Times cannot have negative parts: least squares with every
    // coefficient >= 0, by trying each set of coefficients held at zero
    // (at most 7 for three unknowns) and keeping the best feasible fit.
    let mut best: Option<([f64; 3], f64, f64)> = None;
    for zero in 0u32..(1 << k) {
        let free: Vec<usize> = (0..k).filter(|j| zero & (1 << j) == 0).collect();
        let Some(x) = restricted(&a, &b, &free) else {
            continue;
        };
        let mut coef = [0.0f64; 3];
        for (i, &fi) in free.iter().enumerate() {
            coef[fi] = x[i] / scale[fi];
        }
        let (rms, max) = errors(samples, &coef, &row);
        if best.is_none_or(|(_, r, _)| rms < r) {
            best = Some((coef, rms, max));
        }
    }
    best.ok_or(singular)
}

/// The solution of the normal equations `a x = b` restricted to the
/// columns `free`, if it exists and is at least zero.
fn restricted(a: &[[f64; 3]; 3], b: &[f64; 3], free: &[usize]) -> Option<[f64; 3]> {
    if free.is_empty() {
        return None;
    }
    let mut a2 = [[0.0f64; 3]; 3];
    let mut b2 = [0.0f64; 3];
    for (i, &fi) in free.iter().enumerate() {
        for (j, &fj) in free.iter().enumerate() {
            a2[i][j] = a[fi][fj];
        }
        b2[i] = b[fi];
    }
    let x = solve(a2, b2, free.len())?;
    x[..free.len()].iter().all(|&v| v >= 0.0).then_some(x)
}

/// The root-mean-square and largest relative error of `row(s) . coef`.
fn errors(samples: &[Sample], coef: &[f64; 3], row: &impl Fn(&Sample) -> [f64; 3]) -> (f64, f64) {
    let mut sq = 0.0;
    let mut max = 0.0f64;
    for s in samples {
        let x = row(s);
        let predicted: f64 = (0..3).map(|j| x[j] * coef[j]).sum();
        let e = (predicted - s.seconds) / s.seconds;
        sq += e * e;
        max = max.max(e.abs());
    }
    ((sq / samples.len() as f64).sqrt(), max)
}

/// Solves the `k x k` system by Gaussian elimination with partial
/// pivoting; `None` if it is (numerically) singular.
// Indices read best in elimination.
#[allow(clippy::needless_range_loop)]
fn solve(mut a: [[f64; 3]; 3], mut b: [f64; 3], k: usize) -> Option<[f64; 3]> {
    let norm = a.iter().flatten().fold(0.0f64, |m, x| m.max(x.abs()));
    for col in 0..k {
        let pivot = (col..k).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col].abs() <= 1e-12 * norm {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..k {
            let m = a[row][col] / a[col][col];
            for c in col..k {
                a[row][c] -= m * a[col][c];
            }
            b[row] -= m * b[col];
        }
    }
    let mut x = [0.0f64; 3];
    for row in (0..k).rev() {
        let mut s = b[row];
        for c in row + 1..k {
            s -= a[row][c] * x[c];
        }
        x[row] = s / a[row][row];
    }
    Some(x)
}

/// What to measure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// The collective (all-reduce by default).
    pub collective: Collective,
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Buffer lengths in f32 elements.
    pub sizes: Vec<usize>,
    /// Timed repetitions per size (the best is kept).
    pub reps: usize,
    /// Untimed repetitions first.
    pub warmup: usize,
    /// How the transport's messages share bandwidth, for the coefficients.
    pub ports: Ports,
    /// Per-collective timeout.
    pub timeout: Duration,
}

impl Plan {
    /// All-reduce by `algorithm` over `sizes`, 5 repetitions after 1
    /// warm-up, one port, a 60 s timeout.
    ///
    /// ```
    /// use tessera_collectives::fit::Plan;
    /// use tessera_collectives::{Algorithm, Collective};
    ///
    /// let plan = Plan::new(Algorithm::HalvingDoubling, vec![1 << 10, 1 << 20]);
    /// assert_eq!((plan.collective, plan.reps, plan.warmup), (Collective::AllReduce, 5, 1));
    /// ```
    #[must_use]
    pub const fn new(algorithm: Algorithm, sizes: Vec<usize>) -> Self {
        Self {
            collective: Collective::AllReduce,
            algorithm,
            sizes,
            reps: 5,
            warmup: 1,
            ports: Ports::Single,
            timeout: Duration::from_secs(60),
        }
    }
}

/// Times `plan` over `comm`'s ranks: every rank calls this; each size is
/// run `warmup + reps` times after a barrier, and a sample's time is the
/// best repetition of the slowest rank (all-reduced with Max). Every rank
/// returns the same samples.
///
/// ```
/// use tessera_collectives::fit::{self, Plan};
/// use tessera_collectives::{Algorithm, ThreadWorld};
///
/// let mut plan = Plan::new(Algorithm::Ring, vec![64, 256]);
/// (plan.reps, plan.warmup) = (1, 0);
/// let per_rank = ThreadWorld::run(2, |comm| fit::measure(comm, &plan).unwrap()).unwrap();
/// for samples in per_rank {
///     let lens: Vec<usize> = samples.unwrap().iter().map(|s| s.len).collect();
///     assert_eq!(lens, [64, 256]);
/// }
/// ```
///
/// # Errors
/// [`CommError`] from the collectives (the communicator is then aborted).
pub fn measure<C: Communicator>(comm: C, plan: &Plan) -> Result<Vec<Sample>, CommError> {
    let p = comm.size();
    let options = Options::new()
        .with_algorithm(plan.algorithm)
        .with_timeout(plan.timeout);
    let mut c = Collectives::new(comm).with_options(options);
    let sum = Reducer::new(ReduceOp::Sum);
    let mut out = Vec::with_capacity(plan.sizes.len());
    for &len in &plan.sizes {
        let mut buf = vec![1.0f32; len];
        let mut times = vec![0.0f32; plan.reps];
        for rep in 0..plan.warmup + plan.reps {
            c.barrier()?;
            let start = Instant::now();
            c.run(plan.collective, &mut buf, sum)?;
            let t = start.elapsed().as_secs_f32();
            if rep >= plan.warmup {
                times[rep - plan.warmup] = t;
            }
            buf.fill(1.0);
        }
        c.set_options(options.with_algorithm(Algorithm::HalvingDoubling));
        c.all_reduce(&mut times, Reducer::new(ReduceOp::Max))?;
        c.set_options(options);
        let best = times.iter().copied().fold(f32::INFINITY, f32::min);
        out.push(Sample {
            len,
            terms: terms(plan.algorithm, plan.collective, p, len, 4, plan.ports)?,
            seconds: f64::from(best),
        });
    }
    Ok(out)
}

/// [`measure`] on a [`ThreadWorld`] of `p` ranks.
///
/// ```
/// use tessera_collectives::fit::{self, Plan};
/// use tessera_collectives::Algorithm;
///
/// let mut plan = Plan::new(Algorithm::HalvingDoubling, vec![128]);
/// (plan.reps, plan.warmup) = (2, 0);
/// let samples = fit::measure_threads(3, &plan).unwrap();
/// assert_eq!(samples.len(), 1);
/// assert!(samples[0].seconds > 0.0);
/// ```
///
/// # Errors
/// As [`measure`]; [`CommError::PeerFailed`] if a rank panicked.
pub fn measure_threads(p: usize, plan: &Plan) -> Result<Vec<Sample>, CommError> {
    let results = ThreadWorld::run(p, |comm| measure(comm, plan))?;
    let mut first = None;
    for (rank, r) in results.into_iter().enumerate() {
        let samples = r.map_err(|_| CommError::PeerFailed {
            rank,
            cause: crate::error::Cause::Panicked,
        })??;
        first.get_or_insert(samples);
    }
    Ok(first.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn synthetic(alpha: f64, beta: f64, gamma: f64, noise: &[f64]) -> Vec<Sample> {
        let mut out = Vec::new();
        let mut k = 0;
        for c in [Collective::AllReduce, Collective::AllGather] {
            for (a, p) in [(Algorithm::Ring, 4), (Algorithm::HalvingDoubling, 8)] {
                for len in [16usize, 1 << 10, 1 << 14, 1 << 18, 1 << 22] {
                    let t = terms(a, c, p, len, 4, Ports::Single).unwrap();
                    let exact = t.latency * alpha + t.bandwidth * beta + t.reduce * gamma;
                    let e = noise.get(k % noise.len().max(1)).copied().unwrap_or(0.0);
                    k += 1;
                    out.push(Sample {
                        len,
                        terms: t,
                        seconds: exact * (1.0 + e),
                    });
                }
            }
        }
        out
    }

    #[test]
    fn recovers_known_alpha_beta_gamma_from_exact_data() {
        let (alpha, beta, gamma) = (7.5e-6, 0.4e-9, 0.15e-9);
        let s = synthetic(alpha, beta, gamma, &[]);
        let f = fit(&s, true).unwrap();
        assert!((f.alpha / alpha - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.beta / beta - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.gamma.unwrap() / gamma - 1.0).abs() < 1e-9, "{f:?}");
        assert!(f.rms_error < 1e-9 && f.max_error < 1e-9, "{f:?}");
        assert_eq!(f.samples, s.len());
    }

    #[test]
    fn recovers_alpha_beta_without_gamma_and_reports_noise() {
        // Copy-only samples: alpha and beta alone.
        let (alpha, beta) = (20e-6, 1.0e-9);
        let s: Vec<Sample> = synthetic(alpha, beta, 0.0, &[])
            .into_iter()
            .filter(|s| s.terms.reduce == 0.0)
            .collect();
        let f = fit(&s, false).unwrap();
        assert!((f.alpha / alpha - 1.0).abs() < 1e-9, "{f:?}");
        assert!((f.beta / beta - 1.0).abs() < 1e-9, "{f:?}");
        assert_eq!(f.gamma, None);
        // +-5% noise: parameters within 10%, the error reported as such.
        let noise = [0.05, -0.05, 0.03, -0.02, 0.0, 0.04, -0.04];
        let s = synthetic(alpha, beta, 0.0, &noise);
        let f = fit(&s, false).unwrap();
        assert!((f.alpha / alpha - 1.0).abs() < 0.1, "{f:?}");
        assert!((f.beta / beta - 1.0).abs() < 0.1, "{f:?}");
        assert!(f.rms_error > 0.01 && f.max_error <= 0.11, "{f:?}");
    }

    #[test]
    fn an_algorithms_cost_is_recovered_on_both_sides_of_the_cache() {
        let (alpha, cached, streamed, cache) = (3e-6, 0.2e-9, 0.5e-9, 1_048_576.0);
        let samples: Vec<Sample> = (10..=26)
            .step_by(2)
            .map(|k| {
                let len = 1usize << k;
                let t = terms(
                    Algorithm::Ring,
                    Collective::AllReduce,
                    4,
                    len,
                    4,
                    Ports::Single,
                )
                .unwrap();
                let c = (cache / (len * 4) as f64).min(1.0);
                Sample {
                    len,
                    terms: t,
                    seconds: t.latency * alpha + t.bandwidth * (c * cached + (1.0 - c) * streamed),
                }
            })
            .collect();
        let f = fit_algorithm(&samples, cache).unwrap();
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 1e-6;
        assert!(close(f.cost.alpha, alpha), "{f:?}");
        assert!(close(f.cost.beta_cached, cached), "{f:?}");
        assert!(close(f.cost.beta_streamed, streamed), "{f:?}");
        assert!(f.rms_error < 1e-6 && f.max_error < 1e-6, "{f:?}");
        // All in cache: beta_streamed is undetermined.
        assert!(fit_algorithm(&samples[..3], cache).is_err());
    }

    #[test]
    fn coefficients_are_never_negative() {
        // Times that shrink per byte with size ask for a negative alpha
        // (and a steeper beta); the fit holds alpha at 0.
        let s: Vec<Sample> = [
            (1usize << 20, 0.5e-3),
            (1 << 22, 2.5e-3),
            (1 << 24, 11.0e-3),
        ]
        .iter()
        .map(|&(len, seconds)| Sample {
            len,
            terms: terms(
                Algorithm::Ring,
                Collective::AllGather,
                2,
                len,
                4,
                Ports::Single,
            )
            .unwrap(),
            seconds,
        })
        .collect();
        let f = fit(&s, false).unwrap();
        assert_eq!(f.alpha, 0.0, "{f:?}");
        assert!(f.beta > 0.0);
    }

    #[test]
    fn underdetermined_fits_are_errors() {
        let s = synthetic(1e-6, 1e-9, 0.0, &[]);
        assert_eq!(
            fit(&s[..1], false),
            Err(ConfigError::Samples {
                found: 1,
                needed: 2
            })
        );
        // One size only: latency and bandwidth are proportional.
        let one: Vec<Sample> = s
            .iter()
            .filter(|x| x.len == 1 << 10)
            .take(1)
            .copied()
            .collect();
        let two = [one[0], one[0]];
        assert!(fit(&two, false).is_err());
        // Reduce proportional to bandwidth (all-reduce alone): no gamma.
        let ar: Vec<Sample> = s
            .iter()
            .filter(|x| x.terms.reduce > 0.0)
            .filter(|x| x.terms.latency == 6.0)
            .copied()
            .collect();
        assert!(fit(&ar, true).is_err());
        let mut bad = s.clone();
        bad[0].seconds = 0.0;
        assert!(matches!(
            fit(&bad, false),
            Err(ConfigError::NotPositive { .. })
        ));
    }

    #[test]
    fn measuring_threads_gives_one_sample_per_size() {
        // No timing assertions: the machine is shared. Just that it runs.
        let mut plan = Plan::new(Algorithm::Ring, vec![0, 64, 4096]);
        plan.reps = 2;
        let s = measure_threads(3, &plan).unwrap();
        assert_eq!(s.iter().map(|s| s.len).collect::<Vec<_>>(), [0, 64, 4096]);
        assert!(s.iter().all(|s| s.seconds >= 0.0));
        assert_eq!(s[0].terms.latency, 4.0);
    }
}
