//! Unscale-and-check over many gradient slices of mixed types, and the
//! per-step statistics replicas combine: [`GradSlice`], [`GradStats`],
//! [`BinEdge`], [`BinCounts`], [`unscale_grads`].

use crate::fp::{HalfFloat, Rounding, bf16, f16};
use crate::kernels;

use super::ScalerConfigError;

/// One gradient tensor, borrowed mutably for unscaling: f32, or 16-bit
/// storage with the [`Rounding`] its unscaled values are stored back with.
///
/// Build one with `From` (16-bit slices then round to nearest) or name the
/// variant to choose the rounding:
///
/// ```
/// use tessera_core::fp::{Rounding, bf16, f16};
/// use tessera_core::scale::GradSlice;
///
/// let mut w = [0.0f32; 4];
/// let mut b = [f16::ZERO; 2];
/// let mut n = [bf16::ZERO; 3];
/// let grads = [
///     GradSlice::from(&mut w),
///     GradSlice::from(&mut b[..]),
///     GradSlice::Bf16(&mut n, Rounding::Nearest),
/// ];
/// assert_eq!(grads.iter().map(GradSlice::len).sum::<usize>(), 9);
/// ```
///
/// With stochastic rounding, give each tensor its own random positions (its
/// own stream, or disjoint `first_index` ranges): element `i` of a slice is
/// rounded with position `first_index + i` (see [`Rounding`]).
#[derive(Debug)]
pub enum GradSlice<'a> {
    /// f32 gradients, unscaled in place.
    F32(&'a mut [f32]),
    /// f16 gradients: widened, multiplied in f32, stored with the rounding.
    F16(&'a mut [f16], Rounding),
    /// bf16 gradients: widened, multiplied in f32, stored with the rounding.
    Bf16(&'a mut [bf16], Rounding),
}

impl<'a> From<&'a mut [f32]> for GradSlice<'a> {
    fn from(x: &'a mut [f32]) -> Self {
        Self::F32(x)
    }
}

impl<'a> From<&'a mut [f16]> for GradSlice<'a> {
    /// f16 gradients stored back with round to nearest even.
    fn from(x: &'a mut [f16]) -> Self {
        Self::F16(x, Rounding::Nearest)
    }
}

impl<'a> From<&'a mut [bf16]> for GradSlice<'a> {
    /// bf16 gradients stored back with round to nearest even.
    fn from(x: &'a mut [bf16]) -> Self {
        Self::Bf16(x, Rounding::Nearest)
    }
}

impl<'a, const N: usize> From<&'a mut [f32; N]> for GradSlice<'a> {
    fn from(x: &'a mut [f32; N]) -> Self {
        Self::F32(x)
    }
}

impl<'a, const N: usize> From<&'a mut [f16; N]> for GradSlice<'a> {
    /// f16 gradients stored back with round to nearest even.
    fn from(x: &'a mut [f16; N]) -> Self {
        Self::F16(x, Rounding::Nearest)
    }
}

impl<'a, const N: usize> From<&'a mut [bf16; N]> for GradSlice<'a> {
    /// bf16 gradients stored back with round to nearest even.
    fn from(x: &'a mut [bf16; N]) -> Self {
        Self::Bf16(x, Rounding::Nearest)
    }
}

#[cfg(feature = "alloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
impl<'a> From<&'a mut alloc::vec::Vec<f32>> for GradSlice<'a> {
    fn from(x: &'a mut alloc::vec::Vec<f32>) -> Self {
        Self::F32(x)
    }
}

#[cfg(feature = "alloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
impl<'a> From<&'a mut alloc::vec::Vec<f16>> for GradSlice<'a> {
    /// f16 gradients stored back with round to nearest even.
    fn from(x: &'a mut alloc::vec::Vec<f16>) -> Self {
        Self::F16(x, Rounding::Nearest)
    }
}

#[cfg(feature = "alloc")]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
impl<'a> From<&'a mut alloc::vec::Vec<bf16>> for GradSlice<'a> {
    /// bf16 gradients stored back with round to nearest even.
    fn from(x: &'a mut alloc::vec::Vec<bf16>) -> Self {
        Self::Bf16(x, Rounding::Nearest)
    }
}

