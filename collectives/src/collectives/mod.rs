//! [`Collectives`]: all-reduce, reduce-scatter, all-gather, broadcast and
//! reduce over a [`Communicator`], with the algorithm chosen explicitly or
//! by the cost model.

use std::collections::HashMap;
use std::ops::Range;

use tessera_core::collective::{Collective, CollectiveSchedule, ReduceOp, Reducer};
use tessera_core::fp::Element;

use crate::comm::Communicator;
use crate::cost::CostModel;
use crate::error::CommError;
use crate::group::ReplicaGroup;
use crate::run::Scratch;
use crate::subgroup::GroupComm;

mod exec;
mod hierarchical;
mod options;

use exec::{choose, exec};
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
