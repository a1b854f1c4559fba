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
//! - Having failed, a rank *drains*: it completes its own pending sends
//!   while receiving and discarding whatever arrives, tells every rank
//!   when it will send no more (a *quiesce* notice), and returns once every
//!   rank has said so, or after a grace period of 10 s. Ranks that are still in a collective see the abort at
//!   their next poll and drain too; a rank that is between collectives
//!   does so at its next call.
//! - If a send of this rank cannot complete within the grace period (its
//!   receiver never drains: it hangs, or left without calling again), MPI
//!   offers no way to withdraw it, and returning would leave MPI writing
//!   from a buffer that is gone; the transport then calls `MPI_Abort`,
//!   ending the job with an error rather than hanging.
//! - A process that dies is reported by `mpirun`, which ends the job.
//!
//! After a failure the communicator stays aborted; [`MpiCommunicator::duplicate`]
//! (collective) gives the surviving ranks a fresh one. An
//! [`AbortHandle`](crate::AbortHandle) has no MPI counterpart: MPI
//! communicators are used from one thread.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::time::{Duration, Instant};

use ::mpi::point_to_point::{Destination, Source};
use ::mpi::request::{Request, scope};
use ::mpi::topology::{Communicator as _, SimpleCommunicator};
use ::mpi::traits::Equivalence;

use crate::comm::{Communicator, Incoming, Outgoing, failure_error};
use crate::error::{Cause, CommError, Failure};

pub use ::mpi::environment::Universe;
pub use ::mpi::topology::SimpleCommunicator as RawCommunicator;

/// Initialises MPI (`MPI_Init`); `None` if it already was. Keep the
/// [`Universe`] alive for as long as MPI is used: dropping it finalises.
#[must_use]
pub fn initialize() -> Option<Universe> {
    ::mpi::initialize()
}

/// The tag of abort and quiesce notices: above every tag the crate and its
/// callers use, and within what every Open MPI transport layer allows
/// (`2^23 - 1` with UCX).
const CONTROL: i32 = (1 << 23) - 1;

/// Bodies from this size on travel as their own MPI message, uncopied.
const SPLIT: usize = 32 * 1024;

/// Bytes before the header in an MPI message: a kind byte, padding, and the
/// body's length when it follows separately.
const FRAME: usize = 16;
const WHOLE: u8 = 1;
const SPLIT_FRAME: u8 = 2;

const NOTICE_ABORT: u8 = 1;
const NOTICE_QUIESCE: u8 = 2;

/// How long a failed rank drains: completes its sends and waits for the
/// others' quiesce notices.
const GRACE: Duration = Duration::from_secs(10);

