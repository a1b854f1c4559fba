//! What `tessera train` and `tessera scale` share: the job's options (the
//! same names as flags and as keys of a `--config` TOML file,
//! [`args`]), their values' grammars ([`values`]), their resolution into a
//! [`TrainConfig`](tessera_sim::train::TrainConfig) ([`resolve`], the
//! model's in [`network`]) and the resolved job ([`resolved`]), the run
//! directory ([`run_dir`]), and the call that runs a trainer with its
//! progress bar ([`run`]).

mod args;
mod network;
mod resolve;
mod resolved;
mod run;
mod run_dir;
mod values;

pub(super) use args::JobArgs;
pub(super) use network::resnet_mini;
pub(super) use resolve::name_the_option;
pub(super) use resolved::Job;
pub(super) use run::{Progress, run_job, usage};
#[cfg(test)]
pub(super) use run_dir::RUN_FILES;
pub(super) use run_dir::{OutputArgs, RunDir};
