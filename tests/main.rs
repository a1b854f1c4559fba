//! Tessera's integration tests: one binary, one module per area.

mod battery;
mod cli;
mod collective;
mod collective_transport;
mod command;
mod conversions;
mod exact;
mod fit_cli;
mod formats;
mod fp8_training;
mod fuzz;
mod input_cli;
mod invariant_cli;
mod kernels;
mod loss;
mod network_cli;
mod optim;
mod optim_api;
mod optim_state;
mod pinned;
mod plan_cli;
mod rng;
mod scale;
mod support;
mod train_cli;
