//! The MPI transport (feature `mpi`): [`MpiCommunicator`] over an MPI
//! communicator, through rsmpi (the `mpi` crate), for ranks that are
//! processes, on one machine or many. Launch with `mpirun`:
//!
//! ```text
//! mpirun -n 4 --oversubscribe target/release/my-program    (add --allow-run-as-root as root)
//! ```
//!
//! # Messages
//!
//! [`exchange`](Communicator::exchange) posts every send as a nonblocking
//! `MPI_Isend` and polls: `MPI_Improbe` for each expected message (in
//! order per sender and tag, so MPI's non-overtaking rule keeps streams in
//! order), `MPI_Test` for the sends, and a control tag for failure notices,
//! until everything is done, a peer fails or the deadline passes. A message
//! with a header and a body of at least 32 KiB goes as two MPI messages
//! (frame and header, then the body straight from the caller's slice and
//! straight into the receiver's vector); smaller ones are packed into one.
//! While nothing progresses the rank yields its core, then naps for 50 us
//! at a time (ranks may outnumber cores: `--oversubscribe`).
//!
//! # Failures
//!
//! MPI has no timeout and cannot withdraw a send that has started, so the
//! transport adds both:
//!
//! - A rank that fails (times out, is aborted, finds a mismatched message)
//!   sends a small *abort notice* naming the failed rank to every other
//!   rank. Every rank checks for notices while it polls, so pending
//!   operations everywhere fail at once with [`CommError::PeerFailed`].
//! - A rank whose wait times out does not blame the rank it waited for
//!   outright: it asks that rank (a *query* on the control tag) whom it
//!   waits for, then asks that one, and so on, and names the first rank
//!   that does not answer within 250 ms (it is not polling: it stopped).
//!   If the chain comes back to a rank on it (every rank waits for
//!   another), or a rank answers that it waits for nobody, it names
//!   nobody ([`CommError::Stalled`]). Ranks answer queries while they
//!   poll, so a live rank is never named.
//! - Having failed, a rank *drains*: it completes its own pending sends
//!   while receiving and discarding whatever arrives, tells every rank
//!   when it will send no more (a *quiesce* notice), and returns once every
//!   rank has said so, or after a grace period of 10 s. Ranks that are
//!   still in a collective see the abort at their next poll and drain too;
//!   a rank that is between collectives does so at its next call.
//! - If a send of this rank cannot complete within the grace period (its
//!   receiver never drains: it hangs, or left without calling again), MPI
//!   offers no way to withdraw it, and returning would leave MPI writing
//!   from a buffer that is gone; the transport then calls `MPI_Abort`,
//!   ending the job with an error rather than hanging.
//! - A rank that panics inside a collective, or whose communicator is
//!   dropped while its thread panics, calls `MPI_Abort` as it unwinds:
//!   the job ends at once (`mpirun` reports the panic), as if the process
//!   had died, instead of the rank waiting in `MPI_Finalize` for peers
//!   that wait for it. A process that dies is reported by `mpirun`, which
//!   ends the job.
//!
//! After a failure the communicator stays aborted; [`MpiCommunicator::duplicate`]
//! (collective) gives the surviving ranks a fresh one. An
//! [`AbortHandle`](crate::AbortHandle) has no MPI counterpart: MPI
//! communicators are used from one thread.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::time::{Duration, Instant};

use ::mpi::point_to_point::{Destination, Source};
use ::mpi::request::{Request, Scope, StaticScope, scope};
use ::mpi::topology::{Communicator as _, SimpleCommunicator};
use ::mpi::traits::Equivalence;

use crate::comm::{Communicator, Incoming, Outgoing, failure_error, peers_in_range};
use crate::error::{Cause, CommError, Failure};
use crate::topology::Topology;

pub use ::mpi::environment::Universe;
pub use ::mpi::topology::SimpleCommunicator as RawCommunicator;

