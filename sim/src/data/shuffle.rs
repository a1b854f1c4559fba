//! Seeded Fisher-Yates shuffles on [`RandomStream`]s.

use tessera_core::rng::RandomStream;

/// The stream number of [`Dataset::split`](super::Dataset::split)'s
/// shuffles (epochs use streams `0, 1, 2, ...`).
pub(crate) const SPLIT_STREAM: u64 = u64::MAX;

/// The stream number of the synthetic data generator.
pub(crate) const SYNTHETIC_STREAM: u64 = u64::MAX - 1;

/// A value uniform in `0..bound` from position `position` of `stream`
/// (words 0 and 1 as one 64-bit value, scaled by multiplication: a bias
/// below `bound / 2^64`).
#[must_use]
pub(crate) fn below(stream: RandomStream, position: u64, bound: usize) -> usize {
    let x = u64::from(stream.word(position, 0)) | u64::from(stream.word(position, 1)) << 32;
    // The product's high half is below `bound`, so it fits a usize.
    ((u128::from(x) * bound as u128) >> 64) as usize
}

/// Shuffles `items` in place: for `i` from `len - 1` down to 1, swap item
/// `i` with item `below(stream, i, i + 1)`. A pure function of the stream
/// and the length.
pub(crate) fn shuffle<T>(items: &mut [T], stream: RandomStream) {
    for i in (1..items.len()).rev() {
        let j = below(stream, i as u64, i + 1);
        items.swap(i, j);
    }
}
