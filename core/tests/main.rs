//! tessera-core's integration tests: one binary, one module per area.
//! Every SIMD kernel against its scalar twin on every backend the CPU can
//! run, the twins against independent oracles, and the properties of the
//! formats, rounding, reductions, optimizers, loss scaling, losses and the
//! pure all-reduce. The exhaustive sweeps (all 2^32 f32 inputs) are
//! `#[ignore]`d: run them in release with
//! `cargo test --release -p tessera-core --test numerics -- --ignored exhaustive`
//! (the tests need the `bytemuck` feature, which `cargo test --workspace`
//! turns on).

mod collective;
mod collective_transport;
mod conversions;
mod exact;
mod formats;
mod kernels;
mod loss;
mod optim;
mod optim_api;
mod rng;
mod scale;
mod support;
