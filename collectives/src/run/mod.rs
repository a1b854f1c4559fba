//! Runs a core [`CollectiveSchedule`] over a [`Communicator`]: one rank's half of
//! what [`tessera_core::collective::execute`] does for all ranks at once.
//!
//! At every step the rank sends what its [`Op::Send`]s name and receives
//! what its [`Op::Recv`]s name, all in one [`Communicator::exchange`] (so
//! rings cannot deadlock), then combines or copies the received spans in
//! the order the ops list them, then finalizes. The arithmetic is the
//! executor's, operand for operand, so every rank's result is bitwise the
//! executor's:
//!
//! - a reduction message carries the sender's partial: its own
//!   contribution in the buffer's format, a partial Sum or Mean of several
//!   contributions in f32, a partial Max or Min in the buffer's format
//!   (exact), exactly the formats of [`Transfer::bytes`];
//! - f32 buffers accumulate in place; f16/bf16 ranks keep an f32
//!   accumulator of `n` elements, so partial sums are never rounded to 16
//!   bits, and a result is rounded once, element `i` at position `i`;
//! - in [`Order::Deterministic`] on rings and trees, a message carries one
//!   vector per complete subtree of the summation tree it covers, and the
//!   receiver adds the tree's nodes that it can now complete (the core's
//!   [`Frontier`]);
//! - in [`Order::Free`] for Sum and Mean, every rank keeps f64 grid sums
//!   (the block exponents all-reduced by the caller first, or taken by
//!   the run itself from the contributions: [`folds_exponents`]), a message
//!   carries its sender's own contribution in the buffer's format or its
//!   grid sum in f64, and finalizing rounds once from the grid; the ring
//!   over more than two ranks reduce-scatters in one exchange of own
//!   contributions instead (`scatter.rs`), so no grid sum travels.
//!
//! Messages of more than the communicator's
//! [`Communicator::piece_elements`] travel as pieces, one exchange each
//! (rings piece by piece through all their steps: [`exchanges`]); a step
//! with one send from the buffer and one receive into another part of it
//! goes through [`Communicator::exchange_apply`], so that the thread
//! transport can let the peer apply the body in place; over two ranks a
//! piece's reduction and copy are one [`Communicator::exchange_mut`] where
//! the transport lends mutably (`pair.rs`). None of these changes an
//! operand or the order of any element's operations.
//!
//! Only positions below `n` travel (padding is implied by the schedule).
//! Every message starts with a [`HEADER`]-byte header that names the call
//! (sequence number, collective, algorithm, order, operation, element type,
//! group size, length) and the message (step, span, covered ranks), so a
//! rank that was called differently from its peers is found at its first
//! message ([`CommError::CallMismatch`]).
//!
//! [`Transfer::bytes`]: tessera_core::collective::Transfer::bytes
//! [`Order::Free`]: tessera_core::collective::Order::Free
//! [`tessera_core::collective::execute`]: tessera_core::collective::execute

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

mod apply;
mod check;
mod combine;
mod direct;
mod fold;
mod meet;
mod pair;
mod pieces;
mod scatter;
mod send;
mod wire;

use tessera_core::collective::{
    CollectiveSchedule, Frontier, Kind, Op, ReduceOp, Reducer, Span, SumTree, grid,
};
use tessera_core::fp::{Element, Rounding};

use crate::comm::{Communicator, Incoming, Tag, collective_tag};
use crate::error::{Cause, CommError, Failure};

use fold::cut_exponents;
pub(crate) use fold::folds_exponents;
pub(crate) use pieces::PIECE_ELEMENTS;
use pieces::{direct_runs, exchanges};
use scatter::gather_run;
use wire::{Call, HEADER, Message};

/// What a run sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Traffic {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

impl std::ops::AddAssign for Traffic {
    fn add_assign(&mut self, other: Self) {
        self.messages += other.messages;
        self.bytes += other.bytes;
    }
}

/// Buffers a [`crate::Collectives`] keeps between calls.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    acc: Vec<f32>,
    /// Grid sums ([`Order::Free`](tessera_core::collective::Order::Free)).
    grid: Vec<f64>,
    staged: Vec<Vec<u8>>,
    incoming: Vec<Incoming>,
    headers: Vec<[u8; HEADER]>,
    /// Elements per piece; 0 for the communicator's
    /// [`Communicator::piece_elements`] (tests set small ones).
    piece: usize,
}

/// Where a message's values come from.
enum Body {
    Buf(Range<usize>),
    Acc(Range<usize>),
    Grid(Range<usize>),
    Staged(usize),
}

