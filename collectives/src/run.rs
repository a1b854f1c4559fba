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
//!   receiver adds the tree's nodes that it can now complete
//!   ([`crate::sum_tree`]).
//!
//! Messages of more than the communicator's
//! [`Communicator::piece_elements`] travel as pieces, one exchange each
//! (rings piece by piece through all their steps: [`exchanges`]); a step
//! with one send from the buffer and one receive into another part of it
//! goes through [`Communicator::exchange_apply`], so that the thread
//! transport can let the peer apply the body in place. Neither changes an
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
//! [`tessera_core::collective::execute`]: tessera_core::collective::execute

use std::collections::HashMap;
use std::ops::Range;
use std::time::Instant;

use tessera_core::collective::{
    Algorithm, Collective, CollectiveSchedule, Kind, Op, Order, Ranks, ReduceOp, Reducer, Span,
};
use tessera_core::fp::{Element, Rounding};

use crate::comm::{Communicator, Incoming, Outgoing, Tag, collective_tag};
use crate::error::{Cause, CommError, Failure, Mismatch};
use tessera_core::collective::{Node, SumTree};

/// Bytes of the header before every message's values.
pub(crate) const HEADER: usize = 96;

const MAGIC: u32 = u32::from_le_bytes(*b"TSC1");

/// What a run sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Traffic {
    pub(crate) messages: usize,
    pub(crate) bytes: usize,
}

/// Buffers a [`crate::Collectives`] keeps between calls.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    acc: Vec<f32>,
    staged: Vec<Vec<u8>>,
    incoming: Vec<Incoming>,
    headers: Vec<[u8; HEADER]>,
    /// Elements per piece; 0 for the communicator's
    /// [`Communicator::piece_elements`] (tests set small ones).
    piece: usize,
}

/// The partial sum a rank holds for one span in [`Order::Deterministic`]:
/// the contributions `set`, as the values of the tree's complete subtrees
/// over them (its own leaf excepted: that one is read from its buffer).
struct Held {
    set: Ranks,
    nodes: Vec<(Node, Vec<f32>)>,
}

/// The call-wide fields of a header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Call {
    seq: u32,
    size: u32,
    len: u64,
    dtype: u8,
    collective: u8,
    root: u32,
    algorithm: u8,
    order: u8,
    op: u8,
}

/// A message's own fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Message {
    step: u32,
    span: Span,
    kind: u8,
    covers: (u32, u32),
    body: u64,
}

fn dtype_code(name: &str) -> u8 {
    match name {
        "f32" => 1,
        "f16" => 2,
        "bf16" => 3,
        _ => 0,
    }
}

fn dtype_name(code: u8) -> &'static str {
    match code {
        1 => "f32",
        2 => "f16",
        3 => "bf16",
        _ => "unknown",
    }
}

impl Call {
    fn new<T: Element>(s: &CollectiveSchedule, op: ReduceOp, seq: u32) -> Self {
        let (collective, root) = match s.collective() {
            Collective::ReduceScatter => (0, 0),
            Collective::AllGather => (1, 0),
            Collective::AllReduce => (2, 0),
            Collective::Reduce { root } => (3, root),
            Collective::Broadcast { root } => (4, root),
        };
        let algorithm = match s.algorithm() {
            Algorithm::Ring => 0,
            Algorithm::BidirectionalRing => 1,
            Algorithm::DoubleBinaryTree => 2,
            Algorithm::HalvingDoubling => 3,
        };
        let op = if s.collective().reduces() {
            match op {
                ReduceOp::Sum => 1,
                ReduceOp::Mean => 2,
                ReduceOp::Max => 3,
                ReduceOp::Min => 4,
            }
        } else {
            0
        };
        Self {
            seq,
            // CollectiveSchedule::MAX_RANKS is 2^24.
            size: u32::try_from(s.size()).unwrap_or(u32::MAX),
            len: s.len() as u64,
            dtype: dtype_code(T::NAME),
            collective,
            root: u32::try_from(root).unwrap_or(u32::MAX),
            algorithm,
            order: match s.order() {
                Order::Deterministic => 0,
                Order::Schedule => 1,
            },
            op,
        }
    }

    /// The first field in which `theirs` differs, most telling first.
    fn mismatch(&self, theirs: &Self) -> Option<Mismatch> {
        if self.size != theirs.size {
            Some(Mismatch::GroupSize {
                ours: self.size.into(),
                theirs: theirs.size.into(),
            })
        } else if self.dtype != theirs.dtype {
            Some(Mismatch::ElementType {
                ours: dtype_name(self.dtype),
                theirs: dtype_name(theirs.dtype),
            })
        } else if self.len != theirs.len {
            Some(Mismatch::Length {
                ours: self.len,
                theirs: theirs.len,
            })
        } else if (self.collective, self.root) != (theirs.collective, theirs.root) {
            Some(Mismatch::Collective)
        } else if self.op != theirs.op {
            Some(Mismatch::Operation)
        } else if (self.algorithm, self.order) != (theirs.algorithm, theirs.order) {
            Some(Mismatch::Algorithm)
        } else if self.seq != theirs.seq {
            Some(Mismatch::Sequence)
        } else {
            None
        }
    }
}

