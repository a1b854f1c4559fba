//! The pure parts of collectives: schedules as data, reduction operations,
//! a fixed summation order, and an in-memory executor.
//!
//! - [`CollectiveSchedule`]: reduce-scatter, all-gather, all-reduce, reduce and
//!   broadcast ([`Collective`]) by ring, bidirectional ring, double binary
//!   tree or recursive halving-doubling ([`Algorithm`]), for any number of
//!   ranks. For rank `r` at step `s`, [`CollectiveSchedule::ops`] says which span to
//!   send to whom, which to receive from whom, and whether to reduce or
//!   copy it ([`Op`]).
//! - [`ReduceOp`]: Sum, Mean, Max, Min over f32, f16 and bf16, computed in
//!   f32 and rounded once ([`Reducer`]).
//! - [`Order`]: the schedule's own summation order, a fixed tree over
//!   the contribution index that gives bitwise the same result for every
//!   algorithm and every rank count ([`tree_sum`]), or no order at all:
//!   integer sums on a common grid ([`Order::Free`], [`grid`]).
//! - [`execute`]: runs any schedule over `p` buffers in one address space
//!   with caller-provided scratch, reporting every message ([`Transfer`])
//!   for a cost model. It is the reference for the communicators and what
//!   the simulator runs.
//!
//! ```
//! use tessera_core::collective::{
//!     self, Algorithm, Collective, Order, ReduceOp, Reducer, CollectiveSchedule,
//! };
//! use tessera_core::fp::f16;
//!
//! // Four ranks, ten f16 elements each: rank r holds r + 1 everywhere.
//! let mut data: Vec<Vec<f16>> = (0..4).map(|r| vec![f16::from_f32(r as f32 + 1.0); 10]).collect();
//! let mut bufs: Vec<&mut [f16]> = data.iter_mut().map(|b| &mut b[..]).collect();
//! let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 4, 10)
//!     .unwrap()
//!     .with_order(Order::Deterministic);
//! let mean = Reducer::new(ReduceOp::Mean);
//! let mut scratch = vec![0.0f32; s.scratch_len::<f16>(mean.op)];
//! let mut sent = [0usize; 4];
//! collective::execute(&s, &mean, &mut bufs, &mut scratch, |t| sent[t.from] += t.bytes).unwrap();
//! assert!(bufs.iter().all(|b| b.iter().all(|&x| x == f16::from_f32(2.5))));
//! ```
//!
//! # Fragments and padding
//!
//! A buffer of `n` elements over `p` ranks is cut into `p` fragments of
//! `f = ceil(n / p)` elements, as Graphcore's collectives pad a tensor to
//! `p * f`: fragment `j` is positions `j * f .. (j + 1) * f`, of which
//! those from `n` on are padding (so the last fragments may be partly or
//! wholly padding; with `n < p` some are nothing but). The bidirectional
//! ring and the double binary tree cut each fragment in two halves of
//! `ceil(f / 2)` and `floor(f / 2)` elements. Reduce-scatter leaves
//! fragment `r` on rank `r`; all-gather starts from it.
//!
//! Schedules, [`Span`]s and [`Transfer::elements`] count padded positions
//! (a transport that sends fixed-size fragments sends the padding);
//! [`Transfer::payload`] leaves it out. The executor cuts every span at `n`,
//! so padding costs it no memory: the ranks' buffers stay `n` long. A
//! transport that does send padded fragments needs, per message, a staging
//! buffer of the span's length, at most `f` beyond the data (`p * f - n <
//! p` elements of zeros in all).
//!
//! With `n = 0` every message is empty and left out of the ops.
//!
//! # The deterministic order
//!
//! Sum and Mean are not associative in floating point, and NCCL's results
//! change with the algorithm and the rank count. [`Order::Deterministic`]
//! fixes the order as a function of the global contribution index alone
//! (ReproRed, TBIK): the sum of contributions `c_0 .. c_{C-1}` is the
//! value of this tree, in f32, each node being `left + right` (f32
//! addition is commutative, so a node's value does not depend on which
//! side arrives first):
//!
//! - with `P` the largest power of two `<= C` and `r = C - P`, the pairs
//!   `(c_2i, c_2i+1)` for `i < r` are added first;
//! - those `r` sums and the other `C - 2r` contributions, in index order,
//!   are `P` survivors; a complete binary tree over them adds survivors
//!   `2k` and `2k + 1`, then those sums pairwise, and so on.
//!
//! ```text
//! C = 8:  ((c0 + c1) + (c2 + c3)) + ((c4 + c5) + (c6 + c7))
//! C = 6:  ((c0 + c1) + (c2 + c3)) + (c4 + c5)          P = 4, r = 2
//! C = 5:  ((c0 + c1) + c2) + (c3 + c4)                 P = 4, r = 1
//! ```
//!
//! This is exactly the order recursive halving-doubling with the standard
//! fold adds ranks in, one contribution per rank. With rank `r` of `p`
//! holding contributions `r * m .. (r + 1) * m` and `m` a power of two
//! (`C = m * p`), the tree over `C` is the tree over `p` with each leaf
//! replaced by the complete tree over a rank's `m` contributions; so when
//! each rank passes the [`tree_sum`] of its contributions, the result is
//! bitwise the same for every such `p` (for `C = 24`: 1, 3, 6, 12 and 24
//! ranks) and every algorithm. Max and Min are exact and need no order.
//! Mean divides by `p`, so only its sum is independent of the rank count.
//!
//! ## What it costs
//!
//! The executor combines every inner node of the tree once per element,
//! as a schedule-order reduction combines once per received partial: the
//! same `p - 1` additions per element. The cost is in the messages: a
//! message carries one partial sum per maximal complete subtree its
//! contributions cover ([`Transfer::partials`]).
//!
//! - [`HalvingDoubling`](Algorithm::HalvingDoubling): nothing. Its own
//!   order is the tree (reduce-scatter exchanges at distance 1, 2, 4, ...,
//!   folds pairs first), so it is its default order and runs on the
//!   schedule-order path. So is any algorithm for `p <= 2`, and Max/Min.
//! - Rings (reduce-scatter, all-reduce, reduce): a fragment's partial
//!   visits the ranks `x + 1, x + 2, ...` in turn and wraps, so a message
//!   carries the subtrees of the suffix and the prefix it has covered
//!   (up to about `2 lg p`). The reduction phase sends on average about
//!   1.33x (p = 3), 1.5x (4), 2.1x (8) and 2.9x (16) the elements of
//!   schedule order (see the tests' table).
//! - Double binary tree: a node's subtree is an interval of ranks not
//!   aligned to the summation tree, so a message up carries up to about
//!   `2 lg` of its size partials. All-reduce's reduction phase sends about
//!   1.33x (p = 4), 1.57x (8) and 1.73x (16) the elements of schedule
//!   order.
//! - Memory: `(p - 1) * n` f32 of scratch, one row per inner node (see
//!   [`CollectiveSchedule::scratch_len`]), for every element type.
//!
//! So the rings and the tree keep [`Order::Schedule`] by default
//! ([`Algorithm::default_order`]); ask for [`Order::Deterministic`] with
//! [`CollectiveSchedule::with_order`] when reproducibility across algorithms and
//! rank counts is worth those bytes.
//!
//! # The order-free sum
//!
//! [`Order::Free`] needs no order: each rank's contribution is rounded to
//! a grid `2^g` common to all ranks, one per block of
//! [`GRID_BLOCK`](grid::GRID_BLOCK) = 256 positions, with `g` set by the
//! block's largest finite magnitude over all ranks (`g = E - 32`, at least
//! `-149`, for values below `2^E`); the grid integers are below `2^32` and
//! are summed exactly in f64 (up to [`MAX_CONTRIBUTIONS`](grid::MAX_CONTRIBUTIONS)
//! = 2^21 of them), then rounded once to f32. Integer addition is
//! associative and commutative, so the result is bitwise the same for
//! every algorithm, every order of combination and every order in which
//! messages arrive, with no constraint on the schedule; the schedules'
//! own data movement is used unchanged. It is exact (the exact sum rounded
//! once) whenever every contribution lies on its block's grid: within
//! `2^9` of the block's bound, or in a block of values below `2^-117`
//! (subnormals included); smaller values are rounded to the grid first
//! (see [`grid`] for the precise statement, infinities, NaN and zeros).
//!
//! Bytes on the wire, against [`Order::Schedule`] on the same algorithm:
//!
//! - first, a Max all-reduce of one f32 exponent per block: `n / 256`
//!   elements, 1/256 of the data, by the same algorithm;
//! - a rank's own contribution travels in the buffer's format, partial sums
//!   of several contributions as f64 integers (8 bytes: twice f32, four
//!   times f16), finished values (all-gather phases) in the buffer's
//!   format. A ring all-reduce of f32 over `p` ranks sends per rank `(1 +
//!   2 (p - 2) + (p - 1)) f` elements' worth of f32 against `2 (p - 1) f`:
//!   the same for `p = 2`, 1.33x for 4, 1.43x for 8 (1.5x as `p` grows);
//!   halving-doubling sends its first exchange in the buffer's format and
//!   the later ones in f64.
//! - Scratch: an f64 per rank and element ([`CollectiveSchedule::scratch_len`]).
//!
//! # Numerics
//!
//! - Precision: every reduction is computed in f32 (f16/bf16 values widen
//!   exactly); partial sums of 16-bit contributions are never rounded to 16
//!   bits (they travel as f32, see [`Transfer::bytes`]). A 16-bit result is
//!   rounded once, from the complete f32 value, by the [`Reducer`]'s
//!   [`Rounding`](crate::fp::Rounding): element `i` of the buffer uses
//!   stream position `first_index + i`, so stochastic rounding gives the
//!   same bits whatever the algorithm, the rank count and the fragmenting,
//!   whenever the f32 reductions agree (always in the deterministic order).
//! - Mean: the f32 sum, then one f32 division `sum / p as f32` (correctly
//!   rounded), then for 16-bit results the rounding (a second rounding;
//!   exact f16 means of small integers stay exact).
//! - NaN: Sum and Mean propagate NaN as f32 arithmetic does (a NaN
//!   contribution, or `+inf` and `-inf`); Max and Min return NaN if any
//!   contribution is NaN. Every NaN a reduction stores is the canonical
//!   quiet NaN `f32::NAN` (f16 `0x7e00`, bf16 `0x7fc0`), as in
//!   [`crate::kernels`]. Copies (all-gather, broadcast) move bits
//!   unchanged.
//! - Signed zero: Sum follows IEEE (`-0.0 + -0.0 = -0.0`); Max takes
//!   `+0.0` above `-0.0` and Min `-0.0` below `+0.0`, so neither depends
//!   on the order.
//! - Overflow: f32 partial sums overflow to infinity as IEEE arithmetic
//!   does (where depends on the order; in the deterministic order it is
//!   fixed); 16-bit stores follow the rounding (round to nearest gives
//!   infinity, stochastic rounding its [`Overflow`](crate::fp::Overflow)
//!   policy).

mod combine;
mod dispatch;
mod error;
mod execute;
#[cfg(feature = "alloc")]
mod frontier;
pub mod grid;
mod halving;
mod message;
mod op;
mod ring;
mod schedule;
mod span;
mod sum_tree;
mod tree;

pub use combine::{combine, combine_into};
pub use error::Error;
pub use execute::{execute, execute_into};
#[cfg(feature = "alloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub use frontier::Frontier;
pub use message::{Carries, Kind, Op, Ops, Transfer};
pub use op::{ReduceOp, Reducer};
pub use schedule::{Algorithm, Collective, CollectiveSchedule, Order};
pub use span::{Ranks, Span};
pub use sum_tree::{Node, SumTree, tree_sum};
