//! Element-wise kernels: axpy, scale, add, unscale-and-check, accumulate.

use wide::{f32x8, u32x8};

use crate::fp::{HalfFloat, Rounding};

use super::LANES;
use super::scalar::canonical;

/// [`canonical`] on eight lanes.
#[inline(always)]
fn canonical_x8(v: f32x8) -> f32x8 {
    v.is_nan().select(f32x8::splat(f32::NAN), v)
}

/// Lanes holding infinity or NaN, as an all-ones/all-zeros mask.
#[inline(always)]
fn non_finite_x8(v: f32x8) -> u32x8 {
    let exp = u32x8::splat(0x7f80_0000);
    (v.to_bits() & exp).simd_eq(exp)
}

/// `y[i] = y[i] + a * x[i]`: the product is rounded to f32, then added (no
/// fused multiply-add).
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn axpy(a: f32, x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "axpy: length mismatch");
    let (x8, xt) = x.as_chunks::<LANES>();
    let (y8, yt) = y.as_chunks_mut::<LANES>();
    let av = f32x8::splat(a);
    for (x, y) in x8.iter().zip(y8) {
        *y = canonical_x8(f32x8::from(*y) + av * f32x8::from(*x)).to_array();
    }
    for (x, y) in xt.iter().zip(yt) {
        *y = canonical(*y + a * *x);
    }
}

/// `x[i] = x[i] * a`.
pub fn scale(a: f32, x: &mut [f32]) {
    let (x8, xt) = x.as_chunks_mut::<LANES>();
    let av = f32x8::splat(a);
    for x in x8 {
        *x = canonical_x8(f32x8::from(*x) * av).to_array();
    }
    for x in xt {
        *x = canonical(*x * a);
    }
}

/// `y[i] = y[i] + x[i]`.
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn add(x: &[f32], y: &mut [f32]) {
    assert_eq!(x.len(), y.len(), "add: length mismatch");
    let (x8, xt) = x.as_chunks::<LANES>();
    let (y8, yt) = y.as_chunks_mut::<LANES>();
    for (x, y) in x8.iter().zip(y8) {
        *y = canonical_x8(f32x8::from(*y) + f32x8::from(*x)).to_array();
    }
    for (x, y) in xt.iter().zip(yt) {
        *y = canonical(*y + *x);
    }
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
#[must_use]
pub fn unscale_and_check(x: &mut [f32], inv_scale: f32) -> bool {
    let (x8, xt) = x.as_chunks_mut::<LANES>();
    let s = f32x8::splat(inv_scale);
    let mut bad = u32x8::ZERO;
    for x in x8 {
        let r = canonical_x8(f32x8::from(*x) * s);
        bad |= non_finite_x8(r);
        *x = r.to_array();
    }
    let mut found = bad.any();
    for x in xt {
        *x = canonical(*x * inv_scale);
        found |= !x.is_finite();
    }
    found
}

/// Accumulates 16-bit values into f32: `acc[i] = acc[i] + widen(src[i])`
/// (widening is exact; the add rounds to f32).
///
/// # Panics
/// If `src` and `acc` differ in length.
pub fn accumulate<H: HalfFloat>(src: &[H], acc: &mut [f32]) {
    assert_eq!(src.len(), acc.len(), "accumulate: length mismatch");
    let (s8, st) = src.as_chunks::<LANES>();
    let (a8, at) = acc.as_chunks_mut::<LANES>();
    for (s, a) in s8.iter().zip(a8) {
        *a = canonical_x8(f32x8::from(*a) + H::widen_x8(*s)).to_array();
    }
    for (s, a) in st.iter().zip(at) {
        *a = canonical(*a + s.to_f32());
    }
}

/// Applies `f` to eight widened lanes at a time (element offsets `0, 8,
/// ...`) and stores the results with `rounding`; the tail goes one element
/// at a time through `f1` and [`Rounding::round`].
#[inline(always)]
fn map_half<H: HalfFloat>(
    x: &mut [H],
    rounding: Rounding,
    mut f: impl FnMut(usize, f32x8) -> f32x8,
    mut f1: impl FnMut(usize, f32) -> f32,
) {
    let (x8, xt) = x.as_chunks_mut::<LANES>();
    let done = x8.len() * LANES;
    for (k, x) in x8.iter_mut().enumerate() {
        let at = k * LANES;
        *x = rounding.round_x8(canonical_x8(f(at, H::widen_x8(*x))), at);
    }
    for (k, x) in xt.iter_mut().enumerate() {
        let at = done + k;
        *x = rounding.round(canonical(f1(at, x.to_f32())), at);
    }
}

/// `y[i] = round(widen(y[i]) + a * widen(x[i]))`: f32 arithmetic (no fused
/// multiply-add), one rounding to `H` on the store; element `i` of `y` is
/// rounded at position `i` of `rounding`.
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn axpy_half<H: HalfFloat>(a: f32, x: &[H], y: &mut [H], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "axpy_half: length mismatch");
    let (x8, _) = x.as_chunks::<LANES>();
    let av = f32x8::splat(a);
    map_half(
        y,
        rounding,
        |at, y| y + av * H::widen_x8(x8[at / LANES]),
        |at, y| y + a * x[at].to_f32(),
    );
}

/// `x[i] = round(widen(x[i]) * a)`, element `i` rounded at position `i`.
pub fn scale_half<H: HalfFloat>(a: f32, x: &mut [H], rounding: Rounding) {
    let av = f32x8::splat(a);
    map_half(x, rounding, |_, x| x * av, |_, x| x * a);
}

/// `y[i] = round(widen(y[i]) + widen(x[i]))`, element `i` rounded at
/// position `i`.
///
/// # Panics
/// If `x` and `y` differ in length.
pub fn add_half<H: HalfFloat>(x: &[H], y: &mut [H], rounding: Rounding) {
    assert_eq!(x.len(), y.len(), "add_half: length mismatch");
    let (x8, _) = x.as_chunks::<LANES>();
    map_half(
        y,
        rounding,
        |at, y| y + H::widen_x8(x8[at / LANES]),
        |at, y| y + x[at].to_f32(),
    );
}

/// Unscales 16-bit gradients in place, `x[i] = round(widen(x[i]) *
/// inv_scale)`, and returns whether any *stored* value is infinite or NaN.
///
/// The product is computed in f32 and rounded once to `H`. Checking the
/// stored values also catches a finite product that the rounding takes to
/// infinity (only possible when `inv_scale > 1`); otherwise the result is
/// as for [`unscale_and_check`], which describes the relation to PyTorch.
#[must_use]
pub fn unscale_and_check_half<H: HalfFloat>(
    x: &mut [H],
    inv_scale: f32,
    rounding: Rounding,
) -> bool {
    let done = x.len() / LANES * LANES;
    let (x8, xt) = x.as_chunks_mut::<LANES>();
    let s = f32x8::splat(inv_scale);
    let mut bad = u32x8::ZERO;
    for (k, x) in x8.iter_mut().enumerate() {
        *x = rounding.round_x8(canonical_x8(H::widen_x8(*x) * s), k * LANES);
        bad |= non_finite_x8(H::widen_x8(*x));
    }
    let mut found = bad.any();
    for (k, x) in xt.iter_mut().enumerate() {
        *x = rounding.round(canonical(x.to_f32() * inv_scale), done + k);
        found |= !x.to_f32().is_finite();
    }
    found
}
