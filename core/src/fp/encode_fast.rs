//! The fast rules of [`Encoder`] (see `encode_lanes.rs`'s module docs):
//! nearest-even and exactly stochastic rounding of vectors whose lanes are
//! all finite, into a signed format with subnormals kept or into E8M0.
//!
//! [`FastLanes`] holds the rules' constants already splatted, built once
//! per call: `encode_slice`'s loop runs whole groups of four vectors
//! through [`FastLanes::group`] with the kind of rule a constant (see
//! [`FastLanes::specialized`]), so the hot loop carries no branch on the
//! format and, in stochastic rounding, draws the random halves of 16
//! elements at once. The per-vector forms serve [`Encoder::encode`] and
//! [`Encoder::chop`].

use super::encode_lanes::{Encoder, Fast, LaneBits};
use super::round::Mode;
use crate::arch::{F32s, Simd, U32s};

impl Encoder {
    /// The codes of `x`'s lanes (elements `index..`), and the mask of the
    /// lanes the caller must encode with the scalar twin instead. `mode`
    /// is [`Encoder::mode`] (a constant where the caller matched it). A
    /// vector whose lanes are all finite takes the fast rule where the
    /// format and mode have one.
    #[inline(always)]
    pub(crate) fn encode<S: Simd, L: LaneBits>(
        &self,
        mode: Mode,
        x: S::F,
        bits: &L,
        index: u64,
    ) -> (S::U, S::U) {
        let x = x.to_bits();
        let abs = x & S::U::splat(0x7fff_ffff);
        if self.fast != Fast::Off && abs.all_le(0x7f7f_ffff) {
            return FastLanes::<S>::new(self).encode(mode, x, bits, index);
        }
        self.general::<S, L>(mode, x, abs, bits, index)
    }

    /// `x`'s lanes rounded to the format's values as f32 bits (elements
    /// `index..`; [`Format::chop`]), and the mask of the lanes the caller
    /// must chop with the scalar twin instead: every lane of a vector the
    /// fast rule does not take.
    #[inline(always)]
    pub(crate) fn chop<S: Simd, L: LaneBits>(
        &self,
        mode: Mode,
        x: S::F,
        bits: &L,
        index: u64,
    ) -> (S::U, S::U) {
        let x = x.to_bits();
        if self.fast == Fast::Off || !(x & S::U::splat(0x7fff_ffff)).all_le(0x7f7f_ffff) {
            return (x, S::U::splat(u32::MAX));
        }
        FastLanes::<S>::new(self).chop(mode, x, bits, index)
    }
}

/// An [`Encoder`]'s fast-rule constants in lanes (f32 bit patterns and
/// codes, as the [`Encoder`] fields of the same names).
#[derive(Clone, Copy)]
pub(super) struct FastLanes<S: Simd> {
    fast: Fast,
    zero_signed: bool,
    base_d: u32,
    sign_shift: u32,
    /// Whether `base_d` exceeds 16: every grid lane needs word 1.
    wide: bool,
    one: S::U,
    halves: S::U,
    abs_mask: S::U,
    max_finite: S::U,
    /// `2^base_d - 1`: the bits a normal result discards.
    low: S::U,
    rn_bias: S::U,
    normal_offset: S::U,
    magic: S::U,
    emin_bits: S::U,
    emin_field: S::U,
    /// `base_d + emin_field`: a lane's discarded bits are this less its
    /// exponent field, or less `emin_field` if that is smaller.
    emin_d: S::U,
    smallest_bits: S::U,
    tiny_scale: S::U,
    overflow_pos: S::U,
    sign_code: S::U,
    max_bits: S::U,
    over_bits: S::U,
    nonpositive_bits: S::U,
    nonpositive_code: S::U,
}

/// [`FastLanes::mixed`]'s steps: each lane's binade (at or above
/// `emin`'s), discarded bits `d` and their mask `low`, its random bits
/// masked by `low`, and the masks of tiny lanes, of lanes whose 16 random
/// bits fall below the tiny rule's fraction, and of tiny lanes that tie.
struct Mixed<U> {
    top: U,
    d: U,
    low: U,
    random: U,
    tiny: U,
    up: U,
    tied: U,
}

impl<U: U32s> Mixed<U> {
    /// The rounded magnitudes (f32 patterns; `2^t` is `smallest_bits`), and
    /// the mask of tiny lanes whose 16 random bits tie.
    #[inline(always)]
    fn patterns(&self, abs: U, smallest_bits: U) -> (U, U) {
        let grid = (abs + self.random) & !self.low;
        (self.tiny.select(self.up & smallest_bits, grid), self.tied)
    }

