//! The MLP's graph composed from the layer builders: per layer a dense
//! product, the parameters staged per block, then the bias and activation
//! or batch norm; the loss; the backward pass in reverse.

use super::batch_norm::{self, BatchNorm};
use super::dense::{self, Dense, Grads};
use super::{Act, Builder, Copies, ModelError, Staged, activation, loss};
use crate::ipu::{Direction, Graph, Mapping, Program, TensorId, TensorSlice};
use crate::kernels::matmul::{BlockLayout, Cut};
use crate::model::mlp::{Compute, Net, Recipe, Unbuilt};

/// One layer's tensors that outlive the build.
#[derive(Debug)]
pub(in crate::model) struct LayerIds {
    pub(in crate::model) width: usize,
    /// The layout of the layer's output (and its gradient).
    pub(in crate::model) out: BlockLayout,
    pub(in crate::model) dense: Dense,
    pub(in crate::model) bn: Option<BatchNorm>,
    /// Train: `dW` and `db`.
    pub(in crate::model) grads: Option<Grads>,
}

/// A layer's forward tensors the backward pass reads.
struct Forward {
    input: Act,
    /// The pre-activation (the logits for the last layer).
    z: Act,
    /// `[bias | gamma | beta]` staged per block.
    stage: Staged,
}

/// Copies of columns `cols` of each listed vector (`[len]`) into a piece,
/// one after the other from `at`.
pub(super) fn copy_cols(
    copies: &mut Copies,
    sources: &[TensorId],
    cols: &core::ops::Range<usize>,
    dst: TensorId,
    mut at: u64,
) {
    for &src in sources {
        let n = cols.len() as u64;
        copies.push((
            TensorSlice::new(src, cols.start as u64..cols.end as u64),
            TensorSlice::new(dst, at..at + n),
        ));
        at += n;
    }
}

/// Layer `l` forward from `input`: the layer's tensors, its forward
/// tensors, and its activation (empty for the last layer).
fn layer_forward(
    b: &mut Builder<'_>,
    l: usize,
    input: Act,
    (width, hidden, bn): (usize, bool, bool),
) -> Result<(LayerIds, Forward, Act), ModelError> {
    let cut = Cut {
        full_rows: !hidden,
        full_cols: bn,
    };
    let dense = dense::forward(b, l, &input, width, cut)?;
    let bn_params = if bn {
        Some(batch_norm::params(b, l, width)?)
    } else {
        None
    };
    let out = dense.y.layout.clone();
    let per_col = if bn { 3 } else { 1 };
    let stage = b.per_block(&format!("layer{l}.params"), &out, |blk| {
        (blk.cols.len() * per_col) as u64
    })?;
    let mut sources = vec![dense.b];
    sources.extend(bn_params.iter().flat_map(|&(g, be)| [g, be]));
    for (blk, r) in out.blocks().iter().zip(&stage.ranges) {
        copy_cols(
            &mut b.stage_copies,
            &sources,
            &blk.cols,
            stage.tensor,
            r.start,
        );
    }
    let z = b.matrix(&format!("layer{l}.z"), &out)?;
    let a = if hidden {
        b.matrix(&format!("layer{l}.a"), &out)?
    } else {
        let tensor = b.tensor(&format!("layer{l}.a"), 0, Mapping::Explicit(Vec::new()))?;
        Act {
            tensor,
            layout: out.clone(),
        }
    };
    let bn = match bn_params {
        Some(p) => {
            // Every block holds whole columns: one chunk of all the rows.
            let chunk = (l, b.batch);
            Some(batch_norm::forward(
                b,
                chunk,
                p,
                &dense.y,
                &stage,
                (&z, &a),
            )?)
        }
        None => {
            activation::forward(b, l, &dense.y, &stage, (&z, hidden.then_some(&a)))?;
            None
        }
    };
    let ids = LayerIds {
        width,
        out,
        dense,
        bn,
        grads: None,
    };
    Ok((ids, Forward { input, z, stage }, a))
}

/// The backward pass from the logits' gradient `dz`, last layer first.
fn backward(
    b: &mut Builder<'_>,
    layers: &mut [LayerIds],
    fwd: &[Forward],
    mut dz: Act,
    ones: TensorId,
) -> Result<(), ModelError> {
    for l in (0..layers.len()).rev() {
        let prev = (l > 0).then(|| layers[l - 1].out.clone());
        let (grads, da) = dense::backward(
            b,
            l,
            (&layers[l].dense, &fwd[l].input),
            &dz,
            ones,
            prev.as_ref(),
        )?;
        layers[l].grads = Some(grads);
        let Some(da) = da else { break };
        let p = l - 1;
        dz = match &layers[p].bn {
            Some(bn) => batch_norm::backward(b, p, bn, &da, (&fwd[p].z, &fwd[p].stage))?,
            None => activation::backward(b, p, &da, &fwd[p].z)?,
        };
    }
    Ok(())
}

/// The training (`train`) or inference graph of `recipe`, a
/// [`Graph::sizing`] one if `sizing`.
pub(in crate::model) fn graph(
    recipe: Recipe<'_>,
    train: bool,
    sizing: bool,
) -> Result<Net<Unbuilt>, ModelError> {
    let Recipe {
        config,
        target,
        placement,
        batch,
        compute,
        link,
    } = recipe;
    let mut b = Builder {
        g: if sizing {
            Graph::sizing(*target)
        } else {
            Graph::new(*target)
        },
        placement,
        target,
        batch,
        f16: compute == Compute::F16,
        train,
        activation: config.activation,
        link,
        stage_copies: Vec::new(),
        programs: Vec::new(),
        group_calls: 0,
    };
    let mapping = b.linear_on(0);
    let x = b.tensor("x", batch * config.inputs, mapping)?;
    let x_stream = b.g.add_stream("x", x, Direction::ToDevice);
    b.programs.push(Program::HostWrite(x_stream));
    let shapes = config.layers();
    let last = shapes.len() - 1;
    let mut input = Act {
        tensor: x,
        layout: BlockLayout::dense(batch, config.inputs, 0),
    };
    let (mut layers, mut fwd) = (Vec::new(), Vec::new());
    for (l, &(_, width)) in shapes.iter().enumerate() {
        let hidden = l < last;
        let shape = (width, hidden, config.batch_norm && hidden);
        let (ids, f, a) = layer_forward(&mut b, l, input, shape)?;
        layers.push(ids);
        fwd.push(f);
        input = a;
    }
    // Every layer's parameters staged in one exchange before the forward
    // pass.
    let stage = b.g.add_exchange("params.stage", &b.stage_copies)?;
    b.programs.insert(1, Program::Exchange(stage));
    let loss = loss::forward(&mut b, last, &fwd[last].z)?;
    let mut ones = None;
    if train {
        let one = b.tensor("ones", batch, Mapping::one_tile(0, batch as u64))?;
        let dz = loss.dz.clone().expect("a training graph");
        backward(&mut b, &mut layers, &fwd, dz, one)?;
        // The ones of db = 1^T dZ are written once, by `build`.
        ones = Some(one);
    }
    Ok(Net {
        engine: Unbuilt {
            graph: b.g,
            program: Program::Sequence(b.programs),
            ones,
        },
        x: x_stream,
        labels: loss.labels,
        scale: loss.scale,
        scale_len: loss.scale_len,
        losses: loss.losses,
        correct: loss.correct,
        layers,
        group_calls: b.group_calls,
    })
}
