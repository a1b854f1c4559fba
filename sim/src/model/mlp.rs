//! One replica's MLP: the graph built once for a micro-batch size, run per
//! micro-batch.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use super::codelets::{GroupLink, update_running};
use super::config::{MlpConfig, ParamSpec};
use super::layers::LayerIds;
use super::placement::{Placement, StageCycles, stage_cycles};
use super::{GroupSum, ModelError};
use crate::ipu::{self, Engine, EngineOptions, Graph, Program, StreamId, TensorId};

/// The arithmetic of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Compute {
    /// f32 throughout, nothing rounded.
    F32,
    /// Mixed precision: f16 weights (given), activations and gradients
    /// rounded to nearest f16, products accumulated in f32 (see the
    /// [module docs](super#numerics)).
    F16,
}

/// What one micro-batch gives back besides the gradients.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct MicroBatchOutput {
    /// The sum over samples of the (unscaled) cross-entropy losses, added
    /// in f64 in sample order and rounded once.
    pub loss_sum: f32,
    /// Samples whose first largest logit is the label.
    pub correct: usize,
    /// Simulated cycles of this run.
    pub cycles: u64,
}

/// One engine (or, before it is built, its graph: [`Unbuilt`]) and where
/// its tensors are.
#[derive(Debug)]
pub(super) struct Net<E = Engine> {
    pub(super) engine: E,
    pub(super) x: StreamId,
    pub(super) labels: StreamId,
    pub(super) scale: TensorId,
    pub(super) scale_len: usize,
    pub(super) losses: TensorId,
    pub(super) correct: TensorId,
    pub(super) layers: Vec<LayerIds>,
    /// Group sums per run (two per batch-norm layer when training).
    pub(super) group_calls: usize,
}

/// A [`Net`]'s graph and program, before its engine is built.
#[derive(Debug)]
pub(super) struct Unbuilt {
    pub(super) graph: Graph,
    pub(super) program: Program,
    /// The ones of `db = 1^T dZ` (training graphs), to write once.
    pub(super) ones: Option<TensorId>,
}

impl<E> Net<E> {
    /// The same net over `make(its engine)`.
    fn try_map<F, X>(self, make: impl FnOnce(E) -> Result<F, X>) -> Result<Net<F>, X> {
        Ok(Net {
            engine: make(self.engine)?,
            x: self.x,
            labels: self.labels,
            scale: self.scale,
            scale_len: self.scale_len,
            losses: self.losses,
            correct: self.correct,
            layers: self.layers,
            group_calls: self.group_calls,
        })
    }
}

/// What a replica's graphs are built from.
#[derive(Clone, Copy)]
pub(super) struct Recipe<'a> {
    pub(super) config: &'a MlpConfig,
    pub(super) target: &'a ipu::Target,
    pub(super) placement: &'a Placement,
    pub(super) batch: usize,
    pub(super) compute: Compute,
    pub(super) link: &'a GroupLink,
}

impl<'a> Recipe<'a> {
    /// The recipe of [`Mlp::placed`]'s arguments, checked.
    pub(super) fn checked(
        config: &'a MlpConfig,
        target: &'a ipu::Target,
        placement: &'a Placement,
        batch: usize,
        compute: Compute,
        link: &'a GroupLink,
    ) -> Result<Self, ModelError> {
        config.validate()?;
        placement.validate(config, target)?;
        if batch == 0 {
            return Err(ModelError::ZeroMicroBatch);
        }
        super::check_sizes(config, batch)?;
        Ok(Self {
            config,
            target,
            placement,
            batch,
            compute,
            link,
        })
    }

    /// Builds the training (`train`) or inference graph and its engine.
    fn net(self, train: bool) -> Result<Net, ModelError> {
        self.graph(train, false)?.try_map(|u| {
            let mut engine = Engine::new(u.graph, u.program, EngineOptions::default())?;
            if let Some(ones) = u.ones {
                engine
                    .write_tensor(ones, &vec![1.0f32; self.batch])
                    .expect("ones tensor");
            }
            Ok(engine)
        })
    }

    /// The training (`train`) or inference graph, a [`Graph::sizing`] one
    /// if `sizing`.
    pub(super) fn graph(self, train: bool, sizing: bool) -> Result<Net<Unbuilt>, ModelError> {
        super::layers::graph(self, train, sizing)
    }
}

