//! The loops every optimizer shares: an element-wise update over a
//! parameter's slices, and the block partials of phase 1. Each runs the
//! optimizer's formula on the active backend's lanes and, for the tail, on
//! one lane; the scalar twins run it on one lane throughout.

use crate::arch::{self, F32s, Kernel, Simd};
use crate::fp::{self, Element, Rounding};
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

/// A phase 1 that also finishes the state: `(state', update, terms)` per
/// element.
pub(crate) trait Fused<const N: usize> {
    fn fused<T: Real>(&self, w: T, g: T, s: [T; N]) -> ([T; N], T, [T; 3]);
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
    let kernel = ApplyKernel {
        u,
        p,
        w_round,
        s_round,
    };
    run(kernel, scalar);
}

struct ApplyKernel<'p, 'a, W, G, S, U, const N: usize> {
    u: &'p U,
    p: &'p mut Param<'a, W, G, S, N>,
    w_round: Rounding,
    s_round: [Rounding; N],
}

impl<W, G, S, U, const N: usize> ApplyKernel<'_, '_, W, G, S, U, N>
where
    W: Element,
    G: Element,
    S: Element,
    U: Update<N>,
{
    /// Element `at` on one lane.
    #[inline(always)]
    fn one(&mut self, at: usize) {
        let p = &mut *self.p;
        let s = core::array::from_fn(
            #[inline(always)]
            |k| p.state[k][at].load(),
        );
        let (w_new, s_new) = self.u.update(p.weights[at].load(), p.grads[at].load(), s);
        p.weights[at] = W::store(w_new, self.w_round, at);
        for (k, s) in s_new.into_iter().enumerate() {
            p.state[k][at] = S::store(s, self.s_round[k], at);
        }
    }
}

