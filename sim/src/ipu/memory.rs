//! Per-tile memory accounting, checked when an engine is built.
//!
//! A tile's bytes are the sum of:
//!
//! - **tensors**: each piece (an interval of a tensor held by the tile)
//!   rounded up to 8 bytes, the alignment of 64-bit loads;
//! - **vertex state**: per vertex [`vertex_bytes`] plus
//!   [`vertex_field_bytes`] per field (Poplar keeps a pointer and a size
//!   per field);
//! - **code**: [`codelet_code_bytes`] per distinct codelet (by name) with
//!   a vertex on the tile;
//! - **exchange**: [`exchange_code_bytes`] per contiguous run the tile
//!   sends (once for a run multicast to several tiles) or receives in any
//!   exchange (the exchange is code on the IPU:
//!   each run is a few send or receive instructions with addresses). Data
//!   moves straight into its destination tensor, so no buffers are needed
//!   beyond the tensors the graph declares.
//!
//! Every compute set and exchange of the graph is counted, whether or not
//! the program uses it (as Poplar compiles the whole graph); in a
//! [`Graph::sizing`] graph, so are the runs counted instead of added.
//!
//! [`vertex_bytes`]: super::IpuParams::vertex_bytes
//! [`vertex_field_bytes`]: super::IpuParams::vertex_field_bytes
//! [`codelet_code_bytes`]: super::IpuParams::codelet_code_bytes
//! [`exchange_code_bytes`]: super::IpuParams::exchange_code_bytes

use core::fmt;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::Serialize;

use super::graph::Graph;
use super::target::Tile;

/// The bytes of one tile by category.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TileMemory {
    /// Tensor pieces.
    pub tensors: u64,
    /// Vertex state.
    pub vertex_state: u64,
    /// Codelet code.
    pub code: u64,
    /// Exchange code.
    pub exchange: u64,
}

impl TileMemory {
    /// All categories.
    ///
    /// ```
    /// use tessera_sim::ipu::TileMemory;
    ///
    /// let m = TileMemory { tensors: 64, vertex_state: 16, code: 512, exchange: 32 };
    /// assert_eq!(m.total(), 624);
    /// ```
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.tensors
            .saturating_add(self.vertex_state)
            .saturating_add(self.code)
            .saturating_add(self.exchange)
    }
}

/// A tile that does not have the memory its graph needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The tile (the lowest-numbered one that is over).
    pub tile: Tile,
    /// Its IPU.
    pub ipu: u32,
    /// Bytes it needs.
    pub needed: u64,
    /// Bytes it has.
    pub available: u64,
    /// The bytes by category.
    pub breakdown: TileMemory,
    /// The largest tensors on the tile with their bytes there, largest
    /// first (at most three).
    pub largest: Vec<(Arc<str>, u64)>,
    /// How many tiles are over in all.
    pub tiles_over: u32,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of tile memory: tile {} (IPU {}) needs {} bytes, has {} ({} over); tensors {}",
            self.tile,
            self.ipu,
            self.needed,
            self.available,
            self.needed - self.available,
            self.breakdown.tensors
        )?;
        if !self.largest.is_empty() {
            f.write_str(" (largest: ")?;
            for (k, (name, bytes)) in self.largest.iter().enumerate() {
                let sep = if k == 0 { "" } else { ", " };
                write!(f, "{sep}{name} {bytes}")?;
            }
            f.write_str(")")?;
        }
        write!(
            f,
            ", vertex state {}, code {}, exchange {}",
            self.breakdown.vertex_state, self.breakdown.code, self.breakdown.exchange
        )?;
        if self.tiles_over > 1 {
            write!(f, "; {} tiles are over in all", self.tiles_over)?;
        }
        Ok(())
    }
}

/// The memory of every tile of a graph.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryUsage {
    /// Per tile, by category.
    pub tiles: Vec<TileMemory>,
    /// Bytes per tile available.
    pub capacity: u64,
}

impl MemoryUsage {
    /// Accounts `graph`'s memory.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, MemoryUsage, Target};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// g.add_tensor("x", DType::F16, &[3], Mapping::one_tile(5, 3)).unwrap();
    /// let usage = MemoryUsage::of(&g);
    /// assert_eq!((usage.tiles[5].tensors, usage.tiles[4].tensors), (8, 0)); // 6 bytes, aligned to 8
    /// assert_eq!(usage.capacity, IpuSpec::MK2_GC200.memory_per_tile());
    /// ```
    #[must_use]
    pub fn of(graph: &Graph) -> Self {
        let p = graph.target.spec().params();
        let mut tiles = vec![TileMemory::default(); graph.tiles.len()];
        for (t, m) in tiles.iter_mut().enumerate() {
            m.tensors = graph.tiles[t]
                .iter()
                .fold(0u64, |a, pi| a.saturating_add(pi.bytes()));
        }
        let mut codelets: BTreeSet<(Tile, &str)> = BTreeSet::new();
        for cs in &graph.compute_sets {
            for v in &cs.vertices {
                let m = &mut tiles[v.tile as usize];
                m.vertex_state += u64::from(p.vertex_bytes)
                    + u64::from(p.vertex_field_bytes) * v.fields.len() as u64;
                codelets.insert((v.tile, v.codelet.name()));
            }
        }
        for (tile, _) in codelets {
            tiles[tile as usize].code += u64::from(p.codelet_code_bytes);
        }
        let code = u64::from(p.exchange_code_bytes);
        for (m, &runs) in tiles.iter_mut().zip(&graph.counted_runs) {
            m.exchange = m.exchange.saturating_add(code.saturating_mul(runs));
        }
        for ex in &graph.exchanges {
            // A run sent to several tiles is sent once (multicast).
            let mut sent = std::collections::HashSet::new();
            for s in &ex.segments {
                tiles[s.dst_tile as usize].exchange += code;
                if s.src_tile != s.dst_tile
                    && sent.insert((s.src_tile, s.src_piece, s.src.start, s.src.end))
                {
                    tiles[s.src_tile as usize].exchange += code;
                }
            }
        }
        Self {
            tiles,
            capacity: p.memory_per_tile,
        }
    }

