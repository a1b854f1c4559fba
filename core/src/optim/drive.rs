//! The loops every optimizer shares: an element-wise update over a
//! parameter's slices, and the block partials of phase 1. Each runs the
//! optimizer's formula on eight lanes and, for the tail, on one lane; the
//! scalar twins run it on one lane throughout.

use wide::f32x8;

use crate::fp::Element;
use crate::kernels::{BLOCK, ExactSum, LANES};

use super::real::Real;
use super::{Param, Partials, Precision};

/// A per-element update with `N` state tensors: `(w, g, state) -> (w',
/// state')`, written once for any [`Real`].
pub(crate) trait Update<const N: usize> {
    fn update<T: Real>(&self, w: T, g: T, s: [T; N]) -> (T, [T; N]);
}

/// The per-element terms whose sums phase 1 returns: squares of the
/// weight, the gradient and the update, as the optimizer defines them.
pub(crate) trait Terms<const N: usize> {
    /// Whether the terms read the state; if not, phase 1 neither loads nor
    /// prefetches it (LARS's norms need only `w` and `g`).
    const READS_STATE: bool = true;
    fn terms<T: Real>(&self, w: T, g: T, s: [T; N]) -> [T; 3];
}

/// Runs `u` over every element of `p`, storing with the precision's
/// roundings. `scalar` selects the one-lane twin.
pub(crate) fn apply<W, G, S, U, const N: usize>(
    u: &U,
    p: &mut Param<'_, W, G, S, N>,
    precision: &Precision,
    t: u64,
    scalar: bool,
) where
    W: Element,
    G: Element,
    S: Element,
    U: Update<N>,
{
    p.check_lengths();
    let (w_round, s_round) = precision.roundings::<N>(p.id, t, p.offset);
    let vector_len = if scalar {
        0
    } else {
        p.weights.len() / LANES * LANES
    };
    for at in (0..vector_len).step_by(LANES) {
        prefetch_streams(p.weights, p.grads, &p.state, at);
        let s = core::array::from_fn(|k| S::load_x8(chunk(p.state[k], at)));
        let (w_new, s_new) = u.update(
            W::load_x8(chunk(p.weights, at)),
            G::load_x8(chunk(p.grads, at)),
            s,
        );
        *chunk_mut(p.weights, at) = W::store_x8(w_new, w_round, at);
        for (k, s) in s_new.into_iter().enumerate() {
            *chunk_mut(p.state[k], at) = S::store_x8(s, s_round[k], at);
        }
    }
    for at in vector_len..p.weights.len() {
        let s = core::array::from_fn(|k| p.state[k][at].load());
        let (w_new, s_new) = u.update(p.weights[at].load(), p.grads[at].load(), s);
        p.weights[at] = W::store(w_new, w_round, at);
        for (k, s) in s_new.into_iter().enumerate() {
            p.state[k][at] = S::store(s, s_round[k], at);
        }
    }
}

/// Runs `u` over `acc` alone, reading each element as both `w` and `g`.
pub(crate) fn apply_in_place<A: Element, U: Update<0>>(
    u: &U,
    acc: &mut [A],
    precision: &Precision,
    id: u64,
    t: u64,
) {
    let (round, []) = precision.roundings::<0>(id, t, 0);
    let (acc8, tail) = acc.as_chunks_mut::<LANES>();
    for (c, a) in acc8.iter_mut().enumerate() {
        let x = A::load_x8(*a);
        *a = A::store_x8(u.update(x, x, []).0, round, c * LANES);
    }
    let start = acc8.len() * LANES;
    for (i, a) in tail.iter_mut().enumerate() {
        let x = a.load();
        *a = A::store(u.update(x, x, []).0, round, start + i);
    }
}

/// Phase 1: the block partials of the three terms over `p`, in the order
/// of [`crate::kernels`] (blocks of [`BLOCK`] from the piece's start; lane
/// `j` of a block sums elements `j, j + 8, ...`; lanes combined by the fixed
/// tree; block partials added exactly). `scalar` selects the one-lane twin.
pub(crate) fn partials<W, G, S, U, const N: usize>(
    u: &U,
    p: &Param<'_, W, G, S, N>,
    scalar: bool,
) -> Partials
where
    W: Element,
    G: Element,
    S: Element,
    U: Terms<N>,
{
    check_phase_one(p);
    let state = if U::READS_STATE { &p.state[..] } else { &[] };
    block_partials(
        p.weights.len(),
        scalar,
        &mut (),
        |(), at| {
            prefetch_streams(p.weights, p.grads, state, at);
            let s = core::array::from_fn(|k| {
                if U::READS_STATE {
                    S::load_x8(chunk(p.state[k], at))
                } else {
                    f32x8::ZERO
                }
            });
            u.terms(
                W::load_x8(chunk(p.weights, at)),
                G::load_x8(chunk(p.grads, at)),
                s,
            )
        },
        |(), at| {
            let s = core::array::from_fn(|k| {
                if U::READS_STATE {
                    p.state[k][at].load()
                } else {
                    0.0
                }
            });
            u.terms(p.weights[at].load(), p.grads[at].load(), s)
        },
    )
}

