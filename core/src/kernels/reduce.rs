//! Reductions: dot, sum of squares and max-abs, f32 and 16-bit storage.

use wide::{f32x8, u32x8};

use crate::fp::HalfFloat;

use super::scalar::combine_lanes;
use super::{BLOCK, ExactSum, LANES};

/// Eight-lane chunks per block.
const CHUNKS: usize = BLOCK / LANES;

/// The SIMD form of the reference `block_sums` over `full` chunks of eight
/// terms (`term(c)` for elements `8c..8c + 8`) and, if `tail` is given, one
/// last partial chunk padded with `+0.0` terms.
///
/// Blocks run one after another: a block's eight lane sums are one chain of
/// 32 additions, about 0.4 cycles per element, which is already faster
/// than memory delivers large slices. (Interleaving four blocks to hide the
/// adder's latency made small slices faster but large ones three times
/// slower, by defeating the hardware prefetcher's sequential streams.)
#[inline(always)]
fn block_sums(full: usize, term: impl Fn(usize) -> f32x8, tail: Option<f32x8>) -> ExactSum {
    let mut sum = ExactSum::new();
    let mut tail = tail;
    let mut c = 0;
    while c < full {
        let end = full.min(c + CHUNKS);
        let mut acc = f32x8::ZERO;
        for k in c..end {
            acc += term(k);
        }
        if end - c < CHUNKS {
            // A short block is the last one and holds the tail chunk too.
            if let Some(t) = tail.take() {
                acc += t;
            }
        }
        sum.add(combine_lanes(acc.to_array()));
        c = end;
    }
    if let Some(t) = tail {
        // The tail chunk starts a block of its own.
        sum.add(combine_lanes(t.to_array()));
    }
    sum
}

/// The last `len % 8` elements of `x`, padded with `pad` to eight.
#[inline(always)]
fn padded<T: Copy>(tail: &[T], pad: T) -> Option<[T; LANES]> {
    if tail.is_empty() {
        return None;
    }
    let mut out = [pad; LANES];
    out[..tail.len()].copy_from_slice(tail);
    Some(out)
}

/// The exact sum of the block partials of `x * y` (see
/// [the order](super#determinism)): combine it with the partials of other
/// block-aligned pieces, then [`ExactSum::to_f32`].
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn dot_partial(x: &[f32], y: &[f32]) -> ExactSum {
    assert_eq!(x.len(), y.len(), "dot: length mismatch");
    let (x8, xt) = x.as_chunks::<LANES>();
    let (y8, yt) = y.as_chunks::<LANES>();
    let tail = padded(xt, 0.0)
        .zip(padded(yt, 0.0))
        .map(|(a, b)| f32x8::from(a) * f32x8::from(b));
    block_sums(x8.len(), |c| f32x8::from(x8[c]) * f32x8::from(y8[c]), tail)
}

/// The dot product `sum(x[i] * y[i])`, in the fixed order, rounded once.
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn dot(x: &[f32], y: &[f32]) -> f32 {
    dot_partial(x, y).to_f32()
}

/// The exact sum of the block partials of `x * x`.
#[must_use]
pub fn sum_of_squares_partial(x: &[f32]) -> ExactSum {
    let (x8, xt) = x.as_chunks::<LANES>();
    let tail = padded(xt, 0.0).map(|a| f32x8::from(a) * f32x8::from(a));
    block_sums(
        x8.len(),
        |c| {
            let v = f32x8::from(x8[c]);
            v * v
        },
        tail,
    )
}

/// The sum of squares `sum(x[i] * x[i])`, in the fixed order, rounded once.
#[must_use]
pub fn sum_of_squares(x: &[f32]) -> f32 {
    sum_of_squares_partial(x).to_f32()
}

/// The dot product of 16-bit vectors as an exact partial: the products of
/// the widened values are rounded to f32 and summed as in [`dot_partial`].
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn dot_half_partial<H: HalfFloat>(x: &[H], y: &[H]) -> ExactSum {
    assert_eq!(x.len(), y.len(), "dot_half: length mismatch");
    let (x8, xt) = x.as_chunks::<LANES>();
    let (y8, yt) = y.as_chunks::<LANES>();
    // H::default() is +0, which widens to +0.0.
    let tail = padded(xt, H::default())
        .zip(padded(yt, H::default()))
        .map(|(a, b)| H::widen_x8(a) * H::widen_x8(b));
    block_sums(x8.len(), |c| H::widen_x8(x8[c]) * H::widen_x8(y8[c]), tail)
}

