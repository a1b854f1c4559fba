//! Element-wise kernels: axpy, scale, add, unscale-and-check, accumulate.

use crate::arch::{self, F32s, Real, Simd, U32s, kernel};
use crate::fp::{self, HalfFloat, Rounding};

use super::scalar::{self, canonical};

/// Lanes holding infinity or NaN, as a mask.
#[inline(always)]
fn non_finite<S: Simd>(v: S::F) -> S::U {
    let exp = S::U::splat(0x7f80_0000);
    (v.to_bits() & exp).simd_eq(exp)
}

/// `y[i] = canonical(f(x[i], y[i]))`, `S::LANES` at a time, the tail one
/// at a time through `f1`.
#[inline(always)]
fn map2<S: Simd>(
    x: &[f32],
    y: &mut [f32],
    f: impl Fn(S::F, S::F) -> S::F,
    f1: impl Fn(f32, f32) -> f32,
) {
    let body = arch::each_vector::<S>(
        x.len(),
        #[inline(always)]
        |at| {
            arch::prefetch_ahead(x, at);
            arch::prefetch_ahead(y, at);
            let v = f(S::F::load(&x[at..]), S::F::load(&y[at..]));
            v.canonical().store(&mut y[at..]);
        },
    );
    for (x, y) in x[body..].iter().zip(&mut y[body..]) {
        *y = canonical(f1(*x, *y));
    }
}

/// `y[i] = y[i] + a * x[i]`: the product is rounded to f32, then added (no
/// fused multiply-add).
///
/// ```
/// use tessera_core::kernels::axpy;
///
/// let mut y = [1.0f32, 1.0];
/// axpy(0.5, &[2.0, 4.0], &mut y);
/// assert_eq!(y, [2.0, 3.0]);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    arch::dispatch(Axpy { a, x, y });
}

kernel! {
    Axpy<'a> { a: f32, x: &'a [f32], y: &'a mut [f32] } -> ();
    run<S>(k) {
        let av = S::F::splat(k.a);
        map2::<S>(k.x, k.y, #[inline(always)] |x, y| y + av * x, #[inline(always)] |x, y| y + k.a * x);
    }
    scalar(k) { scalar::axpy(k.a, k.x, k.y) }
}

/// `x[i] = x[i] * a`.
///
/// ```
/// use tessera_core::kernels::scale;
///
/// let mut x = [1.0f32, -2.0];
/// scale(0.25, &mut x);
/// assert_eq!(x, [0.25, -0.5]);
/// ```
pub fn scale(a: f32, x: &mut [f32]) {
    arch::dispatch(Scale { a, x });
}

kernel! {
    Scale<'a> { a: f32, x: &'a mut [f32] } -> ();
    run<S>(k) {
        let (av, x) = (S::F::splat(k.a), k.x);
        let body = arch::each_vector::<S>(x.len(), #[inline(always)] |at| {
            arch::prefetch_ahead(x, at);
            (S::F::load(&x[at..]) * av).canonical().store(&mut x[at..]);
        });
        for x in &mut x[body..] {
            *x = canonical(*x * k.a);
        }
    }
    scalar(k) { scalar::scale(k.a, k.x) }
}

/// `y[i] = y[i] + x[i]`.
///
/// ```
/// use tessera_core::kernels::add;
///
/// let mut y = [1.0f32, 2.0];
/// add(&[0.5, 0.5], &mut y);
/// assert_eq!(y, [1.5, 2.5]);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn add(x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "add: length mismatch");
    arch::dispatch(Add { x, y });
}

