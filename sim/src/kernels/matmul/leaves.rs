//! The reduction tree of a product: what a product's result *is*, for
//! every tiling.
//!
//! The reduction dimension `k` is cut into [`leaves`]: one leaf while `k
//! <= LEAF_K`, else a power of two of nearly equal leaves of at most
//! [`LEAF_K`] (`k = 1024`: 8 leaves of 128). Each leaf's partial product
//! is one [`gemm`](super::gemm) (products summed in increasing `p`, no
//! FMA); the partials are added in a perfect binary tree over the leaf
//! index, level by level (`s[i] = s[2i] + s[2i + 1]`). The tree depends on
//! `k` alone, so a split of the leaves over `2^j` tiles (each an aligned
//! run of leaves, a subtree) with the `2^j` subtree roots added by the
//! tree's top levels gives the same bits for every `j` and every tiling.
//! With one leaf the product is one whole `gemm`, as it was before the
//! reduction could be split.

use core::ops::Range;

use super::{Accumulator, GemmShape};

/// The longest leaf of a product's reduction (see the module docs).
pub const LEAF_K: usize = 128;

/// The leaf boundaries of a reduction of length `k`: `0 = b_0 < b_1 <
/// ... = k`, a power of two of leaves (one for `k <= LEAF_K`).
///
/// ```
/// use tessera_sim::kernels::matmul::leaves;
///
/// assert_eq!(leaves(100), [0, 100]); // one leaf up to LEAF_K
/// assert_eq!(leaves(300), [0, 75, 150, 225, 300]); // a power of two of leaves
/// ```
#[must_use]
pub fn leaves(k: usize) -> Vec<usize> {
    let count = leaf_count(k);
    let (q, r) = (k / count, k % count);
    let mut bounds = vec![0];
    for p in 0..count {
        bounds.push(bounds[p] + q + usize::from(p < r));
    }
    bounds
}

/// How many leaves [`leaves`]`(k)` has, without listing them.
///
/// ```
/// use tessera_sim::kernels::matmul::{leaf_count, leaves};
///
/// assert_eq!((leaf_count(128), leaf_count(129), leaf_count(1024)), (1, 2, 8));
/// assert_eq!(leaf_count(300), leaves(300).len() - 1);
/// ```
#[must_use]
pub const fn leaf_count(k: usize) -> usize {
    if k <= LEAF_K {
        1
    } else {
        k.div_ceil(LEAF_K).next_power_of_two()
    }
}

/// Columns (or rows) `range` of the reduction dimension of a matrix
/// stored row-major, into `out`: `k_rows` says `k` is its row dimension
/// (then the rows `range`, contiguous), else its column dimension (`other`
/// rows of `k`, each cut).
fn k_slice(x: &[f32], k_rows: bool, k: usize, range: &Range<usize>, out: &mut Vec<f32>) {
    out.clear();
    if k_rows {
        let other = x.len() / k.max(1);
        out.extend_from_slice(&x[range.start * other..range.end * other]);
        return;
    }
    for row in x.chunks_exact(k.max(1)) {
        out.extend_from_slice(&row[range.clone()]);
    }
}

/// Adds `parts` (a power of two of equal-length partials, in leaf order)
/// level by level in a perfect binary tree, each addition in `acc`
/// ([`Accumulator::add`]); the root.
///
/// # Panics
/// If there are no parts or their number is not a power of two.
///
/// ```
/// use tessera_sim::kernels::matmul::{Accumulator, tree_sum};
///
/// // (1e8 + 1) + (-1e8 + 1) in f32: each pair rounds its 1 away.
/// let parts = vec![vec![1e8], vec![1.0], vec![-1e8], vec![1.0]];
/// assert_eq!(tree_sum(parts, Accumulator::F32), [0.0]);
/// ```
#[must_use]
pub fn tree_sum(mut parts: Vec<Vec<f32>>, acc: Accumulator) -> Vec<f32> {
    assert!(parts.len().is_power_of_two(), "{} partials", parts.len());
    let mut n = parts.len();
    while n > 1 {
        // s[i] = s[2i] + s[2i + 1], summed into s[2i] and moved to s[i]
        // (every slot below 2i has been read by then).
        for i in 0..n / 2 {
            let (left, right) = parts.split_at_mut(2 * i + 1);
            acc.add(&mut left[2 * i], &right[0]);
            parts.swap(i, 2 * i);
        }
        n /= 2;
    }
    parts.truncate(1);
    parts.pop().expect("one partial")
}

