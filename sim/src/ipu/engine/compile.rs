//! Building an engine's steps: compute sets grouped by tile with their
//! races checked and cycles estimated, exchanges and host streams.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use crate::ipu::codelet::VertexCycles;
use crate::ipu::exchange::ExchangeRun;
use crate::ipu::graph::{Direction, Graph, GraphError, Segment, VertexInfo};
use crate::ipu::target::{LinkGroup, Tile};
use crate::ipu::tensor::{Piece, TensorId};

/// A compute set ready to run: vertices grouped by tile, costs known.
#[derive(Debug)]
pub(super) struct CompiledComputeSet {
    /// Vertices sorted by tile (stable).
    pub(super) vertices: Vec<VertexInfo>,
    /// Tiles with at least one vertex, in order, and where their vertices
    /// end in `vertices` (each starts where the previous ends): memory
    /// per touched tile, not per tile of the target.
    pub(super) touched: Vec<(Tile, u32)>,
    /// Tile cycles per touched tile.
    pub(super) tile_cycles: Vec<(Tile, u64)>,
    /// The slowest tile's cycles and the tile.
    pub(super) cycles: u64,
    pub(super) busiest: Tile,
}

/// An exchange ready to run.
#[derive(Debug)]
pub(super) struct CompiledExchange {
    pub(super) run: ExchangeRun,
    pub(super) cycles: u64,
    pub(super) busiest: Tile,
    /// Bytes sent off-tile (multicast counted once per sender).
    pub(super) bytes: u64,
    /// Bytes crossing IPU-Links (once per destination IPU).
    pub(super) link_bytes: u64,
}

/// A host stream ready to run.
#[derive(Debug)]
pub(super) struct CompiledStream {
    pub(super) tensor: TensorId,
    pub(super) direction: Direction,
    pub(super) buffer: Piece,
    pub(super) cycles: u64,
    pub(super) bytes: u64,
}

/// Groups a compute set's vertices by tile, checks races, estimates
/// cycles.
pub(super) fn compile_compute_set(
    graph: &Graph,
    name: &Arc<str>,
    mut vertices: Vec<VertexInfo>,
) -> Result<CompiledComputeSet, GraphError> {
    let spec = graph.target.spec();
    let workers = spec.workers_per_tile() as usize;
    vertices.sort_by_key(|v| v.tile);
    let mut touched = Vec::new();
    let mut tile_cycles = Vec::new();
    let (mut cycles, mut busiest) = (0, 0);
    let mut loads = vec![0u64; workers];
    let mut start = 0;
    while start < vertices.len() {
        let t = vertices[start].tile;
        let end = start + vertices[start..].partition_point(|v| v.tile == t);
        let vs = &vertices[start..end];
        check_races(name, t, vs)?;
        loads.fill(0);
        for v in vs {
            match v.cycles {
                VertexCycles::Worker(c) => {
                    let (w, _) = loads
                        .iter()
                        .enumerate()
                        .min_by_key(|&(w, &l)| (l, w))
                        .expect("at least one worker");
                    loads[w] += c;
                }
                VertexCycles::AllWorkers(c) => loads.iter_mut().for_each(|l| *l += c),
            }
        }
        let max = loads.iter().copied().max().unwrap_or(0);
        let c = u64::from(spec.params().compute_set_cycles) + workers as u64 * max;
        touched.push((t, end as u32));
        tile_cycles.push((t, c));
        if c > cycles {
            (cycles, busiest) = (c, t);
        }
        start = end;
    }
    Ok(CompiledComputeSet {
        vertices,
        touched,
        tile_cycles,
        cycles,
        busiest,
    })
}

