//! Position-addressed random bits.
//!
//! Stochastic rounding needs random bits for every element it rounds, and
//! Tessera's contract is that the result never depends on how the work was
//! split over SIMD lanes, threads, tiles or replicas. So random bits are not
//! drawn from a sequence: the bits for element `i` are a pure function of a
//! key and `i`, like a counter-based generator (Salmon et al., "Parallel
//! random numbers: as easy as 1, 2, 3", SC 2011).
//!
//! # The generator
//!
//! A [`RandomStream`] is a 64-bit key derived from `(seed, stream)` with the
//! SplitMix64 finaliser. The 32-bit word `w` of position `p` is
//!
//! ```text
//! block  = mix64(key ^ (w << 32 | p >> 32))          // once per 2^32 positions
//! k0, k1 = low and high halves of block
//! x = (p as u32) ^ k0
//! x ^= x >> 16; x *= 0x21f0aaad; x += k1
//! x ^= x >> 15; x *= 0x735a2d97; x ^= x >> 15
//! ```
//!
//! The per-position part is Chris Wellons' `lowbias32` integer permutation
//! (a two-multiply mixer found by search for low avalanche bias) with the
//! key injected before the first and the second multiply, so it runs eight
//! or sixteen lanes at a time in plain 32-bit SIMD arithmetic. For a fixed
//! key it is a bijection on the low 32 bits of the position, so a stream's
//! 2^32 words per block are a permutation of all 32-bit values (no value
//! repeats within a block).
//!
//! The kernels draw eight or sixteen consecutive positions, starting at a
//! multiple of that width where the call's first element is a multiple of
//! 16 (other draws take the plain steps). Such a draw costs seven vector
//! instructions, one of them a multiply: its lanes share the high bits of
//! their positions, so the steps before the first multiply are one scalar
//! computation, and the first multiply's lane part is a row of a constant
//! table (the same words, bit for bit).
//!
//! Stochastic rounding takes 16 bits per element
//! ([`RandomStream::half_bits`]: one word serves two elements, laid out so
//! that one eight-lane draw serves sixteen elements) and reads word 1 of
//! the element's own position (and further words) where it discards more
//! than 16 bits: for every element of a format of 8 bits or fewer, for f16
//! and bf16 only below their normal range.
//! [`RandomStream::encode_bits_sum`] draws what an 8-bit encode reads
//! (16 bits of word 0 and word 1 per element), as its kernels draw it.
//!
//! Quality: the test suite runs chi-square tests on bytes, on every bit
//! position, on the low bits rounding uses, on pairs of consecutive words,
//! on words of one position and across streams with adjacent seeds, and a
//! correlation test between adjacent streams. It is a statistical generator
//! for rounding and sampling, not a cryptographic one; it has not been
//! through TestU01's BigCrush, so do not use it where that level of
//! evidence matters.
//!
//! A change to any output of this module is a breaking change: the
//! value-stability tests pin them.

mod draws;
mod groups;
mod sequential;
mod source;

pub(crate) use groups::GroupDraws;
pub use sequential::StreamRng;
pub(crate) use source::Erased;
pub use source::{RandomBits, Replay};

use core::marker::PhantomData;

use crate::arch::U32s;

/// The SplitMix64 finaliser (Steele, Lea and Flood, OOPSLA 2014): a bijection
/// on `u64` with full avalanche.
///
/// ```
/// use tessera_core::rng::mix64;
///
/// assert_eq!(mix64(0), 0);
/// assert_ne!(mix64(1), mix64(2));
/// ```
#[must_use]
#[inline]
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Keyed `lowbias32` for one position (the per-element part of the generator).
#[must_use]
#[inline(always)]
const fn mix32(lo: u32, k0: u32, k1: u32) -> u32 {
    let mut x = lo ^ k0;
    x ^= x >> 16;
    x = x.wrapping_mul(M1);
    x = x.wrapping_add(k1);
    x ^= x >> 15;
    x = x.wrapping_mul(M2);
    x ^ (x >> 15)
}

