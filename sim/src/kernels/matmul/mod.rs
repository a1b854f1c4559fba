//! Tile-parallel matrix products: `C = op(A) op(B)` cut over tiles as
//! PopLibs cuts them, rows, columns and the reduction (see `plan.rs`).
//!
//! What a product computes does not depend on the cut: the reduction `k`
//! is cut into leaves fixed by `k` alone ([`leaves`]), each leaf's partial
//! is one [`gemm`] (Tessera's own, `tessera_core::kernels::gemm`: an
//! element's products summed in increasing `p`, each product rounded, no
//! fused multiply-add, on every CPU backend), and the partials are added
//! in a perfect binary tree over the leaf index ([`gemm_tree`]). A tile
//! computing an aligned run of leaves computes a subtree; the tiles'
//! subtree roots are added in the tree's top levels. So the result is
//! bitwise the same for every cut and every number of tiles (the tests
//! check many), and the same on every CPU; with `k <= LEAF_K` it is one
//! whole `gemm`. (The simulator first used `matrixmultiply::sgemm`, which
//! picks FMA kernels at run time, so trained weights differed between
//! CPUs with and without FMA; [`gemm_matrixmultiply`] remains as the
//! benchmarks' reference.)
//!
//! Matrices live in tensors in a [`BlockLayout`]: a grid of row and
//! column blocks, each block stored contiguously (row-major inside it) on
//! one tile, so a vertex's output block is one field. A plain row-major
//! matrix is the layout of one block ([`BlockLayout::dense`]).

use core::ops::Range;

use tessera_core::kernels;

use crate::ipu::{Interval, Mapping, TensorId, TensorSlice, Tile};

pub use tessera_core::kernels::GemmShape;

mod accumulate;
mod leaves;
mod plan;
mod product;

pub use accumulate::Accumulator;
pub use leaves::{LEAF_K, gemm_leaves, gemm_tree, leaf_count, leaves, tree_sum};
pub use plan::{ComputeBlock, Cut, PRODUCT_MEMORY_FRACTION, Problem, ProductPlan, Source};
pub use product::matmul;
pub(crate) use product::operand_field;

