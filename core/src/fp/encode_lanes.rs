//! [`Format::encode`] and [`Format::chop`] on lanes: the SIMD form of the
//! scalar twins in `encode.rs`, for every format and mode, bitwise equal
//! to them.
//!
//! The format's parameters are folded once per call into an [`Encoder`]
//! (plain `u32`s the loop splats, so the hot loop pays no lookups).
//!
//! A vector whose lanes are all finite takes a fast rule where the call
//! has one (nearest-even and exact stochastic rounding into a signed
//! format with subnormals kept, which is every narrow named format, and
//! into E8M0): normal results by integer arithmetic on the bit pattern with
//! the format's constant shift; subnormal results by one f32 addition of
//! a "magic" power of two whose last bit is the format's subnormal spacing
//! (the adder rounds to nearest even on that grid, and the low bits of the
//! sum are the code, as in F. Giesen's `float_to_half_fast3`); overflow by
//! clamping the code; stochastic rounding below the smallest value by
//! comparing the 16 random bits with the first 16 bits of the fraction,
//! scaled exactly in f32. Every other vector takes the general rule: it
//! rounds as the twin does ("truncate the low `d` bits, maybe add `2^d`",
//! and the "tiny" rule between 0 and the smallest value) for every mode.
//!
//! Lanes the lane rules do not cover are marked for the caller to round
//! with the twin: NaN, infinity, f32 subnormal inputs or results (general
//! rule), zero and negative inputs to unsigned E8M0 (general rule), f32
//! subnormal inputs to E8M0, and stochastic "tiny" lanes whose first 16
//! random bits tie (probability 2^-16). Ordinary data never takes that
//! path; it only costs speed, never bits.

use super::NanEncoding;
use super::encode::{code_of, overflow, smallest_exponent, unsigned_nonpositive};
use super::format::{Format, pattern};
use super::round::{Mode, Round};
use crate::arch::{Simd, U32s};
use crate::rng::{BlockKeys, GroupDraws, RandomBits, RandomStream};

/// Lanes of random bits for positions `index..index + S::LANES`.
pub(crate) trait LaneBits {
    /// Each lane's [`RandomBits::half_bits`] (in the low 16 bits).
    fn halves<S: Simd>(&self, index: u64) -> S::U;
    /// Each lane's word 1.
    fn word1<S: Simd>(&self, index: u64) -> S::U;
    /// The eight words whose halves are the [`RandomBits::half_bits`] of
    /// elements `index..index + 16` (`index` a multiple of 16): low halves
    /// for the first eight, high halves for the next eight.
    fn half_words<S: Simd>(&self, index: u64) -> S::U8;

    /// The same bits in the form that a group loop over the elements
    /// from `first` on, `len` of them, draws in fewer steps, if any.
    type Grouped: LaneBits;
    /// See [`LaneBits::Grouped`]: `None` where there is no such form.
    fn grouped(&self, first: u64, len: usize) -> Option<Self::Grouped>;

    /// Whether loops over these bits may take the fast rule's groups of
    /// four vectors; where not ([`General`]), those loops are not compiled.
    const GROUPS: bool = true;

    /// The random bits of the four vectors of elements `index..`, as
    /// [`Simd::group_random`] lays them out: each lane's half bits, and the
    /// low 16 bits of its word 1 above them if `wide`. One draw of word 0
    /// per 16 elements where `index` is a multiple of 16.
    #[inline(always)]
    fn group_random<S: Simd>(&self, index: u64, wide: bool) -> [S::U; 4] {
        let halves = S::U::splat(0xffff);
        let at = |v: usize| index.wrapping_add((v * S::LANES) as u64);
        let mut random = [halves; 4];
        if index.is_multiple_of(16) {
            let per_draw = 16 / S::LANES;
            for first in (0..4).step_by(per_draw) {
                let words = self.half_words::<S>(at(first));
                for k in 0..per_draw {
                    random[first + k] = S::group_halves(words, k) & halves;
                }
            }
        } else {
            for (v, r) in random.iter_mut().enumerate() {
                *r = self.halves::<S>(at(v)) & halves;
            }
        }
        if wide {
            for (v, r) in random.iter_mut().enumerate() {
                *r |= self.word1::<S>(at(v)) << 16;
            }
        }
        random
    }
}

