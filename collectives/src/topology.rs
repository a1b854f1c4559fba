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

use core::fmt;
use std::collections::VecDeque;

use crate::cost::fitted::Fitted;
use crate::cost::link::{Link, Ports};
use crate::error::ConfigError;

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

/// One bundle of links between two nodes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Edge {
    /// One end.
    pub a: usize,
    /// The other end.
    pub b: usize,
    /// Full-duplex links in the bundle.
    pub links: u32,
}

/// Why a [`Fabric`] cannot be built, with the numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FabricError {
    /// A fabric of no nodes.
    NoNodes,
    /// An edge names a node that does not exist.
    MissingNode {
        /// The edge's index.
        edge: usize,
        /// The node it names.
        node: usize,
        /// Nodes in the fabric.
        nodes: usize,
    },
    /// An edge from a node to itself.
    SelfLink {
        /// The edge's index.
        edge: usize,
        /// The node.
        node: usize,
    },
    /// An edge of no links.
    NoLinks {
        /// The edge's index.
        edge: usize,
    },
    /// A node no route reaches from node 0.
    Unreachable {
        /// The node.
        node: usize,
    },
    /// A ring order that is not a permutation of the nodes.
    RingOrder {
        /// Entries given.
        len: usize,
        /// Nodes in the fabric.
        nodes: usize,
    },
    /// The link's figures (zero or negative bandwidth, say).
    Link(ConfigError),
}

impl fmt::Display for FabricError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoNodes => f.write_str("a fabric needs at least one node"),
            Self::MissingNode { edge, node, nodes } => write!(
                f,
                "edge {edge} joins node {node}, but the fabric has nodes 0..{nodes}"
            ),
            Self::SelfLink { edge, node } => {
                write!(f, "edge {edge} joins node {node} to itself")
            }
            Self::NoLinks { edge } => write!(f, "edge {edge} has 0 links (at least 1)"),
            Self::Unreachable { node } => write!(f, "no route reaches node {node} from node 0"),
            Self::RingOrder { len, nodes } => write!(
                f,
                "a ring order must list each of the {nodes} nodes once, not {len} entries"
            ),
            Self::Link(e) => write!(f, "link: {e}"),
        }
    }
}

impl std::error::Error for FabricError {}

impl From<ConfigError> for FabricError {
    fn from(e: ConfigError) -> Self {
        Self::Link(e)
    }
}

/// Nodes joined by bundles of one kind of [`Link`], with every route
/// precomputed (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq)]
pub struct Fabric {
    nodes: usize,
    link: Link,
    edges: Vec<Edge>,
    ring: Vec<usize>,
    /// `next[from * nodes + to]`: the directed edge of the first hop.
    next: Vec<u32>,
    /// `hops[from * nodes + to]`.
    hops: Vec<u32>,
}

/// "No hop": from a node to itself.
const NONE: u32 = u32::MAX;

impl Fabric {
    /// A fabric of `nodes` joined by `edges` of `link`s, its rings in
    /// `ring` order (every node once).
    ///
    /// ```
    /// use tessera_collectives::{Edge, Fabric, Topology};
    ///
    /// // Three IPUs in a triangle, one link per side.
    /// let edges = vec![
    ///     Edge { a: 0, b: 1, links: 1 },
    ///     Edge { a: 1, b: 2, links: 1 },
    ///     Edge { a: 2, b: 0, links: 1 },
    /// ];
    /// let f = Fabric::new(3, edges, Topology::IPU_LINK, vec![0, 1, 2]).unwrap();
    /// assert_eq!(f.hops(0, 2), 1);
    /// assert!(Fabric::new(3, vec![Edge { a: 0, b: 5, links: 1 }], Topology::IPU_LINK, vec![0, 1, 2]).is_err());
    /// ```
    ///
    /// # Errors
    /// [`FabricError`]: no nodes, an edge naming a missing node or the same
    /// node twice, an edge of no links, a node unreachable from node 0, a
    /// ring order that is not a permutation.
    pub fn new(
        nodes: usize,
        edges: Vec<Edge>,
        link: Link,
        ring: Vec<usize>,
    ) -> Result<Self, FabricError> {
        if nodes == 0 {
            return Err(FabricError::NoNodes);
        }
        for (i, e) in edges.iter().enumerate() {
            if let Some(&node) = [e.a, e.b].iter().find(|&&n| n >= nodes) {
                return Err(FabricError::MissingNode {
                    edge: i,
                    node,
                    nodes,
                });
            }
            if e.a == e.b {
                return Err(FabricError::SelfLink { edge: i, node: e.a });
            }
            if e.links == 0 {
                return Err(FabricError::NoLinks { edge: i });
            }
        }
        let mut seen = vec![false; nodes];
        for &n in &ring {
            if n >= nodes || core::mem::replace(&mut seen[n], true) {
                return Err(FabricError::RingOrder {
                    len: ring.len(),
                    nodes,
                });
            }
        }
        if ring.len() != nodes {
            return Err(FabricError::RingOrder {
                len: ring.len(),
                nodes,
            });
        }
        let (next, hops) = routes(nodes, &edges)?;
        Ok(Self {
            nodes,
            link,
            edges,
            ring,
            next,
            hops,
        })
    }