/// One rank of an MPI communicator. See the [module docs](self).
pub struct MpiCommunicator {
    comm: SimpleCommunicator,
    rank: usize,
    size: usize,
    failure: Cell<Option<Failure>>,
    notified: Cell<bool>,
    drained: Cell<bool>,
    quiesced: RefCell<Vec<bool>>,
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
        }
    }

    /// A communicator over a duplicate of `MPI_COMM_WORLD`.
    #[must_use]
    pub fn world(universe: &Universe) -> Self {
        Self::new(universe.world().duplicate())
    }

    /// A fresh communicator over the same processes (`MPI_Comm_dup`):
    /// collective, every rank must call it. Used to go on after a failure
    /// aborted this one.
    #[must_use]
    pub fn duplicate(&self) -> Self {
        Self::new(self.comm.duplicate())
    }

    /// The MPI communicator.
    #[must_use]
    pub const fn raw(&self) -> &SimpleCommunicator {
        &self.comm
    }

    fn mpi_rank(r: usize) -> i32 {
        i32::try_from(r).expect("MPI ranks fit in i32")
    }

    /// Sends a notice to every other rank. Notices are 24 bytes: MPI sends
    /// them eagerly, so the blocking send returns at once.
    fn notify(&self, kind: u8, f: Failure) {
        let mut notice = [0u8; 24];
        notice[0] = kind;
        notice[1] = cause_code(f.cause);
        notice[8..16].copy_from_slice(&(f.rank as u64).to_le_bytes());
        for q in (0..self.size).filter(|&q| q != self.rank) {
            self.comm
                .process_at_rank(Self::mpi_rank(q))
                .send_with_tag(&notice[..], CONTROL);
        }
    }

    /// Receives every notice that has arrived; records the first failure
    /// and which ranks have quiesced.
    fn poll_notices(&self) {
        while let Some((msg, status)) = self
            .comm
            .any_process()
            .immediate_matched_probe_with_tag(CONTROL)
        {
            let from = usize::try_from(status.source_rank()).unwrap_or(0);
            let mut notice = [0u8; 24];
            let count = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
            if count == notice.len() {
                msg.matched_receive_into(&mut notice[..]);
            } else {
                let mut other = vec![0u8; count];
                msg.matched_receive_into(&mut other[..]);
                continue;
            }
            let rank = u64::from_le_bytes(notice[8..16].try_into().expect("8 bytes"));
            let failure = Failure {
                rank: usize::try_from(rank).unwrap_or(from),
                cause: cause_from(notice[1]),
            };
            match notice[0] {
                NOTICE_ABORT => self.record(failure),
                NOTICE_QUIESCE => {
                    self.record(failure);
                    if let Some(q) = self.quiesced.borrow_mut().get_mut(from) {
                        *q = true;
                    }
                }
                _ => {}
            }
        }
    }

    fn record(&self, failure: Failure) {
        if self.failure.get().is_none() {
            self.failure.set(Some(failure));
        }
    }

    /// Receives and discards one data message, if any has arrived.
    fn discard_one(&self) -> bool {
        match self.comm.any_process().immediate_matched_probe() {
            Some((msg, status)) => {
                let count = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
                let mut sink = vec![0u8; count];
                msg.matched_receive_into(&mut sink[..]);
                if status.tag() == CONTROL {
                    // A notice: handle it as one (it was taken off the queue).
                    if count == 24 {
                        let from = usize::try_from(status.source_rank()).unwrap_or(0);
                        let rank = u64::from_le_bytes(sink[8..16].try_into().expect("8 bytes"));
                        let failure = Failure {
                            rank: usize::try_from(rank).unwrap_or(from),
                            cause: cause_from(sink[1]),
                        };
                        self.record(failure);
                        if sink[0] == NOTICE_QUIESCE
                            && let Some(q) = self.quiesced.borrow_mut().get_mut(from)
                        {
                            *q = true;
                        }
                    }
                }
                true
            }
            None => false,
        }
    }

    /// After a failure: tell everyone, complete this rank's sends while
    /// discarding what arrives, announce quiescence, and wait (until
    /// [`GRACE`]) for everyone else's. Calls `MPI_Abort` if a send cannot
    /// complete.
    fn drain<'a, S: ::mpi::request::Scope<'a>>(&self, mut pending: Vec<Request<'a, [u8], S>>) {
        let failure = self.failure.get().expect("draining after a failure");
        if self.drained.get() && pending.is_empty() {
            return;
        }
        self.drained.set(true);
        if !self.notified.get() {
            self.notified.set(true);
            self.notify(NOTICE_ABORT, failure);
        }
        let end = Instant::now() + GRACE;
        let mut announced = false;
        let mut idle = Idle::new();
        loop {
            let mut progressed = false;
            pending = pending
                .into_iter()
                .filter_map(|r| match r.test() {
                    Ok(_) => {
                        progressed = true;
                        None
                    }
                    Err(r) => Some(r),
                })
                .collect();
            while self.discard_one() {
                progressed = true;
            }
            if pending.is_empty() && !announced {
                announced = true;
                self.notify(NOTICE_QUIESCE, failure);
            }
            let everyone = self
                .quiesced
                .borrow()
                .iter()
                .enumerate()
                .all(|(q, &done)| done || q == self.rank);
            if announced && everyone {
                return;
            }
            if Instant::now() >= end {
                if pending.is_empty() {
                    return;
                }
                eprintln!(
                    "tessera-collectives: rank {}: {} send(s) cannot complete after a failure ({failure:?}); \
                     MPI cannot withdraw them, aborting the job",
                    self.rank,
                    pending.len()
                );
                self.comm.abort(70);
            }
            idle.wait(progressed);
        }
    }
}

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

const fn cause_code(c: Cause) -> u8 {
    match c {
        Cause::Aborted => 1,
        Cause::Panicked => 2,
        Cause::Exited => 3,
        Cause::Unresponsive => 4,
        Cause::Mismatch => 5,
        Cause::Transport => 6,
    }
}

