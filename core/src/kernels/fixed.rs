//! [`Fixed`]: the fixed-point integer behind the exact accumulators
//! ([`ExactSum`](super::ExactSum), [`ExactDot`](super::ExactDot)).

/// A two's-complement integer of `D` 32-bit digits held in `i64` limbs,
/// least significant first, in units of `2^-LSB`; plus counts of `+inf`,
/// `-inf` and NaN addends.
///
/// Normalised (digits `0..D - 1` in `0..2^32`, digit `D - 1` signed), so
/// the representation is canonical and derived equality compares the exact
/// total and the three counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct Fixed<const D: usize, const LSB: usize> {
    digits: [i64; D],
    pos_inf: i64,
    neg_inf: i64,
    nan: i64,
}

const DIGIT_MASK: i64 = 0xffff_ffff;

impl<const D: usize, const LSB: usize> Fixed<D, LSB> {
    const TOP: usize = D - 1;
    /// Limbs in [`Self::limbs_into`]: the digits, then the three counts.
    pub(super) const LIMBS: usize = D + 3;
    /// Where the f32 subnormal unit `2^-149` sits.
    const F32_UNIT: usize = LSB - 149;

    pub(super) const ZERO: Self = Self {
        digits: [0; D],
        pos_inf: 0,
        neg_inf: 0,
        nan: 0,
    };

    /// Counts a non-finite addend: `infinite` with its sign, or NaN.
    #[inline]
    fn count(&mut self, nan: bool, negative: bool) {
        let count = if nan {
            &mut self.nan
        } else if negative {
            &mut self.neg_inf
        } else {
            &mut self.pos_inf
        };
        *count = count.saturating_add(1);
    }

    /// Adds `x` exactly.
    #[inline]
    pub(super) fn add_f32(&mut self, x: f32) {
        let bits = x.to_bits();
        let abs = bits & 0x7fff_ffff;
        let negative = bits >> 31 == 1;
        if abs >= 0x7f80_0000 {
            self.count(abs > 0x7f80_0000, negative);
            return;
        }
        // x = significand * 2^(shift - 149) with a 24-bit significand.
        let exp = abs >> 23;
        let (significand, shift) = if exp == 0 {
            (abs, 0)
        } else {
            ((abs & 0x007f_ffff) | 0x0080_0000, exp - 1)
        };
        self.add_at(
            u64::from(significand),
            shift as usize + Self::F32_UNIT,
            negative,
        );
    }

    /// Adds `x` exactly: a finite `x` must be a multiple of `2^-LSB` below
    /// the range's top (the kernels' terms are); infinities and NaN are
    /// counted.
    #[inline]
    pub(super) fn add_f64(&mut self, x: f64) {
        let bits = x.to_bits();
        let abs = bits & 0x7fff_ffff_ffff_ffff;
        let negative = bits >> 63 == 1;
        let exp = (abs >> 52) as usize;
        if exp == 0x7ff {
            self.count(abs > 0x7ff0_0000_0000_0000, negative);
            return;
        }
        if abs == 0 {
            return;
        }
        // x = significand * 2^(exp - 1075); a multiple of 2^-LSB is normal.
        let mut significand = (abs & 0x000f_ffff_ffff_ffff) | 0x0010_0000_0000_0000;
        let mut at = exp + LSB;
        if at < 1075 {
            // Trailing zeros below the unit (exact by the precondition).
            debug_assert!(significand.trailing_zeros() as usize >= 1075 - at);
            significand >>= (1075 - at).min(63);
            at = 1075;
        }
        self.add_at(significand, at - 1075, negative);
    }

    /// Adds `n * 2^exp` exactly (`exp >= -LSB`; the kernels' lane totals,
    /// `|n|` below `2^63`).
    #[inline]
    pub(super) fn add_scaled(&mut self, n: i64, exp: i32) {
        let at = exp + LSB as i32;
        debug_assert!(at >= 0, "below the unit");
        if n != 0 {
            self.add_at(n.unsigned_abs(), at as usize, n < 0);
        }
    }

    /// Adds `significand * 2^at` units (`significand` below `2^64`, so
    /// that it spans at most three digits once placed).
    #[inline]
    fn add_at(&mut self, significand: u64, at: usize, negative: bool) {
        let placed = u128::from(significand) << (at % 32); // below 2^96
        let k = at / 32;
        let mut last = k;
        for (i, part) in (k..D).zip(0..3) {
            let rest = (placed >> (32 * part)) as i64;
            // The top digit takes all that is left (signed, wrapping).
            let v = if i == Self::TOP {
                rest
            } else {
                rest & DIGIT_MASK
            };
            let d = &mut self.digits[i];
            *d = if negative {
                d.wrapping_sub(v)
            } else {
                d.wrapping_add(v)
            };
            last = i;
            if i == Self::TOP {
                break;
            }
        }
        self.carry_from(k, last);
    }

    /// Adds every addend of `other`.
    pub(super) fn merge(&mut self, other: &Self) {
        let top = Self::TOP;
        for (d, o) in self.digits[..top].iter_mut().zip(&other.digits[..top]) {
            *d += o; // both below 2^32
        }
        self.digits[top] = self.digits[top].wrapping_add(other.digits[top]);
        self.pos_inf = self.pos_inf.saturating_add(other.pos_inf);
        self.neg_inf = self.neg_inf.saturating_add(other.neg_inf);
        self.nan = self.nan.saturating_add(other.nan);
        self.carry_from(0, top);
    }

