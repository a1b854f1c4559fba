//! The [`Communicator`] trait: ranks, point-to-point messages with
//! deadlines, barrier, abort.

use std::time::Duration;

use crate::error::{Cause, CommError, Failure};
use crate::topology::Topology;

mod exchange;

pub use exchange::{Apply, ApplyMany, ApplyMut, Incoming, Outgoing, OutgoingMut};

/// A message tag. Messages from one rank to another with the same tag
/// arrive in the order they were sent; tags keep independent streams
/// apart.
///
/// Tags up to [`MAX_USER_TAG`] are the caller's; the ones above are the
/// collectives' and the barrier's.
pub type Tag = u32;

/// The largest tag for point-to-point messages of the caller's own.
pub const MAX_USER_TAG: Tag = (1 << 22) - 1;

/// The first tag the crate keeps for itself: collectives and barriers use
/// `RESERVED + 2 * context + {0, 1}`, `context < 4096`, so every tag is
/// below `2^23` (which Open MPI's `MPI_TAG_UB` allows with every
/// transport layer).
const RESERVED: Tag = MAX_USER_TAG + 1;

/// The tag of the collectives run in `context`.
pub(crate) const fn collective_tag(context: u16) -> Tag {
    RESERVED + 2 * (context as Tag % 4096)
}

/// The tag of the barriers run in `context`.
pub(crate) const fn barrier_tag(context: u16) -> Tag {
    collective_tag(context) + 1
}

/// One rank's end of a group of `size` ranks that exchange messages.
///
/// A communicator is used by one thread at a time (it need not be `Sync`);
/// [`AbortHandle`](crate::AbortHandle)s abort one from anywhere.
///
/// # Deadlines and failures
///
/// Every operation takes a timeout. An operation that cannot complete
/// because a peer failed, or that waits longer than its timeout, returns
/// an error and *aborts the world*: every operation pending on any rank
/// returns [`CommError::PeerFailed`] naming the failed rank, promptly and
/// not at its own deadline, and every later operation fails the same way.
/// This is NCCL's rule (after an asynchronous error every rank must abort)
/// with Gloo's per-operation timeout.
///
/// After a timeout the error names the rank that stopped, never a live
/// one: the rank that timed out follows the waits from the rank it waited
/// for (which may itself wait for another) to a rank that waits for
/// nobody and shows no sign of life. If there is none (the waits form a
/// cycle, or the ranks keep moving) it names nobody:
/// [`CommError::Timeout`] with no `peer`, [`CommError::Stalled`] on the
/// others.
///
/// # Implementing
///
/// A transport implements [`rank`](Self::rank), [`size`](Self::size),
/// [`exchange`](Self::exchange), [`fail`](Self::fail) and
/// [`failure`](Self::failure); the point-to-point helpers, the barrier and
/// [`abort`](Self::abort) are built on them.
pub trait Communicator {
    /// This rank, in `0..size`.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let got = ThreadWorld::run(3, |comm| (comm.rank(), comm.size())).unwrap();
    /// let got: Vec<_> = got.into_iter().map(Result::unwrap).collect();
    /// assert_eq!(got, [(0, 3), (1, 3), (2, 3)]);
    /// ```
    fn rank(&self) -> usize;

    /// The number of ranks.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let world = ThreadWorld::new(4).unwrap();
    /// assert!(world.into_communicators().iter().all(|c| c.size() == 4));
    /// ```
    fn size(&self) -> usize;

