//! Where the ranks are: the cost model's [`Topology`] (domains of ranks
//! joined by two kinds of link), and the [`Fabric`], which says which
//! devices are joined by which links and the route a transfer takes over
//! them. [`crate::route`] prices a collective's schedule on a fabric.
//!
//! A fabric is a graph of `nodes` (IPUs, or POD64s joined by GW-Links)
//! whose edges are bundles of identical full-duplex links, each carrying
//! the fabric's [`Link`] rate in each direction. A transfer follows the
//! shortest path (fewest hops; ties broken towards the lower node, so
//! routes are a pure function of the fabric), pays one link latency per
//! hop, and shares each edge's bandwidth in its direction with the other
//! transfers on it at the same time. Rings visit the nodes in the fabric's
//! ring order ([`Fabric::ring_order`]), as Graphcore's GCL lays its rings
//! along the IPU-Links.
//!
//! ```
//! use tessera_collectives::cost::{Link, Ports};
//! use tessera_collectives::topology::Fabric;
//!
//! let link = Link::new(1e-6, 16e9, 0.85, Ports::PerPeer).unwrap();
//! // A POD16's ladder: 8 rungs, the rails closed into rings.
//! let pod16 = Fabric::ladder(16, true, link).unwrap();
//! assert_eq!(pod16.links_of(0), 10); // 6 to its partner, 2 up, 2 down
//! assert_eq!(pod16.hops(0, 1), 1);
//! assert_eq!(pod16.hops(0, 14), 1); // round the closed rail
//! assert_eq!(pod16.hops(1, 8), 5);
//! ```

use crate::cost::fitted::Fitted;
use crate::cost::link::{Link, Ports};
use crate::error::ConfigError;

mod fabric;
pub use fabric::{Edge, Fabric, FabricError, LADDER_RAIL_LINKS, LADDER_RUNG_LINKS};

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
    /// ```
    /// use tessera_collectives::{Link, Ports, Topology};
    ///
    /// let link = Link::new(5e-6, 10e9, 0.9, Ports::Single).unwrap();
    /// let t = Topology::flat(link, 20e9).unwrap();
    /// assert_eq!(t.intra(), t.inter());
    /// assert!(Topology::flat(link, 0.0).is_err());
    /// ```
    ///
    /// # Errors
    /// [`ConfigError::NotPositive`] unless `reduce_bandwidth > 0`.
    pub fn flat(link: Link, reduce_bandwidth: f64) -> Result<Self, ConfigError> {
        Self::two_level(usize::MAX, link, link, reduce_bandwidth)
    }

    /// Domains of `domain` consecutive ranks joined by `intra` links, the
    /// domains joined by `inter` links.
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports, Topology};
    ///
    /// let nvlink = Link::new(2e-6, 150e9, 0.8, Ports::PerPeer).unwrap();
    /// let ib = Link::new(5e-6, 25e9, 0.9, Ports::Single).unwrap();
    /// // Machines of 8 GPUs.
    /// let t = Topology::two_level(8, nvlink, ib, 100e9).unwrap();
    /// assert_eq!(t.domain(), 8);
    /// ```
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
    /// alpha and beta (what [`CostModel::schedule_time`](crate::CostModel::schedule_time) charges) are the
    /// round numbers of the earlier single fit: 10 us per step (a
    /// condition-variable wake-up) and 0.33 ns per byte, reductions at
    /// 4 GB/s. Measure your own machine with [`crate::fit`].
    ///
    /// ```
    /// use tessera_collectives::Topology;
    /// use tessera_collectives::cost::Fitted;
    ///
    /// let t = Topology::shared_memory();
    /// assert_eq!(t.intra().fitted(), Some(&Fitted::THREADS));
    /// ```
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
    ///
    /// ```
    /// use tessera_collectives::Topology;
    /// use tessera_collectives::cost::Fitted;
    ///
    /// assert_eq!(Topology::processes().intra().fitted(), Some(&Fitted::PROCESSES));
    /// ```
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
    /// ```
    /// use tessera_collectives::Topology;
    ///
    /// let pod = Topology::ipu_pod(64).unwrap();
    /// assert_eq!(pod.intra(), &Topology::IPU_LINK);
    /// assert_eq!(pod.inter(), &Topology::GW_LINK_PER_IPU);
    /// ```
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
    ///
    /// ```
    /// use tessera_collectives::Topology;
    ///
    /// assert_eq!(Topology::ipu_pod(16).unwrap().domain(), 16);
    /// assert_eq!(Topology::shared_memory().domain(), usize::MAX);
    /// ```
    #[must_use]
    pub const fn domain(&self) -> usize {
        self.domain
    }

    /// The links inside a domain.
    ///
    /// ```
    /// use tessera_collectives::Topology;
    ///
    /// assert_eq!(Topology::ipu_pod(16).unwrap().intra().alpha(), 1e-6);
    /// ```
    #[must_use]
    pub const fn intra(&self) -> &Link {
        &self.intra
    }

    /// The links between domains.
    ///
    /// ```
    /// use tessera_collectives::Topology;
    ///
    /// let pod = Topology::ipu_pod(16).unwrap();
    /// assert!(pod.inter().beta() > pod.intra().beta()); // GW-Links are slower
    /// ```
    #[must_use]
    pub const fn inter(&self) -> &Link {
        &self.inter
    }

    /// Seconds per byte of contributions combined.
    ///
    /// ```
    /// use tessera_collectives::Topology;
    ///
    /// // Shared memory reduces 4 GB of contributions per second.
    /// assert_eq!(Topology::shared_memory().gamma(), 0.25e-9);
    /// ```
    #[must_use]
    pub fn gamma(&self) -> f64 {
        1.0 / self.reduce_bandwidth
    }

    /// The link a collective among `members` (world ranks) runs on: the
    /// intra-domain link if they are all in one domain, else the
    /// inter-domain one (the slowest link of a ring sets its pace).
    ///
    /// ```
    /// use tessera_collectives::Topology;
    ///
    /// let pod = Topology::ipu_pod(4).unwrap();
    /// assert_eq!(pod.link_for(0..4), pod.intra());
    /// assert_eq!(pod.link_for([3, 4]), pod.inter());
    /// ```
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
