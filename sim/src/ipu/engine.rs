//! The engine: a graph and a program, built (memory checked, costs
//! estimated) and run bulk-synchronously on host threads.

use core::fmt;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use super::codelet::{VertexCycles, VertexIo};
use super::exchange::ExchangeRun;
use super::graph::StreamId;
use super::graph::{Direction, Graph, GraphError, Segment, VertexInfo};
use super::host::HostBytes;
use super::memory::{MemoryUsage, OutOfMemory};
use super::profile::{
    ComputeSetRow, ExchangeRow, Phase, PhaseCycles, Profile, ProfileData, Step, StepKind,
    TargetInfo,
};
use super::program::Program;
use super::rng::Seeds;
use super::target::{LinkGroup, Tile};
use super::tensor::{Piece, Scalar, TensorId};

/// Settings of an [`Engine`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineOptions {
    /// The run's seeds (see [`Seeds`]).
    pub seeds: Seeds,
    /// Most supersteps recorded for the Chrome trace of one run (0 turns
    /// the trace off; later steps are counted but not recorded).
    pub trace_steps: usize,
}

impl Default for EngineOptions {
    /// Seed 0, replica 0, up to 100,000 traced steps.
    fn default() -> Self {
        Self {
            seeds: Seeds::new(0, 0),
            trace_steps: 100_000,
        }
    }
}

/// Why an engine could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildError {
    /// A tile needs more memory than it has.
    OutOfTileMemory(Box<OutOfMemory>),
    /// The graph breaks a rule checked at build time (races).
    Graph(GraphError),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfTileMemory(e) => e.fmt(f),
            Self::Graph(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why a tensor or stream could not be read or written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessError {
    /// The element type asked for is not the tensor's.
    WrongType {
        /// The tensor's type.
        dtype: super::DType,
        /// The type asked for.
        asked: super::DType,
    },
    /// The host slice has another length than the tensor.
    WrongLength {
        /// The tensor's elements.
        expected: u64,
        /// The slice's.
        got: u64,
    },
    /// A stream used in the wrong direction.
    WrongDirection,
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::WrongType { dtype, asked } => {
                write!(f, "the tensor holds {dtype}, not {asked}")
            }
            Self::WrongLength { expected, got } => {
                write!(f, "the tensor has {expected} elements, the slice {got}")
            }
            Self::WrongDirection => f.write_str("the stream goes the other way"),
        }
    }
}

impl std::error::Error for AccessError {}

/// A compute set ready to run: vertices grouped by tile, costs known.
#[derive(Debug)]
struct CompiledComputeSet {
    /// Vertices sorted by tile (stable).
    vertices: Vec<VertexInfo>,
    /// Tiles with at least one vertex, in order, and where their vertices
    /// end in `vertices` (each starts where the previous ends): memory
    /// per touched tile, not per tile of the target.
    touched: Vec<(Tile, u32)>,
    /// Tile cycles per touched tile.
    tile_cycles: Vec<(Tile, u64)>,
    /// The slowest tile's cycles and the tile.
    cycles: u64,
    busiest: Tile,
}

/// An exchange ready to run.
#[derive(Debug)]
struct CompiledExchange {
    run: ExchangeRun,
    cycles: u64,
    busiest: Tile,
    /// Bytes sent off-tile (multicast counted once per sender).
    bytes: u64,
    /// Bytes crossing IPU-Links (once per destination IPU).
    link_bytes: u64,
}

/// A host stream ready to run.
#[derive(Debug)]
struct CompiledStream {
    tensor: TensorId,
    direction: Direction,
    buffer: Piece,
    cycles: u64,
    bytes: u64,
}

/// Compute sets with this few tiles run on the calling thread.
const SEQUENTIAL_TILES: usize = 4;

/// A graph and a program, built: tile memory checked, cycles estimated,
/// every tile's tensors allocated (zeroed).
///
/// ```
/// use core::num::NonZeroU64;
/// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let spec = IpuSpec::new(IpuParams { tiles: 4, ..IpuParams::default() }).unwrap();
/// let mut g = Graph::new(Target::single(spec));
/// let x = g.add_tensor("x", DType::F32, &[10], Mapping::linear(NonZeroU64::MIN)).unwrap();
/// let mut e = Engine::new(g, Program::empty(), EngineOptions::default()).unwrap();
/// e.write_tensor(x, &[1.0f32; 10]).unwrap();
/// assert_eq!(e.read_tensor::<f32>(x).unwrap(), vec![1.0; 10]);
/// ```
#[derive(Debug)]
pub struct Engine {
    graph: Graph,
    program: Arc<Program>,
    options: EngineOptions,
    tiles: Vec<Vec<Piece>>,
    compute_sets: Vec<CompiledComputeSet>,
    exchanges: Vec<CompiledExchange>,
    streams: Vec<CompiledStream>,
    memory: MemoryUsage,
}