/// One replica's model: the training and the inference graphs, each built
/// once into an engine for a fixed micro-batch size.
#[derive(Debug)]
pub struct Mlp {
    config: MlpConfig,
    specs: Vec<ParamSpec>,
    batch: usize,
    compute: Compute,
    placement: Placement,
    /// The stages' cycles in the last training run.
    stages: Option<Vec<StageCycles>>,
    train: Net,
    eval: Net,
    link: GroupLink,
    /// Running `(mean, var)` of each batch-norm layer, by layer.
    running: Vec<Option<(Vec<f32>, Vec<f32>)>>,
    profile: Option<ipu::Profile>,
}

impl Mlp {
    /// Builds the model for micro-batches of `micro_batch` samples on
    /// `target` (one replica's IPUs), every layer spread over all its
    /// tiles: the forward and backward pass, and a separate inference
    /// program. Parameters start at zero: call [`Mlp::set_params`].
    ///
    /// # Errors
    /// [`ModelError::ZeroWidth`], [`ModelError::ZeroMicroBatch`],
    /// [`ModelError::TooLarge`];
    /// [`ModelError::Build`] carrying [`BuildError::OutOfTileMemory`](ipu::BuildError::OutOfTileMemory)
    /// if a tile does not have the memory.
    pub fn new(
        config: &MlpConfig,
        target: ipu::Target,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        Self::placed(config, target, &Placement::Spread, micro_batch, compute)
    }

    /// As [`Mlp::new`], with the layers placed by `placement` (on the
    /// replica's IPUs one by one: model sharding, pipeline stages). The
    /// results are bitwise those of every other placement.
    ///
    /// # Errors
    /// As [`Mlp::new`], and [`ModelError::Placement`].
    pub fn placed(
        config: &MlpConfig,
        target: ipu::Target,
        placement: &Placement,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        let link: GroupLink = Arc::new(Mutex::new(None));
        let recipe = Recipe::checked(config, &target, placement, micro_batch, compute, &link)?;
        let train = recipe.net(true)?;
        let eval = recipe.net(false)?;
        let running = train
            .layers
            .iter()
            .map(|l| {
                l.bn.as_ref()
                    .map(|_| (vec![0.0; l.width], vec![1.0; l.width]))
            })
            .collect();
        Ok(Self {
            config: config.clone(),
            specs: config.params(),
            batch: micro_batch,
            compute,
            placement: placement.clone(),
            stages: None,
            train,
            eval,
            link,
            running,
            profile: None,
        })
    }

    /// The configuration.
    #[must_use]
    pub const fn config(&self) -> &MlpConfig {
        &self.config
    }

    /// The arithmetic.
    #[must_use]
    pub const fn compute(&self) -> Compute {
        self.compute
    }

    /// Samples per micro-batch.
    #[must_use]
    pub const fn micro_batch(&self) -> usize {
        self.batch
    }

    /// Where the layers run.
    #[must_use]
    pub const fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The cycles of each stage of the placement, forward and backward, in
    /// the last training micro-batch (`None` before one ran): see
    /// [`StageCycles`].
    #[must_use]
    pub fn stage_cycles(&self) -> Option<&[StageCycles]> {
        self.stages.as_deref()
    }

    /// Sets the parameters, in the order of [`MlpConfig::params`].
    ///
    /// # Errors
    /// [`ModelError::ParamCount`], [`ModelError::ParamLength`]; nothing is
    /// written then.
    pub fn set_params(&mut self, params: &[&[f32]]) -> Result<(), ModelError> {
        self.check_lengths(params.iter().map(|p| p.len()))?;
        let mut k = 0;
        for l in 0..self.train.layers.len() {
            for net in [&mut self.train, &mut self.eval] {
                let layer = &net.layers[l];
                let mut ts = vec![layer.dense.w.tensor, layer.dense.b];
                if let Some(bn) = &layer.bn {
                    ts.extend([bn.gamma, bn.beta]);
                }
                let weights = layer.dense.w.layout.from_row_major(params[k]);
                for (j, t) in ts.into_iter().enumerate() {
                    let values = if j == 0 { &weights } else { params[k + j] };
                    net.engine.write_tensor(t, values).expect("lengths checked");
                }
            }
            k += if self.train.layers[l].bn.is_some() {
                4
            } else {
                2
            };
        }
        Ok(())
    }

