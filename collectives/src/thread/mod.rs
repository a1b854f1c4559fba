//! The in-process transport: `p` ranks as threads of one process, talking
//! through shared memory.
//!
//! Each rank has a mailbox (a queue behind a mutex, with a condition
//! variable). A send copies the message's bytes once, into a vector from a
//! shared pool, and appends it to the receiver's queue; the receiver takes
//! the vector itself (no second copy) and gives its old one back to the
//! pool. Nothing is serialised: the bytes are the values' own, in this
//! machine's byte order. Sends never wait; receives wait on the condition
//! variable until the message, a failure of the world, or the deadline
//! (in exchanges of small messages, after polling for 20 us when every
//! rank can have a core).
//!
//! [`Communicator::exchange_apply`] (which the collectives use for steps
//! with one send and one receive) copies nothing for bodies of 64 KiB and
//! more: it lends the body in place (see `loan.rs` for why that is sound),
//! the receiver reduces or copies straight from the sender's buffer, and
//! the sender returns once the body has been applied.
//! [`Communicator::exchange_mut`] lends both bodies mutably, so that two
//! ranks finish a shared span in one meeting (the two-rank ring's pieces),
//! and [`Communicator::exchange_mut_many`] lends to several peers at once
//! (the order-free ring's pieces over more ranks): `lend.rs`.
//! Messages of more than
//! [`Communicator::piece_elements`] elements travel as pieces, so the ranks
//! move through a large buffer together, piece by piece.
//!
//! Every rank publishes whom it waits for. A wait that reaches its deadline
//! follows those waits from the rank it waited for to one that waits for
//! nobody, and names it ([`Cause::Unresponsive`]) only if that rank then
//! neither waits nor sends for 200 ms; a chain that comes back on itself,
//! or ranks that keep moving, name nobody ([`CommError::Stalled`]).
//!
//! ```
//! use std::time::Duration;
//! use tessera_collectives::{Communicator, ThreadWorld};
//!
//! let results = ThreadWorld::run(3, |comm| {
//!     let t = Duration::from_secs(10);
//!     let (r, p) = (comm.rank(), comm.size());
//!     comm.send_slice((r + 1) % p, 7, &[r as u32], t)?;
//!     let mut got = [0u32];
//!     comm.recv_slice((r + p - 1) % p, 7, &mut got, t)?;
//!     Ok::<_, tessera_collectives::CommError>(got[0])
//! })
//! .unwrap();
//! let got: Vec<u32> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
//! assert_eq!(got, [2, 0, 1]);
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use crate::comm::{
    Apply, ApplyMany, ApplyMut, Communicator, Incoming, Outgoing, OutgoingMut, Tag, failure_error,
    peers_in_range,
};
use crate::error::{Cause, CommError, Failure};
use crate::group::GroupError;
use crate::loan::Loan;

mod lend;
use crate::run::PIECE_ELEMENTS;

/// A world of ranks that are threads of this process: its
/// [`ThreadCommunicator`]s, one per rank.
#[derive(Debug)]
pub struct ThreadWorld {
    comms: Vec<ThreadCommunicator>,
}

impl ThreadWorld {
    /// A world of `size` ranks.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    /// let comms = ThreadWorld::new(3).unwrap().into_communicators();
    /// assert_eq!(comms[2].rank(), 2);
    /// ```
    ///
    /// # Errors
    /// [`CommError::Group`] ([`GroupError::NoReplicas`]) for `size == 0`.
    pub fn new(size: usize) -> Result<Self, CommError> {
        if size == 0 {
            return Err(GroupError::NoReplicas.into());
        }
        let shared = Arc::new(Shared {
            size,
            boxes: (0..size).map(|_| Mailbox::default()).collect(),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            departed: (0..size).map(|_| AtomicBool::new(false)).collect(),
            waits: (0..size).map(|_| AtomicUsize::new(NOBODY)).collect(),
            moves: (0..size).map(|_| AtomicU64::new(0)).collect(),
            pool: Mutex::new(Vec::new()),
            spin: if std::thread::available_parallelism().is_ok_and(|c| size <= c.get()) {
                SPIN
            } else {
                Duration::ZERO
            },
        });
        let comms = (0..size)
            .map(|rank| ThreadCommunicator {
                shared: Arc::clone(&shared),
                rank,
            })
            .collect();
        Ok(Self { comms })
    }

