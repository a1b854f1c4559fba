//! Exact reductions: sums and dot products of f32, f16 or bf16 values, and
//! the products along a matrix product's reduction dimension, each the
//! exact total rounded once, whatever the order and split of the terms.
//!
//! The result is a function of the multiset of terms alone, so a SIMD
//! kernel equals its scalar twin (which adds term by term into the exact
//! state) bit for bit by construction, and blocks are an implementation
//! detail: any split into pieces, merged in any order, gives the same bits.
//!
//! The fast path works on blocks of up to 256 terms, with f64 sums that
//! are exact in any order (so the lanes' order is free), and adds one or
//! two f64 values per block to the exact state:
//!
//! - values: when the block's exponents span at most 21 binades, every
//!   value is a multiple of the smallest one's unit and their f64 sum
//!   stays below `2^53` of those units: plain f64 addition is exact;
//! - products (exact in f64): under the bound `2^e` of the block's
//!   products (from its largest `|x|` and `|y|`), each is split into
//!   integers below `2^45` on the grids `2^(e - 45)` and `2^(e - 90)`,
//!   whose sums of 256 stay below `2^53`.
//!
//! When that does not hold (a wider span of values, a product with bits
//! below the second grid, a term that is not finite), the block's terms
//! are added one by one instead: the same state, more slowly.

use crate::arch::{self, F32s, Simd, kernel};
use crate::fp::sealed::Format;
use crate::fp::{self, Element};

use super::fixed::Fixed;
use super::{ExactDot, ExactSum, GemmShape, scalar};

/// Terms per block: 2^8 integers below `2^WINDOW` sum below `2^53`.
const TERMS: usize = 256;
/// Bits of a grid integer.
const WINDOW: i32 = 45;
/// `1.5 * 2^52`: adding and subtracting it rounds an f64 below `2^51` in
/// magnitude to an integer.
const ROUND: f64 = 6_755_399_441_055_744.0;
/// Lanes of the plain loops (vectorised for the backend's width).
const W: usize = 8;

