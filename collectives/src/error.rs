//! [`CommError`]: why a communication or a collective failed, with the
//! ranks and numbers that say so.

use core::fmt;
use std::time::Duration;

use crate::group::GroupError;

/// Why a rank is taken to have failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Cause {
    /// It called [`abort`](crate::Communicator::abort).
    Aborted,
    /// Its thread panicked while holding its communicator.
    Panicked,
    /// It dropped its communicator (its thread or process ended) while a
    /// peer still waited for a message from it.
    Exited,
    /// A peer waited for it past the deadline (directly, or through
    /// ranks that waited for it), while it waited for nobody and did
    /// nothing.
    Unresponsive,
    /// It called a collective with parameters that differ from a peer's
    /// (length, element type, operation, algorithm, root, ...), or out of
    /// step with its peers.
    Mismatch,
    /// Its transport reported an error (an MPI error code, say).
    Transport,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Aborted => "aborted",
            Self::Panicked => "panicked",
            Self::Exited => "exited",
            Self::Unresponsive => "stopped responding",
            Self::Mismatch => "called a mismatched collective",
            Self::Transport => "had a transport error",
        })
    }
}

/// The first failure a communicator learnt of: which rank, and why. Once a
/// communicator knows of one, every operation on it fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Failure {
    /// The failed rank (a rank of the world, see [`CommError`]); `None`
    /// when a rank timed out and no single rank could be found to have
    /// stopped ([`CommError::Stalled`]).
    pub rank: Option<usize>,
    /// Why it is taken to have failed.
    pub cause: Cause,
}

impl Failure {
    /// `rank` failed for `cause`.
    ///
    /// ```
    /// use tessera_collectives::{Cause, Failure};
    ///
    /// let f = Failure::of(3, Cause::Panicked);
    /// assert_eq!((f.rank, f.cause), (Some(3), Cause::Panicked));
    /// ```
    #[must_use]
    pub const fn of(rank: usize, cause: Cause) -> Self {
        Self {
            rank: Some(rank),
            cause,
        }
    }
}

/// Which parameter of a collective call differs between two ranks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mismatch {
    /// The buffer lengths, in elements.
    Length {
        /// This rank's.
        ours: u64,
        /// The peer's.
        theirs: u64,
    },
    /// The element types.
    ElementType {
        /// This rank's (`"f32"`, `"f16"` or `"bf16"`).
        ours: &'static str,
        /// The peer's.
        theirs: &'static str,
    },
    /// The reduction operations.
    Operation,
    /// The collectives (or their roots).
    Collective,
    /// The algorithms or summation orders.
    Algorithm,
    /// The group sizes.
    GroupSize {
        /// This rank's.
        ours: u64,
        /// The peer's.
        theirs: u64,
    },
    /// The sequence of calls: the peer is at another collective, or another
    /// step or fragment of this one.
    Sequence,
    /// A message that is not a collective's (wrong format).
    Format,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Length { ours, theirs } => {
                write!(f, "buffer length {ours} here, {theirs} there")
            }
            Self::ElementType { ours, theirs } => {
                write!(f, "element type {ours} here, {theirs} there")
            }
            Self::Operation => f.write_str("different reduction operations"),
            Self::Collective => f.write_str("different collectives or roots"),
            Self::Algorithm => f.write_str("different algorithms or summation orders"),
            Self::GroupSize { ours, theirs } => {
                write!(f, "group size {ours} here, {theirs} there")
            }
            Self::Sequence => f.write_str("calls out of sequence"),
            Self::Format => f.write_str("a message that is not a collective's"),
        }
    }
}

