//! Tessera's integration tests: one binary, one module per area. The
//! kernels, formats and optimizers of tessera-core are tested in its own
//! tests (`core/tests/`); these test the `tessera` command and the crates
//! together.

mod backends;
mod battery;
mod bench_cli;
mod cli;
mod command;
mod fit_cli;
mod fp8_training;
mod fuzz;
mod input_cli;
mod invariant_cli;
mod network_cli;
mod optim_state;
mod pinned;
mod plan_cli;
mod train_cli;
