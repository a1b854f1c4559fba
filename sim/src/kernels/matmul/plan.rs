//! How a product is cut over tiles, as PopLibs' matmul planner cuts it:
//! rows `m`, columns `n` and the reduction `k` each split, the split
//! chosen to minimise the busiest tile's cycles within a memory budget.
//!
//! A [`ProductPlan`] has compute blocks (a row range by a column range of
//! `C`), each computed in `k_parts` parts (a power of two, at most the
//! reduction's [`leaves`]): part `q` computes the partial of its aligned
//! run of leaves on its own tile. With `k_parts > 1`, each block's output
//! is cut into pieces (by rows, or by columns when whole columns must stay
//! on one tile), piece `q` on part `q`'s tile, which receives the other
//! parts' partials of that piece and adds them in the tree's top levels.
//! The tree depends on `k` alone ([`leaves`]), so the result is bitwise
//! the same for every plan.

use core::ops::Range;

use super::leaves::leaf_count;
use super::{BlockLayout, split};
use crate::ipu::{IpuSpec, Kernel, Tile};

/// The share of a tile's memory one product's staging (operands,
/// partials, its piece of the output, exchange code) may take: an
/// assumption. Graph memory is static here (no liveness analysis reuses a
/// product's staging for the next, as Poplar does), so a layer's three
/// products and its activations share the tile; PopLibs' default
/// `availableMemoryProportion` is 0.6 of what liveness leaves free.
pub const PRODUCT_MEMORY_FRACTION: u64 = 16;

/// Requirements on the output's layout.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cut {
    /// Every row of `C` whole on one tile (one column block).
    pub full_rows: bool,
    /// Every column of `C` whole on one tile (one row block).
    pub full_cols: bool,
}

/// One compute block of a plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComputeBlock {
    /// Rows of `C`.
    pub rows: Range<usize>,
    /// Columns of `C`.
    pub cols: Range<usize>,
    /// The tile of each reduction part.
    pub tiles: Vec<Tile>,
    /// The block's output pieces (rows, columns of `C`), piece `q` on
    /// `tiles[q]`; one piece (the block) when `k_parts == 1`.
    pub pieces: Vec<(Range<usize>, Range<usize>)>,
}

/// A product's cut over tiles (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProductPlan {
    m: usize,
    k: usize,
    n: usize,
    out: BlockLayout,
    blocks: Vec<ComputeBlock>,
    k_parts: usize,
    /// Pieces cut along rows (else columns).
    by_rows: bool,
}

/// An operand as the planner sees it: its stored layout and orientation,
/// or laid out by the plan itself ([`ProductPlan::b_layout`]).
#[derive(Clone, Copy, Debug)]
pub enum Source<'a> {
    /// Stored in this layout, transposed or not.
    Layout(&'a BlockLayout, bool),
    /// Laid out by the plan (weights): read in place where it can be.
    Planned,
}

/// What the planner prices: the product's shape, its operands, the tiles.
#[derive(Clone, Copy, Debug)]
pub struct Problem<'a> {
    /// `C` is `m x n`, the reduction `k`.
    pub m: usize,
    /// The reduction.
    pub k: usize,
    /// Columns of `C`.
    pub n: usize,
    /// The left operand.
    pub a: Source<'a>,
    /// The right operand.
    pub b: Source<'a>,
    /// The tiles the product may use.
    pub tiles: &'a Range<Tile>,
    /// The fewest flops a part gets.
    pub min_flops: u64,
    /// The product's kernel (its cycles per flop).
    pub kernel: Kernel,
}

/// A candidate's cost on its busiest tile.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Cost {
    cycles: u64,
    bytes: u64,
    parts: usize,
}

