//! The per-algorithm dispatch: [`CollectiveSchedule::new`] counts an algorithm's
//! steps, [`CollectiveSchedule::ops`] asks it for a rank's ops, and
//! [`CollectiveSchedule::transfers`] prices every message. Above the algorithms
//! (`ring`, `tree`, `halving`), which read the schedule's sizes only.

use crate::fp::Element;

use super::error::Error;
use super::message::{Carries, Kind, Op, Ops, Transfer};
use super::op::ReduceOp;
use super::schedule::{Algorithm, Collective, CollectiveSchedule};
use super::span::Span;
use super::sum_tree::SumTree;
use super::{halving, ring, tree};

impl CollectiveSchedule {
    /// The schedule of `collective` by `algorithm` over `size` ranks with
    /// buffers of `len` elements, in the algorithm's
    /// [default order](Algorithm::default_order).
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Error};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::DoubleBinaryTree, Collective::AllReduce, 6, 100).unwrap();
    /// assert_eq!((s.size(), s.len(), s.fragment_len()), (6, 100, 17));
    /// assert_eq!(
    ///     CollectiveSchedule::new(Algorithm::Ring, Collective::Reduce { root: 4 }, 4, 8),
    ///     Err(Error::RankOutOfRange { rank: 4, size: 4 })
    /// );
    /// assert_eq!(CollectiveSchedule::new(Algorithm::Ring, Collective::AllGather, 0, 8), Err(Error::NoRanks));
    /// ```
    ///
    /// # Errors
    /// [`Error::NoRanks`], [`Error::TooManyRanks`],
    /// [`Error::RankOutOfRange`] for a root `>= size`, and
    /// [`Error::TooLong`] if `size * len` overflows `usize`.
    pub fn new(
        algorithm: Algorithm,
        collective: Collective,
        size: usize,
        len: usize,
    ) -> Result<Self, Error> {
        if size == 0 {
            return Err(Error::NoRanks);
        }
        if size > Self::MAX_RANKS {
            return Err(Error::TooManyRanks {
                size,
                max: Self::MAX_RANKS,
            });
        }
        if let Collective::Reduce { root } | Collective::Broadcast { root } = collective
            && root >= size
        {
            return Err(Error::RankOutOfRange { rank: root, size });
        }
        let fragment = len.div_ceil(size);
        if size.checked_mul(len).is_none() || size.checked_mul(fragment).is_none() {
            return Err(Error::TooLong { len, size });
        }
        let mut schedule = Self {
            algorithm,
            collective,
            order: algorithm.default_order(),
            size,
            len,
            fragment,
            steps: 0,
        };
        schedule.steps = schedule.count_steps();
        Ok(schedule)
    }

    fn count_steps(&self) -> usize {
        if self.size == 1 {
            return usize::from(self.collective.reduces());
        }
        match self.algorithm {
            Algorithm::Ring | Algorithm::BidirectionalRing => ring::steps(self),
            Algorithm::DoubleBinaryTree => tree::steps(self),
            Algorithm::HalvingDoubling => halving::steps(self),
        }
    }

    /// What `rank` does at `step`: sends, receives and finalizations.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Op};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllGather, 3, 9).unwrap();
    /// // Step 0: rank 1 sends its fragment (3..6) on to rank 2 and receives rank 0's.
    /// let ops = s.ops(1, 0);
    /// assert!(ops.iter().any(|o| matches!(*o, Op::Send { to: 2, span, .. } if span.start == 3)));
    /// assert!(ops.iter().any(|o| matches!(*o, Op::Recv { from: 0, span, .. } if span.start == 0)));
    /// ```
    ///
    /// # Panics
    /// If `rank >= p` or `step >= self.steps()`.
    #[must_use]
    pub fn ops(&self, rank: usize, step: usize) -> Ops {
        assert!(rank < self.size, "rank {rank} of a group of {}", self.size);
        let steps = self.steps();
        assert!(step < steps, "step {step} of a {steps}-step schedule");
        let mut ops = Ops::new();
        if self.size == 1 {
            ops.push(Op::Finalize {
                span: Span::new(0, self.len),
            });
            return ops;
        }
        match self.algorithm {
            Algorithm::Ring | Algorithm::BidirectionalRing => ring::ops(self, rank, step, &mut ops),
            Algorithm::DoubleBinaryTree => tree::ops(self, rank, step, &mut ops),
            Algorithm::HalvingDoubling => halving::ops(self, rank, step, &mut ops),
        }
        if self.frontier_order() {
            ops.mark_frontiers();
        }
        if self.grid_order() {
            ops.mark_grid();
        }
        ops
    }

    /// Calls `f` with every message, step by step, in the order
    /// [`execute`](super::execute) reports them, without moving data: what
    /// a cost model or simulator charges for element type `T` and
    /// operation `op` (which matter only for [`Transfer::bytes`],
    /// [`Transfer::partials`] and [`Transfer::combines`]).
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Order, ReduceOp};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 4096).unwrap();
    /// let (mut messages, mut bytes) = (0, 0);
    /// s.transfers::<f32>(ReduceOp::Sum, |t| {
    ///     messages += 1;
    ///     bytes += t.bytes;
    /// });
    /// assert_eq!((messages, bytes), (24, 24 * 1024 * 4)); // 2 (p - 1) steps of p fragments
    /// let mut fixed = 0;
    /// s.with_order(Order::Deterministic).transfers::<f32>(ReduceOp::Sum, |t| fixed += t.bytes);
    /// assert!(fixed > bytes); // frontiers of partial sums
    /// ```
    pub fn transfers<T: Element>(&self, op: ReduceOp, mut f: impl FnMut(Transfer)) {
        for step in 0..self.steps() {
            for rank in 0..self.size {
                for o in &self.ops(rank, step) {
                    if let Op::Recv { from, span, kind } = *o {
                        f(self.transfer::<T>(op, step, from, rank, span, kind));
                    }
                }
            }
        }
    }

    /// The [`Transfer`] of one received message.
    pub(crate) fn transfer<T: Element>(
        &self,
        op: ReduceOp,
        step: usize,
        from: usize,
        to: usize,
        span: Span,
        kind: Kind,
    ) -> Transfer {
        let elements = span.elements();
        let payload = span.elements_below(self.len);
        // A partial sum of several 16-bit contributions travels as f32.
        let wire = |f32: bool| {
            if f32 {
                size_of::<f32>()
            } else {
                size_of::<T>()
            }
        };
        let (partials, bytes, combines) = match (kind, kind.carries(op)) {
            (Kind::Reduce { covers, onto, .. }, Carries::Frontier) => {
                let tree = SumTree::new(self.size);
                let (mut partials, mut bytes, mut merges) = (0, 0, 0);
                tree.frontier(covers, &mut |node| {
                    partials += 1;
                    bytes += elements * wire(tree.leaf(node).is_none());
                });
                tree.merges(onto, covers, &mut |_, _, _| merges += 1);
                (partials, bytes, merges * payload)
            }
            (_, Carries::Partial { f32 }) => (1, elements * wire(f32), payload),
            (_, Carries::Grid) => (1, elements * size_of::<f64>(), payload),
            _ => (1, elements * wire(false), 0),
        };
        Transfer {
            step,
            from,
            to,
            span,
            kind,
            partials,
            elements: partials * elements,
            payload: partials * payload,
            bytes,
            combines,
        }
    }
}
