//! Quantised products in training: every new mode gives bitwise the same
//! weights and losses over instances, replicas and accumulation splits
//! (per-tensor scales are a max over a micro-batch's tensor, MX scales a
//! max over 32 values of one sample or one weight line: neither depends
//! on the split), and differs from `16.16`; so does NVFP4 with an f16
//! accumulator (its tensor scale a max too, the accumulator's rounding
//! fixed by the product's tree).

use tessera_sim::model::quant::{Accumulator, Recipe, RoleQuant};
use tessera_sim::train::{
    LowFamily, LowPrecision, PrecisionMode, RunOptions, TrainConfig, Trainer,
};

use crate::train::{assert_same, config, data, loss_bits, run};

#[test]
fn every_new_mode_gives_the_same_bits_on_every_split() {
    let half = run(TrainConfig {
        epochs: 1,
        ..config(1, 1, 16)
    })
    .fingerprint;
    let nvfp4_f16 = PrecisionMode::Low(LowPrecision {
        family: LowFamily::Mxfp4,
        master: false,
        recipe: Recipe {
            accumulator: Accumulator::F16,
            ..Recipe::NVFP4
        },
    });
    let modes = ["8.16", "8.32", "mxfp8.16", "mxfp6.16", "mxfp4.16"]
        .map(|m| (m, m.parse::<PrecisionMode>().unwrap()));
    for (mode, precision) in modes.into_iter().chain([("nvfp4 f16", nvfp4_f16)]) {
        let with = |i, r, a| TrainConfig {
            precision,
            epochs: 1,
            ..config(i, r, a)
        };
        let reference = run(with(1, 1, 16));
        assert!(reference.steps.iter().all(|s| s.loss.is_finite()), "{mode}");
        for (i, r, a) in [(2, 4, 4), (4, 16, 1)] {
            let what = format!("{mode} {i} instances x {r} replicas x {a}");
            assert_same(&reference, &run(with(i, r, a)), &what);
        }
        assert_ne!(reference.fingerprint, half, "{mode}");
    }
}

/// `8.16` with every role delayed over a history of 4 steps (the
/// window rolls within an epoch of 6 steps).
fn delayed() -> PrecisionMode {
    let role = |s: &str| s.parse::<RoleQuant>().unwrap();
    PrecisionMode::Low(LowPrecision {
        family: LowFamily::Fp8,
        master: false,
        recipe: Recipe {
            weights: role("f143:nearest:delayed4"),
            activations: role("f143:nearest:delayed4"),
            gradients: role("f152:nearest:delayed4"),
            ..Recipe::FP8
        },
    })
}

/// Delayed scaling: the first step casts with an empty history's scale
/// `2^0` and later ones with the history's; the weights and losses are
/// bitwise the same over instances, replicas and accumulation splits (a
/// step's entry is its max over every micro-batch and replica).
#[test]
fn delayed_scaling_gives_the_same_bits_on_every_split() {
    let with = |i, r, a| TrainConfig {
        precision: delayed(),
        epochs: 1,
        ..config(i, r, a)
    };
    let reference = run(with(1, 1, 16));
    assert!(reference.steps.iter().all(|s| s.loss.is_finite()));
    let first = &reference.steps[0].quant;
    assert!(!first.is_empty() && first.iter().all(|q| q.exponent == 0));
    let later = &reference.steps[1].quant;
    assert!(later.iter().any(|q| q.exponent != 0), "{later:?}");
    for (i, r, a) in [(2, 4, 4), (4, 16, 1)] {
        let what = format!("delayed {i} instances x {r} replicas x {a}");
        assert_same(&reference, &run(with(i, r, a)), &what);
    }
}

/// The amax histories are checkpointed: a run stopped after one epoch
/// and resumed (on another split) ends bitwise as the uninterrupted one.
#[test]
fn a_resumed_delayed_run_is_bitwise_the_uninterrupted_one() {
    let dir = std::env::temp_dir().join(format!("tessera-delayed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let with = |i, r, a| TrainConfig {
        precision: delayed(),
        ..config(i, r, a)
    };
    let straight = run(with(1, 2, 8));
    let save = RunOptions {
        checkpoint: Some(path.clone()),
        stop_after_epochs: Some(1),
        ..RunOptions::default()
    };
    Trainer::new(with(1, 2, 8), data())
        .unwrap()
        .run(&save, &|_| {})
        .unwrap();
    let resume = RunOptions {
        resume: Some(path),
        ..RunOptions::default()
    };
    let rest = Trainer::new(with(2, 4, 4), data())
        .unwrap()
        .run(&resume, &|_| {})
        .unwrap();
    let first = rest.steps.first().unwrap().step as usize;
    assert!(first > 0, "resumed after the first epoch");
    assert_eq!(loss_bits(&rest), loss_bits(&straight)[first..]);
    // The resumed first step casts with the restored histories' scales.
    let exponents = |s: &tessera_sim::train::StepRecord| -> Vec<i32> {
        s.quant.iter().map(|q| q.exponent).collect()
    };
    let resumed = exponents(&rest.steps[0]);
    assert_eq!(resumed, exponents(&straight.steps[first]));
    assert!(resumed.iter().any(|k| *k != 0), "{resumed:?}");
    assert_eq!(rest.fingerprint, straight.fingerprint);
    std::fs::remove_dir_all(&dir).unwrap();
}
