//! The order-free ring's piece in one meeting over more than two ranks:
//! where the transport lends bodies mutably to several peers at once
//! ([`Communicator::exchange_mut_many`]), each rank lends every peer that
//! peer's fragment of its buffer (this piece of it) and reduces its own
//! fragment from all `p` buffers together: each block's exponent taken
//! from every contribution, the exact grid sum rounded once, and the
//! finished values written into every buffer. The direct reduce-scatter
//! step (`scatter.rs`) and the `p - 1` all-gather steps of a piece become
//! one meeting: no contribution is held aside or copied to be summed
//! later, each fragment is read once from every buffer and written once
//! into each, and the ranks meet once per piece instead of `p` times.
//! Each value is the one the steps give (the same exact grid sum rounded
//! once, then the same bits copied), so results are bitwise the
//! schedule's.

use std::ops::Range;
use std::time::Instant;

use tessera_core::collective::{Collective, Op};
use tessera_core::fp::{Element, Rounding};

use super::combine::{BlockExponents, grid_sum_chunk, pair_chunks, reuse};
use super::fold::{EXPONENT_BYTES, folded_head, take_exponents};
use super::scatter::receives;
use super::wire::{HEADER, Message, split_exponents};
use super::{Body, Runner, State};
use crate::comm::{Communicator, OutgoingMut};
use crate::error::{CommError, Mismatch};

/// `buf`'s parts at the disjoint `ranges`, in their order.
///
/// # Panics
/// If two ranges overlap or one ends past `buf`.
fn disjoint_mut<'a, T>(buf: &'a mut [T], ranges: &[Range<usize>]) -> Vec<&'a mut [T]> {
    let mut order: Vec<usize> = (0..ranges.len()).collect();
    order.sort_by_key(|&k| ranges[k].start);
    let mut parts: Vec<Option<&'a mut [T]>> = ranges.iter().map(|_| None).collect();
    let (mut rest, mut at) = (buf, 0);
    for k in order {
        let r = &ranges[k];
        let (_, tail) = rest.split_at_mut(r.start - at);
        let (part, tail) = tail.split_at_mut(r.len());
        (parts[k], rest, at) = (Some(part), tail, r.end);
    }
    parts.into_iter().flatten().collect()
}

impl<C: Communicator + ?Sized> Runner<'_, C> {
    /// A step of the folded direct reduce-scatter of an all-reduce
    /// ([`gather_run`](super::scatter::gather_run): `run` is this rank's
    /// part, `bodies` the parts it sends to `sends`) and the all-gather of
    /// the same positions in one [`Communicator::exchange_mut_many`], if
    /// the transport lends mutably to many. Returns whether it did (else
    /// nothing was sent); the caller then skips the all-gather steps.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn meet<T: Element>(
        &self,
        (step, ops): (usize, &[Op]),
        bodies: &[Body],
        sends: &[usize],
        run: Range<usize>,
        buf: &mut [T],
        st: &mut State<'_, T>,
        rounding: Rounding,
    ) -> Result<bool, CommError> {
        let p = self.s.size();
        if !self.folding || p <= 2 || self.s.collective() != Collective::AllReduce {
            return Ok(false);
        }
        let recvs = receives(ops);
        let from: Vec<usize> = recvs.iter().map(|&(from, _, _)| from).collect();
        let mut ranges: Vec<Range<usize>> = bodies
            .iter()
            .map(|body| match body {
                Body::Buf(b) => b.clone(),
                _ => unreachable!("gather_run checked every body"),
            })
            .collect();
        let heads: Vec<Vec<u8>> = ranges
            .iter()
            .zip(st.headers.iter())
            .map(|(b, header)| folded_head(header, &st.folded, b))
            .collect();
        let sent: usize = ranges
            .iter()
            .map(|b| b.len() * size_of::<T>())
            .sum::<usize>()
            + heads.iter().map(Vec::len).sum::<usize>();
        ranges.push(run.clone());
        let mut parts = disjoint_mut(buf, &ranges);
        let into = parts.pop().expect("this rank's run");
        let lent: Vec<OutgoingMut<'_>> = parts
            .into_iter()
            .zip(sends)
            .zip(&heads)
            .map(|((body, &to), header)| OutgoingMut {
                to,
                header,
                body: bytemuck::cast_slice_mut(body),
            })
            .collect();
        let (len, n, start) = (run.len(), self.n, run.start);
        let (folded, tmp_f32) = (&mut st.folded[..], &mut st.tmp_f32);
        let finish = (self.op, p, rounding);
        let mut apply = |got: &mut [(&[u8], &mut [u8])]| {
            let mut theirs: Vec<&mut [T]> = Vec::with_capacity(got.len());
            let mut edges = [None; 2];
            for (&(from, span, kind), (head, body)) in recvs.iter().zip(got.iter_mut()) {
                let peer = self.comm.world_rank(from);
                let bad = |what| self.mismatch(peer, what);
                let (header, exps, _) = split_exponents(head, &[], EXPONENT_BYTES)
                    .filter(|(_, _, rest)| rest.is_empty())
                    .ok_or(bad(Mismatch::Format))?;
                let m = self.header(peer, header, body.len())?;
                if !m.is(&Message::new(step, span, kind, 0)) {
                    return Err(bad(Mismatch::Sequence));
                }
                self.body_length(peer, self.expected_bytes::<T>(kind, len), body.len())?;
                let body: &mut [T] =
                    bytemuck::try_cast_slice_mut(body).map_err(|_| bad(Mismatch::Format))?;
                theirs.push(body);
                edges = take_exponents(folded, exps, &run, n);
            }
            let mut exps = BlockExponents::Folded(&mut *folded, edges);
            let mut spare: Vec<&[T]> = Vec::with_capacity(theirs.len());
            for pass in pair_chunks(start, len) {
                let mut others = reuse(spare);
                others.extend(theirs.iter().map(|t| &t[pass.clone()]));
                let mine = &mut into[pass.clone()];
                let sums = (&mut exps, start + pass.start, &mut *tmp_f32);
                grid_sum_chunk(mine, &others, sums, finish);
                spare = reuse(others);
                for t in &mut theirs {
                    t[pass.clone()].copy_from_slice(mine);
                }
            }
            Ok(())
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        let Some(done) = self
            .comm
            .exchange_mut_many(self.tag, lent, &from, left, &mut apply)
        else {
            return Ok(false);
        };
        done?;
        // Counted as the messages the meeting replaces: the reduce-scatter's
        // and the all-gather's (each one piece of a fragment).
        st.traffic.messages += 2 * (p - 1);
        st.traffic.bytes += sent + (p - 1) * (HEADER + len * size_of::<T>());
        Ok(true)
    }
}