    fn check_lengths(&self, lens: impl ExactSizeIterator<Item = usize>) -> Result<(), ModelError> {
        if lens.len() != self.specs.len() {
            return Err(ModelError::ParamCount {
                expected: self.specs.len(),
                got: lens.len(),
            });
        }
        for (spec, got) in self.specs.iter().zip(lens) {
            if spec.len() != got {
                return Err(ModelError::ParamLength {
                    name: spec.name.clone(),
                    expected: spec.len(),
                    got,
                });
            }
        }
        Ok(())
    }

    /// Forward and backward pass of one micro-batch (`inputs` row-major
    /// `[micro_batch, inputs]`, a label per sample): writes into `grads[i]`
    /// (resized to the shape of parameter `i`) the gradient of `scale *
    /// sum over samples of the cross-entropy`, f16-rounded in
    /// [`Compute::F16`]. With batch norm, `group` sums the statistics over
    /// the replica group (three times per batch-norm layer: the mean, the squared deviations, the backward sums) and the running
    /// statistics are updated.
    ///
    /// # Errors
    /// [`ModelError::InputLength`], [`ModelError::LabelCount`],
    /// [`ModelError::LabelOutOfRange`], [`ModelError::InvalidScale`],
    /// [`ModelError::ParamCount`] (for `grads`), and the group's error.
    pub fn train_micro_batch(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
        scale: f32,
        group: &mut dyn GroupSum,
        grads: &mut [Vec<f32>],
    ) -> Result<MicroBatchOutput, ModelError> {
        check_batch(
            (self.batch, self.config.inputs, self.config.classes),
            inputs,
            labels,
        )?;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(ModelError::InvalidScale(scale));
        }
        if grads.len() != self.specs.len() {
            return Err(ModelError::ParamCount {
                expected: self.specs.len(),
                got: grads.len(),
            });
        }
        let t = &mut self.train;
        feed(
            &mut t.engine,
            (t.x, t.labels, t.scale, t.scale_len),
            (inputs, labels),
            scale,
        );
        let profile = if self.train.group_calls == 0 {
            self.train.engine.run()
        } else {
            let calls = self.train.group_calls;
            run_with_group((&mut self.train.engine, calls), &self.link, group)?
        };
        let out = outputs(
            &self.train.engine,
            (self.train.losses, self.train.correct),
            profile.total_cycles,
        );
        self.stages = Some(stage_cycles(&profile, &self.placement));
        self.profile = Some(profile);
        let f16 = self.compute == Compute::F16;
        let mut k = 0;
        for (l, layer) in self.train.layers.iter().enumerate() {
            let (dw, db) = layer.grads.as_ref().expect("training graph");
            let e = &self.train.engine;
            for (j, g) in [dw, db].into_iter().enumerate() {
                let values = e.read_tensor::<f32>(g.tensor).expect("f32");
                grads[k + j] = g.layout.to_row_major(&values);
            }
            k += 2;
            if let Some(bn) = &layer.bn {
                let (dgamma, dbeta) = bn.param_grads(e, f16);
                grads[k] = dgamma;
                grads[k + 1] = dbeta;
                k += 2;
                let stats = e
                    .read_tensor::<f32>(bn.group.expect("training graph"))
                    .expect("f32");
                if let Some((mean, var)) = &mut self.running[l] {
                    update_running(&stats, mean, var);
                }
            }
        }
        Ok(out)
    }

    /// The losses and correct predictions of one micro-batch, batch norm
    /// using the running statistics.
    ///
    /// # Errors
    /// [`ModelError::InputLength`], [`ModelError::LabelCount`],
    /// [`ModelError::LabelOutOfRange`].
    pub fn evaluate(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
    ) -> Result<MicroBatchOutput, ModelError> {
        check_batch(
            (self.batch, self.config.inputs, self.config.classes),
            inputs,
            labels,
        )?;
        let t = &mut self.eval;
        feed(
            &mut t.engine,
            (t.x, t.labels, t.scale, t.scale_len),
            (inputs, labels),
            1.0,
        );
        for (layer, running) in self.eval.layers.iter().zip(&self.running) {
            if let (Some(bn), Some((mean, var))) = (&layer.bn, running) {
                let running = bn.running.as_ref().expect("inference graph");
                let (t, ranges) = (&running.tensor, &running.ranges);
                let mut staged = vec![0.0; ranges.last().map_or(0, |r| r.end as usize)];
                for (blk, r) in layer.out.blocks().iter().zip(ranges) {
                    let w = blk.cols.len();
                    let s = &mut staged[r.start as usize..r.end as usize];
                    s[..w].copy_from_slice(&mean[blk.cols.clone()]);
                    s[w..].copy_from_slice(&var[blk.cols.clone()]);
                }
                self.eval
                    .engine
                    .write_tensor(*t, &staged)
                    .expect("running tensor");
            }
        }
        let profile = self.eval.engine.run();
        let out = outputs(
            &self.eval.engine,
            (self.eval.losses, self.eval.correct),
            profile.total_cycles,
        );
        self.profile = Some(profile);
        Ok(out)
    }

    /// The batch-norm running statistics, `layer{l}.bn.running_mean` and
    /// `layer{l}.bn.running_var` per batch-norm layer (empty without batch
    /// norm), for checkpoints.
    #[must_use]
    pub fn buffers(&self) -> Vec<(String, Vec<f32>)> {
        let mut out = Vec::new();
        for (l, r) in self.running.iter().enumerate() {
            if let Some((mean, var)) = r {
                out.push((format!("layer{l}.bn.running_mean"), mean.clone()));
                out.push((format!("layer{l}.bn.running_var"), var.clone()));
            }
        }
        out
    }

    /// Restores buffers saved by [`Mlp::buffers`] (any subset, by name).
    ///
    /// # Errors
    /// [`ModelError::UnknownBuffer`], [`ModelError::ParamLength`]; nothing
    /// is written then.
    pub fn set_buffers(&mut self, buffers: &[(String, Vec<f32>)]) -> Result<(), ModelError> {
        let mut updates = Vec::new();
        for (name, values) in buffers {
            let found = self.running.iter().enumerate().find_map(|(l, r)| {
                let (mean, _) = r.as_ref()?;
                if *name == format!("layer{l}.bn.running_mean") {
                    Some((l, false, mean.len()))
                } else if *name == format!("layer{l}.bn.running_var") {
                    Some((l, true, mean.len()))
                } else {
                    None
                }
            });
            let (l, is_var, len) =
                found.ok_or_else(|| ModelError::UnknownBuffer { name: name.clone() })?;
            if values.len() != len {
                return Err(ModelError::ParamLength {
                    name: name.clone(),
                    expected: len,
                    got: values.len(),
                });
            }
            updates.push((l, is_var, values));
        }
        for (l, is_var, values) in updates {
            if let Some((mean, var)) = &mut self.running[l] {
                let dst = if is_var { var } else { mean };
                dst.copy_from_slice(values);
            }
        }
        Ok(())
    }

    /// The profile of the last run (training or evaluation).
    #[must_use]
    pub const fn last_profile(&self) -> Option<&ipu::Profile> {
        self.profile.as_ref()
    }

    /// Every tile's memory in the training program (the larger of the
    /// two).
    #[must_use]
    pub fn memory(&self) -> ipu::MemoryUsage {
        self.train.engine.memory().clone()
    }

    /// Every tile's memory in the inference program.
    #[must_use]
    pub fn inference_memory(&self) -> ipu::MemoryUsage {
        self.eval.engine.memory().clone()
    }

    /// The host memory of the training and inference engines together.
    #[must_use]
    pub fn host_bytes(&self) -> ipu::HostBytes {
        let (t, e) = (
            self.train.engine.host_bytes(),
            self.eval.engine.host_bytes(),
        );
        ipu::HostBytes {
            tensors: t.tensors + e.tensors,
            vertices: t.vertices + e.vertices,
            exchanges: t.exchanges + e.exchanges,
            per_tile: t.per_tile + e.per_tile,
        }
    }

    /// Floating-point operations of the matrix products per sample:
    /// `(forward, backward)`, a multiply-add counted as two; the backward
    /// pass is `dW` for every layer and `dA` for all but the first.
    #[must_use]
    pub fn flops_per_sample(&self) -> (u64, u64) {
        let mut fwd = 0;
        let mut bwd = 0;
        for (l, (i, o)) in self.config.layers().into_iter().enumerate() {
            let f = 2 * i as u64 * o as u64;
            fwd += f;
            bwd += if l == 0 { f } else { 2 * f };
        }
        (fwd, bwd)
    }
}

