//! [`Algorithm::Ring`] and [`Algorithm::BidirectionalRing`].
//!
//! Both are written once, for a ring `u -> u + 1` over "local" indices;
//! the anticlockwise ring of the bidirectional pair maps local `u` to rank
//! `-u mod p`, so its `u + 1` is rank `r - 1`.
//!
//! [`Algorithm::Ring`]: super::Algorithm::Ring
//! [`Algorithm::BidirectionalRing`]: super::Algorithm::BidirectionalRing

use super::message::{Kind, Op, Ops};
use super::schedule::{Algorithm, Collective, CollectiveSchedule};
use super::span::{Ranks, Span};

pub(super) fn steps(s: &CollectiveSchedule) -> usize {
    let p = s.size();
    match s.collective() {
        Collective::ReduceScatter | Collective::AllGather => p - 1,
        Collective::AllReduce | Collective::Reduce { .. } | Collective::Broadcast { .. } => {
            2 * (p - 1)
        }
    }
}

pub(super) fn ops(s: &CollectiveSchedule, rank: usize, step: usize, ops: &mut Ops) {
    match s.algorithm() {
        Algorithm::BidirectionalRing => {
            Dir::new(s, false, Some(0)).ops(rank, step, ops);
            Dir::new(s, true, Some(1)).ops(rank, step, ops);
        }
        _ => Dir::new(s, false, None).ops(rank, step, ops),
    }
}

/// One directed ring over whole fragments or one half of each.
struct Dir<'a> {
    s: &'a CollectiveSchedule,
    p: i64,
    reverse: bool,
    half: Option<usize>,
}

impl<'a> Dir<'a> {
    fn new(s: &'a CollectiveSchedule, reverse: bool, half: Option<usize>) -> Self {
        Self {
            s,
            p: s.size() as i64,
            reverse,
            half,
        }
    }

    /// The rank of local index `u` (any integer, taken mod p); also the
    /// local index of rank `u` (the map is an involution).
    fn rank(&self, u: i64) -> usize {
        let u = if self.reverse { -u } else { u };
        u.rem_euclid(self.p) as usize
    }

    /// The ranks of local indices `a .. a + len`.
    fn ranks(&self, a: i64, len: i64) -> Ranks {
        let first = if self.reverse { a + len - 1 } else { a };
        Ranks::new(self.rank(first), len as usize)
    }

    /// This direction's part of fragment `j`.
    fn span(&self, j: usize) -> Span {
        match self.half {
            None => self.s.fragment_span(j),
            Some(h) => self.s.half_span(j, h),
        }
    }

    fn send(&self, ops: &mut Ops, to: i64, fragment: usize, kind: Kind) {
        ops.push(Op::Send {
            to: self.rank(to),
            span: self.span(fragment),
            kind,
        });
    }

    fn recv(&self, ops: &mut Ops, from: i64, fragment: usize, kind: Kind) {
        ops.push(Op::Recv {
            from: self.rank(from),
            span: self.span(fragment),
            kind,
        });
    }

    fn reduce(&self, covers_from: i64, covers_len: i64, onto: i64) -> Kind {
        Kind::reduce(self.ranks(covers_from, covers_len), self.ranks(onto, 1))
    }

    fn ops(&self, rank: usize, step: usize, ops: &mut Ops) {
        let p = self.p;
        let u = self.rank(rank as i64) as i64;
        let s = step as i64;
        match self.s.collective() {
            Collective::ReduceScatter => self.reduce_scatter(u, s, ops),
            Collective::AllGather => self.all_gather(u, s, ops),
            Collective::AllReduce if s < p - 1 => self.reduce_scatter(u, s, ops),
            Collective::AllReduce => self.all_gather(u, s - (p - 1), ops),
            Collective::Reduce { root } => {
                self.chain_reduce(u, self.rank(root as i64) as i64, s, ops)
            }
            Collective::Broadcast { root } => {
                self.chain_broadcast(u, self.rank(root as i64) as i64, s, ops);
            }
        }
    }

    /// Step `s` of reduce-scatter: fragment `x` starts at `x + 1` and ends
    /// at `x` after `p - 1` hops, each adding the receiver's contribution.
    fn reduce_scatter(&self, u: i64, s: i64, ops: &mut Ops) {
        self.send(
            ops,
            u + 1,
            self.rank(u - 1 - s),
            self.reduce(u - s, s + 1, u + 1),
        );
        self.recv(
            ops,
            u - 1,
            self.rank(u - 2 - s),
            self.reduce(u - 1 - s, s + 1, u),
        );
        if s == self.p - 2 {
            ops.push(Op::Finalize {
                span: self.span(self.rank(u)),
            });
        }
    }

    /// Step `s` of all-gather: finished fragments pass round the ring.
    fn all_gather(&self, u: i64, s: i64, ops: &mut Ops) {
        self.send(ops, u + 1, self.rank(u - s), Kind::Copy);
        self.recv(ops, u - 1, self.rank(u - 1 - s), Kind::Copy);
    }

    /// A pipelined chain `root + 1 -> ... -> root`: fragment `i` enters at
    /// step `i`; chain position `k` forwards it at step `i + k`.
    fn chain_reduce(&self, u: i64, root: i64, s: i64, ops: &mut Ops) {
        let p = self.p;
        let k = (u - root - 1).rem_euclid(p);
        let fragment = |i: i64| (0..p).contains(&i).then_some(i as usize);
        if k <= p - 2
            && let Some(i) = fragment(s - k)
        {
            self.send(ops, u + 1, i, self.reduce(root + 1, k + 1, u + 1));
        }
        if k >= 1
            && let Some(i) = fragment(s - (k - 1))
        {
            self.recv(ops, u - 1, i, self.reduce(root + 1, k, u));
            if k == p - 1 {
                ops.push(Op::Finalize { span: self.span(i) });
            }
        }
    }

    /// A pipelined chain `root -> root + 1 -> ... -> root - 1`.
    fn chain_broadcast(&self, u: i64, root: i64, s: i64, ops: &mut Ops) {
        let p = self.p;
        let k = (u - root).rem_euclid(p);
        let fragment = |i: i64| (0..p).contains(&i).then_some(i as usize);
        if k <= p - 2
            && let Some(i) = fragment(s - k)
        {
            self.send(ops, u + 1, i, Kind::Copy);
        }
        if k >= 1
            && let Some(i) = fragment(s - (k - 1))
        {
            self.recv(ops, u - 1, i, Kind::Copy);
        }
    }
}
