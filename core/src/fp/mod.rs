//! Number formats and rounding: f32 into f16, bf16, TF32, every FP8, FP6
//! and FP4 format of ml_dtypes and OCP, Graphcore's F143/F152 and any
//! CPFloat format, in every rounding mode; the f16/bf16 slice kernels.
//!
//! A [`Format`] is a value with `const` presets; a [`Round`] says how to
//! round (a [`Mode`], an [`Overflow`] policy, [`Subnormals`]):
//!
//! ```
//! use tessera_core::fp::{self, Format, Mode, Round};
//! use tessera_core::rng::RandomStream;
//!
//! let s = RandomStream::new(1, 0);
//! let f = Format::E4M3FN;
//! let code = f.encode(0.3, Round::NEAREST_EVEN, s, 0); // 0x2a
//! assert_eq!(f.decode(code), 0.3125);
//! assert_eq!(f.chop(0.3, Round::new(Mode::TowardZero), s, 0), 0.28125);
//! let mut x = [0.3f32; 64];
//! fp::chop_slice(f, &mut x, Round::STOCHASTIC, &s, 0); // unbiased
//! assert!(x.iter().all(|v| *v == 0.28125 || *v == 0.3125));
//! ```
//!
//! The f16/bf16 slice kernels are generic over [`HalfFloat`] (implemented for
//! [`f16`](struct@f16) and [`bf16`](struct@bf16)); the destination's type picks the format:
//!
//! ```
//! use tessera_core::fp::{self, bf16, f16, Overflow, Stochastic};
//! use tessera_core::rng::RandomStream;
//!
//! let x = [1.0f32, 0.1, -65520.0, f32::NAN];
//! let mut h = [f16::ZERO; 4];
//! fp::f32_to_half_slice(&x, &mut h); // round to nearest even
//! assert_eq!(h[0], f16::ONE);
//! assert!(h[2].is_infinite());
//!
//! let sr = Stochastic::new(RandomStream::new(1, 0), Overflow::Saturate);
//! let mut b = [bf16::ZERO; 4];
//! fp::f32_to_half_sr_slice(&x, &mut b, sr, 0);
//! assert_eq!(b[0], bf16::ONE); // exact values never change
//! assert!(b[3].is_nan());
//! ```
//!
//! # Formats
//!
//! Every figure is checked by the tests against the format's parameters
//! (ml_dtypes' `finfo`, the OCP OFP8 and MX v1.0 specifications, gfloat's
//! table, Poplar's `Quarter.hpp`).
//!
//! | format | bits | bias | max | min normal | min subnormal | NaN | infinity |
//! |---|---|---|---|---|---|---|---|
//! | [`E3M4`](Format::E3M4) | 8 | 3 | 15.5 | 2^-2 | 2^-6 | IEEE | yes |
//! | [`E4M3`](Format::E4M3) | 8 | 7 | 240 | 2^-6 | 2^-9 | IEEE | yes |
//! | [`E4M3FN`](Format::E4M3FN) (OCP E4M3) | 8 | 7 | 448 | 2^-6 | 2^-9 | `S.1111.111` | no |
//! | [`E4M3FNUZ`](Format::E4M3FNUZ) = [`F143`](Format::F143) | 8 | 8 | 240 | 2^-7 | 2^-10 | `0x80` | no |
//! | [`E4M3B11FNUZ`](Format::E4M3B11FNUZ) | 8 | 11 | 30 | 2^-10 | 2^-13 | `0x80` | no |
//! | [`E5M2`](Format::E5M2) (OCP E5M2) | 8 | 15 | 57344 | 2^-14 | 2^-16 | IEEE | yes |
//! | [`E5M2FNUZ`](Format::E5M2FNUZ) = [`F152`](Format::F152) | 8 | 16 | 57344 | 2^-15 | 2^-17 | `0x80` | no |
//! | [`E8M0FNU`](Format::E8M0FNU) (unsigned, no zero) | 8 | 127 | 2^127 | 2^-127 | none | `0xff` | no |
//! | [`E2M3FN`](Format::E2M3FN) (OCP FP6) | 6 | 1 | 7.5 | 1 | 2^-3 | none | no |
//! | [`E3M2FN`](Format::E3M2FN) (OCP FP6) | 6 | 3 | 28 | 2^-2 | 2^-4 | none | no |
//! | [`E2M1FN`](Format::E2M1FN) (OCP FP4) | 4 | 1 | 6 | 1 | 2^-1 | none | no |
//! | [`F16`](Format::F16) | 16 | 15 | 65504 | 2^-14 | 2^-24 | IEEE | yes |
//! | [`BF16`](Format::BF16) | 16 | 127 | 3.3895e38 | 2^-126 | 2^-133 | IEEE | yes |
//! | [`TF32`](Format::TF32) | 19 | 127 | 3.4028e38 | 2^-126 | 2^-136 | IEEE | yes |
//! | [`Format::cpfloat`]`(p, emin, emax, subnormals)` | | `1 - emin` | `2^emax (2 - 2^(1-p))` | `2^emin` | `2^(emin-p+1)` | IEEE | yes |
//!
//! Graphcore's scale bias `s` (`-32..=31`, [`Format::with_scale_bias`])
//! multiplies every value by `2^s`. E8M0 has no zero and no sign: positive
//! values below `2^-127` round to `2^-127`; zero and negative inputs
//! (`-0.0` included) give NaN, or `2^-127` with [`Overflow::Saturate`]
//! (`-inf` stays NaN), as ml_dtypes' `float8_e8m0fnu` converts them: its
//! `ConvertImpl` (`ml_dtypes/include/float8.h`, 0.5 to 0.6) returns NaN,
//! or `lowest()`/`denorm_min()` (both `2^-127`) when saturating, and its
//! test `Float8E8m0fnuTest.NegativeInput` checks it. (PyTorch's
//! `Float8_e8m0fnu` reads the exponent only: `-x` as `x`, 0 as `2^-127`.)
//!
//! ```
//! use tessera_core::fp::{Format, Overflow, Round};
//! use tessera_core::rng::RandomStream;
//!
//! let (f, s) = (Format::E8M0FNU, RandomStream::new(0, 0));
//! assert_eq!(f.encode(0.0, Round::NEAREST_EVEN, s, 0), 0xff); // NaN
//! assert_eq!(f.encode(-2.0, Round::NEAREST_EVEN, s, 0), 0xff);
//! let saturate = Round::NEAREST_EVEN.with_overflow(Overflow::Saturate);
//! assert_eq!(f.encode(-2.0, saturate, s, 0), 0); // 2^-127
//! ```
//!
//! # Rounding modes
//!
//! | [`Mode`] | result for `a < x < b` (neighbours) | random bits |
//! |---|---|---|
//! | `NearestEven`, `NearestAway`, `NearestZero` | the nearer; ties to the even code, away from zero, toward zero | none |
//! | `TowardZero`, `Up`, `Down` | truncation; toward +inf; toward -inf | none |
//! | `ToOdd` | the one with an odd code | none |
//! | `Stochastic` | `b` with probability `(x - a) / (b - a)` exactly | every discarded bit |
//! | `StochasticBits(k)` | `b` with probability `floor(f 2^k) / 2^k`, `f = (x - a) / (b - a)`: bias toward zero below `2^-k` spacings | `k` |
//! | `StochasticEqual` | `a` or `b`, 1/2 each (CPFloat mode 6) | 1 |
//!
//! Overflow follows [`Overflow`] (IEEE 754's directed-rounding rules;
//! formats without infinity give NaN, OCP's non-saturating conversion);
//! [`Subnormals::Flush`] rounds as if the format had none. NaN never
//! becomes a number: [`encode_slice`] counts NaN inputs to formats
//! without NaN.
//!
//! The stochastic modes read, for element `index`, its 16
//! [`RandomStream::half_bits`] and then its words 1, 2, ... of
//! [`RandomStream::word`] (or the same from any [`RandomBits`] source): for
//! `d <= 23` discarded bits, the low 16 then word 1's low `d - 16`, added to
//! the discarded bits; below the format's smallest value by more than 23
//! bits, a uniform compared with the significand, half bits first
//! (details for f16 below). For f16 and bf16 these are exactly the bits of
//! the table below, so [`Format::F16`] and [`Format::BF16`] give the
//! kernels' results bit for bit.
//!
//! [`RandomBits`]: crate::rng::RandomBits
//!
//! # Which function do I want
//!
//! | to | slices (SIMD) | one value (`const fn` scalar twin) |
//! |---|---|---|
//! | f32 -> f16/bf16, to nearest even | [`f32_to_half_slice`] | [`scalar::f32_to_f16`], [`scalar::f32_to_bf16`] |
//! | f32 -> f16/bf16, stochastically | [`f32_to_half_sr_slice`] | [`scalar::f32_to_f16_sr`], [`scalar::f32_to_bf16_sr`] |
//! | ... with your own random bits | | [`scalar::f32_to_f16_sr_with`], [`scalar::f32_to_bf16_sr_with`] |
//! | f16/bf16 -> f32 (exact) | [`half_to_f32_slice`] | [`scalar::f16_to_f32`], [`scalar::bf16_to_f32`] |
//! | f32 -> any format, any mode (codes) | [`encode_slice`] | [`Format::encode`], [`Format::encode_with`] |
//! | codes -> f32 (exact) | [`decode_slice`] | [`Format::decode`] |
//! | round to a format, keep f32 (chop) | [`chop_slice`] | [`Format::chop`], [`Format::chop_with`] |
//! | pack FP4 / FP6 codes as OCP does | [`pack_fp4`], [`pack_fp6`] (and `unpack_*`) | |
//! | round in a generic kernel | [`Element::store`] with a [`Rounding`] | [`HalfFloat::from_f32`], [`HalfFloat::from_f32_sr`] |
//!
//! # Round to nearest
//!
//! Ties to even, equal to the `half` crate's scalar conversions for every
//! input. NaN becomes a quiet NaN (f16 bit `0x0200`, bf16 bit `0x0040`) that
//! keeps its sign and the top of its payload; widening quiets NaN too.
//! Values from 65520 up become f16 infinity.
//!
//! # Stochastic rounding
//!
//! For `x` between neighbours `a <= |x| < b` of the target format, the
//! result is `b` with probability `(|x| - a) / (b - a)` *exactly* (with
//! respect to the f32 input), otherwise `a`; the sign is kept. So values the
//! format represents never change and the rounding is unbiased. It is done
//! by adding random bits to the magnitude's bit pattern and truncating, with
//! random bits covering every discarded bit:
//!
//! | input magnitude | format | discarded bits | random bits used |
//! |---|---|---|---|
//! | f16 normal range (>= 2^-14) | f16 | 13 | low 13 of the element's 16 |
//! | 2^-17 <= \|x\| < 2^-14 (f16 subnormal results) | f16 | 14 to 16 | low 14 to 16 of its 16 |
//! | 2^-24 <= \|x\| < 2^-17 | f16 | 17 to 23 | its 16, then the low 1 to 7 bits of word 1 |
//! | \|x\| < 2^-24 (result 0 or 2^-24) | f16 | 24 to 125 | its 16 (most significant first), then words 1 to 4 only while they tie |
//! | any finite | bf16 | 16 | its 16 |
//!
//! "Its 16" are [`RandomStream::half_bits`] of the element's position;
//! "word k" is [`RandomStream::word`] of the same position. With 16 bits
//! for the common cases, one eight-lane draw of the generator serves sixteen
//! elements, which is what lets stochastic rounding run near memory speed.
//!
//! Element `i` of a slice converted with `first_index` uses the random bits
//! of element `first_index + i` of the [`RandomStream`], so a slice converted
//! whole or in pieces (each with its own `first_index`) gives the same bits.
//!
//! NaN gives the same quiet NaN as round to nearest (it never becomes
//! infinity); infinities stay. Overflow follows [`Overflow`].
//!
//! [`RandomStream`]: crate::rng::RandomStream
//! [`RandomStream::half_bits`]: crate::rng::RandomStream::half_bits
//! [`RandomStream::word`]: crate::rng::RandomStream::word

