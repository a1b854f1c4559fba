//! [`Collectives`]: all-reduce, reduce-scatter, all-gather, broadcast and
//! reduce over a [`Communicator`], with the algorithm chosen explicitly or
//! by the cost model.

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use tessera_core::collective::{
    Algorithm, Collective, CollectiveSchedule, Order, ReduceOp, Reducer, grid,
};
use tessera_core::fp::{Element, Rounding};

use crate::comm::Communicator;
use crate::cost::CostModel;
use crate::error::CommError;
use crate::group::ReplicaGroup;
use crate::run::{self, Scratch, own_failure};
use crate::subgroup::GroupComm;

mod options;
pub use options::{
    AlgorithmChoice, DEFAULT_TIMEOUT, HierarchicalReport, Options, OrderChoice, Report,
};

/// Collective operations over a communicator.
///
/// Every rank makes the same calls in the same order, with buffers of the
/// same length and element type (a rank that does not gets
/// [`CommError::CallMismatch`] and the others [`CommError::PeerFailed`]).
/// Buffers are used in place; [`Collectives::all_reduce_into`] is the
/// out-of-place form.
///
/// Any error aborts the communicator, argument errors included (another
/// rank may have valid arguments and would otherwise wait for its
/// deadline); every later call fails.
///
/// ```
/// use tessera_collectives::{Collectives, ReduceOp, Reducer, ThreadWorld};
///
/// let out = ThreadWorld::run(4, |comm| {
///     let mut c = Collectives::new(comm);
///     let mut x = vec![c.rank() as f32 + 1.0; 10];
///     c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
///     x
/// })
/// .unwrap();
/// for x in out {
///     assert_eq!(x.unwrap(), vec![10.0; 10]);
/// }
/// ```
#[derive(Debug)]
pub struct Collectives<C> {
    comm: C,
    options: Options,
    model: CostModel,
    seq: u32,
    /// Call numbers of the replica groups' views, by context.
    group_seq: HashMap<u16, u32>,
    scratch: Scratch,
}

impl<C: Communicator> Collectives<C> {
    /// Collectives over `comm` with default [`Options`] and the
    /// [`CostModel`] of its transport's topology
    /// ([`Communicator::topology`]).
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// let sizes = ThreadWorld::run(2, |comm| Collectives::new(comm).size()).unwrap();
    /// assert!(sizes.into_iter().all(|s| s.unwrap() == 2));
    /// ```
    #[must_use]
    pub fn new(comm: C) -> Self {
        let model = CostModel::new(comm.topology());
        Self {
            comm,
            options: Options::new(),
            model,
            seq: 0,
            group_seq: HashMap::new(),
            scratch: Scratch::default(),
        }
    }

    /// The same with `options`.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, Options, Order, OrderChoice, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let c = Collectives::new(comm).with_options(Options::new().deterministic());
    ///     assert_eq!(c.options().order, OrderChoice::Use(Order::Deterministic));
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub fn with_options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// The same with the cost model `model`.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, CostModel, ThreadWorld, Topology};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let model = CostModel::new(Topology::processes());
    ///     let c = Collectives::new(comm).with_model(model);
    ///     assert_eq!(c.model(), &model);
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub fn with_model(mut self, model: CostModel) -> Self {
        self.model = model;
        self
    }

    /// The options.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, Options, ThreadWorld};
    ///
    /// ThreadWorld::run(1, |comm| assert_eq!(Collectives::new(comm).options(), &Options::new())).unwrap();
    /// ```
    #[must_use]
    pub const fn options(&self) -> &Options {
        &self.options
    }

    /// Replaces the options for later calls.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Collectives, Options, ThreadWorld};
    ///
    /// ThreadWorld::run(1, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     c.set_options(Options::new().with_timeout(Duration::from_secs(1)));
    ///     assert_eq!(c.options().timeout, Duration::from_secs(1));
    /// })
    /// .unwrap();
    /// ```
    pub const fn set_options(&mut self, options: Options) {
        self.options = options;
    }

    /// The cost model.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld, Topology};
    ///
    /// ThreadWorld::run(1, |comm| {
    ///     // The thread transport's own topology.
    ///     assert_eq!(Collectives::new(comm).model().topology(), &Topology::shared_memory());
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub const fn model(&self) -> &CostModel {
        &self.model
    }

    /// The communicator.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, Communicator, ThreadWorld};
    ///
    /// ThreadWorld::run(3, |comm| {
    ///     let c = Collectives::new(comm);
    ///     assert_eq!(c.comm().rank(), c.rank());
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub const fn comm(&self) -> &C {
        &self.comm
    }

    /// The communicator, given back.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, Communicator, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let comm = Collectives::new(comm).into_inner();
    ///     assert_eq!(comm.size(), 2);
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub fn into_inner(self) -> C {
        self.comm
    }

