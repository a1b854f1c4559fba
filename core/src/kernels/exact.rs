//! The exact accumulators: [`ExactSum`] of f32 values and [`ExactDot`] of
//! f32 products, rounded once at the end.

use super::fixed::Fixed;

/// [`ExactSum`]'s integer: 2^-149 units (the smallest f32 subnormal), ten
/// 32-bit digits.
pub(super) type SumFixed = Fixed<10, 149>;
/// [`ExactDot`]'s integer: 2^-298 units (the smallest product of two f32
/// subnormals), twenty 32-bit digits.
pub(super) type DotFixed = Fixed<20, 298>;

/// An exact sum of f32 values, rounded once at the end.
///
/// Finite addends go into a two's-complement fixed-point integer (Kulisch
/// style) whose unit is 2^-149, held as 32-bit digits in `i64` limbs;
/// infinities and NaNs are counted. Integer addition is associative and
/// commutative, so any grouping and any order of [`add`](Self::add) and
/// [`merge`](Self::merge) calls over the same multiset of values gives the
/// same state, bit for bit, and [`to_f32`](Self::to_f32) the same result.
/// [`exact_sum_partial`](super::exact_sum_partial) fills one from a slice
/// (f32, f16 or bf16) with SIMD.
///
/// ```
/// use tessera_core::kernels::ExactSum;
///
/// let mut a = ExactSum::new();
/// a.add(1.0e30);
/// a.add(1.0);
/// let mut b = ExactSum::new();
/// b.add(-1.0e30);
/// b.merge(&a);
/// assert_eq!(b.to_f32(), 1.0); // plain f32 addition would give 0.0
/// ```
///
/// # Range
///
/// Exact while the running total stays below 2^202 in magnitude, which takes
/// more than 2^74 additions of `f32::MAX`. Beyond that the top limb wraps
/// (no panic) and the result is unspecified.
///
/// # All-reduce as integers
///
/// [`limbs`](Self::limbs) exposes the state as [`ExactSum::LIMBS`] integers:
/// limbs `0..10` are the digits, least significant first (value =
/// sum of `limb[i] * 2^(32 i - 149)`; digits `0..9` are in `0..2^32` and
/// digit 9 is signed), limbs 10, 11 and 12 count the `+inf`, `-inf` and NaN
/// addends. Adding the limb arrays of fewer than 2^31 accumulators element by
/// element (wrapping `i64` addition, as an `MPI_SUM` all-reduce does) and
/// rebuilding with [`from_limbs`](Self::from_limbs) gives exactly their
/// [`merge`](Self::merge).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExactSum(pub(super) SumFixed);

impl Default for ExactSum {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactSum {
    /// The number of integers in [`limbs`](Self::limbs).
    pub const LIMBS: usize = SumFixed::LIMBS;

    /// The empty sum (zero).
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// assert_eq!(ExactSum::new().to_f32(), 0.0);
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self(SumFixed::ZERO)
    }

    /// Adds `x` exactly.
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let mut s = ExactSum::new();
    /// for x in [1e30f32, 1.0, -1e30] {
    ///     s.add(x);
    /// }
    /// assert_eq!(s.to_f32(), 1.0); // exact: f32 addition would give 0
    /// ```
    #[inline]
    pub fn add(&mut self, x: f32) {
        self.0.add_f32(x);
    }

    /// Adds every value of `other` (exactly).
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let (mut a, mut b) = (ExactSum::new(), ExactSum::new());
    /// a.add(0.5);
    /// b.add(0.25);
    /// a.merge(&b);
    /// assert_eq!(a.to_f32(), 0.75);
    /// ```
    pub fn merge(&mut self, other: &Self) {
        self.0.merge(&other.0);
    }

    /// The state as integers (see [the type docs](Self#all-reduce-as-integers)).
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let mut s = ExactSum::new();
    /// s.add(3.0);
    /// assert_eq!(ExactSum::from_limbs(s.limbs()), s);
    /// ```
    #[must_use]
    pub fn limbs(&self) -> [i64; Self::LIMBS] {
        let mut limbs = [0; Self::LIMBS];
        self.0.limbs_into(&mut limbs);
        limbs
    }

