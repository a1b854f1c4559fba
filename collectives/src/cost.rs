//! The alpha-beta-gamma cost model, algorithm selection, and nccl-tests'
//! bus bandwidth.
//!
//! A message of `b` bytes over a [`Link`] costs `alpha + b * beta`
//! (`alpha` the latency, `beta = 1 / (bandwidth * efficiency)`), and
//! combining `b` bytes of contributions costs `b * gamma`
//! ([`Topology::gamma`]). An algorithm's time is the sum over its steps of
//! the busiest rank's cost (SEMANTICS.md section 4, MPICH's model; NCCL's
//! `tuning.cc` does the same per algorithm and protocol and takes the
//! minimum). With `p` ranks, `F` the fragment's bytes (`ceil(n / p)`
//! elements, so `p F` is the padded buffer) and `k = lg p`:
//!
//! | algorithm | all-reduce |
//! |---|---|
//! | ring | `2 (p - 1) alpha + 2 (p - 1) F beta + (p - 1) F gamma` |
//! | bidirectional ring | as the ring, with `beta / 2` when each peer has its own link ([`Ports::PerPeer`]) |
//! | halving-doubling, `p = 2^k` | `2 k alpha + 2 (p - 1) F beta + (p - 1) F gamma` |
//! | halving-doubling, other `p` | a fold and an unfold step of the whole buffer around the above for the `2^k` survivors |
//! | double binary tree | `S alpha + 2 p F beta + p F gamma` with `S = p - 1 + 2 H` pipelined steps (`H` the trees' height, about `lg p`): through one port a rank sends `p` half-fragment chunks up each tree and `2 p` down the tree where it is inner (`2 n beta`); with a link per peer, `S F / 2 beta`, towards `n beta / 2` |
//!
//! Reduce-scatter and all-gather are the halves of all-reduce (all-gather
//! without gamma); [`terms`] gives every collective. The step counts are
//! the core schedules' own ([`CollectiveSchedule::steps`]), so the latency terms are
//! exact. For [`Order::Deterministic`] on rings and trees, whose messages
//! carry several partial sums, and for anything the closed forms round
//! off, [`CostModel::schedule_time`] charges every message of the actual
//! schedule.
//!
//! A link may carry [`Fitted`] costs: alpha and beta per algorithm and
//! rank count, fitted to a transport's measured all-reduce times (with
//! [`crate::fit`]), for transports whose algorithms do not share one
//! alpha and beta. The thread transport's ring, for one, moves through
//! the buffer piece by piece with each piece in cache, while its
//! halving-doubling streams every step from memory: at 4 ranks on 2 cores
//! the ring was 1.6 to 2.4x faster from 4 MiB up, against the single
//! link's prediction that halving-doubling's fewer steps always win. Then an
//! algorithm's time is its terms' `latency` times its alpha plus their
//! `bandwidth` times its beta, reductions included (the fits fold them in),
//! with one beta while the buffer stays in cache and another beyond.
//!
//! [`Order::Deterministic`]: tessera_core::collective::Order::Deterministic

use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, ReduceOp};
use tessera_core::fp::Element;

use crate::error::ConfigError;

/// How a rank's messages of one step share its bandwidth.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ports {
    /// One port: a rank's messages in a step go one after the other
    /// (shared memory copied by one thread, one network card).
    Single,
    /// A full-duplex link to each peer (IPU-Links, a switch with a port per
    /// rank): messages to different peers go at once.
    PerPeer,
}

/// One kind of link: latency, bandwidth and efficiency, and possibly the
/// costs of each algorithm measured over it ([`Fitted`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Link {
    latency: f64,
    bandwidth: f64,
    efficiency: f64,
    ports: Ports,
    fitted: Option<Fitted>,
}

/// One algorithm's cost on a transport, fitted to measured all-reduce
/// times ([`crate::fit::fit_algorithm`]): seconds per step, and seconds per
/// byte of the algorithm's bandwidth term ([`Terms::bandwidth`]),
/// reductions included, while a rank's buffer fits in [`Fitted::cache`]
/// and for the bytes beyond.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AlgorithmCost {
    /// Seconds per step.
    pub alpha: f64,
    /// Seconds per byte of a buffer that stays in cache.
    pub beta_cached: f64,
    /// Seconds per byte beyond [`Fitted::cache`].
    pub beta_streamed: f64,
}

/// A transport's measured costs: per rank count measured, each
/// algorithm's [`AlgorithmCost`], in [`Algorithm::ALL`]'s order. A rank
/// count between two measured ones takes the lower one's costs (fewer
/// than the first, the first's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Fitted {
    /// Bytes of a rank's buffer charged at `beta_cached`: of a buffer of
    /// `b` bytes, the bandwidth term's share `min(1, cache / b)`.
    pub cache: f64,
    /// `(ranks, costs)`, ranks increasing.
    pub ranks: &'static [(usize, [AlgorithmCost; 4])],
}

