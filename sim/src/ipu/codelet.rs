//! Codelets and vertices: the code a tile runs on its own memory.
//!
//! A [`Codelet`] is the code (Poplar's codelet: a vertex class); a vertex
//! is an instance of it on one tile, connected to fields: slices of
//! tensors held by that tile. A codelet declares its fields' types and
//! access ([`FieldSpec`]), estimates its cycles from the fields' lengths
//! ([`VertexCycles`]) and runs on the fields through [`VertexIo`].
//!
//! # Workers
//!
//! A tile has `workers_per_tile` hardware contexts, served round-robin:
//! each issues one instruction every `workers_per_tile` tile cycles. A
//! [`VertexCycles::Worker`] vertex occupies one context; a
//! [`VertexCycles::AllWorkers`] vertex (PopLibs' multi-vertex) splits its
//! work over every context. The engine places a tile's worker vertices of
//! one compute set on its contexts greedily (each on the least-loaded
//! context, in the order they were added), adds multi-vertices to every
//! context, and charges the tile `workers_per_tile * max(context load)` tile
//! cycles plus the supervisor's [`compute_set_cycles`]. On the host a
//! vertex runs once, whatever its workers: the numbers do not depend on
//! the split (see the crate's `# Determinism`).
//!
//! [`compute_set_cycles`]: super::IpuParams::compute_set_cycles

use core::fmt;
use core::ops::Range;

use tessera_core::rng::RandomStream;

use super::rng::{Seeds, StreamKind};
use super::spec::IpuSpec;
use super::target::Tile;
use super::tensor::{DType, Piece, Scalar};

/// How a vertex uses a field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Read only.
    Read,
    /// Written (its contents on entry are not read).
    Write,
    /// Read and written.
    ReadWrite,
}

impl Access {
    /// Whether the vertex writes the field.
    ///
    /// ```
    /// use tessera_sim::ipu::Access;
    ///
    /// assert!(!Access::Read.writes());
    /// assert!(Access::Write.writes() && Access::ReadWrite.writes());
    /// ```
    #[must_use]
    pub const fn writes(self) -> bool {
        !matches!(self, Self::Read)
    }
}

/// The type and access of one field of a codelet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldSpec {
    /// The element type.
    pub dtype: DType,
    /// How the vertex uses it.
    pub access: Access,
}

impl FieldSpec {
    /// A field of `dtype` used as `access`.
    ///
    /// ```
    /// use tessera_sim::ipu::{Access, DType, FieldSpec};
    ///
    /// let f = FieldSpec::new(DType::F16, Access::ReadWrite);
    /// assert_eq!((f.dtype, f.access), (DType::F16, Access::ReadWrite));
    /// ```
    #[must_use]
    pub const fn new(dtype: DType, access: Access) -> Self {
        Self { dtype, access }
    }
}

/// A vertex's cycle estimate, in worker-thread cycles.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VertexCycles {
    /// Runs on one worker context for this many thread cycles.
    Worker(u64),
    /// Runs on every worker context of the tile, the busiest for this many
    /// thread cycles.
    AllWorkers(u64),
}

/// The code of a vertex.
pub trait Codelet: Send + Sync + fmt::Debug {
    /// A name for profiles; codelets of one name share code memory on a
    /// tile.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// /// `y = 2 x` over f32 fields `[x, y]`, one worker, a cycle per element.
    /// #[derive(Debug)]
    /// struct Double;
    ///
    /// impl Codelet for Double {
    ///     fn name(&self) -> &str {
    ///         "double"
    ///     }
    ///     fn fields(&self) -> &[FieldSpec] {
    ///         const FIELDS: [FieldSpec; 2] =
    ///             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    ///         &FIELDS
    ///     }
    ///     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles {
    ///         VertexCycles::Worker(lens[0])
    ///     }
    ///     fn run(&self, io: &mut VertexIo<'_>) {
    ///         let [x, y] = io.many([0, 1]).map(FieldMut::into_slice::<f32>);
    ///         y.iter_mut().zip(x.iter()).for_each(|(y, x)| *y = 2.0 * *x);
    ///     }
    /// }
    ///
    /// let spec = IpuSpec::new(IpuParams { tiles: 1, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(spec));
    /// let x = g.add_tensor("x", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let y = g.add_tensor("y", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let cs = g.add_compute_set("double");
    /// assert_eq!(Double.name(), "double");
    /// ```
    fn name(&self) -> &str;

