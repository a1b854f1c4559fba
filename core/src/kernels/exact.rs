//! [`ExactSum`]: an exact fixed-point accumulator for f32 values.

/// Number of 32-bit digits of the fixed-point total.
///
/// The least significant bit is 2^-149 (the smallest f32 subnormal), so
/// every finite f32 is an integer multiple of it; a single f32 reaches bit
/// 276 (below 2^128 = bit 277). Ten digits, the top one a full signed i64,
/// hold totals up to 2^(9 * 32 + 63 - 149) = 2^202 in magnitude: room for
/// more than 2^74 additions of `f32::MAX`.
const DIGITS: usize = 10;
const TOP: usize = DIGITS - 1;
const DIGIT_MASK: i64 = 0xffff_ffff;
/// Where the special-value counts sit in [`ExactSum::limbs`].
const POS_INF: usize = DIGITS;
const NEG_INF: usize = DIGITS + 1;
const NAN: usize = DIGITS + 2;

/// An exact sum of f32 values, rounded once at the end.
///
/// Finite addends go into a two's-complement fixed-point integer (Kulisch
/// style) whose unit is 2^-149, held as 32-bit digits in `i64` limbs;
/// infinities and NaNs are counted. Integer addition is associative and
/// commutative, so any grouping and any order of [`add`](Self::add) and
/// [`merge`](Self::merge) calls over the same multiset of values gives the
/// same state, bit for bit, and [`to_f32`](Self::to_f32) the same result.
///
/// ```
/// use tessera_core::kernels::ExactSum;
///
/// let mut a = ExactSum::new();
/// a.add(1.0e30);
/// a.add(1.0);
/// let mut b = ExactSum::new();
/// b.add(-1.0e30);
/// b.merge(&a);
/// assert_eq!(b.to_f32(), 1.0); // plain f32 addition would give 0.0
/// ```
///
/// # Range
///
/// Exact while the running total stays below 2^202 in magnitude, which takes
/// more than 2^74 additions of `f32::MAX`. Beyond that the top limb wraps
/// (no panic) and the result is unspecified.
///
/// # All-reduce as integers
///
/// [`limbs`](Self::limbs) exposes the state as [`ExactSum::LIMBS`] integers:
/// limbs `0..10` are the digits, least significant first (value =
/// sum of `limb[i] * 2^(32 i - 149)`; digits `0..9` are in `0..2^32` and
/// digit 9 is signed), limbs 10, 11 and 12 count the `+inf`, `-inf` and NaN
/// addends. Adding the limb arrays of fewer than 2^31 accumulators element by
/// element (wrapping `i64` addition, as an `MPI_SUM` all-reduce does) and
/// rebuilding with [`from_limbs`](Self::from_limbs) gives exactly their
/// [`merge`](Self::merge).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExactSum {
    /// Normalised: digits `0..TOP` in `0..2^32`, digit `TOP` signed. The
    /// representation is canonical, so derived equality compares the exact
    /// finite total and the three counts.
    digits: [i64; DIGITS],
    pos_inf: i64,
    neg_inf: i64,
    nan: i64,
}

impl Default for ExactSum {
    fn default() -> Self {
        Self::new()
    }
}

impl ExactSum {
    /// The number of integers in [`limbs`](Self::limbs).
    pub const LIMBS: usize = DIGITS + 3;