impl GradSlice<'_> {
    /// The number of elements.
    ///
    /// ```
    /// use tessera_core::scale::GradSlice;
    ///
    /// assert_eq!(GradSlice::from(&mut [0.0f32; 3]).len(), 3);
    /// ```
    #[must_use]
    pub const fn len(&self) -> usize {
        match self {
            Self::F32(x) => x.len(),
            Self::F16(x, _) => x.len(),
            Self::Bf16(x, _) => x.len(),
        }
    }

    /// Whether the slice has no elements.
    ///
    /// ```
    /// use tessera_core::scale::GradSlice;
    ///
    /// assert!(GradSlice::from(&mut [0.0f32; 0]).is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A shorter-lived `GradSlice` over the same elements, so a caller that
    /// keeps its slices in an array can pass them to [`unscale_grads`] step
    /// after step: `unscale_grads(grads.iter_mut().map(GradSlice::reborrow),
    /// ..)`.
    ///
    /// ```
    /// use tessera_core::scale::{unscale_grads, GradSlice};
    ///
    /// let (mut a, mut b) = ([2.0f32; 2], [4.0f32; 2]);
    /// let mut grads = [GradSlice::from(&mut a), GradSlice::from(&mut b)];
    /// for _ in 0..2 {
    ///     let _ = unscale_grads(grads.iter_mut().map(GradSlice::reborrow), 0.5, None);
    /// }
    /// assert_eq!((a, b), ([0.5; 2], [1.0; 2]));
    /// ```
    #[must_use]
    pub fn reborrow(&mut self) -> GradSlice<'_> {
        match self {
            Self::F32(x) => GradSlice::F32(x),
            Self::F16(x, r) => GradSlice::F16(x, *r),
            Self::Bf16(x, r) => GradSlice::Bf16(x, *r),
        }
    }

    /// Unscales in place, `x[i] = x[i] * inv_scale` (16-bit storage:
    /// `round(widen(x[i]) * inv_scale)`), with the fused kernels
    /// [`kernels::unscale_and_check`];
    /// returns whether any unscaled (stored) value is infinite or NaN.
    ///
    /// ```
    /// use tessera_core::fp::f16;
    /// use tessera_core::scale::GradSlice;
    ///
    /// let mut g = [f16::from_f32(8.0)];
    /// assert!(!GradSlice::from(&mut g).unscale(0.25));
    /// assert_eq!(g, [f16::from_f32(2.0)]);
    /// ```
    #[must_use]
    pub fn unscale(&mut self, inv_scale: f32) -> bool {
        match self {
            Self::F32(x) => kernels::unscale_and_check(x, inv_scale, Rounding::Nearest),
            Self::F16(x, r) => kernels::unscale_and_check(x, inv_scale, *r),
            Self::Bf16(x, r) => kernels::unscale_and_check(x, inv_scale, *r),
        }
    }

    /// The histogram counts of the current values against `edge` (see
    /// [`BinEdge::count`]).
    ///
    /// ```
    /// use tessera_core::scale::{BinEdge, GradSlice};
    ///
    /// let mut g = [1.0f32, 100.0, f32::INFINITY];
    /// let counts = GradSlice::from(&mut g).bins(BinEdge::new(10.0)?);
    /// assert_eq!((counts.lower, counts.upper), (1, 2));
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn bins(&self, edge: BinEdge) -> BinCounts {
        match self {
            Self::F32(x) => edge.count(x),
            Self::F16(x, _) => edge.count_half(x),
            Self::Bf16(x, _) => edge.count_half(x),
        }
    }
}

/// The two-bin histogram of automatic loss scaling: how many gradient
/// elements lie below the bin edge and how many at or above it.
///
/// Counts are exact integers. [`merge`](Self::merge) adds them (wrapping
/// `u64` addition, as a sum all-reduce of `u64` does; 2^64 elements is out
/// of reach), so any grouping of tensors, micro-batches and replicas gives
/// the same totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct BinCounts {
    /// Elements with `|x| < edge`.
    pub lower: u64,
    /// Elements with `|x| >= edge`, infinities and NaNs.
    pub upper: u64,
}