impl Fitted {
    /// The thread transport ([`crate::ThreadWorld`]) on the 2-core machine
    /// of the README's figures, 2 and 4 ranks, in cache up to 1 MiB per
    /// rank: fitted by
    /// `cargo run --release -p tessera-collectives --example fit -- --terms`
    /// to the best times of 8 runs of `tessera bench allreduce --json` (f32
    /// Sum, every algorithm, 4 KiB to 256 MiB) on a machine shared with
    /// other jobs, so noisy: root-mean-square relative errors of 17 to 22%
    /// at 2 ranks, 24 to 27% at 4. What matters is the choice, and in those
    /// runs every pick was within 3.2% of the fastest algorithm: at 4 ranks
    /// halving-doubling up to 64 KiB, the ring from 256 KiB.
    pub const THREADS: Self = Self {
        cache: THREADS_CACHE,
        ranks: THREADS_RANKS,
    };

    /// MPI processes on the same machine as [`Self::THREADS`] (Open MPI
    /// 4.1 over shared memory, the `mpi` feature), 2 and 4 ranks: fitted as
    /// it is, by `fit -- --terms --mpi`, to 3 runs each of `mpirun -n 2`
    /// and `mpirun -n 4 --oversubscribe tessera bench allreduce --transport
    /// mpi --json`, noisier still (root-mean-square relative errors 31 to
    /// 35% at 2 ranks, 17 to 36% at 4). Over those runs and 2 more of each,
    /// its picks were within 1.06x of the fastest algorithm (median of the
    /// runs) at every size; the single link's (the ring at 2 ranks,
    /// halving-doubling at 4) were up to 3.8x at 2 ranks and 1.22 to 1.46x
    /// at 4 from 1 MiB.
    pub const PROCESSES: Self = Self {
        cache: THREADS_CACHE,
        ranks: PROCESSES_RANKS,
    };

    /// The costs for `p` ranks.
    fn costs(&self, p: usize) -> Option<&[AlgorithmCost; 4]> {
        let mut found = self.ranks.first().map(|(_, c)| c);
        for (ranks, costs) in self.ranks {
            if *ranks <= p {
                found = Some(costs);
            }
        }
        found
    }

    /// The fitted time of `algorithm` over `p` ranks with these `terms`, on
    /// a buffer of `bytes` per rank; `None` if nothing was fitted.
    #[must_use]
    pub fn seconds(
        &self,
        algorithm: Algorithm,
        p: usize,
        bytes: usize,
        terms: &Terms,
    ) -> Option<f64> {
        let i = Algorithm::ALL.iter().position(|&a| a == algorithm)?;
        let c = self.costs(p)?[i];
        let cached = if bytes == 0 {
            1.0
        } else {
            (self.cache / bytes as f64).min(1.0)
        };
        let beta = cached * c.beta_cached + (1.0 - cached) * c.beta_streamed;
        Some(terms.latency * c.alpha + terms.bandwidth * beta)
    }
}

impl Link {
    /// A link with `latency` seconds per message, `bandwidth` bytes per
    /// second, of which a fraction `efficiency` is reached.
    ///
    /// # Errors
    /// [`ConfigError`] unless `latency >= 0`, `bandwidth > 0` (both finite)
    /// and `0 < efficiency <= 1`.
    pub fn new(
        latency: f64,
        bandwidth: f64,
        efficiency: f64,
        ports: Ports,
    ) -> Result<Self, ConfigError> {
        if !(latency.is_finite() && latency >= 0.0) {
            return Err(ConfigError::Negative {
                field: "latency",
                value: latency,
            });
        }
        if !(bandwidth.is_finite() && bandwidth > 0.0) {
            return Err(ConfigError::NotPositive {
                field: "bandwidth",
                value: bandwidth,
            });
        }
        if !(efficiency > 0.0 && efficiency <= 1.0) {
            return Err(ConfigError::Efficiency { value: efficiency });
        }
        Ok(Self {
            latency,
            bandwidth,
            efficiency,
            ports,
            fitted: None,
        })
    }

    /// The same link with each algorithm's cost over it measured:
    /// estimates then use `fitted`, not this link's alpha, beta and the
    /// topology's gamma.
    #[must_use]
    pub const fn with_fitted(self, fitted: Fitted) -> Self {
        Self {
            fitted: Some(fitted),
            ..self
        }
    }

    /// The measured costs of the algorithms over this link, if any.
    #[must_use]
    pub const fn fitted(&self) -> Option<&Fitted> {
        self.fitted.as_ref()
    }

    /// A link from fitted `alpha` (seconds) and `beta` (seconds per byte),
    /// efficiency 1.
    ///
    /// # Errors
    /// As [`Link::new`], for `alpha >= 0` and `beta > 0`.
    pub fn from_alpha_beta(alpha: f64, beta: f64, ports: Ports) -> Result<Self, ConfigError> {
        if !(beta.is_finite() && beta > 0.0) {
            return Err(ConfigError::NotPositive {
                field: "beta",
                value: beta,
            });
        }
        Self::new(alpha, 1.0 / beta, 1.0, ports)
    }