    /// The empty sum (zero).
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// assert_eq!(ExactSum::new().to_f32(), 0.0);
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self {
            digits: [0; DIGITS],
            pos_inf: 0,
            neg_inf: 0,
            nan: 0,
        }
    }

    /// Adds `x` exactly.
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let mut s = ExactSum::new();
    /// for x in [1e30f32, 1.0, -1e30] {
    ///     s.add(x);
    /// }
    /// assert_eq!(s.to_f32(), 1.0); // exact: f32 addition would give 0
    /// ```
    #[inline]
    pub fn add(&mut self, x: f32) {
        let bits = x.to_bits();
        let abs = bits & 0x7fff_ffff;
        let negative = bits >> 31 == 1;
        if abs >= 0x7f80_0000 {
            let count = if abs > 0x7f80_0000 {
                &mut self.nan
            } else if negative {
                &mut self.neg_inf
            } else {
                &mut self.pos_inf
            };
            *count = count.saturating_add(1);
            return;
        }
        // x = significand * 2^(shift - 149) with a 24-bit significand.
        let exp = abs >> 23;
        let (significand, shift) = if exp == 0 {
            (abs, 0)
        } else {
            ((abs & 0x007f_ffff) | 0x0080_0000, exp - 1)
        };
        let placed = u64::from(significand) << (shift % 32); // below 2^55
        let k = (shift / 32) as usize; // at most 7: two digits fit below TOP
        let low = (placed & 0xffff_ffff) as i64;
        let high = (placed >> 32) as i64;
        if negative {
            self.digits[k] -= low;
            self.digits[k + 1] -= high;
        } else {
            self.digits[k] += low;
            self.digits[k + 1] += high;
        }
        self.carry_from(k);
    }

    /// Adds every value of `other` (exactly).
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let (mut a, mut b) = (ExactSum::new(), ExactSum::new());
    /// a.add(0.5);
    /// b.add(0.25);
    /// a.merge(&b);
    /// assert_eq!(a.to_f32(), 0.75);
    /// ```
    pub fn merge(&mut self, other: &Self) {
        for (d, o) in self.digits[..TOP].iter_mut().zip(&other.digits[..TOP]) {
            *d += o; // both below 2^32
        }
        self.digits[TOP] = self.digits[TOP].wrapping_add(other.digits[TOP]);
        self.pos_inf = self.pos_inf.saturating_add(other.pos_inf);
        self.neg_inf = self.neg_inf.saturating_add(other.neg_inf);
        self.nan = self.nan.saturating_add(other.nan);
        self.carry();
    }

    /// The state as integers (see [the type docs](Self#all-reduce-as-integers)).
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let mut s = ExactSum::new();
    /// s.add(3.0);
    /// assert_eq!(ExactSum::from_limbs(s.limbs()), s);
    /// ```
    #[must_use]
    pub fn limbs(&self) -> [i64; Self::LIMBS] {
        let mut limbs = [0; Self::LIMBS];
        limbs[..DIGITS].copy_from_slice(&self.digits);
        limbs[POS_INF] = self.pos_inf;
        limbs[NEG_INF] = self.neg_inf;
        limbs[NAN] = self.nan;
        limbs
    }

    /// Rebuilds a sum from [`limbs`](Self::limbs), or from the element-wise
    /// sum of several accumulators' limbs. Any digits are accepted (they are
    /// renormalised); a nonzero count means "present".
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// // Two replicas' sums, all-reduced as integers.
    /// let (mut a, mut b) = (ExactSum::new(), ExactSum::new());
    /// a.add(1.5);
    /// b.add(2.5);
    /// let (la, lb) = (a.limbs(), b.limbs());
    /// let summed = core::array::from_fn(|k| la[k] + lb[k]);
    /// assert_eq!(ExactSum::from_limbs(summed).to_f32(), 4.0);
    /// ```
    #[must_use]
    pub fn from_limbs(limbs: [i64; Self::LIMBS]) -> Self {
        let mut digits = [0; DIGITS];
        let mut carry = 0i128;
        for (d, &limb) in digits[..TOP].iter_mut().zip(&limbs[..TOP]) {
            let v = i128::from(limb) + carry;
            *d = (v & i128::from(DIGIT_MASK)) as i64;
            carry = v >> 32;
        }
        // Truncating: the top digit wraps only beyond the documented range.
        digits[TOP] = (i128::from(limbs[TOP]) + carry) as i64;
        Self {
            digits,
            pos_inf: limbs[POS_INF],
            neg_inf: limbs[NEG_INF],
            nan: limbs[NAN],
        }
    }

    /// The sum rounded once to f32: to nearest, ties to even.
    ///
    /// - NaN if a NaN was added, or both `+inf` and `-inf`; otherwise `+inf`
    ///   or `-inf` if one was added. NaN is always `f32::NAN`.
    /// - A finite total of magnitude `2^128 - 2^103` (halfway between
    ///   `f32::MAX` and 2^128) or more gives infinity with its sign.
    /// - Subnormal totals are exact; an exact zero is `+0.0`.
    ///
    /// ```
    /// use tessera_core::kernels::ExactSum;
    ///
    /// let mut s = ExactSum::new();
    /// s.add(f32::INFINITY);
    /// s.add(f32::NEG_INFINITY);
    /// assert!(s.to_f32().is_nan());
    /// ```
    #[must_use]
    pub fn to_f32(&self) -> f32 {
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
        let sign = u32::from(negative) << 31;
        let Some(top) = magnitude.iter().rposition(|&d| d != 0) else {
            return 0.0;
        };
        // Position of the leading one, in units of 2^-149.
        let lead = 32 * top + 31 - magnitude[top].leading_zeros() as usize;
        if lead < 24 {
            // At most 24 bits: exact, and the integer is the f32 pattern
            // (subnormal, or exponent field 1 when bit 23 is set).
            return f32::from_bits(sign | magnitude[0]);
        }
        let shift = lead - 23;
        let significand = field(&magnitude, shift, 24);
        let half = field(&magnitude, shift - 1, 1) == 1;
        let sticky = any_below(&magnitude, shift - 1);
        // significand * 2^(shift - 149) has exponent field shift + 1, so the
        // pattern is (shift << 23) + significand; a rounding carry moves into
        // the exponent, and up to infinity from the top binade.
        let mut bits = ((shift as u64) << 23) + u64::from(significand);
        if half && (sticky || significand & 1 == 1) {
            bits += 1;
        }
        if bits >= 0x7f80_0000 {
            return f32::from_bits(sign | 0x7f80_0000);
        }
        f32::from_bits(sign | bits as u32)
    }

    /// Propagates carries so digits `0..TOP` are in `0..2^32`.
    /// [`Self::carry`] after a change to digits `k` and `k + 1` only: the
    /// digits below `k` are normalised already, and the carry stops at the
    /// first digit above `k + 1` it leaves unchanged (it is one of the
    /// normalised digits above). The result is the same canonical state.
    #[inline]
    fn carry_from(&mut self, k: usize) {
        let mut i = k;
        while i < TOP {
            let c = self.digits[i] >> 32;
            self.digits[i] &= DIGIT_MASK;
            if i + 1 == TOP {
                self.digits[TOP] = self.digits[TOP].wrapping_add(c);
                return;
            }
            self.digits[i + 1] += c;
            if c == 0 && i > k {
                return;
            }
            i += 1;
        }
    }

    fn carry(&mut self) {
        for i in 0..TOP {
            let c = self.digits[i] >> 32;
            self.digits[i] &= DIGIT_MASK;
            if i + 1 == TOP {
                self.digits[TOP] = self.digits[TOP].wrapping_add(c);
            } else {
                self.digits[i + 1] += c;
            }
        }
    }

    /// The sign and the magnitude's 32-bit digits, least significant first.
    fn magnitude(&self) -> (bool, [u32; DIGITS + 1]) {
        let negative = self.digits[TOP] < 0;
        let mut out = [0u32; DIGITS + 1];
        let mut carry = 0i128;
        for (i, &d) in self.digits.iter().enumerate() {
            let d = i128::from(d);
            let v = if negative { -d } else { d } + carry;
            if i < TOP {
                out[i] = (v & 0xffff_ffff) as u32;
                carry = v >> 32;
            } else {
                // The magnitude's top part is in 0..=2^63.
                out[i] = (v & 0xffff_ffff) as u32;
                out[i + 1] = (v >> 32) as u32;
            }
        }
        (negative, out)
    }
}

/// `width` (at most 32) bits of `digits` starting at bit `lo`.
fn field(digits: &[u32; DIGITS + 1], lo: usize, width: u32) -> u32 {
    let w = lo / 32;
    let low = u64::from(digits[w]);
    let high = digits.get(w + 1).copied().map_or(0, u64::from);
    let both = (high << 32 | low) >> (lo % 32);
    (both & ((1u64 << width) - 1)) as u32
}

/// Whether any bit of `digits` below bit `pos` is set.
fn any_below(digits: &[u32; DIGITS + 1], pos: usize) -> bool {
    let w = pos / 32;
    digits[..w].iter().any(|&d| d != 0) || digits[w] & ((1u32 << (pos % 32)) - 1) != 0
}
