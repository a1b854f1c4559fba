//! Programs: what the device does, in order, as Poplar's `program::*`.

use super::graph::{ComputeSetId, ExchangeId, StreamId};

/// A program over a [`Graph`](super::Graph)'s compute sets, exchanges and
/// streams.
///
/// Execution is bulk-synchronous. Each step costs, in cycles:
///
/// - [`Program::Execute`]: a compute phase (the slowest tile's estimate)
///   then a sync of every tile of the target;
/// - [`Program::Exchange`]: an exchange phase (the busiest tile's bytes
///   and, between IPUs, the busiest IPU-Link group and its latency);
///   consecutive exchanges are separate phases with no sync between them,
///   as Poplar merges adjacent copies into one exchange;
/// - [`Program::HostWrite`] and [`Program::HostRead`]: a host phase (the
///   IPU with the most bytes to move, at the host bandwidth) then a sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Program {
    /// Runs a compute set.
    Execute(ComputeSetId),
    /// Runs an exchange.
    Exchange(ExchangeId),
    /// Runs programs in order.
    Sequence(Vec<Program>),
    /// Runs a program `count` times.
    Repeat {
        /// Times to run the body.
        count: u64,
        /// The body.
        body: Box<Program>,
    },
    /// Copies a host stream's buffer into its tensor.
    HostWrite(StreamId),
    /// Copies a tensor into its host stream's buffer.
    HostRead(StreamId),
}

impl Program {
    /// A sequence of `programs`.
    ///
    /// ```
    /// use tessera_sim::ipu::Program;
    ///
    /// let p = Program::sequence([Program::empty(), Program::empty()]);
    /// assert_eq!(p, Program::Sequence(vec![Program::empty(), Program::empty()]));
    /// ```
    #[must_use]
    pub fn sequence(programs: impl IntoIterator<Item = Self>) -> Self {
        Self::Sequence(programs.into_iter().collect())
    }

    /// `body` repeated `count` times.
    ///
    /// ```
    /// use tessera_sim::ipu::Program;
    ///
    /// let p = Program::repeat(3, Program::empty());
    /// assert!(matches!(p, Program::Repeat { count: 3, .. }));
    /// ```
    #[must_use]
    pub fn repeat(count: u64, body: Self) -> Self {
        Self::Repeat {
            count,
            body: Box::new(body),
        }
    }

    /// The empty program.
    ///
    /// ```
    /// use tessera_sim::ipu::Program;
    ///
    /// assert_eq!(Program::empty(), Program::sequence([]));
    /// ```
    #[must_use]
    pub const fn empty() -> Self {
        Self::Sequence(Vec::new())
    }
}
