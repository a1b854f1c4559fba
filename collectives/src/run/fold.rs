//! The exponent phase of an order-free run, folded into its data
//! messages ([`folds_exponents`]).
//!
//! Each position is reduced once, by one rank, from every rank's own
//! contribution, which that rank then holds all of: the exponent of a
//! block wholly in the run it reduces is taken from the contributions
//! themselves, pass by pass while they are in cache
//! (`combine::grid_sum_chunk`), so no separate pass reads the buffer for
//! its exponents. Only a block that a run holds in part (a fragment or a
//! piece starts or ends inside it) needs values the receiver does not
//! hold: each rank takes its own exponents of those blocks before the
//! first exchange ([`cut_exponents`]), and every reduction message carries its
//! sender's exponents of the first and last blocks of the run it moves
//! ([`EXPONENT_BYTES`]); the receiver takes the maximum with its own.

use std::ops::Range;

use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, Op, ReduceOp, grid};
use tessera_core::fp::Element;

#[cfg(doc)]
use super::Runner;

/// Whether an [`Order::Free`](tessera_core::collective::Order::Free) run
/// of `s` folds the exponent phase into its data messages instead of a
/// Max all-reduce of its own (see the module's docs): each position is
/// then reduced once, by one rank, from every rank's own contribution, so
/// that rank can take the maximum over all ranks itself: exactly the
/// all-reduced exponents, one call and one pass over the buffer fewer.
/// (Max is idempotent, so a block that two fragments share gets the same
/// maximum on both ranks.)
///
/// - Over two ranks, the ring (and halving-doubling, the same two steps
///   there) reduces each position from both contributions
///   ([`fused_grid_step`](super::fused_grid_step), in place:
///   [`Runner::direct`] and [`Runner::pair`]); an odd length (a step of
///   the last piece only receives) keeps the exponent phase.
/// - Over more than two ranks, the ring's direct reduce-scatter
///   (`scatter.rs`, [`Runner::gather`]) gives each rank every
///   contribution to its fragment in one step; a length that the ranks
///   do not divide (fragments of unequal pieces) keeps the exponent phase.
///
/// Decided by the schedule alone, as every rank must.
pub(crate) fn folds_exponents(s: &CollectiveSchedule, op: ReduceOp) -> bool {
    let (p, n) = (s.size(), s.len());
    // Equal fragments: every piece of the reduce-scatter both sends and
    // receives on every rank.
    let equal = n >= p && n.is_multiple_of(p);
    let pair = p == 2 && matches!(s.algorithm(), Algorithm::Ring | Algorithm::HalvingDoubling);
    let direct = p > 2 && s.algorithm() == Algorithm::Ring;
    s.on_grid(op)
        && equal
        && (pair || direct)
        && matches!(
            s.collective(),
            Collective::AllReduce | Collective::ReduceScatter
        )
}

/// Bytes of exponents after a folded message's header: its sender's
/// exponents of the first and last blocks of the run it moves, one byte
/// each ([`exponent_byte`]), padded to 8 so that the body after them stays
/// aligned for its values.
pub(super) const EXPONENT_BYTES: usize = 8;

/// The blocks that the run of positions `run` (below `n`) holds only in
/// part, first and last: a run's exponents of these come from messages.
pub(super) fn partial_edges(run: &Range<usize>, n: usize) -> [Option<usize>; 2] {
    let b = grid::GRID_BLOCK;
    let first = !run.start.is_multiple_of(b) && !run.is_empty();
    let last = !run.end.is_multiple_of(b) && run.end < n && !run.is_empty();
    [
        first.then_some(run.start / b),
        last.then_some((run.end - 1) / b),
    ]
}

/// This rank's exponents of the blocks that some run of its exchanges
/// (`plan`) holds only in part, over the whole block of `buf` before any
/// exchange; the other blocks' entries are the least exponent, to be
/// filled from the contributions as they are reduced.
pub(super) fn cut_exponents<T: Element>(plan: &[(usize, Vec<Op>)], buf: &[T]) -> Vec<f32> {
    let n = buf.len();
    let mut exps = vec![grid::MIN_GRID_EXPONENT as f32; grid::blocks(n)];
    let spans = plan
        .iter()
        .flat_map(|(_, ops)| ops)
        .filter_map(|o| match *o {
            Op::Send { span, .. } | Op::Recv { span, .. } => Some(span),
            Op::Finalize { .. } => None,
        });
    for run in spans.flat_map(|span| span.runs_below(n)) {
        for b in partial_edges(&run, n).into_iter().flatten() {
            let block = b * grid::GRID_BLOCK..((b + 1) * grid::GRID_BLOCK).min(n);
            exps[b] = grid::block_exponent(&buf[block]);
        }
    }
    exps
}

/// A folded message's header: `header`, then this rank's exponents
/// (`folded`) of the first and last blocks of the run `send` it moves.
pub(super) fn folded_head(header: &[u8], folded: &[f32], send: &Range<usize>) -> Vec<u8> {
    let mut head = header.to_vec();
    if !send.is_empty() {
        let blocks = blocks_of(send);
        head.push(exponent_byte(folded[blocks.start]));
        head.push(exponent_byte(folded[blocks.end - 1]));
    }
    head.resize(header.len() + EXPONENT_BYTES, 0);
    head
}

/// Takes the peer's exponents `bytes` (a [`folded_head`]'s) of the blocks
/// that the run `recv` (below `n`) holds only in part into `folded`: each
/// the maximum of both ranks'. Returns those blocks, whose exponents are
/// then complete.
pub(super) fn take_exponents(
    folded: &mut [f32],
    bytes: &[u8],
    recv: &Range<usize>,
    n: usize,
) -> [Option<usize>; 2] {
    let edges = partial_edges(recv, n);
    for (b, &byte) in edges.iter().zip(bytes) {
        if let Some(b) = *b {
            folded[b] = folded[b].max(byte_exponent(byte));
        }
    }
    edges
}

/// The blocks of grid exponents that positions `run` (not empty) touch.
fn blocks_of(run: &Range<usize>) -> Range<usize> {
    run.start / grid::GRID_BLOCK..(run.end - 1) / grid::GRID_BLOCK + 1
}

/// A block exponent on the wire: `g + 149` in a byte (`g` is in
/// `-149..=96`, [`grid::block_exponent`]).
fn exponent_byte(g: f32) -> u8 {
    (g as i32 - grid::MIN_GRID_EXPONENT).clamp(0, 255) as u8
}

fn byte_exponent(b: u8) -> f32 {
    (i32::from(b) + grid::MIN_GRID_EXPONENT) as f32
}
