//! The bias added and the activation applied, one vertex per block; the
//! activation's derivative in the backward pass.

use std::sync::Arc;

use super::{Act, Builder, ModelError, Staged};
use crate::ipu::{Codelet, TensorSlice};
use crate::model::codelets::{ActGrad, BiasAct};

/// Adds `z = y + bias` and, for a hidden layer (`a` given), `a =
/// act(z)`, the bias staged per block in `stage`.
pub(super) fn forward(
    b: &mut Builder<'_>,
    l: usize,
    y: &Act,
    stage: &Staged,
    (z, a): (&Act, Option<&Act>),
) -> Result<(), ModelError> {
    let act = a.map(|_| b.activation);
    let codelet: Arc<dyn Codelet> = Arc::new(BiasAct::new(act, b.f16));
    b.per_block_vertices(
        &format!("layer{l}.bias_act"),
        &y.layout,
        &codelet,
        |k, blk| {
            let mut fields = vec![
                TensorSlice::new(y.tensor, blk.elements.clone()),
                TensorSlice::new(stage.tensor, stage.ranges[k].clone()),
                TensorSlice::new(z.tensor, blk.elements.clone()),
            ];
            if let Some(a) = a {
                fields.push(TensorSlice::new(a.tensor, blk.elements.clone()));
            }
            fields
        },
    )
}

/// Adds `dz = da act'(z)` for layer `l` into a new `layer{l}.dz`.
pub(super) fn backward(
    b: &mut Builder<'_>,
    l: usize,
    da: &Act,
    z: &Act,
) -> Result<Act, ModelError> {
    let dz = b.matrix(&format!("layer{l}.dz"), &da.layout)?;
    let codelet: Arc<dyn Codelet> = Arc::new(ActGrad::new(b.activation, b.f16));
    b.per_block_vertices(
        &format!("layer{l}.activation_grad"),
        &da.layout,
        &codelet,
        |_, blk| {
            vec![
                TensorSlice::new(da.tensor, blk.elements.clone()),
                TensorSlice::new(z.tensor, blk.elements.clone()),
                TensorSlice::new(dz.tensor, blk.elements.clone()),
            ]
        },
    )?;
    Ok(dz)
}
