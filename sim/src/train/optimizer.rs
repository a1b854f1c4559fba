//! One optimizer step over the pieces of the parameters a replica owns:
//! the core's fused kernels, with biases and normalisation parameters in
//! their own group, and LAMB's and LARS's per-tensor statistics in two
//! phases so that shards of a tensor on different replicas give bitwise
//! the update of the whole tensor.

use core::ops::Range;

use tessera_core::fp::Element;
use tessera_core::optim::{
    Optimizer, OptimizerConfig, Param, Partials, Precision, Step, StepError,
};

use super::TrainError;
use super::params::FlatParams;

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

/// Runs `$e` with `$p` bound to the piece as a core [`Param`] with as
/// many state tensors as it holds (1 to 3; the optimizer checks the count).
macro_rules! with_param {
    ($piece:expr, $p:ident => $e:expr) => {{
        let piece = $piece;
        let (id, offset) = (piece.id as u64, piece.offset as u64);
        let result = match &mut piece.state[..] {
            [a] => {
                let $p = &mut Param::new(id, &mut *piece.weights, piece.grads, [&mut **a]).at_offset(offset);
                $e
            }
            [a, b] => {
                let $p = &mut Param::new(id, &mut *piece.weights, piece.grads, [&mut **a, &mut **b])
                    .at_offset(offset);
                $e
            }
            [a, b, c] => {
                let state = [&mut **a, &mut **b, &mut **c];
                let $p = &mut Param::new(id, &mut *piece.weights, piece.grads, state).at_offset(offset);
                $e
            }
            other => Err(StepError::StateTensors { id, expected: 0, got: other.len() }),
        };
        result.map_err(|e| TrainError::Invalid(format!("optimizer: {e}")))
    }};
}

/// The run's two parameter groups, validated once: the weights with
/// `config`, and (with `exclude`) biases and normalisation parameters
/// with `config.excluded()`. The learning rate comes with each step.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Groups {
    normal: Optimizer,
    excluded: Optimizer,
    exclude: bool,
}

impl Groups {
    pub(crate) fn new(config: OptimizerConfig, exclude: bool) -> Result<Self, TrainError> {
        let build = |c| Optimizer::new(c).map_err(TrainError::Optimizer);
        Ok(Self {
            normal: build(config)?,
            excluded: build(config.excluded())?,
            exclude,
        })
    }

    fn of(&self, flat: &FlatParams, id: usize) -> &Optimizer {
        if self.exclude && flat.is_bias_or_norm(id) {
            &self.excluded
        } else {
            &self.normal
        }
    }

    /// Whether the update needs per-tensor statistics (LAMB, LARS).
    pub(crate) const fn needs_statistics(&self) -> bool {
        self.normal.needs_statistics()
    }

    /// Phase 1 of a piece: its partial sums (zero for SGD and AdamW).
    pub(crate) fn partials<W: Element>(
        &self,
        flat: &FlatParams,
        step: Step,
        piece: &mut Piece<'_, W>,
    ) -> Result<Partials, TrainError> {
        let optimizer = self.of(flat, piece.id);
        with_param!(piece, p => optimizer.partials(step, p))
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
    ) -> Result<(), TrainError> {
        let optimizer = self.of(flat, piece.id);
        with_param!(piece, p => optimizer.apply(step, totals, precision, p))
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