impl Message {
    /// Whether this is the message `expect` describes (its body aside).
    fn is(&self, expect: &Self) -> bool {
        (self.step, self.span, self.kind, self.covers)
            == (expect.step, expect.span, expect.kind, expect.covers)
    }

    fn new(step: usize, span: Span, kind: Kind, body: usize) -> Self {
        let (kind, covers) = match kind {
            Kind::Copy => (0, (0, 0)),
            Kind::Reduce { covers, .. } => (1, (covers.start as u32, covers.len as u32)),
        };
        Self {
            step: step as u32,
            span,
            kind,
            covers,
            body: body as u64,
        }
    }
}

fn encode(call: &Call, m: &Message) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    let mut put = |at: usize, bytes: &[u8]| h[at..at + bytes.len()].copy_from_slice(bytes);
    put(0, &MAGIC.to_le_bytes());
    put(4, &call.seq.to_le_bytes());
    put(8, &m.step.to_le_bytes());
    put(12, &call.size.to_le_bytes());
    put(
        16,
        &[
            call.collective,
            call.algorithm,
            call.order,
            call.op,
            call.dtype,
            m.kind,
        ],
    );
    put(24, &call.root.to_le_bytes());
    put(28, &m.covers.0.to_le_bytes());
    put(32, &m.covers.1.to_le_bytes());
    put(40, &call.len.to_le_bytes());
    put(48, &(m.span.start as u64).to_le_bytes());
    put(56, &(m.span.len as u64).to_le_bytes());
    put(64, &(m.span.stride as u64).to_le_bytes());
    put(72, &(m.span.count as u64).to_le_bytes());
    put(80, &m.body.to_le_bytes());
    h
}

fn decode(h: &[u8]) -> Option<(Call, Message)> {
    if h.len() < HEADER {
        return None;
    }
    let u32_at = |at: usize| u32::from_le_bytes(h[at..at + 4].try_into().expect("4 bytes"));
    let u64_at = |at: usize| u64::from_le_bytes(h[at..at + 8].try_into().expect("8 bytes"));
    if u32_at(0) != MAGIC {
        return None;
    }
    let usize_at = |at: usize| usize::try_from(u64_at(at)).ok();
    let span = Span::strided(usize_at(48)?, usize_at(56)?, usize_at(64)?, usize_at(72)?);
    Some((
        Call {
            seq: u32_at(4),
            size: u32_at(12),
            len: u64_at(40),
            dtype: h[20],
            collective: h[16],
            root: u32_at(24),
            algorithm: h[17],
            order: h[18],
            op: h[19],
        },
        Message {
            step: u32_at(8),
            span,
            kind: h[21],
            covers: (u32_at(28), u32_at(32)),
            body: u64_at(80),
        },
    ))
}

/// Whether messages carry several partial sums (as the core's
/// `CollectiveSchedule::carries_frontiers`).
pub(crate) fn carries_frontiers(s: &CollectiveSchedule, op: ReduceOp) -> bool {
    s.order() == Order::Deterministic
        && op.depends_on_order()
        && s.collective().reduces()
        && s.size() > 2
        && s.algorithm() != Algorithm::HalvingDoubling
}

/// Whether a reduction message covering `covers` travels in the buffer's
/// format (else in f32).
fn native_wire(op: ReduceOp, covers: Ranks) -> bool {
    covers.len == 1 || !op.depends_on_order()
}

/// An element-wise combination, monomorphised per operation so the loops
/// vectorise.
trait Combine {
    fn f(a: f32, b: f32) -> f32;
}
struct Add;
struct Max;
struct Min;
impl Combine for Add {
    #[inline(always)]
    fn f(a: f32, b: f32) -> f32 {
        a + b
    }
}
impl Combine for Max {
    #[inline(always)]
    fn f(a: f32, b: f32) -> f32 {
        ReduceOp::Max.combine(a, b)
    }
}
impl Combine for Min {
    #[inline(always)]
    fn f(a: f32, b: f32) -> f32 {
        ReduceOp::Min.combine(a, b)
    }
}

macro_rules! with_combine {
    ($op:expr, $f:ident::<_ $(, $t:ty)*>($($arg:expr),*)) => {
        match $op {
            ReduceOp::Sum | ReduceOp::Mean => $f::<Add $(, $t)*>($($arg),*),
            ReduceOp::Max => $f::<Max $(, $t)*>($($arg),*),
            ReduceOp::Min => $f::<Min $(, $t)*>($($arg),*),
        }
    };
}