/// `c = op(a) op(b)` by [`tessera_core::kernels::gemm`] (see [`GemmShape`]
/// for the layouts): the same bits on every CPU.
///
/// ```
/// use tessera_sim::kernels::matmul::{GemmShape, gemm};
///
/// // [1 2; 3 4] times the transpose of [1 0; 1 1] (stored [n, k]).
/// let shape = GemmShape { m: 2, k: 2, n: 2, a_transposed: false, b_transposed: true };
/// let mut c = [0.0f32; 4];
/// gemm(shape, &[1.0, 2.0, 3.0, 4.0], &[1.0, 0.0, 1.0, 1.0], &mut c);
/// assert_eq!(c, [1.0, 3.0, 3.0, 7.0]);
/// ```
///
/// # Panics
/// If a slice's length is not its matrix's.
pub fn gemm(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    // The scratch is written before it is read: one buffer per thread,
    // grown as needed, instead of a zeroed allocation per call.
    thread_local! {
        static SCRATCH: core::cell::RefCell<Vec<f32>> = const { core::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with_borrow_mut(|scratch| {
        let len = kernels::gemm_scratch_len(&shape);
        if scratch.len() < len {
            scratch.resize(len, 0.0);
        }
        kernels::gemm(shape, a, b, c, &mut scratch[..len]);
    });
}

/// `c = op(a) op(b)` by one [`matrixmultiply::sgemm`] call: the reference
/// `tessera bench` measures [`gemm`] against. Its bits depend on the CPU
/// (`sgemm` uses FMA where the CPU has it), so the simulator does not use
/// it.
///
/// ```
/// use tessera_sim::kernels::matmul::{GemmShape, gemm, gemm_matrixmultiply};
///
/// // Small integers: every product and sum is exact, so both agree.
/// let shape = GemmShape { m: 2, k: 3, n: 2, a_transposed: true, b_transposed: false };
/// let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]; // stored [k, m]
/// let b = [1.0, -1.0, 0.0, 2.0, 3.0, 1.0];
/// let (mut c, mut reference) = ([0.0f32; 4], [0.0f32; 4]);
/// gemm_matrixmultiply(shape, &a, &b, &mut reference);
/// gemm(shape, &a, &b, &mut c);
/// assert_eq!(reference, [16.0, 10.0, 20.0, 12.0]);
/// assert_eq!(c, reference);
/// ```
///
/// # Panics
/// If a slice's length is not its matrix's.
// The one `unsafe` of the crate: `sgemm` takes raw pointers and strides.
#[allow(unsafe_code)]
pub fn gemm_matrixmultiply(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    shape.assert_lengths(a, b, c);
    let GemmShape { m, k, n, .. } = shape;
    if m == 0 || n == 0 {
        return;
    }
    let (rsa, csa) = if shape.a_transposed { (1, m) } else { (k, 1) };
    let (rsb, csb) = if shape.b_transposed { (1, k) } else { (n, 1) };
    // SAFETY: `a` holds `m * k` elements and every `i * rsa + p * csa`
    // (i < m, p < k) is below that for both layouts; likewise `b` for `k * n`
    // and `c` with strides (n, 1) for `m * n`; `c` is borrowed exclusively
    // and cannot alias `a` or `b`. With beta = 0, `c` is not read.
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            1.0,
            a.as_ptr(),
            rsa as isize,
            csa as isize,
            b.as_ptr(),
            rsb as isize,
            csb as isize,
            0.0,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// A matrix `[rows, cols]` cut into a grid of blocks, each stored
/// contiguously (row-major inside the block), blocks in row-major order of
/// the grid, block `(i, j)` on tile `tiles[i * col_blocks + j]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockLayout {
    /// Row block boundaries: `0 = r_0 < r_1 < ... = rows`.
    row_bounds: Vec<usize>,
    /// Column block boundaries.
    col_bounds: Vec<usize>,
    /// The tile of each block.
    tiles: Vec<Tile>,
}

/// One block of a [`BlockLayout`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// The block's rows of the matrix.
    pub rows: Range<usize>,
    /// The block's columns of the matrix.
    pub cols: Range<usize>,
    /// Its elements in the tensor.
    pub elements: Range<u64>,
    /// Its tile.
    pub tile: Tile,
}

/// `len` cut into `parts` nearly equal parts (the first `len % parts` one
/// longer): the boundaries.
pub(crate) fn split(len: usize, parts: usize) -> Vec<usize> {
    let parts = parts.clamp(1, len.max(1));
    let (q, r) = (len / parts, len % parts);
    let mut bounds = vec![0];
    for p in 0..parts {
        bounds.push(bounds[p] + q + usize::from(p < r));
    }
    bounds
}

impl BlockLayout {
    /// A dense row-major matrix: one block, on `tile` (only its offsets
    /// matter when it is the source of a gather).
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// let l = BlockLayout::dense(2, 3, 5);
    /// assert_eq!((l.row_blocks(), l.col_blocks(), l.len()), (1, 1, 6));
    /// assert_eq!(l.blocks()[0].tile, 5);
    /// // Its offsets are row-major ones.
    /// assert_eq!(l.offset(1, 2), 5);
    /// ```
    #[must_use]
    pub fn dense(rows: usize, cols: usize, tile: Tile) -> Self {
        Self {
            row_bounds: vec![0, rows],
            col_bounds: vec![0, cols],
            tiles: vec![tile],
        }
    }

    /// `rows x cols` cut into `row_blocks x col_blocks` nearly equal blocks
    /// (fewer if a dimension is shorter), the blocks spread evenly over
    /// tiles `0..tiles` in grid order.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// let l = BlockLayout::grid(7, 10, 3, 4, 5);
    /// assert_eq!((l.row_blocks(), l.col_blocks()), (3, 4));
    /// // 12 blocks over 5 tiles in grid order; rows cut 3, 2, 2.
    /// let tiles: Vec<u32> = l.blocks().iter().map(|b| b.tile).collect();
    /// assert_eq!(tiles, [0, 0, 0, 1, 1, 2, 2, 2, 3, 3, 4, 4]);
    /// assert_eq!(l.blocks()[4].rows, 3..5);
    /// // Never more blocks than rows or columns.
    /// assert_eq!(BlockLayout::grid(2, 10, 5, 1, 8).row_blocks(), 2);
    /// ```
    #[must_use]
    pub fn grid(
        rows: usize,
        cols: usize,
        row_blocks: usize,
        col_blocks: usize,
        tiles: u32,
    ) -> Self {
        let row_bounds = split(rows, row_blocks);
        let col_bounds = split(cols, col_blocks);
        let blocks = (row_bounds.len() - 1) * (col_bounds.len() - 1);
        let tiles = (0..blocks)
            .map(|b| (b as u64 * u64::from(tiles.max(1)) / blocks as u64) as Tile)
            .collect();
        Self {
            row_bounds,
            col_bounds,
            tiles,
        }
    }

    /// The layout of the output of a product with reduction dimension `k`
    /// on `tiles` tiles: as many blocks as there are tiles, but none with
    /// fewer than `min_flops` flops (so that a vertex has real work); columns
    /// are cut first (samples are few), rows then. `full_rows` keeps every
    /// row whole (one column block), `full_cols` every column (one row
    /// block).
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 4 x 128 with k = 64 on 1,472 tiles: 65,536 flops, so 4 blocks of
    /// // 2^14 flops, the columns cut first.
    /// let l = BlockLayout::plan(4, 128, 64, 1472, 1 << 14, false, false);
    /// assert_eq!((l.row_blocks(), l.col_blocks()), (1, 4));
    /// // Keeping the rows whole cuts rows instead.
    /// let l = BlockLayout::plan(4, 128, 64, 1472, 1 << 14, true, false);
    /// assert_eq!((l.row_blocks(), l.col_blocks()), (4, 1));
    /// ```
    #[must_use]
    pub fn plan(
        rows: usize,
        cols: usize,
        k: usize,
        tiles: u32,
        min_flops: u64,
        full_rows: bool,
        full_cols: bool,
    ) -> Self {
        let flops = 2 * rows as u64 * cols as u64 * k as u64;
        let want = (flops / min_flops.max(1)).clamp(1, u64::from(tiles.max(1))) as usize;
        let col_blocks = if full_rows { 1 } else { want.min(cols.max(1)) };
        let row_blocks = if full_cols {
            1
        } else {
            (want / col_blocks).clamp(1, rows.max(1))
        };
        Self::grid(rows, cols, row_blocks, col_blocks, tiles)
    }

    /// The layout of row bounds `rows`, column bounds `cols` and a tile per
    /// block in grid order.
    pub(crate) fn from_parts(rows: Vec<usize>, cols: Vec<usize>, tiles: Vec<Tile>) -> Self {
        debug_assert_eq!(tiles.len(), (rows.len() - 1) * (cols.len() - 1));
        Self {
            row_bounds: rows,
            col_bounds: cols,
            tiles,
        }
    }

    /// The same layout with every block `first` tiles further on (a
    /// layout planned over `0..n` moved to the tiles `first..first + n`).
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// let l = BlockLayout::grid(4, 4, 2, 1, 2).shifted(10);
    /// let tiles: Vec<u32> = l.blocks().iter().map(|b| b.tile).collect();
    /// assert_eq!(tiles, [10, 11]);
    /// ```
    #[must_use]
    pub fn shifted(mut self, first: Tile) -> Self {
        for t in &mut self.tiles {
            *t += first;
        }
        self
    }

    /// The same layout moved onto `tiles`, each block at its tile's offset
    /// (modulo their count) from `tiles.start`: unchanged if every block is
    /// already there; else, for equal-sized IPUs, the same tile of
    /// another IPU.
    #[must_use]
    pub(crate) fn moved_to(&self, tiles: &Range<Tile>) -> Self {
        if self.tiles.iter().all(|t| tiles.contains(t)) {
            return self.clone();
        }
        let span = i64::from((tiles.end - tiles.start).max(1));
        let offset = |t: Tile| (i64::from(t) - i64::from(tiles.start)).rem_euclid(span);
        Self {
            tiles: self
                .tiles
                .iter()
                .map(|&t| tiles.start + offset(t) as Tile)
                .collect(),
            ..self.clone()
        }
    }

    /// A `rows x self.cols()` layout with one row block and this layout's
    /// column blocks, each on the tile of this layout's block in its first
    /// row block: a weight matrix laid out so that a product's output blocks
    /// find their columns of it on their own tiles.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// let w = l.columns_like(5);
    /// assert_eq!((w.rows(), w.cols(), w.row_blocks()), (5, 4, 1));
    /// let (wb, lb) = (w.blocks(), l.blocks());
    /// assert_eq!((wb[1].cols.clone(), wb[1].tile), (lb[1].cols.clone(), lb[1].tile));
    /// ```
    #[must_use]
    pub fn columns_like(&self, rows: usize) -> Self {
        Self {
            row_bounds: vec![0, rows],
            col_bounds: self.col_bounds.clone(),
            tiles: self.tiles[..self.col_blocks()].to_vec(),
        }
    }

    /// The elements of the block that is exactly rows `rows` and columns
    /// `cols`, if there is one and it is on `tile`.
    #[must_use]
    pub(crate) fn block_on(
        &self,
        rows: &Range<usize>,
        cols: &Range<usize>,
        tile: Tile,
    ) -> Option<Range<u64>> {
        // The block whose bounds are exactly these (found by search: a
        // product asks this of every block of its output).
        let exact = |bounds: &[usize], r: &Range<usize>| {
            let i = bounds.partition_point(|&b| b < r.start);
            (bounds.get(i) == Some(&r.start) && bounds.get(i + 1) == Some(&r.end)).then_some(i)
        };
        let i = exact(&self.row_bounds, rows)?;
        let j = exact(&self.col_bounds, cols)?;
        (self.tiles[i * self.col_blocks() + j] == tile).then(|| {
            let at = self.offset(rows.start, cols.start);
            at..at + (rows.len() * cols.len()) as u64
        })
    }

    /// The contiguous runs [`gather_copies`] makes of rows `rows` and
    /// columns `cols` of a matrix in this layout: per row, one per column
    /// block the columns touch.
    #[must_use]
    pub(crate) fn runs(&self, rows: &Range<usize>, cols: &Range<usize>) -> u64 {
        if cols.is_empty() {
            return 0;
        }
        let first = self.col_bounds.partition_point(|&b| b <= cols.start) - 1;
        let end = self.col_bounds.partition_point(|&b| b < cols.end);
        (rows.len() as u64).saturating_mul((end - first) as u64)
    }

    /// Rows of the matrix.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// assert_eq!(l.rows(), 3);
    /// ```
    #[must_use]
    pub fn rows(&self) -> usize {
        *self.row_bounds.last().expect("at least one bound")
    }

    /// Columns of the matrix.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// assert_eq!(l.cols(), 4);
    /// ```
    #[must_use]
    pub fn cols(&self) -> usize {
        *self.col_bounds.last().expect("at least one bound")
    }

    /// Elements of the matrix.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// assert_eq!(l.len(), 12);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows() * self.cols()
    }

    /// Whether the matrix has no elements.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// assert!(BlockLayout::dense(0, 3, 0).is_empty());
    /// assert!(!BlockLayout::grid(3, 4, 2, 2, 4).is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of column blocks.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// assert_eq!(l.col_blocks(), 2);
    /// ```
    #[must_use]
    pub fn col_blocks(&self) -> usize {
        self.col_bounds.len() - 1
    }

    /// Number of row blocks.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// assert_eq!(l.row_blocks(), 2);
    /// ```
    #[must_use]
    pub fn row_blocks(&self) -> usize {
        self.row_bounds.len() - 1
    }

    /// Every block, in grid order (the order they are stored in).
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// let b = l.blocks();
    /// assert_eq!(b.len(), 4);
    /// // Block (1, 0): row 2, columns 0..2, stored after the 8 elements of row
    /// // block 0, on the third tile.
    /// assert_eq!((b[2].rows.clone(), b[2].cols.clone()), (2..3, 0..2));
    /// assert_eq!((b[2].elements.clone(), b[2].tile), (8..10, 2));
    /// ```
    #[must_use]
    pub fn blocks(&self) -> Vec<Block> {
        let mut out = Vec::new();
        let mut at = 0u64;
        for (i, r) in self.row_bounds.windows(2).enumerate() {
            for (j, c) in self.col_bounds.windows(2).enumerate() {
                let n = ((r[1] - r[0]) * (c[1] - c[0])) as u64;
                out.push(Block {
                    rows: r[0]..r[1],
                    cols: c[0]..c[1],
                    elements: at..at + n,
                    tile: self.tiles[i * self.col_blocks() + j],
                });
                at += n;
            }
        }
        out
    }

    /// The tile mapping of a tensor in this layout (empty blocks omitted).
    ///
    /// ```
    /// use tessera_sim::ipu::{Interval, Mapping};
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// let l = BlockLayout::grid(2, 4, 1, 2, 2);
    /// let want = vec![Interval::new(0, 0..4), Interval::new(1, 4..8)];
    /// assert_eq!(l.mapping(), Mapping::Explicit(want));
    /// ```
    #[must_use]
    pub fn mapping(&self) -> Mapping {
        Mapping::Explicit(
            self.blocks()
                .into_iter()
                .filter(|b| !b.elements.is_empty())
                .map(|b| Interval::new(b.tile, b.elements))
                .collect(),
        )
    }

    /// The position in the tensor of element `(r, c)`.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// // Block (0, 1) starts after block (0, 0)'s 4 elements.
    /// assert_eq!(l.offset(0, 2), 4);
    /// assert_eq!(l.offset(1, 3), 7);
    /// assert_eq!(l.offset(2, 0), 8);
    /// ```
    #[must_use]
    pub fn offset(&self, r: usize, c: usize) -> u64 {
        let i = self.row_bounds.partition_point(|&b| b <= r) - 1;
        let j = self.col_bounds.partition_point(|&b| b <= c) - 1;
        let (r0, r1) = (self.row_bounds[i], self.row_bounds[i + 1]);
        let (c0, c1) = (self.col_bounds[j], self.col_bounds[j + 1]);
        let before_rows = r0 * self.cols();
        let before_cols = (r1 - r0) * c0;
        (before_rows + before_cols + (r - r0) * (c1 - c0) + (c - c0)) as u64
    }

    /// Contiguous runs of the tensor holding row `r`, columns `cols`, in
    /// column order.
    #[must_use]
    pub(crate) fn row_runs(&self, r: usize, cols: Range<usize>) -> Vec<Range<u64>> {
        let mut runs = Vec::new();
        let mut c = cols.start;
        while c < cols.end {
            let j = self.col_bounds.partition_point(|&b| b <= c) - 1;
            let end = self.col_bounds[j + 1].min(cols.end);
            let at = self.offset(r, c);
            runs.push(at..at + (end - c) as u64);
            c = end;
        }
        runs
    }

    /// Reorders a row-major matrix into this layout.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    /// let blocked = l.from_row_major(&x);
    /// assert_eq!(blocked[..4], [0.0, 1.0, 4.0, 5.0]); // block (0, 0)
    /// // Element (r, c) lands at `offset(r, c)`.
    /// assert_eq!(blocked[l.offset(2, 3) as usize], x[2 * 4 + 3]);
    /// ```
    #[must_use]
    pub fn from_row_major(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        for b in self.blocks() {
            let w = b.cols.len();
            for (k, r) in b.rows.clone().enumerate() {
                let at = b.elements.start as usize + k * w;
                out[at..at + w].copy_from_slice(&x[r * self.cols() + b.cols.start..][..w]);
            }
        }
        out
    }

    /// Reorders a matrix in this layout into row-major order.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::BlockLayout;
    ///
    /// // 3 x 4 in 2 x 2 blocks: rows 0..2 and 2..3, columns 0..2 and 2..4.
    /// let l = BlockLayout::grid(3, 4, 2, 2, 4);
    /// let x: Vec<f32> = (0..12).map(|i| i as f32).collect();
    /// assert_eq!(l.to_row_major(&l.from_row_major(&x)), x);
    /// ```
    #[must_use]
    pub fn to_row_major(&self, x: &[f32]) -> Vec<f32> {
        let mut out = vec![0.0; self.len()];
        for b in self.blocks() {
            let w = b.cols.len();
            for (k, r) in b.rows.clone().enumerate() {
                let at = b.elements.start as usize + k * w;
                out[r * self.cols() + b.cols.start..][..w].copy_from_slice(&x[at..at + w]);
            }
        }
        out
    }
}

