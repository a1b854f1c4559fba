//! Resuming a run: damaged and non-finite checkpoints are refused naming
//! the tensor, every setting that changes the trajectory must match (all
//! differences listed), and the free settings may change with bitwise the
//! uninterrupted run's result.

use std::fs;
use std::path::{Path, PathBuf};

use tessera_core::fp::f16;
use tessera_core::scale::DynamicConfig;
use tessera_sim::checkpoint::{Checkpoint, CheckpointError, Damage, TensorData};
use tessera_sim::data::{OutputMode, Source};
use tessera_sim::pod::PodSpec;
use tessera_sim::train::{
    Difference, GradReduction, LossScaling, LrDecay, OptimizerConfig, Pipeline, PrecisionMode,
    RunOptions, Schedule, Summary, TrainConfig, TrainError, Trainer,
};

use super::Scratch;
use crate::train::{assert_same, config, data, loss_bits, run};

/// Runs `config` for its first epoch and leaves the checkpoint at `path`.
fn save_first_epoch(config: &TrainConfig, path: &Path) {
    let options = RunOptions {
        checkpoint: Some(path.to_path_buf()),
        stop_after_epochs: Some(1),
        ..RunOptions::default()
    };
    Trainer::new(config.clone(), data())
        .unwrap()
        .run(&options, &|_| {})
        .unwrap();
}

/// A scratch directory holding `ckpt.safetensors`, the checkpoint after
/// the first of the 2 epochs of `config(2, 4, 4)`, its path and the config.
fn first_epoch(test: &str) -> (Scratch, PathBuf, TrainConfig) {
    let scratch = Scratch::new(test);
    let path = scratch.path("ckpt.safetensors");
    let c = config(2, 4, 4);
    save_first_epoch(&c, &path);
    (scratch, path, c)
}

/// Saves the checkpoint at `from`, changed by `change`, at `to` (with
/// digests that match the change).
fn edit(from: &Path, to: &Path, change: impl FnOnce(&mut Checkpoint)) {
    let mut checkpoint = Checkpoint::load(from).unwrap();
    change(&mut checkpoint);
    checkpoint.save(to).unwrap();
}

/// Resumes `config` from `path`.
fn resume(config: TrainConfig, path: &Path) -> Result<Summary, TrainError> {
    let options = RunOptions {
        resume: Some(path.to_path_buf()),
        ..RunOptions::default()
    };
    Trainer::new(config, data())?.run(&options, &|_| {})
}

/// Where tensor `name`'s bytes are in the file at `path`.
fn data_range(path: &Path, name: &str) -> std::ops::Range<usize> {
    let bytes = fs::read(path).unwrap();
    let n = usize::try_from(u64::from_le_bytes(bytes[..8].try_into().unwrap())).unwrap();
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let at = |i: usize| {
        let offset = header[name]["data_offsets"][i].as_u64().unwrap();
        8 + n + usize::try_from(offset).unwrap()
    };
    at(0)..at(1)
}

#[test]
fn bit_flips_in_a_weight_tensor_are_refused_naming_it() {
    let (_scratch, path, c) = first_epoch("resume-flips");
    let range = data_range(&path, "weights.layer1.weight");
    let mut bytes = fs::read(&path).unwrap();
    for k in 0..10 {
        bytes[range.start + (k * 131) % range.len()] ^= 1 << (k % 8);
    }
    fs::write(&path, &bytes).unwrap();
    let err = resume(c, &path).unwrap_err();
    assert!(
        matches!(&err, TrainError::Checkpoint(CheckpointError::Damaged {
            problem: Damage::Tensor(name), ..
        }) if name == "weights.layer1.weight"),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("ckpt.safetensors") && message.contains("`weights.layer1.weight`"),
        "{message}"
    );
}