    /// Graphcore's IPU-Link ladder of `ipus` IPUs (even, or 1), as
    /// PopLibs' multi-IPU test model routes it (`poplibs_test/Util.cpp`,
    /// `addGlobalExchangeConstraints`): IPUs `2r` and `2r + 1` are a rung,
    /// joined by 6 links (4 for their own traffic and 2 that cross the
    /// rung; the block diagram of Graphcore's IPU-M2000 BMC user guide, as
    /// vengineer.hatenablog.com quotes it, joins each pair of IPUs by six
    /// PCIe Gen4 x8 ports); each IPU joins the IPU two above it by 2 links
    /// (its "up" links, the other's "down"). That is 10 links per IPU,
    /// Graphcore's figure for the GC200. `closed`: the rails wrap round
    /// from the top rung to the bottom one, the "2D-torus IPU-Link
    /// topology" of the IPU-POD64 datasheet. Rings go up the even rail and
    /// down the odd one, every step one hop.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// let open = Fabric::ladder(8, false, Topology::IPU_LINK).unwrap();
    /// let closed = Fabric::ladder(8, true, Topology::IPU_LINK).unwrap();
    /// assert!(closed.hops(0, 6) < open.hops(0, 6));
    /// assert!(Fabric::ladder(3, true, Topology::IPU_LINK).is_err());
    /// ```
    ///
    /// # Errors
    /// [`FabricError::NoNodes`] for 0 IPUs; [`FabricError::MissingNode`]
    /// for an odd count above 1 (the last IPU has no partner).
    pub fn ladder(ipus: usize, closed: bool, link: Link) -> Result<Self, FabricError> {
        if ipus == 0 {
            return Err(FabricError::NoNodes);
        }
        if ipus > 1 && !ipus.is_multiple_of(2) {
            return Err(FabricError::MissingNode {
                edge: ipus - 1,
                node: ipus,
                nodes: ipus,
            });
        }
        let rungs = ipus / 2;
        let mut edges = Vec::new();
        for r in 0..rungs {
            edges.push(Edge {
                a: 2 * r,
                b: 2 * r + 1,
                links: LADDER_RUNG_LINKS,
            });
        }
        for r in 0..rungs.saturating_sub(1) {
            for side in 0..2 {
                edges.push(Edge {
                    a: 2 * r + side,
                    b: 2 * r + 2 + side,
                    links: LADDER_RAIL_LINKS,
                });
            }
        }
        // With two rungs the wrap would double the rail: no wrap.
        if closed && rungs > 2 {
            for side in 0..2 {
                edges.push(Edge {
                    a: side,
                    b: 2 * (rungs - 1) + side,
                    links: LADDER_RAIL_LINKS,
                });
            }
        }
        let up = (0..rungs).map(|r| 2 * r);
        let down = (0..rungs).rev().map(|r| 2 * r + 1);
        let ring = if ipus == 1 {
            vec![0]
        } else {
            up.chain(down).collect()
        };
        Self::new(ipus, edges, link, ring)
    }

    /// `nodes` in a ring, each joined to the next by `links` links (two
    /// nodes: one bundle of `2 * links`, both ways round being the same
    /// pair).
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// let r = Fabric::ring(6, 2, Topology::GW_LINK_PER_IPU).unwrap();
    /// assert_eq!(r.hops(0, 3), 3);
    /// assert_eq!(r.links_of(0), 4);
    /// ```
    ///
    /// # Errors
    /// As [`Fabric::new`].
    pub fn ring(nodes: usize, links: u32, link: Link) -> Result<Self, FabricError> {
        let edges = match nodes {
            0 | 1 => Vec::new(),
            2 => vec![Edge {
                a: 0,
                b: 1,
                links: links.saturating_mul(2),
            }],
            n => (0..n)
                .map(|i| Edge {
                    a: i,
                    b: (i + 1) % n,
                    links,
                })
                .collect(),
        };
        Self::new(nodes, edges, link, (0..nodes).collect())
    }

    /// Nodes.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// assert_eq!(Fabric::ladder(16, true, Topology::IPU_LINK).unwrap().nodes(), 16);
    /// ```
    #[must_use]
    pub const fn nodes(&self) -> usize {
        self.nodes
    }

