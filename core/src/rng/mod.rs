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
//! SplitMix64 finaliser. The 32-bit word `w` of position `i` is
//!
//! ```text
//! block  = mix64(key ^ (w << 32 | i >> 32))          // once per 2^32 positions
//! k0, k1 = low and high halves of block
//! x = (i as u32) ^ k0
//! x ^= x >> 17; x *= 0xed5ad4bb; x ^= x >> 11; x += k1
//! x *= 0xac4c1b51; x ^= x >> 15; x *= 0x31848bab; x ^= x >> 14
//! ```
//!
//! The per-element part is Chris Wellons' `triple32` integer permutation (a
//! three-multiply mixer found by search for low avalanche bias, about 0.02)
//! with the key injected before the first and the second multiply, so it runs
//! eight lanes at a time in plain 32-bit SIMD arithmetic. For a fixed key it
//! is a bijection on the low 32 bits of the position, so a stream's 2^32
//! words per block are a permutation of all 32-bit values (no value repeats
//! within a block).
//!
//! Quality: the test suite runs chi-square tests on bytes, on every bit
//! position, on pairs of consecutive words and across streams with adjacent
//! seeds, and a correlation test between adjacent streams. It is a
//! statistical generator for rounding and sampling, not a cryptographic one;
//! it has not been through TestU01's BigCrush, so do not use it where that
//! level of evidence matters.
//!
//! A change to any output of this module is a breaking change: the
//! value-stability tests pin them.

mod sequential;

pub use sequential::StreamRng;

use wide::u32x8;

/// The SplitMix64 finaliser (Steele, Lea and Flood, OOPSLA 2014): a bijection
/// on `u64` with full avalanche.
#[must_use]
#[inline]
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Keyed `triple32` for one position (the per-element part of the generator).
#[must_use]
#[inline(always)]
const fn mix32(lo: u32, k0: u32, k1: u32) -> u32 {
    let mut x = lo ^ k0;
    x ^= x >> 17;
    x = x.wrapping_mul(0xed5a_d4bb);
    x ^= x >> 11;
    x = x.wrapping_add(k1);
    x = x.wrapping_mul(0xac4c_1b51);
    x ^= x >> 15;
    x = x.wrapping_mul(0x3184_8bab);
    x ^ (x >> 14)
}

/// The same as [`mix32`] on eight lanes.
#[must_use]
#[inline(always)]
fn mix32x8(lo: u32x8, k0: u32, k1: u32) -> u32x8 {
    let mut x = lo ^ u32x8::splat(k0);
    x ^= x >> 17;
    x *= u32x8::splat(0xed5a_d4bb);
    x ^= x >> 11;
    x += u32x8::splat(k1);
    x *= u32x8::splat(0xac4c_1b51);
    x ^= x >> 15;
    x *= u32x8::splat(0x3184_8bab);
    x ^ (x >> 14)
}

/// Lane offsets 0..8.
const LANES: u32x8 = u32x8::new([0, 1, 2, 3, 4, 5, 6, 7]);

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
    #[must_use]
    pub const fn new(seed: u64, stream: u64) -> Self {
        Self {
            key: mix64(mix64(seed ^ 0x5445_5353_4552_4131) ^ stream),
        }
    }

    /// An independent stream derived from this one and `id` (for hierarchical
    /// addressing such as seed -> step -> parameter).
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

    /// Word 0 of position `index`: the bits stochastic rounding uses for
    /// element `index`.
    #[must_use]
    #[inline]
    pub const fn bits(self, index: u64) -> u32 {
        self.word(index, 0)
    }

    /// Word `word` of position `index`. Words other than 0 are used where one
    /// element needs more than 32 random bits.
    #[must_use]
    #[inline]
    pub const fn word(self, index: u64, word: u32) -> u32 {
        let (k0, k1) = self.block_keys((index >> 32) as u32, word);
        mix32(index as u32, k0, k1)
    }

    /// Word 0 of the eight positions `index..index + 8`.
    #[must_use]
    #[inline]
    pub(crate) fn bits_x8(self, index: u64) -> u32x8 {
        let lo = index as u32;
        if lo <= u32::MAX - 7 {
            let (k0, k1) = self.block_keys((index >> 32) as u32, 0);
            mix32x8(u32x8::splat(lo) + LANES, k0, k1)
        } else {
            u32x8::new(core::array::from_fn(|lane| {
                self.bits(index.wrapping_add(lane as u64))
            }))
        }
    }

    /// Calls `f(offset, bits)` for every run of eight positions of word 0 in
    /// `first..first + len` that lies inside one 2^32 block, in order, and
    /// returns the number of positions covered; the caller handles the rest
    /// one by one with [`RandomStream::bits`]. The SIMD kernels are built on
    /// this so that their lanes see exactly the scalar bits.
    #[inline]
    pub(crate) fn for_each_x8(
        self,
        first: u64,
        len: usize,
        mut f: impl FnMut(usize, u32x8),
    ) -> usize {
        let mut done = 0usize;
        while len - done >= 8 {
            let index = first.wrapping_add(done as u64);
            let lo = index as u32;
            // Whole chunks of eight that fit before the next 2^32 boundary.
            let room = (u64::from(u32::MAX - lo) + 1) / 8;
            let chunks = ((len - done) / 8).min(usize::try_from(room).unwrap_or(usize::MAX));
            if chunks == 0 {
                // A chunk would straddle a block boundary: stop here and let
                // the caller's scalar code cover the rest (rare and correct).
                return done;
            }
            let (k0, k1) = self.block_keys((index >> 32) as u32, 0);
            let mut counter = u32x8::splat(lo) + LANES;
            for _ in 0..chunks {
                f(done, mix32x8(counter, k0, k1));
                counter += u32x8::splat(8);
                done += 8;
            }
        }
        done
    }
}
