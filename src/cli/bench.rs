//! `tessera bench SUITE [--quick] [--json] [--elements N]...`

use std::io::{self, ErrorKind};
use std::num::NonZeroUsize;

use clap::Args;
use clap::builder::{PossibleValue, PossibleValuesParser};

use super::Failure;
use crate::bench::allreduce::{self, NcclTable, Transport};
use crate::bench::report::{JsonLines, Sink, Table};
use crate::bench::{self, BenchError, Plan};

/// The largest `--elements`: 2^27, eight times the default largest size
/// (the conversions suite then holds about 2.3 GB of buffers).
const MAX_ELEMENTS: usize = 1 << 27;

/// Arguments of `tessera bench`.
#[derive(Debug, Args)]
pub(super) struct BenchArgs {
    /// The suite to run.
    #[arg(value_parser = suites())]
    suite: String,

    /// Fewer samples and a smaller largest size: a run of a few seconds.
    #[arg(long)]
    quick: bool,

    /// Print one JSON object per line (fields suite, kernel, elements,
    /// seconds, gbps, reference, ratio, reference_seconds, reference_gbps)
    /// instead of a table.
    #[arg(long)]
    json: bool,

    /// Measure at N elements instead of the suite's sizes; repeat or separate
    /// with commas. Accepts suffixes Ki, Mi and Gi (4096, 256Ki, 16Mi). At
    /// most 128Mi; the sim suite at most 48Mi (one Mk2's tile memory), the
    /// data suite at most 112 (449 with --quick: the replicas'
    /// micro-batches must fit the 1,797 digits).
    #[arg(long, value_name = "N", value_parser = parse_elements, value_delimiter = ',')]
    elements: Vec<NonZeroUsize>,

    /// allreduce only: run the ranks as threads of this process (default)
    /// or as MPI processes (a binary built with `--features mpi`, launched
    /// by `mpirun`; only rank 0 prints).
    #[arg(long, value_enum, value_name = "TRANSPORT")]
    transport: Option<Transport>,
}

impl BenchArgs {
    pub(super) fn run(self) -> Result<(), Failure> {
        let suite = bench::suite(&self.suite)
            .ok_or_else(|| Failure::Usage(format!("no benchmark suite named `{}`", self.suite)))?;
        if self.transport.is_some() && suite.name != allreduce::SUITE.name {
            return Err(Failure::Usage(format!(
                "--transport applies to the {} suite only, not to `{}`",
                allreduce::SUITE.name,
                suite.name
            )));
        }
        let plan = Plan {
            quick: self.quick,
            elements: (!self.elements.is_empty()).then_some(self.elements),
            transport: self.transport.unwrap_or_default(),
        };
        let stdout = io::stdout().lock();
        let mut sink: Box<dyn Sink> = if self.json {
            Box::new(JsonLines(stdout))
        } else if suite.name == allreduce::SUITE.name {
            // nccl-tests' columns: size, algorithm, time, algbw, busbw.
            Box::new(NcclTable::new(stdout))
        } else {
            Box::new(Table(stdout))
        };
        (suite.run)(&plan, &mut *sink).map_err(|e| match e {
            BenchError::Output(ErrorKind::BrokenPipe) => Failure::Closed,
            BenchError::OutOfMemory { .. } | BenchError::Unavailable(_) => {
                Failure::Usage(e.to_string())
            }
            BenchError::Output(_) | BenchError::Simulator(_) | BenchError::Collective(_) => {
                Failure::Job(e.to_string())
            }
        })
    }
}

/// The registry's suite names, with their descriptions for `--help`.
fn suites() -> PossibleValuesParser {
    PossibleValuesParser::new(
        bench::SUITES
            .iter()
            .map(|s| PossibleValue::new(s.name).help(s.about)),
    )
}

/// Parses an element count: a positive integer up to [`MAX_ELEMENTS`],
/// optionally with a binary suffix `Ki`, `Mi` or `Gi`.
fn parse_elements(arg: &str) -> Result<NonZeroUsize, String> {
    let expected = "expected a positive whole number such as 4096, 256Ki or 16Mi";
    let (digits, shift) = [("Ki", 10), ("Mi", 20), ("Gi", 30)]
        .into_iter()
        .find_map(|(suffix, shift)| {
            arg.strip_suffix(suffix)
                .or_else(|| arg.strip_suffix(&suffix.to_ascii_lowercase()))
                .map(|digits| (digits, shift))
        })
        .unwrap_or((arg, 0));
    let digits = digits.replace('_', "");
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(expected.to_owned());
    }
    let too_large = || format!("at most {MAX_ELEMENTS} (128Mi) elements");
    let n = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(too_large)?;
    if n > MAX_ELEMENTS {
        return Err(too_large());
    }
    NonZeroUsize::new(n).ok_or_else(|| "must be at least 1 element".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_counts_parse_with_binary_suffixes() {
        let n = |s| parse_elements(s).map(NonZeroUsize::get);
        assert_eq!(n("4096"), Ok(4096));
        assert_eq!(n("4Ki"), Ok(4096));
        assert_eq!(n("256ki"), Ok(256 << 10));
        assert_eq!(n("16Mi"), Ok(16 << 20));
        assert_eq!(n("1_000"), Ok(1000));
        assert_eq!(n("128Mi"), Ok(MAX_ELEMENTS));
    }

    #[test]
    fn bad_element_counts_are_rejected_with_a_reason() {
        for bad in ["0", "0Ki", "", "Ki", "-1", "1.5", "four", "4 Ki", "4KiB"] {
            let err = parse_elements(bad).unwrap_err();
            assert!(!err.is_empty(), "{bad:?}");
        }
        assert!(parse_elements("129Mi").unwrap_err().contains("at most"));
        assert!(parse_elements("1Gi").unwrap_err().contains("at most"));
        assert!(
            parse_elements("99999999999999999999999")
                .unwrap_err()
                .contains("at most")
        );
        assert!(parse_elements("0").unwrap_err().contains("at least 1"));
    }

    #[test]
    fn every_registered_suite_is_offered() {
        assert!(bench::suite("conversions").is_some());
        assert!(bench::suite("nope").is_none());
    }
}
