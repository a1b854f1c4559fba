//! The in-memory executor: runs a [`CollectiveSchedule`] over `p` buffers in one
//! address space.

use wide::f32x8;

use crate::fp::{Element, Rounding};
use crate::kernels::LANES;

use super::combine::{combine, combine_into};
use super::error::Error;
use super::grid;
use super::message::{Kind, Op, Transfer};
use super::op::{ReduceOp, Reducer};
use super::schedule::CollectiveSchedule;
use super::span::Span;
use super::sum_tree::SumTree;

/// Runs `schedule` over the ranks' buffers `bufs[0..p]`, in place, and
/// reports every message to `on_transfer` as it is delivered (step by
/// step, receivers in rank order; the same [`Transfer`]s as
/// [`CollectiveSchedule::transfers`]).
///
/// Every rank's sends at a step read the buffers as they were before the
/// step, exactly as if the `p` ranks ran concurrently and exchanged
/// messages. Partial sums are kept in f32: in the f32 buffers themselves,
/// or for f16/bf16 in `scratch` (one f32 per rank and element), so a
/// 16-bit result is rounded once, from the complete f32 reduction, with
/// element `i` stored by `reduction.rounding` at position `i`. Nothing is
/// allocated; `scratch` must hold at least
/// [`schedule.scratch_len::<T>(reduction.op)`](CollectiveSchedule::scratch_len)
/// elements and its contents on entry do not matter.
///
/// ```
/// use tessera_core::collective::{
///     self, Algorithm, Collective, ReduceOp, Reducer, CollectiveSchedule,
/// };
///
/// let mut a = [1.0f32, 2.0, 3.0];
/// let mut b = [10.0f32, 20.0, 30.0];
/// let mut c = [100.0f32, 200.0, 300.0];
/// let mut bufs = [&mut a[..], &mut b[..], &mut c[..]];
/// let s = CollectiveSchedule::new(Algorithm::HalvingDoubling, Collective::AllReduce, 3, 3).unwrap();
/// let mut bytes = [0usize; 3];
/// collective::execute(&s, &Reducer::new(ReduceOp::Sum), &mut bufs, &mut [], |t| {
///     bytes[t.from] += t.bytes;
/// })
/// .unwrap();
/// assert_eq!(bufs[1], [111.0, 222.0, 333.0]);
/// assert_eq!(bufs[0], bufs[2]);
/// // Rank 0 folds its 3 elements into rank 1 (12 bytes); the survivors 1
/// // and 2 exchange fragments (4 + 8 bytes each way, reduce then gather);
/// // rank 1 sends the result back to rank 0 (12 bytes).
/// assert_eq!(bytes, [12, 24, 12]);
/// ```
///
/// # Errors
/// [`Error::BufferCount`] unless there are `p` buffers,
/// [`Error::BufferLength`] for a buffer whose length is not
/// [`schedule.len()`](CollectiveSchedule::len), [`Error::ScratchTooSmall`]. Nothing
/// is written then.
pub fn execute<T: Element>(
    schedule: &CollectiveSchedule,
    reduction: &Reducer,
    bufs: &mut [&mut [T]],
    scratch: &mut [f32],
    on_transfer: impl FnMut(Transfer),
) -> Result<(), Error> {
    check_buffers(schedule, bufs.len(), |r| bufs[r].len())?;
    let needed = schedule.scratch_len::<T>(reduction.op);
    if scratch.len() < needed {
        return Err(Error::ScratchTooSmall {
            needed,
            available: scratch.len(),
        });
    }
    run(
        schedule,
        reduction,
        bufs,
        &mut scratch[..needed],
        on_transfer,
    );
    Ok(())
}

