//! Tile-parallel matrix products: `C = op(A) op(B)` with the output cut
//! into blocks (rows x columns), one vertex per block on its tile calling
//! [`gemm`] on operands exchanged to that tile.
//!
//! The reduction dimension is never split, and [`gemm`] (Tessera's own,
//! `tessera_core::kernels::gemm`) computes an element as the sum of its
//! products in increasing `p`, each product rounded, then added, with no
//! fused multiply-add, on every CPU backend. So the result is bitwise that
//! of one whole-matrix call, for every blocking and every number of tiles
//! (the tests check it for many shapes), and the same on every CPU. (The
//! simulator first used `matrixmultiply::sgemm`, which picks FMA kernels at
//! run time, so trained weights differed between CPUs with and without
//! FMA; [`gemm_matrixmultiply`] remains as the benchmarks' reference.)
//!
//! Matrices live in tensors in a [`BlockLayout`]: a grid of row and
//! column blocks, each block stored contiguously (row-major inside it) on
//! one tile, so a vertex's output block is one field. A plain row-major
//! matrix is the layout of one block ([`BlockLayout::dense`]).

use core::ops::Range;
use std::sync::Arc;

use tessera_core::fp::{HalfFloat, f16};
use tessera_core::kernels;

use crate::ipu::{
    Access, Codelet, DType, FieldSpec, Graph, GraphError, Interval, IpuSpec, Kernel, Mapping,
    Program, TensorId, TensorSlice, Tile, VertexCycles, VertexIo,
};

pub use tessera_core::kernels::GemmShape;

/// `c = op(a) op(b)` by [`tessera_core::kernels::gemm`] (see [`GemmShape`]
/// for the layouts): the same bits on every CPU.
///
/// # Panics
/// If a slice's length is not its matrix's.
pub fn gemm(shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
    let mut scratch = vec![0.0f32; kernels::gemm_scratch_len(&shape)];
    kernels::gemm(shape, a, b, c, &mut scratch);
}

