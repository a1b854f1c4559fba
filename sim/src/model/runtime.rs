//! Running a built graph for one micro-batch: the inputs fed, the group
//! sums of batch norm served while the engine runs, the losses and
//! correct predictions read back.

use std::sync::mpsc;

use tessera_core::kernels::ExactSum;

use super::codelets::GroupLink;
use super::error::ModelError;

use crate::ipu::{self, Engine, StreamId, TensorId};

/// Sums over a replica group for distributed batch-norm statistics (the
/// trainer implements it with a deterministic all-reduce).
pub trait GroupSum {
    /// Replaces `values` by their element-wise sum over the group.
    ///
    /// # Errors
    /// Whatever the group's communication fails with.
    ///
    /// ```
    /// use tessera_sim::model::{GroupSum, NoGroup};
    ///
    /// // One replica: the sum over the group is the values themselves.
    /// let mut values = [1.0f32, 2.0];
    /// NoGroup.sum(&mut values).unwrap();
    /// assert_eq!(values, [1.0, 2.0]);
    /// ```
    fn sum(&mut self, values: &mut [f32]) -> Result<(), ModelError>;
}

/// The group of one replica: the sum is the values themselves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NoGroup;

impl GroupSum for NoGroup {
    fn sum(&mut self, _values: &mut [f32]) -> Result<(), ModelError> {
        Ok(())
    }
}

/// What one micro-batch gives back besides the gradients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MicroBatchOutput {
    /// The sum over samples of the (unscaled) cross-entropy losses, added
    /// in f64 in sample order and rounded once.
    pub loss_sum: f32,
    /// The same losses summed exactly: any cut of a batch into
    /// micro-batches merges to the same state.
    pub losses: ExactSum,
    /// Samples whose first largest logit is the label.
    pub correct: usize,
    /// Simulated cycles of this run.
    pub cycles: u64,
}

/// Empties a [`GroupLink`] when dropped.
struct CloseLink<'a>(&'a GroupLink);

impl Drop for CloseLink<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Runs `net`'s program on a scoped thread while this thread serves its
/// group-sum vertices with `group` (which need not be `Send`). A failed sum
/// answers with the local values so the program finishes; its error is
/// returned.
pub(super) fn run_with_group(
    (engine, calls): (&mut Engine, usize),
    link: &GroupLink,
    group: &mut dyn GroupSum,
) -> Result<ipu::Profile, ModelError> {
    let (to_host, requests) = mpsc::channel::<Vec<f32>>();
    let (answers, from_host) = mpsc::channel::<Vec<f32>>();
    *link.lock().unwrap_or_else(|e| e.into_inner()) = Some((to_host, from_host));
    let (profile, error) = std::thread::scope(|s| {
        let runner = s.spawn(move || {
            // Drops the link's sender however the run ends (a panic too),
            // so that the loop below stops waiting.
            let _close = CloseLink(link);
            engine.run()
        });
        let mut error = None;
        for _ in 0..calls {
            let Ok(mut values) = requests.recv() else {
                break;
            };
            if error.is_none()
                && let Err(e) = group.sum(&mut values)
            {
                error = Some(e);
            }
            if answers.send(values).is_err() {
                break;
            }
        }
        let profile = runner.join();
        (profile, error)
    });
    *link.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let profile = profile.unwrap_or_else(|p| std::panic::resume_unwind(p));
    match error {
        Some(e) => Err(e),
        None => Ok(profile),
    }
}

/// Checks a micro-batch of `batch` samples of `inputs` features and
/// labels below `classes`.
pub(super) fn check_batch(
    (batch, features, classes): (usize, usize, usize),
    inputs: &[f32],
    labels: &[u32],
) -> Result<(), ModelError> {
    let expected = batch * features;
    if inputs.len() != expected {
        return Err(ModelError::InputLength {
            expected,
            got: inputs.len(),
        });
    }
    if labels.len() != batch {
        return Err(ModelError::LabelCount {
            expected: batch,
            got: labels.len(),
        });
    }
    if let Some(sample) = labels.iter().position(|&l| l as usize >= classes) {
        return Err(ModelError::LabelOutOfRange {
            sample,
            label: labels[sample],
            classes,
        });
    }
    Ok(())
}

/// Writes a micro-batch's inputs, labels and scale into `engine`'s
/// streams `x` and `labels` and its `scale` tensor (`scale_len` copies).
pub(super) fn feed(
    engine: &mut Engine,
    (x, label_stream, scale_tensor, scale_len): (StreamId, StreamId, TensorId, usize),
    (inputs, labels): (&[f32], &[u32]),
    scale: f32,
) {
    let labels: Vec<f32> = labels.iter().map(|&l| l as f32).collect();
    engine.stream_write(x, inputs).expect("checked");
    engine.stream_write(label_stream, &labels).expect("checked");
    engine
        .write_tensor(scale_tensor, &vec![scale; scale_len])
        .expect("scale tensor");
}

/// The losses and correct predictions of `engine`'s last run.
pub(super) fn outputs(
    engine: &Engine,
    (losses, correct): (TensorId, TensorId),
    cycles: u64,
) -> MicroBatchOutput {
    let losses = engine.read_tensor::<f32>(losses).expect("f32");
    let correct = engine.read_tensor::<f32>(correct).expect("f32");
    let mut exact = ExactSum::new();
    losses.iter().for_each(|&l| exact.add(l));
    MicroBatchOutput {
        loss_sum: losses.iter().map(|&l| f64::from(l)).sum::<f64>() as f32,
        losses: exact,
        correct: correct.iter().filter(|&&c| c > 0.5).count(),
        cycles,
    }
}
