//! A table's rows: a layer's sizes and costs per sample.

use serde::{Deserialize, Serialize};

use super::sim::SimLayer;

/// The matrix product a layer is built around, per sample:
/// `[m, k] x [k, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gemm {
    /// Rows per sample (1 for a dense layer; output positions of a
    /// convolution; tokens of a transformer layer).
    pub m: u64,
    /// The reduction dimension (input features; `Cin x kh x kw` of a
    /// convolution).
    pub k: u64,
    /// Output columns (output features or channels).
    pub n: u64,
}

impl Gemm {
    /// FLOPs of the product per sample, `2 m k n` (saturating).
    ///
    /// ```
    /// use tessera_sim::plan::Gemm;
    ///
    /// assert_eq!(Gemm { m: 1, k: 64, n: 10 }.flops(), 2 * 64 * 10);
    /// assert_eq!(Gemm { m: u64::MAX, k: 2, n: 2 }.flops(), u64::MAX); // saturates
    /// ```
    #[must_use]
    pub const fn flops(&self) -> u64 {
        2u64.saturating_mul(self.m)
            .saturating_mul(self.k)
            .saturating_mul(self.n)
    }
}

/// Weights a layer uses but another (earlier) layer owns, as BERT's MLM
/// decoder uses the word embeddings.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tied {
    /// The owning layer's name.
    pub layer: String,
    /// How many of its parameters are shared.
    pub params: u64,
}

/// One row of a [`ModelTable`](super::ModelTable) (see the [module docs](super) for the
/// conventions).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// A name, unique in the table.
    pub name: String,
    /// Trainable parameters the layer owns.
    pub params: u64,
    /// FLOPs of the forward pass per sample.
    pub flops_forward: u64,
    /// FLOPs of the backward pass per sample.
    pub flops_backward: u64,
    /// Bytes per sample the backward pass needs kept from the forward pass
    /// (16-bit).
    pub activation_bytes: u64,
    /// Bytes per sample handed to the next layer (16-bit), if not the
    /// default (see the [module docs](super)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// The layer's matrix product per sample, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm: Option<Gemm>,
    /// Weights shared with an earlier layer: not counted in the model's
    /// parameters, but held (weights and gradients) on this layer's
    /// pipeline stage too when the owner is on another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tied: Option<Tied>,
    /// The layer as the simulator builds it, for pricing it on the
    /// simulated IPU instead of by the assumptions
    /// ([`crate::plan::calibrate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimLayer>,
}

impl Layer {
    /// Bytes per sample handed to the next layer: `output_bytes`, else the
    /// product's `2 m n`, else `activation_bytes`.
    ///
    /// ```
    /// use tessera_sim::plan::{Gemm, Layer};
    ///
    /// let dense = Layer {
    ///     name: "fc".into(),
    ///     params: 650,
    ///     flops_forward: 1280,
    ///     flops_backward: 2560,
    ///     activation_bytes: 128,
    ///     output_bytes: None,
    ///     gemm: Some(Gemm { m: 1, k: 64, n: 10 }),
    ///     tied: None,
    ///     sim: None,
    /// };
    /// assert_eq!(dense.boundary_bytes(), 2 * 10); // the product's 2 m n
    /// assert_eq!(Layer { gemm: None, ..dense.clone() }.boundary_bytes(), 128);
    /// assert_eq!(Layer { output_bytes: Some(6), ..dense }.boundary_bytes(), 6);
    /// ```
    #[must_use]
    pub fn boundary_bytes(&self) -> u64 {
        self.output_bytes
            .or_else(|| self.gemm.map(|g| g.m.saturating_mul(g.n).saturating_mul(2)))
            .unwrap_or(self.activation_bytes)
    }

    /// 16-bit elements per sample of the layer's output.
    ///
    /// ```
    /// use tessera_sim::plan::Layer;
    ///
    /// let pool = Layer {
    ///     name: "pool".into(),
    ///     params: 0,
    ///     flops_forward: 100,
    ///     flops_backward: 100,
    ///     activation_bytes: 0,
    ///     output_bytes: Some(7),
    ///     gemm: None,
    ///     tied: None,
    ///     sim: None,
    /// };
    /// assert_eq!(pool.output_elements(), 4); // 7 bytes of 16-bit values, rounded up
    /// ```
    #[must_use]
    pub fn output_elements(&self) -> u64 {
        match self.gemm {
            Some(g) => g.m.saturating_mul(g.n),
            None => self.boundary_bytes().div_ceil(2),
        }
    }
}

/// [`ModelTable::LIMIT`](super::ModelTable::LIMIT), here for the errors
/// that name it.
pub(super) const LIMIT: u64 = 1 << 53;
