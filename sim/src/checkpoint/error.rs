//! [`CheckpointError`]: why a checkpoint could not be saved, loaded or
//! read, and [`Damage`]: what is wrong with a file that fails its checks.

use std::fmt;
use std::io;
use std::path::PathBuf;

use super::DType;

/// Why a checkpoint could not be saved, loaded or read.
#[derive(Debug)]
pub enum CheckpointError {
    /// A file operation failed.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file is not a valid safetensors file Tessera reads.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The file is a safetensors file, but not the one that was written:
    /// it is cut short or does not match its digests.
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor where there is one.
        problem: Damage,
    },
    /// No tensor has this name.
    Missing {
        /// The tensor asked for.
        name: String,
    },
    /// A tensor the reader has no use for (another optimizer's state, say).
    Unexpected {
        /// The tensor.
        name: String,
    },
    /// The tensor has another element type than asked for.
    DType {
        /// The tensor.
        name: String,
        /// The type asked for.
        expected: DType,
        /// The tensor's type.
        found: DType,
    },
    /// The tensor has another shape than asked for.
    Shape {
        /// The tensor.
        name: String,
        /// The shape asked for.
        expected: Vec<usize>,
        /// The tensor's shape.
        found: Vec<usize>,
    },
    /// A tensor that must be finite holds a NaN or an infinity.
    NonFinite {
        /// The tensor.
        name: String,
        /// The first such element (row-major).
        index: usize,
        /// Its value (f16 and bf16 widened exactly).
        value: f32,
    },
    /// A tensor to save has another number of elements than its shape says.
    Length {
        /// The tensor.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// Its number of elements.
        elements: usize,
    },
    /// A metadata key to save is one the file format reserves.
    Reserved {
        /// The key.
        key: String,
    },
    /// A metadata key is absent or its value does not parse.
    Metadata {
        /// The key.
        key: String,
        /// The value, or `None` when the key is absent.
        value: Option<String>,
        /// What the value should have been (a type name).
        expected: &'static str,
    },
}

/// What is wrong with a checkpoint file that parses but fails its checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Damage {
    /// The file ends before its header says it does.
    Truncated {
        /// Bytes in the file.
        length: u64,
        /// Bytes the header needs (at least).
        expected: u64,
        /// The first tensor cut short (`None`: the header itself is).
        tensor: Option<String>,
    },
    /// The metadata holds no digests: the file was not written by this
    /// version of Tessera, so its contents cannot be verified.
    NoDigests,
    /// The metadata does not match its digest.
    Metadata,
    /// The tensor's bytes, type or shape do not match its digest.
    Tensor(String),
    /// The digests list this tensor, but the file does not hold it.
    Missing(String),
    /// The file holds this tensor, but the digests do not list it.
    Extra(String),
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated {
                length,
                expected,
                tensor,
            } => {
                write!(f, "it has {length} bytes where its header needs {expected}")?;
                match tensor {
                    Some(name) => write!(f, ": tensor `{name}` is cut short"),
                    None => f.write_str(": the header is cut short"),
                }
            }
            Self::NoDigests => f.write_str(
                "it holds no digests, so its contents cannot be verified (every checkpoint \
                 Tessera writes has them: this one comes from an older version or another \
                 program)",
            ),
            Self::Metadata => f.write_str("its metadata does not match its digest"),
            Self::Tensor(name) => write!(f, "tensor `{name}` does not match its digest"),
            Self::Missing(name) => write!(f, "tensor `{name}` is listed in its digests but absent"),
            Self::Extra(name) => write!(f, "tensor `{name}` is not listed in its digests"),
        }
    }
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => {
                write!(f, "checkpoint I/O failed on {}: {source}", path.display())
            }
            Self::Corrupt { path, reason } => {
                write!(f, "checkpoint {} is corrupt: {reason}", path.display())
            }
            Self::Damaged {
                path,
                problem: problem @ Damage::NoDigests,
            } => write!(f, "checkpoint {}: {problem}", path.display()),
            Self::Damaged { path, problem } => write!(
                f,
                "checkpoint {} is damaged (changed or corrupted since it was written): {problem}",
                path.display()
            ),
            Self::Missing { name } => write!(f, "the checkpoint has no tensor `{name}`"),
            Self::Unexpected { name } => write!(
                f,
                "the checkpoint has a tensor `{name}` that this run does not use"
            ),
            Self::DType {
                name,
                expected,
                found,
            } => write!(
                f,
                "checkpoint tensor `{name}` holds {found}, expected {expected}"
            ),
            Self::Shape {
                name,
                expected,
                found,
            } => write!(
                f,
                "checkpoint tensor `{name}` has shape {found:?}, expected {expected:?}"
            ),
            Self::NonFinite { name, index, value } => write!(
                f,
                "checkpoint tensor `{name}` holds {value} at element {index}: it must be finite"
            ),
            Self::Length {
                name,
                shape,
                elements,
            } => write!(
                f,
                "checkpoint tensor `{name}` of shape {shape:?} has {elements} elements"
            ),
            Self::Reserved { key } => write!(
                f,
                "checkpoint metadata `{key}` is reserved for the file's digests"
            ),
            Self::Metadata {
                key, value: None, ..
            } => write!(f, "the checkpoint has no metadata `{key}`"),
            Self::Metadata {
                key,
                value: Some(value),
                expected,
            } => write!(
                f,
                "checkpoint metadata `{key}` is {value:?}, expected {expected}"
            ),
        }
    }
}

impl std::error::Error for CheckpointError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}