/// The counter-based stream: eight or sixteen lanes per draw, with the
/// block keys of words 0 and 1 derived once per call.
#[derive(Clone, Copy)]
pub(crate) struct StreamBits {
    stream: RandomStream,
    /// Word 0's keys for the block of the first element's half position.
    word0: BlockKeys,
    /// Word 1's keys for the block of the first element.
    word1: BlockKeys,
}

impl StreamBits {
    /// `stream`'s lanes for a call whose first element is `first_index`.
    #[inline(always)]
    pub(crate) const fn new(stream: RandomStream, first_index: u64) -> Self {
        Self {
            stream,
            word0: BlockKeys::new(stream, first_index >> 1, 0),
            word1: BlockKeys::new(stream, first_index, 1),
        }
    }
}

impl LaneBits for StreamBits {
    #[inline(always)]
    fn halves<S: Simd>(&self, index: u64) -> S::U {
        if index.is_multiple_of(8) {
            S::keyed_halves(&self.word0, index)
        } else {
            gather::<S::U>(
                #[inline(always)]
                |i| u32::from(self.stream.half_bits(index.wrapping_add(i))),
            )
        }
    }

    #[inline(always)]
    fn word1<S: Simd>(&self, index: u64) -> S::U {
        S::keyed_words(&self.word1, index)
    }

    #[inline(always)]
    fn half_words<S: Simd>(&self, index: u64) -> S::U8 {
        self.word0.words_lanes(index >> 1)
    }

    type Grouped = GroupBits;

    #[inline(always)]
    fn grouped(&self, first: u64, len: usize) -> Option<GroupBits> {
        let draws = GroupDraws::new(self.stream, first, len as u64)?;
        Some(GroupBits {
            draws,
            stream: *self,
        })
    }
}

/// The counter-based stream in a group loop whose elements start at a
/// multiple of 32 and lie in one 2^32 block: [`GroupDraws`] draws its
/// groups' bits with no check per draw.
#[derive(Clone, Copy)]
pub(crate) struct GroupBits {
    draws: GroupDraws,
    /// The same bits with checks, for the reads outside whole groups.
    stream: StreamBits,
}

impl LaneBits for GroupBits {
    #[inline(always)]
    fn halves<S: Simd>(&self, index: u64) -> S::U {
        self.stream.halves::<S>(index)
    }

    /// (The group loop reads word 1 at multiples of `S::LANES` in range.)
    #[inline(always)]
    fn word1<S: Simd>(&self, index: u64) -> S::U {
        self.draws.word1(index)
    }

    #[inline(always)]
    fn half_words<S: Simd>(&self, index: u64) -> S::U8 {
        self.stream.half_words::<S>(index)
    }

    type Grouped = NoBits;

    #[inline(always)]
    fn grouped(&self, _: u64, _: usize) -> Option<NoBits> {
        None
    }

    #[inline(always)]
    fn group_random<S: Simd>(&self, index: u64, wide: bool) -> [S::U; 4] {
        S::group_random(&self.draws, index, wide)
    }
}

/// `L` in a loop whose mode never takes the fast groups (neither
/// nearest-even nor exact stochastic rounding), or whose bits come from a
/// source read one element at a time: the group loops, the largest part
/// of a kernel, are compiled only for the stream's two fast modes.
pub(crate) struct General<L>(pub(crate) L);

impl<L: LaneBits> LaneBits for General<L> {
    #[inline(always)]
    fn halves<S: Simd>(&self, index: u64) -> S::U {
        self.0.halves::<S>(index)
    }

    #[inline(always)]
    fn word1<S: Simd>(&self, index: u64) -> S::U {
        self.0.word1::<S>(index)
    }

    #[inline(always)]
    fn half_words<S: Simd>(&self, index: u64) -> S::U8 {
        self.0.half_words::<S>(index)
    }

    type Grouped = NoBits;

    #[inline(always)]
    fn grouped(&self, _: u64, _: usize) -> Option<NoBits> {
        None
    }

    const GROUPS: bool = false;
}

/// No bits: the [`LaneBits::Grouped`] of sources without a grouped form
/// (never built, so the loops that would read it are never compiled).
#[derive(Clone, Copy)]
pub(crate) enum NoBits {}

impl LaneBits for NoBits {
    fn halves<S: Simd>(&self, _: u64) -> S::U {
        match *self {}
    }

