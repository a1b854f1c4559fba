//! `tessera bench`: throughput of Tessera's kernels against references
//! measured in the same run.
//!
//! A [`Suite`] is a named family of kernels with a `run` function; the
//! registry [`SUITES`] is what the command line offers. A suite turns a
//! [`Plan`] (sizes, quick or not) into [`Record`]s, one per (kernel, size,
//! reference), and hands each to a [`report::Sink`] as soon as it is
//! measured. Timing lives in [`timing`] and is shared by every suite.

pub(crate) mod allreduce;
pub(crate) mod conversions;
pub(crate) mod data;
pub(crate) mod formats;
pub(crate) mod kernels;
pub(crate) mod optimizers;
pub(crate) mod report;
pub(crate) mod resnet;
pub(crate) mod sim;
pub(crate) mod step;
pub(crate) mod timing;

use std::fmt;
use std::num::NonZeroUsize;

use serde::Serialize;

/// A family of benchmarks, selected by name on the command line.
#[derive(Clone, Copy)]
pub(crate) struct Suite {
    /// The name on the command line and in the `suite` field.
    pub(crate) name: &'static str,
    /// One line for `--help`.
    pub(crate) about: &'static str,
    /// Measures the suite, passing every record to the sink in turn.
    pub(crate) run: fn(&Plan, &mut dyn report::Sink) -> Result<(), BenchError>,
}

/// Every suite the command offers, in the order `--help` lists them.
pub(crate) const SUITES: &[Suite] = &[
    conversions::SUITE,
    formats::SUITE,
    optimizers::SUITE,
    kernels::SUITE,
    sim::SUITE,
    allreduce::SUITE,
    data::SUITE,
];

/// Looks a suite up by name.
pub(crate) fn suite(name: &str) -> Option<&'static Suite> {
    SUITES.iter().find(|s| s.name == name)
}

/// What to measure, as chosen on the command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Fewer samples and smaller sizes: a run of a few seconds.
    pub(crate) quick: bool,
    /// Element counts to measure; `None` means the suite's defaults.
    pub(crate) elements: Option<Vec<NonZeroUsize>>,
    /// Where the ranks of the `allreduce` suite run (the other suites
    /// ignore it).
    pub(crate) transport: allreduce::Transport,
}

/// One measurement: a kernel at one size against one reference.
///
/// Serialised as one JSON object per line by `--json`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Record {
    /// The suite's name.
    pub(crate) suite: &'static str,
    /// The kernel measured.
    pub(crate) kernel: &'static str,
    /// Elements per call.
    pub(crate) elements: usize,
    /// Seconds per call of the kernel (best sample).
    pub(crate) seconds: f64,
    /// Bytes the kernel reads plus bytes it writes, per second, / 1e9.
    pub(crate) gbps: f64,
    /// The reference measured in the same run.
    pub(crate) reference: &'static str,
    /// The kernel's throughput over the reference's for the same input:
    /// `reference_seconds / seconds` (above 1: the kernel is faster). A
    /// reference that moves other bytes may compare bandwidths instead; the
    /// suite says so (`optimizers` against its STREAM triad).
    pub(crate) ratio: f64,
    /// Seconds per call of the reference (best sample).
    pub(crate) reference_seconds: f64,
    /// The reference's bytes read plus written per second, / 1e9.
    pub(crate) reference_gbps: f64,
}

/// Why a suite could not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BenchError {
    /// The buffers for `elements` elements (`bytes` in all) could not be
    /// allocated.
    OutOfMemory {
        /// The element count asked for.
        elements: usize,
        /// The bytes the buffer needed.
        bytes: usize,
    },
    /// Writing a record failed (for example stdout was closed).
    Output(std::io::ErrorKind),
    /// The simulator could not build the benchmark's program.
    Simulator(String),
    /// The command asked for something this build or launch cannot do
    /// (for example `--transport mpi` without MPI).
    Unavailable(String),
    /// A collective failed or returned a wrong result.
    Collective(String),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::OutOfMemory { elements, bytes } => write!(
                f,
                "cannot allocate {bytes} bytes of buffers for {elements} elements; \
                 choose a smaller --elements"
            ),
            Self::Output(kind) => write!(f, "cannot write the results: {kind}"),
            Self::Simulator(ref e) => write!(f, "the simulator benchmark could not run: {e}"),
            Self::Unavailable(ref e) => f.write_str(e),
            Self::Collective(ref e) => write!(f, "the all-reduce benchmark failed: {e}"),
        }
    }
}

impl std::error::Error for BenchError {}

/// The kernels' backend and how it was chosen, and the build's target
/// features, for the suites' headings.
pub(crate) fn build_note() -> String {
    use tessera_core::arch;
    let backend = arch::active();
    let how = if arch::backend_from_env().ok().flatten().is_some() {
        "forced by TESSERA_BACKEND"
    } else {
        "detected"
    };
    let features: Vec<&str> = [
        ("avx2", cfg!(target_feature = "avx2")),
        ("f16c", cfg!(target_feature = "f16c")),
        ("avx512f", cfg!(target_feature = "avx512f")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect();
    let mut note = format!("kernels on the {backend} backend ({how})");
    if !features.is_empty() {
        note.push_str(&format!(
            "; built with target features {}",
            features.join("+")
        ));
    }
    if cfg!(debug_assertions) {
        note.push_str("; DEBUG build, use --release for meaningful numbers");
    }
    note
}

/// A zeroed `Vec` of `len` elements, or [`BenchError::OutOfMemory`].
pub(crate) fn try_zeroed<T: Clone + Default>(len: usize) -> Result<Vec<T>, BenchError> {
    let oom = BenchError::OutOfMemory {
        elements: len,
        bytes: len.saturating_mul(size_of::<T>()),
    };
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| oom)?;
    v.resize(len, T::default());
    Ok(v)
}
