//! tessera-sim's integration tests, one binary (STYLE.md): the engine's
//! semantics and costs, and the tile-parallel kernels' bitwise equality
//! with the core kernels.

mod engine;
mod kernels;
mod model;
mod support;
