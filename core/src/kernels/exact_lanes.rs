//! The fast paths of the exact reductions: f64 lane sums that are exact in
//! any order, guarded by one test on the values' exponent fields
//! ([`Fields`]), shared by sums, dot products and matrix products.
//!
//! A part of the input is summed in `N` f64 lanes of at most [`TERMS`]
//! terms each (lane `j` takes terms `j`, `j + N`, ...), while the same pass
//! gathers the largest magnitude and the smallest nonzero one. Only then is
//! the test made: when it holds, every lane sum was exact and the lanes'
//! totals are added to the exact state as integers; when it fails, the
//! lanes are dropped and the caller adds the part block by block, or term
//! by term. Either way the state is the exact one, so the result is the
//! scalar twin's, bit for bit, on every backend.
//!
//! # Why the lane sums are exact
//!
//! An f32 with exponent field `f` (`f = 1` for subnormals, whose unit is the
//! smallest normals') is `a 2^(f - 150)` with an integer `a < 2^24`. An f64
//! addition is exact when both operands and the result are integer
//! multiples of some `2^u` below `2^(u + 53)` in magnitude.
//!
//! - Values ([`sum_part`]): if the part's fields lie in `[b, t]` with `t - b
//!   <= 21` ([`SUM_SPAN`]), every value is a multiple of `u = 2^(b - 150)`
//!   below `2^(t - 126) <= 2^45 u`, so every partial sum of at most `2^8`
//!   of them is a multiple of `u` below `2^53 u`: exact, in any order.
//! - Products ([`dot_part`]): `x y` is a multiple of `2^(fx + fy - 300)`
//!   below `2^(fx + fy - 252)`. With `t` and `b` the sums of the two
//!   operands' largest and smallest (nonzero) fields, and a guess `T >= t`,
//!   the grid is `2^g`, `g = T - 297`, so `|z| < 2^(g + 45)` for every
//!   product `z`. Adding and subtracting `R = 1.5 * 2^(g + 52)` rounds `z`
//!   to `q`, a multiple of `2^g` (`z + R` lies in `[2^(g + 52), 2^(g + 53))`,
//!   whose spacing is `2^g`; the subtraction is exact by Sterbenz), with
//!   `|q| <= 2^(g + 45)`: at most `2^8` of them sum below `2^(g + 53)`,
//!   exactly. The rest `z - q` is exact (at most `2^(g - 1)`, a multiple of
//!   `2^(b - 300)`, or zero when `z` is a multiple of `2^g`), and at most
//!   `2^8` of them sum below `2^(g + 7)`, which is `2^53` units of `2^(b -
//!   300)` when `T - b <= 43` ([`DOT_SPAN`]): exact too.
//!
//! A lane total is then an integer number of units below `2^53`, converted
//! to `i64` exactly; at most 16 lanes sum below `2^57`.

use super::ExactSum;
use super::exact::{DotFixed as DotState, SumFixed as SumState};
use super::fixed::Fixed;

/// Terms per f64 lane sum: `2^8` integers below `2^45` sum below `2^53`.
pub(super) const TERMS: usize = 256;
/// Lanes of a sum's pass, and the values of one part.
const SUM_LANES: usize = 16;
pub(super) const SUM_PART: usize = SUM_LANES * TERMS;
/// Lanes of a dot product's pass (two sums each), and the products of one
/// part.
const DOT_LANES: usize = 8;
pub(super) const DOT_PART: usize = DOT_LANES * TERMS;
/// The widest span of exponent fields whose values sum exactly in a lane.
const SUM_SPAN: i32 = 21;
/// The widest span between the guessed bound and the products' smallest
/// unit (both as sums of two fields) for exact lane sums.
const DOT_SPAN: i32 = 43;
/// How far above the last part's bound the next part's guess lies: room
/// for the largest magnitude to grow between parts.
pub(super) const MARGIN: i32 = 2;

/// `2^k` as an f64, for `-1022 <= k <= 1023`.
#[inline(always)]
fn pow2(k: i32) -> f64 {
    f64::from_bits(((k + 1023) as u64) << 52)
}