kernel! {
    Add<'a> { x: &'a [f32], y: &'a mut [f32] } -> ();
    run<S>(k) { map2::<S>(k.x, k.y, #[inline(always)] |x, y| y + x, #[inline(always)] |x, y| y + x) }
    scalar(k) { scalar::add(k.x, k.y) }
}

/// Unscales gradients in place, `x[i] = x[i] * inv_scale`, and returns
/// whether any unscaled value is infinite or NaN (GradScaler's
/// `found_inf`).
///
/// The check is on the results. An infinite or NaN input always gives a
/// non-finite result, so this flags everything PyTorch's
/// `_amp_foreach_non_finite_check_and_unscale_` flags (which tests the
/// inputs), and the two agree whenever `inv_scale` is finite and at most 1,
/// as it is for a loss scale of at least 1: then a finite input cannot
/// overflow. With `inv_scale > 1` (a scale below 1) a finite input can
/// overflow to infinity, and with a non-finite `inv_scale` any input can
/// become non-finite; this kernel reports those too, so an optimizer step
/// never consumes an infinite gradient, where PyTorch would not report them.
///
/// ```
/// use tessera_core::kernels::unscale_and_check;
///
/// let mut g = [1024.0f32, 512.0];
/// assert!(!unscale_and_check(&mut g, 1.0 / 1024.0));
/// assert_eq!(g, [1.0, 0.5]);
/// assert!(unscale_and_check(&mut [f32::INFINITY], 0.5));
/// ```
#[must_use]
pub fn unscale_and_check(x: &mut [f32], inv_scale: f32) -> bool {
    arch::dispatch(Unscale { x, inv_scale })
}

kernel! {
    Unscale<'a> { x: &'a mut [f32], inv_scale: f32 } -> bool;
    run<S>(k) {
        let (s, x) = (S::F::splat(k.inv_scale), k.x);
        let mut bad = S::U::splat(0);
        let body = arch::each_vector::<S>(x.len(), #[inline(always)] |at| {
            arch::prefetch_ahead(x, at);
            let r = (S::F::load(&x[at..]) * s).canonical();
            bad |= non_finite::<S>(r);
            r.store(&mut x[at..]);
        });
        let mut found = bad.any();
        for x in &mut x[body..] {
            *x = canonical(*x * k.inv_scale);
            found |= !x.is_finite();
        }
        found
    }
    scalar(k) { scalar::unscale_and_check(k.x, k.inv_scale) }
}

/// Accumulates 16-bit values into f32: `acc[i] = acc[i] + widen(src[i])`
/// (widening is exact; the add rounds to f32).
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
pub fn accumulate<H: HalfFloat>(src: &[H], acc: &mut [f32]) {
    assert_eq!(src.len(), acc.len(), "accumulate: length mismatch");
    arch::dispatch(Accumulate { src, acc });
}

kernel! {
    Accumulate<'a, H: HalfFloat> { src: &'a [H], acc: &'a mut [f32] } -> ();
    run<S>(k) {
        let (src, acc) = (k.src, k.acc);
        let body = arch::each_vector::<S>(src.len(), #[inline(always)] |at| {
            arch::prefetch_ahead(src, at);
            arch::prefetch_ahead(acc, at);
            let sum = S::F::load(&acc[at..]) + fp::load::<S, H>(&src[at..]);
            sum.canonical().store(&mut acc[at..]);
        });
        for (s, a) in src[body..].iter().zip(&mut acc[body..]) {
            *a = canonical(*a + s.to_f32());
        }
    }
    scalar(k) { scalar::accumulate(k.src, k.acc) }
}

/// Applies `f` to `S::LANES` widened lanes at a time (element offsets `0,
/// S::LANES, ...`) and stores the results with `rounding`; the tail goes
/// one element at a time through `f1` and [`Rounding::round`].
#[inline(always)]
fn map_half<S: Simd, H: HalfFloat>(
    x: &mut [H],
    rounding: Rounding,
    f: impl Fn(usize, S::F) -> S::F,
    f1: impl Fn(usize, f32) -> f32,
) {
    let done = arch::each_vector::<S>(
        x.len(),
        #[inline(always)]
        |at| {
            arch::prefetch_ahead(x, at);
            let v = f(at, fp::load::<S, H>(&x[at..]));
            fp::store::<S, H>(v, rounding, at, &mut x[at..]);
        },
    );
    for (k, x) in x[done..].iter_mut().enumerate() {
        let at = done + k;
        *x = rounding.round(canonical(f1(at, x.to_f32())), at);
    }
}

/// `y[i] = round(widen(y[i]) + a * widen(x[i]))`: f32 arithmetic (no fused
/// multiply-add), one rounding to `H` on the store; element `i` of `y` is
/// rounded at position `i` of `rounding`.
///
/// ```
/// use tessera_core::fp::{f16, Rounding};
/// use tessera_core::kernels::axpy_half;
///
/// let mut y = [f16::ONE; 2];
/// axpy_half(2.0, &[f16::from_f32(0.5); 2], &mut y, Rounding::Nearest);
/// assert_eq!(y, [f16::from_f32(2.0); 2]);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn axpy_half<H: HalfFloat>(a: f32, x: &[H], y: &mut [H], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "axpy_half: length mismatch");
    arch::dispatch(AxpyHalf { a, x, y, rounding });
}

kernel! {
    AxpyHalf<'a, H: HalfFloat> { a: f32, x: &'a [H], y: &'a mut [H], rounding: Rounding } -> ();
    run<S>(k) {
        let (a, x) = (k.a, k.x);
        let av = S::F::splat(a);
        map_half::<S, H>(
            k.y,
            k.rounding,
            #[inline(always)] |at, y| y + av * fp::load::<S, H>(&x[at..]),
            #[inline(always)] |at, y| y + a * x[at].to_f32(),
        );
    }
    scalar(k) { scalar::axpy_half(k.a, k.x, k.y, k.rounding) }
}