    /// `Ok` if every tile fits, else the first tile that does not.
    ///
    /// # Errors
    /// [`OutOfMemory`] for the lowest-numbered tile over its capacity.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, MemoryUsage, Target};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// g.add_tensor("small", DType::F32, &[4], Mapping::one_tile(0, 4)).unwrap();
    /// assert!(MemoryUsage::of(&g).check(&g).is_ok());
    /// g.add_tensor("big", DType::F32, &[1 << 20], Mapping::one_tile(7, 1 << 20)).unwrap();
    /// let over = MemoryUsage::of(&g).check(&g).unwrap_err();
    /// assert_eq!((over.tile, &*over.largest[0].0), (7, "big"));
    /// ```
    pub fn check(&self, graph: &Graph) -> Result<(), Box<OutOfMemory>> {
        let over = |m: &TileMemory| m.total() > self.capacity;
        let Some(tile) = self.tiles.iter().position(over) else {
            return Ok(());
        };
        let m = self.tiles[tile];
        // Keyed, not searched: a tile of a deep model holds many tensors.
        let mut bytes: BTreeMap<u32, u64> = BTreeMap::new();
        for pi in &graph.tiles[tile] {
            *bytes.entry(pi.tensor.0).or_default() += pi.bytes();
        }
        let mut by_tensor: Vec<(u32, u64)> = bytes.into_iter().collect();
        by_tensor.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        let largest = by_tensor
            .iter()
            .take(3)
            .map(|&(t, b)| (graph.tensors[t as usize].name.clone(), b))
            .collect();
        Err(Box::new(OutOfMemory {
            tile: tile as Tile,
            ipu: graph.target.ipu_of(tile as Tile),
            needed: m.total(),
            available: self.capacity,
            breakdown: m,
            largest,
            tiles_over: self.tiles.iter().filter(|m| over(m)).count() as u32,
        }))
    }

    /// A summary for reports: max, mean, a histogram.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, MemoryUsage, Target};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(3, 4)).unwrap();
    /// let s = MemoryUsage::of(&g).summary(4);
    /// assert_eq!((s.max, s.max_tile, s.total, s.tiles_over), (16, 3, 16, 0));
    /// ```
    #[must_use]
    pub fn summary(&self, buckets: usize) -> MemorySummary {
        let totals: Vec<u64> = self.tiles.iter().map(TileMemory::total).collect();
        let (max_tile, max) = totals
            .iter()
            .copied()
            .enumerate()
            .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
            .unwrap_or((0, 0));
        let sum: u64 = totals.iter().sum();
        let mut by_category = TileMemory::default();
        for m in &self.tiles {
            by_category.tensors += m.tensors;
            by_category.vertex_state += m.vertex_state;
            by_category.code += m.code;
            by_category.exchange += m.exchange;
        }
        let buckets = buckets.max(1);
        let width = self.capacity.div_ceil(buckets as u64).max(1);
        let mut histogram: Vec<Bucket> = (0..buckets as u64)
            .map(|k| Bucket {
                from: k * width,
                to: ((k + 1) * width).min(self.capacity),
                tiles: 0,
            })
            .collect();
        let mut over = 0;
        for &t in &totals {
            if t > self.capacity {
                over += 1;
            } else {
                let k = ((t / width) as usize).min(buckets - 1);
                histogram[k].tiles += 1;
            }
        }
        MemorySummary {
            capacity: self.capacity,
            total: sum,
            max,
            max_tile: max_tile as Tile,
            mean: if totals.is_empty() {
                0.0
            } else {
                sum as f64 / totals.len() as f64
            },
            by_category,
            histogram,
            tiles_over: over,
        }
    }
}

/// Tiles whose bytes are in `from..to` (the last bucket includes `to`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// Lowest bytes.
    pub from: u64,
    /// Highest bytes (exclusive but for the last bucket).
    pub to: u64,
    /// Tiles.
    pub tiles: u32,
}

/// Memory per tile, summarised.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemorySummary {
    /// Bytes per tile available.
    pub capacity: u64,
    /// Bytes used on all tiles.
    pub total: u64,
    /// Bytes of the fullest tile.
    pub max: u64,
    /// The fullest tile (the lowest-numbered of equals).
    pub max_tile: Tile,
    /// Mean bytes per tile.
    pub mean: f64,
    /// Bytes of all tiles by category.
    pub by_category: TileMemory,
    /// Tiles by bytes used, in equal buckets of the capacity.
    pub histogram: Vec<Bucket>,
    /// Tiles over capacity (0 for a built engine).
    pub tiles_over: u32,
}
