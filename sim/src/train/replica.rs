//! One replica: its model on its simulated IPU, its copy of the weights,
//! its piece of the optimizer state, and the step every replica runs in
//! lockstep.

use core::ops::Range;

use tessera_collectives::{CommError, ReduceOp};
use tessera_core::collective::tree_sum;
use tessera_core::fp::{self, Round, f16};
use tessera_core::kernels::{self, ExactSum};
use tessera_core::optim::{Accumulation, GradNorm, Partials, Precision, Step, StepCounter};
use tessera_core::scale::{
    AutomaticLossScaler, AutomaticState, BinCounts, BinEdge, DynamicLossScaler, DynamicState,
    GradSlice, LossScaler, StaticLossScaler, unscale_grads,
};

use super::TrainError;
use super::checkpoint::{ResumeState, ScalerState};
use super::comm::{LIMBS_PER_WORD, ReplicaComm, from_limb_sums, to_limbs, write_limbs};
use super::config::{GradReduction, LossScaling, TrainConfig};
use super::invariant::ExactGrads;
use super::optimizer::{Groups, Piece, pieces};
use super::params::FlatParams;
use super::precision::PrecisionMode;
use crate::data::MicroBatch;
use crate::model::quant::{TensorQuant, max_or_nan};
use crate::model::{BnGroup as BnStatistics, GroupSum, Model, ModelError, NoGroup, StageCycles};

/// The loss scaler of a run.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Scaler {
    Static(StaticLossScaler),
    Dynamic(DynamicLossScaler),
    Automatic(AutomaticLossScaler),
}

impl Scaler {
    pub(crate) fn new(config: LossScaling) -> Result<Self, TrainError> {
        let s = match config {
            LossScaling::Off => StaticLossScaler::new(1.0).map(Self::Static),
            LossScaling::Static(s) => StaticLossScaler::new(s).map(Self::Static),
            LossScaling::Dynamic(c) => DynamicLossScaler::new(c).map(Self::Dynamic),
            LossScaling::Automatic(c) => AutomaticLossScaler::new(c).map(Self::Automatic),
        };
        s.map_err(TrainError::LossScaling)
    }

    fn as_dyn(&mut self) -> &mut dyn LossScaler {
        match self {
            Self::Static(s) => s,
            Self::Dynamic(s) => s,
            Self::Automatic(s) => s,
        }
    }

    pub(crate) fn scale(&self) -> f32 {
        match self {
            Self::Static(s) => s.scale(),
            Self::Dynamic(s) => s.scale(),
            Self::Automatic(s) => s.scale(),
        }
    }

    /// The state a checkpoint keeps.
    pub(crate) fn state(&self) -> ScalerState {
        match self {
            Self::Static(s) => ScalerState {
                scale: s.scale(),
                counters: [0; 3],
            },
            Self::Dynamic(s) => ScalerState {
                scale: s.scale(),
                counters: [
                    u64::from(s.growth_tracker().unsigned_abs()),
                    u64::from(s.hysteresis_tracker()),
                    0,
                ],
            },
            Self::Automatic(s) => ScalerState {
                scale: s.scale(),
                counters: [
                    u64::from(s.step_in_period()),
                    s.window_counts().lower,
                    s.window_counts().upper,
                ],
            },
        }
    }

    /// This scaler's configuration in a saved state.
    pub(crate) fn resume(self, state: ScalerState) -> Result<Self, TrainError> {
        let too_large = |name, value: u64| {
            TrainError::LossScaling(tessera_core::scale::ScalerConfigError::Counter {
                name,
                value: i64::try_from(value).unwrap_or(i64::MAX),
                max: i64::from(i32::MAX),
            })
        };
        let [a, b, c] = state.counters;
        let s = match self {
            Self::Static(_) => StaticLossScaler::new(state.scale).map(Self::Static),
            Self::Dynamic(s) => DynamicLossScaler::from_state(DynamicState {
                config: *s.config(),
                scale: state.scale,
                growth_tracker: i32::try_from(a).map_err(|_| too_large("growth_tracker", a))?,
                hysteresis_tracker: u32::try_from(b)
                    .map_err(|_| too_large("hysteresis_tracker", b))?,
            })
            .map(Self::Dynamic),
            Self::Automatic(s) => AutomaticLossScaler::from_state(AutomaticState {
                config: *s.config(),
                scale: state.scale,
                step_in_period: u32::try_from(a).map_err(|_| too_large("step_in_period", a))?,
                window_counts: BinCounts { lower: b, upper: c },
            })
            .map(Self::Automatic),
        };
        s.map_err(TrainError::LossScaling)
    }
}