/// `x[i] = round(widen(x[i]) * a)`, element `i` rounded at position `i`.
///
/// ```
/// use tessera_core::fp::{bf16, Rounding};
/// use tessera_core::kernels::scale_half;
///
/// let mut x = [bf16::from_f32(3.0)];
/// scale_half(0.5, &mut x, Rounding::Nearest);
/// assert_eq!(x, [bf16::from_f32(1.5)]);
/// ```
pub fn scale_half<H: HalfFloat>(a: f32, x: &mut [H], rounding: Rounding) {
    arch::dispatch(ScaleHalf { a, x, rounding });
}

kernel! {
    ScaleHalf<'a, H: HalfFloat> { a: f32, x: &'a mut [H], rounding: Rounding } -> ();
    run<S>(k) {
        let (a, av) = (k.a, S::F::splat(k.a));
        map_half::<S, H>(k.x, k.rounding, #[inline(always)] |_, x| x * av, #[inline(always)] |_, x| x * a);
    }
    scalar(k) { scalar::scale_half(k.a, k.x, k.rounding) }
}

/// `y[i] = round(widen(y[i]) + widen(x[i]))`, element `i` rounded at
/// position `i`.
///
/// ```
/// use tessera_core::fp::{f16, Rounding};
/// use tessera_core::kernels::add_half;
///
/// let mut y = [f16::ONE];
/// add_half(&[f16::ONE], &mut y, Rounding::Nearest);
/// assert_eq!(y, [f16::from_f32(2.0)]);
/// ```
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn add_half<H: HalfFloat>(x: &[H], y: &mut [H], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "add_half: length mismatch");
    arch::dispatch(AddHalf { x, y, rounding });
}

kernel! {
    AddHalf<'a, H: HalfFloat> { x: &'a [H], y: &'a mut [H], rounding: Rounding } -> ();
    run<S>(k) {
        let x = k.x;
        map_half::<S, H>(
            k.y,
            k.rounding,
            #[inline(always)] |at, y| y + fp::load::<S, H>(&x[at..]),
            #[inline(always)] |at, y| y + x[at].to_f32(),
        );
    }
    scalar(k) { scalar::add_half(k.x, k.y, k.rounding) }
}

/// Unscales 16-bit gradients in place, `x[i] = round(widen(x[i]) *
/// inv_scale)`, and returns whether any *stored* value is infinite or NaN.
///
/// The product is computed in f32 and rounded once to `H`. Checking the
/// stored values also catches a finite product that the rounding takes to
/// infinity (only possible when `inv_scale > 1`); otherwise the result is
/// as for [`unscale_and_check`], which describes the relation to PyTorch.
///
/// ```
/// use tessera_core::fp::{f16, Rounding};
/// use tessera_core::kernels::unscale_and_check_half;
///
/// let mut g = [f16::from_f32(2048.0), f16::INFINITY];
/// assert!(unscale_and_check_half(&mut g, 1.0 / 1024.0, Rounding::Nearest));
/// assert_eq!(g[0], f16::from_f32(2.0));
/// ```
#[must_use]
pub fn unscale_and_check_half<H: HalfFloat>(
    x: &mut [H],
    inv_scale: f32,
    rounding: Rounding,
) -> bool {
    arch::dispatch(UnscaleHalf {
        x,
        inv_scale,
        rounding,
    })
}

kernel! {
    UnscaleHalf<'a, H: HalfFloat> { x: &'a mut [H], inv_scale: f32, rounding: Rounding } -> bool;
    run<S>(k) {
        let (s, x, rounding) = (S::F::splat(k.inv_scale), k.x, k.rounding);
        let mut bad = S::U::splat(0);
        let done = arch::each_vector::<S>(x.len(), #[inline(always)] |at| {
            arch::prefetch_ahead(x, at);
            let v = fp::load::<S, H>(&x[at..]) * s;
            fp::store::<S, H>(v, rounding, at, &mut x[at..]);
            bad |= non_finite::<S>(fp::load::<S, H>(&x[at..]));
        });
        let mut found = bad.any();
        for (i, x) in x[done..].iter_mut().enumerate() {
            *x = k.rounding.round(canonical(x.to_f32() * k.inv_scale), done + i);
            found |= !x.to_f32().is_finite();
        }
        found
    }
    scalar(k) { scalar::unscale_and_check_half(k.x, k.inv_scale, k.rounding) }
}