    /// This rank.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// let ranks = ThreadWorld::run(3, |comm| Collectives::new(comm).rank()).unwrap();
    /// let ranks: Vec<usize> = ranks.into_iter().map(Result::unwrap).collect();
    /// assert_eq!(ranks, [0, 1, 2]);
    /// ```
    #[must_use]
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// The number of ranks.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// ThreadWorld::run(3, |comm| assert_eq!(Collectives::new(comm).size(), 3)).unwrap();
    /// ```
    #[must_use]
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// The positions of a buffer of `len` elements that this rank holds
    /// after [`reduce_scatter`](Self::reduce_scatter) and contributes to
    /// [`all_gather`](Self::all_gather): fragment `rank` of `ceil(len / p)`
    /// elements (shorter or empty at the end).
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// let frags = ThreadWorld::run(4, |comm| Collectives::new(comm).fragment(10)).unwrap();
    /// let frags: Vec<_> = frags.into_iter().map(Result::unwrap).collect();
    /// assert_eq!(frags, [0..3, 3..6, 6..9, 9..10]);
    /// ```
    #[must_use]
    pub fn fragment(&self, len: usize) -> Range<usize> {
        fragment(len, self.size(), self.rank())
    }

    /// The schedule a call of `collective` on `len` elements of `T` with
    /// `op` would run: the algorithm chosen and the order.
    ///
    /// ```
    /// use tessera_collectives::{Algorithm, Collective, Collectives, Options, ReduceOp, ThreadWorld};
    ///
    /// ThreadWorld::run(4, |comm| {
    ///     let c = Collectives::new(comm).with_options(Options::new().with_algorithm(Algorithm::Ring));
    ///     let (s, seconds) = c.schedule::<f32>(Collective::AllReduce, 1000, ReduceOp::Sum).unwrap();
    ///     assert_eq!((s.algorithm(), s.steps()), (Algorithm::Ring, 6));
    ///     assert!(seconds > 0.0);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// [`CommError::Schedule`] for a root out of range or an overflowing
    /// length.
    pub fn schedule<T: Element>(
        &self,
        collective: Collective,
        len: usize,
        op: ReduceOp,
    ) -> Result<(CollectiveSchedule, f64), CommError> {
        choose::<T, _>(&self.comm, &self.options, &self.model, collective, len, op)
    }

    /// Runs `collective` on `buf` in place (see [`Collective`] for what
    /// each leaves where). `reduction` is ignored by the copy-only
    /// collectives.
    ///
    /// ```
    /// use tessera_collectives::{Collective, Collectives, ReduceOp, Reducer, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let mut x = [c.rank() as f32 + 1.0; 4];
    ///     c.run(Collective::AllReduce, &mut x, Reducer::new(ReduceOp::Sum)).unwrap();
    ///     assert_eq!(x, [3.0; 4]);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// [`CommError`]; the communicator is then aborted.
    pub fn run<T: Element>(
        &mut self,
        collective: Collective,
        buf: &mut [T],
        reduction: Reducer,
    ) -> Result<Report, CommError> {
        exec(
            &self.comm,
            &mut self.seq,
            &self.options,
            &self.model,
            &mut self.scratch,
            collective,
            buf,
            &reduction,
        )
    }

