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
    {
        let (w8, _) = p.weights[..vector_len].as_chunks_mut::<LANES>();
        let (g8, _) = p.grads[..vector_len].as_chunks::<LANES>();
        let s8 = p
            .state
            .each_mut()
            .map(|s| s[..vector_len].as_chunks_mut::<LANES>().0);
        for (c, (w, g)) in w8.iter_mut().zip(g8).enumerate() {
            let s = core::array::from_fn(|k| S::load_x8(s8[k][c]));
            let (w_new, s_new) = u.update(W::load_x8(*w), G::load_x8(*g), s);
            let at = c * LANES;
            *w = W::store_x8(w_new, w_round, at);
            for (k, s) in s_new.into_iter().enumerate() {
                s8[k][c] = S::store_x8(s, s_round[k], at);
            }
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
    p.check_lengths();
    assert!(
        p.offset.is_multiple_of(BLOCK as u64),
        "phase 1 pieces must start at a multiple of BLOCK ({BLOCK}); offset {}",
        p.offset
    );
    let mut sums = [ExactSum::new(); 3];
    let n = p.weights.len();
    for start in (0..n).step_by(BLOCK) {
        let end = n.min(start + BLOCK);
        let vector_end = if scalar {
            start
        } else {
            start + (end - start) / LANES * LANES
        };
        let mut acc = [f32x8::ZERO; 3];
        for at in (start..vector_end).step_by(LANES) {
            let w = W::load_x8(chunk(p.weights, at));
            let g = G::load_x8(chunk(p.grads, at));
            let s = core::array::from_fn(|k| S::load_x8(chunk(p.state[k], at)));
            for (a, term) in acc.iter_mut().zip(u.terms(w, g, s)) {
                *a += term;
            }
        }
        let mut lanes = acc.map(|a| a.to_array());
        for at in vector_end..end {
            let s = core::array::from_fn(|k| p.state[k][at].load());
            let terms = u.terms(p.weights[at].load(), p.grads[at].load(), s);
            for (l, term) in lanes.iter_mut().zip(terms) {
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

#[inline(always)]
fn chunk<T: Copy>(x: &[T], at: usize) -> [T; LANES] {
    x[at..at + LANES].try_into().expect("eight lanes")
}