    /// The communicators, in rank order: move each into the thread that
    /// plays its rank.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let comms = ThreadWorld::new(3).unwrap().into_communicators();
    /// let ranks: Vec<usize> = comms.iter().map(|c| c.rank()).collect();
    /// assert_eq!(ranks, [0, 1, 2]);
    /// ```
    #[must_use]
    pub fn into_communicators(self) -> Vec<ThreadCommunicator> {
        self.comms
    }

    /// Runs `f` on `size` scoped threads, one per rank, each with its
    /// communicator, and returns what each returned (or its panic), in rank
    /// order. A rank that panics aborts the world ([`Cause::Panicked`]), so
    /// the others fail rather than wait.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let results = ThreadWorld::run(2, |comm| {
    ///     assert!(comm.rank() == 0, "rank {} panics", comm.rank());
    ///     comm.rank()
    /// })
    /// .unwrap();
    /// assert_eq!(*results[0].as_ref().unwrap(), 0);
    /// assert!(results[1].is_err()); // its panic
    /// ```
    ///
    /// # Errors
    /// As [`ThreadWorld::new`].
    pub fn run<R: Send>(
        size: usize,
        f: impl Fn(ThreadCommunicator) -> R + Sync,
    ) -> Result<Vec<std::thread::Result<R>>, CommError> {
        let comms = Self::new(size)?.into_communicators();
        let f = &f;
        Ok(std::thread::scope(|s| {
            let handles: Vec<_> = comms
                .into_iter()
                .map(|comm| {
                    std::thread::Builder::new()
                        .name(format!("rank {}", comm.rank))
                        .spawn_scoped(s, move || f(comm))
                        .expect("spawning a rank's thread")
                })
                .collect();
            handles.into_iter().map(|h| h.join()).collect()
        }))
    }
}

/// One rank of a [`ThreadWorld`]. Dropping it while its thread panics
/// aborts the world ([`Cause::Panicked`]); dropping it otherwise makes the
/// ranks that wait for a message it never sent fail ([`Cause::Exited`])
/// instead of waiting for their deadlines.
pub struct ThreadCommunicator {
    shared: Arc<Shared>,
    rank: usize,
}

/// Aborts a communicator from any thread (a watchdog, a signal handler's
/// thread): [`Communicator::abort`] on behalf of the rank it was made for.
#[derive(Clone)]
pub struct AbortHandle {
    shared: Arc<Shared>,
    rank: usize,
}

struct Shared {
    size: usize,
    boxes: Vec<Mailbox>,
    /// Set (after `failure`) when the world has failed.
    failed: AtomicBool,
    failure: Mutex<Option<Failure>>,
    departed: Vec<AtomicBool>,
    /// The rank each rank waits for ([`NOBODY`]: it is not waiting), to
    /// find the rank that stopped when a wait times out
    /// ([`Shared::culprit`]).
    waits: Vec<AtomicUsize>,
    /// How many times each rank has started or ended a wait or sent: a
    /// rank whose count changes is alive.
    moves: Vec<AtomicU64>,
    /// Spare message vectors.
    pool: Mutex<Vec<Vec<u8>>>,
    /// How long a receive of a small exchange polls before it blocks:
    /// [`SPIN`] when every rank can have a core of its own, else zero.
    spin: Duration,
}

/// How long a receive polls its mailbox (yielding the core between
/// looks) before it blocks on the condition variable, in an exchange whose
/// messages are all small (below [`LEND_MIN`]): such an exchange is
/// latency-bound, and a blocked thread takes tens of microseconds to wake.
/// Exchanges of large messages block at once (polling measured slower
/// there on a loaded 2-core machine).
const SPIN: Duration = Duration::from_micros(20);

#[derive(Default)]
struct Mailbox {
    queue: Mutex<VecDeque<Envelope>>,
    ready: Condvar,
}

struct Envelope {
    from: usize,
    tag: Tag,
    /// The message, or with a loan its first part (the header).
    data: Vec<u8>,
    /// The rest of the message, lent in place by the sender.
    loan: Option<Arc<Loan>>,
}

/// In [`Shared::waits`]: not waiting.
const NOBODY: usize = usize::MAX;

/// How long a rank that waits for nobody must show no sign of life to be
/// named as the one that stopped ([`Shared::culprit`]): far longer than a
/// live rank spends between two waits of a collective (reducing or copying
/// one piece takes about a millisecond), even with more ranks than cores.
const PROBE: Duration = Duration::from_millis(200);

