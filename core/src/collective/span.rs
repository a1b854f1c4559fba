//! Positions and contributions: [`Span`] (where a message's elements are)
//! and [`Ranks`] (whose contributions a partial result covers).

use core::ops::Range;

/// A set of positions in the (padded) buffer: `count` runs of `len`
/// elements, `stride` apart, from `start`.
///
/// Everything but halving-doubling's reduce-scatter uses one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Span {
    /// The first position.
    pub start: usize,
    /// Elements per run.
    pub len: usize,
    /// Distance between the starts of consecutive runs.
    pub stride: usize,
    /// Number of runs.
    pub count: usize,
}

impl Span {
    /// No positions.
    pub const EMPTY: Self = Self::new(0, 0);

    /// The positions `start..start + len`.
    #[must_use]
    pub const fn new(start: usize, len: usize) -> Self {
        Self {
            start,
            len,
            stride: len,
            count: 1,
        }
    }

    /// `count` runs of `len`, `stride` apart.
    #[must_use]
    pub const fn strided(start: usize, len: usize, stride: usize, count: usize) -> Self {
        Self {
            start,
            len,
            stride,
            count,
        }
    }

    /// The number of positions (padding included).
    #[must_use]
    pub const fn elements(&self) -> usize {
        self.len * self.count
    }

    /// Whether there are no positions.
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.elements() == 0
    }

    /// The runs, as ranges of positions.
    pub fn runs(&self) -> impl Iterator<Item = Range<usize>> + use<> {
        let Self {
            start,
            len,
            stride,
            count,
        } = *self;
        (0..if len == 0 { 0 } else { count }).map(move |k| {
            let a = start + k * stride;
            a..a + len
        })
    }

    /// The runs cut at `n` (positions from `n` on are padding), empty ones
    /// left out.
    pub fn runs_below(&self, n: usize) -> impl Iterator<Item = Range<usize>> + use<> {
        self.runs()
            .map(move |r| r.start.min(n)..r.end.min(n))
            .filter(|r| !r.is_empty())
    }

    /// The number of positions below `n` (the payload, padding excluded).
    #[must_use]
    pub fn elements_below(&self, n: usize) -> usize {
        self.runs_below(n).map(|r| r.len()).sum()
    }
}

/// A set of ranks `start, start + 1, ..., start + len - 1`, counted modulo
/// the group size (so it may wrap past the last rank): the contributions a
/// partial result covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ranks {
    /// The first rank.
    pub start: usize,
    /// How many (at most the group size).
    pub len: usize,
}

impl Ranks {
    /// The ranks `start, ..., start + len - 1` (mod the group size).
    #[must_use]
    pub const fn new(start: usize, len: usize) -> Self {
        Self { start, len }
    }

    /// The single rank `rank`.
    #[must_use]
    pub const fn one(rank: usize) -> Self {
        Self::new(rank, 1)
    }

    /// Whether `rank` is in the set, in a group of `size`.
    #[must_use]
    pub const fn contains(&self, rank: usize, size: usize) -> bool {
        (rank + size - self.start % size) % size < self.len
    }

    /// The ranks in order, in a group of `size`.
    pub fn iter(&self, size: usize) -> impl Iterator<Item = usize> + use<> {
        let start = self.start;
        (0..self.len).map(move |k| (start + k) % size)
    }

    /// Whether all of the ranks `a..b` (no wrap, `a < b <= size`) are in
    /// the set.
    pub(crate) fn covers(&self, a: usize, b: usize, size: usize) -> bool {
        if self.len >= size {
            return true;
        }
        (a + size - self.start % size) % size + (b - a) <= self.len
    }

    /// Whether any of the ranks `a..b` (no wrap) is in the set.
    pub(crate) fn meets(&self, a: usize, b: usize, size: usize) -> bool {
        if self.len == 0 {
            return false;
        }
        // Either a is in the set, or the set starts inside a..b.
        self.contains(a, size) || (self.start % size + size - a) % size < b - a
    }

    /// The union of two disjoint, adjacent sets (one ends where the other
    /// starts), as [`Kind::Reduce`](super::Kind::Reduce) guarantees its
    /// `covers` and `onto` are, in a group of `size`.
    pub(crate) fn union(self, other: Self, size: usize) -> Self {
        let len = (self.len + other.len).min(size);
        let start = if (self.start + self.len) % size == other.start % size {
            self.start
        } else {
            other.start
        };
        Self::new(start % size, len)
    }
}