const fn cause_from(c: u8) -> Cause {
    match c {
        1 => Cause::Aborted,
        2 => Cause::Panicked,
        3 => Cause::Exited,
        4 => Cause::Unresponsive,
        5 => Cause::Mismatch,
        _ => Cause::Transport,
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
        let deadline = start + timeout;
        let size = self.size;
        if let Some(bad) = sends
            .iter()
            .map(|o| o.to)
            .chain(recvs.iter().map(|i| i.from))
            .find(|&r| r >= size)
        {
            return Err(CommError::RankOutOfRange { rank: bad, size });
        }
        let max = i32::MAX as usize - FRAME;
        if let Some(o) = sends.iter().find(|o| o.len() > max) {
            return Err(CommError::TooLarge {
                bytes: o.len(),
                max,
            });
        }
        self.poll_notices();
        if let Some(f) = self.failure.get() {
            // Found by a notice: drain (nothing of ours is pending).
            self.drain::<::mpi::request::StaticScope>(Vec::new());
            return Err(failure_error(self.rank, f));
        }

        // Frames (and small messages whole), outside the scope so they
        // outlive the requests.
        let frames: Vec<Vec<u8>> = sends
            .iter()
            .map(|o| {
                let split = o.body.len() >= SPLIT;
                let mut v = Vec::with_capacity(
                    FRAME + o.header.len() + if split { 0 } else { o.body.len() },
                );
                v.push(if split { SPLIT_FRAME } else { WHOLE });
                v.extend_from_slice(&[0; 7]);
                v.extend_from_slice(&(o.body.len() as u64).to_le_bytes());
                v.extend_from_slice(o.header);
                if !split {
                    v.extend_from_slice(o.body);
                }
                v
            })
            .collect();

        scope(|sc| {
            let mut pending: Vec<Request<'_, [u8], _>> = Vec::with_capacity(2 * sends.len());
            for (o, frame) in sends.iter().zip(&frames) {
                let to = self.comm.process_at_rank(Self::mpi_rank(o.to));
                let tag = i32::try_from(o.tag).expect("tags are below 2^23");
                pending.push(to.immediate_send_with_tag(sc, &frame[..], tag));
                if frame[0] == SPLIT_FRAME {
                    pending.push(to.immediate_send_with_tag(sc, o.body, tag));
                }
            }
            let mut progress = vec![Progress::First; recvs.len()];
            let mut idle = Idle::new();
            let error = 'poll: loop {
                let mut progressed = false;
                // Receives: per (sender, tag), only the first unfinished one
                // may match, so repeated keys fill in order.
                for i in 0..recvs.len() {
                    if progress[i] == Progress::Done {
                        continue;
                    }
                    let key = (recvs[i].from, recvs[i].tag);
                    if (0..i).any(|j| {
                        progress[j] != Progress::Done && (recvs[j].from, recvs[j].tag) == key
                    }) {
                        continue;
                    }
                    let src = self.comm.process_at_rank(Self::mpi_rank(recvs[i].from));
                    let tag = i32::try_from(recvs[i].tag).expect("tags are below 2^23");
                    let Some((msg, status)) = src.immediate_matched_probe_with_tag(tag) else {
                        continue;
                    };
                    progressed = true;
                    let count =
                        usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
                    let m = &mut recvs[i].message;
                    match progress[i] {
                        Progress::First => {
                            // The vector's old bytes are overwritten, not
                            // zeroed first: only a longer message grows it.
                            fit(m, count);
                            msg.matched_receive_into(&mut m[..count]);
                            if count < FRAME {
                                break 'poll CommError::Transport {
                                    rank: self.rank,
                                    code: -1,
                                };
                            }
                            let body = u64::from_le_bytes(m[8..16].try_into().expect("8 bytes"));
                            let body = usize::try_from(body).unwrap_or(usize::MAX);
                            let kind = m[0];
                            m.copy_within(FRAME..count, 0);
                            let header = count - FRAME;
                            progress[i] = if kind == SPLIT_FRAME {
                                if body > max {
                                    break 'poll CommError::Transport {
                                        rank: self.rank,
                                        code: -2,
                                    };
                                }
                                fit(m, header + body);
                                m.truncate(header + body);
                                Progress::Body(body)
                            } else {
                                m.truncate(header);
                                Progress::Done
                            };
                        }
                        Progress::Body(len) => {
                            if count != len {
                                let mut sink = vec![0u8; count];
                                msg.matched_receive_into(&mut sink[..]);
                                break 'poll CommError::Transport {
                                    rank: self.rank,
                                    code: -2,
                                };
                            }
                            let at = m.len() - len;
                            msg.matched_receive_into(&mut m[at..]);
                            progress[i] = Progress::Done;
                        }
                        Progress::Done => unreachable!("skipped above"),
                    }
                }
                // Sends.
                let before = pending.len();
                pending = pending.into_iter().filter_map(|r| r.test().err()).collect();
                progressed |= pending.len() != before;
                if pending.is_empty() && progress.iter().all(|&p| p == Progress::Done) {
                    return Ok(());
                }
                // Failures elsewhere.
                self.poll_notices();
                if let Some(f) = self.failure.get() {
                    break failure_error(self.rank, f);
                }
                let now = Instant::now();
                if now >= deadline {
                    let peer = progress
                        .iter()
                        .position(|&p| p != Progress::Done)
                        .map_or_else(
                            || sends.first().map_or(self.rank, |o| o.to),
                            |i| recvs[i].from,
                        );
                    break CommError::Timeout {
                        rank: self.rank,
                        peer,
                        waited: now - start,
                    };
                }
                idle.wait(progressed);
            };
            if let Some(f) = error.failure(self.rank) {
                self.record(f);
            }
            self.drain(pending);
            Err(error)
        })
    }

    fn fail(&self, failure: Failure) {
        self.record(failure);
        self.poll_notices();
        // Outside an exchange nothing of ours is pending: notify and drain.
        self.drain::<::mpi::request::StaticScope>(Vec::new());
    }

    fn failure(&self) -> Option<Failure> {
        self.poll_notices();
        self.failure.get()
    }
}
