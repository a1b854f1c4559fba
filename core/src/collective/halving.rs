//! [`Algorithm::HalvingDoubling`]: Rabenseifner's recursive halving and
//! doubling, with the standard fold for `p` not a power of two.
//!
//! With `P` the largest power of two `<= p` and `r = p - P`, ranks `2i`
//! and `2i + 1` (`i < r`) fold into survivor `i` (rank `2i + 1`), and rank
//! `j >= 2r` is survivor `j - r`. Survivor `q` owns the fragments of the
//! ranks it stands for: `2q, 2q + 1` or `q + r`.
//!
//! [`Algorithm::HalvingDoubling`]: super::Algorithm::HalvingDoubling

use super::message::{Kind, Op, Ops};
use super::schedule::{Collective, CollectiveSchedule};
use super::span::{Ranks, Span};

pub(super) fn steps(s: &CollectiveSchedule) -> usize {
    let hd = Hd::new(s);
    let fold = 2 * hd.folds();
    let logp = (usize::BITS - (hd.p - 1).leading_zeros()) as usize;
    match s.collective() {
        Collective::ReduceScatter | Collective::AllGather => fold + hd.levels,
        Collective::AllReduce => fold + 2 * hd.levels,
        Collective::Reduce { .. } | Collective::Broadcast { .. } => fold + hd.levels + logp,
    }
}

pub(super) fn ops(s: &CollectiveSchedule, rank: usize, step: usize, ops: &mut Ops) {
    let hd = Hd::new(s);
    let rs = hd.folds() * 2 + hd.levels;
    let logp = (usize::BITS - (hd.p - 1).leading_zeros()) as usize;
    match s.collective() {
        Collective::ReduceScatter => hd.reduce_scatter(rank, step, ops),
        Collective::AllGather => hd.all_gather(rank, step, ops),
        Collective::AllReduce => hd.all_reduce(rank, step, ops),
        Collective::Reduce { .. } if step < rs => hd.reduce_scatter(rank, step, ops),
        Collective::Reduce { root } => hd.gather(rank, root, step - rs, ops),
        Collective::Broadcast { root } if step < logp => hd.scatter(rank, root, step, logp, ops),
        Collective::Broadcast { .. } => hd.all_gather(rank, step - logp, ops),
    }
}

struct Hd<'a> {
    s: &'a CollectiveSchedule,
    p: usize,
    /// The survivor count `P`, a power of two.
    big: usize,
    /// `lg P`.
    levels: usize,
    /// `r = p - P`: folded pairs.
    fold: usize,
    /// The fragment length.
    f: usize,
}

impl<'a> Hd<'a> {
    fn new(s: &'a CollectiveSchedule) -> Self {
        let p = s.size();
        let levels = (usize::BITS - 1 - p.leading_zeros()) as usize;
        Self {
            s,
            p,
            big: 1 << levels,
            levels,
            fold: p - (1 << levels),
            f: s.fragment_len(),
        }
    }

    /// 1 if there is a fold (and unfold) step, else 0.
    fn folds(&self) -> usize {
        usize::from(self.fold > 0)
    }

    /// The survivor number of `rank`, `None` for a folded (even) rank.
    fn survivor(&self, rank: usize) -> Option<usize> {
        if rank >= 2 * self.fold {
            Some(rank - self.fold)
        } else {
            (rank % 2 == 1).then_some(rank / 2)
        }
    }

    /// The rank of survivor `q`.
    fn rank(&self, q: usize) -> usize {
        if q < self.fold {
            2 * q + 1
        } else {
            q + self.fold
        }
    }

    /// The first rank (and fragment) survivor `q` stands for; `first(P) = p`.
    fn first(&self, q: usize) -> usize {
        if q < self.fold { 2 * q } else { q + self.fold }
    }

    /// The ranks survivors `g..g + n` stand for.
    fn ranks(&self, g: usize, n: usize) -> Ranks {
        Ranks::new(self.first(g), self.first(g + n) - self.first(g))
    }