/// Empties a [`GroupLink`] when dropped.
struct CloseLink<'a>(&'a GroupLink);

impl Drop for CloseLink<'_> {
    fn drop(&mut self) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }
}

/// Runs `net`'s program on a scoped thread while this thread serves its
/// group-sum vertices with `group` (which need not be `Send`). A failed sum
/// answers with the local values so the program finishes; its error is
/// returned.
pub(super) fn run_with_group(
    (engine, calls): (&mut Engine, usize),
    link: &GroupLink,
    group: &mut dyn GroupSum,
) -> Result<ipu::Profile, ModelError> {
    let (to_host, requests) = mpsc::channel::<Vec<f32>>();
    let (answers, from_host) = mpsc::channel::<Vec<f32>>();
    *link.lock().unwrap_or_else(|e| e.into_inner()) = Some((to_host, from_host));
    let (profile, error) = std::thread::scope(|s| {
        let runner = s.spawn(move || {
            // Drops the link's sender however the run ends (a panic too),
            // so that the loop below stops waiting.
            let _close = CloseLink(link);
            engine.run()
        });
        let mut error = None;
        for _ in 0..calls {
            let Ok(mut values) = requests.recv() else {
                break;
            };
            if error.is_none()
                && let Err(e) = group.sum(&mut values)
            {
                error = Some(e);
            }
            if answers.send(values).is_err() {
                break;
            }
        }
        let profile = runner.join();
        (profile, error)
    });
    *link.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let profile = profile.unwrap_or_else(|p| std::panic::resume_unwind(p));
    match error {
        Some(e) => Err(e),
        None => Ok(profile),
    }
}

