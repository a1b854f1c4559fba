//! The trainer: bitwise the same weights for every split of the global
//! batch over instances, replicas and micro-batches, with and without
//! replicated tensor sharding; resume; loss scaling's skips; stochastic
//! against nearest rounding; errors; a pinned run.

use tessera_core::fp::f16;
use tessera_core::optim::SgdConfig;
use tessera_core::scale::DynamicConfig;
use tessera_sim::data::{Dataset, OutputMode, Source, digits};
use tessera_sim::model::Activation;
use tessera_sim::pod::PodSpec;
use tessera_sim::train::NamedOptimizer;
use tessera_sim::train::{
    Divergence, Event, GradReduction, LossScaling, OptimizerConfig, Pipeline, PrecisionMode,
    RunOptions, Schedule, StepRecord, Summary, TrainConfig, TrainError, Trainer,
};

pub(crate) fn data() -> Dataset {
    Source::Synthetic {
        samples: 400,
        features: 12,
        classes: 4,
        seed: 5,
    }
    .load()
    .unwrap()
}

/// 2 epochs of a global batch of 64 (16 micro-batches of 4).
pub(crate) fn config(instances: usize, replicas: usize, accumulation: usize) -> TrainConfig {
    TrainConfig {
        hidden: vec![24, 16],
        activation: Activation::Gelu,
        pod: PodSpec::pod16(),
        instances,
        replicas,
        micro_batch: 4,
        gradient_accumulation: accumulation,
        device_iterations: 2,
        epochs: 2,
        warmup_steps: 2,
        optimizer: OptimizerConfig::named("lamb", 0.01).unwrap(),
        check_replicas_every: 3,
        ..TrainConfig::default()
    }
}

pub(crate) fn run(config: TrainConfig) -> Summary {
    Trainer::new(config, data())
        .unwrap()
        .run(&RunOptions::default(), &|_| {})
        .unwrap()
}

pub(crate) fn loss_bits(s: &Summary) -> Vec<u32> {
    s.steps.iter().map(|r| r.loss.to_bits()).collect()
}

pub(crate) fn assert_same(a: &Summary, b: &Summary, what: &str) {
    assert_eq!(loss_bits(a), loss_bits(b), "{what}: loss curves differ");
    assert_eq!(a.fingerprint, b.fingerprint, "{what}: weights differ");
    for (x, y) in a.weights.iter().zip(&b.weights) {
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(x), bits(y), "{what}: weights differ");
    }
}

#[test]
fn every_split_of_the_global_batch_gives_the_same_bits() {
    for precision in [
        PrecisionMode::HALF_SR,
        PrecisionMode::Mixed,
        PrecisionMode::Fp32,
    ] {
        for reduction in [GradReduction::PostMean, GradReduction::Sum] {
            let with = |i, r, a| TrainConfig {
                precision,
                reduction,
                ..config(i, r, a)
            };
            let reference = run(with(1, 1, 16));
            assert_eq!(reference.steps.len(), 2 * (320 / 64));
            assert!(reference.steps.iter().all(|s| !s.skipped || s.step < 3));
            for (i, r, a) in [(1, 2, 8), (2, 4, 4), (4, 8, 2), (4, 16, 1), (16, 16, 1)] {
                let what = format!("{precision} {reduction:?} {i} instances x {r} replicas x {a}");
                assert_same(&reference, &run(with(i, r, a)), &what);
            }
        }
    }
}

#[test]
fn any_instance_count_gives_the_same_bits() {
    // A global batch of 6 micro-batches of 4: 6 or 3 instances, each with
    // powers of two of replicas and micro-batches.
    let with = |i, r, a| TrainConfig {
        precision: PrecisionMode::Fp32,
        ..config(i, r, a)
    };
    let reference = run(with(6, 6, 1));
    for (i, r, a) in [(3, 6, 1), (3, 3, 2)] {
        assert_same(&reference, &run(with(i, r, a)), &format!("{i} x {r} x {a}"));
    }
}

