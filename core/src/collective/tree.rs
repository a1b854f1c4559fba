//! [`Algorithm::DoubleBinaryTree`]: NCCL's two complementary binary trees.
//!
//! Each tree is built over "local" indices `u` (NCCL's `ncclGetBtree`,
//! rooted at `u = 0`) and mapped to ranks: `v = r - root (mod p)` relabels
//! the ranks so the collective's root is tree 0's root (0 for the unrooted
//! collectives); tree 0 takes `u = v`, tree 1 the mirror `u = p - 1 - v`
//! (`p` even) or the shift `u = v - 1` (`p` odd), as NCCL's `ncclGetDtree`.
//! Tree `t` carries half `t` of every fragment; chunk `i` is half `t` of
//! fragment `i`.
//!
//! [`Algorithm::DoubleBinaryTree`]: super::Algorithm::DoubleBinaryTree

use super::message::{Kind, Op, Ops};
use super::schedule::{Collective, CollectiveSchedule};
use super::span::{Ranks, Span};

pub(super) fn steps(s: &CollectiveSchedule) -> usize {
    let p = s.size();
    let (t0, t1) = (Tree::new(s, 0), Tree::new(s, 1));
    let (h0, h1) = (t0.height(0), t1.height(0));
    match s.collective() {
        Collective::AllReduce | Collective::AllGather => p - 1 + 2 * h0.max(h1),
        Collective::ReduceScatter => {
            // Chunk i, finished at step i + H - 1, reaches rank i at depth d
            // at step i + H + d - 1.
            let last = |t: &Tree<'_>, h: usize| {
                (0..p)
                    .map(|i| i + h + t.depth(t.local(i)))
                    .max()
                    .unwrap_or(0)
            };
            last(&t0, h0).max(last(&t1, h1))
        }
        Collective::Reduce { .. } => p + (h0 - 1).max(h1),
        Collective::Broadcast { root } => {
            // Tree 1's last chunk reaches depth d at step p - 1 + d; the
            // root, which needs nothing, may be its deepest node.
            let skip = t1.local(root);
            let d1 = (0..p).filter(|&u| u != skip).map(|u| t1.depth(u)).max();
            p + (h0 - 1).max(d1.unwrap_or(0))
        }
    }
}

pub(super) fn ops(s: &CollectiveSchedule, rank: usize, step: usize, ops: &mut Ops) {
    for t in 0..2 {
        Tree::new(s, t).ops(rank, step, ops);
    }
}

/// One of the two trees.
struct Tree<'a> {
    s: &'a CollectiveSchedule,
    p: usize,
    /// 0 or 1.
    t: usize,
    /// The rank at `v = 0`.
    base: usize,
}

impl<'a> Tree<'a> {
    fn new(s: &'a CollectiveSchedule, t: usize) -> Self {
        let base = match s.collective() {
            Collective::Reduce { root } | Collective::Broadcast { root } => root,
            _ => 0,
        };
        Self {
            s,
            p: s.size(),
            t,
            base,
        }
    }

    /// The rank of local index `u`.
    fn rank(&self, u: usize) -> usize {
        let p = self.p;
        let v = match self.t {
            0 => u,
            _ if p.is_multiple_of(2) => p - 1 - u,
            _ => (u + 1) % p,
        };
        (v + self.base) % p
    }

    /// The local index of `rank`.
    fn local(&self, rank: usize) -> usize {
        let p = self.p;
        let v = (rank + p - self.base) % p;
        match self.t {
            0 => v,
            _ if p.is_multiple_of(2) => p - 1 - v,
            _ => (v + p - 1) % p,
        }
    }

    /// The ranks of local indices `a..=b`.
    fn ranks(&self, (a, b): (usize, usize)) -> Ranks {
        let first = if self.t == 1 && self.p.is_multiple_of(2) {
            self.rank(b) // the mirror reverses the order
        } else {
            self.rank(a)
        };
        Ranks::new(first, b - a + 1)
    }

    /// NCCL's `ncclGetBtree`: the parent and the children (lower, higher)
    /// of local index `u`.
    fn links(&self, u: usize) -> (Option<usize>, [Option<usize>; 2]) {
        let p = self.p;
        let mut bit = 1;
        while bit < p && bit & u == 0 {
            bit <<= 1;
        }
        if u == 0 {
            return (None, [None, (p > 1).then_some(bit >> 1)]);
        }
        let mut up = (u ^ bit) | (bit << 1);
        if up >= p {
            up = u ^ bit;
        }
        let mut low = bit >> 1;
        let down0 = (low != 0).then(|| u - low);
        let mut down1 = (low != 0).then(|| u + low);
        while down1.is_some_and(|d| d >= p) {
            low >>= 1;
            down1 = (low != 0).then(|| u + low);
        }
        (Some(up), [down0, down1])
    }