/// Initialises MPI (`MPI_Init`); `None` if it already was. Keep the
/// [`Universe`] alive for as long as MPI is used: dropping it finalises.
///
/// ```no_run
/// use tessera_collectives::mpi::{self, MpiCommunicator};
/// use tessera_collectives::{Collectives, ReduceOp, Reducer};
///
/// // Under `mpirun -n 4`: every process runs this.
/// let universe = mpi::initialize().expect("MPI is initialised once");
/// let mut c = Collectives::new(MpiCommunicator::world(&universe));
/// let mut x = [c.rank() as f32; 8];
/// c.all_reduce(&mut x, Reducer::new(ReduceOp::Sum)).unwrap();
/// ```
#[must_use]
pub fn initialize() -> Option<Universe> {
    ::mpi::initialize()
}

/// Bodies from this size on travel as their own MPI message, uncopied.
const SPLIT: usize = 32 * 1024;

/// Bytes before the header in an MPI message: a kind byte, padding, and the
/// body's length when it follows separately.
const FRAME: usize = 16;
const WHOLE: u8 = 1;
const SPLIT_FRAME: u8 = 2;

/// The largest message: an MPI count is an `i32`.
const MAX_MESSAGE: usize = i32::MAX as usize - FRAME;

/// The exit status of a job ended because a rank panicked (Rust's own for
/// a panic).
const PANIC_EXIT: i32 = 101;

mod control;

/// One rank of an MPI communicator. See the [module docs](self).
pub struct MpiCommunicator {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    failure: Cell<Option<Failure>>,
    notified: Cell<bool>,
    drained: Cell<bool>,
    quiesced: RefCell<Vec<bool>>,
    /// The rank this one waits for inside an exchange, for other ranks'
    /// queries ([`MpiCommunicator::culprit`]).
    waiting_for: Cell<Option<usize>>,
    /// The number of this rank's latest query, and the answer to it once
    /// received.
    asked: Cell<u64>,
    answer: Cell<Option<Option<usize>>>,
}

impl fmt::Debug for MpiCommunicator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MpiCommunicator")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("failure", &self.failure.get())
            .finish_non_exhaustive()
    }
}

/// Makes `m` at least `len` bytes long, zeroing only the bytes it gains
/// (a reused receive vector keeps its old bytes, which the receive
/// overwrites: zeroing megabytes per message would cost a pass over them).
fn fit(m: &mut Vec<u8>, len: usize) {
    if m.len() < len {
        m.resize(len, 0);
    }
}

/// Where a receive is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Progress {
    /// Nothing received yet.
    First,
    /// The frame and header are in; the body of this length follows.
    Body(usize),
    Done,
}

impl MpiCommunicator {
    /// A communicator over `comm` (take one of your own, for instance
    /// `universe.world().duplicate()`, so that nothing else uses its
    /// messages).
    ///
    /// ```no_run
    /// use tessera_collectives::Communicator;
    /// use tessera_collectives::mpi::{self, MpiCommunicator};
    ///
    /// let universe = mpi::initialize().unwrap();
    /// let comm = MpiCommunicator::new(universe.world());
    /// println!("rank {} of {}", comm.rank(), comm.size());
    /// ```
    #[must_use]
    pub fn new(comm: SimpleCommunicator) -> Self {
        let rank = usize::try_from(comm.rank()).expect("MPI ranks are not negative");
        let size = usize::try_from(comm.size()).expect("MPI sizes are positive");
        Self {
            comm,
            rank,
            size,
            failure: Cell::new(None),
            notified: Cell::new(false),
            drained: Cell::new(false),
            quiesced: RefCell::new(vec![false; size]),
            waiting_for: Cell::new(None),
            asked: Cell::new(0),
            answer: Cell::new(None),
        }
    }

