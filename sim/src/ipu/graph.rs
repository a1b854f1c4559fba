//! The graph: tensors with tile mappings, compute sets of vertices,
//! exchanges (copies) and host streams, as Poplar's `Graph`.

use core::fmt;
use core::ops::Range;
use std::sync::Arc;

use super::codelet::{Codelet, FieldRef, VertexCycles};
use super::encoding::Encoding;
use super::mapping::{self, Interval, Mapping};
use super::target::{Target, Tile};
use super::tensor::{DType, TensorId, TensorSlice};

/// A compute set of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ComputeSetId(pub(crate) u32);

/// An exchange (a set of copies done together) of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ExchangeId(pub(crate) u32);

/// A host stream of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamId(pub(crate) u32);

/// Why a graph operation was refused. Nothing is added then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GraphError {
    /// A tile index beyond the target's tiles.
    TileOutOfRange {
        /// The tile.
        tile: Tile,
        /// Tiles in the target.
        tiles: u32,
    },
    /// A tensor's shape has more elements than a `u64` holds, or more than
    /// a host `usize`.
    TooLarge,
    /// A mapping leaves element `at` unmapped.
    Unmapped {
        /// The tensor's name.
        tensor: Arc<str>,
        /// The first unmapped element.
        at: u64,
    },
    /// A mapping maps element `at` twice, or beyond the tensor's end.
    Overmapped {
        /// The tensor's name.
        tensor: Arc<str>,
        /// The first element mapped twice (or the tensor's length).
        at: u64,
    },
    /// [`Mapping::Like`] a tensor of another length.
    LikeLength {
        /// The length of the new tensor.
        len: u64,
        /// The length of the tensor whose mapping was asked for.
        like: u64,
    },
    /// A slice beyond its tensor's end.
    SliceOutOfRange {
        /// The tensor.
        tensor: TensorId,
        /// The slice.
        range: Range<u64>,
        /// The tensor's length.
        len: u64,
    },
    /// A vertex got a different number of fields than its codelet has.
    FieldCount {
        /// The codelet's fields.
        expected: usize,
        /// The fields given.
        got: usize,
    },
    /// A field's tensor has another element type than the codelet's.
    FieldType {
        /// The field.
        field: usize,
        /// The codelet's type.
        expected: DType,
        /// The tensor's type.
        got: DType,
    },
    /// A field is not within one interval held by the vertex's tile.
    NotOnTile {
        /// The field.
        field: usize,
        /// The vertex's tile.
        tile: Tile,
        /// The field's tensor.
        tensor: TensorId,
        /// The field's elements.
        range: Range<u64>,
    },
    /// Two fields of one vertex overlap and one is written.
    Aliased {
        /// The first field.
        first: usize,
        /// The second field.
        second: usize,
    },
    /// Two vertices of one compute set touch the same elements of a tile
    /// and one writes them (a race under BSP).
    Race {
        /// The compute set's name.
        compute_set: Arc<str>,
        /// The tile.
        tile: Tile,
        /// The tensor.
        tensor: TensorId,
    },
    /// A copy between slices of different lengths or element types.
    CopyMismatch {
        /// The copy's index in its exchange.
        copy: usize,
    },
    /// A kernel needs tensors mapped alike and this one is not.
    MappingMismatch {
        /// The tensor mapped differently.
        tensor: TensorId,
    },
    /// An exchange writes elements it also reads or writes elsewhere.
    ExchangeOverlap {
        /// The tensor.
        tensor: TensorId,
        /// The first element involved.
        at: u64,
    },
}

impl fmt::Display for GraphError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TileOutOfRange { tile, tiles } => {
                write!(
                    f,
                    "tile {tile} is out of range (the target has {tiles} tiles)"
                )
            }
            Self::TooLarge => f.write_str("the tensor has too many elements"),
            Self::Unmapped { tensor, at } => {
                write!(f, "tensor {tensor}: element {at} is not mapped to a tile")
            }
            Self::Overmapped { tensor, at } => {
                write!(
                    f,
                    "tensor {tensor}: element {at} is mapped twice or out of range"
                )
            }
            Self::LikeLength { len, like } => {
                write!(f, "cannot map {len} elements like a tensor of {like}")
            }
            Self::SliceOutOfRange { tensor, range, len } => write!(
                f,
                "slice {range:?} of tensor {} is beyond its {len} elements",
                tensor.0
            ),
            Self::FieldCount { expected, got } => {
                write!(f, "the codelet has {expected} fields, {got} given")
            }
            Self::FieldType {
                field,
                expected,
                got,
            } => write!(f, "field {field} must be {expected}, the tensor is {got}"),
            Self::NotOnTile {
                field,
                tile,
                tensor,
                range,
            } => write!(
                f,
                "field {field} (elements {range:?} of tensor {}) is not within one interval on tile {tile}",
                tensor.0
            ),
            Self::Aliased { first, second } => {
                write!(f, "fields {first} and {second} overlap and one is written")
            }
            Self::Race {
                compute_set,
                tile,
                tensor,
            } => write!(
                f,
                "compute set {compute_set}: two vertices on tile {tile} touch the same elements of tensor {} and one writes them",
                tensor.0
            ),
            Self::CopyMismatch { copy } => {
                write!(
                    f,
                    "copy {copy} is between slices of different lengths or types"
                )
            }
            Self::MappingMismatch { tensor } => write!(
                f,
                "tensor {} must be mapped like the kernel's other tensors",
                tensor.0
            ),
            Self::ExchangeOverlap { tensor, at } => write!(
                f,
                "an exchange writes element {at} of tensor {} that it also reads or writes elsewhere",
                tensor.0
            ),
        }
    }
}

