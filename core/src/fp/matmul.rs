//! A rounded dot product and GEMM that emulate a low-precision matrix unit:
//! inputs in one [`Format`], products in f32, an accumulator rounded to a
//! chosen format and mode after every addition, and optionally promoted to
//! an f32 total every `k` additions (as FP8 matrix units with
//! limited-precision accumulators are used, DeepSeek-V3's promotion every
//! 128 products, or Graphcore's AMP units accumulating in FP16 or FP32).

use core::fmt;
use core::num::NonZeroUsize;

use super::encode_lanes::{Encoder, StreamBits};
use super::format::Format;
use super::round::{Mode, Round};
use crate::arch::{self, F32s, Kernel, Real, Simd, U32s};
use crate::rng::{Erased, RandomBits, RandomStream};

/// Whether the f32 product of any two values of `input` is exact: at most
/// 12 significant bits (two make at most 24), the smallest positive value
/// `2^e` with `2 e >= -149`, and the largest below `2^64`.
///
/// ```
/// use tessera_core::fp::{Format, exact_products};
///
/// assert!(exact_products(Format::E4M3FN) && exact_products(Format::F16));
/// assert!(!exact_products(Format::BF16)); // 2^-133 squared underflows
/// ```
#[must_use]
pub const fn exact_products(input: Format) -> bool {
    input.precision() <= 12 && 2 * input.min_exponent() >= -149 && input.emax() <= 63
}

/// The accumulator of a [`RoundedMatmul`]: its format, its rounding after
/// each addition, and how often it is promoted to f32.
///
/// ```
/// use core::num::NonZeroUsize;
/// use tessera_core::fp::{MatmulAccumulator, Format, Round};
///
/// // FP16 accumulation promoted to f32 every 4 products.
/// let acc = MatmulAccumulator::new(Format::F16, Round::NEAREST_EVEN).promote_every(NonZeroUsize::new(4));
/// assert_eq!(acc.promote_every, NonZeroUsize::new(4));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MatmulAccumulator {
    /// The accumulator's format.
    pub format: Format,
    /// How it rounds after each addition.
    pub round: Round,
    /// Add it to an f32 total and restart it every `k` additions; `None`:
    /// never (the result is the accumulator).
    pub promote_every: Option<NonZeroUsize>,
}

impl MatmulAccumulator {
    /// An accumulator in `format`, rounding by `round`, never promoted.
    ///
    /// ```
    /// use tessera_core::fp::{MatmulAccumulator, Format, Round};
    ///
    /// assert_eq!(MatmulAccumulator::new(Format::BF16, Round::STOCHASTIC).promote_every, None);
    /// ```
    #[must_use]
    pub const fn new(format: Format, round: Round) -> Self {
        Self {
            format,
            round,
            promote_every: None,
        }
    }

    /// The same, promoted every `k` additions (`None`: never).
    ///
    /// ```
    /// use core::num::NonZeroUsize;
    /// use tessera_core::fp::{MatmulAccumulator, Format, Round};
    ///
    /// let acc = MatmulAccumulator::new(Format::F32, Round::NEAREST_EVEN).promote_every(NonZeroUsize::new(1));
    /// assert!(acc.promote_every.is_some());
    /// ```
    #[must_use]
    pub const fn promote_every(self, k: Option<NonZeroUsize>) -> Self {
        Self {
            promote_every: k,
            ..self
        }
    }

    /// `part + p` rounded into the accumulator (position `index`).
    #[inline(always)]
    fn add<B: RandomBits + ?Sized>(self, part: f32, p: f32, bits: &B, index: u64) -> f32 {
        if part.is_nan() {
            return part;
        }
        let (s, e) = two_sum(part, p);
        let s = if self.format.precision() <= 22 {
            round_to_odd(s, e)
        } else {
            s
        };
        self.format.chop_with(s, self.round, bits, index)
    }
}

/// `fl(total + part)`, or `part` if it is NaN: where two NaNs meet, the
/// definition names the one that wins (IEEE leaves it open).
#[inline(always)]
fn promote(total: f32, part: f32) -> f32 {
    if part.is_nan() { part } else { total + part }
}