    /// One link's figures: latency per hop, bandwidth per direction,
    /// efficiency.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// assert_eq!(Fabric::ring(4, 1, Topology::IPU_LINK).unwrap().link(), &Topology::IPU_LINK);
    /// ```
    #[must_use]
    pub const fn link(&self) -> &Link {
        &self.link
    }

    /// The edges.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// assert_eq!(Fabric::ring(5, 1, Topology::IPU_LINK).unwrap().edges().len(), 5);
    /// ```
    #[must_use]
    pub fn edges(&self) -> &[Edge] {
        &self.edges
    }

    /// Links that end at `node`.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// assert_eq!(Fabric::ring(5, 3, Topology::IPU_LINK).unwrap().links_of(2), 6);
    /// ```
    #[must_use]
    pub fn links_of(&self, node: usize) -> u32 {
        self.edges
            .iter()
            .filter(|e| e.a == node || e.b == node)
            .map(|e| e.links)
            .sum()
    }

    /// The order rings visit the nodes in.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// assert_eq!(Fabric::ring(4, 1, Topology::IPU_LINK).unwrap().ring_order(), [0, 1, 2, 3]);
    /// ```
    #[must_use]
    pub fn ring_order(&self) -> &[usize] {
        &self.ring
    }

    /// `members` (nodes) sorted by their place in the ring order: the
    /// order a ring over them visits them in.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// let ladder = Fabric::ladder(4, true, Topology::IPU_LINK).unwrap();
    /// let sorted = ladder.in_ring_order(&[0, 1, 2, 3]);
    /// assert_eq!(sorted, ladder.ring_order());
    /// ```
    #[must_use]
    pub fn in_ring_order(&self, members: &[usize]) -> Vec<usize> {
        let mut place = vec![usize::MAX; self.nodes];
        for (i, &n) in self.ring.iter().enumerate() {
            place[n] = i;
        }
        let mut m = members.to_vec();
        m.sort_by_key(|&n| place.get(n).copied().unwrap_or(usize::MAX));
        m
    }

    /// Links a transfer from `from` to `to` crosses (0 to itself).
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// let r = Fabric::ring(8, 1, Topology::IPU_LINK).unwrap();
    /// assert_eq!((r.hops(0, 0), r.hops(0, 7), r.hops(1, 5)), (0, 1, 4));
    /// ```
    ///
    /// # Panics
    /// If either is not a node.
    #[must_use]
    pub fn hops(&self, from: usize, to: usize) -> u32 {
        self.hops[self.index(from, to)]
    }

    /// Calls `f` with each directed edge (`2 * edge + direction`, 0 from
    /// `a` to `b`) of the route from `from` to `to`.
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// let r = Fabric::ring(8, 1, Topology::IPU_LINK).unwrap();
    /// let mut edges = Vec::new();
    /// r.route(1, 4, |d| edges.push(d));
    /// assert_eq!(edges.len(), 3);
    /// ```
    ///
    /// # Panics
    /// If either is not a node.
    pub fn route(&self, from: usize, mut to_go: usize, mut f: impl FnMut(usize)) {
        let to = to_go;
        to_go = from;
        while to_go != to {
            let d = self.next[self.index(to_go, to)] as usize;
            f(d);
            let e = self.edges[d / 2];
            to_go = if d.is_multiple_of(2) { e.b } else { e.a };
        }
    }

    /// Bytes per second of directed edge `d` (its links times the link's
    /// data rate).
    ///
    /// ```
    /// use tessera_collectives::{Fabric, Topology};
    ///
    /// let two = Fabric::ring(4, 2, Topology::IPU_LINK).unwrap();
    /// let one = Fabric::ring(4, 1, Topology::IPU_LINK).unwrap();
    /// assert_eq!(two.edge_bytes_per_s(0), 2.0 * one.edge_bytes_per_s(0));
    /// ```
    #[must_use]
    pub fn edge_bytes_per_s(&self, d: usize) -> f64 {
        f64::from(self.edges[d / 2].links) / self.link.beta()
    }

    fn index(&self, from: usize, to: usize) -> usize {
        assert!(from < self.nodes && to < self.nodes, "node out of range");
        from * self.nodes + to
    }
}

/// Links between the IPUs of a rung of [`Fabric::ladder`].
pub const LADDER_RUNG_LINKS: u32 = 6;

/// Links from an IPU to the next IPU of its rail in [`Fabric::ladder`].
pub const LADDER_RAIL_LINKS: u32 = 2;

