//! Element-wise kernels: axpy, scale, add, unscale-and-check, accumulate.

use crate::arch::{self, F32s, Real, Simd, U32s, kernel};
use crate::fp::{self, Element, Rounding};

use super::scalar;

/// Lanes holding infinity or NaN, as a mask.
#[inline(always)]
fn non_finite<S: Simd>(v: S::F) -> S::U {
    let exp = S::U::splat(0x7f80_0000);
    (v.to_bits() & exp).simd_eq(exp)
}

/// `x[i] = store(f(i, widen(x[i])))`: `f` on `S::LANES` widened lanes at a
/// time (element offsets `0, S::LANES, ...`), the results stored with
/// `rounding`; the tail goes one element at a time through `f1` and
/// [`Element::store`].
#[inline(always)]
fn map<S: Simd, T: Element>(
    x: &mut [T],
    rounding: Rounding,
    f: impl Fn(usize, S::F) -> S::F,
    f1: impl Fn(usize, f32) -> f32,
) {
    let done = arch::each_vector::<S>(
        x.len(),
        #[inline(always)]
        |at| {
            arch::prefetch_ahead(x, at);
            let v = f(at, fp::load::<S, T>(&x[at..]));
            fp::store::<S, T>(v, rounding, at, &mut x[at..]);
        },
    );
    for (k, x) in x[done..].iter_mut().enumerate() {
        let at = done + k;
        *x = T::store(f1(at, x.load()), rounding, at);
    }
}

/// `y[i] = y[i] + a * x[i]` in f32 (the product rounded to f32, then
/// added: no fused multiply-add), stored as `T`: f16 and bf16 are widened
/// (exactly) and the result rounded once with `rounding`, element `i` at
/// position `i` (f32 ignores `rounding`: see [the module](super#rounding)).
///
/// ```
/// use tessera_core::fp::{Rounding, f16};
/// use tessera_core::kernels::axpy;
///
/// let mut y = [1.0f32, 1.0];
/// axpy(0.5, &[2.0, 4.0], &mut y, Rounding::Nearest);
/// assert_eq!(y, [2.0, 3.0]);
///
/// let mut h = [f16::ONE; 2];
/// axpy(2.0, &[f16::from_f32(0.5); 2], &mut h, Rounding::Nearest);
/// assert_eq!(h, [f16::from_f32(2.0); 2]);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn axpy<T: Element>(a: f32, x: &[T], y: &mut [T], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    arch::dispatch(Axpy { a, x, y, rounding });
}

kernel! {
    Axpy<'a, T: Element> { a: f32, x: &'a [T], y: &'a mut [T], rounding: Rounding } -> ();
    run<S>(k) {
        let (a, x) = (k.a, k.x);
        let av = S::F::splat(a);
        map::<S, T>(
            k.y,
            k.rounding,
            #[inline(always)] |at, y| {
                arch::prefetch_ahead(x, at);
                y + av * fp::load::<S, T>(&x[at..])
            },
            #[inline(always)] |at, y| y + a * x[at].load(),
        );
    }
    scalar(k) { scalar::axpy(k.a, k.x, k.y, k.rounding) }
}

/// `x[i] = x[i] * a` in f32, stored as `T` with `rounding` (element `i` at
/// position `i`; ignored by f32).
///
/// ```
/// use tessera_core::fp::{Rounding, bf16};
/// use tessera_core::kernels::scale;
///
/// let mut x = [1.0f32, -2.0];
/// scale(0.25, &mut x, Rounding::Nearest);
/// assert_eq!(x, [0.25, -0.5]);
///
/// let mut b = [bf16::from_f32(3.0)];
/// scale(0.5, &mut b, Rounding::Nearest);
/// assert_eq!(b, [bf16::from_f32(1.5)]);
/// ```
pub fn scale<T: Element>(a: f32, x: &mut [T], rounding: Rounding) {
    arch::dispatch(Scale { a, x, rounding });
}

kernel! {
    Scale<'a, T: Element> { a: f32, x: &'a mut [T], rounding: Rounding } -> ();
    run<S>(k) {
        let (a, av) = (k.a, S::F::splat(k.a));
        map::<S, T>(k.x, k.rounding, #[inline(always)] |_, x| x * av, #[inline(always)] |_, x| x * a);
    }
    scalar(k) { scalar::scale(k.a, k.x, k.rounding) }
}

/// `y[i] = y[i] + x[i]` in f32, stored as `T` with `rounding` (element `i`
/// at position `i`; ignored by f32).
///
/// ```
/// use tessera_core::fp::{Rounding, f16};
/// use tessera_core::kernels::add;
///
/// let mut y = [1.0f32, 2.0];
/// add(&[0.5, 0.5], &mut y, Rounding::Nearest);
/// assert_eq!(y, [1.5, 2.5]);
///
/// let mut h = [f16::ONE];
/// add(&[f16::ONE], &mut h, Rounding::Nearest);
/// assert_eq!(h, [f16::from_f32(2.0)]);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn add<T: Element>(x: &[T], y: &mut [T], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "add: length mismatch");
    arch::dispatch(Add { x, y, rounding });
}