    /// The fields a vertex of this codelet is connected to, in order.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// /// `y = 2 x` over f32 fields `[x, y]`, one worker, a cycle per element.
    /// #[derive(Debug)]
    /// struct Double;
    ///
    /// impl Codelet for Double {
    ///     fn name(&self) -> &str {
    ///         "double"
    ///     }
    ///     fn fields(&self) -> &[FieldSpec] {
    ///         const FIELDS: [FieldSpec; 2] =
    ///             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    ///         &FIELDS
    ///     }
    ///     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles {
    ///         VertexCycles::Worker(lens[0])
    ///     }
    ///     fn run(&self, io: &mut VertexIo<'_>) {
    ///         let [x, y] = io.many([0, 1]).map(FieldMut::into_slice::<f32>);
    ///         y.iter_mut().zip(x.iter()).for_each(|(y, x)| *y = 2.0 * *x);
    ///     }
    /// }
    ///
    /// let spec = IpuSpec::new(IpuParams { tiles: 1, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(spec));
    /// let x = g.add_tensor("x", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let y = g.add_tensor("y", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let cs = g.add_compute_set("double");
    /// assert_eq!(Double.fields()[1], FieldSpec::new(DType::F32, Access::Write));
    /// // A vertex connects one slice per field.
    /// let err = g.add_vertex(cs, 0, Arc::new(Double), &[g.all(x)]).unwrap_err();
    /// assert_eq!(err, GraphError::FieldCount { expected: 2, got: 1 });
    /// ```
    fn fields(&self) -> &[FieldSpec];

    /// The vertex's cycles for fields of `lens` elements on an IPU `spec`.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// /// `y = 2 x` over f32 fields `[x, y]`, one worker, a cycle per element.
    /// #[derive(Debug)]
    /// struct Double;
    ///
    /// impl Codelet for Double {
    ///     fn name(&self) -> &str {
    ///         "double"
    ///     }
    ///     fn fields(&self) -> &[FieldSpec] {
    ///         const FIELDS: [FieldSpec; 2] =
    ///             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    ///         &FIELDS
    ///     }
    ///     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles {
    ///         VertexCycles::Worker(lens[0])
    ///     }
    ///     fn run(&self, io: &mut VertexIo<'_>) {
    ///         let [x, y] = io.many([0, 1]).map(FieldMut::into_slice::<f32>);
    ///         y.iter_mut().zip(x.iter()).for_each(|(y, x)| *y = 2.0 * *x);
    ///     }
    /// }
    ///
    /// let spec = IpuSpec::new(IpuParams { tiles: 1, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(spec));
    /// let x = g.add_tensor("x", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let y = g.add_tensor("y", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let cs = g.add_compute_set("double");
    /// assert_eq!(Double.cycles(&[8, 8], &spec), VertexCycles::Worker(8));
    /// // The engine charges the tile the workers' round-robin: 6 tile cycles
    /// // per thread cycle, plus the compute set's start.
    /// g.add_vertex(cs, 0, Arc::new(Double), &[g.all(x), g.all(y)]).unwrap();
    /// let e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// let start = u64::from(spec.params().compute_set_cycles);
    /// assert_eq!(e.compute_set_cycles(cs), (6 * 8 + start, 0));
    /// ```
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles;

    /// Runs the vertex.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// /// `y = 2 x` over f32 fields `[x, y]`, one worker, a cycle per element.
    /// #[derive(Debug)]
    /// struct Double;
    ///
    /// impl Codelet for Double {
    ///     fn name(&self) -> &str {
    ///         "double"
    ///     }
    ///     fn fields(&self) -> &[FieldSpec] {
    ///         const FIELDS: [FieldSpec; 2] =
    ///             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    ///         &FIELDS
    ///     }
    ///     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles {
    ///         VertexCycles::Worker(lens[0])
    ///     }
    ///     fn run(&self, io: &mut VertexIo<'_>) {
    ///         let [x, y] = io.many([0, 1]).map(FieldMut::into_slice::<f32>);
    ///         y.iter_mut().zip(x.iter()).for_each(|(y, x)| *y = 2.0 * *x);
    ///     }
    /// }
    ///
    /// let spec = IpuSpec::new(IpuParams { tiles: 1, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(spec));
    /// let x = g.add_tensor("x", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let y = g.add_tensor("y", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let cs = g.add_compute_set("double");
    /// g.add_vertex(cs, 0, Arc::new(Double), &[g.all(x), g.all(y)]).unwrap();
    /// let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// e.write_tensor(x, &[0.5f32, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0]).unwrap();
    /// e.run();
    /// assert_eq!(e.read_tensor::<f32>(y).unwrap(), [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    /// ```
    fn run(&self, io: &mut VertexIo<'_>);
}

/// A field of a vertex, resolved to the piece of its tile that holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FieldRef {
    /// Index of the piece in its tile's pieces.
    pub(crate) piece: u32,
    /// The elements within the piece.
    pub(crate) local: Range<usize>,
    /// The position of the field's first element in its tensor.
    pub(crate) start: u64,
}