    /// A communicator over a duplicate of `MPI_COMM_WORLD`.
    ///
    /// ```no_run
    /// use tessera_collectives::{Collectives, mpi};
    ///
    /// let universe = mpi::initialize().unwrap();
    /// let c = Collectives::new(mpi::MpiCommunicator::world(&universe));
    /// c.barrier().unwrap();
    /// ```
    #[must_use]
    pub fn world(universe: &Universe) -> Self {
        Self::new(universe.world().duplicate())
    }

    /// A fresh communicator over the same processes (`MPI_Comm_dup`):
    /// collective, every rank must call it. Used to go on after a failure
    /// aborted this one.
    ///
    /// ```no_run
    /// use tessera_collectives::{Collectives, ReduceOp, Reducer, mpi};
    ///
    /// let universe = mpi::initialize().unwrap();
    /// let world = mpi::MpiCommunicator::world(&universe);
    /// let mut c = Collectives::new(world.duplicate());
    /// if c.all_reduce(&mut [1.0f32; 4], Reducer::new(ReduceOp::Sum)).is_err() {
    ///     // That communicator is aborted: go on over a fresh one.
    ///     c = Collectives::new(world.duplicate());
    /// }
    /// c.barrier().unwrap();
    /// ```
    #[must_use]
    pub fn duplicate(&self) -> Self {
        Self::new(self.comm.duplicate())
    }

    /// The MPI communicator.
    ///
    /// ```no_run
    /// use tessera_collectives::mpi;
    ///
    /// let universe = mpi::initialize().unwrap();
    /// let comm = mpi::MpiCommunicator::world(&universe);
    /// let _world: &::mpi::topology::SimpleCommunicator = comm.raw();
    /// ```
    #[must_use]
    pub const fn raw(&self) -> &SimpleCommunicator {
        &self.comm
    }

    fn mpi_rank(r: usize) -> i32 {
        i32::try_from(r).expect("MPI ranks fit in i32")
    }

    fn record(&self, failure: Failure) {
        if self.failure.get().is_none() {
            self.failure.set(Some(failure));
        }
    }

    /// Ends the whole job at once (`MPI_Abort`) after this rank panicked:
    /// its peers would otherwise wait for it (their deadlines, then the
    /// drain's grace) while its own unwinding waits in `MPI_Finalize`.
    fn abort_after_panic(&self) -> ! {
        eprintln!(
            "tessera-collectives: rank {} panicked; aborting the MPI job",
            self.rank
        );
        self.comm.abort(PANIC_EXIT)
    }