/// `(s, e)` with `s = fl(a + b)` and `a + b = s + e` exactly (Knuth's
/// TwoSum; `e` is meaningless when `s` is not finite).
#[inline(always)]
fn two_sum(a: f32, b: f32) -> (f32, f32) {
    let s = a + b;
    let bb = s - a;
    (s, (a - (s - bb)) + (b - bb))
}

/// The exact `s + e` (`s = fl(s + e)`) rounded to odd: `s` if `e` is 0 or
/// `s`'s last significand bit is 1, else `s`'s neighbour toward `e`.
#[inline(always)]
fn round_to_odd(s: f32, e: f32) -> f32 {
    let bits = s.to_bits();
    if e == 0.0 || !s.is_finite() || bits & 1 == 1 {
        return s;
    }
    // Magnitude up when `e` has `s`'s sign (an even finite pattern is
    // below f32::MAX's, so no infinity), down otherwise (`s` is not 0).
    if (e < 0.0) == (s < 0.0) {
        f32::from_bits(bits + 1)
    } else {
        f32::from_bits(bits - 1)
    }
}

/// Why a rounded matmul refused its arguments.
///
/// ```
/// use tessera_core::fp::{MatmulAccumulator, Format, MatmulError, Round, RoundedMatmul};
/// use tessera_core::rng::RandomStream;
///
/// let mm = RoundedMatmul::new(Format::E4M3FN, MatmulAccumulator::new(Format::F16, Round::NEAREST_EVEN));
/// let err = mm.dot(&[0.1], &[1.0], &RandomStream::new(0, 0), 0);
/// assert_eq!(err, Err(MatmulError::NotRepresentable { operand: "a", index: 0, value: 0.1 }));
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum MatmulError {
    /// A slice's length does not match the shape.
    Length {
        /// `"a"`, `"b"` or `"c"`.
        operand: &'static str,
        /// The length the shape needs.
        expected: usize,
        /// Its length.
        got: usize,
    },
    /// An input is not a value of the input format.
    NotRepresentable {
        /// `"a"` or `"b"`.
        operand: &'static str,
        /// Its position in the slice.
        index: usize,
        /// The value.
        value: f32,
    },
}

impl fmt::Display for MatmulError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Length {
                operand,
                expected,
                got,
            } => write!(
                f,
                "{operand}: {got} entries where the shape needs {expected}"
            ),
            Self::NotRepresentable {
                operand,
                index,
                value,
            } => write!(
                f,
                "{operand}[{index}] = {value:e} is not a value of the input format"
            ),
        }
    }
}

impl core::error::Error for MatmulError {}