/// The model weights every replica holds whole (the flat layout).
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Weights {
    /// `32.32`.
    F32(Vec<f32>),
    /// `16.32` (rounded from the master) and `16.16`.
    F16(Vec<f16>),
}

impl Weights {
    /// The weights as f32 values.
    pub(crate) fn to_f32(&self) -> Vec<f32> {
        match self {
            Self::F32(w) => w.clone(),
            Self::F16(w) => {
                let mut out = vec![0.0; w.len()];
                fp::half_to_f32_slice(w, &mut out);
                out
            }
        }
    }

    /// A 64-bit FNV-1a fingerprint of the parameters' bits as stored (an
    /// f16 zero-extended to a 32-bit word), parameter by parameter in
    /// `flat`'s order. The flat buffer's padding, whose length depends on
    /// the sharding, is not part of it: equal weights, equal fingerprint.
    pub(crate) fn fingerprint(&self, flat: &FlatParams) -> u64 {
        let ranges = (0..flat.specs().len()).map(|i| flat.range(i));
        match self {
            Self::F32(w) => fingerprint(ranges.flat_map(|r| w[r].iter().map(|x| x.to_bits()))),
            Self::F16(w) => {
                fingerprint(ranges.flat_map(|r| w[r].iter().map(|x| u32::from(x.to_bits()))))
            }
        }
    }
}

/// FNV-1a over 32-bit words.
pub(crate) fn fingerprint(words: impl Iterator<Item = u32>) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for w in words {
        for b in w.to_le_bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

/// Batch-norm statistics summed over every replica.
struct BnGroup<'a>(&'a mut ReplicaComm);

impl GroupSum for BnGroup<'_> {
    fn sum(&mut self, values: &mut [f32]) -> Result<(), ModelError> {
        self.0
            .all_reduce(values, ReduceOp::Sum)
            .map_err(|e| ModelError::Group {
                reason: e.to_string(),
            })
    }
}

/// The loss scaler's histogram counts of the parameters' gradients in
/// `grads` (flat), none without an edge.
fn histogram(edge: Option<BinEdge>, flat: &FlatParams, grads: &[f32]) -> BinCounts {
    edge.map_or_else(BinCounts::default, |e| {
        (0..flat.specs().len()).fold(BinCounts::default(), |b, i| {
            b.merge(e.count(&grads[flat.range(i)]))
        })
    })
}

/// Tail of a contribution: loss sum, correct count, histogram counts as
/// limbs (lower, upper).
const TAIL: usize = 2 + 2 * LIMBS_PER_WORD;

/// What a step gives back.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct StepOutcome {
    /// Mean loss over the global batch.
    pub(crate) loss: f32,
    /// Fraction of the global batch predicted right.
    pub(crate) accuracy: f32,
    /// The loss scale the step ran with.
    pub(crate) loss_scale: f32,
    /// The learning rate applied (0 when skipped).
    pub(crate) lr: f32,
    /// Whether loss scaling skipped the update.
    pub(crate) skipped: bool,
    /// Cycles of each stage of the replica's model per micro-batch.
    pub(crate) stages: Vec<StageCycles>,
    /// Forward cycles per micro-batch recomputed from checkpoints.
    pub(crate) checkpointed_cycles: u64,
    /// The quantised operands of the step's last micro-batch.
    pub(crate) quant: Vec<TensorQuant>,
}

/// The whole master weights (`16.32`) and optimizer state tensors.
pub(crate) type GatheredState = (Option<Vec<f32>>, Vec<Vec<f32>>);

