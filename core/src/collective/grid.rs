//! The numbers of [`Order::Free`](super::Order::Free): contributions
//! pre-rounded to a common grid per block of positions, summed as integers.
//!
//! Position `i` belongs to block `i / GRID_BLOCK`. A block's grid is
//! `2^g` with `g = max(E - GRID_BITS, -149)`, where `E` is the smallest
//! integer with `|x| < 2^E` for every finite value `x` of the block in
//! every contribution: [`block_exponent`] per rank, then the maximum over
//! ranks (a Max all-reduce, exact in any order). Each contribution is
//! rounded to a multiple of `2^g` (to nearest, ties to even: [`to_grid`]),
//! an integer below `2^GRID_BITS` in magnitude held in an f64; the sum of
//! up to [`MAX_CONTRIBUTIONS`] of them stays below `2^53`, so f64 addition
//! is exact and thus associative and commutative, and every order, grouping
//! and algorithm gives the same integer. [`from_grid`] rounds it once to
//! f32.
//!
//! - Exact: every contribution that is a multiple of `2^g`, which includes
//!   every value within `2^9` of the block's bound (`|x| >= 2^(E - 9)`)
//!   and every value of a block whose values are all below `2^-117`
//!   (subnormal range: `g = -149`). When all are, the result is the exact
//!   sum rounded once to f32 (round to nearest even).
//! - Rounded: smaller values, each to the grid (error at most `2^(g-1)`
//!   each), before the exact sum; so the result is `round_f32(sum_i
//!   round_grid(x_i))`, a function of the multiset of contributions alone.
//! - Non-finite: infinities and NaN are carried by f64 arithmetic itself
//!   (`inf + finite = inf`, `+inf + -inf = NaN`, NaN absorbs), which is
//!   order-free on them; a NaN result is the canonical `f32::NAN`.
//! - Zero: an exact zero sum is `+0.0` (`-0.0 + -0.0` too).

use crate::arch;
use crate::fp::Element;

/// Positions per block sharing one grid: 256 (a 1 KiB f32 block). The
/// exponent phase moves `ceil(n / 256)` f32 values: 1/256 of the data.
pub const GRID_BLOCK: usize = 256;

/// Bits of a contribution on the grid: `|x / 2^g| <= 2^32`.
pub const GRID_BITS: i32 = 32;

/// The most contributions whose grid sum is exact: `2^21`, so that
/// `2^21 * 2^32 = 2^53` (f64's integers).
pub const MAX_CONTRIBUTIONS: usize = 1 << 21;

/// The grid exponent of a block with no finite nonzero value: the f32
/// subnormal unit.
pub const MIN_GRID_EXPONENT: i32 = -149;

/// `1.5 * 2^52`: adding and subtracting it rounds an f64 below `2^51` in
/// magnitude to an integer, ties to even.
const ROUND: f64 = 6_755_399_441_055_744.0;

/// The number of blocks of a buffer of `n` positions.
///
/// ```
/// use tessera_core::collective::grid;
///
/// assert_eq!(grid::blocks(0), 0);
/// assert_eq!(grid::blocks(257), 2);
/// ```
#[must_use]
pub const fn blocks(n: usize) -> usize {
    n.div_ceil(GRID_BLOCK)
}

/// The grid exponent this rank's `values` (one block, or part of one)
/// ask for: `max(E - GRID_BITS, -149)` over its finite values, as an f32
/// (an exact small integer), so that the block's grid is the maximum of
/// the ranks' (a Max all-reduce).
///
/// ```
/// use tessera_core::collective::grid;
///
/// assert_eq!(grid::block_exponent(&[0.75f32, -3.0, f32::NAN]), 2.0 - 32.0); // |x| < 2^2
/// assert_eq!(grid::block_exponent(&[0.0f32, 1e-40]), -149.0);
/// ```
#[must_use]
#[inline(always)]
pub fn block_exponent<T: Element>(values: &[T]) -> f32 {
    exponent_of(biased_max(values))
}

/// The largest biased exponent field of the finite values.
#[inline(always)]
fn biased_max<T: Element>(values: &[T]) -> u32 {
    let mut biased = 0u32;
    for x in values {
        let e = (x.load().to_bits() >> 23) & 0xff;
        // Infinities and NaN (255) ask for nothing.
        biased = biased.max(if e == 0xff { 0 } else { e });
    }
    biased
}