/// A matrix unit to emulate: the input format and the accumulator.
///
/// # Order of operations (the definition)
///
/// For one dot product of length `K` with random positions `index + t`:
///
/// ```text
/// total = +0.0 (f32); part = +0.0
/// for t in 0..K:
///     p    = fl(a[t] * b[t])                      // f32 product
///     part = acc.format.chop(odd(part + p), acc.round, position index + t)
///     if promote_every = Some(k) and (t + 1) % k == 0:
///         total = fl(total + part); part = +0.0   // f32 addition
/// result = part                       if promote_every is None
///          fl(total + part)           otherwise (part may be +0.0)
/// ```
///
/// NaNs: where two could meet, one is named (IEEE leaves the choice to
/// the hardware, and a compiler may swap an addition's operands): a NaN
/// `a[t]` is its product, a NaN `part` stays as it is, and a NaN `part`
/// is the promotion's sum. So NaN results too have the same bits on every
/// backend.
///
/// `odd(part + p)` is the exact sum rounded to f32 precision *to odd*
/// (Boldo and Melquiond): for accumulator formats of at most 22
/// significant bits, rounding it to the accumulator is the same as
/// rounding the exact sum, in every deterministic mode, so the accumulator
/// adder has no hidden extra rounding. Stochastic modes see the
/// round-to-odd sum: their probability of rounding up differs from the
/// exact one by less than `2^(p - 24)` for a `p`-bit accumulator. For
/// accumulators of 23 or 24 bits (f32 itself) the sum is f32's round to
/// nearest even instead, then rounded by the mode (the identity for
/// [`Format::F32`]). A sum beyond f32's range is infinite before the
/// accumulator rounds it.
///
/// Products are exact when [`exact_products`] holds for the input format
/// (every format of 12 or fewer significant bits whose products neither
/// overflow nor underflow f32: all 8-, 6- and 4-bit formats and f16);
/// otherwise (bf16 and TF32, whose tiny products underflow, and f32) they
/// round to nearest even in f32.
///
/// In a GEMM `C = A B` (`A` is `m x k`, `B` is `k x n`, row-major), entry
/// `(i, j)` is the dot of row `i` of `A` and column `j` of `B` with
/// `index = first_index + (i n + j) k`: a product split by rows (each piece
/// with `first_index` advanced by `rows n k`) gives the same bits.
///
/// ```
/// use tessera_core::fp::{self, MatmulAccumulator, Format, Round, RoundedMatmul};
/// use tessera_core::rng::RandomStream;
///
/// // E4M3 inputs, an E5M2 accumulator: 8 + 0.5 + 0.5 stays 8 (0.5 is
/// // below half of E5M2's spacing 2 at 8).
/// let mm = RoundedMatmul::new(Format::E4M3FN, MatmulAccumulator::new(Format::E5M2, Round::NEAREST_EVEN));
/// let s = RandomStream::new(0, 0);
/// assert_eq!(mm.dot(&[8.0, 0.5, 0.5], &[1.0, 1.0, 1.0], &s, 0), Ok(8.0));
///
/// // Inputs held as codes: decode them first (exact).
/// let mut a = [0.0f32; 3];
/// fp::decode_slice(Format::E4M3FN, &[0x50u8, 0x30, 0x30], &mut a);
/// assert_eq!(a, [8.0, 0.5, 0.5]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RoundedMatmul {
    /// The format every input is a value of.
    pub input: Format,
    /// The accumulator.
    pub acc: MatmulAccumulator,
}

impl RoundedMatmul {
    /// Inputs in `input`, accumulating in `acc`.
    ///
    /// ```
    /// use tessera_core::fp::{MatmulAccumulator, Format, Round, RoundedMatmul};
    ///
    /// let mm = RoundedMatmul::new(Format::BF16, MatmulAccumulator::new(Format::F32, Round::NEAREST_EVEN));
    /// assert_eq!(mm.input, Format::BF16);
    /// ```
    #[must_use]
    pub const fn new(input: Format, acc: MatmulAccumulator) -> Self {
        Self { input, acc }
    }

    /// `Err` at the first value of `x` that is not a value of the input
    /// format (NaN and, where the format has them, infinities pass).
    fn check(self, operand: &'static str, x: &[f32]) -> Result<(), MatmulError> {
        // Every f32 is a value of f32 (the simulator's f16 accumulator
        // takes f32 inputs: checking them cost half the product's time).
        if self.input == Format::F32 {
            return Ok(());
        }
        let stream = RandomStream::new(0, 0);
        let on_grid = |v: f32| {
            let r = self.input.chop(v, Round::NEAREST_EVEN, stream, 0);
            r.to_bits() == v.to_bits() || (v.is_nan() && r.is_nan())
        };
        match x.iter().position(|v| !on_grid(*v)) {
            Some(index) => Err(MatmulError::NotRepresentable {
                operand,
                index,
                value: x[index],
            }),
            None => Ok(()),
        }
    }

