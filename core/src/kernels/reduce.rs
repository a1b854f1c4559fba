//! Reductions over any storage format: dot, sum of squares and max-abs.

use crate::arch::{self, F32s, Simd, U32s, kernel};
use crate::fp::{self, Element};

use super::scalar::{self, combine_lanes};
use super::{BLOCK, ExactSum, LANES};

/// The SIMD form of the reference `block_sums` over `n` elements:
/// `term(at)` gives the terms of elements `at..at + S::LANES`, `one(at)`
/// the term of element `at` (for the elements after a block's last full
/// vector).
///
/// Blocks run one after another: a block's eight lane sums are one chain of
/// 32 additions, about 0.4 cycles per element, which is already faster
/// than memory delivers large slices. (Interleaving four blocks to hide the
/// adder's latency made small slices faster but large ones three times
/// slower, by defeating the hardware prefetcher's sequential streams.)
#[inline(always)]
fn block_sums<S: Simd>(
    n: usize,
    term: impl Fn(usize) -> S::F,
    one: impl Fn(usize) -> f32,
) -> ExactSum {
    let mut sum = ExactSum::new();
    for start in (0..n).step_by(BLOCK) {
        let end = n.min(start + BLOCK);
        let vector_end = start + (end - start) / S::LANES * S::LANES;
        let mut acc = S::acc_zero();
        for at in (start..vector_end).step_by(S::LANES) {
            acc = S::accumulate(acc, term(at));
        }
        let mut lanes = S::acc_lanes(acc);
        for at in vector_end..end {
            lanes[(at - start) % LANES] += one(at);
        }
        sum.add(combine_lanes(lanes));
    }
    sum
}

/// The exact sum of the block partials of `x * y` (see
/// [the order](super#determinism)), the products taken in f32 of the
/// widened values: combine it with the partials of other block-aligned
/// pieces, then [`ExactSum::to_f32`].
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::kernels::{dot, dot_partial, BLOCK};
///
/// let (x, y) = (vec![0.5f32; 3 * BLOCK], vec![2.0f32; 3 * BLOCK]);
/// let mut sum = dot_partial(&x[BLOCK..], &y[BLOCK..]);
/// sum.merge(&dot_partial(&x[..BLOCK], &y[..BLOCK]));
/// assert_eq!(sum.to_f32(), dot(&x, &y));
///
/// let h = [f16::from_f32(1.5); 4];
/// assert_eq!(dot_partial(&h, &h).to_f32(), 9.0);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn dot_partial<T: Element>(x: &[T], y: &[T]) -> ExactSum {
    assert_eq!(x.len(), y.len(), "dot: length mismatch");
    arch::dispatch(Dot { x, y })
}

/// The dot product `sum(x[i] * y[i])` of the widened values, with f32
/// products and accumulation in the fixed order, rounded once.
///
/// ```
/// use tessera_core::fp::bf16;
/// use tessera_core::kernels::dot;
///
/// assert_eq!(dot(&[1.0f32, 2.0, 3.0], &[4.0, 5.0, 6.0]), 32.0);
/// let (x, y) = ([bf16::from_f32(2.0); 3], [bf16::from_f32(0.5); 3]);
/// assert_eq!(dot(&x, &y), 3.0);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn dot<T: Element>(x: &[T], y: &[T]) -> f32 {
    dot_partial(x, y).to_f32()
}

/// The exact sum of the block partials of `x * x` (widened, squared in
/// f32).
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::kernels::sum_of_squares_partial;
///
/// let mut sum = sum_of_squares_partial(&[3.0f32]);
/// sum.merge(&sum_of_squares_partial(&[4.0f32]));
/// assert_eq!(sum.to_f32(), 25.0);
/// assert_eq!(sum_of_squares_partial(&[f16::from_f32(3.0), f16::from_f32(4.0)]).to_f32(), 25.0);
/// ```
#[must_use]
pub fn sum_of_squares_partial<T: Element>(x: &[T]) -> ExactSum {
    arch::dispatch(SumOfSquares { x })
}

/// The sum of squares `sum(x[i] * x[i])` of the widened values, with f32
/// squares and accumulation in the fixed order, rounded once.
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::kernels::sum_of_squares;
///
/// assert_eq!(sum_of_squares(&[3.0f32, 4.0]), 25.0);
/// assert_eq!(sum_of_squares(&[f16::ONE; 9]), 9.0);
/// ```
#[must_use]
pub fn sum_of_squares<T: Element>(x: &[T]) -> f32 {
    sum_of_squares_partial(x).to_f32()
}

kernel! {
    Dot<'a, T: Element> { x: &'a [T], y: &'a [T] } -> ExactSum;
    run<S>(k) {
        let (x, y) = (k.x, k.y);
        block_sums::<S>(
            x.len(),
            #[inline(always)]
            |at| {
                arch::prefetch_ahead(x, at);
                arch::prefetch_ahead(y, at);
                fp::load::<S, T>(&x[at..]) * fp::load::<S, T>(&y[at..])
            },
            #[inline(always)] |at| x[at].load() * y[at].load(),
        )
    }
    scalar(k) { scalar::dot_partial(k.x, k.y) }
}

kernel! {
    SumOfSquares<'a, T: Element> { x: &'a [T] } -> ExactSum;
    run<S>(k) {
        let x = k.x;
        block_sums::<S>(
            x.len(),
            #[inline(always)]
            |at| {
                arch::prefetch_ahead(x, at);
                let v = fp::load::<S, T>(&x[at..]);
                v * v
            },
            #[inline(always)] |at| x[at].load() * x[at].load(),
        )
    }
    scalar(k) { scalar::sum_of_squares_partial(k.x) }
}