/// The grid exponent of a block whose largest finite biased exponent
/// field is `biased`.
#[inline(always)]
fn exponent_of(biased: u32) -> f32 {
    // |x| < 2^(biased - 126) for a normal x.
    let g = (biased as i32 - 126 - GRID_BITS).max(MIN_GRID_EXPONENT);
    g as f32
}

/// Writes [`block_exponent`] of every block of `values` into `out`
/// (`blocks(values.len())` of them).
///
/// ```
/// use tessera_core::collective::grid;
///
/// let mut x = vec![0.0f32; 300];
/// x[299] = 1.0;
/// let mut e = [0.0f32; 2];
/// grid::block_exponents(&x, &mut e);
/// assert_eq!(e, [-149.0, 1.0 - 32.0]);
/// ```
///
/// # Panics
/// If `out` has not `blocks(values.len())` elements.
pub fn block_exponents<T: Element>(values: &[T], out: &mut [f32]) {
    assert_eq!(out.len(), blocks(values.len()), "one exponent per block");
    // Plain loops compiled for the detected backend's lanes: every
    // operation here is exact or correctly rounded, so any vector width
    // gives the scalar loop's bits.
    arch::with_backend_features(
        #[inline(always)]
        || {
            for (e, block) in out.iter_mut().zip(values.chunks(GRID_BLOCK)) {
                *e = block_exponent(block);
            }
        },
    );
}

/// The grid exponents that two contributions ask for together: for every
/// block that the positions `start..start + a.len()` touch,
/// [`block_exponent`] over `a`'s and `b`'s values at those positions
/// (the Max all-reduce of two ranks' exponents, for a block wholly in the
/// run), into `exponents[block]`.
///
/// ```
/// use tessera_core::collective::grid;
///
/// let mut e = [0.0f32; 2];
/// let a = vec![1.0f32; 300];
/// let mut b = vec![0.0f32; 300];
/// b[299] = 8.0;
/// grid::pair_exponents(&a, &b, 0, &mut e);
/// assert_eq!(e, [1.0 - 32.0, 4.0 - 32.0]);
/// ```
///
/// # Panics
/// If `a` and `b` differ in length, or `exponents` has no block for a
/// position.
pub fn pair_exponents<A: Element, B: Element>(
    a: &[A],
    b: &[B],
    start: usize,
    exponents: &mut [f32],
) {
    assert_eq!(a.len(), b.len(), "pair_exponents: lengths differ");
    exponents_by_block(
        start,
        a.len(),
        exponents,
        #[inline(always)]
        |run| biased_max(&a[run.clone()]).max(biased_max(&b[run])),
    );
}

/// [`pair_exponents`] of any number of contributions: for every block
/// that the positions `start..start + a.len()` touch, [`block_exponent`]
/// over `a`'s and all `others`' values at those positions, into
/// `exponents[block]` (the Max all-reduce of their exponents, for a block
/// wholly in the run).
///
/// ```
/// use tessera_core::collective::grid;
///
/// let (a, b, c) = ([1.0f32; 300], [0.5f32; 300], [-9.0f32; 300]);
/// let mut e = [0.0f32; 2];
/// grid::joint_exponents(&a, &[&b[..], &c[..]], 0, &mut e);
/// assert_eq!(e, [4.0 - 32.0; 2]); // |-9| < 2^4
/// ```
///
/// # Panics
/// If a contribution differs from `a` in length, or `exponents` has no
/// block for a position.
pub fn joint_exponents<A: Element, B: Element>(
    a: &[A],
    others: &[&[B]],
    start: usize,
    exponents: &mut [f32],
) {
    assert!(
        others.iter().all(|x| x.len() == a.len()),
        "joint_exponents: lengths differ"
    );
    exponents_by_block(
        start,
        a.len(),
        exponents,
        #[inline(always)]
        |run| {
            let each = others.iter().map(|x| biased_max(&x[run.clone()]));
            each.fold(biased_max(&a[run.clone()]), u32::max)
        },
    );
}