/// The exponent field of a magnitude pattern, subnormals' as 1.
#[inline(always)]
fn field(abs: u32) -> i32 {
    ((abs >> 23) as i32).max(1)
}

/// What a set of f32 values was, for the exactness test.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extent {
    /// Every value is zero.
    Zero,
    /// Finite, some nonzero: the largest field and the smallest nonzero
    /// value's.
    Finite { top: i32, bottom: i32 },
    /// An infinity or a NaN.
    Special,
}

/// The largest magnitude pattern and the smallest nonzero one, gathered in
/// `N` lanes.
#[derive(Clone, Copy)]
struct Fields<const N: usize> {
    hi: [u32; N],
    /// The smallest magnitude minus one: zero wraps to `u32::MAX`, which
    /// is no minimum.
    lo: [u32; N],
}

impl<const N: usize> Fields<N> {
    const NONE: Self = Self {
        hi: [0; N],
        lo: [u32::MAX; N],
    };

    #[inline(always)]
    fn take(&mut self, c: &[f32; N]) {
        for ((hi, lo), v) in self.hi.iter_mut().zip(&mut self.lo).zip(c) {
            let abs = v.to_bits() & 0x7fff_ffff;
            *hi = (*hi).max(abs);
            *lo = (*lo).min(abs.wrapping_sub(1));
        }
    }

    #[inline(always)]
    fn extent(&self) -> Extent {
        let hi = self.hi.into_iter().max().unwrap_or(0);
        let lo = self
            .lo
            .into_iter()
            .min()
            .unwrap_or(u32::MAX)
            .wrapping_add(1);
        if hi >= 0x7f80_0000 {
            Extent::Special
        } else if lo == 0 {
            Extent::Zero
        } else {
            Extent::Finite {
                top: field(hi),
                bottom: field(lo),
            }
        }
    }
}

/// `f(lanes)` for `x` in chunks of `N`, the last padded with zeros (a zero
/// changes no sum and no field test).
#[inline(always)]
fn each_chunk<const N: usize>(x: &[f32], mut f: impl FnMut(&[f32; N])) {
    let chunks = x.chunks_exact(N);
    let rest = chunks.remainder();
    for c in chunks {
        f(c.try_into().expect("N lanes"));
    }
    if !rest.is_empty() {
        let mut last = [0.0f32; N];
        last[..rest.len()].copy_from_slice(rest);
        f(&last);
    }
}

/// `f(x lanes, y lanes)` for `x` and `y` (of one length) in chunks of
/// `N`, the last padded with zeros.
#[inline(always)]
fn each_pair<const N: usize>(x: &[f32], y: &[f32], mut f: impl FnMut(&[f32; N], &[f32; N])) {
    let (xs, ys) = (x.chunks_exact(N), y.chunks_exact(N));
    let (rx, ry) = (xs.remainder(), ys.remainder());
    for (c, d) in xs.zip(ys) {
        f(
            c.try_into().expect("N lanes"),
            d.try_into().expect("N lanes"),
        );
    }
    if !rx.is_empty() {
        let (mut lx, mut ly) = ([0.0f32; N], [0.0f32; N]);
        lx[..rx.len()].copy_from_slice(rx);
        ly[..ry.len()].copy_from_slice(ry);
        f(&lx, &ly);
    }
}

/// The lanes' total in units of `2^unit`: each lane an integer number of
/// units below `2^53` (so the conversions are exact).
#[inline(always)]
fn lane_total<const N: usize>(lanes: &[f64; N], unit: i32) -> i64 {
    let scale = pow2(-unit);
    lanes.iter().map(|&l| (l * scale) as i64).sum()
}