    fn word1<S: Simd>(&self, _: u64) -> S::U {
        match *self {}
    }

    fn half_words<S: Simd>(&self, _: u64) -> S::U8 {
        match *self {}
    }

    type Grouped = Self;

    fn grouped(&self, _: u64, _: usize) -> Option<Self> {
        match *self {}
    }
}

/// Any other source, read one element at a time.
pub(crate) struct SourceBits<'a, B: ?Sized>(pub(crate) &'a B);

impl<B: RandomBits + ?Sized> LaneBits for SourceBits<'_, B> {
    #[inline(always)]
    fn halves<S: Simd>(&self, index: u64) -> S::U {
        gather::<S::U>(
            #[inline(always)]
            |i| u32::from(self.0.half_bits(index.wrapping_add(i))),
        )
    }

    #[inline(always)]
    fn word1<S: Simd>(&self, index: u64) -> S::U {
        gather::<S::U>(
            #[inline(always)]
            |i| self.0.word(index.wrapping_add(i), 1),
        )
    }

    #[inline(always)]
    fn half_words<S: Simd>(&self, index: u64) -> S::U8 {
        let half = |i: u64| u32::from(self.0.half_bits(index.wrapping_add(i)));
        gather::<S::U8>(
            #[inline(always)]
            |i| half(i) | half(i + 8) << 16,
        )
    }

    type Grouped = NoBits;

    #[inline(always)]
    fn grouped(&self, _: u64, _: usize) -> Option<NoBits> {
        None
    }
}

/// A kernel's vector loop, generic over its random bits' lanes, with the
/// rounding mode as an argument (a constant where [`run_lanes`] matched
/// it).
pub(crate) trait LaneKernel: Sized {
    type Output;
    /// The loop on backend `S` (always inlined, as [`Kernel::run`]).
    ///
    /// [`Kernel::run`]: crate::arch::Kernel::run
    fn lanes<S: Simd, L: LaneBits>(self, mode: Mode, bits: &L) -> Self::Output;
}

/// [`run_lanes_at`] for a call whose elements start at position 0 (the
/// stream's keys are then derived once per 2^32 elements; a call elsewhere
/// gets the same bits, in more steps).
#[inline(always)]
pub(crate) fn run_lanes<S: Simd, K: LaneKernel, B: RandomBits + ?Sized>(
    kernel: K,
    bits: &B,
    mode: Mode,
) -> K::Output {
    run_lanes_at::<S, K, B>(kernel, bits, mode, 0)
}

/// Runs `kernel`'s loop with `bits` as lanes: the counter-based stream
/// draws eight or sixteen lanes at once (its keys derived for the block of
/// `first_index`, the call's first element), any other source one element
/// at a time; nearest-even and exact stochastic rounding on the stream get
/// loops of their own with the mode a constant.
#[inline(always)]
pub(crate) fn run_lanes_at<S: Simd, K: LaneKernel, B: RandomBits + ?Sized>(
    kernel: K,
    bits: &B,
    mode: Mode,
    first_index: u64,
) -> K::Output {
    // Each loop a function of its own (see `Simd::outline`).
    match (bits.as_stream(), mode) {
        (Some(s), Mode::NearestEven) => S::outline(
            #[inline(always)]
            || kernel.lanes::<S, _>(Mode::NearestEven, &StreamBits::new(s, first_index)),
        ),
        (Some(s), Mode::Stochastic) => S::outline(
            #[inline(always)]
            || kernel.lanes::<S, _>(Mode::Stochastic, &StreamBits::new(s, first_index)),
        ),
        (Some(s), mode) => S::outline(
            #[inline(always)]
            || kernel.lanes::<S, _>(mode, &General(StreamBits::new(s, first_index))),
        ),
        (None, mode) => S::outline(
            #[inline(always)]
            || kernel.lanes::<S, _>(mode, &General(SourceBits(bits))),
        ),
    }
}

/// `e`'s f32 exponent field, 0 below f32's normals.
const fn biased(e: i32) -> u32 {
    if e + 127 > 0 { (e + 127) as u32 } else { 0 }
}

/// The random bits of a grid lane: its 16, then word 1's below them where
/// some lane discards more than 16 bits; the low `d` kept (`low`).
#[inline(always)]
fn random<S: Simd, L: LaneBits>(half: S::U, d: S::U, low: S::U, bits: &L, index: u64) -> S::U {
    let mut r = half;
    if d.simd_gt(S::U::splat(16)).any() {
        r |= bits.word1::<S>(index) << 16;
    }
    r & low
}

