//! An oracle for formats and rounding written from a format's parameters
//! alone (exponent and mantissa widths, bias, sign, NaN encoding, zero,
//! subnormals, `emax`), independently of the kernels: it lists the
//! format's values by decoding every code with the textbook formula in
//! f64, and rounds by searching that list and comparing distances.
//!
//! Exactness (every f64 step below is exact):
//! - values: `(2^m + man) * 2^(field - bias - m)` has at most 24
//!   significant bits and an exponent within `-160..=130`, so it is an f64
//!   (53 bits, exponents to -1022), and [`pow2`] builds powers of two from
//!   their bits;
//! - an f32 widened to f64 is exact;
//! - for format values `a <= x < b` that are neighbours, `x - a` and
//!   `b - x` are exact: if `a = 0` the first is `x`; otherwise the spacing
//!   `b - a` is at most `a` (a normal `a` has spacing `2^(ea - m) <= a`; a
//!   subnormal one is a positive multiple of the spacing), so
//!   `a <= x < b <= 2a` and Sterbenz's lemma makes both differences exact
//!   in any binary format holding the operands, f64 included. (Past the
//!   largest value `b = max + 2^(emax - m)`, still `<= 2 max`.)
//! - comparing the two exact differences is exact.

use tessera_core::fp::{Format, Mode, NanEncoding, Overflow, Round, Subnormals};

/// `2^e` as f64, from its bits (`-1022 <= e <= 1023`).
pub(crate) fn pow2(e: i32) -> f64 {
    f64::from_bits(u64::try_from(e + 1023).unwrap() << 52)
}

/// What a code means.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Value {
    Nan,
    Infinity { negative: bool },
    Finite(f64),
}

/// The meaning of `code` from the parameters of `f`.
pub(crate) fn decode(f: Format, code: u32) -> Value {
    let (e, m) = (f.exponent_bits(), f.mantissa_bits());
    let negative = f.is_signed() && (code >> (e + m)) & 1 == 1;
    let field = (code >> m) & ((1 << e) - 1);
    let man = code & ((1 << m) - 1);
    let all_ones = field == (1 << e) - 1;
    match f.nan_encoding() {
        NanEncoding::Ieee if all_ones && man == 0 => return Value::Infinity { negative },
        NanEncoding::Ieee if all_ones => return Value::Nan,
        NanEncoding::AllOnes if all_ones && man == (1 << m) - 1 => return Value::Nan,
        NanEncoding::NegativeZero if negative && field == 0 && man == 0 => return Value::Nan,
        _ => {}
    }
    let field = i32::try_from(field).unwrap();
    if field - f.bias() > f.emax() {
        return Value::Nan; // no value (CPFloat formats' unused fields)
    }
    let m = i32::try_from(m).unwrap();
    let magnitude = if f.has_zero() && field == 0 {
        f64::from(man) * pow2(1 - f.bias() - m)
    } else {
        (pow2(m) + f64::from(man)) * pow2(field - f.bias() - m)
    };
    Value::Finite(if negative { -magnitude } else { magnitude })
}

/// A format's non-negative values with their codes, ascending.
pub(crate) struct Values {
    pub(crate) format: Format,
    /// Every non-negative finite value.
    pub(crate) all: Vec<(f64, u32)>,
    /// The same without subnormals.
    pub(crate) normal: Vec<(f64, u32)>,
}

impl Values {
    pub(crate) fn new(format: Format) -> Self {
        let sign = if format.is_signed() {
            1u32 << (format.bits() - 1)
        } else {
            1 << format.bits()
        };
        let mut all: Vec<(f64, u32)> = (0..sign)
            .filter_map(|c| match decode(format, c) {
                Value::Finite(v) => Some((v, c)),
                _ => None,
            })
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        let min_normal = pow2(format.emin());
        let normal = all
            .iter()
            .copied()
            .filter(|(v, _)| *v == 0.0 || *v >= min_normal)
            .collect();
        Self {
            format,
            all,
            normal,
        }
    }

    pub(crate) fn max(&self) -> (f64, u32) {
        *self.all.last().unwrap()
    }

    /// The code of `v` (a value of the format, or infinity) with its sign.
    pub(crate) fn code(&self, v: Value) -> Option<u32> {
        let f = self.format;
        let sign = |negative: bool| {
            if negative && f.is_signed() {
                1 << (f.bits() - 1)
            } else {
                0
            }
        };
        match v {
            Value::Nan => None,
            Value::Infinity { negative } => {
                Some(sign(negative) | ((1 << f.exponent_bits()) - 1) << f.mantissa_bits())
            }
            Value::Finite(x) => {
                let i = self
                    .all
                    .binary_search_by(|(v, _)| v.total_cmp(&x.abs()))
                    .ok()?;
                let negative = x.is_sign_negative();
                Some(sign(negative) | self.all[i].1)
            }
        }
    }

