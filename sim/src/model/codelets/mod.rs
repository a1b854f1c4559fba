//! The model's vertices, one file per layer that runs them: the
//! activation's ([`activation`]), the loss's ([`loss`]) and batch norm's
//! ([`batch_norm`]). Each works on one block of a layer's activations
//! (`rows x cols`, row-major) held by its tile; per-column parameters
//! (bias, gamma, beta) and statistics come in staged copies of the
//! block's columns.

mod activation;
mod batch_norm;
mod common;
mod loss;

pub(crate) use activation::{ActGrad, BiasAct};
#[cfg(test)]
pub(crate) use batch_norm::tree_sum;
pub(crate) use batch_norm::{
    BnApply, BnGrad, BnGradSums, BnSquares, BnStats, ChunkTree, GroupLink, GroupSumVertex,
    update_running,
};
pub(crate) use common::round;
pub(crate) use loss::CrossEntropy;