impl Problem<'_> {
    /// The most parts: one per tile, none under `min_flops`.
    fn max_parts(&self) -> usize {
        let flops = 2 * self.m as u64 * self.n as u64 * self.k as u64;
        let tiles = u64::from(self.tiles.end - self.tiles.start).max(1);
        (flops / self.min_flops.max(1)).clamp(1, tiles) as usize
    }

    /// Elements and exchange runs of operand `src` that a part of rows
    /// `rows` (of `op`'s rows) and reduction `k` gathers; `left` for A.
    fn gathered(
        &self,
        src: Source<'_>,
        outer: Range<usize>,
        k: Range<usize>,
        left: bool,
        pm: usize,
    ) -> (u64, u64) {
        let elements = (outer.len() * k.len()) as u64;
        match src {
            Source::Planned if pm == 1 => (0, 0),
            Source::Planned => (elements, k.len() as u64),
            Source::Layout(layout, transposed) => {
                // op(A) is outer x k, op(B) is k x outer.
                let k_is_rows = transposed == left;
                let (r, c) = if k_is_rows { (k, outer) } else { (outer, k) };
                (elements, layout.runs(&r, &c))
            }
        }
    }

    /// The cost of `pm x pn` blocks in `pk` parts each.
    fn cost(
        &self,
        spec: &IpuSpec,
        sync: u64,
        (pm, pn, pk): (usize, usize, usize),
        cut: Cut,
    ) -> Cost {
        let (rows, cols) = (self.m.div_ceil(pm), self.n.div_ceil(pn));
        let l = leaf_count(self.k);
        let kq = (l / pk) * self.k.div_ceil(l);
        let (ea, ra) = self.gathered(self.a, 0..rows, 0..kq.min(self.k), true, 1);
        let (eb, rb) = self.gathered(self.b, 0..cols, 0..kq.min(self.k), false, pm);
        let workers = u64::from(spec.workers_per_tile());
        let phase = |kernel: Kernel, n: u64| {
            u64::from(spec.params().compute_set_cycles)
                + workers
                    * spec
                        .costs()
                        .get(kernel)
                        .multi_thread_cycles(n, spec.workers_per_tile())
        };
        let block = (rows * cols) as u64;
        let mut cycles = sync
            + spec.exchange_cycles(0, 4 * (ea + eb))
            + phase(self.kernel, 2 * block * kq as u64);
        let mut elements = ea + eb + block;
        let mut runs = ra + rb;
        if pk > 1 {
            let along = if cut.full_cols { cols } else { rows };
            let piece = block.div_ceil(pk.min(along).max(1) as u64);
            let received = (pk as u64 - 1) * piece;
            cycles +=
                sync + spec.exchange_cycles(0, 4 * received) + phase(Kernel::Combine, received);
            elements += received + piece;
            runs += pk as u64 - 1;
        }
        let bytes = 4 * elements + u64::from(spec.params().exchange_code_bytes) * runs;
        Cost {
            cycles,
            bytes,
            parts: pm * pn * pk,
        }
    }
}

impl ProductPlan {
    /// The cut of `problem` with the fewest cycles on its busiest tile
    /// among those whose staging fits [`PRODUCT_MEMORY_FRACTION`] of a
    /// tile (the fewest bytes if none does); ties go to fewer bytes, then
    /// fewer parts.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::kernels::matmul::{BlockLayout, Cut, Problem, ProductPlan, Source};
    ///
    /// let (a, b, tiles) = (BlockLayout::dense(4, 256, 0), BlockLayout::dense(256, 6, 0), 0..8);
    /// let (a, b) = (Source::Layout(&a, false), Source::Layout(&b, false));
    /// let problem =
    ///     Problem { m: 4, k: 256, n: 6, a, b, tiles: &tiles, min_flops: 1, kernel: Kernel::MatmulF32 };
    /// let whole_rows = Cut { full_rows: true, full_cols: false };
    /// let plan = ProductPlan::choose(&problem, &IpuSpec::MK2_GC200, 100, whole_rows);
    /// assert_eq!(plan.output().col_blocks(), 1);
    /// assert!(plan.blocks().iter().flat_map(|b| &b.tiles).all(|t| tiles.contains(t)));
    /// ```
    #[must_use]
    pub fn choose(problem: &Problem<'_>, spec: &IpuSpec, sync: u64, cut: Cut) -> Self {
        let budget = spec.memory_per_tile() / PRODUCT_MEMORY_FRACTION;
        let mut best = best_split(problem, (spec, sync), cut, problem.max_parts(), budget);
        // Over twice the budget within the flops floor (an eighth of the
        // tile): every tile may take a part (memory first, as PopLibs'
        // planner).
        let tiles = (problem.tiles.end - problem.tiles.start).max(1) as usize;
        let far = best.1.bytes > spec.memory_per_tile() / 8;
        if far && problem.max_parts() < tiles {
            let wide = best_split(problem, (spec, sync), cut, tiles, budget);
            if (wide.0, wide.1.bytes) < (true, best.1.bytes) {
                best = wide;
            }
        }
        Self::grid(problem, best.2, cut)
    }