/// The dot product of 16-bit vectors with f32 products and accumulation,
/// rounded once.
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn dot_half<H: HalfFloat>(x: &[H], y: &[H]) -> f32 {
    dot_half_partial(x, y).to_f32()
}

/// The sum of squares of a 16-bit vector as an exact partial.
#[must_use]
pub fn sum_of_squares_half_partial<H: HalfFloat>(x: &[H]) -> ExactSum {
    let (x8, xt) = x.as_chunks::<LANES>();
    let tail = padded(xt, H::default()).map(|a| {
        let v = H::widen_x8(a);
        v * v
    });
    block_sums(
        x8.len(),
        |c| {
            let v = H::widen_x8(x8[c]);
            v * v
        },
        tail,
    )
}

/// The sum of squares of a 16-bit vector with f32 squares and
/// accumulation, rounded once.
#[must_use]
pub fn sum_of_squares_half<H: HalfFloat>(x: &[H]) -> f32 {
    sum_of_squares_half_partial(x).to_f32()
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
    #[must_use]
    pub const fn new() -> Self {
        Self { bits: 0 }
    }

    /// Takes `|x|` into account.
    #[inline]
    pub fn add(&mut self, x: f32) {
        self.bits = self.bits.max(x.to_bits() & 0x7fff_ffff);
    }

    /// Takes every value `other` has seen into account.
    #[inline]
    pub fn merge(&mut self, other: &Self) {
        self.bits = self.bits.max(other.bits);
    }

    /// The largest magnitude as f32: `f32::NAN` if a NaN was seen.
    #[must_use]
    pub const fn to_f32(self) -> f32 {
        if self.bits > 0x7f80_0000 {
            f32::NAN
        } else {
            f32::from_bits(self.bits)
        }
    }

    /// The largest `|x|` bit pattern seen (0 to `0x7fff_ffff`).
    #[must_use]
    pub const fn to_bits(self) -> u32 {
        self.bits
    }

    /// Rebuilds from [`to_bits`](Self::to_bits) (the sign bit is ignored).
    #[must_use]
    pub const fn from_bits(bits: u32) -> Self {
        Self {
            bits: bits & 0x7fff_ffff,
        }
    }
}

/// The maximum of `bits & 0x7fff_ffff` over the f32 lanes `v`, folded into
/// `acc`.
#[inline(always)]
fn max_bits(acc: u32x8, v: f32x8) -> u32x8 {
    acc.max(v.to_bits() & u32x8::splat(0x7fff_ffff))
}

/// Finishes a lane-wise maximum, then adds the scalar tail.
#[inline(always)]
fn finish_max(acc: u32x8, tail: impl Iterator<Item = f32>) -> MaxAbs {
    let mut m = MaxAbs::from_bits(acc.to_array().into_iter().max().unwrap_or(0));
    for v in tail {
        m.add(v);
    }
    m
}

/// The largest magnitude of `x` as a combinable partial (any split works,
/// block-aligned or not).
#[must_use]
pub fn max_abs_partial(x: &[f32]) -> MaxAbs {
    let (x8, xt) = x.as_chunks::<LANES>();
    let acc = x8
        .iter()
        .fold(u32x8::ZERO, |acc, c| max_bits(acc, f32x8::from(*c)));
    finish_max(acc, xt.iter().copied())
}

/// The largest `|x[i]|`: NaN (`f32::NAN`) if any element is NaN, `0.0` for
/// an empty slice.
#[must_use]
pub fn max_abs(x: &[f32]) -> f32 {
    max_abs_partial(x).to_f32()
}

/// The largest magnitude of a 16-bit vector (widened to f32) as a
/// combinable partial.
#[must_use]
pub fn max_abs_half_partial<H: HalfFloat>(x: &[H]) -> MaxAbs {
    let (x8, xt) = x.as_chunks::<LANES>();
    let acc = x8
        .iter()
        .fold(u32x8::ZERO, |acc, c| max_bits(acc, H::widen_x8(*c)));
    finish_max(acc, xt.iter().map(|v| v.to_f32()))
}

/// The largest `|x[i]|` of a 16-bit vector as f32: NaN if any element is
/// NaN, `0.0` for an empty slice.
#[must_use]
pub fn max_abs_half<H: HalfFloat>(x: &[H]) -> f32 {
    max_abs_half_partial(x).to_f32()
}
