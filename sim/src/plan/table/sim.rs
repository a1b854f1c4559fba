//! A table row as the simulator builds it ([`SimLayer`]) and what the
//! simulator charges for it ([`SimulatedCost`], [`LayerCosts`]): the
//! descriptions [`crate::plan::calibrate`] prices.

use serde::{Deserialize, Serialize};

use crate::IpuSpec;
use crate::model::{Conv2d, ConvShape, LayerCycles, Pool2d, PoolKind};

/// A layer as the simulator builds it, for calibration (sizes per sample;
/// the micro-batch is given when pricing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum SimLayer {
    /// A convolution (no bias), optionally followed by batch norm over its
    /// feature maps with ReLU and a residual add.
    Conv2d {
        /// Input channels.
        in_channels: usize,
        /// Output channels.
        out_channels: usize,
        /// Kernel height and width.
        kernel: [usize; 2],
        /// Stride.
        stride: usize,
        /// Zero padding on every side.
        padding: usize,
        /// Input height and width.
        input: [usize; 2],
        /// Batch norm and ReLU after the convolution.
        batch_norm: bool,
        /// A residual add after them.
        residual: bool,
        /// Whether the input's gradient is computed (not for the first
        /// layer).
        input_grad: bool,
    },
    /// Max or average pooling (global average pooling: the window the
    /// whole input).
    Pool2d {
        /// The window's maximum (else its mean).
        max: bool,
        /// Channels.
        channels: usize,
        /// Window height and width.
        kernel: [usize; 2],
        /// Stride.
        stride: usize,
        /// Padding on every side.
        padding: usize,
        /// Input height and width.
        input: [usize; 2],
    },
    /// A dense layer's product (no bias): built as a 1 x 1 convolution of
    /// a 1 x 1 map, the same product `[n, inputs] x [inputs, outputs]`.
    Dense {
        /// Input features.
        inputs: usize,
        /// Output features.
        outputs: usize,
        /// Whether the input's gradient is computed.
        input_grad: bool,
    },
}

impl SimLayer {
    /// The convolution (or pooling window) on `n` samples, if the sizes
    /// are valid.
    pub(in crate::plan) fn shape(&self, n: usize) -> Option<ConvShape> {
        match *self {
            Self::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                padding,
                input,
                ..
            } => Conv2d {
                in_channels,
                out_channels,
                kernel: (kernel[0], kernel[1]),
                stride,
                padding,
            }
            .on(n, (input[0], input[1])),
            Self::Pool2d {
                channels, input, ..
            } => self.pool()?.on(n, channels, (input[0], input[1])),
            Self::Dense {
                inputs, outputs, ..
            } => Self::Conv2d {
                in_channels: inputs,
                out_channels: outputs,
                kernel: [1, 1],
                stride: 1,
                padding: 0,
                input: [1, 1],
                batch_norm: false,
                residual: false,
                input_grad: false,
            }
            .shape(n),
        }
    }

    /// The pooling, for [`SimLayer::Pool2d`].
    pub(in crate::plan) fn pool(&self) -> Option<Pool2d> {
        match *self {
            Self::Pool2d {
                max,
                kernel,
                stride,
                padding,
                ..
            } => Some(Pool2d {
                kind: if max { PoolKind::Max } else { PoolKind::Avg },
                kernel: (kernel[0], kernel[1]),
                stride,
                padding,
            }),
            _ => None,
        }
    }

    /// A short description for reports: `conv 3x3/2 128->128 @56x56 +bn`.
    ///
    /// ```
    /// use tessera_sim::plan::SimLayer;
    ///
    /// let dense = SimLayer::Dense { inputs: 64, outputs: 10, input_grad: false };
    /// assert_eq!(dense.describe(), "dense 64->10");
    /// ```
    #[must_use]
    pub fn describe(&self) -> String {
        match *self {
            Self::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                input,
                batch_norm,
                residual,
                ..
            } => format!(
                "conv {}x{}/{stride} {in_channels}->{out_channels} @{}x{}{}{}",
                kernel[0],
                kernel[1],
                input[0],
                input[1],
                if batch_norm { " +bn" } else { "" },
                if residual { " +add" } else { "" }
            ),
            Self::Pool2d {
                max,
                channels,
                kernel,
                stride,
                input,
                ..
            } => format!(
                "{}pool {}x{}/{stride} {channels} @{}x{}",
                if max { "max" } else { "avg" },
                kernel[0],
                kernel[1],
                input[0],
                input[1]
            ),
            Self::Dense {
                inputs, outputs, ..
            } => format!("dense {inputs}->{outputs}"),
        }
    }
}

/// What the engine charges for one layer and micro-batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct SimulatedCost {
    /// Cycles of the forward pass (with batch norm, ReLU and the residual
    /// add when the layer has them).
    pub forward_cycles: u64,
    /// Cycles of the backward pass.
    pub backward_cycles: u64,
    /// Bytes on the fullest tile of the layer's training graph.
    pub max_tile_bytes: u64,
}

impl From<LayerCycles> for SimulatedCost {
    fn from(c: LayerCycles) -> Self {
        Self {
            forward_cycles: c.forward,
            backward_cycles: c.backward,
            max_tile_bytes: c.max_tile_bytes,
        }
    }
}

/// The simulated cost of each row of a model (`None` for rows without a
/// [`SimLayer`]), for one micro-batch, precision and IPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerCosts {
    /// Samples per micro-batch priced.
    pub micro_batch: usize,
    /// Whether compute was f16 (every precision but `32.32`).
    pub f16: bool,
    /// The quantised products' recipe (FP8 and MX precisions).
    #[serde(skip)]
    pub recipe: Option<crate::model::quant::Recipe>,
    /// The IPU priced on.
    #[serde(skip)]
    pub ipu: IpuSpec,
    /// Per row of the model.
    pub layers: Vec<Option<SimulatedCost>>,
}