/// A NaN or an infinity in the weights or the optimizer state is refused
/// even when the file's digests match it (a checkpoint of a run that
/// diverged, or one written by another program).
#[test]
fn non_finite_weights_and_state_are_refused_naming_them() {
    let (scratch, path, c) = first_epoch("resume-nan");
    let bad = scratch.path("bad.safetensors");
    let f16_nan = f16::from_bits(0x7e00);
    for (tensor, index) in [
        ("weights.layer0.weight", 17),
        ("weights.layer2.bias", 0),
        ("state0.layer1.weight", 5),
        ("state1.layer0.bias", 3),
    ] {
        edit(&path, &bad, |checkpoint| {
            let t = checkpoint.tensors.iter_mut().find(|t| t.name == tensor);
            match &mut t.unwrap().data {
                TensorData::F16(v) => v[index] = f16_nan,
                TensorData::F32(v) => v[index] = f32::INFINITY,
                other => panic!("{tensor}: {other:?}"),
            }
        });
        let err = resume(c.clone(), &bad).unwrap_err();
        assert!(
            matches!(&err, TrainError::Resume {
                source: CheckpointError::NonFinite { name, index: i, .. }, ..
            } if name == tensor && *i == index),
            "{tensor}: {err}"
        );
        assert!(err.to_string().contains(tensor), "{err}");
    }
}

#[test]
fn missing_extra_and_mistyped_tensors_are_refused_naming_them() {
    let (scratch, path, c) = first_epoch("resume-tensors");
    let bad = scratch.path("bad.safetensors");
    let refused = |change: &dyn Fn(&mut Checkpoint)| {
        edit(&path, &bad, change);
        resume(c.clone(), &bad).unwrap_err()
    };
    let source = |change: &dyn Fn(&mut Checkpoint)| match refused(change) {
        TrainError::Resume { path, source } => {
            assert_eq!(path, bad);
            source
        }
        other => panic!("expected Resume, got {other}"),
    };
    let extra = source(&|c| {
        c.push("state2.layer0.bias", [16], vec![0.0f32; 16]);
    });
    assert!(
        matches!(&extra, CheckpointError::Unexpected { name } if name == "state2.layer0.bias"),
        "{extra}"
    );
    let missing = source(&|c| c.tensors.retain(|t| t.name != "state1.layer2.weight"));
    assert!(
        matches!(&missing, CheckpointError::Missing { name } if name == "state1.layer2.weight"),
        "{missing}"
    );
    let mistyped = source(&|c| {
        c.push("weights.layer0.bias", [24], vec![0.0f32; 24]);
    });
    assert!(
        matches!(&mistyped, CheckpointError::DType { name, .. } if name == "weights.layer0.bias"),
        "{mistyped}"
    );
    let progress = refused(&|c| {
        c.push("progress", [2], vec![3u64, 4]);
    });
    assert!(
        matches!(&progress, TrainError::CheckpointMismatch { differences, .. }
            if differences.len() == 1 && differences[0].setting == "progress"),
        "{progress}"
    );
}

/// The settings a resumed run names as different from the checkpoint's.
fn differences(saved: &TrainConfig, now: TrainConfig, path: &Path) -> Vec<Difference> {
    match resume(now, path) {
        Err(TrainError::CheckpointMismatch { differences, .. }) => differences,
        other => panic!("{saved:?}: expected a mismatch, got {other:?}"),
    }
}

#[test]
fn changed_epochs_and_lr_are_refused_listing_both() {
    let (_scratch, path, c) = first_epoch("resume-epochs");
    let now = TrainConfig {
        epochs: 3,
        optimizer: c.optimizer.with_lr(0.02),
        ..c.clone()
    };
    let err = resume(now.clone(), &path).unwrap_err();
    let message = err.to_string();
    assert!(
        message.ends_with("lr: checkpoint 0.01, now 0.02; epochs: checkpoint 2, now 3"),
        "{message}"
    );
    assert_eq!(
        differences(&c, now, &path),
        [
            Difference {
                setting: "lr".into(),
                checkpoint: "0.01".into(),
                now: "0.02".into(),
            },
            Difference {
                setting: "epochs".into(),
                checkpoint: "2".into(),
                now: "3".into(),
            },
        ]
    );
}