    /// Every rank ends with the reduction of all ranks' `buf`, bitwise the
    /// same on every rank.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ReduceOp, Reducer, ThreadWorld, f16};
    ///
    /// ThreadWorld::run(4, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let mut x = vec![f16::from_f32(c.rank() as f32); 9];
    ///     c.all_reduce(&mut x, Reducer::new(ReduceOp::Mean)).unwrap();
    ///     assert_eq!(x, vec![f16::from_f32(1.5); 9]);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn all_reduce<T: Element>(
        &mut self,
        buf: &mut [T],
        reduction: Reducer,
    ) -> Result<Report, CommError> {
        self.run(Collective::AllReduce, buf, reduction)
    }

    /// [`all_reduce`](Self::all_reduce) out of place: `output` ends with
    /// the reduction of every rank's `input`.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ReduceOp, Reducer, ThreadWorld};
    ///
    /// ThreadWorld::run(3, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let input = [c.rank() as f32; 5];
    ///     let mut output = [0.0f32; 5];
    ///     c.all_reduce_into(&input, &mut output, Reducer::new(ReduceOp::Max)).unwrap();
    ///     assert_eq!(output, [2.0; 5]);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    ///
    /// # Panics
    /// If `input` and `output` differ in length.
    pub fn all_reduce_into<T: Element>(
        &mut self,
        input: &[T],
        output: &mut [T],
        reduction: Reducer,
    ) -> Result<Report, CommError> {
        output.copy_from_slice(input);
        self.all_reduce(output, reduction)
    }

    /// Rank `r` ends with the reduction of [fragment](Self::fragment) `r`
    /// of every rank's `buf`, in that fragment's place; the rest of `buf`
    /// is unspecified afterwards.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ReduceOp, Reducer, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let mut x = [1.0f32, 2.0, 3.0, 4.0];
    ///     c.reduce_scatter(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
    ///     let mine = c.fragment(4); // rank 0: 0..2, rank 1: 2..4
    ///     assert_eq!(x[mine.clone()], [2.0, 4.0, 6.0, 8.0][mine]);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn reduce_scatter<T: Element>(
        &mut self,
        buf: &mut [T],
        reduction: Reducer,
    ) -> Result<Report, CommError> {
        self.run(Collective::ReduceScatter, buf, reduction)
    }

    /// Every rank contributes its [fragment](Self::fragment) of `buf` and
    /// ends with all of them, bits unchanged.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let mut x = [0.0f32; 4];
    ///     let mine = c.fragment(4);
    ///     x[mine].fill(c.rank() as f32 + 1.0);
    ///     c.all_gather(&mut x).unwrap();
    ///     assert_eq!(x, [1.0, 1.0, 2.0, 2.0]);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn all_gather<T: Element>(&mut self, buf: &mut [T]) -> Result<Report, CommError> {
        self.run(Collective::AllGather, buf, Reducer::new(ReduceOp::Sum))
    }

    /// `root`'s `buf` is copied to every rank, bits unchanged.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// ThreadWorld::run(3, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let mut x = [c.rank() as f32; 3];
    ///     c.broadcast(&mut x, 2).unwrap();
    ///     assert_eq!(x, [2.0; 3]);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn broadcast<T: Element>(
        &mut self,
        buf: &mut [T],
        root: usize,
    ) -> Result<Report, CommError> {
        self.run(
            Collective::Broadcast { root },
            buf,
            Reducer::new(ReduceOp::Sum),
        )
    }

    /// `root` ends with the reduction of every rank's `buf`; the other
    /// ranks' buffers are unspecified afterwards.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ReduceOp, Reducer, ThreadWorld};
    ///
    /// ThreadWorld::run(3, |comm| {
    ///     let mut c = Collectives::new(comm);
    ///     let mut x = [c.rank() as f32 + 1.0; 2];
    ///     c.reduce(&mut x, Reducer::new(ReduceOp::Sum), 0).unwrap();
    ///     if c.rank() == 0 {
    ///         assert_eq!(x, [6.0; 2]);
    ///     }
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`run`](Self::run).
    pub fn reduce<T: Element>(
        &mut self,
        buf: &mut [T],
        reduction: Reducer,
        root: usize,
    ) -> Result<Report, CommError> {
        self.run(Collective::Reduce { root }, buf, reduction)
    }

    /// Returns once every rank has called it.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// ThreadWorld::run(3, |comm| Collectives::new(comm).barrier().unwrap()).unwrap();
    /// ```
    ///
    /// # Errors
    /// As [`Communicator::barrier`].
    pub fn barrier(&self) -> Result<(), CommError> {
        self.comm.barrier(self.options.timeout)
    }

    /// Collectives among the members of this rank's `group`, with these
    /// options and this cost model (the cost model picks the link the
    /// members are joined by). Its calls are numbered from 0 on every rank.
    ///
    /// ```
    /// use tessera_collectives::{Collectives, ReduceOp, Reducer, ReplicaGroup, ThreadWorld};
    ///
    /// ThreadWorld::run(4, |comm| {
    ///     let c = Collectives::new(comm);
    ///     let rank = c.rank();
    ///     // Groups {0, 1} and {2, 3}.
    ///     let mut g = c.in_group(ReplicaGroup::Consecutive(2)).unwrap();
    ///     let mut x = [rank as f32];
    ///     g.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
    ///     assert_eq!(x, [if rank < 2 { 1.0 } else { 5.0 }]);
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// [`CommError::Group`] if `group` does not fit the communicator.
    pub fn in_group(&self, group: ReplicaGroup) -> Result<Collectives<GroupComm<&C>>, CommError> {
        let view = GroupComm::new(&self.comm, group)?;
        Ok(Collectives::new(view)
            .with_options(self.options)
            .with_model(self.model))
    }

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

/// Fragment `r` of a buffer of `len` elements over `p` ranks:
/// `r f .. min((r + 1) f, len)` with `f = ceil(len / p)`.
///
/// ```
/// use tessera_collectives::fragment;
///
/// assert_eq!(fragment(10, 4, 0), 0..3);
/// assert_eq!(fragment(10, 4, 3), 9..10);
/// assert_eq!(fragment(2, 4, 3), 2..2); // nothing but padding
/// ```
#[must_use]
pub fn fragment(len: usize, p: usize, r: usize) -> Range<usize> {
    let f = len.div_ceil(p.max(1));
    (r * f).min(len)..((r + 1) * f).min(len)
}

