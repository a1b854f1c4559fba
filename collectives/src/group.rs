//! Replica groups: which replicas take part in a collective together.
//!
//! The three kinds are Graphcore's `CommGroupType` (PopART
//! `popart/commgroup.hpp`, GCL). For `N` replicas and group size `k`:
//!
//! ```text
//! All              one group of all N:      {0, 1, ..., N-1}
//! Consecutive(k)   N/k groups of k:         {0..k-1}, {k..2k-1}, ...
//! Orthogonal(k)    m = N/k groups of k:     {0, m, 2m, ...}, {1, m+1, ...}, ..., {m-1, 2m-1, ..., N-1}
//! ```
//!
//! N = 8, k = 2:
//!
//! ```text
//! replica       0 1 2 3 4 5 6 7
//! Consecutive   a a b b c c d d
//! Orthogonal    a b c d a b c d
//! ```
//!
//! A typical two-level all-reduce uses `Consecutive(k)` for the fast links
//! inside an IPU-Link domain and `Orthogonal(k')` across domains.

use core::fmt;
use core::iter::FusedIterator;

/// How replicas are split into groups (Graphcore's `CommGroup`).
///
/// The group sizes are validated against the replica count when the group
/// of a rank is asked for ([`ReplicaGroup::members`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReplicaGroup {
    /// Every replica in one group.
    All,
    /// Groups of `k` consecutive replicas: `{0..k-1}, {k..2k-1}, ...`.
    Consecutive(usize),
    /// `k` replicas per group, strided by `m = N / k`:
    /// `{0, m, 2m, ...}, {1, m+1, ...}, ...`.
    Orthogonal(usize),
}

/// Why a [`ReplicaGroup`] does not fit a replica count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GroupError {
    /// There are no replicas.
    NoReplicas,
    /// `rank` is not below the replica count.
    RankOutOfRange {
        /// The rank asked about.
        rank: usize,
        /// The number of replicas.
        replicas: usize,
    },
    /// A group size of zero.
    ZeroGroupSize,
    /// The group size does not divide the replica count.
    Indivisible {
        /// The group size.
        group_size: usize,
        /// The number of replicas.
        replicas: usize,
    },
}

impl fmt::Display for GroupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoReplicas => f.write_str("a replica group needs at least one replica"),
            Self::RankOutOfRange { rank, replicas } => {
                write!(f, "rank {rank} is out of range for {replicas} replicas")
            }
            Self::ZeroGroupSize => f.write_str("a replica group size must be at least 1"),
            Self::Indivisible {
                group_size,
                replicas,
            } => write!(
                f,
                "group size {group_size} does not divide the replica count {replicas}"
            ),
        }
    }
}

impl core::error::Error for GroupError {}

impl ReplicaGroup {
    /// The number of replicas in each group when there are `replicas` in all.
    ///
    /// ```
    /// use tessera_collectives::{GroupError, ReplicaGroup};
    ///
    /// assert_eq!(ReplicaGroup::All.group_size(8), Ok(8));
    /// assert_eq!(ReplicaGroup::Orthogonal(2).group_size(8), Ok(2));
    /// assert!(ReplicaGroup::Consecutive(3).group_size(8).is_err());
    /// let _: GroupError = ReplicaGroup::All.group_size(0).unwrap_err();
    /// ```
    ///
    /// # Errors
    /// [`GroupError::NoReplicas`], [`GroupError::ZeroGroupSize`] or
    /// [`GroupError::Indivisible`].
    pub const fn group_size(self, replicas: usize) -> Result<usize, GroupError> {
        if replicas == 0 {
            return Err(GroupError::NoReplicas);
        }
        match self {
            Self::All => Ok(replicas),
            Self::Consecutive(k) | Self::Orthogonal(k) => {
                if k == 0 {
                    Err(GroupError::ZeroGroupSize)
                } else if !replicas.is_multiple_of(k) {
                    Err(GroupError::Indivisible {
                        group_size: k,
                        replicas,
                    })
                } else {
                    Ok(k)
                }
            }
        }
    }

