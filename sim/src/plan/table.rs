//! Model descriptions for the planner: a table of layers, each with its
//! parameters, its floating-point operations per sample forward and
//! backward, the activations its backward pass needs stashed, and what it
//! hands to the next layer.
//!
//! Tables come from three places: the built-in ResNet-50 and BERT-Large
//! ([`super::builtin`]), the trainer's networks and MLPs
//! ([`ModelTable::from_network`]: an MLP is a network of dense blocks), and
//! TOML files for any other model ([`ModelTable::read`]):
//!
//! ```toml
//! name = "tiny"                # optional: the file's name otherwise
//! input_bytes = 1028           # per sample, from the host
//!
//! [[layer]]
//! name = "fc1"
//! params = 65792               # weights and biases
//! flops_forward = 131072       # per sample, a multiply-add counted as two
//! flops_backward = 131072      # per sample: weight and input gradients
//! activation_bytes = 1024      # per sample, stashed for the backward pass (16-bit)
//! output_bytes = 512           # optional: per sample, to the next layer
//! gemm = { m = 1, k = 256, n = 256 }   # optional: the layer's matrix product
//!
//! [[layer]]
//! name = "head"
//! params = 2570
//! flops_forward = 5120
//! flops_backward = 10240
//! activation_bytes = 40
//! tied = { layer = "fc1", params = 0 } # optional: weights shared with an earlier layer
//! ```
//!
//! Every key is checked: an unknown or missing one, a negative number or a
//! wrong type is an error naming the file, the line, the layer and the
//! field ([`ModelTableError`]). So are the values: every number, and every
//! sum over the layers, at most [`ModelTable::LIMIT`] (2^53); with a
//! `gemm`, `flops_forward` between 1% below and 4 times its `2 m k n`
//! ([`ModelTable::GEMM_FLOPS_BELOW`], [`ModelTable::GEMM_FLOPS_ABOVE`])
//! and `flops_backward` at most twice `flops_forward`.
//!
//! # Conventions
//!
//! - FLOPs count a multiply-add as two, and only the matrix products and
//!   the operations a layer without a product is made of (a pooling
//!   window's comparisons), as the simulator's MLP layers and the
//!   published GMAC counts do; the element-wise work after a product (bias,
//!   normalisation, activation) is priced separately by the planner from
//!   the layer's output size.
//! - The backward FLOPs are the weight gradient (as many as the forward
//!   pass, for a layer with parameters) plus the input gradient (as many
//!   again, except for the first layer, whose input is data).
//! - Bytes are for 16-bit activations; the planner doubles them in `32.32`.
//! - `output_bytes` defaults to the `gemm`'s output (`m x n` elements of 2
//!   bytes), else to `activation_bytes`.
//! - `gemm` is the product `[m, k] x [k, n]` per sample (`m` rows per
//!   sample: 1 for a dense layer, the output positions of a convolution,
//!   the tokens of a transformer's linear layer). It tells the planner how
//!   the layer's work spreads over tiles and what each tile must receive;
//!   a layer without one is priced as vector work over its elements.
//!

mod error;
mod file;
mod layer;
mod model_table;
mod sim;
#[cfg(test)]
mod tests;

pub use crate::toml_place::LayerRef;
pub use error::ModelTableError;
pub use layer::{Gemm, Layer, Tied};
pub use model_table::ModelTable;
pub use sim::{LayerCosts, SimLayer, SimulatedCost};