    /// Seconds per message.
    #[must_use]
    pub const fn alpha(&self) -> f64 {
        self.latency
    }

    /// Seconds per byte: `1 / (bandwidth * efficiency)`.
    #[must_use]
    pub fn beta(&self) -> f64 {
        1.0 / (self.bandwidth * self.efficiency)
    }

    /// Bytes per second before efficiency.
    #[must_use]
    pub const fn bandwidth(&self) -> f64 {
        self.bandwidth
    }

    /// The fraction of the bandwidth reached.
    #[must_use]
    pub const fn efficiency(&self) -> f64 {
        self.efficiency
    }

    /// How messages of one step share the bandwidth.
    #[must_use]
    pub const fn ports(&self) -> Ports {
        self.ports
    }
}

/// Where the ranks are: domains of `domain` consecutive ranks joined by
/// fast links (IPU-Links inside an IPU-Link domain, shared memory inside a
/// machine), domains joined by slower ones (GW-Links, the network), and
/// the speed of the reduction arithmetic.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Topology {
    domain: usize,
    intra: Link,
    inter: Link,
    reduce_bandwidth: f64,
}

impl Topology {
    /// One kind of link between every pair of ranks; reductions at
    /// `reduce_bandwidth` bytes of contributions per second.
    ///
    /// # Errors
    /// [`ConfigError::NotPositive`] unless `reduce_bandwidth > 0`.
    pub fn flat(link: Link, reduce_bandwidth: f64) -> Result<Self, ConfigError> {
        Self::two_level(usize::MAX, link, link, reduce_bandwidth)
    }

    /// Domains of `domain` consecutive ranks joined by `intra` links, the
    /// domains joined by `inter` links.
    ///
    /// # Errors
    /// [`ConfigError::NotPositive`] for `domain == 0` or
    /// `reduce_bandwidth <= 0`.
    pub fn two_level(
        domain: usize,
        intra: Link,
        inter: Link,
        reduce_bandwidth: f64,
    ) -> Result<Self, ConfigError> {
        if domain == 0 {
            return Err(ConfigError::NotPositive {
                field: "domain",
                value: 0.0,
            });
        }
        if !(reduce_bandwidth.is_finite() && reduce_bandwidth > 0.0) {
            return Err(ConfigError::NotPositive {
                field: "reduce_bandwidth",
                value: reduce_bandwidth,
            });
        }
        Ok(Self {
            domain,
            intra,
            inter,
            reduce_bandwidth,
        })
    }

    /// Threads of one process on the 2-core machines Tessera is developed
    /// on, as the thread transport ([`crate::ThreadWorld`]) runs them: each
    /// algorithm's measured cost ([`Fitted::THREADS`]). Its link's own
    /// alpha and beta (what [`CostModel::schedule_time`] charges) are the
    /// round numbers of the earlier single fit: 10 us per step (a
    /// condition-variable wake-up) and 0.33 ns per byte, reductions at
    /// 4 GB/s. Measure your own machine with [`crate::fit`].
    #[must_use]
    pub fn shared_memory() -> Self {
        let link = Self::SHARED_MEMORY.with_fitted(Fitted::THREADS);
        Self {
            domain: usize::MAX,
            intra: link,
            inter: link,
            reduce_bandwidth: 4.0e9,
        }
    }

    /// MPI processes on one machine, as the MPI transport runs them: each
    /// algorithm's measured cost ([`Fitted::PROCESSES`]) over
    /// [`Topology::shared_memory`]'s link.
    #[must_use]
    pub const fn processes() -> Self {
        let link = Self::SHARED_MEMORY.with_fitted(Fitted::PROCESSES);
        Self {
            domain: usize::MAX,
            intra: link,
            inter: link,
            reduce_bandwidth: 4.0e9,
        }
    }

    /// The shared-memory link's own alpha and beta: 10 us, 3 GB/s, one
    /// port.
    const SHARED_MEMORY: Link = Link {
        latency: 10.0e-6,
        bandwidth: 3.0e9,
        efficiency: 1.0,
        ports: Ports::Single,
        fitted: None,
    };

    /// Graphcore Mk2 IPUs, one rank per IPU, in IPU-Link domains of
    /// `domain` IPUs (64 for a POD64) joined by GW-Links (SEMANTICS.md
    /// section 5). Only the links' figures: where they run, and what a
    /// collective costs on them, is [`crate::topology::Fabric`] and
    /// [`crate::route`].
    ///
    /// - IPU-Links: 128 Gbit/s (16 GB/s) each way per link (Graphcore's
    ///   GC200: 10 IPU-Links, 320 GB/s in all) at 0.85 efficiency
    ///   (PopLibs' test model);
    /// - GW-Links: 100 Gbit/s each way per link, 2 per IPU-M2000
    ///   (IPU-M2000 and Bow-2000 datasheets), each shared by its 4 IPUs;
    /// - latencies are assumptions, not measurements (Graphcore publishes
    ///   none): 1 us per IPU-Link hop, 10 us per GW-Link message (a RoCE
    ///   round through two IPU-Gateways);
    /// - reductions at 1 TB/s (the tiles' aggregate f32 add rate is far
    ///   above the links' bandwidth, so gamma hardly matters).
    ///
    /// # Errors
    /// [`ConfigError::NotPositive`] for `domain == 0`.
    pub fn ipu_pod(domain: usize) -> Result<Self, ConfigError> {
        Self::two_level(
            domain,
            Self::IPU_LINK,
            Self::GW_LINK_PER_IPU,
            Self::IPU_REDUCE_BANDWIDTH,
        )
    }