/// The same as [`mix32`] on each lane.
#[must_use]
#[inline(always)]
fn mix32_lanes<U: U32s>(lo: U, k0: U, k1: U) -> U {
    let mut x = lo ^ k0;
    x = x ^ (x >> 16);
    finish_lanes(x * U::splat(M1) + k1)
}

/// `lowbias32`'s multipliers.
const M1: u32 = 0x21f0_aaad;
const M2: u32 = 0x735a_2d97;

/// [`mix32`] after the first multiply and the key `k1`, on each lane.
#[must_use]
#[inline(always)]
fn finish_lanes<U: U32s>(mut x: U) -> U {
    x = x ^ (x >> 15);
    x = x * U::splat(M2);
    x ^ (x >> 15)
}

/// Row `j`, lane `i`: `(j ^ i) * M1`, the first multiply's lane part for
/// an aligned draw (see [`BlockKeys::mix_aligned`]).
static XOR_PRODUCTS: [[u32; 16]; 16] = {
    let mut rows = [[0; 16]; 16];
    let mut j = 0;
    while j < 16 {
        let mut i = 0;
        while i < 16 {
            rows[j][i] = ((j ^ i) as u32).wrapping_mul(M1);
            i += 1;
        }
        j += 1;
    }
    rows
};

/// A keyed family of random words addressed by position.
///
/// Two streams with different `(seed, stream)` pairs have unrelated keys.
/// Derive further independent streams with [`RandomStream::substream`], for
/// example one per (step, parameter) for weight updates.
///
/// ```
/// use tessera_core::rng::RandomStream;
/// let s = RandomStream::new(42, 0);
/// // Position-addressed: the same position always gives the same bits.
/// assert_eq!(s.bits(1_000), s.bits(1_000));
/// assert_ne!(s.bits(1_000), s.bits(1_001));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RandomStream {
    key: u64,
}

impl RandomStream {
    /// The stream numbered `stream` of the generator seeded with `seed`.
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    ///
    /// // Step 10 of a run seeded 42: its own stream, the same on every replica.
    /// let step = RandomStream::new(42, 10);
    /// assert_eq!(step, RandomStream::new(42, 10));
    /// assert_ne!(step.bits(0), RandomStream::new(42, 11).bits(0));
    /// ```
    #[must_use]
    pub const fn new(seed: u64, stream: u64) -> Self {
        Self {
            key: mix64(mix64(seed ^ 0x5445_5353_4552_4131) ^ stream),
        }
    }

    /// An independent stream derived from this one and `id` (for hierarchical
    /// addressing such as seed -> step -> parameter).
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    ///
    /// let step = RandomStream::new(42, 10);
    /// let (w0, w1) = (step.substream(0), step.substream(1));
    /// assert_ne!(w0.bits(0), w1.bits(0));
    /// ```
    #[must_use]
    pub const fn substream(self, id: u64) -> Self {
        Self {
            key: mix64(self.key ^ mix64(id ^ 0x7375_6273_7472_6561)),
        }
    }

    /// The key halves used for positions `hi << 32 ..= hi << 32 | u32::MAX`
    /// of word `word`.
    #[inline]
    const fn block_keys(self, hi: u32, word: u32) -> (u32, u32) {
        let block = mix64(self.key ^ ((word as u64) << 32 | hi as u64));
        (block as u32, (block >> 32) as u32)
    }

    /// Word 0 of position `index` (what [`StreamRng`] reads in order).
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    ///
    /// // Addressed by position: any order of reads gives the same bits.
    /// let s = RandomStream::new(1, 2);
    /// let forward: Vec<u32> = (0..4).map(|i| s.bits(i)).collect();
    /// let backward: Vec<u32> = (0..4).rev().map(|i| s.bits(i)).collect();
    /// assert!(forward.iter().eq(backward.iter().rev()));
    /// ```
    #[must_use]
    #[inline]
    pub const fn bits(self, index: u64) -> u32 {
        self.word(index, 0)
    }