    /// [`Mixed::patterns`] as magnitude codes (before the overflow clamp;
    /// `one` holds 1), in fewer steps: a grid lane's code is its
    /// significand, counted from the start of its binade (or of `emin`'s,
    /// if that is higher), plus its random bits, shifted right by its
    /// discarded bits (the carry of a subnormal into `2^emin` gives that
    /// value's code, `2^m`); a tiny lane's is 0 or 1 (`2^t`, the smallest
    /// subnormal).
    #[inline(always)]
    fn codes(&self, abs: U, one: U) -> (U, U) {
        let significand = (abs + (one << 23)) - (self.top << 23);
        let grid = (significand + self.random).unbounded_shr(self.d);
        (self.tiny.select(self.up & one, grid), self.tied)
    }
}

/// The mask of zero and negative lanes of the f32 bits `x`.
#[inline(always)]
fn nonpositive<S: Simd>(x: S::U) -> S::U {
    (x - S::U::splat(1)).simd_gt(S::U::splat(0x7fff_fffe))
}

/// The lanes of the f32 bits `x` the unsigned fast rule leaves to the twin:
/// positive f32 subnormals.
#[inline(always)]
fn unsigned_fallback<S: Simd>(x: S::U) -> S::U {
    (x - S::U::splat(1)).simd_lt(S::U::splat(0x007f_ffff))
}

/// `[f(0), f(1), f(2), f(3)]` (no closure call left after inlining,
/// which `core::array::from_fn` does not promise).
#[inline(always)]
fn four<T>(mut f: impl FnMut(usize) -> T) -> [T; 4] {
    [f(0), f(1), f(2), f(3)]
}

/// The unsigned maximum and minimum of four vectors.
#[inline(always)]
fn max_min<U: U32s>(v: [U; 4]) -> (U, U) {
    (
        v[0].max(v[1]).max(v[2].max(v[3])),
        v[0].min(v[1]).min(v[2].min(v[3])),
    )
}

impl<S: Simd> FastLanes<S> {
    /// `e`'s constants (of a format and rounding with a fast rule).
    #[inline(always)]
    pub(super) fn new(e: &Encoder) -> Self {
        let s = <S::U as U32s>::splat;
        Self {
            fast: e.fast,
            zero_signed: e.zero_signed,
            base_d: e.base_d,
            sign_shift: e.sign_shift,
            wide: e.base_d > 16,
            one: s(1),
            halves: s(0xffff),
            abs_mask: s(0x7fff_ffff),
            max_finite: s(0x7f7f_ffff),
            low: s((1 << e.base_d) - 1),
            rn_bias: s(e.rn_bias),
            normal_offset: s(e.normal_offset),
            magic: s(e.magic),
            emin_bits: s(e.emin_bits),
            emin_field: s(e.emin_field),
            emin_d: s(e.base_d + e.emin_field),
            smallest_bits: s(e.smallest_bits),
            tiny_scale: s(e.tiny_scale),
            overflow_pos: s(e.overflow_pos),
            sign_code: s(e.sign_code),
            max_bits: s(e.max_bits),
            over_bits: s(e.over_bits),
            nonpositive_bits: s(e.nonpositive_bits),
            nonpositive_code: s(e.nonpositive_code),
        }
    }

    /// Runs `f` with `self`'s kind of rule (and zero's sign) a constant,
    /// so that the loop inside `f` is compiled once per kind, without
    /// branches on it, each copy a function of its own (see
    /// `Simd::outline`).
    #[inline(always)]
    pub(super) fn specialized<R>(self, mut f: impl FnMut(&Self) -> R) -> R {
        match (self.fast, self.zero_signed) {
            (Fast::Unsigned, _) => S::outline(
                #[inline(always)]
                || {
                    f(&Self {
                        fast: Fast::Unsigned,
                        ..self
                    })
                },
            ),
            (_, true) => S::outline(
                #[inline(always)]
                || {
                    f(&Self {
                        fast: Fast::Signed,
                        zero_signed: true,
                        ..self
                    })
                },
            ),
            (_, false) => S::outline(
                #[inline(always)]
                || {
                    f(&Self {
                        fast: Fast::Signed,
                        zero_signed: false,
                        ..self
                    })
                },
            ),
        }
    }

