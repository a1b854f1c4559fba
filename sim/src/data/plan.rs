//! Epoch orders and the batch plan: which samples each replica's
//! micro-batches hold (the layout is in the [module docs](super)).

use std::ops::Range;

use tessera_core::rng::RandomStream;

use super::DataError;
use super::shuffle::shuffle;

/// The order in which one epoch visits the training set: a Fisher-Yates
/// shuffle of `0..train_len` driven by `RandomStream::new(seed, epoch)`.
///
/// Every process, instance and replica computes the same order from the
/// same seed, so no order is ever sent between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochOrder {
    epoch: u64,
    indices: Vec<usize>,
}

impl EpochOrder {
    /// The order of epoch `epoch` over `train_len` samples: for `i` from
    /// `train_len - 1` down to 1, position `i` is swapped with a position
    /// uniform in `0..=i` drawn from position `i` of the stream (two 32-bit
    /// words, scaled by multiplication).
    ///
    /// ```
    /// use tessera_sim::data::EpochOrder;
    ///
    /// let order = EpochOrder::new(10, 42, 3);
    /// let mut sorted = order.indices().to_vec();
    /// sorted.sort_unstable();
    /// assert_eq!(sorted, (0..10).collect::<Vec<_>>()); // a permutation
    /// assert_eq!(order, EpochOrder::new(10, 42, 3)); // the same on every replica
    /// ```
    #[must_use]
    pub fn new(train_len: usize, seed: u64, epoch: u64) -> Self {
        let mut indices: Vec<usize> = (0..train_len).collect();
        shuffle(&mut indices, RandomStream::new(seed, epoch));
        Self { epoch, indices }
    }

    /// The epoch this order is for.
    ///
    /// ```
    /// use tessera_sim::data::EpochOrder;
    ///
    /// assert_eq!(EpochOrder::new(10, 42, 3).epoch(), 3);
    /// ```
    #[must_use]
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The shuffled sample indices, a permutation of `0..train_len`.
    ///
    /// ```
    /// use tessera_sim::data::EpochOrder;
    ///
    /// assert_eq!(EpochOrder::new(10, 42, 0).indices().len(), 10);
    /// assert_ne!(EpochOrder::new(10, 42, 0), EpochOrder::new(10, 42, 1)); // reshuffled
    /// ```
    #[must_use]
    pub fn indices(&self) -> &[usize] {
        &self.indices
    }
}

/// How a step's samples are laid out over instances, replicas,
/// accumulated micro-batches and device iterations (PopDist/PopTorch
/// names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchPlan {
    /// Host processes (PopRun instances), each feeding its own replicas.
    pub instances: usize,
    /// Replicas fed by each instance.
    pub replicas_per_instance: usize,
    /// Samples per micro-batch (one forward and backward pass of a replica).
    pub micro_batch: usize,
    /// Micro-batches per replica per step (gradient accumulation).
    pub accumulation: usize,
    /// Steps per host call.
    pub device_iterations: usize,
}

impl BatchPlan {
    /// Replicas over all instances: `instances * replicas_per_instance`.
    ///
    /// # Panics
    ///
    /// On overflow, which [`BatchPlan::validate`] rules out.
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert_eq!(p.replicas(), 4);
    /// ```
    #[must_use]
    pub fn replicas(&self) -> usize {
        self.instances * self.replicas_per_instance
    }

    /// Samples per optimiser step over all replicas:
    /// `micro_batch * accumulation * replicas`.
    ///
    /// # Panics
    ///
    /// On overflow, which [`BatchPlan::validate`] rules out.
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert_eq!(p.global_batch(), 4 * 2 * 4);
    /// ```
    #[must_use]
    pub fn global_batch(&self) -> usize {
        self.micro_batch * self.accumulation * self.replicas()
    }

    /// Samples per host call: `global_batch * device_iterations`.
    ///
    /// # Panics
    ///
    /// On overflow, which [`BatchPlan::validate`] rules out.
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert_eq!(p.host_batch(), 32 * 3);
    /// ```
    #[must_use]
    pub fn host_batch(&self) -> usize {
        self.global_batch() * self.device_iterations
    }

    /// Checks that every count is at least 1, that the products fit and
    /// that one global batch fits in `train_len` samples.
    ///
    /// # Errors
    ///
    /// [`DataError::Zero`] naming the zero field, [`DataError::Overflow`],
    /// or [`DataError::GlobalBatchTooLarge`] with all the factors.
    ///
    /// ```
    /// use tessera_sim::data::{BatchPlan, DataError};
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert!(p.validate(32).is_ok());
    /// assert!(matches!(p.validate(31), Err(DataError::GlobalBatchTooLarge { global_batch: 32, .. })));
    /// let none = BatchPlan { accumulation: 0, ..p };
    /// assert!(matches!(none.validate(32), Err(DataError::Zero { what: "accumulation" })));
    /// ```
    pub fn validate(&self, train_len: usize) -> Result<(), DataError> {
        for (n, what) in [
            (self.instances, "instances"),
            (self.replicas_per_instance, "replicas_per_instance"),
            (self.micro_batch, "micro_batch"),
            (self.accumulation, "accumulation"),
            (self.device_iterations, "device_iterations"),
        ] {
            if n == 0 {
                return Err(DataError::Zero { what });
            }
        }
        let overflow = |what, factors: &[usize]| DataError::Overflow {
            what,
            factors: factors.to_vec(),
        };
        let (instances, per_instance) = (self.instances, self.replicas_per_instance);
        let replicas = instances.checked_mul(per_instance).ok_or_else(|| {
            overflow(
                "instances x replicas_per_instance",
                &[instances, per_instance],
            )
        })?;
        let (micro, accumulation) = (self.micro_batch, self.accumulation);
        let global_batch = micro
            .checked_mul(accumulation)
            .and_then(|b| b.checked_mul(replicas))
            .ok_or_else(|| {
                let what = "micro_batch x accumulation x replicas";
                overflow(what, &[micro, accumulation, replicas])
            })?;
        let iterations = self.device_iterations;
        global_batch.checked_mul(iterations).ok_or_else(|| {
            overflow(
                "global batch x device_iterations",
                &[global_batch, iterations],
            )
        })?;
        if global_batch > train_len {
            return Err(DataError::GlobalBatchTooLarge {
                global_batch,
                micro_batch: self.micro_batch,
                accumulation: self.accumulation,
                replicas,
                samples: train_len,
            });
        }
        Ok(())
    }