impl Engine {
    /// Builds `program` over `graph`: checks races and every tile's memory,
    /// estimates every step's cycles, allocates the tiles' tensors.
    ///
    /// # Errors
    /// [`BuildError::OutOfTileMemory`] naming the first tile over its
    /// memory; [`BuildError::Graph`] for a compute set with a race.
    ///
    /// ```
    /// use tessera_sim::ipu::{BuildError, DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let fits = g.clone();
    /// assert!(Engine::new(fits, Program::empty(), EngineOptions::default()).is_ok());
    /// g.add_tensor("big", DType::F32, &[1 << 20], Mapping::one_tile(1, 1 << 20))?; // 4 MiB on a tile
    /// let over = Engine::new(g, Program::empty(), EngineOptions::default());
    /// assert!(matches!(over, Err(BuildError::OutOfTileMemory(e)) if e.tile == 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn new(
        mut graph: Graph,
        program: Program,
        options: EngineOptions,
    ) -> Result<Self, BuildError> {
        let memory = MemoryUsage::of(&graph);
        memory.check(&graph).map_err(BuildError::OutOfTileMemory)?;
        // The vertices and copies move into their compiled forms: one copy
        // of them on the host, not two.
        let mut compute_sets = Vec::with_capacity(graph.compute_sets.len());
        for k in 0..graph.compute_sets.len() {
            let vertices = core::mem::take(&mut graph.compute_sets[k].vertices);
            let name = &graph.compute_sets[k].name;
            compute_sets
                .push(compile_compute_set(&graph, name, vertices).map_err(BuildError::Graph)?);
        }
        let mut exchanges = Vec::with_capacity(graph.exchanges.len());
        for k in 0..graph.exchanges.len() {
            let segments = core::mem::take(&mut graph.exchanges[k].segments);
            exchanges.push(compile_exchange(&graph, segments));
        }
        let streams = graph
            .streams
            .iter()
            .map(|s| {
                let t = &graph.tensors[s.tensor.index()];
                let mut per_ipu = vec![0u64; graph.target.ipus() as usize];
                for p in &t.intervals {
                    per_ipu[graph.target.ipu_of(p.tile) as usize] +=
                        (p.range.end - p.range.start) * t.dtype.size();
                }
                let max = per_ipu.iter().copied().max().unwrap_or(0);
                CompiledStream {
                    tensor: s.tensor,
                    direction: s.direction,
                    buffer: Piece::zeroed(t.dtype, t.len as usize),
                    cycles: graph.target.spec().host_cycles(max),
                    bytes: t.len * t.dtype.size(),
                }
            })
            .collect();
        let tiles = graph
            .tiles
            .iter()
            .map(|pieces| {
                pieces
                    .iter()
                    .map(|p| Piece::zeroed(p.dtype, p.len as usize))
                    .collect()
            })
            .collect();
        Ok(Self {
            graph,
            program: Arc::new(program),
            options,
            tiles,
            compute_sets,
            exchanges,
            streams,
            memory,
        })
    }

    /// The graph (its vertices and copies moved into the engine: its
    /// compute sets and exchanges keep only their names).
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let engine = Engine::new(g, Program::empty(), EngineOptions::default())?;
    /// assert_eq!(engine.graph().name(x), "x");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Every tile's memory.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let engine = Engine::new(g, Program::empty(), EngineOptions::default())?;
    /// assert_eq!(engine.memory().tiles[0].tensors, 16);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn memory(&self) -> &MemoryUsage {
        &self.memory
    }

    /// The host memory the engine's data takes, by kind (see
    /// [`HostBytes`]).
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let engine = Engine::new(g, Program::empty(), EngineOptions::default())?;
    /// let host = engine.host_bytes();
    /// assert!(host.tensors >= 16 && host.total() > host.tensors);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn host_bytes(&self) -> HostBytes {
        let size = |n: usize, each: usize| (n * each) as u64;
        let piece = |p: &Piece| p.len() as u64 * p.dtype().size();
        let tensors = self.tiles.iter().flatten().map(piece).sum::<u64>()
            + self.streams.iter().map(|s| piece(&s.buffer)).sum::<u64>()
            + self
                .graph
                .tensors
                .iter()
                .map(|t| size(t.intervals.len(), size_of::<super::graph::Placed>()))
                .sum::<u64>();
        let vertices = self
            .compute_sets
            .iter()
            .map(|c| {
                let fields: usize = c.vertices.iter().map(|v| v.fields.len()).sum();
                let ids: usize = c.vertices.iter().map(|v| v.tensors.len()).sum();
                size(c.vertices.len(), size_of::<VertexInfo>())
                    + size(fields, size_of::<super::codelet::FieldRef>())
                    + size(ids, size_of::<TensorId>())
                    + size(c.touched.len(), size_of::<(Tile, u32)>())
                    + size(c.tile_cycles.len(), size_of::<(Tile, u64)>())
            })
            .sum();
        let exchanges = self.exchanges.iter().map(|e| e.run.host_bytes()).sum();
        let tiles = self.tiles.len();
        let per_tile = size(tiles, size_of::<Vec<Piece>>())
            + size(tiles, size_of::<Vec<super::graph::PieceInfo>>())
            + size(
                self.memory.tiles.len(),
                size_of::<super::memory::TileMemory>(),
            )
            + size(self.graph.tensor_bytes.len(), size_of::<u64>());
        HostBytes {
            tensors,
            vertices,
            exchanges,
            per_tile,
        }
    }

    /// The estimated cycles of one execution of a compute set (its
    /// slowest tile) and that tile.
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
    /// let x = g.add_tensor("x", DType::F32, &[8], Mapping::one_tile(1, 8))?;
    /// let y = g.add_tensor("y", DType::F32, &[8], Mapping::one_tile(1, 8))?;
    /// let cs = g.add_compute_set("double");
    /// g.add_vertex(cs, 1, Arc::new(Double), &[g.all(x), g.all(y)])?;
    /// let engine = Engine::new(g, Program::Execute(cs), EngineOptions::default())?;
    /// // The compute set's start, and 8 thread cycles on one of 6 round-robin workers.
    /// assert_eq!(engine.compute_set_cycles(cs), (50 + 6 * 8, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn compute_set_cycles(&self, cs: super::ComputeSetId) -> (u64, Tile) {
        let c = &self.compute_sets[cs.0 as usize];
        (c.cycles, c.busiest)
    }

    /// The estimated cycles of one execution of an exchange.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let y = g.add_tensor("y", DType::F32, &[4], Mapping::one_tile(1, 4))?;
    /// let ex = g.add_exchange("x to y", &[(g.all(x), g.all(y))])?;
    /// let engine = Engine::new(g, Program::Exchange(ex), EngineOptions::default())?;
    /// assert_eq!(engine.exchange_cycles(ex), 16 / 4); // 16 bytes, 4 a cycle
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn exchange_cycles(&self, ex: super::ExchangeId) -> u64 {
        self.exchanges[ex.0 as usize].cycles
    }

    /// Writes a whole tensor from the host, outside any program (not
    /// timed; Poplar's `Engine::writeTensor`).
    ///
    /// # Errors
    /// [`AccessError::WrongType`], [`AccessError::WrongLength`].
    ///
    /// ```
    /// use tessera_sim::ipu::AccessError;
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let mut engine = Engine::new(g, Program::empty(), EngineOptions::default())?;
    /// engine.write_tensor(x, &[1.0f32, 2.0, 3.0, 4.0])?;
    /// let short = engine.write_tensor(x, &[1.0f32]);
    /// assert_eq!(short, Err(AccessError::WrongLength { expected: 4, got: 1 }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn write_tensor<T: Scalar>(&mut self, t: TensorId, data: &[T]) -> Result<(), AccessError> {
        self.check_access::<T>(t, data.len())?;
        for p in &self.graph.tensors[t.index()].intervals {
            let dst = T::slice_mut(&mut self.tiles[p.tile as usize][p.piece as usize])
                .expect("type checked");
            dst.copy_from_slice(&data[p.range.start as usize..p.range.end as usize]);
        }
        Ok(())
    }

    /// Reads a whole tensor to the host, outside any program.
    ///
    /// # Errors
    /// [`AccessError::WrongType`].
    ///
    /// ```
    /// use tessera_sim::ipu::AccessError;
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let mut engine = Engine::new(g, Program::empty(), EngineOptions::default())?;
    /// engine.write_tensor(x, &[1.0f32, 2.0, 3.0, 4.0])?;
    /// assert_eq!(engine.read_tensor::<f32>(x)?, [1.0, 2.0, 3.0, 4.0]);
    /// let wrong = engine.read_tensor::<i64>(x);
    /// assert_eq!(wrong, Err(AccessError::WrongType { dtype: DType::F32, asked: DType::I64 }));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_tensor<T: Scalar>(&self, t: TensorId) -> Result<Vec<T>, AccessError> {
        let len = self.graph.len(t) as usize;
        self.check_access::<T>(t, len)?;
        let mut out = vec![T::default(); len];
        for p in &self.graph.tensors[t.index()].intervals {
            let src =
                T::slice(&self.tiles[p.tile as usize][p.piece as usize]).expect("type checked");
            out[p.range.start as usize..p.range.end as usize].copy_from_slice(src);
        }
        Ok(out)
    }

    fn check_access<T: Scalar>(&self, t: TensorId, len: usize) -> Result<(), AccessError> {
        let dtype = self.graph.dtype(t);
        if dtype != T::DTYPE {
            return Err(AccessError::WrongType {
                dtype,
                asked: T::DTYPE,
            });
        }
        let expected = self.graph.len(t);
        if len as u64 != expected {
            return Err(AccessError::WrongLength {
                expected,
                got: len as u64,
            });
        }
        Ok(())
    }

    /// Fills a host-to-device stream's buffer, which
    /// [`Program::HostWrite`] copies into its tensor.
    ///
    /// # Errors
    /// [`AccessError`] for the wrong type, length or direction.
    ///
    /// ```
    /// use tessera_sim::ipu::{AccessError, Direction};
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let input = g.add_stream("x in", x, Direction::ToDevice);
    /// let output = g.add_stream("x out", x, Direction::ToHost);
    /// let mut engine = Engine::new(g, Program::HostWrite(input), EngineOptions::default())?;
    /// engine.stream_write(input, &[1.0f32, 2.0, 3.0, 4.0])?;
    /// engine.run();
    /// assert_eq!(engine.read_tensor::<f32>(x)?, [1.0, 2.0, 3.0, 4.0]);
    /// assert_eq!(engine.stream_write(output, &[0.0f32; 4]), Err(AccessError::WrongDirection));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stream_write<T: Scalar>(&mut self, s: StreamId, data: &[T]) -> Result<(), AccessError> {
        let st = &mut self.streams[s.0 as usize];
        if st.direction != Direction::ToDevice {
            return Err(AccessError::WrongDirection);
        }
        let dtype = st.buffer.dtype();
        let buf = T::slice_mut(&mut st.buffer).ok_or(AccessError::WrongType {
            dtype,
            asked: T::DTYPE,
        })?;
        if buf.len() != data.len() {
            return Err(AccessError::WrongLength {
                expected: buf.len() as u64,
                got: data.len() as u64,
            });
        }
        buf.copy_from_slice(data);
        Ok(())
    }

    /// A device-to-host stream's buffer, as [`Program::HostRead`] last
    /// filled it.
    ///
    /// # Errors
    /// [`AccessError`] for the wrong type or direction.
    ///
    /// ```
    /// use tessera_sim::ipu::Direction;
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let output = g.add_stream("x out", x, Direction::ToHost);
    /// let mut engine = Engine::new(g, Program::HostRead(output), EngineOptions::default())?;
    /// engine.write_tensor(x, &[1.0f32, 2.0, 3.0, 4.0])?;
    /// engine.run();
    /// assert_eq!(engine.stream_read::<f32>(output)?, [1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stream_read<T: Scalar>(&self, s: StreamId) -> Result<&[T], AccessError> {
        let st = &self.streams[s.0 as usize];
        if st.direction != Direction::ToHost {
            return Err(AccessError::WrongDirection);
        }
        T::slice(&st.buffer).ok_or(AccessError::WrongType {
            dtype: st.buffer.dtype(),
            asked: T::DTYPE,
        })
    }

    /// Runs the program once and returns its profile.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let y = g.add_tensor("y", DType::F32, &[4], Mapping::one_tile(1, 4))?;
    /// let ex = g.add_exchange("x to y", &[(g.all(x), g.all(y))])?;
    /// let mut engine = Engine::new(g, Program::repeat(2, Program::Exchange(ex)), EngineOptions::default())?;
    /// engine.write_tensor(x, &[1.0f32, 2.0, 3.0, 4.0])?;
    /// let profile = engine.run();
    /// assert_eq!(engine.read_tensor::<f32>(y)?, [1.0, 2.0, 3.0, 4.0]);
    /// assert_eq!(profile.cycles.exchange, 2 * engine.exchange_cycles(ex));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run(&mut self) -> Profile {
        let started = Instant::now();
        let program = Arc::clone(&self.program);
        let mut acc = Acc {
            cycles: PhaseCycles::default(),
            supersteps: 0,
            cs_runs: vec![0; self.compute_sets.len()],
            ex_runs: vec![0; self.exchanges.len()],
            stream_runs: vec![0; self.streams.len()],
            steps: Vec::new(),
            trace_steps: self.options.trace_steps,
            steps_dropped: 0,
        };
        self.exec(&program, &mut acc);
        let wall = started.elapsed().as_secs_f64();
        RUN_SECONDS.set(RUN_SECONDS.get() + wall);
        self.profile(acc, wall)
    }

    fn exec(&mut self, p: &Program, acc: &mut Acc) {
        match p {
            Program::Execute(cs) => {
                let k = cs.0 as usize;
                self.execute_compute_set(k);
                let c = &self.compute_sets[k];
                acc.cs_runs[k] += 1;
                acc.record(
                    Phase::Compute,
                    StepKind::ComputeSet(k),
                    c.cycles,
                    Some(c.busiest),
                );
                acc.sync(self.graph.target.sync_cycles());
            }
            Program::Exchange(ex) => {
                let k = ex.0 as usize;
                self.execute_exchange(k);
                let e = &self.exchanges[k];
                acc.ex_runs[k] += 1;
                acc.record(
                    Phase::Exchange,
                    StepKind::Exchange(k),
                    e.cycles,
                    Some(e.busiest),
                );
            }
            Program::Sequence(ps) => {
                for p in ps {
                    self.exec(p, acc);
                }
            }
            Program::Repeat { count, body } => {
                for _ in 0..*count {
                    self.exec(body, acc);
                }
            }
            Program::HostWrite(s) | Program::HostRead(s) => {
                let k = s.0 as usize;
                let to_device = matches!(p, Program::HostWrite(_));
                self.execute_stream(k, to_device);
                acc.stream_runs[k] += 1;
                acc.record(
                    Phase::Host,
                    StepKind::Stream(k),
                    self.streams[k].cycles,
                    None,
                );
                acc.sync(self.graph.target.sync_cycles());
            }
        }
    }

    fn execute_compute_set(&mut self, k: usize) {
        let cs = &self.compute_sets[k];
        let seeds = self.options.seeds;
        let workers = self.graph.target.spec().workers_per_tile();
        let run_tile = |k: usize, pieces: &mut Vec<Piece>| {
            let (tile, end) = cs.touched[k];
            let start = k.checked_sub(1).map_or(0, |p| cs.touched[p].1);
            for v in &cs.vertices[start as usize..end as usize] {
                let mut io = VertexIo {
                    pieces,
                    fields: &v.fields,
                    tile,
                    workers_per_tile: workers,
                    seeds,
                };
                v.codelet.run(&mut io);
            }
        };
        if cs.touched.len() <= SEQUENTIAL_TILES {
            for (k, &(t, _)) in cs.touched.iter().enumerate() {
                run_tile(k, &mut self.tiles[t as usize]);
            }
        } else {
            // Only the touched tiles go to rayon: a compute set on a few of
            // 1,472 tiles would otherwise split and visit them all.
            let mut touched = Vec::with_capacity(cs.touched.len());
            let (mut rest, mut base) = (&mut self.tiles[..], 0);
            for &(t, _) in &cs.touched {
                let (_, tail) = rest.split_at_mut(t as usize - base);
                let (pieces, tail) = tail.split_first_mut().expect("a tile of the target");
                touched.push(pieces);
                (rest, base) = (tail, t as usize + 1);
            }
            touched
                .par_iter_mut()
                .enumerate()
                .for_each(|(k, pieces)| run_tile(k, pieces));
        }
    }

    fn execute_exchange(&mut self, k: usize) {
        self.exchanges[k].run.run(&mut self.tiles);
    }

    fn execute_stream(&mut self, k: usize, to_device: bool) {
        let st = &mut self.streams[k];
        let info = &self.graph.tensors[st.tensor.index()];
        for p in &info.intervals {
            let range = p.range.start as usize..p.range.end as usize;
            let piece = &mut self.tiles[p.tile as usize][p.piece as usize];
            let len = range.len();
            if to_device {
                piece.copy_from(0..len, &st.buffer, range);
            } else {
                st.buffer.copy_from(range, piece, 0..len);
            }
        }
    }

    fn profile(&self, acc: Acc, wall: f64) -> Profile {
        let target = &self.graph.target;
        let spec = target.spec();
        let data = ProfileData {
            target: TargetInfo {
                ipus: target.ipus(),
                tiles_per_ipu: spec.tiles(),
                tiles: target.tiles(),
                workers_per_tile: spec.workers_per_tile(),
                memory_per_tile: spec.memory_per_tile(),
                clock_hz: spec.clock_hz(),
            },
            cycles: acc.cycles,
            supersteps: acc.supersteps,
            wall_seconds: wall,
            compute_sets: self
                .graph
                .compute_sets
                .iter()
                .zip(&self.compute_sets)
                .zip(&acc.cs_runs)
                .map(|((info, c), &runs)| ComputeSetRow {
                    name: info.name.clone(),
                    tile_cycles: &c.tile_cycles,
                    cycles: c.cycles,
                    busiest: c.busiest,
                    runs,
                })
                .collect(),
            exchanges: self
                .graph
                .exchanges
                .iter()
                .zip(&self.exchanges)
                .zip(&acc.ex_runs)
                .map(|((info, c), &runs)| ExchangeRow {
                    name: info.name.clone(),
                    cycles: c.cycles,
                    bytes: c.bytes,
                    link_bytes: c.link_bytes,
                    runs,
                })
                .collect(),
            streams: self
                .graph
                .streams
                .iter()
                .zip(&self.streams)
                .zip(&acc.stream_runs)
                .map(|((info, c), &runs)| (info.name.clone(), c.cycles, c.bytes, runs))
                .collect(),
            memory: &self.memory,
            steps: acc.steps,
            steps_dropped: acc.steps_dropped,
        };
        Profile::new(data, target)
    }
}

