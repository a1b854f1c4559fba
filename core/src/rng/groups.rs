//! The draws of a call's aligned groups: words 0 and 1 by
//! [`BlockKeys::mix_aligned`] with no check per draw.

use super::{BlockKeys, RandomStream};
use crate::arch::U32s;

/// Words 0 and 1 of a stream for elements whose positions all lie in one
/// 2^32 block, drawn in aligned groups: every draw is one
/// [`BlockKeys::mix_aligned`], with no test of alignment or block on the
/// way (the hot loops of exact stochastic encoding draw three or more
/// times per 16 elements).
#[derive(Clone, Copy, Debug)]
pub(crate) struct GroupDraws {
    /// Word 0's keys (for the elements' half positions).
    word0: BlockKeys,
    /// Word 1's keys.
    word1: BlockKeys,
}

impl GroupDraws {
    /// The draws of elements `first..first + len`, if `first` is a
    /// multiple of 32 and the elements lie in one 2^32 block of positions
    /// (their half positions then do too); `None` otherwise.
    #[must_use]
    #[inline]
    pub(crate) const fn new(stream: RandomStream, first: u64, len: u64) -> Option<Self> {
        if len == 0 || !first.is_multiple_of(32) {
            return None;
        }
        match first.checked_add(len - 1) {
            Some(last) if last >> 32 == first >> 32 => Some(Self {
                word0: BlockKeys::new(stream, first >> 1, 0),
                word1: BlockKeys::new(stream, first, 1),
            }),
            _ => None,
        }
    }

    /// Word 0 of the positions `index / 2..index / 2 + U::LANES`: the
    /// [`RandomStream::half_bits`] of elements `index..index + 2 * U::LANES`
    /// (`index` a multiple of `2 * U::LANES`, in the range). Lanes `0..8`
    /// serve the first 16 elements (low halves for the first eight), lanes
    /// `8..16` the next 16.
    #[must_use]
    #[inline(always)]
    pub(crate) fn word0<U: U32s>(&self, index: u64) -> U {
        self.word0.mix_aligned((index >> 1) as u32)
    }

    /// Word 1 of the positions `index..index + U::LANES` (`index` a
    /// multiple of `U::LANES`, in the range).
    #[must_use]
    #[inline(always)]
    pub(crate) fn word1<U: U32s>(&self, index: u64) -> U {
        self.word1.mix_aligned(index as u32)
    }
}