/// One replica's state.
pub(crate) struct Replica<'a> {
    pub(crate) config: &'a TrainConfig,
    pub(crate) flat: &'a FlatParams,
    pub(crate) comm: ReplicaComm,
    pub(crate) model: Model,
    /// The flat range whose optimizer state this replica owns.
    pub(crate) shard: Range<usize>,
    pub(crate) weights: Weights,
    /// `16.32`'s f32 master weights of the shard.
    pub(crate) master: Option<Vec<f32>>,
    /// Optimizer state of the shard.
    pub(crate) state: Vec<Vec<f32>>,
    pub(crate) scaler: Scaler,
    /// The optimizer's groups, built once.
    groups: Groups,
    /// Optimizer steps applied (Adam's `t`; skipped steps do not count).
    pub(crate) counter: StepCounter,
    contributions: Vec<Vec<f32>>,
    grads: Vec<Vec<f32>>,
    reduced: Vec<f32>,
    /// `--batch-invariant`'s exact sums of a step.
    exact: Option<ExactGrads>,
    /// The step's amax of each delayed-scaled operand, over this
    /// replica's micro-batches so far.
    amaxes: Vec<f32>,
}

impl<'a> Replica<'a> {
    /// A replica with initial weights `init` (per parameter), broadcast
    /// from the first replica of instance 0, or resumed from `resume`.
    pub(crate) fn new(
        config: &'a TrainConfig,
        flat: &'a FlatParams,
        mut comm: ReplicaComm,
        model: Model,
        init: &[Vec<f32>],
        resume: Option<&ResumeState>,
    ) -> Result<Self, TrainError> {
        let n = flat.len();
        let shard = if config.replicated_tensor_sharding {
            tessera_collectives::fragment(n, comm.local_size(), comm.local_rank())
        } else {
            0..n
        };
        let mut master_full = vec![0.0f32; n];
        match resume {
            Some(r) => master_full.copy_from_slice(&r.master),
            None => flat.flatten(init, &mut master_full),
        }
        // PopDist: instance 0's weights go to every instance over the host.
        comm.broadcast(&mut master_full)?;
        let weights = match config.precision {
            PrecisionMode::Fp32 => Weights::F32(master_full.clone()),
            _ => {
                // The master rounded to nearest: in `16.32` always, in
                // `16.16` the master is the f16 weights widened.
                let mut w = vec![f16::ZERO; n];
                fp::f32_to_half_slice(&master_full, &mut w);
                Weights::F16(w)
            }
        };
        let master = config
            .precision
            .f32_master()
            .then(|| master_full[shard.clone()].to_vec());
        let state = match resume {
            Some(r) => r.state.iter().map(|s| s[shard.clone()].to_vec()).collect(),
            None => vec![vec![0.0; shard.len()]; config.optimizer.state_tensors()],
        };
        let mut scaler = Scaler::new(config.loss_scaling)?;
        let mut counter = StepCounter::default();
        if let Some(r) = resume {
            scaler = scaler.resume(r.scaler)?;
            counter = StepCounter::resumed(r.applied);
        }
        let contribution = vec![0.0; n + TAIL];
        let (exact, kept) = if config.batch_invariant {
            (Some(ExactGrads::new(flat)), 0)
        } else {
            (None, config.gradient_accumulation)
        };
        let mut replica = Self {
            config,
            flat,
            exact,
            contributions: vec![contribution.clone(); kept],
            grads: vec![Vec::new(); flat.specs().len()],
            reduced: contribution,
            comm,
            model,
            shard,
            weights,
            master,
            state,
            scaler,
            groups: Groups::new(config.optimizer, config.exclude_bias_and_norm)?,
            counter,
            amaxes: Vec::new(),
        };
        if let Some(r) = resume {
            replica.model.set_buffers(&r.buffers)?;
        }
        replica.load_model()?;
        Ok(replica)
    }

    /// Writes the weights into the model.
    fn load_model(&mut self) -> Result<(), TrainError> {
        let all = self.weights.to_f32();
        let params = self.flat.unflatten(&all, |x| x);
        let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
        self.model.set_params(&refs)?;
        Ok(())
    }