std::thread_local! {
    static RUN_SECONDS: core::cell::Cell<f64> = const { core::cell::Cell::new(0.0) };
}

/// Wall seconds this thread has spent in [`Engine::run`] since it started:
/// how a benchmark separates running a program from building its engine
/// when both happen inside a function it calls (the layer runners of
/// [`model`](crate::model)).
///
/// ```
/// use tessera_sim::ipu::{Engine, EngineOptions, Graph, Program, Target, run_seconds_on_this_thread};
/// use tessera_sim::IpuSpec;
///
/// let graph = Graph::new(Target::single(IpuSpec::MK2_GC200));
/// let mut engine = Engine::new(graph, Program::empty(), EngineOptions::default())?;
/// let before = run_seconds_on_this_thread();
/// engine.run();
/// assert!(run_seconds_on_this_thread() >= before);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn run_seconds_on_this_thread() -> f64 {
    RUN_SECONDS.get()
}

/// What a run accumulates.
struct Acc {
    cycles: PhaseCycles,
    supersteps: u64,
    cs_runs: Vec<u64>,
    ex_runs: Vec<u64>,
    stream_runs: Vec<u64>,
    steps: Vec<Step>,
    trace_steps: usize,
    steps_dropped: u64,
}

impl Acc {
    fn record(&mut self, phase: Phase, kind: StepKind, cycles: u64, tile: Option<Tile>) {
        let start = self.cycles.total();
        match phase {
            Phase::Compute => self.cycles.compute += cycles,
            Phase::Exchange => self.cycles.exchange += cycles,
            Phase::Host => self.cycles.host += cycles,
            Phase::Sync => self.cycles.sync += cycles,
        }
        if self.steps.len() < self.trace_steps {
            self.steps.push(Step {
                phase,
                kind,
                start,
                cycles,
                tile,
            });
        } else {
            self.steps_dropped += 1;
        }
    }

    fn sync(&mut self, cycles: u64) {
        self.supersteps += 1;
        self.record(Phase::Sync, StepKind::Sync, cycles, None);
    }
}

/// Groups a compute set's vertices by tile, checks races, estimates
/// cycles.
fn compile_compute_set(
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
fn compile_exchange(graph: &Graph, segments: Vec<Segment>) -> CompiledExchange {
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
