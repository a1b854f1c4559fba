//! A 2-D convolution (PyTorch's `conv2d`: NCHW, square stride and
//! padding, no bias, no dilation or groups) as im2col and a tile product.
//!
//! On the tiles a feature map is a matrix `[n h w, c]` (a row per pixel,
//! channels in columns, the channels-last order PopLibs uses for its
//! convolutions), so batch norm over feature maps is batch norm over the
//! matrix's columns. The forward pass gathers the patches into `cols`
//! `[n oh ow, kh kw c]` (column `(i kw + j) c_in + c`: tap `(i, j)` of
//! channel `c`; padding stays zero) in one exchange of runs of channels,
//! then `Y = cols W` with `W` `[kh kw c_in, c_out]` ([`ProductPlan`]: rows,
//! columns and the reduction split as for a dense layer). The backward
//! pass is `dW = cols^T dY`, `dcols = dY W^T` (cut freely), and
//! col2im: each input pixel's gradient is the sum of its taps' `dcols`
//! entries in increasing `(i, j)`, one vertex per block of the input's
//! layout on gathered runs, so the result does not depend on the tiling.
//!
//! [`ProductPlan`]: crate::kernels::matmul::ProductPlan

use std::sync::Arc;

use super::quant::Replan;
use super::{Act, Builder, Copies, ModelError};
use crate::ipu::{
    Access, Codelet, DType, FieldSpec, IpuSpec, Kernel, Mapping, TensorSlice, VertexCycles,
    VertexIo,
};
use crate::kernels::matmul::{BlockLayout, Cut, Output, Source, gather_copies};
use crate::model::quant::Role;
use crate::model::shapes::{Conv2d, ConvShape};

/// A convolution layer's tensors.
#[derive(Debug)]
pub(in crate::model) struct ConvTensors {
    /// The weights `[kh kw c_in, c_out]`.
    pub(in crate::model) w: Act,
    /// The patches.
    pub(in crate::model) cols: Act,
    /// The output `[n oh ow, c_out]`.
    pub(in crate::model) y: Act,
}

/// Adds layer `l`'s convolution of `input` (`[n h w, c_in]`).
pub(in crate::model) fn forward(
    b: &mut Builder<'_>,
    l: usize,
    shape: &ConvShape,
    input: &Act,
    cut: Cut,
) -> Result<ConvTensors, ModelError> {
    let (rows, patch, cin) = (shape.out_rows(), shape.patch(), shape.conv.in_channels);
    let tiles = b.placement.tiles(l, b.target);
    // Patches in row blocks of at least 1,024 elements over the tiles.
    let blocks = (rows * patch / 1024).clamp(1, (tiles.end - tiles.start) as usize);
    let layout =
        BlockLayout::grid(rows, patch, blocks, 1, tiles.end - tiles.start).shifted(tiles.start);
    let cols = b.matrix(&format!("layer{l}.cols"), &layout)?;
    let mut copies = Copies::new();
    let (kh, kw) = shape.conv.kernel;
    for blk in layout.blocks() {
        for r in blk.rows.clone() {
            for t in 0..kh * kw {
                let Some(src) = shape.tap(r, (t / kw, t % kw)) else {
                    continue;
                };
                let (src, at) = (src..src + 1, layout.offset(r, t * cin));
                if b.g.is_sizing() {
                    let runs = input.layout.runs(&src, &(0..cin));
                    b.g.count_received_runs(blk.tile, runs);
                } else {
                    let to = cols.tensor;
                    gather_copies(
                        &mut copies,
                        input.tensor,
                        &input.layout,
                        src,
                        0..cin,
                        to,
                        at,
                    );
                }
            }
        }
    }
    if !copies.is_empty() {
        b.exchange(&format!("layer{l}.im2col"), &copies)?;
    }
    let cout = shape.conv.out_channels;
    let plan = b.plan(
        l,
        (rows, patch, cout),
        (Source::Layout(&layout, false), Source::Planned),
        cut,
    );
    let w = b.matrix(&format!("layer{l}.weight"), &plan.b_layout())?;
    let names = (&*format!("layer{l}.y"), &*format!("layer{l}.fwd"));
    let y = b.product_of(
        l,
        names,
        (&cols.operand(false), Role::Activations),
        (&w.operand(false), Role::Weights),
        (&plan, Replan::Cut(cut)),
        Output::F32,
    )?;
    Ok(ConvTensors { w, cols, y })
}