kernel! {
    Add<'a, T: Element> { x: &'a [T], y: &'a mut [T], rounding: Rounding } -> ();
    run<S>(k) {
        let x = k.x;
        map::<S, T>(
            k.y,
            k.rounding,
            #[inline(always)] |at, y| {
                arch::prefetch_ahead(x, at);
                y + fp::load::<S, T>(&x[at..])
            },
            #[inline(always)] |at, y| y + x[at].load(),
        );
    }
    scalar(k) { scalar::add(k.x, k.y, k.rounding) }
}

/// Unscales gradients in place, `x[i] = x[i] * inv_scale` (in f32, stored
/// as `T` with `rounding`, element `i` at position `i`; ignored by f32),
/// and returns whether any *stored* value is infinite or NaN (GradScaler's
/// `found_inf`).
///
/// The check is on the results. An infinite or NaN input always gives a
/// non-finite result, so this flags everything PyTorch's
/// `_amp_foreach_non_finite_check_and_unscale_` flags (which tests the
/// inputs), and the two agree whenever `inv_scale` is finite and at most 1,
/// as it is for a loss scale of at least 1: then a finite input cannot
/// overflow. With `inv_scale > 1` (a scale below 1) a finite input can
/// overflow to infinity (in f32, or in the rounding to f16/bf16), and with
/// a non-finite `inv_scale` any input can become non-finite; this kernel
/// reports those too, so an optimizer step never consumes an infinite
/// gradient, where PyTorch would not report them.
///
/// ```
/// use tessera_core::fp::{Rounding, f16};
/// use tessera_core::kernels::unscale_and_check;
///
/// let mut g = [1024.0f32, 512.0];
/// assert!(!unscale_and_check(&mut g, 1.0 / 1024.0, Rounding::Nearest));
/// assert_eq!(g, [1.0, 0.5]);
/// assert!(unscale_and_check(&mut [f32::INFINITY], 0.5, Rounding::Nearest));
///
/// let mut h = [f16::from_f32(2048.0), f16::INFINITY];
/// assert!(unscale_and_check(&mut h, 1.0 / 1024.0, Rounding::Nearest));
/// assert_eq!(h[0], f16::from_f32(2.0));
/// ```
#[must_use]
pub fn unscale_and_check<T: Element>(x: &mut [T], inv_scale: f32, rounding: Rounding) -> bool {
    arch::dispatch(Unscale {
        x,
        inv_scale,
        rounding,
    })
}

kernel! {
    Unscale<'a, T: Element> { x: &'a mut [T], inv_scale: f32, rounding: Rounding } -> bool;
    run<S>(k) {
        let (s, x, rounding) = (S::F::splat(k.inv_scale), k.x, k.rounding);
        let mut bad = S::U::splat(0);
        let done = arch::each_vector::<S>(x.len(), #[inline(always)] |at| {
            arch::prefetch_ahead(x, at);
            let v = fp::load::<S, T>(&x[at..]) * s;
            fp::store::<S, T>(v, rounding, at, &mut x[at..]);
            bad |= non_finite::<S>(fp::load::<S, T>(&x[at..]));
        });
        let mut found = bad.any();
        for (i, x) in x[done..].iter_mut().enumerate() {
            *x = T::store(x.load() * k.inv_scale, rounding, done + i);
            found |= !x.load().is_finite();
        }
        found
    }
    scalar(k) { scalar::unscale_and_check(k.x, k.inv_scale, k.rounding) }
}

/// Accumulates values of any storage format into f32: `acc[i] = acc[i] +
/// widen(src[i])` (widening is exact; the add rounds to f32).
///
/// ```
/// use tessera_core::fp::f16;
/// use tessera_core::kernels::accumulate;
///
/// let mut acc = [0.5f32; 2];
/// accumulate(&[f16::ONE, f16::from_f32(-0.5)], &mut acc);
/// assert_eq!(acc, [1.5, 0.0]);
/// ```
///
/// # Panics
/// If `src` and `acc` differ in length.
pub fn accumulate<T: Element>(src: &[T], acc: &mut [f32]) {
    assert_eq!(src.len(), acc.len(), "accumulate: length mismatch");
    arch::dispatch(Accumulate { src, acc });
}

kernel! {
    Accumulate<'a, T: Element> { src: &'a [T], acc: &'a mut [f32] } -> ();
    run<S>(k) {
        let src = k.src;
        map::<S, f32>(
            k.acc,
            Rounding::Nearest,
            #[inline(always)] |at, acc| {
                arch::prefetch_ahead(src, at);
                acc + fp::load::<S, T>(&src[at..])
            },
            #[inline(always)] |at, acc| acc + src[at].load(),
        );
    }
    scalar(k) { scalar::accumulate(k.src, k.acc) }
}
