//! The MPI transport's control messages, on their own tag: abort and
//! quiesce notices, which spread a failure and end it, and the queries
//! that find the rank that stopped when a wait times out.

use std::time::{Duration, Instant};

use ::mpi::point_to_point::{Destination, Source};
use ::mpi::request::{Request, Scope};
use ::mpi::topology::Communicator as _;
use ::mpi::traits::Equivalence;

use super::{Idle, MpiCommunicator};
use crate::error::{Cause, Failure};

/// The tag of control messages: above every tag the crate and its callers
/// use, and within what every Open MPI transport layer allows (`2^23 - 1`
/// with UCX).
pub(super) const CONTROL: i32 = (1 << 23) - 1;

/// How long a failed rank drains: completes its sends and waits for the
/// others' quiesce notices.
const GRACE: Duration = Duration::from_secs(10);

/// How long a rank asked whom it waits for has to answer before it is
/// taken to have stopped ([`MpiCommunicator::culprit`]): a rank inside an
/// exchange answers at its next poll, within a millisecond, unless it is
/// reducing a large message or its process waits for a core.
const PROBE: Duration = Duration::from_millis(250);

/// What a control message says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `failure` aborted the world.
    Abort,
    /// The sender has failed and will send nothing more.
    Quiesce,
    /// Whom does the receiver wait for? (`number` identifies the question.)
    Query,
    /// The answer to query `number`: `rank`, or nobody.
    Reply,
}

/// A control message: 24 bytes, `[kind, cause, 0 x 6, rank, number]`, the
/// last two little-endian `u64`s (`u64::MAX`: no rank).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Notice {
    kind: Kind,
    cause: Cause,
    rank: Option<usize>,
    number: u64,
}

const NOTICE: usize = 24;

impl Notice {
    const fn about(kind: Kind, f: Failure) -> Self {
        Self {
            kind,
            cause: f.cause,
            rank: f.rank,
            number: 0,
        }
    }

