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
//! The metadata holds the settings that fix the run's trajectory (see
//! `trajectory.rs`): resuming under other values of any of them is an
//! error listing every difference, while the free settings (the Pod, the
//! split over instances and replicas where it gives the same bits, outputs)
//! may change. Progress counters that no run of this length could have
//! reached are an error too, and so are weights, master weights, optimizer
//! state, batch-norm statistics or a loss scale that are not finite. The
//! random bits of stochastic rounding are addressed by (seed, applied step,
//! parameter, position) and the data order by (seed, epoch), so the step
//! counts are all the random state there is.

mod trajectory;

use std::path::Path;

use tessera_core::fp::f16;

use super::config::TrainConfig;
use super::error::{Difference, TrainError};
use super::params::FlatParams;
use crate::checkpoint::{Checkpoint, CheckpointError, check_finite};
use crate::data::Dataset;
use crate::train::precision::PrecisionMode;

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

impl ResumeState {
    /// Whether every float of the state is finite: only such a state is
    /// checkpointed, since resuming refuses any other (a diverged run keeps
    /// its last finite checkpoint instead of one it could not resume).
    pub(crate) fn is_finite(&self) -> bool {
        let finite = |v: &[f32]| v.iter().all(|x| x.is_finite());
        finite(&self.master)
            && self
                .weights16
                .as_ref()
                .is_none_or(|w| w.iter().all(|x| x.is_finite()))
            && self.state.iter().all(|v| finite(v))
            && self.buffers.iter().all(|(_, v)| finite(v))
            && self.scaler.scale.is_finite()
    }
}

/// A checkpoint of the state after `state.steps` steps.
pub(crate) fn build(
    config: &TrainConfig,
    data: &Dataset,
    flat: &FlatParams,
    state: &ResumeState,
) -> Checkpoint {
    let mut c = Checkpoint::new();
    c.metadata.extend(trajectory::settings(config, data));
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
        if config.precision.f32_master() {
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

/// The state to resume from the checkpoint at `path`, checked against
/// this run of `total` steps.
///
/// # Errors
/// [`TrainError::Checkpoint`] when the file cannot be read or is damaged;
/// [`TrainError::CheckpointMismatch`] listing every setting that differs,
/// or impossible progress counters; [`TrainError::Resume`] when a tensor
/// is missing, extra, of another type or shape, or not finite.
pub(crate) fn resume(
    path: &Path,
    config: &TrainConfig,
    data: &Dataset,
    flat: &FlatParams,
    buffers: &[(String, Vec<f32>)],
    total: u64,
) -> Result<ResumeState, TrainError> {
    let c = Checkpoint::load(path)?;
    check_settings(path, &c, config, data)?;
    let state = restore(&c, config, flat, buffers).map_err(|source| TrainError::Resume {
        path: path.to_path_buf(),
        source,
    })?;
    check_progress(path, state.steps, state.applied, total)?;
    Ok(state)
}

/// Refuses `c` when any setting that changes the trajectory differs from
/// this run's, listing every difference.
fn check_settings(
    path: &Path,
    c: &Checkpoint,
    config: &TrainConfig,
    data: &Dataset,
) -> Result<(), TrainError> {
    let differences = trajectory::differences(&c.metadata, &trajectory::settings(config, data));
    if differences.is_empty() {
        Ok(())
    } else {
        Err(TrainError::CheckpointMismatch {
            path: path.to_path_buf(),
            differences,
        })
    }
}

/// Refuses progress counters that no run of `total` steps reaches.
fn check_progress(path: &Path, steps: u64, applied: u64, total: u64) -> Result<(), TrainError> {
    if applied > steps || steps > total {
        return Err(TrainError::CheckpointMismatch {
            path: path.to_path_buf(),
            differences: vec![Difference {
                setting: "progress".into(),
                checkpoint: format!("{steps} steps run, {applied} applied"),
                now: format!("a run of {total} steps"),
            }],
        });
    }
    Ok(())
}

/// The steps run before the checkpoint at `path`, checked to be of this
/// run of `total` steps (its settings and progress, not its tensors):
/// where a run resumed from it starts.
pub(crate) fn resume_point(
    path: &Path,
    config: &TrainConfig,
    data: &Dataset,
    total: u64,
) -> Result<u64, TrainError> {
    let c = Checkpoint::load(path)?;
    check_settings(path, &c, config, data)?;
    let steps = c.take_u64("progress", &[2])?[0];
    check_progress(path, steps, 0, total)?;
    Ok(steps)
}

/// The tensors of a checkpoint as the trainer takes them: every float
/// finite, and none left over.
struct Reader<'c> {
    c: &'c Checkpoint,
    taken: Vec<String>,
}

impl Reader<'_> {
    fn f32(&mut self, name: String, shape: &[usize]) -> Result<Vec<f32>, CheckpointError> {
        let values = self.c.take_f32(&name, shape)?;
        check_finite(&name, &values)?;
        self.taken.push(name);
        Ok(values)
    }

    fn f16(&mut self, name: String, shape: &[usize]) -> Result<Vec<f16>, CheckpointError> {
        let values = self.c.take_f16(&name, shape)?;
        check_finite(&name, &values)?;
        self.taken.push(name);
        Ok(values)
    }

    fn u64(&mut self, name: &str, shape: &[usize]) -> Result<Vec<u64>, CheckpointError> {
        let values = self.c.take_u64(name, shape)?;
        self.taken.push(name.to_owned());
        Ok(values)
    }

    /// The first tensor not taken, as an error.
    fn finish(self) -> Result<(), CheckpointError> {
        match self
            .c
            .tensors
            .iter()
            .find(|t| !self.taken.contains(&t.name))
        {
            Some(t) => Err(CheckpointError::Unexpected {
                name: t.name.clone(),
            }),
            None => Ok(()),
        }
    }
}

/// The state in `c`, in the layout of `flat` and `config`.
fn restore(
    c: &Checkpoint,
    config: &TrainConfig,
    flat: &FlatParams,
    buffer_names: &[(String, Vec<f32>)],
) -> Result<ResumeState, CheckpointError> {
    let mut read = Reader {
        c,
        taken: Vec::new(),
    };
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
                let saved = read.f16(format!("weights.{name}"), &spec.shape)?;
                w[r.clone()].copy_from_slice(&saved);
                if config.precision.f32_master() {
                    let m = read.f32(format!("master.{name}"), &spec.shape)?;
                    master[r.clone()].copy_from_slice(&m);
                } else {
                    for (m, h) in master[r.clone()].iter_mut().zip(&saved) {
                        *m = h.to_f32();
                    }
                }
            }
            None => {
                let saved = read.f32(format!("weights.{name}"), &spec.shape)?;
                master[r.clone()].copy_from_slice(&saved);
            }
        }
        for (k, s) in state.iter_mut().enumerate() {
            let saved = read.f32(format!("state{k}.{name}"), &spec.shape)?;
            s[r.clone()].copy_from_slice(&saved);
        }
    }
    let mut buffers = Vec::new();
    for (name, values) in buffer_names {
        buffers.push((name.clone(), read.f32(name.clone(), &[values.len()])?));
    }
    let scale = read.f32("scaler.scale".into(), &[1])?[0];
    let counters = read.u64("scaler.counters", &[3])?;
    let progress = read.u64("progress", &[2])?;
    read.finish()?;
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
