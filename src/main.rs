//! The `tessera` command.
//!
//! `tessera train` trains an MLP data-parallel on the simulated Pod (the
//! default job, run when no command is given); `tessera scale` runs one
//! global batch over 1 to 16 replicas; `tessera bench SUITE` measures
//! kernels against references timed in the same run; `tessera plan` says
//! whether a model fits on a Pod and how fast it trains. See `tessera --help`.

#![forbid(unsafe_code)]

mod bench;
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