/// `c = op(a) op(b)` by one [`matrixmultiply::sgemm`] call: the reference
/// `tessera bench` measures [`gemm`] against. Its bits depend on the CPU
/// (`sgemm` uses FMA where the CPU has it), so the simulator does not use
/// it.
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
fn split(len: usize, parts: usize) -> Vec<usize> {
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

    /// The same layout with every block `first` tiles further on (a
    /// layout planned over `0..n` moved to the tiles `first..first + n`).
    #[must_use]
    pub fn shifted(mut self, first: Tile) -> Self {
        for t in &mut self.tiles {
            *t += first;
        }
        self
    }

    /// A `rows x self.cols()` layout with one row block and this layout's
    /// column blocks, each on the tile of this layout's block in its first
    /// row block: a weight matrix laid out so that a product's output blocks
    /// find their columns of it on their own tiles.
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
    pub fn block_on(
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
    pub fn runs(&self, rows: &Range<usize>, cols: &Range<usize>) -> u64 {
        if cols.is_empty() {
            return 0;
        }
        let first = self.col_bounds.partition_point(|&b| b <= cols.start) - 1;
        let end = self.col_bounds.partition_point(|&b| b < cols.end);
        (rows.len() as u64).saturating_mul((end - first) as u64)
    }

    /// Rows of the matrix.
    #[must_use]
    pub fn rows(&self) -> usize {
        *self.row_bounds.last().expect("at least one bound")
    }

    /// Columns of the matrix.
    #[must_use]
    pub fn cols(&self) -> usize {
        *self.col_bounds.last().expect("at least one bound")
    }

    /// Elements of the matrix.
    #[must_use]
    pub fn len(&self) -> usize {
        self.rows() * self.cols()
    }

    /// Whether the matrix has no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Number of column blocks.
    #[must_use]
    pub fn col_blocks(&self) -> usize {
        self.col_bounds.len() - 1
    }

    /// Number of row blocks.
    #[must_use]
    pub fn row_blocks(&self) -> usize {
        self.row_bounds.len() - 1
    }

    /// Every block, in grid order (the order they are stored in).
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
    pub fn row_runs(&self, r: usize, cols: Range<usize>) -> Vec<Range<u64>> {
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
pub fn gather_copies(
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

/// A matrix product on one block: fields `a`, `b` (read), `c` (written).
#[derive(Debug)]
struct MatMul {
    shape: GemmShape,
    kernel: Kernel,
    output: Output,
    fields: [FieldSpec; 3],
}

impl Codelet for MatMul {
    fn name(&self) -> &str {
        "matmul"
    }

    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }

    fn cycles(&self, _lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(self.kernel);
        VertexCycles::AllWorkers(
            cost.multi_thread_cycles(self.shape.flops(), spec.workers_per_tile()),
        )
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let [a, b, c] = io.many([0, 1, 2]);
        let c = c.into_slice::<f32>();
        gemm(self.shape, a.into_slice::<f32>(), b.into_slice::<f32>(), c);
        if self.output == Output::F16 {
            for x in c {
                *x = <f16 as HalfFloat>::from_f32(*x).to_f32();
            }
        }
    }
}

/// Adds `C = op(A) op(B)` into `c` (an f32 tensor laid out as `c_layout`):
/// one exchange gathers each block's rows of `op(A)` and columns of
/// `op(B)` into staging tensors on the block's tile (unless that
/// sub-matrix is already one block of the operand on that tile, which the
/// vertex then reads in place), then one compute set runs a vertex per
/// block. `kernel` ([`Kernel::MatmulF16`] or
/// [`Kernel::MatmulF32`]) prices the vertices; `output` says whether the
/// result is rounded to f16. The result is bitwise one [`gemm`] of the
/// whole matrices (then rounded).
///
/// # Errors
/// [`GraphError::CopyMismatch`] if the shapes do not agree, and the
/// graph's errors.
// The operands, the output and the arithmetic are each one argument.
#[allow(clippy::too_many_arguments)]
pub fn matmul(
    graph: &mut Graph,
    name: &str,
    a: &Operand,
    b: &Operand,
    c: TensorId,
    c_layout: &BlockLayout,
    kernel: Kernel,
    output: Output,
) -> Result<Program, GraphError> {
    let (m, k) = if a.transposed {
        (a.layout.cols(), a.layout.rows())
    } else {
        (a.layout.rows(), a.layout.cols())
    };
    let (kb, n) = if b.transposed {
        (b.layout.cols(), b.layout.rows())
    } else {
        (b.layout.rows(), b.layout.cols())
    };
    if k != kb || c_layout.rows() != m || c_layout.cols() != n {
        return Err(GraphError::CopyMismatch { copy: 0 });
    }
    let mut copies = Vec::new();
    let cs = graph.add_compute_set(name);
    let mut codelets: Vec<(GemmShape, Arc<dyn Codelet>)> = Vec::new();
    for (index, block) in c_layout.blocks().into_iter().enumerate() {
        if block.elements.is_empty() {
            continue;
        }
        let (r, w) = (block.rows.len(), block.cols.len());
        let tile = block.tile;
        // Each operand's sub-matrix, dense row-major: read in place if it
        // is one block of the operand on this tile, else gathered.
        let (a_rows, a_cols) = if a.transposed {
            (0..k, block.rows.clone())
        } else {
            (block.rows.clone(), 0..k)
        };
        let (b_rows, b_cols) = if b.transposed {
            (block.cols.clone(), 0..k)
        } else {
            (0..k, block.cols.clone())
        };
        let mut fields = Vec::new();
        for (op, rows, cols, tag) in [(a, a_rows, a_cols, 'a'), (b, b_rows, b_cols, 'b')] {
            // The layout's tiles are a plan: the tensor's mapping decides.
            let held = |e: &Range<u64>| {
                graph
                    .mapping(op.tensor)
                    .iter()
                    .any(|i| i.tile == tile && i.range.start <= e.start && e.end <= i.range.end)
            };
            if let Some(elements) = op.layout.block_on(&rows, &cols, tile).filter(held) {
                fields.push(TensorSlice::new(op.tensor, elements));
                continue;
            }
            let len = (rows.len() * cols.len()) as u64;
            let staged = graph.add_tensor(
                &format!("{name}.{tag}{index}"),
                DType::F32,
                &[len],
                Mapping::one_tile(tile, len),
            )?;
            if graph.is_sizing() {
                let runs = op.layout.runs(&rows, &cols);
                graph.count_received_runs(tile, runs);
            } else {
                gather_copies(&mut copies, op.tensor, &op.layout, rows, cols, staged, 0);
            }
            fields.push(graph.all(staged));
        }
        let shape = GemmShape {
            m: r,
            k,
            n: w,
            a_transposed: a.transposed,
            b_transposed: b.transposed,
        };
        let codelet = match codelets.iter().find(|(s, _)| *s == shape) {
            Some((_, c)) => c.clone(),
            None => {
                let c: Arc<dyn Codelet> = Arc::new(MatMul {
                    shape,
                    kernel,
                    output,
                    fields: [
                        FieldSpec::new(DType::F32, Access::Read),
                        FieldSpec::new(DType::F32, Access::Read),
                        FieldSpec::new(DType::F32, Access::Write),
                    ],
                });
                codelets.push((shape, c.clone()));
                c
            }
        };
        graph.add_vertex(
            cs,
            tile,
            codelet,
            &[
                fields[0].clone(),
                fields[1].clone(),
                TensorSlice::new(c, block.elements),
            ],
        )?;
    }
    if copies.is_empty() {
        return Ok(Program::Execute(cs));
    }
    let ex = graph.add_exchange(&format!("{name}.gather"), &copies)?;
    Ok(Program::sequence([
        Program::Exchange(ex),
        Program::Execute(cs),
    ]))
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
