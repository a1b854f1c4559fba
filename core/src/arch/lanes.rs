//! What every vector backend provides: u32 and f32 lanes with the
//! operations the kernels use, and 16-bit packing and conversions.

use core::ops::{Add, AddAssign, BitAnd, BitOr, BitOrAssign, BitXor, Div, Mul, Not, Shl, Shr, Sub};

use super::block_pack::BlockPack;
use crate::fp::lanes as formulas;
use crate::rng::{BlockKeys, GroupDraws, RandomStream};

/// u32 lanes. Comparisons are unsigned and give masks (all ones or all
/// zeros per lane); `select`, `any` and `all` take masks.
pub(crate) trait U32s:
    Copy
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + BitAnd<Output = Self>
    + BitOr<Output = Self>
    + BitXor<Output = Self>
    + Not<Output = Self>
    + Shl<u32, Output = Self>
    + Shr<u32, Output = Self>
    + AddAssign
    + BitOrAssign
{
    /// The number of lanes.
    const LANES: usize;
    /// `x` in every lane.
    fn splat(x: u32) -> Self;
    /// Lane `i` holds `i`.
    fn iota() -> Self;
    /// The first `LANES` values of `x`.
    fn from_slice(x: &[u32]) -> Self;
    /// Writes the lanes to the first `LANES` values of `out`.
    fn write_to(self, out: &mut [u32]);
    fn simd_eq(self, rhs: Self) -> Self;
    fn simd_lt(self, rhs: Self) -> Self;
    fn simd_gt(self, rhs: Self) -> Self;
    #[inline(always)]
    fn simd_ne(self, rhs: Self) -> Self {
        !self.simd_eq(rhs)
    }
    #[inline(always)]
    fn simd_le(self, rhs: Self) -> Self {
        !self.simd_gt(rhs)
    }
    #[inline(always)]
    fn simd_ge(self, rhs: Self) -> Self {
        !self.simd_lt(rhs)
    }
    /// Signed less-than (lanes read as `i32`): the unsigned order for
    /// lanes below 2^31, in one instruction where unsigned compares take
    /// three (AVX2).
    #[inline(always)]
    fn simd_lt_i32(self, rhs: Self) -> Self {
        let flip = Self::splat(0x8000_0000);
        (self ^ flip).simd_lt(rhs ^ flip)
    }
    /// `if_true` where the mask `self` is set, else `if_false`.
    fn select(self, if_true: Self, if_false: Self) -> Self;
    fn min(self, rhs: Self) -> Self;
    fn max(self, rhs: Self) -> Self;
    /// Per-lane shift; counts of 32 or more give 0.
    fn unbounded_shl(self, rhs: Self) -> Self;
    /// Per-lane shift; counts of 32 or more give 0.
    fn unbounded_shr(self, rhs: Self) -> Self;
    /// Whether every lane is at most `limit` (unsigned).
    #[inline(always)]
    fn all_le(self, limit: u32) -> bool {
        let limit = Self::splat(limit);
        self.max(limit).simd_eq(limit).all()
    }
    /// Lane `r` holds the largest lane (unsigned) of `rows[r]`, for
    /// `rows.len() == LANES`: a transposing reduction (the block kernels'
    /// amaxes of `LANES` blocks at once). Backends with lane permutes
    /// override this scalar form.
    #[inline(always)]
    fn max_rows(rows: &[Self]) -> Self {
        let (mut out, mut lanes) = ([0u32; 16], [0u32; 16]);
        for (o, row) in out.iter_mut().zip(&rows[..Self::LANES]) {
            row.write_to(&mut lanes);
            *o = lanes[..Self::LANES].iter().fold(0, |m, l| m.max(*l));
        }
        Self::from_slice(&out)
    }
    /// Whether any lane of the mask is set.
    fn any(self) -> bool;
    /// Whether every lane of the mask is set.
    fn all(self) -> bool;
}

/// f32 arithmetic on one lane or many: IEEE operations, correctly
/// rounded, never fused, so one formula written over `Real` gives the same
/// bits on `f32` and on every backend's lanes.
pub(crate) trait Real:
    Copy + Add<Output = Self> + Sub<Output = Self> + Mul<Output = Self> + Div<Output = Self>
{
    /// `x` in every lane.
    fn splat(x: f32) -> Self;
    /// Correctly rounded square root.
    fn sqrt(self) -> Self;
}

/// f32 lanes.
pub(crate) trait F32s: Real + AddAssign {
    /// The lanes' bit patterns.
    type Bits: U32s;
    fn to_bits(self) -> Self::Bits;
    fn from_bits(bits: Self::Bits) -> Self;
    /// The mask of NaN lanes.
    fn is_nan(self) -> Self::Bits;
    /// The first `LANES` values of `x`.
    fn load(x: &[f32]) -> Self;
    /// Writes the lanes to the first `LANES` values of `out`.
    fn store(self, out: &mut [f32]);
    /// Each lane truncated toward zero to an integer, for lanes in
    /// `[0, 2^31)`; other lanes give backend-specific values (callers
    /// select them away).
    fn trunc_small(self) -> Self::Bits;

