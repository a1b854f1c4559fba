//! Tessera: mixed-precision, data-parallel training kernels, collectives and
//! a simulator of Graphcore-style IPUs and IPU-Pods.
//!
//! This facade re-exports the workspace's crates:
//! - [`core`] (`tessera-core`): `no_std` SIMD kernels;
//! - [`collectives`] (`tessera-collectives`): communicators and collectives;
//! - [`sim`] (`tessera-sim`): the IPU and Pod simulator.

pub use tessera_collectives as collectives;
pub use tessera_core as core;
pub use tessera_sim as sim;
