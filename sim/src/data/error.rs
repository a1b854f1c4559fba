//! Why a data set, a data source or a batch plan was refused.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Where in a file a problem was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Position {
    /// A text file: 1-based line and column (column = field number in a
    /// CSV row; 0 when the whole line is meant).
    Line {
        /// 1-based line number.
        line: usize,
        /// 1-based field number, or 0 for the whole line.
        column: usize,
    },
    /// A binary file: the byte offset (after gunzipping).
    Offset(u64),
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Line { line, column: 0 } => write!(f, "line {line}"),
            Self::Line { line, column } => write!(f, "line {line}, column {column}"),
            Self::Offset(offset) => write!(f, "byte {offset}"),
        }
    }
}

/// What is wrong with the contents of a data file.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum FileProblem {
    /// The file starts like gzip but does not decompress.
    Gzip(io::ErrorKind),
    /// The text is not UTF-8.
    NotUtf8,
    /// The file holds no samples.
    NoSamples,
    /// A CSV field that should be a number is not one.
    NotANumber {
        /// The field as written (cut to 40 characters).
        found: String,
    },
    /// A value is NaN or infinite.
    NonFinite,
    /// A CSV row has another number of fields than the first data row.
    RaggedRow {
        /// Fields of the first data row.
        expected: usize,
        /// Fields of this row.
        found: usize,
    },
    /// The CSV header line has another number of fields than the data.
    BadHeader {
        /// Fields in the header.
        header: usize,
        /// Fields in the first data row.
        data: usize,
    },
    /// The first CSV line has both numbers and other fields: neither a
    /// header (all names) nor a data row (all numbers), most likely a
    /// data row with a typo, which is not skipped silently.
    MixedFirstLine {
        /// The first field that is not a number (cut to 40 characters).
        found: String,
    },
    /// A CSV row needs at least one feature and a label.
    TooFewColumns {
        /// Fields found.
        found: usize,
    },
    /// A label is not a whole number.
    NotALabel {
        /// The label as written (cut to 40 characters).
        found: String,
    },
    /// A label is negative or not below [`MAX_CLASSES`](super::MAX_CLASSES).
    LabelOutOfRange {
        /// The label as written.
        found: String,
        /// Labels must be below this.
        limit: u64,
    },
    /// A binary file does not start with its format's magic bytes.
    WrongMagic {
        /// The bytes the format requires.
        expected: Vec<u8>,
        /// The file's first bytes (as many, or all if it is shorter).
        found: Vec<u8>,
    },
    /// A binary file is shorter than its header says.
    Truncated {
        /// Bytes the header implies.
        expected: u64,
        /// Bytes in the file.
        found: u64,
    },
    /// A binary file is longer than its header says.
    TrailingBytes {
        /// Bytes the header implies.
        expected: u64,
        /// Bytes in the file.
        found: u64,
    },
    /// The element type is not one this loader reads.
    UnsupportedDtype {
        /// The type as the file names it (an npy `descr`, or an idx type
        /// code in hex).
        found: String,
        /// The types this file may hold, for the message.
        supported: &'static str,
    },
    /// The array has another number of dimensions than required.
    WrongRank {
        /// Dimensions required.
        expected: usize,
        /// Dimensions found.
        found: usize,
    },
    /// An npy array is stored in Fortran (column-major) order.
    FortranOrder,
    /// An npy header that this loader cannot parse.
    BadNpyHeader {
        /// What is missing or wrong.
        reason: &'static str,
    },
    /// The sizes in the header overflow the address space.
    TooLarge,
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Gzip(kind) => write!(f, "cannot gunzip: {kind}"),
            Self::NotUtf8 => f.write_str("the text is not UTF-8"),
            Self::NoSamples => f.write_str("no samples"),
            Self::NotANumber { found } => write!(f, "expected a number, found {found:?}"),
            Self::NonFinite => f.write_str("expected a finite number, found NaN or infinity"),
            Self::RaggedRow { expected, found } => {
                write!(
                    f,
                    "expected {expected} fields like the first row, found {found}"
                )
            }
            Self::BadHeader { header, data } => write!(
                f,
                "the header has {header} fields but the data rows have {data}"
            ),
            Self::MixedFirstLine { found } => write!(
                f,
                "{found:?} is not a number but other fields of the first line are: \
                 a header's fields must all be names, a data row's all numbers"
            ),
            Self::TooFewColumns { found } => write!(
                f,
                "expected at least 2 fields (features, then the label), found {found}"
            ),
            Self::NotALabel { found } => {
                write!(f, "expected a whole-number label, found {found:?}")
            }
            Self::LabelOutOfRange { found, limit } => {
                write!(
                    f,
                    "label {found} is outside 0..{limit} (at most {limit} classes: \
                     the simulated network's output layer must fit a tile)"
                )
            }
            Self::WrongMagic { expected, found } => {
                write!(
                    f,
                    "expected the magic bytes {}, found {}",
                    Hex(expected),
                    Hex(found)
                )
            }
            Self::Truncated { expected, found } => write!(
                f,
                "truncated: the header implies {expected} bytes, the file has {found}"
            ),
            Self::TrailingBytes { expected, found } => write!(
                f,
                "the header implies {expected} bytes but the file has {found}"
            ),
            Self::UnsupportedDtype { found, supported } => write!(
                f,
                "unsupported element type {} (expected {supported})",
                // The file's text: its control characters escaped.
                found.escape_debug()
            ),
            Self::WrongRank { expected, found } => {
                write!(f, "expected a {expected}-D array, found {found}-D")
            }
            Self::FortranOrder => f.write_str(
                "the array is in Fortran order; save it in C order (numpy.ascontiguousarray)",
            ),
            Self::BadNpyHeader { reason } => write!(f, "bad npy header: {reason}"),
            Self::TooLarge => f.write_str("the array sizes overflow"),
        }
    }
}

