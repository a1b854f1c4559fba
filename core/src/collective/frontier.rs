//! [`Frontier`]: the partial sums a rank holds for one span in
//! [`Order::Deterministic`](super::Order::Deterministic), and the wire
//! format of the messages that carry them ([`Carries::Frontier`]).
//!
//! [`Carries::Frontier`]: super::Carries::Frontier

use alloc::vec::Vec;

use crate::fp::{Element, Rounding};

use super::combine::combine_into;
use super::error::Error;
use super::op::ReduceOp;
use super::span::Ranks;
use super::sum_tree::{Node, SumTree};

/// The partial sums one rank holds for one span of a reduction in
/// [`Order::Deterministic`](super::Order::Deterministic) on a ring or a
/// binary tree: one vector per maximal complete subtree of the
/// [`SumTree`] that the contributions it has seen fill (its frontier).
///
/// A transport keeps one per span it reduces. For an op that sends with
/// [`Carries::Frontier`](super::Carries::Frontier), it [`pack`]s what it
/// holds (at first its own contribution, [`Frontier::own`]); for one that
/// receives, it [`unpack`]s the body and [`merge`]s it into what it holds;
/// at the span's `Finalize`, the [`total`] is the sum
/// [`execute`](super::execute) stores (after [`ReduceOp::finish`] and
/// rounding), bit for bit.
///
/// ```
/// use tessera_core::collective::{Frontier, ReduceOp, SumTree};
///
/// // Three ranks, two elements: rank 2 receives ranks 0 and 1's sum.
/// let tree = SumTree::new(3);
/// let (a, b, c) = ([1.0f32, 2.0], [10.0f32, 20.0], [100.0f32, 200.0]);
/// let mut ab = Frontier::own(&tree, 0, &a);
/// ab.merge(&tree, ReduceOp::Sum, Frontier::own(&tree, 1, &b));
/// let mut wire = Vec::new();
/// ab.pack::<f32>(&tree, &mut wire);
/// let got = Frontier::unpack::<f32>(&tree, ab.covers(), 2, &wire).unwrap();
/// assert_eq!(got, ab);
/// let mut all = Frontier::own(&tree, 2, &c);
/// all.merge(&tree, ReduceOp::Sum, got);
/// assert_eq!(all.total(&tree), Some(&[111.0f32, 222.0][..]));
/// ```
///
/// [`pack`]: Frontier::pack
/// [`unpack`]: Frontier::unpack
/// [`merge`]: Frontier::merge
/// [`total`]: Frontier::total
#[derive(Clone, Debug, PartialEq)]
pub struct Frontier {
    covers: Ranks,
    len: usize,
    /// The frontier's nodes, left to right, each with `len` values.
    nodes: Vec<(Node, Vec<f32>)>,
}

