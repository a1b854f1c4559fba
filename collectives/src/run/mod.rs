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
//!   (the block exponents all-reduced by the caller first, or over two
//!   ranks carried by the messages: [`folds_exponents`]), a message
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

mod check;
mod combine;
mod pair;
mod pieces;
mod scatter;
mod wire;

use tessera_core::collective::{
    Algorithm, Collective, CollectiveSchedule, Frontier, Kind, Op, ReduceOp, Reducer, Span,
    SumTree, grid,
};
use tessera_core::fp::{Element, Rounding};

use crate::comm::{Communicator, Incoming, Outgoing, Tag, collective_tag};
use crate::error::{Cause, CommError, Failure, Mismatch};

use combine::{GridValues, grid_into, grid_pair_finish, native_wire, reduce_finish, reduce_into};
pub(crate) use pieces::PIECE_ELEMENTS;
use pieces::{direct_runs, exchanges};
use scatter::gather_run;
use wire::{Call, HEADER, Message, encode, split_exponents, split_header, values};

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
/// ([`CollectiveSchedule::on_grid`]), or this rank's own
/// ([`grid::block_exponents`]) when the run folds their all-reduce into
/// its messages ([`folds_exponents`]).
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
    if runner.on_grid {
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
    /// `exponents` are this rank's own.
    folding: bool,
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
    /// With [`folds_exponents`]: the blocks' exponents, each block's the
    /// maximum of both ranks' once a message has brought the peer's.
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
            folded: if self.folding {
                self.exponents.to_vec()
            } else {
                Vec::new()
            },
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
        let mut plan = exchanges(self.s, whole, self.n, piece, self.frontiers).into_iter();
        while let Some((step, ops)) = plan.next() {
            let (bodies, sends) = self.stage(step, &ops, buf, &mut st);
            if let Some(run) = gather_run(&ops, &bodies, self.n).filter(|_| self.on_grid) {
                let done = self.gather(step, &ops, &bodies, &sends, run, buf, &mut st, rounding)?;
                let done = done.map(|span| Op::Finalize { span });
                let rest: Vec<Op> = ops.iter().filter(|&&o| Some(o) != done).copied().collect();
                self.finalize(&rest, rounding, buf, &mut st);
                continue;
            }
            let grid_reduces = self.on_grid
                && fused_grid_step(&ops).is_none()
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
            if let Some((send, recv)) = direct_runs(&ops, send, self.n, excluded) {
                if let Some((_, next)) = plan.as_slice().first()
                    && self.pair(
                        (step, &ops),
                        next,
                        send.clone(),
                        recv.clone(),
                        buf,
                        &mut st,
                        rounding,
                    )?
                {
                    // Both steps' moves done; the reduced span finished.
                    plan.next();
                    continue;
                }
                let done = self.direct(step, &ops, sends[0], send, recv, buf, &mut st, rounding)?;
                // The reduction stored its span's finished values itself.
                let done = done.map(|span| Op::Finalize { span });
                let rest: Vec<Op> = ops.iter().filter(|&&o| Some(o) != done).copied().collect();
                self.finalize(&rest, rounding, buf, &mut st);
                continue;
            } else {
                let got = self.exchange(&ops, &bodies, &sends, buf, &mut st)?;
                self.apply(step, &ops, got, buf, &mut st)?;
            }
            self.finalize(&ops, rounding, buf, &mut st);
        }
        Ok(st.traffic)
    }

    /// Step 1: the bodies of this step's sends (runs of the buffer or the
    /// accumulator, or copies staged in `st.staged`), their headers in
    /// `st.headers`, and their receivers.
    fn stage<T: Element>(
        &self,
        step: usize,
        ops: &[Op],
        buf: &[T],
        st: &mut State<'_, T>,
    ) -> (Vec<Body>, Vec<usize>) {
        st.headers.clear();
        let mut bodies = Vec::new();
        let mut sends = Vec::new();
        let mut used = 0;
        for o in ops {
            let Op::Send { to, span, kind } = *o else {
                continue;
            };
            let body = self.body(span, kind, buf, st, &mut used);
            let len = match &body {
                Body::Buf(run) => run.len() * size_of::<T>(),
                Body::Acc(run) => run.len() * size_of::<f32>(),
                Body::Grid(run) => run.len() * size_of::<f64>(),
                Body::Staged(i) => st.staged[*i].len(),
            };
            st.headers
                .push(encode(&self.call, &Message::new(step, span, kind, len)));
            bodies.push(body);
            sends.push(to);
        }
        (bodies, sends)
    }

    /// Where the body of a send of `span` comes from: in place when it is
    /// one run of the buffer (or of the f32 accumulator), else copied into
    /// `st.staged[*used]` in its wire format ([`Transfer::bytes`]).
    ///
    /// [`Transfer::bytes`]: tessera_core::collective::Transfer::bytes
    fn body<T: Element>(
        &self,
        span: Span,
        kind: Kind,
        buf: &[T],
        st: &mut State<'_, T>,
        used: &mut usize,
    ) -> Body {
        let State {
            acc,
            grid,
            staged,
            held,
            ..
        } = st;
        let runs: Vec<Range<usize>> = span.runs_below(self.n).collect();
        let single = (runs.len() == 1).then(|| runs[0].clone());
        let mut stage = |fill: &mut dyn FnMut(&mut Vec<u8>)| {
            if staged.len() == *used {
                staged.push(Vec::new());
            }
            let v = &mut staged[*used];
            v.clear();
            fill(v);
            *used += 1;
            Body::Staged(*used - 1)
        };
        let mut copy = |v: &mut Vec<u8>| {
            for run in &runs {
                v.extend_from_slice(bytemuck::cast_slice(&buf[run.clone()]));
            }
        };
        let Kind::Reduce { covers, .. } = kind else {
            return match single {
                Some(run) => Body::Buf(run),
                None => stage(&mut copy),
            };
        };
        if self.frontiers {
            // What it holds: its own contribution until it has received.
            let own = || {
                let own: Vec<T> = runs.iter().flat_map(|r| buf[r.clone()].to_vec()).collect();
                Frontier::own(&self.tree, self.r, &own)
            };
            let state = held.remove(&span).unwrap_or_else(own);
            debug_assert_eq!(state.covers(), covers, "a rank sends what it holds");
            return stage(&mut |v| state.pack::<T>(&self.tree, v));
        }
        if self.on_grid && covers.len > 1 {
            // A grid sum of several contributions.
            return match single {
                Some(run) => Body::Grid(run),
                None => stage(&mut |v| {
                    for run in &runs {
                        v.extend_from_slice(bytemuck::cast_slice(&grid[run.clone()]));
                    }
                }),
            };
        }
        if covers.len == 1 || !self.wide {
            // Its own contribution, or an f32 partial in place.
            match single {
                Some(run) => Body::Buf(run),
                None => stage(&mut copy),
            }
        } else if native_wire(self.op, covers) {
            // A 16-bit Max/Min partial: exact in the format.
            stage(&mut |v| {
                for run in &runs {
                    for &x in &acc[run.clone()] {
                        let t = T::store(x, Rounding::Nearest, 0);
                        v.extend_from_slice(bytemuck::bytes_of(&t));
                    }
                }
            })
        } else {
            match single {
                Some(run) => Body::Acc(run),
                None => stage(&mut |v| {
                    for run in &runs {
                        v.extend_from_slice(bytemuck::cast_slice(&acc[run.clone()]));
                    }
                }),
            }
        }
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

    /// Steps 2 to 4 for a step of one send from the buffer and one receive
    /// into another run of it ([`direct_runs`]): through
    /// [`Communicator::exchange_apply`], so that the transport may let the
    /// peer read the body in place while this rank applies its own
    /// receive, checked as at step 3. A reduction whose span the step
    /// finalizes stores the finished values itself: returns that span.
    #[allow(clippy::too_many_arguments)]
    fn direct<T: Element>(
        &self,
        step: usize,
        ops: &[Op],
        to: usize,
        send_run: Range<usize>,
        recv_run: Range<usize>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<Option<Span>, CommError> {
        self.expect_receives(ops, st.incoming);
        let Some(&Op::Recv { from, span, kind }) =
            ops.iter().find(|o| matches!(o, Op::Recv { .. }))
        else {
            unreachable!("direct_runs found one receive")
        };
        let done = finalized(ops, span).filter(|_| matches!(kind, Kind::Reduce { .. }));
        debug_assert!(
            done.is_some() || !self.on_grid || kind == Kind::Copy,
            "a grid reduction here is fused"
        );
        let fin = done.map(|_| (self.s.size(), rounding));
        let (body, into): (&[T], &mut [T]) = if send_run.end <= recv_run.start {
            let (low, high) = buf.split_at_mut(recv_run.start);
            (&low[send_run.clone()], &mut high[..recv_run.len()])
        } else {
            let (low, high) = buf.split_at_mut(send_run.start);
            (&high[..send_run.len()], &mut low[recv_run.clone()])
        };
        // Folding: the header, then this rank's exponents of the blocks sent.
        let mut head = st.headers[0].to_vec();
        if self.folding {
            let exps = &self.exponents[blocks_of(&send_run)];
            head.extend(exps.iter().map(|&g| exponent_byte(g)));
            head.resize(HEADER + exponent_bytes(exps.len()), 0);
        }
        let out = [Outgoing {
            to,
            tag: self.tag,
            header: &head,
            body: bytemuck::cast_slice(body),
        }];
        st.traffic.messages += 1;
        st.traffic.bytes += out[0].len();
        let peer = self.comm.world_rank(from);
        let expect = Message::new(step, span, kind, 0);
        let payload = recv_run.len();
        let expected = self.expected_bytes::<T>(kind, payload);
        let (op, tmp_t, tmp_f32) = (self.op, &mut st.tmp_t, &mut st.tmp_f32);
        let folded = &mut st.folded;
        let finish = (op, self.s.size(), rounding);
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.comm
            .exchange_apply(&out, &mut st.incoming[..1], left, &mut |_, head, tail| {
                let (header, body) = if self.folding {
                    let blocks = blocks_of(&recv_run);
                    let extra = exponent_bytes(blocks.len());
                    let (header, exps, body) = split_exponents(head, tail, extra)
                        .ok_or(self.mismatch(peer, Mismatch::Format))?;
                    for (e, &b) in folded[blocks].iter_mut().zip(exps) {
                        *e = e.max(byte_exponent(b));
                    }
                    (header, body)
                } else {
                    split_header(head, tail).ok_or(self.mismatch(peer, Mismatch::Format))?
                };
                let m = self.header(peer, header, body.len())?;
                if !m.is(&expect) {
                    return Err(self.mismatch(peer, Mismatch::Sequence));
                }
                self.body_length(peer, expected, body.len())?;
                let at = recv_run.start;
                match kind {
                    Kind::Copy => into.copy_from_slice(values::<T>(body, tmp_t)),
                    Kind::Reduce { .. } if self.on_grid => {
                        let vals = values::<T>(body, tmp_t);
                        let exps = if self.folding {
                            &folded[..]
                        } else {
                            self.exponents
                        };
                        let at = (exps, recv_run.start, &mut *tmp_f32);
                        grid_pair_finish(into, vals, at, finish);
                    }
                    Kind::Reduce { covers, .. } if native_wire(op, covers) => {
                        reduce_finish(op, into, values::<T>(body, tmp_t), at, fin);
                    }
                    Kind::Reduce { .. } => {
                        reduce_finish(op, into, values::<f32>(body, tmp_f32), at, fin);
                    }
                }
                Ok(())
            })?;
        Ok(done)
    }

    /// Steps 2 and 3 otherwise: sends the step's bodies and receives its
    /// messages whole, then checks every header against this call. Returns
    /// the messages' fields, in the order of `st.incoming`.
    fn exchange<T: Element>(
        &self,
        ops: &[Op],
        bodies: &[Body],
        sends: &[usize],
        buf: &[T],
        st: &mut State<'_, T>,
    ) -> Result<Vec<Got>, CommError> {
        let recvs = self.expect_receives(ops, st.incoming);
        if !sends.is_empty() || recvs > 0 {
            let out: Vec<Outgoing<'_>> = sends
                .iter()
                .zip(bodies)
                .zip(st.headers.iter())
                .map(|((&to, body), header)| Outgoing {
                    to,
                    tag: self.tag,
                    header,
                    body: match body {
                        Body::Buf(run) => bytemuck::cast_slice(&buf[run.clone()]),
                        Body::Acc(run) => bytemuck::cast_slice(&st.acc[run.clone()]),
                        Body::Grid(run) => bytemuck::cast_slice(&st.grid[run.clone()]),
                        Body::Staged(i) => &st.staged[*i],
                    },
                })
                .collect();
            st.traffic.messages += out.len();
            st.traffic.bytes += out.iter().map(Outgoing::len).sum::<usize>();
            let left = self.deadline.saturating_duration_since(Instant::now());
            self.comm.exchange(&out, &mut st.incoming[..recvs], left)?;
        }
        st.incoming[..recvs]
            .iter()
            .map(|inc| {
                let peer = self.comm.world_rank(inc.from);
                let body = inc.message.len().saturating_sub(HEADER);
                Ok((inc.from, self.header(peer, &inc.message, body)?, false))
            })
            .collect()
    }

    /// Step 4: applies the received messages `got` (from [`exchange`]) in
    /// the order the step's receives list them, each checked to be the
    /// message the receive expects, of the length it expects.
    ///
    /// [`exchange`]: Self::exchange
    fn apply<T: Element>(
        &self,
        step: usize,
        ops: &[Op],
        mut got: Vec<Got>,
        buf: &mut [T],
        st: &mut State<'_, T>,
    ) -> Result<(), CommError> {
        let n = self.n;
        for o in ops {
            let Op::Recv { from, span, kind } = *o else {
                continue;
            };
            let peer = self.comm.world_rank(from);
            let expect = Message::new(step, span, kind, 0);
            let j = got
                .iter()
                .position(|(f, m, used)| !used && *f == from && m.is(&expect))
                .ok_or(self.mismatch(peer, Mismatch::Sequence))?;
            got[j].2 = true;
            let body = &st.incoming[j].message[HEADER..];
            let payload = span.elements_below(n);
            self.body_length(peer, self.expected_bytes::<T>(kind, payload), body.len())?;
            let (op, use_acc) = (self.op, self.use_acc);
            match kind {
                Kind::Copy => {
                    let vals = values::<T>(body, &mut st.tmp_t);
                    let mut k = 0;
                    for run in span.runs_below(n) {
                        let len = run.len();
                        buf[run].copy_from_slice(&vals[k..k + len]);
                        k += len;
                    }
                }
                Kind::Reduce { covers, onto, .. } if self.on_grid => {
                    assert!(!self.folding, "folded exponents reduce in place only");
                    let vals = if covers.len == 1 {
                        GridValues::Own(values::<T>(body, &mut st.tmp_t))
                    } else {
                        GridValues::Sum(values::<f64>(body, &mut st.tmp_f64))
                    };
                    let own = (&*buf, self.exponents);
                    grid_into(st.grid, own, onto.len == 1, span, n, vals);
                }
                Kind::Reduce { covers, onto, .. } if self.frontiers => {
                    let incoming = Frontier::unpack::<T>(&self.tree, covers, payload, body)
                        .map_err(|_| self.mismatch(peer, Mismatch::Format))?;
                    let mut held = st.held.remove(&span).unwrap_or_else(|| {
                        let own: Vec<T> =
                            span.runs_below(n).flat_map(|r| buf[r].to_vec()).collect();
                        Frontier::own(&self.tree, self.r, &own)
                    });
                    debug_assert_eq!(held.covers(), onto, "the schedule's onto is what it holds");
                    held.merge(&self.tree, op, incoming);
                    st.held.insert(span, held);
                }
                Kind::Reduce { covers, onto, .. } => {
                    let single = onto.len == 1;
                    if native_wire(op, covers) {
                        let vals = values::<T>(body, &mut st.tmp_t);
                        reduce_into(op, buf, st.acc, use_acc, single, span, n, vals);
                    } else {
                        let vals = values::<f32>(body, &mut st.tmp_f32);
                        reduce_into(op, buf, st.acc, use_acc, single, span, n, vals);
                    }
                }
            }
        }
        Ok(())
    }

    /// Step 5: finalizes the spans the step's ops name (rounded once, with
    /// `rounding` at the element's position).
    fn finalize<T: Element>(
        &self,
        ops: &[Op],
        rounding: Rounding,
        buf: &mut [T],
        st: &mut State<'_, T>,
    ) {
        let (p, op) = (self.s.size(), self.op);
        for o in ops {
            let Op::Finalize { span } = *o else {
                continue;
            };
            if self.on_grid {
                for run in span.runs_below(self.n) {
                    for i in run {
                        let g = grid::exponent_at(self.exponents, i);
                        let q = if p == 1 {
                            grid::round_to_grid(buf[i].load(), g)
                        } else {
                            st.grid[i]
                        };
                        buf[i] = T::store(op.finish(grid::from_grid(q, g), p), rounding, i);
                    }
                }
            } else if self.frontiers {
                let h = st.held.remove(&span);
                let root = h
                    .as_ref()
                    .and_then(|h| h.total(&self.tree))
                    .expect("a finalized span holds the whole tree");
                let mut k = 0;
                for run in span.runs_below(self.n) {
                    for i in run {
                        buf[i] = T::store(op.finish(root[k], p), rounding, i);
                        k += 1;
                    }
                }
            } else {
                for i in span.runs_below(self.n).flatten() {
                    let x = if self.use_acc {
                        st.acc[i]
                    } else {
                        buf[i].load()
                    };
                    buf[i] = T::store(op.finish(x, p), rounding, i);
                }
            }
        }
    }
}

/// Whether a grid step is one reduction of two single contributions whose
/// span is finalized at once (the ring's only reduction over two ranks):
/// it may then run in place ([`Runner::direct`]) and store the finished
/// values straight from the two grid roundings. Returns that span.
fn fused_grid_step(ops: &[Op]) -> Option<Span> {
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
fn same_positions(a: Span, b: Span) -> bool {
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
fn finalized(ops: &[Op], span: Span) -> Option<Span> {
    ops.iter().find_map(|o| match *o {
        Op::Finalize { span: f } if same_positions(f, span) => Some(f),
        _ => None,
    })
}

/// Whether an [`Order::Free`](tessera_core::collective::Order::Free) run
/// of `s` folds the exponent phase into its data messages instead of a
/// Max all-reduce of its own: over two ranks the ring (and
/// halving-doubling, the same two steps there) reduces each
/// position once, from both contributions ([`fused_grid_step`], in place:
/// [`Runner::direct`]), so a message that carries its sender's exponents
/// of the blocks it touches ([`grid::GRID_BLOCK`] positions, one byte
/// each) gives the receiver the maximum over both ranks: exactly the
/// all-reduced exponents, one exchange fewer per call. (Max is
/// idempotent, so a block the two fragments share gets the same maximum
/// on both ranks.) Decided by the schedule alone, as every rank must;
/// an odd length (a step of the last piece only receives) keeps the
/// exponent phase.
pub(crate) fn folds_exponents(s: &CollectiveSchedule, op: ReduceOp) -> bool {
    s.on_grid(op)
        && s.size() == 2
        && s.len() >= 2
        // Equal fragments: every piece of a step both sends and receives.
        && s.len().is_multiple_of(2)
        && matches!(s.algorithm(), Algorithm::Ring | Algorithm::HalvingDoubling)
        && matches!(
            s.collective(),
            Collective::AllReduce | Collective::ReduceScatter
        )
}

/// The blocks of grid exponents that positions `run` (not empty) touch.
fn blocks_of(run: &Range<usize>) -> Range<usize> {
    run.start / grid::GRID_BLOCK..(run.end - 1) / grid::GRID_BLOCK + 1
}

/// A block exponent on the wire: `g + 149` in a byte (`g` is in
/// `-149..=96`, [`grid::block_exponent`]).
fn exponent_byte(g: f32) -> u8 {
    (g as i32 - grid::MIN_GRID_EXPONENT).clamp(0, 255) as u8
}

/// Bytes of `blocks` exponents on the wire: padded to 8, so that the
/// body after them stays aligned for its values (the padding, 0, is the
/// least exponent: no block's maximum).
const fn exponent_bytes(blocks: usize) -> usize {
    blocks.next_multiple_of(8)
}

fn byte_exponent(b: u8) -> f32 {
    (i32::from(b) + grid::MIN_GRID_EXPONENT) as f32
}

/// A failure recorded for this rank's own invalid call.
pub(crate) fn own_failure<C: Communicator + ?Sized>(comm: &C) -> Failure {
    Failure::of(comm.world_rank(comm.rank()), Cause::Mismatch)
}

#[cfg(test)]
mod tests;