/// The first `k <= 16` bits of the tiny rule's uniform (the lanes' 16
/// random bits) against those of the significand `m` (fraction `m /
/// 2^shift`): the masks of "below" and "tied".
#[inline(always)]
fn compare<S: Simd>(half: S::U, m: S::U, shift: S::U, k: u32) -> (S::U, S::U) {
    let drawn = half >> (16 - k);
    let target = m.unbounded_shr(shift - S::U::splat(k));
    (drawn.simd_lt(target), drawn.simd_eq(target))
}

#[inline(always)]
fn gather<U: U32s>(f: impl Fn(u64) -> u32) -> U {
    let mut lanes = [0u32; 16];
    for (i, l) in lanes.iter_mut().enumerate().take(U::LANES) {
        *l = f(i as u64);
    }
    U::from_slice(&lanes)
}

/// Which fast rule the vectors whose lanes are all finite take (see the
/// module docs); the general rule takes every other vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Fast {
    /// None: every vector takes the general rule.
    Off,
    /// A signed format with subnormals kept, rounded to nearest even or
    /// exactly stochastically.
    Signed,
    /// An unsigned format without mantissa (E8M0): every f32 normal is in
    /// its normal range, and zero and negative lanes are one constant.
    Unsigned,
}

impl Fast {
    /// The fast rule for `f` and `round`, given the codes of overflow.
    const fn of(f: Format, round: Round, over_pos: u32, over_neg: u32, sign_code: u32) -> Self {
        let m = f.mantissa_bits();
        let t = smallest_exponent(f, round);
        // Codes past the largest finite one all become the overflow code:
        // a clamp, for either sign.
        let max_code = code_of(f, f.max_bits());
        let clamps =
            (over_pos == max_code || over_pos == max_code + 1) && over_neg == over_pos | sign_code;
        let signed = f.is_signed()
            && f.has_zero()
            && matches!(m, 1..=22)
            && t == f.emin() - m as i32
            && f.emin() >= -126
            // 2^(16 - t) scales the tiny rule's fraction exactly.
            && matches!(t, -111..=16);
        let unsigned = !f.is_signed() && m == 0 && f.emin() <= -126 && (127 - f.bias()) % 2 == 0;
        if !clamps || !matches!(round.mode, Mode::NearestEven | Mode::Stochastic) {
            Self::Off
        } else if signed {
            Self::Signed
        } else if unsigned {
            Self::Unsigned
        } else {
            Self::Off
        }
    }
}

/// A format and rounding folded into the constants the lane rules use
/// (f32 exponent fields are biased by 127).
#[derive(Clone, Copy)]
pub(crate) struct Encoder {
    /// The fast rule of this format and rounding.
    pub(super) fast: Fast,
    /// Field of the smallest result exponent `t` (0 if below f32's normals).
    pub(super) t_field: u32,
    /// Field of the smallest normal exponent (0 if below f32's normals).
    pub(super) emin_field: u32,
    /// Discarded bits in the normal range: `23 - mantissa_bits`.
    pub(super) base_d: u32,
    /// f32's implicit bit where the format has a mantissa (the parity of
    /// a value without one is its exponent's).
    pub(super) implicit: u32,
    pub(super) max_bits: u32,
    /// The codes of overflow for each sign.
    pub(super) overflow_pos: u32,
    pub(super) overflow_neg: u32,
    /// f32 bits of `2^t`, the tiny rule's upper neighbour.
    pub(super) smallest_bits: u32,
    /// What a zero result is (E8M0 has no zero: its smallest value).
    pub(super) zero_bits: u32,
    /// Whether a zero result keeps the input's sign (not in `fnuz`).
    pub(super) zero_signed: bool,
    /// The sign bits of the input and of the code (0 if unsigned).
    pub(super) sign_code: u32,
    pub(super) signed: bool,
    /// `(127 - bias) << mantissa_bits`: a normal value's code is its f32
    /// pattern shifted right by `base_d`, less this.
    pub(super) normal_offset: u32,
    /// A subnormal value's code is its significand shifted right by this
    /// less its field.
    pub(super) subnormal_shift: u32,
    /// The fast rules' constants. f32 bits of `2^emin`.
    pub(super) emin_bits: u32,
    /// Nearest-even: `2^(base_d - 1) - 1` less `normal_offset << base_d`,
    /// added with the parity bit before the shift that gives a normal code.
    pub(super) rn_bias: u32,
    /// f32 bits of `2^(emin - m + 23)`, whose last bit is the subnormal
    /// spacing: adding it to a magnitude below `2^emin` rounds that to
    /// nearest even on the subnormal grid and leaves the code in the low
    /// bits.
    pub(super) magic: u32,
    /// f32 bits of `2^(16 - t)`: a magnitude below `2^t` times this is its
    /// fraction of `2^t` in units of `2^-16`, exactly.
    pub(super) tiny_scale: u32,
    /// f32 bits of the positive overflow result (chop's).
    pub(super) over_bits: u32,
    /// `31 - exponent_bits - mantissa_bits`: moves f32's sign bit to the
    /// code's.
    pub(super) sign_shift: u32,
    /// f32 bits of the result of a zero or negative input to an unsigned
    /// format, and its code.
    pub(super) nonpositive_bits: u32,
    pub(super) nonpositive_code: u32,
}