/// First hops and hop counts of every route: a breadth-first search from
/// each destination, neighbours in edge order, so the route is the
/// shortest with ties broken by edge order.
fn routes(nodes: usize, edges: &[Edge]) -> Result<(Vec<u32>, Vec<u32>), FabricError> {
    let mut adjacent: Vec<Vec<(usize, usize)>> = vec![Vec::new(); nodes];
    for (i, e) in edges.iter().enumerate() {
        // (neighbour, directed edge from the neighbour to this node)
        adjacent[e.a].push((e.b, 2 * i + 1));
        adjacent[e.b].push((e.a, 2 * i));
    }
    let mut next = vec![NONE; nodes * nodes];
    let mut hops = vec![NONE; nodes * nodes];
    let mut queue = VecDeque::new();
    for to in 0..nodes {
        hops[to * nodes + to] = 0;
        queue.push_back(to);
        while let Some(n) = queue.pop_front() {
            let h = hops[n * nodes + to];
            for &(m, d) in &adjacent[n] {
                if hops[m * nodes + to] == NONE {
                    hops[m * nodes + to] = h + 1;
                    next[m * nodes + to] = u32::try_from(d).unwrap_or(NONE);
                    queue.push_back(m);
                }
            }
        }
        if let Some(node) = (0..nodes).find(|&m| hops[m * nodes + to] == NONE) {
            return Err(FabricError::Unreachable { node });
        }
    }
    Ok((next, hops))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::Ports;

    fn link() -> Link {
        Link::new(1e-6, 16e9, 0.85, Ports::PerPeer).unwrap()
    }

    #[test]
    fn ladders_have_ten_links_per_ipu_and_one_hop_rings() {
        for (ipus, closed) in [(4, false), (16, true), (64, true)] {
            let f = Fabric::ladder(ipus, closed, link()).unwrap();
            let ring = f.ring_order();
            for (i, &n) in ring.iter().enumerate() {
                assert_eq!(f.hops(n, ring[(i + 1) % ipus]), 1, "{ipus}: {n}");
            }
            if closed {
                assert!((0..ipus).all(|n| f.links_of(n) == 10), "{ipus}");
            }
        }
        // An IPU-M2000: the outer IPUs of its rails have only their
        // up or down links.
        let m2000 = Fabric::ladder(4, false, link()).unwrap();
        assert_eq!(m2000.ring_order(), [0, 2, 3, 1]);
        assert_eq!(m2000.links_of(0), 8);
    }

    #[test]
    fn routes_are_shortest_and_walk_their_hops() {
        let f = Fabric::ladder(64, true, link()).unwrap();
        for from in 0..64 {
            for to in 0..64 {
                let mut n = 0;
                f.route(from, to, |_| n += 1);
                assert_eq!(n, f.hops(from, to));
                assert_eq!(f.hops(from, to), f.hops(to, from));
            }
        }
        // Half way round a closed rail of 32, plus the rung.
        assert_eq!(f.hops(0, 33), 17);
        let open = Fabric::ladder(64, false, link()).unwrap();
        assert_eq!(open.hops(0, 62), 31);
    }

    #[test]
    fn bad_fabrics_are_typed_errors_with_numbers() {
        let e = |a, b, links| Edge { a, b, links };
        let l = link();
        assert_eq!(Fabric::new(0, vec![], l, vec![]), Err(FabricError::NoNodes));
        assert_eq!(
            Fabric::new(2, vec![e(0, 2, 1)], l, vec![0, 1]),
            Err(FabricError::MissingNode {
                edge: 0,
                node: 2,
                nodes: 2
            })
        );
        assert_eq!(
            Fabric::new(2, vec![e(1, 1, 1)], l, vec![0, 1]),
            Err(FabricError::SelfLink { edge: 0, node: 1 })
        );
        assert_eq!(
            Fabric::new(2, vec![e(0, 1, 0)], l, vec![0, 1]),
            Err(FabricError::NoLinks { edge: 0 })
        );
        assert_eq!(
            Fabric::new(3, vec![e(0, 1, 1)], l, vec![0, 1, 2]),
            Err(FabricError::Unreachable { node: 2 })
        );
        assert_eq!(
            Fabric::new(2, vec![e(0, 1, 1)], l, vec![0, 0]),
            Err(FabricError::RingOrder { len: 2, nodes: 2 })
        );
        assert!(matches!(
            Fabric::ladder(5, true, l),
            Err(FabricError::MissingNode { node: 5, .. })
        ));
        assert_eq!(Fabric::ladder(0, true, l), Err(FabricError::NoNodes));
        let msg = FabricError::MissingNode {
            edge: 3,
            node: 9,
            nodes: 8,
        }
        .to_string();
        assert!(
            msg.contains('3') && msg.contains('9') && msg.contains("0..8"),
            "{msg}"
        );
    }
}
