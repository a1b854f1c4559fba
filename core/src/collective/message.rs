//! What a rank does at a step ([`Op`], [`Ops`]), what a message does at
//! its receiver ([`Kind`]) and what it costs ([`Transfer`]).

use core::ops::Deref;

use super::op::ReduceOp;
use super::span::{Ranks, Span};

/// What a message does at its receiver. [`Kind::carries`] says what its
/// body holds.
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
        /// Whether a Sum or Mean message carries the
        /// [frontier](Carries::Frontier) of `covers` instead of one
        /// partial: in [`Order::Deterministic`](super::Order::Deterministic)
        /// on a ring or binary tree over more than two ranks. Max and Min
        /// always carry one partial (they are exact in any order).
        frontier: bool,
        /// Whether a Sum or Mean message of several contributions carries
        /// a [grid](Carries::Grid) partial: in
        /// [`Order::Free`](super::Order::Free).
        grid: bool,
    },
    /// Finished values that overwrite the receiver's.
    Copy,
}

impl Kind {
    /// A reduction message carrying one partial.
    pub(crate) const fn reduce(covers: Ranks, onto: Ranks) -> Self {
        Self::Reduce {
            covers,
            onto,
            frontier: false,
            grid: false,
        }
    }

    /// What the message's body holds when the collective reduces with
    /// `op`: what a transport sends and how the receiver reads it, so
    /// that every rank gets bitwise [`execute`](super::execute)'s result.
    ///
    /// ```
    /// use tessera_core::collective::{
    ///     Algorithm, Carries, Collective, Kind, Op, Order, ReduceOp, CollectiveSchedule,
    /// };
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    /// let Op::Send { kind, .. } = s.ops(0, 0)[0] else { unreachable!() };
    /// // Rank 0's own contribution, in the buffer's format.
    /// assert_eq!(kind.carries(ReduceOp::Sum), Carries::Partial { f32: false });
    /// let Op::Send { kind, .. } = s.ops(0, 1)[0] else { unreachable!() };
    /// // A partial sum of two contributions travels in f32.
    /// assert_eq!(kind.carries(ReduceOp::Sum), Carries::Partial { f32: true });
    ///
    /// let d = s.with_order(Order::Deterministic);
    /// let Op::Send { kind, .. } = d.ops(0, 1)[0] else { unreachable!() };
    /// assert_eq!(kind.carries(ReduceOp::Sum), Carries::Frontier);
    /// assert_eq!(kind.carries(ReduceOp::Max), Carries::Partial { f32: false });
    /// assert!(matches!(kind, Kind::Reduce { frontier: true, .. }));
    /// ```
    #[must_use]
    pub const fn carries(self, op: ReduceOp) -> Carries {
        match self {
            Self::Copy => Carries::Values,
            Self::Reduce { frontier, .. } if frontier && op.depends_on_order() => Carries::Frontier,
            Self::Reduce { grid, covers, .. }
                if grid && covers.len > 1 && op.depends_on_order() =>
            {
                Carries::Grid
            }
            Self::Reduce { covers, .. } => Carries::Partial {
                f32: covers.len > 1 && op.depends_on_order(),
            },
        }
    }
}

/// What the body of a message holds: its payload is the span's positions
/// below the buffer's length, in order (padding never travels).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Carries {
    /// Finished values in the buffer's format: the receiver overwrites
    /// its own with them.
    Values,
    /// One partial result of the covered contributions, which the receiver
    /// combines with its own partial ([`combine`](super::combine)): in f32
    /// when it is a Sum or Mean of several contributions (`f32: true`;
    /// partial sums of 16-bit values are never rounded), else in the
    /// buffer's format (a single contribution, or a Max or Min, exact).
    Partial {
        /// Whether the values travel as f32.
        f32: bool,
    },
    /// One vector per maximal complete subtree of the summation tree that
    /// the covered contributions fill ([`SumTree::frontier`]), left to
    /// right: a single contribution in the buffer's format, a sum in f32.
    /// The receiver adds every node it can now complete and keeps the
    /// rest ([`Frontier`]).
    ///
    /// [`SumTree::frontier`]: super::SumTree::frontier
    /// [`Frontier`]: super::Frontier
    Frontier,
    /// A partial sum of several contributions on the blocks' grids of
    /// [`Order::Free`](super::Order::Free): one f64 integer per position
    /// (8 bytes), added exactly to the receiver's ([`grid`](super::grid)).
    Grid,
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

impl Ops {
    /// Marks every reduction message as carrying a grid partial.
    pub(crate) fn mark_grid(&mut self) {
        for op in &mut self.ops[..self.len] {
            if let Op::Send { kind, .. } | Op::Recv { kind, .. } = op
                && let Kind::Reduce { grid, .. } = kind
            {
                *grid = true;
            }
        }
    }

    /// Marks every reduction message as carrying a frontier.
    pub(crate) fn mark_frontiers(&mut self) {
        for op in &mut self.ops[..self.len] {
            if let Op::Send { kind, .. } | Op::Recv { kind, .. } = op
                && let Kind::Reduce { frontier, .. } = kind
            {
                *frontier = true;
            }
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
/// [`CollectiveSchedule::transfers`](super::CollectiveSchedule::transfers) computes it without running): what a cost
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
    /// partial Sum of several contributions (in [`Order::Free`](super::Order::Free),
    /// an f64 grid integer: 8 bytes). The Max all-reduce of the block
    /// exponents that [`Order::Free`](super::Order::Free) runs first is not
    /// included.
    pub bytes: usize,
    /// Element-wise f32 combinations the receiver does (padding excluded):
    /// `payload` for a one-vector reduction; in the deterministic order on
    /// a ring or tree, the span's payload times the number of subtree sums
    /// the receiver completes (possibly 0); 0 for a copy.
    pub combines: usize,
}
