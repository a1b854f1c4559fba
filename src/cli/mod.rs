//! The command line: one [`Command`] variant per subcommand, each with its
//! own module holding its arguments and its `run`.
//!
//! Exit status: 0 on success; 2 when the input was wrong (clap's parse
//! errors, and [`Failure::Usage`] for what is only found out later); 3
//! when a training run diverged ([`Failure::Diverged`]); 1 when the job
//! itself failed.

mod bench;
mod history;
mod job;
mod launcher;
mod output;
mod parse;
mod plan;
mod plot;
mod scale;
mod train;

use std::fmt;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

/// The `tessera` command.
#[derive(Debug, Parser)]
#[command(
    name = "tessera",
    version,
    about = "Mixed-precision training kernels, collectives and an IPU/Pod simulator",
    after_help = "With no command, runs the default job: `tessera train` (the digits MLP \
                  data-parallel on a simulated POD16, 16.16 with stochastic rounding, LAMB, \
                  40 epochs), writing runs/default/."
)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Train an MLP data-parallel on the simulated Pod (the default job).
    Train(Box<train::TrainArgs>),
    /// Train one global batch on 1, 2, 4, 8 and 16 replicas and compare
    /// throughput and loss curves.
    Scale(Box<scale::ScaleArgs>),
    /// Measure kernel throughput against references timed in the same run.
    Bench(bench::BenchArgs),
    /// Plan a model on a Pod before renting one: whether it fits in each
    /// IPU and tile, the throughput, the step's time by part, the scaling
    /// from POD16 to POD256.
    Plan(Box<plan::PlanArgs>),
}

impl Command {
    /// The job `tessera` runs when no command is given.
    fn default_job() -> Self {
        Self::Train(Box::new(train::TrainArgs::default_job()))
    }

    fn run(self) -> Result<(), Failure> {
        if matches!(self, Self::Train(_) | Self::Scale(_)) {
            launcher::check(launcher::Launch::from_env())?;
        }
        match self {
            Self::Train(args) => args.run(),
            Self::Scale(args) => args.run(),
            Self::Bench(args) => args.run(),
            Self::Plan(args) => args.run(),
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
    /// A training run diverged and was stopped (exit status 3).
    Diverged(String),
    /// Ctrl-C or SIGTERM stopped a run at an epoch's end, with a
    /// checkpoint (exit status 130, as a shell reports SIGINT).
    Interrupted(String),
    /// Stdout was closed by the reader (`tessera ... | head`): stop quietly.
    Closed,
}

impl Failure {
    fn exit_code(&self) -> ExitCode {
        match self {
            Self::Usage(_) => ExitCode::from(2),
            Self::Job(_) => ExitCode::FAILURE,
            Self::Diverged(_) => ExitCode::from(3),
            Self::Interrupted(_) => ExitCode::from(130),
            Self::Closed => ExitCode::SUCCESS,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(m) | Self::Job(m) | Self::Diverged(m) | Self::Interrupted(m) => {
                f.write_str(m)
            }
            Self::Closed => f.write_str("output closed"),
        }
    }
}

/// Parses the arguments, runs the command and returns the exit status.
pub(crate) fn main() -> ExitCode {
    let cli = match command()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m))
    {
        Ok(cli) => cli,
        // Help and version (status 0).
        Err(e) if !e.use_stderr() => e.exit(),
        // A parse error: one line, status 2.
        Err(e) => {
            eprintln!("tessera: {}", parse_error(&e));
            return ExitCode::from(2);
        }
    };
    // A bad TESSERA_BACKEND is the user's error, found before any kernel runs.
    if let Err(e) = tessera::core::arch::backend_from_env() {
        let value = std::env::var_os("TESSERA_BACKEND").unwrap_or_default();
        let value = value.to_string_lossy();
        eprintln!("tessera: error: TESSERA_BACKEND={}: {e}", one_line(&value));
        return ExitCode::from(2);
    }
    let command = cli.command.unwrap_or_else(|| {
        eprintln!(
            "tessera: no command given; running the default job, \
             `tessera train` (see `tessera --help`)"
        );
        Command::default_job()
    });
    match command.run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Closed) => Failure::Closed.exit_code(),
        Err(failure @ Failure::Interrupted(_)) => {
            eprintln!("tessera: {}", one_line(&failure.to_string()));
            failure.exit_code()
        }
        Err(failure) => {
            eprintln!("tessera: error: {}", one_line(&failure.to_string()));
            failure.exit_code()
        }
    }
}

/// `message` on one line whatever the user's values in it hold: control
/// characters (a newline in a TOML string, say) as Rust escapes.
fn one_line(message: &str) -> String {
    message
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The command line, every option that takes a value allowed a negative
/// number as its value: `--epochs -1` then reaches the option's value
/// parser (`invalid value '-1' for '--epochs <N>': expected a whole number
/// >= 1`) instead of reading as an unknown flag `-1`.
fn command() -> clap::Command {
    fn negatives(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            if a.get_action().takes_values() {
                a.allow_negative_numbers(true)
            } else {
                a
            }
        })
        .mut_subcommands(negatives)
    }
    negatives(Cli::command())
}

/// clap's message on one line, without the usage and the hint to try
/// `--help`: `error: unexpected argument '--x' found; tip: ...`.
fn parse_error(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let mut parts: Vec<String> = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with("Usage:") || line.starts_with("For more information") {
            break;
        }
        if line.is_empty() {
            continue;
        }
        match parts.last_mut() {
            Some(last) if !line.starts_with("tip:") => {
                last.push(' ');
                last.push_str(line);
            }
            _ => parts.push(line.to_owned()),
        }
    }
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn parse_errors_fit_on_one_line() {
        for args in [
            &["tessera", "train", "--no-such-flag"][..],
            &["tessera", "bench"],
            &["tessera", "train", "--epochs", "many"],
        ] {
            let e = Cli::try_parse_from(args).unwrap_err();
            let line = parse_error(&e);
            assert!(line.starts_with("error: "), "{line}");
            assert!(!line.contains('\n'), "{line}");
        }
        let e = Cli::try_parse_from(["tessera", "bench"]).unwrap_err();
        assert!(parse_error(&e).contains("<SUITE>"));
    }

    #[test]
    fn error_messages_escape_control_characters() {
        assert_eq!(
            one_line("unknown schedule `co\nstant`\t\u{7}: expected constant"),
            "unknown schedule `co\\nstant`\\t\\u{7}: expected constant"
        );
        assert_eq!(one_line("ünïcode stays"), "ünïcode stays");
    }
}
