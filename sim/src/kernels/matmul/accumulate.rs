//! Where a product's sums accumulate: in f32 (Tessera's own `gemm`, the
//! default), or in f16 as Graphcore's AMP units can, through core's
//! [`RoundedMatmul`] so that the accumulator is really f16: rounded to
//! nearest after every addition.
//!
//! The reduction tree is the same for both ([`leaves`](fn@super::leaves)):
//! a leaf's products are accumulated in increasing `p`, the leaves'
//! partials added in a perfect binary tree. In f16 without promotion
//! every addition of the tree is rounded to f16 too (the sum of two f16
//! values is exact in f64, so it is rounded once); with promotion every
//! `k` additions, each leaf's f16 accumulator is added into an f32 total
//! every `k` of its additions (core's definition) and the leaves' totals
//! are added in f32.
//!
//! The accumulator holds the product's values as the operands hold them
//! (a quantised operand's values are scaled back by its power-of-two
//! scale), so its range is that of the unscaled product.

use core::num::NonZeroUsize;

use tessera_core::fp::{Format, MatmulAccumulator, Round, RoundedMatmul, f16};
use tessera_core::rng::RandomStream;

use super::GemmShape;

/// Where a product's sums accumulate (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Accumulator {
    /// f32 (the products' default).
    #[default]
    F32,
    /// f16, rounded to nearest even after every addition; promoted to an
    /// f32 total every `promote_every` additions if given.
    F16 {
        /// Additions between promotions (`None`: never).
        promote_every: Option<NonZeroUsize>,
    },
}

impl Accumulator {
    /// An f16 accumulator, never promoted.
    pub const F16: Self = Self::F16 {
        promote_every: None,
    };

    /// `c = op(a) op(b)` of one leaf (`shape.k` at most
    /// [`LEAF_K`](super::LEAF_K) in a product) in this accumulator.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::{Accumulator, GemmShape};
    ///
    /// let shape = GemmShape { m: 1, k: 5, n: 1, a_transposed: false, b_transposed: false };
    /// let (a, b) = ([2048.0f32, 1.0, 1.0, 1.0, 1.0], [1.0f32; 5]);
    /// let mut c = [0.0f32];
    /// Accumulator::F32.leaf(shape, &a, &b, &mut c);
    /// assert_eq!(c, [2052.0]);
    /// // In f16 (spacing 2 at 2048) each 2048 + 1 is a tie to even.
    /// Accumulator::F16.leaf(shape, &a, &b, &mut c);
    /// assert_eq!(c, [2048.0]);
    /// ```
    ///
    /// # Panics
    /// If a slice's length is not its matrix's.
    pub fn leaf(self, shape: GemmShape, a: &[f32], b: &[f32], c: &mut [f32]) {
        let Self::F16 { promote_every } = self else {
            super::gemm(shape, a, b, c);
            return;
        };
        shape.assert_lengths(a, b, c);
        let GemmShape { m, k, n, .. } = shape;
        // Row-major `op(a)` (m x k) and `op(b)` (k x n), as core reads them.
        let ra: Vec<f32> = if shape.a_transposed {
            (0..m * k).map(|x| a[(x % k) * m + x / k]).collect()
        } else {
            a.to_vec()
        };
        let rb: Vec<f32> = if shape.b_transposed {
            (0..k * n).map(|x| b[(x % n) * k + x / n]).collect()
        } else {
            b.to_vec()
        };
        let acc = MatmulAccumulator::new(Format::F16, Round::NEAREST_EVEN);
        // f32 inputs: every value is one, so core's check cannot fail.
        RoundedMatmul::new(Format::F32, acc.promote_every(promote_every))
            .gemm((m, n, k), &ra, &rb, c, &RandomStream::new(0, 0), 0)
            .expect("lengths checked, f32 inputs");
    }

    /// `x += y` element by element, one addition of the leaves' tree.
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::Accumulator;
    ///
    /// let mut x = [2048.0f32];
    /// Accumulator::F16.add(&mut x, &[1.0]);
    /// assert_eq!(x, [2048.0]);
    /// Accumulator::F32.add(&mut x, &[1.0]);
    /// assert_eq!(x, [2049.0]);
    /// ```
    pub fn add(self, x: &mut [f32], y: &[f32]) {
        if self == Self::F16 {
            for (x, y) in x.iter_mut().zip(y) {
                *x = f16::from_f64(f64::from(*x) + f64::from(*y)).to_f32();
            }
        } else {
            for (x, y) in x.iter_mut().zip(y) {
                *x += *y;
            }
        }
    }
}

impl core::fmt::Display for Accumulator {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::F32 => f.write_str("f32"),
            Self::F16 {
                promote_every: None,
            } => f.write_str("f16"),
            Self::F16 {
                promote_every: Some(k),
            } => write!(f, "f16:{k}"),
        }
    }
}

impl core::str::FromStr for Accumulator {
    type Err = String;

    /// `f32`, `f16` or `f16:K` (promoted to f32 every `K` additions).
    ///
    /// ```
    /// use tessera_sim::kernels::matmul::Accumulator;
    ///
    /// assert_eq!("f16".parse::<Accumulator>(), Ok(Accumulator::F16));
    /// let a: Accumulator = "f16:32".parse().unwrap();
    /// assert_eq!(a.to_string(), "f16:32");
    /// assert!("f16:0".parse::<Accumulator>().is_err());
    /// ```
    fn from_str(s: &str) -> Result<Self, String> {
        match s.split_once(':') {
            None if s == "f32" => Ok(Self::F32),
            None if s == "f16" => Ok(Self::F16),
            Some(("f16", k)) => match k.parse::<NonZeroUsize>() {
                Ok(k) => Ok(Self::F16 {
                    promote_every: Some(k),
                }),
                Err(_) => Err(format!(
                    "`{k}` in `{s}` is not a positive count of additions between promotions"
                )),
            },
            _ => Err(format!(
                "unknown accumulator `{s}`: expected f32, f16 or f16:K (promoted to f32 every K additions)"
            )),
        }
    }
}
