//! One replica's model: the graph of a [`NetworkConfig`] (an MLP's
//! too: [`MlpConfig::network`](super::MlpConfig::network)) built once for
//! a micro-batch size into a training and an inference engine, run per
//! micro-batch.
//!
//! Inputs are given per sample in CHW order (as data sets store images;
//! an MLP's features are `[inputs, 1, 1]`) and reordered on the host into
//! the tiles' `[n h w, c]`. In [`Compute::F16`] the products, batch norm,
//! pooling inputs and residual sums round as the dense blocks do; a
//! convolution's input gradient is summed from its taps in f32 (col2im)
//! and rounded by the next layer's vertex.

use std::sync::{Arc, Mutex};

use tessera_core::kernels::ExactSum;

use super::activations::{StageActivations, TileBytes, layer_bytes, stage_activations};
use super::bounds;
use super::codelets::{GroupLink, update_running};
use super::config::{Compute, ParamSpec};
use super::error::ModelError;
use super::layers::Builder;
use super::layers::conv2d::nchw_to_rows;
use super::layers::network::{GradSlot, NetworkIds, Slot, graph};
use super::network::NetworkConfig;
use super::placement::{Placement, StageCycles, stage_cycles};
use super::quant::AmaxHistory;
use super::recompute::{Recomputation, recomputation};
use super::runtime::{GroupSum, MicroBatchOutput, check_batch, feed, outputs, run_with_group};
use crate::ipu::{self, Engine, EngineOptions, Graph, Program};

mod state;

/// An engine and where its tensors are.
#[derive(Debug)]
struct Built {
    engine: Engine,
    ids: NetworkIds,
    group_calls: usize,
    /// Per stage: the activations of one micro-batch.
    activations: Vec<StageActivations>,
    /// Per layer: the bytes per tile of what its backward pass reads, and
    /// of its input.
    layers: Vec<(TileBytes, TileBytes)>,
}

/// One replica's model: training and inference engines for a fixed
/// micro-batch size.
#[derive(Debug)]
pub struct Model {
    config: NetworkConfig,
    specs: Vec<ParamSpec>,
    /// Per batch-norm layer, the names of its running mean and variance.
    buffer_names: Vec<[String; 2]>,
    batch: usize,
    compute: Compute,
    train: Built,
    eval: Built,
    link: GroupLink,
    placement: Placement,
    /// Running `(mean, var)` per batch-norm layer.
    running: Vec<(Vec<f32>, Vec<f32>)>,
    /// Each delayed-scaled operand's name and amax history, in the
    /// training graph's order.
    histories: Vec<(String, AmaxHistory)>,
    stages: Option<Vec<StageCycles>>,
    /// Per flattened layer, the cycles of the last training micro-batch.
    layer_cycles: Option<Vec<StageCycles>>,
    profile: Option<ipu::Profile>,
}

/// Builds `config`'s training (`train`) or inference graph and engine
/// with its layers placed by `placement` (a sizing graph, unbuilt, if
/// `sizing`). `config` is checked against the [`bounds`] first: a network
/// not checked before (built in code) is refused with a typed error, not
/// a codelet's panic (an empty residual body).
fn build(
    config: &NetworkConfig,
    (target, placement): (&ipu::Target, &Placement),
    (batch, compute, train): (usize, Compute, bool),
    link: &GroupLink,
    sizing: bool,
) -> Result<(Graph, Program, NetworkIds, usize), ModelError> {
    bounds::check(config)?;
    let ops = config.ops(batch)?;
    let mut b = Builder {
        g: if sizing {
            Graph::sizing(*target)
        } else {
            Graph::new(*target)
        },
        placement,
        target,
        batch,
        f16: compute.f16(),
        quant: compute.recipe(),
        quant_stats: Vec::new(),
        train,
        activation: config.activation,
        link,
        stage_copies: Vec::new(),
        programs: Vec::new(),
        group_calls: 0,
    };
    let mut ids = graph(&mut b, &ops, config.input)?;
    ids.quant = core::mem::take(&mut b.quant_stats);
    Ok((b.g, Program::Sequence(b.programs), ids, b.group_calls))
}