    /// Word `word` of position `index`. Stochastic rounding reads words 1
    /// to 4 of element `index` where it needs more than the 16 bits of
    /// [`RandomStream::half_bits`].
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(1, 2);
    /// assert_eq!(s.word(5, 0), s.bits(5));
    /// ```
    #[must_use]
    #[inline]
    pub const fn word(self, index: u64, word: u32) -> u32 {
        let (k0, k1) = self.block_keys((index >> 32) as u32, word);
        mix32(index as u32, k0, k1)
    }

    /// The 16 random bits stochastic rounding uses first for element
    /// `index`: half of word 0 of position `index / 2`, laid out so that
    /// eight SIMD lanes share one eight-word draw. With `group = index / 16`
    /// and `lane = index % 16`, they are bits `16 * (lane / 8)..` of word 0
    /// of position `8 * group + lane % 8`: elements `16g..16g + 8` take the
    /// low halves of the group's eight words, elements `16g + 8..16g + 16`
    /// the high halves.
    ///
    /// ```
    /// use tessera_core::rng::RandomStream;
    ///
    /// let s = RandomStream::new(1, 2);
    /// // Elements 0 and 8 share word 0 of position 0: its low and high halves.
    /// assert_eq!(u32::from(s.half_bits(0)) | u32::from(s.half_bits(8)) << 16, s.bits(0));
    /// ```
    #[must_use]
    #[inline]
    pub const fn half_bits(self, index: u64) -> u16 {
        let lane = index & 15;
        let word = self.bits((index >> 4) << 3 | (lane & 7));
        (word >> ((lane >> 3) * 16)) as u16
    }

    /// The [`RandomStream::half_bits`] of elements `index..` in groups of
    /// 16, for an `index` that is a multiple of 16: each item is word 0 of
    /// eight consecutive positions (low halves for the group's first eight
    /// elements, high halves for the next eight). The block keys are
    /// derived once per 2^32 positions instead of once per group.
    /// `U` has eight lanes.
    #[must_use]
    #[inline(always)]
    pub(crate) fn half_bit_groups<U: U32s>(self, index: u64) -> HalfBitGroups<U> {
        let position = index >> 1;
        HalfBitGroups {
            keys: BlockKeys::new(self, position, 0),
            position,
            lanes: PhantomData,
        }
    }

    /// Word `word` of the positions `index..index + U::LANES`.
    #[must_use]
    #[inline(always)]
    pub(crate) fn words_lanes<U: U32s>(self, index: u64, word: u32) -> U {
        let lo = index as u32;
        if lo <= u32::MAX - (U::LANES as u32 - 1) {
            let (k0, k1) = self.block_keys((index >> 32) as u32, word);
            mix32_lanes(U::splat(lo) + U::iota(), U::splat(k0), U::splat(k1))
        } else {
            let mut words = [0; 16];
            for (lane, w) in words.iter_mut().enumerate().take(U::LANES) {
                *w = self.word(index.wrapping_add(lane as u64), word);
            }
            U::from_slice(&words)
        }
    }
}

/// Word `word`'s block keys for the 2^32 positions of one block, derived
/// once (a `mix64`) and reused by every draw inside the block: the same
/// words as [`RandomStream::word`], fewer steps per draw.
///
/// A draw of `L = U::LANES` words whose first position `p` is a multiple
/// of `L` ([`BlockKeys::mix_aligned`]) folds the steps before the first
/// multiply into scalar arithmetic. Its lanes `i` are the positions
/// `p ^ i`, which share their high 16 bits, so `lowbias32`'s first steps
/// `x = (p ^ i) ^ k0; x ^= x >> 16` give `s ^ i` with one scalar `s`.
/// Then `(s ^ i) * M1 + k1` is the scalar `(s & !(L - 1)) * M1 + k1`
/// plus row `s & (L - 1)` of the constant table `(j ^ i) * M1`. One
/// broadcast and one add (of a row loaded from the table) replace five
/// vector steps and a multiply.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockKeys {
    stream: RandomStream,
    word: u32,
    /// The block's first position.
    base: u64,
    k0: u32,
    k1: u32,
    /// `k0 ^ (k0 >> 16)`: the key's part of the first xor-shift.
    k0_folded: u32,
}