/// `exponents[block] = exponent_of(biased(run))` for the runs of
/// `start..start + len` that share a block (`run` relative to `start`).
#[inline(always)]
fn exponents_by_block(
    start: usize,
    len: usize,
    exponents: &mut [f32],
    biased: impl Fn(core::ops::Range<usize>) -> u32,
) {
    // Plain loops compiled for the detected backend's lanes (integer max:
    // any width gives the scalar loop's bits).
    arch::with_backend_features(
        #[inline(always)]
        || {
            let (mut at, end) = (start, start + len);
            while at < end {
                let stop = ((at / GRID_BLOCK + 1) * GRID_BLOCK).min(end);
                exponents[at / GRID_BLOCK] = exponent_of(biased(at - start..stop - start));
                at = stop;
            }
        },
    );
}

/// `2^k` as an f64, for `-1022 <= k <= 1023`.
#[inline(always)]
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// The grid exponent `g` of position `i`, from the blocks' exponents
/// (clamped to the range [`block_exponent`] gives).
///
/// ```
/// use tessera_core::collective::grid;
///
/// assert_eq!(grid::exponent_at(&[-149.0, -20.0], 256), -20);
/// ```
///
/// # Panics
/// If `exponents` has no block for `i`.
#[inline(always)]
#[must_use]
pub fn exponent_at(exponents: &[f32], i: usize) -> i32 {
    // Clamped: an exponent from a peer is data, never a reason to panic.
    (exponents[i / GRID_BLOCK] as i32).clamp(MIN_GRID_EXPONENT, 128 - GRID_BITS)
}

/// Calls `f(g, run)` for the runs of `start..start + len` that share a
/// block, `g` the block's grid exponent and `run` relative to `start`.
#[inline(always)]
fn by_block(
    exponents: &[f32],
    start: usize,
    len: usize,
    mut f: impl FnMut(i32, core::ops::Range<usize>),
) {
    // Plain loops compiled for the detected backend's lanes (exact or
    // correctly rounded operations: the scalar loop's bits).
    arch::with_backend_features(
        #[inline(always)]
        || {
            let mut at = start;
            let end = start + len;
            while at < end {
                let stop = ((at / GRID_BLOCK + 1) * GRID_BLOCK).min(end);
                f(exponent_at(exponents, at), at - start..stop - start);
                at = stop;
            }
        },
    );
}

/// `x` on the grid `2^g`: `round(x / 2^g)`, ties to even, as an f64
/// integer (infinities and NaN unchanged).
///
/// ```
/// use tessera_core::collective::grid;
///
/// assert_eq!(grid::round_to_grid(2.5f32, 0), 2.0); // ties to even
/// assert_eq!(grid::round_to_grid(0.75f32, -1), 2.0); // 1.5 -> 2
/// assert_eq!(grid::round_to_grid(f32::INFINITY, 3), f64::INFINITY);
/// ```
#[inline(always)]
#[must_use]
pub fn round_to_grid(x: f32, g: i32) -> f64 {
    // Exact: a power-of-two scaling well inside f64's range.
    let y = f64::from(x) * pow2(-g);
    (y + ROUND) - ROUND
}

/// Rounds `values`, the positions `start..start + values.len()` of the
/// buffer, to their blocks' grids (`exponents` from the Max all-reduce of
/// [`block_exponents`]) into `out`.
///
/// ```
/// use tessera_core::collective::grid;
///
/// let e = [-30.0f32]; // one block, |x| < 2^2
/// let mut q = [0.0f64; 2];
/// grid::to_grid(&[1.0f32, -0.5], &e, 0, &mut q);
/// assert_eq!(q, [2f64.powi(30), -2f64.powi(29)]);
/// ```
///
/// # Panics
/// If `out` and `values` differ in length, or a position has no exponent.
pub fn to_grid<T: Element>(values: &[T], exponents: &[f32], start: usize, out: &mut [f64]) {
    on_grid(
        out,
        values,
        exponents,
        start,
        #[inline(always)]
        |q, x| *q = x,
    );
}

/// `f(&mut out[k], round_to_grid(values[k]))` over the positions
/// `start..start + values.len()`.
#[inline(always)]
fn on_grid<T: Element>(
    out: &mut [f64],
    values: &[T],
    exponents: &[f32],
    start: usize,
    f: impl Fn(&mut f64, f64),
) {
    assert_eq!(values.len(), out.len(), "grid: lengths differ");
    by_block(
        exponents,
        start,
        values.len(),
        #[inline(always)]
        |g, run| {
            let scale = pow2(-g);
            for (q, x) in out[run.clone()].iter_mut().zip(&values[run]) {
                f(q, scaled(x.load(), scale));
            }
        },
    );
}