    /// The codes of four vectors of `src` (elements `index..`) rounded by
    /// `mode` (nearest-even or exact stochastic), or `None` where a lane
    /// needs the general rule or the twin (the caller then encodes the
    /// four vectors one by one).
    ///
    /// Inlined where optimised; without optimisation a function of its
    /// own, so that the three kinds' copies do not all take stack slots
    /// in the backend's kernel (a debug build's frame passed 8 MiB).
    #[cfg_attr(debug_assertions, inline(never))]
    #[cfg_attr(not(debug_assertions), inline(always))]
    pub(super) fn group<L: LaneBits>(
        &self,
        mode: Mode,
        src: &[f32],
        bits: &L,
        index: u64,
    ) -> Option<[S::U; 4]> {
        let x = four(
            #[inline(always)]
            |v| S::F::load(&src[v * S::LANES..]).to_bits(),
        );
        let abs = four(
            #[inline(always)]
            |v| x[v] & self.abs_mask,
        );
        let (top, bottom) = max_min(abs);
        if self.max_finite.simd_lt_i32(top).any() {
            return None;
        }
        let magnitudes = match mode {
            Mode::Stochastic => self.stochastic_group(abs, bottom, bits, index)?,
            _ => four(
                #[inline(always)]
                |v| self.nearest_codes(abs[v]),
            ),
        };
        let codes = four(
            #[inline(always)]
            |v| self.codes(x[v], magnitudes[v]),
        );
        if self.fast == Fast::Unsigned {
            // A positive f32 subnormal input to E8M0 takes the twin.
            let f = four(
                #[inline(always)]
                |v| unsigned_fallback::<S>(x[v]),
            );
            if (f[0] | f[1] | f[2] | f[3]).any() {
                return None;
            }
        }
        Some(codes)
    }

    /// The codes of one vector's lanes `x` (f32 bits, all finite, elements
    /// `index..`), and the mask of lanes the caller must encode with the
    /// twin.
    #[inline(always)]
    pub(super) fn encode<L: LaneBits>(
        &self,
        mode: Mode,
        x: S::U,
        bits: &L,
        index: u64,
    ) -> (S::U, S::U) {
        let abs = x & self.abs_mask;
        let (magnitudes, fallback) = match mode {
            Mode::Stochastic => {
                let random = self.random(bits, index);
                if self.all_normal(abs) {
                    (self.normal_codes(abs, random), S::U::splat(0))
                } else {
                    self.mixed(abs, random, bits, index).codes(abs, self.one)
                }
            }
            _ => (self.nearest_codes(abs), S::U::splat(0)),
        };
        let codes = self.codes(x, magnitudes);
        match self.fast {
            Fast::Unsigned => (codes, fallback | unsigned_fallback::<S>(x)),
            _ => (codes, fallback),
        }
    }

    /// [`Encoder::chop`] of one vector's lanes `x` (f32 bits, all finite).
    #[inline(always)]
    pub(super) fn chop<L: LaneBits>(
        &self,
        mode: Mode,
        x: S::U,
        bits: &L,
        index: u64,
    ) -> (S::U, S::U) {
        let abs = x & self.abs_mask;
        let (rounded, fallback) = match mode {
            Mode::Stochastic => {
                let random = self.random(bits, index);
                if self.all_normal(abs) {
                    ((abs + (random & self.low)) & !self.low, S::U::splat(0))
                } else {
                    self.mixed(abs, random, bits, index)
                        .patterns(abs, self.smallest_bits)
                }
            }
            _ => (self.nearest(abs), S::U::splat(0)),
        };
        let y = rounded
            .simd_gt(self.max_bits)
            .select(self.over_bits, rounded);
        if self.fast == Fast::Unsigned {
            let y = nonpositive::<S>(x).select(self.nonpositive_bits, y);
            return (y, fallback | unsigned_fallback::<S>(x));
        }
        (y | self.sign(x, y), fallback)
    }

    /// The stochastic magnitude codes of four vectors (magnitudes `abs`,
    /// the least `bottom`), or `None` where a tiny lane's 16 random bits
    /// tie.
    #[inline(always)]
    fn stochastic_group<L: LaneBits>(
        &self,
        abs: [S::U; 4],
        bottom: S::U,
        bits: &L,
        index: u64,
    ) -> Option<[S::U; 4]> {
        let random = bits.group_random::<S>(index, self.wide);
        let at = |v: usize| index.wrapping_add((v * S::LANES) as u64);
        let normal = self.fast == Fast::Unsigned || !bottom.simd_lt_i32(self.emin_bits).any();
        if normal {
            return Some(four(
                #[inline(always)]
                |v| self.normal_codes(abs[v], random[v]),
            ));
        }
        let mixed = four(
            #[inline(always)]
            |v| {
                self.mixed(abs[v], random[v], bits, at(v))
                    .codes(abs[v], self.one)
            },
        );
        let tied = (mixed[0].1 | mixed[1].1) | (mixed[2].1 | mixed[3].1);
        if tied.any() {
            return None;
        }
        Some(four(
            #[inline(always)]
            |v| mixed[v].0,
        ))
    }

    /// Whether every lane of `abs` rounds stochastically to a normal value
    /// (every f32 normal does in the unsigned fast rule).
    #[inline(always)]
    fn all_normal(&self, abs: S::U) -> bool {
        self.fast == Fast::Unsigned || !abs.simd_lt_i32(self.emin_bits).any()
    }

