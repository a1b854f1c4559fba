//! Feeding the replicas: the batch plan, the infeed and the outfeed.

use super::*;

// ---------------------------------------------------------------- plan

#[test]
fn epoch_orders_are_seeded_permutations() {
    let a = EpochOrder::new(1000, 5, 0);
    let mut sorted = a.indices().to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    assert_eq!(a, EpochOrder::new(1000, 5, 0));
    assert_ne!(a.indices(), EpochOrder::new(1000, 5, 1).indices());
    assert_ne!(a.indices(), EpochOrder::new(1000, 6, 0).indices());
    assert!(EpochOrder::new(0, 5, 0).indices().is_empty());
    // Value stability.
    assert_eq!(EpochOrder::new(8, 0, 0).indices(), PINNED_ORDER);
}

const PINNED_ORDER: [usize; 8] = [5, 0, 3, 2, 6, 1, 7, 4];

#[test]
fn plan_arithmetic_and_validation_name_the_numbers() {
    let p = BatchPlan {
        instances: 2,
        replicas_per_instance: 4,
        micro_batch: 3,
        accumulation: 5,
        device_iterations: 4,
    };
    assert_eq!(
        (p.replicas(), p.global_batch(), p.host_batch()),
        (8, 120, 480)
    );
    assert_eq!(p.steps_per_epoch(1797), 14);
    assert_eq!(p.host_calls_per_epoch(1797), 4);
    assert_eq!(p.host_call_steps(1797, 3), 12..14);
    assert_eq!(p.instance_replicas(1), 4..8);
    assert_eq!(p.validate(120), Ok(()));
    assert_eq!(
        p.validate(119),
        Err(DataError::GlobalBatchTooLarge {
            global_batch: 120,
            micro_batch: 3,
            accumulation: 5,
            replicas: 8,
            samples: 119
        })
    );
    assert_eq!(
        p.validate(119).unwrap_err().to_string(),
        "global batch 120 (micro-batch 3 x accumulation 5 x 8 replicas) is larger than the 119 \
         training samples"
    );
    for (field, zeroed) in [
        ("instances", BatchPlan { instances: 0, ..p }),
        (
            "micro_batch",
            BatchPlan {
                micro_batch: 0,
                ..p
            },
        ),
        (
            "device_iterations",
            BatchPlan {
                device_iterations: 0,
                ..p
            },
        ),
    ] {
        assert_eq!(zeroed.validate(1000), Err(DataError::Zero { what: field }));
    }
    let huge = BatchPlan {
        micro_batch: usize::MAX,
        ..p
    };
    let err = huge.validate(1000).unwrap_err();
    let replicas = p.instances * p.replicas_per_instance;
    let factors = vec![usize::MAX, p.accumulation, replicas];
    let what = "micro_batch x accumulation x replicas";
    assert_eq!(err, DataError::Overflow { what, factors });
    let message = format!(
        "{what} = {} x {} x {replicas} overflows usize",
        usize::MAX,
        p.accumulation
    );
    assert_eq!(err.to_string(), message);
}

#[test]
fn micro_batches_are_disjoint_and_cover_the_first_steps_global_batches() {
    let len = 1000;
    let p = BatchPlan {
        instances: 2,
        replicas_per_instance: 3,
        micro_batch: 7,
        accumulation: 4,
        device_iterations: 2,
    };
    p.validate(len).unwrap();
    let order = EpochOrder::new(len, 11, 3);
    let steps = p.steps_per_epoch(len);
    assert_eq!(steps, 1000 / 168);
    let mut seen = Vec::new();
    for step in 0..steps {
        for instance in 0..p.instances {
            for replica in p.instance_replicas(instance) {
                for k in 0..p.accumulation {
                    let mb = p.micro_batch_indices(&order, step, replica, k);
                    assert_eq!(mb.len(), 7);
                    seen.extend_from_slice(mb);
                }
            }
        }
    }
    // In (step, instance, replica, k) order the micro-batches read the
    // order's first steps * global_batch positions exactly once, in order.
    assert_eq!(seen, order.indices()[..steps * p.global_batch()]);
}

