//! Weight and bias gradients summed exactly over the rows of a micro-batch
//! (the trainer's `--batch-invariant`).
//!
//! A dense or convolution weight's gradient is `dW[i][j] = sum_r a[r][i]
//! b[r][j]` over the rows `r` of the micro-batch (a sample, or a sample's
//! output pixel): `a` the layer's input (a convolution's patches), `b` the
//! gradient of its output; a bias's is `db[j] = sum_r b[r][j]`. The
//! graph's product adds the rows in order, so its result depends on how
//! the batch is cut. Here every product `a[r][i] b[r][j]` (one f32
//! multiplication, as the graph's `gemm` rounds each product; exact for
//! `Compute::F16`'s f16 operands) goes into an [`ExactSum`], whose state
//! is the same for any cut, order and merge of the rows; core's
//! [`exact_sum_products`] adds them in f64 lanes, exact by a test on their
//! exponents, at the state of adding them one by one. The operands are
//! the graph's own tensors, read back after the run, and a row's values do
//! not depend on the micro-batch size (a product's reduction is cut by its
//! length alone, and every other vertex works per row).

use tessera_core::kernels::{ExactSum, exact_sum_products};

use super::{Act, read_rows};
use crate::ipu::Engine;

/// The rows a parameter's gradient sums over: `a`'s and `b`'s products, or
/// `b` alone for a bias (`a` is `None`: a row of ones).
#[derive(Clone, Debug)]
pub(in crate::model) struct RowProducts {
    pub(in crate::model) a: Option<Act>,
    pub(in crate::model) b: Act,
}

impl RowProducts {
    /// A weight's: the layer's input (or patches) `a` and output gradient `b`.
    pub(in crate::model) const fn weight(a: Act, b: Act) -> Self {
        Self { a: Some(a), b }
    }

    /// A bias's: the output gradient `b`.
    pub(in crate::model) const fn bias(b: Act) -> Self {
        Self { a: None, b }
    }

    /// Exact additions per run: rows times the gradient's elements.
    pub(in crate::model) fn additions(&self) -> u64 {
        let (rows, cols) = (self.b.layout.rows(), self.b.layout.cols());
        let fan_in = self.a.as_ref().map_or(1, |a| a.layout.cols());
        (rows * cols * fan_in) as u64
    }

    /// Adds the last run's products into `sums` (the gradient row-major),
    /// with core's lane kernel ([`exact_sum_products`]): the states of
    /// adding them one by one, bit for bit.
    pub(in crate::model) fn accumulate(&self, e: &Engine, sums: &mut [ExactSum]) {
        let b = read_rows(e, &self.b);
        let rows = self.b.layout.rows();
        match &self.a {
            Some(a) => exact_sum_products(rows, &read_rows(e, a), &b, sums),
            // A bias: products with a column of ones, exact.
            None => exact_sum_products(rows, &vec![1.0; rows], &b, sums),
        }
    }
}