/// Runs this rank's part of `s` on `buf`, in place.
///
/// `seq` numbers the call (every rank passes the same); `deadline` bounds
/// the whole run. On any error the world is aborted before returning; if
/// the rank panics inside the run, it is aborted naming this rank
/// ([`Cause::Panicked`]) as the panic unwinds out of it. `exponents` are
/// the all-reduced block exponents when `s` sums on the grid
/// ([`CollectiveSchedule::on_grid`]), unless the run folds their
/// all-reduce into its messages ([`folds_exponents`]): then it takes them
/// itself and `exponents` is not read.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<T: Element, C: Communicator + ?Sized>(
    comm: &C,
    s: &CollectiveSchedule,
    reduction: &Reducer,
    buf: &mut [T],
    seq: u32,
    deadline: Instant,
    scratch: &mut Scratch,
    exponents: &[f32],
) -> Result<Traffic, CommError> {
    let (p, n) = (s.size(), s.len());
    assert_eq!(
        p,
        comm.size(),
        "schedule for {p} ranks on a communicator of {}",
        comm.size()
    );
    assert_eq!(
        buf.len(),
        n,
        "buffer of {} for a schedule of {n}",
        buf.len()
    );
    let me = comm.world_rank(comm.rank());
    let _unwind = AbortOnUnwind::new(comm, me);
    let mut runner = Runner::new::<T>(comm, s, reduction.op, seq, deadline);
    if runner.on_grid && !runner.folding {
        assert_eq!(exponents.len(), grid::blocks(n), "one exponent per block");
        runner.exponents = exponents;
    }
    let result = runner.run(reduction.rounding, buf, scratch);
    if let Err(e) = &result
        && let Some(f) = e.failure(me)
    {
        comm.fail(f);
    }
    result
}

/// Aborts the world naming this rank ([`Cause::Panicked`]) if a panic
/// unwinds through the collective, so that its peers fail at once instead
/// of waiting for their deadlines; the MPI transport then ends the job
/// (`MPI_Abort`), as a dying process would.
struct AbortOnUnwind<'a, C: Communicator + ?Sized> {
    comm: &'a C,
    me: usize,
    /// Already unwinding when the run started (a collective called from a
    /// destructor during a panic): not this run's panic.
    before: bool,
}

impl<'a, C: Communicator + ?Sized> AbortOnUnwind<'a, C> {
    fn new(comm: &'a C, me: usize) -> Self {
        Self {
            comm,
            me,
            before: std::thread::panicking(),
        }
    }
}

impl<C: Communicator + ?Sized> Drop for AbortOnUnwind<'_, C> {
    fn drop(&mut self) {
        if std::thread::panicking() && !self.before {
            self.comm.fail(Failure::of(self.me, Cause::Panicked));
        }
    }
}

/// One rank's run of a schedule: what every exchange needs to know.
struct Runner<'a, C: ?Sized> {
    comm: &'a C,
    s: &'a CollectiveSchedule,
    op: ReduceOp,
    call: Call,
    tag: Tag,
    /// This rank, in the communicator and in the world.
    r: usize,
    me: usize,
    n: usize,
    frontiers: bool,
    /// 16-bit elements.
    wide: bool,
    /// Reductions go into an f32 accumulator beside the buffer.
    use_acc: bool,
    /// Sum and Mean on the grid: reductions go into f64 grid sums.
    on_grid: bool,
    /// The exponent phase rides on the data messages ([`folds_exponents`]):
    /// the run takes the exponents itself (`State::folded`).
    folding: bool,
    /// The all-reduced block exponents (on the grid, not folding).
    exponents: &'a [f32],
    tree: SumTree,
    deadline: Instant,
}

/// A run's buffers: the [`Scratch`] kept between calls, and what one run
/// holds.
struct State<'a, T> {
    acc: &'a mut Vec<f32>,
    grid: &'a mut Vec<f64>,
    staged: &'a mut Vec<Vec<u8>>,
    incoming: &'a mut Vec<Incoming>,
    headers: &'a mut Vec<[u8; HEADER]>,
    held: HashMap<Span, Frontier>,
    /// With [`folds_exponents`]: the blocks' exponents, each the maximum
    /// of both ranks' once this rank has reduced (or, for a block its run
    /// holds in part, received) it ([`cut_exponents`]).
    folded: Vec<f32>,
    tmp_f32: Vec<f32>,
    tmp_f64: Vec<f64>,
    tmp_t: Vec<T>,
    traffic: Traffic,
}

/// A received message's fields, and whether a receive has used it.
type Got = (usize, Message, bool);