/// `acc[k] += round_to_grid(values[k])`: adds a contribution to a grid sum
/// (exact below [`MAX_CONTRIBUTIONS`] terms).
///
/// ```
/// use tessera_core::collective::grid;
///
/// let e = [-149.0f32];
/// let mut acc = [0.0f64; 1];
/// grid::add_to_grid(&mut acc, &[1e-45f32], &e, 0);
/// grid::add_to_grid(&mut acc, &[1e-45f32], &e, 0);
/// assert_eq!(grid::from_grid(acc[0], -149), f32::from_bits(2)); // subnormals exactly
/// ```
///
/// # Panics
/// As [`to_grid`].
pub fn add_to_grid<T: Element>(acc: &mut [f64], values: &[T], exponents: &[f32], start: usize) {
    on_grid(
        acc,
        values,
        exponents,
        start,
        #[inline(always)]
        |q, x| *q += x,
    );
}

/// A grid sum `q` (an integer below `2^53`, or non-finite) times `2^g`,
/// rounded once to f32 (to nearest even; NaN canonical).
///
/// ```
/// use tessera_core::collective::grid;
///
/// assert_eq!(grid::from_grid(3.0, -1), 1.5);
/// assert_eq!(grid::from_grid((1u64 << 40) as f64 + 1.0, -40), 1.0); // rounded once
/// assert!(grid::from_grid(f64::NAN, 0).is_nan());
/// ```
#[inline(always)]
#[must_use]
pub fn from_grid(q: f64, g: i32) -> f32 {
    // q 2^g is exact in f64 (g >= -149); one rounding to f32.
    let x = (q * pow2(g)) as f32;
    if x.is_nan() { f32::NAN } else { x }
}

/// `out[k] = from_grid(sums[k])` for the positions `start..start +
/// sums.len()`.
///
/// ```
/// use tessera_core::collective::grid;
///
/// let mut x = [0.0f32; 2];
/// grid::from_grid_into(&[4.0, -1.0], &[-2.0], 0, &mut x);
/// assert_eq!(x, [1.0, -0.25]);
/// ```
///
/// # Panics
/// As [`to_grid`].
pub fn from_grid_into(sums: &[f64], exponents: &[f32], start: usize, out: &mut [f32]) {
    assert_eq!(sums.len(), out.len(), "from_grid_into: lengths differ");
    by_block(
        exponents,
        start,
        sums.len(),
        #[inline(always)]
        |g, run| {
            let unscale = pow2(g);
            for (x, &q) in out[run.clone()].iter_mut().zip(&sums[run]) {
                *x = unscaled(q, unscale);
            }
        },
    );
}

/// Two single contributions summed on the grid and rounded once, in place
/// and in one pass (what a reduction of two ranks' own values that
/// finishes at once computes): `a[k] = from_grid(round_to_grid(a[k]) +
/// round_to_grid(b[k]))` for the positions `start..start + a.len()`, in
/// f32 alone (each value rounded to the grid is an f32).
///
/// ```
/// use tessera_core::collective::grid;
///
/// let mut a = [1.0f32, 1e30];
/// grid::pair_sum_in_place(&mut a, &[0.5f32, 1.0], &[-30.0, -30.0], 0);
/// assert_eq!(a, [1.5, 1e30]);
/// ```
///
/// # Panics
/// If `a` and `b` differ in length, or a position has no exponent.
pub fn pair_sum_in_place<B: Element>(a: &mut [f32], b: &[B], exponents: &[f32], start: usize) {
    assert_eq!(a.len(), b.len(), "pair_sum_in_place: lengths differ");
    by_block(
        exponents,
        start,
        a.len(),
        #[inline(always)]
        |g, run| {
            let unit = grid_unit(g);
            for (x, b) in a[run.clone()].iter_mut().zip(&b[run]) {
                *x = pair(*x, b.load(), unit);
            }
        },
    );
}

