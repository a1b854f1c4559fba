//! Combining a received partial: one vector reduced into this rank's
//! partial with the core's [`combine`] kernels, exactly as
//! [`tessera_core::collective::execute`] does.

use std::ops::Range;

use tessera_core::collective::{Ranks, ReduceOp, Span, combine, combine_into, grid};
use tessera_core::fp::{Element, Rounding};

/// Whether a reduction message covering `covers` travels in the buffer's
/// format (else in f32).
pub(super) fn native_wire(op: ReduceOp, covers: Ranks) -> bool {
    covers.len == 1 || !op.depends_on_order()
}

/// A one-partial reduction of `vals` (the span's payload, in order) into
/// this rank's partial: in place for f32 buffers, into the accumulator for
/// 16-bit ones (from the rank's own contribution if `held_single`).
#[allow(clippy::too_many_arguments)]
pub(super) fn reduce_into<T: Element, V: Element>(
    op: ReduceOp,
    buf: &mut [T],
    acc: &mut [f32],
    use_acc: bool,
    held_single: bool,
    span: Span,
    n: usize,
    vals: &[V],
) {
    let mut k = 0;
    for run in span.runs_below(n) {
        let len = run.len();
        let src = &vals[k..k + len];
        k += len;
        if !use_acc {
            // An f32 buffer (the only four-byte element type) accumulates
            // in place, as the core executor's does.
            let dst: &mut [f32] = bytemuck::cast_slice_mut(&mut buf[run]);
            combine(op, dst, src);
        } else if held_single {
            combine_into(op, &mut acc[run.clone()], &buf[run], src);
        } else {
            combine(op, &mut acc[run], src);
        }
    }
}

/// Positions per pass of [`reduce_finish`]: a chunk is still in the L1
/// cache when it is finished.
const FINISH_CHUNK: usize = 4096;

/// [`reduce_into`] of `vals` into an f32 buffer's `into` (positions
/// `start..`), then, if `finish` is given, each value finished and stored
/// as the executor finalizes it, chunk by chunk while the chunk is in
/// cache (a second pass over the span would read it back from memory).
pub(super) fn reduce_finish<T: Element, V: Element>(
    op: ReduceOp,
    into: &mut [T],
    vals: &[V],
    start: usize,
    finish: Option<(usize, Rounding)>,
) {
    let Some((p, rounding)) = finish else {
        let len = into.len();
        return reduce_into(
            op,
            into,
            &mut [],
            false,
            false,
            Span::new(0, len),
            len,
            vals,
        );
    };
    for (k, (d, v)) in into
        .chunks_mut(FINISH_CHUNK)
        .zip(vals.chunks(FINISH_CHUNK))
        .enumerate()
    {
        let len = d.len();
        reduce_into(op, d, &mut [], false, false, Span::new(0, len), len, v);
        let at = start + k * FINISH_CHUNK;
        for (j, x) in d.iter_mut().enumerate() {
            *x = T::store(op.finish(x.load(), p), rounding, at + j);
        }
    }
}