impl<'a, C: Communicator + ?Sized> Runner<'a, C> {
    fn new<T: Element>(
        comm: &'a C,
        s: &'a CollectiveSchedule,
        op: ReduceOp,
        seq: u32,
        deadline: Instant,
    ) -> Self {
        let (p, r) = (s.size(), comm.rank());
        let frontiers = s.carries_frontiers(op);
        let on_grid = s.on_grid(op);
        let wide = size_of::<T>() != size_of::<f32>();
        Self {
            comm,
            s,
            op,
            call: Call::new::<T>(s, op, seq),
            tag: collective_tag(comm.context()),
            r,
            me: comm.world_rank(r),
            n: s.len(),
            frontiers,
            wide,
            use_acc: s.collective().reduces() && !frontiers && !on_grid && wide && p > 1,
            on_grid,
            folding: on_grid && folds_exponents(s, op),
            exponents: &[],
            tree: SumTree::new(p),
            deadline,
        }
    }

    fn run<T: Element>(
        &self,
        rounding: Rounding,
        buf: &mut [T],
        scratch: &mut Scratch,
    ) -> Result<Traffic, CommError> {
        let piece = match scratch.piece {
            0 => self.comm.piece_elements().map_or(usize::MAX, |k| k.max(1)),
            k => k,
        };
        let mut st = State {
            acc: &mut scratch.acc,
            grid: &mut scratch.grid,
            staged: &mut scratch.staged,
            incoming: &mut scratch.incoming,
            headers: &mut scratch.headers,
            held: HashMap::new(),
            folded: Vec::new(),
            tmp_f32: Vec::new(),
            tmp_f64: Vec::new(),
            tmp_t: Vec::new(),
            traffic: Traffic::default(),
        };
        if self.n == 0 && self.s.size() > 1 {
            return self.handshake(&mut st);
        }
        if self.use_acc {
            st.acc.clear();
            st.acc.resize(self.n, 0.0);
        }
        if self.on_grid && !self.folding && st.grid.len() < self.n {
            // Every position's first reduction overwrites it. (Folded runs
            // reduce pairs in place and keep no grid sums.)
            st.grid.resize(self.n, 0.0);
        }
        let whole = scatter::plan(self.s, self.r, self.on_grid);
        let plan = exchanges(self.s, whole, self.n, piece, self.frontiers);
        if self.folding {
            st.folded = cut_exponents(&plan, buf);
        }
        let mut plan = plan.into_iter();
        while let Some((step, ops)) = plan.next() {
            self.step((step, &ops), &mut plan, buf, &mut st, rounding)?;
        }
        Ok(st.traffic)
    }

