//! f32 into any [`Format`], every [`Mode`]: the scalar `const fn` twins
//! (`chop`, `encode`, `decode`), which define the results.
//!
//! Rounding works on the f32 bit pattern. Where the format's spacing at
//! `x` is at least f32's, the format's values around `x` are the multiples
//! of `2^d` pattern units for some `d <= 23` (`x`'s own binade, or f32's
//! linear subnormal range), so rounding is "truncate the low `d` bits, then
//! maybe add `2^d`" and a carry lands exactly on the next value, across
//! binades included. Only magnitudes below the format's smallest value
//! `2^t` by more than 23 bits take a second path ("tiny": the neighbours
//! are 0 and `2^t`, and the fraction `|x| / 2^t = m / 2^s` has `s > 23`).

use super::format::{Format, pattern};
use super::round::{Mode, Round, Subnormals};
use super::{NanEncoding, Overflow};
use crate::rng::{RandomBits, RandomStream};

/// Words `1..=WORDS` of an element are the most the tiny rule can read:
/// `s <= 127 + 149` bits, 16 from the element's half bits.
const WORDS: usize = 9;

/// The random bits one element's rounding reads: its 16 half bits and its
/// words `1..=WORDS` (`words[k - 1]`; only those the rule reads are drawn).
#[derive(Clone, Copy)]
struct Draw {
    half: u16,
    words: [u32; WORDS],
}

impl Draw {
    const ZERO: Self = Self {
        half: 0,
        words: [0; WORDS],
    };
}

/// Which rule rounds `x`.
#[derive(Clone, Copy)]
enum Plan {
    /// NaN or infinity: no random bits.
    Special,
    /// Truncate the low `d` (`0..=23`) bits of the pattern, maybe add `2^d`.
    Grid { d: u32 },
    /// `|x| = m * 2^(t - s)` with `s > 23`, below `2^t`, the format's
    /// smallest value: the result is 0 or `2^t`.
    Tiny { t: i32, m: u32, s: u32 },
}

/// `x`'s exponent `floor(log2 |x|)`, its significand `m` (f32's, the
/// implicit one included) and the exponent `e0` of its last bit, for a
/// finite magnitude `abs > 0`: `abs = m * 2^e0`.
#[inline(always)]
const fn decompose(abs: u32) -> (i32, u32, i32) {
    let field = abs >> 23;
    if field == 0 {
        let top = 31 - abs.leading_zeros() as i32;
        (top - 149, abs, -149)
    } else {
        let ex = field as i32 - 127;
        (ex, (abs & 0x007f_ffff) | 0x0080_0000, ex - 23)
    }
}

/// The exponent of the smallest positive value `round` may produce.
#[inline(always)]
pub(super) const fn smallest_exponent(f: Format, round: Round) -> i32 {
    match round.subnormals {
        Subnormals::Flush => f.emin(),
        Subnormals::Keep => f.min_exponent(),
    }
}

#[inline(always)]
const fn plan(f: Format, round: Round, abs: u32) -> Plan {
    if abs >= 0x7f80_0000 {
        return Plan::Special;
    }
    if abs == 0 {
        return Plan::Grid { d: 0 };
    }
    let t = smallest_exponent(f, round);
    let (ex, m, e0) = decompose(abs);
    if ex >= t {
        let g = if ex > f.emin() { ex } else { f.emin() } - f.mantissa_bits() as i32;
        return Plan::Grid { d: (g - e0) as u32 };
    }
    let s = (t - e0) as u32;
    if s <= 23 {
        // f32 subnormal: its pattern is linear, the grid is 2^t.
        Plan::Grid { d: s }
    } else {
        Plan::Tiny { t, m, s }
    }
}

/// How many of words 1.. the rule reads, given the element's half bits.
#[inline(always)]
const fn words_needed(plan: Plan, mode: Mode, half: u16) -> usize {
    match (plan, mode) {
        (_, Mode::StochasticEqual) | (Plan::Special, _) => 0,
        (Plan::Grid { d }, _) => (d > 16) as usize,
        // The half bits decide unless they tie with the significand's top
        // 16 (probability 2^-16): then the words are read.
        (Plan::Tiny { m, s, .. }, _) if half as u32 != shr(m, s - 16) => 0,
        (Plan::Tiny { s, .. }, _) => {
            let s = match mode {
                Mode::StochasticBits(k) if (k as u32) < s => k as u32,
                _ => s,
            };
            (s.saturating_sub(16) as usize).div_ceil(32)
        }
    }
}