    fn parent(&self, u: usize) -> Option<usize> {
        self.links(u).0
    }

    fn children(&self, u: usize) -> impl Iterator<Item = usize> + use<> {
        self.links(u).1.into_iter().flatten()
    }

    /// Longest path down to a leaf (the root's is the tree's depth):
    /// `ceil(lg p)` for the root, `lg` of the lowest set bit of `u`
    /// otherwise (the left spine below a node is always complete). Closed
    /// forms of `height_by_search`, checked by the unit tests.
    fn height(&self, u: usize) -> usize {
        if u == 0 {
            (usize::BITS - (self.p - 1).leading_zeros()) as usize
        } else {
            u.trailing_zeros() as usize
        }
    }

    #[cfg(test)]
    fn height_by_search(&self, u: usize) -> usize {
        self.children(u)
            .map(|c| 1 + self.height_by_search(c))
            .max()
            .unwrap_or(0)
    }

    fn depth(&self, mut u: usize) -> usize {
        let mut d = 0;
        while let Some(up) = self.parent(u) {
            u = up;
            d += 1;
        }
        d
    }

    /// The local indices `a..=b` of `u`'s subtree (an interval: the tree
    /// is in order): everything for the root, else `u - b + 1 ..= u + b - 1`
    /// cut at `p - 1`, `b` the lowest set bit of `u`. A closed form of
    /// `subtree_by_search`, checked by the unit tests.
    fn subtree(&self, u: usize) -> (usize, usize) {
        if u == 0 {
            return (0, self.p - 1);
        }
        let b = 1 << u.trailing_zeros();
        (u + 1 - b, (u + b - 1).min(self.p - 1))
    }

    #[cfg(test)]
    fn subtree_by_search(&self, u: usize) -> (usize, usize) {
        self.children(u).fold((u, u), |(a, b), c| {
            let (ca, cb) = self.subtree_by_search(c);
            (a.min(ca), b.max(cb))
        })
    }

    fn in_subtree(&self, u: usize, x: usize) -> bool {
        let (a, b) = self.subtree(u);
        (a..=b).contains(&x)
    }

    /// What `u` holds of a chunk when `child`'s partial arrives: itself
    /// and the subtrees of the children that arrived before (lower height,
    /// or the same height and listed first).
    fn held_before(&self, u: usize, child: usize) -> (usize, usize) {
        let key = |c: usize| (self.height(c), c);
        self.children(u)
            .filter(|&c| key(c) < key(child))
            .fold((u, u), |(a, b), c| {
                let (ca, cb) = self.subtree(c);
                (a.min(ca), b.max(cb))
            })
    }

    /// Chunk `i` (half `t` of fragment `i`), if `i` is a chunk.
    fn chunk(&self, i: Option<usize>) -> Option<Span> {
        i.filter(|&i| i < self.p)
            .map(|i| self.s.half_span(i, self.t))
    }

    fn send(&self, ops: &mut Ops, to: usize, span: Option<Span>, kind: Kind) {
        if let Some(span) = span {
            ops.push(Op::Send {
                to: self.rank(to),
                span,
                kind,
            });
        }
    }

    fn recv(&self, ops: &mut Ops, from: usize, span: Option<Span>, kind: Kind) {
        if let Some(span) = span {
            ops.push(Op::Recv {
                from: self.rank(from),
                span,
                kind,
            });
        }
    }

    fn ops(&self, rank: usize, step: usize, ops: &mut Ops) {
        let u = self.local(rank);
        let h = self.height(0);
        match self.s.collective() {
            Collective::AllReduce => {
                self.reduce_up(u, step, ops);
                self.broadcast_down(u, step, h, ops, |_| true);
            }
            Collective::ReduceScatter => {
                self.reduce_up(u, step, ops);
                // Chunk i goes down only towards rank i.
                self.broadcast_down(u, step, h, ops, |(tree, c, i)| {
                    tree.in_subtree(c, tree.local(i))
                });
            }
            Collective::Reduce { root } => {
                self.reduce_up(u, step, ops);
                if self.t == 1 {
                    // Tree 1's root sends its finished chunks to the root.
                    let root_local = self.local(root);
                    let i = step.checked_sub(h);
                    if u == 0 {
                        self.send(ops, root_local, self.chunk(i), Kind::Copy);
                    } else if u == root_local {
                        self.recv(ops, 0, self.chunk(i), Kind::Copy);
                    }
                }
            }
            Collective::Broadcast { root } => self.broadcast(u, self.local(root), step, ops),
            Collective::AllGather => self.all_gather(u, step, h, ops),
        }
    }