    /// One IPU-Link of [`Topology::ipu_pod`]: 1 us, 16 GB/s each way
    /// (128 Gbit/s, as `tessera-sim`'s `IpuParams::link_bits_per_second`),
    /// 0.85, [`Ports::PerPeer`].
    pub const IPU_LINK: Link = Link {
        latency: 1.0e-6,
        bandwidth: 16.0e9,
        efficiency: 0.85,
        ports: Ports::PerPeer,
        fitted: None,
    };

    /// One IPU's share of one GW-Link in [`Topology::ipu_pod`]: 10 us,
    /// 100 Gbit/s over the IPU-M2000's 4 IPUs, [`Ports::Single`].
    pub const GW_LINK_PER_IPU: Link = Link {
        latency: 10.0e-6,
        bandwidth: 100.0e9 / 8.0 / 4.0,
        efficiency: 1.0,
        ports: Ports::Single,
        fitted: None,
    };

    /// The IPUs' reduction rate in [`Topology::ipu_pod`], bytes of
    /// contributions per second.
    pub const IPU_REDUCE_BANDWIDTH: f64 = 1.0e12;

    /// Ranks per fast domain.
    #[must_use]
    pub const fn domain(&self) -> usize {
        self.domain
    }

    /// The links inside a domain.
    #[must_use]
    pub const fn intra(&self) -> &Link {
        &self.intra
    }

    /// The links between domains.
    #[must_use]
    pub const fn inter(&self) -> &Link {
        &self.inter
    }

    /// Seconds per byte of contributions combined.
    #[must_use]
    pub fn gamma(&self) -> f64 {
        1.0 / self.reduce_bandwidth
    }

    /// The link a collective among `members` (world ranks) runs on: the
    /// intra-domain link if they are all in one domain, else the
    /// inter-domain one (the slowest link of a ring sets its pace).
    #[must_use]
    pub fn link_for(&self, members: impl IntoIterator<Item = usize>) -> &Link {
        let mut domains = members.into_iter().map(|r| r / self.domain);
        match domains.next() {
            Some(first) if domains.all(|d| d == first) => &self.intra,
            Some(_) => &self.inter,
            None => &self.intra,
        }
    }
}

impl Default for Topology {
    fn default() -> Self {
        Self::shared_memory()
    }
}

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
    #[must_use]
    pub fn seconds(&self, link: &Link, gamma: f64) -> f64 {
        self.latency * link.alpha() + self.bandwidth * link.beta() + self.reduce * gamma
    }
}

/// The closed-form cost of `collective` by `algorithm` over `p` ranks on
/// buffers of `len` elements of `elem_bytes` bytes, for links with `ports`
/// (see the [module docs](self)).
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

/// A cost estimate.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Estimate {
    /// The algorithm.
    pub algorithm: Algorithm,
    /// Predicted seconds.
    pub seconds: f64,
    /// The coefficients.
    pub terms: Terms,
}

/// The cost model over a [`Topology`]: estimates, NCCL-style selection of
/// the cheapest algorithm per message size, and step-by-step costing of
/// actual schedules. The simulator charges communication with the same
/// numbers.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CostModel {
    topology: Topology,
}

impl CostModel {
    /// The model over `topology`.
    #[must_use]
    pub const fn new(topology: Topology) -> Self {
        Self { topology }
    }

    /// The topology.
    #[must_use]
    pub const fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The closed-form time of one algorithm on `link`: with the link's
    /// [`Fitted`] costs if it has them, else with its alpha and beta and
    /// the topology's gamma.
    ///
    /// # Errors
    /// As [`terms`].
    pub fn estimate(
        &self,
        algorithm: Algorithm,
        collective: Collective,
        p: usize,
        len: usize,
        elem_bytes: usize,
        link: &Link,
    ) -> Result<Estimate, tessera_core::collective::Error> {
        let terms = terms(algorithm, collective, p, len, elem_bytes, link.ports())?;
        let bytes = len.saturating_mul(elem_bytes);
        let seconds = link
            .fitted()
            .and_then(|f| f.seconds(algorithm, p, bytes, &terms))
            .unwrap_or_else(|| terms.seconds(link, self.topology.gamma()));
        Ok(Estimate {
            algorithm,
            seconds,
            terms,
        })
    }

