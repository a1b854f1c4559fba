//! Max and average pooling, and global average pooling (PyTorch's
//! `max_pool2d`, `avg_pool2d` with `count_include_pad`, and
//! `adaptive_avg_pool2d(1)`), on feature maps as `[n h w, c]` matrices.
//!
//! Forward: per block of the output (rows over the tiles, then channels),
//! the window's input runs are gathered and one vertex takes each output
//! pixel's maximum (the first in window order, as PyTorch, whose index it
//! stores) or its sum over the window divided by the window's size.
//! Backward: per block of the input, the output gradients of the windows
//! over each pixel (and, for max, their indices) are gathered, and one
//! vertex adds them in window order: bitwise the same on every tiling.

use core::ops::Range;
use std::sync::Arc;

use super::{Act, Builder, Copies, ModelError};
use crate::ipu::{
    Access, Codelet, DType, FieldSpec, IpuSpec, Kernel, Mapping, Program, TensorId, TensorSlice,
    Tile, VertexCycles, VertexIo,
};
use crate::kernels::matmul::{BlockLayout, gather_copies};
use crate::model::shapes::ConvShape;
use crate::model::shapes::{Pool2d, PoolKind};

/// Gathers, for each row of `rows`, the runs of `src` rows `taps(row)`
/// over columns `cols` into a new tensor on `tile`: `None` if there are
/// none.
fn gather_taps(
    b: &mut Builder<'_>,
    (name, tile): (&str, Tile),
    copies: &mut Copies,
    sources: &[&Act],
    taps: &[Vec<usize>],
    cols: &Range<usize>,
) -> Result<Option<Vec<TensorId>>, ModelError> {
    let total: usize = taps.iter().map(Vec::len).sum();
    if total == 0 {
        return Ok(None);
    }
    let len = (total * cols.len()) as u64;
    let mut staged = Vec::new();
    for (k, src) in sources.iter().enumerate() {
        let name = format!("{name}.{k}");
        let t =
            b.g.add_tensor(&name, DType::F32, &[len], Mapping::one_tile(tile, len))?;
        let mut at = 0;
        for &row in taps.iter().flatten() {
            if b.g.is_sizing() {
                let runs = src.layout.runs(&(row..row + 1), cols);
                b.g.count_received_runs(tile, runs);
            } else {
                let rows = row..row + 1;
                gather_copies(copies, src.tensor, &src.layout, rows, cols.clone(), t, at);
            }
            at += cols.len() as u64;
        }
        staged.push(t);
    }
    Ok(Some(staged))
}

/// A pooling layer's forward tensors.
#[derive(Debug)]
pub(in crate::model) struct Pooled {
    /// The output.
    pub(in crate::model) y: Act,
    /// Max: the index in the window of each output's maximum.
    argmax: Option<Act>,
}

impl Pooled {
    /// What its backward pass reads of the forward's (max: the indices).
    pub(in crate::model) fn saved(&self) -> Option<TensorId> {
        self.argmax.as_ref().map(|a| a.tensor)
    }
}

/// Tap elements (window runs times channels) a forward block of a
/// pooling takes, about.
const POOL_BLOCK_TAPS: usize = 1024;

/// Adds layer `l`'s pooling of `input` (`[n h w, c]`) of `shape`.
pub(in crate::model) fn forward(
    b: &mut Builder<'_>,
    l: usize,
    (pool, shape): (&Pool2d, &ConvShape),
    input: &Act,
) -> Result<Pooled, ModelError> {
    let (rows, c) = (shape.out_rows(), shape.conv.in_channels);
    let tiles = b.placement.tiles(l, b.target);
    let span = tiles.end - tiles.start;
    // Blocks of about POOL_BLOCK_TAPS tap elements each, cut over rows
    // first, then channels: a global pool's few rows (one per sample)
    // spread over the tiles by channels.
    let (kh, kw) = shape.conv.kernel;
    let work = rows * c * kh * kw;
    let blocks = (work / POOL_BLOCK_TAPS).clamp(1, span as usize);
    let row_blocks = blocks.min(rows);
    let col_blocks = (blocks / row_blocks).clamp(1, c);
    let used = row_blocks.min(rows) * col_blocks;
    let layout = BlockLayout::grid(rows, c, row_blocks, col_blocks, used as u32)
        .shifted(b.first_tile(l, used));
    let y = b.matrix(&format!("layer{l}.y"), &layout)?;
    let argmax = match pool.kind {
        PoolKind::Max => Some(b.matrix(&format!("layer{l}.argmax"), &layout)?),
        PoolKind::Avg => None,
    };
    let cs = b.g.add_compute_set(&format!("layer{l}.pool"));
    let mut copies = Copies::new();
    for (k, blk) in layout.blocks().iter().enumerate() {
        let mut taps = Vec::new();
        let mut ids = Vec::new();
        for r in blk.rows.clone() {
            let window: Vec<(usize, usize)> = (0..kh * kw)
                .filter_map(|t| shape.tap(r, (t / kw, t % kw)).map(|s| (s, t)))
                .collect();
            ids.push(window.iter().map(|&(_, t)| t as u32).collect::<Vec<_>>());
            taps.push(window.into_iter().map(|(s, _)| s).collect::<Vec<_>>());
        }
        let name = format!("layer{l}.pool{k}");
        let at = (&*name, blk.tile);
        let Some(staged) = gather_taps(b, at, &mut copies, &[input], &taps, &blk.cols)? else {
            continue;
        };
        let codelet: Arc<dyn Codelet> = Arc::new(PoolVertex {
            kind: pool.kind,
            ids,
            width: blk.cols.len(),
            divisor: (kh * kw) as f32,
        });
        let mut fields = vec![
            TensorSlice::new(staged[0], 0..b.g.len(staged[0])),
            TensorSlice::new(y.tensor, blk.elements.clone()),
        ];
        if let Some(a) = &argmax {
            fields.push(TensorSlice::new(a.tensor, blk.elements.clone()));
        }
        b.vertex(cs, blk.tile, &codelet, &fields)?;
    }
    if !copies.is_empty() {
        b.exchange(&format!("layer{l}.pool_gather"), &copies)?;
    }
    b.programs.push(Program::Execute(cs));
    Ok(Pooled { y, argmax })
}

