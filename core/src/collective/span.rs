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
    ///
    /// ```
    /// use tessera_core::collective::Span;
    ///
    /// let s = Span::new(4, 3);
    /// assert_eq!(s.runs().collect::<Vec<_>>(), [4..7]);
    /// ```
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
    ///
    /// ```
    /// use tessera_core::collective::Span;
    ///
    /// let s = Span::strided(0, 2, 5, 3);
    /// assert_eq!(s.runs().collect::<Vec<_>>(), [0..2, 5..7, 10..12]);
    /// ```
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
    ///
    /// ```
    /// use tessera_core::collective::Span;
    ///
    /// assert_eq!(Span::strided(0, 2, 5, 3).elements(), 6);
    /// ```
    #[must_use]
    pub const fn elements(&self) -> usize {
        self.len * self.count
    }

    /// Whether there are no positions.
    ///
    /// ```
    /// use tessera_core::collective::Span;
    ///
    /// assert!(Span::EMPTY.is_empty() && Span::strided(3, 0, 4, 2).is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.elements() == 0
    }

    /// The runs, as ranges of positions.
    ///
    /// ```
    /// use tessera_core::collective::Span;
    ///
    /// assert_eq!(Span::strided(1, 1, 3, 2).runs().collect::<Vec<_>>(), [1..2, 4..5]);
    /// ```
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
    ///
    /// ```
    /// use tessera_core::collective::Span;
    ///
    /// // Positions 6 and up are padding.
    /// let s = Span::strided(0, 2, 5, 3);
    /// assert_eq!(s.runs_below(6).collect::<Vec<_>>(), [0..2, 5..6]);
    /// ```
    pub fn runs_below(&self, n: usize) -> impl Iterator<Item = Range<usize>> + use<> {
        self.runs()
            .map(move |r| r.start.min(n)..r.end.min(n))
            .filter(|r| !r.is_empty())
    }

    /// The number of positions below `n` (the payload, padding excluded).
    ///
    /// ```
    /// use tessera_core::collective::Span;
    ///
    /// assert_eq!(Span::strided(0, 2, 5, 3).elements_below(6), 3);
    /// ```
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
    ///
    /// ```
    /// use tessera_core::collective::Ranks;
    ///
    /// let r = Ranks::new(3, 2); // ranks 3 and 0 of 4
    /// assert_eq!(r.iter(4).collect::<Vec<_>>(), [3, 0]);
    /// ```
    #[must_use]
    pub const fn new(start: usize, len: usize) -> Self {
        Self { start, len }
    }

    /// The single rank `rank`.
    ///
    /// ```
    /// use tessera_core::collective::Ranks;
    ///
    /// assert_eq!(Ranks::one(2), Ranks::new(2, 1));
    /// ```
    #[must_use]
    pub const fn one(rank: usize) -> Self {
        Self::new(rank, 1)
    }

    /// Whether `rank` is in the set, in a group of `size`.
    ///
    /// ```
    /// use tessera_core::collective::Ranks;
    ///
    /// let r = Ranks::new(3, 2);
    /// assert!(r.contains(0, 4) && !r.contains(1, 4));
    /// ```
    #[must_use]
    pub const fn contains(&self, rank: usize, size: usize) -> bool {
        (rank + size - self.start % size) % size < self.len
    }

    /// The ranks in order, in a group of `size`.
    ///
    /// ```
    /// use tessera_core::collective::Ranks;
    ///
    /// assert_eq!(Ranks::new(1, 3).iter(3).collect::<Vec<_>>(), [1, 2, 0]);
    /// ```
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
    #[cfg(feature = "alloc")]
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
