//! Scalar twins of every kernel: the reference definitions.
//!
//! Each function here has the same name, signature and panics as the SIMD
//! kernel in [`kernels`](super), computes one element at a time in plain
//! Rust with the same order of operations, and is what the SIMD kernel must
//! equal bit for bit (the tests check it on every CPU path). They are also
//! usable as slow, obviously-correct kernels in their own right.

use crate::fp::{Element, Rounding};

use super::{BLOCK, ExactDot, ExactSum, GemmShape, LANES, MaxAbs};

/// Canonicalises a NaN to `f32::NAN` (see [the numerics](super#numerics)).
#[must_use]
#[inline(always)]
pub(crate) fn canonical(x: f32) -> f32 {
    if x.is_nan() { f32::NAN } else { x }
}

/// The fixed tree that turns a block's eight lane sums into its partial.
#[must_use]
#[inline(always)]
pub(crate) fn combine_lanes(l: [f32; LANES]) -> f32 {
    ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]))
}

/// The block partials of `n` terms, `term(i)` for element `i`, added into
/// an [`ExactSum`]: the definition of every sum-like reduction.
pub(crate) fn block_sums(n: usize, term: impl Fn(usize) -> f32) -> ExactSum {
    let mut sum = ExactSum::new();
    for start in (0..n).step_by(BLOCK) {
        let mut lanes = [0.0f32; LANES];
        for i in start..n.min(start + BLOCK) {
            lanes[i % LANES] += term(i);
        }
        sum.add(combine_lanes(lanes));
    }
    sum
}

// ---------------------------------------------------------------------------
// Element-wise: f32 arithmetic on widened values, one rounding on the store.

/// `y[i] = store(y[i] + a * x[i])` (multiply, round to f32, add, round to
/// f32, then to `T` with `rounding` at position `i`).
///
/// # Panics
/// If `x` and `y` differ in length.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::{Rounding, f16};
/// let x: Vec<f16> = (0..20).map(|i| f16::from_f32(i as f32 * 0.37 - 3.0)).collect();
/// let (mut y, mut z) = (x.clone(), x.clone());
/// scalar::axpy(0.5, &x, &mut y, Rounding::Nearest);
/// kernels::axpy(0.5, &x, &mut z, Rounding::Nearest);
/// assert_eq!(y, z);
/// ```
pub fn axpy<T: Element>(a: f32, x: &[T], y: &mut [T], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    for (i, (x, y)) in x.iter().zip(y).enumerate() {
        *y = T::store(y.load() + a * x.load(), rounding, i);
    }
}

/// `x[i] = store(x[i] * a)`.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::Rounding;
/// let x: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
/// let (mut y, mut z) = (x.clone(), x);
/// scalar::scale(0.5, &mut y, Rounding::Nearest);
/// kernels::scale(0.5, &mut z, Rounding::Nearest);
/// assert_eq!(y, z);
/// ```
pub fn scale<T: Element>(a: f32, x: &mut [T], rounding: Rounding) {
    for (i, x) in x.iter_mut().enumerate() {
        *x = T::store(x.load() * a, rounding, i);
    }
}

/// `y[i] = store(y[i] + x[i])`.
///
/// # Panics
/// If `x` and `y` differ in length.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::{Rounding, bf16};
/// let x: Vec<bf16> = (0..20).map(|i| bf16::from_f32(i as f32 * 0.37 - 3.0)).collect();
/// let (mut y, mut z) = (x.clone(), x.clone());
/// scalar::add(&x, &mut y, Rounding::Nearest);
/// kernels::add(&x, &mut z, Rounding::Nearest);
/// assert_eq!(y, z);
/// ```
pub fn add<T: Element>(x: &[T], y: &mut [T], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "add: length mismatch");
    for (i, (x, y)) in x.iter().zip(y).enumerate() {
        *y = T::store(y.load() + x.load(), rounding, i);
    }
}

/// `x[i] = store(x[i] * inv_scale)`; returns whether any *stored* value is
/// infinite or NaN.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::Rounding;
/// let mut y: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
/// y[3] = f32::INFINITY;
/// let mut z = y.clone();
/// assert!(scalar::unscale_and_check(&mut y, 0.25, Rounding::Nearest));
/// assert!(kernels::unscale_and_check(&mut z, 0.25, Rounding::Nearest));
/// assert_eq!(y, z);
/// ```
#[must_use]
pub fn unscale_and_check<T: Element>(x: &mut [T], inv_scale: f32, rounding: Rounding) -> bool {
    let mut found = false;
    for (i, x) in x.iter_mut().enumerate() {
        *x = T::store(x.load() * inv_scale, rounding, i);
        found |= !x.load().is_finite();
    }
    found
}

