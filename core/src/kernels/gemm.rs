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
    ///
    /// ```
    /// use tessera_core::kernels::GemmShape;
    ///
    /// let shape = GemmShape { m: 2, k: 3, n: 4, a_transposed: false, b_transposed: false };
    /// assert_eq!(shape.flops(), 2 * 2 * 3 * 4);
    /// ```
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
    /// ```
    /// use tessera_core::kernels::GemmShape;
    ///
    /// let shape = GemmShape { m: 2, k: 3, n: 1, a_transposed: false, b_transposed: false };
    /// shape.assert_lengths(&[0.0; 6], &[0.0; 3], &[0.0; 2]); // A 2x3, B 3x1, C 2x1
    /// ```
    ///
    /// # Panics
    /// If a slice's length is not its matrix's.
    pub fn assert_lengths<A, B, C>(&self, a: &[A], b: &[B], c: &[C]) {
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

/// The scratch [`gemm`] needs for `shape`, in f32 elements: `k * n` for
/// `op(B)` copied into column panels, plus `m * k` when `A` is transposed
/// (it is first copied to `[m, k]`).
///
/// ```
/// use tessera_core::kernels::{gemm, gemm_scratch_len, GemmShape};
///
/// let shape = GemmShape { m: 1, k: 2, n: 2, a_transposed: false, b_transposed: false };
/// let mut scratch = vec![0.0f32; gemm_scratch_len(&shape)];
/// let mut c = [0.0f32; 2];
/// gemm(shape, &[1.0, 2.0], &[1.0, 0.0, 0.0, 1.0], &mut c, &mut scratch);
/// assert_eq!(c, [1.0, 2.0]);
/// ```
#[must_use]
pub const fn gemm_scratch_len(shape: &GemmShape) -> usize {
    let a = if shape.a_transposed {
        shape.m * shape.k
    } else {
        0
    };
    shape.k * shape.n + a
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
/// gives different bits on CPUs with and without FMA). The backends copy
/// `op(B)` into panels of `2 x LANES` contiguous columns and compute four
/// rows of a panel at a time, each lane one element of `C` with its own
/// sum, over 256 values of `p` at a time (a sum continues from the
/// f32 stored in `c`, so the blocking does not change it). `scratch` holds
/// at least [`gemm_scratch_len`] elements.
///
/// # Panics
/// If a slice's length is not its matrix's, or `scratch` is too short.
pub fn gemm(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32], scratch: &mut [f32]) {
    shape.assert_lengths(a, b, c);
    let (panels, rest) = scratch.split_at_mut(shape.k * shape.n);
    let a = if shape.a_transposed {
        let rows = &mut rest[..shape.m * shape.k];
        for (i, row) in rows.chunks_exact_mut(shape.k.max(1)).enumerate() {
            for (p, x) in row.iter_mut().enumerate() {
                *x = a[shape.a_index(i, p)];
            }
        }
        &*rows
    } else {
        a
    };
    let shape = GemmShape {
        a_transposed: false,
        ..shape
    };
    arch::dispatch(Gemm {
        shape,
        a,
        b,
        panels,
        c,
    });
}

kernel! {
    Gemm<'a> {
        shape: GemmShape,
        a: &'a [f32],
        b: &'a [f32],
        panels: &'a mut [f32],
        c: &'a mut [f32],
    } -> ();
    run<S>(k) { columns::<S>(k.shape, k.a, k.b, k.panels, k.c) }
    scalar(k) { scalar::gemm(k.shape, k.a, k.b, k.c) }
}

/// Rows of `C` a block computes at once.
const ROWS: usize = 4;

/// Values of `p` a block sums before moving on: a panel's slice of them
/// (32 KiB at 16 lanes) stays in the level-1 cache while every row block
/// uses it. Without it a column of `B` walked with a stride of `n` floats
/// (4 KiB at `n = 1024`) maps every row to the same cache set.
const K_BLOCK: usize = 256;