mod code;
mod code_kernels;
mod convert;
mod decode_kernels;
mod encode;
mod encode_fast;
mod encode_lanes;
mod format;
pub(crate) mod lanes;
mod pack;
mod round;
pub mod scalar;
mod slices;
mod stochastic;
// Phase 2 of issue 25: blocks and the rounded GEMM.
mod block_kernels;
#[cfg(test)]
mod block_oracle;
mod block_scale;
mod matmul;
mod mx;
mod nvfp4;

pub use half::{bf16, f16};

pub use convert::{f32_to_half_slice, half_to_f32_slice};
pub use format::{Format, FormatError, NanEncoding};
pub use pack::{fp4_packed_len, fp6_packed_len, pack_fp4, pack_fp6, unpack_fp4, unpack_fp6};
pub use round::{Mode, Round, Subnormals};
pub use slices::{Code, chop_slice, decode_slice, encode_slice};
pub use stochastic::f32_to_half_sr_slice;
// Phase 2 of issue 25.
pub use block_scale::{BlockError, ScaleRule};
pub use matmul::{MatmulAccumulator, MatmulError, RoundedMatmul, exact_products};
pub use mx::{MX_BLOCK, Mx, MxFormat};
pub use nvfp4::{NVFP4_BLOCK, Nvfp4};