/// `config`'s training (`train`) or inference sizing graph (nothing
/// allocated) and, for the training graph, its stage parts' activations
/// as the built model's ([`Model::stage_activations`]; none for the
/// inference graph, which stashes nothing), for
/// [`MemoryEstimate::of`](super::MemoryEstimate::of).
pub(super) fn sizing_graph(
    config: &NetworkConfig,
    at: (&ipu::Target, &Placement),
    shape: (usize, Compute, bool),
) -> Result<(Graph, Vec<StageActivations>), ModelError> {
    let link: GroupLink = Arc::new(Mutex::new(None));
    let (g, _, ids, _) = build(config, at, shape, &link, true)?;
    let train = shape.2;
    let activations = if train {
        stage_activations(&layer_bytes(&g, &ids.kept), at.1)
    } else {
        Vec::new()
    };
    Ok((g, activations))
}

impl Built {
    fn new(
        config: &NetworkConfig,
        at: (&ipu::Target, &Placement),
        shape: (usize, Compute, bool),
        link: &GroupLink,
    ) -> Result<Self, ModelError> {
        let (g, program, ids, group_calls) = build(config, at, shape, link, false)?;
        let layers = layer_bytes(&g, &ids.kept);
        let activations = stage_activations(&layers, at.1);
        let mut engine = Engine::new(g, program, EngineOptions::default())?;
        if let Some(ones) = ids.ones {
            engine
                .write_tensor(ones, &vec![1.0f32; shape.0])
                .expect("ones tensor");
        }
        Ok(Self {
            engine,
            ids,
            group_calls,
            activations,
            layers,
        })
    }

    /// Writes a micro-batch (CHW per sample) and the loss scale.
    fn feed(&mut self, input: [usize; 3], (inputs, labels): (&[f32], &[u32]), scale: f32) {
        let [c, h, w] = input;
        let rows = nchw_to_rows(inputs, labels.len(), c, h * w);
        let l = &self.ids.loss;
        let streams = (self.ids.x, l.labels, l.scale, l.scale_len);
        feed(&mut self.engine, streams, (&rows, labels), scale);
    }

    fn outputs(&self, cycles: u64) -> MicroBatchOutput {
        let l = &self.ids.loss;
        outputs(&self.engine, (l.losses, l.correct), cycles)
    }
}

