//! Training checkpoints: named tensors plus string metadata, stored as
//! [safetensors](https://github.com/huggingface/safetensors) files and
//! written atomically.
//!
//! # File format
//!
//! A standard safetensors file: an 8-byte little-endian header length, a
//! JSON header (padded with spaces to a multiple of 8 bytes) mapping each
//! tensor name to its dtype, shape and byte range, an optional
//! `__metadata__` map of strings, then the tensors' bytes, little-endian,
//! row-major. Any safetensors reader (Python's `safetensors`, PyTorch,
//! candle) opens a Tessera checkpoint.
//!
//! # Determinism
//!
//! The same checkpoint always produces the same bytes: tensors are laid out
//! in the `safetensors` crate's own order (larger element alignment first,
//! then by name) and the metadata in key order. The crate's serializer is
//! used as the reference in the tests but not for writing, because it takes
//! the metadata as a `HashMap` whose iteration order changes from one
//! process to the next. After [`Checkpoint::load`], tensors are in name
//! order.
//!
//! # Crash safety
//!
//! [`Checkpoint::save`] goes through [`write_atomic`]: a crash at any point
//! leaves either the old file or the complete new one at the path, never a
//! torn file.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytemuck::Pod;
use half::{bf16, f16};
use safetensors::{Dtype, SafeTensors};

/// The element types a checkpoint holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// Unsigned 64-bit integers (step counters, seeds).
    U64,
    /// Unsigned 32-bit integers.
    U32,
}

impl DType {
    /// The safetensors name of the type.
    fn safetensors(self) -> Dtype {
        match self {
            Self::F32 => Dtype::F32,
            Self::F16 => Dtype::F16,
            Self::Bf16 => Dtype::BF16,
            Self::U64 => Dtype::U64,
            Self::U32 => Dtype::U32,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The names safetensors files use.
        f.write_str(match self {
            Self::F32 => "F32",
            Self::F16 => "F16",
            Self::Bf16 => "BF16",
            Self::U64 => "U64",
            Self::U32 => "U32",
        })
    }
}

/// The elements of a tensor, in row-major order.
#[derive(Clone, Debug, PartialEq)]
pub enum TensorData {
    /// IEEE binary32 values.
    F32(Vec<f32>),
    /// IEEE binary16 values.
    F16(Vec<f16>),
    /// bfloat16 values.
    Bf16(Vec<bf16>),
    /// Unsigned 64-bit integers.
    U64(Vec<u64>),
    /// Unsigned 32-bit integers.
    U32(Vec<u32>),
}

impl TensorData {
    /// The element type.
    #[must_use]
    pub fn dtype(&self) -> DType {
        match self {
            Self::F32(_) => DType::F32,
            Self::F16(_) => DType::F16,
            Self::Bf16(_) => DType::Bf16,
            Self::U64(_) => DType::U64,
            Self::U32(_) => DType::U32,
        }
    }

    /// The number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
            Self::Bf16(v) => v.len(),
            Self::U64(v) => v.len(),
            Self::U32(v) => v.len(),
        }
    }

    /// Whether there are no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as little-endian bytes (borrowed on little-endian hosts).
    fn le_bytes(&self) -> Cow<'_, [u8]> {
        match self {
            Self::F32(v) => le_bytes(v),
            Self::F16(v) => le_bytes(v),
            Self::Bf16(v) => le_bytes(v),
            Self::U64(v) => le_bytes(v),
            Self::U32(v) => le_bytes(v),
        }
    }

    /// Reads elements of `dtype` from little-endian bytes whose length is a
    /// multiple of the element size.
    fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Self {
        match dtype {
            DType::F32 => Self::F32(from_le_bytes(bytes)),
            DType::F16 => Self::F16(from_le_bytes(bytes)),
            DType::Bf16 => Self::Bf16(from_le_bytes(bytes)),
            DType::U64 => Self::U64(from_le_bytes(bytes)),
            DType::U32 => Self::U32(from_le_bytes(bytes)),
        }
    }
}

macro_rules! tensor_data_from {
    ($($ty:ty => $variant:ident),*) => {$(
        impl From<Vec<$ty>> for TensorData {
            fn from(values: Vec<$ty>) -> Self {
                Self::$variant(values)
            }
        }
    )*};
}
tensor_data_from!(f32 => F32, f16 => F16, bf16 => Bf16, u64 => U64, u32 => U32);

