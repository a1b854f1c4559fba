//! Batch norm over the micro-batch after the bias, before the activation
//! (see the [model docs](crate::model#batch-norm)), in two passes as
//! PyTorch: each block sums its columns per chunk of rows, each column
//! block's chunk partials are gathered to one of its tiles and added in a
//! tree fixed by the number of chunks, the columns' sums are joined on one
//! tile and handed to the replica group's sum, and the mean
//! comes back to every block; then the same for the squared deviations
//! from that mean. Inference uses the running statistics.

use core::ops::Range;
use std::sync::Arc;

use super::{Act, Builder, Copies, ModelError, Staged};
use crate::ipu::{Codelet, Engine, Mapping, Program, TensorId, TensorSlice, Tile};
use crate::kernels::matmul::{Block, BlockLayout, split};
use crate::model::codelets::{
    BiasAct, BnApply, BnGrad, BnGradSums, BnSquares, BnStats, ChunkTree, GroupSumVertex, round,
};

/// A batch-norm layer's tensors.
#[derive(Debug)]
pub(in crate::model) struct BatchNorm {
    pub(in crate::model) gamma: TensorId,
    pub(in crate::model) beta: TensorId,
    /// The normalised values.
    xhat: TensorId,
    /// Train: the group's forward totals `[S1 (width), n, M2 (width)]`.
    pub(in crate::model) group: Option<TensorId>,
    /// Train: the group's totals staged per block (`[S1, M2, n]`, `2 w +
    /// 1` each).
    totals: Option<Staged>,
    /// Train: this replica's backward sums `[S_dy (width), S_dyxhat
    /// (width)]`: the gradients of beta and gamma.
    local_grad: Option<TensorId>,
    /// Eval: the running `[mean, var]` staged per block.
    pub(in crate::model) running: Option<Staged>,
    /// Rows per chunk of the sums.
    chunk_rows: usize,
}

impl BatchNorm {
    /// The gradients of gamma and beta of the last training run (rounded
    /// to f16 if `f16`).
    pub(in crate::model) fn param_grads(&self, e: &Engine, f16: bool) -> (Vec<f32>, Vec<f32>) {
        let t = self.local_grad.expect("a training graph");
        let sums = e.read_tensor::<f32>(t).expect("f32");
        let w = sums.len() / 2;
        let r = |s: &[f32]| s.iter().map(|&v| round(v, f16)).collect();
        (r(&sums[w..]), r(&sums[..w]))
    }
}

/// Elements a chunk of a feature map's sums covers, about.
const CHUNK_ELEMENTS: usize = 1024;

/// The most partial sums a layer gathers to one tile per pass.
const MAX_PARTIALS: usize = 8192;

/// The rows per chunk of batch norm's sums over a `[rows, cols]` feature
/// map: chunks of about [`CHUNK_ELEMENTS`], at most [`MAX_PARTIALS`]
/// partials in all. A function of the layer alone, never of the tiles,
/// so the sums' tree is the same on every tiling.
pub(super) fn chunk_rows(rows: usize, cols: usize) -> usize {
    let most = (MAX_PARTIALS / cols.max(1)).max(1);
    let chunks = (rows * cols / CHUNK_ELEMENTS)
        .clamp(1, most)
        .min(rows.max(1));
    rows.div_ceil(chunks).max(1)
}

/// The fewest elements of a block of a feature map laid out for batch norm
/// by the networks.
pub(super) const MIN_BLOCK_ELEMENTS: usize = 512;

