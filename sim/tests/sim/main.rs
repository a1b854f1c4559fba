//! tessera-sim's integration tests, one binary (STYLE.md): the engine's
//! semantics and costs, and the tile-parallel kernels' bitwise equality
//! with the core kernels, and the Pod model.

mod engine;
mod kernels;
mod pod;
mod support;
