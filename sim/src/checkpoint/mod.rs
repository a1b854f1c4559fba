//! Training checkpoints: named tensors plus string metadata, stored as
//! [safetensors](https://github.com/huggingface/safetensors) files,
//! verified by digests on load and written atomically.
//!
//! # File format
//!
//! A standard safetensors file: an 8-byte little-endian header length, a
//! JSON header (padded with spaces to a multiple of 8 bytes) mapping each
//! tensor name to its dtype, shape and byte range, a `__metadata__` map of
//! strings, then the tensors' bytes, little-endian, row-major. Any
//! safetensors reader (Python's `safetensors`, PyTorch, candle) opens a
//! Tessera checkpoint.
//!
//! # Integrity
//!
//! The metadata holds two more keys than [`Checkpoint::metadata`]:
//! `digest.tensors`, a JSON object giving each tensor's xxh3-128 digest
//! (over its name, dtype, shape and bytes), and `digest.metadata`, the
//! digest of the compact JSON of the rest of the metadata (keys in order,
//! so `digest.tensors` included). [`Checkpoint::from_bytes`] checks both
//! before it decodes a single element, and refuses a file that is cut
//! short, that does not match its digests, or that has none
//! ([`CheckpointError::Damaged`], naming the tensor). The digests catch
//! accidents (bit rot, torn copies, edits), not an adversary: there is no
//! key.
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
//! torn file, and the temporary files of writers killed mid-write are
//! removed by the next write.

mod atomic;
mod digest;
mod error;
mod format;

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::path::Path;

use bytemuck::Pod;
use half::{bf16, f16};
use safetensors::Dtype;