/// [`execute`] out of place: copies `inputs[r]` into `outputs[r]`, then
/// runs in place on `outputs`. `inputs` are never written.
///
/// ```
/// use tessera_core::collective::{self, Algorithm, Collective, CollectiveSchedule, ReduceOp, Reducer};
///
/// let inputs = [[1.0f32, 2.0], [3.0, 4.0]];
/// let mut outputs = [[0.0f32; 2]; 2];
/// let ins: Vec<&[f32]> = inputs.iter().map(|x| &x[..]).collect();
/// let mut outs: Vec<&mut [f32]> = outputs.iter_mut().map(|x| &mut x[..]).collect();
/// let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 2, 2).unwrap();
/// collective::execute_into(&s, &Reducer::new(ReduceOp::Min), &ins, &mut outs, &mut [], |_| {}).unwrap();
/// assert_eq!(outputs, [[1.0, 2.0]; 2]);
/// assert_eq!(inputs[1], [3.0, 4.0]); // untouched
/// ```
///
/// # Errors
/// As [`execute`], for `inputs` and `outputs` (both must have `p` buffers
/// of [`schedule.len()`](CollectiveSchedule::len) elements). Nothing is written then.
pub fn execute_into<T: Element>(
    schedule: &CollectiveSchedule,
    reduction: &Reducer,
    inputs: &[&[T]],
    outputs: &mut [&mut [T]],
    scratch: &mut [f32],
    on_transfer: impl FnMut(Transfer),
) -> Result<(), Error> {
    check_buffers(schedule, inputs.len(), |r| inputs[r].len())?;
    check_buffers(schedule, outputs.len(), |r| outputs[r].len())?;
    let needed = schedule.scratch_len::<T>(reduction.op);
    if scratch.len() < needed {
        return Err(Error::ScratchTooSmall {
            needed,
            available: scratch.len(),
        });
    }
    for (out, input) in outputs.iter_mut().zip(inputs) {
        out.copy_from_slice(input);
    }
    run(
        schedule,
        reduction,
        outputs,
        &mut scratch[..needed],
        on_transfer,
    );
    Ok(())
}

fn check_buffers(
    schedule: &CollectiveSchedule,
    count: usize,
    len: impl Fn(usize) -> usize,
) -> Result<(), Error> {
    if count != schedule.size() {
        return Err(Error::BufferCount {
            expected: schedule.size(),
            found: count,
        });
    }
    let expected = schedule.len();
    match (0..count).find(|&r| len(r) != expected) {
        Some(rank) => Err(Error::BufferLength {
            rank,
            expected,
            found: len(rank),
        }),
        None => Ok(()),
    }
}

/// The checked body of [`execute`]: `scratch` is exactly the needed length.
fn run<T: Element>(
    schedule: &CollectiveSchedule,
    reduction: &Reducer,
    bufs: &mut [&mut [T]],
    scratch: &mut [f32],
    mut on_transfer: impl FnMut(Transfer),
) {
    let (p, n) = (schedule.size(), schedule.len());
    let op = reduction.op;
    let frontiers = schedule.carries_frontiers(op);
    let tree = SumTree::new(p);
    let (scratch, mut grid) = if schedule.on_grid(op) {
        (&mut [][..], Some(grid_exponents(bufs, scratch, p, n)))
    } else {
        (scratch, None)
    };
    for step in 0..schedule.steps() {
        for rank in 0..p {
            for o in &schedule.ops(rank, step) {
                let Op::Recv { from, span, kind } = *o else {
                    continue;
                };
                match kind {
                    Kind::Copy => copy(bufs, from, rank, span, n),
                    Kind::Reduce { covers, onto, .. } if grid.is_some() => {
                        let (exps, acc) = grid.as_mut().expect("on the grid");
                        let single = (covers.len == 1, onto.len == 1);
                        grid_reduce(bufs, acc, exps, n, (from, rank), span, single);
                    }
                    Kind::Reduce { covers, onto, .. } if frontiers => {
                        merge(op, &tree, bufs, scratch, n, span, covers, onto);
                    }
                    Kind::Reduce { covers, onto, .. } => {
                        let single = (covers.len == 1, onto.len == 1);
                        reduce(op, bufs, scratch, n, (from, rank), span, single);
                    }
                }
                on_transfer(schedule.transfer::<T>(op, step, from, rank, span, kind));
            }
        }
        for (rank, buf) in bufs.iter_mut().enumerate() {
            for o in &schedule.ops(rank, step) {
                if let Op::Finalize { span } = *o {
                    if let Some((exps, acc)) = &grid {
                        let row = (p > 1).then(|| &acc[rank * n..(rank + 1) * n]);
                        grid_finalize(reduction, p, buf, row, exps, span);
                        continue;
                    }
                    let source = if frontiers {
                        Source::Row(tree.row(tree.root()))
                    } else if p == 1 || size_of::<T>() == size_of::<f32>() {
                        Source::InPlace
                    } else {
                        Source::Row(rank)
                    };
                    finalize(reduction, p, buf, scratch, n, span, source);
                }
            }
        }
    }
}

/// `bufs[a]` mutably and `bufs[b]` shared (`a != b`).
fn pair<'a, T>(bufs: &'a mut [&mut [T]], a: usize, b: usize) -> (&'a mut [T], &'a [T]) {
    assert_ne!(a, b, "a rank sends to itself");
    if a < b {
        let (x, y) = bufs.split_at_mut(b);
        (&mut *x[a], &*y[0])
    } else {
        let (x, y) = bufs.split_at_mut(a);
        (&mut *y[0], &*x[b])
    }
}