/// How long [`Shared::culprit`] looks for a rank that stopped while the
/// ranks keep moving, before it concludes that none did.
const PROBE_ALL: Duration = Duration::from_secs(1);

/// Bodies from this size on are lent in place by
/// [`Communicator::exchange_apply`] rather than copied: below it, the
/// sender's copy costs less than waiting for the receiver to apply it.
const LEND_MIN: usize = 64 << 10;

/// Locks, ignoring poisoning: the data behind these mutexes (queues, the
/// failure, the pool) is consistent after every critical section, and a
/// panicking rank must not take the others down with it.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn fail(&self, failure: Failure) {
        {
            let mut f = lock(&self.failure);
            if f.is_some() {
                return;
            }
            *f = Some(failure);
        }
        self.failed.store(true, Ordering::SeqCst);
        self.wake_all();
    }

    fn failure(&self) -> Option<Failure> {
        if self.failed.load(Ordering::SeqCst) {
            *lock(&self.failure)
        } else {
            None
        }
    }

    /// Marks `rank` as waiting for `peer` until the guard is dropped.
    fn waiting(&self, rank: usize, peer: usize) -> Waiting<'_> {
        self.waits[rank].store(peer, Ordering::SeqCst);
        self.moves[rank].fetch_add(1, Ordering::SeqCst);
        Waiting { shared: self, rank }
    }

    /// The rank that stopped, as seen by `me`, whose wait for `peer` has
    /// timed out: follow the waits from `peer` to a rank that waits for
    /// nobody, and name it if it then shows no sign of life (no wait, no
    /// send) for [`PROBE`]. `None` if the waits lead back to a rank
    /// already on the chain (every rank on it waits for another: no rank
    /// stopped, the calls do not match), or if the ranks keep moving for
    /// [`PROBE_ALL`] (the collective is just slower than its timeout).
    fn culprit(&self, me: usize, peer: usize) -> Option<usize> {
        let give_up = Instant::now() + PROBE_ALL;
        loop {
            let end = self.end_of_waits(me, peer)?;
            let moves = self.moves[end].load(Ordering::SeqCst);
            let quiet = Instant::now() + PROBE;
            let still = || {
                self.moves[end].load(Ordering::SeqCst) == moves
                    && self.waits[end].load(Ordering::SeqCst) == NOBODY
            };
            while still() && Instant::now() < quiet && self.failure().is_none() {
                std::thread::sleep(Duration::from_millis(1));
            }
            if still() {
                return Some(end);
            }
            if Instant::now() >= give_up || self.failure().is_some() {
                return None;
            }
        }
    }

    /// The rank at the end of the chain of waits from `peer` (`me` waits
    /// for `peer`): the first that waits for nobody, `None` if the chain
    /// comes back to a rank on it.
    fn end_of_waits(&self, me: usize, peer: usize) -> Option<usize> {
        let mut seen = vec![false; self.size];
        seen[me] = true;
        let mut rank = peer;
        loop {
            if std::mem::replace(&mut seen[rank], true) {
                return None;
            }
            match self.waits[rank].load(Ordering::SeqCst) {
                NOBODY => return Some(rank),
                next => rank = next,
            }
        }
    }

    /// Wakes every waiting rank (after a change they must see). Taking
    /// each queue's lock orders the change before the waiter's next check.
    fn wake_all(&self) {
        for b in &self.boxes {
            let _guard = lock(&b.queue);
            b.ready.notify_all();
        }
    }

    /// A vector for a message of `len` bytes: the pooled one that fits it
    /// most tightly, if it is not much larger (small messages must not
    /// carry off large buffers), else a new one. Large buffers are reused, not faulted in afresh.
    fn take_vec(&self, len: usize) -> Vec<u8> {
        let mut pool = lock(&self.pool);
        let best = pool
            .iter()
            .enumerate()
            .filter(|(_, v)| v.capacity() >= len && v.capacity() <= 4 * len + 4096)
            .min_by_key(|(_, v)| v.capacity())
            .map(|(i, _)| i);
        let mut v = match best {
            Some(i) => pool.swap_remove(i),
            None => Vec::with_capacity(len),
        };
        drop(pool);
        v.clear();
        v
    }

    fn give_vec(&self, v: Vec<u8>) {
        if v.capacity() == 0 {
            return;
        }
        let mut pool = lock(&self.pool);
        // Enough for a few messages per rank in flight; past that the
        // smallest is freed.
        pool.push(v);
        if pool.len() > 4 * self.size + 4
            && let Some(i) = (0..pool.len()).min_by_key(|&i| pool[i].capacity())
        {
            pool.swap_remove(i);
        }
    }
}

