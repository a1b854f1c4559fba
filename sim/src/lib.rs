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
//! - [`ipu`]: the machine description, [`IpuSpec`], with the Mk2 GC200 and
//!   Bow presets and a validated constructor.
//!
//! Planned (see `ARCHITECTURE.md`):
//! - `ipu`: tensors with tile mappings, per-tile memory accounting (failing
//!   on out-of-memory, unlike Poplar's IPUModel), compute sets of vertices
//!   run in parallel on host threads, BSP supersteps (compute, sync,
//!   exchange) with cycle estimates, host streams, profiles and traces;
//! - `pod`: IPU-M2000, POD16, POD64 and POD256 topologies, IPU-Links and
//!   GW-Links, replicas and instances (PopRun/PopDist semantics);
//! - `train`: the data-parallel trainer (sharding, device iterations,
//!   gradient accumulation, loss scaling, stochastic rounding, all-reduce,
//!   optimizers, replicated tensor sharding, checkpoints, metrics);
//! - `plan`: the what-if planner for models too large to run here.
//!
//! # Determinism
//!
//! The simulator inherits the workspace contract: results are bitwise the
//! same for every number of host threads and every split of the work;
//! every tile and worker gets its own position-addressed random stream.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ipu;

pub use ipu::{IpuParams, IpuSpec, SpecError, SpecField};
