//! Why a graph operation was refused.

use core::fmt;
use core::ops::Range;
use std::sync::Arc;

use crate::ipu::target::Tile;
use crate::ipu::tensor::{DType, TensorId};

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
    /// [`Mapping::Like`](crate::ipu::Mapping::Like) a tensor of another length.
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