/// Why a point-to-point operation or a collective failed.
///
/// Ranks are ranks of the underlying world (the [`ThreadWorld`] or the MPI
/// communicator), also when the operation ran in a replica group, where
/// [`Communicator::rank`](crate::Communicator::rank) counts within the
/// group.
///
/// After any error but [`RankOutOfRange`](Self::RankOutOfRange),
/// [`TooLarge`](Self::TooLarge), [`Group`](Self::Group),
/// [`Schedule`](Self::Schedule) and [`Config`](Self::Config) (which are
/// found before anything is sent), the communicator is aborted: every
/// rank's pending and later operations fail, naming the failed rank.
///
/// [`ThreadWorld`]: crate::ThreadWorld
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CommError {
    /// `rank` waited `waited` (the operation's whole timeout) without the
    /// message it waited for arriving. `rank` aborts the world, naming
    /// `peer` ([`Cause::Unresponsive`]), or naming nobody
    /// ([`Stalled`](Self::Stalled)) if `peer` is `None`.
    ///
    /// `peer` is the rank that stopped, found by following the waits: the
    /// rank `rank` waited for, unless that one itself waited for another
    /// (rank 0 waits for 3, which waits for 2, which waits for nobody and
    /// does nothing: 2 is named, not 3). A rank is named only if it waits
    /// for nobody and shows no sign of life for a while; `peer` is `None`
    /// if the waits lead back to a rank already on the chain (each waits
    /// for another: the calls do not match) or the ranks keep moving (the
    /// collective is slower than its timeout). A live rank is never named.
    Timeout {
        /// The rank that waited.
        rank: usize,
        /// The rank found to have stopped, if one could be told.
        peer: Option<usize>,
        /// How long it waited.
        waited: Duration,
    },
    /// A rank failed: the operation could not complete and the
    /// communicator is aborted. Usually another rank; this rank itself when
    /// a peer declared it unresponsive ([`Cause::Unresponsive`]), or after
    /// its own call was found mismatched ([`Cause::Mismatch`]).
    PeerFailed {
        /// The failed rank.
        rank: usize,
        /// Why.
        cause: Cause,
    },
    /// A rank timed out and no single rank could be found to have stopped
    /// (see [`Timeout`](Self::Timeout)): the world is aborted, naming
    /// nobody. `rank` is this rank.
    Stalled {
        /// This rank.
        rank: usize,
    },
    /// This rank aborted the world itself (through
    /// [`abort`](crate::Communicator::abort) or an
    /// [`AbortHandle`](crate::AbortHandle)): every operation fails.
    Aborted {
        /// This rank.
        rank: usize,
    },
    /// A message of `found` bytes arrived where `expected` were expected.
    LengthMismatch {
        /// The receiving rank.
        rank: usize,
        /// The sender.
        peer: usize,
        /// Bytes expected.
        expected: usize,
        /// Bytes received.
        found: usize,
    },
    /// `rank` and `peer` called a collective with different parameters, or
    /// out of sequence. `rank` aborts the world ([`Cause::Mismatch`]), so
    /// the others fail too.
    CallMismatch {
        /// The rank that noticed.
        rank: usize,
        /// The peer whose message disagreed.
        peer: usize,
        /// What differs.
        what: Mismatch,
    },
    /// A peer rank `rank` that is not below the communicator's `size`.
    RankOutOfRange {
        /// The rank given.
        rank: usize,
        /// The communicator's size.
        size: usize,
    },
    /// A message longer than the transport can carry (MPI counts are
    /// `i32`).
    TooLarge {
        /// Bytes asked for.
        bytes: usize,
        /// The largest message.
        max: usize,
    },
    /// The transport failed (an MPI error code). The communicator is
    /// aborted.
    Transport {
        /// The rank that saw the error.
        rank: usize,
        /// The transport's error code.
        code: i32,
    },
    /// A replica group that does not fit the communicator.
    Group(GroupError),
    /// A collective that cannot be scheduled (see
    /// [`tessera_core::collective::Error`]).
    Schedule(tessera_core::collective::Error),
    /// An invalid configuration (cost model, topology, options).
    Config(ConfigError),
}

/// An invalid number in a configuration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ConfigError {
    /// A field that must be finite and at least zero.
    Negative {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// A field that must be finite and above zero.
    NotPositive {
        /// The field.
        field: &'static str,
        /// Its value.
        value: f64,
    },
    /// An efficiency outside `(0, 1]`.
    Efficiency {
        /// Its value.
        value: f64,
    },
    /// Too few samples, or samples that do not determine a fit.
    Samples {
        /// Samples given.
        found: usize,
        /// Samples needed (with distinct sizes).
        needed: usize,
    },
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Negative { field, value } => {
                write!(f, "{field} must be finite and at least 0, not {value}")
            }
            Self::NotPositive { field, value } => {
                write!(f, "{field} must be finite and above 0, not {value}")
            }
            Self::Efficiency { value } => {
                write!(f, "an efficiency must be in (0, 1], not {value}")
            }
            Self::Samples { found, needed } => write!(
                f,
                "{found} samples do not determine a fit: {needed} with distinct sizes needed"
            ),
        }
    }
}