    /// The cheapest of `candidates` (the first of equals, in the order
    /// given) by [`CostModel::estimate`].
    ///
    /// ```
    /// use tessera_collectives::cost::{CostModel, Link, Ports, Topology};
    /// use tessera_core::collective::{Algorithm, Collective};
    ///
    /// let link = Link::new(5e-6, 10e9, 1.0, Ports::Single).unwrap();
    /// let model = CostModel::new(Topology::flat(link, 20e9).unwrap());
    /// let pick = |n| model.select(Collective::AllReduce, 16, n, 4, &link, &Algorithm::ALL).unwrap();
    /// // Latency-bound: fewest steps. Bandwidth-bound: least data per port.
    /// assert_eq!(pick(16).algorithm, Algorithm::HalvingDoubling);
    /// assert_ne!(pick(1 << 26).algorithm, Algorithm::DoubleBinaryTree);
    /// ```
    ///
    /// # Errors
    /// As [`terms`]; [`tessera_core::collective::Error::NoRanks`] for no
    /// candidates.
    pub fn select(
        &self,
        collective: Collective,
        p: usize,
        len: usize,
        elem_bytes: usize,
        link: &Link,
        candidates: &[Algorithm],
    ) -> Result<Estimate, tessera_core::collective::Error> {
        let mut best: Option<Estimate> = None;
        for &a in candidates {
            let e = self.estimate(a, collective, p, len, elem_bytes, link)?;
            if best.is_none_or(|b| e.seconds < b.seconds) {
                best = Some(e);
            }
        }
        best.ok_or(tessera_core::collective::Error::NoRanks)
    }

    /// The time of a hierarchical all-reduce of `len` elements over `p`
    /// ranks in groups of `k` consecutive ranks: reduce-scatter inside each
    /// group on the intra-domain link, all-reduce of a fragment of
    /// `ceil(len / k)` across groups on the link the groups' members need,
    /// all-gather inside each group; each phase with its cheapest
    /// algorithm.
    ///
    /// # Errors
    /// As [`terms`]; [`tessera_core::collective::Error::RankOutOfRange`] if
    /// `k` does not divide `p`.
    pub fn hierarchical_all_reduce(
        &self,
        p: usize,
        k: usize,
        len: usize,
        elem_bytes: usize,
    ) -> Result<f64, tessera_core::collective::Error> {
        if k == 0 || !p.is_multiple_of(k) {
            return Err(tessera_core::collective::Error::RankOutOfRange { rank: k, size: p });
        }
        let m = p / k;
        let inner = self.topology.link_for(0..k);
        let outer = self.topology.link_for((0..m).map(|g| g * k));
        let all = &Algorithm::ALL;
        let rs = self.select(Collective::ReduceScatter, k, len, elem_bytes, inner, all)?;
        let frag = len.div_ceil(k);
        let ar = self.select(Collective::AllReduce, m, frag, elem_bytes, outer, all)?;
        let ag = self.select(Collective::AllGather, k, len, elem_bytes, inner, all)?;
        Ok(rs.seconds + ar.seconds + ag.seconds)
    }

    /// The time of an actual schedule, message by message: the sum over
    /// steps of `alpha` (if anything moves) plus `beta` times the busiest
    /// rank's bytes (its total with [`Ports::Single`], its largest message
    /// with [`Ports::PerPeer`]) plus `gamma` times the busiest rank's
    /// combined bytes. Exact where the closed forms round off: the
    /// deterministic order's extra partial sums, padding, uneven fragments.
    /// Bytes are those on the wire (padding excluded, partial sums of
    /// 16-bit values in f32).
    #[must_use]
    pub fn schedule_time<T: Element>(
        &self,
        s: &CollectiveSchedule,
        op: ReduceOp,
        link: &Link,
    ) -> f64 {
        let p = s.size();
        let mut total = 0.0;
        let mut step = usize::MAX;
        let mut sent = vec![0usize; p];
        let mut largest = vec![0usize; p];
        let mut combined = vec![0usize; p];
        let mut any = false;
        let gamma = self.topology.gamma();
        let mut flush =
            |sent: &mut [usize], largest: &mut [usize], combined: &mut [usize], any: &mut bool| {
                if *any {
                    let bytes = match link.ports() {
                        Ports::Single => sent.iter().max(),
                        Ports::PerPeer => largest.iter().max(),
                    };
                    let bytes = bytes.copied().unwrap_or(0) as f64;
                    let comb = combined.iter().max().copied().unwrap_or(0) as f64;
                    total += link.alpha() + bytes * link.beta() + comb * gamma;
                }
                sent.fill(0);
                largest.fill(0);
                combined.fill(0);
                *any = false;
            };
        s.transfers::<T>(op, |t| {
            if t.step != step {
                flush(&mut sent, &mut largest, &mut combined, &mut any);
                step = t.step;
            }
            let wire = (t.bytes * t.payload).checked_div(t.elements).unwrap_or(0);
            sent[t.from] += wire;
            largest[t.from] = largest[t.from].max(wire);
            combined[t.to] += t.combines * size_of::<T>();
            any = true;
        });
        flush(&mut sent, &mut largest, &mut combined, &mut any);
        total
    }
}

