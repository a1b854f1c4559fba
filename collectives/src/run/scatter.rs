//! The order-free ring's direct reduce-scatter: over more than two ranks,
//! an [`Order::Free`](tessera_core::collective::Order::Free) Sum or Mean
//! on the ring replaces its `p - 1` reduce-scatter steps by one exchange
//! in which every rank sends each peer its own contribution to the peer's
//! fragment and sums the `p` contributions to its own on the grid.
//!
//! The ring's steps would carry partial grid sums onward, 8 bytes per
//! element (f64 integers up to `2^53`, no narrower form is exact for every
//! input); here only contributions travel, in the buffer's format: the same
//! bytes as the plain ring's reduce-scatter, and each rank's bodies are
//! lent in place on the thread transport. The grid sums are exact, so the
//! result is bitwise the schedule's (and every algorithm's).

use std::ops::Range;
use std::time::Instant;

use tessera_core::collective::{
    Algorithm, Collective, CollectiveSchedule, Kind, Op, Ranks, ReduceOp, Span,
};
use tessera_core::fp::{Element, Rounding};

use super::combine::{BlockExponents, grid_finish, grid_start, grid_sum_chunk, pair_chunks};
use super::fold::{EXPONENT_BYTES, folded_head, take_exponents};
use super::wire::{HEADER, Message, split_exponents, values};
use super::{Body, Runner, State};
use crate::comm::{Communicator, Outgoing};
use crate::error::{CommError, Mismatch};

#[cfg(doc)]
use super::folds_exponents;

/// Rank `r`'s steps of `s`, whole: the schedule's, except that the
/// order-free ring over more than two ranks (`grid`: it sums on the grid)
/// reduce-scatters in one step, numbered 0, whose messages say so (each
/// covers one contribution); the all-gather keeps its steps.
pub(super) fn plan(s: &CollectiveSchedule, r: usize, grid: bool) -> Vec<(usize, Vec<Op>)> {
    let p = s.size();
    let direct = grid
        && p > 2
        && s.algorithm() == Algorithm::Ring
        && matches!(
            s.collective(),
            Collective::AllReduce | Collective::ReduceScatter
        );
    if !direct {
        return (0..s.steps()).map(|t| (t, s.ops(r, t).to_vec())).collect();
    }
    let f = s.fragment_len();
    let fragment = |j: usize| Span::new(j * f, f);
    let own = |from: usize, onto: Ranks| Kind::Reduce {
        covers: Ranks::new(from, 1),
        onto,
        frontier: false,
        grid: false,
    };
    let mut ops = Vec::with_capacity(2 * p - 1);
    // To rank r - k, which takes it k-th (after r - k + 1, ..., r - 1).
    for k in 1..p {
        let to = (r + p - k) % p;
        let kind = own(r, Ranks::new(to, k));
        ops.push(Op::Send {
            to,
            span: fragment(to),
            kind,
        });
    }
    // From r + 1, r + 2, ...: each onto the contributions taken so far.
    for k in 1..p {
        let from = (r + k) % p;
        let kind = own(from, Ranks::new(r, k));
        ops.push(Op::Recv {
            from,
            span: fragment(r),
            kind,
        });
    }
    ops.push(Op::Finalize { span: fragment(r) });
    let mut steps = vec![(0, ops)];
    steps.extend((p - 1..s.steps()).map(|t| (t, s.ops(r, t).to_vec())));
    steps
}

/// The run of a step of the direct reduce-scatter that may lend its bodies
/// ([`Runner::gather`]): every send a run of the buffer (`bodies`), every
/// receive a single contribution for one run of the buffer, the same for
/// all and disjoint from the sends, and at least two of them.
pub(super) fn gather_run(ops: &[Op], bodies: &[Body], n: usize) -> Option<Range<usize>> {
    let mut spans = ops.iter().filter_map(|o| match *o {
        Op::Recv {
            span,
            kind: Kind::Reduce { covers, .. },
            ..
        } if covers.len == 1 => Some(Some(span)),
        Op::Recv { .. } => Some(None),
        _ => None,
    });
    let first = spans.next()??;
    let mut count = 1;
    for span in spans {
        if span? != first {
            return None;
        }
        count += 1;
    }
    let mut runs = first.runs_below(n);
    let (Some(run), None) = (runs.next(), runs.next()) else {
        return None;
    };
    let apart = |b: &Body| matches!(b, Body::Buf(s) if s.end <= run.start || run.end <= s.start);
    (count >= 2 && bodies.iter().all(apart)).then_some(run)
}