/// The schedule for a call, and the model's prediction.
fn choose<T: Element, D: Communicator + ?Sized>(
    comm: &D,
    options: &Options,
    model: &CostModel,
    collective: Collective,
    len: usize,
    op: ReduceOp,
) -> Result<(CollectiveSchedule, f64), CommError> {
    let p = comm.size();
    let link = *model
        .topology()
        .link_for((0..p).map(|r| comm.world_rank(r)));
    let deterministic = options.order == OrderChoice::Use(Order::Deterministic);
    let estimate = match options.algorithm {
        AlgorithmChoice::Use(a) => model.estimate(a, collective, p, len, size_of::<T>(), &link)?,
        AlgorithmChoice::Auto => {
            let only_hd = [Algorithm::HalvingDoubling];
            let candidates: &[Algorithm] =
                if deterministic && collective.reduces() && op.depends_on_order() && p > 2 {
                    &only_hd
                } else {
                    &Algorithm::ALL
                };
            model.select(collective, p, len, size_of::<T>(), &link, candidates)?
        }
    };
    let mut s = CollectiveSchedule::new(estimate.algorithm, collective, p, len)?;
    if let OrderChoice::Use(order) = options.order {
        s = s.with_order(order);
    }
    Ok((s, estimate.seconds))
}

/// This rank's block exponents of `buf` ([`Order::Free`]).
fn own_exponents<T: Element>(buf: &[T]) -> Vec<f32> {
    let mut exponents = vec![0.0f32; grid::blocks(buf.len())];
    grid::block_exponents(buf, &mut exponents);
    exponents
}

/// The exponent phase of [`Order::Free`]: this rank's block exponents
/// of `buf`, all-reduced (Max, exact in any order) in the same call number
/// `seq` (its headers name another operation and length, so a rank that
/// skipped it is found at its first message), by the algorithm the cost
/// model picks for their size (1/256 of the buffer's elements: a
/// latency-bound call, where the ring's `2 (p - 1)` steps cost most).
fn grid_exponents<T: Element, D: Communicator + ?Sized>(
    comm: &D,
    model: &CostModel,
    buf: &[T],
    seq: u32,
    deadline: Instant,
    scratch: &mut Scratch,
) -> Result<(Vec<f32>, run::Traffic), CommError> {
    let mut exponents = own_exponents(buf);
    let (phase, _) = choose::<f32, D>(
        comm,
        &Options::new(),
        model,
        Collective::AllReduce,
        exponents.len(),
        ReduceOp::Max,
    )?;
    let max = Reducer::new(ReduceOp::Max);
    let traffic = run::run(
        comm,
        &phase,
        &max,
        &mut exponents,
        seq,
        deadline,
        scratch,
        &[],
    )?;
    Ok((exponents, traffic))
}

/// One collective on `comm`, numbered `*seq`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn exec<T: Element, D: Communicator + ?Sized>(
    comm: &D,
    seq: &mut u32,
    options: &Options,
    model: &CostModel,
    scratch: &mut Scratch,
    collective: Collective,
    buf: &mut [T],
    reduction: &Reducer,
) -> Result<Report, CommError> {
    let start = Instant::now();
    let n = *seq;
    *seq = seq.wrapping_add(1);
    let result = (|| -> Result<Report, CommError> {
        // Arguments first (see `hierarchical_inner`).
        let (s, predicted) =
            choose::<T, D>(comm, options, model, collective, buf.len(), reduction.op)?;
        comm.check()?;
        let deadline = start + options.timeout;
        let (exponents, mut traffic) = if run::folds_exponents(&s, reduction.op) {
            // This rank's own: the run all-reduces them in its messages.
            (own_exponents(buf), run::Traffic::default())
        } else if s.on_grid(reduction.op) {
            grid_exponents(comm, model, buf, n, deadline, scratch)?
        } else {
            (Vec::new(), run::Traffic::default())
        };
        traffic += run::run(comm, &s, reduction, buf, n, deadline, scratch, &exponents)?;
        Ok(Report {
            algorithm: s.algorithm(),
            order: s.order(),
            steps: s.steps(),
            messages: traffic.messages,
            bytes: traffic.bytes,
            elapsed: start.elapsed(),
            predicted,
        })
    })();
    if let Err(e) = &result
        && e.failure(comm.world_rank(comm.rank())).is_none()
    {
        // An argument error found before anything was sent: abort anyway,
        // so ranks called correctly do not wait for their deadlines.
        comm.fail(own_failure(comm));
    }
    result
}
