//! A [`NetworkConfig`](crate::model::NetworkConfig)'s graph composed from
//! the layer builders: dense blocks on `[n, c]`, feature maps `[n h w, c]`
//! through convolutions, batch norm with its activation, pooling and
//! residual blocks, the dense head and the loss; the backward pass in reverse, a residual block's
//! two gradients added where its input forks. Parallel branches start
//! from the same input and are concatenated by channels; backward, the
//! gradient is split by channels into the branches and their input
//! gradients summed in branch order where they fork.
//!
//! Every convolution's output is copied into batch norm's layout: row
//! blocks of whole chunks of batch norm's sums (chunks fixed by the map's
//! shape) times column blocks, on consecutive tiles (layers take turns
//! over the tiles); a residual sum gathers its second operand into the
//! first's blocks. No channel need be whole on a tile, so ResNet-50's
//! maps fit.

use super::batch_norm::{self, BatchNorm};
use super::conv2d::{self, ConvTensors};
use super::dense::{self, Block};
use super::exact_grad::RowProducts;
use super::pool::{self, Pooled};
use super::{Act, Builder, Copies, ModelError, Staged, activation, loss, residual};
use crate::ipu::{Direction, Mapping, Program, TensorId};
use crate::kernels::matmul::{BlockLayout, Cut, gather_copies};
use crate::model::layers::loss::Loss;
use crate::model::network::Op;
use crate::model::shapes::{ConvShape, Pool2d};

/// Where a parameter lives: a matrix in its layout, or a vector.
#[derive(Clone, Debug)]
pub(in crate::model) enum Slot {
    Matrix(Act),
    Vector(TensorId),
}

/// Where a parameter's gradient comes out.
#[derive(Clone, Debug)]
pub(in crate::model) enum GradSlot {
    /// A product's output, and the rows it sums (for exact sums).
    Matrix(Act, Box<RowProducts>),
    /// Batch norm `k`'s gamma (`false`) or beta (`true`).
    Norm(usize, bool),
}

/// A batch-norm layer's tensors the runtime reads and writes.
#[derive(Debug)]
pub(in crate::model) struct BnIds {
    pub(in crate::model) layer: usize,
    pub(in crate::model) layout: BlockLayout,
    pub(in crate::model) bn: BatchNorm,
}

/// A network's graph: inputs, outputs, parameters and gradients.
#[derive(Debug)]
pub(in crate::model) struct NetworkIds {
    pub(in crate::model) x: crate::ipu::StreamId,
    pub(in crate::model) loss: Loss,
    /// Per parameter, in [`NetworkConfig::params`](crate::model::NetworkConfig::params) order.
    pub(in crate::model) params: Vec<Slot>,
    /// Train: per parameter.
    pub(in crate::model) grads: Vec<GradSlot>,
    pub(in crate::model) bns: Vec<BnIds>,
    /// Train: the `[batch]` ones of the head's `db`.
    pub(in crate::model) ones: Option<TensorId>,
    /// Per layer: its input and what its backward pass reads of its
    /// forward's (the activations a pipeline stage stashes).
    pub(in crate::model) kept: Vec<Kept>,
    /// Each quantised operand's stats and delayed scaling's input.
    pub(in crate::model) quant: Vec<super::quant::QuantTensors>,
}

/// A layer's input and the tensors of one micro-batch its backward pass
/// reads (parameters and their staging excluded).
#[derive(Clone, Debug)]
pub(in crate::model) struct Kept {
    pub(in crate::model) input: TensorId,
    pub(in crate::model) saved: Vec<TensorId>,
}

/// What the backward pass needs of a layer's forward pass.
enum Saved {
    Conv(ConvShape, ConvTensors, Act),
    /// Batch norm `k` of input layout, `z`, stage.
    Bn(usize, Act, Staged),
    Pool(Pool2d, ConvShape, Pooled, BlockLayout),
    Fork,
    Join,
    Split,
    NextBranch,
    /// The branches' outputs (their layouts and channels).
    Concat(Vec<Act>),
    /// A dense block of input `input`, its batch norm `bn` (of the
    /// network's), a `hidden` block or the head.
    Dense {
        block: Block,
        input: Act,
        bn: Option<usize>,
        hidden: bool,
    },
}

