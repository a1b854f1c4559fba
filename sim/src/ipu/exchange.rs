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

    /// Host bytes of the plan.
    pub(crate) fn host_bytes(&self) -> u64 {
        let segments = self.parallel.len() + self.serial.len();
        (segments * size_of::<Segment>()
            + self.groups.len() * size_of::<(Tile, u32, Range<usize>)>()) as u64
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

#[cfg(test)]
mod tests {
    use core::num::NonZeroU64;

    use crate::ipu::{
        DType, Engine, EngineOptions, Graph, IpuParams, IpuSpec, Mapping, Program, Target,
        TensorSlice,
    };

    /// A gather and a broadcast large enough to run in parallel, and copies
    /// within one piece, whose source piece the exchange also writes.
    #[test]
    fn parallel_and_serial_copies_give_every_destination_its_source() {
        let spec = IpuSpec::new(IpuParams {
            tiles: 8,
            ..IpuParams::default()
        })
        .unwrap();
        let mut g = Graph::new(Target::single(spec));
        let n = 64 << 10;
        let grain = NonZeroU64::new(1024).unwrap();
        let x = g
            .add_tensor("x", DType::F32, &[n], Mapping::linear(grain))
            .unwrap();
        let y = g
            .add_tensor("y", DType::F32, &[n], Mapping::one_tile(3, n))
            .unwrap();
        let z = g
            .add_tensor("z", DType::F32, &[2 * n], Mapping::one_tile(5, 2 * n))
            .unwrap();
        let s = |t, r: core::ops::Range<u64>| TensorSlice::new(t, r);
        let copies = [
            (g.all(x), g.all(y)),                    // a gather from every tile
            (s(x, 0..n), s(z, 0..n)),                // a second destination
            (s(z, n..n + 10), s(z, n + 20..n + 30)), // within one written piece
        ];
        let ex = g.add_exchange("ex", &copies).unwrap();
        let mut e = Engine::new(g, Program::Exchange(ex), EngineOptions::default()).unwrap();
        let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
        let zs: Vec<f32> = (0..2 * n).map(|i| -(i as f32)).collect();
        e.write_tensor(x, &xs).unwrap();
        e.write_tensor(z, &zs).unwrap();
        e.run();
        assert_eq!(e.read_tensor::<f32>(y).unwrap(), xs);
        let mut want = zs.clone();
        want[..n as usize].copy_from_slice(&xs);
        let from: Vec<f32> = zs[n as usize..n as usize + 10].to_vec();
        want[n as usize + 20..n as usize + 30].copy_from_slice(&from);
        assert_eq!(e.read_tensor::<f32>(z).unwrap(), want);
    }
}
