//! The IPU and IPU-Pod simulator, data-parallel trainer and planner.
//!
//! `tessera-sim` composes `tessera-core`'s kernels and
//! `tessera-collectives`' collectives into Graphcore-style IPUs and Pods, so
//! that data-parallel training on a Pod (FP16 with stochastic rounding, loss
//! scaling, LAMB/LARS at large batch, all-reduce, replicated tensor
//! sharding, pipelining) can be watched on a laptop, with an estimate of
//! what it would cost on real hardware.
//!
//! # Contents
//!
//! Available now:
//! - [`ipu`]: the tile-parallel IPU: the machine ([`IpuSpec`] with the Mk2
//!   GC200 and Bow presets, multi-IPU [`ipu::Target`]s), tensors with tile
//!   mappings, per-tile memory accounting that refuses a program that does
//!   not fit, compute sets of vertices run in parallel on host threads,
//!   exchanges, host streams, bulk-synchronous supersteps with cycle
//!   estimates, profiles (table, JSON) and Chrome traces. Every figure of
//!   the cost model and its source is in the [`ipu`] module's table.
//! - [`kernels`]: tile-parallel versions of core kernels, each bitwise
//!   equal to one call of the core kernel: stochastic rounding of a large
//!   tensor, a LAMB step (phase 1 per tile, a tree of exact partial
//!   statistics over the exchange, phase 2 per tile), and within-IPU
//!   reductions (sum of squares, dot); matrix products over output
//!   blocks ([`kernels::matmul`](mod@kernels::matmul), Tessera's own
//!   fixed-order GEMM per block, bitwise one whole-matrix call on every
//!   CPU).
//! - [`model`]: the trainer's MLP (ReLU/GELU, batch norm, softmax
//!   cross-entropy), forward and backward passes as vertices on one
//!   replica's tiles, in f32 or f16 mixed precision.
//! - [`pod`]: IPU-M2000, POD16, POD64 and larger Pods of POD64s, IPU-Links
//!   and GW-Links, replicas and instances (PopRun/PopDist semantics), and
//!   the cost of their all-reduce, syncs and host transfers.
//! - [`train`]: the data-parallel trainer: instances and replicas on host
//!   threads (or one instance per MPI process), a deterministic
//!   hierarchical all-reduce that gives bitwise the same weights for every
//!   split of the global batch, loss scaling, stochastic rounding, SGD,
//!   AdamW, LAMB and LARS, replicated tensor sharding, checkpoints and
//!   resume, and the simulated time of each step on the Pod.
//! - [`checkpoint`]: training checkpoints (named F32/F16/BF16/U64/U32
//!   tensors and string metadata) as safetensors files, written atomically.
//! - [`plan`]: the what-if planner for models too large to run here
//!   (ResNet-50, BERT-Large, any model as a TOML table of layers, or the
//!   trainer's MLP): whether it fits per IPU and per tile, and what takes
//!   the memory; the step's time by part and the throughput, with
//!   pipelining, recomputation, sharding and offloading; the scaling from
//!   POD16 to POD256. Its compute model is the simulator's cost model, so
//!   it agrees with the trainer on the MLPs both can run.
//! - [`bench`](mod@bench): wall-time benchmarks of the engine against the plain core
//!   kernels, for `tessera bench sim`.
//!
//! # Determinism
//!
//! The simulator inherits the workspace contract: results are bitwise the
//! same for every number of host threads, every number of tiles and IPUs
//! and every mapping, because the kernels' random bits are addressed by
//! element position and their reductions combine exact partials. A vertex
//! runs once on the host whatever the number of workers its cycle estimate
//! splits it over. Every tile and worker also has its own random stream,
//! identical or differing across replicas ([`ipu::Seeds`]).

// One `unsafe` block, allowed where it is: the call of `matrixmultiply`'s
// raw-pointer `sgemm` in `kernels::matmul::gemm_matrixmultiply`, the
// benchmarks' reference.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bench;
pub mod checkpoint;
pub mod data;
pub mod ipu;
pub mod kernels;
pub mod model;
mod names;
pub mod plan;
pub mod pod;
mod toml_place;
pub mod train;

pub use ipu::{IpuParams, IpuSpec, SpecError, SpecField};
