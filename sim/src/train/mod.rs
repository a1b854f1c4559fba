//! The data-parallel trainer: instances and replicas on host threads (or
//! one instance per MPI process), each replica running the MLP on its
//! simulated IPU, gradients combined by a deterministic all-reduce, loss
//! scaling, stochastic rounding, optimizers, replicated tensor sharding,
//! checkpoints, and the simulated time of each step on the Pod.
//!
//! ```no_run
//! use tessera_sim::data::digits;
//! use tessera_sim::train::{RunOptions, TrainConfig, Trainer};
//!
//! let trainer = Trainer::new(TrainConfig::default(), digits())?;
//! let summary = trainer.run(&RunOptions::default(), &|_| {})?;
//! println!("test accuracy {:.3}", summary.test.test_accuracy);
//! # Ok::<(), tessera_sim::train::TrainError>(())
//! ```
//!
//! # A step
//!
//! With `R` replicas, `A` micro-batches each (`gradient_accumulation`) of
//! `b` samples (the batch arithmetic is in [`crate::data`]):
//!
//! 1. Every replica runs its `A` micro-batches forward and backward on its
//!    tiles with the loss `scale * (1 / b) * sum of cross-entropies`
//!    ([`Model::train_micro_batch`](crate::model::Model::train_micro_batch)),
//!    f16-rounded in the 16-bit modes. Each micro-batch's contribution is
//!    its gradients, its loss and correct count, and (for automatic loss
//!    scaling) its histogram counts as exact integer limbs.
//! 2. The replica sums its contributions in the deterministic tree
//!    ([`tree_sum`](tessera_core::collective::tree_sum)), and the
//!    replicas all-reduce the sums in the same tree (a reduce inside each
//!    instance, an all-reduce between instances, a broadcast back; see
//!    `comm.rs`). With powers of two of micro-batches per replica and of
//!    replicas per instance, the result is bitwise the tree over all `R *
//!    A` micro-batches in global order: the same for every split of the
//!    global batch over replicas, instances and accumulation.
//! 3. Every replica unscales the reduced gradients by `f32(1 / f64(scale))`
//!    and checks them for infinities (they are bitwise the same on every
//!    replica, so every replica decides alike), divides by `R * A` for the
//!    mean ([`GradReduction`]), and updates the loss scaler with the
//!    found-inf flag and the all-reduced histogram counts. A skipped step
//!    leaves weights and optimizer state untouched. With delayed scaling
//!    the replicas also all-reduce (`Max`) each delayed operand's amax
//!    over their micro-batches; an applied step pushes it into the model's
//!    amax histories, a skipped one does not.
//! 4. The optimizer (biases and batch-norm parameters in a group with no
//!    decay and no adaptation by default) updates the weights, with the
//!    stochastic-rounding bits of element `i` of parameter `p` at applied
//!    step `t` at position `i` of `RandomStream::new(seed, t).substream(p)`:
//!    the same on every replica, so replicated weights stay identical.
//!    Every `check_replicas_every` steps, and at the end, the replicas
//!    compare fingerprints of their weights and the run stops with
//!    [`TrainError::ReplicaDrift`] if they differ.
//!
//! # Precision
//!
//! [`PrecisionMode`]: `32.32` (f32), `16.32` (f16 compute and weights,
//! f32 master weights updated by the optimizer and rounded to nearest),
//! `16.16` (f16 weights updated in place with stochastic rounding, no
//! master) and `16.16-rn` (the same with round to nearest: small updates
//! are lost, which is what stochastic rounding is for). Gradients are
//! accumulated and reduced in f32; optimizer state is f32. The quantised
//! modes `8.16`, `8.32`, `mxfp8.16`, `mxfp6.16` and `mxfp4.16` are
//! `16.16` (`8.32`: `16.32`) with the dense and convolution products'
//! inputs quantised by a [`Recipe`](crate::model::quant::Recipe).
//!
//! # Replicated tensor sharding
//!
//! With [`TrainConfig::replicated_tensor_sharding`], each replica of an
//! instance keeps the optimizer state (and `16.32`'s master weights) of
//! one equal fragment of the parameters (padded so that fragments start at
//! 256-element blocks), updates only that fragment (LAMB's and LARS's
//! per-tensor norms from exact partial sums over the fragments, summed
//! exactly between replicas), and the replicas all-gather the updated
//! weights. The result is bitwise the unsharded run's; the optimizer
//! memory per replica falls by the replica count ([`OptimizerMemory`]).
//! The host moves the bytes hierarchically; the simulated time charges a
//! reduce-scatter and an all-gather on the Pod (see [`StepTime`]).
//!
//! # Model parallelism
//!
//! With [`TrainConfig::pipeline`], each replica's layers are placed on its
//! IPUs as contiguous stages (by hand, or balanced by forward flops)
//! and run one after the other ([`Schedule::Sequential`]: model sharding)
//! or pipelined over the accumulated micro-batches ([`Schedule::Grouped`],
//! [`Schedule::Interleaved`]), with optional recomputation
//! ([`TrainConfig::recompute`]). The numerics are the plain run's, bit for
//! bit; the step's cycles and the activation stashes follow the schedule
//! (see the `pipeline` module's table: [`step_cycles`], [`stashed`]).
//!
//! # Determinism
//!
//! Final weights are bitwise the same for every number of instances,
//! replicas (powers of two per instance) and micro-batches per replica
//! (powers of two) holding the same global batch at the same micro-batch
//! size, with or without sharding, with [`GradReduction::Sum`] or
//! [`GradReduction::PostMean`]; the micro-batch size changes them (a
//! micro-batch's gradient is one product over its samples, f16 in the
//! 16-bit modes); batch norm (whose statistics are per micro-batch) and
//! [`GradReduction::RunningMean`] (sequential by definition) are
//! reproducible run to run but change with the split. With
//! [`TrainConfig::batch_invariant`] the micro-batch size is free too
//! (exact gradient sums, rounded once; batch norm and
//! [`GradReduction::Sum`] refused). A resumed run is bitwise the
//! uninterrupted one.
//!
//! # Divergence
//!
//! After [`Divergence::steps`] consecutive steps that loss scaling skipped
//! or whose loss was not finite, every replica stops with
//! [`TrainError::Diverged`] (no checkpoint of that state is written).

mod checkpoint;
mod comm;
mod config;
mod cost;
mod divergence;
mod epochs;
mod error;
mod evaluate;
mod exclude;
mod fit;
mod invariant;
mod optimizer;
mod options;
mod params;
mod pipeline;
mod precision;
mod records;
mod replica;
mod run;
mod trainer;

pub use config::{
    GradReduction, LossScaling, LrDecay, NamedOptimizer, OptimizerConfig, RESNET_MINI_BLOCKS,
    RESNET_MINI_WIDTHS, TrainConfig,
};
pub use cost::StepTime;
pub use divergence::Divergence;
pub use error::{Difference, TrainError};
pub use exclude::is_bias_or_norm;
pub use fit::{
    HOST_MEMORY_VARIABLE, MemoryReport, OptimizerMemory, StageMemory, available_host_memory,
};
pub use options::{Continuation, Interrupt, RunOptions};
pub use pipeline::{Pipeline, Schedule, StepCycles, pipeline_cycles, stashed, step_cycles};
pub use precision::{LowFamily, LowPrecision, PrecisionMode};
pub use records::{EpochRecord, Event, Observer, StepRecord, Summary};
pub use trainer::Trainer;
