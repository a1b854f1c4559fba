//! Tile-parallel versions of `tessera-core` kernels, each bitwise equal to
//! one call of the core kernel on the same data and seed, for every
//! number of tiles and IPUs and every mapping.
//!
//! - [`convert_sr`]: f32 to f16/bf16 with stochastic rounding. Each tile
//!   converts its pieces with `first_index` = the piece's position in the
//!   tensor, so it reads the random bits of those positions: the bits do
//!   not depend on the split (see [`crate::ipu::Seeds`] for how this
//!   relates to the per-tile streams).
//! - [`lamb`](mod@lamb): a LAMB step. Phase 1 per tile over block-aligned pieces
//!   ([`Lamb::partials`](tessera_core::optim::Lamb::partials)); the exact
//!   partial statistics go up a tree over the exchange ([`tree`]) and the
//!   total is broadcast back; phase 2 per tile
//!   ([`Lamb::apply`](tessera_core::optim::Lamb::apply)).
//! - [`reduce`](mod@reduce): within-IPU reductions (sum of squares, dot) of a
//!   distributed tensor through the same tree: the total on one tile, or
//!   on every tile (an all-reduce of the per-tile partials).
//! - [`matmul`](mod@matmul): `C = op(A) op(B)` cut over rows, columns
//!   and the reduction as PopLibs cuts it, the split chosen for the fewest
//!   cycles within a tile-memory budget; the reduction's partials added in
//!   a tree fixed by `k` alone, so bitwise the same for every cut.
//!
//! # Block alignment
//!
//! Core reductions cut a tensor into blocks of
//! `BLOCK` (256) elements from its start and
//! combine block partials exactly, so any split at block boundaries gives
//! the bits of one call. A mapping need not respect blocks: a block whose
//! elements sit on several tiles (a *straddling* block) is gathered over
//! the exchange into a halo buffer on the tile that holds its first
//! element, and reduced there ([`BlockPlan`]). Mappings with a grain that
//! is a multiple of 256 (as [`Mapping::linear`](crate::ipu::Mapping::linear)
//! with such a grain) have none.

pub mod convert;
pub mod lamb;
pub mod matmul;
pub mod reduce;
pub mod tree;

pub use convert::convert_sr;
pub use lamb::{LambProgram, lamb};
pub use matmul::{BlockLayout, GemmShape, Operand, Output, gemm, matmul};
pub use reduce::{ReduceKind, Reduction, reduce};

use core::ops::Range;

use tessera_core::kernels::BLOCK;

use crate::ipu::{Graph, GraphError, Interval, Mapping, TensorId, TensorSlice, Tile};

/// How a block-aligned reduction over a tensor's mapping is cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockPlan {
    /// Block-aligned runs held whole by one tile: `(tile, elements)`.
    pub aligned: Vec<(Tile, Range<u64>)>,
    /// Blocks split across tiles: `(owner tile, elements)`, the owner
    /// holding the block's first element.
    pub straddling: Vec<(Tile, Range<u64>)>,
}

