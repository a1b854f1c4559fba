//! The `data` suite: how fast the trainer's infeed delivers samples.
//!
//! [`infeed_throughput`] drains one epoch of micro-batches from a
//! [`tessera_sim::data::Infeed`] (one instance feeding `replicas` replicas,
//! no accumulation; the consumer does nothing but receive each micro-batch
//! and hand it back for its buffers, as a trainer does), and
//! compares it with the reference `gather`: the same micro-batches gathered
//! in the calling thread into reused buffers ([`Dataset::gather`] alone: no
//! thread, no queue, no allocation per micro-batch). The infeed's queue
//! holds 64 micro-batches. Like Graphcore's
//! dataset benchmark it reports what the host side can deliver, as
//! samples/s (`elements / seconds`: `elements` is the samples of one
//! epoch) and bytes/s (`gbps`: f32 inputs plus u32 labels delivered, /1e9).
//! An epoch includes starting the infeed thread and shuffling the epoch's
//! order, as a real epoch does.
//!
//! Data sets: the embedded digits (1,797 x 64) and a synthetic MNIST-sized
//! one (784 features; 16,384 samples, 4,096 with `--quick`). `--elements`
//! sets the micro-batch sizes (default 32): at most 112 (449 with
//! `--quick`), so that 16 (4) replicas' micro-batches fit the digits.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use tessera_sim::data::{BatchPlan, DIGITS_SAMPLES, Dataset, EpochOrder, Infeed, Source, digits};

use super::report::Sink;
use super::timing::{self, Settings};
use super::{BenchError, Plan, Record, Suite};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "data",
    about: "infeed throughput (samples/s, bytes/s) over 1 to 16 replicas vs a plain gather",
    run,
};

const FULL: Settings = Settings {
    samples: NonZeroUsize::new(7).unwrap(),
    min_sample: Duration::from_millis(20),
};
const QUICK: Settings = Settings {
    samples: NonZeroUsize::new(3).unwrap(),
    min_sample: Duration::from_millis(5),
};

/// The seed of the epoch orders and the synthetic data.
const SEED: u64 = 0xda7a;

/// The infeed's queue, in micro-batches (handed over in chunks of half).
const CAPACITY: usize = 64;

/// The default micro-batch size.
const MICRO_BATCH: usize = 32;

fn infeed_name(replicas: usize) -> &'static str {
    match replicas {
        1 => "infeed_1r",
        2 => "infeed_2r",
        4 => "infeed_4r",
        8 => "infeed_8r",
        16 => "infeed_16r",
        _ => "infeed",
    }
}

/// Measures one epoch of `data` through an [`Infeed`] feeding `replicas`
/// replicas micro-batches of `micro_batch` samples, against the plain
/// gather of the same micro-batches, and returns the one row.
///
/// `kernel` is `infeed_<replicas>r`; `elements` is the samples delivered
/// per epoch (`steps * micro_batch * replicas`), so samples/s is
/// `elements / seconds` and bytes/s is `gbps * 1e9`.
///
/// # Errors
///
/// [`BenchError::Unavailable`] if the plan does not fit the data set (the
/// global batch is larger than it, or a count is 0).
pub(crate) fn infeed_throughput(
    data: &Arc<Dataset>,
    micro_batch: usize,
    replicas: usize,
    settings: Settings,
) -> Result<Record, BenchError> {
    let plan = BatchPlan {
        instances: 1,
        replicas_per_instance: replicas,
        micro_batch,
        accumulation: 1,
        device_iterations: 1,
    };
    plan.validate(data.len())
        .map_err(|e| BenchError::Unavailable(format!("{}: {e}", data.name())))?;
    let micro_batches = plan.steps_per_epoch(data.len()) * replicas;
    let samples = micro_batches * micro_batch;
    let capacity = CAPACITY;
    let mut infeed_epoch = || {
        let mut infeed = Infeed::start(Arc::clone(data), plan, 0, SEED, (0, 0), capacity);
        for _ in 0..micro_batches {
            if let Some(batch) = infeed.next() {
                infeed.recycle(black_box(batch));
            }
        }
    };
    let order = EpochOrder::new(data.len(), SEED, 0);
    let (mut inputs, mut labels) = (Vec::new(), Vec::new());
    let mut gather_epoch = || {
        for step in 0..plan.steps_per_epoch(data.len()) {
            for replica in 0..replicas {
                let indices = plan.micro_batch_indices(&order, step, replica, 0);
                data.gather(black_box(indices), &mut inputs, &mut labels);
                black_box((&inputs, &labels));
            }
        }
    };
    let m = timing::compare(settings, &mut [&mut infeed_epoch, &mut gather_epoch]);
    let bytes = (samples * (data.features() * size_of::<f32>() + size_of::<u32>())) as f64;
    let gbps = |seconds: f64| bytes / seconds / 1e9;
    Ok(Record {
        suite: SUITE.name,
        kernel: infeed_name(replicas),
        elements: samples,
        seconds: m[0].best,
        gbps: gbps(m[0].best),
        reference: "gather",
        ratio: m[1].best / m[0].best,
        reference_seconds: m[1].best,
        reference_gbps: gbps(m[1].best),
    })
}

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let settings = if plan.quick { QUICK } else { FULL };
    let micro_batches: Vec<usize> = match &plan.elements {
        Some(sizes) => sizes.iter().map(|n| n.get()).collect(),
        None => vec![MICRO_BATCH],
    };
    let replica_counts: &[usize] = if plan.quick { &[1, 4] } else { &[1, 4, 16] };
    // Every micro-batch size meets every replica count on the smaller set.
    let (samples, replicas) = (DIGITS_SAMPLES, replica_counts[replica_counts.len() - 1]);
    if let Some(&n) = micro_batches.iter().find(|&&n| n > samples / replicas) {
        return Err(BenchError::Unavailable(format!(
            "--elements {n}: the data suite's micro-batch is at most {} here \
             ({replicas} replicas x the micro-batch must fit the {samples} digits samples)",
            samples / replicas
        )));
    }
    let mnist_like = Source::Synthetic {
        samples: if plan.quick { 4096 } else { 16384 },
        features: 784,
        classes: 10,
        seed: SEED,
    }
    .load()
    .map_err(|e| BenchError::Unavailable(e.to_string()))?;
    let sets = [Arc::new(digits()), Arc::new(mnist_like)];
    for data in &sets {
        sink.start(&format!(
            "data: {} ({} x {}), one epoch per call, best of {} samples; elements = samples per \
             epoch (samples/s = elements / time); GB/s = inputs + labels delivered; \
             ratio = gather time / infeed time",
            data.name(),
            data.len(),
            data.features(),
            settings.samples,
        ))?;
        for &micro_batch in &micro_batches {
            for &replicas in replica_counts {
                let record = infeed_throughput(data, micro_batch, replicas, settings)?;
                sink.record(&record)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_row_per_measurement_with_the_epochs_samples() {
        let data = Arc::new(digits());
        let r = infeed_throughput(&data, 16, 4, QUICK).unwrap();
        assert_eq!(r.kernel, "infeed_4r");
        assert_eq!(r.elements, 1797 / 64 * 64);
        assert!(r.seconds > 0.0 && r.reference_seconds > 0.0 && r.gbps > 0.0);
        assert!(matches!(
            infeed_throughput(&data, 1000, 2, QUICK),
            Err(BenchError::Unavailable(_))
        ));
    }
}
