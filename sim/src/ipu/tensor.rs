//! Tensors: element types, ids, slices, and the typed storage of a tile's
//! piece of a tensor.

use core::fmt;
use core::ops::Range;

use serde::Serialize;
use tessera_core::fp::{bf16, f16};

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum DType {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// 64-bit signed integers (step counters, the limbs of exact sums).
    I64,
}

impl DType {
    /// Bytes per element.
    ///
    /// ```
    /// use tessera_sim::ipu::DType;
    ///
    /// assert_eq!((DType::F32.size(), DType::Bf16.size(), DType::I64.size()), (4, 2, 8));
    /// ```
    #[must_use]
    pub const fn size(self) -> u64 {
        match self {
            Self::F32 => 4,
            Self::F16 | Self::Bf16 => 2,
            Self::I64 => 8,
        }
    }

    /// `"f32"`, `"f16"`, `"bf16"` or `"i64"`.
    ///
    /// ```
    /// use tessera_sim::ipu::DType;
    ///
    /// assert_eq!(DType::F16.name(), "f16");
    /// assert_eq!(DType::Bf16.to_string(), "bf16");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::F32 => "f32",
            Self::F16 => "f16",
            Self::Bf16 => "bf16",
            Self::I64 => "i64",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A tensor of a [`Graph`](super::Graph).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct TensorId(pub(crate) u32);

impl TensorId {
    /// The tensor's index in its graph (in order of creation).
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let a = g.add_tensor("a", DType::F32, &[1], Mapping::one_tile(0, 1)).unwrap();
    /// let b = g.add_tensor("b", DType::F32, &[1], Mapping::one_tile(0, 1)).unwrap();
    /// assert_eq!((a.index(), b.index()), (0, 1));
    /// ```
    #[must_use]
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Elements `range` of a tensor, in row-major order of its shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSlice {
    /// The tensor.
    pub tensor: TensorId,
    /// The elements.
    pub range: Range<u64>,
}

impl TensorSlice {
    /// Elements `range` of `tensor`.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target, TensorSlice};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let t = g.add_tensor("t", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// let s = TensorSlice::new(t, 2..6);
    /// assert_eq!((s.tensor, s.len()), (t, 4));
    /// ```
    #[must_use]
    pub const fn new(tensor: TensorId, range: Range<u64>) -> Self {
        Self { tensor, range }
    }

    /// Elements in the slice.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target, TensorSlice};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let t = g.add_tensor("t", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// assert_eq!(TensorSlice::new(t, 2..6).len(), 4);
    /// assert_eq!(TensorSlice::new(t, 6..2).len(), 0); // reversed: empty
    /// ```
    #[must_use]
    pub const fn len(&self) -> u64 {
        self.range.end.saturating_sub(self.range.start)
    }

    /// Whether the slice is empty.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Graph, Mapping, Target, TensorSlice};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let t = g.add_tensor("t", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// assert!(TensorSlice::new(t, 3..3).is_empty() && !g.all(t).is_empty());
    /// ```
    #[must_use]
    pub const fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A Rust type a tensor's elements can be read as.
pub trait Scalar: Copy + Default + Send + Sync + fmt::Debug + 'static + sealed::Sealed {
    /// Its [`DType`].
    const DTYPE: DType;
    /// The slice of a piece of this type.
    ///
    /// ```
    /// use tessera_sim::ipu::{Piece, Scalar};
    ///
    /// let p = Piece::F32(vec![1.0, 2.0]);
    /// assert_eq!(f32::slice(&p), Some(&[1.0, 2.0][..]));
    /// assert_eq!(i64::slice(&p), None); // another type
    /// ```
    fn slice(piece: &Piece) -> Option<&[Self]>;
    /// The mutable slice of a piece of this type.
    ///
    /// ```
    /// use tessera_sim::ipu::{Piece, Scalar};
    ///
    /// let mut p = Piece::I64(vec![0; 2]);
    /// i64::slice_mut(&mut p).unwrap()[1] = 7;
    /// assert_eq!(p, Piece::I64(vec![0, 7]));
    /// ```
    fn slice_mut(piece: &mut Piece) -> Option<&mut [Self]>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for super::f16 {}
    impl Sealed for super::bf16 {}
    impl Sealed for i64 {}
}

macro_rules! scalar {
    ($t:ty, $variant:ident) => {
        impl Scalar for $t {
            const DTYPE: DType = DType::$variant;
            #[inline]
            fn slice(piece: &Piece) -> Option<&[Self]> {
                match piece {
                    Piece::$variant(v) => Some(v),
                    _ => None,
                }
            }
            #[inline]
            fn slice_mut(piece: &mut Piece) -> Option<&mut [Self]> {
                match piece {
                    Piece::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    };
}

scalar!(f32, F32);
scalar!(f16, F16);
scalar!(bf16, Bf16);
scalar!(i64, I64);

/// The elements of one tensor interval held by one tile.
#[derive(Clone, Debug, PartialEq)]
pub enum Piece {
    /// f32 elements.
    F32(Vec<f32>),
    /// f16 elements.
    F16(Vec<f16>),
    /// bf16 elements.
    Bf16(Vec<bf16>),
    /// i64 elements.
    I64(Vec<i64>),
}

impl Piece {
    /// `len` zero elements of `dtype`.
    #[must_use]
    pub(crate) fn zeroed(dtype: DType, len: usize) -> Self {
        match dtype {
            DType::F32 => Self::F32(vec![0.0; len]),
            DType::F16 => Self::F16(vec![f16::ZERO; len]),
            DType::Bf16 => Self::Bf16(vec![bf16::ZERO; len]),
            DType::I64 => Self::I64(vec![0; len]),
        }
    }

    /// A placeholder of no elements (allocates nothing).
    #[must_use]
    pub(crate) const fn empty() -> Self {
        Self::F32(Vec::new())
    }

    /// The element type.
    #[must_use]
    pub(crate) const fn dtype(&self) -> DType {
        match self {
            Self::F32(_) => DType::F32,
            Self::F16(_) => DType::F16,
            Self::Bf16(_) => DType::Bf16,
            Self::I64(_) => DType::I64,
        }
    }

    /// Elements.
    #[must_use]
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::F32(v) => v.len(),
            Self::F16(v) => v.len(),
            Self::Bf16(v) => v.len(),
            Self::I64(v) => v.len(),
        }
    }

    /// Copies `src[from]` into `self[to]` (same type and length, checked
    /// when the graph was built).
    ///
    /// # Panics
    /// If the types or lengths differ.
    pub(crate) fn copy_from(&mut self, to: Range<usize>, src: &Self, from: Range<usize>) {
        match (self, src) {
            (Self::F32(d), Self::F32(s)) => d[to].copy_from_slice(&s[from]),
            (Self::F16(d), Self::F16(s)) => d[to].copy_from_slice(&s[from]),
            (Self::Bf16(d), Self::Bf16(s)) => d[to].copy_from_slice(&s[from]),
            (Self::I64(d), Self::I64(s)) => d[to].copy_from_slice(&s[from]),
            (d, s) => panic!("copy from {} to {}", s.dtype(), d.dtype()),
        }
    }

    /// Copies `self[from]` to `self[to]` (within one piece).
    pub(crate) fn copy_within(&mut self, from: Range<usize>, to: usize) {
        match self {
            Self::F32(v) => v.copy_within(from, to),
            Self::F16(v) => v.copy_within(from, to),
            Self::Bf16(v) => v.copy_within(from, to),
            Self::I64(v) => v.copy_within(from, to),
        }
    }
}