/// A `[rows, cols]` feature map's layout for batch norm over `tiles` tiles
/// from `first`: row blocks of whole chunks of `chunk_rows` rows times
/// column blocks, about `min_elements` or more each.
pub(super) fn layout(
    (rows, cols, chunk_rows): (usize, usize, usize),
    first: Tile,
    tiles: u32,
    min_elements: usize,
) -> BlockLayout {
    let chunks = rows.div_ceil(chunk_rows).max(1);
    let want = (rows * cols / min_elements.max(1)).clamp(1, tiles.max(1) as usize);
    let row_blocks = chunks.min(want);
    let col_blocks = (want / row_blocks).clamp(1, cols.max(1));
    let row_bounds: Vec<usize> = split(chunks, row_blocks)
        .into_iter()
        .map(|k| (k * chunk_rows).min(rows))
        .collect();
    let col_bounds = split(cols, col_blocks);
    let blocks = (row_bounds.len() - 1) * (col_bounds.len() - 1);
    let tiles = (0..blocks as u32).map(|k| first + k).collect();
    BlockLayout::from_parts(row_bounds, col_bounds, tiles)
}

impl BatchNorm {
    /// Train: the per-micro-batch tensors its backward pass reads besides
    /// `z` (the normalised values, the group's totals).
    pub(in crate::model) fn saved(&self) -> Vec<TensorId> {
        core::iter::once(self.xhat)
            .chain(self.totals.as_ref().map(|t| t.tensor))
            .collect()
    }
}

/// Layer `l`'s `gamma` and `beta` (`[width]` each).
pub(super) fn params(
    b: &mut Builder<'_>,
    l: usize,
    width: usize,
) -> Result<(TensorId, TensorId), ModelError> {
    let mut param = |name: &str| {
        let mapping = b.linear_on(l);
        b.tensor(&format!("layer{l}.bn.{name}"), width, mapping)
    };
    Ok((param("gamma")?, param("beta")?))
}

/// The bias staged `[bias | gamma | beta]` per block: the three parts of
/// block `k`'s range.
fn thirds(stage: &Staged, k: usize) -> [Range<u64>; 3] {
    let r = &stage.ranges[k];
    let w = (r.end - r.start) / 3;
    [
        r.start..r.start + w,
        r.start + w..r.start + 2 * w,
        r.start + 2 * w..r.end,
    ]
}

/// The chunks of `chunk_rows` rows that rows `rows` (starting on a chunk
/// boundary) cover.
fn chunks(rows: &Range<usize>, chunk_rows: usize) -> Range<usize> {
    debug_assert_eq!(rows.start % chunk_rows, 0, "blocks start on a chunk");
    rows.start / chunk_rows..rows.end.div_ceil(chunk_rows)
}

/// Per block of `out`, `q` partial sums per chunk and column.
fn partials(
    b: &mut Builder<'_>,
    name: &str,
    out: &BlockLayout,
    chunk_rows: usize,
    q: u64,
) -> Result<Staged, ModelError> {
    b.per_block(name, out, |blk| {
        chunks(&blk.rows, chunk_rows).len() as u64 * q * blk.cols.len() as u64
    })
}

