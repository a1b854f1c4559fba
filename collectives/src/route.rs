//! Collectives priced by routing their schedules over a [`Fabric`].
//!
//! Every message of the algorithm's actual schedule ([`CollectiveSchedule::transfers`])
//! is routed from its sender's node to its receiver's. A step costs the
//! latency of its longest route (`k` hops, `k` link latencies), plus the
//! time of the busiest directed edge (the bytes of every transfer crossing
//! it in that direction during the step, over its links' rate: transfers
//! that share a link share its bandwidth), plus the reduction of the most
//! bytes any node combines. Several groups of ranks may run the same
//! collective at once ([`price`]'s `groups`, the orthogonal groups of
//! replicas of several IPUs): their transfers share the links too.

use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Error, ReduceOp};

use crate::cost::{Estimate, Terms};
use crate::topology::Fabric;

/// The algorithms Graphcore's GCL runs over IPU-Links: rings (its ring
/// structure is why replica counts are powers of two), one way or both.
pub const GCL: [Algorithm; 2] = [Algorithm::Ring, Algorithm::BidirectionalRing];

/// The seconds of `collective` by `algorithm` on buffers of `len` elements
/// of `elem_bytes` bytes, run at once by every group of `groups` (each a
/// list of nodes, rank `i` of the group on node `groups[g][i]`; all groups
/// the same size), its reductions at `gamma` seconds per byte. The
/// estimate's terms are the hops of latency, the busiest edge's bytes in
/// units of one link, and the bytes combined.
///
/// ```
/// use tessera_collectives::route;
/// use tessera_collectives::{Algorithm, Collective, Fabric, Topology};
///
/// let pod16 = Fabric::ladder(16, true, Topology::IPU_LINK).unwrap();
/// let all: Vec<usize> = (0..16).collect();
/// let ring = route::price(&pod16, Algorithm::Ring, Collective::AllReduce, &[all], 1 << 20, 4, 0.0)
///     .unwrap();
/// assert!(ring.terms.latency >= 30.0); // 2 (p - 1) steps of at least one hop
/// assert!(ring.seconds > 0.0);
/// ```
///
/// # Errors
/// As [`CollectiveSchedule::new`]; [`Error::RankOutOfRange`] for a node outside the
/// fabric or groups of different sizes; [`Error::NoRanks`] for no groups.
///
/// # Panics
/// Never for nodes that [`price`] has checked.
pub fn price(
    fabric: &Fabric,
    algorithm: Algorithm,
    collective: Collective,
    groups: &[Vec<usize>],
    len: usize,
    elem_bytes: usize,
    gamma: f64,
) -> Result<Estimate, Error> {
    let p = groups.first().ok_or(Error::NoRanks)?.len();
    for g in groups {
        if g.len() != p {
            return Err(Error::RankOutOfRange {
                rank: g.len(),
                size: p,
            });
        }
        if let Some(&n) = g.iter().find(|&&n| n >= fabric.nodes()) {
            return Err(Error::RankOutOfRange {
                rank: n,
                size: fabric.nodes(),
            });
        }
    }
    let s = CollectiveSchedule::new(algorithm, collective, p, len)?;
    let mut step = Step::new(fabric);
    let mut terms = Terms::default();
    let mut current = usize::MAX;
    // Schedules count f32 elements; the wire carries `elem_bytes` each.
    s.transfers::<f32>(ReduceOp::Sum, |t| {
        if t.step != current {
            step.flush(&mut terms);
            current = t.step;
        }
        let bytes = (t.elements * elem_bytes) as f64;
        let combined = (t.combines * elem_bytes) as f64;
        for g in groups {
            step.add(fabric, g[t.from], g[t.to], bytes, combined);
        }
    });
    step.flush(&mut terms);
    let link = fabric.link();
    Ok(Estimate {
        algorithm,
        seconds: terms.latency * link.alpha()
            + terms.bandwidth * link.beta()
            + terms.reduce * gamma,
        terms,
    })
}

/// The cheapest of `candidates` by [`price`] (the first of equals).
///
/// ```
/// use tessera_collectives::route;
/// use tessera_collectives::{Algorithm, Collective, Fabric, Topology};
///
/// let pod16 = Fabric::ladder(16, true, Topology::IPU_LINK).unwrap();
/// let all: Vec<usize> = (0..16).collect();
/// let best = route::cheapest(&pod16, &Algorithm::ALL, Collective::AllReduce, &[all], 1 << 24, 4, 0.0)
///     .unwrap();
/// assert!(Algorithm::ALL.contains(&best.algorithm));
/// ```
///
/// # Errors
/// As [`price`]; [`Error::NoRanks`] for no candidates.
pub fn cheapest(
    fabric: &Fabric,
    candidates: &[Algorithm],
    collective: Collective,
    groups: &[Vec<usize>],
    len: usize,
    elem_bytes: usize,
    gamma: f64,
) -> Result<Estimate, Error> {
    let mut best: Option<Estimate> = None;
    for &a in candidates {
        let e = price(fabric, a, collective, groups, len, elem_bytes, gamma)?;
        if best.is_none_or(|b| e.seconds < b.seconds) {
            best = Some(e);
        }
    }
    best.ok_or(Error::NoRanks)
}

/// One step's load: bytes per directed edge, hops of the longest route,
/// bytes combined per node.
struct Step {
    edge_bytes: Vec<f64>,
    links: Vec<f64>,
    combined: Vec<f64>,
    hops: u32,
    any: bool,
}