/// The layers' forward pass from the input `x`: the logits, and what the
/// backward pass reads.
fn forward(
    b: &mut Builder<'_>,
    ops: &[Op],
    x: Act,
    ids: &mut (Vec<Slot>, Vec<BnIds>, Vec<Kept>),
) -> Result<(Act, Vec<Saved>), ModelError> {
    let (mut cur, mut skips, mut saved) = (x, Vec::new(), Vec::new());
    // Per open set of parallel branches: its input and the outputs so far.
    let mut splits: Vec<(Act, Vec<Act>)> = Vec::new();
    for (l, op) in ops.iter().enumerate() {
        let input = cur.tensor;
        let s = match op {
            Op::Conv(shape) => {
                let t = conv2d::forward(b, l, shape, &cur, Cut::default())?;
                ids.0.push(Slot::Matrix(t.w.clone()));
                let y = by_channels(b, l, &t.y)?;
                let s = Saved::Conv(*shape, t, cur);
                cur = y;
                s
            }
            Op::BnAct { channels } => {
                let (z, a, bn, stage) = bn_act(b, l, &cur, *channels)?;
                ids.0
                    .extend([Slot::Vector(bn.gamma), Slot::Vector(bn.beta)]);
                let k = ids.1.len();
                let layout = z.layout.clone();
                ids.1.push(BnIds {
                    layer: l,
                    layout,
                    bn,
                });
                cur = a;
                Saved::Bn(k, z, stage)
            }
            Op::Pool(p, shape) => {
                let pooled = pool::forward(b, l, (p, shape), &cur)?;
                let layout = cur.layout.clone();
                cur = pooled.y.clone();
                Saved::Pool(*p, *shape, pooled, layout)
            }
            Op::Fork => {
                skips.push(cur.clone());
                Saved::Fork
            }
            Op::Join => {
                let skip = skips.pop().expect("a fork before every join");
                cur = residual::add(b, &format!("layer{l}.sum"), &cur, &skip)?;
                Saved::Join
            }
            Op::Split => {
                splits.push((cur.clone(), Vec::new()));
                Saved::Split
            }
            Op::NextBranch => {
                let (input, outs) = splits.last_mut().expect("a split before every branch");
                outs.push(core::mem::replace(&mut cur, input.clone()));
                Saved::NextBranch
            }
            Op::Concat { .. } => {
                let (_, mut outs) = splits.pop().expect("a split before every concat");
                outs.push(cur);
                cur = concat(b, l, &outs)?;
                Saved::Concat(outs)
            }
            Op::Dense { width, bn, .. } => dense_block(b, l, &mut cur, (*width, true, *bn), ids)?,
            Op::Head { classes, .. } => dense_block(b, l, &mut cur, (*classes, false, false), ids)?,
        };
        let kept = match &s {
            Saved::Conv(_, t, _) => vec![t.cols.tensor],
            Saved::Bn(k, z, _) => [z.tensor].into_iter().chain(ids.1[*k].bn.saved()).collect(),
            Saved::Pool(_, _, pooled, _) => pooled.saved().into_iter().collect(),
            Saved::Dense {
                block,
                input,
                bn,
                hidden,
            } => {
                // The head's logits are the loss's (added below).
                let z = hidden.then_some(block.z.tensor);
                let bn = bn.iter().flat_map(|&k| ids.1[k].bn.saved());
                [input.tensor].into_iter().chain(z).chain(bn).collect()
            }
            Saved::Fork | Saved::Join | Saved::Split | Saved::NextBranch | Saved::Concat(_) => {
                Vec::new()
            }
        };
        ids.2.push(Kept { input, saved: kept });
        saved.push(s);
    }
    Ok((cur, saved))
}

/// The layout batch norm takes a `[rows, c]` feature map of layer `l` in:
/// row blocks of whole chunks of its sums (see
/// [`batch_norm::chunk_rows`]) times column blocks, at least
/// [`batch_norm::MIN_BLOCK_ELEMENTS`] elements each, on consecutive tiles.
fn feature_layout(b: &Builder<'_>, l: usize, (rows, c): (usize, usize)) -> BlockLayout {
    let tiles = b.tiles(l);
    let span = tiles.end - tiles.start;
    let shape = (rows, c, batch_norm::chunk_rows(rows, c));
    let on_zero = batch_norm::layout(shape, 0, span, batch_norm::MIN_BLOCK_ELEMENTS);
    let first = b.first_tile(l, on_zero.blocks().len());
    on_zero.shifted(first)
}

