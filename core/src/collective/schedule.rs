//! Schedules as data: [`Algorithm`], [`Collective`], [`Order`] and
//! [`CollectiveSchedule`], with what every algorithm reads of it (sizes, fragments).
//! The per-algorithm dispatch ([`CollectiveSchedule::new`], [`CollectiveSchedule::ops`]) is
//! in `dispatch.rs`, above the algorithms.

use core::ops::Range;

use crate::fp::Element;

use super::op::ReduceOp;
use super::span::Span;

/// How the data moves. Every variant implements every [`Collective`].
///
/// Notation: `p` ranks, a buffer of `n` elements cut into `p` fragments of
/// `f = ceil(n / p)` elements (the last ones padded, see the
/// [module docs](super#fragments-and-padding)); "sent" counts padded
/// elements. `lg` is the base-2 logarithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Algorithm {
    /// One ring, `r -> r + 1 (mod p)`, over whole fragments.
    ///
    /// ```text
    /// r0 --> r1 --> r2 --> r3 --+   reduce-scatter, p = 4: at step s rank r
    /// ^                         |   sends fragment (r - 1 - s) mod p to r + 1,
    /// +-------------------------+   which adds its own contribution to it
    ///
    /// step 0:  r0->r1 f3   r1->r2 f0   r2->r3 f1   r3->r0 f2
    /// step 1:  r0->r1 f2   r1->r2 f3   r2->r3 f0   r3->r0 f1
    /// step 2:  r0->r1 f1   r1->r2 f2   r2->r3 f3   r3->r0 f0   rank r owns f<r>
    /// ```
    ///
    /// All-gather passes the finished fragments round the same ring (rank
    /// `r` sends fragment `r - s` at step `s`); all-reduce is reduce-scatter
    /// then all-gather. Reduce and broadcast are pipelined chains with one
    /// fragment per step: `root + 1 -> root + 2 -> ... -> root` (each rank
    /// adds its contribution) and `root -> root + 1 -> ... -> root - 1`.
    ///
    /// | collective | steps | sent per rank |
    /// |---|---|---|
    /// | reduce-scatter | `p - 1` | `(p - 1) f` |
    /// | all-gather | `p - 1` | `(p - 1) f` |
    /// | all-reduce | `2 (p - 1)` | `2 (p - 1) f` |
    /// | reduce | `2 (p - 1)` | `p f` (the root: 0) |
    /// | broadcast | `2 (p - 1)` | `p f` (the chain's last rank: 0) |
    Ring,
    /// Two rings in opposite directions, each on half of every fragment:
    /// the first `ceil(f / 2)` elements go `r -> r + 1` exactly as in
    /// [`Ring`](Self::Ring), the other `floor(f / 2)` go `r -> r - 1` (the
    /// mirror image). Graphcore's "bidirectional pair".
    ///
    /// ```text
    ///   first halves   r0 ---> r1 ---> r2 ---> r3 ---> r0
    ///   second halves  r0 <--- r1 <--- r2 <--- r3 <--- r0
    /// ```
    ///
    /// Same steps and the same elements per rank as the ring, as two
    /// messages per step, one to each neighbour: on full-duplex links each
    /// direction carries half, which halves the bandwidth term.
    BidirectionalRing,
    /// Two complementary binary trees (NCCL's double binary tree), each
    /// carrying half of every fragment; reduce up, broadcast down,
    /// pipelined with one fragment-half per step.
    ///
    /// ```text
    /// tree 0: first halves              tree 1: second halves (p even: mirror)
    /// 0 -------- 4                      7 -------- 3
    ///          /   \                             /   \
    ///         2     6                           5     1
    ///        / \   / \                         / \   / \
    ///       1   3 5   7                       6   4 2   0
    /// ```
    ///
    /// Tree 0 is NCCL's `ncclGetBtree`: the in-order tree rooted at rank 0
    /// whose leaves are the odd ranks; tree 1 is its mirror image
    /// `r -> p - 1 - r` for even `p` and its shift `r -> r + 1` for odd `p`,
    /// so a leaf of one tree is an inner node of the other. With `H` the
    /// root's height and `D` the tree's depth (both about `lg p`), chunk `i`
    /// (half of fragment `i`) leaves a node of height `h` for its parent at
    /// step `i + h`, is finished at the root at step `i + H - 1` and reaches
    /// depth `d` at step `i + H + d - 1`.
    ///
    /// | collective | steps (max over the trees) | sent per rank, per tree |
    /// |---|---|---|
    /// | all-reduce | `p - 1 + H + D` | `p` chunks up (not the root), `p` chunks to each child |
    /// | reduce | `p + max(H0 - 1, H1)` | `p` chunks up; tree 1's root then sends its `p` finished chunks to the root |
    /// | broadcast | at most `p + max(D0 - 1, D1)` | the root sends its `p` tree-1 chunks to tree 1's root; `p` chunks to each child |
    /// | reduce-scatter | at most `p - 1 + H + D` | `p` chunks up, then each finished chunk `i` goes down the path to rank `i` only |
    /// | all-gather | `p - 1 + 2 D` | chunk `i` goes up the path from rank `i` to the root, then down to every subtree that lacks it: each edge carries each chunk once |
    ///
    /// A chunk is `ceil(f / 2)` (tree 0) or `floor(f / 2)` (tree 1)
    /// elements. Reduce and broadcast relabel the ranks `r -> r - root`
    /// so that tree 0's root is the root.
    DoubleBinaryTree,
    /// Recursive halving then recursive doubling (Rabenseifner), with the
    /// standard fold for `p` not a power of two.
    ///
    /// ```text
    /// p = 8, reduce-scatter (all-gather runs the exchanges in reverse):
    /// step 0, distance 1:  0<->1  2<->3  4<->5  6<->7   each sends n/2
    /// step 1, distance 2:  0<->2  1<->3  4<->6  5<->7   each sends n/4
    /// step 2, distance 4:  0<->4  1<->5  2<->6  3<->7   each sends n/8
    ///
    /// p = 6 = 4 + 2: fold 0 -> 1, 2 -> 3 (whole buffers); the survivors
    /// 1 3 4 5 run the p = 4 pattern; unfold 1 -> 0, 3 -> 2 at the end
    /// ```
    ///
    /// With `P` the largest power of two `<= p`, the first `2 (p - P)`
    /// ranks pair up and the even one of each pair sends its whole buffer
    /// to the odd one, which adds it; the `P` survivors then exchange with
    /// partners at distance 1, 2, 4, ... Reduce-scatter keeps, at step
    /// `k`, the fragments of the survivors that agree with it in bits
    /// `0..=k` (a strided set, so rank `r` ends with fragment `r`), which
    /// adds neighbours first, the [deterministic order](super#the-deterministic-order);
    /// all-gather doubles contiguous ranges. A fold's result goes back to
    /// the even rank at the end. Reduce is reduce-scatter then a binomial
    /// gather to the root; broadcast a binomial scatter from the root then
    /// all-gather (van de Geijn).
    ///
    /// | collective (`p` a power of two) | steps | sent per rank |
    /// |---|---|---|
    /// | reduce-scatter | `lg p` | `(p - 1) f` |
    /// | all-gather | `lg p` | `(p - 1) f` |
    /// | all-reduce | `2 lg p` | `2 (p - 1) f` |
    /// | reduce | `2 lg p` | reduce-scatter, then at most `(p / 2) f` (the gather) |
    /// | broadcast | `2 lg p` | the scatter (the root `(p - 1) f`, others at most `(p / 2 - 1) f`), then all-gather |
    ///
    /// For other `p`, add one fold step (a folded rank sends `p f`) and one
    /// unfold step (a survivor sends `f` after reduce-scatter, `p f` after
    /// all-gather and all-reduce), and the survivors' fragments are the
    /// folded pairs' two fragments or one fragment.
    HalvingDoubling,
}