    /// The number of groups when there are `replicas` in all.
    ///
    /// ```
    /// use tessera_collectives::ReplicaGroup;
    ///
    /// assert_eq!(ReplicaGroup::Consecutive(2).groups(8), Ok(4));
    /// assert_eq!(ReplicaGroup::All.groups(8), Ok(1));
    /// ```
    ///
    /// # Errors
    /// As [`ReplicaGroup::group_size`].
    pub const fn groups(self, replicas: usize) -> Result<usize, GroupError> {
        match self.group_size(replicas) {
            Ok(k) => Ok(replicas / k),
            Err(e) => Err(e),
        }
    }

    /// The members of the group that replica `rank` belongs to, when there
    /// are `replicas` in all, in increasing order (the order collectives
    /// inside the group use).
    ///
    /// ```
    /// use tessera_collectives::ReplicaGroup;
    /// let g = ReplicaGroup::Orthogonal(2).members(5, 8).unwrap();
    /// assert_eq!(g.collect::<Vec<_>>(), [1, 5]);
    /// let g = ReplicaGroup::Consecutive(4).members(5, 8).unwrap();
    /// assert_eq!(g.collect::<Vec<_>>(), [4, 5, 6, 7]);
    /// ```
    ///
    /// # Errors
    /// [`GroupError::RankOutOfRange`], or as [`ReplicaGroup::group_size`].
    pub const fn members(self, rank: usize, replicas: usize) -> Result<Members, GroupError> {
        let k = match self.group_size(replicas) {
            Ok(k) => k,
            Err(e) => return Err(e),
        };
        if rank >= replicas {
            return Err(GroupError::RankOutOfRange { rank, replicas });
        }
        let (first, stride) = match self {
            Self::All => (0, 1),
            Self::Consecutive(_) => (rank - rank % k, 1),
            Self::Orthogonal(_) => {
                let m = replicas / k;
                (rank % m, m)
            }
        };
        Ok(Members {
            next: first,
            stride,
            left: k,
        })
    }
}

/// The ranks of one replica group, in increasing order: an arithmetic
/// progression, so it needs no allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Members {
    next: usize,
    stride: usize,
    left: usize,
}

impl Members {
    /// Whether `rank` is among the members not yet iterated over (all of
    /// them, for a fresh [`ReplicaGroup::members`]).
    ///
    /// ```
    /// use tessera_collectives::ReplicaGroup;
    ///
    /// // Orthogonal(2) of 8 replicas: {0, 4}, {1, 5}, {2, 6}, {3, 7}.
    /// let m = ReplicaGroup::Orthogonal(2).members(5, 8).unwrap();
    /// assert!(m.contains(1) && m.contains(5) && !m.contains(2));
    /// ```
    #[must_use]
    pub const fn contains(&self, rank: usize) -> bool {
        self.position(rank).is_some()
    }

    /// The index of `rank` among the members still to come, if it is one.
    ///
    /// ```
    /// use tessera_collectives::ReplicaGroup;
    ///
    /// let m = ReplicaGroup::Consecutive(4).members(6, 8).unwrap(); // {4, 5, 6, 7}
    /// assert_eq!(m.position(6), Some(2));
    /// assert_eq!(m.position(3), None);
    /// ```
    #[must_use]
    pub const fn position(&self, rank: usize) -> Option<usize> {
        if rank < self.next || !(rank - self.next).is_multiple_of(self.stride) {
            return None;
        }
        let i = (rank - self.next) / self.stride;
        if i < self.left { Some(i) } else { None }
    }
}

impl Iterator for Members {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            return None;
        }
        let rank = self.next;
        self.left -= 1;
        // Cannot overflow: the last member is below the replica count.
        if self.left > 0 {
            self.next += self.stride;
        }
        Some(rank)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for Members {}
