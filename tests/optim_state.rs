//! Saving and resuming a training run's optimizer and loss scaler: stopped
//! at step 50, serialized, restored in a fresh optimizer (and in a fresh
//! process), the run finishes bitwise as the uninterrupted one.

use half::f16;
use serde::{Deserialize, Serialize};
use tessera_core::fp::{Overflow, Round};
use tessera_core::optim::{
    AdamWConfig, Decay, Group, LambConfig, LrSchedule, OwnedOptimizer, Precision, Tensor,
};
use tessera_core::scale::{DynamicConfig, DynamicLossScaler, GradSlice};

const STEPS: u64 = 80;
const STOP: u64 = 50;
const SCHEDULE: LrSchedule = LrSchedule {
    warmup: 10,
    decay: Decay::Cosine { final_factor: 0.1 },
    total: STEPS,
};

/// Everything a run carries from one step to the next.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Run {
    optimizer: OwnedOptimizer,
    scaler: DynamicLossScaler,
    /// f16 weights (AdamW with amsgrad, no master copy), as bits.
    w16: Vec<u16>,
    /// f32 weights (LAMB).
    w32: Vec<u32>,
    step: u64,
}

impl Run {
    fn new() -> Self {
        let groups = vec![
            Group {
                config: AdamWConfig {
                    amsgrad: true,
                    ..AdamWConfig::default()
                }
                .into(),
                params: vec![(0, 37)],
            },
            Group {
                config: LambConfig::default().into(),
                params: vec![(1, 300)],
            },
        ];
        let precision = Precision {
            state: Round::STOCHASTIC.with_overflow(Overflow::Saturate),
            seed: 99,
            ..Precision::default()
        };
        let scaler = DynamicLossScaler::new(DynamicConfig {
            growth_interval: core::num::NonZeroU32::new(7).unwrap(),
            ..DynamicConfig::default()
        })
        .unwrap();
        Self {
            optimizer: OwnedOptimizer::new(groups)
                .and_then(|o| o.with_max_grad_norm(1.0))
                .unwrap()
                .with_precision(precision),
            scaler,
            w16: (0..37)
                .map(|i| f16::from_f32(value(i, 0)).to_bits())
                .collect(),
            w32: (0..300).map(|i| value(i, 1).to_bits()).collect(),
            step: 0,
        }
    }

    /// Runs until step `until` (gradients of the scaled loss, with an
    /// overflow every 13th step).
    fn run(&mut self, until: u64) {
        while self.step < until {
            let t = self.step;
            let scale = self.scaler.scale();
            let grad = |i: usize, tensor: u64| value(i, 10 + 2 * t + tensor) * scale;
            let mut g16: Vec<f16> = (0..37).map(|i| f16::from_f32(grad(i, 0))).collect();
            let mut g32: Vec<f32> = (0..300).map(|i| grad(i, 1)).collect();
            if t % 13 == 12 {
                g32[5] = f32::INFINITY;
            }
            let stats = self
                .scaler
                .unscale([GradSlice::from(&mut g16), GradSlice::from(&mut g32)]);
            let decision = self.scaler.update(stats);
            let mut w16: Vec<f16> = self.w16.iter().map(|&b| f16::from_bits(b)).collect();
            let mut w32: Vec<f32> = self.w32.iter().map(|&b| f32::from_bits(b)).collect();
            let params = &mut [
                Tensor::new(0, &mut w16, &g16),
                Tensor::new(1, &mut w32, &g32),
            ];
            self.optimizer
                .step_on(decision, SCHEDULE.factor(t), params)
                .unwrap();
            self.w16 = w16.iter().map(|w| w.to_bits()).collect();
            self.w32 = w32.iter().map(|w| w.to_bits()).collect();
            self.step += 1;
        }
    }
}

/// A value in about [-1, 1) from a hash of `(i, k)`.
fn value(i: usize, k: u64) -> f32 {
    let mut x =
        (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 31;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 29;
    (x >> 40) as f32 / (1u64 << 23) as f32 - 1.0
}

fn uninterrupted() -> Run {
    let mut run = Run::new();
    run.run(STEPS);
    assert!((STEPS / 2..STEPS).contains(&run.optimizer.applied_steps()));
    run
}

#[test]
fn a_run_resumed_from_json_and_toml_is_bitwise_the_uninterrupted_one() {
    let whole = uninterrupted();
    let mut first = Run::new();
    first.run(STOP);
    let json = serde_json::to_string(&first).unwrap();
    let toml = toml::to_string(&first).unwrap();
    for mut resumed in [
        serde_json::from_str::<Run>(&json).unwrap(),
        toml::from_str::<Run>(&toml).unwrap(),
    ] {
        assert_eq!(resumed, first);
        resumed.run(STEPS);
        assert_eq!(resumed, whole);
    }
}

const CHILD_ENV: &str = "TESSERA_TEST_RESUME_FILE";

#[test]
fn a_run_resumed_in_a_fresh_process_is_bitwise_the_uninterrupted_one() {
    let whole = uninterrupted();
    let mut first = Run::new();
    first.run(STOP);
    let dir = std::env::temp_dir().join(format!("tessera-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.json");
    std::fs::write(&path, serde_json::to_string(&first).unwrap()).unwrap();
    let status = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "optim_state::child_finishes_a_saved_run",
            "--exact",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, &path)
        .status()
        .unwrap();
    assert!(status.success());
    let finished: Run = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(finished.step, STEPS, "the child process ran");
    assert_eq!(finished, whole);
}

/// The child of the test above: finishes the run saved in the file the
/// environment names and writes it back (nothing without it).
#[test]
fn child_finishes_a_saved_run() {
    let Some(path) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let mut run: Run = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    run.run(STEPS);
    std::fs::write(&path, serde_json::to_string(&run).unwrap()).unwrap();
}