/// The random bits of element `index` of `stream` that rounding `plan`
/// in `mode` reads.
#[inline(always)]
const fn draw_stream(plan: Plan, mode: Mode, stream: RandomStream, index: u64) -> Draw {
    if !mode.is_stochastic() {
        return Draw::ZERO;
    }
    let mut draw = Draw::ZERO;
    draw.half = stream.half_bits(index);
    let n = words_needed(plan, mode, draw.half);
    let mut k = 0;
    while k < n {
        draw.words[k] = stream.word(index, k as u32 + 1);
        k += 1;
    }
    draw
}

/// [`draw_stream`] from any source.
#[inline(always)]
fn draw_from<B: RandomBits + ?Sized>(plan: Plan, mode: Mode, bits: &B, index: u64) -> Draw {
    if !mode.is_stochastic() {
        return Draw::ZERO;
    }
    let mut draw = Draw::ZERO;
    draw.half = bits.half_bits(index);
    let n = words_needed(plan, mode, draw.half);
    for (k, w) in draw.words[..n].iter_mut().enumerate() {
        *w = bits.word(index, k as u32 + 1);
    }
    draw
}

/// `x >> shift`, 0 from 32 on.
const fn shr(x: u32, shift: u32) -> u32 {
    if shift >= 32 { 0 } else { x >> shift }
}

const fn low_mask(bits: u32) -> u32 {
    if bits >= 32 {
        u32::MAX
    } else {
        (1 << bits) - 1
    }
}

/// Whether the first `budget` bits of the `s`-bit uniform `U` (the half
/// bits, then words 1, 2, ..., each most significant bit first) are below
/// those of `m` (an `s`-bit number). With `budget = s`: `U < m`, which
/// has probability `m / 2^s` exactly.
const fn prefix_below(m: u32, s: u32, budget: u32, draw: &Draw) -> bool {
    let (mut remaining, mut budget, mut chunk) = (s, budget, 0);
    while remaining > 0 && budget > 0 {
        let (value, size) = if chunk == 0 {
            (draw.half as u32, 16)
        } else {
            (draw.words[chunk - 1], 32)
        };
        let mut take = if remaining < size { remaining } else { size };
        if budget < take {
            take = budget;
        }
        let drawn = value >> (size - take);
        let target = shr(m, remaining - take) & low_mask(take);
        if drawn != target {
            return drawn < target;
        }
        remaining -= take;
        budget -= take;
        chunk += 1;
    }
    false
}

/// Whether the lower neighbour, the `d`-bit truncation of `abs` (f32
/// significand `m`, exponent `ex`), has an odd encoding in `f`.
#[inline(always)]
const fn truncation_is_odd(f: Format, ex: i32, m: u32, d: u32) -> bool {
    if f.mantissa_bits() == 0 && ex >= f.emin() {
        // No mantissa: the last bit of the exponent field.
        (ex + f.bias()) & 1 == 1
    } else {
        (m >> d) & 1 == 1
    }
}

/// Round the finite magnitude `abs` on the grid of `2^d` pattern units.
#[inline(always)]
const fn round_grid(f: Format, mode: Mode, abs: u32, negative: bool, d: u32, draw: &Draw) -> u32 {
    if d == 0 {
        return abs;
    }
    let ulp = 1u32 << d;
    let rest = abs & (ulp - 1);
    let trunc = abs - rest;
    if rest == 0 {
        return abs;
    }
    let half = ulp >> 1;
    let (ex, m, _) = decompose(abs);
    let odd = truncation_is_odd(f, ex, m, d);
    let random = (draw.half as u32 | draw.words[0] << 16) & (ulp - 1);
    let up = match mode {
        Mode::NearestEven => rest > half || (rest == half && odd),
        Mode::NearestAway => rest >= half,
        Mode::NearestZero => rest > half,
        Mode::TowardZero => false,
        Mode::Up => !negative,
        Mode::Down => negative,
        Mode::ToOdd => !odd,
        Mode::Stochastic => rest + random >= ulp,
        Mode::StochasticBits(k) => {
            let dropped = d.saturating_sub(k as u32);
            rest + (random & !low_mask(dropped)) >= ulp
        }
        Mode::StochasticEqual => draw.half & 1 == 1,
    };
    if up { trunc + ulp } else { trunc }
}