/// `dst[i] = f(dst[i], src[i])`.
#[inline(always)]
fn assign<F: Combine, B: Element>(dst: &mut [f32], src: &[B]) {
    for (d, s) in dst.iter_mut().zip(src) {
        *d = F::f(*d, s.load());
    }
}

/// `dst[i] = f(a[i], b[i])`.
#[inline(always)]
fn into<F: Combine, A: Element, B: Element>(dst: &mut [f32], a: &[A], b: &[B]) {
    for ((d, a), b) in dst.iter_mut().zip(a).zip(b) {
        *d = F::f(a.load(), b.load());
    }
}

/// The values of a message body, cast in place when aligned, else copied.
fn values<'a, V: bytemuck::AnyBitPattern>(bytes: &'a [u8], tmp: &'a mut Vec<V>) -> &'a [V] {
    match bytemuck::try_cast_slice(bytes) {
        Ok(v) => v,
        Err(_) => {
            tmp.clear();
            tmp.extend(
                bytes
                    .chunks_exact(size_of::<V>())
                    .map(bytemuck::pod_read_unaligned::<V>),
            );
            tmp
        }
    }
}

/// Where a message's values come from.
enum Body {
    Buf(Range<usize>),
    Acc(Range<usize>),
    Staged(usize),
}

/// The step named in the headers of a zero-length call's messages
/// ([`Runner::handshake`]): no schedule has that many steps.
const HANDSHAKE_STEP: usize = u32::MAX as usize;

/// Runs this rank's part of `s` on `buf`, in place.
///
/// `seq` numbers the call (every rank passes the same); `deadline` bounds
/// the whole run. On any error the world is aborted before returning; if
/// the rank panics inside the run, it is aborted naming this rank
/// ([`Cause::Panicked`]) as the panic unwinds out of it.
pub(crate) fn run<T: Element, C: Communicator + ?Sized>(
    comm: &C,
    s: &CollectiveSchedule,
    reduction: &Reducer,
    buf: &mut [T],
    seq: u32,
    deadline: Instant,
    scratch: &mut Scratch,
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
    let runner = Runner::new::<T>(comm, s, reduction.op, seq, deadline);
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
    tree: SumTree,
    deadline: Instant,
}

