//! The fixed summation tree of [`Order::Deterministic`](super::Order) and
//! [`tree_sum`], which sums a rank's own contributions in the same order.

use crate::fp::Element;

use super::span::Ranks;

/// The summation tree over `leaves` contributions (see the
/// [module docs](super#the-deterministic-order)): with `big` the largest
/// power of two `<= leaves` and `fold = leaves - big`, leaves `2i` and
/// `2i + 1` for `i < fold` are added first; the `fold` pairs and the
/// remaining single leaves, in order, are the `big` "survivors", and a
/// complete binary tree over the survivors adds neighbours, then
/// neighbouring pairs, and so on.
///
/// Public so that a transport running [`Order::Deterministic`] over its own
/// messages (as `tessera-collectives` does) walks the same tree.
///
/// [`Order::Deterministic`]: super::Order::Deterministic
#[derive(Clone, Copy, Debug)]
pub struct SumTree {
    leaves: usize,
    fold: usize,
    levels: u32,
}

/// A node of a [`SumTree`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Node {
    /// Leaf `j` among the folded ones (`j < 2 * fold`).
    Folded(usize),
    /// The survivors `k << h .. (k + 1) << h`; with `h == 0` and
    /// `k >= fold`, the single leaf `k + fold`.
    Group {
        /// The height above the survivors.
        h: u32,
        /// The index among the nodes of that height.
        k: usize,
    },
}

impl SumTree {
    /// The tree over `leaves >= 1` contributions.
    ///
    /// ```
    /// use tessera_core::collective::SumTree;
    ///
    /// // ((c0 + c1) + c2) + (c3 + c4)
    /// let tree = SumTree::new(5);
    /// assert_eq!(tree.range(tree.root()), (0, 5));
    /// ```
    #[must_use]
    pub fn new(leaves: usize) -> Self {
        debug_assert!(leaves >= 1);
        let levels = usize::BITS - 1 - leaves.leading_zeros();
        Self {
            leaves,
            fold: leaves - (1 << levels),
            levels,
        }
    }

    /// The number of leaves (contributions).
    ///
    /// ```
    /// use tessera_core::collective::SumTree;
    ///
    /// assert_eq!(SumTree::new(6).leaves(), 6);
    /// ```
    #[must_use]
    pub const fn leaves(&self) -> usize {
        self.leaves
    }

    /// The root, whose sum is the total.
    ///
    /// ```
    /// use tessera_core::collective::{Node, SumTree};
    ///
    /// assert_eq!(SumTree::new(5).root(), Node::Group { h: 2, k: 0 });
    /// ```
    #[must_use]
    pub fn root(&self) -> Node {
        Node::Group {
            h: self.levels,
            k: 0,
        }
    }

    /// The first leaf of survivor `q` (`q` up to the survivor count).
    fn first_leaf(&self, q: usize) -> usize {
        if q < self.fold { 2 * q } else { q + self.fold }
    }

    /// The leaves `a..b` under `node`.
    ///
    /// ```
    /// use tessera_core::collective::{Node, SumTree};
    ///
    /// let tree = SumTree::new(5);
    /// // The left half: the folded pair (c0 + c1), then c2.
    /// assert_eq!(tree.range(Node::Group { h: 1, k: 0 }), (0, 3));
    /// ```
    #[must_use]
    pub fn range(&self, node: Node) -> (usize, usize) {
        match node {
            Node::Folded(j) => (j, j + 1),
            Node::Group { h, k } => (self.first_leaf(k << h), self.first_leaf((k + 1) << h)),
        }
    }