    /// The rounded dot product of `a` and `b` (equal lengths), addition
    /// `t` reading random position `index + t`, after checking the inputs.
    ///
    /// ```
    /// use core::num::NonZeroUsize;
    /// use tessera_core::fp::{MatmulAccumulator, Format, Round, RoundedMatmul};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let a = [2048.0f32, 1.0, 1.0, 1.0, 1.0];
    /// let ones = [1.0f32; 5];
    /// let s = RandomStream::new(0, 0);
    /// // In f16 (spacing 2 at 2048) 2048 + 1 is a tie: it stays 2048 each time.
    /// let f16 = MatmulAccumulator::new(Format::F16, Round::NEAREST_EVEN);
    /// let mm = RoundedMatmul::new(Format::F16, f16);
    /// assert_eq!(mm.dot(&a, &ones, &s, 0), Ok(2048.0));
    /// // Promoted to f32 every 2 additions: 2048 + (1 + 1) + 1.
    /// let promoted = RoundedMatmul::new(Format::F16, f16.promote_every(NonZeroUsize::new(2)));
    /// assert_eq!(promoted.dot(&a, &ones, &s, 0), Ok(2051.0));
    /// ```
    ///
    /// # Errors
    /// [`MatmulError::Length`] if the lengths differ;
    /// [`MatmulError::NotRepresentable`] for an input off the format.
    pub fn dot<B: RandomBits + ?Sized>(
        self,
        a: &[f32],
        b: &[f32],
        bits: &B,
        index: u64,
    ) -> Result<f32, MatmulError> {
        check_len("b", a.len(), b.len())?;
        self.check("a", a)?;
        self.check("b", b)?;
        Ok(self.dot_unchecked(a.iter().copied(), b.iter().copied(), bits, index))
    }

    /// The loop of the module docs over pairs of checked inputs.
    #[inline(always)]
    fn dot_unchecked<B: RandomBits + ?Sized>(
        self,
        a: impl Iterator<Item = f32>,
        b: impl Iterator<Item = f32>,
        bits: &B,
        index: u64,
    ) -> f32 {
        let (mut total, mut part) = (0.0f32, 0.0f32);
        let every = self.acc.promote_every.map_or(usize::MAX, NonZeroUsize::get);
        for (t, (x, y)) in a.zip(b).enumerate() {
            let p = if x.is_nan() { x } else { x * y };
            part = self.acc.add(part, p, bits, index.wrapping_add(t as u64));
            if (t + 1) % every == 0 {
                total = promote(total, part);
                part = 0.0;
            }
        }
        if self.acc.promote_every.is_some() {
            promote(total, part)
        } else {
            part
        }
    }

    /// `C = A B` for row-major `A` (`m x k`), `B` (`k x n`) and `C`
    /// (`m x n`, overwritten); entry `(i, j)` is the dot of row `i` and
    /// column `j` with random positions from `first_index + (i n + j) k`.
    ///
    /// ```
    /// use tessera_core::fp::{MatmulAccumulator, Format, Round, RoundedMatmul};
    /// use tessera_core::rng::RandomStream;
    ///
    /// let mm = RoundedMatmul::new(Format::E5M2, MatmulAccumulator::new(Format::BF16, Round::NEAREST_EVEN));
    /// let a = [1.0f32, 2.0, 3.0, 4.0]; // 2 x 2
    /// let b = [0.5f32, 0.0, 0.0, 0.25]; // 2 x 2
    /// let mut c = [0.0f32; 4];
    /// mm.gemm((2, 2, 2), &a, &b, &mut c, &RandomStream::new(0, 0), 0)?;
    /// assert_eq!(c, [0.5, 0.5, 1.5, 1.0]);
    /// # Ok::<(), tessera_core::fp::MatmulError>(())
    /// ```
    ///
    /// # Errors
    /// [`MatmulError::Length`] unless the lengths are `m k`, `k n` and
    /// `m n` for `(m, n, k)`; [`MatmulError::NotRepresentable`]. Nothing
    /// is written then.
    pub fn gemm<B: RandomBits + ?Sized>(
        self,
        (m, n, k): (usize, usize, usize),
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        bits: &B,
        first_index: u64,
    ) -> Result<(), MatmulError> {
        check_len("a", m * k, a.len())?;
        check_len("b", k * n, b.len())?;
        check_len("c", m * n, c.len())?;
        self.check("a", a)?;
        self.check("b", b)?;
        self.gemm_checked((m, n, k), a, b, c, &Erased(bits), first_index);
        Ok(())
    }