/// `values` as little-endian bytes: a view on little-endian hosts, a
/// byte-swapped copy on big-endian ones.
fn le_bytes<T: Pod>(values: &[T]) -> Cow<'_, [u8]> {
    let bytes: &[u8] = bytemuck::cast_slice(values);
    if cfg!(target_endian = "little") {
        Cow::Borrowed(bytes)
    } else {
        let mut swapped = bytes.to_vec();
        for element in swapped.chunks_exact_mut(size_of::<T>()) {
            element.reverse();
        }
        Cow::Owned(swapped)
    }
}

/// The inverse of [`le_bytes`]. Copies, since the bytes of a file buffer
/// need not be aligned for `T`.
fn from_le_bytes<T: Pod>(bytes: &[u8]) -> Vec<T> {
    let mut values: Vec<T> = bytemuck::pod_collect_to_vec(bytes);
    if cfg!(target_endian = "big") {
        for element in
            bytemuck::cast_slice_mut::<T, u8>(&mut values).chunks_exact_mut(size_of::<T>())
        {
            element.reverse();
        }
    }
    values
}

/// A named tensor of a checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    /// The name, unique within the checkpoint (`"layer0.weight"`).
    pub name: String,
    /// The dimensions, outermost first; `[]` for a scalar.
    pub shape: Vec<usize>,
    /// The elements, row-major; as many as the shape's product.
    pub data: TensorData,
}

/// A training checkpoint: named tensors and string metadata.
///
/// ```
/// use tessera_sim::checkpoint::Checkpoint;
///
/// let dir = std::env::temp_dir().join(format!("tessera-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// let path = dir.join("step-10.safetensors");
///
/// let mut checkpoint = Checkpoint::new();
/// checkpoint.push("weights", [2, 2], vec![1.0f32, -0.0, 0.5, 4.0]);
/// checkpoint.push("step", [], vec![10u64]);
/// checkpoint.metadata.insert("optimizer".into(), "lamb".into());
/// checkpoint.save(&path)?;
///
/// let loaded = Checkpoint::load(&path)?;
/// assert_eq!(loaded.take_f32("weights", &[2, 2])?, [1.0, -0.0, 0.5, 4.0]);
/// assert_eq!(loaded.take_u64("step", &[])?, [10]);
/// assert_eq!(loaded.meta("optimizer")?, "lamb");
/// # std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checkpoint {
    /// The tensors, names unique.
    pub tensors: Vec<Tensor>,
    /// Free-form metadata (step, seed, configuration), stored in the
    /// file's `__metadata__`.
    pub metadata: BTreeMap<String, String>,
}

impl Checkpoint {
    /// An empty checkpoint.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tensor, replacing any tensor of the same name. A shape that
    /// does not match the number of elements is reported by [`save`].
    ///
    /// [`save`]: Self::save
    pub fn push(
        &mut self,
        name: impl Into<String>,
        shape: impl Into<Vec<usize>>,
        data: impl Into<TensorData>,
    ) -> &mut Self {
        let tensor = Tensor {
            name: name.into(),
            shape: shape.into(),
            data: data.into(),
        };
        match self.tensors.iter_mut().find(|t| t.name == tensor.name) {
            Some(existing) => *existing = tensor,
            None => self.tensors.push(tensor),
        }
        self
    }

