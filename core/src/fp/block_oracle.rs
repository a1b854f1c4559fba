//! Test oracles for the block formats, written from the specs' formulas in
//! f64 (exact where used: see each function), independently of the
//! kernels' bit manipulation.

use std::vec::Vec;

use super::Mode;

/// A small deterministic generator for test data (xorshift64*).
pub(crate) struct Gen(pub(crate) u64);

impl Gen {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A finite f32 with a random sign, significand and exponent in
    /// `lo..=hi` (f32 subnormals where the exponent is below -126).
    pub(crate) fn float(&mut self, lo: i32, hi: i32) -> f32 {
        let e = lo + self.below((hi - lo + 1) as u64) as i32;
        let sig = 1.0 + (self.next() >> 40) as f64 / (1u64 << 24) as f64;
        let v = (sig * 2f64.powi(e)) as f32; // rounds to f32 (subnormals too)
        if self.next() & 1 == 1 { -v } else { v }
    }
}

/// `2^e` in f64 (exact for `-1074 <= e <= 1023`).
pub(crate) fn p2(e: i32) -> f64 {
    2f64.powi(e)
}

/// `floor(log2 a)` for finite `a > 0`, by comparison with powers of two.
pub(crate) fn floor_log2(a: f64) -> i32 {
    let mut e = 0;
    while p2(e) > a {
        e -= 1;
    }
    while p2(e + 1) <= a {
        e += 1;
    }
    e
}

/// `ceil(log2 a)` for finite `a > 0`.
pub(crate) fn ceil_log2(a: f64) -> i32 {
    let e = floor_log2(a);
    if p2(e) == a { e } else { e + 1 }
}

/// The nonnegative finite values of a float format with `e` exponent and
/// `m` mantissa bits, bias `bias`, up to `max`, ascending (the OCP/IEEE
/// formula: field 0 is subnormal).
pub(crate) fn float_values(e: u32, m: u32, bias: i32, max: f64) -> Vec<f64> {
    let mut v = Vec::new();
    for field in 0..1i32 << e {
        for man in 0..1u32 << m {
            let frac = f64::from(man) / f64::from(1u32 << m);
            let x = if field == 0 {
                frac * p2(1 - bias)
            } else {
                (1.0 + frac) * p2(field - bias)
            };
            if x <= max {
                v.push(x);
            }
        }
    }
    v.sort_by(f64::total_cmp);
    v
}

/// `q` rounded to the ascending nonnegative `values` (from 0) by a
/// deterministic `mode`, saturating at the largest; the sign is `q`'s.
/// Parity is the index's (the last significand bit of such grids).
pub(crate) fn round_to(values: &[f64], q: f64, mode: Mode) -> f64 {
    round_to_with(values, |i| i % 2 == 1, q, mode)
}

/// [`round_to`] with `odd(i)` the parity of `values[i]`. Ties and round
/// to odd look at the lower neighbour: a tie goes up iff it is odd, to
/// odd goes up iff it is even (so between two even values, 0 and the
/// smallest normal of a flushed format, ties go to 0 and to odd goes up).
pub(crate) fn round_to_with(
    values: &[f64],
    odd: impl Fn(usize) -> bool,
    q: f64,
    mode: Mode,
) -> f64 {
    let (neg, a) = (q < 0.0 || (q == 0.0 && q.is_sign_negative()), q.abs());
    let top = *values.last().unwrap();
    let r = if a >= top {
        top
    } else {
        let hi = values.partition_point(|v| *v < a);
        if values[hi] == a {
            a
        } else {
            let (lo_v, hi_v) = (values[hi - 1], values[hi]);
            let lower_odd = odd(hi - 1);
            let mid = (lo_v + hi_v) / 2.0;
            let up = match mode {
                Mode::NearestEven => a > mid || (a == mid && lower_odd),
                Mode::NearestAway => a >= mid,
                Mode::NearestZero => a > mid,
                Mode::TowardZero => false,
                Mode::Up => !neg,
                Mode::Down => neg,
                Mode::ToOdd => !lower_odd,
                _ => unreachable!("deterministic modes only"),
            };
            if up { hi_v } else { lo_v }
        }
    };
    if neg { -r } else { r }
}

/// The two values of `values` around `|q|` (equal if on the grid), with
/// `q`'s sign; saturating.
pub(crate) fn neighbours(values: &[f64], q: f64) -> (f64, f64) {
    let lo = round_to(values, q, Mode::TowardZero);
    let hi = if q < 0.0 {
        round_to(values, q, Mode::Down)
    } else {
        round_to(values, q, Mode::Up)
    };
    (lo, hi)
}