impl core::error::Error for ConfigError {}

impl fmt::Display for CommError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Timeout { rank, peer, waited } => {
                let waited = waited.as_secs_f64();
                match peer {
                    Some(peer) => write!(
                        f,
                        "rank {rank} timed out after {waited:.3} s waiting for rank {peer}"
                    ),
                    None => write!(
                        f,
                        "rank {rank} timed out after {waited:.3} s; no single rank stopped \
                         (the ranks waited for each other, or kept moving)"
                    ),
                }
            }
            Self::PeerFailed { rank, cause } => write!(f, "rank {rank} failed: it {cause}"),
            Self::Stalled { rank } => write!(
                f,
                "rank {rank}'s communicator is aborted: a rank timed out, and no single rank \
                 was found to have stopped"
            ),
            Self::Aborted { rank } => write!(f, "rank {rank}'s communicator is aborted"),
            Self::LengthMismatch {
                rank,
                peer,
                expected,
                found,
            } => write!(
                f,
                "rank {rank} expected {expected} bytes from rank {peer}, received {found}"
            ),
            Self::CallMismatch { rank, peer, what } => write!(
                f,
                "ranks {rank} and {peer} called mismatched collectives: {what}"
            ),
            Self::RankOutOfRange { rank, size } => {
                write!(f, "rank {rank} is not in a communicator of {size} ranks")
            }
            Self::TooLarge { bytes, max } => {
                write!(
                    f,
                    "a message of {bytes} bytes exceeds the transport's {max}"
                )
            }
            Self::Transport { rank, code } => {
                write!(f, "rank {rank}: transport error (code {code})")
            }
            Self::Group(e) => write!(f, "replica group: {e}"),
            Self::Schedule(e) => write!(f, "collective: {e}"),
            Self::Config(e) => write!(f, "configuration: {e}"),
        }
    }
}

impl core::error::Error for CommError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Group(e) => Some(e),
            Self::Schedule(e) => Some(e),
            Self::Config(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GroupError> for CommError {
    fn from(e: GroupError) -> Self {
        Self::Group(e)
    }
}

impl From<tessera_core::collective::Error> for CommError {
    fn from(e: tessera_core::collective::Error) -> Self {
        Self::Schedule(e)
    }
}

impl From<ConfigError> for CommError {
    fn from(e: ConfigError) -> Self {
        Self::Config(e)
    }
}

impl CommError {
    /// The failure this error reports, as the aborting rank records it:
    /// `None` for errors found before anything was sent (which do not
    /// abort).
    ///
    /// ```
    /// use tessera_collectives::{Cause, CommError, Failure};
    ///
    /// let e = CommError::Aborted { rank: 2 };
    /// assert_eq!(e.failure(0), Some(Failure::of(2, Cause::Aborted)));
    /// ```
    #[must_use]
    pub const fn failure(&self, rank: usize) -> Option<Failure> {
        match *self {
            Self::Timeout { peer, .. } => Some(Failure {
                rank: peer,
                cause: Cause::Unresponsive,
            }),
            Self::Stalled { .. } => Some(Failure {
                rank: None,
                cause: Cause::Unresponsive,
            }),
            Self::PeerFailed { rank, cause } => Some(Failure::of(rank, cause)),
            Self::Aborted { rank } => Some(Failure::of(rank, Cause::Aborted)),
            Self::LengthMismatch { .. } | Self::CallMismatch { .. } => {
                Some(Failure::of(rank, Cause::Mismatch))
            }
            Self::Transport { rank, .. } => Some(Failure::of(rank, Cause::Transport)),
            Self::RankOutOfRange { .. }
            | Self::TooLarge { .. }
            | Self::Group(_)
            | Self::Schedule(_)
            | Self::Config(_) => None,
        }
    }
}