impl Encoder {
    #[inline(always)]
    pub(crate) const fn new(f: Format, round: Round) -> Self {
        let m = f.mantissa_bits();
        let t = smallest_exponent(f, round);
        let zero_bits = if f.has_zero() {
            0
        } else {
            pattern(f.emin(), 1 << 23)
        };
        let sign_code = if f.is_signed() {
            1 << (f.exponent_bits() + m)
        } else {
            0
        };
        let overflow_pos = code_of(f, overflow(f, round, 0, false));
        let overflow_neg = code_of(f, overflow(f, round, 0x8000_0000, false));
        let fast = Fast::of(f, round, overflow_pos, overflow_neg, sign_code);
        let base_d = 23 - m;
        let normal_offset = ((127 - f.bias()) as u32) << m;
        let signed_fast = matches!(fast, Fast::Signed);
        let nonpositive_bits = unsigned_nonpositive(f, round, 0);
        Self {
            fast,
            t_field: biased(t),
            emin_field: biased(f.emin()),
            base_d,
            implicit: if m > 0 { 1 << 23 } else { 0 },
            max_bits: f.max_bits(),
            overflow_pos,
            overflow_neg,
            smallest_bits: if t >= -126 { pattern(t, 1 << 23) } else { 0 },
            zero_bits,
            zero_signed: !matches!(f.nan_encoding(), NanEncoding::NegativeZero),
            sign_code,
            signed: f.is_signed(),
            normal_offset,
            subnormal_shift: (f.emin() - m as i32 + 23 + 127) as u32,
            emin_bits: if signed_fast {
                pattern(f.emin(), 1 << 23)
            } else {
                0
            },
            rn_bias: if base_d > 0 {
                ((1 << (base_d - 1)) - 1u32).wrapping_sub(normal_offset << base_d)
            } else {
                0
            },
            magic: if signed_fast {
                pattern(f.emin() - m as i32 + 23, 1 << 23)
            } else {
                0
            },
            tiny_scale: if signed_fast {
                pattern(16 - t, 1 << 23)
            } else {
                0
            },
            over_bits: overflow(f, round, 0, false),
            sign_shift: 31 - (f.exponent_bits() + m),
            nonpositive_bits,
            nonpositive_code: code_of(f, nonpositive_bits),
        }
    }

    /// Whether this format and rounding have a fast rule.
    #[inline(always)]
    pub(crate) fn has_fast_rule(&self) -> bool {
        self.fast != Fast::Off
    }

    /// The general rule on a vector (bits `x`, magnitudes `abs`).
    #[inline(always)]
    pub(super) fn general<S: Simd, L: LaneBits>(
        &self,
        mode: Mode,
        x: S::U,
        abs: S::U,
        bits: &L,
        index: u64,
    ) -> (S::U, S::U) {
        let s = <S::U as U32s>::splat;
        let zero = s(0);
        let field = abs >> 23;
        let negative = x.simd_ge(s(0x8000_0000));
        let nonzero = abs.simd_ne(zero);
        let mut fallback = field.simd_eq(s(0xff)) | (field.simd_eq(zero) & nonzero);
        if !self.signed {
            fallback |= negative | !nonzero;
        }
        let grid = field.simd_ge(s(self.t_field)) & nonzero;
        let half = if mode.is_stochastic() {
            bits.halves::<S>(index) & s(0xffff)
        } else {
            zero
        };
        let rounded = self.round_grid::<S, L>(mode, abs, field, negative, half, bits, index);
        let (tiny, undecided) = self.round_tiny::<S>(mode, abs, field, negative, half);
        fallback |= undecided & !grid & nonzero;
        let rounded = grid.select(rounded, (nonzero & !grid).select(tiny, zero));
        let (codes, subnormal) = self.code::<S>(rounded, negative);
        (codes, fallback | subnormal)
    }