    /// Rebuilds a sum from [`limbs`](Self::limbs), or from the element-wise
    /// sum of several accumulators' limbs. Any digits are accepted (they are
    /// renormalised); a nonzero count means "present".
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// // Two replicas' sums, all-reduced as integers.
    /// let (mut a, mut b) = (ExactSum::new(), ExactSum::new());
    /// a.add(1.5);
    /// b.add(2.5);
    /// let (la, lb) = (a.limbs(), b.limbs());
    /// let summed = core::array::from_fn(|k| la[k] + lb[k]);
    /// assert_eq!(ExactSum::from_limbs(summed).to_f32(), 4.0);
    /// ```
    #[must_use]
    pub fn from_limbs(limbs: [i64; Self::LIMBS]) -> Self {
        Self(SumFixed::from_limbs(&limbs))
    }

    /// The sum rounded once to f32: to nearest, ties to even.
    ///
    /// - NaN if a NaN was added, or both `+inf` and `-inf`; otherwise `+inf`
    ///   or `-inf` if one was added. NaN is always `f32::NAN`.
    /// - A finite total of magnitude `2^128 - 2^103` (halfway between
    ///   `f32::MAX` and 2^128) or more gives infinity with its sign.
    /// - Subnormal totals are exact; an exact zero is `+0.0`.
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let mut s = ExactSum::new();
    /// s.add(f32::INFINITY);
    /// s.add(f32::NEG_INFINITY);
    /// assert!(s.to_f32().is_nan());
    /// ```
    #[must_use]
    pub fn to_f32(&self) -> f32 {
        self.0.rounded()
    }
}

/// An exact sum of f32 products (and values), rounded once at the end: the
/// state of an exact dot product, or of one element of an exact matrix
/// product ([`exact_gemm`](super::exact_gemm)), such as a weight gradient
/// `dW = sum_i x_i^T d_i` summed over samples, micro-batches and ranks.
///
/// The product of two f32 values is exact in f64 (48 significant bits,
/// magnitudes from 2^-298 to below 2^256), so it is added exactly to a
/// fixed-point integer whose unit is 2^-298, as [`ExactSum`] adds values;
/// infinities and NaN (including `inf * 0`) are counted. Any order and
/// grouping of [`add_product`](Self::add_product), [`add`](Self::add) and
/// [`merge`](Self::merge) over the same terms gives the same state, bit for
/// bit; [`to_f32`](Self::to_f32) rounds it once (the rules of
/// [`ExactSum::to_f32`], a tiny nonzero total rounding to a signed zero).
///
/// ```
/// use tessera_core::kernels::ExactDot;
///
/// let mut d = ExactDot::new();
/// d.add_product(1e20, 1e20); // 1e40: beyond f32, kept exactly
/// d.add_product(3.0, 0.5);
/// d.add_product(-1e20, 1e20);
/// assert_eq!(d.to_f32(), 1.5);
/// ```
///
/// # Several contributions on one rank
///
/// A rank holding several contributions (micro-batches, tiles, threads)
/// [`merge`](Self::merge)s their states first ([`merge_exact`](super::merge_exact)
/// for slices), then all-reduces one state per element as integers: the
/// element-wise wrapping sum of the ranks' [`limbs`](Self::limbs), rebuilt
/// with [`from_limbs`](Self::from_limbs), is their merge, whatever the
/// order, the algorithm and the number of ranks (below 2^31 states).
/// Limbs `0..20` are the digits (value = sum of `limb[i] * 2^(32 i - 298)`),
/// limbs 20, 21 and 22 count `+inf`, `-inf` and NaN terms.
///
/// # Range
///
/// Exact while the running total stays below 2^373 in magnitude: more than
/// 2^117 products of `f32::MAX` by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExactDot(pub(super) DotFixed);

impl Default for ExactDot {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactDot {
    /// The number of integers in [`limbs`](Self::limbs).
    pub const LIMBS: usize = DotFixed::LIMBS;

    /// The empty sum (zero).
    ///
    /// ```
    /// use tessera_core::kernels::ExactDot;
    ///
    /// assert_eq!(ExactDot::new().to_f32(), 0.0);
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self(DotFixed::ZERO)
    }