/// Adds layer `l`'s batch norm of `y` (with the bias) into `z` and the
/// activation into `a`; `stage` holds `[bias | gamma | beta]` per block,
/// whose rows start on multiples of `chunk_rows`.
pub(super) fn forward(
    b: &mut Builder<'_>,
    (l, chunk_rows): (usize, usize),
    (gamma, beta): (TensorId, TensorId),
    y: &Act,
    stage: &Staged,
    (z, a): (&Act, &Act),
) -> Result<BatchNorm, ModelError> {
    let out = &y.layout;
    let xhat = b.matrix(&format!("layer{l}.bn.xhat"), out)?.tensor;
    let pre = b.matrix(&format!("layer{l}.bn.x"), out)?.tensor;
    let f16 = b.f16;
    let (group, totals, local_grad, running, stats) = if b.train {
        let (group, totals) = statistics(b, (l, chunk_rows), y, stage, pre)?;
        // This replica's backward sums, beside the group's.
        let (width, home) = (2 * out.cols() as u64, out.blocks()[0].tile);
        let local = b.tensor(
            &format!("layer{l}.bn.grad_local"),
            width as usize,
            Mapping::one_tile(home, width),
        )?;
        (Some(group), Some(totals.clone()), Some(local), None, totals)
    } else {
        // Inference: x = y + bias, then the running moments.
        let c1: Arc<dyn Codelet> = Arc::new(BiasAct::new(None, f16));
        b.per_block_vertices(&format!("layer{l}.bias"), out, &c1, |k, blk| {
            vec![
                TensorSlice::new(y.tensor, blk.elements.clone()),
                TensorSlice::new(stage.tensor, thirds(stage, k)[0].clone()),
                TensorSlice::new(pre, blk.elements.clone()),
            ]
        })?;
        let running = b.per_block(&format!("layer{l}.bn.running"), out, |blk| {
            2 * blk.cols.len() as u64
        })?;
        (None, None, None, Some(running.clone()), running)
    };
    let c2: Arc<dyn Codelet> = Arc::new(BnApply::new(b.activation, b.train, f16));
    b.per_block_vertices(&format!("layer{l}.bn.apply"), out, &c2, |k, blk| {
        let [_, g, be] = thirds(stage, k);
        vec![
            TensorSlice::new(pre, blk.elements.clone()),
            TensorSlice::new(stats.tensor, stats.ranges[k].clone()),
            TensorSlice::new(stage.tensor, g),
            TensorSlice::new(stage.tensor, be),
            TensorSlice::new(xhat, blk.elements.clone()),
            TensorSlice::new(z.tensor, blk.elements.clone()),
            TensorSlice::new(a.tensor, blk.elements.clone()),
        ]
    })?;
    Ok(BatchNorm {
        gamma,
        beta,
        xhat,
        group,
        totals,
        local_grad,
        running,
        chunk_rows,
    })
}

/// Training's statistics: `x = y + bias` into `pre`, the mean over the
/// group (sums per chunk, tree, group sum), then the squared deviations
/// from it the same way. The group's totals `[S1, n, M2]` on one tile, and
/// staged per block as `[S1, M2, n]`.
fn statistics(
    b: &mut Builder<'_>,
    (l, chunk_rows): (usize, usize),
    y: &Act,
    stage: &Staged,
    pre: TensorId,
) -> Result<(TensorId, Staged), ModelError> {
    let out = &y.layout;
    let width = out.cols() as u64;
    let home = out.blocks()[0].tile;
    let name = format!("layer{l}.bn");
    let group = b.tensor(
        &format!("{name}.group"),
        2 * width as usize + 1,
        Mapping::one_tile(home, 2 * width + 1),
    )?;
    let totals = b.per_block(&format!("{name}.totals"), out, |blk| {
        2 * blk.cols.len() as u64 + 1
    })?;
    // Pass 1: x = y + bias, its sums per chunk, the group's mean.
    let sums = partials(b, &format!("{name}.sums"), out, chunk_rows, 1)?;
    let c1: Arc<dyn Codelet> = Arc::new(BnStats::new(b.f16, chunk_rows));
    b.per_block_vertices(&format!("{name}.stats"), out, &c1, |k, blk| {
        vec![
            TensorSlice::new(y.tensor, blk.elements.clone()),
            TensorSlice::new(stage.tensor, thirds(stage, k)[0].clone()),
            TensorSlice::new(pre, blk.elements.clone()),
            TensorSlice::new(sums.tensor, sums.ranges[k].clone()),
        ]
    })?;
    let mean = (group, 0);
    reduce(
        b,
        (&name, ""),
        (out, chunk_rows),
        (&sums, 1),
        (mean, None),
        true,
    )?;
    b.exchange(
        &format!("{name}.broadcast"),
        &broadcast(out, group, &[(0, 0)], Some(width), &totals),
    )?;
    // Pass 2: the squared deviations from the group's mean.
    let squares = partials(b, &format!("{name}.squares"), out, chunk_rows, 1)?;
    let c2: Arc<dyn Codelet> = Arc::new(BnSquares::new(chunk_rows));
    b.per_block_vertices(&format!("{name}.deviations"), out, &c2, |k, blk| {
        vec![
            TensorSlice::new(pre, blk.elements.clone()),
            TensorSlice::new(totals.tensor, totals.ranges[k].clone()),
            TensorSlice::new(squares.tensor, squares.ranges[k].clone()),
        ]
    })?;
    let m2 = (group, width + 1);
    reduce(
        b,
        (&name, "var_"),
        (out, chunk_rows),
        (&squares, 1),
        (m2, None),
        false,
    )?;
    b.exchange(
        &format!("{name}.var_broadcast"),
        &broadcast(out, group, &[(width + 1, 1)], None, &totals),
    )?;
    b.group_calls += 2;
    Ok((group, totals))
}