#[test]
fn the_global_order_is_the_same_for_every_replica_count() {
    let len = 500;
    let order = EpochOrder::new(len, 1, 0);
    // Global batch 64 = micro-batch 4 x 16 micro-batches, split over 1 to
    // 16 replicas, one or two instances.
    let global = |p: BatchPlan| -> Vec<Vec<usize>> {
        assert_eq!(p.global_batch(), 64);
        (0..p.steps_per_epoch(len))
            .map(|step| {
                (0..p.replicas())
                    .flat_map(|r| (0..p.accumulation).map(move |k| (r, k)))
                    .flat_map(|(r, k)| p.micro_batch_indices(&order, step, r, k).to_vec())
                    .collect()
            })
            .collect()
    };
    let reference = global(plan(1, 1, 4, 16));
    assert_eq!(reference.len(), 7);
    for replicas in [1, 2, 4, 8, 16] {
        assert_eq!(
            global(plan(1, replicas, 4, 16 / replicas)),
            reference,
            "{replicas} replicas"
        );
        if replicas > 1 {
            assert_eq!(
                global(plan(2, replicas / 2, 4, 16 / replicas)),
                reference,
                "2 instances"
            );
        }
    }
}

// ---------------------------------------------------------------- infeed

/// What the infeed of `instance` should deliver, from `start` on, for
/// `epochs` epochs.
fn expected_batches(
    d: &Dataset,
    p: BatchPlan,
    instance: usize,
    seed: u64,
    start: (u64, usize),
    epochs: u64,
) -> Vec<MicroBatch> {
    let mut out = Vec::new();
    for epoch in start.0..start.0 + epochs {
        let order = EpochOrder::new(d.len(), seed, epoch);
        let first = if epoch == start.0 { start.1 } else { 0 };
        for step in first..p.steps_per_epoch(d.len()) {
            for replica in p.instance_replicas(instance) {
                for k in 0..p.accumulation {
                    let mut mb = MicroBatch {
                        epoch,
                        step,
                        replica,
                        k,
                        inputs: vec![],
                        labels: vec![],
                    };
                    d.gather(
                        p.micro_batch_indices(&order, step, replica, k),
                        &mut mb.inputs,
                        &mut mb.labels,
                    );
                    out.push(mb);
                }
            }
        }
    }
    out
}

#[test]
fn the_infeed_yields_exactly_the_plans_batches_in_order() {
    let d = Arc::new(small_digits());
    let p = BatchPlan {
        instances: 2,
        replicas_per_instance: 2,
        micro_batch: 5,
        accumulation: 3,
        device_iterations: 2,
    };
    let steps = p.steps_per_epoch(d.len());
    assert_eq!(steps, 3);
    for instance in 0..2 {
        // From the last step of epoch 4 into epochs 5 and 6.
        let start = (4, steps - 1);
        let expected = expected_batches(&d, p, instance, 9, start, 3);
        assert_eq!(expected.len(), (1 + 2 * steps) * 2 * 3);
        let infeed = Infeed::start(Arc::clone(&d), p, instance, 9, start, 4);
        let got: Vec<MicroBatch> = infeed.take(expected.len()).collect();
        assert_eq!(got, expected);
    }
}

#[test]
fn recycled_buffers_do_not_change_what_the_infeed_yields() {
    let d = Arc::new(small_digits());
    let p = plan(1, 3, 7, 2);
    let expected = expected_batches(&d, p, 0, 3, (0, 0), 2);
    let mut infeed = Infeed::start(Arc::clone(&d), p, 0, 3, (0, 0), 6);
    // A foreign, larger buffer first: gather clears and refills.
    infeed.recycle(MicroBatch {
        epoch: 99,
        step: 99,
        replica: 99,
        k: 99,
        inputs: vec![-1.0; 1000],
        labels: vec![7; 100],
    });
    for (i, want) in expected.iter().enumerate() {
        let got = infeed.next().unwrap();
        assert_eq!(&got, want, "micro-batch {i}");
        infeed.recycle(got);
    }
}

/// The first 200 digits: three global batches of 60 with 20 left over.
fn small_digits() -> Dataset {
    digits().subset(&(0..200).collect::<Vec<_>>())
}

#[test]
fn the_infeed_stops_cleanly_when_dropped_early_or_given_a_bad_plan() {
    let d = Arc::new(small_digits());
    let p = plan(1, 2, 10, 1);
    for capacity in [0, 1, 64] {
        let mut infeed = Infeed::start(Arc::clone(&d), p, 0, 0, (0, 0), capacity);
        assert!(infeed.next().is_some());
        // The thread is blocked on a full queue (or still running): drop
        // must close the queue and join it.
        drop(infeed);
    }
    // Never read at all.
    drop(Infeed::start(Arc::clone(&d), p, 0, 0, (0, 0), 2));
    let mut too_large = Infeed::start(Arc::clone(&d), plan(1, 1, 201, 1), 0, 0, (0, 0), 2);
    assert_eq!(too_large.next(), None);
    let mut no_instance = Infeed::start(d, p, 1, 0, (0, 0), 2);
    assert_eq!(no_instance.next(), None);
}