#[test]
fn replicated_tensor_sharding_is_bitwise_the_unsharded_run() {
    for (precision, optimizer) in [
        (PrecisionMode::Mixed, "lamb"),
        (PrecisionMode::HALF_SR, "lars"),
        (PrecisionMode::Fp32, "adamw"),
        (PrecisionMode::HALF_SR, "sgd"),
    ] {
        let with = |rts| TrainConfig {
            precision,
            optimizer: OptimizerConfig::named(optimizer, 0.01).unwrap(),
            replicated_tensor_sharding: rts,
            ..config(2, 8, 2)
        };
        let plain = run(with(false));
        let sharded = run(with(true));
        assert_same(&plain, &sharded, &format!("{precision} {optimizer}"));
        let (p, s) = (plain.memory.optimizer, sharded.memory.optimizer);
        assert_eq!(p.bytes, p.unsharded_bytes);
        assert_eq!(s.unsharded_bytes, p.bytes);
        // 4 replicas per instance share the state (plus block padding).
        assert!(
            s.bytes * 4 >= p.bytes && s.bytes * 3 < p.bytes,
            "{s:?} vs {p:?}"
        );
        assert!(s.per_tile_bytes < p.per_tile_bytes);
    }
}

#[test]
fn the_fingerprint_is_of_the_named_weights_whatever_the_sharding() {
    // One hidden layer of 24: the parameters fill 5 blocks of 256, so the
    // flat buffer is padded differently for 1, 4 and 16 shards.
    let with = |i, r, a, rts| TrainConfig {
        hidden: vec![24],
        replicated_tensor_sharding: rts,
        ..config(i, r, a)
    };
    let plain = run(with(2, 8, 2, false));
    // FNV-1a over each parameter's stored bits (f16 here, as a 32-bit
    // little-endian word), in the model's parameter order.
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for x in plain.weights.iter().flatten() {
        let bits = u32::from(f16::from_f32(*x).to_bits());
        for b in bits.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    assert_eq!(plain.fingerprint, h, "the documented definition");
    for (i, r, a) in [(2, 8, 2), (1, 16, 1)] {
        let sharded = run(with(i, r, a, true));
        assert_same(&plain, &sharded, &format!("sharded {i} x {r} x {a}"));
    }
}

#[test]
fn a_resumed_run_is_bitwise_the_uninterrupted_one() {
    let dir = std::env::temp_dir().join(format!("tessera-train-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let with = |epochs, i, r, a| TrainConfig {
        precision: PrecisionMode::Mixed,
        replicated_tensor_sharding: true,
        loss_scaling: LossScaling::Automatic(Default::default()),
        epochs,
        ..config(i, r, a)
    };
    let straight = run(with(2, 2, 4, 4));
    let first = Trainer::new(with(2, 2, 4, 4), data()).unwrap();
    let save = RunOptions {
        checkpoint: Some(path.clone()),
        stop_after_epochs: Some(1),
        ..RunOptions::default()
    };
    first.run(&save, &|_| {}).unwrap();
    // Resume on another split of the same global batch: the checkpoint
    // holds the whole (gathered) optimizer state.
    for (i, r, a) in [(2, 4, 4), (1, 2, 8)] {
        let resume = RunOptions {
            resume: Some(path.clone()),
            ..RunOptions::default()
        };
        let rest = Trainer::new(with(2, i, r, a), data())
            .unwrap()
            .run(&resume, &|_| {})
            .unwrap();
        assert_eq!(rest.steps.first().unwrap().step, 5);
        assert_eq!(loss_bits(&rest), loss_bits(&straight)[5..]);
        assert_eq!(rest.fingerprint, straight.fingerprint, "{i} x {r} x {a}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_checkpoints_are_clear_errors() {
    let dir = std::env::temp_dir().join(format!("tessera-train-bad-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let save = RunOptions {
        checkpoint: Some(path.clone()),
        ..RunOptions::default()
    };
    let one = TrainConfig {
        epochs: 1,
        ..config(1, 2, 8)
    };
    Trainer::new(one.clone(), data())
        .unwrap()
        .run(&save, &|_| {})
        .unwrap();
    let resume = RunOptions {
        resume: Some(path.clone()),
        ..RunOptions::default()
    };
    let other = TrainConfig {
        hidden: vec![24, 8],
        ..one.clone()
    };
    let err = Trainer::new(other, data())
        .unwrap()
        .run(&resume, &|_| {})
        .unwrap_err();
    assert!(
        matches!(&err, TrainError::CheckpointMismatch { differences, .. }
            if differences.len() == 1 && differences[0].setting == "hidden"),
        "{err}"
    );
    // Another global batch reads the data in another order.
    let err = Trainer::new(
        TrainConfig {
            micro_batch: 2,
            ..one.clone()
        },
        data(),
    )
    .unwrap()
    .run(&resume, &|_| {})
    .unwrap_err();
    assert!(
        matches!(&err, TrainError::CheckpointMismatch { differences, .. }
            if differences[0].setting == "global_batch"),
        "{err}"
    );
    std::fs::write(&path, b"not a checkpoint").unwrap();
    let err = Trainer::new(one, data())
        .unwrap()
        .run(&resume, &|_| {})
        .unwrap_err();
    assert!(matches!(err, TrainError::Checkpoint(_)), "{err}");
    assert!(err.to_string().contains("ckpt.safetensors"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn impossible_configurations_say_which_numbers_disagree() {
    let err = |c: TrainConfig| Trainer::new(c, data()).unwrap_err();
    // 3 replicas do not divide among 2 instances.
    let e = err(config(2, 3, 1));
    assert!(matches!(e, TrainError::Pod(_)), "{e}");
    // 32 replicas of 1 IPU on a POD16.
    let e = err(config(1, 32, 1));
    assert!(matches!(e, TrainError::Pod(_)), "{e}");
    // A global batch of 4 x 400 x 1 samples is larger than the 320 left
    // for training.
    let e = err(config(1, 1, 400));
    assert!(matches!(e, TrainError::Data(_)), "{e}");
    let e = err(TrainConfig {
        test_fraction: 0.0001,
        ..config(1, 1, 1)
    });
    assert!(e.to_string().contains("no test sample"), "{e}");
    let e = err(TrainConfig {
        epochs: u64::MAX / 2,
        ..config(1, 1, 1)
    });
    assert!(
        e.to_string().contains("more steps than can be counted"),
        "{e}"
    );
    let e = err(TrainConfig {
        micro_batch: 0,
        ..config(1, 1, 1)
    });
    assert!(matches!(e, TrainError::Zero("micro_batch")), "{e}");
    let e = err(TrainConfig {
        optimizer: OptimizerConfig::named("lamb", -1.0).unwrap(),
        ..config(1, 1, 1)
    });
    assert!(matches!(e, TrainError::Optimizer(_)), "{e}");
    let e = err(TrainConfig {
        loss_scaling: LossScaling::Static(f32::INFINITY),
        ..config(1, 1, 1)
    });
    assert!(matches!(e, TrainError::LossScaling(_)), "{e}");
}

#[test]
fn overflowing_steps_are_skipped_and_leave_the_weights_alone() {
    // A scale so large that every f16 gradient overflows: every step is
    // skipped and the weights are the initial ones, rounded to f16.
    let c = TrainConfig {
        loss_scaling: LossScaling::Static(1.0e30),
        epochs: 1,
        ..config(2, 4, 4)
    };
    let s = run(c.clone());
    assert!(s.steps.iter().all(|r| r.skipped && r.lr == 0.0));
    let trainer = Trainer::new(c, data()).unwrap();
    let init = trainer.model().init(42);
    for (w, i) in s.weights.iter().zip(&init) {
        let rounded: Vec<u32> = i
            .iter()
            .map(|&x| f16::from_f32(x).to_f32().to_bits())
            .collect();
        assert_eq!(w.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), rounded);
    }
    // Dynamic scaling from 2^40 backs off by halves until the gradients
    // fit, then applies.
    let s = run(TrainConfig {
        loss_scaling: LossScaling::Dynamic(DynamicConfig {
            init_scale: 2.0f32.powi(24),
            ..DynamicConfig::default()
        }),
        epochs: 4,
        ..config(2, 4, 4)
    });
    let first_applied = s.steps.iter().position(|r| !r.skipped).unwrap();
    assert!(first_applied > 0);
    for w in s.steps[..=first_applied].windows(2) {
        assert_eq!(w[1].loss_scale, w[0].loss_scale / 2.0);
    }
    assert!(s.steps[first_applied..].iter().all(|r| !r.skipped));
}

#[test]
fn a_diverging_run_stops_and_keeps_its_last_checkpoint() {
    let dir = std::env::temp_dir().join(format!("tessera-train-nan-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    // A learning rate that blows the weights up: then every step's
    // gradients overflow and loss scaling skips it. 8 epochs of 5 steps.
    let trainer = Trainer::new(
        TrainConfig {
            optimizer: OptimizerConfig::named("lamb", 1e30).unwrap(),
            epochs: 8,
            ..config(2, 4, 4)
        },
        data(),
    )
    .unwrap();
    let seen = std::sync::Mutex::new(Vec::<StepRecord>::new());
    let observer = |e: Event<'_>| {
        if let Event::Step(r) = e {
            seen.lock().unwrap().push(r.clone());
        }
    };
    let options = RunOptions {
        checkpoint: Some(path.clone()),
        checkpoint_every: 1,
        ..RunOptions::default()
    };
    let err = trainer.run(&options, &observer).unwrap_err();
    let TrainError::Diverged { step, steps, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(steps, Divergence::DEFAULT_STEPS);
    assert!(step < 39, "stopped before the end: {err}");
    // The observer saw every step up to it, the last `steps` of them bad.
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len() as u64, step + 1);
    let bad = |r: &StepRecord| r.skipped || !r.loss.is_finite();
    assert!(seen[(step + 1 - steps) as usize..].iter().all(bad));
    assert!(!bad(&seen[(step - steps) as usize]));
    // A non-finite state is never checkpointed (resuming would refuse it):
    // LAMB at 1e30 blows the weights up in the first epoch, so there is none.
    assert!(!path.exists(), "a checkpoint of non-finite weights");
    // An overflowing static scale skips every step and keeps the weights
    // finite: no checkpoint of the diverged state, the last epoch's is kept.
    let overflowing = Trainer::new(
        TrainConfig {
            loss_scaling: LossScaling::Static(1.0e38),
            epochs: 8,
            ..config(2, 4, 4)
        },
        data(),
    )
    .unwrap();
    let err = overflowing.run(&options, &|_| {}).unwrap_err();
    let TrainError::Diverged { step, .. } = err else {
        panic!("{err}")
    };
    assert_eq!(step, Divergence::DEFAULT_STEPS - 1, "every step is bad");
    assert_eq!(overflowing.resume_point(&path).unwrap(), step / 5 * 5);
    // Never stopping runs to the end, skipping almost every step.
    let options = RunOptions {
        divergence: Divergence::NEVER,
        ..RunOptions::default()
    };
    let s = trainer.run(&options, &|_| {}).unwrap();
    assert!(s.steps.iter().filter(|r| bad(r)).count() > 30);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn stochastic_rounding_keeps_updates_that_nearest_rounding_loses() {
    // SGD with updates mostly below half an f16 ulp of the weights: to
    // nearest, they are lost; stochastically, each moves a weight by an
    // ulp with the probability of its size.
    let with = |precision| TrainConfig {
        precision,
        optimizer: OptimizerConfig::Sgd(SgdConfig {
            lr: 1.0e-3,
            ..SgdConfig::default()
        }),
        warmup_steps: 0,
        loss_scaling: LossScaling::Off,
        epochs: 1,
        ..config(1, 2, 8)
    };
    let rn = run(with(PrecisionMode::HALF_RN));
    let sr = run(with(PrecisionMode::HALF_SR));
    let init = Trainer::new(with(PrecisionMode::HALF_RN), data())
        .unwrap()
        .model()
        .init(42);
    let moved = |w: &[Vec<f32>]| -> usize {
        w.iter()
            .zip(&init)
            .map(|(a, b)| {
                a.iter()
                    .zip(b)
                    .filter(|&(&x, &y)| x != f16::from_f32(y).to_f32())
                    .count()
            })
            .sum()
    };
    let (rn, sr) = (moved(&rn.weights), moved(&sr.weights));
    assert!(
        2 * sr > 3 * rn,
        "nearest moved {rn} weights, stochastic {sr}"
    );
}

#[test]
fn batch_norm_over_replicas_keeps_replicas_identical() {
    let s = run(TrainConfig {
        batch_norm: true,
        check_replicas_every: 1,
        output_mode: OutputMode::Final,
        ..config(2, 4, 2)
    });
    assert!(s.steps.iter().all(|r| r.loss.is_finite()));
    let last = s.steps.last().unwrap();
    assert_eq!(s.outfeed.snapshot(), vec![(last.step as usize, last.loss)]);
}

#[test]
fn the_digits_mlp_learns() {
    let s = Trainer::new(
        TrainConfig {
            instances: 2,
            replicas: 4,
            micro_batch: 16,
            epochs: 8,
            ..TrainConfig::default()
        },
        digits(),
    )
    .unwrap()
    .run(&RunOptions::default(), &|_| {})
    .unwrap();
    assert!(s.test.test_accuracy > 0.9, "{:?}", s.test);
    assert!(s.steps.last().unwrap().loss < 0.5 * s.steps[0].loss);
    assert!(s.step_time.compute_s > 0.0 && s.step_time.ipu_link_s > 0.0);
    assert!(s.memory.max_tile_bytes() > 0);
    assert!(s.trace.is_some());
}

#[test]
fn every_optimizer_trains_the_default_job_with_its_defaults() {
    // The default job (40 epochs of the digits on a POD16) with each
    // optimizer's own defaults: LARS at LAMB's learning rate reached 71%.
    let lamb = TrainConfig::default().optimizer;
    assert_eq!(Ok(lamb), OptimizerConfig::default_named("lamb"));
    for name in ["sgd", "adamw", "lars"] {
        let config = TrainConfig {
            optimizer: OptimizerConfig::default_named(name).unwrap(),
            ..TrainConfig::default()
        };
        let s = Trainer::new(config, digits())
            .unwrap()
            .run(&RunOptions::default(), &|_| {})
            .unwrap();
        assert!(s.test.test_accuracy > 0.97, "{name}: {:?}", s.test);
    }
}

#[test]
fn a_small_run_is_pinned() {
    // Value stability: any change to these bits is a breaking change.
    let s = run(config(2, 4, 4));
    assert_eq!(format!("{:016x}", s.fingerprint), "6c0d0ca5c436b929");
    assert_eq!(s.steps.last().unwrap().loss.to_bits(), 1_067_968_766);
}

/// A deeper MLP over 4 IPUs per replica, 2 replicas, 8 micro-batches.
fn deep(pipeline: Option<Pipeline>, recompute: bool) -> TrainConfig {
    TrainConfig {
        hidden: vec![32, 32, 24],
        ipus_per_replica: 4,
        pipeline,
        recompute,
        epochs: 1,
        ..config(1, 2, 8)
    }
}

#[test]
fn pipelined_and_sharded_runs_are_bitwise_the_data_parallel_run() {
    // The same global batch on replicas of one IPU, layers spread.
    let plain = run(TrainConfig {
        ipus_per_replica: 1,
        ..deep(None, false)
    });
    let spread = run(deep(None, false));
    assert_same(&plain, &spread, "spread over 4 IPUs");
    for schedule in [
        Schedule::Grouped,
        Schedule::Interleaved,
        Schedule::Sequential,
    ] {
        for mapping in [None, Some(vec![0, 1, 1, 3])] {
            for recompute in [false, true] {
                let pipeline = Pipeline {
                    schedule,
                    device_mapping: mapping.clone().map(Into::into),
                    serial_branches: false,
                };
                let s = run(deep(Some(pipeline), recompute));
                let what = format!("{schedule} {mapping:?} recompute {recompute}");
                assert_same(&plain, &s, &what);
                let t = s.step_time;
                assert_eq!(t.recompute_s > 0.0, recompute, "{what}");
                if schedule == Schedule::Sequential {
                    assert_eq!(t.bubble_s, 0.0, "{what}");
                } else if mapping.is_none() {
                    // P = 4 stages, G = 8: (P - 1) / G of the compute idles.
                    assert!(
                        (t.bubble_s / t.compute_s - 3.0 / 8.0).abs() < 1e-9,
                        "{what}"
                    );
                }
            }
        }
    }
}

#[test]
fn schedules_keep_the_documented_activations() {
    let keeps = |schedule| {
        let s = run(deep(
            Some(Pipeline {
                schedule,
                device_mapping: None,
                serial_branches: false,
            }),
            false,
        ));
        s.memory
            .activations
            .iter()
            .map(|a| a.stashed)
            .collect::<Vec<_>>()
    };
    assert_eq!(keeps(Schedule::Grouped), [7, 5, 3, 1]);
    assert_eq!(keeps(Schedule::Interleaved), [4, 3, 2, 1]);
    assert_eq!(keeps(Schedule::Sequential), [1, 1, 1, 1]);
    // Recomputation keeps stage inputs, not activations: with 4
    // micro-batches in flight, the first stage saves memory.
    let s = run(deep(Some(Pipeline::default()), true));
    assert!(s.memory.activations[0].recompute_saves_bytes > 0);
    assert!(s.memory.activations[0].stash_bytes_per_tile > 0);
}

#[test]
fn impossible_model_parallelism_is_explained() {
    let err = |c: TrainConfig| Trainer::new(c, data()).unwrap_err().to_string();
    // 4 stages need at least 4 accumulated micro-batches.
    let e = err(TrainConfig {
        gradient_accumulation: 2,
        replicas: 4,
        ..deep(Some(Pipeline::default()), false)
    });
    assert!(e.contains("gradient_accumulation >= 4"), "{e}");
    // Layers (the MLP's blocks) out of order, on a missing IPU, or too
    // few of them.
    for (mapping, says) in [
        (vec![0, 2, 1, 3], "contiguous"),
        (vec![0, 1, 2, 4], "IPU 4"),
        (vec![0, 1, 2], "has 3 entries; the network needs 4"),
    ] {
        let e = err(deep(
            Some(Pipeline {
                schedule: Schedule::Interleaved,
                device_mapping: Some(mapping.into()),
                serial_branches: false,
            }),
            false,
        ));
        assert!(e.contains(says), "{e}");
    }
    let e = err(TrainConfig {
        hidden: vec![32],
        ..deep(Some(Pipeline::default()), false)
    });
    assert!(e.contains("only 2 blocks"), "{e}");
}

#[test]
fn resuming_a_finished_run_runs_nothing_and_keeps_its_weights() {
    let dir = std::env::temp_dir().join(format!("tessera-train-done-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let c = deep(Some(Pipeline::default()), false);
    let save = RunOptions {
        checkpoint: Some(path.clone()),
        ..RunOptions::default()
    };
    let done = Trainer::new(c.clone(), data())
        .unwrap()
        .run(&save, &|_| {})
        .unwrap();
    let resume = RunOptions {
        resume: Some(path),
        ..RunOptions::default()
    };
    let again = Trainer::new(c, data())
        .unwrap()
        .run(&resume, &|_| {})
        .unwrap();
    assert!(again.steps.is_empty());
    assert_eq!(again.fingerprint, done.fingerprint);
    assert_eq!(again.step_time.compute_s, 0.0);
    std::fs::remove_dir_all(&dir).unwrap();
}