/// A change to a configuration.
type Change<'a> = &'a dyn Fn(&mut TrainConfig);

/// Each setting that changes the trajectory, changed alone, is refused by
/// name (before any step runs).
#[test]
fn every_trajectory_setting_is_compared() {
    let (_scratch, path, c) = first_epoch("resume-settings");
    let lamb = |change: fn(&mut tessera_core::optim::LambConfig)| match c.optimizer {
        OptimizerConfig::Lamb(mut l) => {
            change(&mut l);
            OptimizerConfig::Lamb(l)
        }
        _ => unreachable!(),
    };
    let dynamic = match c.loss_scaling {
        LossScaling::Dynamic(d) => LossScaling::Dynamic(DynamicConfig {
            growth_factor: 4.0,
            ..d
        }),
        _ => unreachable!(),
    };
    let weight_decay = lamb(|l| l.weight_decay = 0.5);
    let trust_clip = lamb(|l| l.trust_clip = true);
    let changes: [(Change, &[&str]); 16] = [
        (&|x| x.seed = 7, &["seed"]),
        (&|x| x.test_fraction = 0.25, &["test_fraction"]),
        (&|x| x.hidden = vec![24, 8], &["hidden"]),
        (&|x| x.batch_norm = true, &["batch_norm", "split"]),
        (&|x| x.precision = PrecisionMode::Fp32, &["precision"]),
        (
            &|x| x.loss_scaling = dynamic,
            &["loss_scaling.growth_factor"],
        ),
        (&|x| x.optimizer = weight_decay, &["weight_decay"]),
        (&|x| x.optimizer = trust_clip, &["trust_clip"]),
        (
            &|x| x.exclude_bias_and_norm = false,
            &["exclude_bias_and_norm"],
        ),
        (&|x| x.max_grad_norm = Some(1.0), &["max_grad_norm"]),
        (&|x| x.warmup_steps = 3, &["warmup_steps"]),
        (&|x| x.lr_schedule = LrDecay::Constant, &["lr_schedule"]),
        (&|x| x.reduction = GradReduction::Sum, &["reduction"]),
        (
            &|x| x.reduction = GradReduction::RunningMean,
            &["reduction", "split"],
        ),
        // The same global batch in smaller micro-batches.
        (
            &|x| (x.micro_batch, x.gradient_accumulation) = (2, 8),
            &["micro_batch"],
        ),
        (&|x| x.micro_batch = 2, &["global_batch", "micro_batch"]),
    ];
    for (change, expected) in changes {
        let mut now = c.clone();
        change(&mut now);
        let names: Vec<String> = differences(&c, now, &path)
            .into_iter()
            .map(|d| d.setting)
            .collect();
        assert_eq!(names, expected);
    }
    // Other data: the same size, other values.
    let other = Source::Synthetic {
        samples: 400,
        features: 12,
        classes: 4,
        seed: 6,
    }
    .load()
    .unwrap();
    let err = Trainer::new(c.clone(), other)
        .unwrap()
        .run(
            &RunOptions {
                resume: Some(path.clone()),
                ..RunOptions::default()
            },
            &|_| {},
        )
        .unwrap_err();
    assert!(
        matches!(&err, TrainError::CheckpointMismatch { differences, .. }
            if differences.len() == 1 && differences[0].setting == "data"),
        "{err}"
    );
}