/// A run's buffers: the [`Scratch`] kept between calls, and what one run
/// holds.
struct State<'a, T> {
    acc: &'a mut Vec<f32>,
    staged: &'a mut Vec<Vec<u8>>,
    incoming: &'a mut Vec<Incoming>,
    headers: &'a mut Vec<[u8; HEADER]>,
    held: HashMap<Span, Held>,
    tmp_f32: Vec<f32>,
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
        let frontiers = carries_frontiers(s, op);
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
            use_acc: s.collective().reduces() && !frontiers && wide && p > 1,
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
            staged: &mut scratch.staged,
            incoming: &mut scratch.incoming,
            headers: &mut scratch.headers,
            held: HashMap::new(),
            tmp_f32: Vec::new(),
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
        for (step, ops) in exchanges(self.s, self.r, self.n, piece, self.frontiers) {
            let (bodies, sends) = self.stage(step, &ops, buf, &mut st);
            let excluded = self.frontiers || self.use_acc;
            if let Some((send, recv)) = direct_runs(&ops, &bodies, self.n, excluded) {
                self.direct(step, &ops, sends[0], send, recv, buf, &mut st)?;
            } else {
                let got = self.exchange(&ops, &bodies, &sends, buf, &mut st)?;
                self.apply(step, &ops, got, buf, &mut st)?;
            }
            self.finalize(&ops, rounding, buf, &mut st);
        }
        Ok(st.traffic)
    }

    /// The run of a zero-length call of several ranks, whose schedule has
    /// no messages: this call's header to every other rank, and theirs
    /// checked, each as it is taken ([`handshake_order`](Self::handshake_order)),
    /// so that a rank called with another length finds the mismatch at
    /// its first message as with any other length, and none returns `Ok`
    /// while its peers wait for it.
    fn handshake<T: Element>(&self, st: &mut State<'_, T>) -> Result<Traffic, CommError> {
        let p = self.s.size();
        let header = encode(
            &self.call,
            &Message::new(HANDSHAKE_STEP, Span::new(0, 0), Kind::Copy, 0),
        );
        let peers = self.handshake_order();
        let out: Vec<Outgoing<'_>> = peers
            .iter()
            .map(|&to| Outgoing {
                to,
                tag: self.tag,
                header: &header,
                body: &[],
            })
            .collect();
        st.incoming
            .resize_with(st.incoming.len().max(p - 1), Incoming::default);
        for (i, &from) in peers.iter().enumerate() {
            st.incoming[i].from = from;
            st.incoming[i].tag = self.tag;
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        let mut check = |i: usize, head: &[u8], tail: &[u8]| {
            let peer = self.comm.world_rank(peers[i]);
            let (header, body) =
                split_header(head, tail).ok_or(self.mismatch(peer, Mismatch::Format))?;
            let m = self.header(peer, header, body.len())?;
            if m.step as usize != HANDSHAKE_STEP {
                return Err(self.mismatch(peer, Mismatch::Sequence));
            }
            Ok(())
        };
        self.comm
            .exchange_apply(&out, &mut st.incoming[..p - 1], left, &mut check)?;
        Ok(Traffic {
            messages: p - 1,
            bytes: (p - 1) * HEADER,
        })
    }

    /// The peers whose headers a zero-length call takes, in order: first
    /// those this rank hears from in the same schedule on a buffer long
    /// enough to leave no message out, in the order it would (so that
    /// among ranks called with a non-zero length, the first peer it waits
    /// for is one that sends to it), then the others.
    fn handshake_order(&self) -> Vec<usize> {
        let p = self.s.size();
        let mut seen = vec![false; p];
        seen[self.r] = true;
        let mut order = Vec::with_capacity(p - 1);
        let mut hear = |q: usize| {
            if !std::mem::replace(&mut seen[q], true) {
                order.push(q);
            }
        };
        if let Ok(full) = CollectiveSchedule::new(self.s.algorithm(), self.s.collective(), p, 2 * p)
        {
            for step in 0..full.steps() {
                for o in full.ops(self.r, step).iter() {
                    if let Op::Recv { from, .. } = *o {
                        hear(from);
                    }
                }
            }
        }
        for k in 1..p {
            hear((self.r + p - k) % p);
        }
        order
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
            acc, staged, held, ..
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
            let state = held.get(&span);
            let body = stage(&mut |v| {
                pack_frontier(&self.tree, covers, self.r, state, &runs, buf, v);
            });
            if state.is_some_and(|h| h.set == covers) {
                held.remove(&span);
            }
            return body;
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
    fn expect_receives(&self, ops: &[Op], incoming: &mut Vec<Incoming>) -> usize {
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
    /// receive, checked as at step 3.
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
    ) -> Result<(), CommError> {
        self.expect_receives(ops, st.incoming);
        let Some(&Op::Recv { from, span, kind }) =
            ops.iter().find(|o| matches!(o, Op::Recv { .. }))
        else {
            unreachable!("direct_runs found one receive")
        };
        let (body, into): (&[T], &mut [T]) = if send_run.end <= recv_run.start {
            let (low, high) = buf.split_at_mut(recv_run.start);
            (&low[send_run.clone()], &mut high[..recv_run.len()])
        } else {
            let (low, high) = buf.split_at_mut(send_run.start);
            (&high[..send_run.len()], &mut low[recv_run.clone()])
        };
        let out = [Outgoing {
            to,
            tag: self.tag,
            header: &st.headers[0],
            body: bytemuck::cast_slice(body),
        }];
        st.traffic.messages += 1;
        st.traffic.bytes += out[0].len();
        let peer = self.comm.world_rank(from);
        let expect = Message::new(step, span, kind, 0);
        let payload = recv_run.len();
        let expected = self.expected_bytes::<T>(kind, payload);
        let (op, tmp_t, tmp_f32) = (self.op, &mut st.tmp_t, &mut st.tmp_f32);
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.comm
            .exchange_apply(&out, &mut st.incoming[..1], left, &mut |_, head, tail| {
                let (header, body) =
                    split_header(head, tail).ok_or(self.mismatch(peer, Mismatch::Format))?;
                let m = self.header(peer, header, body.len())?;
                if !m.is(&expect) {
                    return Err(self.mismatch(peer, Mismatch::Sequence));
                }
                self.body_length(peer, expected, body.len())?;
                let whole = Span::new(0, payload);
                match kind {
                    Kind::Copy => into.copy_from_slice(values::<T>(body, tmp_t)),
                    Kind::Reduce { covers, .. } if native_wire(op, covers) => {
                        let vals = values::<T>(body, tmp_t);
                        reduce_into(op, into, &mut [], false, false, whole, payload, vals);
                    }
                    Kind::Reduce { .. } => {
                        let vals = values::<f32>(body, tmp_f32);
                        reduce_into(op, into, &mut [], false, false, whole, payload, vals);
                    }
                }
                Ok(())
            })
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
                Kind::Reduce { covers, onto, .. } if self.frontiers => {
                    let held = &mut st.held;
                    merge_frontier(
                        &self.tree, op, self.r, held, span, covers, onto, body, buf, n,
                    );
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
            if self.frontiers {
                let h = st
                    .held
                    .remove(&span)
                    .expect("a finalized span holds the whole tree");
                debug_assert_eq!(h.set.len, p);
                let (node, root) = &h.nodes[0];
                debug_assert_eq!(*node, self.tree.root());
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

    /// The fields of a message from `peer` whose header is `header` and
    /// whose body has `body` bytes, checked against this call: a header of
    /// this call, stating the body's length.
    fn header(&self, peer: usize, header: &[u8], body: usize) -> Result<Message, CommError> {
        let Some((theirs, m)) = decode(header) else {
            return Err(self.mismatch(peer, Mismatch::Format));
        };
        if let Some(what) = self.call.mismatch(&theirs) {
            return Err(self.mismatch(peer, what));
        }
        if m.body != body as u64 {
            return Err(self.mismatch(peer, Mismatch::Format));
        }
        Ok(m)
    }

    /// Bytes of the body of a received message of `payload` elements:
    /// values in the buffer's format, partial sums in f32, or a frontier's
    /// vectors (leaves in the buffer's format, inner nodes in f32).
    fn expected_bytes<T: Element>(&self, kind: Kind, payload: usize) -> usize {
        let per_element = match kind {
            Kind::Copy => size_of::<T>(),
            Kind::Reduce { covers, .. } if self.frontiers => {
                let mut bytes = 0;
                self.tree.frontier(covers, &mut |node| {
                    bytes += if self.tree.leaf(node).is_some() {
                        size_of::<T>()
                    } else {
                        4
                    };
                });
                bytes
            }
            Kind::Reduce { covers, .. } if native_wire(self.op, covers) => size_of::<T>(),
            Kind::Reduce { .. } => 4,
        };
        payload * per_element
    }

    fn body_length(&self, peer: usize, expected: usize, found: usize) -> Result<(), CommError> {
        if found == expected {
            Ok(())
        } else {
            Err(CommError::LengthMismatch {
                rank: self.me,
                peer,
                expected,
                found,
            })
        }
    }

    const fn mismatch(&self, peer: usize, what: Mismatch) -> CommError {
        CommError::CallMismatch {
            rank: self.me,
            peer,
            what,
        }
    }
}

/// A received message's header and body from the two parts a transport
/// hands to [`Communicator::exchange_apply`]'s `apply`: one part holding
/// both, or the header then the body. `None` if neither.
fn split_header<'m>(head: &'m [u8], tail: &'m [u8]) -> Option<(&'m [u8], &'m [u8])> {
    if tail.is_empty() && head.len() >= HEADER {
        Some(head.split_at(HEADER))
    } else if head.len() == HEADER {
        Some((head, tail))
    } else {
        None
    }
}

/// The most elements a message of the thread transport carries
/// ([`Communicator::piece_elements`]): a step's larger messages travel as
/// pieces of this many (2 MiB of f32), one exchange per piece, so that a
/// ring's fragment is still in cache (the shared L3) between its reduction
/// and its all-gather. On the 2-core machine of the README's figures
/// (1 MiB L2 per core, 32 MiB L3), with bodies lent in place, the 64 MiB
/// ring all-reduce of 2 thread ranks took 7.7 to 8.3 ms with these pieces,
/// 9.2 to 11 ms with 128Ki and 256Ki, 10 to 12 ms whole. (With bodies
/// copied, 128Ki pieces were the best: 2x faster than whole.) Over MPI,
/// pieces made large all-reduces about twice as slow (its transports
/// pipeline large messages themselves), so MPI sends them whole.
pub(crate) const PIECE_ELEMENTS: usize = 512 << 10;

/// The contiguous pieces of at most `piece` payload elements
/// that `span` travels as (the whole span if it is strided or no larger).
fn split(span: Span, n: usize, piece: usize) -> Vec<Span> {
    let payload = span.elements_below(n);
    if span.count != 1 || payload <= piece {
        return vec![span];
    }
    (span.start..span.start + payload)
        .step_by(piece)
        .map(|at| Span::new(at, piece.min(span.start + payload - at)))
        .collect()
}

/// The span a send or receive moves.
fn moved(o: &Op) -> Option<Span> {
    match *o {
        Op::Send { span, .. } | Op::Recv { span, .. } => Some(span),
        Op::Finalize { .. } => None,
    }
}

/// `ops` with piece `k` of every op in element `k`, finalizations not
/// placed (see [`exchanges`]).
fn split_moves(ops: &[Op], n: usize, piece: usize) -> Vec<Vec<Op>> {
    let mut out: Vec<Vec<Op>> = Vec::new();
    for o in ops {
        let parts: Vec<Op> = match *o {
            Op::Send { to, span, kind } => split(span, n, piece)
                .into_iter()
                .map(|span| Op::Send { to, span, kind })
                .collect(),
            Op::Recv { from, span, kind } => split(span, n, piece)
                .into_iter()
                .map(|span| Op::Recv { from, span, kind })
                .collect(),
            Op::Finalize { .. } => Vec::new(),
        };
        for (k, part) in parts.into_iter().enumerate() {
            if out.len() == k {
                out.push(Vec::new());
            }
            out[k].push(part);
        }
    }
    out
}

/// Whether some send of `ops` reads a position one of its receives writes.
fn sends_meet_receives(ops: &[Op], n: usize) -> bool {
    ops.iter().any(|a| {
        matches!(a, Op::Send { .. })
            && ops.iter().any(|b| {
                matches!(b, Op::Recv { .. })
                    && overlaps(moved(a).expect("a send"), moved(b).expect("a receive"), n)
            })
    })
}

/// This rank's part of `s` as a sequence of exchanges: `(step, ops)`, the
/// step named in the messages' headers. Messages of more than `piece`
/// payload elements (contiguous spans) travel as
/// contiguous pieces of at most that many, one exchange per piece, so that
/// a piece is still in cache when the receiver reduces it. Sender and
/// receiver name the same span, so they split it alike; every choice below
/// depends on the schedule alone, not on the rank, so all ranks exchange
/// the same sequence.
///
/// The arithmetic is the schedule's, operand for operand: every position
/// sees the same operations in the same order, and every send reads the
/// values it would have read whole.
///
/// - Rings ([`Algorithm::Ring`], [`Algorithm::BidirectionalRing`]) run
///   piece by piece through all steps: piece `k` of every step, then piece
///   `k + 1`. A position belongs to one fragment (or half-fragment) span,
///   at the same offset in every step, so it is in piece `k` at every step
///   that touches it, and its operations keep their order; within a step
///   a ring sends one fragment and receives another. A fragment then stays
///   in cache from its reduction to its all-gather (about as fast as the
///   caller slicing the buffer, with the ring's own summation order).
/// - Other schedules split step by step, unless some rank's step sends a
///   position it receives (its send must read it before the receive);
///   a finalized piece goes after the last exchange of its step that
///   moves any of its positions.
/// - Steps that carry frontiers stay whole (their partial sums are kept
///   per span).
fn exchanges(
    s: &CollectiveSchedule,
    r: usize,
    n: usize,
    piece: usize,
    frontiers: bool,
) -> Vec<(usize, Vec<Op>)> {
    let steps = s.steps();
    let whole = |step: usize| (step, s.ops(r, step).to_vec());
    let splits = |step: usize| {
        s.ops(r, step)
            .iter()
            .filter_map(moved)
            .any(|m| split(m, n, piece).len() > 1)
    };
    if frontiers || !(0..steps).any(splits) {
        return (0..steps).map(whole).collect();
    }
    if matches!(
        s.algorithm(),
        Algorithm::Ring | Algorithm::BidirectionalRing
    ) {
        let mut per_step: Vec<Vec<Vec<Op>>> = Vec::with_capacity(steps);
        for step in 0..steps {
            let ops = s.ops(r, step);
            let mut parts = split_moves(&ops, n, piece);
            for o in ops.iter() {
                let Op::Finalize { span } = *o else {
                    continue;
                };
                for (k, part) in split(span, n, piece).into_iter().enumerate() {
                    if parts.len() <= k {
                        parts.resize_with(k + 1, Vec::new);
                    }
                    parts[k].push(Op::Finalize { span: part });
                }
            }
            per_step.push(parts);
        }
        let most = per_step.iter().map(Vec::len).max().unwrap_or(0);
        let mut out = Vec::new();
        for k in 0..most {
            for (step, parts) in per_step.iter_mut().enumerate() {
                if let Some(ops) = parts.get_mut(k)
                    && !ops.is_empty()
                {
                    out.push((step, std::mem::take(ops)));
                }
            }
        }
        return out;
    }
    let mut out = Vec::new();
    for step in 0..steps {
        let ops = s.ops(r, step);
        if !splits(step) || (0..s.size()).any(|q| sends_meet_receives(&s.ops(q, step), n)) {
            out.push((step, ops.to_vec()));
            continue;
        }
        let mut parts = split_moves(&ops, n, piece);
        for o in ops.iter() {
            let Op::Finalize { span } = *o else {
                continue;
            };
            for part in split(span, n, piece) {
                let last = (0..parts.len())
                    .rev()
                    .find(|&k| {
                        parts[k]
                            .iter()
                            .filter_map(moved)
                            .any(|m| overlaps(m, part, n))
                    })
                    .unwrap_or(0);
                parts[last].push(Op::Finalize { span: part });
            }
        }
        out.extend(parts.into_iter().map(|ops| (step, ops)));
    }
    out
}

/// Whether two spans share a position below `n`.
fn overlaps(a: Span, b: Span, n: usize) -> bool {
    a.runs_below(n)
        .any(|x| b.runs_below(n).any(|y| x.start < y.end && y.start < x.end))
}

/// The runs of a step that may lend its body in place
/// ([`Communicator::exchange_apply`]): exactly one send, of a run of the
/// buffer itself, and one receive, into one run of the buffer disjoint
/// from it, so the two can be borrowed apart. Not for steps that carry
/// frontiers or accumulate in f32 beside a 16-bit buffer (`excluded`).
fn direct_runs(
    ops: &[Op],
    bodies: &[Body],
    n: usize,
    excluded: bool,
) -> Option<(Range<usize>, Range<usize>)> {
    let [Body::Buf(send)] = bodies else {
        return None;
    };
    let mut recvs = ops.iter().filter_map(|o| match *o {
        Op::Recv { span, .. } => Some(span),
        _ => None,
    });
    let (Some(span), None) = (recvs.next(), recvs.next()) else {
        return None;
    };
    let mut runs = span.runs_below(n);
    let (Some(recv), None) = (runs.next(), runs.next()) else {
        return None;
    };
    (!excluded && (send.end <= recv.start || recv.end <= send.start)).then(|| (send.clone(), recv))
}

/// A one-partial reduction of `vals` (the span's payload, in order) into
/// this rank's partial: in place for f32 buffers, into the accumulator for
/// 16-bit ones (from the rank's own contribution if `held_single`).
#[allow(clippy::too_many_arguments)]
fn reduce_into<T: Element, V: Element>(
    op: ReduceOp,
    buf: &mut [T],
    acc: &mut [f32],
    use_acc: bool,
    held_single: bool,
    span: Span,
    n: usize,
    vals: &[V],
) {
    let mut k = 0;
    for run in span.runs_below(n) {
        let len = run.len();
        let src = &vals[k..k + len];
        k += len;
        if !use_acc {
            // An f32 buffer (the only four-byte element type) accumulates
            // in place, as the core executor's does.
            let dst: &mut [f32] = bytemuck::cast_slice_mut(&mut buf[run]);
            with_combine!(op, assign::<_, V>(dst, src));
        } else if held_single {
            with_combine!(op, into::<_, T, V>(&mut acc[run.clone()], &buf[run], src));
        } else {
            with_combine!(op, assign::<_, V>(&mut acc[run], src));
        }
    }
}

/// Writes the message covering `covers` of the span: one vector per node
/// of the frontier, leaves in the buffer's format, inner nodes in f32.
fn pack_frontier<T: Element>(
    tree: &SumTree,
    covers: Ranks,
    rank: usize,
    state: Option<&Held>,
    runs: &[Range<usize>],
    buf: &[T],
    out: &mut Vec<u8>,
) {
    tree.frontier(covers, &mut |node| {
        if tree.leaf(node) == Some(rank) {
            for run in runs {
                out.extend_from_slice(bytemuck::cast_slice(&buf[run.clone()]));
            }
            return;
        }
        let vals = state
            .and_then(|h| h.nodes.iter().find(|(m, _)| *m == node))
            .map(|(_, v)| v)
            .expect("a rank sends only the partial sums it holds");
        if tree.leaf(node).is_some() {
            for &x in vals {
                out.extend_from_slice(bytemuck::bytes_of(&T::store(x, Rounding::Nearest, 0)));
            }
        } else {
            out.extend_from_slice(bytemuck::cast_slice(vals));
        }
    });
}

/// Receives the frontier of `covers` onto what this rank holds (`onto`),
/// adds every node it completes, and keeps the frontier of the union.
#[allow(clippy::too_many_arguments)]
fn merge_frontier<T: Element>(
    tree: &SumTree,
    op: ReduceOp,
    rank: usize,
    held: &mut HashMap<Span, Held>,
    span: Span,
    covers: Ranks,
    onto: Ranks,
    body: &[u8],
    buf: &[T],
    n: usize,
) {
    let payload = span.elements_below(n);
    let own: Vec<f32> = span
        .runs_below(n)
        .flat_map(|run| buf[run].iter().map(|x| x.load()))
        .collect();
    // The incoming vectors, widened.
    let mut pool: Vec<(Node, Vec<f32>)> = Vec::new();
    let mut at = 0;
    tree.frontier(covers, &mut |node| {
        let v = if tree.leaf(node).is_some() {
            let bytes = &body[at..at + payload * size_of::<T>()];
            at += bytes.len();
            bytes
                .chunks_exact(size_of::<T>())
                .map(|c| bytemuck::pod_read_unaligned::<T>(c).load())
                .collect()
        } else {
            let bytes = &body[at..at + payload * 4];
            at += bytes.len();
            bytes
                .chunks_exact(4)
                .map(bytemuck::pod_read_unaligned::<f32>)
                .collect()
        };
        pool.push((node, v));
    });
    if let Some(h) = held.remove(&span) {
        debug_assert_eq!(h.set, onto, "the schedule's onto is what this rank holds");
        pool.extend(h.nodes);
    } else {
        debug_assert_eq!(onto, Ranks::one(rank));
    }
    tree.merges(onto, covers, &mut |node, left, right| {
        let get = |m: Node| -> &[f32] {
            if tree.leaf(m) == Some(rank) {
                &own
            } else {
                &pool
                    .iter()
                    .find(|(k, _)| *k == m)
                    .expect("both children of a merge are known")
                    .1
            }
        };
        let mut v = vec![0.0f32; payload];
        with_combine!(op, into::<_, f32, f32>(&mut v, get(left), get(right)));
        pool.push((node, v));
    });
    let set = union(onto, covers, tree.leaves());
    let mut nodes = Vec::new();
    tree.frontier(set, &mut |node| {
        if tree.leaf(node) != Some(rank) {
            let i = pool
                .iter()
                .position(|(k, _)| *k == node)
                .expect("the union's frontier is known after the merges");
            nodes.push(pool.swap_remove(i));
        }
    });
    held.insert(span, Held { set, nodes });
}

/// A failure recorded for this rank's own invalid call.
pub(crate) fn own_failure<C: Communicator + ?Sized>(comm: &C) -> Failure {
    Failure::of(comm.world_rank(comm.rank()), Cause::Mismatch)
}

/// The union of two disjoint, adjacent sets (one ends where the other
/// starts), as the schedules' `Kind::Reduce` guarantees.
fn union(a: Ranks, b: Ranks, size: usize) -> Ranks {
    let len = (a.len + b.len).min(size);
    let start = if (a.start + a.len) % size == b.start % size {
        a.start
    } else {
        b.start
    };
    Ranks::new(start % size, len)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tessera_core::collective::{self, Algorithm, Collective, Order, ReduceOp, Reducer};
    use tessera_core::fp::{Element, Rounding, f16};

    use super::{CollectiveSchedule, Scratch, run};
    use crate::comm::Communicator;
    use crate::thread::ThreadWorld;

    fn input<T: Element>(r: usize, len: usize) -> Vec<T> {
        (0..len)
            .map(|i| {
                let x = ((r * 7919 + i * 104_729) % 1000) as f32 / 97.0 - 5.0;
                T::store(x, Rounding::Nearest, i)
            })
            .collect()
    }

    fn bits<T: Element>(x: &[T]) -> Vec<u32> {
        x.iter().map(|v| v.load().to_bits()).collect()
    }

    /// Runs `s` with messages split into pieces of `piece` elements,
    /// compares every rank's specified positions with the executor's, and
    /// returns the number of messages sent.
    fn check<T: Element + Send + Sync>(
        s: &CollectiveSchedule,
        op: ReduceOp,
        piece: usize,
    ) -> usize {
        let (p, len) = (s.size(), s.len());
        let red = Reducer::new(op);
        let got = ThreadWorld::run(p, |comm| {
            let mut scratch = Scratch {
                piece,
                ..Scratch::default()
            };
            let mut x = input::<T>(comm.rank(), len);
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            let traffic = run(&comm, s, &red, &mut x, 0, deadline, &mut scratch).unwrap();
            (x, traffic.messages)
        })
        .unwrap();
        let mut want: Vec<Vec<T>> = (0..p).map(|r| input(r, len)).collect();
        let mut refs: Vec<&mut [T]> = want.iter_mut().map(|b| &mut b[..]).collect();
        let mut scratch = vec![0.0f32; s.scratch_len::<T>(op)];
        collective::execute(s, &red, &mut refs, &mut scratch, |_| {}).unwrap();
        let m = len.div_ceil(p);
        let mut messages = 0;
        for (r, got) in got.into_iter().enumerate() {
            let (got, sent) = got.unwrap();
            messages += sent;
            let at = match s.collective() {
                Collective::ReduceScatter => (r * m).min(len)..((r + 1) * m).min(len),
                Collective::Reduce { root } if root != r => 0..0,
                _ => 0..len,
            };
            assert_eq!(
                bits(&got[at.clone()]),
                bits(&want[r][at]),
                "{} {s:?} {op:?} piece {piece} rank {r}",
                T::NAME
            );
        }
        messages
    }

    #[test]
    fn messages_in_pieces_give_the_executors_bits() {
        for p in 2..=5 {
            for algorithm in Algorithm::ALL {
                for collective in [
                    Collective::AllReduce,
                    Collective::ReduceScatter,
                    Collective::AllGather,
                    Collective::Reduce { root: p - 1 },
                    Collective::Broadcast { root: p / 2 },
                ] {
                    for (op, order) in [
                        (ReduceOp::Sum, Order::Schedule),
                        (ReduceOp::Sum, Order::Deterministic),
                        (ReduceOp::Max, Order::Schedule),
                    ] {
                        for len in [37, 200] {
                            let s = CollectiveSchedule::new(algorithm, collective, p, len)
                                .unwrap()
                                .with_order(order);
                            let whole = check::<f32>(&s, op, len);
                            for piece in [1, 5, 16] {
                                let split = check::<f32>(&s, op, piece);
                                // Only steps carrying frontiers stay whole.
                                let frontiers = super::carries_frontiers(&s, op);
                                assert!(split > whole || frontiers || piece > 1, "{s:?} {op:?}");
                            }
                            check::<f16>(&s, op, 7);
                        }
                    }
                }
            }
        }
    }
}
