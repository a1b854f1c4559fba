//! The model of the data-parallel trainer, run tile-parallel on one
//! replica's simulated IPUs: one model type, built from layers.
//!
//! A [`NetworkConfig`] describes it: layers (dense blocks, convolutions,
//! batch norm with its activation, pooling, residual blocks, parallel
//! branches) and a dense head, softmax cross-entropy on the logits. An
//! MLP ([`MlpConfig`]: `inputs`, hidden widths, `classes`, ReLU or GELU,
//! optional batch norm) is a network of dense blocks
//! ([`MlpConfig::network`]), each hidden layer one op that keeps its index
//! and parameter names. [`Model`] builds the network once for a fixed
//! micro-batch size into an [`ipu::Graph`](crate::ipu::Graph) and two
//! engines (forward + backward, and inference) and then runs
//! micro-batches: [`Model::train_micro_batch`] writes the gradients of
//! `scale * sum of cross-entropy losses`, [`Model::evaluate`] the losses
//! and the number of correct predictions.
//!
//! # Layering
//!
//! The files depend one way, bottom up; each may import only from the
//! levels below it:
//! 1. descriptions: `config` (activation, arithmetic, parameter specs,
//!    sizes), `shapes` (convolutions' and poolings'), `network` (the layers, flattened and shape-inferred once:
//!    `NetworkConfig::ops`), `model_config` (the MLP, and what the trainer
//!    is asked for), `device_mapping`, `network_file`, `error`, `quant`
//!    (the quantised products' recipe and arithmetic);
//! 2. placement: `placement` (one placement of the flattened layers, made
//!    block by block, and its one validator);
//! 3. layers: `layers/*` and their codelets (`codelets`);
//! 4. the runtime: `runtime` (feeding a micro-batch, serving group sums,
//!    reading the outputs), `activations` (what each stage keeps, measured
//!    from the graph), `recompute`;
//! 5. the model: `replica` ([`Model`]);
//! 6. the estimate: `estimate` ([`MemoryEstimate`]).
//!
//! # Placement
//!
//! By default every layer spreads over every tile of the replica's IPUs.
//! [`Placement::Ipus`] puts each layer on one IPU of the replica instead
//! (contiguous stages of whole blocks, by a device mapping,
//! [`Placement::network`], or balanced by forward flops,
//! [`Placement::network_balanced`]): model
//! sharding, and the stages of a pipeline, whose activations and their
//! gradients cross IPU-Links between stages. [`Model::stage_cycles`] splits
//! a training run's cycles by stage, forward and backward, for the
//! pipeline schedules' time. The placement changes where things run and
//! what they cost, never a bit of the results.
//!
//! # On the tiles
//!
//! Every matrix product is [`kernels::matmul`](fn@crate::kernels::matmul),
//! cut over rows, columns and the reduction by its planner
//! ([`ProductPlan`](crate::kernels::matmul::ProductPlan)): parts on their
//! tiles calling `gemm` on operands exchanged to them, a split reduction's
//! partials added in a tree fixed by the reduction's length. The forward
//! pass is, per layer, `Y = A W` then a vertex per block adding the bias,
//! normalising (batch norm) and applying the activation; the loss is a
//! vertex per block of whole rows of logits; the backward pass is `dW =
//! A^T dZ` (the micro-batch reduced inside one vertex per block of `dW`),
//! `db = 1^T dZ` (the same product with a row of ones), `dA = dZ W^T` onto
//! the previous layer's blocks, and a vertex per block for the
//! activation's (and batch norm's) derivative. A layer's weights live in
//! the blocks the forward product's parts read in place. Results are
//! bitwise the same for every number of tiles.
//!
//! How many tiles: a product gets at most one part per tile and none
//! under [`MIN_BLOCK_FLOPS`] flops, so the small layers of
//! a small micro-batch use a few tiles with real work each instead of 1,472
//! vertices of a handful of multiply-adds (which would cost host time per
//! vertex and, on a real IPU, exchange and sync for nothing).
//!
//! # Numerics
//!
//! [`Compute::F32`] rounds nothing. [`Compute::F16`] models mixed precision
//! on the IPU: the weights given are already f16 values; products
//! accumulate in f32 (as the AMP unit); every activation (pre-activation,
//! activation, logits) and every activation gradient, and the gradients
//! written, are rounded to nearest f16 (overflow to infinity, as fp16
//! hardware); the weight and bias gradients come out of their products
//! rounded, as the AMP unit writes f16 results. Values are held in f32 tensors (f16-representable), so the
//! memory figures count activations at 4 bytes.
//!
//! The loss is `tessera_core::loss`'s softmax cross-entropy
//! ([`Reduction::None`](tessera_core::loss::Reduction::None), gradient
//! scaled by `scale`); GELU is the tanh approximation with `libm`'s `tanhf`
//! and its exact derivative; [`NetworkConfig::init`] uses `libm` too, so results
//! do not depend on the platform's maths library.
//!
//! # Batch norm
//!
//! Hidden layers with batch norm: `z = gamma (y - mean) / sqrt(var + eps) +
//! beta` after the bias, before the activation, `eps` = [`BN_EPSILON`]. The
//! statistics take two passes, as PyTorch's: a vertex per block sums `x`
//! per column in f32 over each chunk of its rows in order (a dense block's blocks
//! hold whole columns, one chunk; a network's feature maps are cut into
//! chunks of rows fixed by the layer's shape, never by the tiles); each
//! column block's chunk partials are gathered to one of its tiles and added
//! there in a tree fixed by the number of chunks; one vertex joins the
//! columns' sums, sets the element count and hands them to the
//! [`GroupSum`] (the trainer all-reduces them over the replica group); the
//! totals come back to every block, which give `mean = S1 / n`. Then the
//! same for the squared deviations `(x - mean)^2`, giving `var = M2 / n`
//! (biased). The backward pass sums `dz` and `dz * xhat` per column the
//! same way and through the group a third time (synchronised batch norm);
//! the gradients of gamma and beta are this replica's sums before the
//! group's. Every sum is bitwise the same on every tiling.
//! Running statistics (momentum [`BN_MOMENTUM`], unbiased variance) are
//! updated on the host after each training micro-batch and used by
//! [`Model::evaluate`]; [`Model::buffers`] and [`Model::set_buffers`] save and
//! restore them (and delayed scaling's amax histories, which the trainer
//! advances after each applied step). Without batch norm the [`GroupSum`] is
//! never called.