/// `c = op(a) op(b)` over the reduction `shape.k`, cut at `bounds`
/// (relative to `0..shape.k`, a power of two of leaves): each leaf one
/// [`Accumulator::leaf`] in `acc` (with [`Accumulator::F32`] a
/// [`gemm`](super::gemm)), the partials added by [`tree_sum`] in `acc`.
///
/// # Panics
/// If a slice's length is not its matrix's.
///
/// ```
/// use tessera_sim::kernels::matmul::{Accumulator, GemmShape, gemm_leaves};
///
/// let shape = GemmShape { m: 1, k: 4, n: 1, a_transposed: false, b_transposed: false };
/// let mut c = [0.0];
/// gemm_leaves(shape, &[0, 2, 4], (&[1.0, 2.0, 3.0, 4.0], &[1.0; 4]), &mut c, Accumulator::F32);
/// assert_eq!(c, [(1.0 + 2.0) + (3.0 + 4.0)]);
/// ```
pub fn gemm_leaves(
    shape: GemmShape,
    bounds: &[usize],
    (a, b): (&[f32], &[f32]),
    c: &mut [f32],
    acc: Accumulator,
) {
    if bounds.len() <= 2 {
        acc.leaf(shape, a, b, c);
        return;
    }
    shape.assert_lengths(a, b, c);
    let (mut la, mut lb) = (Vec::new(), Vec::new());
    let parts = bounds
        .windows(2)
        .map(|w| {
            let r = w[0]..w[1];
            let leaf = GemmShape {
                k: r.len(),
                ..shape
            };
            k_slice(a, shape.a_transposed, shape.k, &r, &mut la);
            k_slice(b, !shape.b_transposed, shape.k, &r, &mut lb);
            let mut out = vec![0.0; c.len()];
            acc.leaf(leaf, &la, &lb, &mut out);
            out
        })
        .collect();
    c.copy_from_slice(&tree_sum(parts, acc));
}

/// `c = op(a) op(b)` as every tiling of [`matmul`](fn@super::matmul)
/// computes it: [`gemm_leaves`] over [`leaves`]`(k)`.
///
/// # Panics
/// If a slice's length is not its matrix's.
///
/// ```
/// use tessera_sim::kernels::matmul::{GemmShape, gemm_tree};
///
/// // k = 256: two leaves of 128, added once at the end.
/// let shape = GemmShape { m: 1, k: 256, n: 1, a_transposed: false, b_transposed: false };
/// let mut c = [0.0];
/// gemm_tree(shape, &[1.0; 256], &[0.5; 256], &mut c);
/// assert_eq!(c, [128.0]);
/// ```
pub fn gemm_tree(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    gemm_leaves(shape, &leaves(shape.k), (a, b), c, Accumulator::F32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_a_power_of_two_of_at_most_leaf_k() {
        for k in [0, 1, 127, 128, 129, 256, 300, 513, 1024, 4608] {
            let b = leaves(k);
            let n = b.len() - 1;
            assert!(n.is_power_of_two(), "{k}");
            assert_eq!((b[0], b[n]), (0, k));
            assert!(b.windows(2).all(|w| w[1] - w[0] <= LEAF_K.max(1)), "{k}");
            assert_eq!(n == 1, k <= LEAF_K, "{k}");
        }
        assert_eq!(leaves(1024).len() - 1, 8);
        assert_eq!(leaves(300).len() - 1, 4);
    }

    #[test]
    fn one_leaf_is_one_gemm_and_more_differ_only_in_rounding() {
        let (m, n) = (3, 5);
        for k in [7, 128, 129, 640] {
            let a: Vec<f32> = (0..m * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0)
                .collect();
            let b: Vec<f32> = (0..k * n)
                .map(|i| ((i * 53 % 97) as f32 - 48.0) / 9.0)
                .collect();
            for (at, bt) in [(false, false), (true, false), (false, true), (true, true)] {
                let shape = GemmShape {
                    m,
                    k,
                    n,
                    a_transposed: at,
                    b_transposed: bt,
                };
                let (mut whole, mut tree) = (vec![0.0; m * n], vec![0.0; m * n]);
                super::super::gemm(shape, &a, &b, &mut whole);
                gemm_tree(shape, &a, &b, &mut tree);
                if k <= LEAF_K {
                    assert_eq!(whole, tree);
                }
                // The exact sum in f64 against both.
                for i in 0..m {
                    for j in 0..n {
                        let at_ = |p: usize| if at { a[p * m + i] } else { a[i * k + p] };
                        let bt_ = |p: usize| if bt { b[j * k + p] } else { b[p * n + j] };
                        let exact: f64 =
                            (0..k).map(|p| f64::from(at_(p)) * f64::from(bt_(p))).sum();
                        let got = f64::from(tree[i * n + j]);
                        assert!((got - exact).abs() <= 1e-4 * exact.abs().max(1.0) * k as f64);
                    }
                }
            }
        }
    }
}