/// Two vertices of `cs` on `tile` touching the same elements, one writing.
fn check_races(name: &Arc<str>, tile: Tile, vs: &[VertexInfo]) -> Result<(), GraphError> {
    if vs.len() < 2 {
        return Ok(());
    }
    // (piece, start, end, writes, vertex)
    let mut spans: Vec<(u32, usize, usize, bool, usize)> = Vec::new();
    for (k, v) in vs.iter().enumerate() {
        for (f, spec) in v.fields.iter().zip(v.codelet.fields()) {
            if !f.local.is_empty() {
                spans.push((f.piece, f.local.start, f.local.end, spec.access.writes(), k));
            }
        }
    }
    spans.sort_unstable();
    let mut piece = None;
    let (mut end_any, mut any_by) = (0, usize::MAX);
    let (mut end_write, mut write_by) = (0, usize::MAX);
    for &(p, start, end, writes, k) in &spans {
        if piece != Some(p) {
            piece = Some(p);
            (end_any, any_by, end_write, write_by) = (0, usize::MAX, 0, usize::MAX);
        }
        let race =
            (start < end_write && write_by != k) || (writes && start < end_any && any_by != k);
        if race {
            let tensor = vs[k]
                .fields
                .iter()
                .zip(&vs[k].tensors)
                .find(|(f, _)| f.piece == p)
                .map(|(_, &t)| t)
                .expect("the span's field");
            return Err(GraphError::Race {
                compute_set: name.clone(),
                tile,
                tensor,
            });
        }
        if end > end_any {
            (end_any, any_by) = (end, k);
        }
        if writes && end > end_write {
            (end_write, write_by) = (end, k);
        }
    }
    Ok(())
}

/// Estimates an exchange: per tile bytes sent (multicast once) and
/// received, copies within a tile, and IPU-Link traffic.
pub(super) fn compile_exchange(graph: &Graph, segments: Vec<Segment>) -> CompiledExchange {
    let target = &graph.target;
    let spec = target.spec();
    let tiles = graph.tiles.len();
    let mut sent = vec![0u64; tiles];
    let mut received = vec![0u64; tiles];
    let mut local = vec![0u64; tiles];
    let mut senders: HashSet<(Tile, u32, usize, usize)> = HashSet::new();
    let mut to_ipu: HashSet<(Tile, u32, usize, usize, u32)> = HashSet::new();
    let mut links: BTreeMap<LinkGroup, u64> = BTreeMap::new();
    let mut max_hops = 0;
    let (mut bytes, mut link_bytes) = (0, 0);
    for s in &segments {
        if s.src_tile == s.dst_tile {
            local[s.src_tile as usize] += s.bytes;
            continue;
        }
        received[s.dst_tile as usize] += s.bytes;
        if senders.insert((s.src_tile, s.src_piece, s.src.start, s.src.end)) {
            sent[s.src_tile as usize] += s.bytes;
            bytes += s.bytes;
        }
        let (from, to) = (target.ipu_of(s.src_tile), target.ipu_of(s.dst_tile));
        if from != to && to_ipu.insert((s.src_tile, s.src_piece, s.src.start, s.src.end, to)) {
            let route = target.route(from, to);
            max_hops = max_hops.max(route.len() as u64);
            for g in route {
                *links.entry(g).or_default() += s.bytes;
            }
            link_bytes += s.bytes;
        }
    }
    let (mut cycles, mut busiest) = (0, 0);
    for t in 0..tiles {
        let c = spec.exchange_cycles(sent[t], received[t]) + spec.local_copy_cycles(local[t]);
        if c > cycles {
            (cycles, busiest) = (c, t as Tile);
        }
    }
    let link = links
        .iter()
        .map(|(g, &b)| spec.link_cycles(b, g.links()))
        .max()
        .unwrap_or(0);
    if link > 0 {
        let latency = spec.cycles_of_ps(max_hops * spec.params().hop_latency_ps);
        cycles = cycles.max(link + latency);
    }
    CompiledExchange {
        run: ExchangeRun::new(segments),
        cycles,
        busiest,
        bytes,
        link_bytes,
    }
}
