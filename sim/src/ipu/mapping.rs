//! Tile mappings: which tile holds which elements of a tensor.
//!
//! A mapping is a list of [`Interval`]s, sorted by their first element,
//! that covers the tensor exactly once. A tile may hold several intervals
//! of one tensor; each is stored (and accounted for) separately. Helpers
//! make the common mappings:
//!
//! - [`linear`]: grains of `grain` elements dealt out evenly over a range
//!   of tiles in tile order, as PopLibs' `mapTensorLinearly`, except that
//!   the remainder is spread over the first tiles (one grain more each)
//!   instead of leaving the last tiles empty;
//! - [`memory_aware`]: the same contiguous, tile-ordered layout, but each
//!   tile gets as many grains as bring it up to a common level of used
//!   memory, so tiles that hold less get more (water-filling);
//! - explicit lists of intervals ([`Mapping::Explicit`]).

use core::num::NonZeroU64;
use core::ops::Range;

use super::target::Tile;
use super::tensor::TensorId;

/// Elements `range` of a tensor, held by `tile`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Interval {
    /// The tile.
    pub tile: Tile,
    /// The elements.
    pub range: Range<u64>,
}

impl Interval {
    /// Elements `range` on `tile`.
    ///
    /// ```
    /// use tessera_sim::ipu::Interval;
    ///
    /// let i = Interval::new(3, 8..12);
    /// assert_eq!((i.tile, i.range), (3, 8..12));
    /// ```
    #[must_use]
    pub const fn new(tile: Tile, range: Range<u64>) -> Self {
        Self { tile, range }
    }

    /// Elements in the interval.
    ///
    /// ```
    /// use tessera_sim::ipu::Interval;
    ///
    /// assert_eq!(Interval::new(0, 8..12).len(), 4);
    /// ```
    #[must_use]
    pub const fn len(&self) -> u64 {
        self.range.end - self.range.start
    }

    /// Whether the interval is empty.
    ///
    /// ```
    /// use tessera_sim::ipu::Interval;
    ///
    /// assert!(Interval::new(1, 5..5).is_empty());
    /// assert!(!Interval::new(1, 5..6).is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.range.end == self.range.start
    }
}

/// How [`Graph::add_tensor`](super::Graph::add_tensor) maps a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mapping {
    /// [`linear`] over `tiles` (all tiles of the target if `None`).
    Linear {
        /// Elements per grain; intervals start at multiples of it.
        grain: NonZeroU64,
        /// The tiles to use.
        tiles: Option<Range<Tile>>,
    },
    /// [`memory_aware`] over all tiles, given the tensors mapped so far.
    MemoryAware {
        /// Elements per grain.
        grain: NonZeroU64,
    },
    /// The same intervals as another tensor of the same length.
    Like(TensorId),
    /// These intervals (in any order; adjacent intervals of one tile are
    /// merged).
    Explicit(Vec<Interval>),
}

impl Mapping {
    /// [`Mapping::Linear`] over every tile.
    ///
    /// ```
    /// use core::num::NonZeroU64;
    /// use tessera_sim::ipu::Mapping;
    ///
    /// let grain = NonZeroU64::new(8).unwrap();
    /// assert_eq!(Mapping::linear(grain), Mapping::Linear { grain, tiles: None });
    /// ```
    #[must_use]
    pub const fn linear(grain: NonZeroU64) -> Self {
        Self::Linear { grain, tiles: None }
    }

    /// Everything on one tile.
    ///
    /// ```
    /// use tessera_sim::ipu::{Interval, Mapping};
    ///
    /// assert_eq!(Mapping::one_tile(2, 6), Mapping::Explicit(vec![Interval::new(2, 0..6)]));
    /// ```
    #[must_use]
    pub fn one_tile(tile: Tile, len: u64) -> Self {
        Self::Explicit(vec![Interval::new(tile, 0..len)])
    }
}

/// `len` elements in grains of `grain` dealt out over `tiles` in order: with
/// `g = ceil(len / grain)` grains and `n` tiles, the first `g % n` tiles get
/// `g / n + 1` grains and the others `g / n`; tiles with none are left out.
/// Only the last grain may be short.
///
/// ```
/// use core::num::NonZeroU64;
/// use tessera_sim::ipu::{mapping, Interval};
///
/// let m = mapping::linear(10, 0..3, NonZeroU64::new(2).unwrap());
/// assert_eq!(m, [Interval::new(0, 0..4), Interval::new(1, 4..8), Interval::new(2, 8..10)]);
/// ```
///
/// # Panics
/// If `tiles` is empty and `len > 0`.
#[must_use]
pub fn linear(len: u64, tiles: Range<Tile>, grain: NonZeroU64) -> Vec<Interval> {
    let grain = grain.get();
    let grains = len.div_ceil(grain);
    let n = u64::from(tiles.end.saturating_sub(tiles.start));
    assert!(n > 0 || len == 0, "linear mapping over no tiles");
    let mut out = Vec::new();
    let mut start = 0;
    for (k, tile) in tiles.enumerate() {
        let count = grains / n + u64::from((k as u64) < grains % n);
        if count == 0 {
            break;
        }
        let end = (start + count * grain).min(len);
        out.push(Interval::new(tile, start..end));
        start = end;
    }
    out
}