impl Step {
    fn new(fabric: &Fabric) -> Self {
        let links = fabric
            .edges()
            .iter()
            .flat_map(|e| [f64::from(e.links); 2])
            .collect::<Vec<_>>();
        Self {
            edge_bytes: vec![0.0; links.len()],
            links,
            combined: vec![0.0; fabric.nodes()],
            hops: 0,
            any: false,
        }
    }

    fn add(&mut self, fabric: &Fabric, from: usize, to: usize, bytes: f64, combined: f64) {
        self.hops = self.hops.max(fabric.hops(from, to));
        fabric.route(from, to, |d| self.edge_bytes[d] += bytes);
        self.combined[to] += combined;
        self.any = true;
    }

    /// Adds the step's terms and starts the next.
    fn flush(&mut self, terms: &mut Terms) {
        if self.any {
            terms.latency += f64::from(self.hops);
            terms.bandwidth += self
                .edge_bytes
                .iter()
                .zip(&self.links)
                .map(|(b, l)| b / l)
                .fold(0.0, f64::max);
            terms.reduce += self.combined.iter().copied().fold(0.0, f64::max);
        }
        self.edge_bytes.fill(0.0);
        self.combined.fill(0.0);
        self.hops = 0;
        self.any = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::{Link, Ports, terms};

    fn link() -> Link {
        Link::new(1e-6, 16e9, 0.85, Ports::PerPeer).unwrap()
    }

    fn ring_of(f: &Fabric, members: &[usize]) -> Vec<Vec<usize>> {
        vec![f.in_ring_order(members)]
    }

    #[test]
    fn a_ring_over_neighbours_is_the_closed_form_over_its_slowest_hop() {
        // A ring of 6 nodes, 1 link each: every step one hop, one fragment
        // on each edge, as the closed form over one link.
        let f = Fabric::ring(6, 1, link()).unwrap();
        let all: Vec<usize> = (0..6).collect();
        for c in [
            Collective::AllReduce,
            Collective::ReduceScatter,
            Collective::AllGather,
        ] {
            let e = price(
                &f,
                Algorithm::Ring,
                c,
                &ring_of(&f, &all),
                6 << 10,
                4,
                1e-12,
            )
            .unwrap();
            let t = terms(Algorithm::Ring, c, 6, 6 << 10, 4, Ports::PerPeer).unwrap();
            assert_eq!(e.terms.latency, t.latency, "{c:?}");
            assert!((e.terms.bandwidth - t.bandwidth).abs() < 1e-9, "{c:?}");
        }
    }

    #[test]
    fn far_partners_pay_hops_and_shared_links() {
        // Halving-doubling on a ring of 8: the first exchange is 4 hops
        // away and every edge carries two transfers each way.
        let f = Fabric::ring(8, 1, link()).unwrap();
        let all: Vec<usize> = (0..8).collect();
        let groups = ring_of(&f, &all);
        let hd = price(
            &f,
            Algorithm::HalvingDoubling,
            Collective::AllReduce,
            &groups,
            1 << 20,
            4,
            0.0,
        )
        .unwrap();
        let flat = terms(
            Algorithm::HalvingDoubling,
            Collective::AllReduce,
            8,
            1 << 20,
            4,
            Ports::PerPeer,
        )
        .unwrap();
        assert!(hd.terms.latency > flat.latency);
        assert!(hd.terms.bandwidth > flat.bandwidth);
        let ring = price(
            &f,
            Algorithm::Ring,
            Collective::AllReduce,
            &groups,
            1 << 20,
            4,
            0.0,
        )
        .unwrap();
        assert!(ring.seconds < hd.seconds);
        assert_eq!(
            cheapest(
                &f,
                &Algorithm::ALL,
                Collective::AllReduce,
                &groups,
                1 << 20,
                4,
                0.0
            )
            .unwrap()
            .algorithm,
            Algorithm::BidirectionalRing
        );
    }

    #[test]
    fn concurrent_groups_share_links() {
        // Two rings over the even rail of a closed ladder of 16, every
        // other IPU: groups {0, 4, 8, 12} and {2, 6, 10, 14} cross the same
        // rail links, so each pays twice one group's bandwidth alone.
        let f = Fabric::ladder(16, true, link()).unwrap();
        let a = f.in_ring_order(&[0, 4, 8, 12]);
        let b = f.in_ring_order(&[2, 6, 10, 14]);
        let c = Collective::AllReduce;
        let one = price(
            &f,
            Algorithm::Ring,
            c,
            std::slice::from_ref(&a),
            1 << 20,
            2,
            0.0,
        )
        .unwrap();
        let two = price(&f, Algorithm::Ring, c, &[a, b], 1 << 20, 2, 0.0).unwrap();
        assert!((two.terms.bandwidth - 2.0 * one.terms.bandwidth).abs() < 1e-6);
        assert_eq!(two.terms.latency, one.terms.latency);
    }

    #[test]
    fn bad_groups_are_errors() {
        let f = Fabric::ring(4, 1, link()).unwrap();
        let c = Collective::AllReduce;
        assert!(price(&f, Algorithm::Ring, c, &[], 8, 4, 0.0).is_err());
        assert!(price(&f, Algorithm::Ring, c, &[vec![0, 4]], 8, 4, 0.0).is_err());
        assert!(price(&f, Algorithm::Ring, c, &[vec![0, 1], vec![2]], 8, 4, 0.0).is_err());
        assert!(cheapest(&f, &[], c, &[vec![0, 1]], 8, 4, 0.0).is_err());
    }
}