    /// [`RoundedMatmul::gemm`]'s kernels, instantiated once, in this
    /// crate, for every caller's source of bits (as `fp::encode_slice`'s).
    fn gemm_checked(
        self,
        shape: (usize, usize, usize),
        a: &[f32],
        b: &[f32],
        c: &mut [f32],
        bits: &dyn RandomBits,
        first_index: u64,
    ) {
        arch::dispatch(GemmValues {
            mm: self,
            shape,
            a,
            b,
            c,
            bits,
            first_index,
        });
    }
}

/// [`RoundedMatmul::gemm`]'s arguments after its checks: a kernel whose
/// lanes are output columns.
///
/// Each lane is one entry's accumulator, and every lane performs the
/// definition's additions in the definition's order (`t` increasing), so
/// the lanes give the twin's bits. The lanes take deterministic
/// nearest-even accumulators of at most 22 bits whose format has a fast
/// lane rule (f16, bf16 and the narrow formats): nearest-even reads no
/// random bits, so no lane needs its own positions. Every other
/// accumulator runs the twin.
struct GemmValues<'a, B: ?Sized> {
    mm: RoundedMatmul,
    shape: (usize, usize, usize),
    a: &'a [f32],
    b: &'a [f32],
    c: &'a mut [f32],
    bits: &'a B,
    first_index: u64,
}

impl<B: RandomBits + ?Sized> Kernel for GemmValues<'_, B> {
    type Output = ();

    #[inline(always)]
    fn run<S: Simd>(self) {
        let acc = self.mm.acc;
        let encoder = Encoder::new(acc.format, acc.round);
        if acc.round.mode != Mode::NearestEven
            || acc.format.precision() > 22
            || !encoder.has_fast_rule()
        {
            return self.scalar();
        }
        let lanes = Columns {
            acc,
            encoder,
            every: acc.promote_every.map_or(usize::MAX, NonZeroUsize::get),
        };
        let (m, n, k) = self.shape;
        for i in 0..m {
            let a_row = &self.a[i * k..(i + 1) * k];
            let row = &mut self.c[i * n..(i + 1) * n];
            lanes.row::<S>(a_row, self.b, row);
        }
    }

    fn scalar(self) {
        let (m, n, k) = self.shape;
        let (mm, b, bits) = (self.mm, self.b, self.bits);
        for (i, row) in self.c.chunks_exact_mut(n.max(1)).enumerate().take(m) {
            let a_row = &self.a[i * k..(i + 1) * k];
            for (j, out) in row.iter_mut().enumerate() {
                let column = b.iter().skip(j).step_by(n).copied();
                let index = self.first_index.wrapping_add(((i * n + j) * k) as u64);
                *out = mm.dot_unchecked(a_row.iter().copied(), column, bits, index);
            }
        }
    }
}

/// The lane form of the accumulator (see [`GemmValues`]).
#[derive(Clone, Copy)]
struct Columns {
    acc: MatmulAccumulator,
    encoder: Encoder,
    /// Additions between promotions (`usize::MAX`: never).
    every: usize,
}

/// Vectors of columns computed together: independent accumulators that
/// hide the latency of each one's chain of additions.
const BLOCK: usize = 4;

impl Columns {
    /// One output row `c_row` from the row `a_row` of `A` and all of `B`
    /// (`k x n`, row-major): blocks of [`BLOCK`] vectors, then single
    /// vectors, then the last columns zero-padded to one vector.
    #[inline(always)]
    fn row<S: Simd>(self, a_row: &[f32], b: &[f32], c_row: &mut [f32]) {
        let n = c_row.len();
        let mut j = 0;
        while j + BLOCK * S::LANES <= n {
            let sums =
                self.block::<S, BLOCK>(a_row, |t, v| S::F::load(&b[t * n + j + v * S::LANES..]));
            for (v, sum) in sums.iter().enumerate() {
                sum.store(&mut c_row[j + v * S::LANES..]);
            }
            j += BLOCK * S::LANES;
        }
        while j + S::LANES <= n {
            let [sum] = self.block::<S, 1>(a_row, |t, _| S::F::load(&b[t * n + j..]));
            sum.store(&mut c_row[j..]);
            j += S::LANES;
        }
        if j < n {
            let last = n - j;
            let [sum] = self.block::<S, 1>(a_row, |t, _| {
                let mut padded = [0.0f32; 16];
                padded[..last].copy_from_slice(&b[t * n + j..(t + 1) * n]);
                S::F::load(&padded)
            });
            let mut out = [0.0f32; 16];
            sum.store(&mut out);
            c_row[j..].copy_from_slice(&out[..last]);
        }
    }

