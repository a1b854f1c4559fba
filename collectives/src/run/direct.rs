//! Steps 2 to 4 of a step with one send from the buffer and one receive
//! into another run of it, through [`Communicator::exchange_apply`]: the
//! transport may let the peer read the body in place.

use std::ops::Range;
use std::time::Instant;

use tessera_core::collective::{Kind, Op, Span};
use tessera_core::fp::{Element, Rounding};

use super::combine::{grid_pair_finish, native_wire, reduce_finish};
use super::fold::{blocks_of, byte_exponent, exponent_byte, exponent_bytes};
use super::wire::{HEADER, Message, split_exponents, split_header, values};
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
        // Folding: the header, then this rank's exponents of the blocks sent.
        let mut head = st.headers[0].to_vec();
        if self.folding {
            let exps = &self.exponents[blocks_of(&send_run)];
            head.extend(exps.iter().map(|&g| exponent_byte(g)));
            head.resize(HEADER + exponent_bytes(exps.len()), 0);
        }
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
        let folded = &mut st.folded;
        let finish = (op, self.s.size(), rounding);
        let left = self.deadline.saturating_duration_since(Instant::now());
        self.comm
            .exchange_apply(&out, &mut st.incoming[..1], left, &mut |_, head, tail| {
                let (header, body) = if self.folding {
                    let blocks = blocks_of(&recv_run);
                    let extra = exponent_bytes(blocks.len());
                    let (header, exps, body) = split_exponents(head, tail, extra)
                        .ok_or(self.mismatch(peer, Mismatch::Format))?;
                    for (e, &b) in folded[blocks].iter_mut().zip(exps) {
                        *e = e.max(byte_exponent(b));
                    }
                    (header, body)
                } else {
                    split_header(head, tail).ok_or(self.mismatch(peer, Mismatch::Format))?
                };
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
                        let exps = if self.folding {
                            &folded[..]
                        } else {
                            self.exponents
                        };
                        let at = (exps, recv_run.start, &mut *tmp_f32);
                        grid_pair_finish(into, vals, at, finish);
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
