//! The infeed: a background thread gathering one instance's micro-batches
//! into a bounded queue, ahead of the replicas that consume them.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::thread::JoinHandle;

use super::{BatchPlan, Dataset, EpochOrder};

/// One micro-batch of one replica, as the infeed delivers it.
#[derive(Clone, Debug, PartialEq)]
pub struct MicroBatch {
    /// The epoch.
    pub epoch: u64,
    /// The step within the epoch.
    pub step: usize,
    /// The global replica index.
    pub replica: usize,
    /// The micro-batch within the step's accumulation (`0..accumulation`).
    pub k: usize,
    /// `micro_batch x features` inputs, row-major.
    pub inputs: Vec<f32>,
    /// `micro_batch` labels.
    pub labels: Vec<u32>,
}

/// A bounded queue of micro-batches filled by a background thread for the
/// replicas of one instance, in the order (epoch, step, replica, k) from a
/// start cursor `(epoch, step)` on, with no end: the consumer stops when
/// it has what it needs and drops the infeed.
///
/// With device iterations `d`, a host call of `d` steps takes the next
/// `d * replicas_per_instance * accumulation` micro-batches (fewer at the
/// end of an epoch whose step count `d` does not divide).
///
/// Dropping the infeed closes the queue and joins the thread, which ends at
/// its next send: no hang, whatever the queue holds.
#[derive(Debug)]
pub struct Infeed {
    receiver: Option<Receiver<MicroBatch>>,
    worker: Option<JoinHandle<()>>,
}

impl Infeed {
    /// Starts the thread for instance `instance` of `plan` over `data`,
    /// shuffling epoch `e` with [`EpochOrder::new(data.len(), seed, e)`]
    /// and beginning at step `start.1` of epoch `start.0` (a step past the
    /// end of the epoch begins the next one). At most `capacity`
    /// micro-batches (at least 1) wait in the queue.
    ///
    /// An invalid plan ([`BatchPlan::validate`] fails for `data.len()`) or
    /// an instance out of range yields no micro-batch: [`Infeed::next`]
    /// returns `None` at once. Validate the plan first to report why.
    #[must_use]
    pub fn start(
        data: Arc<Dataset>,
        plan: BatchPlan,
        instance: usize,
        seed: u64,
        start: (u64, usize),
        capacity: usize,
    ) -> Self {
        let (sender, receiver) = sync_channel(capacity.max(1));
        let worker = std::thread::Builder::new()
            .name(format!("infeed-{instance}"))
            .spawn(move || fill(&data, plan, instance, seed, start, &sender))
            .ok();
        Self {
            receiver: Some(receiver),
            worker,
        }
    }

    /// The next micro-batch, waiting for the thread if it is behind; `None`
    /// if the infeed delivers nothing (invalid plan or instance, or the
    /// thread could not be started).
    pub fn next(&mut self) -> Option<MicroBatch> {
        self.receiver.as_ref()?.recv().ok()
    }
}

impl Iterator for Infeed {
    type Item = MicroBatch;

    fn next(&mut self) -> Option<MicroBatch> {
        Infeed::next(self)
    }
}

impl Drop for Infeed {
    fn drop(&mut self) {
        // Closing the receiver makes the worker's pending or next send fail,
        // and the worker returns.
        drop(self.receiver.take());
        if let Some(worker) = self.worker.take() {
            // A panic in the worker has already been reported on stderr;
            // there is nothing to add from a destructor.
            let _ = worker.join();
        }
    }
}

/// The worker: gathers and sends micro-batches until the receiver is gone.
fn fill(
    data: &Dataset,
    plan: BatchPlan,
    instance: usize,
    seed: u64,
    (start_epoch, start_step): (u64, usize),
    sender: &SyncSender<MicroBatch>,
) {
    if plan.validate(data.len()).is_err() || instance >= plan.instances {
        return;
    }
    let steps = plan.steps_per_epoch(data.len());
    let replicas = plan.instance_replicas(instance);
    for epoch in start_epoch.. {
        let order = EpochOrder::new(data.len(), seed, epoch);
        let first = if epoch == start_epoch { start_step } else { 0 };
        for step in first..steps {
            for replica in replicas.clone() {
                for k in 0..plan.accumulation {
                    let mut batch = MicroBatch {
                        epoch,
                        step,
                        replica,
                        k,
                        inputs: Vec::new(),
                        labels: Vec::new(),
                    };
                    let indices = plan.micro_batch_indices(&order, step, replica, k);
                    data.gather(indices, &mut batch.inputs, &mut batch.labels);
                    if sender.send(batch).is_err() {
                        return;
                    }
                }
            }
        }
    }
}
