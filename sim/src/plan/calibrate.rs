//! Layer costs measured on the simulator instead of assumed: a layer
//! described as the simulator builds it ([`SimLayer`]: a convolution with
//! its batch norm, ReLU and residual add, a pooling, a dense layer) is
//! compiled on the simulated IPU, every tile of it, and its forward and
//! backward cycles and its fullest tile are read from the engine
//! ([`crate::model::conv2d_cycles`]). [`Calibration`] caches them per
//! distinct layer, micro-batch and compute precision, so a model whose
//! layers repeat (ResNet-50's 53 convolutions are 24 distinct layers)
//! compiles each once.
//!
//! A table's rows carry their description in [`Layer::sim`](super::Layer::sim)
//! (the built-in ResNet-50's do); [`Calibration::price_model`] prices
//! every described row, and [`PlanConfig::layer_costs`](super::PlanConfig::layer_costs)
//! hands the result to the planner, which then takes those rows' cycles
//! and per-tile memory from the simulator (see the [module docs](super)).
//!
//! ```
//! use tessera_sim::IpuSpec;
//! use tessera_sim::plan::calibrate::{Calibration, SimLayer};
//!
//! let mut calibration = Calibration::new(IpuSpec::MK2_GC200);
//! let dense = SimLayer::Dense { inputs: 64, outputs: 32, input_grad: true };
//! let cost = calibration.price(&dense, 2, false)?;
//! assert!(cost.forward_cycles > 0 && cost.backward_cycles > cost.forward_cycles);
//! assert_eq!(calibration.price(&dense, 2, false)?, cost); // from the cache
//! assert_eq!((calibration.compiled(), calibration.hits()), (1, 1));
//! # Ok::<(), tessera_sim::plan::calibrate::CalibrationError>(())
//! ```
//!
//! The simulator's layers keep f32 tensors in every precision (f16
//! compute runs the AMP at its f16 rate on f32 storage, as the trainer
//! does), so their memory and exchange are those of f32 values.

use core::fmt;
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::config::Precision;
use super::model::ModelTable;
use crate::IpuSpec;
use crate::ipu::Target;
use crate::model::{
    Conv2d, ConvExtras, ConvShape, LayerCycles, ModelError, Pool2d, PoolKind, conv2d_cycles,
    pool2d_cycles,
};

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
    fn shape(&self, n: usize) -> Option<ConvShape> {
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
    fn pool(&self) -> Option<Pool2d> {
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

/// Why a layer cannot be calibrated.
#[derive(Clone, Debug, PartialEq)]
pub enum CalibrationError {
    /// The description's sizes do not make a layer (a kernel larger than
    /// the padded input, a zero size, padding over half a window).
    Shape {
        /// The layer.
        layer: SimLayer,
        /// Samples per micro-batch.
        micro_batch: usize,
    },
    /// The simulator could not build the layer (a tile out of memory, a
    /// tensor too large).
    Simulator {
        /// The layer.
        layer: SimLayer,
        /// Samples per micro-batch.
        micro_batch: usize,
        /// The simulator's error (boxed: it is large).
        error: Box<ModelError>,
    },
    /// A network's graph cannot be built to price its layers.
    Network {
        /// The model's name.
        model: String,
        /// Samples per micro-batch.
        micro_batch: usize,
        /// What the simulator said.
        error: Box<ModelError>,
    },
    /// The model's rows describe no layer the simulator can build.
    NothingToCalibrate {
        /// The model.
        model: String,
    },
}

impl fmt::Display for CalibrationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shape { layer, micro_batch } => write!(
                f,
                "cannot calibrate {} at micro-batch {micro_batch}: its sizes make no layer",
                layer.describe()
            ),
            Self::Simulator {
                layer,
                micro_batch,
                error,
            } => write!(
                f,
                "cannot calibrate {} at micro-batch {micro_batch} on the simulator: {error}",
                layer.describe()
            ),
            Self::Network {
                model,
                micro_batch,
                error,
            } => write!(
                f,
                "cannot build {model} at micro-batch {micro_batch} on the simulator: {error}"
            ),
            Self::NothingToCalibrate { model } => write!(
                f,
                "model {model} describes no layer for the simulator (no row has a `sim` \
                 description)"
            ),
        }
    }
}

impl core::error::Error for CalibrationError {}

/// The simulated cost of each row of a model (`None` for rows without a
/// [`SimLayer`]), for one micro-batch, precision and IPU.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerCosts {
    /// Samples per micro-batch priced.
    pub micro_batch: usize,
    /// Whether compute was f16 (precisions `16.32` and `16.16`).
    pub f16: bool,
    /// The IPU priced on.
    #[serde(skip)]
    pub ipu: IpuSpec,
    /// Per row of the model.
    pub layers: Vec<Option<SimulatedCost>>,
}