    /// The forward cycles of the last micro-batch recomputed from the
    /// run's checkpoints (0 without).
    fn checkpointed_cycles(&self) -> u64 {
        let checkpoints = &self.config.recompute_checkpoints;
        if checkpoints.is_empty() {
            return 0;
        }
        match self.model.recomputation(checkpoints) {
            Ok(r) => r.cycles,
            Err(_) => 0,
        }
    }

    /// Runs step `step` of `total` (0-based) on this replica's
    /// micro-batches (in order `k`).
    pub(crate) fn step(
        &mut self,
        batches: &[MicroBatch],
        step: u64,
        total: u64,
    ) -> Result<StepOutcome, TrainError> {
        let flat = self.flat;
        let n = flat.len();
        let scale = self.scaler.scale();
        self.micro_batches(batches, scale)?;
        let amaxes = self.step_amaxes()?;
        let (grads, tail) = self.reduced.split_at_mut(n);
        let samples = (self.config.micro_batch * batches.len() * self.config.replicas) as f32;
        let loss = tail[0] / samples;
        let accuracy = tail[1] / samples;
        let counts = from_limb_sums(&tail[2..]);
        let mut stats = unscale_grads(
            [GradSlice::from(&mut grads[..])],
            self.scaler.as_dyn().inv_scale(),
            None,
        );
        stats.bins = BinCounts {
            lower: counts[0],
            upper: counts[1],
        };
        let divisor = match self.config.reduction {
            _ if self.exact.is_some() => 1,
            GradReduction::Sum => 1,
            GradReduction::PostMean => batches.len() * self.config.replicas,
            GradReduction::RunningMean => self.config.replicas,
        };
        if divisor > 1 {
            kernels::scale(
                (1.0 / f64::from(divisor as u32)) as f32,
                grads,
                fp::Rounding::Nearest,
            );
        }
        let decision = self.scaler.as_dyn().update(stats);
        let mut outcome = StepOutcome {
            loss,
            accuracy,
            loss_scale: scale,
            lr: 0.0,
            skipped: decision.is_skip(),
            stages: self.model.stage_cycles().unwrap_or_default().to_vec(),
            checkpointed_cycles: self.checkpointed_cycles(),
            quant: self.model.quant_stats(),
        };
        if decision.is_skip() {
            // A skipped step's amaxes (an overflow's infinities) stay out
            // of the delayed scales' histories.
            return Ok(outcome);
        }
        self.model.push_amaxes(&amaxes)?;
        let c = self.config;
        let factor = c.lr_schedule.factor(step, total, c.warmup_steps);
        outcome.lr = c.optimizer.lr() * factor;
        self.update(factor)?;
        self.load_model()?;
        Ok(outcome)
    }

    /// The step's amax of each delayed-scaled operand over every
    /// micro-batch of every replica (a max: the same for every split of
    /// the batch), bitwise the same on every replica.
    fn step_amaxes(&mut self) -> Result<Vec<f32>, TrainError> {
        let mut amaxes = core::mem::take(&mut self.amaxes);
        if !amaxes.is_empty() {
            self.comm.all_reduce(&mut amaxes, ReduceOp::Max)?;
        }
        Ok(amaxes)
    }

