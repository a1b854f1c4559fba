//! The `tessera` command.
//!
//! `tessera bench SUITE` measures kernels against references timed in the
//! same run; with no command it runs the default job
//! (`tessera bench conversions --quick`). See `tessera --help`.

#![forbid(unsafe_code)]

mod bench;
mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
