//! Step 1 of an exchange: the bodies of a step's sends, in place where a
//! body is one run of the buffer (or of the f32 accumulator or the grid
//! sums), else staged in its wire format, and their headers.

use std::ops::Range;

use tessera_core::collective::{Frontier, Kind, Op, Span};
use tessera_core::fp::{Element, Rounding};

use super::combine::native_wire;
use super::wire::{Message, encode};
use super::{Body, Runner, State};
use crate::comm::Communicator;

impl<C: Communicator + ?Sized> Runner<'_, C> {
    /// Step 1: the bodies of this step's sends (runs of the buffer or the
    /// accumulator, or copies staged in `st.staged`), their headers in
    /// `st.headers`, and their receivers.
    pub(super) fn stage<T: Element>(
        &self,
        step: usize,
        ops: &[Op],
        buf: &[T],
        st: &mut State<'_, T>,
    ) -> (Vec<Body>, Vec<usize>) {
        st.headers.clear();
        let mut bodies = Vec::new();
        let mut sends = Vec::new();
        let mut used = 0;
        for o in ops {
            let Op::Send { to, span, kind } = *o else {
                continue;
            };
            let body = self.body(span, kind, buf, st, &mut used);
            let len = match &body {
                Body::Buf(run) => run.len() * size_of::<T>(),
                Body::Acc(run) => run.len() * size_of::<f32>(),
                Body::Grid(run) => run.len() * size_of::<f64>(),
                Body::Staged(i) => st.staged[*i].len(),
            };
            st.headers
                .push(encode(&self.call, &Message::new(step, span, kind, len)));
            bodies.push(body);
            sends.push(to);
        }
        (bodies, sends)
    }

    /// Where the body of a send of `span` comes from: in place when it is
    /// one run of the buffer (or of the f32 accumulator), else copied into
    /// `st.staged[*used]` in its wire format ([`Transfer::bytes`]).
    ///
    /// [`Transfer::bytes`]: tessera_core::collective::Transfer::bytes
    fn body<T: Element>(
        &self,
        span: Span,
        kind: Kind,
        buf: &[T],
        st: &mut State<'_, T>,
        used: &mut usize,
    ) -> Body {
        let State {
            acc,
            grid,
            staged,
            held,
            ..
        } = st;
        let runs: Vec<Range<usize>> = span.runs_below(self.n).collect();
        let single = (runs.len() == 1).then(|| runs[0].clone());
        let mut stage = |fill: &mut dyn FnMut(&mut Vec<u8>)| {
            if staged.len() == *used {
                staged.push(Vec::new());
            }
            let v = &mut staged[*used];
            v.clear();
            fill(v);
            *used += 1;
            Body::Staged(*used - 1)
        };
        let mut copy = |v: &mut Vec<u8>| {
            for run in &runs {
                v.extend_from_slice(bytemuck::cast_slice(&buf[run.clone()]));
            }
        };
        let Kind::Reduce { covers, .. } = kind else {
            return match single {
                Some(run) => Body::Buf(run),
                None => stage(&mut copy),
            };
        };
        if self.frontiers {
            // What it holds: its own contribution until it has received.
            let own = || {
                let own: Vec<T> = runs.iter().flat_map(|r| buf[r.clone()].to_vec()).collect();
                Frontier::own(&self.tree, self.r, &own)
            };
            let state = held.remove(&span).unwrap_or_else(own);
            debug_assert_eq!(state.covers(), covers, "a rank sends what it holds");
            return stage(&mut |v| state.pack::<T>(&self.tree, v));
        }
        if self.on_grid && covers.len > 1 {
            // A grid sum of several contributions.
            return match single {
                Some(run) => Body::Grid(run),
                None => stage(&mut |v| {
                    for run in &runs {
                        v.extend_from_slice(bytemuck::cast_slice(&grid[run.clone()]));
                    }
                }),
            };
        }
        if covers.len == 1 || !self.wide {
            // Its own contribution, or an f32 partial in place.
            match single {
                Some(run) => Body::Buf(run),
                None => stage(&mut copy),
            }
        } else if native_wire(self.op, covers) {
            // A 16-bit Max/Min partial: exact in the format.
            stage(&mut |v| {
                for run in &runs {
                    for &x in &acc[run.clone()] {
                        let t = T::store(x, Rounding::Nearest, 0);
                        v.extend_from_slice(bytemuck::bytes_of(&t));
                    }
                }
            })
        } else {
            match single {
                Some(run) => Body::Acc(run),
                None => stage(&mut |v| {
                    for run in &runs {
                        v.extend_from_slice(bytemuck::cast_slice(&acc[run.clone()]));
                    }
                }),
            }
        }
    }
}