use crate::arch::{F32s, Portable, Simd, U32s};
use crate::rng::RandomStream;

/// What rounding does with magnitudes above the format's largest finite
/// value (`MAX`: 65504 for f16, about 3.39e38 for bf16, 448 for E4M3FN).
/// See [`Round`] for every mode and format; for f16 and bf16 stochastic
/// rounding:
///
/// ```
/// use tessera_core::fp::{HalfFloat, Overflow, Stochastic, f16};
/// use tessera_core::rng::RandomStream;
///
/// let stream = RandomStream::new(1, 0);
/// let saturate = Stochastic::new(stream, Overflow::Saturate);
/// assert_eq!(f16::from_f32_sr(70000.0, saturate, 0), f16::MAX);
/// let ieee = Stochastic::new(stream, Overflow::Infinity);
/// assert_eq!(f16::from_f32_sr(70000.0, ieee, 0), f16::INFINITY); // above 65536: always
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub enum Overflow {
    /// IEEE-style: the next value above `MAX` is infinity, so `|x|` in
    /// `(MAX, 2 MAX')` (where `2 MAX'` is the next power of two) rounds to
    /// infinity with probability `(|x| - MAX) / (2 MAX' - MAX)`, and from
    /// `2 MAX'` (65536 for f16) up always. This is what add-then-truncate
    /// gives and what CPFloat does. Formats without infinity give NaN
    /// instead (OCP's non-saturating conversion), formats with neither give
    /// `MAX`.
    #[default]
    Infinity,
    /// Finite inputs never become infinite: anything that would round above
    /// `MAX` gives `MAX` with its sign. Infinite inputs stay infinite.
    Saturate,
}