    /// The plan of `pm x pn` blocks (fewer if `m` or `n` is shorter) in
    /// `pk` parts each, spread evenly over the problem's tiles in (block,
    /// part) order: a cut chosen by hand.
    ///
    /// # Panics
    /// If `pk` is not a power of two of at most `leaves(k)` leaves.
    ///
    /// ```
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::kernels::matmul::{BlockLayout, Cut, Problem, ProductPlan, Source};
    ///
    /// let (a, b, tiles) = (BlockLayout::dense(4, 256, 0), BlockLayout::dense(256, 6, 0), 0..8);
    /// let (a, b) = (Source::Layout(&a, false), Source::Layout(&b, false));
    /// let problem =
    ///     Problem { m: 4, k: 256, n: 6, a, b, tiles: &tiles, min_flops: 1, kernel: Kernel::MatmulF32 };
    /// let plan = ProductPlan::with_split(&problem, (2, 3, 2), Cut::default());
    /// assert_eq!((plan.blocks().len(), plan.k_parts()), (6, 2));
    /// assert!(plan.blocks().iter().all(|b| b.tiles.len() == 2));
    /// ```
    #[must_use]
    pub fn with_split(problem: &Problem<'_>, split: (usize, usize, usize), cut: Cut) -> Self {
        let l = leaf_count(problem.k);
        assert!(
            split.2.is_power_of_two() && split.2 <= l,
            "{} parts of {l} leaves",
            split.2
        );
        Self::grid(problem, split, cut)
    }

    /// The plan of `pm x pn` blocks in `pk` parts each, spread evenly over
    /// the problem's tiles in (block, part) order.
    fn grid(problem: &Problem<'_>, (pm, pn, pk): (usize, usize, usize), cut: Cut) -> Self {
        let (m, k, n) = (problem.m, problem.k, problem.n);
        let row_bounds = split(m, pm);
        let col_bounds = split(n, pn);
        let first = problem.tiles.start;
        let span = u64::from(problem.tiles.end - problem.tiles.start).max(1);
        let nblocks = (row_bounds.len() - 1) * (col_bounds.len() - 1);
        let parts = (nblocks * pk) as u64;
        let by_rows = !cut.full_cols;
        let mut blocks = Vec::with_capacity(nblocks);
        for r in row_bounds.windows(2) {
            for c in col_bounds.windows(2) {
                let index = blocks.len() as u64;
                let tiles = (0..pk as u64)
                    .map(|q| first + ((index * pk as u64 + q) * span / parts) as Tile)
                    .collect();
                blocks.push(ComputeBlock {
                    rows: r[0]..r[1],
                    cols: c[0]..c[1],
                    tiles,
                    pieces: pieces(&(r[0]..r[1]), &(c[0]..c[1]), pk, by_rows),
                });
            }
        }
        let (pm, pn) = (row_bounds.len() - 1, col_bounds.len() - 1);
        // The output's grid: the blocks' bounds, cut again at the pieces.
        let mut rows = Vec::new();
        let mut cols = Vec::new();
        let mut tiles = Vec::new();
        let at = |i: usize, j: usize| &blocks[i * pn + j];
        for (i, &start) in row_bounds[..pm].iter().enumerate() {
            if by_rows {
                rows.extend(at(i, 0).pieces.iter().map(|p| p.0.start));
                for q in 0..at(i, 0).pieces.len() {
                    tiles.extend((0..pn).map(|j| at(i, j).tiles[q]));
                }
            } else {
                rows.push(start);
                for j in 0..pn {
                    tiles.extend(at(i, j).tiles[..at(i, j).pieces.len()].iter().copied());
                }
            }
        }
        for (j, &start) in col_bounds[..pn].iter().enumerate() {
            if by_rows {
                cols.push(start);
            } else {
                cols.extend(at(0, j).pieces.iter().map(|p| p.1.start));
            }
        }
        rows.push(m);
        cols.push(n);
        Self {
            m,
            k,
            n,
            out: BlockLayout::from_parts(rows, cols, tiles),
            blocks,
            k_parts: pk,
            by_rows,
        }
    }

