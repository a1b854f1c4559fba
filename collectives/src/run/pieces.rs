//! Message pieces: how this rank's part of a schedule becomes a sequence
//! of exchanges ([`exchanges`]), large messages cut into pieces that stay
//! in cache, and which steps may lend a body in place ([`direct_runs`]).

use std::ops::Range;

use tessera_core::collective::{Algorithm, CollectiveSchedule, Op, Span};

#[cfg(doc)]
use crate::comm::Communicator;

/// The most elements a message of the thread transport carries
/// ([`Communicator::piece_elements`]): a step's larger messages travel as
/// pieces of this many (2 MiB of f32), one exchange per piece, so that a
/// ring's fragment is still in cache (the shared L3) between its reduction
/// and its all-gather. On the 2-core machine of the README's figures
/// (1 MiB L2 per core, 32 MiB L3), with bodies lent in place, the 64 MiB
/// ring all-reduce of 2 thread ranks took 7.7 to 8.3 ms with these pieces,
/// 9.2 to 11 ms with 128Ki and 256Ki, 10 to 12 ms whole. (With bodies
/// copied, 128Ki pieces were the best: 2x faster than whole.) Over MPI,
/// pieces made large all-reduces about twice as slow (its transports
/// pipeline large messages themselves), so MPI sends them whole.
pub(crate) const PIECE_ELEMENTS: usize = 512 << 10;

/// The contiguous pieces of at most `piece` payload elements
/// that `span` travels as (the whole span if it is strided or no larger).
fn split(span: Span, n: usize, piece: usize) -> Vec<Span> {
    let payload = span.elements_below(n);
    if span.count != 1 || payload <= piece {
        return vec![span];
    }
    (span.start..span.start + payload)
        .step_by(piece)
        .map(|at| Span::new(at, piece.min(span.start + payload - at)))
        .collect()
}

/// The span a send or receive moves.
fn moved(o: &Op) -> Option<Span> {
    match *o {
        Op::Send { span, .. } | Op::Recv { span, .. } => Some(span),
        Op::Finalize { .. } => None,
    }
}

/// `ops` with piece `k` of every op in element `k`, finalizations not
/// placed (see [`exchanges`]).
fn split_moves(ops: &[Op], n: usize, piece: usize) -> Vec<Vec<Op>> {
    let mut out: Vec<Vec<Op>> = Vec::new();
    for o in ops {
        let parts: Vec<Op> = match *o {
            Op::Send { to, span, kind } => split(span, n, piece)
                .into_iter()
                .map(|span| Op::Send { to, span, kind })
                .collect(),
            Op::Recv { from, span, kind } => split(span, n, piece)
                .into_iter()
                .map(|span| Op::Recv { from, span, kind })
                .collect(),
            Op::Finalize { .. } => Vec::new(),
        };
        for (k, part) in parts.into_iter().enumerate() {
            if out.len() == k {
                out.push(Vec::new());
            }
            out[k].push(part);
        }
    }
    out
}

/// Whether some send of `ops` reads a position one of its receives writes.
fn sends_meet_receives(ops: &[Op], n: usize) -> bool {
    ops.iter().any(|a| {
        matches!(a, Op::Send { .. })
            && ops.iter().any(|b| {
                matches!(b, Op::Recv { .. })
                    && overlaps(moved(a).expect("a send"), moved(b).expect("a receive"), n)
            })
    })
}