    /// `x` rounded into the format by `round`, the stochastic modes
    /// excepted (see [`Values::neighbours`] for those).
    pub(crate) fn round(&self, x: f32, round: Round) -> Value {
        let f = self.format;
        if x.is_nan() {
            return Value::Nan;
        }
        if !f.is_signed() && x <= 0.0 {
            // ml_dtypes' float8_e8m0fnu: NaN, or its smallest value when
            // saturating (-inf stays NaN).
            let saturate = round.overflow == Overflow::Saturate && x.is_finite();
            return if saturate {
                Value::Finite(self.all[0].0)
            } else {
                Value::Nan
            };
        }
        let negative = f.is_signed() && x.is_sign_negative();
        if x.is_infinite() {
            return if f.has_infinities() {
                Value::Infinity { negative }
            } else {
                self.overflow(negative, round, true)
            };
        }
        let ax = f64::from(x.abs());
        let Some(((a, ca), (b, _))) = self.neighbours(ax, round.subnormals) else {
            return self.finish(ax, negative, round);
        };
        let odd = |c: u32| c & 1 == 1;
        let up = match round.mode {
            Mode::NearestEven => match (ax - a).total_cmp(&(b - ax)) {
                core::cmp::Ordering::Less => false,
                core::cmp::Ordering::Greater => true,
                core::cmp::Ordering::Equal => odd(ca),
            },
            Mode::NearestAway => ax - a >= b - ax,
            Mode::NearestZero => ax - a > b - ax,
            Mode::TowardZero => false,
            Mode::Up => !negative,
            Mode::Down => negative,
            Mode::ToOdd => !odd(ca),
            _ => panic!("the oracle rounds deterministic modes only"),
        };
        self.finish(if up { b } else { a }, negative, round)
    }

    /// The format's values `a < |x| < b` around an inexact magnitude, with
    /// their codes (past the largest value, `b` is the next value of the
    /// unbounded format); `None` if `|x|` is a value. A format without
    /// zero has no `a` below its smallest value: `a = 0` stands for it.
    pub(crate) fn neighbours(
        &self,
        ax: f64,
        subnormals: Subnormals,
    ) -> Option<((f64, u32), (f64, u32))> {
        let f = self.format;
        let values = match subnormals {
            Subnormals::Keep if f.has_subnormals() => &self.all,
            _ => &self.normal,
        };
        let i = values.partition_point(|(v, _)| *v <= ax);
        if i > 0 && values[i - 1].0 == ax {
            return None;
        }
        let below = if i == 0 { (0.0, 0) } else { values[i - 1] };
        let above = values.get(i).copied().unwrap_or_else(|| {
            let (max, code) = self.max();
            let spacing = pow2(f.emax() - i32::try_from(f.mantissa_bits()).unwrap());
            (max + spacing, code + 1)
        });
        Some((below, above))
    }

    /// The rounded magnitude `r` with its sign, after overflow and zero.
    pub(crate) fn finish(&self, r: f64, negative: bool, round: Round) -> Value {
        let f = self.format;
        if r > self.max().0 {
            return self.overflow(negative, round, false);
        }
        if r == 0.0 && !f.has_zero() {
            return Value::Finite(self.all[0].0);
        }
        if r == 0.0 && f.nan_encoding() == NanEncoding::NegativeZero {
            return Value::Finite(0.0);
        }
        self.signed(r, negative)
    }

    fn signed(&self, r: f64, negative: bool) -> Value {
        Value::Finite(if negative { -r } else { r })
    }

    /// Overflow as `Round`'s docs say (IEEE 754 section 7.4 for the
    /// directed modes, OCP for formats without infinities).
    pub(crate) fn overflow(&self, negative: bool, round: Round, input_infinite: bool) -> Value {
        let f = self.format;
        let max = self.signed(self.max().0, negative);
        if round.overflow == Overflow::Saturate {
            return max;
        }
        let past = input_infinite
            || match round.mode {
                Mode::TowardZero | Mode::ToOdd => false,
                Mode::Up => !negative,
                Mode::Down => negative,
                _ => true,
            };
        if !past {
            max
        } else if f.has_infinities() {
            Value::Infinity { negative }
        } else if f.has_nan() {
            Value::Nan
        } else {
            max
        }
    }
}

/// Whether the f32 `y` is `v`.
pub(crate) fn same(y: f32, v: Value) -> bool {
    match v {
        Value::Nan => y.is_nan(),
        Value::Infinity { negative } => y.is_infinite() && y.is_sign_negative() == negative,
        Value::Finite(v) => {
            let v32 = v as f32;
            f64::from(v32) == v && y.to_bits() == v32.to_bits()
        }
    }
}