mod activations;
pub mod bounds;
mod codelets;
mod config;
mod device_mapping;
mod error;
mod estimate;
mod layers;
mod model_config;
mod network;
pub mod network_file;
mod placement;
pub mod quant;
mod recompute;
mod replica;
mod runtime;
mod shapes;

pub use activations::StageActivations;
pub use config::{
    Activation, BN_EPSILON, BN_MOMENTUM, Compute, MAX_TENSOR_BYTES, MIN_BLOCK_FLOPS, ParamKind,
    ParamSpec,
};
pub use device_mapping::{DeviceMapping, MappingEntry};
pub use error::{CheckpointError, MappingError, ModelError};
pub use estimate::MemoryEstimate;
pub use layers::batch_norm::{BatchNormRun, batch_norm2d_on_tiles};
pub use layers::conv2d::{ConvRun, conv2d_on_tiles, nchw_to_rows, rows_to_nchw};
pub use layers::cost::{ConvExtras, LayerCycles, conv2d_cycles, pool2d_cycles};
pub use layers::pool::{PoolRun, pool2d_on_tiles};
pub use layers::residual::residual_add_on_tiles;
pub use model_config::{MlpConfig, ModelConfig};
pub(crate) use network::Op;
pub use network::{BnGroup, NetLayer, NetworkConfig};
pub use network_file::{LayerStep, NetworkFile, NetworkFileError};
pub use placement::{Part, Placement, StageCycles};
pub use recompute::{Recomputation, check_checkpoints};
pub use replica::Model;
pub use runtime::{GroupSum, MicroBatchOutput, NoGroup};
pub use shapes::{Conv2d, ConvShape, Pool2d, PoolKind};