/// Adds layer `l`'s backward pass from `dy`: `dW`, and the input's
/// gradient in `input_grad` (the input's layout) if given.
pub(in crate::model) fn backward(
    b: &mut Builder<'_>,
    l: usize,
    shape: &ConvShape,
    layer: &ConvTensors,
    dy: &Act,
    input_grad: Option<&BlockLayout>,
) -> Result<(Act, Option<Act>), ModelError> {
    let (rows, patch, cout) = (shape.out_rows(), shape.patch(), shape.conv.out_channels);
    let cols = &layer.cols;
    let dw_plan = b.plan(
        l,
        (patch, rows, cout),
        (
            Source::Layout(&cols.layout, true),
            Source::Layout(&dy.layout, false),
        ),
        Cut::default(),
    );
    let names = (&*format!("layer{l}.weight.grad"), &*format!("layer{l}.dw"));
    let grad_output = b.grad_output();
    let dw = b.product_of(
        l,
        names,
        (&cols.operand(true), Role::Activations),
        (&dy.operand(false), Role::Gradients),
        (&dw_plan, Replan::Cut(Cut::default())),
        grad_output,
    )?;
    let Some(prev) = input_grad else {
        return Ok((dw, None));
    };
    // Cut freely (col2im gathers from any layout): onto the patches'
    // row blocks, every part would gather whole rows of `W^T`.
    let w_op = layer.w.operand(true);
    let plan = b.plan(
        l,
        (rows, cout, patch),
        (
            Source::Layout(&dy.layout, false),
            Source::Layout(&w_op.layout, true),
        ),
        Cut::default(),
    );
    let names = (&*format!("layer{l}.dcols"), &*format!("layer{l}.dcols"));
    let dcols = b.product_of(
        l,
        names,
        (&dy.operand(false), Role::Gradients),
        (&w_op, Role::Weights),
        (&plan, Replan::Cut(Cut::default())),
        Output::F32,
    )?;
    let dx = col2im(b, l, shape, &dcols, prev)?;
    Ok((dw, Some(dx)))
}

/// The input's gradient from `dcols`, in `layout`: per block, the taps'
/// runs gathered, then summed in tap order.
fn col2im(
    b: &mut Builder<'_>,
    l: usize,
    shape: &ConvShape,
    dcols: &Act,
    layout: &BlockLayout,
) -> Result<Act, ModelError> {
    let dx = b.matrix(&format!("layer{}.dx", l), layout)?;
    let cin = shape.conv.in_channels;
    let cs = b.g.add_compute_set(&format!("layer{l}.col2im"));
    let mut copies = Copies::new();
    for (k, blk) in layout.blocks().iter().enumerate() {
        if blk.elements.is_empty() {
            continue;
        }
        let width = blk.cols.len();
        let taps: Vec<Vec<(usize, usize)>> = blk.rows.clone().map(|r| shape.taps_of(r)).collect();
        let total: usize = taps.iter().map(Vec::len).sum();
        if total == 0 {
            // Pixels no window reads: their gradient stays zero.
            continue;
        }
        let len = (total * width) as u64;
        let staged = b.g.add_tensor(
            &format!("layer{l}.col2im{k}"),
            DType::F32,
            &[len],
            Mapping::one_tile(blk.tile, len),
        )?;
        let mut at = 0u64;
        for (row, t) in taps.iter().flatten() {
            let c0 = t * cin + blk.cols.start;
            let run = c0..c0 + width;
            if b.g.is_sizing() {
                b.g.count_received_runs(blk.tile, dcols.layout.runs(&(*row..row + 1), &run));
            } else {
                gather_copies(
                    &mut copies,
                    dcols.tensor,
                    &dcols.layout,
                    *row..row + 1,
                    run,
                    staged,
                    at,
                );
            }
            at += width as u64;
        }
        let codelet: Arc<dyn Codelet> = Arc::new(Col2Im {
            counts: taps.iter().map(Vec::len).collect(),
            width,
        });
        let fields = [
            TensorSlice::new(staged, 0..len),
            TensorSlice::new(dx.tensor, blk.elements.clone()),
        ];
        b.vertex(cs, blk.tile, &codelet, &fields)?;
    }
    if !copies.is_empty() {
        b.exchange(&format!("layer{l}.col2im_gather"), &copies)?;
    }
    b.programs.push(crate::ipu::Program::Execute(cs));
    Ok(dx)
}