impl Frontier {
    /// What `rank` holds before it receives anything for the span: its own
    /// contribution `own` (the span's payload, in order), widened to f32.
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, Ranks, SumTree};
    /// use tessera_core::fp::f16;
    ///
    /// let f = Frontier::own(&SumTree::new(4), 3, &[f16::ONE]);
    /// assert_eq!(f.covers(), Ranks::one(3));
    /// assert_eq!(f.len(), 1);
    /// ```
    ///
    /// # Panics
    /// If `rank` is not a leaf of `tree`.
    #[must_use]
    pub fn own<T: Element>(tree: &SumTree, rank: usize, own: &[T]) -> Self {
        Self {
            covers: Ranks::one(rank),
            len: own.len(),
            nodes: alloc::vec![(tree.leaf_node(rank), own.iter().map(|x| x.load()).collect())],
        }
    }

    /// The contributions it covers.
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, ReduceOp, Ranks, SumTree};
    ///
    /// let tree = SumTree::new(5);
    /// let mut f = Frontier::own(&tree, 4, &[1.0f32]);
    /// f.merge(&tree, ReduceOp::Sum, Frontier::own(&tree, 0, &[2.0f32]));
    /// assert_eq!(f.covers(), Ranks::new(4, 2)); // 4, then 0: sets wrap
    /// ```
    #[must_use]
    pub const fn covers(&self) -> Ranks {
        self.covers
    }

    /// The elements of each vector (the span's payload).
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, SumTree};
    ///
    /// assert_eq!(Frontier::own(&SumTree::new(2), 0, &[0.0f32; 5]).len(), 5);
    /// ```
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the vectors are empty.
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, SumTree};
    ///
    /// assert!(Frontier::own::<f32>(&SumTree::new(2), 0, &[]).is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes of a packed frontier covering `covers` with vectors of
    /// `len` elements of `T`: `len` times the sum, over the frontier's
    /// nodes, of `size_of::<T>()` for a single contribution and 4 for a
    /// sum.
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, Ranks, SumTree};
    /// use tessera_core::fp::f16;
    ///
    /// let tree = SumTree::new(8);
    /// // Ranks 1..4: rank 1 alone (2 bytes), ranks 2 and 3 summed (4 bytes).
    /// assert_eq!(Frontier::packed_len::<f16>(&tree, Ranks::new(1, 3), 10), 60);
    /// ```
    #[must_use]
    pub fn packed_len<T: Element>(tree: &SumTree, covers: Ranks, len: usize) -> usize {
        let mut bytes = 0;
        tree.frontier(covers, &mut |node| {
            bytes += len * wire_size::<T>(tree, node)
        });
        bytes
    }

    /// Appends the message that carries it: every node of its frontier,
    /// left to right, a single contribution in `T`'s format and a sum in
    /// f32, in this machine's byte order.
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, SumTree};
    /// use tessera_core::fp::bf16;
    ///
    /// let tree = SumTree::new(3);
    /// let mut wire = Vec::new();
    /// Frontier::own(&tree, 2, &[bf16::ONE]).pack::<bf16>(&tree, &mut wire);
    /// assert_eq!(wire, bf16::ONE.to_bits().to_ne_bytes());
    /// ```
    pub fn pack<T: Element>(&self, tree: &SumTree, out: &mut Vec<u8>) {
        for (node, values) in &self.nodes {
            if tree.leaf(*node).is_some() {
                for &x in values {
                    // Exact: the value was widened from a `T`.
                    out.extend_from_slice(crate::arch::bytes_of(&T::store(
                        x,
                        Rounding::Nearest,
                        0,
                    )));
                }
            } else {
                out.extend_from_slice(bytemuck::cast_slice(values));
            }
        }
    }

    /// Reads a message that [`pack`](Self::pack) wrote for a frontier
    /// covering `covers` with vectors of `len` elements of `T`.
    ///
    /// ```
    /// use tessera_core::collective::{Error, Frontier, Ranks, SumTree};
    ///
    /// let tree = SumTree::new(4);
    /// let f = Frontier::unpack::<f32>(&tree, Ranks::one(1), 1, &7.0f32.to_ne_bytes()).unwrap();
    /// assert_eq!(f, Frontier::own(&tree, 1, &[7.0f32]));
    /// assert_eq!(
    ///     Frontier::unpack::<f32>(&tree, Ranks::one(1), 2, &[0; 4]),
    ///     Err(Error::MessageLength { expected: 8, found: 4 })
    /// );
    /// ```
    ///
    /// # Errors
    /// [`Error::MessageLength`] unless `bytes` has
    /// [`packed_len`](Self::packed_len) bytes.
    pub fn unpack<T: Element>(
        tree: &SumTree,
        covers: Ranks,
        len: usize,
        bytes: &[u8],
    ) -> Result<Self, Error> {
        let expected = Self::packed_len::<T>(tree, covers, len);
        if bytes.len() != expected {
            return Err(Error::MessageLength {
                expected,
                found: bytes.len(),
            });
        }
        let mut nodes = Vec::new();
        let mut at = 0;
        tree.frontier(covers, &mut |node| {
            let size = wire_size::<T>(tree, node);
            let body = &bytes[at..at + len * size];
            at += body.len();
            let values = if tree.leaf(node).is_some() {
                body.chunks_exact(size)
                    .map(|c| crate::arch::read_unaligned::<T>(c).load())
                    .collect()
            } else {
                body.chunks_exact(size)
                    .map(bytemuck::pod_read_unaligned::<f32>)
                    .collect()
            };
            nodes.push((node, values));
        });
        Ok(Self { covers, len, nodes })
    }

    /// Combines `incoming` (the contributions adjacent to its own, as a
    /// [`Kind::Reduce`](super::Kind::Reduce)'s `covers` are to its `onto`)
    /// into it: adds every node of the tree whose two children are now
    /// known, children first, and keeps the frontier of the union.
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, ReduceOp, Ranks, SumTree};
    ///
    /// let tree = SumTree::new(4);
    /// let mut f = Frontier::own(&tree, 1, &[1.0f32]);
    /// f.merge(&tree, ReduceOp::Sum, Frontier::own(&tree, 2, &[2.0f32]));
    /// // Ranks 1 and 2 are in different halves: nothing to add yet.
    /// let mut wire = Vec::new();
    /// f.pack::<f32>(&tree, &mut wire);
    /// assert_eq!(wire.len(), 8);
    /// f.merge(&tree, ReduceOp::Sum, Frontier::own(&tree, 3, &[3.0f32]));
    /// assert_eq!(f.covers(), Ranks::new(1, 3));
    /// ```
    ///
    /// # Panics
    /// If the vectors' lengths differ. The sets must be disjoint and
    /// adjacent (checked in debug builds).
    pub fn merge(&mut self, tree: &SumTree, op: ReduceOp, incoming: Self) {
        assert_eq!(self.len, incoming.len, "merging frontiers of other lengths");
        debug_assert!(
            (0..tree.leaves()).all(|r| !(self.covers.contains(r, tree.leaves())
                && incoming.covers.contains(r, tree.leaves()))),
            "merging frontiers that overlap"
        );
        let (held, covers) = (self.covers, incoming.covers);
        let mut pool = core::mem::take(&mut self.nodes);
        pool.extend(incoming.nodes);
        tree.merges(held, covers, &mut |node, left, right| {
            let get = |m: Node| -> &[f32] {
                let (_, v) = pool
                    .iter()
                    .find(|(k, _)| *k == m)
                    .expect("a merge's children are known");
                v
            };
            let mut v = alloc::vec![0.0f32; self.len];
            combine_into(op, &mut v, get(left), get(right));
            pool.push((node, v));
        });
        self.covers = held.union(covers, tree.leaves());
        tree.frontier(self.covers, &mut |node| {
            let i = pool
                .iter()
                .position(|(k, _)| *k == node)
                .expect("the union's frontier is known after the merges");
            self.nodes.push(pool.swap_remove(i));
        });
    }

    /// The sum of every contribution, once it covers them all (the root of
    /// the tree), else `None`.
    ///
    /// ```
    /// use tessera_core::collective::{Frontier, ReduceOp, SumTree};
    ///
    /// let tree = SumTree::new(2);
    /// let mut f = Frontier::own(&tree, 0, &[0.5f32]);
    /// assert_eq!(f.total(&tree), None);
    /// f.merge(&tree, ReduceOp::Sum, Frontier::own(&tree, 1, &[0.25f32]));
    /// assert_eq!(f.total(&tree), Some(&[0.75f32][..]));
    /// ```
    #[must_use]
    pub fn total(&self, tree: &SumTree) -> Option<&[f32]> {
        match &self.nodes[..] {
            [(node, v)] if *node == tree.root() => Some(v),
            _ => None,
        }
    }
}

/// The bytes per element of a frontier node on the wire.
fn wire_size<T: Element>(tree: &SumTree, node: Node) -> usize {
    if tree.leaf(node).is_some() {
        size_of::<T>()
    } else {
        size_of::<f32>()
    }
}