/// A rank's mark in [`Shared::waits`], cleared on drop.
struct Waiting<'a> {
    shared: &'a Shared,
    rank: usize,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.shared.waits[self.rank].store(NOBODY, Ordering::SeqCst);
        self.shared.moves[self.rank].fetch_add(1, Ordering::SeqCst);
    }
}

impl ThreadCommunicator {
    /// What every exchange checks and derives first: its start and
    /// deadline, how long a receive polls before blocking (only when every
    /// message is small), peers in range, and no failure already recorded.
    fn begin(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &[Incoming],
        timeout: Duration,
    ) -> Result<(Instant, Instant, Duration), CommError> {
        let start = Instant::now();
        let s = &*self.shared;
        let size = s.size;
        let spin = if sends.iter().all(|o| o.len() < LEND_MIN) {
            s.spin
        } else {
            Duration::ZERO
        };
        peers_in_range(sends, recvs, size)?;
        if let Some(f) = s.failure() {
            return Err(self.error(f));
        }
        Ok((start, start + timeout, spin))
    }

    /// A handle that aborts this rank's world from any thread.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let comms = ThreadWorld::new(2).unwrap().into_communicators();
    /// let handle = comms[0].abort_handle();
    /// std::thread::spawn(move || handle.abort()).join().unwrap();
    /// assert!(comms[1].barrier(Duration::from_secs(5)).is_err());
    /// ```
    #[must_use]
    pub fn abort_handle(&self) -> AbortHandle {
        AbortHandle {
            shared: Arc::clone(&self.shared),
            rank: self.rank,
        }
    }

    fn error(&self, f: Failure) -> CommError {
        failure_error(self.rank, f)
    }

    /// The error of a wait for `peer` that reached its deadline after
    /// `waited`: aborts the world naming the rank that stopped (or nobody,
    /// see [`Shared::culprit`]). If another rank's failure came first, its
    /// error.
    fn timed_out(&self, peer: usize, waited: Duration) -> CommError {
        let s = &*self.shared;
        let culprit = s.culprit(self.rank, peer);
        let ours = Failure {
            rank: culprit,
            cause: Cause::Unresponsive,
        };
        s.fail(ours);
        match s.failure() {
            Some(first) if first != ours => self.error(first),
            _ => CommError::Timeout {
                rank: self.rank,
                peer: culprit,
                waited,
            },
        }
    }

    /// Queues a message for rank `to` and wakes it.
    fn post(&self, to: usize, tag: Tag, data: Vec<u8>, loan: Option<Arc<Loan>>) {
        self.shared.moves[self.rank].fetch_add(1, Ordering::SeqCst);
        let b = &self.shared.boxes[to];
        lock(&b.queue).push_back(Envelope {
            from: self.rank,
            tag,
            data,
            loan,
        });
        b.ready.notify_all();
    }