    /// Adds `x * y` exactly (the product of the two f32 values, unrounded).
    ///
    /// ```
    /// use tessera_core::kernels::ExactDot;
    ///
    /// let mut d = ExactDot::new();
    /// d.add_product(f32::MIN_POSITIVE, f32::MIN_POSITIVE); // 2^-252
    /// d.add_product(0.0, f32::INFINITY);
    /// assert!(d.to_f32().is_nan()); // inf * 0
    /// ```
    #[inline]
    pub fn add_product(&mut self, x: f32, y: f32) {
        self.0.add_f64(f64::from(x) * f64::from(y));
    }

    /// Adds `x` exactly.
    ///
    /// ```
    /// use tessera_core::kernels::ExactDot;
    ///
    /// let mut d = ExactDot::new();
    /// d.add(0.25);
    /// d.add_product(0.5, 0.5);
    /// assert_eq!(d.to_f32(), 0.5);
    /// ```
    #[inline]
    pub fn add(&mut self, x: f32) {
        self.0.add_f32(x);
    }

    /// Adds every term of `other` (exactly).
    ///
    /// ```
    /// use tessera_core::kernels::ExactDot;
    ///
    /// let (mut a, mut b) = (ExactDot::new(), ExactDot::new());
    /// a.add_product(3.0, 1e-30);
    /// b.add_product(-1.0, 3e-30);
    /// a.merge(&b);
    /// assert_eq!(a.to_f32(), (3.0f64 * 1e-30f32 as f64 - 3e-30f32 as f64) as f32);
    /// ```
    pub fn merge(&mut self, other: &Self) {
        self.0.merge(&other.0);
    }

    /// The state as integers (see [the type docs](Self#several-contributions-on-one-rank)).
    ///
    /// ```
    /// use tessera_core::kernels::ExactDot;
    ///
    /// let mut d = ExactDot::new();
    /// d.add_product(3.0, -7.0);
    /// assert_eq!(ExactDot::from_limbs(d.limbs()), d);
    /// ```
    #[must_use]
    pub fn limbs(&self) -> [i64; Self::LIMBS] {
        let mut limbs = [0; Self::LIMBS];
        self.0.limbs_into(&mut limbs);
        limbs
    }

    /// Rebuilds a state from [`limbs`](Self::limbs), or from the
    /// element-wise (wrapping) sum of several states' limbs.
    ///
    /// ```
    /// use tessera_core::kernels::ExactDot;
    ///
    /// // Two ranks' states, all-reduced as integers.
    /// let (mut a, mut b) = (ExactDot::new(), ExactDot::new());
    /// a.add_product(1.5, 2.0);
    /// b.add_product(-0.5, 2.0);
    /// let (la, lb) = (a.limbs(), b.limbs());
    /// let summed = core::array::from_fn(|k| la[k].wrapping_add(lb[k]));
    /// assert_eq!(ExactDot::from_limbs(summed).to_f32(), 2.0);
    /// ```
    #[must_use]
    pub fn from_limbs(limbs: [i64; Self::LIMBS]) -> Self {
        Self(DotFixed::from_limbs(&limbs))
    }

    /// The total rounded once to f32 (as [`ExactSum::to_f32`]).
    ///
    /// ```
    /// use tessera_core::kernels::ExactDot;
    ///
    /// let mut d = ExactDot::new();
    /// d.add_product(f32::MAX, 2.0);
    /// d.add_product(f32::MAX, -1.5);
    /// assert_eq!(d.to_f32(), f32::MAX * 0.5);
    /// ```
    #[must_use]
    pub fn to_f32(&self) -> f32 {
        self.0.rounded()
    }
}

/// `(m, n)` of an [`exact_sum_products`](super::exact_sum_products) call, checked.
pub(super) fn products_shape(
    rows: usize,
    a: &[f32],
    b: &[f32],
    sums: &[ExactSum],
) -> (usize, usize) {
    let (m, n) = match rows {
        0 => (0, 0),
        _ => (a.len() / rows, b.len() / rows),
    };
    let fits = a.len() == rows * m && b.len() == rows * n;
    assert!(
        fits && (rows == 0 || sums.len() == m * n),
        "exact_sum_products: shape mismatch"
    );
    (m, n)
}
