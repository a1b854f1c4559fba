//! The infeed: a background thread gathering one instance's micro-batches
//! into a bounded queue, ahead of the replicas that consume them.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
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
/// The thread hands micro-batches over in chunks of `capacity / 2` (at
/// least 1), so that a queue of many small micro-batches costs one
/// hand-over (a wake-up of the consumer) per chunk rather than per
/// micro-batch: one chunk waits in the queue while the next is gathered.
///
/// A consumer that hands spent micro-batches back with [`Infeed::recycle`]
/// saves the thread an allocation per micro-batch: it refills their
/// buffers.
///
/// Dropping the infeed closes the queue and joins the thread, which ends at
/// its next send: no hang, whatever the queue holds.
#[derive(Debug)]
pub struct Infeed {
    receiver: Option<Receiver<Vec<MicroBatch>>>,
    chunk: std::vec::IntoIter<MicroBatch>,
    spent: Sender<MicroBatch>,
    worker: Option<JoinHandle<()>>,
}

impl Infeed {
    /// Starts the thread for instance `instance` of `plan` over `data`,
    /// shuffling epoch `e` with
    /// [`EpochOrder::new(data.len(), seed, e)`](EpochOrder::new)
    /// and beginning at step `start.1` of epoch `start.0` (a step past the
    /// end of the epoch begins the next one). The thread runs ahead by
    /// about `capacity` micro-batches: a chunk of `max(capacity / 2, 1)`
    /// waits in the channel while the next is gathered (with the chunk the
    /// consumer is reading, at most `3 * max(capacity / 2, 1)` exist).
    ///
    /// An invalid plan ([`BatchPlan::validate`] fails for `data.len()`) or
    /// an instance out of range yields no micro-batch: `next`
    /// returns `None` at once. Validate the plan first to report why.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tessera_sim::data::{BatchPlan, Dataset, EpochOrder, Infeed};
    ///
    /// let data = Arc::new(Dataset::new("ten", 1, 2, (0..10).map(|i| i as f32).collect(), vec![0, 1].repeat(5)).unwrap());
    /// let plan = BatchPlan { instances: 1, replicas_per_instance: 2, micro_batch: 2, accumulation: 1, device_iterations: 1 };
    /// let mut infeed = Infeed::start(Arc::clone(&data), plan, 0, 7, (0, 0), 4);
    /// let first = infeed.next().unwrap();
    /// assert_eq!((first.epoch, first.step, first.replica, first.k), (0, 0, 0, 0));
    /// let order = EpochOrder::new(10, 7, 0);
    /// let expected: Vec<f32> = order.indices()[..2].iter().map(|&i| i as f32).collect();
    /// assert_eq!(first.inputs, expected);
    /// assert_eq!(infeed.next().unwrap().replica, 1);
    /// // An instance the plan does not have: nothing.
    /// assert!(Infeed::start(data, plan, 1, 7, (0, 0), 4).next().is_none());
    /// ```
    #[must_use]
    pub fn start(
        data: Arc<Dataset>,
        plan: BatchPlan,
        instance: usize,
        seed: u64,
        start: (u64, usize),
        capacity: usize,
    ) -> Self {
        let (sender, receiver) = sync_channel(1);
        let (spent, returned) = channel();
        let chunk = (capacity / 2).max(1);
        let worker = std::thread::Builder::new()
            .name(format!("infeed-{instance}"))
            .spawn(move || {
                let queue = Queue {
                    chunk,
                    sender,
                    returned,
                };
                fill(&data, plan, instance, seed, start, &queue);
            })
            .ok();
        Self {
            receiver: Some(receiver),
            chunk: Vec::new().into_iter(),
            spent,
            worker,
        }
    }

    /// Hands a spent micro-batch back: the thread reuses its buffers for a
    /// later one instead of allocating. Optional; any micro-batch of any
    /// size may be returned.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use tessera_sim::data::{BatchPlan, Infeed, digits};
    ///
    /// let plan = BatchPlan { instances: 1, replicas_per_instance: 1, micro_batch: 4, accumulation: 1, device_iterations: 1 };
    /// let mut infeed = Infeed::start(Arc::new(digits()), plan, 0, 0, (0, 0), 2);
    /// let first = infeed.next().unwrap();
    /// infeed.recycle(first); // its buffers are refilled for a later micro-batch
    /// let second = infeed.next().unwrap();
    /// assert_eq!((second.step, second.labels.len()), (1, 4));
    /// ```
    pub fn recycle(&self, batch: MicroBatch) {
        // A finished thread has no use for it: dropping it is right.
        let _ = self.spent.send(batch);
    }
}

/// `next` waits for the thread if it is behind,
/// and returns `None` only if the infeed delivers nothing (an invalid plan
/// or instance, or the thread could not be started): the stream of an
/// infeed that started has no end.
impl Iterator for Infeed {
    type Item = MicroBatch;

    fn next(&mut self) -> Option<MicroBatch> {
        loop {
            if let Some(batch) = self.chunk.next() {
                return Some(batch);
            }
            self.chunk = self.receiver.as_ref()?.recv().ok()?.into_iter();
        }
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

/// The most micro-batch slots a chunk reserves up front (a huge
/// `capacity` must not allocate before there is anything to hold).
const PREALLOCATED: usize = 1024;

/// The worker's ends of the channels.
struct Queue {
    /// Micro-batches per hand-over.
    chunk: usize,
    /// Full chunks to the consumer.
    sender: SyncSender<Vec<MicroBatch>>,
    /// Spent micro-batches from the consumer, for their buffers.
    returned: Receiver<MicroBatch>,
}

/// The worker: gathers and sends micro-batches until the receiver is gone.
fn fill(
    data: &Dataset,
    plan: BatchPlan,
    instance: usize,
    seed: u64,
    (start_epoch, start_step): (u64, usize),
    queue: &Queue,
) {
    let chunk = queue.chunk;
    if plan.validate(data.len()).is_err() || instance >= plan.instances {
        return;
    }
    let steps = plan.steps_per_epoch(data.len());
    let replicas = plan.instance_replicas(instance);
    let mut pending = Vec::with_capacity(chunk.min(PREALLOCATED));
    for epoch in start_epoch.. {
        let order = EpochOrder::new(data.len(), seed, epoch);
        let first = if epoch == start_epoch { start_step } else { 0 };
        for step in first..steps {
            for replica in replicas.clone() {
                for k in 0..plan.accumulation {
                    let (inputs, labels) = queue
                        .returned
                        .try_recv()
                        .map_or_else(|_| (Vec::new(), Vec::new()), |b| (b.inputs, b.labels));
                    let mut batch = MicroBatch {
                        epoch,
                        step,
                        replica,
                        k,
                        inputs,
                        labels,
                    };
                    let indices = plan.micro_batch_indices(&order, step, replica, k);
                    data.gather(indices, &mut batch.inputs, &mut batch.labels);
                    pending.push(batch);
                    if pending.len() == chunk {
                        let full = std::mem::replace(
                            &mut pending,
                            Vec::with_capacity(chunk.min(PREALLOCATED)),
                        );
                        if queue.sender.send(full).is_err() {
                            return;
                        }
                    }
                }
            }
        }
    }
}