    /// `V` vectors of entries: the definition's loop on every lane, with
    /// `b_at(t, v)` the lanes of `B`'s row `t` for vector `v`.
    #[inline(always)]
    fn block<S: Simd, const V: usize>(
        self,
        a_row: &[f32],
        b_at: impl Fn(usize, usize) -> S::F,
    ) -> [S::F; V] {
        let zero = S::F::splat(0.0);
        let (mut total, mut part) = ([zero; V], [zero; V]);
        for (t, x) in a_row.iter().enumerate() {
            let (nan, x) = (x.is_nan(), S::F::splat(*x));
            for (v, part) in part.iter_mut().enumerate() {
                let p = if nan { x } else { x * b_at(t, v) };
                *part = self.add::<S>(*part, p);
            }
            if (t + 1) % self.every == 0 {
                for (total, part) in total.iter_mut().zip(&mut part) {
                    *total = promote_lanes::<S>(*total, *part);
                    *part = zero;
                }
            }
        }
        if self.acc.promote_every.is_some() {
            for (total, part) in total.iter().zip(&mut part) {
                *part = promote_lanes::<S>(*total, *part);
            }
        }
        part
    }

    /// [`MatmulAccumulator::add`] on lanes: TwoSum, round to odd, then the
    /// format's lane rounding (the twin's on lanes the rule leaves, which
    /// are sums past f32's range).
    #[inline(always)]
    fn add<S: Simd>(self, part: S::F, p: S::F) -> S::F {
        let u = <S::U as U32s>::splat;
        let s = part + p;
        let bb = s - part;
        let e = (part - (s - bb)) + (p - bb);
        let (sb, eb) = (s.to_bits(), e.to_bits());
        let inexact = (eb & u(0x7fff_ffff)).simd_ne(u(0));
        let finite = (sb & u(0x7fff_ffff)).simd_lt(u(0x7f80_0000));
        let even = (sb & u(1)).simd_eq(u(0));
        let up = ((eb ^ sb) & u(0x8000_0000)).simd_eq(u(0));
        let neighbour = up.select(sb + u(1), sb - u(1));
        let odd = (inexact & finite & even).select(neighbour, sb);
        // Nearest-even reads no bits: a constant source, keys derived at
        // compile time.
        const NONE: StreamBits = StreamBits::new(RandomStream::new(0, 0), 0);
        let none = NONE;
        let (y, fallback) =
            self.encoder
                .chop::<S, StreamBits>(Mode::NearestEven, S::F::from_bits(odd), &none, 0);
        if !fallback.any() {
            return S::F::from_bits(y);
        }
        // Some sum is not finite: the twin's rounding on every lane, and a
        // NaN accumulator stays as it is.
        let mut lanes = [0.0f32; 16];
        S::F::from_bits(odd).store(&mut lanes);
        let stream = RandomStream::new(0, 0);
        for l in &mut lanes[..S::LANES] {
            *l = self.acc.format.chop(*l, self.acc.round, stream, 0);
        }
        let y = S::F::load(&lanes).to_bits();
        S::F::from_bits(part.is_nan().select(part.to_bits(), y))
    }
}

/// [`promote`] on lanes.
#[inline(always)]
fn promote_lanes<S: Simd>(total: S::F, part: S::F) -> S::F {
    let sum = (total + part).to_bits();
    S::F::from_bits(part.is_nan().select(part.to_bits(), sum))
}

fn check_len(operand: &'static str, expected: usize, got: usize) -> Result<(), MatmulError> {
    if expected == got {
        Ok(())
    } else {
        Err(MatmulError::Length {
            operand,
            expected,
            got,
        })
    }
}

#[cfg(test)]
#[path = "matmul_tests.rs"]
pub(super) mod tests;