    /// A plan whose output is `out` (a layout fixed elsewhere, as an
    /// activation gradient's must match its activation): each block of
    /// `out` is a compute block, reduced onto its own tile; `k_parts`
    /// chosen as in [`ProductPlan::choose`], part `q > 0` on the tile `q /
    /// k_parts` of the way round the problem's tiles.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::kernels::matmul::{BlockLayout, Cut, Problem, ProductPlan, Source};
    ///
    /// let (a, b, tiles) = (BlockLayout::dense(4, 256, 0), BlockLayout::dense(256, 6, 0), 0..8);
    /// let (a, b) = (Source::Layout(&a, false), Source::Layout(&b, false));
    /// let problem =
    ///     Problem { m: 4, k: 256, n: 6, a, b, tiles: &tiles, min_flops: 1, kernel: Kernel::MatmulF32 };
    /// let out = BlockLayout::grid(4, 6, 2, 1, 8);
    /// let plan = ProductPlan::onto(&out, &problem, &IpuSpec::MK2_GC200, 100);
    /// assert_eq!((plan.output(), plan.blocks().len()), (&out, 2));
    /// ```
    #[must_use]
    pub fn onto(out: &BlockLayout, problem: &Problem<'_>, spec: &IpuSpec, sync: u64) -> Self {
        let blocks = out.blocks();
        let budget = spec.memory_per_tile() / PRODUCT_MEMORY_FRACTION;
        let most = problem.max_parts().max(blocks.len());
        let l = leaf_count(problem.k);
        let (pm, pn) = (out.row_blocks(), out.col_blocks());
        let cut = Cut {
            full_rows: false,
            full_cols: true,
        };
        let mut best: Option<((bool, u64, u64), usize)> = None;
        let mut pk = 1;
        // Within the flops floor, or beyond it while over the budget.
        while pk <= l && (pk * blocks.len() <= most || best.is_some_and(|(k, _)| k.0)) {
            let mut c = problem.cost(spec, sync, (pm, pn, pk), cut);
            // One piece per block: the block's tile receives every partial.
            if pk > 1 {
                let block = (problem.m.div_ceil(pm) * problem.n.div_ceil(pn)) as u64;
                c.bytes += 4 * (pk as u64 - 1) * block;
            }
            let over = c.bytes > budget;
            let key = if over {
                (over, c.bytes, c.cycles)
            } else {
                (over, c.cycles, c.bytes)
            };
            if best.is_none_or(|(b, _)| key < b) {
                best = Some((key, pk));
            }
            pk *= 2;
        }
        let pk = best.map_or(1, |(_, pk)| pk);
        Self::onto_parts(out, problem.k, problem.tiles, pk)
    }

    /// Every block of `out` one compute block of one part on its own
    /// tile: the reduction not split (for layouts chosen by hand).
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::{BlockLayout, ProductPlan};
    ///
    /// let out = BlockLayout::grid(4, 6, 2, 2, 4);
    /// let plan = ProductPlan::unsplit(&out, 256);
    /// assert_eq!((plan.output(), plan.blocks().len(), plan.k_parts()), (&out, 4, 1));
    /// ```
    #[must_use]
    pub fn unsplit(out: &BlockLayout, k: usize) -> Self {
        Self::onto_parts(out, k, &(0..1), 1)
    }

    /// [`ProductPlan::onto`] with `pk` parts per block (a power of two of
    /// at most `leaves(k)`), over `tiles`.
    ///
    /// # Panics
    /// If `pk` is not such a power of two.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::{BlockLayout, ProductPlan};
    ///
    /// let out = BlockLayout::grid(4, 6, 2, 1, 8);
    /// let plan = ProductPlan::onto_parts(&out, 256, &(0..8), 2);
    /// let block = &plan.blocks()[1];
    /// assert_eq!(block.tiles[0], out.blocks()[1].tile); // part 0 on the block's tile
    /// assert_eq!(block.tiles.len(), 2);
    /// ```
    #[must_use]
    pub fn onto_parts(out: &BlockLayout, k: usize, tiles: &Range<Tile>, pk: usize) -> Self {
        let l = leaf_count(k);
        assert!(pk.is_power_of_two() && pk <= l, "{pk} parts of {l} leaves");
        let first = tiles.start;
        let span = (tiles.end - tiles.start).max(1);
        let blocks = out.blocks();
        // Part q > 0 q steps after its block's tile, the steps dividing the
        // gap to the next block (blocks spread evenly): no two parts share
        // a tile while blocks x parts <= tiles.
        let step = (span as usize / (blocks.len() * pk).max(1)).max(1) as Tile;
        let compute = blocks
            .into_iter()
            .map(|b| ComputeBlock {
                tiles: (0..pk as Tile)
                    .map(|q| match q {
                        0 => b.tile,
                        _ => first + (b.tile.saturating_sub(first) + q * step) % span,
                    })
                    .collect(),
                pieces: vec![(b.rows.clone(), b.cols.clone())],
                rows: b.rows,
                cols: b.cols,
            })
            .collect();
        Self {
            m: out.rows(),
            k,
            n: out.cols(),
            out: out.clone(),
            blocks: compute,
            k_parts: pk,
            by_rows: true,
        }
    }