/// `y` copied into layer `l`'s [`feature_layout`].
fn by_channels(b: &mut Builder<'_>, l: usize, y: &Act) -> Result<Act, ModelError> {
    let layout = feature_layout(b, l, (y.layout.rows(), y.layout.cols()));
    let names = (&*format!("layer{l}.out"), &*format!("layer{l}.to_tile"));
    relayout(b, names, (y, 0), &layout)
}

/// The branches' outputs `outs` concatenated by channels in branch order
/// into layer `l`'s [`feature_layout`]: a copy of each output
/// row's channels from the branch that holds them.
fn concat(b: &mut Builder<'_>, l: usize, outs: &[Act]) -> Result<Act, ModelError> {
    let rows = outs[0].layout.rows();
    let c = outs.iter().map(|o| o.layout.cols()).sum();
    let layout = feature_layout(b, l, (rows, c));
    let out = b.matrix(&format!("layer{l}.out"), &layout)?;
    let mut copies = Copies::new();
    for blk in layout.blocks() {
        let mut at = blk.elements.start;
        let (mut runs, mut first) = (0, 0);
        // Each branch's channels within the block, local to the branch.
        let parts: Vec<(&Act, core::ops::Range<usize>)> = outs
            .iter()
            .filter_map(|o| {
                let (start, end) = (first, first + o.layout.cols());
                first = end;
                let cols = blk.cols.start.max(start)..blk.cols.end.min(end);
                (!cols.is_empty()).then(|| (o, cols.start - start..cols.end - start))
            })
            .collect();
        for (o, cols) in &parts {
            runs += o.layout.runs(&blk.rows, cols);
        }
        if b.g.is_sizing() {
            b.g.count_received_runs(blk.tile, runs);
            continue;
        }
        for r in blk.rows.clone() {
            for (o, cols) in &parts {
                let len = cols.len() as u64;
                gather_copies(
                    &mut copies,
                    o.tensor,
                    &o.layout,
                    r..r + 1,
                    cols.clone(),
                    out.tensor,
                    at,
                );
                at += len;
            }
        }
    }
    if !copies.is_empty() {
        b.exchange(&format!("layer{l}.concat"), &copies)?;
    }
    Ok(out)
}

/// A layout of `like`'s shape in row blocks of at least 1,024 elements
/// over layer `l`'s tiles.
fn row_blocks(b: &Builder<'_>, l: usize, like: &BlockLayout) -> BlockLayout {
    let (rows, c) = (like.rows(), like.cols());
    let span = b.tiles(l).len() as u32;
    let blocks = (rows * c / 1024).clamp(1, span as usize);
    BlockLayout::grid(rows, c, blocks, 1, blocks as u32).shifted(b.first_tile(l, blocks))
}

/// `y`'s columns from `offset` on copied into a new tensor `name` in
/// `layout` (exchange `exchange`).
fn relayout(
    b: &mut Builder<'_>,
    (name, exchange): (&str, &str),
    (y, offset): (&Act, usize),
    layout: &BlockLayout,
) -> Result<Act, ModelError> {
    let out = b.matrix(name, layout)?;
    let mut copies = Copies::new();
    for blk in layout.blocks() {
        let cols = blk.cols.start + offset..blk.cols.end + offset;
        if b.g.is_sizing() {
            b.g.count_received_runs(blk.tile, y.layout.runs(&blk.rows, &cols));
        } else {
            let (at, r) = (blk.elements.start, blk.rows.clone());
            gather_copies(&mut copies, y.tensor, &y.layout, r, cols, out.tensor, at);
        }
    }
    if !copies.is_empty() {
        b.exchange(exchange, &copies)?;
    }
    Ok(out)
}

