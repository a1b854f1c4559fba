//! Message bodies lent in place between the thread transport's ranks: the
//! receiver reads (reduces or copies) a large body straight from the
//! sender's buffer, and the sender waits until it has. This saves the
//! sender's copy into a message vector, one of the three passes over every
//! byte of a ring all-reduce step. A body lent mutably
//! ([`Lent::lend_mut`]) is also written by the receiver: the two-rank
//! ring's receiver writes the finished values into its peer's buffer.
//!
//! The only `unsafe` of the crate is here: a receiver turns a lent
//! address back into a slice. It is sound because of three rules, all
//! enforced in this module:
//!
//! 1. A body is lent only inside [`with_loans`], for a lifetime `'a` that
//!    outlives the call: the slice stays borrowed (so allocated, and
//!    unchanged: a shared borrow of bytes, which have no interior
//!    mutability) until `with_loans` returns. A body lent to be written
//!    ([`Lent::lend_mut`]) is a `&'a mut [u8]` the lender gives up for
//!    `'a`: only the borrower that holds the loan (rule 2) touches it.
//! 2. A receiver reads (or writes) only between winning the loan's state from
//!    `POSTED` to `TAKEN` and setting it to `RETURNED` (a guard sets it on
//!    every exit, unwinding included).
//! 3. `with_loans` does not return, normally or by unwinding, before every
//!    loan made in it is `RETURNED` or `REVOKED` (revoking is possible only
//!    from `POSTED`, after which no receiver can take it). The guard that
//!    waits is owned by `with_loans`, so a caller cannot leak it.

#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

const POSTED: u8 = 0;
const TAKEN: u8 = 1;
const RETURNED: u8 = 2;
const REVOKED: u8 = 3;

/// A body lent by rank `lender`.
#[derive(Debug)]
pub(crate) struct Loan {
    /// The body's address (exposed provenance) and length.
    addr: usize,
    len: usize,
    state: AtomicU8,
    lender: usize,
    borrower: usize,
    /// Lent as `&'a mut [u8]` ([`Lent::lend_mut`]): the borrower may write.
    mutable: bool,
}

impl Loan {
    /// The rank that lent it (to be woken when it is returned).
    pub(crate) const fn lender(&self) -> usize {
        self.lender
    }

    /// Whether the borrower may write the body ([`Loan::write`]).
    pub(crate) const fn mutable(&self) -> bool {
        self.mutable
    }

    /// Calls `read` on the body unless the loan was revoked (`None`), then
    /// returns the loan and calls `returned` (which wakes the lender).
    pub(crate) fn read<R>(
        &self,
        read: impl for<'b> FnOnce(&'b [u8]) -> R,
        returned: impl FnOnce(),
    ) -> Option<R> {
        let ptr = std::ptr::with_exposed_provenance::<u8>(self.addr);
        self.taken(
            || {
                // SAFETY: `taken` runs this only while this thread holds
                // the loan (TAKEN), so the lender's `with_loans` has not
                // returned and will not before the loan is RETURNED (rule
                // 3); until then the `len` bytes at `addr` are the lent
                // `&'a [u8]`, still borrowed, so allocated, initialised and
                // not mutated (rule 1). `read` cannot keep the slice: its
                // result does not borrow from it (`for<'b>`).
                let body = unsafe { std::slice::from_raw_parts(ptr, self.len) };
                read(body)
            },
            returned,
        )
    }

    /// As [`read`](Self::read), with the body writable; `None` also if it
    /// was not lent mutably (then it is not taken: its lender's call did
    /// not match, which the caller reports).
    pub(crate) fn write<R>(
        &self,
        write: impl for<'b> FnOnce(&'b mut [u8]) -> R,
        returned: impl FnOnce(),
    ) -> Option<R> {
        if !self.mutable {
            return None;
        }
        let ptr = std::ptr::with_exposed_provenance_mut::<u8>(self.addr);
        self.taken(
            || {
                // SAFETY: as in `read`; and the loan was made from a
                // `&'a mut [u8]` ([`Lent::lend_mut`]) that the lender gave
                // up for `'a`, and TAKEN is this thread's alone, so no other
                // reference to the bytes exists until RETURNED.
                let body = unsafe { std::slice::from_raw_parts_mut(ptr, self.len) };
                write(body)
            },
            returned,
        )
    }

    /// Runs `f` holding the loan (rule 2): unless it was revoked (`None`),
    /// wins POSTED to TAKEN, runs `f`, sets RETURNED on every exit and
    /// calls `returned`.
    fn taken<R>(&self, f: impl FnOnce() -> R, returned: impl FnOnce()) -> Option<R> {
        if self
            .state
            .compare_exchange(POSTED, TAKEN, Ordering::Acquire, Ordering::Acquire)
            .is_err()
        {
            return None;
        }
        struct Return<'l, F: FnOnce()>(&'l Loan, Option<F>);
        impl<F: FnOnce()> Drop for Return<'_, F> {
            fn drop(&mut self) {
                self.0.state.store(RETURNED, Ordering::Release);
                if let Some(f) = self.1.take() {
                    f();
                }
            }
        }
        let _return = Return(self, Some(returned));
        Some(f())
    }

    /// Whether the lender may stop waiting: returned, or revoked now (a
    /// loan no receiver has taken yet is revoked, so none will).
    fn settle(&self) -> bool {
        match self
            .state
            .compare_exchange(POSTED, REVOKED, Ordering::Acquire, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state != TAKEN,
        }
    }

    fn returned(&self) -> bool {
        self.state.load(Ordering::Acquire) == RETURNED
    }
}