    /// Chunk `i` leaves a node of height `h` for its parent at step `i + h`
    /// (after all its children's partials, sent at `i + h(child)`); the
    /// root has all of it at step `i + H - 1` and finalizes it.
    fn reduce_up(&self, u: usize, step: usize, ops: &mut Ops) {
        let sub = self.subtree(u);
        if let Some(up) = self.parent(u) {
            let i = step.checked_sub(self.height(u));
            let kind = Kind::reduce(self.ranks(sub), self.ranks(self.held_before(up, u)));
            self.send(ops, up, self.chunk(i), kind);
        } else if let Some(span) = self.chunk((step + 1).checked_sub(self.height(u))) {
            ops.push(Op::Finalize { span });
        }
        for c in self.children(u) {
            let i = step.checked_sub(self.height(c));
            let kind = Kind::reduce(
                self.ranks(self.subtree(c)),
                self.ranks(self.held_before(u, c)),
            );
            self.recv(ops, c, self.chunk(i), kind);
        }
    }

    /// Finished chunk `i` leaves the root at step `i + start` and a node at
    /// depth `d` at step `i + start + d`, to the children for which
    /// `wanted((tree, child, i))` holds.
    fn broadcast_down(
        &self,
        u: usize,
        step: usize,
        start: usize,
        ops: &mut Ops,
        wanted: impl Fn((&Self, usize, usize)) -> bool,
    ) {
        let d = self.depth(u);
        if let Some(up) = self.parent(u)
            && let Some(i) = (step + 1).checked_sub(start + d)
            && wanted((self, u, i))
        {
            self.recv(ops, up, self.chunk(Some(i)), Kind::Copy);
        }
        if let Some(i) = step.checked_sub(start + d) {
            for c in self.children(u) {
                if wanted((self, c, i)) {
                    self.send(ops, c, self.chunk(Some(i)), Kind::Copy);
                }
            }
        }
    }

    /// Tree 0 starts at the root at step 0; tree 1's chunks first go from
    /// the root to tree 1's root (step `i`), which starts at step 1. The
    /// root, a node of tree 1 too, neither receives nor needs its chunks.
    fn broadcast(&self, u: usize, root: usize, step: usize, ops: &mut Ops) {
        if self.t == 0 {
            self.broadcast_down(u, step, 0, ops, |_| true);
            return;
        }
        if u == root {
            self.send(ops, 0, self.chunk(Some(step)), Kind::Copy);
        } else if u == 0 {
            self.recv(ops, root, self.chunk(Some(step)), Kind::Copy);
        }
        self.broadcast_down(u, step, 1, ops, |(tree, c, _)| {
            tree.rank(c) != tree.rank(root)
        });
    }

    /// Chunk `i` climbs from rank `i` to the root, leaving depth `d` at
    /// step `G - i - d` (`G = p - 1 + depth`), then descends from every
    /// node that has it to every child whose subtree lacks it, leaving
    /// depth `d` at step `G - i + d`: each edge carries each chunk once.
    fn all_gather(&self, u: usize, step: usize, depth: usize, ops: &mut Ops) {
        let g = self.p - 1 + depth;
        let d = self.depth(u);
        let at = |x: Option<usize>| x.filter(|&i| i < self.p);
        if let Some(up) = self.parent(u) {
            if let Some(i) = at((g - d).checked_sub(step))
                && self.in_subtree(u, self.local(i))
            {
                self.send(ops, up, self.chunk(Some(i)), Kind::Copy);
            }
            if let Some(i) = at((g + d - 1).checked_sub(step))
                && !self.in_subtree(u, self.local(i))
            {
                self.recv(ops, up, self.chunk(Some(i)), Kind::Copy);
            }
        }
        for c in self.children(u) {
            if let Some(i) = at((g - d - 1).checked_sub(step))
                && self.in_subtree(c, self.local(i))
            {
                self.recv(ops, c, self.chunk(Some(i)), Kind::Copy);
            }
            if let Some(i) = at((g + d).checked_sub(step))
                && !self.in_subtree(c, self.local(i))
            {
                self.send(ops, c, self.chunk(Some(i)), Kind::Copy);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{Algorithm, Collective, CollectiveSchedule};
    use super::Tree;

    #[test]
    fn closed_forms_match_the_recursive_tree() {
        for p in 2..=600 {
            let s =
                CollectiveSchedule::new(Algorithm::DoubleBinaryTree, Collective::AllReduce, p, p)
                    .unwrap();
            for t in 0..2 {
                let tree = Tree::new(&s, t);
                for u in 0..p {
                    assert_eq!(tree.height(u), tree.height_by_search(u), "p={p} u={u}");
                    assert_eq!(tree.subtree(u), tree.subtree_by_search(u), "p={p} u={u}");
                }
            }
        }
    }
}
