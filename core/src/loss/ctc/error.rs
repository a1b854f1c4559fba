//! What a CTC kernel refuses: the first offending item's data.

/// Invalid data given to a CTC kernel; the first offending item in batch
/// order is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtcError {
    /// An input length exceeds the time dimension of the log-probabilities.
    InputLength {
        /// The batch item.
        batch: usize,
        /// Its input length.
        length: usize,
        /// The time dimension.
        max_time: usize,
    },
    /// A target length exceeds the second dimension of the targets.
    TargetLength {
        /// The batch item.
        batch: usize,
        /// Its target length.
        length: usize,
        /// The targets' second dimension.
        max_target_len: usize,
    },
    /// A target label is not a class.
    LabelOutOfRange {
        /// The batch item.
        batch: usize,
        /// The position in its target.
        position: usize,
        /// The label.
        label: u32,
        /// The number of classes.
        classes: usize,
    },
    /// A target contains the blank.
    BlankInTarget {
        /// The batch item.
        batch: usize,
        /// The position in its target.
        position: usize,
        /// The blank index.
        blank: u32,
    },
    /// PyTorch's input and target lengths differ in count.
    BatchSize {
        /// Items in `input_lengths`.
        input_lengths: usize,
        /// Items in `target_lengths`.
        target_lengths: usize,
    },
    /// A PyTorch length is negative (or beyond `usize`).
    Length {
        /// The batch item.
        batch: usize,
        /// The length given.
        length: i64,
    },
    /// A PyTorch target label is outside `u32`.
    Label {
        /// The batch item.
        batch: usize,
        /// The position in its target.
        position: usize,
        /// The label given.
        label: i64,
    },
    /// PyTorch targets that are neither concatenated nor padded.
    TargetsLayout {
        /// Elements in `targets`.
        targets: usize,
        /// Items in the batch.
        batch: usize,
        /// The sum of the target lengths.
        total: usize,
    },
}

impl core::fmt::Display for CtcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::InputLength {
                batch,
                length,
                max_time,
            } => write!(
                f,
                "input length {length} of batch item {batch} exceeds the {max_time} time steps"
            ),
            Self::TargetLength {
                batch,
                length,
                max_target_len,
            } => write!(
                f,
                "target length {length} of batch item {batch} exceeds the targets' {max_target_len} columns"
            ),
            Self::LabelOutOfRange {
                batch,
                position,
                label,
                classes,
            } => write!(
                f,
                "label {label} at position {position} of batch item {batch}'s target is not one of the {classes} classes"
            ),
            Self::BlankInTarget {
                batch,
                position,
                blank,
            } => write!(
                f,
                "batch item {batch}'s target has the blank ({blank}) at position {position}"
            ),
            Self::BatchSize {
                input_lengths,
                target_lengths,
            } => write!(
                f,
                "{input_lengths} input lengths but {target_lengths} target lengths"
            ),
            Self::Length { batch, length } => {
                write!(f, "length {length} of batch item {batch} is negative")
            }
            Self::Label {
                batch,
                position,
                label,
            } => write!(
                f,
                "label {label} at position {position} of batch item {batch}'s target is not a class index"
            ),
            Self::TargetsLayout {
                targets,
                batch,
                total,
            } => write!(
                f,
                "targets have {targets} elements: neither the {total} of the concatenated targets nor [{batch}, S] padded"
            ),
        }
    }
}

impl core::error::Error for CtcError {}