/// Adds the per-block chunk partials `sums` (`q` per chunk and column) of
/// `out` into `values` (`q` x width, then the count if `count`) on the
/// first block's tile and over the replica group, keeping this replica's
/// totals in `local` if given. Each column block's partials are gathered
/// to its first row block's tile (`{name}.{prefix}partials`) and added
/// there over the chunks in a fixed tree; the totals join on one tile.
fn reduce(
    b: &mut Builder<'_>,
    (name, prefix): (&str, &str),
    (out, chunk_rows): (&BlockLayout, usize),
    (sums, q): (&Staged, u64),
    (values, local): ((TensorId, u64), Option<TensorSlice>),
    count: bool,
) -> Result<(), ModelError> {
    let blocks = out.blocks();
    let (width, col_blocks) = (out.cols() as u64, out.col_blocks());
    let all = chunks(&(0..out.rows()), chunk_rows).len() as u64;
    let name = format!("{name}.{prefix}");
    let head = |blk: &Block, per: u64| {
        if blk.rows.start == 0 {
            per * q * blk.cols.len() as u64
        } else {
            0
        }
    };
    let parts = b.per_block(&format!("{name}partials"), out, |blk| head(blk, all))?;
    let totals = b.per_block(&format!("{name}col_totals"), out, |blk| head(blk, 1))?;
    let mut gather = Copies::new();
    for (k, (blk, s)) in blocks.iter().zip(&sums.ranges).enumerate() {
        let (cw, to) = (blk.cols.len() as u64, &parts.ranges[k % col_blocks]);
        for (i, c) in chunks(&blk.rows, chunk_rows).enumerate() {
            let (src, dst) = (s.start + i as u64 * q * cw, to.start + c as u64 * q * cw);
            gather.push((
                TensorSlice::new(sums.tensor, src..src + q * cw),
                TensorSlice::new(parts.tensor, dst..dst + q * cw),
            ));
        }
    }
    b.exchange(&format!("{name}gather"), &gather)?;
    let tree: Arc<dyn Codelet> = Arc::new(ChunkTree::new());
    let cs = b.g.add_compute_set(&format!("{name}chunk_tree"));
    let mut join = Copies::new();
    for (k, blk) in blocks.iter().enumerate().take(col_blocks) {
        let (p, t) = (parts.ranges[k].clone(), totals.ranges[k].clone());
        let fields = [
            TensorSlice::new(parts.tensor, p),
            TensorSlice::new(totals.tensor, t.clone()),
        ];
        b.vertex(cs, blk.tile, &tree, &fields)?;
        let cw = blk.cols.len() as u64;
        for h in 0..q {
            let (src, dst) = (
                t.start + h * cw,
                values.1 + h * width + blk.cols.start as u64,
            );
            join.push((
                TensorSlice::new(totals.tensor, src..src + cw),
                TensorSlice::new(values.0, dst..dst + cw),
            ));
        }
    }
    b.programs.push(Program::Execute(cs));
    b.exchange(&format!("{name}join"), &join)?;
    let cs = b.g.add_compute_set(&format!("{name}group_sum"));
    // The elements per column: samples, or pixels of feature maps.
    let per_column = count.then_some(out.rows() as f32);
    let cg: Arc<dyn Codelet> = Arc::new(GroupSumVertex::new(
        b.link.clone(),
        per_column,
        local.is_some(),
    ));
    let len = q * width + u64::from(count);
    let mut fields = vec![TensorSlice::new(values.0, values.1..values.1 + len)];
    fields.extend(local);
    b.vertex(cs, blocks[0].tile, &cg, &fields)?;
    b.programs.push(Program::Execute(cs));
    Ok(())
}