    /// The two children of an internal node, `None` for a leaf.
    ///
    /// ```
    /// use tessera_core::collective::{Node, SumTree};
    ///
    /// let tree = SumTree::new(5);
    /// let (left, right) = tree.children(tree.root()).unwrap();
    /// assert_eq!((tree.range(left), tree.range(right)), ((0, 3), (3, 5)));
    /// assert_eq!(tree.children(Node::Folded(0)), None);
    /// ```
    #[must_use]
    pub fn children(&self, node: Node) -> Option<(Node, Node)> {
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

    /// The leaf index of a leaf node.
    ///
    /// ```
    /// use tessera_core::collective::{Node, SumTree};
    ///
    /// let tree = SumTree::new(5);
    /// assert_eq!(tree.leaf(Node::Folded(1)), Some(1));
    /// assert_eq!(tree.leaf(Node::Group { h: 0, k: 1 }), Some(2)); // c2, not folded
    /// assert_eq!(tree.leaf(tree.root()), None);
    /// ```
    #[must_use]
    pub fn leaf(&self, node: Node) -> Option<usize> {
        match node {
            Node::Folded(j) => Some(j),
            Node::Group { h: 0, k } if k >= self.fold => Some(k + self.fold),
            Node::Group { .. } => None,
        }
    }

    /// The node of leaf `j` (contribution `j`).
    ///
    /// ```
    /// use tessera_core::collective::{Node, SumTree};
    ///
    /// let tree = SumTree::new(3); // (c0 + c1) + c2
    /// assert_eq!(tree.leaf_node(1), Node::Folded(1));
    /// assert_eq!(tree.leaf(tree.leaf_node(2)), Some(2));
    /// ```
    ///
    /// # Panics
    /// If `j` is not a leaf.
    #[must_use]
    pub fn leaf_node(&self, j: usize) -> Node {
        assert!(j < self.leaves, "leaf {j} of {}", self.leaves);
        if j < 2 * self.fold {
            Node::Folded(j)
        } else {
            Node::Group {
                h: 0,
                k: j - self.fold,
            }
        }
    }

    /// The row of an internal node in a table of `leaves - 1` rows: the
    /// last leaf of its left child (unique, below `leaves - 1`).
    ///
    /// ```
    /// use tessera_core::collective::SumTree;
    ///
    /// let tree = SumTree::new(5);
    /// assert_eq!(tree.row(tree.root()), 2); // the last leaf of its left child
    /// ```
    #[must_use]
    pub fn row(&self, node: Node) -> usize {
        let (_, right) = self.children(node).expect("row of a leaf");
        self.range(right).0 - 1
    }

    /// Calls `f` with every maximal node whose leaves are all in `set`
    /// (the partial sums a message covering `set` carries), left to right.
    ///
    /// ```
    /// use tessera_core::collective::{Node, Ranks, SumTree};
    ///
    /// let tree = SumTree::new(5);
    /// let mut nodes = Vec::new();
    /// tree.frontier(Ranks::new(0, 3), &mut |n| nodes.push(n));
    /// assert_eq!(nodes, [Node::Group { h: 1, k: 0 }]); // one sum covers c0..c2
    /// ```
    pub fn frontier(&self, set: Ranks, f: &mut impl FnMut(Node)) {
        self.frontier_at(self.root(), set, f);
    }

    fn frontier_at(&self, node: Node, set: Ranks, f: &mut impl FnMut(Node)) {
        let (a, b) = self.range(node);
        if set.covers(a, b, self.leaves) {
            f(node);
        } else if set.meets(a, b, self.leaves)
            && let Some((left, right)) = self.children(node)
        {
            self.frontier_at(left, set, f);
            self.frontier_at(right, set, f);
        }
    }

    /// Calls `f(node, left, right)`, children before parents, for every
    /// internal node whose leaves are all in `held` or `incoming` but that
    /// lies in neither (the additions a receiver holding `held` does when
    /// partial sums covering `incoming` arrive).
    ///
    /// ```
    /// use tessera_core::collective::{Node, Ranks, SumTree};
    ///
    /// let tree = SumTree::new(5);
    /// let mut adds = Vec::new();
    /// tree.merges(Ranks::new(0, 2), Ranks::one(2), &mut |node, _, _| adds.push(node));
    /// assert_eq!(adds, [Node::Group { h: 1, k: 0 }]); // (c0 + c1) + c2
    /// ```
    pub fn merges(&self, held: Ranks, incoming: Ranks, f: &mut impl FnMut(Node, Node, Node)) {
        self.merges_at(self.root(), held, incoming, f);
    }

    /// Whether all of `node`'s leaves are in `held` or `incoming`.
    fn merges_at(
        &self,
        node: Node,
        held: Ranks,
        incoming: Ranks,
        f: &mut impl FnMut(Node, Node, Node),
    ) -> bool {
        let (a, b) = self.range(node);
        let p = self.leaves;
        if held.covers(a, b, p) || incoming.covers(a, b, p) {
            return true;
        }
        if !held.meets(a, b, p) && !incoming.meets(a, b, p) {
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

    /// Element `i` of the tree's sum of `leaves` (the recursive definition).
    fn eval<T: Element>(&self, node: Node, leaves: &[&[T]], i: usize) -> f32 {
        match self.children(node) {
            None => leaves[self.leaf(node).expect("leaf")][i].load(),
            Some((left, right)) => self.eval(left, leaves, i) + self.eval(right, leaves, i),
        }
    }
}

/// Sums `contributions` element by element in the deterministic order's
/// tree over their index (see the [module docs](super#the-deterministic-order)),
/// in f32, NaN written as `f32::NAN`; `out` is `+0.0` for no contributions.
///
/// This is how a rank that holds several contributions (micro-batches,
/// say) makes its input to a collective in [`Order::Deterministic`]:
/// if rank `r` of `p` holds contributions `r * m .. (r + 1) * m` of
/// `C = m * p` with `m` a power of two, and passes `tree_sum` of them, the
/// collective's Sum is bitwise `tree_sum` of all `C` contributions, for any
/// `p` (power of two or not) and any algorithm.
///
/// ```
/// use tessera_core::collective::tree_sum;
///
/// let c = [[1.0f32], [1.0e8], [-1.0e8], [1.0]];
/// let refs: Vec<&[f32]> = c.iter().map(|c| &c[..]).collect();
/// let mut out = [0.0f32];
/// tree_sum(&refs, &mut out);
/// // ((1 + 1e8) + (-1e8 + 1)) in f32.
/// assert_eq!(out[0], (1.0f32 + 1.0e8) + (-1.0e8 + 1.0));
/// ```
///
/// [`Order::Deterministic`]: super::Order::Deterministic
///
/// # Panics
/// If a contribution's length differs from `out`'s.
pub fn tree_sum<T: Element>(contributions: &[&[T]], out: &mut [f32]) {
    for (c, x) in contributions.iter().enumerate() {
        assert_eq!(
            x.len(),
            out.len(),
            "tree_sum: contribution {c} has {} elements, out {}",
            x.len(),
            out.len()
        );
    }
    if contributions.is_empty() {
        out.fill(0.0);
        return;
    }
    let tree = SumTree::new(contributions.len());
    for (i, o) in out.iter_mut().enumerate() {
        let x = tree.eval(tree.root(), contributions, i);
        *o = if x.is_nan() { f32::NAN } else { x };
    }
}