/// Adds the values of `x` (at most [`SUM_PART`]) to `state` and returns
/// true if they pass the exactness test; otherwise returns false and leaves
/// `state` unchanged. `prefetch(at)` runs before the block at `at`.
#[inline(always)]
pub(super) fn sum_part(state: &mut SumState, x: &[f32], prefetch: impl Fn(usize)) -> bool {
    let mut acc = [0.0f64; SUM_LANES];
    let mut fields = Fields::<SUM_LANES>::NONE;
    for (b, block) in x.chunks(TERMS).enumerate() {
        prefetch(b * TERMS);
        each_chunk(
            block,
            #[inline(always)]
            |c: &[f32; SUM_LANES]| {
                for j in 0..SUM_LANES {
                    acc[j] += f64::from(c[j]);
                }
                fields.take(c);
            },
        );
    }
    match fields.extent() {
        Extent::Zero => true,
        Extent::Finite { top, bottom } if top - bottom <= SUM_SPAN => {
            let unit = bottom - 150;
            state.add_scaled(lane_total(&acc, unit), unit);
            true
        }
        _ => false,
    }
}

/// Adds the values of `x` exactly: [`sum_part`] block by block, and a
/// block that fails the test value by value.
#[inline(always)]
pub(super) fn add_values(state: &mut SumState, x: &[f32]) {
    for block in x.chunks(TERMS) {
        if !sum_part(state, block, |_| {}) {
            add_each(state, block.len(), |i| f64::from(block[i]));
        }
    }
}

/// The outcome of a [`dot_part`]: whether it added the products, and the
/// sum of the operands' largest fields (none if an operand is all zeros
/// or not finite).
pub(super) struct Pass {
    pub(super) added: bool,
    pub(super) top: Option<i32>,
}

/// Adds the products `x[i] * y[i]` (at most [`DOT_PART`]) to `state` on
/// the grids of `guess` (a bound on the sum of the operands' largest
/// fields) if the part passes the exactness test; otherwise leaves `state`
/// unchanged. `prefetch(at)` runs before the block at `at`.
#[inline(always)]
pub(super) fn dot_part(
    state: &mut DotState,
    x: &[f32],
    y: &[f32],
    guess: i32,
    prefetch: impl Fn(usize),
) -> Pass {
    let g = guess - 297;
    let round = 1.5 * pow2(g + 52);
    let (mut high, mut low) = ([0.0f64; DOT_LANES], [0.0f64; DOT_LANES]);
    let (mut fx, mut fy) = (Fields::<DOT_LANES>::NONE, Fields::<DOT_LANES>::NONE);
    for (b, (xb, yb)) in x.chunks(TERMS).zip(y.chunks(TERMS)).enumerate() {
        prefetch(b * TERMS);
        each_pair(
            xb,
            yb,
            #[inline(always)]
            |c: &[f32; DOT_LANES], d: &[f32; DOT_LANES]| {
                for j in 0..DOT_LANES {
                    let z = f64::from(c[j]) * f64::from(d[j]);
                    let q = (z + round) - round;
                    high[j] += q;
                    low[j] += z - q;
                }
                fx.take(c);
                fy.take(d);
            },
        );
    }
    match (fx.extent(), fy.extent()) {
        (Extent::Special, _) | (_, Extent::Special) => Pass {
            added: false,
            top: None,
        },
        (Extent::Zero, _) | (_, Extent::Zero) => Pass {
            added: true,
            top: None,
        },
        (
            Extent::Finite {
                top: tx,
                bottom: bx,
            },
            Extent::Finite {
                top: ty,
                bottom: by,
            },
        ) => {
            let (top, bottom) = (tx + ty, bx + by);
            let added = top <= guess && guess - bottom <= DOT_SPAN;
            if added {
                state.add_scaled(lane_total(&high, g), g);
                state.add_scaled(lane_total(&low, bottom - 300), bottom - 300);
            }
            Pass {
                added,
                top: Some(top),
            }
        }
    }
}

/// The sum of the largest exponent fields of `x` and `y`: the bound
/// [`dot_part`] needs (any value serves when an operand is all zeros).
#[inline(always)]
pub(super) fn products_top(x: &[f32], y: &[f32]) -> i32 {
    let (mut hx, mut hy) = ([0u32; DOT_LANES], [0u32; DOT_LANES]);
    each_pair(
        x,
        y,
        #[inline(always)]
        |c: &[f32; DOT_LANES], d: &[f32; DOT_LANES]| {
            for j in 0..DOT_LANES {
                hx[j] = hx[j].max(c[j].to_bits() & 0x7fff_ffff);
                hy[j] = hy[j].max(d[j].to_bits() & 0x7fff_ffff);
            }
        },
    );
    let top = |h: [u32; DOT_LANES]| field(h.into_iter().max().unwrap_or(0));
    top(hx) + top(hy)
}