/// Sums each row's taps: fields `taps` (per row, `counts[row]` runs of
/// `width`, read) and `dx` (`width` per row, written).
#[derive(Debug)]
struct Col2Im {
    counts: Vec<usize>,
    width: usize,
}

const COL2IM_FIELDS: [FieldSpec; 2] = [
    FieldSpec::new(DType::F32, Access::Read),
    FieldSpec::new(DType::F32, Access::Write),
];

impl Codelet for Col2Im {
    fn name(&self) -> &str {
        "col2im"
    }

    fn fields(&self) -> &[FieldSpec] {
        &COL2IM_FIELDS
    }

    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        let cost = spec.costs().get(Kernel::Combine);
        VertexCycles::AllWorkers(cost.multi_thread_cycles(lens[0], spec.workers_per_tile()))
    }

    fn run(&self, io: &mut VertexIo<'_>) {
        let [taps, dx] = io.many([0, 1]);
        let (taps, dx) = (taps.into_slice::<f32>(), dx.into_slice::<f32>());
        let mut at = 0;
        for (row, &count) in dx.chunks_exact_mut(self.width).zip(&self.counts) {
            row.fill(0.0);
            for _ in 0..count {
                for (d, t) in row.iter_mut().zip(&taps[at..at + self.width]) {
                    *d += t;
                }
                at += self.width;
            }
        }
    }
}

/// A convolution's results on the tiles, in PyTorch's layouts.
#[derive(Clone, Debug, PartialEq)]
pub struct ConvRun {
    /// The output, NCHW.
    pub y: Vec<f32>,
    /// The input's gradient, NCHW.
    pub dx: Vec<f32>,
    /// The weights' gradient, `[c_out, c_in, kh, kw]`.
    pub dw: Vec<f32>,
    /// Simulated cycles of the forward and backward pass.
    pub cycles: u64,
    /// The fullest tile's bytes.
    pub max_tile_bytes: u64,
}

/// NCHW `[n, c, h w]` as the tiles' matrix `[n h w, c]`.
///
/// ```
/// use tessera_sim::model::nchw_to_rows;
///
/// // One sample, channels [1, 2] and [3, 4]: a row per pixel.
/// assert_eq!(nchw_to_rows(&[1.0, 2.0, 3.0, 4.0], 1, 2, 2), [1.0, 3.0, 2.0, 4.0]);
/// ```
#[must_use]
pub fn nchw_to_rows(x: &[f32], n: usize, c: usize, hw: usize) -> Vec<f32> {
    reorder(x, (n, c, hw), true)
}

/// The tiles' matrix `[n h w, c]` as NCHW.
///
/// ```
/// use tessera_sim::model::{nchw_to_rows, rows_to_nchw};
///
/// let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
/// assert_eq!(rows_to_nchw(&nchw_to_rows(&x, 1, 2, 3), 1, 2, 3), x);
/// ```
#[must_use]
pub fn rows_to_nchw(m: &[f32], n: usize, c: usize, hw: usize) -> Vec<f32> {
    reorder(m, (n, c, hw), false)
}

/// NCHW to rows (`to_rows`) or back.
fn reorder(x: &[f32], (n, c, hw): (usize, usize, usize), to_rows: bool) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for s in 0..n {
        for ch in 0..c {
            for p in 0..hw {
                let (nchw, rows) = ((s * c + ch) * hw + p, (s * hw + p) * c + ch);
                if to_rows {
                    out[rows] = x[nchw];
                } else {
                    out[nchw] = x[rows];
                }
            }
        }
    }
    out
}