/// Bytes in hex, space separated (`93 4e 55 4d 50 59`); `nothing` for none.
struct Hex<'a>(&'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("nothing");
        }
        for (i, b) in self.0.iter().enumerate() {
            let sep = if i == 0 { "" } else { " " };
            write!(f, "{sep}{b:02x}")?;
        }
        Ok(())
    }
}

/// Why a data set, source or batch plan was refused. Each variant carries
/// what the command line needs to print one clear line.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum DataError {
    /// A file could not be opened or read.
    Io {
        /// The file.
        path: PathBuf,
        /// What the operating system said.
        kind: io::ErrorKind,
    },
    /// A file's contents are malformed.
    Malformed {
        /// The file.
        path: PathBuf,
        /// Where.
        at: Position,
        /// What is wrong.
        problem: FileProblem,
    },
    /// Two files (or inputs and labels) disagree on the number of samples.
    SampleCountMismatch {
        /// The inputs' file, if any.
        inputs: Option<PathBuf>,
        /// Samples in the inputs.
        input_samples: usize,
        /// Samples in the labels.
        label_samples: usize,
    },
    /// The inputs' length is not `samples * features`.
    InputLength {
        /// Features per sample.
        features: usize,
        /// Labels (samples) given.
        samples: usize,
        /// Input values given.
        found: usize,
    },
    /// A count that must be at least 1 is 0.
    Zero {
        /// Which count (`"features"`, `"micro_batch"`, ...).
        what: &'static str,
    },
    /// A label is not below the class count.
    LabelOutOfRange {
        /// The sample.
        sample: usize,
        /// Its label.
        label: u32,
        /// The class count.
        classes: usize,
    },
    /// An input value is NaN or infinite.
    NonFinite {
        /// The sample.
        sample: usize,
        /// The feature.
        feature: usize,
    },
    /// A test fraction outside `[0, 1)`.
    TestFraction(f64),
    /// A split would leave the training set empty.
    EmptyTrainingSet {
        /// Samples in the data set.
        samples: usize,
        /// The test fraction asked for.
        test_fraction: f64,
    },
    /// A data source specification that does not parse.
    BadSpec {
        /// The specification as given.
        spec: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A file holds more than [`MAX_SOURCE_BYTES`](super::MAX_SOURCE_BYTES)
    /// bytes (before or after gunzipping).
    FileTooLarge {
        /// The file.
        path: PathBuf,
        /// The most bytes read.
        limit: u64,
    },
    /// A generated data set would need more than
    /// [`MAX_SOURCE_BYTES`](super::MAX_SOURCE_BYTES) bytes.
    SourceTooLarge {
        /// The source, as given.
        source: String,
        /// What is counted (`"samples x features x 4 bytes"`).
        what: &'static str,
        /// The bytes it would need (saturated at `u64::MAX`).
        bytes: u64,
        /// The most bytes allowed.
        limit: u64,
    },
    /// The data holds fewer than 2 distinct labels: nothing to classify.
    OneClass {
        /// The data set's name (the source or file).
        name: String,
        /// Distinct labels found.
        found: usize,
    },
    /// A size computation overflows `usize`.
    Overflow {
        /// What was being computed: the factors' names joined by ` x `.
        what: &'static str,
        /// The factors, in the order `what` names them.
        factors: Vec<usize>,
    },
    /// The global batch is larger than the training set.
    GlobalBatchTooLarge {
        /// `micro_batch * accumulation * replicas`.
        global_batch: usize,
        /// Samples per micro-batch.
        micro_batch: usize,
        /// Micro-batches per replica per step.
        accumulation: usize,
        /// Replicas over all instances.
        replicas: usize,
        /// Samples in the training set.
        samples: usize,
    },
    /// An output mode that does not parse.
    BadOutputMode(String),
}