/// `2^k` as an f64, for `-1022 <= k <= 1023`.
#[inline(always)]
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// `f(lanes)` for `x` in chunks of `W`, the last padded with zeros.
#[inline(always)]
fn each_chunk(x: &[f32], mut f: impl FnMut(&[f32; W])) {
    let chunks = x.chunks_exact(W);
    let mut last = [0.0f32; W];
    last[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    for c in chunks {
        f(c.try_into().expect("W lanes"));
    }
    f(&last);
}

/// `f(x lanes, y lanes)` for `x` and `y` (of one length) in chunks of
/// `W`, the last padded with zeros.
#[inline(always)]
fn each_pair(x: &[f32], y: &[f32], mut f: impl FnMut(&[f32; W], &[f32; W])) {
    let (xs, ys) = (x.chunks_exact(W), y.chunks_exact(W));
    let (mut lx, mut ly) = ([0.0f32; W], [0.0f32; W]);
    lx[..xs.remainder().len()].copy_from_slice(xs.remainder());
    ly[..ys.remainder().len()].copy_from_slice(ys.remainder());
    for (c, d) in xs.zip(ys) {
        f(
            c.try_into().expect("W lanes"),
            d.try_into().expect("W lanes"),
        );
    }
    f(&lx, &ly);
}

/// Prefetches the lines 4 KiB ahead of the block at
/// `start` (a block's arithmetic is long enough that the hardware
/// prefetcher alone falls behind, as for the fixed-order reductions).
#[inline(always)]
fn prefetch_block<T>(x: &[T], start: usize) {
    let line = 64 / size_of::<T>();
    for at in (start..start + TERMS).step_by(line) {
        arch::prefetch_ahead(x, at);
    }
}

/// The exponent field of a magnitude pattern, subnormals' as 1 (their
/// unit is the smallest normals').
#[inline(always)]
fn field(abs: u32) -> i32 {
    ((abs >> 23) as i32).max(1)
}

/// Adds the values of `x` (at most [`TERMS`]) to `state` exactly.
///
/// A value with exponent field `e` is a multiple of `2^(e - 150)` and
/// below `2^(e - 126)`; when the block's fields span at most 21, its
/// values are multiples of the smallest one's unit `u` and their sum
/// stays below `2^(8 + 24 + 21) u = 2^53 u`, so plain f64 addition is
/// exact in any order. Otherwise, or for infinities and NaN, the values
/// are added one by one.
#[inline(always)]
fn add_values(state: &mut Fixed<10, 149>, x: &[f32]) {
    // One pass: the f64 sum, the largest and the smallest nonzero
    // magnitude (zero wraps to u32::MAX: no minimum).
    let mut acc = [0.0f64; W];
    let (mut hi, mut lo) = ([0u32; W], [u32::MAX; W]);
    each_chunk(
        x,
        #[inline(always)]
        |c| {
            for j in 0..W {
                acc[j] += f64::from(c[j]);
                let abs = c[j].to_bits() & 0x7fff_ffff;
                hi[j] = hi[j].max(abs);
                lo[j] = lo[j].min(abs.wrapping_sub(1));
            }
        },
    );
    let hi = hi.into_iter().max().unwrap_or(0);
    let lo = lo.into_iter().min().unwrap_or(u32::MAX).wrapping_add(1);
    if lo == 0 {
        return; // all zeros
    }
    if hi >= 0x7f80_0000 || field(hi) - field(lo) > 21 {
        return add_each(state, x.len(), |i| f64::from(x[i]));
    }
    state.add_f64(acc.iter().sum());
}

/// Adds the products `x[i] * y[i]` (at most [`TERMS`]) to `state` exactly.
///
/// `x = a 2^(ex - 150)` with an integer `a` below `2^24` (`ex` the exponent
/// field, 1 for subnormals), so a nonzero product is a multiple of
/// `2^(ex + ey - 300)` and below `2^e`, `e` from the block's largest `|x|`
/// and `|y|`. When every product is a multiple of `2^(e - 90)`, each splits
/// exactly into integers below `2^45` on the grids `2^(e - 45)` and
/// `2^(e - 90)`, whose sums of 256 stay below `2^53`: exact f64 sums in
/// any order. Otherwise, or for infinities and NaN, the products are added
/// one by one.
#[inline(always)]
fn add_products(state: &mut Fixed<20, 298>, x: &[f32], y: &[f32]) {
    let (mut hx, mut hy, mut lo) = ([0u32; W], [0u32; W], [u32::MAX; W]);
    each_pair(
        x,
        y,
        #[inline(always)]
        |c, d| {
            for j in 0..W {
                let (a, b) = (c[j].to_bits() & 0x7fff_ffff, d[j].to_bits() & 0x7fff_ffff);
                hx[j] = hx[j].max(a);
                hy[j] = hy[j].max(b);
                // The product's unit exponent (plus 300); none for zero.
                let unit = (a >> 23).max(1) + (b >> 23).max(1);
                lo[j] = lo[j].min(if a == 0 || b == 0 { u32::MAX } else { unit });
            }
        },
    );
    let (hx, hy) = (hx.into_iter().max(), hy.into_iter().max());
    let (hx, hy) = (hx.unwrap_or(0), hy.unwrap_or(0));
    let lo = lo.into_iter().min().unwrap_or(u32::MAX);
    if hx >= 0x7f80_0000 || hy >= 0x7f80_0000 {
        return add_each(state, x.len(), |i| f64::from(x[i]) * f64::from(y[i]));
    }
    if lo == u32::MAX {
        return; // every product is zero
    }
    // |x y| < 2^(ex - 126) 2^(ey - 126) = 2^e; units down to 2^(e - 90).
    let top = field(hx) + field(hy);
    if top - lo as i32 > 2 * WINDOW - 48 {
        return add_each(state, x.len(), |i| f64::from(x[i]) * f64::from(y[i]));
    }
    let g = top - 252 - WINDOW;
    let (scale, next) = (pow2(-g), pow2(WINDOW));
    let (mut high, mut low) = ([0.0f64; W], [0.0f64; W]);
    each_pair(
        x,
        y,
        #[inline(always)]
        |c, d| {
            for j in 0..W {
                // Exact: the product, power-of-two scalings in range, and
                // z - q the bits of z below its integer part (an integer
                // once scaled, by the unit check).
                let z = f64::from(c[j]) * f64::from(d[j]) * scale;
                let q = (z + ROUND) - ROUND;
                high[j] += q;
                low[j] += (z - q) * next;
            }
        },
    );
    // Integers below 2^53, then exact scalings.
    state.add_f64(high.iter().sum::<f64>() * pow2(g));
    state.add_f64(low.iter().sum::<f64>() * pow2(g - WINDOW));
}

/// Adds the terms one by one (exact, any terms).
#[inline(never)]
fn add_each<const D: usize, const LSB: usize>(
    state: &mut Fixed<D, LSB>,
    n: usize,
    term: impl Fn(usize) -> f64,
) {
    for i in 0..n {
        state.add_f64(term(i));
    }
}

/// `x` as f32 values: `x` itself, or widened into `buf` (`x.len() <=
/// TERMS`).
#[inline(always)]
fn widened<'b, S: Simd, T: Element>(x: &'b [T], buf: &'b mut [f32; TERMS]) -> &'b [f32] {
    if T::FORMAT == Format::F32 {
        return arch::cast_slice(x);
    }
    let full = x.len() / S::LANES * S::LANES;
    for at in (0..full).step_by(S::LANES) {
        fp::load::<S, T>(&x[at..]).store(&mut buf[at..]);
    }
    for i in full..x.len() {
        buf[i] = x[i].load();
    }
    &buf[..x.len()]
}

/// The exact sum of `x` (widened to f32) as a state to merge with other
/// pieces' (any split, any order), then round with [`ExactSum::to_f32`].
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::kernels::{exact_sum, exact_sum_partial};
///
/// let x: Vec<f32> = (0..1000).map(|i| (i as f32 - 500.0) * 1e-3).collect();
/// let mut s = exact_sum_partial(&x[..123]); // any split
/// s.merge(&exact_sum_partial(&x[123..]));
/// assert_eq!(s.to_f32().to_bits(), exact_sum(&x).to_bits());
/// assert_eq!(exact_sum_partial(&[f16::from_f32(0.5); 3]).to_f32(), 1.5);
/// ```
#[must_use]
pub fn exact_sum_partial<T: Element>(x: &[T]) -> ExactSum {
    arch::dispatch(ExactSumOf { x })
}

/// `sum(x[i])` of the widened values, exact, rounded once to f32 (to
/// nearest even; NaN if a term is NaN or `+inf` meets `-inf`, a zero total
/// `+0.0`): the same bits for every order and split of `x`.
///
/// ```
/// use tessera_core::fp::bf16;
/// use tessera_core::kernels::exact_sum;
///
/// assert_eq!(exact_sum(&[1e30f32, 1.0, -1e30]), 1.0); // f32 addition: 0
/// assert_eq!(exact_sum(&[bf16::from_f32(3.0), bf16::from_f32(-0.5)]), 2.5);
/// ```
#[must_use]
pub fn exact_sum<T: Element>(x: &[T]) -> f32 {
    exact_sum_partial(x).to_f32()
}

/// The exact dot product of `x` and `y` (widened to f32; each product
/// exact) as a state to merge with other pieces' (any split, any order).
///
/// ```
/// use tessera_core::kernels::{exact_dot, exact_dot_partial};
///
/// let x: Vec<f32> = (0..700).map(|i| 1.0 / (i as f32 + 1.0)).collect();
/// let mut d = exact_dot_partial(&x[500..], &x[500..]);
/// d.merge(&exact_dot_partial(&x[..500], &x[..500]));
/// assert_eq!(d.to_f32().to_bits(), exact_dot(&x, &x).to_bits());
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn exact_dot_partial<T: Element>(x: &[T], y: &[T]) -> ExactDot {
    assert_eq!(x.len(), y.len(), "exact_dot: length mismatch");
    arch::dispatch(ExactDotOf { x, y })
}

/// `sum(x[i] * y[i])` of the widened values, the products and their sum
/// exact, rounded once to f32 (as [`exact_sum`]; `inf * 0` is NaN).
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::kernels::exact_dot;
///
/// assert_eq!(exact_dot(&[1e20f32, 1.0, -1e20], &[1e20f32, 0.5, 1e20]), 0.5);
/// let h = [f16::from_f32(0.1); 3];
/// assert_eq!(exact_dot(&h, &h), 3.0 * f16::from_f32(0.1).to_f32().powi(2));
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
#[must_use]
pub fn exact_dot<T: Element>(x: &[T], y: &[T]) -> f32 {
    exact_dot_partial(x, y).to_f32()
}

/// `acc[i, j] += sum_p op(a)[i, p] op(b)[p, j]` exactly (see [`GemmShape`]
/// for the layouts; `acc` is `[m, n]` row-major): the products of the
/// reduction dimension added to each element's exact state, to merge
/// across micro-batches and ranks and round once at the end.
///
/// A weight gradient `dW [in, out] = X^T D` over a micro-batch of `k`
/// samples (`X [k, in]`, `D [k, out]`, row-major) is `shape = GemmShape {
/// m: in, k, n: out, a_transposed: true, b_transposed: false }`: calling
/// it once per micro-batch on the same `acc` gives the same states for any
/// cut of the batch into micro-batches.
///
/// ```
/// use tessera_core::kernels::{exact_gemm, merge_exact, round_exact, ExactDot, GemmShape};
///
/// // dW = X^T D over 4 samples, 2 inputs, 1 output; in two micro-batches.
/// let x = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 5.0, 6.0]; // [4, 2]
/// let d = [0.5f32, -1.0, 1e30, -1e30]; // [4, 1]
/// let shape = |k| GemmShape { m: 2, k, n: 1, a_transposed: true, b_transposed: false };
/// let mut acc = [ExactDot::new(); 2];
/// exact_gemm(shape(2), &x[..4], &d[..2], &mut acc);
/// let mut other = [ExactDot::new(); 2]; // another rank's, say
/// exact_gemm(shape(2), &x[4..], &d[2..], &mut other);
/// merge_exact(&mut acc, &other);
/// let mut dw = [0.0f32; 2];
/// round_exact(&acc, &mut dw);
/// assert_eq!(dw, [-2.5, -3.0]); // f32 sums in sample order: [0.0, 0.0]
/// ```
///
/// # Panics
/// If a slice's length is not its matrix's.
pub fn exact_gemm<T: Element>(shape: GemmShape, a: &[T], b: &[T], acc: &mut [ExactDot]) {
    shape.assert_lengths(a, b, acc);
    arch::dispatch(ExactGemm { shape, a, b, acc });
}

/// `acc[i].merge(&other[i])` for every element: merges another
/// contribution's states (a micro-batch, a tile, a rank) into `acc`.
///
/// ```
/// use tessera_core::kernels::{merge_exact, ExactDot};
///
/// let mut acc = [ExactDot::new(); 2];
/// let mut other = [ExactDot::new(); 2];
/// other[1].add(1.5);
/// merge_exact(&mut acc, &other);
/// assert_eq!(acc[1].to_f32(), 1.5);
/// ```
///
/// # Panics
/// If the slices differ in length.
pub fn merge_exact(acc: &mut [ExactDot], other: &[ExactDot]) {
    assert_eq!(acc.len(), other.len(), "merge_exact: length mismatch");
    for (a, o) in acc.iter_mut().zip(other) {
        a.merge(o);
    }
}

/// `out[i] = states[i].to_f32()`: each state rounded once.
///
/// ```
/// use tessera_core::kernels::{round_exact, ExactDot};
///
/// let mut s = [ExactDot::new(); 2];
/// s[0].add_product(3.0, 0.25);
/// let mut out = [1.0f32; 2];
/// round_exact(&s, &mut out);
/// assert_eq!(out, [0.75, 0.0]);
/// ```
///
/// # Panics
/// If the slices differ in length.
pub fn round_exact(states: &[ExactDot], out: &mut [f32]) {
    assert_eq!(states.len(), out.len(), "round_exact: length mismatch");
    for (o, s) in out.iter_mut().zip(states) {
        *o = s.to_f32();
    }
}

kernel! {
    ExactSumOf<'a, T: Element> { x: &'a [T] } -> ExactSum;
    run<S>(k) {
        let mut sum = ExactSum::new();
        let mut buf = [0.0f32; TERMS];
        for (b, block) in k.x.chunks(TERMS).enumerate() {
            prefetch_block(k.x, b * TERMS);
            add_values(&mut sum.0, widened::<S, T>(block, &mut buf));
        }
        sum
    }
    scalar(k) { scalar::exact_sum_partial(k.x) }
}