impl BlockPlan {
    /// The plan for a tensor of `len` elements mapped as `intervals`
    /// (sorted, covering `0..len`).
    ///
    /// ```
    /// use tessera_sim::ipu::Interval;
    /// use tessera_sim::kernels::BlockPlan;
    ///
    /// // 1000 elements: tile 0 holds 0..300, tile 1 300..520, tile 2 520..1000.
    /// let m = [Interval::new(0, 0..300), Interval::new(1, 300..520), Interval::new(2, 520..1000)];
    /// let plan = BlockPlan::new(1000, &m);
    /// assert_eq!(plan.aligned, [(0, 0..256), (2, 768..1000)]);
    /// // Blocks 256..512 (on tiles 0 and 1) and 512..768 (tiles 1 and 2) go to
    /// // the tile of their first element.
    /// assert_eq!(plan.straddling, [(0, 256..512), (1, 512..768)]);
    /// // A mapping in multiples of 256 has no straddling block.
    /// let m = [Interval::new(0, 0..512), Interval::new(1, 512..700)];
    /// assert!(BlockPlan::new(700, &m).straddling.is_empty());
    /// ```
    #[must_use]
    pub fn new(len: u64, intervals: &[Interval]) -> Self {
        let b = BLOCK as u64;
        let mut aligned = Vec::new();
        let mut cuts = Vec::new();
        for i in intervals {
            let lo = i.range.start.next_multiple_of(b);
            let hi = if i.range.end == len {
                len
            } else {
                i.range.end / b * b
            };
            if lo < hi {
                aligned.push((i.tile, lo..hi));
            }
            if !i.range.start.is_multiple_of(b) {
                cuts.push(i.range.start / b * b);
            }
        }
        cuts.dedup();
        let straddling = cuts
            .into_iter()
            .map(|start| {
                let k = intervals.partition_point(|i| i.range.end <= start);
                (intervals[k].tile, start..(start + b).min(len))
            })
            .collect();
        Self {
            aligned,
            straddling,
        }
    }

    /// Every run to reduce, aligned runs then straddling blocks, with its
    /// tile.
    ///
    /// ```
    /// use tessera_sim::ipu::Interval;
    /// use tessera_sim::kernels::BlockPlan;
    ///
    /// // 1000 elements: tile 0 holds 0..300, tile 1 300..520, tile 2 520..1000.
    /// let m = [Interval::new(0, 0..300), Interval::new(1, 300..520), Interval::new(2, 520..1000)];
    /// let plan = BlockPlan::new(1000, &m);
    /// let runs: Vec<_> = plan.runs().collect();
    /// assert_eq!(runs, [(0, 0..256), (2, 768..1000), (0, 256..512), (1, 512..768)]);
    /// // Every element is in exactly one run.
    /// assert_eq!(runs.iter().map(|(_, r)| r.end - r.start).sum::<u64>(), 1000);
    /// ```
    pub fn runs(&self) -> impl Iterator<Item = (Tile, Range<u64>)> + '_ {
        self.aligned.iter().chain(&self.straddling).cloned()
    }

    /// Elements of all straddling blocks.
    ///
    /// ```
    /// use tessera_sim::ipu::Interval;
    /// use tessera_sim::kernels::BlockPlan;
    ///
    /// // 1000 elements: tile 0 holds 0..300, tile 1 300..520, tile 2 520..1000.
    /// let m = [Interval::new(0, 0..300), Interval::new(1, 300..520), Interval::new(2, 520..1000)];
    /// let plan = BlockPlan::new(1000, &m);
    /// assert_eq!(plan.halo_len(), 512);
    /// ```
    #[must_use]
    pub fn halo_len(&self) -> u64 {
        self.straddling.iter().map(|(_, r)| r.end - r.start).sum()
    }

    /// For each tensor of `tensors` (all mapped alike), a halo tensor
    /// holding the straddling blocks on their owners, and one exchange
    /// that gathers them; `None` if there are none. Returns the halo
    /// tensors (in the order of `tensors`) and the exchange's program.
    ///
    /// # Errors
    /// As [`Graph::add_tensor`] and [`Graph::add_exchange`].
    ///
    /// ```
    /// use core::num::NonZeroU64;
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Interval, Mapping, Target};
    /// use tessera_sim::kernels::BlockPlan;
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(spec));
    /// // Block 0..256 straddles tiles 0 and 1.
    /// let m = vec![Interval::new(0, 0..100), Interval::new(1, 100..300)];
    /// let x = g.add_tensor("x", DType::F32, &[300], Mapping::Explicit(m.clone())).unwrap();
    /// let plan = BlockPlan::new(300, &m);
    /// let (halos, gather) = plan.gather_halos(&mut g, "x", &[x]).unwrap().unwrap();
    /// assert_eq!(g.mapping(halos[0]), [Interval::new(0, 0..256)]);
    /// let mut e = Engine::new(g, gather, EngineOptions::default()).unwrap();
    /// let values: Vec<f32> = (0..300).map(|i| i as f32).collect();
    /// e.write_tensor(x, &values).unwrap();
    /// e.run();
    /// assert_eq!(e.read_tensor::<f32>(halos[0]).unwrap(), values[..256]);
    ///
    /// // Nothing to gather when the mapping is block-aligned.
    /// let mut g = Graph::new(Target::single(spec));
    /// let x = g.add_tensor("x", DType::F32, &[300], Mapping::linear(NonZeroU64::new(256).unwrap())).unwrap();
    /// let plan = BlockPlan::new(300, &g.mapping(x));
    /// assert_eq!(plan.gather_halos(&mut g, "x", &[x]), Ok(None));
    /// ```
    pub fn gather_halos(
        &self,
        graph: &mut Graph,
        name: &str,
        tensors: &[TensorId],
    ) -> Result<Option<(Vec<TensorId>, crate::ipu::Program)>, GraphError> {
        if self.straddling.is_empty() {
            return Ok(None);
        }
        let len = self.halo_len();
        let mut mapping = Vec::new();
        let mut at = 0;
        for (tile, r) in &self.straddling {
            mapping.push(Interval::new(*tile, at..at + (r.end - r.start)));
            at += r.end - r.start;
        }
        let mut halos = Vec::new();
        let mut copies = Vec::new();
        for (k, &t) in tensors.iter().enumerate() {
            let dtype = graph.dtype(t);
            let map = if k == 0 {
                Mapping::Explicit(mapping.clone())
            } else {
                Mapping::Like(halos[0])
            };
            let h = graph.add_tensor(&format!("{name}.halo{k}"), dtype, &[len], map)?;
            let mut at = 0;
            for (_, r) in &self.straddling {
                let n = r.end - r.start;
                copies.push((
                    TensorSlice::new(t, r.clone()),
                    TensorSlice::new(h, at..at + n),
                ));
                at += n;
            }
            halos.push(h);
        }
        let ex = graph.add_exchange(&format!("{name}.halo"), &copies)?;
        Ok(Some((halos, crate::ipu::Program::Exchange(ex))))
    }
}