/// Adds layer `l`'s pooling backward from `dy` into the input's gradient
/// in `layout` (the input's).
pub(in crate::model) fn backward(
    b: &mut Builder<'_>,
    l: usize,
    (pool, shape): (&Pool2d, &ConvShape),
    (fwd, dy): (&Pooled, &Act),
    layout: &BlockLayout,
) -> Result<Act, ModelError> {
    let dx = b.matrix(&format!("layer{l}.dx"), layout)?;
    let cs = b.g.add_compute_set(&format!("layer{l}.pool_grad"));
    let mut copies = Copies::new();
    let (kh, kw) = shape.conv.kernel;
    for (k, blk) in layout.blocks().iter().enumerate() {
        let windows: Vec<Vec<(usize, usize)>> =
            blk.rows.clone().map(|r| shape.taps_of(r)).collect();
        let taps: Vec<Vec<usize>> = windows
            .iter()
            .map(|w| w.iter().map(|t| t.0).collect())
            .collect();
        let mut sources = vec![dy];
        sources.extend(&fwd.argmax);
        let name = format!("layer{l}.pool_grad{k}");
        let at = (&*name, blk.tile);
        let Some(staged) = gather_taps(b, at, &mut copies, &sources, &taps, &blk.cols)? else {
            continue;
        };
        let codelet: Arc<dyn Codelet> = Arc::new(PoolGrad {
            kind: pool.kind,
            ids: windows
                .iter()
                .map(|w| w.iter().map(|t| t.1 as u32).collect())
                .collect(),
            width: blk.cols.len(),
            divisor: (kh * kw) as f32,
        });
        let mut fields: Vec<TensorSlice> = staged
            .iter()
            .map(|&t| TensorSlice::new(t, 0..b.g.len(t)))
            .collect();
        if fields.len() == 1 {
            // Average pooling reads no indices: the gradient twice.
            fields.push(fields[0].clone());
        }
        fields.push(TensorSlice::new(dx.tensor, blk.elements.clone()));
        b.vertex(cs, blk.tile, &codelet, &fields)?;
    }
    if !copies.is_empty() {
        b.exchange(&format!("layer{l}.pool_grad_gather"), &copies)?;
    }
    b.programs.push(Program::Execute(cs));
    Ok(dx)
}

const POOL_FIELDS: [FieldSpec; 3] = [
    FieldSpec::new(DType::F32, Access::Read),
    FieldSpec::new(DType::F32, Access::Write),
    FieldSpec::new(DType::F32, Access::Write),
];

/// Pools each output row over its window's staged runs (ids: each run's
/// index in the window): fields `taps`, `y`, [`argmax`].
#[derive(Debug)]
struct PoolVertex {
    kind: PoolKind,
    ids: Vec<Vec<u32>>,
    width: usize,
    divisor: f32,
}

impl Codelet for PoolVertex {
    fn name(&self) -> &str {
        "pool"
    }

    fn fields(&self) -> &[FieldSpec] {
        match self.kind {
            PoolKind::Max => &POOL_FIELDS,
            PoolKind::Avg => &POOL_FIELDS[..2],
        }
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::Combine);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let taps = io.read::<f32>(0).to_vec();
        let w = self.width;
        let mut y = vec![0.0f32; self.ids.len() * w];
        let mut arg = vec![0.0f32; y.len()];
        let mut at = 0;
        for (r, ids) in self.ids.iter().enumerate() {
            let out = &mut y[r * w..(r + 1) * w];
            for (k, &id) in ids.iter().enumerate() {
                let run = &taps[at..at + w];
                for (c, &v) in run.iter().enumerate() {
                    let first = k == 0;
                    match self.kind {
                        // PyTorch keeps the first maximum (and a NaN).
                        PoolKind::Max if first || v > out[c] || v.is_nan() => {
                            out[c] = v;
                            arg[r * w + c] = id as f32;
                        }
                        PoolKind::Max => {}
                        PoolKind::Avg => out[c] = if first { v } else { out[c] + v },
                    }
                }
                at += w;
            }
            if self.kind == PoolKind::Avg {
                out.iter_mut().for_each(|v| *v /= self.divisor);
            }
        }
        io.write::<f32>(1).copy_from_slice(&y);
        if self.kind == PoolKind::Max {
            io.write::<f32>(2).copy_from_slice(&arg);
        }
    }
}