impl BinCounts {
    /// The counts of both histograms together.
    ///
    /// ```
    /// use tessera_core::scale::BinCounts;
    ///
    /// let a = BinCounts { lower: 3, upper: 1 };
    /// assert_eq!(a.merge(a), BinCounts { lower: 6, upper: 2 });
    /// ```
    #[must_use]
    pub const fn merge(self, other: Self) -> Self {
        Self {
            lower: self.lower.wrapping_add(other.lower),
            upper: self.upper.wrapping_add(other.upper),
        }
    }

    /// `lower + upper`, as a `u128` (it cannot overflow).
    ///
    /// ```
    /// use tessera_core::scale::BinCounts;
    ///
    /// assert_eq!(BinCounts { lower: u64::MAX, upper: 1 }.total(), 1 << 64);
    /// ```
    #[must_use]
    pub const fn total(self) -> u128 {
        self.lower as u128 + self.upper as u128
    }

    /// PopART's scale-down test, decided exactly:
    /// `upper > threshold * (upper + lower)` in exact rational arithmetic
    /// with the exact binary value of `threshold`. For non-zero counts this
    /// is `upper / (upper + lower) > threshold`; with no elements at all
    /// (both counts zero) it is `false`.
    ///
    /// ```
    /// use tessera_core::scale::BinCounts;
    ///
    /// let counts = BinCounts { lower: 999, upper: 1 }; // 1 in 1000 above the edge
    /// assert!(counts.upper_fraction_exceeds(1e-4));
    /// assert!(!counts.upper_fraction_exceeds(1e-3));
    /// ```
    ///
    /// # Panics
    /// If `threshold` is NaN or outside `[0, 1]`.
    #[must_use]
    pub fn upper_fraction_exceeds(self, threshold: f32) -> bool {
        assert!(
            (0.0..=1.0).contains(&threshold),
            "upper_fraction_exceeds: threshold {threshold} not in [0, 1]"
        );
        // threshold = m * 2^-k exactly, with m < 2^24 and k in 23..=149
        // (0 <= threshold <= 1).
        let bits = threshold.to_bits();
        let exponent = bits >> 23;
        let fraction = bits & 0x007f_ffff;
        let (m, k) = if exponent == 0 {
            (fraction, 149)
        } else {
            (fraction | 0x0080_0000, 150 - exponent)
        };
        // upper > m * n / 2^k  <=>  upper > floor(m * n / 2^k), upper being
        // an integer; m * n < 2^24 * 2^65 fits in a u128.
        let product = u128::from(m) * self.total();
        let floor = if k >= 128 { 0 } else { product >> k };
        u128::from(self.upper) > floor
    }
}

/// The single bin edge of automatic loss scaling's histogram, compared with
/// the magnitudes of the (still scaled) gradients.
///
/// An element counts as *upper* when `|x| >= edge`, as in PopLibs'
/// `histogram` (bin `[levels[i-1], levels[i])`); infinities are upper, and
/// so is NaN, since a NaN gradient is overflow too. The comparison is exact
/// for every storage type: 16-bit values are compared as the values they
/// hold.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BinEdge {
    edge: f32,
}

impl BinEdge {
    /// The largest finite f16, 65504, that bin-edge locations are a
    /// fraction of (PopART's `getLevels` for f16 tensors).
    pub const F16_MAX: f32 = 65504.0;

    /// PopART's default edge as Tessera's design fixes it: `0.125 * 65504`
    /// = 8188.
    pub const DEFAULT: Self = Self {
        edge: 0.125 * Self::F16_MAX,
    };

    /// An edge at `edge` (`+0.0` for `-0.0`; `+inf` counts only infinities
    /// and NaNs as upper).
    ///
    /// ```
    /// use tessera_core::scale::BinEdge;
    ///
    /// assert_eq!(BinEdge::new(8188.0)?.value(), 8188.0);
    /// assert!(BinEdge::new(f32::NAN).is_err());
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    ///
    /// # Errors
    /// [`ScalerConfigError::BinEdge`] if `edge` is NaN or negative.
    pub fn new(edge: f32) -> Result<Self, ScalerConfigError> {
        if edge >= 0.0 {
            // `+ 0.0` turns -0.0 into +0.0 and changes nothing else.
            Ok(Self { edge: edge + 0.0 })
        } else {
            Err(ScalerConfigError::BinEdge(edge))
        }
    }

