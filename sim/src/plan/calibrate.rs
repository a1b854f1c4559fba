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
//! use tessera_sim::plan::SimLayer;
//! use tessera_sim::plan::calibrate::Calibration;
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
//! The simulator's layers keep f32 tensors in 32.32 and the 16-bit
//! precisions (f16 compute runs the AMP at its f16 rate on f32 storage,
//! as the trainer does), so their memory and exchange are those of f32
//! values. In the FP8 and MX precisions the layers quantise their
//! products' operands as the trainer does, and hold and exchange those in
//! their encoding's bytes, priced as [`IpuSpec::product_of`] says.

use core::fmt;
use std::collections::HashMap;

use super::config::Precision;
use super::table::{LayerCosts, ModelTable, SimLayer, SimulatedCost};
use crate::IpuSpec;
use crate::ipu::Target;
use crate::model::{Compute, ConvExtras, ModelError, conv2d_cycles, pool2d_cycles};

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

/// Compiles layers on a simulated IPU and caches their costs (see the
/// [module docs](self)).
#[derive(Debug)]
pub struct Calibration {
    ipu: IpuSpec,
    cache: HashMap<(SimLayer, usize, Compute), SimulatedCost>,
    hits: usize,
    /// Whole networks built (`network_costs`).
    networks: usize,
}

impl Calibration {
    /// An empty cache for layers on one `ipu`.
    ///
    /// ```
    /// use tessera_sim::plan::SimLayer;
    /// use tessera_sim::plan::calibrate::Calibration;
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let ipu = IpuSpec::new(IpuParams { tiles: 16, ..IpuParams::default() }).unwrap();
    /// let mut calibration = Calibration::new(ipu);
    /// let dense = SimLayer::Dense { inputs: 32, outputs: 16, input_grad: true };
    /// assert_eq!((calibration.compiled(), calibration.hits()), (0, 0));
    /// // Priced on that IPU: its fullest tile fits a tile's memory.
    /// let cost = calibration.price(&dense, 2, false)?;
    /// assert!(cost.max_tile_bytes > 0 && cost.max_tile_bytes <= ipu.memory_per_tile());
    /// # Ok::<(), tessera_sim::plan::calibrate::CalibrationError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::plan::SimLayer;
    /// use tessera_sim::plan::calibrate::Calibration;
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let ipu = IpuSpec::new(IpuParams { tiles: 16, ..IpuParams::default() }).unwrap();
    /// let mut calibration = Calibration::new(ipu);
    /// let dense = SimLayer::Dense { inputs: 32, outputs: 16, input_grad: true };
    /// calibration.price(&dense, 2, false)?;
    /// calibration.price(&dense, 2, false)?; // the same: from the cache
    /// calibration.price(&dense, 4, false)?; // another micro-batch: compiled
    /// assert_eq!(calibration.compiled(), 2);
    /// # Ok::<(), tessera_sim::plan::calibrate::CalibrationError>(())
    /// ```
    #[must_use]
    pub fn compiled(&self) -> usize {
        self.cache.len() + self.networks
    }

    /// Prices answered from the cache.
    ///
    /// ```
    /// use tessera_sim::plan::SimLayer;
    /// use tessera_sim::plan::calibrate::Calibration;
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let ipu = IpuSpec::new(IpuParams { tiles: 16, ..IpuParams::default() }).unwrap();
    /// let mut calibration = Calibration::new(ipu);
    /// let dense = SimLayer::Dense { inputs: 32, outputs: 16, input_grad: true };
    /// let first = calibration.price(&dense, 2, true)?;
    /// assert_eq!(calibration.hits(), 0);
    /// assert_eq!(calibration.price(&dense, 2, true)?, first);
    /// assert_eq!(calibration.hits(), 1);
    /// # Ok::<(), tessera_sim::plan::calibrate::CalibrationError>(())
    /// ```
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
    ///
    /// ```
    /// use tessera_sim::plan::SimLayer;
    /// use tessera_sim::plan::calibrate::Calibration;
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let ipu = IpuSpec::new(IpuParams { tiles: 16, ..IpuParams::default() }).unwrap();
    /// let mut calibration = Calibration::new(ipu);
    /// let dense = SimLayer::Dense { inputs: 32, outputs: 16, input_grad: true };
    /// let cost = calibration.price(&dense, 2, false)?;
    /// // The backward pass computes two products (weights' and input's
    /// // gradients) where the forward pass computes one.
    /// assert!(cost.forward_cycles > 0 && cost.backward_cycles > cost.forward_cycles);
    /// assert!(cost.max_tile_bytes > 0);
    /// // A micro-batch of 0 makes no layer.
    /// assert!(matches!(
    ///     calibration.price(&dense, 0, false),
    ///     Err(tessera_sim::plan::calibrate::CalibrationError::Shape { micro_batch: 0, .. })
    /// ));
    /// # Ok::<(), tessera_sim::plan::calibrate::CalibrationError>(())
    /// ```
    pub fn price(
        &mut self,
        layer: &SimLayer,
        micro_batch: usize,
        f16: bool,
    ) -> Result<SimulatedCost, CalibrationError> {
        let compute = if f16 { Compute::F16 } else { Compute::F32 };
        self.price_in(layer, micro_batch, compute)
    }

