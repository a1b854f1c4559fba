//! Matrix products in a fixed summation order, the same bits on every
//! backend: `C = op(A) op(B)`.

use crate::arch::{self, F32s, Real, Simd, kernel};

use super::scalar;

/// The shape of one product `C [m, n] = op(A) [m, k] op(B) [k, n]`, all
/// dense row-major: `A` is stored `[m, k]`, or `[k, m]` if `a_transposed`;
/// `B` is stored `[k, n]`, or `[n, k]` if `b_transposed`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GemmShape {
    /// Rows of `C`.
    pub m: usize,
    /// The reduction dimension.
    pub k: usize,
    /// Columns of `C`.
    pub n: usize,
    /// `op(A) = A^T`.
    pub a_transposed: bool,
    /// `op(B) = B^T`.
    pub b_transposed: bool,
}

impl GemmShape {
    /// Floating-point operations of the product (a multiply-add is two).
    #[must_use]
    pub const fn flops(&self) -> u64 {
        2 * self.m as u64 * self.k as u64 * self.n as u64
    }

    /// Element `(i, p)` of `op(A)` in `a`.
    #[inline(always)]
    pub(crate) const fn a_index(&self, i: usize, p: usize) -> usize {
        if self.a_transposed {
            p * self.m + i
        } else {
            i * self.k + p
        }
    }

    /// Element `(p, j)` of `op(B)` in `b`.
    #[inline(always)]
    pub(crate) const fn b_index(&self, p: usize, j: usize) -> usize {
        if self.b_transposed {
            j * self.k + p
        } else {
            p * self.n + j
        }
    }

    /// Checks that `a`, `b` and `c` hold the product's matrices.
    ///
    /// # Panics
    /// If a slice's length is not its matrix's.
    pub fn assert_lengths(&self, a: &[f32], b: &[f32], c: &[f32]) {
        let Self { m, k, n, .. } = *self;
        let check = |what: &str, len: usize, rows: usize, cols: usize| {
            assert_eq!(
                len,
                rows * cols,
                "gemm: {what} has {len} elements, not {rows} x {cols}"
            );
        };
        check("A", a.len(), m, k);
        check("B", b.len(), k, n);
        check("C", c.len(), m, n);
    }
}

/// The scratch [`gemm`] needs for `shape`, in f32 elements: `k * n` when
/// `B` is transposed (it is first copied to `[k, n]`), else 0.
#[must_use]
pub const fn gemm_scratch_len(shape: &GemmShape) -> usize {
    if shape.b_transposed {
        shape.k * shape.n
    } else {
        0
    }
}

/// `c = op(a) op(b)` (see [`GemmShape`] for the layouts), in the order
/// that defines it:
///
/// ```text
/// c[i, j] = (...((0 + a[i, 0] b[0, j]) + a[i, 1] b[1, j]) + ...) + a[i, k-1] b[k-1, j]
/// ```
///
/// each product rounded to f32 and then added (no fused multiply-add), a
/// NaN result written as `f32::NAN`. So the result is the same on every
/// backend, for any split of the rows or columns of `C` over tiles, and
/// does not depend on the CPU (an FMA kernel, such as `matrixmultiply`'s,
/// gives different bits on CPUs with and without FMA). The backends
/// compute `2 x LANES` columns of four rows at a time, each lane one
/// element of `C` with its own sum. `scratch` holds at least
/// [`gemm_scratch_len`] elements.
///
/// # Panics
/// If a slice's length is not its matrix's, or `scratch` is too short.
pub fn gemm(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32], scratch: &mut [f32]) {
    shape.assert_lengths(a, b, c);
    let b = if shape.b_transposed {
        let packed = &mut scratch[..shape.k * shape.n];
        // Column j of op(B) is row j of `b`.
        for (j, column) in b.chunks_exact(shape.k.max(1)).enumerate() {
            for (p, &x) in column.iter().enumerate() {
                packed[p * shape.n + j] = x;
            }
        }
        &*packed
    } else {
        b
    };
    let shape = GemmShape {
        b_transposed: false,
        ..shape
    };
    arch::dispatch(Gemm { shape, a, b, c });
}

kernel! {
    Gemm<'a> { shape: GemmShape, a: &'a [f32], b: &'a [f32], c: &'a mut [f32] } -> ();
    run<S>(k) { columns::<S>(k.shape, k.a, k.b, k.c) }
    scalar(k) { scalar::gemm(k.shape, k.a, k.b, k.c) }
}

/// Rows of `C` a block computes at once.
const ROWS: usize = 4;

/// Every column of `c`: blocks of two vectors, then of one, then single
/// columns by the scalar formula. `b` is `[k, n]`.
#[inline(always)]
fn columns<S: Simd>(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    let n = shape.n;
    let mut j = 0;
    while j + 2 * S::LANES <= n {
        rows::<S, 2>(shape, a, b, c, j);
        j += 2 * S::LANES;
    }
    if j + S::LANES <= n {
        rows::<S, 1>(shape, a, b, c, j);
        j += S::LANES;
    }
    for j in j..n {
        for i in 0..shape.m {
            let mut acc = 0.0f32;
            for p in 0..shape.k {
                acc += a[shape.a_index(i, p)] * b[p * n + j];
            }
            c[i * n + j] = scalar::canonical(acc);
        }
    }
}

/// Columns `j..j + V * S::LANES` of every row of `c`, [`ROWS`] rows at a
/// time, then one.
#[inline(always)]
fn rows<S: Simd, const V: usize>(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32], j: usize) {
    let mut i = 0;
    while i + ROWS <= shape.m {
        block::<S, ROWS, V>(shape, a, b, c, i, j);
        i += ROWS;
    }
    for i in i..shape.m {
        block::<S, 1, V>(shape, a, b, c, i, j);
    }
}

/// Rows `i..i + R`, columns `j..j + V * S::LANES` of `c`: `R x V` vectors
/// of sums in registers, each lane adding its products in increasing `p`.
#[inline(always)]
fn block<S: Simd, const R: usize, const V: usize>(
    shape: GemmShape,
    a: &[f32],
    b: &[f32],
    c: &mut [f32],
    i: usize,
    j: usize,
) {
    let n = shape.n;
    let mut acc = [[S::F::splat(0.0); V]; R];
    for (p, b_row) in b.chunks_exact(n).enumerate() {
        let bv: [S::F; V] = core::array::from_fn(
            #[inline(always)]
            |v| S::F::load(&b_row[j + v * S::LANES..]),
        );
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = S::F::splat(a[shape.a_index(i + r, p)]);
            for (acc, bv) in acc.iter_mut().zip(bv) {
                *acc += av * bv;
            }
        }
    }
    for (r, acc) in acc.into_iter().enumerate() {
        for (v, acc) in acc.into_iter().enumerate() {
            acc.canonical()
                .store(&mut c[(i + r) * n + j + v * S::LANES..]);
        }
    }
}