kernel! {
    ExactDotOf<'a, T: Element> { x: &'a [T], y: &'a [T] } -> ExactDot;
    run<S>(k) {
        let mut dot = ExactDot::new();
        let (mut bx, mut by) = ([0.0f32; TERMS], [0.0f32; TERMS]);
        for (b, (x, y)) in k.x.chunks(TERMS).zip(k.y.chunks(TERMS)).enumerate() {
            prefetch_block(k.x, b * TERMS);
            prefetch_block(k.y, b * TERMS);
            add_products(&mut dot.0, widened::<S, T>(x, &mut bx), widened::<S, T>(y, &mut by));
        }
        dot
    }
    scalar(k) { scalar::exact_dot_partial(k.x, k.y) }
}

kernel! {
    ExactGemm<'a, T: Element> { shape: GemmShape, a: &'a [T], b: &'a [T], acc: &'a mut [ExactDot] } -> ();
    run<S>(k) {
        let s = k.shape;
        let (mut ca, mut cb) = ([0.0f32; TERMS], [0.0f32; TERMS]);
        for i in 0..s.m {
            for p0 in (0..s.k).step_by(TERMS) {
                let len = TERMS.min(s.k - p0);
                for (p, v) in ca[..len].iter_mut().enumerate() {
                    *v = k.a[s.a_index(i, p0 + p)].load();
                }
                for j in 0..s.n {
                    for (p, v) in cb[..len].iter_mut().enumerate() {
                        *v = k.b[s.b_index(p0 + p, j)].load();
                    }
                    add_products(&mut k.acc[i * s.n + j].0, &ca[..len], &cb[..len]);
                }
            }
        }
    }
    scalar(k) { scalar::exact_gemm(k.shape, k.a, k.b, k.acc) }
}