const POOL_GRAD_FIELDS: [FieldSpec; 3] = [
    FieldSpec::new(DType::F32, Access::Read),
    FieldSpec::new(DType::F32, Access::Read),
    FieldSpec::new(DType::F32, Access::Write),
];

/// Adds each input pixel's windows' gradients in window order: fields
/// `dy` runs, `argmax` runs (max; `dy` again for average), `dx`.
#[derive(Debug)]
struct PoolGrad {
    kind: PoolKind,
    /// Per input row, its index in each window over it.
    ids: Vec<Vec<u32>>,
    width: usize,
    divisor: f32,
}

impl Codelet for PoolGrad {
    fn name(&self) -> &str {
        "pool_grad"
    }

    fn fields(&self) -> &[FieldSpec] {
        &POOL_GRAD_FIELDS
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::Combine);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let (dy, arg) = (io.read::<f32>(0).to_vec(), io.read::<f32>(1).to_vec());
        let w = self.width;
        let dx = io.write::<f32>(2);
        dx.fill(0.0);
        let mut at = 0;
        for (r, ids) in self.ids.iter().enumerate() {
            for &id in ids {
                for c in 0..w {
                    let g = dy[at + c];
                    dx[r * w + c] += match self.kind {
                        PoolKind::Max if arg[at + c] == id as f32 => g,
                        PoolKind::Max => 0.0,
                        PoolKind::Avg => g / self.divisor,
                    };
                }
                at += w;
            }
        }
    }
}

/// A pooling's results on the tiles, NCHW.
#[derive(Clone, Debug, PartialEq)]
pub struct PoolRun {
    /// The output.
    pub y: Vec<f32>,
    /// The input's gradient.
    pub dx: Vec<f32>,
}

/// Runs one pooling forward and backward on `target`'s tiles: `x` NCHW
/// (`shape` from [`Pool2d::on`]), `dy` the output's gradient NCHW; the
/// input spread over the tiles in row blocks.
///
/// # Errors
/// [`ModelError::InputLength`] for `x` or `dy` of the wrong length, and
/// the engine's errors.
///
/// ```
/// use tessera_sim::ipu::Target;
/// use tessera_sim::model::{Pool2d, PoolKind, pool2d_on_tiles};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// // A 1x2 max over one 1x2 map: the gradient goes to the larger input.
/// let pool = Pool2d { kind: PoolKind::Max, kernel: (1, 2), stride: 2, padding: 0 };
/// let shape = pool.on(1, 1, (1, 2)).unwrap();
/// let ipu = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
/// let run = pool2d_on_tiles(&pool, &shape, Target::single(ipu), &[1.0, 5.0], &[3.0])?;
/// assert_eq!((run.y, run.dx), (vec![5.0], vec![0.0, 3.0]));
/// # Ok::<(), tessera_sim::model::ModelError>(())
/// ```
pub fn pool2d_on_tiles(
    pool: &Pool2d,
    shape: &ConvShape,
    target: crate::ipu::Target,
    x: &[f32],
    dy: &[f32],
) -> Result<PoolRun, ModelError> {
    let c = shape.conv.in_channels;
    super::check_len(x.len(), shape.in_rows() * c)?;
    super::check_len(dy.len(), shape.out_rows() * c)?;
    let (placement, link) = (super::Placement::Spread, super::standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, shape.n);
    let in_layout = BlockLayout::grid(shape.in_rows(), c, shape.in_rows(), 1, target.tiles());
    let input = b.matrix("x", &in_layout)?;
    let fwd = forward(&mut b, 0, (pool, shape), &input)?;
    let dy_t = b.matrix("layer0.dy", &fwd.y.layout)?;
    let dx = backward(&mut b, 0, (pool, shape), (&fwd, &dy_t), &in_layout)?;
    let (hw_in, hw_out) = (
        shape.input.0 * shape.input.1,
        shape.output.0 * shape.output.1,
    );
    let mut e = b.engine()?;
    super::write_rows(
        &mut e,
        &input,
        &super::conv2d::nchw_to_rows(x, shape.n, c, hw_in),
    );
    super::write_rows(
        &mut e,
        &dy_t,
        &super::conv2d::nchw_to_rows(dy, shape.n, c, hw_out),
    );
    e.run();
    let read = |a: &Act, hw| super::conv2d::rows_to_nchw(&super::read_rows(&e, a), shape.n, c, hw);
    Ok(PoolRun {
        y: read(&fwd.y, hw_out),
        dx: read(&dx, hw_in),
    })
}
