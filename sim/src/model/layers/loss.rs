//! Softmax cross-entropy over whole rows of logits (the last layer's
//! output has one column block), one vertex per row block; in a training
//! graph the vertex also writes the logits' gradient.

use core::ops::Range;
use std::sync::Arc;

use super::{Act, Builder, ModelError};
use crate::ipu::{Codelet, Direction, Interval, Mapping, Program, StreamId, TensorId, TensorSlice};
use crate::model::codelets::CrossEntropy;

/// The loss's tensors.
#[derive(Debug)]
pub(in crate::model) struct Loss {
    pub(in crate::model) labels: StreamId,
    /// The loss scale, one element per row block.
    pub(in crate::model) scale: TensorId,
    pub(in crate::model) scale_len: usize,
    pub(in crate::model) losses: TensorId,
    pub(in crate::model) correct: TensorId,
    /// Train: the gradient of the logits.
    pub(in crate::model) dz: Option<Act>,
}

/// Adds the loss of `logits` against the labels (streamed in, the stream
/// written second in the program) and, when training, `layer{last}.dz`.
pub(super) fn forward(b: &mut Builder<'_>, last: usize, logits: &Act) -> Result<Loss, ModelError> {
    let out = &logits.layout;
    let batch = b.batch;
    let blocks: Vec<_> = out
        .blocks()
        .into_iter()
        .filter(|b| !b.rows.is_empty())
        .collect();
    let rows: Vec<Range<u64>> = blocks
        .iter()
        .map(|b| b.rows.start as u64..b.rows.end as u64)
        .collect();
    let row_mapping = || {
        Mapping::Explicit(
            blocks
                .iter()
                .zip(&rows)
                .map(|(blk, r)| Interval::new(blk.tile, r.clone()))
                .collect(),
        )
    };
    let labels = b.tensor("labels", batch, row_mapping())?;
    let label_stream = b.g.add_stream("labels", labels, Direction::ToDevice);
    b.programs.insert(1, Program::HostWrite(label_stream));
    let losses = b.tensor("losses", batch, row_mapping())?;
    let correct = b.tensor("correct", batch, row_mapping())?;
    let scale_mapping = Mapping::Explicit(
        blocks
            .iter()
            .enumerate()
            .map(|(k, blk)| Interval::new(blk.tile, k as u64..k as u64 + 1))
            .collect(),
    );
    let scale = b.tensor("scale", blocks.len(), scale_mapping)?;
    let classes = out.cols();
    let dz = if b.train {
        b.matrix(&format!("layer{last}.dz"), out)?
    } else {
        let tensor = b.tensor(&format!("layer{last}.dz"), 0, Mapping::Explicit(Vec::new()))?;
        Act {
            tensor,
            layout: out.clone(),
        }
    };
    let ce: Arc<dyn Codelet> = Arc::new(CrossEntropy::new(classes, b.train, b.f16));
    let cs = b.g.add_compute_set("loss");
    for (k, (blk, r)) in blocks.iter().zip(&rows).enumerate() {
        let mut fields = vec![
            TensorSlice::new(logits.tensor, blk.elements.clone()),
            TensorSlice::new(labels, r.clone()),
            TensorSlice::new(scale, k as u64..k as u64 + 1),
            TensorSlice::new(losses, r.clone()),
            TensorSlice::new(correct, r.clone()),
        ];
        if b.train {
            fields.push(TensorSlice::new(dz.tensor, blk.elements.clone()));
        }
        b.vertex(cs, blk.tile, &ce, &fields)?;
    }
    b.programs.push(Program::Execute(cs));
    Ok(Loss {
        labels: label_stream,
        scale,
        scale_len: blocks.len(),
        losses,
        correct,
        dz: b.train.then_some(dz),
    })
}
