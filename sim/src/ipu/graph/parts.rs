//! What a [`Graph`](super::Graph) records: tensors as placed on tiles,
//! vertices, compute sets, exchange segments and host streams.

use core::ops::Range;
use std::sync::Arc;

use crate::ipu::codelet::{Codelet, FieldRef, VertexCycles};
use crate::ipu::encoding::Encoding;
use crate::ipu::target::Tile;
use crate::ipu::tensor::{DType, TensorId};

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
