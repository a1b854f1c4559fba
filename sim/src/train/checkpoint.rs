//! What a training checkpoint holds, and how a run resumes from one
//! bitwise where it stopped.
//!
//! | tensor | what |
//! |---|---|
//! | `weights.NAME` | the model's weights (F32 in `32.32`, F16 otherwise) |
//! | `master.NAME` | `16.32`'s f32 master weights |
//! | `state{k}.NAME` | optimizer state tensor `k` (momentum; Adam's `m`, `v`) |
//! | `layerL.bn.running_mean`, `..._var` | batch-norm running statistics |
//! | `scaler.scale`, `scaler.counters` | the loss scaler's scale and counters |
//! | `progress` | `[steps run, optimizer steps applied]` (U64) |
//!
//! The metadata names the run (`model`, `optimizer`, `precision`,
//! `loss_scaling`, `seed`, `data`, `test_fraction`, `global_batch`: what
//! fixes the data order and the weights); resuming under a different one is
//! an error naming the setting. Any split of the same global batch over
//! instances, replicas and micro-batches may resume it. Progress counters
//! that no run of this length could have reached are an error too. The random bits of
//! stochastic rounding are addressed by (seed, applied step, parameter,
//! position) and the data order by (seed, epoch), so the step counts are
//! all the random state there is.

use tessera_core::fp::f16;

use super::TrainError;
use super::config::{PrecisionMode, TrainConfig};
use super::params::FlatParams;
use crate::checkpoint::Checkpoint;
use crate::data::Dataset;

/// A loss scaler's saved state: its scale and up to three counters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ScalerState {
    pub(crate) scale: f32,
    pub(crate) counters: [u64; 3],
}

/// What a replica needs to resume, in the flat layout.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ResumeState {
    /// Steps run (the data cursor).
    pub(crate) steps: u64,
    /// Optimizer steps applied.
    pub(crate) applied: u64,
    /// f32 weights (`32.32`), master weights (`16.32`) or the f16 weights
    /// widened (`16.16`).
    pub(crate) master: Vec<f32>,
    /// The f16 weights of the 16-bit modes.
    pub(crate) weights16: Option<Vec<f16>>,
    /// Optimizer state, whole.
    pub(crate) state: Vec<Vec<f32>>,
    /// Batch-norm running statistics.
    pub(crate) buffers: Vec<(String, Vec<f32>)>,
    /// The loss scaler.
    pub(crate) scaler: ScalerState,
}

/// The metadata that identifies a run.
fn identity(config: &TrainConfig, data: &Dataset) -> Vec<(&'static str, String)> {
    let model = config.model(data.features(), data.classes());
    vec![
        (
            "model",
            format!(
                "mlp {} -> {:?} -> {} {:?}{}",
                model.inputs,
                model.hidden,
                model.classes,
                model.activation,
                if model.batch_norm { " bn" } else { "" }
            ),
        ),
        ("optimizer", config.optimizer.name().to_owned()),
        ("precision", config.precision.to_string()),
        ("loss_scaling", config.loss_scaling.describe()),
        ("seed", config.seed.to_string()),
        ("data", format!("{} ({} samples)", data.name(), data.len())),
        ("test_fraction", config.test_fraction.to_string()),
        (
            "global_batch",
            config.batch_plan().global_batch().to_string(),
        ),
    ]
}