    /// One exchange of the plan, `(step, ops)`, by the path it allows: the
    /// grid's meeting or gather of own contributions ([`Self::grid_step`]),
    /// a body lent in place ([`Self::lent_step`]), else messages exchanged
    /// and applied. A path that also does the next exchanges of the same
    /// positions takes them from `plan`.
    fn step<T: Element>(
        &self,
        (step, ops): (usize, &[Op]),
        plan: &mut std::vec::IntoIter<(usize, Vec<Op>)>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<(), CommError> {
        let (bodies, sends) = self.stage(step, ops, buf, st);
        if let Some(run) = gather_run(ops, &bodies, self.n).filter(|_| self.on_grid) {
            return self.grid_step((step, ops), &bodies, &sends, run, plan, buf, st, rounding);
        }
        let grid_reduces = self.on_grid
            && fused_grid_step(ops).is_none()
            && ops.iter().any(|o| {
                matches!(
                    o,
                    Op::Recv {
                        kind: Kind::Reduce { .. },
                        ..
                    }
                )
            });
        let excluded = self.frontiers || self.use_acc || grid_reduces;
        let send = match &bodies[..] {
            [Body::Buf(run)] => Some(run),
            _ => None,
        };
        if let Some((send, recv)) = direct_runs(ops, send, self.n, excluded) {
            return self.lent_step((step, ops), sends[0], (send, recv), plan, buf, st, rounding);
        }
        let got = self.exchange(ops, &bodies, &sends, buf, st)?;
        self.apply(step, ops, got, buf, st)?;
        self.finalize(ops, rounding, buf, st);
        Ok(())
    }

    /// A grid step whose receives reduce own contributions over `run`: all
    /// of its piece's steps in one meeting where the transport lends to
    /// several peers ([`Self::meet`]; the all-gather steps are then taken
    /// from `plan`), else gathered ([`Self::gather`]).
    #[allow(clippy::too_many_arguments)]
    fn grid_step<T: Element>(
        &self,
        (step, ops): (usize, &[Op]),
        bodies: &[Body],
        sends: &[usize],
        run: Range<usize>,
        plan: &mut std::vec::IntoIter<(usize, Vec<Op>)>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<(), CommError> {
        if self.meet((step, ops), bodies, sends, run.clone(), buf, st, rounding)? {
            // The all-gather steps of these positions are done too.
            while plan.as_slice().first().is_some_and(|(t, _)| *t != step) {
                plan.next();
            }
            return Ok(());
        }
        let done = self.gather(step, ops, bodies, sends, run, buf, st, rounding)?;
        self.finalize_rest(ops, done, rounding, buf, st);
        Ok(())
    }

    /// A step of one send `send` from the buffer and one receive into
    /// `recv`, another run of it: over two ranks, this piece's reduction
    /// and the next exchange's copy in one meeting where the transport
    /// lends mutably ([`Self::pair`]; the next exchange is then taken from
    /// `plan`), else the body lent in place ([`Self::direct`]).
    #[allow(clippy::too_many_arguments)]
    fn lent_step<T: Element>(
        &self,
        (step, ops): (usize, &[Op]),
        to: usize,
        (send, recv): (Range<usize>, Range<usize>),
        plan: &mut std::vec::IntoIter<(usize, Vec<Op>)>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<(), CommError> {
        if let Some((_, next)) = plan.as_slice().first()
            && self.pair(
                (step, ops),
                next,
                send.clone(),
                recv.clone(),
                buf,
                st,
                rounding,
            )?
        {
            // Both steps' moves done; the reduced span finished.
            plan.next();
            return Ok(());
        }
        let done = self.direct(step, ops, to, send, recv, buf, st, rounding)?;
        self.finalize_rest(ops, done, rounding, buf, st);
        Ok(())
    }

    /// Finalizes `ops`' spans but `done`, which the step's reduction
    /// stored finished itself.
    fn finalize_rest<T: Element>(
        &self,
        ops: &[Op],
        done: Option<Span>,
        rounding: Rounding,
        buf: &mut [T],
        st: &mut State<'_, T>,
    ) {
        let done = done.map(|span| Op::Finalize { span });
        let rest: Vec<Op> = ops.iter().filter(|&&o| Some(o) != done).copied().collect();
        self.finalize(&rest, rounding, buf, st);
    }

    /// Sets `incoming` up for the step's receives, in the order listed;
    /// returns how many.
    pub(super) fn expect_receives(&self, ops: &[Op], incoming: &mut Vec<Incoming>) -> usize {
        let froms: Vec<usize> = ops
            .iter()
            .filter_map(|o| match *o {
                Op::Recv { from, .. } => Some(from),
                _ => None,
            })
            .collect();
        if incoming.len() < froms.len() {
            incoming.resize_with(froms.len(), Incoming::default);
        }
        for (i, &from) in froms.iter().enumerate() {
            incoming[i].from = from;
            incoming[i].tag = self.tag;
        }
        froms.len()
    }
}

/// Whether a grid step is one reduction of two single contributions whose
/// span is finalized at once (the ring's only reduction over two ranks):
/// it may then run in place ([`Runner::direct`]) and store the finished
/// values straight from the two grid roundings. Returns that span.
pub(super) fn fused_grid_step(ops: &[Op]) -> Option<Span> {
    let mut recvs = ops.iter().filter(|o| matches!(o, Op::Recv { .. }));
    let (Some(&Op::Recv { span, kind, .. }), None) = (recvs.next(), recvs.next()) else {
        return None;
    };
    let single =
        matches!(kind, Kind::Reduce { covers, onto, .. } if covers.len == 1 && onto.len == 1);
    finalized(ops, span).filter(|_| single)
}

/// Whether two spans name the same positions (a single run's stride is
/// immaterial).
pub(super) fn same_positions(a: Span, b: Span) -> bool {
    let key = |s: Span| {
        (
            s.start,
            s.len,
            s.count,
            if s.count > 1 { s.stride } else { 0 },
        )
    };
    key(a) == key(b)
}

/// The span of the step's finalization of `span`'s positions, if any.
pub(super) fn finalized(ops: &[Op], span: Span) -> Option<Span> {
    ops.iter().find_map(|o| match *o {
        Op::Finalize { span: f } if same_positions(f, span) => Some(f),
        _ => None,
    })
}

/// A failure recorded for this rank's own invalid call.
pub(crate) fn own_failure<C: Communicator + ?Sized>(comm: &C) -> Failure {
    Failure::of(comm.world_rank(comm.rank()), Cause::Mismatch)
}

#[cfg(test)]
mod tests;