/// Round `m * 2^(t - s)` (`s > 23`, so below `2^(t - 1)` unless `s = 24`)
/// between 0 and `2^t`.
#[inline(always)]
const fn round_tiny(mode: Mode, negative: bool, t: i32, m: u32, s: u32, draw: &Draw) -> u32 {
    let above_half = s == 24 && m > 1 << 23;
    let at_half = s == 24 && m == 1 << 23;
    let up = match mode {
        // 0 is even: ties go to it (or both are even, the flushed case).
        Mode::NearestEven | Mode::NearestZero => above_half,
        Mode::NearestAway => above_half || at_half,
        Mode::TowardZero => false,
        Mode::Up => !negative,
        Mode::Down => negative,
        Mode::ToOdd => true,
        Mode::Stochastic => prefix_below(m, s, s, draw),
        Mode::StochasticBits(k) => prefix_below(m, s, k as u32, draw),
        Mode::StochasticEqual => draw.half & 1 == 1,
    };
    if up { pattern(t, 1 << 23) } else { 0 }
}

/// The f32 bits of the result of overflow (a finite result above `MAX`,
/// or an infinite input in a format without infinities) for sign `sign`.
#[inline(always)]
pub(super) const fn overflow(f: Format, round: Round, sign: u32, input_infinite: bool) -> u32 {
    let max = sign | f.max_bits();
    if matches!(round.overflow, Overflow::Saturate) {
        return max;
    }
    let past_max = input_infinite
        || match round.mode {
            Mode::TowardZero | Mode::ToOdd => false,
            Mode::Up => sign == 0,
            Mode::Down => sign != 0,
            _ => true,
        };
    if !past_max {
        max
    } else if f.has_infinities() {
        sign | 0x7f80_0000
    } else if f.has_nan() {
        sign | 0x7fc0_0000
    } else {
        max
    }
}

/// The result (f32 bits) for a zero or negative non-NaN input of magnitude
/// `abs` in an unsigned format (E8M0), as ml_dtypes' `float8_e8m0fnu`
/// converts one: NaN, or with [`Overflow::Saturate`] (ml_dtypes'
/// saturating conversion) the smallest value, except that `-inf` stays
/// NaN.
#[inline(always)]
pub(super) const fn unsigned_nonpositive(f: Format, round: Round, abs: u32) -> u32 {
    if matches!(round.overflow, Overflow::Saturate) && abs != 0x7f80_0000 {
        pattern(smallest_exponent(f, round), 1 << 23)
    } else {
        0x7fc0_0000
    }
}

/// The rounded value of `x` (f32 bits) in `f`: a value of `f`, infinity,
/// or a quiet NaN.
#[inline(always)]
const fn round_bits(f: Format, round: Round, x: u32, plan: Plan, draw: &Draw) -> u32 {
    let abs = x & 0x7fff_ffff;
    if abs > 0x7f80_0000 {
        return x | 0x0040_0000;
    }
    let negative = x != abs;
    if !f.is_signed() && (negative || abs == 0) {
        return unsigned_nonpositive(f, round, abs);
    }
    let sign = if f.is_signed() { x & 0x8000_0000 } else { 0 };
    let rounded = match plan {
        Plan::Special => {
            return if f.has_infinities() {
                x
            } else {
                overflow(f, round, sign, true)
            };
        }
        Plan::Grid { d } => round_grid(f, round.mode, abs, negative, d, draw),
        Plan::Tiny { t, m, s } => round_tiny(round.mode, negative, t, m, s, draw),
    };
    if rounded == 0 {
        return if !f.has_zero() {
            pattern(f.emin(), 1 << 23)
        } else if matches!(f.nan_encoding(), NanEncoding::NegativeZero) {
            0
        } else {
            sign
        };
    }
    if rounded > f.max_bits() {
        return overflow(f, round, sign, false);
    }
    sign | rounded
}