impl Model {
    /// Builds `config` for micro-batches of `micro_batch` samples on
    /// `target` (one replica's IPUs), every layer over all its tiles.
    /// Parameters start at zero: call [`Model::set_params`].
    ///
    /// # Errors
    /// [`ModelError::ZeroMicroBatch`], [`ModelError::ZeroWidth`],
    /// [`ModelError::InvalidNetwork`], and the graph's and engine's errors
    /// (a tile out of memory).
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, ModelError};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let target = Target::single(IpuSpec::MK2_GC200);
    /// assert_eq!(Model::new(&net, target, 2, Compute::F32)?.micro_batch(), 2);
    /// assert_eq!(Model::new(&net, target, 0, Compute::F32).err(), Some(ModelError::ZeroMicroBatch));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn new(
        config: &NetworkConfig,
        target: ipu::Target,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        Self::placed(config, target, &Placement::Spread, micro_batch, compute)
    }

    /// As [`Model::new`], the flattened layers placed by `placement`
    /// (made by [`Placement::network`] or [`Placement::network_balanced`]:
    /// whole blocks per IPU): model sharding, pipeline stages. The
    /// results are bitwise those of every other placement.
    ///
    /// # Errors
    /// As [`Model::new`], and [`ModelError::Placement`] if `placement`
    /// does not place every layer on one of `target`'s IPUs.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, ModelError, Placement};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let two = Target::new(IpuSpec::MK2_GC200, 2).unwrap();
    /// let staged = Model::placed(&net, two, &Placement::Ipus(vec![0, 1]), 2, Compute::F32)?;
    /// assert_eq!(staged.placement().stages(), 2);
    /// let no_ipu_2 = Placement::Ipus(vec![0, 2]);
    /// let wrong = Model::placed(&net, two, &no_ipu_2, 2, Compute::F32);
    /// assert!(matches!(wrong, Err(ModelError::Placement { .. })));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn placed(
        config: &NetworkConfig,
        target: ipu::Target,
        placement: &Placement,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<Self, ModelError> {
        if micro_batch == 0 {
            return Err(ModelError::ZeroMicroBatch);
        }
        let specs = config.params()?;
        placement.validate(config, &target)?;
        let link: GroupLink = Arc::new(Mutex::new(None));
        let at = (&target, placement);
        let train = Built::new(config, at, (micro_batch, compute, true), &link)?;
        let eval = Built::new(config, at, (micro_batch, compute, false), &link)?;
        let running = train
            .ids
            .bns
            .iter()
            .map(|b| (vec![0.0; b.layout.cols()], vec![1.0; b.layout.cols()]))
            .collect();
        let buffer_names = train
            .ids
            .bns
            .iter()
            .map(|b| ["running_mean", "running_var"].map(|s| format!("layer{}.bn.{s}", b.layer)))
            .collect();
        let histories = train
            .ids
            .quant
            .iter()
            .filter_map(|q| Some((q.name.clone(), AmaxHistory::new(q.delayed?.steps))))
            .collect();
        let mut model = Self {
            config: config.clone(),
            specs,
            buffer_names,
            batch: micro_batch,
            compute,
            train,
            eval,
            link,
            placement: placement.clone(),
            running,
            histories,
            stages: None,
            layer_cycles: None,
            profile: None,
        };
        model.write_histories();
        Ok(model)
    }

    /// The configuration.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// assert_eq!(model.config(), &net);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub const fn config(&self) -> &NetworkConfig {
        &self.config
    }

    /// The arithmetic.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F16)?;
    /// assert_eq!(model.compute(), Compute::F16);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub const fn compute(&self) -> Compute {
        self.compute
    }

    /// Samples per micro-batch.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// assert_eq!(model.micro_batch(), 2);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub const fn micro_batch(&self) -> usize {
        self.batch
    }

    /// Where its flattened layers run.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, Placement};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let model = Model::new(&mlp.network(), Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// assert_eq!(model.placement(), &Placement::Spread);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub const fn placement(&self) -> &Placement {
        &self.placement
    }

    /// The cycles of each stage of the placement in the last training
    /// micro-batch, forward and backward.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, NoGroup};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let mut model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// assert!(model.stage_cycles().is_none()); // nothing trained yet
    /// let mut grads = vec![Vec::new(); 4];
    /// let out = model.train_micro_batch(&[1.0, 2.0, 3.0, 4.0], &[0, 1], 1.0, &mut NoGroup, &mut grads)?;
    /// let stages = model.stage_cycles().unwrap(); // one stage: the placement is spread
    /// assert!(stages.len() == 1 && stages[0].forward + stages[0].backward <= out.cycles);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn stage_cycles(&self) -> Option<&[StageCycles]> {
        self.stages.as_deref()
    }

    /// Per stage of the placement, the activations of one training
    /// micro-batch its backward pass reads, and its input, from the
    /// training graph's tensors.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// let a = model.stage_activations();
    /// assert_eq!(a.len(), 1);
    /// assert!(0 < a[0].max_tile_bytes && a[0].max_tile_bytes <= a[0].bytes);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn stage_activations(&self) -> &[StageActivations] {
        &self.train.activations
    }

    /// What recomputation from `checkpoints` (blocks of
    /// [`NetworkConfig::blocks`] whose input is kept, increasing, from 1)
    /// costs and saves per micro-batch: the forward cycles of the last
    /// training micro-batch's segments but the last, and the activation
    /// bytes on the fullest tile (see [`Recomputation`]).
    ///
    /// # Errors
    /// [`ModelError::Checkpoint`] naming the checkpoint.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, ModelError};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// assert_eq!(model.recomputation(&[1])?.segments, vec![0..1, 1..2]);
    /// assert!(matches!(model.recomputation(&[9]), Err(ModelError::Checkpoint(_))));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn recomputation(&self, checkpoints: &[usize]) -> Result<Recomputation, ModelError> {
        let cycles = self.layer_cycles.as_deref().unwrap_or_default();
        let blocks = self.config.blocks()?;
        recomputation(&blocks, &self.train.layers, cycles, checkpoints)
    }

    /// Sets the parameters, in the order of [`NetworkConfig::params`].
    ///
    /// # Errors
    /// [`ModelError::ParamCount`], [`ModelError::ParamLength`]; nothing is
    /// written then.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, ModelError};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let mut model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// let params = net.init(1)?;
    /// let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    /// model.set_params(&refs)?;
    /// let short = model.set_params(&refs[..1]);
    /// assert_eq!(short, Err(ModelError::ParamCount { expected: 4, got: 1 }));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn set_params(&mut self, params: &[&[f32]]) -> Result<(), ModelError> {
        if params.len() != self.specs.len() {
            return Err(ModelError::ParamCount {
                expected: self.specs.len(),
                got: params.len(),
            });
        }
        for (spec, p) in self.specs.iter().zip(params) {
            if spec.len() != p.len() {
                return Err(ModelError::ParamLength {
                    name: spec.name.clone(),
                    expected: spec.len(),
                    got: p.len(),
                });
            }
        }
        for net in [&mut self.train, &mut self.eval] {
            for (slot, values) in net.ids.params.iter().zip(params) {
                let (t, staged) = match slot {
                    Slot::Matrix(a) => (a.tensor, a.layout.from_row_major(values)),
                    Slot::Vector(t) => (*t, values.to_vec()),
                };
                net.engine
                    .write_tensor(t, &staged)
                    .expect("lengths checked");
            }
        }
        Ok(())
    }

    /// Forward and backward pass of one micro-batch (`inputs` `[micro_batch,
    /// c h w]`): writes into `grads[i]` the gradient of `scale * sum of the
    /// cross-entropy losses` for parameter `i`, f16-rounded in
    /// [`Compute::F16`]; `group` sums batch norm's statistics (three times
    /// per batch-norm layer); the running statistics are updated.
    ///
    /// # Errors
    /// [`ModelError::InputLength`], [`ModelError::LabelCount`],
    /// [`ModelError::LabelOutOfRange`], [`ModelError::InvalidScale`],
    /// [`ModelError::ParamCount`] (for `grads`), and the group's error.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, ModelError, NoGroup};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let mut model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// let params = net.init(1)?;
    /// let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    /// model.set_params(&refs)?;
    /// let mut grads = vec![Vec::new(); 4];
    /// let inputs = [1.0, 2.0, 3.0, 4.0];
    /// let out = model.train_micro_batch(&inputs, &[0, 1], 1.0, &mut NoGroup, &mut grads)?;
    /// assert!(out.loss_sum > 0.0 && out.cycles > 0);
    /// assert_eq!(grads.iter().map(Vec::len).collect::<Vec<_>>(), [6, 3, 6, 2]);
    /// let bad = model.train_micro_batch(&inputs, &[0, 2], 1.0, &mut NoGroup, &mut grads);
    /// assert!(matches!(bad, Err(ModelError::LabelOutOfRange { .. })));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn train_micro_batch(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
        scale: f32,
        group: &mut dyn GroupSum,
        grads: &mut [Vec<f32>],
    ) -> Result<MicroBatchOutput, ModelError> {
        let c = &self.config;
        check_batch((self.batch, c.inputs(), c.classes), inputs, labels)?;
        if !(scale.is_finite() && scale > 0.0) {
            return Err(ModelError::InvalidScale(scale));
        }
        if grads.len() != self.specs.len() {
            return Err(ModelError::ParamCount {
                expected: self.specs.len(),
                got: grads.len(),
            });
        }
        self.train.feed(c.input, (inputs, labels), scale);
        let t = &mut self.train;
        let profile = if t.group_calls == 0 {
            t.engine.run()
        } else {
            run_with_group((&mut t.engine, t.group_calls), &self.link, group)?
        };
        let out = self.train.outputs(profile.total_cycles);
        self.stages = Some(stage_cycles(&profile, &self.placement));
        let each = Placement::Ipus((0..self.train.layers.len() as u32).collect());
        self.layer_cycles = Some(stage_cycles(&profile, &each));
        self.profile = Some(profile);
        self.read_grads(grads);
        let e = &self.train.engine;
        for (bn, (mean, var)) in self.train.ids.bns.iter().zip(&mut self.running) {
            let stats = e.read_tensor::<f32>(bn.bn.group.expect("training graph"));
            update_running(&stats.expect("f32"), mean, var);
        }
        Ok(out)
    }

    /// Reads every parameter's gradient of the last training run.
    fn read_grads(&self, grads: &mut [Vec<f32>]) {
        let (e, f16) = (&self.train.engine, self.compute.f16());
        for (g, slot) in grads.iter_mut().zip(&self.train.ids.grads) {
            *g = match slot {
                GradSlot::Matrix(a, _) => super::layers::read_rows(e, a),
                GradSlot::Norm(k, beta) => {
                    let (dgamma, dbeta) = self.train.ids.bns[*k].bn.param_grads(e, f16);
                    if *beta { dbeta } else { dgamma }
                }
            };
        }
    }

    /// Adds the weight and bias gradients of the last training run into
    /// `sums` (per parameter, as [`Model::train_micro_batch`] writes them)
    /// exactly, product by product over the micro-batch's rows: the sums
    /// of every cut of a batch into micro-batches are bitwise the same
    /// state. Batch norm's parameters, whose gradients are not sums of
    /// per-sample products, get the run's gradient added as it is.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model, NoGroup};
    ///
    /// let net = MlpConfig {
    ///     inputs: 2,
    ///     hidden: vec![3],
    ///     classes: 2,
    ///     activation: Activation::Relu,
    ///     batch_norm: false,
    /// }
    /// .network();
    /// let target = Target::single(IpuSpec::MK2_GC200);
    /// let mut model = Model::new(&net, target, 2, Compute::F32)?;
    /// let params = net.init(1)?;
    /// let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    /// model.set_params(&refs)?;
    /// let mut grads = vec![Vec::new(); params.len()];
    /// let inputs = [1.0, 2.0, 3.0, 4.0];
    /// model.train_micro_batch(&inputs, &[0, 1], 1.0, &mut NoGroup, &mut grads)?;
    /// let mut sums = vec![Vec::new(); params.len()];
    /// model.add_exact_grads(&mut sums)?;
    /// // The graph's gradients, but for the rounding of their sums.
    /// for (g, s) in grads.iter().flatten().zip(sums.iter().flatten()) {
    ///     assert!((g - s.to_f32()).abs() <= 1e-6 * (1.0 + g.abs()));
    /// }
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    ///
    /// # Errors
    /// [`ModelError::ParamCount`] (for `sums`).
    pub fn add_exact_grads(&self, sums: &mut [Vec<ExactSum>]) -> Result<(), ModelError> {
        if sums.len() != self.specs.len() {
            return Err(ModelError::ParamCount {
                expected: self.specs.len(),
                got: sums.len(),
            });
        }
        let (e, f16) = (&self.train.engine, self.compute == Compute::F16);
        for ((s, slot), spec) in sums.iter_mut().zip(&self.train.ids.grads).zip(&self.specs) {
            s.resize(spec.len(), ExactSum::new());
            match slot {
                GradSlot::Matrix(_, rows) => rows.accumulate(e, s),
                GradSlot::Norm(k, beta) => {
                    let (dgamma, dbeta) = self.train.ids.bns[*k].bn.param_grads(e, f16);
                    let g = if *beta { dbeta } else { dgamma };
                    s.iter_mut().zip(g).for_each(|(s, x)| s.add(x));
                }
            }
        }
        Ok(())
    }

    /// Exact additions of [`Model::add_exact_grads`] per micro-batch: the
    /// products of every weight's and bias's gradient (for the simulated
    /// cost of an exact accumulation on the tiles).
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let net = MlpConfig {
    ///     inputs: 2,
    ///     hidden: vec![3],
    ///     classes: 2,
    ///     activation: Activation::Relu,
    ///     batch_norm: false,
    /// }
    /// .network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 4, Compute::F32)?;
    /// // 4 samples x ((2 + 1) x 3 + (3 + 1) x 2) weights and biases.
    /// assert_eq!(model.exact_additions(), 4 * (9 + 8));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn exact_additions(&self) -> u64 {
        let slots = self.train.ids.grads.iter();
        slots
            .map(|slot| match slot {
                GradSlot::Matrix(_, rows) => rows.additions(),
                GradSlot::Norm(..) => 0,
            })
            .sum()
    }

    /// The losses and correct predictions of one micro-batch, batch norm
    /// using the running statistics.
    ///
    /// # Errors
    /// [`ModelError::InputLength`], [`ModelError::LabelCount`],
    /// [`ModelError::LabelOutOfRange`].
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let mut model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// // Parameters at zero: equal logits, a loss of ln 2 per sample, class 0 guessed.
    /// let out = model.evaluate(&[1.0, 2.0, 3.0, 4.0], &[0, 1])?;
    /// assert!((out.loss_sum - 2.0 * 2f32.ln()).abs() < 1e-6);
    /// assert_eq!(out.correct, 1);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn evaluate(
        &mut self,
        inputs: &[f32],
        labels: &[u32],
    ) -> Result<MicroBatchOutput, ModelError> {
        let c = &self.config;
        check_batch((self.batch, c.inputs(), c.classes), inputs, labels)?;
        self.eval.feed(c.input, (inputs, labels), 1.0);
        for (bn, (mean, var)) in self.eval.ids.bns.iter().zip(&self.running) {
            let running = bn.bn.running.as_ref().expect("inference graph");
            let mut staged = vec![0.0; running.ranges.last().map_or(0, |r| r.end as usize)];
            for (blk, r) in bn.layout.blocks().iter().zip(&running.ranges) {
                let w = blk.cols.len();
                let s = &mut staged[r.start as usize..r.end as usize];
                s[..w].copy_from_slice(&mean[blk.cols.clone()]);
                s[w..].copy_from_slice(&var[blk.cols.clone()]);
            }
            self.eval
                .engine
                .write_tensor(running.tensor, &staged)
                .expect("running tensor");
        }
        let profile = self.eval.engine.run();
        let out = self.eval.outputs(profile.total_cycles);
        self.profile = Some(profile);
        Ok(out)
    }

    /// The profile of the last run (training or evaluation).
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let mut model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// assert!(model.last_profile().is_none());
    /// let out = model.evaluate(&[1.0, 2.0, 3.0, 4.0], &[0, 1])?;
    /// assert_eq!(model.last_profile().unwrap().total_cycles, out.cycles);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub const fn last_profile(&self) -> Option<&ipu::Profile> {
        self.profile.as_ref()
    }

    /// Every tile's memory in the training program.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// let memory = model.memory();
    /// assert_eq!(memory.tiles.len(), 1472);
    /// assert!(memory.tiles.iter().all(|t| t.total() <= memory.capacity));
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn memory(&self) -> ipu::MemoryUsage {
        self.train.engine.memory().clone()
    }

    /// Every tile's memory in the inference program.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// // Inference keeps no gradients.
    /// assert!(model.inference_memory().summary(1).total < model.memory().summary(1).total);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn inference_memory(&self) -> ipu::MemoryUsage {
        self.eval.engine.memory().clone()
    }

    /// The host memory of the training and inference engines together.
    ///
    /// ```
    /// use tessera_sim::ipu::{IpuSpec, Target};
    /// use tessera_sim::model::{Activation, Compute, MlpConfig, Model};
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let net = mlp.network();
    /// let model = Model::new(&net, Target::single(IpuSpec::MK2_GC200), 2, Compute::F32)?;
    /// let host = model.host_bytes();
    /// assert!(host.tensors > 0 && host.total() >= host.tensors + host.per_tile);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
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
}