/// The settings of a stochastic-rounding conversion.
///
/// ```
/// use tessera_core::fp::{Overflow, Stochastic};
/// use tessera_core::rng::RandomStream;
///
/// let sr = Stochastic { stream: RandomStream::new(42, 7), overflow: Overflow::Infinity };
/// assert_eq!(sr, Stochastic::new(RandomStream::new(42, 7), Overflow::default()));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Stochastic {
    /// Where the random bits come from.
    pub stream: RandomStream,
    /// What happens above the largest finite value.
    pub overflow: Overflow,
}

impl Stochastic {
    /// Stochastic rounding with bits from `stream`.
    ///
    /// ```
    /// use tessera_core::fp::{self, Overflow, Stochastic, f16};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let sr = Stochastic::new(RandomStream::new(3, 0), Overflow::Saturate);
    /// let mut out = [f16::ZERO; 2];
    /// fp::f32_to_half_sr_slice(&[1.0, 1e6], &mut out, sr, 0);
    /// assert_eq!(out, [f16::ONE, f16::MAX]);
    /// ```
    #[must_use]
    pub const fn new(stream: RandomStream, overflow: Overflow) -> Self {
        Self { stream, overflow }
    }
}

/// How a kernel that writes 16-bit values rounds them: a [`Round`] bound
/// to its random bits. Build one from a [`Round`] with [`Rounding::new`];
/// the two common roundings have their own variants (and SIMD paths).
///
/// ```
/// use tessera_core::fp::{Overflow, Rounding, Stochastic, bf16};
/// use tessera_core::kernels;
/// use tessera_core::rng::RandomStream;
///
/// let mut x = [bf16::from_f32(1.0); 16];
/// let sr = Stochastic::new(RandomStream::new(9, 0), Overflow::Infinity);
/// // Element i of this slice rounds with stream position 1000 + i.
/// kernels::scale(1.001, &mut x, Rounding::Stochastic { sr, first_index: 1000 });
/// assert!(x.iter().all(|v| *v == bf16::ONE || *v == bf16::from_f32(1.0078125)));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rounding {
    /// Round to nearest, ties to even ([`Round::NEAREST_EVEN`]).
    Nearest,
    /// Stochastic rounding ([`Mode::Stochastic`], subnormals kept);
    /// element `i` of the slice written uses position `first_index + i` of
    /// `sr.stream`.
    Stochastic {
        /// The random bits and overflow policy.
        sr: Stochastic,
        /// The stream position of the slice's first element.
        first_index: u64,
    },
    /// Any other [`Round`]: element `i` of the slice written rounds as
    /// [`Format::encode`] does with position `first_index + i` of `stream`
    /// (one lane at a time).
    Other {
        /// The mode, overflow policy and subnormals.
        round: Round,
        /// Where stochastic modes take their random bits.
        stream: RandomStream,
        /// The stream position of the slice's first element.
        first_index: u64,
    },
}