/// Adds the products `x[i] * y[i]` exactly: [`dot_part`] block by block
/// with each block's own bound, and a block that fails the test product
/// by product.
#[inline(always)]
pub(super) fn add_products(state: &mut DotState, x: &[f32], y: &[f32]) {
    for (xb, yb) in x.chunks(TERMS).zip(y.chunks(TERMS)) {
        if !dot_part(state, xb, yb, products_top(xb, yb), |_| {}).added {
            add_each(state, xb.len(), |i| f64::from(xb[i]) * f64::from(yb[i]));
        }
    }
}

/// Columns of a [`columns_part`]: one f64 lane, and one state, each.
pub(super) const COLUMNS: usize = 16;
/// The widest span of exponent fields of a column's values for the two
/// lane sums of [`columns_part`].
const COLUMN_SPAN: i32 = 67;

/// Adds the column sums of `rows` rows (at most [`TERMS`]) of up to
/// [`COLUMNS`] values, `row(r)` (a narrower block padded with zeros), to
/// `states` (one per column) and returns, as bits, the columns it could
/// not sum exactly in lanes (an infinity or NaN, or a span of fields over
/// [`COLUMN_SPAN`]), which the caller adds value by value.
///
/// Each column is its own lane of `rows` values, each a multiple of `2^(b
/// - 150)` below `2^(t - 126)` (`t`, `b` the column's largest and smallest
/// nonzero fields, from a first pass). With `g = max(t - 171, b - 150)`,
/// `q` (`z` rounded to a multiple of `2^g` by adding and subtracting `1.5
/// * 2^(g + 52)`) is below `2^(g + 45)` and the rest `z - q` (exact) at
/// most `2^(g - 1)`: at most `2^8` of each sum exactly, the first below
/// `2^53` units of `2^g`, the second below `2^53` units of `2^(b - 150)`
/// when `t - b <= 67`. When `t - b <= 21`, `g = b - 150`, every `q` is
/// `z` and the rest is zero: one integer per column.
#[inline(always)]
pub(super) fn columns_part(
    states: &mut [ExactSum],
    rows: usize,
    row: impl Fn(usize) -> [f32; COLUMNS],
) -> u32 {
    let mut fields = Fields::<COLUMNS>::NONE;
    for r in 0..rows {
        fields.take(&row(r));
    }
    let (mut grid, mut round, mut skip) = ([0i32; COLUMNS], [0.0f64; COLUMNS], 0u32);
    let mut units = [0i32; COLUMNS];
    for j in 0..COLUMNS {
        let (hi, lo) = (fields.hi[j], fields.lo[j].wrapping_add(1));
        let (top, bottom) = (field(hi), field(lo));
        if hi >= 0x7f80_0000 || (lo != 0 && top - bottom > COLUMN_SPAN) {
            skip |= 1 << j;
        }
        units[j] = bottom - 150;
        grid[j] = (top - 171).max(units[j]);
        round[j] = 1.5 * pow2(grid[j] + 52);
    }
    let (mut high, mut low) = ([0.0f64; COLUMNS], [0.0f64; COLUMNS]);
    for r in 0..rows {
        let c = row(r);
        for j in 0..COLUMNS {
            let z = f64::from(c[j]);
            let q = (z + round[j]) - round[j];
            high[j] += q;
            low[j] += z - q;
        }
    }
    for (j, state) in states.iter_mut().enumerate() {
        if skip >> j & 1 == 0 {
            let s = &mut state.0;
            s.add_scaled((high[j] * pow2(-grid[j])) as i64, grid[j]);
            s.add_scaled((low[j] * pow2(-units[j])) as i64, units[j]);
        }
    }
    skip
}

