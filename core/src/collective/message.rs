//! What a rank does at a step ([`Op`], [`Ops`]), what a message does at
//! its receiver ([`Kind`]) and what it costs ([`Transfer`]).

use core::ops::Deref;

use super::span::{Ranks, Span};

/// What a message does at its receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Partial results to combine with the receiver's own.
    Reduce {
        /// The contributions the message covers.
        covers: Ranks,
        /// The contributions the receiver holds for these positions before
        /// it combines (always including its own). The two sets are
        /// disjoint and adjacent, and their union is the receiver's
        /// afterwards.
        onto: Ranks,
    },
    /// Finished values that overwrite the receiver's.
    Copy,
}

/// One thing a rank does at one step.
///
/// At a step, every rank's sends read the state from before the step;
/// a rank never receives into positions it sends from at the same step.
/// Receives are applied in the order listed (which matters only when two
/// reductions arrive for the same positions at one step), then
/// finalizations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// Send the span to rank `to`.
    Send {
        /// The receiver.
        to: usize,
        /// The positions sent.
        span: Span,
        /// What the receiver does with them.
        kind: Kind,
    },
    /// Receive the span from rank `from`.
    Recv {
        /// The sender.
        from: usize,
        /// The positions received.
        span: Span,
        /// What to do with them.
        kind: Kind,
    },
    /// The reduction of the span is complete here (all ranks' contributions
    /// are in): apply [`ReduceOp::finish`](super::ReduceOp::finish) and store it, rounded with the
    /// [`Rounding`](crate::fp::Rounding), into this rank's buffer. Done
    /// after the step's receives.
    Finalize {
        /// The positions finished.
        span: Span,
    },
}

/// The ops of one rank at one step (a small fixed-capacity list).
#[derive(Clone, Copy, Debug)]
pub struct Ops {
    len: usize,
    ops: [Op; Ops::CAPACITY],
}

impl Ops {
    /// The most ops a rank has at one step, over all schedules.
    pub const CAPACITY: usize = 24;

    pub(crate) const fn new() -> Self {
        Self {
            len: 0,
            ops: [Op::Finalize { span: Span::EMPTY }; Self::CAPACITY],
        }
    }

    /// Appends `op` unless its span is empty (nothing to send, receive or
    /// finish).
    pub(crate) fn push(&mut self, op: Op) {
        let span = match op {
            Op::Send { span, .. } | Op::Recv { span, .. } | Op::Finalize { span } => span,
        };
        if !span.is_empty() {
            self.ops[self.len] = op;
            self.len += 1;
        }
    }
}

impl Deref for Ops {
    type Target = [Op];

    fn deref(&self) -> &[Op] {
        &self.ops[..self.len]
    }
}

impl<'a> IntoIterator for &'a Ops {
    type Item = &'a Op;
    type IntoIter = core::slice::Iter<'a, Op>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// One message, as the executor reports it (and
/// [`Schedule::transfers`](super::Schedule::transfers) computes it without running): what a cost
/// model charges.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Transfer {
    /// The step.
    pub step: usize,
    /// The sender.
    pub from: usize,
    /// The receiver.
    pub to: usize,
    /// The positions.
    pub span: Span,
    /// Reduce or copy.
    pub kind: Kind,
    /// Vectors in the message: 1, or in [`Order::Deterministic`](super::Order::Deterministic) on a
    /// ring or tree the number of maximal complete subtrees of the
    /// summation tree its contributions cover.
    pub partials: usize,
    /// Elements on the wire, padding included: `partials * span.elements()`.
    pub elements: usize,
    /// Elements on the wire below the buffer's length (padding excluded).
    pub payload: usize,
    /// Bytes on the wire, padding included. A vector is sent in the
    /// buffer's format when it holds a single contribution, a Max or Min
    /// partial, or finished values, and in f32 (4 bytes) when it holds a
    /// partial Sum of several contributions.
    pub bytes: usize,
    /// Element-wise f32 combinations the receiver does (padding excluded):
    /// `payload` for a one-vector reduction; in the deterministic order on
    /// a ring or tree, the span's payload times the number of subtree sums
    /// the receiver completes (possibly 0); 0 for a copy.
    pub combines: usize,
}