    /// Checks what is found before anything is sent (no abort): peers in
    /// range, messages within what an MPI count can carry.
    fn valid(&self, sends: &[Outgoing<'_>], recvs: &[Incoming]) -> Result<(), CommError> {
        peers_in_range(sends, recvs, self.size)?;
        match sends.iter().find(|o| o.len() > MAX_MESSAGE) {
            Some(o) => Err(CommError::TooLarge {
                bytes: o.len(),
                max: MAX_MESSAGE,
            }),
            None => Ok(()),
        }
    }

    /// Posts every send (frame and header, and a large body after it) as
    /// `MPI_Isend`s: the requests, each with its receiver.
    fn post<'a, S: Scope<'a> + Copy>(
        &self,
        sc: S,
        sends: &[Outgoing<'a>],
        frames: &'a [Vec<u8>],
    ) -> Vec<Pending<'a, S>> {
        let mut pending = Vec::with_capacity(2 * sends.len());
        for (o, frame) in sends.iter().zip(frames) {
            let to = self.comm.process_at_rank(Self::mpi_rank(o.to));
            let tag = i32::try_from(o.tag).expect("tags are below 2^23");
            pending.push((o.to, to.immediate_send_with_tag(sc, &frame[..], tag)));
            if frame[0] == SPLIT_FRAME {
                pending.push((o.to, to.immediate_send_with_tag(sc, o.body, tag)));
            }
        }
        pending
    }

    /// Polls until every send and receive of an exchange is done (`Ok`),
    /// a peer's failure is known, a message is malformed or the deadline
    /// passes; marks whom this rank waits for meanwhile.
    fn poll<'a, S: Scope<'a>>(
        &self,
        pending: &mut Vec<Pending<'a, S>>,
        recvs: &mut [Incoming],
        start: Instant,
        deadline: Instant,
    ) -> Result<(), CommError> {
        let mut progress = vec![Progress::First; recvs.len()];
        let mut idle = Idle::new();
        loop {
            let mut progressed = false;
            for i in 0..recvs.len() {
                progressed |= self.receive(i, recvs, &mut progress)?;
            }
            let before = pending.len();
            *pending = std::mem::take(pending)
                .into_iter()
                .filter_map(|(to, r)| r.test().err().map(|r| (to, r)))
                .collect();
            progressed |= pending.len() != before;
            let waited = progress.iter().position(|&p| p != Progress::Done);
            let peer = waited
                .map(|i| recvs[i].from)
                .or(pending.first().map(|p| p.0));
            self.waiting_for.set(peer);
            // Also once everything is done: a rank that resumes after its
            // peers gave up on it (it stalled; they timed out and aborted)
            // can find every message it waits for already sent, with the
            // abort notice behind them, and must fail as they did rather
            // than return `Ok` from an aborted call (two ranks: nothing
            // else is left to wait for).
            self.poll_notices();
            if let Some(f) = self.failure.get() {
                return Err(failure_error(self.rank, f));
            }
            let Some(peer) = peer else {
                return Ok(());
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(self.timed_out(peer, now - start));
            }
            idle.wait(progressed);
        }
    }

    /// Takes the next part of receive `i` if it has arrived (only the
    /// first unfinished receive of a sender and tag may match, so repeated
    /// keys fill in order); whether it took one.
    fn receive(
        &self,
        i: usize,
        recvs: &mut [Incoming],
        progress: &mut [Progress],
    ) -> Result<bool, CommError> {
        let key = (recvs[i].from, recvs[i].tag);
        if progress[i] == Progress::Done
            || (0..i).any(|j| progress[j] != Progress::Done && (recvs[j].from, recvs[j].tag) == key)
        {
            return Ok(false);
        }
        let src = self.comm.process_at_rank(Self::mpi_rank(recvs[i].from));
        let tag = i32::try_from(recvs[i].tag).expect("tags are below 2^23");
        let Some((msg, status)) = src.immediate_matched_probe_with_tag(tag) else {
            return Ok(false);
        };
        let count = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
        let malformed = |code| CommError::Transport {
            rank: self.rank,
            code,
        };
        let m = &mut recvs[i].message;
        progress[i] = match progress[i] {
            Progress::First => {
                // The vector's old bytes are overwritten, not zeroed
                // first: only a longer message grows it.
                fit(m, count);
                msg.matched_receive_into(&mut m[..count]);
                if count < FRAME {
                    return Err(malformed(-1));
                }
                let body = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
                let body = usize::try_from(body).unwrap_or(usize::MAX);
                let split = m[0] == SPLIT_FRAME;
                m.copy_within(FRAME..count, 0);
                let header = count - FRAME;
                if split && body > MAX_MESSAGE {
                    return Err(malformed(-2));
                }
                let len = header + if split { body } else { 0 };
                fit(m, len);
                m.truncate(len);
                if split {
                    Progress::Body(body)
                } else {
                    Progress::Done
                }
            }
            Progress::Body(len) if count == len => {
                let at = m.len() - len;
                msg.matched_receive_into(&mut m[at..]);
                Progress::Done
            }
            Progress::Body(_) => {
                let mut sink = vec![0u8; count];
                msg.matched_receive_into(&mut sink[..]);
                return Err(malformed(-2));
            }
            Progress::Done => unreachable!("skipped above"),
        };
        Ok(true)
    }

    /// The error of a wait for `peer` that reached its deadline after
    /// `waited`: records the rank that stopped (or nobody, see
    /// [`culprit`](Self::culprit)); if another rank's failure came first,
    /// its error.
    fn timed_out(&self, peer: usize, waited: Duration) -> CommError {
        let culprit = self.culprit(peer);
        let ours = Failure {
            rank: culprit,
            cause: Cause::Unresponsive,
        };
        self.record(ours);
        match self.failure.get() {
            Some(first) if first != ours => failure_error(self.rank, first),
            _ => CommError::Timeout {
                rank: self.rank,
                peer: culprit,
                waited,
            },
        }
    }
}

/// A posted send and its receiver.
type Pending<'a, S> = (usize, Request<'a, [u8], S>);

