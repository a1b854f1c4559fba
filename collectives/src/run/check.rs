//! What a rank checks of its peers: the zero-length call's handshake, and
//! every received header and body length against this call.

use std::time::Instant;

use tessera_core::collective::{CollectiveSchedule, Frontier, Kind, Op, Span};
use tessera_core::fp::Element;

use super::combine::native_wire;
use super::wire::{HANDSHAKE_STEP, HEADER, Message, decode, encode, split_header};
use super::{Runner, State, Traffic};
use crate::comm::{Communicator, Incoming, Outgoing};
use crate::error::{CommError, Mismatch};

impl<C: Communicator + ?Sized> Runner<'_, C> {
    /// The run of a zero-length call of several ranks, whose schedule has
    /// no messages: this call's header to every other rank, and theirs
    /// checked, each as it is taken ([`handshake_order`](Self::handshake_order)),
    /// so that a rank called with another length finds the mismatch at
    /// its first message as with any other length, and none returns `Ok`
    /// while its peers wait for it.
    pub(super) fn handshake<T: Element>(
        &self,
        st: &mut State<'_, T>,
    ) -> Result<Traffic, CommError> {
        let p = self.s.size();
        let header = encode(
            &self.call,
            &Message::new(HANDSHAKE_STEP, Span::new(0, 0), Kind::Copy, 0),
        );
        let peers = self.handshake_order();
        let out: Vec<Outgoing<'_>> = peers
            .iter()
            .map(|&to| Outgoing {
                to,
                tag: self.tag,
                header: &header,
                body: &[],
            })
            .collect();
        st.incoming
            .resize_with(st.incoming.len().max(p - 1), Incoming::default);
        for (i, &from) in peers.iter().enumerate() {
            st.incoming[i].from = from;
            st.incoming[i].tag = self.tag;
        }
        let left = self.deadline.saturating_duration_since(Instant::now());
        let mut check = |i: usize, head: &[u8], tail: &[u8]| {
            let peer = self.comm.world_rank(peers[i]);
            let (header, body) =
                split_header(head, tail).ok_or(self.mismatch(peer, Mismatch::Format))?;
            let m = self.header(peer, header, body.len())?;
            if m.step as usize != HANDSHAKE_STEP {
                return Err(self.mismatch(peer, Mismatch::Sequence));
            }
            Ok(())
        };
        self.comm
            .exchange_apply(&out, &mut st.incoming[..p - 1], left, &mut check)?;
        Ok(Traffic {
            messages: p - 1,
            bytes: (p - 1) * HEADER,
        })
    }

    /// The peers whose headers a zero-length call takes, in order: first
    /// those this rank hears from in the same schedule on a buffer long
    /// enough to leave no message out, in the order it would (so that
    /// among ranks called with a non-zero length, the first peer it waits
    /// for is one that sends to it), then the others.
    pub(super) fn handshake_order(&self) -> Vec<usize> {
        let p = self.s.size();
        let mut seen = vec![false; p];
        seen[self.r] = true;
        let mut order = Vec::with_capacity(p - 1);
        let mut hear = |q: usize| {
            if !std::mem::replace(&mut seen[q], true) {
                order.push(q);
            }
        };
        if let Ok(full) = CollectiveSchedule::new(self.s.algorithm(), self.s.collective(), p, 2 * p)
        {
            for step in 0..full.steps() {
                for o in full.ops(self.r, step).iter() {
                    if let Op::Recv { from, .. } = *o {
                        hear(from);
                    }
                }
            }
        }
        for k in 1..p {
            hear((self.r + p - k) % p);
        }
        order
    }

    /// The fields of a message from `peer` whose header is `header` and
    /// whose body has `body` bytes, checked against this call: a header of
    /// this call, stating the body's length.
    pub(super) fn header(
        &self,
        peer: usize,
        header: &[u8],
        body: usize,
    ) -> Result<Message, CommError> {
        let Some((theirs, m)) = decode(header) else {
            return Err(self.mismatch(peer, Mismatch::Format));
        };
        if let Some(what) = self.call.mismatch(&theirs) {
            return Err(self.mismatch(peer, what));
        }
        if m.body != body as u64 {
            return Err(self.mismatch(peer, Mismatch::Format));
        }
        Ok(m)
    }

    /// Bytes of the body of a received message of `payload` elements:
    /// values in the buffer's format, partial sums in f32, or a frontier's
    /// vectors (leaves in the buffer's format, inner nodes in f32).
    pub(super) fn expected_bytes<T: Element>(&self, kind: Kind, payload: usize) -> usize {
        let per_element = match kind {
            Kind::Copy => size_of::<T>(),
            Kind::Reduce { covers, .. } if self.frontiers => {
                return Frontier::packed_len::<T>(&self.tree, covers, payload);
            }
            Kind::Reduce { covers, .. } if self.on_grid && covers.len > 1 => size_of::<f64>(),
            Kind::Reduce { covers, .. } if native_wire(self.op, covers) => size_of::<T>(),
            Kind::Reduce { .. } => 4,
        };
        payload * per_element
    }

    pub(super) fn body_length(
        &self,
        peer: usize,
        expected: usize,
        found: usize,
    ) -> Result<(), CommError> {
        if found == expected {
            Ok(())
        } else {
            Err(CommError::LengthMismatch {
                rank: self.me,
                peer,
                expected,
                found,
            })
        }
    }

    pub(super) const fn mismatch(&self, peer: usize, what: Mismatch) -> CommError {
        CommError::CallMismatch {
            rank: self.me,
            peer,
            what,
        }
    }
}
