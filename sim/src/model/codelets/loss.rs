//! Softmax cross-entropy over whole rows of logits.

use tessera_core::loss::{self, CrossEntropyParams, Reduction};

use super::common::{elementwise, f32_fields, round};
use crate::ipu::{Access, Codelet, FieldSpec, IpuSpec, Kernel, VertexCycles, VertexIo};

/// Softmax cross-entropy of whole rows of logits. Fields: `logits`,
/// `labels` (as f32), `scale` (one value), `losses`, `correct` (1 or 0 per
/// row: the first largest logit is the label), and when training `grad`
/// (`scale * (softmax - onehot)`, rounded to f16 in F16 mode).
#[derive(Debug)]
pub(crate) struct CrossEntropy {
    pub(crate) classes: usize,
    pub(crate) train: bool,
    pub(crate) f16: bool,
    fields: Vec<FieldSpec>,
}

impl CrossEntropy {
    pub(crate) fn new(classes: usize, train: bool, f16: bool) -> Self {
        let mut access = vec![
            Access::Read,
            Access::Read,
            Access::Read,
            Access::Write,
            Access::Write,
        ];
        if train {
            access.push(Access::Write);
        }
        Self {
            classes,
            train,
            f16,
            fields: f32_fields(&access),
        }
    }
}

impl Codelet for CrossEntropy {
    fn name(&self) -> &str {
        "cross_entropy"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles {
        elementwise(Kernel::CrossEntropy, lens, 0, spec)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let labels: Vec<u32> = io.read::<f32>(1).iter().map(|&l| l as u32).collect();
        let scale = io.read::<f32>(2).first().copied().unwrap_or(1.0);
        // The host checked the labels and the scale.
        let params = CrossEntropyParams::new(self.classes, Reduction::None)
            .and_then(|p| p.with_loss_scale(scale))
            .expect("classes and scale checked by the host");
        let correct: Vec<f32> = io
            .read::<f32>(0)
            .chunks_exact(self.classes)
            .zip(&labels)
            .map(|(row, &label)| {
                let mut best = 0;
                for (j, &x) in row.iter().enumerate() {
                    if x > row[best] {
                        best = j;
                    }
                }
                if best == label as usize { 1.0 } else { 0.0 }
            })
            .collect();
        io.write::<f32>(4).copy_from_slice(&correct);
        if self.train {
            let [logits, losses, grad] = io.many([0, 3, 5]);
            let grad = grad.into_slice::<f32>();
            loss::softmax_cross_entropy_with_grad(
                &params,
                logits.into_slice::<f32>(),
                &labels,
                losses.into_slice::<f32>(),
                grad,
            )
            .expect("labels checked by the host");
            for g in grad {
                *g = round(*g, self.f16);
            }
        } else {
            let [logits, losses] = io.many([0, 3]);
            loss::softmax_cross_entropy(
                &params,
                logits.into_slice::<f32>(),
                &labels,
                losses.into_slice::<f32>(),
            )
            .expect("labels checked by the host");
        }
    }
}
