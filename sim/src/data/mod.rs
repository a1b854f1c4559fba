//! The data side of the data-parallel trainer: data sets, loaders, the
//! batch layout over instances and replicas, the infeed and the outfeed.
//!
//! - [`Dataset`]: `samples x features` f32 inputs and `u32` labels, with
//!   [`Dataset::split`] (deterministic, stratified per class);
//! - [`Source`]: where a data set comes from: the embedded [`digits()`], a
//!   CSV file, MNIST IDX files, NumPy `.npy` files, or seeded synthetic
//!   clusters; [`DataError`] says what is wrong with a file, and where;
//! - [`EpochOrder`] and [`BatchPlan`]: which samples every micro-batch of
//!   every replica holds (below);
//! - [`Infeed`]: a background thread that gathers an instance's
//!   micro-batches into a bounded queue; [`Outfeed`]: the per-step values
//!   the run reports, kept by an [`OutputMode`].
//!
//! # Batch layout
//!
//! The names are PopDist's and PopTorch's:
//!
//! ```text
//! replicas     = instances * replicas_per_instance
//! global_batch = micro_batch * accumulation * replicas      (samples per optimiser step)
//! host_batch   = global_batch * device_iterations           (samples per host call)
//! steps        = floor(train_len / global_batch)            (per epoch, drop-last)
//! ```
//!
//! Each epoch `e` shuffles the training set with [`EpochOrder::new(len,
//! seed, e)`](EpochOrder::new) (every process computes the same order).
//! The order is cut into `steps` global batches; the `train_len %
//! global_batch` samples left at its end are not seen this epoch (the next
//! epoch reshuffles). Global batch `step` is dealt out in contiguous
//! pieces of `micro_batch` samples: global micro-batch `j = replica *
//! accumulation + k` is micro-batch `k` of replica `replica`, and holds
//! order positions
//!
//! ```text
//! step * global_batch + j * micro_batch .. step * global_batch + (j + 1) * micro_batch
//! ```
//!
//! Instance `i` feeds replicas `i * replicas_per_instance..(i + 1) *
//! replicas_per_instance`, so instances, replicas and micro-batches see
//! disjoint samples. For example 2 instances x 2 replicas, micro-batch 2,
//! accumulation 2 (global batch 16):
//!
//! ```text
//! global batch `step`:  | r0 k0 | r0 k1 | r1 k0 | r1 k1 | r2 k0 | r2 k1 | r3 k0 | r3 k1 |
//! order positions:        0  1    2  3    4  5    6  7    8  9   10 11   12 13   14 15
//!                       |---------- instance 0 ---------|---------- instance 1 ---------|
//! ```
//!
//! # Determinism
//!
//! The global batch of a step, in its global order, is the same for every
//! split of it into replicas and micro-batches: with 1 replica of
//! accumulation 16 or 16 replicas of accumulation 1 (same micro-batch),
//! micro-batch `j` holds the same samples. This is what lets the trainer
//! give bitwise identical results for any replica count, as long as it
//! combines the per-micro-batch gradients in global micro-batch order.
//! Shuffles, splits and synthetic data are pure functions of their seeds
//! ([`RandomStream`](tessera_core::rng::RandomStream) positions), so
//! they are the same on every process and every run.
//!
//! Device iterations: a host call runs `device_iterations` steps, and the
//! infeed delivers all their micro-batches in order (step, replica, k); a
//! last call of an epoch whose step count `device_iterations` does not
//! divide runs the remaining steps
//! ([`BatchPlan::host_call_steps`]).

mod csv;
mod dataset;
mod digits;
mod error;
mod file;
mod idx;
mod infeed;
mod npy;
mod outfeed;
mod plan;
mod shuffle;
mod source;
mod synthetic;

pub use dataset::Dataset;
pub use digits::{DIGITS_CLASSES, DIGITS_FEATURES, DIGITS_SAMPLES, digits};
pub use error::{DataError, FileProblem, Position};
pub use idx::{IMAGES_MAGIC, LABELS_MAGIC};
pub use infeed::{Infeed, MicroBatch};
pub use outfeed::{Outfeed, OutputMode};
pub use plan::{BatchPlan, EpochOrder};
pub use source::Source;

/// The largest class count a loader accepts (labels are `0..MAX_CLASSES`):
/// 1024, room for ImageNet's 1000 classes. The simulated network keeps its
/// output layer's weights (`hidden x classes`, 4 bytes each) on one tile,
/// and 64 x 1024 of them (256 KiB) fit a tile's 624 KiB while 64 x 2001 do
/// not; a label column of larger numbers is more likely a regression
/// target or an id than a class.
pub const MAX_CLASSES: usize = 1 << 10;

/// The most bytes one data source may read from a file (before and after
/// gunzipping) or generate (synthetic inputs, 4 bytes a value): 256 MiB,
/// room for MNIST as f32 (188 MB) while an endless file or a gzip bomb is
/// refused in well under a second.
pub const MAX_SOURCE_BYTES: u64 = 256 << 20;