impl Rounding {
    /// `round` with random bits from `stream`, the slice's first element
    /// at position `first_index`: [`Rounding::Nearest`] or
    /// [`Rounding::Stochastic`] where they say the same, else
    /// [`Rounding::Other`].
    ///
    /// ```
    /// use tessera_core::fp::{Mode, Overflow, Round, Rounding, Stochastic};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(1, 2);
    /// assert_eq!(Rounding::new(Round::NEAREST_EVEN, s, 0), Rounding::Nearest);
    /// let sr = Rounding::new(Round::STOCHASTIC, s, 5);
    /// assert_eq!(sr, Rounding::Stochastic { sr: Stochastic::new(s, Overflow::Infinity), first_index: 5 });
    /// assert!(matches!(Rounding::new(Round::new(Mode::TowardZero), s, 0), Rounding::Other { .. }));
    /// ```
    #[must_use]
    pub const fn new(round: Round, stream: RandomStream, first_index: u64) -> Self {
        match round {
            Round {
                mode: Mode::NearestEven,
                overflow: Overflow::Infinity,
                subnormals: Subnormals::Keep,
            } => Self::Nearest,
            Round {
                mode: Mode::Stochastic,
                overflow,
                subnormals: Subnormals::Keep,
            } => Self::Stochastic {
                sr: Stochastic::new(stream, overflow),
                first_index,
            },
            _ => Self::Other {
                round,
                stream,
                first_index,
            },
        }
    }

    /// Rounds `x`, the value of element `at` of the slice being written
    /// (the scalar twin of the kernels' eight-lane store).
    ///
    /// ```
    /// use tessera_core::fp::{Rounding, f16};
    ///
    /// let h: f16 = Rounding::Nearest.round(1.0 + 1e-4, 0);
    /// assert_eq!(h, f16::ONE);
    /// ```
    #[must_use]
    #[inline]
    pub fn round<H: HalfFloat>(self, x: f32, at: usize) -> H {
        match self {
            Self::Nearest => H::from_f32(x),
            Self::Stochastic { sr, first_index } => {
                H::from_f32_sr(x, sr, first_index.wrapping_add(at as u64))
            }
            Self::Other {
                round,
                stream,
                first_index,
            } => {
                let format = match <H as sealed::Lanes>::FORMAT {
                    Storage::F16 => Format::F16,
                    _ => Format::BF16,
                };
                let code = format.encode(x, round, stream, first_index.wrapping_add(at as u64));
                let mut out = [H::default()];
                crate::arch::cast_slice_mut::<H, u16>(&mut out)[0] = code as u16;
                out[0]
            }
        }
    }