/// [`Order::Free`](super::Order::Free)'s Sum and Mean: the block
/// exponents' Max over all ranks (the phase a transport runs as a Max
/// all-reduce first, not reported) and one row of f64 grid sums per rank,
/// both carved out of `scratch`.
fn grid_exponents<'s, T: Element>(
    bufs: &[&mut [T]],
    scratch: &'s mut [f32],
    p: usize,
    n: usize,
) -> (&'s mut [f32], &'s mut [f64]) {
    let blocks = grid::blocks(n);
    let (exps, rest) = scratch.split_at_mut(blocks);
    let (mine, rest) = rest.split_at_mut(blocks);
    exps.fill(grid::MIN_GRID_EXPONENT as f32);
    for buf in bufs {
        grid::block_exponents(buf, mine);
        for (e, &m) in exps.iter_mut().zip(&*mine) {
            *e = e.max(m);
        }
    }
    let (_, acc, _) = bytemuck::pod_align_to_mut::<f32, f64>(rest);
    (exps, &mut acc[..p * n])
}

/// A grid reduction `from -> to`: the receiver's grid sum (its own
/// contribution rounded to the grid if `single.1`) plus the sender's (its
/// own contribution if `single.0`), exactly.
fn grid_reduce<T: Element>(
    bufs: &[&mut [T]],
    acc: &mut [f64],
    exps: &[f32],
    n: usize,
    (from, to): (usize, usize),
    span: Span,
    (single_in, single_held): (bool, bool),
) {
    let (dst, src) = rows(acc, n, to, from);
    let (held, incoming) = (&*bufs[to], &*bufs[from]);
    for run in span.runs_below(n) {
        let d = &mut dst[run.clone()];
        if single_held {
            grid::to_grid(&held[run.clone()], exps, run.start, d);
        }
        if single_in {
            grid::add_to_grid(d, &incoming[run.clone()], exps, run.start);
        } else {
            for (d, s) in d.iter_mut().zip(&src[run]) {
                *d += *s;
            }
        }
    }
}

/// Stores the finished grid sums of `span` (`row`, or with one rank the
/// buffer's own values rounded to the grid), each rounded once to f32,
/// finished ([`ReduceOp::finish`]) and stored at its position.
fn grid_finalize<T: Element>(
    reduction: &Reducer,
    p: usize,
    buf: &mut [T],
    row: Option<&[f64]>,
    exps: &[f32],
    span: Span,
) {
    let (op, rounding) = (reduction.op, reduction.rounding);
    for run in span.runs_below(buf.len()) {
        store(buf, run, op, p, rounding, |i, b| {
            let g = grid::exponent_at(exps, i);
            let q = match row {
                Some(row) => row[i],
                None => grid::round_to_grid(b[i].load(), g),
            };
            grid::from_grid(q, g)
        });
    }
}

/// Row `a` of a table of rows of `n` mutably, row `b` shared (`a != b`).
fn rows<E>(table: &mut [E], n: usize, a: usize, b: usize) -> (&mut [E], &[E]) {
    if a < b {
        let (x, y) = table.split_at_mut(b * n);
        (&mut x[a * n..(a + 1) * n], &y[..n])
    } else {
        let (x, y) = table.split_at_mut(a * n);
        (&mut y[..n], &x[b * n..(b + 1) * n])
    }
}

fn copy<T: Copy>(bufs: &mut [&mut [T]], from: usize, to: usize, span: Span, n: usize) {
    let (dst, src) = pair(bufs, to, from);
    for run in span.runs_below(n) {
        dst[run.clone()].copy_from_slice(&src[run]);
    }
}