    /// The fragments of survivors `g..g + n` (contiguous).
    fn span(&self, g: usize, n: usize) -> Span {
        let a = self.first(g);
        Span::new(a * self.f, (self.first(g + n) - a) * self.f)
    }

    /// The fragments of the survivors `t ≡ a (mod m)`: two strided runs,
    /// the folded survivors' (two fragments each) and the others'.
    fn residue_spans(&self, a: usize, m: usize) -> [Span; 2] {
        let (f, r) = (self.f, self.fold);
        let pairs = if a < r { (r - a).div_ceil(m) } else { 0 };
        let t0 = a + m * pairs;
        let singles = if t0 < self.big {
            (self.big - t0).div_ceil(m)
        } else {
            0
        };
        [
            Span::strided(2 * a * f, 2 * f, 2 * m * f, pairs),
            Span::strided((t0 + r) * f, f, m * f, singles),
        ]
    }

    /// The whole padded buffer.
    fn everything(&self) -> Span {
        Span::new(0, self.s.padded_len())
    }

    /// Step 0 when `p` is not a power of two: rank `2i` sends its whole
    /// buffer to `2i + 1`, which adds it.
    fn fold_reduce(&self, rank: usize, ops: &mut Ops) {
        if rank >= 2 * self.fold {
            return;
        }
        let even = rank & !1;
        let kind = Kind::reduce(Ranks::one(even), Ranks::one(even + 1));
        let span = self.everything();
        if rank == even {
            ops.push(Op::Send {
                to: even + 1,
                span,
                kind,
            });
        } else {
            ops.push(Op::Recv {
                from: even,
                span,
                kind,
            });
        }
    }

    /// A copy between the two ranks of a folded pair: `span_even` is what
    /// the even rank receives or sends.
    fn fold_copy(&self, rank: usize, to_even: bool, span: impl Fn(usize) -> Span, ops: &mut Ops) {
        if rank >= 2 * self.fold {
            return;
        }
        let even = rank & !1;
        let span = span(even);
        let (from, to) = if to_even {
            (even + 1, even)
        } else {
            (even, even + 1)
        };
        if rank == from {
            ops.push(Op::Send {
                to,
                span,
                kind: Kind::Copy,
            });
        } else {
            ops.push(Op::Recv {
                from,
                span,
                kind: Kind::Copy,
            });
        }
    }

    /// Survivor step `k` of reduce-scatter: exchange with the survivor at
    /// distance `2^k`, keeping the fragments of the survivors that agree
    /// with this one in bits `0..=k`; finalize own fragments at the last.
    fn halve(&self, rank: usize, k: usize, ops: &mut Ops) {
        let Some(q) = self.survivor(rank) else {
            return;
        };
        let bit = 1 << k;
        let partner = q ^ bit;
        let group = q & !(bit - 1);
        let partner_group = group ^ bit;
        let m = bit << 1;
        let to = self.rank(partner);
        let give = Kind::reduce(self.ranks(group, bit), self.ranks(partner_group, bit));
        for span in self.residue_spans(partner & (m - 1), m) {
            ops.push(Op::Send {
                to,
                span,
                kind: give,
            });
        }
        let take = Kind::reduce(self.ranks(partner_group, bit), self.ranks(group, bit));
        for span in self.residue_spans(q & (m - 1), m) {
            ops.push(Op::Recv {
                from: to,
                span,
                kind: take,
            });
        }
        if k + 1 == self.levels {
            ops.push(Op::Finalize {
                span: self.span(q, 1),
            });
        }
    }

    /// Survivor step `k` of all-gather: exchange the contiguous fragments
    /// of the `2^k` survivors of this one's group with the partner group.
    fn double(&self, rank: usize, k: usize, ops: &mut Ops) {
        let Some(q) = self.survivor(rank) else {
            return;
        };
        let bit = 1 << k;
        let group = q & !(bit - 1);
        let peer = self.rank(q ^ bit);
        ops.push(Op::Send {
            to: peer,
            span: self.span(group, bit),
            kind: Kind::Copy,
        });
        ops.push(Op::Recv {
            from: peer,
            span: self.span(group ^ bit, bit),
            kind: Kind::Copy,
        });
    }