    /// Writes the digits, then the `+inf`, `-inf` and NaN counts, into
    /// `out` ([`Self::LIMBS`] of them).
    pub(super) fn limbs_into(&self, out: &mut [i64]) {
        out[..D].copy_from_slice(&self.digits);
        out[D..D + 3].copy_from_slice(&[self.pos_inf, self.neg_inf, self.nan]);
    }

    /// Rebuilds from limbs (any digits: renormalised).
    pub(super) fn from_limbs(limbs: &[i64]) -> Self {
        let mut digits = [0; D];
        let mut carry = 0i128;
        let top = Self::TOP;
        for (d, &limb) in digits[..top].iter_mut().zip(&limbs[..top]) {
            let v = i128::from(limb) + carry;
            *d = (v & i128::from(DIGIT_MASK)) as i64;
            carry = v >> 32;
        }
        // Truncating: the top digit wraps only beyond the documented range.
        digits[top] = (i128::from(limbs[top]) + carry) as i64;
        Self {
            digits,
            pos_inf: limbs[D],
            neg_inf: limbs[D + 1],
            nan: limbs[D + 2],
        }
    }

    /// The total rounded once to f32, to nearest, ties to even (see
    /// [`ExactSum::to_f32`](super::ExactSum::to_f32)).
    pub(super) fn rounded(&self) -> f32 {
        if self.nan != 0 || (self.pos_inf != 0 && self.neg_inf != 0) {
            return f32::NAN;
        }
        if self.pos_inf != 0 {
            return f32::INFINITY;
        }
        if self.neg_inf != 0 {
            return f32::NEG_INFINITY;
        }
        let (negative, magnitude) = self.magnitude();
        let magnitude = &magnitude[..=D];
        let sign = u32::from(negative) << 31;
        let Some(top) = magnitude.iter().rposition(|&d| d != 0) else {
            return 0.0;
        };
        // Position of the leading one, in units.
        let lead = 32 * top + 31 - magnitude[top].leading_zeros() as usize;
        // The result's unit: 23 bits below the lead, at least 2^-149.
        let shift = lead.saturating_sub(23).max(Self::F32_UNIT);
        if shift == 0 {
            // At most 24 bits: exact, and the integer is the f32 pattern
            // (subnormal, or exponent field 1 when bit 23 is set).
            return f32::from_bits(sign | magnitude[0]);
        }
        let significand = field(magnitude, shift, 24);
        let half = field(magnitude, shift - 1, 1) == 1;
        let sticky = any_below(magnitude, shift - 1);
        // significand * 2^(shift - F32_UNIT - 149) has exponent field
        // shift - F32_UNIT + 1 when bit 23 is set (0 for a subnormal), so
        // the pattern is ((shift - F32_UNIT) << 23) + significand; a
        // rounding carry moves into the exponent, and up to infinity.
        let mut bits = (((shift - Self::F32_UNIT) as u64) << 23) + u64::from(significand);
        if half && (sticky || significand & 1 == 1) {
            bits += 1;
        }
        if bits >= 0x7f80_0000 {
            return f32::from_bits(sign | 0x7f80_0000);
        }
        f32::from_bits(sign | bits as u32)
    }

    /// Propagates carries after a change to digits `k..=last` only: the
    /// digits below `k` are normalised already, and the carry stops at the
    /// first digit above `last` it leaves unchanged.
    #[inline]
    fn carry_from(&mut self, k: usize, last: usize) {
        let top = Self::TOP;
        let mut i = k;
        while i < top {
            let c = self.digits[i] >> 32;
            self.digits[i] &= DIGIT_MASK;
            if i + 1 == top {
                self.digits[top] = self.digits[top].wrapping_add(c);
                return;
            }
            self.digits[i + 1] += c;
            if c == 0 && i >= last {
                return;
            }
            i += 1;
        }
    }

    /// The sign and the magnitude's 32-bit digits, least significant first
    /// (`D + 1` of them used; the array is sized for the widest state).
    fn magnitude(&self) -> (bool, [u32; MAX_DIGITS + 1]) {
        let top = Self::TOP;
        let negative = self.digits[top] < 0;
        let mut out = [0u32; MAX_DIGITS + 1];
        let mut carry = 0i128;
        for (i, &d) in self.digits.iter().enumerate() {
            let d = i128::from(d);
            let v = if negative { -d } else { d } + carry;
            out[i] = (v & 0xffff_ffff) as u32;
            carry = v >> 32;
            if i == top {
                // The magnitude's top part is in 0..=2^63.
                out[i + 1] = (v >> 32) as u32;
            }
        }
        (negative, out)
    }
}

/// The most digits of any state (for [`Fixed::magnitude`]'s array).
pub(super) const MAX_DIGITS: usize = 20;

/// `width` (at most 32) bits of `digits` starting at bit `lo`.
fn field(digits: &[u32], lo: usize, width: u32) -> u32 {
    let w = lo / 32;
    let low = digits.get(w).copied().map_or(0, u64::from);
    let high = digits.get(w + 1).copied().map_or(0, u64::from);
    let both = (high << 32 | low) >> (lo % 32);
    (both & ((1u64 << width) - 1)) as u32
}

/// Whether any bit of `digits` below bit `pos` is set.
fn any_below(digits: &[u32], pos: usize) -> bool {
    let w = pos / 32;
    digits[..w].iter().any(|&d| d != 0) || digits[w] & ((1u32 << (pos % 32)) - 1) != 0
}