    /// Rounds the lanes on the grid of `2^d` pattern units (every lane;
    /// the caller keeps those at or above `t`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn round_grid<S: Simd, L: LaneBits>(
        &self,
        mode: Mode,
        abs: S::U,
        field: S::U,
        negative: S::U,
        half: S::U,
        bits: &L,
        index: u64,
    ) -> S::U {
        let s = <S::U as U32s>::splat;
        let (zero, one) = (s(0), s(1));
        // Lanes below `t` (the tiny rule's) take `t`'s grid: no wild shifts.
        let field = field.max(s(self.t_field));
        let d = s(self.base_d) + (s(self.emin_field).max(field) - field);
        let ulp = one.unbounded_shl(d);
        let low = ulp - one;
        let rest = abs & low;
        let trunc = abs - rest;
        let inexact = rest.simd_ne(zero);
        let half_ulp = ulp >> 1;
        let odd = ((abs | s(self.implicit)).unbounded_shr(d) & one).simd_ne(zero);
        let up = match mode {
            Mode::NearestEven => rest.simd_gt(half_ulp) | (rest.simd_eq(half_ulp) & odd),
            Mode::NearestAway => rest.simd_ge(half_ulp),
            Mode::NearestZero => rest.simd_gt(half_ulp),
            Mode::TowardZero => zero,
            Mode::Up => !negative,
            Mode::Down => negative,
            Mode::ToOdd => !odd,
            Mode::Stochastic => (rest + random::<S, L>(half, d, low, bits, index)).simd_ge(ulp),
            Mode::StochasticBits(k) => {
                let dropped = d - d.min(s(u32::from(k)));
                let kept = !(one.unbounded_shl(dropped) - one);
                (rest + (random::<S, L>(half, d, low, bits, index) & kept)).simd_ge(ulp)
            }
            Mode::StochasticEqual => (half & one).simd_ne(zero),
        };
        trunc + (up & inexact & ulp)
    }

    /// The tiny rule (results 0 or `2^t`) on every lane, and the mask of
    /// lanes whose first 16 random bits do not decide.
    #[inline(always)]
    fn round_tiny<S: Simd>(
        &self,
        mode: Mode,
        abs: S::U,
        field: S::U,
        negative: S::U,
        half: S::U,
    ) -> (S::U, S::U) {
        let s = <S::U as U32s>::splat;
        let (zero, ones) = (s(0), s(u32::MAX));
        let m = (abs & s(0x007f_ffff)) | s(0x0080_0000);
        // s = t - ex + 23 >= 24: the fraction is m / 2^s.
        let shift = s(self.t_field + 23) - field;
        let below_half = field.simd_eq(s(self.t_field.wrapping_sub(1)));
        let above_half = below_half & (abs & s(0x007f_ffff)).simd_ne(zero);
        let (up, undecided) = match mode {
            Mode::NearestEven | Mode::NearestZero => (above_half, zero),
            Mode::NearestAway => (below_half, zero),
            Mode::TowardZero => (zero, zero),
            Mode::Up => (!negative, zero),
            Mode::Down => (negative, zero),
            Mode::ToOdd => (ones, zero),
            Mode::Stochastic => compare::<S>(half, m, shift, 16),
            Mode::StochasticBits(0) => (zero, zero),
            Mode::StochasticBits(k) if k <= 16 => {
                (compare::<S>(half, m, shift, u32::from(k)).0, zero)
            }
            Mode::StochasticBits(_) => compare::<S>(half, m, shift, 16),
            Mode::StochasticEqual => ((half & s(1)).simd_ne(zero), zero),
        };
        (up & s(self.smallest_bits), undecided)
    }

    /// The codes of rounded magnitudes (f32 patterns), and the mask of
    /// lanes the lane rules do not cover (f32 subnormal results, and
    /// underflow to a `2^t` below f32's normals).
    #[inline(always)]
    fn code<S: Simd>(&self, rounded: S::U, negative: S::U) -> (S::U, S::U) {
        let s = <S::U as U32s>::splat;
        let zero = s(0);
        let is_zero = rounded.simd_eq(zero);
        let y = is_zero.select(s(self.zero_bits), rounded);
        let field = y >> 23;
        let uncovered = field.simd_eq(zero) & y.simd_ne(zero);
        let over = y.simd_gt(s(self.max_bits));
        let normal = (y >> self.base_d) - s(self.normal_offset);
        let significand = (y & s(0x007f_ffff)) | s(0x0080_0000);
        let sub = significand.unbounded_shr(s(self.subnormal_shift) - field);
        let magnitude = field.simd_ge(s(self.emin_field)).select(normal, sub);
        // (E8M0's zero result, its smallest value, is an f32 subnormal:
        // uncovered.)
        let magnitude = is_zero.select(zero, magnitude);
        let signs = if self.zero_signed {
            negative
        } else {
            negative & !is_zero
        };
        let code = magnitude | (signs & s(self.sign_code));
        let overflowed = negative.select(s(self.overflow_neg), s(self.overflow_pos));
        (over.select(overflowed, code), uncovered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::Portable;
    use crate::fp::matmul::tests::NARROW;
    use crate::fp::{Format, Overflow};

    /// Every narrow named format, f16 and E8M0 have the fast rule in the
    /// common modes, with either overflow policy.
    #[test]
    fn common_cases_have_the_fast_rule() {
        let formats = NARROW.into_iter().chain([
            Format::E8M0FNU,
            Format::F16,
            Format::F143.with_scale_bias(-32).unwrap(),
        ]);
        for f in formats {
            for mode in [Mode::NearestEven, Mode::Stochastic] {
                for overflow in [Overflow::Infinity, Overflow::Saturate] {
                    let round = Round::new(mode).with_overflow(overflow);
                    assert!(Encoder::new(f, round).has_fast_rule(), "{f:?} {round:?}");
                }
            }
            // Flushing subnormals takes the general rule (E8M0 has none).
            let flush = Round::STOCHASTIC.with_subnormals(crate::fp::Subnormals::Flush);
            assert_eq!(
                Encoder::new(f, flush).has_fast_rule(),
                !f.is_signed(),
                "{f:?}"
            );
        }
    }

    /// Ordinary data (normal f32, the formats' range and beyond it) takes
    /// the lanes in every mode: the twin only sees the rare cases.
    #[test]
    fn ordinary_data_takes_the_lanes() {
        let stream = RandomStream::new(3, 0);
        let formats = NARROW
            .into_iter()
            .chain([Format::E8M0FNU, Format::F16, Format::BF16]);
        let modes = [
            Mode::NearestEven,
            Mode::NearestAway,
            Mode::TowardZero,
            Mode::Up,
            Mode::ToOdd,
            Mode::Stochastic,
            Mode::StochasticBits(5),
            Mode::StochasticEqual,
        ];
        for f in formats {
            for mode in modes {
                let encoder = Encoder::new(f, Round::new(mode));
                let mut taken = 0;
                for i in 0..64u32 {
                    // Magnitudes 2^-20 .. 2^20, signed where the format is.
                    let x: [f32; 8] = core::array::from_fn(|l| {
                        let e = (i * 8 + l as u32) % 41;
                        let v =
                            f32::from_bits((107 + e) << 23 | i.wrapping_mul(2_654_435_761) >> 9);
                        if f.is_signed() && l % 2 == 1 { -v } else { v }
                    });
                    let lanes = wide::f32x8::from(x);
                    let (_, fallback) = encoder.encode::<Portable, _>(
                        mode,
                        lanes,
                        &StreamBits::new(stream, 0),
                        u64::from(i) * 8,
                    );
                    taken += fallback.to_array().iter().filter(|m| **m != 0).count();
                }
                // Only stochastic tiny lanes whose 16 bits tie (2^-16 each).
                assert!(
                    taken <= 1,
                    "{f:?} {mode:?}: {taken} of 512 lanes took the twin"
                );
            }
        }
    }
}