impl fmt::Display for DataError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, kind } => write!(f, "{}: cannot read: {kind}", path.display()),
            Self::Malformed { path, at, problem } => {
                write!(f, "{}: {at}: {problem}", path.display())
            }
            Self::SampleCountMismatch {
                inputs,
                input_samples,
                label_samples,
            } => {
                if let Some(path) = inputs {
                    write!(f, "{}: ", path.display())?;
                }
                write!(
                    f,
                    "{input_samples} input samples but {label_samples} labels"
                )
            }
            Self::InputLength {
                features,
                samples,
                found,
            } => write!(
                f,
                "{samples} samples of {features} features need {} input values, found {found}",
                samples.saturating_mul(*features)
            ),
            Self::Zero { what } => write!(f, "{what} must be at least 1"),
            Self::LabelOutOfRange {
                sample,
                label,
                classes,
            } => write!(
                f,
                "sample {sample} has label {label}, not below the class count {classes}"
            ),
            Self::NonFinite { sample, feature } => {
                write!(f, "sample {sample}, feature {feature} is NaN or infinite")
            }
            Self::TestFraction(x) => write!(f, "test fraction {x} is outside [0, 1)"),
            Self::EmptyTrainingSet {
                samples,
                test_fraction,
            } => write!(
                f,
                "a test fraction of {test_fraction} leaves no training samples out of {samples}"
            ),
            Self::BadSpec { spec, expected } => {
                write!(f, "data source {spec:?}: expected {expected}")
            }
            Self::FileTooLarge { path, limit } => write!(
                f,
                "{}: larger than the {limit}-byte limit per data file (before or after gunzipping)",
                path.display()
            ),
            Self::SourceTooLarge {
                source,
                what,
                bytes,
                limit,
            } => write!(
                f,
                "data source {source:?}: {what} = {bytes} bytes, more than the {limit}-byte \
                 limit per data source"
            ),
            Self::OneClass { name, found } => write!(
                f,
                "{name}: the labels hold {found} distinct class(es); classification needs at least 2"
            ),
            Self::Overflow { what, factors } => {
                let values: Vec<String> = factors.iter().map(ToString::to_string).collect();
                write!(f, "{what} = {} overflows usize", values.join(" x "))
            }
            Self::GlobalBatchTooLarge {
                global_batch,
                micro_batch,
                accumulation,
                replicas,
                samples,
            } => write!(
                f,
                "global batch {global_batch} (micro-batch {micro_batch} x accumulation \
                 {accumulation} x {replicas} replicas) is larger than the {samples} training samples"
            ),
            Self::BadOutputMode(s) => write!(
                f,
                "output mode {s:?}: expected all, sum, final or every:N with N >= 1"
            ),
        }
    }
}

impl std::error::Error for DataError {}
