//! tessera-sim's integration tests, one binary (STYLE.md): the engine's
//! semantics and costs, the tile-parallel kernels' bitwise equality with
//! the core kernels, the Pod model, the data side, the model, checkpoints,
//! the trainer and the planner.

mod branches;
mod checkpoint;
mod concurrent;
mod conv;
mod data;
mod data_limits;
mod engine;
mod fp8;
mod invariant;
mod kernels;
mod lowering;
mod matmul;
mod model;
mod netpipe;
mod network;
mod network_file;
mod plan;
mod plan_calibration;
mod pod;
mod scaling;
mod support;
mod torch;
mod train;