/// The exchange that copies parts of `group` to every block of `out`'s
/// piece of `stage`: per `(from, at)` of `columns`, the block's columns of
/// the vector at `from` into the piece's `at`-th run of its columns; with
/// `count`, the element at `count` after the piece's first two runs.
fn broadcast(
    out: &BlockLayout,
    group: TensorId,
    columns: &[(u64, u64)],
    count: Option<u64>,
    stage: &Staged,
) -> Copies {
    let mut copies = Copies::new();
    for (blk, st) in out.blocks().iter().zip(&stage.ranges) {
        let (c0, cw) = (blk.cols.start as u64, blk.cols.len() as u64);
        for &(from, at) in columns {
            let dst = st.start + at * cw;
            copies.push((
                TensorSlice::new(group, from + c0..from + c0 + cw),
                TensorSlice::new(stage.tensor, dst..dst + cw),
            ));
        }
        if let Some(n) = count {
            let dst = st.start + 2 * cw;
            copies.push((
                TensorSlice::new(group, n..n + 1),
                TensorSlice::new(stage.tensor, dst..dst + 1),
            ));
        }
    }
    copies
}

/// Adds the backward pass of layer `l`'s batch norm (and activation) from
/// `da` into a new `layer{l}.dz`; `z` is the pre-activation, `stage` the
/// forward's staged parameters.
pub(super) fn backward(
    b: &mut Builder<'_>,
    l: usize,
    bn: &BatchNorm,
    da: &Act,
    (z, stage): (&Act, &Staged),
) -> Result<Act, ModelError> {
    let out = &da.layout;
    let width = out.cols() as u64;
    let home = out.blocks()[0].tile;
    let chunk_rows = bn.chunk_rows;
    let dz = b.matrix(&format!("layer{l}.dz"), out)?;
    let totals = bn.totals.as_ref().expect("a training graph");
    let dy = b.matrix(&format!("layer{l}.bn.dy"), out)?.tensor;
    let name = format!("layer{l}.bn");
    let sums = partials(b, &format!("{name}.grad_partials"), out, chunk_rows, 2)?;
    let c1: Arc<dyn Codelet> = Arc::new(BnGradSums::new(b.activation, b.f16, chunk_rows));
    b.per_block_vertices(&format!("{name}.grad_sums"), out, &c1, |k, blk| {
        vec![
            TensorSlice::new(da.tensor, blk.elements.clone()),
            TensorSlice::new(z.tensor, blk.elements.clone()),
            TensorSlice::new(bn.xhat, blk.elements.clone()),
            TensorSlice::new(dy, blk.elements.clone()),
            TensorSlice::new(sums.tensor, sums.ranges[k].clone()),
            TensorSlice::new(stage.tensor, thirds(stage, k)[1].clone()),
        ]
    })?;
    let group = b.tensor(
        &format!("{name}.grad_group"),
        2 * width as usize,
        Mapping::one_tile(home, 2 * width),
    )?;
    let local = bn.local_grad.expect("a training graph");
    let (all, mine) = ((group, 0), b.g.all(local));
    reduce(
        b,
        (&name, "grad_"),
        (out, chunk_rows),
        (&sums, 2),
        (all, Some(mine)),
        false,
    )?;
    b.group_calls += 1;
    let back = b.per_block(&format!("{name}.grad_totals"), out, |blk| {
        2 * blk.cols.len() as u64
    })?;
    b.exchange(
        &format!("{name}.grad_broadcast"),
        &broadcast(out, group, &[(0, 0), (width, 1)], None, &back),
    )?;
    let c2: Arc<dyn Codelet> = Arc::new(BnGrad::new(b.f16));
    b.per_block_vertices(&format!("{name}.grad"), out, &c2, |k, blk| {
        vec![
            TensorSlice::new(dy, blk.elements.clone()),
            TensorSlice::new(bn.xhat, blk.elements.clone()),
            TensorSlice::new(stage.tensor, thirds(stage, k)[1].clone()),
            TensorSlice::new(totals.tensor, totals.ranges[k].clone()),
            TensorSlice::new(back.tensor, back.ranges[k].clone()),
            TensorSlice::new(dz.tensor, blk.elements.clone()),
        ]
    })?;
    Ok(dz)
}