pub use atomic::write_atomic;
pub use error::{CheckpointError, Damage};

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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{DType, TensorData};
    ///
    /// assert_eq!(TensorData::from(vec![1u32, 2]).dtype(), DType::U32);
    /// assert_eq!(TensorData::F32(vec![]).dtype(), DType::F32);
    /// ```
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
    ///
    /// ```
    /// use half::f16;
    /// use tessera_sim::checkpoint::TensorData;
    ///
    /// assert_eq!(TensorData::from(vec![f16::ONE; 3]).len(), 3);
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::TensorData;
    ///
    /// assert!(TensorData::U64(vec![]).is_empty());
    /// assert!(!TensorData::U64(vec![0]).is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The elements as little-endian bytes (borrowed on little-endian hosts).
    pub(crate) fn le_bytes(&self) -> Cow<'_, [u8]> {
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
pub(crate) fn le_bytes<T: Pod>(values: &[T]) -> Cow<'_, [u8]> {
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::Checkpoint;
    ///
    /// let c = Checkpoint::new();
    /// assert!(c.tensors.is_empty() && c.metadata.is_empty());
    /// ```
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tensor, replacing any tensor of the same name. A shape that
    /// does not match the number of elements is reported by [`save`].
    ///
    /// [`save`]: Self::save
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, TensorData};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("w", [2], vec![1.0f32, 2.0]).push("step", [], vec![1u64]);
    /// c.push("w", [1], vec![3.0f32]); // replaces the first "w"
    /// assert_eq!(c.tensors.len(), 2);
    /// assert_eq!(c.tensor("w").unwrap().data, TensorData::F32(vec![3.0]));
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::Checkpoint;
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("w", [2, 1], vec![1.0f32, 2.0]);
    /// assert_eq!(c.tensor("w").unwrap().shape, [2, 1]);
    /// assert!(c.tensor("b").is_none());
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("w", [2, 1], vec![1.0f32, 2.0]).push("step", [], vec![7u64]);
    /// assert_eq!(c.take_f32("w", &[2, 1])?, [1.0, 2.0]);
    /// assert!(matches!(c.take_f32("w", &[2]), Err(CheckpointError::Shape { .. })));
    /// assert!(matches!(c.take_f32("step", &[]), Err(CheckpointError::DType { .. })));
    /// assert!(matches!(c.take_f32("b", &[2]), Err(CheckpointError::Missing { .. })));
    /// # Ok::<(), CheckpointError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("x", [2], vec![half::f16::ONE, half::f16::MAX]).push("y", [1], vec![1.0f32]);
    /// assert_eq!(c.take_f16("x", &[2])?, [half::f16::ONE, half::f16::MAX]);
    /// assert!(matches!(c.take_f16("y", &[1]), Err(CheckpointError::DType { .. })));
    /// # Ok::<(), CheckpointError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("x", [2], vec![half::bf16::ONE, half::bf16::MIN_POSITIVE]).push("y", [1], vec![1.0f32]);
    /// assert_eq!(c.take_bf16("x", &[2])?, [half::bf16::ONE, half::bf16::MIN_POSITIVE]);
    /// assert!(matches!(c.take_bf16("y", &[1]), Err(CheckpointError::DType { .. })));
    /// # Ok::<(), CheckpointError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("x", [2], vec![1u64, u64::MAX]).push("y", [1], vec![1u32]);
    /// assert_eq!(c.take_u64("x", &[2])?, [1u64, u64::MAX]);
    /// assert!(matches!(c.take_u64("y", &[1]), Err(CheckpointError::DType { .. })));
    /// # Ok::<(), CheckpointError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.push("x", [2], vec![1u32, u32::MAX]).push("y", [1], vec![1u64]);
    /// assert_eq!(c.take_u32("x", &[2])?, [1u32, u32::MAX]);
    /// assert!(matches!(c.take_u32("y", &[1]), Err(CheckpointError::DType { .. })));
    /// # Ok::<(), CheckpointError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.metadata.insert("optimizer".into(), "lamb".into());
    /// assert_eq!(c.meta("optimizer")?, "lamb");
    /// assert!(matches!(c.meta("seed"), Err(CheckpointError::Metadata { value: None, .. })));
    /// # Ok::<(), CheckpointError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let mut c = Checkpoint::new();
    /// c.metadata.insert("step".into(), "10".into());
    /// c.metadata.insert("seed".into(), "-1".into());
    /// assert_eq!(c.meta_parse::<u64>("step")?, 10);
    /// assert!(matches!(
    ///     c.meta_parse::<u64>("seed"),
    ///     Err(CheckpointError::Metadata { value: Some(v), expected: "u64", .. }) if v == "-1"
    /// ));
    /// # Ok::<(), CheckpointError>(())
    /// ```
    pub fn meta_parse<T: std::str::FromStr>(&self, key: &str) -> Result<T, CheckpointError> {
        let value = self.meta(key)?;
        value.parse().map_err(|_| CheckpointError::Metadata {
            key: key.to_owned(),
            value: Some(value.to_owned()),
            expected: std::any::type_name::<T>(),
        })
    }

    /// Writes the checkpoint to `path` atomically ([`write_atomic`]).
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Io`] when the file cannot be written, with the old
    /// file (if any) left as it was; [`CheckpointError::Length`] and
    /// [`CheckpointError::Reserved`] as [`to_bytes`](Self::to_bytes).
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let dir = std::env::temp_dir().join(format!("tessera-doc-save-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("c.safetensors");
    /// let mut c = Checkpoint::new();
    /// c.push("w", [2], vec![0.5f32, 1.5]);
    /// c.save(&path)?;
    /// assert_eq!(std::fs::read(&path)?, c.to_bytes()?);
    /// // A shape that does not match the data is refused, the file left as it was.
    /// c.push("w", [3], vec![0.5f32, 1.5]);
    /// assert!(matches!(c.save(&path), Err(CheckpointError::Length { elements: 2, .. })));
    /// assert_eq!(Checkpoint::load(&path)?.take_f32("w", &[2])?, [0.5, 1.5]);
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn save(&self, path: &Path) -> Result<(), CheckpointError> {
        write_atomic(path, &self.to_bytes()?)
    }

    /// Reads the checkpoint at `path`.
    ///
    /// # Errors
    ///
    /// [`CheckpointError::Io`] when the file cannot be read,
    /// [`CheckpointError::Corrupt`] and [`CheckpointError::Damaged`] as
    /// [`from_bytes`](Self::from_bytes).
    ///
    /// ```
    /// use tessera_sim::checkpoint::{Checkpoint, CheckpointError};
    ///
    /// let dir = std::env::temp_dir().join(format!("tessera-doc-load-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("c.safetensors");
    /// let mut c = Checkpoint::new();
    /// c.push("w", [2], vec![0.5f32, 1.5]);
    /// c.save(&path)?;
    /// assert_eq!(Checkpoint::load(&path)?, c);
    /// let missing = dir.join("none.safetensors");
    /// assert!(matches!(Checkpoint::load(&missing), Err(CheckpointError::Io { .. })));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
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

/// Checks that the values of tensor `name` are finite (no NaN, no
/// infinity), as weights and optimizer state must be.
///
/// # Errors
/// [`CheckpointError::NonFinite`] naming the tensor and the first such
/// element.
///
/// ```
/// use half::f16;
/// use tessera_sim::checkpoint::{CheckpointError, check_finite};
///
/// assert!(check_finite("w", &[1.0f32, -0.0, f32::MAX]).is_ok());
/// let bad = [f16::ONE, f16::INFINITY, f16::NAN];
/// assert!(matches!(
///     check_finite("w", &bad),
///     Err(CheckpointError::NonFinite { index: 1, value, .. }) if value == f32::INFINITY
/// ));
/// ```
pub fn check_finite<T: Copy + Into<f32>>(name: &str, values: &[T]) -> Result<(), CheckpointError> {
    match values
        .iter()
        .map(|&v| v.into())
        .enumerate()
        .find(|(_, v)| !v.is_finite())
    {
        Some((index, value)) => Err(CheckpointError::NonFinite {
            name: name.to_owned(),
            index,
            value,
        }),
        None => Ok(()),
    }
}