    /// The output's layout.
    ///
    /// ```
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::kernels::matmul::{BlockLayout, Cut, Problem, ProductPlan, Source};
    ///
    /// let (a, b, tiles) = (BlockLayout::dense(4, 256, 0), BlockLayout::dense(256, 6, 0), 0..8);
    /// let (a, b) = (Source::Layout(&a, false), Source::Layout(&b, false));
    /// let problem =
    ///     Problem { m: 4, k: 256, n: 6, a, b, tiles: &tiles, min_flops: 1, kernel: Kernel::MatmulF32 };
    /// let plan = ProductPlan::with_split(&problem, (2, 1, 1), Cut::default());
    /// assert_eq!((plan.output().rows(), plan.output().cols(), plan.output().row_blocks()), (4, 6, 2));
    /// ```
    #[must_use]
    pub const fn output(&self) -> &BlockLayout {
        &self.out
    }

    /// The compute blocks.
    ///
    /// ```
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::kernels::matmul::{BlockLayout, Cut, Problem, ProductPlan, Source};
    ///
    /// let (a, b, tiles) = (BlockLayout::dense(4, 256, 0), BlockLayout::dense(256, 6, 0), 0..8);
    /// let (a, b) = (Source::Layout(&a, false), Source::Layout(&b, false));
    /// let problem =
    ///     Problem { m: 4, k: 256, n: 6, a, b, tiles: &tiles, min_flops: 1, kernel: Kernel::MatmulF32 };
    /// let plan = ProductPlan::with_split(&problem, (2, 1, 1), Cut::default());
    /// let cut: Vec<_> = plan.blocks().iter().map(|b| (b.rows.clone(), b.cols.clone())).collect();
    /// assert_eq!(cut, [(0..2, 0..6), (2..4, 0..6)]);
    /// ```
    #[must_use]
    pub fn blocks(&self) -> &[ComputeBlock] {
        &self.blocks
    }

    /// Parts per block (a power of two).
    ///
    /// ```
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::kernels::matmul::{BlockLayout, Cut, Problem, ProductPlan, Source};
    ///
    /// let (a, b, tiles) = (BlockLayout::dense(4, 256, 0), BlockLayout::dense(256, 6, 0), 0..8);
    /// let (a, b) = (Source::Layout(&a, false), Source::Layout(&b, false));
    /// let problem =
    ///     Problem { m: 4, k: 256, n: 6, a, b, tiles: &tiles, min_flops: 1, kernel: Kernel::MatmulF32 };
    /// assert_eq!(ProductPlan::with_split(&problem, (1, 1, 2), Cut::default()).k_parts(), 2);
    /// ```
    #[must_use]
    pub const fn k_parts(&self) -> usize {
        self.k_parts
    }

    /// `(m, k, n)`.
    #[must_use]
    pub(crate) const fn dims(&self) -> (usize, usize, usize) {
        (self.m, self.k, self.n)
    }

    /// Whether pieces are cut along rows.
    #[must_use]
    pub(crate) const fn by_rows(&self) -> bool {
        self.by_rows
    }