/// A matrix operand: a tensor, its layout, and whether the product uses
/// its transpose.
#[derive(Clone, Debug)]
pub struct Operand {
    /// The tensor.
    pub tensor: TensorId,
    /// Its layout (of the stored matrix, before any transpose).
    pub layout: BlockLayout,
    /// The product uses the transpose.
    pub transposed: bool,
}

/// Adds to `copies` the gather of rows `rows` and columns `cols` of the
/// matrix in `src` (laid out as `layout`) into `dst` from element `at`,
/// dense row-major.
pub(crate) fn gather_copies(
    copies: &mut Vec<(TensorSlice, TensorSlice)>,
    src: TensorId,
    layout: &BlockLayout,
    rows: Range<usize>,
    cols: Range<usize>,
    dst: TensorId,
    mut at: u64,
) {
    for r in rows {
        for run in layout.row_runs(r, cols.clone()) {
            let n = run.end - run.start;
            copies.push((
                TensorSlice::new(src, run),
                TensorSlice::new(dst, at..at + n),
            ));
            at += n;
        }
    }
}

/// The element type a product's result is rounded to (it is stored in
/// f32 either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Output {
    /// Not rounded.
    F32,
    /// Rounded to nearest f16 (overflow to infinity), as the AMP unit
    /// writes f16 results: no extra cycles.
    F16,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Layouts of a few shapes and grids, also shifted and column-like.
    fn layouts() -> Vec<BlockLayout> {
        let mut out = Vec::new();
        for (rows, cols) in [(1, 1), (3, 7), (8, 64), (5, 33)] {
            for (rb, cb) in [(1, 1), (2, 3), (3, 8), (8, 64)] {
                let l = BlockLayout::grid(rows, cols, rb, cb, 7);
                out.push(l.columns_like(4));
                out.push(l.clone().shifted(2));
                out.push(l);
            }
        }
        out
    }

    #[test]
    fn runs_count_the_copies_a_gather_makes() {
        for layout in layouts() {
            let (rows, cols) = (layout.rows(), layout.cols());
            for r in [0..rows, 0..rows.div_ceil(2), rows / 2..rows, 0..0] {
                for c in [
                    0..cols,
                    1.min(cols)..cols,
                    0..cols / 2,
                    cols / 3..cols / 3 + 1,
                ] {
                    let c = c.start.min(cols)..c.end.min(cols);
                    let mut copies = Vec::new();
                    gather_copies(
                        &mut copies,
                        TensorId(0),
                        &layout,
                        r.clone(),
                        c.clone(),
                        TensorId(1),
                        0,
                    );
                    assert_eq!(
                        layout.runs(&r, &c),
                        copies.len() as u64,
                        "{layout:?} {r:?} {c:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn block_on_finds_exactly_the_block_on_its_tile() {
        for layout in layouts() {
            let blocks = layout.blocks();
            for b in &blocks {
                for tile in [b.tile, b.tile + 1] {
                    let slow = blocks
                        .iter()
                        .find(|o| o.rows == b.rows && o.cols == b.cols && o.tile == tile)
                        .map(|o| o.elements.clone());
                    assert_eq!(layout.block_on(&b.rows, &b.cols, tile), slow, "{layout:?}");
                }
                // A sub-range of a block is not a block.
                if b.cols.len() > 1 {
                    let part = b.cols.start..b.cols.end - 1;
                    assert_eq!(layout.block_on(&b.rows, &part, b.tile), None);
                }
            }
        }
    }
}