/// Adds the terms one by one (exact, any terms).
#[inline(never)]
fn add_each<const D: usize, const LSB: usize>(
    state: &mut Fixed<D, LSB>,
    n: usize,
    term: impl Fn(usize) -> f64,
) {
    for i in 0..n {
        state.add_f64(term(i));
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use crate::arch::{self, Backend};
    use crate::fp::f16;
    use crate::kernels::{
        ExactSum, exact_dot_partial, exact_sum_partial, exact_sum_products, scalar,
    };

    const N: usize = 11_000;

    /// `2^k` as an f32.
    fn pow2f(k: i32) -> f32 {
        f32::from_bits(((k + 127) as u32) << 23)
    }

    /// Values of several parts whose magnitudes jump between parts, one
    /// tiny value in the last part, and `special` near the end.
    fn jumping(special: f32) -> ([f32; N], [f32; N]) {
        let (mut x, mut y) = ([0.0f32; N], [0.0f32; N]);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for i in 0..N {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            // Parts of 2048 products: the guess too low (part 1), too
            // high and failing (2), too high and holding (3), too low (4).
            let scale = match i {
                2048..4096 => pow2f(40),
                6144..8192 => pow2f(-3),
                _ => 1.0,
            };
            x[i] = ((s >> 40) as f32 / 16_777_216.0 - 0.5) * scale;
            y[i] = ((s >> 8) & 0xffff) as f32 / 65536.0 - 0.5;
        }
        x[10_500] = 1e-30;
        x[N - 3] = special;
        (x, y)
    }

    #[test]
    fn parts_with_jumps_match_the_twin_on_every_backend() {
        for special in [0.5, f32::INFINITY, f32::NAN] {
            let (x, y) = jumping(special);
            let (h, g) = (x.map(f16::from_f32), y.map(f16::from_f32));
            for backend in Backend::ALL {
                // A backend this CPU lacks is an error: nothing to check.
                let _ = arch::with_backend(backend, || {
                    assert_eq!(exact_sum_partial(&x), scalar::exact_sum_partial(&x));
                    assert_eq!(exact_dot_partial(&x, &y), scalar::exact_dot_partial(&x, &y));
                    assert_eq!(exact_sum_partial(&h), scalar::exact_sum_partial(&h));
                    assert_eq!(exact_dot_partial(&h, &g), scalar::exact_dot_partial(&h, &g));
                    for cut in [1, 2047, 2048, 4097] {
                        let mut d = exact_dot_partial(&x[cut..], &y[cut..]);
                        d.merge(&exact_dot_partial(&x[..cut], &y[..cut]));
                        assert_eq!(d, scalar::exact_dot_partial(&x, &y), "{backend} {cut}");
                    }
                });
            }
        }
    }

    /// Row products of spans within and beyond the lanes' (columns of
    /// tiny and huge values), zeros, an infinity and a NaN, over more rows
    /// than a lane takes and a width that is no multiple of the lanes: the
    /// twin's states on every backend, and for any cut of the rows.
    #[test]
    fn row_products_match_the_twin_on_every_backend() {
        let (rows, m, n) = (300, 3, 37);
        let (x, y) = jumping(0.5);
        let a: Vec<f32> = x[..rows * m].to_vec();
        let mut b: Vec<f32> = (0..rows * n)
            .map(|i| y[i % N] * pow2f((i % 5) as i32 * 9 - 20))
            .collect();
        b[7 * n + 3] = 1e-40; // column 3: a span beyond the lanes'
        b[rows * n - 2] = 0.0;
        for special in [None, Some(f32::INFINITY), Some(f32::NAN)] {
            if let Some(v) = special {
                b[200 * n + 20] = v;
            }
            let mut twin = vec![ExactSum::new(); m * n];
            scalar::exact_sum_products(rows, &a, &b, &mut twin);
            for backend in Backend::ALL {
                let _ = arch::with_backend(backend, || {
                    for cut in [0, 1, 257] {
                        let mut fast = vec![ExactSum::new(); m * n];
                        exact_sum_products(rows - cut, &a[cut * m..], &b[cut * n..], &mut fast);
                        exact_sum_products(cut, &a[..cut * m], &b[..cut * n], &mut fast);
                        assert!(fast == twin, "{backend} {cut} {special:?}");
                    }
                });
            }
        }
    }
}
