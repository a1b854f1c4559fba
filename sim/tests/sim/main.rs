//! tessera-sim's integration tests, one binary (STYLE.md): checkpoints, the
//! engine's semantics and costs, and the tile-parallel kernels' bitwise equality
//! with the core kernels.

mod checkpoint;
mod engine;
mod kernels;
mod support;
