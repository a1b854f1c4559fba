//! The graph: tensors with tile mappings, compute sets of vertices,
//! exchanges (copies) and host streams, as Poplar's `Graph`.

use std::sync::Arc;

use super::codelet::{Codelet, FieldRef};
use super::mapping::{self, Interval, Mapping};
use super::target::{Target, Tile};
use super::tensor::{DType, TensorId, TensorSlice};

mod error;
mod parts;

pub use error::GraphError;
pub use parts::Direction;
pub(crate) use parts::{
    ComputeSetInfo, ExchangeInfo, PieceInfo, Placed, Segment, StreamInfo, TensorInfo, VertexInfo,
    held_bytes, piece_bytes,
};

/// A compute set of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ComputeSetId(pub(crate) u32);

/// An exchange (a set of copies done together) of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExchangeId(pub(crate) u32);

/// A host stream of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId(pub(crate) u32);

/// Tensors, compute sets, exchanges and host streams over a [`Target`].
///
/// Building a graph checks shapes, mappings, types and races as each
/// piece is added; memory is checked when an
/// [`Engine`](super::Engine) is built from the graph and a program.
#[derive(Clone, Debug)]
pub struct Graph {
    pub(crate) target: Target,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) tiles: Vec<Vec<PieceInfo>>,
    /// Bytes of tensors per tile (for the memory-aware mapper).
    pub(crate) tensor_bytes: Vec<u64>,
    pub(crate) compute_sets: Vec<ComputeSetInfo>,
    pub(crate) exchanges: Vec<ExchangeInfo>,
    pub(crate) streams: Vec<StreamInfo>,
    /// Whether the graph is only measured ([`Graph::sizing`]).
    pub(crate) sizing: bool,
    /// Per tile, the exchange runs it receives that were counted instead
    /// of added ([`Graph::count_received_runs`]).
    pub(crate) counted_runs: Vec<u64>,
}

impl Graph {
    /// An empty graph on `target`.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{Graph, Target};
    ///
    /// let g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// assert_eq!(g.tensor_bytes(), [0; 1472]);
    /// ```
    #[must_use]
    pub fn new(target: Target) -> Self {
        let tiles = target.tiles() as usize;
        Self {
            target,
            tensors: Vec::new(),
            tiles: vec![Vec::new(); tiles],
            tensor_bytes: vec![0; tiles],
            compute_sets: Vec::new(),
            exchanges: Vec::new(),
            streams: Vec::new(),
            sizing: false,
            counted_runs: vec![0; tiles],
        }
    }

