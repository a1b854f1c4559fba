//! The engine: a graph and a program, built (memory checked, costs
//! estimated) and run bulk-synchronously on host threads.

use std::sync::Arc;

use super::graph::{Direction, Graph, StreamId, VertexInfo};
use super::host::HostBytes;
use super::memory::MemoryUsage;
use super::program::Program;
use super::rng::Seeds;
use super::target::Tile;
use super::tensor::{Piece, Scalar, TensorId};

mod compile;
mod error;
mod run;

use compile::{
    CompiledComputeSet, CompiledExchange, CompiledStream, compile_compute_set, compile_exchange,
};
pub use error::{AccessError, BuildError};
pub use run::run_seconds_on_this_thread;

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
}