/// Compiles layers on a simulated IPU and caches their costs (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct Calibration {
    ipu: IpuSpec,
    cache: HashMap<(SimLayer, usize, bool), SimulatedCost>,
    hits: usize,
    /// Whole networks built (`network_costs`).
    networks: usize,
}

impl Calibration {
    /// An empty cache for layers on one `ipu`.
    #[must_use]
    pub fn new(ipu: IpuSpec) -> Self {
        Self {
            ipu,
            cache: HashMap::new(),
            hits: 0,
            networks: 0,
        }
    }

    /// Layers compiled so far (distinct layer, micro-batch and precision),
    /// a whole network counting as one.
    #[must_use]
    pub fn compiled(&self) -> usize {
        self.cache.len() + self.networks
    }

    /// Prices answered from the cache.
    #[must_use]
    pub const fn hits(&self) -> usize {
        self.hits
    }

    /// `layer` at `micro_batch` samples, f16 compute if `f16`, on every
    /// tile of the IPU: compiled the first time, from the cache after.
    ///
    /// # Errors
    /// [`CalibrationError::Shape`] for sizes that make no layer (also a
    /// micro-batch of 0); [`CalibrationError::Simulator`] when the
    /// simulator cannot build it (a tile out of memory names the tile).
    pub fn price(
        &mut self,
        layer: &SimLayer,
        micro_batch: usize,
        f16: bool,
    ) -> Result<SimulatedCost, CalibrationError> {
        let key = (*layer, micro_batch, f16);
        if let Some(cost) = self.cache.get(&key) {
            self.hits += 1;
            return Ok(*cost);
        }
        let cost = self.compile(layer, micro_batch, f16)?;
        self.cache.insert(key, cost);
        Ok(cost)
    }

    fn compile(
        &self,
        layer: &SimLayer,
        micro_batch: usize,
        f16: bool,
    ) -> Result<SimulatedCost, CalibrationError> {
        let shape = layer.shape(micro_batch).ok_or(CalibrationError::Shape {
            layer: *layer,
            micro_batch,
        })?;
        let target = Target::single(self.ipu);
        let cycles = match *layer {
            SimLayer::Conv2d {
                batch_norm,
                residual,
                input_grad,
                ..
            } => conv2d_cycles(
                &shape,
                ConvExtras {
                    batch_norm,
                    residual: batch_norm && residual,
                    input_grad,
                    f16,
                },
                target,
            ),
            SimLayer::Dense { input_grad, .. } => conv2d_cycles(
                &shape,
                ConvExtras {
                    input_grad,
                    f16,
                    ..ConvExtras::default()
                },
                target,
            ),
            SimLayer::Pool2d { .. } => {
                let pool = layer.pool().expect("a pooling layer");
                pool2d_cycles(&pool, &shape, f16, target)
            }
        };
        cycles
            .map(SimulatedCost::from)
            .map_err(|error| CalibrationError::Simulator {
                layer: *layer,
                micro_batch,
                error: Box::new(error),
            })
    }

    /// Every row of `model` that has a [`SimLayer`] at `micro_batch`
    /// samples in `precision` (f16 compute unless `32.32`); every row of
    /// a network's table ([`ModelTable::from_network`]) from the whole
    /// network built as the trainer builds it
    /// (`plan::network_costs`, see the [planner's docs](super)).
    ///
    /// # Errors
    /// [`CalibrationError::NothingToCalibrate`] if no row has one;
    /// [`Calibration::price`]'s; [`CalibrationError::Network`].
    pub fn price_model(
        &mut self,
        model: &ModelTable,
        micro_batch: usize,
        precision: Precision,
    ) -> Result<LayerCosts, CalibrationError> {
        let f16 = precision != Precision::Fp32;
        if let Some(network) = model.network() {
            self.networks += 1;
            return super::network_costs::network_costs(
                self.ipu,
                (model, network),
                micro_batch,
                f16,
            );
        }
        if model.layers().iter().all(|l| l.sim.is_none()) {
            return Err(CalibrationError::NothingToCalibrate {
                model: model.name().to_owned(),
            });
        }
        let layers = model
            .layers()
            .iter()
            .map(|l| l.sim.map(|s| self.price(&s, micro_batch, f16)).transpose())
            .collect::<Result<_, _>>()?;
        Ok(LayerCosts {
            micro_batch,
            f16,
            ipu: self.ipu,
            layers,
        })
    }
}