impl FusedIterator for Members {}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(g: ReplicaGroup, rank: usize, n: usize) -> Vec<usize> {
        g.members(rank, n).unwrap().collect()
    }

    #[test]
    fn popart_examples() {
        // N = 8, k = 2 (popart/commgroup.hpp).
        assert_eq!(members(ReplicaGroup::Consecutive(2), 0, 8), [0, 1]);
        assert_eq!(members(ReplicaGroup::Consecutive(2), 7, 8), [6, 7]);
        assert_eq!(members(ReplicaGroup::Orthogonal(2), 0, 8), [0, 4]);
        assert_eq!(members(ReplicaGroup::Orthogonal(2), 7, 8), [3, 7]);
        assert_eq!(members(ReplicaGroup::All, 3, 4), [0, 1, 2, 3]);
    }

    #[test]
    fn groups_partition_the_replicas_for_every_valid_size() {
        for n in 1..=16 {
            for k in 1..=n {
                for g in [
                    ReplicaGroup::All,
                    ReplicaGroup::Consecutive(k),
                    ReplicaGroup::Orthogonal(k),
                ] {
                    if !n.is_multiple_of(k) {
                        continue;
                    }
                    let size = g.group_size(n).unwrap();
                    assert_eq!(size * g.groups(n).unwrap(), n);
                    let mut count = vec![0usize; n];
                    for rank in 0..n {
                        let m = g.members(rank, n).unwrap();
                        assert_eq!(m.len(), size);
                        assert!(m.contains(rank), "{g:?} {rank} {n}");
                        let list: Vec<usize> = m.collect();
                        assert!(list.windows(2).all(|w| w[0] < w[1]));
                        assert!(list.iter().all(|&r| r < n));
                        // Every member sees the same group.
                        for &other in &list {
                            assert_eq!(members(g, other, n), list);
                        }
                        if list[0] == rank {
                            for &r in &list {
                                count[r] += 1;
                            }
                        }
                    }
                    // Counted once per group, from its first member.
                    assert!(count.iter().all(|&c| c == 1), "{g:?} {n}: {count:?}");
                }
            }
        }
    }

    #[test]
    fn consecutive_and_orthogonal_groups_meet_in_exactly_one_replica() {
        let (n, k) = (12, 3);
        for a in 0..n {
            for b in 0..n {
                let c: Vec<_> = members(ReplicaGroup::Consecutive(k), a, n);
                let o: Vec<_> = members(ReplicaGroup::Orthogonal(n / k), b, n);
                assert_eq!(c.iter().filter(|r| o.contains(r)).count(), 1);
            }
        }
    }

    #[test]
    fn invalid_inputs_are_typed_errors() {
        use GroupError::*;
        assert_eq!(ReplicaGroup::All.members(0, 0), Err(NoReplicas));
        assert_eq!(
            ReplicaGroup::All.members(4, 4),
            Err(RankOutOfRange {
                rank: 4,
                replicas: 4
            })
        );
        assert_eq!(
            ReplicaGroup::Consecutive(0).group_size(4),
            Err(ZeroGroupSize)
        );
        assert_eq!(
            ReplicaGroup::Orthogonal(3).members(0, 8),
            Err(Indivisible {
                group_size: 3,
                replicas: 8
            })
        );
        assert_eq!(
            Indivisible {
                group_size: 3,
                replicas: 8
            }
            .to_string(),
            "group size 3 does not divide the replica count 8"
        );
    }

    #[test]
    fn position_and_iteration_agree() {
        let m = ReplicaGroup::Orthogonal(4).members(6, 16).unwrap();
        for (i, r) in m.enumerate() {
            assert_eq!(m.position(r), Some(i));
        }
        assert_eq!(m.position(7), None);
        assert_eq!(m.position(1), None);
        assert_eq!(m.position(30), None);
    }
}