/// A vertex's view of its tile while it runs.
pub struct VertexIo<'a> {
    pub(crate) pieces: &'a mut [Piece],
    pub(crate) fields: &'a [FieldRef],
    pub(crate) tile: Tile,
    pub(crate) workers_per_tile: u32,
    pub(crate) seeds: Seeds,
}

/// One field, borrowed mutably by [`VertexIo::many`].
pub struct FieldMut<'a> {
    piece: &'a mut Piece,
    local: Range<usize>,
}

impl<'a> FieldMut<'a> {
    /// The field as a slice of `T`.
    ///
    /// # Panics
    /// If the field's type is not `T` (the graph checks the codelet's
    /// declared types, so this is a codelet bug).
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// // y = 2 x, through the fields taken together.
    /// let y = vertex(|io| {
    ///     let [x, y] = io.many([0, 1]);
    ///     let (x, y) = (x.into_slice::<f32>(), y.into_slice::<f32>());
    ///     y.iter_mut().zip(x).for_each(|(y, x)| *y = 2.0 * *x);
    /// });
    /// assert_eq!(y, [0.0, 0.0, 0.0, 0.0, 8.0, 10.0, 12.0, 14.0]);
    /// ```
    #[must_use]
    pub fn into_slice<T: Scalar>(self) -> &'a mut [T] {
        let dtype = self.piece.dtype();
        let all = T::slice_mut(self.piece)
            .unwrap_or_else(|| panic!("field of {dtype} read as {}", T::DTYPE));
        &mut all[self.local]
    }
}