    /// The random bits of one vector's elements `index..`, as
    /// [`LaneBits::group_random`] gives them: the lanes' 16 in the low
    /// bits, and word 1's above them where `base_d` exceeds 16 (every
    /// normal result then needs them).
    #[inline(always)]
    fn random<L: LaneBits>(&self, bits: &L, index: u64) -> S::U {
        let half = bits.halves::<S>(index) & self.halves;
        if self.wide {
            half | bits.word1::<S>(index) << 16
        } else {
            half
        }
    }

    /// Stochastic magnitude codes (before the overflow clamp) of `abs`,
    /// whose results are all normal, from the lanes' [`FastLanes::random`]
    /// bits: the discarded bits are shifted out.
    #[inline(always)]
    fn normal_codes(&self, abs: S::U, random: S::U) -> S::U {
        ((abs + (random & self.low)) >> self.base_d) - self.normal_offset
    }

    /// Exact stochastic rounding of finite `abs` where some result may be
    /// below the normal range (`random` as [`FastLanes::random`]): the
    /// steps of [`Mixed::patterns`] and [`Mixed::codes`].
    #[inline(always)]
    fn mixed<L: LaneBits>(&self, abs: S::U, random: S::U, bits: &L, index: u64) -> Mixed<S::U> {
        let one = self.one;
        let half = random & self.halves;
        // The binade at or above `emin`'s whose units a grid lane rounds in.
        let top = (abs >> 23).min(self.emin_field);
        // Lanes below `t` get garbage here (and `d` past 31): replaced by
        // the tiny rule.
        let d = self.emin_d - top;
        let random = if !self.wide && d.simd_gt(S::U::splat(16)).any() {
            half | bits.word1::<S>(index) << 16
        } else {
            random
        };
        let low = one.unbounded_shl(d) - one;
        // The tiny rule: the first 16 bits of `|x| / 2^t` against the
        // lane's 16 random bits (both below 2^31 in tiny lanes).
        let fraction = (S::F::from_bits(abs) * S::F::from_bits(self.tiny_scale)).trunc_small();
        let tiny = abs.simd_lt_i32(self.smallest_bits);
        Mixed {
            top,
            d,
            low,
            random: random & low,
            tiny,
            up: half.simd_lt_i32(fraction),
            tied: tiny & half.simd_eq(fraction),
        }
    }

    /// Nearest-even magnitudes (f32 patterns) of finite `abs`.
    #[inline(always)]
    fn nearest(&self, abs: S::U) -> S::U {
        let odd = (abs >> self.base_d) & self.one;
        let normal = (abs + (self.low >> 1) + odd) & !self.low;
        if self.fast == Fast::Unsigned {
            return normal;
        }
        let magic = S::F::from_bits(self.magic);
        let subnormal = ((S::F::from_bits(abs) + magic) - magic).to_bits();
        abs.simd_lt_i32(self.emin_bits).select(subnormal, normal)
    }

    /// [`FastLanes::nearest`] as codes of magnitudes (before the overflow
    /// clamp), in fewer steps.
    #[inline(always)]
    fn nearest_codes(&self, abs: S::U) -> S::U {
        let odd = (abs >> self.base_d) & self.one;
        let normal = (abs + self.rn_bias + odd) >> self.base_d;
        if self.fast == Fast::Unsigned {
            return normal;
        }
        let magic = self.magic;
        let subnormal = (S::F::from_bits(abs) + S::F::from_bits(magic)).to_bits() - magic;
        abs.simd_lt_i32(self.emin_bits).select(subnormal, normal)
    }

    /// The sign to give the result `magnitude` (code or f32 pattern) of
    /// the input bits `x`, at the bit `sign` (`fnuz` has no negative zero).
    #[inline(always)]
    fn signed(&self, sign: S::U, magnitude: S::U) -> S::U {
        if self.zero_signed {
            sign
        } else {
            sign & !magnitude.simd_eq(S::U::splat(0))
        }
    }

    /// The f32 sign bit of the chopped value `y` of `x`.
    #[inline(always)]
    fn sign(&self, x: S::U, y: S::U) -> S::U {
        self.signed(x & !self.abs_mask, y)
    }

    /// The codes from the inputs' bits `x` and the codes of their rounded
    /// magnitudes: clamped at overflow, signed (or the constant of zero
    /// and negative inputs to an unsigned format).
    #[inline(always)]
    fn codes(&self, x: S::U, magnitudes: S::U) -> S::U {
        let clamped = magnitudes.min(self.overflow_pos);
        if self.fast == Fast::Unsigned {
            return nonpositive::<S>(x).select(self.nonpositive_code, clamped);
        }
        let sign = (x >> self.sign_shift) & self.sign_code;
        clamped | self.signed(sign, magnitudes)
    }
}