    /// Sends every message of `sends` and receives one message into every
    /// element of `recvs`, concurrently, within `timeout`: so a step in
    /// which every rank sends to one neighbour and receives from the other
    /// cannot deadlock. Receives with the same sender and tag are filled in
    /// the order messages were sent.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, Incoming, Outgoing, ThreadWorld};
    ///
    /// // Every rank sends its number to the next and receives the previous one's.
    /// let got = ThreadWorld::run(3, |comm| {
    ///     let (r, p) = (comm.rank(), comm.size());
    ///     let mine = [r as u8];
    ///     let mut recvs = [Incoming::new((r + p - 1) % p, 0)];
    ///     let sends = [Outgoing::new((r + 1) % p, 0, &mine)];
    ///     comm.exchange(&sends, &mut recvs, Duration::from_secs(10)).unwrap();
    ///     recvs[0].message[0]
    /// })
    /// .unwrap();
    /// let got: Vec<u8> = got.into_iter().map(Result::unwrap).collect();
    /// assert_eq!(got, [2, 0, 1]);
    /// ```
    ///
    /// # Errors
    /// [`CommError::RankOutOfRange`] for a peer `>= size` (found before
    /// anything is sent, no abort); [`CommError::TooLarge`];
    /// [`CommError::Timeout`] if a receive or send did not complete in
    /// time; [`CommError::PeerFailed`] or [`CommError::Aborted`] if the
    /// world was aborted before or during the call.
    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
    ) -> Result<(), CommError>;

    /// As [`exchange`](Self::exchange), but each received message is handed
    /// to `apply` (its index in `recvs`, then the message as two parts to
    /// be read one after the other), in the order of `recvs`, before the
    /// call returns, instead of being stored in `recvs`. A transport may
    /// then let `apply` read a message where its sender holds it, with no
    /// copy: the thread transport does for large bodies, so a sender's
    /// bodies stay borrowed until every receiver has applied them. The
    /// default receives with [`exchange`](Self::exchange), then applies.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, Incoming, Outgoing, ThreadWorld};
    ///
    /// let got = ThreadWorld::run(2, |comm| {
    ///     let peer = 1 - comm.rank();
    ///     let body = [comm.rank() as u8 + 1; 3];
    ///     let send = Outgoing { to: peer, tag: 4, header: b"h", body: &body };
    ///     let mut total = 0;
    ///     let mut add = |i: usize, first: &[u8], rest: &[u8]| {
    ///         assert_eq!(i, 0);
    ///         total = first.iter().chain(rest).map(|&b| u32::from(b)).sum();
    ///         Ok(())
    ///     };
    ///     let t = Duration::from_secs(10);
    ///     comm.exchange_apply(&[send], &mut [Incoming::new(peer, 4)], t, &mut add)
    ///         .unwrap();
    ///     total
    /// })
    /// .unwrap();
    /// // b'h' (104) and the peer's three bytes.
    /// assert_eq!(*got[0].as_ref().unwrap(), 104 + 3 * 2);
    /// assert_eq!(*got[1].as_ref().unwrap(), 104 + 3);
    /// ```
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange), and the first error `apply`
    /// returns (the call then returns it at once).
    fn exchange_apply(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
        apply: &mut Apply<'_>,
    ) -> Result<(), CommError> {
        self.exchange(sends, recvs, timeout)?;
        for (i, r) in recvs.iter().enumerate() {
            apply(i, &r.message, &[])?;
        }
        Ok(())
    }

    /// One message to `peer` and one from it (with `tag`), whose bodies are
    /// lent *mutably*: this rank's `body` goes to `peer`, which may read and
    /// write it, while `apply` gets the peer's header and body to read and
    /// write here; returns once both have been applied. The peer must make
    /// the same call. Two ranks can then finish a shared span in one
    /// meeting (each reduces one half and writes the result into both
    /// buffers) instead of an exchange for the reduction and one for the
    /// copy. `None`, having sent nothing, where the transport cannot (the
    /// default: the caller exchanges as usual); every rank of a world must
    /// answer alike. The thread transport can.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let got = ThreadWorld::run(2, |comm| {
    ///     let mut mine = [comm.rank() as u8 + 1; 4];
    ///     let peer = 1 - comm.rank();
    ///     let t = Duration::from_secs(10);
    ///     // Each rank adds its value into the peer's body.
    ///     let r = comm.exchange_mut(peer, 9, &[], &mut mine, t, &mut |_, theirs| {
    ///         theirs.iter_mut().for_each(|x| *x += 10 * (comm.rank() as u8 + 1));
    ///         Ok(())
    ///     });
    ///     r.unwrap().unwrap();
    ///     mine
    /// })
    /// .unwrap();
    /// assert_eq!(got[0].as_ref().unwrap(), &[21; 4]);
    /// assert_eq!(got[1].as_ref().unwrap(), &[12; 4]);
    /// ```
    ///
    /// # Errors
    /// As [`exchange_apply`](Self::exchange_apply).
    fn exchange_mut(
        &self,
        peer: usize,
        tag: Tag,
        header: &[u8],
        body: &mut [u8],
        timeout: Duration,
        apply: &mut ApplyMut<'_>,
    ) -> Option<Result<(), CommError>> {
        let _ = (peer, tag, header, body, timeout, apply);
        None
    }

    /// [`exchange_mut`](Self::exchange_mut) with several peers at once:
    /// each of `sends` lends its body mutably to its receiver (with `tag`),
    /// and `apply` is called once with the messages of every rank in
    /// `from`, all lent at once, to read and write; returns once every
    /// receiver has applied this rank's bodies. The peers must make the
    /// matching calls. Ranks can then finish a span from all their buffers
    /// in one meeting: each reduces the part it owns from every buffer and
    /// writes the result into all of them. `None`, having sent nothing,
    /// where the transport cannot (the default); every rank of a world must
    /// answer alike. The thread transport can.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, OutgoingMut, ThreadWorld};
    ///
    /// let got = ThreadWorld::run(3, |comm| {
    ///     let (r, p) = (comm.rank(), comm.size());
    ///     // Part q of every buffer belongs to rank q, which sums it into all.
    ///     let mut x = [r as u8 + 1; 3];
    ///     let (before, rest) = x.split_at_mut(r);
    ///     let (mine, after) = rest.split_at_mut(1);
    ///     let peers: Vec<usize> = (0..p).filter(|&q| q != r).collect();
    ///     let sends = before
    ///         .chunks_mut(1)
    ///         .chain(after.chunks_mut(1))
    ///         .zip(&peers)
    ///         .map(|(body, &to)| OutgoingMut { to, header: &[], body })
    ///         .collect();
    ///     let t = Duration::from_secs(10);
    ///     let r = comm.exchange_mut_many(5, sends, &peers, t, &mut |got| {
    ///         let total = mine[0] + got.iter().map(|(_, b)| b[0]).sum::<u8>();
    ///         mine[0] = total;
    ///         got.iter_mut().for_each(|(_, b)| b[0] = total);
    ///         Ok(())
    ///     });
    ///     r.unwrap().unwrap();
    ///     x
    /// })
    /// .unwrap();
    /// assert!(got.into_iter().all(|x| x.unwrap() == [6, 6, 6]));
    /// ```
    fn exchange_mut_many(
        &self,
        tag: Tag,
        sends: Vec<OutgoingMut<'_>>,
        from: &[usize],
        timeout: Duration,
        apply: &mut ApplyMany<'_>,
    ) -> Option<Result<(), CommError>> {
        let _ = (tag, sends, from, timeout, apply);
        None
    }

    /// Records `failure` and aborts the world: every pending and later
    /// operation on every rank fails, naming `failure.rank`. The first
    /// failure recorded wins; later ones are ignored.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Cause, Communicator, Failure, ThreadWorld};
    ///
    /// let got = ThreadWorld::run(2, |comm| {
    ///     if comm.rank() == 1 {
    ///         comm.fail(Failure::of(1, Cause::Aborted));
    ///     }
    ///     // Rank 0's barrier fails promptly, not after its timeout.
    ///     let waited = comm.barrier(Duration::from_secs(60));
    ///     (waited.is_err(), comm.failure())
    /// })
    /// .unwrap();
    /// for rank in got {
    ///     assert_eq!(rank.unwrap(), (true, Some(Failure::of(1, Cause::Aborted))));
    /// }
    /// ```
    fn fail(&self, failure: Failure);

    /// The failure that aborted the world, if this rank knows of one.
    ///
    /// ```
    /// use tessera_collectives::{Cause, Communicator, Failure, ThreadWorld};
    ///
    /// let comm = ThreadWorld::new(1).unwrap().into_communicators().remove(0);
    /// assert_eq!(comm.failure(), None);
    /// comm.abort();
    /// assert_eq!(comm.failure(), Some(Failure::of(0, Cause::Aborted)));
    /// ```
    fn failure(&self) -> Option<Failure>;

    /// The rank of the underlying world that `rank` of this communicator is
    /// (itself, except in a replica group's view).
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let comm = ThreadWorld::new(4).unwrap().into_communicators().remove(2);
    /// assert_eq!(comm.world_rank(3), 3); // a whole world is its own view
    /// ```
    fn world_rank(&self, rank: usize) -> usize {
        rank
    }

    /// A number that tells the collectives of different replica-group views
    /// apart on the wire (0 for a whole communicator).
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let comm = ThreadWorld::new(2).unwrap().into_communicators().remove(0);
    /// assert_eq!(comm.context(), 0);
    /// ```
    fn context(&self) -> u16 {
        0
    }

    /// The collectives send messages of more than this many elements as
    /// pieces of at most this many, one exchange each (`None`: whole).
    /// Every rank of a world must answer the same. Pieces pay off where a
    /// send is a copy that the receiver then reads, as on the thread
    /// transport (the piece is still in cache), not where the transport
    /// pipelines large messages itself, as MPI's do.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// // The thread transport cuts large messages into pieces.
    /// let comm = ThreadWorld::new(2).unwrap().into_communicators().remove(0);
    /// assert!(comm.piece_elements().is_some_and(|n| n > 0));
    /// ```
    fn piece_elements(&self) -> Option<usize> {
        None
    }

    /// The topology that [`Collectives::new`](crate::Collectives::new)
    /// costs this transport's collectives on, to choose their algorithms:
    /// [`Topology::shared_memory`] (the thread transport's measured costs)
    /// unless the transport says otherwise.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, ThreadWorld, Topology};
    ///
    /// let comm = ThreadWorld::new(2).unwrap().into_communicators().remove(0);
    /// assert_eq!(comm.topology(), Topology::shared_memory());
    /// ```
    fn topology(&self) -> Topology {
        Topology::shared_memory()
    }

    /// Aborts the world on this rank's behalf ([`Cause::Aborted`]): this
    /// rank's operations then fail with [`CommError::Aborted`], every other
    /// rank's with [`CommError::PeerFailed`] naming it.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{CommError, Communicator, ThreadWorld};
    ///
    /// let comms = ThreadWorld::new(2).unwrap().into_communicators();
    /// comms[1].abort();
    /// let t = Duration::from_secs(10);
    /// assert_eq!(comms[1].send(0, 1, b"x", t), Err(CommError::Aborted { rank: 1 }));
    /// assert!(matches!(comms[0].send(1, 1, b"x", t), Err(CommError::PeerFailed { .. })));
    /// ```
    fn abort(&self) {
        self.fail(Failure::of(self.world_rank(self.rank()), Cause::Aborted));
    }

    /// `Ok` unless the world is aborted; then the error an operation
    /// would return.
    ///
    /// ```
    /// use tessera_collectives::{CommError, Communicator, ThreadWorld};
    ///
    /// let comm = ThreadWorld::new(1).unwrap().into_communicators().remove(0);
    /// assert_eq!(comm.check(), Ok(()));
    /// comm.abort();
    /// assert_eq!(comm.check(), Err(CommError::Aborted { rank: 0 }));
    /// ```
    ///
    /// # Errors
    /// [`CommError::Aborted`] if this rank aborted it,
    /// [`CommError::PeerFailed`] otherwise.
    fn check(&self) -> Result<(), CommError> {
        match self.failure() {
            None => Ok(()),
            Some(f) => Err(failure_error(self.world_rank(self.rank()), f)),
        }
    }

    /// Sends `data` to `to` with `tag`. It returns once the message is on
    /// its way: at once on the thread transport (messages are buffered),
    /// possibly when the receiver has started to receive it over MPI (large
    /// messages); use [`exchange`](Self::exchange) to send and receive at
    /// once.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let t = Duration::from_secs(10);
    /// let got = ThreadWorld::run(2, |comm| {
    ///     let mut buf = [0u8; 2];
    ///     match comm.rank() {
    ///         0 => comm.send(1, 3, b"hi", t).unwrap(),
    ///         _ => comm.recv(0, 3, &mut buf, t).unwrap(),
    ///     }
    ///     buf
    /// })
    /// .unwrap();
    /// assert_eq!(got[1].as_ref().unwrap(), b"hi");
    /// ```
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange).
    fn send(&self, to: usize, tag: Tag, data: &[u8], timeout: Duration) -> Result<(), CommError> {
        self.exchange(&[Outgoing::new(to, tag, data)], &mut [], timeout)
    }

    /// Receives the next message from `from` with `tag`, which must have
    /// exactly `buf.len()` bytes, into `buf`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{CommError, Communicator, ThreadWorld};
    ///
    /// let t = Duration::from_secs(10);
    /// let got = ThreadWorld::run(2, |comm| match comm.rank() {
    ///     0 => comm.send(1, 3, b"three", t),
    ///     _ => comm.recv(0, 3, &mut [0u8; 4], t), // expects four bytes
    /// })
    /// .unwrap();
    /// let receiver = got[1].as_ref().unwrap();
    /// assert!(matches!(receiver, Err(CommError::LengthMismatch { expected: 4, found: 5, .. })));
    /// ```
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange), and [`CommError::LengthMismatch`]
    /// (which aborts the world) for a message of another length.
    fn recv(
        &self,
        from: usize,
        tag: Tag,
        buf: &mut [u8],
        timeout: Duration,
    ) -> Result<(), CommError> {
        let message = self.recv_vec(from, tag, timeout)?;
        if message.len() != buf.len() {
            let e = CommError::LengthMismatch {
                rank: self.world_rank(self.rank()),
                peer: self.world_rank(from),
                expected: buf.len(),
                found: message.len(),
            };
            self.fail(e.failure(self.world_rank(self.rank())).expect("aborts"));
            return Err(e);
        }
        buf.copy_from_slice(&message);
        Ok(())
    }

    /// Receives the next message from `from` with `tag`, whatever its
    /// length.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let t = Duration::from_secs(10);
    /// let got = ThreadWorld::run(2, |comm| match comm.rank() {
    ///     0 => comm.send(1, 8, b"any length", t).map(|()| Vec::new()),
    ///     _ => comm.recv_vec(0, 8, t),
    /// })
    /// .unwrap();
    /// assert_eq!(got[1].as_ref().unwrap().as_ref().unwrap(), b"any length");
    /// ```
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange).
    fn recv_vec(&self, from: usize, tag: Tag, timeout: Duration) -> Result<Vec<u8>, CommError> {
        let mut recv = [Incoming::new(from, tag)];
        self.exchange(&[], &mut recv, timeout)?;
        let [Incoming { message, .. }] = recv;
        Ok(message)
    }

    /// Sends a slice of plain values (as bytes, in this machine's byte
    /// order).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let t = Duration::from_secs(10);
    /// let got = ThreadWorld::run(2, |comm| {
    ///     let mut x = [0.0f32; 3];
    ///     match comm.rank() {
    ///         0 => comm.send_slice(1, 2, &[1.5f32, -2.0, 0.25], t).unwrap(),
    ///         _ => comm.recv_slice(0, 2, &mut x, t).unwrap(),
    ///     }
    ///     x
    /// })
    /// .unwrap();
    /// assert_eq!(got[1].as_ref().unwrap(), &[1.5, -2.0, 0.25]);
    /// ```
    ///
    /// # Errors
    /// As [`send`](Self::send).
    fn send_slice<T: bytemuck::NoUninit>(
        &self,
        to: usize,
        tag: Tag,
        data: &[T],
        timeout: Duration,
    ) -> Result<(), CommError>
    where
        Self: Sized,
    {
        self.send(to, tag, bytemuck::cast_slice(data), timeout)
    }

    /// Receives a slice of plain values sent by
    /// [`send_slice`](Self::send_slice); the message must fill `buf`
    /// exactly.
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let t = Duration::from_secs(10);
    /// let got = ThreadWorld::run(2, |comm| {
    ///     let mut x = [0u64; 2];
    ///     match comm.rank() {
    ///         0 => comm.send_slice(1, 2, &[u64::MAX, 7], t).unwrap(),
    ///         _ => comm.recv_slice(0, 2, &mut x, t).unwrap(),
    ///     }
    ///     x
    /// })
    /// .unwrap();
    /// assert_eq!(got[1].as_ref().unwrap(), &[u64::MAX, 7]);
    /// ```
    ///
    /// # Errors
    /// As [`recv`](Self::recv).
    fn recv_slice<T: bytemuck::AnyBitPattern + bytemuck::NoUninit>(
        &self,
        from: usize,
        tag: Tag,
        buf: &mut [T],
        timeout: Duration,
    ) -> Result<(), CommError>
    where
        Self: Sized,
    {
        self.recv(from, tag, bytemuck::cast_slice_mut(buf), timeout)
    }

    /// Returns once every rank has called `barrier` (a dissemination
    /// barrier: `ceil(lg p)` rounds of empty messages).
    ///
    /// ```
    /// use std::time::Duration;
    /// use tessera_collectives::{Communicator, ThreadWorld};
    ///
    /// let got = ThreadWorld::run(3, |comm| comm.barrier(Duration::from_secs(10))).unwrap();
    /// assert!(got.iter().all(|r| matches!(r, Ok(Ok(())))));
    /// ```
    ///
    /// # Errors
    /// As [`exchange`](Self::exchange).
    fn barrier(&self, timeout: Duration) -> Result<(), CommError> {
        let (p, r) = (self.size(), self.rank());
        let tag = barrier_tag(self.context());
        let deadline = std::time::Instant::now() + timeout;
        let mut distance = 1;
        let mut recv = [Incoming::new(0, tag)];
        while distance < p {
            recv[0].from = (r + p - distance) % p;
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            self.exchange(
                &[Outgoing::new((r + distance) % p, tag, &[])],
                &mut recv,
                left,
            )?;
            distance *= 2;
        }
        self.check()
    }
}

