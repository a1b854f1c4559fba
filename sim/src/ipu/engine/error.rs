//! Why an engine could not be built or accessed.

use core::fmt;

use crate::ipu::graph::GraphError;
use crate::ipu::memory::OutOfMemory;

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
        dtype: crate::ipu::tensor::DType,
        /// The type asked for.
        asked: crate::ipu::tensor::DType,
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