    /// NaN lanes as `f32::NAN`, the others unchanged.
    #[inline(always)]
    fn canonical(self) -> Self {
        let bits = self.to_bits();
        Self::from_bits(
            self.is_nan()
                .select(Self::Bits::splat(f32::NAN.to_bits()), bits),
        )
    }
}

/// A backend: lane types and the steps whose best instructions differ
/// between instruction sets. The provided methods are the portable
/// formulas, bitwise equal to the scalar twins; backends override them
/// with instructions that give the same bits.
pub(crate) trait Simd: Copy + 'static + BlockPack {
    /// Lanes per vector: 8 or 16.
    const LANES: usize;
    type F: F32s<Bits = Self::U>;
    type U: U32s;
    /// Eight u32 lanes: one draw of random words, which serves 16
    /// elements.
    type U8: U32s;
    /// `LANES` packed 16-bit values.
    type H: Copy;
    /// The reduction accumulator: eight f32 lane sums.
    type Acc: Copy;

    fn load_h(x: &[u16]) -> Self::H;
    fn store_h(h: Self::H, out: &mut [u16]);
    /// The low 16 bits of every lane (each lane below 2^16).
    fn pack(u: Self::U) -> Self::H;
    /// Zero-extends to 32 bits.
    fn unpack(h: Self::H) -> Self::U;

    /// Writes the low 8 bits of every lane (each lane below 2^8) to the
    /// first `LANES` bytes of `out`.
    #[inline(always)]
    fn store_bytes(u: Self::U, out: &mut [u8]) {
        let mut lanes = [0u32; 16];
        u.write_to(&mut lanes);
        for (o, l) in out[..Self::LANES].iter_mut().zip(&lanes) {
            *o = *l as u8;
        }
    }

    /// [`Simd::store_bytes`] of four vectors, in order, to the first
    /// `4 * LANES` bytes of `out` (one store where the backend packs).
    #[inline(always)]
    fn store_bytes4(u: [Self::U; 4], out: &mut [u8]) {
        for (v, u) in u.iter().enumerate() {
            Self::store_bytes(*u, &mut out[v * Self::LANES..]);
        }
    }

    /// [`Simd::store_bytes4`] with non-temporal (streaming) stores where
    /// the backend has them and `out` is 16-byte aligned (AVX-512):
    /// for outputs too large to stay in cache (`arch::wants_streaming`),
    /// whose lines then need no read for ownership. A kernel that streams
    /// calls `arch::store_fence` before it returns.
    #[inline(always)]
    fn stream_bytes4(u: [Self::U; 4], out: &mut [u8]) {
        Self::store_bytes4(u, out);
    }

    /// Runs `f` in a function of its own compiled with this backend's
    /// target features. Kernels put each specialised copy of their loop
    /// in one: the optimiser's time grows faster than a function's size
    /// (SROA's promotion of every inlined copy's stack slots, over the
    /// whole function, took a release build of this crate past 15
    /// minutes), and a copy costs one call per kernel call.
    #[inline(never)]
    fn outline<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Eight lane sums of `+0.0`.
    fn acc_zero() -> Self::Acc;
    /// Adds `LANES` terms to the eight lane sums in index order: lane `j`
    /// adds term `j`, then (for 16 lanes) term `j + 8`.
    fn accumulate(acc: Self::Acc, terms: Self::F) -> Self::Acc;
    /// The eight lane sums.
    fn acc_lanes(acc: Self::Acc) -> [f32; 8];

    /// Word `word` of the random positions `index..index + LANES`.
    #[inline(always)]
    fn words(stream: RandomStream, index: u64, word: u32) -> Self::U {
        Self::keyed_words(&BlockKeys::new(stream, index, word), index)
    }
    /// [`Simd::words`] with the word's block keys derived beforehand.
    #[inline(always)]
    fn keyed_words(keys: &BlockKeys, index: u64) -> Self::U {
        keys.words_lanes(index)
    }
    /// Vector `k` (below `16 / LANES`) of a 16-element group's random
    /// halves, from the group's eight words (the low halves serve elements
    /// 0 to 7, the high halves 8 to 15; the high 16 bits of a lane are
    /// not cleared).
    fn group_halves(words: Self::U8, k: usize) -> Self::U;
    /// The random halves of elements `index..index + LANES` (`index` a
    /// multiple of 8), as [`RandomStream::half_bits`] lays them out.
    #[inline(always)]
    fn halves(stream: RandomStream, index: u64) -> Self::U {
        Self::keyed_halves(&BlockKeys::new(stream, (index & !15) >> 1, 0), index)
    }
    /// [`Simd::halves`] with word 0's block keys derived beforehand.
    fn keyed_halves(keys: &BlockKeys, index: u64) -> Self::U;
    /// The random bits of the four vectors at element `index` (a multiple
    /// of 32, in `draws`' range): each lane's [`RandomStream::half_bits`]
    /// in the low 16 bits, and the low 16 bits of its word 1 above them if
    /// `wide` (zeros if not). One draw of word 0 serves 16 elements (32 on
    /// sixteen lanes).
    fn group_random(draws: &GroupDraws, index: u64, wide: bool) -> [Self::U; 4];

    /// f16 -> f32, exact (NaN quieted).
    #[inline(always)]
    fn f16_to_f32(h: Self::H) -> Self::F {
        Self::F::from_bits(formulas::f16_to_f32_bits::<Self::F>(Self::unpack(h)))
    }
    /// f32 -> f16, round to nearest even.
    #[inline(always)]
    fn f32_to_f16(x: Self::F) -> Self::H {
        Self::pack(formulas::f32_to_f16_bits::<Self::F>(x.to_bits()))
    }
    /// f32 -> f16 for lanes in f16's normal range: drops the 13 low bits
    /// of the significand (rounds toward zero).
    #[inline(always)]
    fn f16_truncate_normal(x: Self::F) -> Self::H {
        let kept = x.to_bits() & !Self::U::splat(0x1fff);
        Self::f32_to_f16(Self::F::from_bits(kept))
    }
    /// bf16 -> f32, exact (NaN quieted).
    #[inline(always)]
    fn bf16_to_f32(h: Self::H) -> Self::F {
        Self::F::from_bits(formulas::bf16_to_f32_bits::<Self::F>(Self::unpack(h)))
    }
    /// f32 -> bf16, round to nearest even.
    #[inline(always)]
    fn f32_to_bf16(x: Self::F) -> Self::H {
        Self::pack(formulas::f32_to_bf16_bits::<Self::F>(x.to_bits()))
    }
}

