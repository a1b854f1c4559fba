//! The two-rank ring's piece in one meeting: where the transport lends
//! bodies mutably ([`Communicator::exchange_mut`]), each rank reduces the
//! span it owns from both buffers and writes the finished values into
//! both, so the reduce-scatter step and the all-gather step of a piece
//! become one exchange. Each value is what the two steps give, operand for
//! operand (this rank's partial onto the peer's, finished once, then the
//! same bits copied), so results are bitwise the schedule's; the bytes
//! read and written are the floor of a two-rank all-reduce (both inputs
//! read once, both outputs written once), and the ranks meet once per
//! piece instead of twice.

use std::ops::Range;
use std::time::Instant;

use tessera_core::collective::{Kind, Op, Span};
use tessera_core::fp::{Element, Rounding};

use super::combine::{BlockExponents, grid_sum_chunk, pair_chunks, reduce_finish};
use super::fold::{EXPONENT_BYTES, folded_head, take_exponents};
use super::wire::{HEADER, Message, split_exponents};
use super::{Runner, State, same_positions};
use crate::comm::Communicator;
use crate::error::{CommError, Mismatch};

/// Whether steps `a` then `b` are one piece of the two-rank ring: `a`
/// sends span Y to the peer and receives span X to reduce and finalize,
/// `b` sends X back finished and receives Y finished, nothing else. Both
/// ranks see the mirror image, so they decide alike. Returns (X, Y).
fn piece_pair(a: &[Op], b: &[Op]) -> Option<(usize, Span, Kind, Span)> {
    let [
        Op::Send { to, span: y, .. },
        Op::Recv {
            from,
            span: x,
            kind: kind @ Kind::Reduce { covers, onto, .. },
        },
        Op::Finalize { span: done },
    ] = *a
    else {
        return None;
    };
    let [
        Op::Send {
            to: to_b,
            span: x_b,
            kind: Kind::Copy,
        },
        Op::Recv {
            from: from_b,
            span: y_b,
            kind: Kind::Copy,
        },
    ] = *b
    else {
        return None;
    };
    let own = covers.len == 1 && onto.len == 1;
    let same = same_positions(done, x) && same_positions(x_b, x) && same_positions(y_b, y);
    (own && to == from && to_b == to && from_b == to && same).then_some((to, x, kind, y))
}

impl<C: Communicator + ?Sized> Runner<'_, C> {
    /// Steps `a` (numbered `step`) and `b` of the two-rank ring in one
    /// [`Communicator::exchange_mut`], if they are one piece ([`piece_pair`])
    /// and the transport lends mutably: this rank's run `send` of the
    /// buffer (span Y) is lent to the peer, which finishes Y in both
    /// buffers, while this rank finishes `recv` (span X) in both. Returns
    /// whether it did (else nothing was sent).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn pair<T: Element>(
        &self,
        (step, a): (usize, &[Op]),
        b: &[Op],
        send: Range<usize>,
        recv: Range<usize>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<bool, CommError> {
        let Some((peer, x, kind, _)) = piece_pair(a, b) else {
            return Ok(false);
        };
        let head = if self.folding {
            folded_head(&st.headers[0], &st.folded, &send)
        } else {
            st.headers[0].to_vec()
        };
        let sent = head.len() + send.len() * size_of::<T>();
        let (lent, into): (&mut [T], &mut [T]) = if send.end <= recv.start {
            let (low, high) = buf.split_at_mut(recv.start);
            (&mut low[send.clone()], &mut high[..recv.len()])
        } else {
            let (low, high) = buf.split_at_mut(send.start);
            (&mut high[..send.len()], &mut low[recv.clone()])
        };
        let world_peer = self.comm.world_rank(peer);
        let bad = |what| self.mismatch(world_peer, what);
        let expect = Message::new(step, x, kind, 0);
        let expected = self.expected_bytes::<T>(kind, recv.len());
        let (folded, tmp_f32) = (&mut st.folded[..], &mut st.tmp_f32);
        let (op, p, n, start) = (self.op, self.s.size(), self.n, recv.start);
        let mut apply = |head: &[u8], tail: &mut [u8]| {
            let extra = if self.folding { EXPONENT_BYTES } else { 0 };
            let (header, exps, _) = split_exponents(head, &[], extra)
                .filter(|(_, _, rest)| rest.is_empty())
                .ok_or(bad(Mismatch::Format))?;
            let m = self.header(world_peer, header, tail.len())?;
            if !m.is(&expect) {
                return Err(bad(Mismatch::Sequence));
            }
            self.body_length(world_peer, expected, tail.len())?;
            let theirs: &mut [T] =
                bytemuck::try_cast_slice_mut(tail).map_err(|_| bad(Mismatch::Format))?;
            let mut exps = if self.folding {
                let held = take_exponents(folded, exps, &recv, n);
                BlockExponents::Folded(folded, held)
            } else {
                BlockExponents::Given(self.exponents)
            };
            for pass in pair_chunks(start, into.len()) {
                let at = start + pass.start;
                let (mine, theirs) = (&mut into[pass.clone()], &mut theirs[pass]);
                if self.on_grid {
                    let exps = (&mut exps, at, &mut *tmp_f32);
                    grid_sum_chunk(mine, &[&*theirs], exps, (op, p, rounding));
                } else {
                    reduce_finish(op, mine, &*theirs, at, Some((p, rounding)));
                }
                theirs.copy_from_slice(mine);
            }
            Ok(())
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        let body: &mut [u8] = bytemuck::cast_slice_mut(lent);
        let Some(done) = self
            .comm
            .exchange_mut(peer, self.tag, &head, body, left, &mut apply)
        else {
            return Ok(false);
        };
        done?;
        // Counted as the two messages the meeting replaces.
        st.traffic.messages += 2;
        st.traffic.bytes += sent + HEADER + recv.len() * size_of::<T>();
        Ok(true)
    }
}