    /// [`Calibration::price`] in the trainer's arithmetic `compute` (a
    /// quantised one too).
    ///
    /// # Errors
    /// [`Calibration::price`]'s.
    ///
    /// ```
    /// use tessera_sim::model::Compute;
    /// use tessera_sim::plan::SimLayer;
    /// use tessera_sim::plan::calibrate::Calibration;
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let ipu = IpuSpec::new(IpuParams { tiles: 16, ..IpuParams::default() }).unwrap();
    /// let mut calibration = Calibration::new(ipu);
    /// let dense = SimLayer::Dense { inputs: 32, outputs: 16, input_grad: true };
    /// // The same cache as `price`: f32 compute is `price(.., false)`.
    /// let cost = calibration.price_in(&dense, 2, Compute::F32)?;
    /// assert_eq!(calibration.price(&dense, 2, false)?, cost);
    /// assert_eq!((calibration.compiled(), calibration.hits()), (1, 1));
    /// # Ok::<(), tessera_sim::plan::calibrate::CalibrationError>(())
    /// ```
    pub fn price_in(
        &mut self,
        layer: &SimLayer,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<SimulatedCost, CalibrationError> {
        let key = (*layer, micro_batch, compute);
        if let Some(cost) = self.cache.get(&key) {
            self.hits += 1;
            return Ok(*cost);
        }
        let cost = self.compile(layer, micro_batch, compute)?;
        self.cache.insert(key, cost);
        Ok(cost)
    }

    fn compile(
        &self,
        layer: &SimLayer,
        micro_batch: usize,
        compute: Compute,
    ) -> Result<SimulatedCost, CalibrationError> {
        let (f16, quant) = (compute.f16(), compute.recipe());
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
                    quant,
                },
                target,
            ),
            SimLayer::Dense { input_grad, .. } => conv2d_cycles(
                &shape,
                ConvExtras {
                    input_grad,
                    f16,
                    quant,
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
    /// samples in `precision` (the trainer's arithmetic in it,
    /// [`Precision::compute`]: quantised products in FP8 and MX); every row of
    /// a network's table ([`ModelTable::from_network`]) from the whole
    /// network built as the trainer builds it
    /// (`plan::network_costs`, see the [planner's docs](super)).
    ///
    /// # Errors
    /// [`CalibrationError::NothingToCalibrate`] if no row has one;
    /// [`Calibration::price`]'s; [`CalibrationError::Network`].
    ///
    /// ```
    /// use tessera_sim::plan::calibrate::{Calibration, CalibrationError};
    /// use tessera_sim::plan::{Gemm, Layer, ModelTable, Precision, SimLayer};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let ipu = IpuSpec::new(IpuParams { tiles: 16, ..IpuParams::default() }).unwrap();
    /// let mut calibration = Calibration::new(ipu);
    /// let dense = SimLayer::Dense { inputs: 32, outputs: 16, input_grad: true };
    /// let layer = |name: &str, sim| Layer {
    ///     name: name.into(),
    ///     params: 32 * 16,
    ///     flops_forward: 2 * 32 * 16,
    ///     flops_backward: 4 * 32 * 16,
    ///     activation_bytes: 64,
    ///     output_bytes: None,
    ///     gemm: Some(Gemm { m: 1, k: 32, n: 16 }),
    ///     tied: None,
    ///     sim,
    /// };
    /// // Two rows, one described for the simulator.
    /// let model = ModelTable::new("two", 128, vec![layer("a", Some(dense)), layer("b", None)]).unwrap();
    /// let costs = calibration.price_model(&model, 2, Precision::Fp32)?;
    /// assert_eq!(costs.layers[0], Some(calibration.price(&dense, 2, false)?));
    /// assert_eq!(costs.layers[1], None);
    /// // A table that describes no row for the simulator.
    /// let plain = ModelTable::new("plain", 128, vec![layer("b", None)]).unwrap();
    /// assert!(matches!(
    ///     calibration.price_model(&plain, 2, Precision::Fp32),
    ///     Err(CalibrationError::NothingToCalibrate { .. })
    /// ));
    /// # Ok::<(), CalibrationError>(())
    /// ```
    pub fn price_model(
        &mut self,
        model: &ModelTable,
        micro_batch: usize,
        precision: Precision,
    ) -> Result<LayerCosts, CalibrationError> {
        let compute = precision.compute();
        if let Some(network) = model.network() {
            self.networks += 1;
            return super::network_costs::network_costs(
                self.ipu,
                (model, network),
                micro_batch,
                compute,
            )
            .map_err(|error| CalibrationError::Network {
                model: model.name().to_owned(),
                micro_batch,
                error: Box::new(error),
            });
        }
        if model.layers().iter().all(|l| l.sim.is_none()) {
            return Err(CalibrationError::NothingToCalibrate {
                model: model.name().to_owned(),
            });
        }
        let layers = model
            .layers()
            .iter()
            .map(|l| {
                l.sim
                    .map(|s| self.price_in(&s, micro_batch, compute))
                    .transpose()
            })
            .collect::<Result<_, _>>()?;
        Ok(LayerCosts {
            micro_batch,
            f16: compute.f16(),
            recipe: compute.recipe(),
            ipu: self.ipu,
            layers,
        })
    }
}