/// A one-partial reduction `from -> to`: the receiver's partial (its own
/// contribution if `single.1`) combined with the sender's (its own
/// contribution if `single.0`), in place for f32, into the receiver's
/// scratch row for 16-bit formats.
fn reduce<T: Element>(
    op: ReduceOp,
    bufs: &mut [&mut [T]],
    acc: &mut [f32],
    n: usize,
    (from, to): (usize, usize),
    span: Span,
    (single_in, single_held): (bool, bool),
) {
    if size_of::<T>() == size_of::<f32>() {
        // Only f32 among the Element types has four bytes.
        let (dst, src) = pair(bufs, to, from);
        let dst: &mut [f32] = crate::arch::cast_slice_mut(dst);
        let src: &[f32] = crate::arch::cast_slice(src);
        for run in span.runs_below(n) {
            combine(op, &mut dst[run.clone()], &src[run]);
        }
        return;
    }
    let (dst, src) = rows(acc, n, to, from);
    let (held, incoming) = (&*bufs[to], &*bufs[from]);
    for run in span.runs_below(n) {
        let d = &mut dst[run.clone()];
        match (single_held, single_in) {
            (true, true) => combine_into(op, d, &held[run.clone()], &incoming[run]),
            (true, false) => combine_into(op, d, &held[run.clone()], &src[run]),
            (false, true) => combine(op, d, &incoming[run]),
            (false, false) => combine(op, d, &src[run]),
        }
    }
}

/// A partial result of the summation tree: a rank's contribution or a row
/// of the node table.
#[derive(Clone, Copy)]
enum Operand<'a, T> {
    Leaf(&'a [T]),
    Row(&'a [f32]),
}

/// Partial sums covering `covers` arrive where `onto` is held: compute
/// every summation-tree node that now has both children, children first.
/// Each node's value is the same wherever it is computed, so it is kept
/// once, in the node table (`p - 1` rows of `n`).
#[allow(clippy::too_many_arguments)]
fn merge<T: Element>(
    op: ReduceOp,
    tree: &SumTree,
    bufs: &[&mut [T]],
    table: &mut [f32],
    n: usize,
    span: Span,
    covers: super::Ranks,
    onto: super::Ranks,
) {
    tree.merges(onto, covers, &mut |node, left, right| {
        let x = tree.row(node);
        let (before, rest) = table.split_at_mut(x * n);
        let (row, after) = rest.split_at_mut(n);
        let operand = |child| match tree.leaf(child) {
            Some(j) => Operand::Leaf(&*bufs[j]),
            None => {
                let c = tree.row(child);
                Operand::Row(if c < x {
                    &before[c * n..(c + 1) * n]
                } else {
                    &after[(c - x - 1) * n..(c - x) * n]
                })
            }
        };
        let (a, b) = (operand(left), operand(right));
        for run in span.runs_below(n) {
            let d = &mut row[run.clone()];
            match (a, b) {
                (Operand::Leaf(a), Operand::Leaf(b)) => {
                    combine_into(op, d, &a[run.clone()], &b[run])
                }
                (Operand::Leaf(a), Operand::Row(b)) => {
                    combine_into(op, d, &a[run.clone()], &b[run])
                }
                (Operand::Row(a), Operand::Leaf(b)) => {
                    combine_into(op, d, &a[run.clone()], &b[run])
                }
                (Operand::Row(a), Operand::Row(b)) => combine_into(op, d, &a[run.clone()], &b[run]),
            }
        }
    });
}

/// Where a finished reduction is read from.
enum Source {
    /// The rank's own buffer (f32 accumulating in place, or one rank).
    InPlace,
    /// A scratch row.
    Row(usize),
}

/// Finishes (Mean's division) and stores the span, element `i` rounded
/// at position `i`.
fn finalize<T: Element>(
    reduction: &Reducer,
    p: usize,
    buf: &mut [T],
    scratch: &[f32],
    n: usize,
    span: Span,
    source: Source,
) {
    let (op, rounding) = (reduction.op, reduction.rounding);
    for run in span.runs_below(n) {
        match source {
            Source::InPlace => store(buf, run, op, p, rounding, |i, b| b[i].load()),
            Source::Row(r) => {
                let row = &scratch[r * n..(r + 1) * n];
                store(buf, run, op, p, rounding, |i, _| row[i]);
            }
        }
    }
}

/// `buf[i] = T::store(op.finish(value(i)), rounding, i)` over `run`, eight
/// at a time (the eight-lane store equals [`Element::store`] bit for bit,
/// random bits included).
#[inline(always)]
fn store<T: Element>(
    buf: &mut [T],
    run: core::ops::Range<usize>,
    op: ReduceOp,
    p: usize,
    rounding: Rounding,
    value: impl Fn(usize, &[T]) -> f32,
) {
    let mut i = run.start;
    while i + LANES <= run.end {
        let x: [f32; LANES] = core::array::from_fn(|k| op.finish(value(i + k, buf), p));
        let out = T::store_x8(f32x8::from(x), rounding, i);
        buf[i..i + LANES].copy_from_slice(&out);
        i += LANES;
    }
    for i in i..run.end {
        let x = op.finish(value(i, buf), p);
        buf[i] = T::store(x, rounding, i);
    }
}