/// The loans made in one [`with_loans`] call, of bodies borrowed for `'a`.
#[derive(Debug)]
pub(crate) struct Lent<'a> {
    loans: Vec<Arc<Loan>>,
    _bodies: PhantomData<&'a mut [u8]>,
}

impl<'a> Lent<'a> {
    /// Lends `body` on behalf of rank `lender` to rank `borrower`: the
    /// loan to hand to the receiver.
    pub(crate) fn lend(&mut self, body: &'a [u8], lender: usize, borrower: usize) -> Arc<Loan> {
        let loan = Arc::new(Loan {
            addr: body.as_ptr().expose_provenance(),
            len: body.len(),
            state: AtomicU8::new(POSTED),
            lender,
            borrower,
            mutable: false,
        });
        self.loans.push(Arc::clone(&loan));
        loan
    }

    /// Lends `body` to rank `borrower` to read and write ([`Loan::write`]):
    /// the lender gives up the slice for `'a`, so it cannot touch the bytes
    /// until `with_loans` has settled the loan.
    pub(crate) fn lend_mut(
        &mut self,
        body: &'a mut [u8],
        lender: usize,
        borrower: usize,
    ) -> Arc<Loan> {
        let loan = Arc::new(Loan {
            addr: body.as_mut_ptr().expose_provenance(),
            len: body.len(),
            state: AtomicU8::new(POSTED),
            lender,
            borrower,
            mutable: true,
        });
        self.loans.push(Arc::clone(&loan));
        loan
    }

    /// The borrower of the first loan not yet returned; `None` once every
    /// loan has been.
    pub(crate) fn outstanding(&self) -> Option<usize> {
        self.loans
            .iter()
            .find(|l| !l.returned())
            .map(|l| l.borrower)
    }
}

/// Waits out the loans when [`with_loans`] ends, however it ends.
struct Settle<'a>(Lent<'a>);

impl Drop for Settle<'_> {
    fn drop(&mut self) {
        for loan in &self.0.loans {
            // A taken loan is being read by a receiver that holds no lock
            // and waits for nothing but a failure already under way
            // ([`write_all`]): it is returned promptly.
            while !loan.settle() {
                std::thread::yield_now();
            }
        }
    }
}

/// Runs `f` with a [`Lent`] to lend bodies of lifetime `'a` from, and
/// returns once no receiver can read any of them any more (rule 3).
pub(crate) fn with_loans<'a, R>(f: impl FnOnce(&mut Lent<'a>) -> R) -> R {
    let mut settle = Settle(Lent {
        loans: Vec::new(),
        _bodies: PhantomData,
    });
    f(&mut settle.0)
}

/// Runs `f` on the bodies of `loans` (lent mutably; `None`: an empty
/// body), all taken at once, and returns them (calling `returned` for
/// each) once `f` is done. If loan `k` was revoked (its lender failed),
/// runs `revoked(k)` instead, still holding loans `0..k`: it waits for the
/// failure to be recorded, so that no lender sees its loan come back
/// unapplied before the world has failed. Safe code: each body is written
/// inside [`Loan::write`], whose calls nest.
pub(crate) fn write_all<R>(
    loans: &[Option<&Loan>],
    returned: &dyn Fn(&Loan),
    f: &mut dyn FnMut(&mut [&mut [u8]]) -> R,
    revoked: &mut dyn FnMut(usize) -> R,
) -> R {
    write_from(loans, Vec::with_capacity(loans.len()), returned, f, revoked)
}

/// [`write_all`] of `loans[taken.len()..]`, the bodies before held in
/// `taken`.
fn write_from<R>(
    loans: &[Option<&Loan>],
    mut taken: Vec<&mut [u8]>,
    returned: &dyn Fn(&Loan),
    f: &mut dyn FnMut(&mut [&mut [u8]]) -> R,
    revoked: &mut dyn FnMut(usize) -> R,
) -> R {
    let k = taken.len();
    let Some(&next) = loans.get(k) else {
        return f(&mut taken);
    };
    let Some(loan) = next else {
        taken.push(&mut []);
        return write_from(loans, taken, returned, f, revoked);
    };
    loan.write(
        |body| {
            let mut taken: Vec<&mut [u8]> = taken;
            taken.push(body);
            write_from(loans, taken, returned, f, revoked)
        },
        || returned(loan),
    )
    .unwrap_or_else(|| revoked(k))
}
