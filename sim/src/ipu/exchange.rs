//! Running an exchange on the host: the copies into different destination
//! pieces in parallel.
//!
//! An exchange's destinations overlap none of its sources or other
//! destinations (the graph checks it), so every element it writes has one
//! value, whatever order the copies run in. The pieces it writes are taken
//! out of their tiles for the phase, each filled on its own host thread
//! from the tiles left behind; the copies whose source piece is itself
//! written by the exchange (another range of the same piece) run after, in
//! order, and read the same values, since their ranges are not written.

use core::ops::Range;
use std::collections::HashSet;

use rayon::prelude::*;

use super::graph::Segment;
use super::target::Tile;
use super::tensor::Piece;

/// Exchanges moving fewer bytes than this run on the calling thread.
const PARALLEL_BYTES: u64 = 64 << 10;

/// An exchange's copies, grouped for running.
#[derive(Debug)]
pub(crate) struct ExchangeRun {
    /// Copies from pieces the exchange does not write, sorted by
    /// destination piece.
    parallel: Vec<Segment>,
    /// Each destination piece of `parallel` and its copies there.
    groups: Vec<(Tile, u32, Range<usize>)>,
    /// Copies from pieces the exchange also writes, in the graph's order.
    serial: Vec<Segment>,
    /// Bytes of all copies.
    bytes: u64,
}

impl ExchangeRun {
    /// Groups `segments` (an exchange's copies).
    pub(crate) fn new(segments: Vec<Segment>) -> Self {
        let written: HashSet<(Tile, u32)> =
            segments.iter().map(|s| (s.dst_tile, s.dst_piece)).collect();
        let bytes = segments.iter().map(|s| s.bytes).sum();
        let (mut parallel, serial): (Vec<Segment>, Vec<Segment>) = segments
            .into_iter()
            .partition(|s| !written.contains(&(s.src_tile, s.src_piece)));
        parallel.sort_by_key(|s| (s.dst_tile, s.dst_piece));
        let mut groups: Vec<(Tile, u32, Range<usize>)> = Vec::new();
        for (k, s) in parallel.iter().enumerate() {
            match groups.last_mut() {
                Some((t, p, r)) if (*t, *p) == (s.dst_tile, s.dst_piece) => r.end = k + 1,
                _ => groups.push((s.dst_tile, s.dst_piece, k..k + 1)),
            }
        }
        Self {
            parallel,
            groups,
            serial,
            bytes,
        }
    }

    /// Every copy, as one exchange phase over `tiles`.
    pub(crate) fn run(&self, tiles: &mut [Vec<Piece>]) {
        let mut taken: Vec<Piece> = self
            .groups
            .iter()
            .map(|&(t, p, _)| {
                core::mem::replace(&mut tiles[t as usize][p as usize], Piece::empty())
            })
            .collect();
        {
            let sources = &*tiles;
            let fill = |(piece, (_, _, range)): (&mut Piece, &(Tile, u32, Range<usize>))| {
                for s in &self.parallel[range.clone()] {
                    let src = &sources[s.src_tile as usize][s.src_piece as usize];
                    piece.copy_from(s.dst.clone(), src, s.src.clone());
                }
            };
            if self.bytes < PARALLEL_BYTES || self.groups.len() < 2 {
                taken.iter_mut().zip(&self.groups).for_each(fill);
            } else {
                taken
                    .par_iter_mut()
                    .zip(self.groups.par_iter())
                    .for_each(fill);
            }
        }
        for (piece, &(t, p, _)) in taken.into_iter().zip(&self.groups) {
            tiles[t as usize][p as usize] = piece;
        }
        for s in &self.serial {
            copy(tiles, s);
        }
    }
}

/// One copy, within a piece, between pieces of a tile, or between tiles.
fn copy(tiles: &mut [Vec<Piece>], s: &Segment) {
    let (st, dt) = (s.src_tile as usize, s.dst_tile as usize);
    let (sp, dp) = (s.src_piece as usize, s.dst_piece as usize);
    if st == dt {
        let pieces = &mut tiles[st];
        if sp == dp {
            pieces[sp].copy_within(s.src.clone(), s.dst.start);
        } else {
            let [d, src] = pieces.get_disjoint_mut([dp, sp]).expect("distinct pieces");
            d.copy_from(s.dst.clone(), src, s.src.clone());
        }
    } else {
        let [d, src] = tiles.get_disjoint_mut([dt, st]).expect("distinct tiles");
        d[dp].copy_from(s.dst.clone(), &src[sp], s.src.clone());
    }
}