    /// An edge at `location * 65504`, computed in f32 as PopART does
    /// (`location` is PopART's `binEdgeLocation`).
    ///
    /// ```
    /// use tessera_core::scale::BinEdge;
    ///
    /// assert_eq!(BinEdge::from_f16_location(0.125)?.value(), 8188.0);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    ///
    /// # Errors
    /// [`ScalerConfigError::BinEdgeLocation`] if `location` is NaN or outside
    /// `[0, 1]`.
    pub fn from_f16_location(location: f32) -> Result<Self, ScalerConfigError> {
        if (0.0..=1.0).contains(&location) {
            Ok(Self {
                edge: (Self::F16_MAX * location) + 0.0,
            })
        } else {
            Err(ScalerConfigError::BinEdgeLocation(location))
        }
    }

    /// The edge's value.
    ///
    /// ```
    /// use tessera_core::scale::BinEdge;
    ///
    /// assert_eq!(BinEdge::new(0.5)?.value(), 0.5);
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub const fn value(self) -> f32 {
        self.edge
    }

    /// Counts the elements of `x` below and at-or-above the edge.
    ///
    /// ```
    /// use tessera_core::scale::BinEdge;
    ///
    /// let counts = BinEdge::new(1.0)?.count(&[0.5, -1.0, 2.0, f32::NAN]);
    /// assert_eq!((counts.lower, counts.upper), (1, 3));
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn count(self, x: &[f32]) -> BinCounts {
        // Magnitudes order like their bit patterns; NaN patterns lie above
        // infinity, so NaN lands in the upper bin.
        let edge = self.edge.to_bits();
        let upper = x
            .iter()
            .filter(|v| v.to_bits() & 0x7fff_ffff >= edge)
            .count();
        counts(x.len(), upper)
    }

    /// Counts the elements of a 16-bit slice below and at-or-above the edge,
    /// comparing the exact values the elements hold.
    ///
    /// ```
    /// use tessera_core::fp::f16;
    /// use tessera_core::scale::BinEdge;
    ///
    /// let counts = BinEdge::new(1.0)?.count_half(&[f16::from_f32(0.5), f16::from_f32(-4.0)]);
    /// assert_eq!((counts.lower, counts.upper), (1, 1));
    /// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
    /// ```
    #[must_use]
    pub fn count_half<H: HalfFloat>(self, x: &[H]) -> BinCounts {
        // The smallest magnitude pattern of H whose value is >= edge: the
        // rounded-to-nearest edge, or the next pattern up if that fell below.
        let nearest = H::from_f32(self.edge);
        let mut edge: u16 = crate::arch::cast(nearest);
        if nearest.to_f32() < self.edge {
            edge += 1;
        }
        let bits: &[u16] = crate::arch::cast_slice(x);
        let upper = bits.iter().filter(|&&b| b & 0x7fff >= edge).count();
        counts(x.len(), upper)
    }
}

impl Default for BinEdge {
    /// [`BinEdge::DEFAULT`].
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Counts from a length and an upper count.
fn counts(len: usize, upper: usize) -> BinCounts {
    let to_u64 = |n: usize| u64::try_from(n).unwrap_or(u64::MAX);
    BinCounts {
        lower: to_u64(len - upper),
        upper: to_u64(upper),
    }
}

/// What one replica's unscale-and-check step found, to be combined across
/// replicas (and micro-batches) before the scaler's update, so that every
/// replica skips or applies the step, and moves its scale, together.
///
/// [`merge`](Self::merge) is a logical or of `found_inf` and integer sums of
/// the counts: associative and commutative, so any reduction tree gives the
/// same result. For an all-reduce that only sums integers, use
/// [`to_words`](Self::to_words) and [`from_words`](Self::from_words).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct GradStats {
    /// Some unscaled gradient was infinite or NaN: the step must be skipped.
    pub found_inf: bool,
    /// Histogram counts of the scaled gradients (zero unless requested).
    pub bins: BinCounts,
}

impl From<bool> for GradStats {
    /// Just `found_inf`, with no histogram counts: what
    /// [`StaticLossScaler`](super::StaticLossScaler) and
    /// [`DynamicLossScaler`](super::DynamicLossScaler) use.
    fn from(found_inf: bool) -> Self {
        Self {
            found_inf,
            bins: BinCounts::default(),
        }
    }
}