/// The free settings, all changed at once: the Pod, the split, IPUs per
/// replica with a pipeline and recomputation, device iterations, sharding,
/// offloading, the outfeed, the replica check and the infeed depth. The
/// resumed run finishes bitwise as the uninterrupted one.
#[test]
fn free_settings_may_change_with_bitwise_the_same_result() {
    let scratch = Scratch::new("resume-free");
    let path = scratch.path("ckpt.safetensors");
    let c = config(2, 4, 4);
    let straight = run(c.clone());
    save_first_epoch(&c, &path);
    let now = TrainConfig {
        pod: PodSpec::pods(1).unwrap(),
        instances: 1,
        replicas: 8,
        gradient_accumulation: 2,
        ipus_per_replica: 2,
        pipeline: Some(Pipeline {
            schedule: Schedule::Interleaved,
            device_mapping: None,
            serial_branches: false,
        }),
        recompute: true,
        device_iterations: 3,
        replicated_tensor_sharding: true,
        offload_optimizer_state: true,
        output_mode: OutputMode::Final,
        check_replicas_every: 1,
        infeed_capacity: 5,
        ..c
    };
    let rest = resume(now, &path).unwrap();
    assert_eq!(rest.steps.first().unwrap().step, 5);
    assert_eq!(loss_bits(&rest), loss_bits(&straight)[5..]);
    assert_eq!(rest.fingerprint, straight.fingerprint);
}

/// 12 micro-batches of 4: the splits whose sums nest in the global tree
/// (power-of-two groups, or one group) give the same bits; the others do
/// not, so their split is recorded and must match.
#[test]
fn the_split_is_free_where_it_keeps_the_summation_tree() {
    let with = |i, r, a| TrainConfig {
        micro_batch: 4,
        precision: PrecisionMode::Fp32,
        ..config(i, r, a)
    };
    let reference = run(with(1, 1, 12));
    assert_eq!(reference.global_batch, 48);
    for (i, r, a) in [(1, 12, 1), (3, 3, 4), (3, 12, 1), (1, 3, 4)] {
        assert_same(&reference, &run(with(i, r, a)), &format!("{i} x {r} x {a}"));
    }
    // 3 replicas per instance, 3 micro-batches per replica, 6 per instance.
    for (i, r, a) in [(4, 12, 1), (1, 4, 3), (2, 6, 2)] {
        let s = run(with(i, r, a));
        assert_ne!(loss_bits(&s), loss_bits(&reference), "{i} x {r} x {a}");
        assert_ne!(s.fingerprint, reference.fingerprint, "{i} x {r} x {a}");
    }

    let scratch = Scratch::new("resume-split");
    let path = scratch.path("ckpt.safetensors");
    save_first_epoch(&with(1, 4, 3), &path);
    let refused = differences(&with(1, 4, 3), with(1, 12, 1), &path);
    assert_eq!(
        refused,
        [Difference {
            setting: "split".into(),
            checkpoint: "1 instances x 4 replicas x 3 micro-batches".into(),
            now: "any with powers of two of micro-batches per replica and per instance".into(),
        }]
    );
    let straight = run(with(1, 4, 3));
    let rest = resume(with(1, 4, 3), &path).unwrap();
    assert_eq!(rest.fingerprint, straight.fingerprint);
}

/// Why `micro_batch`, and the split with batch norm or the running mean,
/// are trajectory settings: they change the bits at the same global batch.
#[test]
fn micro_batch_size_and_batch_norm_or_running_mean_splits_change_the_bits() {
    let micro = |m, a| TrainConfig {
        micro_batch: m,
        ..config(1, 1, a)
    };
    let fours = run(micro(4, 16));
    for (m, a) in [(8, 8), (2, 32), (64, 1)] {
        assert_ne!(
            run(micro(m, a)).fingerprint,
            fours.fingerprint,
            "micro-batch {m}"
        );
    }
    let bn = |i, r, a| TrainConfig {
        batch_norm: true,
        ..config(i, r, a)
    };
    let one = run(bn(1, 1, 16));
    assert_ne!(run(bn(1, 2, 8)).fingerprint, one.fingerprint);
    assert_ne!(run(bn(2, 4, 4)).fingerprint, one.fingerprint);
    let running = |i, r, a| TrainConfig {
        reduction: GradReduction::RunningMean,
        precision: PrecisionMode::Fp32,
        ..config(i, r, a)
    };
    let one = run(running(1, 1, 16));
    assert_ne!(run(running(1, 2, 8)).fingerprint, one.fingerprint);
    assert_ne!(run(running(2, 4, 4)).fingerprint, one.fingerprint);
}
