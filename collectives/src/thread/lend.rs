//! The thread transport's exchanges that lend bodies in place
//! (`loan.rs`): read by every receiver ([`Communicator::exchange_apply`]),
//! or written by receivers that each hold one from several lenders at
//! once ([`Communicator::exchange_mut_many`]).

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use super::{Envelope, LEND_MIN, ThreadCommunicator, lock};
use crate::comm::{Apply, ApplyMany, Incoming, Outgoing, OutgoingMut, Tag};
use crate::error::{Cause, CommError, Failure};
use crate::loan::{Lent, Loan, with_loans, write_all};

#[cfg(doc)]
use crate::comm::Communicator;

impl ThreadCommunicator {
    /// [`Communicator::exchange_apply`] (see the trait impl's docs).
    pub(super) fn lend_apply(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
        apply: &mut Apply<'_>,
    ) -> Result<(), CommError> {
        let (start, deadline, spin) = self.begin(sends, recvs, timeout)?;
        let s = &*self.shared;
        with_loans(|lent| {
            for o in sends {
                if o.body.len() >= LEND_MIN {
                    let mut data = s.take_vec(o.header.len());
                    data.extend_from_slice(o.header);
                    let loan = lent.lend(o.body, self.rank, o.to);
                    self.post(o.to, o.tag, data, Some(loan));
                } else {
                    let mut data = s.take_vec(o.len());
                    data.extend_from_slice(o.header);
                    data.extend_from_slice(o.body);
                    self.post(o.to, o.tag, data, None);
                }
            }
            for (k, i) in recvs.iter().enumerate() {
                loop {
                    let e = self.wait(i.from, i.tag, deadline, start, spin)?;
                    let applied = match &e.loan {
                        None => Some(apply(k, &e.data, &[])),
                        Some(loan) => {
                            loan.read(|body| apply(k, &e.data, body), || self.returned(loan))
                        }
                    };
                    s.give_vec(e.data);
                    // None: revoked, its sender failed (the next wait says).
                    if let Some(result) = applied {
                        result?;
                        break;
                    }
                }
            }
            self.await_loans(lent, deadline, start)
        })
    }

    /// [`Communicator::exchange_mut_many`] (see the trait impl's docs).
    pub(super) fn lend_mut_many(
        &self,
        tag: Tag,
        sends: Vec<OutgoingMut<'_>>,
        from: &[usize],
        timeout: Duration,
        apply: &mut ApplyMany<'_>,
    ) -> Result<(), CommError> {
        let out: Vec<Outgoing<'_>> = sends
            .iter()
            .map(|o| Outgoing::new(o.to, tag, o.header))
            .collect();
        let into: Vec<Incoming> = from.iter().map(|&f| Incoming::new(f, tag)).collect();
        let begun = self.begin(&out, &into, timeout);
        let (start, deadline, _) = begun?;
        let s = &*self.shared;
        with_loans(|lent| {
            for o in sends {
                let mut data = s.take_vec(o.header.len());
                data.extend_from_slice(o.header);
                let loan = lent.lend_mut(o.body, self.rank, o.to);
                self.post(o.to, tag, data, Some(loan));
            }
            let mut got = Vec::with_capacity(from.len());
            for &f in from {
                got.push(self.wait(f, tag, deadline, start, Duration::ZERO)?);
            }
            let applied = self.apply_lent(&got, apply, deadline, start);
            for e in got {
                s.give_vec(e.data);
            }
            applied?;
            self.await_loans(lent, deadline, start)?;
            s.failure().map_or(Ok(()), |f| Err(self.error(f)))
        })
    }

    /// `apply` on the messages `got`, their mutable loans all taken at
    /// once ([`write_all`]). A failure of `apply` (or its panic) is recorded
    /// before the loans go back; a revoked loan (its lender failed) is
    /// answered by waiting for that failure, as a next wait would.
    fn apply_lent(
        &self,
        got: &[Envelope],
        apply: &mut ApplyMany<'_>,
        deadline: Instant,
        start: Instant,
    ) -> Result<(), CommError> {
        let s = &*self.shared;
        let loans: Vec<Option<&Loan>> = got
            .iter()
            .map(|e| e.loan.as_deref().filter(|l| l.mutable()))
            .collect();
        let mut applied = |bodies: &mut [&mut [u8]]| {
            let _panic = FailOnPanic(self, std::thread::panicking());
            let mut messages: Vec<(&[u8], &mut [u8])> = got
                .iter()
                .map(|e| &e.data[..])
                .zip(bodies.iter_mut().map(|b| &mut **b))
                .collect();
            let result = apply(&mut messages);
            if let Err(e) = &result {
                let f = e.failure(self.rank);
                s.fail(f.unwrap_or(Failure::of(self.rank, Cause::Mismatch)));
            }
            result
        };
        let mut revoked = |k: usize| -> Result<(), CommError> {
            loop {
                let e = &got[k];
                let next = self.wait(e.from, e.tag, deadline, start, Duration::ZERO)?;
                s.give_vec(next.data);
            }
        };
        write_all(&loans, &|l| self.returned(l), &mut applied, &mut revoked)
    }

    /// Wakes the rank that lent `loan`, now returned. Taking its queue's
    /// lock orders the return before its next check.
    pub(super) fn returned(&self, loan: &Loan) {
        let b = &self.shared.boxes[loan.lender()];
        let _guard = lock(&b.queue);
        b.ready.notify_all();
    }

    /// Waits until the receivers have returned every loan of `lent`.
    fn await_loans(
        &self,
        lent: &Lent<'_>,
        deadline: Instant,
        start: Instant,
    ) -> Result<(), CommError> {
        let s = &*self.shared;
        let b = &s.boxes[self.rank];
        let mut queue = lock(&b.queue);
        loop {
            let Some(borrower) = lent.outstanding() else {
                return Ok(());
            };
            if let Some(f) = s.failure() {
                return Err(self.error(f));
            }
            let now = Instant::now();
            if now >= deadline {
                drop(queue);
                let _waiting = s.waiting(self.rank, borrower);
                return Err(self.timed_out(borrower, now - start));
            }
            let _waiting = s.waiting(self.rank, borrower);
            queue = b
                .ready
                .wait_timeout(queue, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// Records this rank's panic while it holds lent bodies, before they go
/// back unapplied ([`ThreadCommunicator::apply_lent`]).
/// (The flag: already unwinding before, not this rank's new panic.)
struct FailOnPanic<'a>(&'a ThreadCommunicator, bool);

impl Drop for FailOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.1 {
            let r = self.0.rank;
            self.0.shared.fail(Failure::of(r, Cause::Panicked));
        }
    }
}
