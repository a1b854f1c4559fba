//! Steps 2 to 4 of a step with one send from the buffer and one receive
//! into another run of it, through [`Communicator::exchange_apply`]: the
//! transport may let the peer read the body in place.

use std::ops::Range;
use std::time::Instant;

use tessera_core::collective::{Kind, Op, Span};
use tessera_core::fp::{Element, Rounding};

use super::combine::{BlockExponents, grid_sum_chunk, native_wire, pair_chunks, reduce_finish};
use super::fold::{EXPONENT_BYTES, folded_head, take_exponents};
use super::wire::{Message, split_exponents, values};
use super::{Runner, State, finalized};
use crate::comm::{Communicator, Outgoing};
use crate::error::{CommError, Mismatch};

impl<C: Communicator + ?Sized> Runner<'_, C> {
    /// Steps 2 to 4 for a step of one send from the buffer and one receive
    /// into another run of it ([`direct_runs`]): through
    /// [`Communicator::exchange_apply`], so that the transport may let the
    /// peer read the body in place while this rank applies its own
    /// receive, checked as at step 3. A reduction whose span the step
    /// finalizes stores the finished values itself: returns that span.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn direct<T: Element>(
        &self,
        step: usize,
        ops: &[Op],
        to: usize,
        send_run: Range<usize>,
        recv_run: Range<usize>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<Option<Span>, CommError> {
        self.expect_receives(ops, st.incoming);
        let Some(&Op::Recv { from, span, kind }) =
            ops.iter().find(|o| matches!(o, Op::Recv { .. }))
        else {
            unreachable!("direct_runs found one receive")
        };
        let done = finalized(ops, span).filter(|_| matches!(kind, Kind::Reduce { .. }));
        debug_assert!(
            done.is_some() || !self.on_grid || kind == Kind::Copy,
            "a grid reduction here is fused"
        );
        let fin = done.map(|_| (self.s.size(), rounding));
        let (body, into): (&[T], &mut [T]) = if send_run.end <= recv_run.start {
            let (low, high) = buf.split_at_mut(recv_run.start);
            (&low[send_run.clone()], &mut high[..recv_run.len()])
        } else {
            let (low, high) = buf.split_at_mut(send_run.start);
            (&high[..send_run.len()], &mut low[recv_run.clone()])
        };
        // Folded exponents ride on reductions only (both ends see the
        // message's kind).
        let reduces = |k: Kind| self.folding && matches!(k, Kind::Reduce { .. });
        let sent = ops.iter().find_map(|o| match *o {
            Op::Send { kind, .. } => Some(kind),
            _ => None,
        });
        let head = if sent.is_some_and(reduces) {
            folded_head(&st.headers[0], &st.folded, &send_run)
        } else {
            st.headers[0].to_vec()
        };
        let out = [Outgoing {
            to,
            tag: self.tag,
            header: &head,
            body: bytemuck::cast_slice(body),
        }];
        st.traffic.messages += 1;
        st.traffic.bytes += out[0].len();
        let peer = self.comm.world_rank(from);
        let expect = Message::new(step, span, kind, 0);
        let payload = recv_run.len();
        let expected = self.expected_bytes::<T>(kind, payload);
        let (op, tmp_t, tmp_f32) = (self.op, &mut st.tmp_t, &mut st.tmp_f32);
        let (folded, n) = (&mut st.folded[..], self.n);
        let finish = (op, self.s.size(), rounding);
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.comm
            .exchange_apply(&out, &mut st.incoming[..1], left, &mut |_, head, tail| {
                let extra = if reduces(kind) { EXPONENT_BYTES } else { 0 };
                let (header, exps, body) = split_exponents(head, tail, extra)
                    .ok_or(self.mismatch(peer, Mismatch::Format))?;
                let m = self.header(peer, header, body.len())?;
                if !m.is(&expect) {
                    return Err(self.mismatch(peer, Mismatch::Sequence));
                }
                self.body_length(peer, expected, body.len())?;
                let at = recv_run.start;
                match kind {
                    Kind::Copy => into.copy_from_slice(values::<T>(body, tmp_t)),
                    Kind::Reduce { .. } if self.on_grid => {
                        let vals = values::<T>(body, tmp_t);
                        let mut exps = if self.folding {
                            let held = take_exponents(folded, exps, &recv_run, n);
                            BlockExponents::Folded(folded, held)
                        } else {
                            BlockExponents::Given(self.exponents)
                        };
                        for pass in pair_chunks(at, into.len()) {
                            let sums = (&mut exps, at + pass.start, &mut *tmp_f32);
                            grid_sum_chunk(&mut into[pass.clone()], &[&vals[pass]], sums, finish);
                        }
                    }
                    Kind::Reduce { covers, .. } if native_wire(op, covers) => {
                        reduce_finish(op, into, values::<T>(body, tmp_t), at, fin);
                    }
                    Kind::Reduce { .. } => {
                        reduce_finish(op, into, values::<f32>(body, tmp_f32), at, fin);
                    }
                }
                Ok(())
            })?;
        Ok(done)
    }
}
