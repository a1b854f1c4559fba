//! The exponent phase of an order-free run over two ranks, folded into
//! its data messages.

use std::ops::Range;

use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, ReduceOp, grid};

#[cfg(doc)]
use super::Runner;

/// Whether an [`Order::Free`](tessera_core::collective::Order::Free) run
/// of `s` folds the exponent phase into its data messages instead of a
/// Max all-reduce of its own: over two ranks the ring (and
/// halving-doubling, the same two steps there) reduces each
/// position once, from both contributions ([`fused_grid_step`](super::fused_grid_step), in place:
/// [`Runner::direct`]), so a message that carries its sender's exponents
/// of the blocks it touches ([`grid::GRID_BLOCK`] positions, one byte
/// each) gives the receiver the maximum over both ranks: exactly the
/// all-reduced exponents, one exchange fewer per call. (Max is
/// idempotent, so a block the two fragments share gets the same maximum
/// on both ranks.) Decided by the schedule alone, as every rank must;
/// an odd length (a step of the last piece only receives) keeps the
/// exponent phase.
pub(crate) fn folds_exponents(s: &CollectiveSchedule, op: ReduceOp) -> bool {
    s.on_grid(op)
        && s.size() == 2
        && s.len() >= 2
        // Equal fragments: every piece of a step both sends and receives.
        && s.len().is_multiple_of(2)
        && matches!(s.algorithm(), Algorithm::Ring | Algorithm::HalvingDoubling)
        && matches!(
            s.collective(),
            Collective::AllReduce | Collective::ReduceScatter
        )
}

/// The blocks of grid exponents that positions `run` (not empty) touch.
pub(super) fn blocks_of(run: &Range<usize>) -> Range<usize> {
    run.start / grid::GRID_BLOCK..(run.end - 1) / grid::GRID_BLOCK + 1
}

/// A block exponent on the wire: `g + 149` in a byte (`g` is in
/// `-149..=96`, [`grid::block_exponent`]).
pub(super) fn exponent_byte(g: f32) -> u8 {
    (g as i32 - grid::MIN_GRID_EXPONENT).clamp(0, 255) as u8
}

/// Bytes of `blocks` exponents on the wire: padded to 8, so that the
/// body after them stays aligned for its values (the padding, 0, is the
/// least exponent: no block's maximum).
pub(super) const fn exponent_bytes(blocks: usize) -> usize {
    blocks.next_multiple_of(8)
}

pub(super) fn byte_exponent(b: u8) -> f32 {
    (i32::from(b) + grid::MIN_GRID_EXPONENT) as f32
}