    /// Steps per epoch with drop-last: `floor(train_len / global_batch)`.
    /// The `train_len % global_batch` samples at the end of the epoch's
    /// order are not seen this epoch; each epoch reshuffles, so a sample is
    /// not dropped every time.
    ///
    /// # Panics
    ///
    /// If the plan has a zero count ([`BatchPlan::validate`] first).
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert_eq!(p.steps_per_epoch(100), 3); // 96 samples seen, 4 dropped
    /// ```
    #[must_use]
    pub fn steps_per_epoch(&self, train_len: usize) -> usize {
        train_len / self.global_batch()
    }

    /// Host calls per epoch: `ceil(steps_per_epoch / device_iterations)`;
    /// the last call runs fewer steps when `device_iterations` does not
    /// divide the step count.
    ///
    /// # Panics
    ///
    /// If the plan has a zero count ([`BatchPlan::validate`] first).
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert_eq!(p.host_calls_per_epoch(192), 2); // 6 steps
    /// assert_eq!(p.host_calls_per_epoch(224), 3); // 7 steps: the last call runs one
    /// ```
    #[must_use]
    pub fn host_calls_per_epoch(&self, train_len: usize) -> usize {
        self.steps_per_epoch(train_len)
            .div_ceil(self.device_iterations)
    }

    /// The steps that host call `call` of an epoch runs.
    ///
    /// # Panics
    ///
    /// If the plan has a zero count ([`BatchPlan::validate`] first).
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert_eq!(p.host_call_steps(224, 1), 3..6);
    /// assert_eq!(p.host_call_steps(224, 2), 6..7);
    /// ```
    #[must_use]
    pub fn host_call_steps(&self, train_len: usize, call: usize) -> Range<usize> {
        let steps = self.steps_per_epoch(train_len);
        let start = call.saturating_mul(self.device_iterations).min(steps);
        start..start.saturating_add(self.device_iterations).min(steps)
    }

    /// The replicas that instance `instance` feeds:
    /// `instance * replicas_per_instance..(instance + 1) * replicas_per_instance`.
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// assert_eq!(p.instance_replicas(1), 2..4);
    /// ```
    #[must_use]
    pub fn instance_replicas(&self, instance: usize) -> Range<usize> {
        instance * self.replicas_per_instance..(instance + 1) * self.replicas_per_instance
    }

    /// The range of `order` that micro-batch `k` of replica `replica` reads
    /// at step `step`: global micro-batch `j = replica * accumulation + k`
    /// of global batch `step`, so positions
    /// `step * global_batch + j * micro_batch..` `+ micro_batch`.
    ///
    /// ```
    /// use tessera_sim::data::BatchPlan;
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// // Global micro-batch 3 * 2 + 1 = 7 of step 1: after the 32 samples of step 0.
    /// assert_eq!(p.micro_batch_range(1, 3, 1), 60..64);
    /// ```
    #[must_use]
    pub fn micro_batch_range(&self, step: usize, replica: usize, k: usize) -> Range<usize> {
        let j = replica * self.accumulation + k;
        let start = step * self.global_batch() + j * self.micro_batch;
        start..start + self.micro_batch
    }

    /// The data set indices of micro-batch `k` (0..accumulation) of replica
    /// `replica` (global replica index) at step `step` of `order`'s epoch.
    ///
    /// # Panics
    ///
    /// If `step >= steps_per_epoch(order.indices().len())`, `replica >=
    /// replicas()` or `k >= accumulation` (the range would leave the
    /// order, or overlap another micro-batch).
    ///
    /// ```
    /// use tessera_sim::data::{BatchPlan, EpochOrder};
    ///
    /// let p = BatchPlan { instances: 2, replicas_per_instance: 2, micro_batch: 4, accumulation: 2, device_iterations: 3 };
    /// let order = EpochOrder::new(64, 42, 0);
    /// assert_eq!(p.micro_batch_indices(&order, 1, 3, 1), &order.indices()[60..64]);
    /// ```
    #[must_use]
    pub fn micro_batch_indices<'o>(
        &self,
        order: &'o EpochOrder,
        step: usize,
        replica: usize,
        k: usize,
    ) -> &'o [usize] {
        assert!(
            replica < self.replicas()
                && k < self.accumulation
                && step < self.steps_per_epoch(order.indices().len()),
            "step {step} replica {replica} micro-batch {k} outside a plan of {} steps x {} \
             replicas x {} micro-batches",
            self.steps_per_epoch(order.indices().len()),
            self.replicas(),
            self.accumulation
        );
        &order.indices()[self.micro_batch_range(step, replica, k)]
    }
}