// ---------------------------------------------------------------- outfeed

#[test]
fn outfeed_modes_keep_what_poptorch_keeps() {
    let run = |mode: OutputMode| {
        let out = Outfeed::new(mode);
        let reader = out.clone();
        for step in 0..7 {
            out.push(step, step as f64 + 0.5);
        }
        reader.snapshot()
    };
    assert_eq!(
        run(OutputMode::All),
        (0..7).map(|s| (s, s as f64 + 0.5)).collect::<Vec<_>>()
    );
    assert_eq!(run(OutputMode::Sum), [(6, 24.5)]);
    assert_eq!(run(OutputMode::Final), [(6, 6.5)]);
    assert_eq!(run(OutputMode::EveryN(3)), [(2, 2.5), (5, 5.5)]);
    assert_eq!(run(OutputMode::EveryN(0)).len(), 7);
    let out = Outfeed::new(OutputMode::All);
    out.push(0, 1u32);
    assert_eq!(out.take(), [(0, 1)]);
    assert!(out.snapshot().is_empty());
    // Readable from another thread while pushes go on.
    let writer = out.clone();
    let handle = std::thread::spawn(move || (0..100).for_each(|s| writer.push(s, 1)));
    let _partial = out.snapshot();
    handle.join().unwrap();
    assert_eq!(out.snapshot().len(), 100);
}

#[test]
fn output_modes_parse() {
    for (text, mode) in [
        ("all", OutputMode::All),
        ("sum", OutputMode::Sum),
        ("final", OutputMode::Final),
        ("every:4", OutputMode::EveryN(4)),
    ] {
        assert_eq!(text.parse::<OutputMode>(), Ok(mode));
        assert_eq!(mode.to_string(), text);
    }
    for bad in ["every:0", "every:", "every", "mean", ""] {
        assert_eq!(
            bad.parse::<OutputMode>(),
            Err(DataError::BadOutputMode(bad.into()))
        );
    }
}

#[test]
fn synthetic_images_parse_generate_and_are_separable() {
    let s: Source = "images:600:3x8x8:10:7".parse().unwrap();
    assert_eq!(
        s,
        Source::Images {
            samples: 600,
            shape: (3, 8, 8),
            classes: 10,
            seed: 7
        }
    );
    assert_eq!(s.to_string().parse::<Source>().unwrap(), s);
    assert!("images:600:3x8:10".parse::<Source>().is_err());
    assert!("images:600:3x8x8".parse::<Source>().is_err());
    let data = s.load().unwrap();
    assert_eq!(
        (data.len(), data.features(), data.classes()),
        (600, 192, 10)
    );
    assert_eq!(data.name(), "images:600:3x8x8:10:7");
    // A pure function of the seed.
    let again = s.load().unwrap();
    assert_eq!(bits(data.inputs()), bits(again.inputs()));
    let other: Source = "images:600:3x8x8:10:8".parse().unwrap();
    assert_ne!(bits(data.inputs()), bits(other.load().unwrap().inputs()));
    // Learnable: the nearest class mean (from the first half) labels the
    // second half well.
    let f = data.features();
    let mut means = vec![0.0f64; 10 * f];
    for i in 0..300 {
        let k = data.labels()[i] as usize;
        for j in 0..f {
            means[k * f + j] += f64::from(data.inputs()[i * f + j]) / 30.0;
        }
    }
    let right = (300..600)
        .filter(|&i| {
            let x = &data.inputs()[i * f..(i + 1) * f];
            let d = |k: usize| -> f64 {
                x.iter()
                    .zip(&means[k * f..])
                    .map(|(a, m)| (f64::from(*a) - m).powi(2))
                    .sum()
            };
            let best = (0..10).min_by(|&a, &b| d(a).total_cmp(&d(b))).unwrap();
            best == data.labels()[i] as usize
        })
        .count();
    assert!(right > 270, "{right} of 300");
    // Zero sizes are refused.
    assert!(matches!(
        "images:10:0x8x8:2".parse::<Source>().unwrap().load(),
        Err(DataError::Zero { .. })
    ));
}
