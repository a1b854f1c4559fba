//! How to round: the mode, the overflow policy and subnormal handling, as
//! one plain-data type, [`Round`], used across the crate (the format
//! conversions, the kernels' stores through [`Rounding`](super::Rounding),
//! and the optimizers' [`Precision`](crate::optim::Precision)).

use super::Overflow;

/// A rounding mode: which of the two format values around `x` (`a < x <
/// b`, neighbours of the format with an unbounded exponent range) the
/// result is. Values the format holds never change, in every mode.
///
/// The stochastic modes read the random bits of the element's position
/// (see [the module docs](super) for which bits).
///
/// ```
/// use tessera_core::fp::{Format, Mode, Round};
/// use tessera_core::rng::RandomStream;
///
/// let f = Format::E2M1FN; // values ... 2, 3, 4 ...
/// // (deterministic modes ignore the stream and position)
/// let rounded = |mode, x| f.chop(x, Round::new(mode), RandomStream::new(0, 0), 0);
/// assert_eq!(rounded(Mode::NearestEven, 3.5), 4.0);
/// assert_eq!(rounded(Mode::NearestZero, 3.5), 3.0);
/// assert_eq!(rounded(Mode::NearestAway, -2.5), -3.0);
/// assert_eq!(rounded(Mode::Down, -2.1), -3.0);
/// assert_eq!(rounded(Mode::ToOdd, 2.1), 3.0); // 3 = 1.1b x 2^1: odd
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Mode {
    /// To the nearest; ties to the one with an even last significand bit
    /// (IEEE's default).
    #[default]
    NearestEven,
    /// To the nearest; ties away from zero.
    NearestAway,
    /// To the nearest; ties toward zero.
    NearestZero,
    /// Toward zero (truncation).
    TowardZero,
    /// Toward +infinity.
    Up,
    /// Toward -infinity.
    Down,
    /// To odd: `x` if representable, else the neighbour whose last
    /// significand bit is 1 (the one away from zero where both are even,
    /// which happens only between 0 and the smallest normal when
    /// subnormals are flushed).
    ToOdd,
    /// Exactly unbiased stochastic rounding: `b` with probability
    /// `(|x| - |a|) / (|b| - |a|)` exactly (for the magnitudes), with random
    /// bits covering every discarded bit.
    Stochastic,
    /// Stochastic rounding with `k` random bits, as hardware does: the
    /// exact rule with only the top `k` of the discarded bits in play.
    /// With `f = (|x| - |a|) / (|b| - |a|)`, the result is `b` with
    /// probability `floor(f * 2^k) / 2^k`, so the bias is toward zero and
    /// exactly `-(f - floor(f * 2^k) / 2^k) * (|b| - |a|)`, less than
    /// `2^-k` of a spacing. With `k` at least the number of discarded bits
    /// it is [`Mode::Stochastic`]; `k = 0` is [`Mode::TowardZero`].
    StochasticBits(u8),
    /// CPFloat's stochastic rounding with equal probabilities: `a` or `b`
    /// with probability 1/2 each (biased; for experiments).
    StochasticEqual,
}

impl Mode {
    /// Every deterministic mode, for sweeps and property tests.
    ///
    /// ```
    /// use tessera_core::fp::Mode;
    ///
    /// assert_eq!(Mode::DETERMINISTIC.len(), 7);
    /// assert!(Mode::DETERMINISTIC.iter().all(|m| !m.is_stochastic()));
    /// ```
    pub const DETERMINISTIC: [Mode; 7] = [
        Mode::NearestEven,
        Mode::NearestAway,
        Mode::NearestZero,
        Mode::TowardZero,
        Mode::Up,
        Mode::Down,
        Mode::ToOdd,
    ];

    /// Whether the mode reads random bits.
    ///
    /// ```
    /// use tessera_core::fp::Mode;
    ///
    /// assert!(Mode::StochasticBits(8).is_stochastic() && !Mode::Up.is_stochastic());
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn is_stochastic(self) -> bool {
        matches!(
            self,
            Self::Stochastic | Self::StochasticBits(_) | Self::StochasticEqual
        )
    }
}