/// [`pair_sum_in_place`] of any number of contributions: `a[k] =
/// from_grid(round_to_grid(a[k]) + sum_j round_to_grid(others[j][k]))` for
/// the positions `start..start + a.len()`, the integers summed exactly in
/// f64 block by block in cache (one pass over every contribution, no grid
/// sums in memory). The same bits as [`to_grid`], [`add_to_grid`] and
/// [`from_grid_into`] in any order.
///
/// ```
/// use tessera_core::collective::grid;
///
/// let mut a = [1.0f32, 3.0];
/// grid::sum_in_place(&mut a, &[&[0.5f32, -1.0][..], &[0.25, 2.0][..]], &[-30.0], 0);
/// assert_eq!(a, [1.75, 4.0]); // one block, |x| < 2^2
/// ```
///
/// # Panics
/// If a contribution differs from `a` in length, there are
/// [`MAX_CONTRIBUTIONS`] or more, or a position has no exponent.
pub fn sum_in_place<B: Element>(a: &mut [f32], others: &[&[B]], exponents: &[f32], start: usize) {
    assert!(
        others.iter().all(|b| b.len() == a.len()),
        "sum_in_place: lengths differ"
    );
    assert!(others.len() < MAX_CONTRIBUTIONS, "sum_in_place: too many");
    by_block(
        exponents,
        start,
        a.len(),
        #[inline(always)]
        |g, run| {
            let (scale, unscale) = (pow2(-g), pow2(g));
            let mut sums = [0.0f64; GRID_BLOCK];
            let sums = &mut sums[..run.len()];
            for (q, x) in sums.iter_mut().zip(&a[run.clone()]) {
                *q = scaled(*x, scale);
            }
            for b in others {
                for (q, x) in sums.iter_mut().zip(&b[run.clone()]) {
                    *q += scaled(x.load(), scale);
                }
            }
            for (x, &q) in a[run].iter_mut().zip(sums.iter()) {
                *x = unscaled(q, unscale);
            }
        },
    );
}

/// The bits of `2^(g + 23)`, the least f32 whose unit in the last place
/// is the grid `2^g` (a normal f32 for every `g` in `-149..=96`).
#[inline(always)]
fn grid_unit(g: i32) -> u32 {
    ((g + 23 + 127) as u32) << 23
}

/// `from_grid(round_to_grid(a) + round_to_grid(b))` for the grid whose
/// [`grid_unit`] is `unit`, in f32 alone: each value rounded to the grid
/// is an f32 ([`grid_f32`]), so their sum rounded once to f32 is one f32
/// addition (correctly rounded, overflowing to infinity at the same bound
/// as the exact sum's rounding; a sum of multiples of `2^-149` in the
/// subnormal range is exact). The same bits as summing the grid integers
/// in f64, without converting to and from f64; a NaN is canonical.
#[inline(always)]
fn pair(a: f32, b: f32, unit: u32) -> f32 {
    let x = grid_f32(a, unit) + grid_f32(b, unit);
    if x.is_nan() { f32::NAN } else { x }
}

/// `x` rounded to the grid of [`grid_unit`] `unit` (`2^g`), as an f32:
/// `x` itself from `2^(g + 23)` up (whose unit in the last place is at
/// least `2^g`: on the grid; infinities and NaN too), else `(x + c) - c`
/// with `c = ±2^(g + 23)` of `x`'s sign, whose sum lies in `[2^(g + 23),
/// 2^(g + 24)]` in magnitude, where f32's unit is `2^g`: rounded to the
/// grid, ties to even (`c / 2^g = 2^23` is even), then exactly back; `±0`
/// gives `+0`, as the grid's integers do.
#[inline(always)]
fn grid_f32(x: f32, unit: u32) -> f32 {
    let bits = x.to_bits();
    if bits & 0x7fff_ffff >= unit {
        x
    } else {
        let c = f32::from_bits(unit | (bits & 0x8000_0000));
        (x + c) - c
    }
}

/// [`round_to_grid`] with the block's `2^-g`.
#[inline(always)]
fn scaled(x: f32, scale: f64) -> f64 {
    (f64::from(x) * scale + ROUND) - ROUND
}

/// [`from_grid`] with the block's `2^g`.
#[inline(always)]
fn unscaled(q: f64, unscale: f64) -> f32 {
    let x = (q * unscale) as f32;
    if x.is_nan() { f32::NAN } else { x }
}

#[cfg(test)]
mod tests;
