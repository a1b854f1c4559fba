//! An algorithm's closed-form cost terms ([`Terms`], [`terms`]): steps,
//! bytes and reduced bytes per collective.

use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};

use super::link::{Link, Ports};

/// An algorithm's cost as coefficients: `latency` messages in sequence,
/// `bandwidth` bytes through the busiest port, `reduce` bytes combined on
/// the critical path. Time = `latency alpha + bandwidth beta + reduce
/// gamma`; [`crate::fit`] fits alpha, beta (and gamma) to measurements
/// through these same coefficients.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Terms {
    /// Number of alpha terms (steps).
    pub latency: f64,
    /// Bytes charged at beta.
    pub bandwidth: f64,
    /// Bytes charged at gamma.
    pub reduce: f64,
}

impl Terms {
    /// The time over `link` with reductions at `gamma` seconds per byte.
    ///
    /// ```
    /// use tessera_collectives::cost::{Terms, terms};
    /// use tessera_collectives::{Link, Ports};
    ///
    /// let t = Terms { latency: 2.0, bandwidth: 1000.0, reduce: 500.0 };
    /// let link = Link::from_alpha_beta(1e-6, 1e-9, Ports::Single).unwrap();
    /// let s = t.seconds(&link, 2e-9);
    /// assert!((s - (2e-6 + 1e-6 + 1e-6)).abs() < 1e-15);
    /// ```
    #[must_use]
    pub fn seconds(&self, link: &Link, gamma: f64) -> f64 {
        self.latency * link.alpha() + self.bandwidth * link.beta() + self.reduce * gamma
    }
}

/// The closed-form cost of `collective` by `algorithm` over `p` ranks on
/// buffers of `len` elements of `elem_bytes` bytes, for links with `ports`
/// (see the [module docs](crate::cost)).
///
/// ```
/// use tessera_collectives::cost::terms;
/// use tessera_collectives::{Algorithm, Collective, Ports};
///
/// // A ring all-reduce of 4 Ki f32 over 4 ranks: fragments of 4 KiB.
/// let t = terms(Algorithm::Ring, Collective::AllReduce, 4, 4096, 4, Ports::Single).unwrap();
/// assert_eq!((t.latency, t.bandwidth, t.reduce), (6.0, 24576.0, 12288.0));
/// ```
///
/// # Errors
/// As [`CollectiveSchedule::new`] (no ranks, a root out of range, an overflowing
/// length).
pub fn terms(
    algorithm: Algorithm,
    collective: Collective,
    p: usize,
    len: usize,
    elem_bytes: usize,
    ports: Ports,
) -> Result<Terms, tessera_core::collective::Error> {
    let s = CollectiveSchedule::new(algorithm, collective, p, len)?;
    if p == 1 {
        return Ok(Terms::default());
    }
    let steps = s.steps() as f64;
    let f = (s.fragment_len() * elem_bytes) as f64;
    let pf = p as f64;
    let q = pf - 1.0;
    let reduces = collective.reduces();
    let t = |latency: f64, bandwidth: f64, reduce: f64| Terms {
        latency,
        bandwidth,
        reduce: if reduces { reduce } else { 0.0 },
    };
    Ok(match algorithm {
        Algorithm::Ring | Algorithm::BidirectionalRing => {
            let half = if algorithm == Algorithm::BidirectionalRing && ports == Ports::PerPeer {
                0.5
            } else {
                1.0
            };
            match collective {
                Collective::AllReduce => t(steps, 2.0 * q * f * half, q * f),
                Collective::ReduceScatter | Collective::AllGather => t(steps, q * f * half, q * f),
                // Pipelined chains: one fragment per step.
                Collective::Reduce { .. } | Collective::Broadcast { .. } => {
                    t(steps, steps * f * half, steps * f)
                }
            }
        }
        Algorithm::HalvingDoubling => {
            let big = 1usize << (usize::BITS - 1 - p.leading_zeros());
            let n = pf * f;
            let core = (big as f64 - 1.0) / big as f64 * n;
            if big == p {
                match collective {
                    Collective::AllReduce
                    | Collective::Reduce { .. }
                    | Collective::Broadcast { .. } => t(steps, 2.0 * core, core),
                    Collective::ReduceScatter | Collective::AllGather => t(steps, core, core),
                }
            } else {
                // A fold (whole buffers) before, an unfold after.
                match collective {
                    Collective::AllReduce | Collective::Broadcast { .. } => {
                        t(steps, n + 2.0 * core + n, n + core)
                    }
                    Collective::Reduce { .. } => t(steps, n + 2.0 * core, n + core),
                    Collective::ReduceScatter => t(steps, n + core + f, n + core),
                    Collective::AllGather => t(steps, f + core + n, 0.0),
                }
            }
        }
        Algorithm::DoubleBinaryTree => {
            // Chunks are half fragments, `p` per tree. Through one port a
            // rank sends all it sends: all-reduce `p` chunks up each tree
            // and `2 p` down the tree where it is inner; reduce-scatter and
            // all-gather about `3 p`; reduce and broadcast `2 p`. With a
            // link per peer, a link carries one chunk per step.
            let chunk = (s.fragment_len().div_ceil(2) * elem_bytes) as f64;
            let sent = match collective {
                Collective::AllReduce => 4.0 * pf,
                Collective::ReduceScatter | Collective::AllGather => 3.0 * pf,
                Collective::Reduce { .. } | Collective::Broadcast { .. } => 2.0 * pf,
            };
            let bandwidth = match ports {
                Ports::Single => sent * chunk,
                Ports::PerPeer => steps * chunk,
            };
            t(steps, bandwidth, 2.0 * pf * chunk)
        }
    })
}