    /// Rounds `S::LANES` values, elements `at..` of the slice being
    /// written, into `out` (a 16-bit format); bitwise equal to
    /// [`Rounding::round`] lane by lane.
    #[inline(always)]
    pub(crate) fn round_lanes<S: Simd, T: Element>(self, x: S::F, at: usize, out: &mut [T]) {
        let format = T::FORMAT;
        let packed = match self {
            Self::Nearest => Some(narrow_rn::<S>(format, x)),
            Self::Stochastic { sr, first_index } => {
                let index = first_index.wrapping_add(at as u64);
                if index.is_multiple_of(8) {
                    let half = S::halves(sr.stream, index);
                    narrow_sr::<S>(
                        format,
                        x,
                        half,
                        #[inline(always)]
                        || S::words(sr.stream, index, 1),
                        sr.overflow,
                    )
                } else {
                    None
                }
            }
            Self::Other { .. } => None,
        };
        match packed {
            Some(h) => S::store_h(h, crate::arch::cast_slice_mut(out)),
            None => {
                let mut lanes = [0.0f32; 16];
                x.store(&mut lanes);
                for (i, (v, o)) in lanes.iter().zip(&mut out[..S::LANES]).enumerate() {
                    *o = T::store(*v, self, at + i);
                }
            }
        }
    }
}

/// The 16-bit formats Tessera stores tensors in: [`f16`](struct@f16) and [`bf16`](struct@bf16).
///
/// Sealed: the kernels rely on its exact semantics.
///
/// ```
/// use tessera_core::fp::{HalfFloat, bf16, f16};
///
/// fn widen<H: HalfFloat>(x: &[H]) -> Vec<f32> {
///     x.iter().map(|h| h.to_f32()).collect()
/// }
/// assert_eq!(widen(&[f16::ONE, f16::MAX]), [1.0, 65504.0]);
/// assert_eq!(widen(&[bf16::ONE]), [1.0]);
/// ```
pub trait HalfFloat:
    Copy + Default + PartialEq + core::fmt::Debug + crate::arch::Plain + sealed::Pod + sealed::Lanes
{
    /// The format's name, `"f16"` or `"bf16"`.
    const NAME: &'static str;

    /// Widens to f32 (exact).
    ///
    /// ```
    /// use tessera_core::fp::{HalfFloat, f16};
    ///
    /// assert_eq!(HalfFloat::to_f32(f16::from_bits(0x3c00)), 1.0);
    /// ```
    #[must_use]
    fn to_f32(self) -> f32;

    /// Rounds an f32 to nearest even.
    ///
    /// ```
    /// use tessera_core::fp::{HalfFloat, bf16};
    ///
    /// assert_eq!(<bf16 as HalfFloat>::from_f32(1.0).to_bits(), 0x3f80);
    /// ```
    #[must_use]
    fn from_f32(x: f32) -> Self;

    /// Rounds an f32 stochastically with the bits of position `index`.
    ///
    /// ```
    /// use tessera_core::fp::{HalfFloat, Overflow, Stochastic, f16};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let sr = Stochastic::new(RandomStream::new(5, 0), Overflow::Infinity);
    /// // 1 + 2^-12 lies between 1 and 1 + 2^-10: it rounds to one of them.
    /// let h = <f16 as HalfFloat>::from_f32_sr(1.0 + 2f32.powi(-12), sr, 17);
    /// assert!(h == f16::ONE || h == f16::from_f32(1.0 + 2f32.powi(-10)));
    /// ```
    #[must_use]
    fn from_f32_sr(x: f32, sr: Stochastic, index: u64) -> Self;
}

impl HalfFloat for f16 {
    const NAME: &'static str = "f16";

    fn to_f32(self) -> f32 {
        scalar::f16_to_f32(self)
    }

    fn from_f32(x: f32) -> Self {
        scalar::f32_to_f16(x)
    }

    fn from_f32_sr(x: f32, sr: Stochastic, index: u64) -> Self {
        scalar::f32_to_f16_sr(x, sr.stream, index, sr.overflow)
    }
}

impl HalfFloat for bf16 {
    const NAME: &'static str = "bf16";

    fn to_f32(self) -> f32 {
        scalar::bf16_to_f32(self)
    }

    fn from_f32(x: f32) -> Self {
        scalar::f32_to_bf16(x)
    }

    fn from_f32_sr(x: f32, sr: Stochastic, index: u64) -> Self {
        scalar::f32_to_bf16_sr(x, sr.stream, index, sr.overflow)
    }
}