/// A phase 1 that also finishes the state: `(state', update, terms)` per
/// element.
pub(crate) trait Fused<const N: usize> {
    fn fused<T: Real>(&self, w: T, g: T, s: [T; N]) -> ([T; N], T, [T; 3]);
}

/// Fused phase 1: stores the new state and the update (into `update`) and
/// returns the same partials as [`partials`] would.
pub(crate) fn partials_into<W, G, S, U, const N: usize>(
    u: &U,
    p: &mut Param<'_, W, G, S, N>,
    update: &mut [f32],
    precision: &Precision,
    t: u64,
    scalar: bool,
) -> Partials
where
    W: Element,
    G: Element,
    S: Element,
    U: Fused<N>,
{
    check_phase_one(p);
    assert_eq!(
        update.len(),
        p.weights.len(),
        "param {}: update scratch and weights differ in length",
        p.id
    );
    let (_, s_round) = precision.roundings::<N>(p.id, t, p.offset);
    let (weights, grads) = (&*p.weights, p.grads);
    let mut out = (&mut p.state, update);
    block_partials(
        weights.len(),
        scalar,
        &mut out,
        |(state, update), at| {
            prefetch_streams(weights, grads, &state[..], at);
            let s = core::array::from_fn(|k| S::load_x8(chunk(state[k], at)));
            let (s_new, u_new, terms) = u.fused(
                W::load_x8(chunk(weights, at)),
                G::load_x8(chunk(grads, at)),
                s,
            );
            for (k, s) in s_new.into_iter().enumerate() {
                let out: &mut [S; LANES] = (&mut state[k][at..at + LANES])
                    .try_into()
                    .expect("eight lanes");
                *out = S::store_x8(s, s_round[k], at);
            }
            update[at..at + LANES].copy_from_slice(&u_new.to_array());
            terms
        },
        |(state, update), at| {
            let s = core::array::from_fn(|k| state[k][at].load());
            let (s_new, u_new, terms) = u.fused(weights[at].load(), grads[at].load(), s);
            for (k, s) in s_new.into_iter().enumerate() {
                state[k][at] = S::store(s, s_round[k], at);
            }
            update[at] = u_new;
            terms
        },
    )
}

fn check_phase_one<W: Element, G: Element, S: Element, const N: usize>(p: &Param<'_, W, G, S, N>) {
    p.check_lengths();
    assert!(
        p.offset.is_multiple_of(BLOCK as u64),
        "phase 1 pieces must start at a multiple of BLOCK ({BLOCK}); offset {}",
        p.offset
    );
}

/// The fixed-order block sums of three per-element terms over `n`
/// elements: `eight(at)` gives the terms of elements `at..at + 8` (vector
/// lanes), `one(at)` those of element `at`; both get `ctx`, the state they
/// write, if any (the tail of a block, or every
/// element when `scalar`).
#[inline(always)]
fn block_partials<C>(
    n: usize,
    scalar: bool,
    ctx: &mut C,
    mut eight: impl FnMut(&mut C, usize) -> [f32x8; 3],
    mut one: impl FnMut(&mut C, usize) -> [f32; 3],
) -> Partials {
    let mut sums = [ExactSum::new(); 3];
    for start in (0..n).step_by(BLOCK) {
        let end = n.min(start + BLOCK);
        let vector_end = if scalar {
            start
        } else {
            start + (end - start) / LANES * LANES
        };
        let mut acc = [f32x8::ZERO; 3];
        for at in (start..vector_end).step_by(LANES) {
            for (a, term) in acc.iter_mut().zip(eight(ctx, at)) {
                *a += term;
            }
        }
        let mut lanes = acc.map(|a| a.to_array());
        for at in vector_end..end {
            for (l, term) in lanes.iter_mut().zip(one(ctx, at)) {
                l[(at - start) % LANES] += term;
            }
        }
        for (sum, l) in sums.iter_mut().zip(lanes) {
            sum.add(crate::kernels::scalar::combine_lanes(l));
        }
    }
    Partials {
        w_sq: sums[0],
        g_sq: sums[1],
        u_sq: sums[2],
    }
}

/// Prefetches every stream of a parameter `PREFETCH_CHUNKS` chunks ahead of
/// element `at`, one cache line per stream every other chunk.
#[inline(always)]
fn prefetch_streams<W, G, S>(w: &[W], g: &[G], s: &[&mut [S]], at: usize) {
    if at.is_multiple_of(2 * LANES) {
        let ahead = at + PREFETCH_CHUNKS * LANES;
        crate::arch::prefetch(w, ahead);
        crate::arch::prefetch(g, ahead);
        for s in s {
            crate::arch::prefetch(s, ahead);
        }
    }
}

#[inline(always)]
fn chunk<T: Copy>(x: &[T], at: usize) -> [T; LANES] {
    x[at..at + LANES].try_into().expect("eight lanes")
}

#[inline(always)]
fn chunk_mut<T>(x: &mut [T], at: usize) -> &mut [T; LANES] {
    (&mut x[at..at + LANES]).try_into().expect("eight lanes")
}

/// Chunks of eight between a loop's position and the data it prefetches:
/// the update loops do enough arithmetic per chunk that the out-of-order
/// window alone cannot cover memory latency on seven streams.
const PREFETCH_CHUNKS: usize = 64;