/// The [`Simd`] items every eight-lane backend shares: its f32 lanes `$F`
/// are the accumulator, and one draw of random words fills its u32 lanes
/// `$U`.
macro_rules! eight_lane_items {
    ($F:ty, $U:ty) => {
        const LANES: usize = 8;
        type F = $F;
        type U = $U;
        type U8 = $U;
        type Acc = $F;

        #[inline(always)]
        fn acc_zero() -> $F {
            <$F as $crate::arch::Real>::splat(0.0)
        }

        #[inline(always)]
        fn accumulate(acc: $F, terms: $F) -> $F {
            acc + terms
        }

        #[inline(always)]
        fn acc_lanes(acc: $F) -> [f32; 8] {
            let mut out = [0.0; 8];
            $crate::arch::F32s::store(acc, &mut out);
            out
        }

        #[inline(always)]
        fn group_halves(words: Self::U, k: usize) -> Self::U {
            if k == 0 { words } else { words >> 16 }
        }

        #[inline(always)]
        fn keyed_halves(keys: &$crate::rng::BlockKeys, index: u64) -> Self::U {
            let words = keys.words_lanes::<Self::U>((index & !15) >> 1);
            if index & 8 == 0 { words } else { words >> 16 }
        }

        #[inline(always)]
        fn group_random(draws: &$crate::rng::GroupDraws, index: u64, wide: bool) -> [Self::U; 4] {
            let splat = <$U as $crate::arch::U32s>::splat;
            let mut out = [splat(0); 4];
            for g in 0..2 {
                let at = index.wrapping_add(16 * g as u64);
                let words: $U = draws.word0(at);
                let (low, high) = (words & splat(0xffff), words >> 16);
                out[2 * g] = low;
                out[2 * g + 1] = high;
                if wide {
                    out[2 * g] |= draws.word1::<$U>(at) << 16;
                    out[2 * g + 1] |= draws.word1::<$U>(at.wrapping_add(8)) << 16;
                }
            }
            out
        }
    };
}
pub(crate) use eight_lane_items;

/// Calls `f(at)` for the start `at` of every full vector of `S` in a slice
/// of `len` elements, in increasing order, four vectors per iteration, and
/// returns where the full vectors end (the tail is the caller's).
///
/// The unrolling is explicit because a `#[target_feature]` entry function
/// keeps the build's generic tuning: a `target-cpu=native` build unrolled
/// these loops itself and ran 10-20% faster in cache.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn each_vector<S: Simd>(len: usize, mut f: impl FnMut(usize)) -> usize {
    let body = len / S::LANES * S::LANES;
    let step = 4 * S::LANES;
    let unrolled = body / step * step;
    let mut at = 0;
    while at < unrolled {
        f(at);
        f(at + S::LANES);
        f(at + 2 * S::LANES);
        f(at + 3 * S::LANES);
        at += step;
    }
    while at < body {
        f(at);
        at += S::LANES;
    }
    body
}

/// [`each_vector`] without unrolling, where debug assertions are on (an
/// unoptimised build): there the unrolled copies of `f` would only add
/// stack slots to the backend's frame (`core/tests/stack.rs`).
#[cfg(debug_assertions)]
#[inline(always)]
pub(crate) fn each_vector<S: Simd>(len: usize, mut f: impl FnMut(usize)) -> usize {
    let body = len / S::LANES * S::LANES;
    for at in (0..body).step_by(S::LANES) {
        f(at);
    }
    body
}