/// Batch norm of `input` (`channels` columns) and the activation: `z`,
/// `a`, the layer's tensors and its staged `[0 | gamma | beta]`.
fn bn_act(
    b: &mut Builder<'_>,
    l: usize,
    input: &Act,
    channels: usize,
) -> Result<(Act, Act, BatchNorm, Staged), ModelError> {
    let params = batch_norm::params(b, l, channels)?;
    // The sums' chunks must not straddle blocks: a map from elsewhere is
    // moved into batch norm's layout first.
    let rows = input.layout.rows();
    let chunk = batch_norm::chunk_rows(rows, channels);
    let moved;
    let input = if input
        .layout
        .blocks()
        .iter()
        .all(|blk| blk.rows.start % chunk == 0)
    {
        input
    } else {
        let layout = feature_layout(b, l, (rows, channels));
        let names = (
            &*format!("layer{l}.bn.in"),
            &*format!("layer{l}.bn.to_tile"),
        );
        moved = relayout(b, names, (input, 0), &layout)?;
        &moved
    };
    let out = input.layout.clone();
    // A convolution has no bias: batch norm's bias slot reads zeros.
    let mapping = b.linear_on(l);
    let zero = b.tensor(&format!("layer{l}.bn.zero"), channels, mapping)?;
    let stage = b.stage(l, &out, &[zero, params.0, params.1])?;
    let z = b.matrix(&format!("layer{l}.z"), &out)?;
    let a = b.matrix(&format!("layer{l}.a"), &out)?;
    let bn = batch_norm::forward(b, (l, chunk), params, input, &stage, (&z, &a))?;
    Ok((z, a, bn, stage))
}

/// Layer `l`'s dense block on `cur` (a hidden one with its activation,
/// or the head: `(width, hidden, bn)`), its parameters' slots and batch
/// norm recorded in `ids`; `cur` becomes its output.
fn dense_block(
    b: &mut Builder<'_>,
    l: usize,
    cur: &mut Act,
    shape: (usize, bool, bool),
    ids: &mut (Vec<Slot>, Vec<BnIds>, Vec<Kept>),
) -> Result<Saved, ModelError> {
    let (block, bn, a) = dense::block(b, l, cur, shape)?;
    let d = &block.dense;
    ids.0.extend([Slot::Matrix(d.w.clone()), Slot::Vector(d.b)]);
    let bn = bn.map(|bn| {
        ids.0
            .extend([Slot::Vector(bn.gamma), Slot::Vector(bn.beta)]);
        let layout = block.z.layout.clone();
        ids.1.push(BnIds {
            layer: l,
            layout,
            bn,
        });
        ids.1.len() - 1
    });
    let out = a.unwrap_or_else(|| block.z.clone());
    Ok(Saved::Dense {
        block,
        input: core::mem::replace(cur, out),
        bn,
        hidden: shape.1,
    })
}

/// The backward pass from the logits' gradient `dz`, last layer first:
/// each parameter's gradient slot, in parameter order.
fn backward(
    b: &mut Builder<'_>,
    saved: &[Saved],
    bns: &[BnIds],
    mut grad: Act,
    ones: TensorId,
) -> Result<Vec<GradSlot>, ModelError> {
    let (mut grads, mut skips) = (Vec::new(), Vec::new());
    // Per open set of parallel branches (last first): the gradients of
    // the branches' outputs still to go back through, and of their
    // inputs so far (last branch first).
    let mut splits: Vec<(Vec<Act>, Vec<Act>)> = Vec::new();
    for (l, s) in saved.iter().enumerate().rev() {
        match s {
            Saved::Dense {
                block,
                input,
                bn,
                hidden,
            } => {
                if *hidden {
                    grad = match bn {
                        Some(k) => {
                            let (z, stage) = (&block.z, &block.stage);
                            let dz = batch_norm::backward(b, l, &bns[*k].bn, &grad, (z, stage))?;
                            grads.extend([GradSlot::Norm(*k, true), GradSlot::Norm(*k, false)]);
                            dz
                        }
                        None => activation::backward(b, l, &grad, &block.z)?,
                    };
                }
                // The network's input needs no gradient.
                let prev = (l > 0).then(|| input.layout.clone());
                let ((dw, db), da) =
                    dense::backward(b, l, (&block.dense, input), &grad, ones, prev.as_ref())?;
                grads.extend([
                    GradSlot::Matrix(db, Box::new(RowProducts::bias(grad.clone()))),
                    GradSlot::Matrix(
                        dw,
                        Box::new(RowProducts::weight(input.clone(), grad.clone())),
                    ),
                ]);
                if let Some(da) = da {
                    grad = da;
                }
            }
            Saved::Pool(p, shape, pooled, layout) => {
                grad = pool::backward(b, l, (p, shape), (pooled, &grad), layout)?;
            }
            Saved::Bn(k, z, stage) => {
                grad = batch_norm::backward(b, l, &bns[*k].bn, &grad, (z, stage))?;
                grads.extend([GradSlot::Norm(*k, true), GradSlot::Norm(*k, false)]);
            }
            Saved::Conv(shape, t, input) => {
                // The network's input needs no gradient; col2im's taps are
                // summed in row blocks over the tiles, then the gradient
                // joins its input's tile.
                let spread = (l > 0).then(|| row_blocks(b, l, &input.layout));
                let (dw, dx) = conv2d::backward(b, l, shape, t, &grad, spread.as_ref())?;
                let rows = Box::new(RowProducts::weight(t.cols.clone(), grad.clone()));
                grads.push(GradSlot::Matrix(dw, rows));
                if let Some(dx) = dx {
                    let name = format!("layer{l}.dx_joined");
                    let names = (&*name, &*format!("layer{l}.dx_join"));
                    grad = relayout(b, names, (&dx, 0), &input.layout)?;
                }
            }
            Saved::Join => skips.push(grad.clone()),
            Saved::Fork => {
                let skip = skips.pop().expect("a join after every fork");
                grad = residual::add(b, &format!("layer{l}.grad_sum"), &grad, &skip)?;
            }
            Saved::Concat(outs) => {
                let mut pieces = split_channels(b, l, &grad, outs)?;
                grad = pieces.pop().expect("at least two branches");
                splits.push((pieces, Vec::new()));
            }
            Saved::NextBranch => {
                let (pieces, inputs) = splits.last_mut().expect("a concat after every branch");
                inputs.push(core::mem::replace(
                    &mut grad,
                    pieces.pop().expect("a piece per branch"),
                ));
            }
            Saved::Split => {
                let (_, mut inputs) = splits.pop().expect("a concat after every split");
                inputs.push(grad);
                // Summed in branch order: branch 0's first.
                let mut sum = inputs.pop().expect("at least two branches");
                for i in 1.. {
                    let Some(next) = inputs.pop() else { break };
                    sum = residual::add(b, &format!("layer{l}.grad_sum{i}"), &sum, &next)?;
                }
                grad = sum;
            }
        }
    }
    grads.reverse();
    Ok(grads)
}