    /// Runs this replica's micro-batches of a step at loss scale `scale`
    /// and leaves their reduction over every replica in `reduced`: the
    /// gradients, then the tail (loss sum, correct count, histogram).
    fn micro_batches(&mut self, batches: &[MicroBatch], scale: f32) -> Result<(), TrainError> {
        let flat = self.flat;
        let n = flat.len();
        let edge = self.scaler.as_dyn().histogram_edge();
        let micro_scale = match self.exact {
            Some(_) => super::invariant::sample_scale(self.config, scale),
            None => scale / self.config.micro_batch as f32,
        };
        for (k, mb) in batches.iter().enumerate() {
            // A network's statistics per replica need no collective.
            let local =
                self.config.network.as_ref().map(|n| n.bn_group) == Some(BnStatistics::Replica);
            let (mut all, mut none) = (BnGroup(&mut self.comm), NoGroup);
            let group: &mut dyn GroupSum = if local { &mut none } else { &mut all };
            let out = self.model.train_micro_batch(
                &mb.inputs,
                &mb.labels,
                micro_scale,
                group,
                &mut self.grads,
            )?;
            let amaxes = self.model.quant_amaxes();
            if k == 0 {
                self.amaxes = amaxes;
            } else {
                let both = self.amaxes.iter_mut().zip(amaxes);
                both.for_each(|(m, a)| *m = max_or_nan(*m, a));
            }
            if let Some(exact) = &mut self.exact {
                exact.add(&self.model, &out)?;
                continue;
            }
            let c = &mut self.contributions[k];
            flat.flatten(&self.grads, c);
            c[n] = out.loss_sum;
            c[n + 1] = out.correct as f32;
            let bins = histogram(edge, flat, c);
            write_limbs(&[bins.lower, bins.upper], &mut c[n + 2..]);
        }
        if let Some(exact) = &mut self.exact {
            let replicas = self.config.replicas;
            let (grads, tail) = self.reduced.split_at_mut(n);
            let (loss, correct) = exact.reduce(&mut self.comm, replicas, flat, grads)?;
            // Exact in f32 below 2^24 samples.
            (tail[0], tail[1]) = (loss, correct as f32);
            let bins = histogram(edge, flat, grads);
            write_limbs(&[bins.lower, bins.upper], &mut tail[2..]);
            return Ok(());
        }
        self.reduce_locally(batches.len());
        self.comm.all_reduce(&mut self.reduced, ReduceOp::Sum)?;
        Ok(())
    }

    /// Combines this replica's micro-batch contributions into `reduced`:
    /// the deterministic tree (Sum, PostMean) or a running mean.
    fn reduce_locally(&mut self, count: usize) {
        let n = self.flat.len();
        let refs: Vec<&[f32]> = self.contributions[..count].iter().map(|c| &c[..]).collect();
        if self.config.reduction != GradReduction::RunningMean {
            tree_sum(&refs, &mut self.reduced);
            return;
        }
        let tails: Vec<&[f32]> = refs.iter().map(|c| &c[n..]).collect();
        tree_sum(&tails, &mut self.reduced[n..]);
        let precision = Precision::default();
        for (k, c) in refs.iter().enumerate() {
            let micro = u32::try_from(k).unwrap_or(u32::MAX);
            Accumulation::RunningMean.add(micro, &c[..n], &mut self.reduced[..n], &precision, 0);
        }
    }

    /// The optimizer step on this replica's shard, then the weights
    /// gathered whole again.
    fn update(&mut self, lr_scale: f32) -> Result<(), TrainError> {
        let config = self.config;
        let flat = self.flat;
        let n = flat.len();
        let grads = &self.reduced[..n];
        let mut step = self.counter.next_step().with_lr_scale(lr_scale);
        if let Some(max_norm) = config.max_grad_norm {
            let norm = GradNorm::of((0..flat.specs().len()).map(|i| &grads[flat.range(i)]));
            step = step.with_grad_scale(norm.clip_scale(max_norm));
        }
        self.counter.applied(step);
        let precision = Precision {
            weights: config.precision.weight_round(),
            state: Round::NEAREST_EVEN,
            seed: config.seed,
        };
        let shard = self.shard.clone();
        let sharded = shard.len() < n;
        let run = Update {
            groups: &self.groups,
            flat,
            step,
            precision: &precision,
            sharded,
        };
        let comm = &mut self.comm;
        match (&mut self.weights, &mut self.master) {
            (Weights::F32(w), _) => {
                run.apply(pieces(flat, shard, w, 0, grads, &mut self.state), comm)?;
            }
            (Weights::F16(w), Some(master)) => {
                let ps = pieces(
                    flat,
                    shard.clone(),
                    master,
                    shard.start,
                    grads,
                    &mut self.state,
                );
                run.apply(ps, comm)?;
                fp::f32_to_half_slice(master, &mut w[shard]);
            }
            (Weights::F16(w), None) => {
                run.apply(pieces(flat, shard, w, 0, grads, &mut self.state), comm)?;
            }
        }
        if sharded {
            match &mut self.weights {
                Weights::F32(w) => self.comm.local().all_gather(w)?,
                Weights::F16(w) => self.comm.local().all_gather(w)?,
            };
        }
        Ok(())
    }