/// A format tensors are stored in: `f32`, [`f16`](struct@f16) or [`bf16`](struct@bf16). Kernels that
/// read several tensors of different formats (an optimizer reading f16
/// gradients into f32 weights, say) are generic over it; they compute in
/// f32 and round on the store.
///
/// Stores canonicalise NaN to `f32::NAN` first (its f16/bf16 rounding for
/// 16-bit formats): Rust leaves the payload of an arithmetic NaN to the CPU,
/// and Tessera's results must not depend on the CPU.
///
/// ```
/// use tessera_core::fp::{Element, Rounding, f16};
///
/// fn widen_sum<E: Element>(x: &[E]) -> f32 {
///     x.iter().map(|e| e.load()).sum()
/// }
/// assert_eq!(widen_sum(&[1.0f32, 2.0]), 3.0);
/// assert_eq!(widen_sum(&[f16::ONE, f16::ONE]), 2.0);
/// ```
pub trait Element:
    Copy + Default + PartialEq + core::fmt::Debug + crate::arch::Plain + sealed::Pod + sealed::Store
{
    /// `"f32"`, `"f16"` or `"bf16"`.
    const NAME: &'static str;

    /// The value as f32 (exact).
    ///
    /// ```
    /// use tessera_core::fp::{Element, bf16};
    ///
    /// assert_eq!(Element::load(bf16::from_f32(0.5)), 0.5);
    /// ```
    #[must_use]
    fn load(self) -> f32;

    /// Stores `x` as element `at` of the slice being written, rounding with
    /// `rounding` (ignored by f32).
    ///
    /// ```
    /// use tessera_core::fp::{Element, Rounding, f16};
    ///
    /// let h = <f16 as Element>::store(f32::NAN, Rounding::Nearest, 0);
    /// assert!(h.is_nan());
    /// assert_eq!(<f32 as Element>::store(0.1, Rounding::Nearest, 0), 0.1);
    /// ```
    #[must_use]
    fn store(x: f32, rounding: Rounding, at: usize) -> Self;
}

impl Element for f32 {
    const NAME: &'static str = "f32";

    #[inline(always)]
    fn load(self) -> f32 {
        self
    }

    #[inline(always)]
    fn store(x: f32, _: Rounding, _: usize) -> Self {
        canonical(x)
    }
}

impl<H: HalfFloat> Element for H {
    const NAME: &'static str = <H as HalfFloat>::NAME;

    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }

    #[inline(always)]
    fn store(x: f32, rounding: Rounding, at: usize) -> Self {
        rounding.round(canonical(x), at)
    }
}

/// NaN as `f32::NAN`, anything else unchanged.
#[inline(always)]
fn canonical(x: f32) -> f32 {
    if x.is_nan() { f32::NAN } else { x }
}

impl sealed::Store for f32 {
    const FORMAT: Storage = Storage::F32;
}

impl<H: HalfFloat> sealed::Store for H {
    const FORMAT: Storage = <H as sealed::Lanes>::FORMAT;
}

impl sealed::Lanes for f16 {
    const FORMAT: Storage = Storage::F16;
}

impl sealed::Lanes for bf16 {
    const FORMAT: Storage = Storage::Bf16;
}

/// Below this f32 magnitude pattern (the largest finite bf16) bf16
/// stochastic rounding cannot overflow.
const BF16_PLAIN_MAX: u32 = 0x7f7f_0000;

pub(crate) mod sealed {
    /// The storage formats, for the kernels' lane code.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Format {
        /// `f32`.
        F32,
        /// [`half::f16`].
        F16,
        /// [`half::bf16`].
        Bf16,
    }

    use super::{Element, Portable, Rounding};

    /// The format of an [`super::Element`], and eight-lane loads and
    /// stores for code outside the dispatched kernels.
    pub trait Store: Sized {
        /// Which one.
        const FORMAT: Format;

        /// Eight elements as f32 lanes (the portable backend's).
        #[inline(always)]
        fn load_x8(x: [Self; 8]) -> wide::f32x8
        where
            Self: Element,
        {
            super::load::<Portable, Self>(&x)
        }

        /// Stores eight lanes as elements `at..at + 8` of the slice being
        /// written; bitwise equal to `Element::store` lane by lane.
        #[inline(always)]
        fn store_x8(x: wide::f32x8, rounding: Rounding, at: usize) -> [Self; 8]
        where
            Self: Element,
        {
            let mut out = [Self::default(); 8];
            super::store::<Portable, Self>(x, rounding, at, &mut out);
            out
        }
    }

    /// With the `bytemuck` feature, `bytemuck::Pod` (so generic code over
    /// [`super::Element`] can cast with `bytemuck`); nothing without it,
    /// sparing a build `bytemuck`'s derive macros.
    #[cfg(feature = "bytemuck")]
    pub trait Pod: bytemuck::Pod {}
    #[cfg(feature = "bytemuck")]
    impl<T: bytemuck::Pod> Pod for T {}
    /// See above.
    #[cfg(not(feature = "bytemuck"))]
    pub trait Pod {}
    #[cfg(not(feature = "bytemuck"))]
    impl<T> Pod for T {}

    /// The format of a [`super::HalfFloat`].
    pub trait Lanes: Sized {
        /// Which one.
        const FORMAT: Format;
    }
}