/// Checks a micro-batch of `batch` samples of `inputs` features and
/// labels below `classes`.
pub(super) fn check_batch(
    (batch, features, classes): (usize, usize, usize),
    inputs: &[f32],
    labels: &[u32],
) -> Result<(), ModelError> {
    let expected = batch * features;
    if inputs.len() != expected {
        return Err(ModelError::InputLength {
            expected,
            got: inputs.len(),
        });
    }
    if labels.len() != batch {
        return Err(ModelError::LabelCount {
            expected: batch,
            got: labels.len(),
        });
    }
    if let Some(sample) = labels.iter().position(|&l| l as usize >= classes) {
        return Err(ModelError::LabelOutOfRange {
            sample,
            label: labels[sample],
            classes,
        });
    }
    Ok(())
}

/// Writes a micro-batch's inputs, labels and scale into `engine`'s
/// streams `x` and `labels` and its `scale` tensor (`scale_len` copies).
pub(super) fn feed(
    engine: &mut Engine,
    (x, label_stream, scale_tensor, scale_len): (StreamId, StreamId, TensorId, usize),
    (inputs, labels): (&[f32], &[u32]),
    scale: f32,
) {
    let labels: Vec<f32> = labels.iter().map(|&l| l as f32).collect();
    engine.stream_write(x, inputs).expect("checked");
    engine.stream_write(label_stream, &labels).expect("checked");
    engine
        .write_tensor(scale_tensor, &vec![scale; scale_len])
        .expect("scale tensor");
}

/// The losses and correct predictions of `engine`'s last run.
pub(super) fn outputs(
    engine: &Engine,
    (losses, correct): (TensorId, TensorId),
    cycles: u64,
) -> MicroBatchOutput {
    let losses = engine.read_tensor::<f32>(losses).expect("f32");
    let correct = engine.read_tensor::<f32>(correct).expect("f32");
    MicroBatchOutput {
        loss_sum: losses.iter().map(|&l| f64::from(l)).sum::<f64>() as f32,
        correct: correct.iter().filter(|&&c| c > 0.5).count(),
        cycles,
    }
}