impl std::error::Error for GraphError {}

/// An interval of a tensor as stored: its tile and its piece there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Placed {
    pub(crate) tile: Tile,
    pub(crate) range: Range<u64>,
    pub(crate) piece: u32,
}

/// A tensor's description.
#[derive(Clone, Debug)]
pub(crate) struct TensorInfo {
    pub(crate) name: Arc<str>,
    pub(crate) dtype: DType,
    pub(crate) shape: Vec<u64>,
    pub(crate) len: u64,
    /// Sorted by start; they cover `0..len` exactly once.
    pub(crate) intervals: Vec<Placed>,
    /// How tile memory and the exchange hold its elements, if not as
    /// `dtype` ([`Graph::hold`]).
    pub(crate) held: Option<Encoding>,
}

/// What a tile stores: one entry per piece.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PieceInfo {
    pub(crate) tensor: TensorId,
    pub(crate) dtype: DType,
    pub(crate) len: u64,
    /// Its tensor's [`TensorInfo::held`].
    pub(crate) held: Option<Encoding>,
}

impl PieceInfo {
    /// Bytes the piece takes in tile memory ([`piece_bytes`]).
    pub(crate) const fn bytes(&self) -> u64 {
        piece_bytes(self.dtype, self.held, self.len)
    }
}

/// A vertex: a codelet on a tile, with its resolved fields.
#[derive(Clone, Debug)]
pub(crate) struct VertexInfo {
    pub(crate) tile: Tile,
    pub(crate) codelet: Arc<dyn Codelet>,
    pub(crate) fields: Vec<FieldRef>,
    pub(crate) tensors: Vec<TensorId>,
    pub(crate) cycles: VertexCycles,
}

/// A compute set.
#[derive(Clone, Debug)]
pub(crate) struct ComputeSetInfo {
    pub(crate) name: Arc<str>,
    pub(crate) vertices: Vec<VertexInfo>,
}

/// One contiguous run of a copy, from a piece on one tile to a piece on
/// another (or the same) tile.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Segment {
    pub(crate) src_tile: Tile,
    pub(crate) src_piece: u32,
    pub(crate) src: Range<usize>,
    pub(crate) dst_tile: Tile,
    pub(crate) dst_piece: u32,
    pub(crate) dst: Range<usize>,
    pub(crate) bytes: u64,
}

/// An exchange: copies done in one exchange phase.
#[derive(Clone, Debug)]
pub(crate) struct ExchangeInfo {
    pub(crate) name: Arc<str>,
    pub(crate) segments: Vec<Segment>,
}

/// Which way a host stream goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Host to device.
    ToDevice,
    /// Device to host.
    ToHost,
}

/// A host stream.
#[derive(Clone, Debug)]
pub(crate) struct StreamInfo {
    pub(crate) name: Arc<str>,
    pub(crate) tensor: TensorId,
    pub(crate) direction: Direction,
}

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

/// Bytes of `len` elements of `dtype`, or of `held` if the tensor is held
/// in another encoding ([`Graph::hold`]): what tile memory stores and the
/// exchange moves. Saturating.
#[must_use]
pub(crate) const fn held_bytes(dtype: DType, held: Option<Encoding>, len: u64) -> u64 {
    match held {
        Some(e) => e.bytes(len),
        None => len.saturating_mul(dtype.size()),
    }
}

/// Bytes a piece of `len` elements takes ([`held_bytes`]): rounded up to
/// 8 (the alignment of 64-bit loads); saturating (a sizing graph may hold
/// pieces no machine has the bytes for).
#[must_use]
pub(crate) const fn piece_bytes(dtype: DType, held: Option<Encoding>, len: u64) -> u64 {
    held_bytes(dtype, held, len).div_ceil(8).saturating_mul(8)
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
