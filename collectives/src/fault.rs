//! Fault injection: a communicator that fails on purpose at a chosen
//! exchange, to test that the others fail cleanly instead of waiting.
//!
//! ```
//! use std::time::Duration;
//! use tessera_collectives::fault::{Fault, Faulty};
//! use tessera_collectives::{
//!     Collectives, CommError, Communicator, Options, ReduceOp, Reducer, ThreadWorld,
//! };
//!
//! let results = ThreadWorld::run(4, |comm| {
//!     // Rank 2 aborts at its third exchange, in the middle of the all-reduce.
//!     let fault = (comm.rank() == 2).then_some((2, Fault::Abort));
//!     let comm = Faulty::new(comm, fault);
//!     let mut c = Collectives::new(comm)
//!         .with_options(Options::new().with_timeout(Duration::from_secs(10)));
//!     let mut x = vec![1.0f32; 1000];
//!     c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).map(|_| ())
//! })
//! .unwrap();
//! for (rank, r) in results.into_iter().enumerate() {
//!     match r.unwrap() {
//!         Err(CommError::Aborted { rank: 2 }) => assert_eq!(rank, 2),
//!         Err(CommError::PeerFailed { rank: 2, .. }) => assert_ne!(rank, 2),
//!         other => panic!("rank {rank}: {other:?}"),
//!     }
//! }
//! ```

use std::cell::Cell;
use std::time::Duration;

use crate::comm::{Apply, ApplyMany, Communicator, Incoming, Outgoing, OutgoingMut, Tag};
use crate::error::{CommError, Failure};
use crate::topology::Topology;

/// What goes wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fault {
    /// The rank calls [`Communicator::abort`] instead of exchanging.
    Abort,
    /// The rank's thread panics. The world is aborted naming it
    /// ([`Cause::Panicked`](crate::Cause::Panicked)) as the panic unwinds
    /// out of the collective; under MPI the rank then calls `MPI_Abort`,
    /// which ends the job within seconds, as a dying process would.
    Panic,
    /// The rank stops responding for this long, then carries on.
    Stall(Duration),
}

/// `inner`, except that its `at`-th exchange (counting from 0) suffers
/// `fault`: calls of [`exchange`](Communicator::exchange) and
/// [`exchange_apply`](Communicator::exchange_apply), and of
/// [`exchange_mut_many`](Communicator::exchange_mut_many) where `inner`
/// lends (one exchange however many peers).
#[derive(Debug)]
pub struct Faulty<C> {
    inner: C,
    fault: Option<(usize, Fault)>,
    calls: Cell<usize>,
}

impl<C: Communicator> Faulty<C> {
    /// `inner` with `fault` at exchange `at` (`None`: never).
    ///
    /// ```
    /// use tessera_collectives::fault::{Fault, Faulty};
    /// use tessera_collectives::{Collectives, Communicator, ReduceOp, Reducer, ThreadWorld};
    ///
    /// let results = ThreadWorld::run(2, |comm| {
    ///     // Rank 1 aborts at its first exchange.
    ///     let fault = (comm.rank() == 1).then_some((0, Fault::Abort));
    ///     let mut c = Collectives::new(Faulty::new(comm, fault));
    ///     c.all_reduce(&mut [1.0f32; 4], Reducer::new(ReduceOp::Sum)).is_err()
    /// })
    /// .unwrap();
    /// assert!(results.into_iter().all(|failed| failed.unwrap()));
    /// ```
    #[must_use]
    pub const fn new(inner: C, fault: Option<(usize, Fault)>) -> Self {
        Self {
            inner,
            fault,
            calls: Cell::new(0),
        }
    }

    /// How many exchanges have been made so far.
    ///
    /// ```
    /// use tessera_collectives::fault::Faulty;
    /// use tessera_collectives::{Collectives, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let mut c = Collectives::new(Faulty::new(comm, None));
    ///     c.broadcast(&mut [0.0f32; 4], 0).unwrap();
    ///     assert!(c.comm().calls() > 0);
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub fn calls(&self) -> usize {
        self.calls.get()
    }

    /// The wrapped communicator.
    ///
    /// ```
    /// use tessera_collectives::fault::Faulty;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| assert_eq!(Faulty::new(comm, None).into_inner().size(), 2)).unwrap();
    /// ```
    #[must_use]
    pub fn into_inner(self) -> C {
        self.inner
    }

    /// Counts an exchange and suffers the fault if it is due: `Some` with
    /// the exchange's result if it does not go ahead.
    fn inject(&self) -> Option<Result<(), CommError>> {
        let k = self.calls.get();
        self.calls.set(k + 1);
        match self.fault {
            Some((at, Fault::Abort)) if at == k => {
                self.inner.abort();
                Some(self.inner.check())
            }
            Some((at, Fault::Panic)) if at == k => {
                panic!(
                    "injected fault: rank {} panics at exchange {k}",
                    self.rank()
                )
            }
            Some((at, Fault::Stall(d))) if at == k => {
                std::thread::sleep(d);
                None
            }
            _ => None,
        }
    }
}

impl<C: Communicator> Communicator for Faulty<C> {
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    fn size(&self) -> usize {
        self.inner.size()
    }

    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
    ) -> Result<(), CommError> {
        match self.inject() {
            Some(result) => result,
            None => self.inner.exchange(sends, recvs, timeout),
        }
    }

    fn exchange_apply(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
        apply: &mut Apply<'_>,
    ) -> Result<(), CommError> {
        match self.inject() {
            Some(result) => result,
            None => self.inner.exchange_apply(sends, recvs, timeout, apply),
        }
    }

    /// The inner loans, counted as one exchange however many peers, and
    /// only where the inner transport lends (where it answers `None`, the
    /// caller's exchanges that follow are counted instead). A fault due at
    /// this exchange strikes before anything is lent: an abort lends
    /// nothing, so the peers, waiting for this rank's loans, fail with the
    /// world; a stall delays every loan; a panic unwinds from here.
    fn exchange_mut_many(
        &self,
        tag: Tag,
        sends: Vec<OutgoingMut<'_>>,
        from: &[usize],
        timeout: Duration,
        apply: &mut ApplyMany<'_>,
    ) -> Option<Result<(), CommError>> {
        let k = self.calls.get();
        if self.fault.is_some_and(|(at, _)| at == k) {
            if let Some(result) = self.inject() {
                return Some(result);
            }
            return self
                .inner
                .exchange_mut_many(tag, sends, from, timeout, apply);
        }
        let lent = self
            .inner
            .exchange_mut_many(tag, sends, from, timeout, apply);
        if lent.is_some() {
            self.calls.set(k + 1);
        }
        lent
    }

    fn fail(&self, failure: Failure) {
        self.inner.fail(failure);
    }

    fn failure(&self) -> Option<Failure> {
        self.inner.failure()
    }

    fn world_rank(&self, rank: usize) -> usize {
        self.inner.world_rank(rank)
    }

    fn context(&self) -> u16 {
        self.inner.context()
    }

    fn piece_elements(&self) -> Option<usize> {
        self.inner.piece_elements()
    }

    fn topology(&self) -> Topology {
        self.inner.topology()
    }
}