/// Backs off while nothing progresses: yields for the first millisecond,
/// then naps.
struct Idle {
    since: Option<Instant>,
}

impl Idle {
    const fn new() -> Self {
        Self { since: None }
    }

    fn wait(&mut self, progressed: bool) {
        if progressed {
            self.since = None;
            return;
        }
        let since = *self.since.get_or_insert_with(Instant::now);
        if since.elapsed() < Duration::from_millis(1) {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

impl Communicator for MpiCommunicator {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.size
    }

    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
    ) -> Result<(), CommError> {
        let start = Instant::now();
        self.valid(sends, recvs)?;
        self.poll_notices();
        if let Some(f) = self.failure.get() {
            // Found by a notice: drain (nothing of ours is pending).
            self.drain::<StaticScope>(Vec::new());
            return Err(failure_error(self.rank, f));
        }
        // Frames (and small messages whole), outside the scope so they
        // outlive the requests.
        let frames: Vec<Vec<u8>> = sends.iter().map(frame).collect();
        scope(|sc| {
            let mut pending = self.post(sc, sends, &frames);
            let result = self.poll(&mut pending, recvs, start, start + timeout);
            self.waiting_for.set(None);
            let Err(error) = result else {
                return Ok(());
            };
            if let Some(f) = error.failure(self.rank) {
                self.record(f);
            }
            self.drain(pending.into_iter().map(|(_, r)| r).collect());
            Err(error)
        })
    }

    /// Records `failure`, notifies the others and drains. If it is this
    /// rank's own panic (a collective unwinding), ends the job instead
    /// (`MPI_Abort`).
    fn fail(&self, failure: Failure) {
        if failure == Failure::of(self.rank, Cause::Panicked) {
            self.abort_after_panic();
        }
        self.record(failure);
        self.poll_notices();
        // Outside an exchange nothing of ours is pending: notify and drain.
        self.drain::<StaticScope>(Vec::new());
    }

    fn failure(&self) -> Option<Failure> {
        self.poll_notices();
        self.failure.get()
    }

    /// [`Topology::processes`]: this transport's measured costs, not the
    /// thread transport's.
    fn topology(&self) -> Topology {
        Topology::processes()
    }
}

/// Dropped while its thread panics (the rank's program unwinds with the
/// communicator), it ends the job (`MPI_Abort`): the peers would wait for
/// this rank, and this rank for them in `MPI_Finalize`.
impl Drop for MpiCommunicator {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.abort_after_panic();
        }
    }
}

/// The MPI message that carries `o`'s frame and header, and its body too
/// unless the body is large enough to go on its own.
fn frame(o: &Outgoing<'_>) -> Vec<u8> {
    let split = o.body.len() >= SPLIT;
    let mut v = Vec::with_capacity(FRAME + o.header.len() + if split { 0 } else { o.body.len() });
    v.push(if split { SPLIT_FRAME } else { WHOLE });
    v.extend_from_slice(&[0; 7]);
    v.extend_from_slice(&(o.body.len() as u64).to_le_bytes());
    v.extend_from_slice(o.header);
    if !split {
        v.extend_from_slice(o.body);
    }
    v
}