/// Every column of `c`: panels of two vectors, then one of one vector,
/// each copied from `op(B)` into `panels`, then single columns by the
/// scalar formula. `a` is `[m, k]`.
#[inline(always)]
fn columns<S: Simd>(shape: GemmShape, a: &[f32], b: &[f32], panels: &mut [f32], c: &mut [f32]) {
    let GemmShape { m, k, n, .. } = shape;
    let mut j = 0;
    while j + 2 * S::LANES <= n {
        let panel = pack::<S>(shape, b, j, 2 * S::LANES, panels);
        rows::<S, 2>(shape, a, panel, c, j);
        j += 2 * S::LANES;
    }
    if j + S::LANES <= n {
        let panel = pack::<S>(shape, b, j, S::LANES, panels);
        rows::<S, 1>(shape, a, panel, c, j);
        j += S::LANES;
    }
    for j in j..n {
        for i in 0..m {
            let mut acc = 0.0f32;
            for p in 0..k {
                acc += a[i * k + p] * b[shape.b_index(p, j)];
            }
            c[i * n + j] = scalar::canonical(acc);
        }
    }
}

/// Columns `j..j + width` of `op(B)` copied to `[k, width]` at the start of
/// `panels` (each panel is used for every row before the next is copied).
#[inline(always)]
fn pack<'p, S: Simd>(
    shape: GemmShape,
    b: &[f32],
    j: usize,
    width: usize,
    panels: &'p mut [f32],
) -> &'p [f32] {
    let panel = &mut panels[..shape.k * width];
    for (p, row) in panel.chunks_exact_mut(width).enumerate() {
        if shape.b_transposed {
            for (v, x) in row.iter_mut().enumerate() {
                *x = b[shape.b_index(p, j + v)];
            }
        } else {
            let start = shape.b_index(p, j);
            row.copy_from_slice(&b[start..start + width]);
        }
    }
    panel
}

/// Columns `j..j + V * S::LANES` of every row of `c` from their `panel`,
/// [`K_BLOCK`] values of `p` at a time, [`ROWS`] rows at a time, then one.
#[inline(always)]
fn rows<S: Simd, const V: usize>(
    shape: GemmShape,
    a: &[f32],
    panel: &[f32],
    c: &mut [f32],
    j: usize,
) {
    let mut p0 = 0;
    while p0 < shape.k.max(1) {
        let p1 = (p0 + K_BLOCK).min(shape.k);
        let mut i = 0;
        while i + ROWS <= shape.m {
            block::<S, ROWS, V>(shape, a, panel, c, [i, j], p0..p1);
            i += ROWS;
        }
        for i in i..shape.m {
            block::<S, 1, V>(shape, a, panel, c, [i, j], p0..p1);
        }
        p0 = p1.max(1);
    }
}

/// Rows `i..i + R`, columns `j..j + V * S::LANES` of `c`, over `ps`: `R x V`
/// vectors of sums in registers, starting from zero at `p = 0` and from
/// `c` after, each lane adding its products in increasing `p`.
#[inline(always)]
fn block<S: Simd, const R: usize, const V: usize>(
    shape: GemmShape,
    a: &[f32],
    panel: &[f32],
    c: &mut [f32],
    [i, j]: [usize; 2],
    ps: core::ops::Range<usize>,
) {
    let (n, k, width) = (shape.n, shape.k, V * S::LANES);
    let at = |r: usize, v: usize| (i + r) * n + j + v * S::LANES;
    let mut acc = [[S::F::splat(0.0); V]; R];
    if ps.start > 0 {
        for (r, acc) in acc.iter_mut().enumerate() {
            for (v, acc) in acc.iter_mut().enumerate() {
                *acc = S::F::load(&c[at(r, v)..]);
            }
        }
    }
    let panel = &panel[ps.start * width..ps.end * width];
    for (p, b_row) in ps.zip(panel.chunks_exact(width)) {
        let bv: [S::F; V] = core::array::from_fn(
            #[inline(always)]
            |v| S::F::load(&b_row[v * S::LANES..]),
        );
        for (r, acc) in acc.iter_mut().enumerate() {
            let av = S::F::splat(a[(i + r) * k + p]);
            for (acc, bv) in acc.iter_mut().zip(bv) {
                *acc += av * bv;
            }
        }
    }
    for (r, acc) in acc.into_iter().enumerate() {
        for (v, acc) in acc.into_iter().enumerate() {
            acc.canonical().store(&mut c[at(r, v)..]);
        }
    }
}
