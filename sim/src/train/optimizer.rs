//! One optimizer step over the pieces of the parameters a replica owns:
//! the core's fused kernels, with biases and normalisation parameters in
//! their own group, and LAMB's and LARS's per-tensor statistics in two
//! phases so that shards of a tensor on different replicas give bitwise
//! the update of the whole tensor.

use core::ops::Range;

use tessera_core::fp::Element;
use tessera_core::optim::{AdamW, Lamb, Lars, Param, Partials, Precision, Sgd, Step};

use super::TrainError;
use super::config::OptimizerConfig;
use super::params::FlatParams;

/// A validated optimizer of one group.
#[derive(Clone, Copy, Debug)]
enum Built {
    Sgd(Sgd),
    AdamW(AdamW),
    Lamb(Lamb),
    Lars(Lars),
}

impl Built {
    fn new(config: OptimizerConfig) -> Result<Self, TrainError> {
        let built = match config {
            OptimizerConfig::Sgd(c) => Sgd::new(c).map(Self::Sgd),
            OptimizerConfig::AdamW(c) => AdamW::new(c).map(Self::AdamW),
            OptimizerConfig::Lamb(c) => Lamb::new(c).map(Self::Lamb),
            OptimizerConfig::Lars(c) => Lars::new(c).map(Self::Lars),
        };
        built.map_err(TrainError::Optimizer)
    }
}

/// What a piece of one parameter is made of.
pub(crate) struct Piece<'a, W> {
    /// The parameter's index (it addresses the stochastic-rounding bits).
    pub(crate) id: usize,
    /// The piece's offset within the parameter.
    pub(crate) offset: usize,
    /// The weights the optimizer updates.
    pub(crate) weights: &'a mut [W],
    /// The (unscaled, reduced) gradients.
    pub(crate) grads: &'a [f32],
    /// The state tensors' pieces.
    pub(crate) state: Vec<&'a mut [f32]>,
}

impl<W: Element> Piece<'_, W> {
    fn param<const N: usize>(&mut self) -> Param<'_, W, f32, f32, N> {
        let mut state = self.state.iter_mut();
        let state = core::array::from_fn(|_| &mut **state.next().expect("state tensors"));
        Param::new(self.id as u64, self.weights, self.grads, state).at_offset(self.offset as u64)
    }
}

/// The optimizers of one step (the learning rate may change per step).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StepOptimizer {
    normal: Built,
    excluded: Built,
    exclude: bool,
}

impl StepOptimizer {
    /// `config` at learning rate `lr`; with `exclude`, biases and
    /// normalisation parameters get `config.excluded()`.
    pub(crate) fn new(config: OptimizerConfig, lr: f32, exclude: bool) -> Result<Self, TrainError> {
        let config = config.with_lr(lr);
        Ok(Self {
            normal: Built::new(config)?,
            excluded: Built::new(config.excluded())?,
            exclude,
        })
    }

    fn of(&self, flat: &FlatParams, id: usize) -> Built {
        if self.exclude && flat.is_bias_or_norm(id) {
            self.excluded
        } else {
            self.normal
        }
    }

    /// Whether the update needs per-tensor statistics (LAMB, LARS).
    pub(crate) const fn needs_statistics(&self) -> bool {
        matches!(self.normal, Built::Lamb(_) | Built::Lars(_))
    }

    /// Phase 1 of a piece: its partial sums (zero for SGD and AdamW).
    pub(crate) fn partials<W: Element>(
        &self,
        flat: &FlatParams,
        step: Step,
        piece: &mut Piece<'_, W>,
    ) -> Partials {
        match self.of(flat, piece.id) {
            Built::Lamb(o) => o.partials(step, &piece.param::<2>()),
            Built::Lars(o) => o.partials(step, &piece.param::<1>()),
            Built::Sgd(_) | Built::AdamW(_) => Partials::default(),
        }
    }

    /// Phase 2 (or the whole step for SGD and AdamW): updates the piece,
    /// `totals` being the whole tensor's merged partials.
    pub(crate) fn apply<W: Element>(
        &self,
        flat: &FlatParams,
        step: Step,
        totals: &Partials,
        precision: &Precision,
        piece: &mut Piece<'_, W>,
    ) {
        match self.of(flat, piece.id) {
            Built::Sgd(o) => o.step(step, precision, &mut piece.param::<1>()),
            Built::AdamW(o) => o.step(step, precision, &mut piece.param::<2>()),
            Built::Lamb(o) => o.apply(step, totals, precision, &mut piece.param::<2>()),
            Built::Lars(o) => o.apply(step, totals, precision, &mut piece.param::<1>()),
        }
    }
}

/// The pieces of `shard`: weights from `weights` (which holds the buffer
/// from flat position `base` on), gradients from the flat `grads`, state
/// from `state` (each holding `shard`).
pub(crate) fn pieces<'a, W>(
    flat: &FlatParams,
    shard: Range<usize>,
    weights: &'a mut [W],
    base: usize,
    grads: &'a [f32],
    state: &'a mut [Vec<f32>],
) -> Vec<Piece<'a, W>> {
    let mut weights = Some(weights);
    let mut state: Vec<Option<&'a mut [f32]>> =
        state.iter_mut().map(|s| Some(&mut s[..])).collect();
    let mut w_at = base;
    let mut s_at = shard.start;
    let mut out = Vec::new();
    for (id, r) in flat.pieces(shard) {
        // Split every buffer at the piece's start and end.
        let w = weights.take().expect("weights");
        let (_, w) = w.split_at_mut(r.start - w_at);
        let (piece_w, rest) = w.split_at_mut(r.len());
        weights = Some(rest);
        w_at = r.end;
        let mut piece_state = Vec::with_capacity(state.len());
        for s in &mut state {
            let whole = s.take().expect("state");
            let (_, t) = whole.split_at_mut(r.start - s_at);
            let (p, rest) = t.split_at_mut(r.len());
            piece_state.push(p);
            *s = Some(rest);
        }
        s_at = r.end;
        out.push(Piece {
            id,
            offset: r.start - flat.range(id).start,
            weights: piece_w,
            grads: &grads[r.clone()],
            state: piece_state,
        });
    }
    out
}