/// nccl-tests' bus-bandwidth factor: `2 (p - 1) / p` for all-reduce,
/// `(p - 1) / p` for reduce-scatter and all-gather, 1 for reduce and
/// broadcast. Bus bandwidth = algorithm bandwidth times the factor, so it
/// compares with the link's speed whatever `p`.
#[must_use]
pub fn bus_factor(collective: Collective, p: usize) -> f64 {
    let pf = p as f64;
    match collective {
        Collective::AllReduce => 2.0 * (pf - 1.0) / pf,
        Collective::ReduceScatter | Collective::AllGather => (pf - 1.0) / pf,
        Collective::Reduce { .. } | Collective::Broadcast { .. } => 1.0,
    }
}

/// nccl-tests' algorithm bandwidth: the buffer's `bytes` over `seconds`.
#[must_use]
pub fn algbw(bytes: usize, seconds: f64) -> f64 {
    bytes as f64 / seconds
}

/// nccl-tests' bus bandwidth: [`algbw`] times [`bus_factor`].
#[must_use]
pub fn busbw(collective: Collective, p: usize, bytes: usize, seconds: f64) -> f64 {
    algbw(bytes, seconds) * bus_factor(collective, p)
}

/// Bytes of a rank's buffer that [`Fitted::THREADS`] charges at
/// `beta_cached`: the 1 MiB L2 of a core on the machine it was fitted on.
const THREADS_CACHE: f64 = 1_048_576.0;

/// [`Fitted::THREADS`]' costs: `(ranks, [ring, bidirectional ring, double
/// binary tree, halving-doubling])`, alpha in seconds, betas in seconds per
/// byte, as the fit example prints them (4 of its 8 runs measured 1 MiB and
/// up only).
const THREADS_RANKS: &[(usize, [AlgorithmCost; 4])] = &[
    (
        2,
        [
            cost(1.565e-6, 9.675e-11, 2.246e-10),
            cost(2.067e-6, 1.167e-10, 4.268e-10),
            cost(1.731e-6, 6.382e-11, 1.873e-10),
            cost(1.574e-6, 9.303e-11, 2.325e-10),
        ],
    ),
    (
        4,
        [
            cost(3.645e-6, 2.614e-10, 2.477e-10),
            cost(5.976e-6, 2.787e-10, 4.810e-10),
            cost(6.099e-6, 2.075e-10, 3.677e-10),
            cost(4.314e-6, 2.892e-10, 4.866e-10),
        ],
    ),
];

/// [`Fitted::PROCESSES`]' costs, as [`THREADS_RANKS`].
const PROCESSES_RANKS: &[(usize, [AlgorithmCost; 4])] = &[
    (
        2,
        [
            cost(2.157e-6, 2.360e-10, 4.864e-10),
            cost(2.543e-6, 2.584e-10, 4.698e-10),
            cost(2.172e-6, 1.220e-10, 2.107e-10),
            cost(2.130e-6, 2.196e-10, 4.767e-10),
        ],
    ),
    (
        4,
        [
            cost(8.221e-6, 4.203e-10, 1.426e-9),
            cost(8.929e-6, 4.267e-10, 8.970e-10),
            cost(8.926e-6, 3.749e-10, 5.382e-10),
            cost(9.194e-6, 5.011e-10, 1.088e-9),
        ],
    ),
];