    /// The tensor called `name`.
    #[must_use]
    pub fn tensor(&self, name: &str) -> Option<&Tensor> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The elements of the `F32` tensor `name` of shape `shape`.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Missing`], [`CheckpointError::DType`] or
    /// [`CheckpointError::Shape`].
    pub fn take_f32(&self, name: &str, shape: &[usize]) -> Result<Vec<f32>, CheckpointError> {
        match self.expect(name, DType::F32, shape)? {
            TensorData::F32(values) => Ok(values.clone()),
            _ => unreachable!("expect checked the dtype"),
        }
    }

    /// The elements of the `F16` tensor `name` of shape `shape`.
    ///
    /// # Errors
    ///
    /// As [`take_f32`](Self::take_f32).
    pub fn take_f16(&self, name: &str, shape: &[usize]) -> Result<Vec<f16>, CheckpointError> {
        match self.expect(name, DType::F16, shape)? {
            TensorData::F16(values) => Ok(values.clone()),
            _ => unreachable!("expect checked the dtype"),
        }
    }

    /// The elements of the `BF16` tensor `name` of shape `shape`.
    ///
    /// # Errors
    ///
    /// As [`take_f32`](Self::take_f32).
    pub fn take_bf16(&self, name: &str, shape: &[usize]) -> Result<Vec<bf16>, CheckpointError> {
        match self.expect(name, DType::Bf16, shape)? {
            TensorData::Bf16(values) => Ok(values.clone()),
            _ => unreachable!("expect checked the dtype"),
        }
    }

    /// The elements of the `U64` tensor `name` of shape `shape`.
    ///
    /// # Errors
    ///
    /// As [`take_f32`](Self::take_f32).
    pub fn take_u64(&self, name: &str, shape: &[usize]) -> Result<Vec<u64>, CheckpointError> {
        match self.expect(name, DType::U64, shape)? {
            TensorData::U64(values) => Ok(values.clone()),
            _ => unreachable!("expect checked the dtype"),
        }
    }

    /// The elements of the `U32` tensor `name` of shape `shape`.
    ///
    /// # Errors
    ///
    /// As [`take_f32`](Self::take_f32).
    pub fn take_u32(&self, name: &str, shape: &[usize]) -> Result<Vec<u32>, CheckpointError> {
        match self.expect(name, DType::U32, shape)? {
            TensorData::U32(values) => Ok(values.clone()),
            _ => unreachable!("expect checked the dtype"),
        }
    }

    /// The data of tensor `name`, checked for presence, type and shape.
    fn expect(
        &self,
        name: &str,
        dtype: DType,
        shape: &[usize],
    ) -> Result<&TensorData, CheckpointError> {
        let tensor = self.tensor(name).ok_or_else(|| CheckpointError::Missing {
            name: name.to_owned(),
        })?;
        if tensor.data.dtype() != dtype {
            return Err(CheckpointError::DType {
                name: name.to_owned(),
                expected: dtype,
                found: tensor.data.dtype(),
            });
        }
        if tensor.shape != shape {
            return Err(CheckpointError::Shape {
                name: name.to_owned(),
                expected: shape.to_vec(),
                found: tensor.shape.clone(),
            });
        }
        Ok(&tensor.data)
    }

    /// The metadata value of `key`.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Metadata`] when the key is absent.
    pub fn meta(&self, key: &str) -> Result<&str, CheckpointError> {
        self.metadata
            .get(key)
            .map(String::as_str)
            .ok_or_else(|| CheckpointError::Metadata {
                key: key.to_owned(),
                value: None,
                expected: "a value",
            })
    }

    /// The metadata value of `key` parsed as a `T` (`"10"` as `u64`).
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Metadata`] when the key is absent or its value
    /// does not parse.
    pub fn meta_parse<T: std::str::FromStr>(&self, key: &str) -> Result<T, CheckpointError> {
        let value = self.meta(key)?;
        value.parse().map_err(|_| CheckpointError::Metadata {
            key: key.to_owned(),
            value: Some(value.to_owned()),
            expected: std::any::type_name::<T>(),
        })
    }

    /// The file's bytes, in safetensors format.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Length`] when a tensor's element count is not its
    /// shape's product.
    pub fn to_bytes(&self) -> Result<Vec<u8>, CheckpointError> {
        for tensor in &self.tensors {
            let elements = tensor
                .shape
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d));
            if elements != Some(tensor.data.len()) {
                return Err(CheckpointError::Length {
                    name: tensor.name.clone(),
                    shape: tensor.shape.clone(),
                    elements: tensor.data.len(),
                });
            }
        }
        // The safetensors crate's order: larger alignment first, then name,
        // so that every tensor starts aligned for its element type.
        let mut order: Vec<&Tensor> = self.tensors.iter().collect();
        order.sort_by(|a, b| {
            let (a_type, b_type) = (a.data.dtype().safetensors(), b.data.dtype().safetensors());
            b_type.cmp(&a_type).then_with(|| a.name.cmp(&b.name))
        });

        // The header, written as the crate writes it (compact JSON, the
        // metadata first, tensors in data order).
        let mut header = String::from("{");
        if !self.metadata.is_empty() {
            header.push_str("\"__metadata__\":");
            header.push_str(&json(&self.metadata));
        }
        let mut offset = 0;
        for tensor in &order {
            let bytes = tensor.data.len() * tensor.data.dtype().safetensors().bitsize() / 8;
            if header.len() > 1 {
                header.push(',');
            }
            header.push_str(&json(&tensor.name));
            header.push_str(":{\"dtype\":\"");
            header.push_str(&tensor.data.dtype().to_string());
            header.push_str("\",\"shape\":");
            header.push_str(&json(&tensor.shape));
            header.push_str(&format!(
                ",\"data_offsets\":[{offset},{}]}}",
                offset + bytes
            ));
            offset += bytes;
        }
        header.push('}');
        // Data starts 8-aligned.
        while header.len() % 8 != 0 {
            header.push(' ');
        }

        let mut file = Vec::with_capacity(8 + header.len() + offset);
        file.extend_from_slice(&(header.len() as u64).to_le_bytes());
        file.extend_from_slice(header.as_bytes());
        for tensor in order {
            file.extend_from_slice(&tensor.data.le_bytes());
        }
        Ok(file)
    }

    /// Reads a checkpoint from the bytes of a safetensors file. `path` only
    /// names the source in errors.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Corrupt`] when the bytes are not a valid
    /// safetensors file or hold a type other than [`DType`]'s.
    pub fn from_bytes(bytes: &[u8], path: &Path) -> Result<Self, CheckpointError> {
        let corrupt = |reason: String| CheckpointError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(e.to_string()))?;
        let file = SafeTensors::deserialize(bytes).map_err(|e| corrupt(e.to_string()))?;

        let mut tensors = Vec::with_capacity(file.len());
        for (name, view) in file.iter() {
            let dtype = match view.dtype() {
                Dtype::F32 => DType::F32,
                Dtype::F16 => DType::F16,
                Dtype::BF16 => DType::Bf16,
                Dtype::U64 => DType::U64,
                Dtype::U32 => DType::U32,
                other => {
                    return Err(corrupt(format!(
                        "tensor `{name}` has type {other}, which Tessera does not read"
                    )));
                }
            };
            tensors.push(Tensor {
                name: name.to_owned(),
                shape: view.shape().to_vec(),
                data: TensorData::from_le_bytes(dtype, view.data()),
            });
        }
        tensors.sort_by(|a, b| a.name.cmp(&b.name));
        let metadata = header
            .metadata()
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(Self { tensors, metadata })
    }

    /// Writes the checkpoint to `path` atomically ([`write_atomic`]).
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Io`] when the file cannot be written, with the old
    /// file (if any) left as it was; [`CheckpointError::Length`] as
    /// [`to_bytes`](Self::to_bytes).
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        write_atomic(path, &self.to_bytes()?)
    }

    /// Reads the checkpoint at `path`.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Io`] when the file cannot be read,
    /// [`CheckpointError::Corrupt`] as [`from_bytes`](Self::from_bytes).
    pub fn load(path: &Path) -> Result<Self, CheckpointError> {
        let bytes = fs::read(path).map_err(|source| CheckpointError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&bytes, path)
    }
}

