//! Reduction operations: [`ReduceOp`] and [`Reducer`] (an operation with its rounding).

use crate::fp::Rounding;

/// How contributions are combined.
///
/// All four compute in f32 (16-bit values are widened exactly) and round
/// once, when an element's reduction is complete; see the
/// [module docs](super#numerics) for NaN, signed zero and overflow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `a + b` in f32.
    #[default]
    Sum,
    /// The sum, then one f32 division by the number of ranks `p`
    /// (`sum / p as f32`, correctly rounded; not a multiplication by
    /// `1 / p`, which is inexact for `p` not a power of two). For a 16-bit
    /// result the quotient is then rounded with the [`Rounding`].
    Mean,
    /// The largest value. NaN if any contribution is NaN; `+0.0` is taken
    /// to be above `-0.0`, so the result never depends on the order.
    Max,
    /// The smallest value. NaN if any contribution is NaN; `-0.0` is taken
    /// to be below `+0.0`.
    Min,
}

impl ReduceOp {
    /// All four operations.
    pub const ALL: [Self; 4] = [Self::Sum, Self::Mean, Self::Max, Self::Min];

    /// Whether the result depends on the order of combination (Sum and
    /// Mean: f32 addition is commutative but not associative). Max and Min
    /// are exact, so every algorithm and every order gives the same bits.
    ///
    /// ```
    /// use tessera_core::collective::ReduceOp;
    ///
    /// assert!(ReduceOp::Sum.depends_on_order());
    /// assert!(!ReduceOp::Max.depends_on_order());
    /// ```
    #[must_use]
    pub const fn depends_on_order(self) -> bool {
        matches!(self, Self::Sum | Self::Mean)
    }

    /// Combines two partial results (the scalar definition the executor's
    /// loops follow).
    ///
    /// ```
    /// use tessera_core::collective::ReduceOp;
    ///
    /// assert_eq!(ReduceOp::Sum.combine(1.5, 2.0), 3.5);
    /// assert!(ReduceOp::Min.combine(f32::NAN, 1.0).is_nan());
    /// assert!(ReduceOp::Max.combine(-0.0, 0.0).is_sign_positive());
    /// ```
    #[must_use]
    #[inline(always)]
    pub fn combine(self, a: f32, b: f32) -> f32 {
        match self {
            Self::Sum | Self::Mean => a + b,
            Self::Max => max(a, b),
            Self::Min => min(a, b),
        }
    }

    /// Turns a complete reduction over `ranks` contributions into the
    /// value that is stored (before rounding to 16 bits): the division of
    /// [`Mean`](Self::Mean), the identity otherwise.
    ///
    /// ```
    /// use tessera_core::collective::ReduceOp;
    ///
    /// assert_eq!(ReduceOp::Mean.finish(6.0, 4), 1.5);
    /// assert_eq!(ReduceOp::Sum.finish(6.0, 4), 6.0);
    /// ```
    #[must_use]
    #[inline(always)]
    pub fn finish(self, x: f32, ranks: usize) -> f32 {
        match self {
            // `ranks` is at most CollectiveSchedule::MAX_RANKS = 2^24: exact in f32.
            Self::Mean => x / ranks as f32,
            _ => x,
        }
    }
}

/// `max` with NaN propagated and `-0.0 < +0.0`: associative and
/// commutative, bit for bit (up to NaN payloads, which stores canonicalise).
#[inline(always)]
fn max(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a > b {
        a
    } else if b > a {
        b
    } else {
        // Equal: the same bits, or +0.0 and -0.0, of which +0.0.
        f32::from_bits(a.to_bits() & b.to_bits())
    }
}

/// `min` with NaN propagated and `-0.0 < +0.0`.
#[inline(always)]
fn min(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else if a < b {
        a
    } else if b < a {
        b
    } else {
        f32::from_bits(a.to_bits() | b.to_bits())
    }
}

/// What a collective computes: the operation and how 16-bit results are
/// rounded.
///
/// Copy-only collectives ([`AllGather`](super::Collective::AllGather),
/// [`Broadcast`](super::Collective::Broadcast)) ignore it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reducer {
    /// The operation.
    pub op: ReduceOp,
    /// How f16/bf16 results are rounded from f32 (ignored for f32).
    /// Element `i` of the buffer (its index in the whole, unfragmented
    /// buffer) is stored with `rounding.round(x, i)`, so stochastic rounding
    /// uses stream position `first_index + i` whichever rank computes it,
    /// whatever the algorithm and the fragmenting.
    pub rounding: Rounding,
}

impl Reducer {
    /// `op` with round-to-nearest stores.
    ///
    /// ```
    /// use tessera_core::collective::{ReduceOp, Reducer};
    /// use tessera_core::fp::Rounding;
    ///
    /// let r = Reducer::new(ReduceOp::Mean);
    /// assert_eq!((r.op, r.rounding), (ReduceOp::Mean, Rounding::Nearest));
    /// assert_eq!(Reducer::default(), Reducer::new(ReduceOp::Sum));
    /// ```
    #[must_use]
    pub const fn new(op: ReduceOp) -> Self {
        Self {
            op,
            rounding: Rounding::Nearest,
        }
    }

    /// The same operation with 16-bit stores rounded by `rounding`.
    ///
    /// ```
    /// use tessera_core::collective::{ReduceOp, Reducer};
    /// use tessera_core::fp::{Overflow, Rounding, Stochastic};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let sr = Rounding::Stochastic {
    ///     sr: Stochastic::new(RandomStream::new(42, 0), Overflow::Saturate),
    ///     first_index: 0,
    /// };
    /// let r = Reducer::new(ReduceOp::Sum).with_rounding(sr);
    /// assert_eq!(r.rounding, sr);
    /// ```
    #[must_use]
    pub const fn with_rounding(self, rounding: Rounding) -> Self {
        Self {
            op: self.op,
            rounding,
        }
    }
}

impl Default for Reducer {
    fn default() -> Self {
        Self::new(ReduceOp::Sum)
    }
}