    fn encode(&self) -> [u8; NOTICE] {
        let mut b = [0u8; NOTICE];
        b[0] = match self.kind {
            Kind::Abort => 1,
            Kind::Quiesce => 2,
            Kind::Query => 3,
            Kind::Reply => 4,
        };
        b[1] = cause_code(self.cause);
        let rank = self.rank.map_or(u64::MAX, |r| r as u64);
        b[8..16].copy_from_slice(&rank.to_le_bytes());
        b[16..24].copy_from_slice(&self.number.to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        if b.len() != NOTICE {
            return None;
        }
        let kind = match b[0] {
            1 => Kind::Abort,
            2 => Kind::Quiesce,
            3 => Kind::Query,
            4 => Kind::Reply,
            _ => return None,
        };
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Some(Self {
            kind,
            cause: cause_from(b[1]),
            rank: usize::try_from(u64_at(8)).ok().filter(|&r| r != usize::MAX),
            number: u64_at(16),
        })
    }

    const fn failure(&self) -> Failure {
        Failure {
            rank: self.rank,
            cause: self.cause,
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

/// What [`MpiCommunicator::ask`] learnt.
enum Asked {
    /// No answer within [`PROBE`].
    Silent,
    /// The rank it waits for, or nobody.
    Waits(Option<usize>),
    /// A failure notice arrived meanwhile.
    Failed,
}

impl MpiCommunicator {
    /// Sends `notice` to `to`. Notices are small: MPI sends them eagerly,
    /// so the blocking send returns at once.
    fn send_notice(&self, to: usize, notice: &Notice) {
        self.comm
            .process_at_rank(Self::mpi_rank(to))
            .send_with_tag(&notice.encode()[..], CONTROL);
    }

    /// Sends a notice of `kind` about `f` to every other rank.
    fn notify(&self, kind: Kind, f: Failure) {
        let notice = Notice::about(kind, f);
        for q in (0..self.size).filter(|&q| q != self.rank) {
            self.send_notice(q, &notice);
        }
    }

    /// Handles every control message that has arrived.
    pub(super) fn poll_notices(&self) {
        while let Some((msg, status)) = self
            .comm
            .any_process()
            .immediate_matched_probe_with_tag(CONTROL)
        {
            let count = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
            let mut bytes = vec![0u8; count];
            msg.matched_receive_into(&mut bytes[..]);
            let from = usize::try_from(status.source_rank()).unwrap_or(0);
            self.on_notice(from, &bytes);
        }
    }

    /// Receives and discards one message, if any has arrived (handling it
    /// if it is a control message).
    fn discard_one(&self) -> bool {
        let Some((msg, status)) = self.comm.any_process().immediate_matched_probe() else {
            return false;
        };
        let count = usize::try_from(status.count(u8::equivalent_datatype())).unwrap_or(0);
        let mut sink = vec![0u8; count];
        msg.matched_receive_into(&mut sink[..]);
        if status.tag() == CONTROL {
            let from = usize::try_from(status.source_rank()).unwrap_or(0);
            self.on_notice(from, &sink);
        }
        true
    }

    /// Acts on a control message from `from`: records a failure, a rank's
    /// quiescence or the answer to this rank's query, or answers a query
    /// (only while no failure is known: then the asker learns of it too).
    fn on_notice(&self, from: usize, bytes: &[u8]) {
        let Some(notice) = Notice::decode(bytes) else {
            return;
        };
        match notice.kind {
            Kind::Abort => self.record(notice.failure()),
            Kind::Quiesce => {
                self.record(notice.failure());
                if let Some(q) = self.quiesced.borrow_mut().get_mut(from) {
                    *q = true;
                }
            }
            Kind::Query if self.failure.get().is_none() => {
                let reply = Notice {
                    kind: Kind::Reply,
                    cause: Cause::Unresponsive,
                    rank: self.waiting_for.get(),
                    number: notice.number,
                };
                self.send_notice(from, &reply);
            }
            Kind::Query => {}
            Kind::Reply => {
                if notice.number == self.asked.get() {
                    self.answer.set(Some(notice.rank));
                }
            }
        }
    }

    /// The rank that stopped, as seen by this rank, whose wait for `peer`
    /// has timed out: ask `peer` whom it waits for, then that rank, and so
    /// on; the first rank that does not answer within [`PROBE`] is named.
    /// `None` if the chain comes back to a rank already on it (every rank
    /// on it waits for another: the calls do not match), if a rank answers
    /// that it waits for nobody (it is alive and moving: the collective is
    /// just slower than its timeout), or if a failure notice arrives
    /// meanwhile (that failure is the world's).
    pub(super) fn culprit(&self, peer: usize) -> Option<usize> {
        let mut seen = vec![false; self.size];
        seen[self.rank] = true;
        let mut rank = peer;
        loop {
            if std::mem::replace(&mut seen[rank], true) {
                return None;
            }
            match self.ask(rank) {
                Asked::Silent => return Some(rank),
                Asked::Waits(Some(next)) => rank = next,
                Asked::Waits(None) | Asked::Failed => return None,
            }
        }
    }

    /// Asks `rank` whom it waits for, answering others' questions while
    /// waiting for the answer.
    fn ask(&self, rank: usize) -> Asked {
        let number = self.asked.get() + 1;
        self.asked.set(number);
        self.answer.set(None);
        let query = Notice {
            kind: Kind::Query,
            cause: Cause::Unresponsive,
            rank: None,
            number,
        };
        self.send_notice(rank, &query);
        let until = Instant::now() + PROBE;
        let mut idle = Idle::new();
        while Instant::now() < until {
            self.poll_notices();
            if self.failure.get().is_some() {
                return Asked::Failed;
            }
            if let Some(answer) = self.answer.take() {
                return Asked::Waits(answer);
            }
            idle.wait(false);
        }
        Asked::Silent
    }

    /// After a failure: tell everyone, complete this rank's sends while
    /// discarding what arrives, announce quiescence, and wait (until
    /// [`GRACE`]) for everyone else's. Calls `MPI_Abort` if a send cannot
    /// complete.
    pub(super) fn drain<'a, S: Scope<'a>>(&self, mut pending: Vec<Request<'a, [u8], S>>) {
        let failure = self.failure.get().expect("draining after a failure");
        if self.drained.get() && pending.is_empty() {
            return;
        }
        self.drained.set(true);
        if !self.notified.get() {
            self.notified.set(true);
            self.notify(Kind::Abort, failure);
        }
        let end = Instant::now() + GRACE;
        let mut announced = false;
        let mut idle = Idle::new();
        loop {
            let before = pending.len();
            pending = pending.into_iter().filter_map(|r| r.test().err()).collect();
            let mut progressed = pending.len() != before;
            while self.discard_one() {
                progressed = true;
            }
            if pending.is_empty() && !announced {
                announced = true;
                self.notify(Kind::Quiesce, failure);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_decode_what_they_encode() {
        for kind in [Kind::Abort, Kind::Quiesce, Kind::Query, Kind::Reply] {
            for rank in [None, Some(0), Some(5)] {
                let n = Notice {
                    kind,
                    cause: Cause::Mismatch,
                    rank,
                    number: 77,
                };
                assert_eq!(Notice::decode(&n.encode()), Some(n));
            }
        }
        assert_eq!(Notice::decode(&[0u8; NOTICE]), None);
        assert_eq!(Notice::decode(&[1u8; 5]), None);
    }
}