    /// Waits for the next message from `from` with `tag`.
    fn wait(
        &self,
        from: usize,
        tag: Tag,
        deadline: Instant,
        start: Instant,
        spin: Duration,
    ) -> Result<Envelope, CommError> {
        let s = &*self.shared;
        let b = &s.boxes[self.rank];
        let _waiting = s.waiting(self.rank, from);
        let poll_until = Instant::now() + spin;
        let mut queue = lock(&b.queue);
        loop {
            if let Some(f) = s.failure() {
                return Err(self.error(f));
            }
            if let Some(i) = queue.iter().position(|e| e.from == from && e.tag == tag) {
                let e = queue.remove(i).expect("position is in the queue");
                return Ok(e);
            }
            if s.departed[from].load(Ordering::SeqCst) {
                drop(queue);
                let f = Failure::of(from, Cause::Exited);
                s.fail(f);
                return Err(self.error(s.failure().unwrap_or(f)));
            }
            let now = Instant::now();
            if now < poll_until && now < deadline {
                drop(queue);
                std::thread::yield_now();
                queue = lock(&b.queue);
                continue;
            }
            if now >= deadline {
                drop(queue);
                return Err(self.timed_out(from, now - start));
            }
            queue = b
                .ready
                .wait_timeout(queue, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl Communicator for ThreadCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.shared.size
    }

    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
    ) -> Result<(), CommError> {
        let (start, deadline, spin) = self.begin(sends, recvs, timeout)?;
        let s = &*self.shared;
        for o in sends {
            let mut data = s.take_vec(o.len());
            data.extend_from_slice(o.header);
            data.extend_from_slice(o.body);
            self.post(o.to, o.tag, data, None);
        }
        for i in recvs.iter_mut() {
            let data = loop {
                let e = self.wait(i.from, i.tag, deadline, start, spin)?;
                let Some(loan) = e.loan else {
                    break e.data;
                };
                let mut data = e.data;
                let copied =
                    loan.read(|body| data.extend_from_slice(body), || self.returned(&loan));
                if copied.is_some() {
                    break data;
                }
                // Revoked: its sender failed, which the next wait reports.
                s.give_vec(data);
            };
            s.give_vec(std::mem::replace(&mut i.message, data));
        }
        Ok(())
    }

    /// Sends large bodies as loans: each receiver applies the body where
    /// this rank holds it (no copy), and this call returns once every
    /// receiver has (or, on an error, once none can any more). Receives
    /// are applied in the order of `recvs`, lent ones in place.
    fn exchange_apply(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
        apply: &mut Apply<'_>,
    ) -> Result<(), CommError> {
        self.lend_apply(sends, recvs, timeout, apply)
    }

    /// [`exchange_mut_many`](Communicator::exchange_mut_many) with one peer.
    fn exchange_mut(
        &self,
        peer: usize,
        tag: Tag,
        header: &[u8],
        body: &mut [u8],
        timeout: Duration,
        apply: &mut ApplyMut<'_>,
    ) -> Option<Result<(), CommError>> {
        let send = vec![OutgoingMut {
            to: peer,
            header,
            body,
        }];
        self.exchange_mut_many(tag, send, &[peer], timeout, &mut |got| {
            let (header, body) = &mut got[0];
            apply(header, body)
        })
    }

    /// Lends every body mutably to its receiver and applies the peers'
    /// bodies where the peers hold them, all at once: one meeting, no copy.
    /// A message that is not lent mutably is handed to `apply` with an
    /// empty body (its header then says what its sender called instead).
    /// If `apply` fails or panics, the failure is recorded before the loans
    /// go back unapplied, and a rank whose loans came back returns the
    /// world's failure if there is one: no rank returns `Ok` with a body
    /// its peer left unwritten.
    fn exchange_mut_many(
        &self,
        tag: Tag,
        sends: Vec<OutgoingMut<'_>>,
        from: &[usize],
        timeout: Duration,
        apply: &mut ApplyMany<'_>,
    ) -> Option<Result<(), CommError>> {
        Some(self.lend_mut_many(tag, sends, from, timeout, apply))
    }

    fn fail(&self, failure: Failure) {
        self.shared.fail(failure);
    }

    fn failure(&self) -> Option<Failure> {
        self.shared.failure()
    }

    /// 512Ki (2 MiB of f32): the ranks then move through a large buffer
    /// together, and a piece one rank has just reduced is still in the
    /// shared cache when its peer copies it.
    fn piece_elements(&self) -> Option<usize> {
        Some(PIECE_ELEMENTS)
    }
}

impl Drop for ThreadCommunicator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.shared.fail(Failure::of(self.rank, Cause::Panicked));
        } else {
            self.shared.departed[self.rank].store(true, Ordering::SeqCst);
            self.shared.wake_all();
        }
    }
}

impl AbortHandle {
    /// Aborts the world on behalf of this handle's rank
    /// ([`Cause::Aborted`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{CommError, Communicator, ThreadWorld};
    ///
    /// let comms = ThreadWorld::new(2).unwrap().into_communicators();
    /// comms[1].abort_handle().abort();
    /// assert!(matches!(comms[0].barrier(Duration::from_secs(5)), Err(CommError::PeerFailed { rank: 1, .. })));
    /// ```
    pub fn abort(&self) {
        self.shared.fail(Failure::of(self.rank, Cause::Aborted));
    }
}

impl fmt::Debug for ThreadCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThreadCommunicator")
            .field("rank", &self.rank)
            .field("size", &self.shared.size)
            .field("failure", &self.shared.failure())
            .finish()
    }
}

impl fmt::Debug for AbortHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AbortHandle")
            .field("rank", &self.rank)
            .finish()
    }
}
