//! The test set through the first replica's inference program.

use super::TrainError;
use super::records::EpochRecord;
use super::replica::Replica;
use crate::data::Dataset;
use crate::ipu::Target;
use crate::model::{Model, ModelConfig, Placement};

/// The first replica's evaluations of the test set: its micro-batches
/// through the replica's own model, and the leftover samples (fewer than a
/// micro-batch) through a model of their size, built at the first
/// evaluation and kept for the others.
pub(super) struct Evaluation<'a> {
    test: &'a Dataset,
    config: &'a ModelConfig,
    target: Target,
    /// The model of the leftover samples, once built.
    tail: Option<Model>,
}

impl<'a> Evaluation<'a> {
    /// Evaluations of `test` by replicas of `config` on `target`.
    pub(super) const fn new(test: &'a Dataset, config: &'a ModelConfig, target: Target) -> Self {
        Self {
            test,
            config,
            target,
            tail: None,
        }
    }

    /// The test set's loss and accuracy with `replica`'s weights and
    /// buffers, recorded as epoch `epoch`'s.
    pub(super) fn run(
        &mut self,
        replica: &mut Replica<'_>,
        epoch: u64,
    ) -> Result<EpochRecord, TrainError> {
        let test = self.test;
        let mb = replica.model.micro_batch();
        let full = test.len() / mb * mb;
        let mut loss = 0.0f64;
        let mut correct = 0usize;
        let (mut inputs, mut labels) = (Vec::new(), Vec::new());
        let indices: Vec<usize> = (0..test.len()).collect();
        for chunk in indices[..full].chunks(mb) {
            test.gather(chunk, &mut inputs, &mut labels);
            let out = replica.model.evaluate(&inputs, &labels)?;
            loss += f64::from(out.loss_sum);
            correct += out.correct;
        }
        if full < test.len() {
            let rest = &indices[full..];
            let tail = self.tail(rest.len(), replica)?;
            test.gather(rest, &mut inputs, &mut labels);
            let out = tail.evaluate(&inputs, &labels)?;
            loss += f64::from(out.loss_sum);
            correct += out.correct;
        }
        Ok(EpochRecord {
            epoch,
            test_loss: (loss / test.len() as f64) as f32,
            test_accuracy: correct as f32 / test.len() as f32,
        })
    }

    /// The model of the `n` leftover samples (built on first use), holding
    /// `replica`'s weights and buffers.
    fn tail(&mut self, n: usize, replica: &Replica<'_>) -> Result<&mut Model, TrainError> {
        let tail = match self.tail.take() {
            Some(tail) => tail,
            None => Model::placed(
                self.config,
                self.target,
                &Placement::Spread,
                n,
                replica.model.compute(),
            )?,
        };
        let tail = self.tail.insert(tail);
        let weights = replica.weights.to_f32();
        let params = replica.flat.unflatten(&weights, |x| x);
        let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
        tail.set_params(&refs)?;
        tail.set_buffers(&replica.model.buffers())?;
        Ok(tail)
    }
}
