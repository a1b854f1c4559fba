//! [`Error`]: why a collective request was refused.

use core::fmt;

/// A collective that cannot be run, with the numbers that show why.
///
/// Returned by [`CollectiveSchedule::new`](super::CollectiveSchedule::new) (impossible groups)
/// and by [`execute`](super::execute) and [`execute_into`](super::execute_into)
/// (buffers and scratch that do not fit the schedule). Nothing is written
/// when an error is returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Error {
    /// A group of zero ranks.
    NoRanks,
    /// More ranks than [`CollectiveSchedule::MAX_RANKS`](super::CollectiveSchedule::MAX_RANKS).
    TooManyRanks {
        /// The group size asked for.
        size: usize,
        /// The largest supported size.
        max: usize,
    },
    /// A root rank (of [`Collective::Reduce`](super::Collective::Reduce) or
    /// [`Collective::Broadcast`](super::Collective::Broadcast)) that is not
    /// in the group.
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// The group size (valid ranks are `0..size`).
        size: usize,
    },
    /// A buffer so long that the padded buffer (`size * ceil(len / size)`
    /// elements) or the executor's scratch (`size * len` f32) overflows
    /// `usize`.
    TooLong {
        /// The buffer length asked for.
        len: usize,
        /// The group size.
        size: usize,
    },
    /// A number of rank buffers different from the group size.
    BufferCount {
        /// The group size.
        expected: usize,
        /// The number of buffers given.
        found: usize,
    },
    /// A rank's buffer whose length differs from the schedule's.
    BufferLength {
        /// The first rank whose buffer is wrong.
        rank: usize,
        /// The schedule's buffer length.
        expected: usize,
        /// That rank's buffer length.
        found: usize,
    },
    /// Less scratch than [`CollectiveSchedule::scratch_len`](super::CollectiveSchedule::scratch_len)
    /// asks for.
    ScratchTooSmall {
        /// f32 elements needed.
        needed: usize,
        /// f32 elements given.
        available: usize,
    },
    /// A packed [`Frontier`](super::Frontier) whose length is not the one
    /// its covered contributions and element count give.
    MessageLength {
        /// Bytes expected.
        expected: usize,
        /// Bytes given.
        found: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoRanks => f.write_str("a collective needs at least one rank"),
            Self::TooManyRanks { size, max } => {
                write!(f, "{size} ranks is more than the {max} supported")
            }
            Self::RankOutOfRange { rank, size } => {
                write!(f, "rank {rank} is not in a group of {size} ranks")
            }
            Self::TooLong { len, size } => write!(
                f,
                "{len} elements over {size} ranks overflow the padded buffer or the scratch size"
            ),
            Self::BufferCount { expected, found } => {
                write!(
                    f,
                    "{found} rank buffers given for a group of {expected} ranks"
                )
            }
            Self::BufferLength {
                rank,
                expected,
                found,
            } => write!(
                f,
                "rank {rank}'s buffer has {found} elements, the schedule {expected}"
            ),
            Self::ScratchTooSmall { needed, available } => write!(
                f,
                "scratch of {available} f32 elements is too small: {needed} needed"
            ),
            Self::MessageLength { expected, found } => {
                write!(f, "a packed frontier of {found} bytes, {expected} expected")
            }
        }
    }
}

impl core::error::Error for Error {}