impl Algorithm {
    /// The four algorithms.
    pub const ALL: [Self; 4] = [
        Self::Ring,
        Self::BidirectionalRing,
        Self::DoubleBinaryTree,
        Self::HalvingDoubling,
    ];

    /// The order a new [`CollectiveSchedule`] uses: [`Order::Deterministic`] where it
    /// costs nothing ([`HalvingDoubling`](Self::HalvingDoubling), whose own
    /// order is the deterministic one), [`Order::Schedule`] for the others,
    /// where it would multiply the bytes of the reduction phase (see the
    /// [module docs](super#what-it-costs)).
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Order};
    ///
    /// assert_eq!(Algorithm::HalvingDoubling.default_order(), Order::Deterministic);
    /// assert_eq!(Algorithm::Ring.default_order(), Order::Schedule);
    /// ```
    #[must_use]
    pub const fn default_order(self) -> Order {
        match self {
            Self::HalvingDoubling => Order::Deterministic,
            Self::Ring | Self::BidirectionalRing | Self::DoubleBinaryTree => Order::Schedule,
        }
    }
}

/// What is computed. All buffers have the same length `n` and are used in
/// place.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Collective {
    /// Every rank contributes `n` elements; rank `r` ends with the
    /// reduction of [fragment](CollectiveSchedule::fragment) `r` in that fragment's
    /// place. The rest of its buffer is unspecified afterwards.
    ReduceScatter,
    /// Rank `r` contributes fragment `r` of its buffer; every rank ends
    /// with all of them. Pure copies: the bits move unchanged.
    AllGather,
    /// Every rank contributes `n` elements and ends with the reduction of
    /// all `n`, bitwise the same on every rank.
    AllReduce,
    /// Every rank contributes; `root` ends with the reduction. The other
    /// buffers are unspecified afterwards.
    Reduce {
        /// The rank that receives the result.
        root: usize,
    },
    /// `root`'s buffer is copied to every rank, bits unchanged.
    Broadcast {
        /// The rank whose buffer is sent.
        root: usize,
    },
}