/// `acc[i] = acc[i] + widen(src[i])`.
///
/// # Panics
/// If `src` and `acc` differ in length.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::f16;
/// let x: Vec<f16> = (0..20).map(|i| f16::from_f32(i as f32 * 0.37 - 3.0)).collect();
/// let (mut a, mut b) = (vec![1.0f32; 20], vec![1.0f32; 20]);
/// scalar::accumulate(&x, &mut a);
/// kernels::accumulate(&x, &mut b);
/// assert_eq!(a, b);
/// ```
pub fn accumulate<T: Element>(src: &[T], acc: &mut [f32]) {
    assert_eq!(src.len(), acc.len(), "accumulate: length mismatch");
    for (s, a) in src.iter().zip(acc) {
        *a = canonical(*a + s.load());
    }
}

// ---------------------------------------------------------------------------
// Reductions: f32 arithmetic on widened values.

/// The exact sum of the block partials of `x * y` (see
/// [the order](super#determinism)).
///
/// # Panics
/// If `x` and `y` differ in length.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::f16;
/// let x: Vec<f16> = (0..20).map(|i| f16::from_f32(i as f32 * 0.37 - 3.0)).collect();
/// assert_eq!(scalar::dot_partial(&x, &x), kernels::dot_partial(&x, &x));
/// ```
#[must_use]
pub fn dot_partial<T: Element>(x: &[T], y: &[T]) -> ExactSum {
    assert_eq!(x.len(), y.len(), "dot: length mismatch");
    block_sums(x.len(), |i| x[i].load() * y[i].load())
}

/// `sum(x[i] * y[i])` in the fixed order, rounded once.
///
/// # Panics
/// If `x` and `y` differ in length.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// let x: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
/// assert_eq!(scalar::dot(&x, &x).to_bits(), kernels::dot(&x, &x).to_bits());
/// ```
#[must_use]
pub fn dot<T: Element>(x: &[T], y: &[T]) -> f32 {
    dot_partial(x, y).to_f32()
}

/// The exact sum of the block partials of `x * x`.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::bf16;
/// let x: Vec<bf16> = (0..20).map(|i| bf16::from_f32(i as f32 * 0.37 - 3.0)).collect();
/// assert_eq!(scalar::sum_of_squares_partial(&x), kernels::sum_of_squares_partial(&x));
/// ```
#[must_use]
pub fn sum_of_squares_partial<T: Element>(x: &[T]) -> ExactSum {
    block_sums(x.len(), |i| x[i].load() * x[i].load())
}

/// `sum(x[i] * x[i])` in the fixed order, rounded once.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// let x: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
/// assert_eq!(scalar::sum_of_squares(&x), kernels::dot(&x, &x));
/// ```
#[must_use]
pub fn sum_of_squares<T: Element>(x: &[T]) -> f32 {
    sum_of_squares_partial(x).to_f32()
}

/// The largest magnitude of `x` (widened), as a combinable partial.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::f16;
/// let x: Vec<f16> = (0..20).map(|i| f16::from_f32(i as f32 * 0.37 - 3.0)).collect();
/// assert_eq!(scalar::max_abs_partial(&x), kernels::max_abs_partial(&x));
/// ```
#[must_use]
pub fn max_abs_partial<T: Element>(x: &[T]) -> MaxAbs {
    let mut m = MaxAbs::new();
    for v in x {
        m.add(v.load());
    }
    m
}

/// The largest `|x[i]|` as f32; NaN if any element is NaN; `0.0` if empty.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// let x: Vec<f32> = (0..20).map(|i| i as f32 * 0.37 - 3.0).collect();
/// assert_eq!(scalar::max_abs(&x), kernels::max_abs(&x));
/// ```
#[must_use]
pub fn max_abs<T: Element>(x: &[T]) -> f32 {
    max_abs_partial(x).to_f32()
}

// ---------------------------------------------------------------------------
// Matrix products.

/// `c = op(a) op(b)`: each element the sum of its products in increasing
/// `p` from `0.0`, each product rounded, then added (see
/// [`gemm`](super::gemm)).
///
/// # Panics
/// If a slice's length is not its matrix's.
///
/// ```
/// use tessera_core::kernels::{self, GemmShape, scalar};
/// let shape = GemmShape { m: 2, k: 3, n: 2, a_transposed: false, b_transposed: false };
/// let (a, b) = ([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0f32, 0.0, 0.0, 1.0, 1.0, 1.0]);
/// let mut c = [0.0f32; 4];
/// scalar::gemm(shape, &a, &b, &mut c);
/// assert_eq!(c, [4.0, 5.0, 10.0, 11.0]);
/// ```
pub fn gemm(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    shape.assert_lengths(a, b, c);
    for i in 0..shape.m {
        for j in 0..shape.n {
            let mut acc = 0.0f32;
            for p in 0..shape.k {
                acc += a[shape.a_index(i, p)] * b[shape.b_index(p, j)];
            }
            c[i * shape.n + j] = canonical(acc);
        }
    }
}

// ---------------------------------------------------------------------------
// Exact reductions: every term added exactly, one at a time.

