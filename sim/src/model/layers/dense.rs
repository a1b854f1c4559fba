//! A dense layer: `Y = A W` (the bias is added by the next vertex,
//! [`activation`](super::activation) or [`batch_norm`](super::batch_norm)),
//! and its backward pass `dW = A^T dZ`, `db = 1^T dZ`, `dA = dZ W^T`; and
//! the dense block ([`block`]): the product, its parameters staged per
//! block, then the bias, batch norm and activation as one op (an MLP's
//! layer, the network's head).

use super::batch_norm::{self, BatchNorm};
use super::quant::Replan;
use super::{Act, Builder, ModelError, Staged, activation};
use crate::ipu::TensorId;
use crate::kernels::matmul::{BlockLayout, Cut, Operand, Output, Source};
use crate::model::quant::Role;

/// A dense layer's tensors.
#[derive(Debug)]
pub(in crate::model) struct Dense {
    /// The weights `[fan_in, width]`, in the blocks the forward product's
    /// parts read in place.
    pub(in crate::model) w: Act,
    /// The bias `[width]`.
    pub(in crate::model) b: TensorId,
    /// The product `Y`.
    pub(in crate::model) y: Act,
}

/// The gradients of a dense layer's weights and bias, with their layouts.
pub(in crate::model) type Grads = (Act, Act);

/// Adds layer `l`'s weights, bias and forward product of `input` (`[batch,
/// fan_in]`) into `width` columns, its output cut within `cut`.
pub(super) fn forward(
    b: &mut Builder<'_>,
    l: usize,
    input: &Act,
    width: usize,
    cut: Cut,
) -> Result<Dense, ModelError> {
    let (batch, fan_in) = (b.batch, input.layout.cols());
    let plan = b.plan(
        l,
        (batch, fan_in, width),
        (Source::Layout(&input.layout, false), Source::Planned),
        cut,
    );
    let w = b.matrix(&format!("layer{l}.weight"), &plan.b_layout())?;
    let mapping = b.linear_on(l);
    let bias = b.tensor(&format!("layer{l}.bias"), width, mapping)?;
    let names = (&*format!("layer{l}.y"), &*format!("layer{l}.fwd"));
    let y = b.product_of(
        l,
        names,
        (&input.operand(false), Role::Activations),
        (&w.operand(false), Role::Weights),
        (&plan, Replan::Cut(cut)),
        Output::F32,
    )?;
    Ok(Dense { w, b: bias, y })
}

/// Adds layer `l`'s backward products from `dz` (the gradient of its
/// output with the bias): `dW` and `db` (with `ones`, a `[batch]` vector
/// of ones), and `dA` onto `input_grad` (the previous layer's layout) if
/// given.
pub(super) fn backward(
    b: &mut Builder<'_>,
    l: usize,
    (layer, input): (&Dense, &Act),
    dz: &Act,
    ones: TensorId,
    input_grad: Option<&BlockLayout>,
) -> Result<(Grads, Option<Act>), ModelError> {
    let (batch, fan_in, width) = (b.batch, input.layout.cols(), dz.layout.cols());
    let grad_output = b.grad_output();
    let dz_op = dz.operand(false);
    let dw_plan = b.plan(
        l,
        (fan_in, batch, width),
        (
            Source::Layout(&input.layout, true),
            Source::Layout(&dz.layout, false),
        ),
        Cut::default(),
    );
    let names = (&*format!("layer{l}.weight.grad"), &*format!("layer{l}.dw"));
    let dw = b.product_of(
        l,
        names,
        (&input.operand(true), Role::Activations),
        (&dz_op, Role::Gradients),
        (&dw_plan, Replan::Cut(Cut::default())),
        grad_output,
    )?;
    let ones = Act {
        tensor: ones,
        layout: BlockLayout::dense(1, batch, 0),
    };
    let db_plan = b.plan(
        l,
        (1, batch, width),
        (
            Source::Layout(&ones.layout, false),
            Source::Layout(&dz.layout, false),
        ),
        Cut {
            full_rows: false,
            full_cols: true,
        },
    );
    let names = (&*format!("layer{l}.bias.grad"), &*format!("layer{l}.db"));
    let db = b.product(names, (&ones.operand(false), &dz_op), &db_plan, grad_output)?;
    let Some(prev) = input_grad else {
        return Ok(((dw, db), None));
    };
    let w_op: Operand = layer.w.operand(true);
    // On the previous pipeline stage's IPU, the gradient is computed here
    // and sent: it is smaller than the weights its product reads.
    let here = prev.moved_to(&b.tiles(l));
    let da_plan = b.plan_onto(
        l,
        &here,
        (batch, width, fan_in),
        (
            Source::Layout(&dz.layout, false),
            Source::Layout(&w_op.layout, true),
        ),
    );
    let name = format!("layer{}.da", l - 1);
    let computed = if here == *prev {
        name.clone()
    } else {
        format!("{name}.computed")
    };
    let names = (&*computed, &*format!("layer{l}.da"));
    let da = b.product_of(
        l,
        names,
        (&dz_op, Role::Gradients),
        (&w_op, Role::Weights),
        (&da_plan, Replan::Onto(&here)),
        Output::F32,
    )?;
    if here == *prev {
        return Ok(((dw, db), Some(da)));
    }
    let sent = b.matrix(&name, prev)?;
    let copies = vec![(b.all(da.tensor), b.all(sent.tensor))];
    b.exchange(&format!("layer{l}.da.send"), &copies)?;
    Ok(((dw, db), Some(sent)))
}

/// A dense block's tensors its backward pass reads: the product's, the
/// pre-activation `z` (the logits of the head), and the parameters staged
/// per block (`[bias | gamma | beta]`).
#[derive(Debug)]
pub(in crate::model) struct Block {
    pub(in crate::model) dense: Dense,
    pub(in crate::model) z: Act,
    pub(in crate::model) stage: Staged,
}

/// Layer `l`'s dense block on `input` onto `width` columns: with batch
/// norm if `bn` (its tensors returned); a `hidden` block also applies the
/// activation (its output, returned), the head (`!hidden`) keeps whole
/// rows of logits for the loss.
pub(super) fn block(
    b: &mut Builder<'_>,
    l: usize,
    input: &Act,
    (width, hidden, bn): (usize, bool, bool),
) -> Result<(Block, Option<BatchNorm>, Option<Act>), ModelError> {
    let cut = Cut {
        full_rows: !hidden,
        full_cols: bn,
    };
    let dense = forward(b, l, input, width, cut)?;
    let bn_params = if bn {
        Some(batch_norm::params(b, l, width)?)
    } else {
        None
    };
    let out = dense.y.layout.clone();
    let mut sources = vec![dense.b];
    sources.extend(bn_params.iter().flat_map(|&(g, be)| [g, be]));
    let stage = b.stage(l, &out, &sources)?;
    let z = b.matrix(&format!("layer{l}.z"), &out)?;
    let a = if hidden {
        Some(b.matrix(&format!("layer{l}.a"), &out)?)
    } else {
        None
    };
    let bn = match (bn_params, &a) {
        (Some(p), Some(a)) => {
            // Every block holds whole columns: one chunk of all the rows.
            let chunk = (l, b.batch);
            Some(batch_norm::forward(b, chunk, p, &dense.y, &stage, (&z, a))?)
        }
        _ => {
            activation::forward(b, l, &dense.y, &stage, (&z, a.as_ref()))?;
            None
        }
    };
    Ok((Block { dense, z, stage }, bn, a))
}