impl Collective {
    /// Whether the collective reduces (and so uses a [`ReduceOp`]).
    ///
    /// ```
    /// use tessera_core::collective::Collective;
    ///
    /// assert!(Collective::ReduceScatter.reduces());
    /// assert!(!Collective::Broadcast { root: 0 }.reduces());
    /// ```
    #[must_use]
    pub const fn reduces(self) -> bool {
        matches!(
            self,
            Self::ReduceScatter | Self::AllReduce | Self::Reduce { .. }
        )
    }
}

/// The order in which Sum and Mean add the ranks' contributions.
///
/// Max and Min are exact, so for them both orders give the same bits at
/// no cost. See the [module docs](super#the-deterministic-order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// The fixed tree over the contribution (rank) index: bitwise the same
    /// result for every algorithm and, with [`tree_sum`](super::tree_sum),
    /// for every number of ranks holding the same contributions. Reduction
    /// messages carry the partial sums of the tree's complete subtrees they
    /// cover: one for [`HalvingDoubling`](Algorithm::HalvingDoubling) (and
    /// any algorithm with `p <= 2`), several on rings and binary trees.
    Deterministic,
    /// Whatever order the algorithm's data movement gives (one partial sum
    /// per message): the result depends on the algorithm and the number
    /// of ranks, though never on anything else.
    Schedule,
    /// Order-free: every contribution is rounded to a grid common to all
    /// ranks per block of positions and the grid integers are summed
    /// exactly ([`grid`](super::grid)), so any algorithm, any order of
    /// combination and any order of arrival give the same bits. Needs a
    /// Max all-reduce of one exponent per [`GRID_BLOCK`](super::grid::GRID_BLOCK)
    /// positions first; partial sums of several contributions travel as
    /// f64 integers (8 bytes), a rank's own contribution and finished
    /// values in the buffer's format. See the
    /// [module docs](super#the-order-free-sum).
    Free,
}

/// A collective algorithm for `size` ranks and buffers of `len` elements:
/// for every rank and step, what to send to whom, what to receive from
/// whom, and whether to reduce or copy it.
///
/// ```
/// use tessera_core::collective::{Algorithm, Collective, Kind, Op, CollectiveSchedule};
///
/// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 10).unwrap();
/// assert_eq!(s.fragment_len(), 3); // ceil(10 / 4), the last fragment padded
/// assert_eq!(s.steps(), 6);
/// // Rank 0, step 0: sends fragment 3 (positions 9..12, 9..10 real) to rank 1.
/// let ops = s.ops(0, 0);
/// assert!(matches!(ops[0], Op::Send { to: 1, span, kind: Kind::Reduce { .. } }
///     if span.start == 9 && span.len == 3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CollectiveSchedule {
    pub(super) algorithm: Algorithm,
    pub(super) collective: Collective,
    pub(super) order: Order,
    pub(super) size: usize,
    pub(super) len: usize,
    pub(super) fragment: usize,
    pub(super) steps: usize,
}