/// The exact sum of `x` (widened), value by value.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// let x: Vec<f32> = (0..300).map(|i| (i as f32 * 0.37 - 3.0).exp()).collect();
/// assert_eq!(scalar::exact_sum_partial(&x), kernels::exact_sum_partial(&x));
/// ```
#[must_use]
pub fn exact_sum_partial<T: Element>(x: &[T]) -> ExactSum {
    let mut sum = ExactSum::new();
    for v in x {
        sum.add(v.load());
    }
    sum
}

/// `sum(x[i])`, exact, rounded once.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// let x: Vec<f32> = (0..300).map(|i| (i as f32 * 0.37 - 3.0).exp()).collect();
/// assert_eq!(scalar::exact_sum(&x).to_bits(), kernels::exact_sum(&x).to_bits());
/// ```
#[must_use]
pub fn exact_sum<T: Element>(x: &[T]) -> f32 {
    exact_sum_partial(x).to_f32()
}

/// The exact dot product of `x` and `y` (widened), product by product.
///
/// # Panics
/// If `x` and `y` differ in length.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// use tessera_core::fp::bf16;
/// let x: Vec<bf16> = (0..300).map(|i| bf16::from_f32(i as f32 * 0.37 - 3.0)).collect();
/// assert_eq!(scalar::exact_dot_partial(&x, &x), kernels::exact_dot_partial(&x, &x));
/// ```
#[must_use]
pub fn exact_dot_partial<T: Element>(x: &[T], y: &[T]) -> ExactDot {
    assert_eq!(x.len(), y.len(), "exact_dot: length mismatch");
    let mut dot = ExactDot::new();
    for (a, b) in x.iter().zip(y) {
        dot.add_product(a.load(), b.load());
    }
    dot
}

/// `sum(x[i] * y[i])`, exact, rounded once.
///
/// # Panics
/// If `x` and `y` differ in length.
///
/// ```
/// use tessera_core::kernels::{self, scalar};
/// let x: Vec<f32> = (0..300).map(|i| i as f32 * 0.37 - 3.0).collect();
/// assert_eq!(scalar::exact_dot(&x, &x).to_bits(), kernels::exact_dot(&x, &x).to_bits());
/// ```
#[must_use]
pub fn exact_dot<T: Element>(x: &[T], y: &[T]) -> f32 {
    exact_dot_partial(x, y).to_f32()
}

/// `acc[i, j] += sum_p op(a)[i, p] op(b)[p, j]`, product by product (see
/// [`exact_gemm`](super::exact_gemm)).
///
/// # Panics
/// If a slice's length is not its matrix's.
///
/// ```
/// use tessera_core::kernels::{self, scalar, ExactDot, GemmShape};
/// let shape = GemmShape { m: 2, k: 3, n: 2, a_transposed: false, b_transposed: true };
/// let (a, b) = ([1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], [1.0f32, 0.0, 1e-30, 1.0, 1.0, 1.0]);
/// let (mut c, mut d) = ([ExactDot::new(); 4], [ExactDot::new(); 4]);
/// scalar::exact_gemm(shape, &a, &b, &mut c);
/// kernels::exact_gemm(shape, &a, &b, &mut d);
/// assert_eq!(c, d);
/// ```
pub fn exact_gemm<T: Element>(shape: GemmShape, a: &[T], b: &[T], acc: &mut [ExactDot]) {
    shape.assert_lengths(a, b, acc);
    for i in 0..shape.m {
        for j in 0..shape.n {
            let state = &mut acc[i * shape.n + j];
            for p in 0..shape.k {
                let (x, y) = (a[shape.a_index(i, p)], b[shape.b_index(p, j)]);
                state.add_product(x.load(), y.load());
            }
        }
    }
}

/// `sums[i, j] += sum_r a[r, i] * b[r, j]`, each product rounded to f32 and
/// added exactly, one at a time (see
/// [`exact_sum_products`](super::exact_sum_products)).
///
/// # Panics
/// If the lengths are not `[rows, m]`, `[rows, n]` and `[m, n]`.
///
/// ```
/// use tessera_core::kernels::{self, scalar, ExactSum};
/// let (a, b) = ([1.0f32, 2.0, 3.0, 4.0], [0.1f32, 1e-30, 7.0, -1e20]);
/// let (mut c, mut d) = ([ExactSum::new(); 4], [ExactSum::new(); 4]);
/// scalar::exact_sum_products(2, &a, &b, &mut c);
/// kernels::exact_sum_products(2, &a, &b, &mut d);
/// assert_eq!(c, d);
/// ```
pub fn exact_sum_products(rows: usize, a: &[f32], b: &[f32], sums: &mut [ExactSum]) {
    let (m, n) = super::exact::products_shape(rows, a, b, sums);
    for (ar, br) in a
        .chunks_exact(m.max(1))
        .zip(b.chunks_exact(n.max(1)))
        .take(rows)
    {
        for (&x, out) in ar.iter().zip(sums.chunks_exact_mut(n.max(1))) {
            for (s, &y) in out.iter_mut().zip(br) {
                s.add(x * y);
            }
        }
    }
}
