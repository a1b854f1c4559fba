//! The [`CostModel`]: estimates over a [`Topology`], NCCL-style algorithm
//! selection, and the message-by-message charge of an actual schedule.

use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, ReduceOp};
use tessera_core::fp::Element;

use super::fitted::Fitted;
use super::link::{Link, Ports};
use super::terms::{Terms, terms};
use crate::topology::Topology;

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
    ///
    /// ```
    /// use tessera_collectives::{CostModel, Topology};
    ///
    /// let pod = CostModel::new(Topology::ipu_pod(64).unwrap());
    /// assert_eq!(pod.topology().domain(), 64);
    /// ```
    #[must_use]
    pub const fn new(topology: Topology) -> Self {
        Self { topology }
    }

    /// The topology.
    ///
    /// ```
    /// use tessera_collectives::{CostModel, Topology};
    ///
    /// assert_eq!(CostModel::default().topology(), &Topology::shared_memory());
    /// ```
    #[must_use]
    pub const fn topology(&self) -> &Topology {
        &self.topology
    }

    /// The closed-form time of one algorithm on `link`: with the link's
    /// [`Fitted`] costs if it has them, else with its alpha and beta and
    /// the topology's gamma.
    ///
    /// ```
    /// use tessera_collectives::{Algorithm, Collective, CostModel, Topology};
    ///
    /// let model = CostModel::new(Topology::ipu_pod(16).unwrap());
    /// let link = *model.topology().intra();
    /// let ring = model.estimate(Algorithm::Ring, Collective::AllReduce, 16, 1 << 20, 4, &link).unwrap();
    /// assert_eq!(ring.algorithm, Algorithm::Ring);
    /// assert_eq!(ring.terms.latency, 30.0); // 2 (p - 1) steps
    /// assert!(ring.seconds > 0.0);
    /// ```
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
    /// use tessera_collectives::cost::{CostModel, Link, Ports};
    /// use tessera_collectives::{Algorithm, Collective, Topology};
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
    /// ```
    /// use tessera_collectives::{CostModel, Topology};
    ///
    /// let model = CostModel::new(Topology::ipu_pod(4).unwrap());
    /// // 16 IPUs in four domains of four.
    /// let seconds = model.hierarchical_all_reduce(16, 4, 1 << 20, 2).unwrap();
    /// assert!(seconds > 0.0);
    /// ```
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
    ///
    /// ```
    /// use tessera_collectives::{
    ///     Algorithm, Collective, CollectiveSchedule, CostModel, Order, ReduceOp, Topology,
    /// };
    ///
    /// let model = CostModel::new(Topology::ipu_pod(64).unwrap());
    /// let link = *model.topology().intra();
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 8, 1 << 16).unwrap();
    /// let plain = model.schedule_time::<f32>(&s, ReduceOp::Sum, &link);
    /// let fixed = s.with_order(Order::Deterministic);
    /// // The deterministic order's frontiers cost bytes on a ring.
    /// assert!(model.schedule_time::<f32>(&fixed, ReduceOp::Sum, &link) > plain);
    /// ```
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

impl Fitted {
    /// The fitted time of `algorithm` over `p` ranks with these `terms`, on
    /// a buffer of `bytes` per rank; `None` if nothing was fitted.
    ///
    /// ```
    /// use tessera_collectives::cost::{Fitted, Ports, terms};
    /// use tessera_collectives::{Algorithm, Collective};
    ///
    /// let t = terms(Algorithm::Ring, Collective::AllReduce, 4, 1 << 20, 4, Ports::Single).unwrap();
    /// let fitted = Fitted::THREADS.seconds(Algorithm::Ring, 4, 4 << 20, &t).unwrap();
    /// assert!(fitted > 0.0);
    /// ```
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