    /// The reduction range of part `q`: its aligned run of leaves, and
    /// the leaves' bounds relative to its start.
    #[must_use]
    pub(crate) fn part_k(&self, q: usize) -> (Range<usize>, Vec<usize>) {
        // Leaf `i` starts at `i q + min(i, r)`, as `leaves` cuts them.
        let count = leaf_count(self.k);
        let (size, extra) = (self.k / count, self.k % count);
        let at = |i: usize| i * size + i.min(extra);
        let per = count / self.k_parts;
        let start = at(q * per);
        let own = (q * per..=(q + 1) * per).map(|i| at(i) - start).collect();
        (start..at((q + 1) * per), own)
    }

    /// The layout of a right operand `k x n` (not transposed) that every
    /// part of the first row of blocks reads in place: row blocks at the
    /// parts' reduction ranges, column blocks at the compute blocks',
    /// block `(q, j)` on the tile of part `q` of block `(0, j)`.
    ///
    /// ```
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::kernels::matmul::{BlockLayout, Cut, Problem, ProductPlan, Source};
    ///
    /// let (a, b, tiles) = (BlockLayout::dense(4, 256, 0), BlockLayout::dense(256, 6, 0), 0..8);
    /// let (a, b) = (Source::Layout(&a, false), Source::Layout(&b, false));
    /// let problem =
    ///     Problem { m: 4, k: 256, n: 6, a, b, tiles: &tiles, min_flops: 1, kernel: Kernel::MatmulF32 };
    /// let plan = ProductPlan::with_split(&problem, (1, 2, 2), Cut::default());
    /// let b = plan.b_layout(); // k cut at the parts' leaves, n at the blocks
    /// assert_eq!((b.rows(), b.cols(), b.row_blocks(), b.col_blocks()), (256, 6, 2, 2));
    /// ```
    #[must_use]
    pub fn b_layout(&self) -> BlockLayout {
        let rows: Vec<usize> = (0..self.k_parts)
            .map(|q| self.part_k(q).0.start)
            .chain([self.k])
            .collect();
        let first_row: Vec<&ComputeBlock> =
            self.blocks.iter().filter(|b| b.rows.start == 0).collect();
        let mut cols: Vec<usize> = first_row.iter().map(|b| b.cols.start).collect();
        cols.push(self.n);
        let mut tiles = Vec::new();
        for q in 0..self.k_parts {
            tiles.extend(first_row.iter().map(|b| b.tiles[q]));
        }
        BlockLayout::from_parts(rows, cols, tiles)
    }
}

/// A block's `pk` output pieces, along rows or columns (fewer if that
/// side is shorter); the whole block for `pk == 1`.
fn pieces(
    rows: &Range<usize>,
    cols: &Range<usize>,
    pk: usize,
    by_rows: bool,
) -> Vec<(Range<usize>, Range<usize>)> {
    let side = if by_rows { rows } else { cols };
    split(side.len(), pk)
        .windows(2)
        .map(|w| {
            let part = side.start + w[0]..side.start + w[1];
            if by_rows {
                (part, cols.clone())
            } else {
                (rows.clone(), part)
            }
        })
        .collect()
}

/// The cut of `problem` with at most `most` parts: the fewest cycles among
/// those within `budget` bytes, else the fewest bytes; whether it is over,
/// its cost and `(pm, pn, pk)`.
fn best_split(
    problem: &Problem<'_>,
    (spec, sync): (&IpuSpec, u64),
    cut: Cut,
    most: usize,
    budget: u64,
) -> (bool, Cost, (usize, usize, usize)) {
    let key = |o: bool, c: Cost| {
        if o {
            (o, c.bytes, c.cycles, c.parts)
        } else {
            (o, c.cycles, c.bytes, c.parts)
        }
    };
    let mut best: Option<(bool, Cost, (usize, usize, usize))> = None;
    let mut pk = 1;
    while pk <= leaf_count(problem.k).min(most) {
        let pm_max = if cut.full_cols {
            1
        } else {
            problem.m.min(most / pk).max(1)
        };
        for pm in 1..=pm_max {
            let pn_max = if cut.full_rows {
                1
            } else {
                problem.n.min(most / (pk * pm)).max(1)
            };
            for pn in 1..=pn_max {
                let c = problem.cost(spec, sync, (pm, pn, pk), cut);
                let over = c.bytes > budget;
                if best.is_none_or(|(o, b, _)| key(over, c) < key(o, b)) {
                    best = Some((over, c, (pm, pn, pk)));
                }
            }
        }
        pk *= 2;
    }
    best.expect("one candidate at least")
}