/// Distinct tiles of `tiles`, in increasing order.
pub(crate) fn distinct(tiles: impl IntoIterator<Item = Tile>) -> Vec<Tile> {
    let mut v: Vec<Tile> = tiles.into_iter().collect();
    v.sort_unstable();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_plan_finds_straddling_blocks() {
        // 1000 elements: tile 0 holds 0..300, tile 1 300..520, tile 2 520..1000.
        let m = [
            Interval::new(0, 0..300),
            Interval::new(1, 300..520),
            Interval::new(2, 520..1000),
        ];
        let p = BlockPlan::new(1000, &m);
        assert_eq!(p.aligned, [(0, 0..256), (2, 768..1000)]);
        // Blocks 256..512 (tiles 0, 1) and 512..768 (tiles 1, 2).
        assert_eq!(p.straddling, [(0, 256..512), (1, 512..768)]);
        assert_eq!(p.halo_len(), 512);
        // Every element is in exactly one run.
        let mut covered: Vec<Range<u64>> = p.runs().map(|(_, r)| r).collect();
        covered.sort_by_key(|r| r.start);
        assert_eq!(covered.iter().map(|r| r.end - r.start).sum::<u64>(), 1000);
        // Aligned mappings have no halo.
        let m = [Interval::new(0, 0..512), Interval::new(1, 512..700)];
        let p = BlockPlan::new(700, &m);
        assert!(p.straddling.is_empty());
        assert_eq!(p.aligned, [(0, 0..512), (1, 512..700)]);
        // Tiny intervals: one block over three tiles.
        let m = [
            Interval::new(0, 0..10),
            Interval::new(1, 10..20),
            Interval::new(2, 20..30),
        ];
        let p = BlockPlan::new(30, &m);
        assert!(p.aligned.is_empty());
        assert_eq!(p.straddling, [(0, 0..30)]);
    }
}