/// A checkpoint of the state after `state.steps` steps.
pub(crate) fn build(
    config: &TrainConfig,
    data: &Dataset,
    flat: &FlatParams,
    state: &ResumeState,
) -> Checkpoint {
    let mut c = Checkpoint::new();
    for (key, value) in identity(config, data) {
        c.metadata.insert(key.into(), value);
    }
    c.metadata.insert("format".into(), "tessera-train-1".into());
    for (i, spec) in flat.specs().iter().enumerate() {
        let r = flat.range(i);
        match &state.weights16 {
            Some(w) => c.push(
                format!("weights.{}", spec.name),
                spec.shape.clone(),
                w[r.clone()].to_vec(),
            ),
            None => c.push(
                format!("weights.{}", spec.name),
                spec.shape.clone(),
                state.master[r.clone()].to_vec(),
            ),
        };
        if config.precision == PrecisionMode::Mixed {
            c.push(
                format!("master.{}", spec.name),
                spec.shape.clone(),
                state.master[r.clone()].to_vec(),
            );
        }
        for (k, s) in state.state.iter().enumerate() {
            c.push(
                format!("state{k}.{}", spec.name),
                spec.shape.clone(),
                s[r.clone()].to_vec(),
            );
        }
    }
    for (name, values) in &state.buffers {
        c.push(name.clone(), [values.len()], values.clone());
    }
    c.push("scaler.scale", [1], vec![state.scaler.scale]);
    c.push("scaler.counters", [3], state.scaler.counters.to_vec());
    c.push("progress", [2], vec![state.steps, state.applied]);
    c
}

/// The state to resume from `c`, checked against this run.
pub(crate) fn restore(
    c: &Checkpoint,
    config: &TrainConfig,
    data: &Dataset,
    flat: &FlatParams,
    buffer_names: &[(String, Vec<f32>)],
) -> Result<ResumeState, TrainError> {
    check_identity(c, config, data)?;
    let n = flat.len();
    let mut master = vec![0.0f32; n];
    let sixteen = config.precision != PrecisionMode::Fp32;
    let mut weights16 = sixteen.then(|| vec![f16::ZERO; n]);
    let mut state = vec![vec![0.0f32; n]; config.optimizer.state_tensors()];
    for (i, spec) in flat.specs().iter().enumerate() {
        let r = flat.range(i);
        let name = &spec.name;
        match &mut weights16 {
            Some(w) => {
                let saved = c.take_f16(&format!("weights.{name}"), &spec.shape)?;
                w[r.clone()].copy_from_slice(&saved);
                if config.precision == PrecisionMode::Mixed {
                    let m = c.take_f32(&format!("master.{name}"), &spec.shape)?;
                    master[r.clone()].copy_from_slice(&m);
                } else {
                    for (m, h) in master[r.clone()].iter_mut().zip(&saved) {
                        *m = h.to_f32();
                    }
                }
            }
            None => {
                let saved = c.take_f32(&format!("weights.{name}"), &spec.shape)?;
                master[r.clone()].copy_from_slice(&saved);
            }
        }
        for (k, s) in state.iter_mut().enumerate() {
            let saved = c.take_f32(&format!("state{k}.{name}"), &spec.shape)?;
            s[r.clone()].copy_from_slice(&saved);
        }
    }
    let mut buffers = Vec::new();
    for (name, values) in buffer_names {
        buffers.push((name.clone(), c.take_f32(name, &[values.len()])?));
    }
    let scale = c.take_f32("scaler.scale", &[1])?[0];
    let counters = c.take_u64("scaler.counters", &[3])?;
    let progress = c.take_u64("progress", &[2])?;
    Ok(ResumeState {
        steps: progress[0],
        applied: progress[1],
        master,
        weights16,
        state,
        buffers,
        scaler: ScalerState {
            scale,
            counters: [counters[0], counters[1], counters[2]],
        },
    })
}

/// Checks that `c` is a checkpoint of this run (see [`identity`]).
pub(crate) fn check_identity(
    c: &Checkpoint,
    config: &TrainConfig,
    data: &Dataset,
) -> Result<(), TrainError> {
    for (key, now) in identity(config, data) {
        let saved = c.meta(key)?;
        if saved != now {
            return Err(TrainError::CheckpointMismatch {
                what: key.into(),
                saved: saved.into(),
                now,
            });
        }
    }
    Ok(())
}

/// Steps run before `c` was written: where a run resumed from it starts.
pub(crate) fn saved_steps(c: &Checkpoint) -> Result<u64, TrainError> {
    Ok(c.take_u64("progress", &[2])?[0])
}