/// The gradient `grad` of layer `l`'s concatenation split by channels
/// into one per branch, each in its branch output's layout (`outs`).
fn split_channels(
    b: &mut Builder<'_>,
    l: usize,
    grad: &Act,
    outs: &[Act],
) -> Result<Vec<Act>, ModelError> {
    let mut offset = 0;
    let mut pieces = Vec::new();
    for (i, o) in outs.iter().enumerate() {
        let names = (
            &*format!("layer{l}.dx{i}"),
            &*format!("layer{l}.dx_split{i}"),
        );
        pieces.push(relayout(b, names, (grad, offset), &o.layout)?);
        offset += o.layout.cols();
    }
    Ok(pieces)
}

/// The training (`b.train`) or inference graph of `ops` into `b`.
pub(in crate::model) fn graph(
    b: &mut Builder<'_>,
    ops: &[Op],
    input: [usize; 3],
) -> Result<NetworkIds, ModelError> {
    let [c, h, w] = input;
    let rows = b.batch * h * w;
    let mapping = b.linear_on(0);
    let x = b.tensor("x", rows * c, mapping)?;
    let x_stream = b.g.add_stream("x", x, Direction::ToDevice);
    b.programs.push(Program::HostWrite(x_stream));
    let x = Act {
        tensor: x,
        layout: BlockLayout::dense(rows, c, 0),
    };
    let mut ids = (Vec::new(), Vec::new(), Vec::new());
    let (logits, saved) = forward(b, ops, x, &mut ids)?;
    let stage = b.g.add_exchange("params.stage", &b.stage_copies)?;
    b.programs.insert(1, Program::Exchange(stage));
    let last = ops.len() - 1;
    let loss = loss::forward(b, last, &logits)?;
    let (params, bns, mut kept) = ids;
    // The logits' gradient waits from the loss to the head's backward.
    kept[last]
        .saved
        .extend(loss.dz.as_ref().map(|dz| dz.tensor));
    let (mut grads, mut ones) = (Vec::new(), None);
    if b.train {
        let batch = b.batch;
        let one = b.tensor("ones", batch, Mapping::one_tile(0, batch as u64))?;
        let dz = loss.dz.clone().expect("a training graph");
        grads = backward(b, &saved, &bns, dz, one)?;
        ones = Some(one);
    }
    Ok(NetworkIds {
        x: x_stream,
        loss,
        params,
        grads,
        bns,
        ones,
        kept,
        quant: Vec::new(),
    })
}