impl VertexIo<'_> {
    /// The tile the vertex runs on.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// let y = vertex(|io| io.write::<f32>(1)[0] = io.tile() as f32);
    /// assert_eq!(y[4], 1.0);
    /// ```
    #[must_use]
    pub const fn tile(&self) -> Tile {
        self.tile
    }

    /// The position, in its tensor, of field `field`'s first element.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// let y = vertex(|io| io.write::<f32>(1)[0] = io.start(0) as f32);
    /// assert_eq!(y[4], 4.0);
    /// ```
    #[must_use]
    pub fn start(&self, field: usize) -> u64 {
        self.fields[field].start
    }

    /// Elements in field `field`.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// let y = vertex(|io| io.write::<f32>(1)[0] = io.len(0) as f32);
    /// assert_eq!(y[4], 4.0);
    /// ```
    #[must_use]
    pub fn len(&self, field: usize) -> usize {
        self.fields[field].local.len()
    }

    /// Field `field` as a slice of `T`.
    ///
    /// # Panics
    /// If the field's type is not `T`.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// // y[4] = the sum of x[4..8].
    /// let y = vertex(|io| io.write::<f32>(1)[0] = io.read::<f32>(0).iter().sum());
    /// assert_eq!(y[4], 4.0 + 5.0 + 6.0 + 7.0);
    /// ```
    #[must_use]
    pub fn read<T: Scalar>(&self, field: usize) -> &[T] {
        let f = &self.fields[field];
        let piece = &self.pieces[f.piece as usize];
        let all = T::slice(piece)
            .unwrap_or_else(|| panic!("field of {} read as {}", piece.dtype(), T::DTYPE));
        &all[f.local.clone()]
    }

    /// Field `field` as a mutable slice of `T`.
    ///
    /// # Panics
    /// If the field's type is not `T`.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// let y = vertex(|io| io.write::<f32>(1).fill(-1.0));
    /// assert_eq!(y, [0.0, 0.0, 0.0, 0.0, -1.0, -1.0, -1.0, -1.0]);
    /// ```
    #[must_use]
    pub fn write<T: Scalar>(&mut self, field: usize) -> &mut [T] {
        let f = &self.fields[field];
        FieldMut {
            piece: &mut self.pieces[f.piece as usize],
            local: f.local.clone(),
        }
        .into_slice()
    }

    /// Several fields at once, mutably (read-only ones too, to pass them
    /// beside written ones).
    ///
    /// # Panics
    /// If two of the fields are in one piece (the same interval of one
    /// tensor): take those one at a time.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// // y = x + 1, reading x while writing y.
    /// let y = vertex(|io| {
    ///     let [x, y] = io.many([0, 1]).map(FieldMut::into_slice::<f32>);
    ///     y.iter_mut().zip(x.iter()).for_each(|(y, x)| *y = *x + 1.0);
    /// });
    /// assert_eq!(y[4..], [5.0, 6.0, 7.0, 8.0]);
    /// ```
    #[must_use]
    pub fn many<const N: usize>(&mut self, fields: [usize; N]) -> [FieldMut<'_>; N] {
        let index = fields.map(|f| self.fields[f].piece as usize);
        let locals = fields.map(|f| self.fields[f].local.clone());
        let pieces = self
            .pieces
            .get_disjoint_mut(index)
            .unwrap_or_else(|e| panic!("fields {fields:?} share a piece: {e}"));
        let mut locals = locals.into_iter();
        pieces.map(|piece| FieldMut {
            piece,
            local: locals.next().expect("one range per field"),
        })
    }

    /// The random stream of `worker` (in `0..workers_per_tile`) of this
    /// tile, of `kind` (see [`Seeds`]), for codelets that draw random bits
    /// in sequence as the hardware does.
    ///
    /// ```
    /// # use core::num::NonZeroU64;
    /// # use std::sync::Arc;
    /// # use tessera_sim::ipu::*;
    /// # use tessera_sim::{IpuParams, IpuSpec};
    /// # // A codelet that runs a function, with fields x (read) and y (written).
    /// # #[derive(Debug)]
    /// # struct Run(fn(&mut VertexIo<'_>));
    /// # impl Codelet for Run {
    /// #     fn name(&self) -> &str { "run" }
    /// #     fn fields(&self) -> &[FieldSpec] {
    /// #         const F: [FieldSpec; 2] =
    /// #             [FieldSpec::new(DType::F32, Access::Read), FieldSpec::new(DType::F32, Access::Write)];
    /// #         &F
    /// #     }
    /// #     fn cycles(&self, lens: &[u64], _: &IpuSpec) -> VertexCycles { VertexCycles::Worker(lens[0]) }
    /// #     fn run(&self, io: &mut VertexIo<'_>) { (self.0)(io) }
    /// # }
    /// # // Runs `f` as a vertex on tile 1 of 2 (6 workers) on x[4..8] and y[4..8],
    /// # // with x = 0, 1, ..., 7 and y zero; returns y.
    /// # fn vertex(f: fn(&mut VertexIo<'_>)) -> Vec<f32> {
    /// #     let spec = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// #     let mut g = Graph::new(Target::single(spec));
    /// #     let grain = NonZeroU64::new(4).unwrap();
    /// #     let x = g.add_tensor("x", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let y = g.add_tensor("y", DType::F32, &[8], Mapping::linear(grain)).unwrap();
    /// #     let cs = g.add_compute_set("cs");
    /// #     let fields = [TensorSlice::new(x, 4..8), TensorSlice::new(y, 4..8)];
    /// #     g.add_vertex(cs, 1, Arc::new(Run(f)), &fields).unwrap();
    /// #     let mut e = Engine::new(g, Program::Execute(cs), EngineOptions::default()).unwrap();
    /// #     e.write_tensor(x, &[0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]).unwrap();
    /// #     e.run();
    /// #     e.read_tensor(y).unwrap()
    /// # }
    /// // Worker 2 of tile 1: the stream `Seeds::worker` gives (24 bits of its
    /// // first word, exact in an f32).
    /// let y = vertex(|io| {
    ///     io.write::<f32>(1)[0] = (io.worker_stream(StreamKind::Differing, 2).bits(0) >> 8) as f32;
    /// });
    /// let stream = Seeds::new(0, 0).worker(StreamKind::Differing, 1, 2, 6);
    /// assert_eq!(y[4], (stream.bits(0) >> 8) as f32);
    /// ```
    #[must_use]
    pub fn worker_stream(&self, kind: StreamKind, worker: u32) -> RandomStream {
        self.seeds
            .worker(kind, self.tile, worker, self.workers_per_tile)
    }
}