/// `value` as compact JSON. Cannot fail for strings, string maps and
/// integer arrays.
fn json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    serde_json::to_string(value).expect("strings, string maps and integers serialize")
}

/// Replaces the file at `path` with `bytes` so that a crash at any point
/// leaves either the old file or the complete new one, never a torn file.
///
/// Writes a temporary file in the same directory (a rename is only atomic
/// within a file system), flushes it to disk, renames it over `path`, then
/// flushes the directory so that the rename itself is durable. On failure
/// the temporary file is removed and `path` is untouched.
///
/// # Errors
///
/// [`CheckpointError::Io`], naming the path that failed.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io { path, source }
    };
    let file_name = path.file_name().ok_or_else(|| {
        io(path)(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path does not name a file",
        ))
    })?;
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    // Unique per process and call, so concurrent saves never share one.
    let mut temporary_name = std::ffi::OsString::from(".");
    temporary_name.push(file_name);
    temporary_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    let temporary = directory.join(temporary_name);

    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(source) = written {
        // Best effort: the write already failed, and that is what to report.
        let _ = fs::remove_file(&temporary);
        return Err(io(&temporary)(source));
    }
    if let Err(source) = fs::rename(&temporary, path) {
        let _ = fs::remove_file(&temporary);
        return Err(io(path)(source));
    }
    sync_directory(directory).map_err(io(directory))
}

/// Makes a rename in `directory` durable.
#[cfg(unix)]
fn sync_directory(directory: &Path) -> io::Result<()> {
    File::open(directory)?.sync_all()
}

/// Directories cannot be opened for syncing here; NTFS journals renames.
#[cfg(not(unix))]
fn sync_directory(_directory: &Path) -> io::Result<()> {
    Ok(())
}

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
    /// No tensor has this name.
    Missing {
        /// The tensor asked for.
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
    /// A tensor to save has another number of elements than its shape says.
    Length {
        /// The tensor.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// Its number of elements.
        elements: usize,
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

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, source } => {
                write!(f, "checkpoint I/O failed on {}: {source}", path.display())
            }
            Self::Corrupt { path, reason } => {
                write!(f, "checkpoint {} is corrupt: {reason}", path.display())
            }
            Self::Missing { name } => write!(f, "the checkpoint has no tensor `{name}`"),
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
            Self::Length {
                name,
                shape,
                elements,
            } => write!(
                f,
                "checkpoint tensor `{name}` of shape {shape:?} has {elements} elements"
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