/// The encoding of `y`, a value of `f`, infinity (formats with
/// infinities) or NaN, given as f32 bits.
#[inline(always)]
pub(super) const fn code_of(f: Format, y: u32) -> u32 {
    let (e, m) = (f.exponent_bits(), f.mantissa_bits());
    let sign_bit = if f.is_signed() && y >> 31 == 1 {
        1 << (e + m)
    } else {
        0
    };
    let abs = y & 0x7fff_ffff;
    let top = ((1 << e) - 1) << m;
    if abs > 0x7f80_0000 {
        return match f.nan_encoding() {
            // Quiet, with the top of the payload.
            NanEncoding::Ieee => sign_bit | top | ((abs & 0x007f_ffff) >> (23 - m)),
            NanEncoding::AllOnes => sign_bit | top | low_mask(m),
            NanEncoding::NegativeZero => 1 << (e + m),
            NanEncoding::None => sign_bit | code_of(f, f.max_bits()),
        };
    }
    if abs == 0x7f80_0000 {
        return sign_bit | top;
    }
    if abs == 0 {
        return sign_bit;
    }
    let (ex, sig, e0) = decompose(abs);
    // The significand with its leading one at bit 23.
    let sig = sig << (23 - (ex - e0));
    if ex >= f.emin() {
        let field = (ex + f.bias()) as u32;
        sign_bit | field << m | (sig & 0x007f_ffff) >> (23 - m)
    } else {
        // Subnormal: exact, since `y` is on the format's grid.
        let shift = (f.emin() - m as i32 - ex + 23) as u32;
        sign_bit | sig >> shift
    }
}