/// [`CommError::RankOutOfRange`] for the first peer of `sends` or `recvs`
/// that is not below `size`.
pub(crate) fn peers_in_range(
    sends: &[Outgoing<'_>],
    recvs: &[Incoming],
    size: usize,
) -> Result<(), CommError> {
    match sends
        .iter()
        .map(|o| o.to)
        .chain(recvs.iter().map(|i| i.from))
        .find(|&r| r >= size)
    {
        Some(rank) => Err(CommError::RankOutOfRange { rank, size }),
        None => Ok(()),
    }
}

/// The error an operation returns on `rank` (a world rank) once the world
/// has failed with `f`: [`CommError::Aborted`] if `rank` aborted it itself,
/// else [`CommError::PeerFailed`] naming the failed rank (which is `rank`
/// itself when another rank declared it unresponsive, or when it found its
/// own call mismatched), or [`CommError::Stalled`] if no rank could be
/// named.
pub(crate) fn failure_error(rank: usize, f: Failure) -> CommError {
    match f.rank {
        Some(failed) if failed == rank && f.cause == Cause::Aborted => CommError::Aborted { rank },
        Some(failed) => CommError::PeerFailed {
            rank: failed,
            cause: f.cause,
        },
        None => CommError::Stalled { rank },
    }
}

/// Forwards every method through a pointer to a communicator.
macro_rules! forward_communicator {
    ($($pointer:ty),*) => {$(
        impl<C: Communicator + ?Sized> Communicator for $pointer {
            fn rank(&self) -> usize {
                (**self).rank()
            }
            fn size(&self) -> usize {
                (**self).size()
            }
            fn exchange(
                &self,
                sends: &[Outgoing<'_>],
                recvs: &mut [Incoming],
                timeout: Duration,
            ) -> Result<(), CommError> {
                (**self).exchange(sends, recvs, timeout)
            }
            fn exchange_apply(
                &self,
                sends: &[Outgoing<'_>],
                recvs: &mut [Incoming],
                timeout: Duration,
                apply: &mut Apply<'_>,
            ) -> Result<(), CommError> {
                (**self).exchange_apply(sends, recvs, timeout, apply)
            }
            fn exchange_mut(
                &self,
                peer: usize,
                tag: Tag,
                header: &[u8],
                body: &mut [u8],
                timeout: Duration,
                apply: &mut ApplyMut<'_>,
            ) -> Option<Result<(), CommError>> {
                (**self).exchange_mut(peer, tag, header, body, timeout, apply)
            }
            fn exchange_mut_many(
                &self,
                tag: Tag,
                sends: Vec<OutgoingMut<'_>>,
                from: &[usize],
                timeout: Duration,
                apply: &mut ApplyMany<'_>,
            ) -> Option<Result<(), CommError>> {
                (**self).exchange_mut_many(tag, sends, from, timeout, apply)
            }
            fn fail(&self, failure: Failure) {
                (**self).fail(failure);
            }
            fn failure(&self) -> Option<Failure> {
                (**self).failure()
            }
            fn world_rank(&self, rank: usize) -> usize {
                (**self).world_rank(rank)
            }
            fn context(&self) -> u16 {
                (**self).context()
            }
            fn piece_elements(&self) -> Option<usize> {
                (**self).piece_elements()
            }
            fn topology(&self) -> Topology {
                (**self).topology()
            }
        }
    )*};
}

forward_communicator!(&C, Box<C>);