impl CollectiveSchedule {
    /// The largest group: `p` must be exact in f32 for
    /// [`ReduceOp::Mean`].
    pub const MAX_RANKS: usize = 1 << 24;

    /// The same schedule with Sum and Mean added in `order`.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Order};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    /// assert_eq!(s.order(), Order::Schedule);
    /// assert_eq!(s.with_order(Order::Deterministic).order(), Order::Deterministic);
    /// ```
    #[must_use]
    pub const fn with_order(self, order: Order) -> Self {
        Self { order, ..self }
    }

    /// The algorithm.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::HalvingDoubling, Collective::AllReduce, 3, 8).unwrap();
    /// assert_eq!(s.algorithm(), Algorithm::HalvingDoubling);
    /// ```
    #[must_use]
    pub const fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The collective.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::Broadcast { root: 2 }, 3, 8).unwrap();
    /// assert_eq!(s.collective(), Collective::Broadcast { root: 2 });
    /// ```
    #[must_use]
    pub const fn collective(&self) -> Collective {
        self.collective
    }

    /// The summation order.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Order};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::HalvingDoubling, Collective::AllReduce, 4, 8).unwrap();
    /// assert_eq!(s.order(), Order::Deterministic); // halving-doubling's default
    /// ```
    #[must_use]
    pub const fn order(&self) -> Order {
        self.order
    }

    /// The number of ranks `p`.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// assert_eq!(CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 5, 8).unwrap().size(), 5);
    /// ```
    #[must_use]
    pub const fn size(&self) -> usize {
        self.size
    }

    /// The buffer length `n`.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// assert_eq!(CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 5, 8).unwrap().len(), 8);
    /// ```
    #[must_use]
    pub const fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffers are empty.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 5, 0).unwrap();
    /// assert!(s.is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The padded fragment length `f = ceil(n / p)`.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 10).unwrap();
    /// assert_eq!(s.fragment_len(), 3);
    /// ```
    #[must_use]
    pub const fn fragment_len(&self) -> usize {
        self.fragment
    }

    /// The padded buffer length `p * f`, at most `n + p - 1`.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 10).unwrap();
    /// assert_eq!(s.padded_len(), 12);
    /// ```
    #[must_use]
    pub const fn padded_len(&self) -> usize {
        self.size * self.fragment
    }

    /// The real (unpadded) positions of fragment `j`:
    /// `j * f .. min((j + 1) * f, n)`, possibly empty.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::ReduceScatter, 4, 10).unwrap();
    /// assert_eq!((s.fragment(0), s.fragment(3)), (0..3, 9..10));
    /// let t = CollectiveSchedule::new(Algorithm::Ring, Collective::ReduceScatter, 4, 2).unwrap();
    /// assert!(t.fragment(3).is_empty()); // all padding
    /// ```
    ///
    /// # Panics
    /// If `j >= p`.
    #[must_use]
    pub fn fragment(&self, j: usize) -> Range<usize> {
        assert!(j < self.size, "fragment {j} of {} ranks", self.size);
        let f = self.fragment;
        (j * f).min(self.len)..((j + 1) * f).min(self.len)
    }

    /// The padded span of fragment `j`.
    pub(crate) const fn fragment_span(&self, j: usize) -> Span {
        Span::new(j * self.fragment, self.fragment)
    }

    /// The first (`half == 0`, `ceil(f / 2)` elements) or second half of
    /// fragment `j`'s padded span.
    pub(crate) const fn half_span(&self, j: usize, half: usize) -> Span {
        let first = self.fragment - self.fragment / 2;
        if half == 0 {
            Span::new(j * self.fragment, first)
        } else {
            Span::new(j * self.fragment + first, self.fragment / 2)
        }
    }

    /// The number of steps. Zero for a copy-only collective on one rank;
    /// one (a finalization) for a reduction on one rank. Some steps of
    /// some schedules have no ops for some ranks; with `n = 0` none has
    /// any (empty messages are left out).
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule};
    ///
    /// let ring = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 8, 64).unwrap();
    /// let hd = CollectiveSchedule::new(Algorithm::HalvingDoubling, Collective::AllReduce, 8, 64).unwrap();
    /// assert_eq!((ring.steps(), hd.steps()), (14, 6)); // 2 (p - 1) against 2 lg p
    /// ```
    #[must_use]
    pub const fn steps(&self) -> usize {
        self.steps
    }

    /// Whether reduction messages carry several partial sums
    /// ([`Carries::Frontier`](super::Carries::Frontier)) with `op`: Sum or
    /// Mean in [`Order::Deterministic`] on an algorithm whose own order is
    /// not the summation tree's, over more than two ranks.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Order, ReduceOp};
    ///
    /// let ring = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    /// assert!(!ring.carries_frontiers(ReduceOp::Sum));
    /// let ring = ring.with_order(Order::Deterministic);
    /// assert!(ring.carries_frontiers(ReduceOp::Mean));
    /// assert!(!ring.carries_frontiers(ReduceOp::Max));
    /// ```
    #[must_use]
    pub fn carries_frontiers(&self, op: ReduceOp) -> bool {
        self.frontier_order() && op.depends_on_order()
    }

    /// Whether Sum and Mean are summed on the grid of
    /// [`Order::Free`] with `op` (a reduction, Sum or Mean, in that order):
    /// partial sums then travel as f64 grid integers
    /// ([`Carries::Grid`](super::Carries::Grid)), and the block exponents
    /// must be all-reduced (Max) first.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Order, ReduceOp};
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 8).unwrap();
    /// assert!(!s.on_grid(ReduceOp::Sum));
    /// let free = s.with_order(Order::Free);
    /// assert!(free.on_grid(ReduceOp::Mean));
    /// assert!(!free.on_grid(ReduceOp::Max)); // exact in any order
    /// ```
    #[must_use]
    pub fn on_grid(&self, op: ReduceOp) -> bool {
        self.grid_order() && op.depends_on_order()
    }

    /// Whether Sum and Mean messages carry grid partials (the `grid` of
    /// [`Kind::Reduce`](super::Kind::Reduce)).
    pub(crate) fn grid_order(&self) -> bool {
        self.order == Order::Free && self.collective.reduces()
    }

    /// Whether Sum and Mean messages carry frontiers (the `frontier` of
    /// [`Kind::Reduce`](super::Kind::Reduce)).
    pub(crate) fn frontier_order(&self) -> bool {
        self.order == Order::Deterministic
            && self.collective.reduces()
            && self.size > 2
            && self.algorithm != Algorithm::HalvingDoubling
    }

    /// The f32 scratch [`execute`](super::execute) needs for element type
    /// `T` and operation `op`:
    ///
    /// - 0 for copy-only collectives, and for f32 when messages carry one
    ///   partial (the ranks' buffers accumulate in place);
    /// - `p * n` for f16/bf16 when messages carry one partial (an f32
    ///   accumulator per rank and element: partial sums are never rounded
    ///   to 16 bits);
    /// - `(p - 1) * n` in [`Order::Deterministic`] on a ring or tree with
    ///   `p > 2` (one row per inner node of the summation tree, for every
    ///   element type);
    /// - in [`Order::Free`] for Sum and Mean, `2 p n + 2 blocks(n) + 1`
    ///   (an f64 grid sum per rank and element, the block exponents and
    ///   their per-rank maxima, one f32 of alignment).
    ///
    /// Padding needs no scratch: the executor cuts spans at `n`.
    ///
    /// ```
    /// use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Order, ReduceOp};
    /// use tessera_core::fp::f16;
    ///
    /// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 10).unwrap();
    /// assert_eq!(s.scratch_len::<f32>(ReduceOp::Sum), 0); // in place
    /// assert_eq!(s.scratch_len::<f16>(ReduceOp::Sum), 40); // an f32 row per rank
    /// let d = s.with_order(Order::Deterministic);
    /// assert_eq!(d.scratch_len::<f32>(ReduceOp::Sum), 30); // a row per inner node
    /// ```
    #[must_use]
    pub fn scratch_len<T: Element>(&self, op: ReduceOp) -> usize {
        if !self.collective.reduces() {
            0
        } else if self.on_grid(op) {
            2 * self.size * self.len + 2 * super::grid::blocks(self.len) + 1
        } else if self.carries_frontiers(op) {
            (self.size - 1) * self.len
        } else if size_of::<T>() == size_of::<f32>() {
            0
        } else {
            self.size * self.len
        }
    }
}
