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
    fn name(&self) -> &str;

    /// The fields a vertex of this codelet is connected to, in order.
    fn fields(&self) -> &[FieldSpec];

    /// The vertex's cycles for fields of `lens` elements on an IPU `spec`.
    fn cycles(&self, lens: &[u64], spec: &IpuSpec) -> VertexCycles;

    /// Runs the vertex.
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
    #[must_use]
    pub const fn tile(&self) -> Tile {
        self.tile
    }

    /// The position, in its tensor, of field `field`'s first element.
    #[must_use]
    pub fn start(&self, field: usize) -> u64 {
        self.fields[field].start
    }

    /// Elements in field `field`.
    #[must_use]
    pub fn len(&self, field: usize) -> usize {
        self.fields[field].local.len()
    }

    /// Field `field` as a slice of `T`.
    ///
    /// # Panics
    /// If the field's type is not `T`.
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
    #[must_use]
    pub fn worker_stream(&self, kind: StreamKind, worker: u32) -> RandomStream {
        self.seeds
            .worker(kind, self.tile, worker, self.workers_per_tile)
    }
}