const fn cost(alpha: f64, beta_cached: f64, beta_streamed: f64) -> AlgorithmCost {
    AlgorithmCost {
        alpha,
        beta_cached,
        beta_streamed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(ports: Ports) -> Link {
        Link::new(3e-6, 2e9, 0.8, ports).unwrap()
    }

    fn model() -> CostModel {
        CostModel::new(Topology::flat(link(Ports::Single), 5e9).unwrap())
    }

    #[test]
    fn closed_forms_match_the_schedules_where_exact() {
        // Fragments that divide evenly, f32, schedule order: the closed
        // forms are the schedules' message-by-message cost.
        let m = model();
        for ports in [Ports::Single, Ports::PerPeer] {
            let l = link(ports);
            for p in [2usize, 3, 4, 5, 8, 16] {
                let len = p * 1024;
                for c in [
                    Collective::AllReduce,
                    Collective::ReduceScatter,
                    Collective::AllGather,
                ] {
                    for a in [Algorithm::Ring, Algorithm::BidirectionalRing] {
                        let s = CollectiveSchedule::new(a, c, p, len).unwrap();
                        let exact = m.schedule_time::<f32>(&s, ReduceOp::Sum, &l);
                        let closed = m.estimate(a, c, p, len, 4, &l).unwrap().seconds;
                        assert!(
                            (exact - closed).abs() <= 1e-9 * exact,
                            "{a:?} {c:?} p={p} {ports:?}: {exact} vs {closed}"
                        );
                    }
                    if p.is_power_of_two() {
                        let a = Algorithm::HalvingDoubling;
                        let s = CollectiveSchedule::new(a, c, p, len).unwrap();
                        let exact = m.schedule_time::<f32>(&s, ReduceOp::Sum, &l);
                        let closed = m.estimate(a, c, p, len, 4, &l).unwrap().seconds;
                        assert!(
                            (exact - closed).abs() <= 1e-9 * exact,
                            "{a:?} {c:?} p={p}: {exact} vs {closed}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn closed_forms_bound_the_other_schedules() {
        // Trees, non-powers of two, reduce and broadcast: within a factor
        // of two of the message-by-message cost (the closed forms charge
        // the busiest rank at every step).
        let m = model();
        let l = link(Ports::Single);
        for p in [3usize, 5, 6, 7, 12] {
            let len = p * 4096;
            for a in Algorithm::ALL {
                for c in [
                    Collective::AllReduce,
                    Collective::ReduceScatter,
                    Collective::AllGather,
                    Collective::Reduce { root: 1 },
                    Collective::Broadcast { root: 1 },
                ] {
                    let s = CollectiveSchedule::new(a, c, p, len).unwrap();
                    let exact = m.schedule_time::<f32>(&s, ReduceOp::Sum, &l);
                    let closed = m.estimate(a, c, p, len, 4, &l).unwrap().seconds;
                    let ratio = closed / exact;
                    assert!((0.5..=2.0).contains(&ratio), "{a:?} {c:?} p={p}: {ratio}");
                }
            }
        }
    }

    #[test]
    fn selection_follows_message_size() {
        let l = Link::new(10e-6, 10e9, 1.0, Ports::Single).unwrap();
        let m = CostModel::new(Topology::flat(l, 20e9).unwrap());
        let pick = |p, n| {
            m.select(Collective::AllReduce, p, n, 4, &l, &Algorithm::ALL)
                .unwrap()
                .algorithm
        };
        // Few steps win small messages; equal data per port ties the
        // ring with halving-doubling for large ones, and the tree sends
        // more through one port.
        assert_eq!(pick(16, 64), Algorithm::HalvingDoubling);
        assert_eq!(pick(8, 1), Algorithm::HalvingDoubling);
        let big = pick(16, 1 << 24);
        assert!(
            matches!(big, Algorithm::HalvingDoubling | Algorithm::Ring),
            "{big:?}"
        );
        // With a link per peer, the bidirectional ring halves the bandwidth
        // term and wins large messages.
        let l2 = Link::new(10e-6, 10e9, 1.0, Ports::PerPeer).unwrap();
        let e = m
            .select(Collective::AllReduce, 6, 1 << 24, 4, &l2, &Algorithm::ALL)
            .unwrap();
        assert!(
            matches!(
                e.algorithm,
                Algorithm::BidirectionalRing | Algorithm::DoubleBinaryTree
            ),
            "{e:?}"
        );
    }

    #[test]
    fn a_fitted_link_is_charged_each_algorithms_measured_cost() {
        const RANKS: &[(usize, [AlgorithmCost; 4])] = &[
            (2, [cost(1e-6, 1e-10, 2e-10); 4]),
            (
                4,
                [
                    cost(2e-6, 3e-10, 4e-10),
                    cost(5e-6, 1e-10, 1e-10),
                    cost(5e-6, 1e-10, 1e-10),
                    cost(7e-6, 5e-10, 6e-10),
                ],
            ),
        ];
        let fitted = Fitted {
            cache: 4096.0,
            ranks: RANKS,
        };
        let link = link(Ports::Single).with_fitted(fitted);
        let m = model();
        for (p, len, ring) in [
            // In cache: alpha and beta_cached.
            (4, 1024, (2e-6, 3e-10, 0.0)),
            // A 16 KiB buffer: a quarter of its bandwidth term in cache.
            (4, 4096, (2e-6, 0.25 * 3e-10, 0.75 * 4e-10)),
            // 5 and 8 ranks take the 4-rank costs.
            (5, 1024, (2e-6, 3e-10, 0.0)),
            (8, 1024, (2e-6, 3e-10, 0.0)),
        ] {
            let t = terms(
                Algorithm::Ring,
                Collective::AllReduce,
                p,
                len,
                4,
                Ports::Single,
            )
            .unwrap();
            let e = m
                .estimate(Algorithm::Ring, Collective::AllReduce, p, len, 4, &link)
                .unwrap();
            let want = t.latency * ring.0 + t.bandwidth * (ring.1 + ring.2);
            assert!(
                (e.seconds - want).abs() <= 1e-12 * want,
                "p={p} n={len}: {e:?}"
            );
        }
        let two = m
            .estimate(
                Algorithm::HalvingDoubling,
                Collective::AllReduce,
                2,
                64,
                4,
                &link,
            )
            .unwrap();
        assert!(
            (two.seconds - (2.0 * 1e-6 + 256.0 * 1e-10)).abs() < 1e-15,
            "{two:?}"
        );
        // The fitted costs, not the link's alpha and beta, choose.
        let pick = m
            .select(Collective::AllReduce, 4, 1 << 20, 4, &link, &Algorithm::ALL)
            .unwrap();
        assert_eq!(pick.algorithm, Algorithm::BidirectionalRing);
    }

    #[test]
    fn the_thread_transport_is_costed_as_measured() {
        // `tessera bench allreduce` at 4 thread ranks: halving-doubling's
        // fewer steps win small buffers, the ring (1.6 to 2.4x faster from
        // 4 MiB) large ones, which one link's alpha and beta cannot say.
        let m = CostModel::default();
        let link = *m.topology().intra();
        assert!(link.fitted().is_some());
        let pick = |p, bytes: usize| {
            m.select(
                Collective::AllReduce,
                p,
                bytes / 4,
                4,
                &link,
                &Algorithm::ALL,
            )
            .unwrap()
            .algorithm
        };
        for bytes in [4 << 10, 16 << 10, 64 << 10] {
            assert_eq!(pick(4, bytes), Algorithm::HalvingDoubling, "{bytes} B");
        }
        for bytes in [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20] {
            assert_eq!(pick(4, bytes), Algorithm::Ring, "{bytes} B");
        }
        // MPI processes have their own: not halving-doubling from 1 MiB at
        // 4 ranks (1.22 to 1.46x the fastest there).
        let m = CostModel::new(Topology::processes());
        let link = *m.topology().intra();
        for bytes in [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20] {
            let e = m
                .select(
                    Collective::AllReduce,
                    4,
                    bytes / 4,
                    4,
                    &link,
                    &Algorithm::ALL,
                )
                .unwrap();
            assert_ne!(e.algorithm, Algorithm::HalvingDoubling, "{bytes} B");
        }
    }

    #[test]
    fn bus_bandwidth_factors_are_nccl_tests() {
        assert_eq!(bus_factor(Collective::AllReduce, 4), 1.5);
        assert_eq!(bus_factor(Collective::ReduceScatter, 4), 0.75);
        assert_eq!(bus_factor(Collective::AllGather, 8), 0.875);
        assert_eq!(bus_factor(Collective::Broadcast { root: 0 }, 8), 1.0);
        assert_eq!(busbw(Collective::AllReduce, 2, 1000, 1e-6), 1e9);
    }

    #[test]
    fn invalid_configurations_are_typed_errors() {
        assert_eq!(
            Link::new(-1.0, 1.0, 1.0, Ports::Single),
            Err(ConfigError::Negative {
                field: "latency",
                value: -1.0
            })
        );
        assert!(matches!(
            Link::new(0.0, 0.0, 1.0, Ports::Single),
            Err(ConfigError::NotPositive {
                field: "bandwidth",
                ..
            })
        ));
        assert!(matches!(
            Link::new(0.0, 1.0, 1.5, Ports::Single),
            Err(ConfigError::Efficiency { .. })
        ));
        assert!(matches!(
            Link::new(0.0, 1.0, f64::NAN, Ports::Single),
            Err(ConfigError::Efficiency { .. })
        ));
        let l = link(Ports::Single);
        assert!(Topology::two_level(0, l, l, 1.0).is_err());
        assert!(Topology::flat(l, 0.0).is_err());
    }

    #[test]
    fn the_pod_preset_prefers_ipu_links() {
        let t = Topology::ipu_pod(64).unwrap();
        assert_eq!(t.intra().ports(), Ports::PerPeer);
        assert!(t.intra().beta() < t.inter().beta());
        assert_eq!(*t.link_for([0, 63]), *t.intra());
        assert_eq!(*t.link_for([0, 64]), *t.inter());
        assert!(Topology::ipu_pod(0).is_err());
    }

    #[test]
    fn two_level_topologies_pick_the_link_of_the_members() {
        let fast = Link::new(1e-6, 100e9, 1.0, Ports::PerPeer).unwrap();
        let slow = Link::new(10e-6, 10e9, 1.0, Ports::Single).unwrap();
        let t = Topology::two_level(4, fast, slow, 50e9).unwrap();
        assert_eq!(*t.link_for([4, 5, 6, 7]), fast);
        assert_eq!(*t.link_for([1, 5, 9, 13]), slow);
        let m = CostModel::new(t);
        let h = m.hierarchical_all_reduce(16, 4, 1 << 20, 4).unwrap();
        let flat = m
            .select(
                Collective::AllReduce,
                16,
                1 << 20,
                4,
                &slow,
                &Algorithm::ALL,
            )
            .unwrap()
            .seconds;
        assert!(h < flat, "hierarchical {h} vs flat {flat}");
        assert!(m.hierarchical_all_reduce(16, 3, 10, 4).is_err());
    }
}