    fn reduce_scatter(&self, rank: usize, step: usize, ops: &mut Ops) {
        let o = self.folds();
        if step < o {
            self.fold_reduce(rank, ops);
        } else if step < o + self.levels {
            self.halve(rank, step - o, ops);
        } else {
            // Unfold: the even rank of a pair gets its fragment.
            self.fold_copy(rank, true, |even| self.s.fragment_span(even), ops);
        }
    }

    fn all_gather(&self, rank: usize, step: usize, ops: &mut Ops) {
        let o = self.folds();
        if step < o {
            self.fold_copy(rank, false, |even| self.s.fragment_span(even), ops);
        } else if step < o + self.levels {
            self.double(rank, step - o, ops);
        } else {
            self.fold_copy(rank, true, |_| self.everything(), ops);
        }
    }

    fn all_reduce(&self, rank: usize, step: usize, ops: &mut Ops) {
        let o = self.folds();
        let k = self.levels;
        if step < o {
            self.fold_reduce(rank, ops);
        } else if step < o + k {
            self.halve(rank, step - o, ops);
        } else if step < o + 2 * k {
            self.double(rank, step - o - k, ops);
        } else {
            self.fold_copy(rank, true, |_| self.everything(), ops);
        }
    }

    /// The fragments of ranks `root + a .. root + b` (mod p): one or two
    /// contiguous runs.
    fn rotated(&self, root: usize, a: usize, b: usize) -> [Span; 2] {
        let (p, f) = (self.p, self.f);
        let first = (root + a) % p;
        let n = b - a;
        if first + n <= p {
            [Span::new(first * f, n * f), Span::EMPTY]
        } else {
            [
                Span::new(first * f, (p - first) * f),
                Span::new(0, (first + n - p) * f),
            ]
        }
    }

    /// Step `g` of a binomial gather to `root` over `v = r - root`: `v`
    /// with lowest set bit `2^g` sends what it has collected,
    /// `v..v + 2^g`, to `v - 2^g`.
    fn gather(&self, rank: usize, root: usize, g: usize, ops: &mut Ops) {
        let p = self.p;
        let v = (rank + p - root) % p;
        let bit = 1 << g;
        let low = v & ((bit << 1) - 1);
        if low == bit {
            for span in self.rotated(root, v, (v + bit).min(p)) {
                ops.push(Op::Send {
                    to: (rank + p - bit) % p,
                    span,
                    kind: Kind::Copy,
                });
            }
        } else if low == 0 && v + bit < p {
            for span in self.rotated(root, v + bit, (v + 2 * bit).min(p)) {
                ops.push(Op::Recv {
                    from: (rank + bit) % p,
                    span,
                    kind: Kind::Copy,
                });
            }
        }
    }

    /// Step `g` of a binomial scatter from `root` over `v = r - root`,
    /// with `m = 2^(logp - 1 - g)`: `v ≡ 0 (mod 2m)` sends `v + m..v + 2m`
    /// to `v + m`.
    fn scatter(&self, rank: usize, root: usize, g: usize, logp: usize, ops: &mut Ops) {
        let p = self.p;
        let v = (rank + p - root) % p;
        let m = 1 << (logp - 1 - g);
        if v.is_multiple_of(2 * m) && v + m < p {
            for span in self.rotated(root, v + m, (v + 2 * m).min(p)) {
                ops.push(Op::Send {
                    to: (rank + m) % p,
                    span,
                    kind: Kind::Copy,
                });
            }
        } else if v % (2 * m) == m {
            for span in self.rotated(root, v, (v + m).min(p)) {
                ops.push(Op::Recv {
                    from: (rank + p - m) % p,
                    span,
                    kind: Kind::Copy,
                });
            }
        }
    }
}