/// `len` elements of `elem_bytes` bytes in grains of `grain`, over tiles
/// `0..used.len()` in order, each tile getting the grains that bring its
/// bytes (`used[tile]` before) up to the lowest common level that holds
/// the whole tensor (water-filling; the last, short grain counts as a
/// whole one). Tiles already above the level get nothing. The result may
/// exceed a tile's memory: that is reported when a program is built.
///
/// ```
/// use core::num::NonZeroU64;
/// use tessera_sim::ipu::{mapping, Interval};
///
/// // Tile 0 already holds 64 bytes: the 32 f32 (128 bytes) go mostly to 1.
/// let m = mapping::memory_aware(32, 4, &[64, 0], NonZeroU64::new(4).unwrap());
/// assert_eq!(m, [Interval::new(0, 0..8), Interval::new(1, 8..32)]);
/// ```
#[must_use]
pub fn memory_aware(len: u64, elem_bytes: u64, used: &[u64], grain: NonZeroU64) -> Vec<Interval> {
    let grain = grain.get();
    let grains = len.div_ceil(grain);
    if grains == 0 || used.is_empty() {
        return Vec::new();
    }
    let grain_bytes = grain.saturating_mul(elem_bytes).max(1);
    let fits = |level: u64| -> bool {
        let mut total = 0u64;
        for &u in used {
            total = total.saturating_add(level.saturating_sub(u) / grain_bytes);
            if total >= grains {
                return true;
            }
        }
        false
    };
    let (mut lo, mut hi) = (0u64, used.iter().max().copied().unwrap_or(0));
    hi = hi.saturating_add(grains.saturating_mul(grain_bytes));
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) { hi = mid } else { lo = mid + 1 }
    }
    let level = lo;
    let mut out = Vec::new();
    let (mut start, mut left) = (0u64, grains);
    for (tile, &u) in used.iter().enumerate() {
        if left == 0 {
            break;
        }
        let take = (level.saturating_sub(u) / grain_bytes).min(left);
        if take == 0 {
            continue;
        }
        let end = (start + take * grain).min(len);
        out.push(Interval::new(tile as Tile, start..end));
        start = end;
        left -= take;
    }
    out
}

/// Sorts `intervals` by start and merges adjacent ones of the same tile.
pub(crate) fn normalise(mut intervals: Vec<Interval>) -> Vec<Interval> {
    intervals.retain(|i| !i.is_empty());
    intervals.sort_by_key(|i| i.range.start);
    let mut out: Vec<Interval> = Vec::with_capacity(intervals.len());
    for i in intervals {
        match out.last_mut() {
            Some(last) if last.tile == i.tile && last.range.end == i.range.start => {
                last.range.end = i.range.end;
            }
            _ => out.push(i),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn nz(x: u64) -> NonZeroU64 {
        NonZeroU64::new(x).unwrap()
    }

    #[test]
    fn linear_spreads_the_remainder() {
        // 10 grains of 256 over 4 tiles: 3, 3, 2, 2.
        let m = linear(2560, 0..4, nz(256));
        let lens: Vec<u64> = m.iter().map(Interval::len).collect();
        assert_eq!(lens, [768, 768, 512, 512]);
        // A short last grain.
        let m = linear(1000, 2..5, nz(256));
        assert_eq!(
            m,
            [
                Interval::new(2, 0..512),
                Interval::new(3, 512..768),
                Interval::new(4, 768..1000)
            ]
        );
        // Fewer grains than tiles: the last tiles hold nothing.
        assert_eq!(linear(3, 0..8, nz(1)).len(), 3);
        assert!(linear(0, 0..8, nz(1)).is_empty());
    }

    #[test]
    fn memory_aware_levels_the_tiles() {
        let used = [5000, 0, 500, 0];
        let m = memory_aware(1000, 4, &used, nz(10));
        let total: u64 = m.iter().map(Interval::len).sum();
        assert_eq!(total, 1000);
        let mut after = used;
        for i in &m {
            after[i.tile as usize] += i.len() * 4;
        }
        // The level is about 1,520 bytes: tile 0, above it, gets nothing;
        // the others end within two grains (80 bytes) of each other.
        assert_eq!(after[0], 5000);
        let max = *after[1..].iter().max().unwrap();
        let min = *after[1..].iter().min().unwrap();
        assert!(max - min <= 2 * 40, "{after:?}");
        // Contiguous and in tile order.
        assert!(
            m.windows(2)
                .all(|w| w[0].range.end == w[1].range.start && w[0].tile < w[1].tile)
        );
    }

    #[test]
    fn normalise_merges_adjacent_runs() {
        let m = normalise(vec![
            Interval::new(1, 4..8),
            Interval::new(0, 0..4),
            Interval::new(1, 8..9),
            Interval::new(0, 9..9),
        ]);
        assert_eq!(m, [Interval::new(0, 0..4), Interval::new(1, 4..9)]);
    }
}