/// This rank's steps of `s`, `whole` (`scatter::plan`: `(step, ops)`, the
/// step named in the messages' headers), as a sequence of exchanges.
/// Messages of more than `piece`
/// payload elements (contiguous spans) travel as
/// contiguous pieces of at most that many, one exchange per piece, so that
/// a piece is still in cache when the receiver reduces it. Sender and
/// receiver name the same span, so they split it alike; every choice below
/// depends on the schedule alone, not on the rank, so all ranks exchange
/// the same sequence.
///
/// The arithmetic is the schedule's, operand for operand: every position
/// sees the same operations in the same order, and every send reads the
/// values it would have read whole.
///
/// - Rings ([`Algorithm::Ring`], [`Algorithm::BidirectionalRing`]) run
///   piece by piece through all steps: piece `k` of every step, then piece
///   `k + 1`. A position belongs to one fragment (or half-fragment) span,
///   at the same offset in every step, so it is in piece `k` at every step
///   that touches it, and its operations keep their order; within a step
///   a ring sends one fragment and receives another. A fragment then stays
///   in cache from its reduction to its all-gather (about as fast as the
///   caller slicing the buffer, with the ring's own summation order).
/// - Other schedules split step by step, unless some rank's step sends a
///   position it receives (its send must read it before the receive);
///   a finalized piece goes after the last exchange of its step that
///   moves any of its positions.
/// - Steps that carry frontiers stay whole (their partial sums are kept
///   per span).
pub(super) fn exchanges(
    s: &CollectiveSchedule,
    whole: Vec<(usize, Vec<Op>)>,
    n: usize,
    piece: usize,
    frontiers: bool,
) -> Vec<(usize, Vec<Op>)> {
    let splits = |ops: &[Op]| {
        ops.iter()
            .filter_map(moved)
            .any(|m| split(m, n, piece).len() > 1)
    };
    if frontiers || !whole.iter().any(|(_, ops)| splits(ops)) {
        return whole;
    }
    if matches!(
        s.algorithm(),
        Algorithm::Ring | Algorithm::BidirectionalRing
    ) {
        let mut per_step: Vec<(usize, Vec<Vec<Op>>)> = Vec::with_capacity(whole.len());
        for (step, ops) in whole {
            let mut parts = split_moves(&ops, n, piece);
            for o in ops.iter() {
                let Op::Finalize { span } = *o else {
                    continue;
                };
                for (k, part) in split(span, n, piece).into_iter().enumerate() {
                    if parts.len() <= k {
                        parts.resize_with(k + 1, Vec::new);
                    }
                    parts[k].push(Op::Finalize { span: part });
                }
            }
            per_step.push((step, parts));
        }
        let most = per_step.iter().map(|(_, p)| p.len()).max().unwrap_or(0);
        let mut out = Vec::new();
        for k in 0..most {
            for (step, parts) in &mut per_step {
                if let Some(ops) = parts.get_mut(k)
                    && !ops.is_empty()
                {
                    out.push((*step, std::mem::take(ops)));
                }
            }
        }
        return out;
    }
    let mut out = Vec::new();
    for (step, ops) in whole {
        if !splits(&ops) || (0..s.size()).any(|q| sends_meet_receives(&s.ops(q, step), n)) {
            out.push((step, ops));
            continue;
        }
        let mut parts = split_moves(&ops, n, piece);
        for o in ops.iter() {
            let Op::Finalize { span } = *o else {
                continue;
            };
            for part in split(span, n, piece) {
                let last = (0..parts.len())
                    .rev()
                    .find(|&k| {
                        parts[k]
                            .iter()
                            .filter_map(moved)
                            .any(|m| overlaps(m, part, n))
                    })
                    .unwrap_or(0);
                parts[last].push(Op::Finalize { span: part });
            }
        }
        out.extend(parts.into_iter().map(|ops| (step, ops)));
    }
    out
}

/// Whether two spans share a position below `n`.
fn overlaps(a: Span, b: Span, n: usize) -> bool {
    a.runs_below(n)
        .any(|x| b.runs_below(n).any(|y| x.start < y.end && y.start < x.end))
}

/// The runs of a step that may lend its body in place
/// ([`Communicator::exchange_apply`]): exactly one send, `send`, of a run
/// of the buffer itself, and one receive, into one run of the buffer disjoint
/// from it, so the two can be borrowed apart. Not for steps that carry
/// frontiers or accumulate in f32 beside a 16-bit buffer (`excluded`).
pub(super) fn direct_runs(
    ops: &[Op],
    send: Option<&Range<usize>>,
    n: usize,
    excluded: bool,
) -> Option<(Range<usize>, Range<usize>)> {
    let send = send?;
    let mut recvs = ops.iter().filter_map(|o| match *o {
        Op::Recv { span, .. } => Some(span),
        _ => None,
    });
    let (Some(span), None) = (recvs.next(), recvs.next()) else {
        return None;
    };
    let mut runs = span.runs_below(n);
    let (Some(recv), None) = (runs.next(), runs.next()) else {
        return None;
    };
    (!excluded && (send.end <= recv.start || recv.end <= send.start)).then(|| (send.clone(), recv))
}