impl Format {
    /// Rounds `x` to this format's values by `round` and returns it as
    /// f32 (CPFloat's "chop"): a value of the format, an infinity, or NaN.
    /// Stochastic modes read the random bits of position `index` of
    /// `stream`; deterministic ones ignore both.
    ///
    /// ```
    /// use tessera_core::fp::{Format, Round};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(1, 0);
    /// assert_eq!(Format::E4M3FN.chop(0.3, Round::NEAREST_EVEN, s, 0), 0.3125);
    /// let sr = Format::E4M3FN.chop(0.3, Round::STOCHASTIC, s, 7);
    /// assert!(sr == 0.28125 || sr == 0.3125);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn chop(self, x: f32, round: Round, stream: RandomStream, index: u64) -> f32 {
        let x = x.to_bits();
        let plan = plan(self, round, x & 0x7fff_ffff);
        let draw = draw_stream(plan, round.mode, stream, index);
        f32::from_bits(round_bits(self, round, x, plan, &draw))
    }

    /// [`Format::chop`] with random bits from any position-addressed
    /// source.
    ///
    /// ```
    /// use core::num::NonZeroUsize;
    /// use tessera_core::fp::{Format, Round};
    /// use tessera_core::rng::Replay;
    ///
    /// // Bits all ones round every inexact value up, all zeros down.
    /// let (ones, zeros) = ([u32::MAX; 2], [0u32; 2]);
    /// let per = NonZeroUsize::new(2).unwrap();
    /// let f = Format::E2M1FN;
    /// assert_eq!(f.chop_with(2.2, Round::STOCHASTIC, &Replay::new(&ones, per), 0), 3.0);
    /// assert_eq!(f.chop_with(2.2, Round::STOCHASTIC, &Replay::new(&zeros, per), 0), 2.0);
    /// ```
    #[must_use]
    #[inline(always)]
    pub fn chop_with<B: RandomBits + ?Sized>(
        self,
        x: f32,
        round: Round,
        bits: &B,
        index: u64,
    ) -> f32 {
        let x = x.to_bits();
        let plan = plan(self, round, x & 0x7fff_ffff);
        let draw = draw_from(plan, round.mode, bits, index);
        f32::from_bits(round_bits(self, round, x, plan, &draw))
    }

    /// Rounds `x` as [`Format::chop`] does and returns the encoding (in
    /// the low [`Format::bits`]). NaN becomes the format's NaN (IEEE
    /// formats keep its sign and the top of its payload, quieted); formats
    /// without NaN (FP6, FP4) cannot hold it and give the largest
    /// magnitude with NaN's sign: check with [`Format::has_nan`], or use
    /// [`encode_slice`](super::encode_slice), which counts such inputs.
    ///
    /// ```
    /// use tessera_core::fp::{Format, Round};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(1, 0);
    /// assert_eq!(Format::E4M3FN.encode(1.0, Round::NEAREST_EVEN, s, 0), 0x38);
    /// assert_eq!(Format::E2M1FN.encode(-6.0, Round::NEAREST_EVEN, s, 0), 0xf);
    /// assert_eq!(Format::E8M0FNU.encode(0.25, Round::NEAREST_EVEN, s, 0), 125);
    /// const ONE_F16: u32 = Format::F16.encode(1.0, Round::NEAREST_EVEN, RandomStream::new(0, 0), 0);
    /// assert_eq!(ONE_F16, 0x3c00);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn encode(self, x: f32, round: Round, stream: RandomStream, index: u64) -> u32 {
        code_of(self, self.chop(x, round, stream, index).to_bits())
    }

    /// [`Format::encode`] with random bits from any position-addressed
    /// source.
    ///
    /// ```
    /// use tessera_core::fp::{Format, Round};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(3, 0);
    /// let f = Format::E5M2;
    /// assert_eq!(f.encode_with(0.1, Round::STOCHASTIC, &s, 9), f.encode(0.1, Round::STOCHASTIC, s, 9));
    /// ```
    #[must_use]
    #[inline(always)]
    pub fn encode_with<B: RandomBits + ?Sized>(
        self,
        x: f32,
        round: Round,
        bits: &B,
        index: u64,
    ) -> u32 {
        code_of(self, self.chop_with(x, round, bits, index).to_bits())
    }

    /// The value of encoding `code` (its low [`Format::bits`]; higher bits
    /// are ignored), exactly. NaN encodings give a quiet f32 NaN with the
    /// encoding's sign bit (IEEE formats also keep the payload); in
    /// formats from [`Format::cpfloat`], exponent fields above `emax`
    /// that are not all ones are no value and give NaN too.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    ///
    /// assert_eq!(Format::E2M1FN.decode(0b0111), 6.0);
    /// assert_eq!(Format::E8M0FNU.decode(0), 2f32.powi(-127));
    /// assert!(Format::E4M3FNUZ.decode(0x80).is_nan());
    /// assert_eq!(Format::E5M2.decode(0xfc), f32::NEG_INFINITY);
    /// ```
    #[must_use]
    #[inline(always)]
    pub const fn decode(self, code: u32) -> f32 {
        let (e, m) = (self.exponent_bits(), self.mantissa_bits());
        let negative = self.is_signed() && (code >> (e + m)) & 1 == 1;
        let sign = if negative { 0x8000_0000 } else { 0 };
        let field = (code >> m) & low_mask(e);
        let man = code & low_mask(m);
        let all_ones = field == low_mask(e);
        let nan = sign | 0x7fc0_0000;
        let bits = match self.nan_encoding() {
            NanEncoding::Ieee if all_ones && man == 0 => sign | 0x7f80_0000,
            NanEncoding::Ieee if all_ones => nan | man << (23 - m),
            NanEncoding::AllOnes if all_ones && man == low_mask(m) => nan,
            NanEncoding::NegativeZero if negative && field == 0 && man == 0 => nan,
            _ if field as i32 > self.emax() + self.bias() => nan,
            _ if field == 0 && self.has_zero() => {
                if man == 0 {
                    sign
                } else {
                    let top = 31 - man.leading_zeros();
                    let ex = self.emin() - m as i32 + top as i32;
                    sign | pattern(ex, man << (23 - top))
                }
            }
            _ => sign | pattern(field as i32 - self.bias(), 1 << 23 | man << (23 - m)),
        };
        f32::from_bits(bits)
    }
}