use sealed::Format as Storage;

/// Loads `S::LANES` elements of `x` as f32 lanes (exactly).
#[inline(always)]
pub(crate) fn load<S: Simd, T: Element>(x: &[T]) -> S::F {
    match T::FORMAT {
        Storage::F32 => S::F::load(crate::arch::cast_slice(x)),
        Storage::F16 => S::f16_to_f32(S::load_h(crate::arch::cast_slice(x))),
        Storage::Bf16 => S::bf16_to_f32(S::load_h(crate::arch::cast_slice(x))),
    }
}

/// Stores `x` as elements `at..at + S::LANES` of the slice being written
/// (the first `S::LANES` of `out`): bitwise [`Element::store`] lane by
/// lane, NaN canonicalised first.
#[inline(always)]
pub(crate) fn store<S: Simd, T: Element>(x: S::F, rounding: Rounding, at: usize, out: &mut [T]) {
    let x = x.canonical();
    match T::FORMAT {
        Storage::F32 => x.store(crate::arch::cast_slice_mut(out)),
        Storage::F16 | Storage::Bf16 => rounding.round_lanes::<S, T>(x, at, out),
    }
}

/// Rounds to nearest even into 16-bit `format`.
#[inline(always)]
fn narrow_rn<S: Simd>(format: Storage, x: S::F) -> S::H {
    if format == Storage::F16 {
        S::f32_to_f16(x)
    } else {
        S::f32_to_bf16(x)
    }
}

/// Rounds stochastically into 16-bit `format`, with each lane's 16 random
/// bits in the low half of `half` and its word 1 from `word1` (called only
/// when needed); `None` if a lane needs the scalar rule (probability 2^-16
/// per f16 lane below 2^-24; never for bf16).
#[inline(always)]
fn narrow_sr<S: Simd>(
    format: Storage,
    x: S::F,
    half: S::U,
    word1: impl FnOnce() -> S::U,
    overflow: Overflow,
) -> Option<S::H> {
    let splat = <S::U as U32s>::splat;
    let bits = x.to_bits();
    let abs = bits & splat(0x7fff_ffff);
    // The common cases first, on as few instructions as possible.
    if format == Storage::Bf16 && abs.all_le(BF16_PLAIN_MAX) {
        // Finite and no carry past the largest bf16: the sign is safe.
        return Some(S::pack((bits + (half & splat(0xffff))) >> 16));
    }
    if format == Storage::F16 && lanes::all_within(abs, lanes::F16_PLAIN_LOW, lanes::F16_PLAIN_SPAN)
    {
        // f16 normal results: 13 random bits added below the kept ones
        // cannot carry into the sign, so round the signed pattern.
        let noisy = bits + (half & splat(0x1fff));
        return Some(S::f16_truncate_normal(S::F::from_bits(noisy)));
    }
    let sign = bits ^ abs;
    let finite = abs.simd_lt(splat(0x7f80_0000));
    if format == Storage::Bf16 {
        let rounded = lanes::bf16_sr_magnitudes(abs, half, overflow);
        let nearest = lanes::f32_to_bf16_bits::<S::F>(bits);
        return Some(S::pack(finite.select((sign | rounded) >> 16, nearest)));
    }
    let (rounded, undecided) = lanes::f16_sr_magnitudes(abs, half, word1, overflow);
    if undecided.any() {
        return None;
    }
    // NaN and infinity take round to nearest's result.
    let on_grid = finite.select(sign | rounded, bits);
    Some(S::f32_to_f16(S::F::from_bits(on_grid)))
}

#[cfg(test)]
mod tests;