/// PyTorch's weight `[c_out, c_in, kh, kw]` as the product's `[kh kw c_in,
/// c_out]` (`back` the other way).
fn weight_order(conv: &Conv2d, w: &[f32], back: bool) -> Vec<f32> {
    let (co, ci, (kh, kw)) = (conv.out_channels, conv.in_channels, conv.kernel);
    let mut out = vec![0.0; w.len()];
    for o in 0..co {
        for c in 0..ci {
            for t in 0..kh * kw {
                let torch = (o * ci + c) * kh * kw + t;
                let ours = (t * ci + c) * co + o;
                if back {
                    out[torch] = w[ours];
                } else {
                    out[ours] = w[torch];
                }
            }
        }
    }
    out
}

/// Runs one convolution forward and backward on `target`'s tiles (f32):
/// `x` NCHW, `weight` `[c_out, c_in, kh, kw]`, `dy` the output's gradient
/// NCHW; the input spread over the tiles in row blocks.
///
/// # Errors
/// [`ModelError::InputLength`] for `x` or `dy` of the wrong length,
/// [`ModelError::ParamLength`] for `weight`, and the engine's errors.
///
/// ```
/// use tessera_sim::ipu::Target;
/// use tessera_sim::model::{Conv2d, ModelError, conv2d_on_tiles};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// // A 1x1 convolution of weight 2 over a 1x2 map.
/// let conv = Conv2d { in_channels: 1, out_channels: 1, kernel: (1, 1), stride: 1, padding: 0 };
/// let shape = conv.on(1, (1, 2)).unwrap();
/// let ipu = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
/// let run = conv2d_on_tiles(&shape, Target::single(ipu), &[1.0, 2.0], &[2.0], &[1.0, 1.0])?;
/// assert_eq!((run.y, run.dx, run.dw), (vec![2.0, 4.0], vec![2.0, 2.0], vec![3.0]));
/// let short = conv2d_on_tiles(&shape, Target::single(ipu), &[1.0], &[2.0], &[1.0, 1.0]);
/// assert!(matches!(short, Err(ModelError::InputLength { .. })));
/// # Ok::<(), tessera_sim::model::ModelError>(())
/// ```
pub fn conv2d_on_tiles(
    shape: &ConvShape,
    target: crate::ipu::Target,
    x: &[f32],
    weight: &[f32],
    dy: &[f32],
) -> Result<ConvRun, ModelError> {
    let conv = &shape.conv;
    let (cin, cout) = (conv.in_channels, conv.out_channels);
    super::check_len(x.len(), shape.in_rows() * cin)?;
    super::check_len(dy.len(), shape.out_rows() * cout)?;
    if weight.len() != shape.patch() * cout {
        return Err(ModelError::ParamLength {
            name: "weight".into(),
            expected: shape.patch() * cout,
            got: weight.len(),
        });
    }
    let (placement, link) = (super::Placement::Spread, super::standalone_link());
    let mut b = Builder::standalone(&target, &placement, &link, shape.n);
    let in_layout = BlockLayout::grid(shape.in_rows(), cin, shape.in_rows(), 1, target.tiles());
    let input = b.matrix("x", &in_layout)?;
    let layer = forward(&mut b, 0, shape, &input, Cut::default())?;
    let dy_t = b.matrix("layer0.dy", &layer.y.layout)?;
    let (dw, dx) = backward(&mut b, 0, shape, &layer, &dy_t, Some(&in_layout))?;
    let dx = dx.expect("an input gradient was asked for");
    let mut e = b.engine()?;
    let (hw_in, hw_out) = (
        shape.input.0 * shape.input.1,
        shape.output.0 * shape.output.1,
    );
    super::write_rows(&mut e, &input, &nchw_to_rows(x, shape.n, cin, hw_in));
    super::write_rows(&mut e, &layer.w, &weight_order(conv, weight, false));
    super::write_rows(&mut e, &dy_t, &nchw_to_rows(dy, shape.n, cout, hw_out));
    let profile = e.run();
    let read = |a: &Act| super::read_rows(&e, a);
    Ok(ConvRun {
        y: rows_to_nchw(&read(&layer.y), shape.n, cout, hw_out),
        dx: rows_to_nchw(&read(&dx), shape.n, cin, hw_in),
        dw: weight_order(conv, &read(&dw), true),
        cycles: profile.total_cycles,
        max_tile_bytes: e.memory().summary(1).max,
    })
}