/// Whether results below the smallest normal may be subnormal.
///
/// ```
/// use tessera_core::fp::{Format, Round, Subnormals};
/// use tessera_core::rng::RandomStream;
///
/// let flush = Round::NEAREST_EVEN.with_subnormals(Subnormals::Flush);
/// let s = RandomStream::new(0, 0);
/// assert_eq!(Format::F16.chop(1e-6, flush, s, 0), 0.0);
/// assert_ne!(Format::F16.chop(1e-6, Round::NEAREST_EVEN, s, 0), 0.0);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Subnormals {
    /// Keep them (where the format has them).
    #[default]
    Keep,
    /// Flush: round as if the format had no subnormals, so every `|x|`
    /// below the smallest normal `2^emin` rounds between 0 and `2^emin`
    /// by the mode (a tie, `2^(emin - 1)`, goes to 0).
    Flush,
}

/// How to round into a format: the mode, the overflow policy and the
/// handling of subnormals. The crate's one rounding type.
///
/// Overflow: a result above the format's largest finite value `MAX`
/// becomes, with [`Overflow::Infinity`], infinity, or NaN for formats
/// without infinities (OCP's non-saturating conversion), or `MAX` for
/// formats with neither; with [`Overflow::Saturate`], `MAX`. The directed
/// modes follow IEEE 754 (section 7.4): toward zero (and to odd) never
/// overflow past `MAX`, up only for positive values, down only for
/// negative ones. Infinite inputs stay infinite in formats with
/// infinities; elsewhere they overflow as above. NaN stays NaN (see
/// [`Format::encode`](super::Format::encode) for formats without NaN).
///
/// ```
/// use tessera_core::fp::{Format, Mode, Overflow, Round};
/// use tessera_core::rng::RandomStream;
///
/// let (s, nearest) = (RandomStream::new(0, 0), Round::NEAREST_EVEN);
/// let sat = Round::new(Mode::NearestEven).with_overflow(Overflow::Saturate);
/// assert_eq!(Format::E4M3FN.chop(1000.0, sat, s, 0), 448.0);
/// assert!(Format::E4M3FN.chop(1000.0, nearest, s, 0).is_nan());
/// assert_eq!(Format::E5M2.chop(1e6, nearest, s, 0), f32::INFINITY);
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Round {
    /// Which neighbour.
    pub mode: Mode,
    /// What happens above the largest finite value.
    pub overflow: Overflow,
    /// Whether subnormal results are kept.
    pub subnormals: Subnormals,
}

impl Round {
    /// Round to nearest even, IEEE overflow, subnormals kept.
    pub const NEAREST_EVEN: Self = Self::new(Mode::NearestEven);
    /// Exactly unbiased stochastic rounding, IEEE overflow, subnormals
    /// kept (the optimizers' default).
    pub const STOCHASTIC: Self = Self::new(Mode::Stochastic);

    /// `mode` with IEEE overflow and subnormals kept.
    ///
    /// ```
    /// use tessera_core::fp::{Mode, Overflow, Round, Subnormals};
    ///
    /// let r = Round::new(Mode::Up);
    /// assert_eq!((r.overflow, r.subnormals), (Overflow::Infinity, Subnormals::Keep));
    /// ```
    #[must_use]
    pub const fn new(mode: Mode) -> Self {
        Self {
            mode,
            overflow: Overflow::Infinity,
            subnormals: Subnormals::Keep,
        }
    }

    /// The same with overflow policy `overflow`.
    ///
    /// ```
    /// use tessera_core::fp::{Overflow, Round};
    ///
    /// assert_eq!(Round::STOCHASTIC.with_overflow(Overflow::Saturate).overflow, Overflow::Saturate);
    /// ```
    #[must_use]
    pub const fn with_overflow(self, overflow: Overflow) -> Self {
        Self { overflow, ..self }
    }

    /// The same with subnormal handling `subnormals`.
    ///
    /// ```
    /// use tessera_core::fp::{Round, Subnormals};
    ///
    /// assert_eq!(Round::NEAREST_EVEN.with_subnormals(Subnormals::Flush).subnormals, Subnormals::Flush);
    /// ```
    #[must_use]
    pub const fn with_subnormals(self, subnormals: Subnormals) -> Self {
        Self { subnormals, ..self }
    }
}