    /// An empty graph on `target` that is only measured
    /// ([`MemoryUsage::of`](super::MemoryUsage::of)), never run: kernels
    /// whose exchanges are many small copies (a product's gathers) count
    /// the runs each tile receives ([`Graph::count_received_runs`]) instead
    /// of adding them. Its tensors, vertices and code are those of the
    /// graph [`Graph::new`] would get, so their memory is the same to the
    /// byte; its exchange code counts the receiving side of the counted
    /// runs only (a lower bound). Building it needs no more host memory
    /// than the tiles' tensors have blocks, so the memory of a model far
    /// beyond the tiles is known before anything is allocated for it.
    ///
    /// ```
    /// use core::num::NonZeroU64;
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, MemoryUsage, Target};
    ///
    /// let target = Target::single(IpuSpec::MK2_GC200);
    /// let (mut run, mut sized) = (Graph::new(target), Graph::sizing(target));
    /// for g in [&mut run, &mut sized] {
    ///     g.add_tensor("x", DType::F32, &[5000], Mapping::linear(NonZeroU64::MIN)).unwrap();
    /// }
    /// assert_eq!(MemoryUsage::of(&run), MemoryUsage::of(&sized));
    /// ```
    #[must_use]
    pub fn sizing(target: Target) -> Self {
        Self {
            sizing: true,
            ..Self::new(target)
        }
    }

    /// Whether this is a [`Graph::sizing`] graph.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{Graph, Target};
    ///
    /// let target = Target::single(IpuSpec::MK2_GC200);
    /// assert!(Graph::sizing(target).is_sizing() && !Graph::new(target).is_sizing());
    /// ```
    #[must_use]
    pub const fn is_sizing(&self) -> bool {
        self.sizing
    }

    /// Bytes an [`Engine`](super::Engine) of this graph holds on the host,
    /// at least: every tensor's values and every host stream's buffer, and
    /// the exchanges' segments (kept by the graph and, compiled, by the
    /// engine; in a [`Graph::sizing`] graph, the counted runs as
    /// segments). Saturating.
    ///
    /// ```
    /// use tessera_sim::ipu::Direction;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// assert_eq!(g.host_bytes(), 16); // 4 f32 values
    /// g.add_stream("x in", x, Direction::ToDevice);
    /// assert_eq!(g.host_bytes(), 32); // and the stream's buffer
    /// ```
    #[must_use]
    pub fn host_bytes(&self) -> u64 {
        let values = |dtype: DType, len: u64| len.saturating_mul(dtype.size());
        let pieces = self
            .tiles
            .iter()
            .flatten()
            .fold(0u64, |a, p| a.saturating_add(values(p.dtype, p.len)));
        let streams = self.streams.iter().fold(0u64, |a, s| {
            let t = &self.tensors[s.tensor.index()];
            a.saturating_add(values(t.dtype, t.len))
        });
        let segments = self
            .exchanges
            .iter()
            .map(|e| e.segments.len() as u64)
            .chain(self.counted_runs.iter().copied())
            .fold(0u64, u64::saturating_add);
        let per_segment = 2 * core::mem::size_of::<Segment>() as u64;
        pieces
            .saturating_add(streams)
            .saturating_add(segments.saturating_mul(per_segment))
    }

    /// Charges `tile` the exchange code of receiving `runs` contiguous
    /// runs, in a [`Graph::sizing`] graph instead of adding their copies.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{Graph, MemoryUsage, Target};
    ///
    /// let mut g = Graph::sizing(Target::single(IpuSpec::MK2_GC200));
    /// g.count_received_runs(3, 10);
    /// let code = IpuSpec::MK2_GC200.params().exchange_code_bytes;
    /// assert_eq!(MemoryUsage::of(&g).tiles[3].exchange, 10 * u64::from(code));
    /// ```
    pub fn count_received_runs(&mut self, tile: Tile, runs: u64) {
        if let Some(n) = self.counted_runs.get_mut(tile as usize) {
            *n = n.saturating_add(runs);
        }
    }

    /// The target.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// assert_eq!(g.target().tiles(), 2);
    /// ```
    #[must_use]
    pub const fn target(&self) -> &Target {
        &self.target
    }

    /// Adds a tensor of `dtype` and `shape` (row-major), mapped as
    /// `mapping` says.
    ///
    /// # Errors
    /// [`GraphError::TooLarge`], [`GraphError::TileOutOfRange`],
    /// [`GraphError::Unmapped`], [`GraphError::Overmapped`],
    /// [`GraphError::LikeLength`].
    ///
    /// # Panics
    /// If [`Mapping::Like`] names a tensor of another graph.
    ///
    /// ```
    /// use core::num::NonZeroU64;
    /// use tessera_sim::ipu::{DType, Graph, GraphError, Interval, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F16, &[2, 3], Mapping::linear(NonZeroU64::MIN))?;
    /// assert_eq!(g.mapping(x), [Interval::new(0, 0..3), Interval::new(1, 3..6)]);
    /// let gap = Mapping::Explicit(vec![Interval::new(0, 0..2)]);
    /// let unmapped = g.add_tensor("y", DType::F32, &[4], gap);
    /// assert!(matches!(unmapped, Err(GraphError::Unmapped { at: 2, .. })));
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[u64],
        mapping: Mapping,
    ) -> Result<TensorId, GraphError> {
        let len = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .filter(|&n| usize::try_from(n).is_ok())
            .ok_or(GraphError::TooLarge)?;
        let name: Arc<str> = Arc::from(name);
        let tiles = self.target.tiles();
        let intervals = match mapping {
            Mapping::Linear { grain, tiles: over } => {
                let over = over.unwrap_or(0..tiles);
                if over.end > tiles {
                    return Err(GraphError::TileOutOfRange {
                        tile: over.end - 1,
                        tiles,
                    });
                }
                mapping::linear(len, over, grain)
            }
            Mapping::MemoryAware { grain } => {
                mapping::memory_aware(len, dtype.size(), &self.tensor_bytes, grain)
            }
            Mapping::Like(other) => {
                let o = &self.tensors[other.index()];
                if o.len != len {
                    return Err(GraphError::LikeLength { len, like: o.len });
                }
                o.intervals
                    .iter()
                    .map(|p| Interval::new(p.tile, p.range.clone()))
                    .collect()
            }
            Mapping::Explicit(list) => list,
        };
        if let Some(bad) = intervals.iter().find(|i| i.tile >= tiles) {
            return Err(GraphError::TileOutOfRange {
                tile: bad.tile,
                tiles,
            });
        }
        let intervals = mapping::normalise(intervals);
        let mut at = 0;
        for i in &intervals {
            if i.range.start > at {
                return Err(GraphError::Unmapped { tensor: name, at });
            }
            if i.range.start < at {
                return Err(GraphError::Overmapped {
                    tensor: name,
                    at: i.range.start,
                });
            }
            if i.range.end > len {
                return Err(GraphError::Overmapped {
                    tensor: name,
                    at: len,
                });
            }
            at = i.range.end;
        }
        if at < len {
            return Err(GraphError::Unmapped { tensor: name, at });
        }
        let id = TensorId(u32::try_from(self.tensors.len()).map_err(|_| GraphError::TooLarge)?);
        let placed = intervals
            .into_iter()
            .map(|i| {
                let pieces = &mut self.tiles[i.tile as usize];
                let piece = pieces.len() as u32;
                pieces.push(PieceInfo {
                    tensor: id,
                    dtype,
                    len: i.len(),
                    held: None,
                });
                let bytes = &mut self.tensor_bytes[i.tile as usize];
                *bytes = bytes.saturating_add(piece_bytes(dtype, None, i.len()));
                Placed {
                    tile: i.tile,
                    range: i.range,
                    piece,
                }
            })
            .collect();
        self.tensors.push(TensorInfo {
            name,
            dtype,
            shape: shape.to_vec(),
            len,
            intervals: placed,
            held: None,
        });
        Ok(id)
    }

    /// The tensor's name.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// assert_eq!(g.name(x), "x");
    /// ```
    #[must_use]
    pub fn name(&self, t: TensorId) -> &str {
        &self.tensors[t.index()].name
    }

    /// The tensor's element type.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// assert_eq!(g.dtype(x), DType::F32);
    /// ```
    #[must_use]
    pub fn dtype(&self, t: TensorId) -> DType {
        self.tensors[t.index()].dtype
    }

    /// The tensor's shape.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// assert_eq!(g.shape(x), [2, 2]);
    /// ```
    #[must_use]
    pub fn shape(&self, t: TensorId) -> &[u64] {
        &self.tensors[t.index()].shape
    }

    /// The tensor's number of elements.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// assert_eq!(g.len(x), 4);
    /// ```
    #[must_use]
    pub fn len(&self, t: TensorId) -> u64 {
        self.tensors[t.index()].len
    }

    /// The tensor's mapping, sorted by first element.
    ///
    /// ```
    /// use tessera_sim::ipu::Interval;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// assert_eq!(g.mapping(x), [Interval::new(0, 0..4)]);
    /// ```
    #[must_use]
    pub fn mapping(&self, t: TensorId) -> Vec<Interval> {
        self.tensors[t.index()]
            .intervals
            .iter()
            .map(|p| Interval::new(p.tile, p.range.clone()))
            .collect()
    }

    /// The whole tensor as a slice.
    ///
    /// ```
    /// use tessera_sim::ipu::TensorSlice;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// assert_eq!(g.all(x), TensorSlice::new(x, 0..4));
    /// ```
    #[must_use]
    pub fn all(&self, t: TensorId) -> TensorSlice {
        TensorSlice::new(t, 0..self.len(t))
    }

    /// Bytes of tensors on each tile so far.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// g.add_tensor("x", DType::F32, &[5], Mapping::one_tile(1, 5)).unwrap();
    /// assert_eq!(g.tensor_bytes(), [0, 24]); // 20 bytes, rounded up to 8
    /// ```
    #[must_use]
    pub fn tensor_bytes(&self) -> &[u64] {
        &self.tensor_bytes
    }

    /// Adds an empty compute set.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let cs = g.add_compute_set("step");
    /// assert_eq!(g.compute_set_name(cs), "step");
    /// ```
    pub fn add_compute_set(&mut self, name: &str) -> ComputeSetId {
        self.compute_sets.push(ComputeSetInfo {
            name: Arc::from(name),
            vertices: Vec::new(),
        });
        ComputeSetId(self.compute_sets.len() as u32 - 1)
    }

    /// The compute set's name.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let cs = g.add_compute_set("forward");
    /// assert_eq!(g.compute_set_name(cs), "forward");
    /// ```
    #[must_use]
    pub fn compute_set_name(&self, cs: ComputeSetId) -> &str {
        &self.compute_sets[cs.0 as usize].name
    }

    fn check_slice(&self, s: &TensorSlice) -> Result<(), GraphError> {
        let len = self.len(s.tensor);
        if s.range.start > s.range.end || s.range.end > len {
            return Err(GraphError::SliceOutOfRange {
                tensor: s.tensor,
                range: s.range.clone(),
                len,
            });
        }
        Ok(())
    }

    /// The interval of `t` that holds element `at`.
    fn interval_at(&self, t: TensorId, at: u64) -> &Placed {
        let iv = &self.tensors[t.index()].intervals;
        let k = iv.partition_point(|p| p.range.end <= at);
        &iv[k]
    }

    /// Adds a vertex running `codelet` on `tile` to `cs`, its fields
    /// connected to `fields` (each within one interval held by `tile`).
    ///
    /// # Errors
    /// [`GraphError::TileOutOfRange`], [`GraphError::FieldCount`],
    /// [`GraphError::SliceOutOfRange`], [`GraphError::FieldType`],
    /// [`GraphError::NotOnTile`], [`GraphError::Aliased`]; races with the
    /// compute set's other vertices are reported when an engine is built.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # /// `y = 2 x` over f32 fields `[x, y]`, a thread cycle per element.
    /// # #[derive(Debug)]
    /// # struct Double;
    /// # impl Codelet for Double {
    /// #     fn name(&self) -> &str {
    /// #         "double"
    /// #     }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const FIELDS: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &FIELDS
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles {
    /// #         VertexCycles::Worker(lens[0])
    /// #     }
    /// #     fn run(&self, io: &mut VertexIo<'_>) {
    /// #         let [x, y] = io.many([0, 1]).map(FieldMut::into_slice::<f32>);
    /// #         y.iter_mut().zip(x.iter()).for_each(|(y, x)| *y = 2.0 * *x);
    /// #     }
    /// # }
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let y = g.add_tensor("y", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let cs = g.add_compute_set("double");
    /// g.add_vertex(cs, 0, Arc::new(Double), &[g.all(x), g.all(y)])?;
    /// let elsewhere = g.add_vertex(cs, 1, Arc::new(Double), &[g.all(x), g.all(y)]);
    /// assert!(matches!(elsewhere, Err(GraphError::NotOnTile { field: 0, tile: 1, .. })));
    /// let one_field = g.add_vertex(cs, 0, Arc::new(Double), &[g.all(x)]);
    /// assert_eq!(one_field, Err(GraphError::FieldCount { expected: 2, got: 1 }));
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn add_vertex(
        &mut self,
        cs: ComputeSetId,
        tile: Tile,
        codelet: Arc<dyn Codelet>,
        fields: &[TensorSlice],
    ) -> Result<(), GraphError> {
        let tiles = self.target.tiles();
        if tile >= tiles {
            return Err(GraphError::TileOutOfRange { tile, tiles });
        }
        let specs = codelet.fields();
        if specs.len() != fields.len() {
            return Err(GraphError::FieldCount {
                expected: specs.len(),
                got: fields.len(),
            });
        }
        let mut refs = Vec::with_capacity(fields.len());
        for (k, (f, spec)) in fields.iter().zip(specs).enumerate() {
            self.check_slice(f)?;
            let dtype = self.dtype(f.tensor);
            if dtype != spec.dtype {
                return Err(GraphError::FieldType {
                    field: k,
                    expected: spec.dtype,
                    got: dtype,
                });
            }
            let not_on_tile = || GraphError::NotOnTile {
                field: k,
                tile,
                tensor: f.tensor,
                range: f.range.clone(),
            };
            let (piece, local) = if f.is_empty() {
                // An empty field: any piece of the tensor on the tile.
                let p = self.tensors[f.tensor.index()]
                    .intervals
                    .iter()
                    .find(|p| p.tile == tile)
                    .ok_or_else(not_on_tile)?;
                (p.piece, 0..0)
            } else {
                let p = self.interval_at(f.tensor, f.range.start);
                if p.tile != tile || f.range.end > p.range.end {
                    return Err(not_on_tile());
                }
                let lo = (f.range.start - p.range.start) as usize;
                (p.piece, lo..lo + f.len() as usize)
            };
            refs.push(FieldRef {
                piece,
                local,
                start: f.range.start,
            });
        }
        for a in 0..fields.len() {
            for b in a + 1..fields.len() {
                let (fa, fb) = (&fields[a], &fields[b]);
                let overlap = fa.tensor == fb.tensor
                    && fa.range.start < fb.range.end
                    && fb.range.start < fa.range.end;
                if overlap && (specs[a].access.writes() || specs[b].access.writes()) {
                    return Err(GraphError::Aliased {
                        first: a,
                        second: b,
                    });
                }
            }
        }
        let lens: Vec<u64> = fields.iter().map(TensorSlice::len).collect();
        let cycles = codelet.cycles(&lens, self.target.spec());
        self.compute_sets[cs.0 as usize].vertices.push(VertexInfo {
            tile,
            codelet,
            fields: refs,
            tensors: fields.iter().map(|f| f.tensor).collect(),
            cycles,
        });
        Ok(())
    }

    /// Adds an exchange that copies each `(source, destination)` pair, all
    /// in one exchange phase: every copy reads the values from before the
    /// phase. Sources may repeat (a broadcast: the sender sends once).
    ///
    /// # Errors
    /// [`GraphError::SliceOutOfRange`], [`GraphError::CopyMismatch`],
    /// [`GraphError::ExchangeOverlap`] if a destination overlaps another
    /// destination or a source.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Graph, GraphError, Mapping, Target, TensorSlice};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let y = g.add_tensor("y", DType::F32, &[4], Mapping::one_tile(1, 4))?;
    /// g.add_exchange("x to y", &[(g.all(x), g.all(y))])?;
    /// let short = (TensorSlice::new(x, 0..2), g.all(y));
    /// assert_eq!(g.add_exchange("bad", &[short]), Err(GraphError::CopyMismatch { copy: 0 }));
    /// # Ok::<(), GraphError>(())
    /// ```
    pub fn add_exchange(
        &mut self,
        name: &str,
        copies: &[(TensorSlice, TensorSlice)],
    ) -> Result<ExchangeId, GraphError> {
        let mut segments = Vec::new();
        let mut touched: Vec<(TensorId, u64, u64, bool)> = Vec::new();
        for (k, (src, dst)) in copies.iter().enumerate() {
            self.check_slice(src)?;
            self.check_slice(dst)?;
            let (dtype, held) = (self.dtype(src.tensor), self.held(src.tensor));
            if src.len() != dst.len() || dtype != self.dtype(dst.tensor) {
                return Err(GraphError::CopyMismatch { copy: k });
            }
            touched.push((src.tensor, src.range.start, src.range.end, false));
            touched.push((dst.tensor, dst.range.start, dst.range.end, true));
            let (mut s, mut d) = (src.range.start, dst.range.start);
            while s < src.range.end {
                let sp = self.interval_at(src.tensor, s);
                let dp = self.interval_at(dst.tensor, d);
                let run = (sp.range.end - s)
                    .min(dp.range.end - d)
                    .min(src.range.end - s);
                let (so, do_) = ((s - sp.range.start) as usize, (d - dp.range.start) as usize);
                segments.push(Segment {
                    src_tile: sp.tile,
                    src_piece: sp.piece,
                    src: so..so + run as usize,
                    dst_tile: dp.tile,
                    dst_piece: dp.piece,
                    dst: do_..do_ + run as usize,
                    bytes: held_bytes(dtype, held, run),
                });
                s += run;
                d += run;
            }
        }
        touched.retain(|t| t.1 < t.2);
        touched.sort_unstable();
        // A sweep in order of start: a range overlapping an earlier one
        // where either writes is refused (reads may overlap reads).
        let (mut tensor, mut end_any, mut end_write) = (None, 0, 0);
        for &(t, start, end, write) in &touched {
            if tensor != Some(t) {
                (tensor, end_any, end_write) = (Some(t), 0, 0);
            }
            if start < end_write || (write && start < end_any) {
                return Err(GraphError::ExchangeOverlap {
                    tensor: t,
                    at: start,
                });
            }
            end_any = end_any.max(end);
            if write {
                end_write = end_write.max(end);
            }
        }
        self.exchanges.push(ExchangeInfo {
            name: Arc::from(name),
            segments,
        });
        Ok(ExchangeId(self.exchanges.len() as u32 - 1))
    }

    /// Adds a host stream that writes (`ToDevice`) or reads (`ToHost`)
    /// the whole of `tensor`.
    ///
    /// ```
    /// use tessera_sim::ipu::Direction;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[2, 2], Mapping::one_tile(0, 4)).unwrap();
    /// g.add_stream("x in", x, Direction::ToDevice);
    /// assert_eq!(g.host_bytes(), 2 * 16); // the tensor and the stream's buffer
    /// ```
    pub fn add_stream(&mut self, name: &str, tensor: TensorId, direction: Direction) -> StreamId {
        self.streams.push(StreamInfo {
            name: Arc::from(name),
            tensor,
            direction,
        });
        StreamId(self.streams.len() as u32 - 1)
    }
}