/// The folded direct reduce-scatter's sum of the run `start..` that this
/// rank's `into` holds: with the contributions `held` aside (one run's
/// length each) and the `last`, pass by pass in cache, each pass's block
/// exponents taken from all of them (`grid_sum_chunk`).
fn sum_held<T: Element>(
    into: &mut [T],
    (held, last): (&[T], &[T]),
    (mut exps, start, sums): (BlockExponents<'_>, usize, &mut Vec<f32>),
    finish: (ReduceOp, usize, Rounding),
) {
    let len = into.len();
    let mut others: Vec<&[T]> = Vec::with_capacity(held.len() / len.max(1) + 1);
    for pass in pair_chunks(start, len) {
        others.clear();
        others.extend(held.chunks(len).map(|h| &h[pass.clone()]));
        others.push(&last[pass.clone()]);
        let sums = (&mut exps, start + pass.start, &mut *sums);
        grid_sum_chunk(&mut into[pass], &others, sums, finish);
    }
}

/// The receives of a step: (from, span, kind), in order.
pub(super) fn receives(ops: &[Op]) -> Vec<(usize, Span, Kind)> {
    let each = |o: &Op| match *o {
        Op::Recv { from, span, kind } => Some((from, span, kind)),
        _ => None,
    };
    ops.iter().filter_map(each).collect()
}

/// Room for `count` contributions of `len` held aside by a folded run, in
/// the grid sums' scratch (which a folded run does not otherwise use).
fn held_aside<T: Element>(grid: &mut Vec<f64>, count: usize, len: usize) -> &mut [T] {
    let words = (count * len * size_of::<T>()).div_ceil(size_of::<f64>());
    if grid.len() < words {
        grid.resize(words, 0.0);
    }
    let held: &mut [T] = bytemuck::cast_slice_mut(&mut grid[..words]);
    &mut held[..count * len]
}

impl<C: Communicator + ?Sized> Runner<'_, C> {
    /// A step of the direct reduce-scatter ([`gather_run`]) through
    /// [`Communicator::exchange_apply`]: this rank's contributions lent to
    /// its peers while it sums theirs for `run`, finishing `run` in the
    /// buffer if the step finalizes it. Returns the span it finalized.
    ///
    /// With the exponent phase folded ([`folds_exponents`]) the first
    /// contributions are held aside and the last brings the sum: pass by
    /// pass, the blocks' exponents taken from all of them, the sum rounded
    /// once (`grid_sum_chunk`); else they are added to grid sums in turn,
    /// the first onto this rank's own contribution.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gather<T: Element>(
        &self,
        step: usize,
        ops: &[Op],
        bodies: &[Body],
        sends: &[usize],
        run: Range<usize>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<Option<Span>, CommError> {
        let m = self.expect_receives(ops, st.incoming);
        let recvs = receives(ops);
        let finalize = ops.contains(&Op::Finalize { span: recvs[0].1 });
        assert!(finalize || !self.folding, "a folded run finishes");
        let runs: Vec<&Range<usize>> = bodies
            .iter()
            .map(|body| match body {
                Body::Buf(b) => b,
                _ => unreachable!("gather_run checked every body"),
            })
            .collect();
        let head = |(b, header): (&&Range<usize>, &[u8; HEADER])| match self.folding {
            true => folded_head(header, &st.folded, b),
            false => header.to_vec(),
        };
        let heads: Vec<Vec<u8>> = runs.iter().zip(st.headers.iter()).map(head).collect();
        let (low, rest) = buf.split_at_mut(run.start);
        let (into, high) = rest.split_at_mut(run.len());
        let out: Vec<Outgoing<'_>> = runs
            .iter()
            .zip(sends)
            .zip(&heads)
            .map(|((b, &to), header)| {
                let body: &[T] = if b.end <= run.start {
                    &low[(*b).clone()]
                } else {
                    &high[b.start - run.end..b.end - run.end]
                };
                Outgoing {
                    to,
                    tag: self.tag,
                    header,
                    body: bytemuck::cast_slice(body),
                }
            })
            .collect();
        st.traffic.messages += out.len();
        st.traffic.bytes += out.iter().map(Outgoing::len).sum::<usize>();
        let len = run.len();
        let (acc, held): (&mut [f64], &mut [T]) = if self.folding {
            (&mut [], held_aside(st.grid, m - 1, len))
        } else {
            (&mut st.grid[run.clone()], &mut [])
        };
        let (tmp_t, tmp_f32, folded) = (&mut st.tmp_t, &mut st.tmp_f32, &mut st.folded[..]);
        let at = (self.exponents, run.start);
        let finish = (self.op, self.s.size(), rounding);
        let extra = if self.folding { EXPONENT_BYTES } else { 0 };
        let left = self.deadline.saturating_duration_since(Instant::now());
        let mut apply = |k: usize, head: &[u8], tail: &[u8]| {
            let (from, span, kind) = recvs[k];
            let peer = self.comm.world_rank(from);
            let (header, exps, body) =
                split_exponents(head, tail, extra).ok_or(self.mismatch(peer, Mismatch::Format))?;
            let got = self.header(peer, header, body.len())?;
            if !got.is(&Message::new(step, span, kind, 0)) {
                return Err(self.mismatch(peer, Mismatch::Sequence));
            }
            self.body_length(peer, self.expected_bytes::<T>(kind, len), body.len())?;
            let vals = values::<T>(body, tmp_t);
            let Kind::Reduce { onto, .. } = kind else {
                unreachable!("gather_run checked every receive")
            };
            if self.folding {
                let edges = take_exponents(folded, exps, &run, self.n);
                if k + 1 < m {
                    held[k * len..(k + 1) * len].copy_from_slice(vals);
                    return Ok(());
                }
                let exps = BlockExponents::Folded(&mut *folded, edges);
                sum_held(into, (held, vals), (exps, run.start, tmp_f32), finish);
            } else if onto.len == 1 {
                grid_start(acc, Some(&*into), vals, at);
            } else if k + 1 == m && finalize {
                grid_finish(into, acc, vals, at, finish, tmp_f32);
            } else {
                grid_start(acc, None, vals, at);
            }
            Ok(())
        };
        self.comm
            .exchange_apply(&out, &mut st.incoming[..m], left, &mut apply)?;
        Ok(finalize.then_some(recvs[0].1))
    }
}
