//! The summation tree of [`Order::Deterministic`], seen from one rank.
//!
//! `tessera-core` defines the tree (module docs of
//! [`tessera_core::collective`], "The deterministic order") and its
//! in-memory executor keeps every node in one table; its `SumTree` is
//! crate-private. A rank of a distributed run needs the same three
//! questions answered (which complete subtrees a message carries, which
//! nodes a receiver can now add, and in which order), so this is the same
//! tree, written again over the public [`Ranks`]. The tests compare every
//! algorithm's result with the core executor bit for bit, which is what
//! keeps the two in step.
//!
//! [`Order::Deterministic`]: tessera_core::collective::Order::Deterministic

use tessera_core::collective::Ranks;

/// The tree over `leaves` contributions: with `big` the largest power of
/// two `<= leaves` and `fold = leaves - big`, leaves `2i`, `2i + 1` for
/// `i < fold` are added first; the `big` survivors (the pairs, then the
/// single leaves) form a complete binary tree.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SumTree {
    leaves: usize,
    fold: usize,
    levels: u32,
}

/// A node: leaf `j` among the folded ones, or the survivors
/// `k << h .. (k + 1) << h` (with `h == 0`, `k >= fold`: leaf `k + fold`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Node {
    Folded(usize),
    Group { h: u32, k: usize },
}

impl SumTree {
    pub(crate) fn new(leaves: usize) -> Self {
        debug_assert!(leaves >= 1);
        let levels = usize::BITS - 1 - leaves.leading_zeros();
        Self {
            leaves,
            fold: leaves - (1 << levels),
            levels,
        }
    }

    /// The number of contributions.
    pub(crate) const fn leaves(&self) -> usize {
        self.leaves
    }

    pub(crate) const fn root(&self) -> Node {
        Node::Group {
            h: self.levels,
            k: 0,
        }
    }

    fn first_leaf(&self, q: usize) -> usize {
        if q < self.fold { 2 * q } else { q + self.fold }
    }

    /// The leaves `a..b` under `node`.
    fn range(&self, node: Node) -> (usize, usize) {
        match node {
            Node::Folded(j) => (j, j + 1),
            Node::Group { h, k } => (self.first_leaf(k << h), self.first_leaf((k + 1) << h)),
        }
    }

    fn children(&self, node: Node) -> Option<(Node, Node)> {
        match node {
            Node::Folded(_) => None,
            Node::Group { h: 0, k } => {
                (k < self.fold).then_some((Node::Folded(2 * k), Node::Folded(2 * k + 1)))
            }
            Node::Group { h, k } => Some((
                Node::Group { h: h - 1, k: 2 * k },
                Node::Group {
                    h: h - 1,
                    k: 2 * k + 1,
                },
            )),
        }
    }

    /// The contribution a leaf node is.
    pub(crate) fn leaf(&self, node: Node) -> Option<usize> {
        match node {
            Node::Folded(j) => Some(j),
            Node::Group { h: 0, k } if k >= self.fold => Some(k + self.fold),
            Node::Group { .. } => None,
        }
    }

    /// Every maximal node whose leaves are all in `set`, left to right:
    /// the partial sums a message covering `set` carries.
    pub(crate) fn frontier(&self, set: Ranks, f: &mut impl FnMut(Node)) {
        self.frontier_at(self.root(), set, f);
    }

    fn frontier_at(&self, node: Node, set: Ranks, f: &mut impl FnMut(Node)) {
        let (a, b) = self.range(node);
        if covers(set, a, b, self.leaves) {
            f(node);
        } else if meets(set, a, b, self.leaves)
            && let Some((left, right)) = self.children(node)
        {
            self.frontier_at(left, set, f);
            self.frontier_at(right, set, f);
        }
    }

    /// `f(node, left, right)`, children before parents, for every internal
    /// node whose leaves are all in `held` or `incoming` but that lies in
    /// neither: the additions a receiver makes.
    pub(crate) fn merges(
        &self,
        held: Ranks,
        incoming: Ranks,
        f: &mut impl FnMut(Node, Node, Node),
    ) {
        self.merges_at(self.root(), held, incoming, f);
    }

    fn merges_at(
        &self,
        node: Node,
        held: Ranks,
        incoming: Ranks,
        f: &mut impl FnMut(Node, Node, Node),
    ) -> bool {
        let (a, b) = self.range(node);
        let p = self.leaves;
        if covers(held, a, b, p) || covers(incoming, a, b, p) {
            return true;
        }
        if !meets(held, a, b, p) && !meets(incoming, a, b, p) {
            return false;
        }
        let Some((left, right)) = self.children(node) else {
            return false;
        };
        let l = self.merges_at(left, held, incoming, f);
        let r = self.merges_at(right, held, incoming, f);
        if l && r {
            f(node, left, right);
        }
        l && r
    }
}

/// Whether all of the ranks `a..b` (no wrap) are in `set`.
fn covers(set: Ranks, a: usize, b: usize, size: usize) -> bool {
    if set.len >= size {
        return true;
    }
    (a + size - set.start % size) % size + (b - a) <= set.len
}

/// Whether any of the ranks `a..b` (no wrap) is in `set`.
fn meets(set: Ranks, a: usize, b: usize, size: usize) -> bool {
    if set.len == 0 {
        return false;
    }
    set.contains(a, size) || (set.start % size + size - a) % size < b - a
}

/// The union of two disjoint, adjacent sets (one ends where the other
/// starts), as the schedules' `Kind::Reduce` guarantees.
pub(crate) fn union(a: Ranks, b: Ranks, size: usize) -> Ranks {
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
    use super::*;

    /// Evaluates the tree as the core documents it, on integer-valued
    /// leaves where the sum is exact, and on the order of additions.
    #[test]
    fn frontier_of_everything_is_the_root_and_leaves_are_ranks() {
        for p in 1..=17 {
            let t = SumTree::new(p);
            let mut all = Vec::new();
            t.frontier(Ranks::new(0, p), &mut |n| all.push(n));
            assert_eq!(all, [t.root()]);
            let mut leaves = Vec::new();
            for r in 0..p {
                let mut one = Vec::new();
                t.frontier(Ranks::one(r), &mut |n| one.push(n));
                assert_eq!(one.len(), 1);
                leaves.push(t.leaf(one[0]).unwrap());
            }
            assert_eq!(leaves, (0..p).collect::<Vec<_>>());
        }
    }

    #[test]
    fn merging_adjacent_sets_completes_the_union_frontier() {
        for p in 2..=13 {
            let t = SumTree::new(p);
            for start in 0..p {
                for a in 1..p {
                    let held = Ranks::new(start, a);
                    let incoming = Ranks::new((start + a) % p, 1);
                    let u = union(held, incoming, p);
                    assert_eq!(u.len, a + 1);
                    // Nodes known: both frontiers plus the merges.
                    let mut known = Vec::new();
                    t.frontier(held, &mut |n| known.push(n));
                    t.frontier(incoming, &mut |n| known.push(n));
                    t.merges(held, incoming, &mut |n, l, r| {
                        assert!(known.contains(&l) && known.contains(&r));
                        known.push(n);
                    });
                    t.frontier(u, &mut |n| assert!(known.contains(&n)));
                }
            }
        }
    }
}