/// Batch norm (and ReLU) of feature maps on the tiles, in PyTorch's
/// layouts: one training step's results.
#[derive(Clone, Debug, PartialEq)]
pub struct BatchNormRun {
    /// `relu(batch_norm(x))`, NCHW.
    pub y: Vec<f32>,
    /// The input's gradient, NCHW.
    pub dx: Vec<f32>,
    /// The gradients of `gamma` and `beta`.
    pub dgamma: Vec<f32>,
    /// See `dgamma`.
    pub dbeta: Vec<f32>,
    /// The running mean and variance after this step from `(0, 1)`
    /// (momentum 0.1, unbiased variance).
    pub running: (Vec<f32>, Vec<f32>),
}

/// Runs batch norm over the feature maps `x` (NCHW, `n` samples of `c`
/// channels of `hw` pixels) with `gamma`, `beta`, then ReLU, forward and
/// backward from `dy` (NCHW), on one replica's tiles: statistics over `n
/// hw` elements per channel, as PyTorch's `BatchNorm2d` in training.
///
/// # Errors
/// [`ModelError::InputLength`] for a slice of the wrong length, and the
/// engine's errors.
///
/// ```
/// use tessera_sim::ipu::Target;
/// use tessera_sim::model::batch_norm2d_on_tiles;
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let ipu = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
/// // One channel of [1, 3]: mean 2, variance 1, normalised to about [-1, 1].
/// let (x, affine, dy) = ([1.0, 3.0], (&[1.0][..], &[0.0][..]), [1.0, 1.0]);
/// let run = batch_norm2d_on_tiles((1, 1, 2), Target::single(ipu), &x, affine, &dy)?;
/// assert!(run.y[0] == 0.0 && (run.y[1] - 1.0).abs() < 1e-4); // after ReLU
/// assert_eq!(run.dbeta, [1.0]); // the one positive output's gradient
/// assert!((run.running.0[0] - 0.2).abs() < 1e-6); // momentum 0.1 from 0
/// # Ok::<(), tessera_sim::model::ModelError>(())
/// ```
pub fn batch_norm2d_on_tiles(
    (n, c, hw): (usize, usize, usize),
    target: crate::ipu::Target,
    x: &[f32],
    (gamma, beta): (&[f32], &[f32]),
    dy: &[f32],
) -> Result<BatchNormRun, ModelError> {
    for (got, expected) in [
        (x.len(), n * c * hw),
        (dy.len(), n * c * hw),
        (gamma.len(), c),
        (beta.len(), c),
    ] {
        super::check_len(got, expected)?;
    }
    let (placement, link) = (super::Placement::Spread, super::standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, n);
    let rows = n * hw;
    // Row blocks of whole chunks and column blocks, one per tile.
    let chunk = chunk_rows(rows, c);
    let layout = layout((rows, c, chunk), 0, target.tiles(), 1);
    let x_t = b.matrix("x", &layout)?;
    let params = params(&mut b, 0, c)?;
    let stage = b.per_block("layer0.params", &layout, |blk| 3 * blk.cols.len() as u64)?;
    let (z, a) = (
        b.matrix("layer0.z", &layout)?,
        b.matrix("layer0.a", &layout)?,
    );
    let bn = forward(&mut b, (0, chunk), params, &x_t, &stage, (&z, &a))?;
    let dy_t = b.matrix("layer0.da", &layout)?;
    let dx = backward(&mut b, 0, &bn, &dy_t, (&z, &stage))?;
    let mut e = b.engine()?;
    let mut staged = Vec::new();
    for blk in layout.blocks() {
        staged.extend(blk.cols.clone().map(|_| 0.0));
        staged.extend_from_slice(&gamma[blk.cols.clone()]);
        staged.extend_from_slice(&beta[blk.cols.clone()]);
    }
    e.write_tensor(stage.tensor, &staged)
        .expect("lengths checked");
    super::write_rows(&mut e, &x_t, &super::conv2d::nchw_to_rows(x, n, c, hw));
    super::write_rows(&mut e, &dy_t, &super::conv2d::nchw_to_rows(dy, n, c, hw));
    e.run();
    let (dgamma, dbeta) = bn.param_grads(&e, false);
    let stats = e
        .read_tensor::<f32>(bn.group.expect("training"))
        .expect("f32");
    let (mut mean, mut var) = (vec![0.0; c], vec![1.0; c]);
    crate::model::codelets::update_running(&stats, &mut mean, &mut var);
    let read = |t: &Act| super::conv2d::rows_to_nchw(&super::read_rows(&e, t), n, c, hw);
    Ok(BatchNormRun {
        y: read(&a),
        dx: read(&dx),
        dgamma,
        dbeta,
        running: (mean, var),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every layout of a feature map starts its row blocks on a chunk
        /// of the layer's sums (so the sums' tree is the layer's, whatever
        /// the tiles), holds every row and column once, and uses at most the
        /// tiles it is given.
        #[test]
        fn layouts_cut_rows_on_the_layers_chunks(
            rows in 1usize..3000,
            cols in 1usize..300,
            tiles in 1u32..1500,
            min in 1usize..2048,
        ) {
            let chunk = chunk_rows(rows, cols);
            prop_assert!(rows.div_ceil(chunk) * cols <= MAX_PARTIALS.max(cols));
            let layout = layout((rows, cols, chunk), 3, tiles, min);
            prop_assert_eq!((layout.rows(), layout.cols()), (rows, cols));
            let blocks = layout.blocks();
            prop_assert!(blocks.len() <= tiles as usize);
            let mut covered = 0;
            for (k, blk) in blocks.iter().enumerate() {
                prop_assert_eq!(blk.rows.start % chunk, 0);
                prop_assert_eq!(blk.tile, 3 + k as u32);
                covered += blk.rows.len() * blk.cols.len();
            }
            prop_assert_eq!(covered, rows * cols);
        }
    }

    #[test]
    fn the_chunk_tree_adds_in_halves() {
        // (1 + 2^24) + (1 + 1) in f32 is 2^24 + 2; left to right each 1 is
        // lost to rounding (2^24). The f64 sum is 2^24 + 3.
        let parts = [1.0, 16_777_216.0, 1.0, 1.0];
        assert_eq!(tree_sum_of(&parts), 16_777_218.0);
        assert_eq!(parts.iter().sum::<f32>(), 16_777_216.0);
        let exact: f64 = parts.iter().map(|&v| f64::from(v)).sum();
        assert_eq!(exact - f64::from(tree_sum_of(&parts)), 1.0);
        assert_eq!(tree_sum_of(&parts[..1]), 1.0);
        assert_eq!(tree_sum_of(&[]), 0.0);
    }

    fn tree_sum_of(parts: &[f32]) -> f32 {
        crate::model::codelets::tree_sum(parts, 1, 0, 0..parts.len())
    }
}
