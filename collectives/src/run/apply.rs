//! Steps 2 to 5 of any other step: its messages sent and received whole,
//! checked, applied in the order its receives list them, and the spans it
//! names finalized.

use std::time::Instant;

use tessera_core::collective::{Frontier, Kind, Op, grid};
use tessera_core::fp::{Element, Rounding};

use super::combine::{GridValues, grid_into, native_wire, reduce_into};
use super::wire::{HEADER, Message, values};
use super::{Body, Got, Runner, State};
use crate::comm::{Communicator, Outgoing};
use crate::error::{CommError, Mismatch};

impl<C: Communicator + ?Sized> Runner<'_, C> {
    /// Steps 2 and 3 otherwise: sends the step's bodies and receives its
    /// messages whole, then checks every header against this call. Returns
    /// the messages' fields, in the order of `st.incoming`.
    pub(super) fn exchange<T: Element>(
        &self,
        ops: &[Op],
        bodies: &[Body],
        sends: &[usize],
        buf: &[T],
        st: &mut State<'_, T>,
    ) -> Result<Vec<Got>, CommError> {
        let recvs = self.expect_receives(ops, st.incoming);
        if !sends.is_empty() || recvs > 0 {
            let out: Vec<Outgoing<'_>> = sends
                .iter()
                .zip(bodies)
                .zip(st.headers.iter())
                .map(|((&to, body), header)| Outgoing {
                    to,
                    tag: self.tag,
                    header,
                    body: match body {
                        Body::Buf(run) => bytemuck::cast_slice(&buf[run.clone()]),
                        Body::Acc(run) => bytemuck::cast_slice(&st.acc[run.clone()]),
                        Body::Grid(run) => bytemuck::cast_slice(&st.grid[run.clone()]),
                        Body::Staged(i) => &st.staged[*i],
                    },
                })
                .collect();
            st.traffic.messages += out.len();
            st.traffic.bytes += out.iter().map(Outgoing::len).sum::<usize>();
            let left = self.deadline.saturating_duration_since(Instant::now());
            self.comm.exchange(&out, &mut st.incoming[..recvs], left)?;
        }
        st.incoming[..recvs]
            .iter()
            .map(|inc| {
                let peer = self.comm.world_rank(inc.from);
                let body = inc.message.len().saturating_sub(HEADER);
                Ok((inc.from, self.header(peer, &inc.message, body)?, false))
            })
            .collect()
    }

    /// Step 4: applies the received messages `got` (from [`exchange`]) in
    /// the order the step's receives list them, each checked to be the
    /// message the receive expects, of the length it expects.
    ///
    /// [`exchange`]: Self::exchange
    pub(super) fn apply<T: Element>(
        &self,
        step: usize,
        ops: &[Op],
        mut got: Vec<Got>,
        buf: &mut [T],
        st: &mut State<'_, T>,
    ) -> Result<(), CommError> {
        let n = self.n;
        for o in ops {
            let Op::Recv { from, span, kind } = *o else {
                continue;
            };
            let peer = self.comm.world_rank(from);
            let expect = Message::new(step, span, kind, 0);
            let j = got
                .iter()
                .position(|(f, m, used)| !used && *f == from && m.is(&expect))
                .ok_or(self.mismatch(peer, Mismatch::Sequence))?;
            got[j].2 = true;
            let body = &st.incoming[j].message[HEADER..];
            let payload = span.elements_below(n);
            self.body_length(peer, self.expected_bytes::<T>(kind, payload), body.len())?;
            let (op, use_acc) = (self.op, self.use_acc);
            match kind {
                Kind::Copy => {
                    let vals = values::<T>(body, &mut st.tmp_t);
                    let mut k = 0;
                    for run in span.runs_below(n) {
                        let len = run.len();
                        buf[run].copy_from_slice(&vals[k..k + len]);
                        k += len;
                    }
                }
                Kind::Reduce { covers, onto, .. } if self.on_grid => {
                    assert!(!self.folding, "folded exponents reduce in place only");
                    let vals = if covers.len == 1 {
                        GridValues::Own(values::<T>(body, &mut st.tmp_t))
                    } else {
                        GridValues::Sum(values::<f64>(body, &mut st.tmp_f64))
                    };
                    let own = (&*buf, self.exponents);
                    grid_into(st.grid, own, onto.len == 1, span, n, vals);
                }
                Kind::Reduce { covers, onto, .. } if self.frontiers => {
                    let incoming = Frontier::unpack::<T>(&self.tree, covers, payload, body)
                        .map_err(|_| self.mismatch(peer, Mismatch::Format))?;
                    let mut held = st.held.remove(&span).unwrap_or_else(|| {
                        let own: Vec<T> =
                            span.runs_below(n).flat_map(|r| buf[r].to_vec()).collect();
                        Frontier::own(&self.tree, self.r, &own)
                    });
                    debug_assert_eq!(held.covers(), onto, "the schedule's onto is what it holds");
                    held.merge(&self.tree, op, incoming);
                    st.held.insert(span, held);
                }
                Kind::Reduce { covers, onto, .. } => {
                    let single = onto.len == 1;
                    if native_wire(op, covers) {
                        let vals = values::<T>(body, &mut st.tmp_t);
                        reduce_into(op, buf, st.acc, use_acc, single, span, n, vals);
                    } else {
                        let vals = values::<f32>(body, &mut st.tmp_f32);
                        reduce_into(op, buf, st.acc, use_acc, single, span, n, vals);
                    }
                }
            }
        }
        Ok(())
    }

    /// Step 5: finalizes the spans the step's ops name (rounded once, with
    /// `rounding` at the element's position).
    pub(super) fn finalize<T: Element>(
        &self,
        ops: &[Op],
        rounding: Rounding,
        buf: &mut [T],
        st: &mut State<'_, T>,
    ) {
        let (p, op) = (self.s.size(), self.op);
        for o in ops {
            let Op::Finalize { span } = *o else {
                continue;
            };
            if self.on_grid {
                for run in span.runs_below(self.n) {
                    for i in run {
                        let g = grid::exponent_at(self.exponents, i);
                        let q = if p == 1 {
                            grid::round_to_grid(buf[i].load(), g)
                        } else {
                            st.grid[i]
                        };
                        buf[i] = T::store(op.finish(grid::from_grid(q, g), p), rounding, i);
                    }
                }
            } else if self.frontiers {
                let h = st.held.remove(&span);
                let root = h
                    .as_ref()
                    .and_then(|h| h.total(&self.tree))
                    .expect("a finalized span holds the whole tree");
                let mut k = 0;
                for run in span.runs_below(self.n) {
                    for i in run {
                        buf[i] = T::store(op.finish(root[k], p), rounding, i);
                        k += 1;
                    }
                }
            } else {
                for i in span.runs_below(self.n).flatten() {
                    let x = if self.use_acc {
                        st.acc[i]
                    } else {
                        buf[i].load()
                    };
                    buf[i] = T::store(op.finish(x, p), rounding, i);
                }
            }
        }
    }
}
