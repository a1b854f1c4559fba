//! [`GroupComm`]: a communicator for the members of one replica group.

use std::time::Duration;

use crate::comm::{ApplyMany, Communicator, Incoming, Outgoing, OutgoingMut, Tag};
use crate::error::{CommError, Failure};
use crate::group::ReplicaGroup;
use crate::topology::Topology;

/// The members of this rank's [`ReplicaGroup`] as a communicator of their
/// own: rank `i` of the view is the group's `i`-th member (in increasing
/// order), and messages go through the parent communicator.
///
/// Collectives on a view are told apart from the parent's and from other
/// views' on the wire by a context number derived from the group; ranks
/// that share two groups must call their collectives in the same order.
/// Failures are the parent's: aborting a view aborts the whole world, and
/// errors name ranks of the world.
#[derive(Debug)]
pub struct GroupComm<C> {
    inner: C,
    members: Vec<usize>,
    rank: usize,
    context: u16,
}

impl<C: Communicator> GroupComm<C> {
    /// The view of `group` for `inner`'s rank.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, GroupComm, ReplicaGroup, ThreadWorld};
    ///
    /// ThreadWorld::run(4, |comm| {
    ///     let g = GroupComm::new(&comm, ReplicaGroup::Consecutive(2)).unwrap();
    ///     assert_eq!((g.rank(), g.size()), (comm.rank() % 2, 2));
    /// })
    /// .unwrap();
    /// ```
    ///
    /// # Errors
    /// [`CommError::Group`] if `group` does not fit `inner.size()` ranks.
    pub fn new(inner: C, group: ReplicaGroup) -> Result<Self, CommError> {
        let members: Vec<usize> = group.members(inner.rank(), inner.size())?.collect();
        let rank = members
            .iter()
            .position(|&m| m == inner.rank())
            .expect("a rank is a member of its own group");
        let (kind, k) = match group {
            ReplicaGroup::All => (0u64, 0u64),
            ReplicaGroup::Consecutive(k) => (1, k as u64),
            ReplicaGroup::Orthogonal(k) => (2, k as u64),
        };
        let parent = u64::from(inner.context());
        let context = if kind == 0 {
            inner.context()
        } else {
            // 1..=4095: never the whole communicator's 0.
            u16::try_from((parent * 8191 + kind * 4099 + k) % 4095 + 1).expect("below 4096")
        };
        Ok(Self {
            inner,
            members,
            rank,
            context,
        })
    }

    /// The members, as ranks of the parent communicator.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, GroupComm, ReplicaGroup, ThreadWorld};
    ///
    /// ThreadWorld::run(4, |comm| {
    ///     let g = GroupComm::new(&comm, ReplicaGroup::Orthogonal(2)).unwrap();
    ///     let first = comm.rank() % 2;
    ///     assert_eq!(g.members(), [first, first + 2]);
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub fn members(&self) -> &[usize] {
        &self.members
    }

    /// The parent communicator.
    ///
    /// ```
    /// use tessera_collectives::{Communicator, GroupComm, ReplicaGroup, ThreadWorld};
    ///
    /// ThreadWorld::run(2, |comm| {
    ///     let g = GroupComm::new(&comm, ReplicaGroup::All).unwrap();
    ///     assert_eq!(g.parent().rank(), comm.rank());
    /// })
    /// .unwrap();
    /// ```
    #[must_use]
    pub const fn parent(&self) -> &C {
        &self.inner
    }

    fn member(&self, rank: usize) -> Result<usize, CommError> {
        self.members
            .get(rank)
            .copied()
            .ok_or(CommError::RankOutOfRange {
                rank,
                size: self.members.len(),
            })
    }
}

impl<C: Communicator> Communicator for GroupComm<C> {
    fn rank(&self) -> usize {
        self.rank
    }

    fn size(&self) -> usize {
        self.members.len()
    }

    fn exchange(
        &self,
        sends: &[Outgoing<'_>],
        recvs: &mut [Incoming],
        timeout: Duration,
    ) -> Result<(), CommError> {
        let out = sends
            .iter()
            .map(|o| {
                Ok(Outgoing {
                    to: self.member(o.to)?,
                    ..*o
                })
            })
            .collect::<Result<Vec<_>, CommError>>()?;
        for i in recvs.iter() {
            self.member(i.from)?;
        }
        for i in recvs.iter_mut() {
            i.from = self.members[i.from];
        }
        let result = self.inner.exchange(&out, recvs, timeout);
        for i in recvs.iter_mut() {
            i.from = self
                .members
                .iter()
                .position(|&m| m == i.from)
                .expect("translated above");
        }
        result
    }

    /// The parent's loans, the peers named as the parent's ranks: the same
    /// members meet with the same bodies, in the order of `from`, so the
    /// bits and the traffic are the parent's (the order-free ring's pieces
    /// over more than two members stay one meeting each).
    fn exchange_mut_many(
        &self,
        tag: Tag,
        sends: Vec<OutgoingMut<'_>>,
        from: &[usize],
        timeout: Duration,
        apply: &mut ApplyMany<'_>,
    ) -> Option<Result<(), CommError>> {
        let from: Result<Vec<usize>, CommError> = from.iter().map(|&q| self.member(q)).collect();
        let sends: Result<Vec<OutgoingMut<'_>>, CommError> = sends
            .into_iter()
            .map(|o| {
                Ok(OutgoingMut {
                    to: self.member(o.to)?,
                    ..o
                })
            })
            .collect();
        match (sends, from) {
            (Ok(sends), Ok(from)) => self
                .inner
                .exchange_mut_many(tag, sends, &from, timeout, apply),
            // Nothing lent.
            (Err(e), _) | (_, Err(e)) => Some(Err(e)),
        }
    }

    fn fail(&self, failure: Failure) {
        self.inner.fail(failure);
    }

    fn failure(&self) -> Option<Failure> {
        self.inner.failure()
    }

    fn world_rank(&self, rank: usize) -> usize {
        self.inner.world_rank(self.members[rank])
    }

    fn context(&self) -> u16 {
        self.context
    }

    fn piece_elements(&self) -> Option<usize> {
        self.inner.piece_elements()
    }

    fn topology(&self) -> Topology {
        self.inner.topology()
    }
}