impl BlockKeys {
    /// The keys of word `word` for the block holding `position`.
    #[must_use]
    #[inline]
    pub(crate) const fn new(stream: RandomStream, position: u64, word: u32) -> Self {
        let hi = (position >> 32) as u32;
        let (k0, k1) = stream.block_keys(hi, word);
        Self {
            stream,
            word,
            base: (hi as u64) << 32,
            k0,
            k1,
            k0_folded: k0 ^ (k0 >> 16),
        }
    }

    /// This word of the positions `position..position + U::LANES` (the
    /// keys recomputed where they leave the block).
    #[must_use]
    #[inline(always)]
    pub(crate) fn words_lanes<U: U32s>(&self, position: u64) -> U {
        let offset = position.wrapping_sub(self.base);
        if offset <= u64::from(u32::MAX) && offset.is_multiple_of(U::LANES as u64) {
            self.mix_aligned(offset as u32)
        } else if offset <= u64::from(u32::MAX) - (U::LANES as u64 - 1) {
            self.mix(U::splat(offset as u32) + U::iota())
        } else {
            self.stream.words_lanes(position, self.word)
        }
    }

    /// This word of the positions whose low 32 bits are the lanes of
    /// `counter`, all in the block.
    #[must_use]
    #[inline(always)]
    pub(crate) fn mix<U: U32s>(&self, counter: U) -> U {
        mix32_lanes(counter, U::splat(self.k0), U::splat(self.k1))
    }

    /// This word of the block's positions `offset..offset + U::LANES`, for
    /// an `offset` that is a multiple of `U::LANES` (16 at most): the same
    /// words as [`BlockKeys::mix`], in fewer vector steps (see the type's
    /// docs).
    #[must_use]
    #[inline(always)]
    pub(crate) fn mix_aligned<U: U32s>(&self, offset: u32) -> U {
        debug_assert!(offset.is_multiple_of(U::LANES as u32));
        let lanes = U::LANES as u32 - 1;
        // `x ^ (x >> 16)` of `x = (offset ^ i) ^ k0`, less the lane's `i`.
        let s = offset ^ (offset >> 16) ^ self.k0_folded;
        let high = (s & !lanes).wrapping_mul(M1).wrapping_add(self.k1);
        let row = &XOR_PRODUCTS[(s & lanes) as usize];
        finish_lanes(U::splat(high) + U::from_slice(row))
    }
}

/// See [`RandomStream::half_bit_groups`].
#[derive(Clone, Debug)]
pub(crate) struct HalfBitGroups<U> {
    /// Word 0's keys for the block of `position`.
    keys: BlockKeys,
    /// Position of the next group's first word (a multiple of 8).
    position: u64,
    lanes: PhantomData<U>,
}

impl<U: U32s> HalfBitGroups<U> {
    /// The next group's eight words.
    #[inline(always)]
    pub(crate) fn next_words(&mut self) -> U {
        if self.position as u32 == 0 {
            // A new 2^32 block of positions (groups never straddle one);
            // element indices wrap at 2^64, so positions wrap at 2^63.
            self.position &= u64::MAX >> 1;
            self.keys = BlockKeys::new(self.keys.stream, self.position, 0);
        }
        let words = self.keys.mix_aligned(self.position as u32);
        self.position = self.position.wrapping_add(8);
        words
    }
}
