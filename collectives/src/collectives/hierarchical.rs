//! The hierarchical all-reduce: reduce-scatter in each domain, all-reduce
//! across domains, all-gather in each domain.

use std::ops::Range;

#[cfg(doc)]
use tessera_core::collective::Order;
use tessera_core::collective::{Collective, ReduceOp, Reducer};
use tessera_core::fp::{Element, Rounding};

use super::exec::exec;
use super::{Collectives, HierarchicalReport, Options, Report, fragment};
use crate::comm::Communicator;
use crate::cost::CostModel;
use crate::error::CommError;
use crate::group::ReplicaGroup;
use crate::run::{Scratch, own_failure};
use crate::subgroup::GroupComm;

impl<C: Communicator> Collectives<C> {
    /// All-reduce in two levels (Graphcore's and NCCL's hierarchical
    /// all-reduce): reduce-scatter inside each group of `k` consecutive
    /// ranks (an IPU-Link domain), all-reduce of each rank's fragment
    /// across the groups (`Orthogonal(p / k)`: the GW-Links), all-gather
    /// inside each group. Each phase's algorithm is chosen as for any
    /// collective, on the link its members are joined by.
    ///
    /// Numerics: Mean sums in both phases and divides by `p` once; f16 and
    /// bf16 Sum and Mean are reduced in f32 (the reduce-scatter sends f32:
    /// twice the bytes of its first messages) and rounded once, element
    /// `i` at position `i`, so there is no double rounding. In
    /// [`Order::Deterministic`] with `k` a power of two the result is
    /// bitwise the flat all-reduce's in that order (each group's sum is a
    /// complete subtree of the summation tree); otherwise it is
    /// deterministic for a given `k` but may differ from the flat order.
    /// In [`Order::Free`] each phase rounds its sums from its own grid, so
    /// the result is the same for every algorithm and arrival order at a
    /// given `k`, but not the flat order-free all-reduce's.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ReduceOp, Reducer, ThreadWorld};
    ///
    /// ThreadWorld::run(4, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let mut x = vec![c.rank() as f32 + 1.0; 6];
    ///     // Two domains of two ranks.
    ///     let report = c.hierarchical_all_reduce(&mut x, Reducer::new(ReduceOp::Sum), 2).unwrap();
    ///     assert_eq!(x, vec![10.0; 6]);
    ///     assert!(report.all_gather.steps > 0);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// [`CommError::Group`] ([`GroupError::Indivisible`](crate::GroupError::Indivisible) or
    /// [`GroupError::ZeroGroupSize`](crate::GroupError::ZeroGroupSize)) if `k` does not divide the number of
    /// ranks, or as [`run`](Self::run); the communicator is then aborted.
    pub fn hierarchical_all_reduce<T: Element>(
        &mut self,
        buf: &mut [T],
        reduction: Reducer,
        k: usize,
    ) -> Result<HierarchicalReport, CommError> {
        let result = self.hierarchical_inner(buf, reduction, k);
        if let Err(e) = &result
            && e.failure(self.comm.world_rank(self.comm.rank())).is_none()
        {
            self.comm.fail(own_failure(&self.comm));
        }
        result
    }

    fn hierarchical_inner<T: Element>(
        &mut self,
        buf: &mut [T],
        reduction: Reducer,
        k: usize,
    ) -> Result<HierarchicalReport, CommError> {
        // Arguments first: a call that is wrong on every rank then gets the
        // same error on every rank, not the first rank's abort.
        let p = self.comm.size();
        let groups = ReplicaGroup::Consecutive(k).groups(p)?;
        self.comm.check()?;
        let inner = GroupComm::new(&self.comm, ReplicaGroup::Consecutive(k))?;
        let outer = GroupComm::new(&self.comm, ReplicaGroup::Orthogonal(groups))?;
        let frag = fragment(buf.len(), k, inner.rank());
        let op = reduction.op;
        let sum_op = if op == ReduceOp::Mean {
            ReduceOp::Sum
        } else {
            op
        };
        let seq_of = |ctx: u16| self.group_seq.get(&ctx).copied().unwrap_or(0);
        let mut phases = Phases {
            inner: &inner,
            outer: &outer,
            seqs: (seq_of(inner.context()), seq_of(outer.context())),
            options: self.options,
            model: self.model,
            scratch: &mut self.scratch,
            reducer: Reducer::new(sum_op),
        };
        let wide = size_of::<T>() != size_of::<f32>();
        let (reduce_scatter, all_reduce) = if wide && op.depends_on_order() {
            // 16-bit sums: both phases in f32, rounded once at the end.
            let mut work: Vec<f32> = buf.iter().map(|x| x.load()).collect();
            let reports = phases.reduce(&mut work, frag.clone())?;
            for i in frag {
                buf[i] = T::store(op.finish(work[i], p), reduction.rounding, i);
            }
            reports
        } else {
            let reports = phases.reduce(buf, frag.clone())?;
            if op == ReduceOp::Mean {
                // f32: one division by p, as the flat Mean.
                for i in frag {
                    buf[i] = T::store(op.finish(buf[i].load(), p), Rounding::Nearest, i);
                }
            }
            reports
        };
        let all_gather = phases.run(false, Collective::AllGather, buf)?;
        let (inner_seq, outer_seq) = phases.seqs;
        self.group_seq.insert(inner.context(), inner_seq);
        self.group_seq.insert(outer.context(), outer_seq);
        Ok(HierarchicalReport {
            reduce_scatter,
            all_reduce,
            all_gather,
        })
    }
}

/// The phases of a hierarchical all-reduce: the calls on the domain's
/// communicator (`inner`) and across domains (`outer`), each numbered in
/// its own sequence.
struct Phases<'a, G: ?Sized> {
    inner: &'a G,
    outer: &'a G,
    seqs: (u32, u32),
    options: Options,
    model: CostModel,
    scratch: &'a mut Scratch,
    reducer: Reducer,
}

impl<G: Communicator + ?Sized> Phases<'_, G> {
    /// `collective` on `buf`, across domains if `outer`.
    fn run<U: Element>(
        &mut self,
        outer: bool,
        collective: Collective,
        buf: &mut [U],
    ) -> Result<Report, CommError> {
        let (comm, seq) = if outer {
            (self.outer, &mut self.seqs.1)
        } else {
            (self.inner, &mut self.seqs.0)
        };
        let (options, model) = (&self.options, &self.model);
        exec(
            comm,
            seq,
            options,
            model,
            self.scratch,
            collective,
            buf,
            &self.reducer,
        )
    }

    /// The reduction: reduce-scatter in the domain, then all-reduce of this
    /// rank's fragment `frag` across domains.
    fn reduce<U: Element>(
        &mut self,
        work: &mut [U],
        frag: Range<usize>,
    ) -> Result<(Report, Report), CommError> {
        let reduce_scatter = self.run(false, Collective::ReduceScatter, work)?;
        let all_reduce = self.run(true, Collective::AllReduce, &mut work[frag])?;
        Ok((reduce_scatter, all_reduce))
    }
}
