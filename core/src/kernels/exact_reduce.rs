//! Exact reductions: sums and dot products of f32, f16 or bf16 values, and
//! the products along a matrix product's reduction dimension, each the
//! exact total rounded once, whatever the order and split of the terms.
//!
//! The result is a function of the multiset of terms alone, so a SIMD
//! kernel equals its scalar twin (which adds term by term into the exact
//! state) bit for bit by construction, and blocks are an implementation
//! detail: any split into pieces, merged in any order, gives the same bits.
//!
//! The fast paths (`exact_lanes`) sum parts of a few
//! thousand terms in f64 lanes, exact in any order under a test on the
//! terms' exponent fields, and fall back to blocks of 256, then to single
//! terms, where the test fails (a wider span of values, a product far
//! below the part's largest, a term that is not finite): the same state,
//! more slowly.

use crate::arch::{self, F32s, Simd, kernel};
use crate::fp::sealed::Format;
use crate::fp::{self, Element};

use super::exact::products_shape;
use super::exact_lanes::{
    COLUMNS, DOT_PART, MARGIN, SUM_PART, TERMS, add_products, add_values, columns_part, dot_part,
    products_top, sum_part,
};
use super::{ExactDot, ExactSum, GemmShape, scalar};

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

/// `x` as f32 values: `x` itself, or widened into `buf` (`x.len() <=
/// buf.len()`; unused for f32, so f32 callers pass an empty one).
#[inline(always)]
fn widened<'b, S: Simd, T: Element>(x: &'b [T], buf: &'b mut [f32]) -> &'b [f32] {
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

/// `sums[i, j] += sum_r a[r, i] * b[r, j]` exactly, each product rounded
/// once to f32 (as an f32 matrix product rounds it), for `a` `[rows, m]`,
/// `b` `[rows, n]` and `sums` `[m, n]`, all row-major: a weight gradient
/// over a micro-batch's rows (samples) whose states are the same for any
/// cut of the rows into calls, merged in any order. A bias's gradient is
/// the same with `a` a column of ones.
///
/// ```
/// use tessera_core::kernels::{exact_sum_products, ExactSum};
///
/// // dW = X^T D over 3 samples, 2 inputs, 1 output; in two calls.
/// let x = [1.0f32, 2.0, 3.0, 4.0, 1.0, 2.0]; // [3, 2]
/// let d = [1e30f32, 0.5, -1e30]; // [3, 1]
/// let mut sums = [ExactSum::new(); 2];
/// exact_sum_products(2, &x[..4], &d[..2], &mut sums);
/// exact_sum_products(1, &x[4..], &d[2..], &mut sums);
/// assert_eq!([sums[0].to_f32(), sums[1].to_f32()], [1.5, 2.0]);
/// ```
///
/// # Panics
/// If `a`'s or `b`'s length is not a multiple of `rows`, or `sums`' is not
/// `m n`.
pub fn exact_sum_products(rows: usize, a: &[f32], b: &[f32], sums: &mut [ExactSum]) {
    let (m, n) = products_shape(rows, a, b, sums);
    arch::dispatch(ExactSumProducts {
        rows,
        m,
        n,
        a,
        b,
        sums,
    });
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
        // A 16 KiB buffer is zeroed for 16-bit input only: a short f32 sum
        // does not pay for it.
        if T::FORMAT == Format::F32 {
            exact_sum_with::<S, T>(k.x, &mut [])
        } else {
            exact_sum_with::<S, T>(k.x, &mut [0.0; SUM_PART])
        }
    }
    scalar(k) { scalar::exact_sum_partial(k.x) }
}

/// [`exact_sum_partial`] with `buf` for [`widened`].
#[inline(always)]
fn exact_sum_with<S: Simd, T: Element>(xs: &[T], buf: &mut [f32]) -> ExactSum {
    let mut sum = ExactSum::new();
    for (p, part) in xs.chunks(SUM_PART).enumerate() {
        let x = widened::<S, T>(part, buf);
        let added = sum_part(
            &mut sum.0,
            x,
            #[inline(always)]
            |at| prefetch_block(xs, p * SUM_PART + at),
        );
        if !added {
            add_values(&mut sum.0, x);
        }
    }
    sum
}

kernel! {
    ExactDotOf<'a, T: Element> { x: &'a [T], y: &'a [T] } -> ExactDot;
    run<S>(k) {
        // Two 8 KiB buffers, zeroed for 16-bit input only.
        if T::FORMAT == Format::F32 {
            exact_dot_with::<S, T>(k.x, k.y, (&mut [], &mut []))
        } else {
            exact_dot_with::<S, T>(k.x, k.y, (&mut [0.0; DOT_PART], &mut [0.0; DOT_PART]))
        }
    }
    scalar(k) { scalar::exact_dot_partial(k.x, k.y) }
}

/// [`exact_dot_partial`] with `(bx, by)` for [`widened`].
#[inline(always)]
fn exact_dot_with<S: Simd, T: Element>(
    xs: &[T],
    ys: &[T],
    (bx, by): (&mut [f32], &mut [f32]),
) -> ExactDot {
    let mut dot = ExactDot::new();
    // The bound of the first part is measured, the next ones' guessed
    // from the last part's (a wrong guess costs a slower pass).
    let mut guess = None;
    for (p, (x, y)) in xs.chunks(DOT_PART).zip(ys.chunks(DOT_PART)).enumerate() {
        let x = widened::<S, T>(x, bx);
        let y = widened::<S, T>(y, by);
        let pass = dot_part(
            &mut dot.0,
            x,
            y,
            guess.unwrap_or_else(|| products_top(x, y)),
            #[inline(always)]
            |at| {
                prefetch_block(xs, p * DOT_PART + at);
                prefetch_block(ys, p * DOT_PART + at);
            },
        );
        if !pass.added {
            add_products(&mut dot.0, x, y);
        }
        if let Some(top) = pass.top {
            guess = Some(top + MARGIN);
        }
    }
    dot
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

kernel! {
    ExactSumProducts<'a> {
        rows: usize, m: usize, n: usize, a: &'a [f32], b: &'a [f32], sums: &'a mut [ExactSum]
    } -> ();
    run<S>(k) {
        let (m, n) = (k.m, k.n);
        for r0 in (0..k.rows).step_by(TERMS) {
            let rows = TERMS.min(k.rows - r0);
            for (i, out) in k.sums.chunks_exact_mut(n.max(1)).enumerate().take(m) {
                for (j0, states) in (0..n).step_by(COLUMNS).zip(out.chunks_mut(COLUMNS)) {
                    let w = states.len();
                    let row = |r: usize| {
                        let at = (r0 + r) * n + j0;
                        let x = k.a[(r0 + r) * m + i];
                        let mut c = [0.0f32; COLUMNS];
                        for (c, &y) in c.iter_mut().zip(&k.b[at..at + w]) {
                            *c = x * y;
                        }
                        c
                    };
                    let mut skip = columns_part(states, rows, row);
                    while skip != 0 {
                        let j = skip.trailing_zeros() as usize;
                        skip &= skip - 1;
                        for r in 0..rows {
                            states[j].add(row(r)[j]);
                        }
                    }
                }
            }
        }
    }
    scalar(k) { scalar::exact_sum_products(k.rows, k.a, k.b, k.sums) }
}