impl<W, G, S, U, const N: usize> Kernel for ApplyKernel<'_, '_, W, G, S, U, N>
where
    W: Element,
    G: Element,
    S: Element,
    U: Update<N>,
{
    type Output = ();

    #[inline(always)]
    fn run<V: Simd>(mut self) {
        let n = self.p.weights.len();
        let vector_len = n / V::LANES * V::LANES;
        for at in (0..vector_len).step_by(V::LANES) {
            let p = &mut *self.p;
            prefetch_streams(p.weights, p.grads, &p.state, at);
            let s = core::array::from_fn(
                #[inline(always)]
                |k| fp::load::<V, S>(&p.state[k][at..]),
            );
            let (w_new, s_new) = self.u.update(
                fp::load::<V, W>(&p.weights[at..]),
                fp::load::<V, G>(&p.grads[at..]),
                s,
            );
            fp::store::<V, W>(w_new, self.w_round, at, &mut p.weights[at..]);
            for (k, s) in s_new.into_iter().enumerate() {
                fp::store::<V, S>(s, self.s_round[k], at, &mut p.state[k][at..]);
            }
        }
        for at in vector_len..n {
            self.one(at);
        }
    }

    fn scalar(mut self) {
        for at in 0..self.p.weights.len() {
            self.one(at);
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
    arch::dispatch(InPlace { u, acc, round });
}

struct InPlace<'p, A, U> {
    u: &'p U,
    acc: &'p mut [A],
    round: Rounding,
}

impl<A: Element, U: Update<0>> Kernel for InPlace<'_, A, U> {
    type Output = ();

    #[inline(always)]
    fn run<V: Simd>(self) {
        let done = self.acc.len() / V::LANES * V::LANES;
        let mut chunks = self.acc.chunks_exact_mut(V::LANES);
        for (c, a) in (&mut chunks).enumerate() {
            let x = fp::load::<V, A>(a);
            fp::store::<V, A>(self.u.update(x, x, []).0, self.round, c * V::LANES, a);
        }
        for (i, a) in chunks.into_remainder().iter_mut().enumerate() {
            let x = a.load();
            *a = A::store(self.u.update(x, x, []).0, self.round, done + i);
        }
    }

    fn scalar(self) {
        for (i, a) in self.acc.iter_mut().enumerate() {
            let x = a.load();
            *a = A::store(self.u.update(x, x, []).0, self.round, i);
        }
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
    let kernel = PartialsKernel { u, p };
    run(kernel, scalar)
}

/// A phase-1 kernel: its block partials, with the lanes of `V` unless
/// `scalar` (then one lane throughout).
trait Sums {
    fn sums<V: Simd>(self, scalar: bool) -> Partials;
}

impl<T: Sums> Kernel for T {
    type Output = Partials;

    #[inline(always)]
    fn run<V: Simd>(self) -> Partials {
        self.sums::<V>(false)
    }

    fn scalar(self) -> Partials {
        self.sums::<arch::Portable>(true)
    }
}

struct PartialsKernel<'p, 'a, W, G, S, U, const N: usize> {
    u: &'p U,
    p: &'p Param<'a, W, G, S, N>,
}

impl<W, G, S, U, const N: usize> Sums for PartialsKernel<'_, '_, W, G, S, U, N>
where
    W: Element,
    G: Element,
    S: Element,
    U: Terms<N>,
{
    #[inline(always)]
    fn sums<V: Simd>(self, scalar: bool) -> Partials {
        let (u, p) = (self.u, self.p);
        let state = if U::READS_STATE { &p.state[..] } else { &[] };
        block_partials::<V, _>(
            p.weights.len(),
            scalar,
            &mut (),
            #[inline(always)]
            |(), at| {
                prefetch_streams(p.weights, p.grads, state, at);
                let s = core::array::from_fn(
                    #[inline(always)]
                    |k| {
                        if U::READS_STATE {
                            fp::load::<V, S>(&p.state[k][at..])
                        } else {
                            V::F::splat(0.0)
                        }
                    },
                );
                u.terms(
                    fp::load::<V, W>(&p.weights[at..]),
                    fp::load::<V, G>(&p.grads[at..]),
                    s,
                )
            },
            #[inline(always)]
            |(), at| {
                let s = core::array::from_fn(
                    #[inline(always)]
                    |k| {
                        if U::READS_STATE {
                            p.state[k][at].load()
                        } else {
                            0.0
                        }
                    },
                );
                u.terms(p.weights[at].load(), p.grads[at].load(), s)
            },
        )
    }
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
    let kernel = FusedKernel {
        u,
        p,
        update,
        s_round,
    };
    run(kernel, scalar)
}

struct FusedKernel<'p, 'a, W, G, S, U, const N: usize> {
    u: &'p U,
    p: &'p mut Param<'a, W, G, S, N>,
    update: &'p mut [f32],
    s_round: [Rounding; N],
}

impl<W, G, S, U, const N: usize> Sums for FusedKernel<'_, '_, W, G, S, U, N>
where
    W: Element,
    G: Element,
    S: Element,
    U: Fused<N>,
{
    #[inline(always)]
    fn sums<V: Simd>(self, scalar: bool) -> Partials {
        let (u, s_round) = (self.u, self.s_round);
        let (weights, grads) = (&*self.p.weights, self.p.grads);
        let mut out = (&mut self.p.state, self.update);
        block_partials::<V, _>(
            weights.len(),
            scalar,
            &mut out,
            #[inline(always)]
            |(state, update), at| {
                prefetch_streams(weights, grads, &state[..], at);
                let s = core::array::from_fn(
                    #[inline(always)]
                    |k| fp::load::<V, S>(&state[k][at..]),
                );
                let (s_new, u_new, terms) = u.fused(
                    fp::load::<V, W>(&weights[at..]),
                    fp::load::<V, G>(&grads[at..]),
                    s,
                );
                for (k, s) in s_new.into_iter().enumerate() {
                    fp::store::<V, S>(s, s_round[k], at, &mut state[k][at..]);
                }
                u_new.store(&mut update[at..]);
                terms
            },
            #[inline(always)]
            |(state, update), at| {
                let s = core::array::from_fn(
                    #[inline(always)]
                    |k| state[k][at].load(),
                );
                let (s_new, u_new, terms) = u.fused(weights[at].load(), grads[at].load(), s);
                for (k, s) in s_new.into_iter().enumerate() {
                    state[k][at] = S::store(s, s_round[k], at);
                }
                update[at] = u_new;
                terms
            },
        )
    }
}

/// `kernel` on the active backend, or its scalar twin.
fn run<K: Kernel>(kernel: K, scalar: bool) -> K::Output {
    if scalar {
        kernel.scalar()
    } else {
        arch::dispatch(kernel)
    }
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
/// elements: `lanes(at)` gives the terms of elements `at..at + V::LANES`,
/// `one(at)` those of element `at` (a block's elements after its last full
/// vector, or every element when `scalar`); both get `ctx`, the state they
/// write, if any.
#[inline(always)]
fn block_partials<V: Simd, C>(
    n: usize,
    scalar: bool,
    ctx: &mut C,
    mut lanes: impl FnMut(&mut C, usize) -> [V::F; 3],
    mut one: impl FnMut(&mut C, usize) -> [f32; 3],
) -> Partials {
    let mut sums = [ExactSum::new(); 3];
    for start in (0..n).step_by(BLOCK) {
        let end = n.min(start + BLOCK);
        let vector_end = if scalar {
            start
        } else {
            start + (end - start) / V::LANES * V::LANES
        };
        let mut acc = [V::acc_zero(); 3];
        for at in (start..vector_end).step_by(V::LANES) {
            for (a, term) in acc.iter_mut().zip(lanes(ctx, at)) {
                *a = V::accumulate(*a, term);
            }
        }
        let mut sum_lanes = acc.map(V::acc_lanes);
        for at in vector_end..end {
            for (l, term) in sum_lanes.iter_mut().zip(one(ctx, at)) {
                l[(at - start) % LANES] += term;
            }
        }
        for (sum, l) in sums.iter_mut().zip(sum_lanes) {
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
/// element `at`, one cache line per stream every 16 elements.
#[inline(always)]
fn prefetch_streams<W, G, S>(w: &[W], g: &[G], s: &[&mut [S]], at: usize) {
    if at.is_multiple_of(2 * LANES) {
        let ahead = at + PREFETCH_CHUNKS * LANES;
        arch::prefetch(w, ahead);
        arch::prefetch(g, ahead);
        for s in s {
            arch::prefetch(s, ahead);
        }
    }
}

/// Chunks of eight between a loop's position and the data it prefetches:
/// the update loops do enough arithmetic per chunk that the out-of-order
/// window alone cannot cover memory latency on seven streams.
const PREFETCH_CHUNKS: usize = 64;
