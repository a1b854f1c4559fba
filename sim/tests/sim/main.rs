//! tessera-sim's integration tests, one binary (STYLE.md): the engine's
//! semantics and costs, the tile-parallel kernels' bitwise equality
//! with the core kernels, and the trainer's data side.

mod data;
mod engine;
mod kernels;
mod support;