impl GradStats {
    /// The statistics of both parts together.
    ///
    /// ```
    /// use tessera_core::scale::GradStats;
    ///
    /// let (ok, bad) = (GradStats::from(false), GradStats::from(true));
    /// assert!(ok.merge(bad).found_inf);
    /// ```
    #[must_use]
    pub const fn merge(self, other: Self) -> Self {
        Self {
            found_inf: self.found_inf | other.found_inf,
            bins: self.bins.merge(other.bins),
        }
    }

    /// `[found_inf as 0 or 1, lower, upper]`: element-wise wrapping sums of
    /// these arrays over replicas, rebuilt with [`from_words`](Self::from_words),
    /// equal the [`merge`](Self::merge) of the replicas' statistics.
    ///
    /// ```
    /// use tessera_core::scale::{BinCounts, GradStats};
    ///
    /// let s = GradStats { found_inf: true, bins: BinCounts { lower: 5, upper: 2 } };
    /// assert_eq!(GradStats::from_words(s.to_words()), s);
    /// ```
    #[must_use]
    pub const fn to_words(self) -> [u64; 3] {
        [self.found_inf as u64, self.bins.lower, self.bins.upper]
    }

    /// Rebuilds from summed [`to_words`](Self::to_words) arrays: `found_inf`
    /// is set when any replica set it (a non-zero first word).
    ///
    /// ```
    /// use tessera_core::scale::{BinCounts, GradStats};
    ///
    /// // Two replicas' stats, all-reduced by an integer sum.
    /// let a = GradStats { found_inf: false, bins: BinCounts { lower: 5, upper: 0 } };
    /// let b = GradStats { found_inf: true, bins: BinCounts { lower: 1, upper: 2 } };
    /// let (wa, wb) = (a.to_words(), b.to_words());
    /// let summed = core::array::from_fn(|k| wa[k] + wb[k]);
    /// assert_eq!(GradStats::from_words(summed), a.merge(b));
    /// ```
    #[must_use]
    pub const fn from_words(words: [u64; 3]) -> Self {
        Self {
            found_inf: words[0] != 0,
            bins: BinCounts {
                lower: words[1],
                upper: words[2],
            },
        }
    }
}

/// Unscales every gradient slice in place by `inv_scale` with the fused
/// kernels and returns what the replicas must combine: whether any unscaled
/// value is infinite or NaN, and, if `histogram` gives an edge, the
/// histogram counts of the values *before* unscaling (the scaled gradients,
/// as PopART's histogram sees them).
///
/// Slices of any mix of f32, f16 and bf16 come from any iterator; the
/// statistics of a split (by slice, or a slice cut in pieces) merged with
/// [`GradStats::merge`] equal those of the whole. Every slice is unscaled,
/// even after an infinity has been found: the kernels cost the same and the
/// caller may want the gradients for diagnostics.
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::scale::{BinEdge, GradSlice, unscale_grads};
///
/// let mut w = [4096.0f32, -8192.0];
/// let mut b = [f16::from_f32(1024.0)];
/// let stats = unscale_grads(
///     [GradSlice::from(&mut w), GradSlice::from(&mut b)],
///     1.0 / 1024.0,
///     Some(BinEdge::new(8192.0)?),
/// );
/// assert_eq!(w, [4.0, -8.0]);
/// assert_eq!(b[0], f16::ONE);
/// assert!(!stats.found_inf);
/// assert_eq!((stats.bins.lower, stats.bins.upper), (2, 1));
/// # Ok::<(), tessera_core::scale::ScalerConfigError>(())
/// ```
#[must_use]
pub fn unscale_grads<'a, I>(grads: I, inv_scale: f32, histogram: Option<BinEdge>) -> GradStats
where
    I: IntoIterator<Item = GradSlice<'a>>,
{
    let mut stats = GradStats::default();
    for mut grad in grads {
        if let Some(edge) = histogram {
            stats.bins = stats.bins.merge(grad.bins(edge));
        }
        stats.found_inf |= grad.unscale(inv_scale);
    }
    stats
}
