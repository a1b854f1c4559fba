//! The command line: one [`Command`] variant per subcommand, each with its
//! own module holding its arguments and its `run`.
//!
//! Exit status: 0 on success; 2 when the input was wrong (clap's parse
//! errors, and [`Failure::Usage`] for what is only found out later); 1 when
//! the job itself failed.

mod bench;
// Training curves for the train command, which is not wired in yet.
#[cfg_attr(not(test), allow(dead_code))]
mod plot;

use std::fmt;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// The `tessera` command.
#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "Mixed-precision training kernels, collectives and an IPU/Pod simulator",
    after_help = "With no command, runs the default job: `tessera bench conversions --quick`."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Measure kernel throughput against references timed in the same run.
    Bench(bench::BenchArgs),
}

impl Command {
    /// The job `tessera` runs when no command is given.
    fn default_job() -> Self {
        Self::Bench(bench::BenchArgs::default_job())
    }

    fn run(self) -> Result<(), Failure> {
        match self {
            Self::Bench(args) => args.run(),
        }
    }
}

/// Why a command did not succeed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The input was wrong in a way the parser could not see (exit status 2).
    Usage(String),
    /// The job failed (exit status 1).
    Job(String),
    /// Stdout was closed by the reader (`tessera ... | head`): stop quietly.
    Closed,
}

impl Failure {
    fn exit_code(&self) -> ExitCode {
        match self {
            Self::Usage(_) => ExitCode::from(2),
            Self::Job(_) => ExitCode::FAILURE,
            Self::Closed => ExitCode::SUCCESS,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(m) | Self::Job(m) => f.write_str(m),
            Self::Closed => f.write_str("output closed"),
        }
    }
}

/// Parses the arguments, runs the command and returns the exit status.
pub(crate) fn main() -> ExitCode {
    // Prints help or version (status 0) or the parse error (status 2) and
    // exits.
    let cli = Cli::parse();
    let command = cli.command.unwrap_or_else(|| {
        eprintln!(
            "tessera: no command given; running the default job, \
             `tessera bench conversions --quick` (see `tessera --help`)"
        );
        Command::default_job()
    });
    match command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Closed) => Failure::Closed.exit_code(),
        Err(failure) => {
            eprintln!("tessera: error: {failure}");
            failure.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }
}