/// The running maximum magnitude of f32 values: a combinable, order-free
/// partial of [`max_abs`].
///
/// It keeps the largest `bits & 0x7fff_ffff`; magnitudes order like their
/// bit patterns and NaN patterns lie above infinity, so the result depends
/// only on the multiset of values. To all-reduce it across replicas, take
/// the integer maximum of [`to_bits`](Self::to_bits).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct MaxAbs {
    bits: u32,
}

impl MaxAbs {
    /// Nothing seen yet (the maximum of nothing is `0.0`).
    ///
    /// ```
    /// use tessera_core::kernels::MaxAbs;
    ///
    /// assert_eq!(MaxAbs::new().to_f32(), 0.0);
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self { bits: 0 }
    }

    /// Takes `|x|` into account.
    ///
    /// ```
    /// use tessera_core::kernels::MaxAbs;
    ///
    /// let mut m = MaxAbs::new();
    /// m.add(-3.0);
    /// m.add(2.0);
    /// assert_eq!(m.to_f32(), 3.0);
    /// ```
    #[inline]
    pub fn add(&mut self, x: f32) {
        self.bits = self.bits.max(x.to_bits() & 0x7fff_ffff);
    }

    /// Takes every value `other` has seen into account.
    ///
    /// ```
    /// use tessera_core::kernels::{max_abs_partial, MaxAbs};
    ///
    /// let mut m: MaxAbs = max_abs_partial(&[1.0, -7.0]);
    /// m.merge(&max_abs_partial(&[5.0]));
    /// assert_eq!(m.to_f32(), 7.0);
    /// ```
    #[inline]
    pub fn merge(&mut self, other: &Self) {
        self.bits = self.bits.max(other.bits);
    }

    /// The largest magnitude as f32: `f32::NAN` if a NaN was seen.
    ///
    /// ```
    /// use tessera_core::kernels::max_abs_partial;
    ///
    /// assert!(max_abs_partial(&[1.0, f32::NAN]).to_f32().is_nan());
    /// ```
    #[must_use]
    pub const fn to_f32(self) -> f32 {
        if self.bits > 0x7f80_0000 {
            f32::NAN
        } else {
            f32::from_bits(self.bits)
        }
    }

    /// The largest `|x|` bit pattern seen (0 to `0x7fff_ffff`).
    ///
    /// ```
    /// use tessera_core::kernels::max_abs_partial;
    ///
    /// assert_eq!(max_abs_partial(&[-1.0]).to_bits(), 1.0f32.to_bits());
    /// ```
    #[must_use]
    pub const fn to_bits(self) -> u32 {
        self.bits
    }

    /// Rebuilds from [`to_bits`](Self::to_bits) (the sign bit is ignored).
    ///
    /// ```
    /// use tessera_core::kernels::{max_abs_partial, MaxAbs};
    ///
    /// // Replicas all-reduce the bits with an integer maximum.
    /// let (a, b) = (max_abs_partial(&[2.0]), max_abs_partial(&[-9.0]));
    /// assert_eq!(MaxAbs::from_bits(a.to_bits().max(b.to_bits())).to_f32(), 9.0);
    /// ```
    #[must_use]
    pub const fn from_bits(bits: u32) -> Self {
        Self {
            bits: bits & 0x7fff_ffff,
        }
    }
}

kernel! {
    MaxAbsOf<'a, T: Element> { x: &'a [T] } -> MaxAbs;
    run<S>(k) {
        let magnitude = S::U::splat(0x7fff_ffff);
        let mut acc = S::U::splat(0);
        let mut xs = k.x.chunks_exact(S::LANES);
        for (i, c) in (&mut xs).enumerate() {
            arch::prefetch_ahead(k.x, i * S::LANES);
            acc = acc.max(fp::load::<S, T>(c).to_bits() & magnitude);
        }
        let mut lanes = [0u32; 16];
        acc.write_to(&mut lanes);
        let mut m = MaxAbs::from_bits(lanes.into_iter().max().unwrap_or(0));
        for v in xs.remainder() {
            m.add(v.load());
        }
        m
    }
    scalar(k) { scalar::max_abs_partial(k.x) }
}

/// The largest magnitude of `x` (widened to f32) as a combinable partial
/// (any split works, block-aligned or not).
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::kernels::max_abs_partial;
///
/// let (x, y) = ([1.0f32, -4.0], [3.0f32]);
/// let mut m = max_abs_partial(&x);
/// m.merge(&max_abs_partial(&y)); // any split, aligned or not
/// assert_eq!(m.to_f32(), 4.0);
/// assert_eq!(max_abs_partial(&[f16::from_f32(-6.0), f16::ONE]).to_f32(), 6.0);
/// ```
#[must_use]
pub fn max_abs_partial<T: Element>(x: &[T]) -> MaxAbs {
    arch::dispatch(MaxAbsOf { x })
}

/// The largest `|x[i]|` as f32: NaN (`f32::NAN`) if any element is NaN,
/// `0.0` for an empty slice.
///
/// ```
/// use tessera_core::fp::bf16;
/// use tessera_core::kernels::max_abs;
///
/// assert_eq!(max_abs(&[0.5f32, -2.5, 1.0]), 2.5);
/// assert_eq!(max_abs::<f32>(&[]), 0.0);
/// assert_eq!(max_abs(&[bf16::from_f32(-0.25), bf16::ONE]), 1.0);
/// ```
#[must_use]
pub fn max_abs<T: Element>(x: &[T]) -> f32 {
    max_abs_partial(x).to_f32()
}