    /// Whether every replica holds bitwise the same weights.
    pub(crate) fn replicas_agree(&mut self) -> Result<bool, CommError> {
        let fp = self.weights.fingerprint(self.flat);
        self.comm.all_equal(&[fp])
    }

    /// Whether `flag` holds on any replica of the run.
    pub(crate) fn any_replica(&mut self, flag: bool) -> Result<bool, CommError> {
        let mut any = [f32::from(u8::from(flag))];
        self.comm.all_reduce(&mut any, ReduceOp::Max)?;
        Ok(any[0] > 0.0)
    }

    /// The whole optimizer state and master weights (gathered from the
    /// shards of this instance's replicas), for a checkpoint.
    pub(crate) fn gather_state(&mut self) -> Result<GatheredState, CommError> {
        let n = self.flat.len();
        let shard = self.shard.clone();
        let sharded = shard.len() < n;
        let whole = |part: &[f32], comm: &mut ReplicaComm| {
            let mut full = vec![0.0f32; n];
            full[shard.clone()].copy_from_slice(part);
            if sharded {
                comm.local().all_gather(&mut full)?;
            }
            Ok::<_, CommError>(full)
        };
        let master = match &self.master {
            Some(m) => Some(whole(m, &mut self.comm)?),
            None => None,
        };
        let mut state = Vec::new();
        for s in &self.state {
            state.push(whole(s, &mut self.comm)?);
        }
        Ok((master, state))
    }
}

/// One optimizer step over a replica's pieces.
struct Update<'a> {
    groups: &'a Groups,
    flat: &'a FlatParams,
    step: Step,
    precision: &'a Precision,
    sharded: bool,
}

impl Update<'_> {
    /// Phase 1 over every piece, the partials merged per tensor (and summed
    /// exactly over the instance's replicas when the state is sharded),
    /// then phase 2.
    fn apply<W: tessera_core::fp::Element>(
        &self,
        mut pieces: Vec<Piece<'_, W>>,
        comm: &mut ReplicaComm,
    ) -> Result<(), TrainError> {
        let mut totals = vec![Partials::default(); self.flat.specs().len()];
        if self.groups.needs_statistics() {
            for p in &mut pieces {
                let partials = self.groups.partials(self.flat, self.step, p)?;
                totals[p.id].merge(&partials);
            }
            if self.sharded {
                sum_exactly(&mut totals, comm)?;
            }
        }
        for p in &mut pieces {
            self.groups
                .apply(self.flat, self.step, &totals[p.id], self.precision, p)?;
        }
        Ok(())
    }
}

/// Sums every tensor's partials over the instance's replicas, exactly:
/// integer sums of the limbs, so any order gives the same bits.
fn sum_exactly(totals: &mut [Partials], comm: &mut ReplicaComm) -> Result<(), CommError> {
    let words: Vec<u64> = totals
        .iter()
        .flat_map(|t| t.limbs().into_iter().flatten().map(|l| l as u64))
        .collect();
    let mut limbs = to_limbs(&words);
    comm.local()
        .all_reduce(&mut limbs, tessera_collectives::Reducer::new(ReduceOp::Sum))?;
    let summed = from_limb_sums(&limbs);
    let per = summed.len() / totals.len().max(1);
    for (t, w) in totals.iter_mut().zip(summed.chunks_exact(per)) {
        let mut limbs = [[0i64; ExactSum::LIMBS]; 3];
        for (dst, &src) in limbs.iter_mut().flatten().zip(w) {
            *dst = src as i64;
        }
        *t = Partials::from_limbs(limbs);
    }
    Ok(())
}