/// What a grid message brings ([`Order::Free`](tessera_core::collective::Order::Free)):
/// the sender's own contribution in the buffer's format, or a grid sum.
#[derive(Clone, Copy)]
pub(super) enum GridValues<'a, T> {
    Own(&'a [T]),
    Sum(&'a [f64]),
}

/// A grid reduction of `vals` (the span's payload, in order) into this
/// rank's grid sums `acc`, starting from its own contribution in `buf`
/// rounded to the grid if `held_single`: exact integer sums, as
/// [`tessera_core::collective::execute`] computes them.
pub(super) fn grid_into<T: Element>(
    acc: &mut [f64],
    (buf, exps): (&[T], &[f32]),
    held_single: bool,
    span: Span,
    n: usize,
    vals: GridValues<'_, T>,
) {
    let mut k = 0;
    for run in span.runs_below(n) {
        let len = run.len();
        let d = &mut acc[run.clone()];
        if held_single {
            grid::to_grid(&buf[run.clone()], exps, run.start, d);
        }
        match vals {
            GridValues::Own(v) => grid::add_to_grid(d, &v[k..k + len], exps, run.start),
            GridValues::Sum(v) => {
                for (d, s) in d.iter_mut().zip(&v[k..k + len]) {
                    *d += *s;
                }
            }
        }
        k += len;
    }
}

/// The single contributions of a span that is finalized at once: this
/// rank's `into` and the senders' `others`, positions `start..` of the
/// buffer with the blocks' `exps`, each rounded to the grid, added exactly,
/// rounded once, finished and stored in `into` (bitwise the executor's
/// grid sum and finalization): a pair in f32 alone
/// ([`grid::pair_sum_in_place`]), more in f64 block by block
/// ([`grid::sum_in_place`]). f32 is summed in place; 16-bit values through
/// `sums`, then stored.
pub(super) fn grid_sum_finish<T: Element>(
    into: &mut [T],
    others: &[&[T]],
    (exps, start, sums): (&[f32], usize, &mut Vec<f32>),
    (op, p, rounding): (ReduceOp, usize, Rounding),
) {
    let sum = |x: &mut [f32]| match others {
        [b] => grid::pair_sum_in_place(x, b, exps, start),
        _ => grid::sum_in_place(x, others, exps, start),
    };
    if size_of::<T>() == size_of::<f32>() {
        // f32, the only four-byte element type: stored as computed.
        let x: &mut [f32] = bytemuck::cast_slice_mut(into);
        sum(x);
        if op != ReduceOp::Sum {
            for x in x {
                *x = f32::store(op.finish(*x, p), rounding, 0);
            }
        }
        return;
    }
    sums.clear();
    sums.extend(into.iter().map(|x| x.load()));
    sum(sums);
    for (k, (x, &s)) in into.iter_mut().zip(sums.iter()).enumerate() {
        *x = T::store(op.finish(s, p), rounding, start + k);
    }
}

/// Positions per pass of a reduction of single contributions
/// ([`pair_chunks`]): a pass of every contribution is in the L1 cache
/// while its exponents are taken, it is reduced and finished (and, over
/// two ranks, copied to the peer).
const PAIR_CHUNK: usize = 4096;

/// The passes over the run of positions `start..start + len`, relative to
/// `start`: cut at multiples of [`PAIR_CHUNK`] positions, so that a grid
/// block is in one pass.
pub(super) fn pair_chunks(start: usize, len: usize) -> impl Iterator<Item = Range<usize>> {
    let (mut at, end) = (start, start + len);
    std::iter::from_fn(move || {
        (at < end).then(|| {
            let stop = ((at / PAIR_CHUNK + 1) * PAIR_CHUNK).min(end);
            let pass = at - start..stop - start;
            at = stop;
            pass
        })
    })
}

/// Where a reduction of single contributions takes its blocks' exponents.
pub(super) enum BlockExponents<'a> {
    /// All-reduced before the run.
    Given(&'a [f32]),
    /// Folded ([`folds_exponents`](super::folds_exponents)): taken from
    /// all contributions pass by pass, into these, except for the blocks
    /// the run holds in part, whose exponents came with the messages.
    Folded(&'a mut [f32], [Option<usize>; 2]),
}

/// [`grid_sum_finish`] of one pass ([`pair_chunks`]) of a run, its
/// blocks' exponents taken from `exps`.
pub(super) fn grid_sum_chunk<T: Element>(
    into: &mut [T],
    others: &[&[T]],
    (exps, start, sums): (&mut BlockExponents<'_>, usize, &mut Vec<f32>),
    finish: (ReduceOp, usize, Rounding),
) {
    let exps: &[f32] = match exps {
        BlockExponents::Given(e) => e,
        BlockExponents::Folded(e, held) => {
            let kept = held.map(|b| b.map(|b| (b, e[b])));
            match others {
                [b] => grid::pair_exponents(into, b, start, e),
                _ => grid::joint_exponents(into, others, start, e),
            }
            for (b, g) in kept.into_iter().flatten() {
                e[b] = g;
            }
            e
        }
    };
    grid_sum_finish(into, others, (exps, start, sums), finish);
}

/// Positions per pass of [`grid_start`] and [`grid_finish`]: their grid
/// sums stay in the L1 cache between the passes over them.
const GRID_CHUNK: usize = 2048;

/// Adds the contribution `vals` to the grid sums `acc` of the positions
/// `start..` (blocks' exponents `exps`), after rounding `own` (this rank's
/// contribution) to the grid into them if given: exact integer sums, as
/// [`tessera_core::collective::execute`] computes them.
pub(super) fn grid_start<T: Element>(
    acc: &mut [f64],
    own: Option<&[T]>,
    vals: &[T],
    (exps, start): (&[f32], usize),
) {
    for at in (0..acc.len()).step_by(GRID_CHUNK) {
        let end = (at + GRID_CHUNK).min(acc.len());
        let d = &mut acc[at..end];
        if let Some(own) = own {
            grid::to_grid(&own[at..end], exps, start + at, d);
        }
        grid::add_to_grid(d, &vals[at..end], exps, start + at);
    }
}

/// The last contribution `vals` added to the grid sums `acc` of the
/// positions `start..`, which are then rounded once from the grid,
/// finished and stored in `into` (the executor's finalization).
pub(super) fn grid_finish<T: Element>(
    into: &mut [T],
    acc: &mut [f64],
    vals: &[T],
    (exps, start): (&[f32], usize),
    (op, p, rounding): (ReduceOp, usize, Rounding),
    sums: &mut Vec<f32>,
) {
    sums.clear();
    sums.resize(GRID_CHUNK.min(acc.len()), 0.0);
    for at in (0..acc.len()).step_by(GRID_CHUNK) {
        let end = (at + GRID_CHUNK).min(acc.len());
        let (d, s) = (&mut acc[at..end], &mut sums[..end - at]);
        grid::add_to_grid(d, &vals[at..end], exps, start + at);
        grid::from_grid_into(d, exps, start + at, s);
        for (k, (x, &s)) in into[at..end].iter_mut().zip(s.iter()).enumerate() {
            *x = T::store(op.finish(s, p), rounding, start + at + k);
        }
    }
}

/// `v` emptied, its allocation kept for slices of another lifetime (a
/// pass's slices of contributions, without a new vector per pass).
pub(super) fn reuse<'b, T: ?Sized>(mut v: Vec<&T>) -> Vec<&'b T> {
    v.clear();
    // Collected in place: the same allocation (same size and alignment).
    v.into_iter().map(|_| unreachable!("emptied")).collect()
}
