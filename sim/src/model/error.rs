//! Why a model could not be built or run.

use core::fmt;

use crate::ipu::{BuildError, GraphError, OutOfMemory};

/// Why a model could not be built or run.
#[derive(Clone, Debug, PartialEq)]
pub enum ModelError {
    /// A width of the configuration is zero.
    ZeroWidth {
        /// `"inputs"`, `"classes"` or `"hidden[i]"`.
        what: String,
    },
    /// The micro-batch size is zero.
    ZeroMicroBatch,
    /// The graph could not be built (a bug or a too large model).
    Graph(GraphError),
    /// The engine could not be built: a tile is out of memory.
    Build(BuildError),
    /// The model's measured graph puts a tile over its memory: found
    /// before anything was built ([`MemoryEstimate`](super::MemoryEstimate)).
    OutOfTileMemory(Box<OutOfMemory>),
    /// A tensor above [`MAX_TENSOR_BYTES`](super::config::MAX_TENSOR_BYTES).
    TooLarge {
        /// The tensor (`layer1.weight`).
        tensor: String,
        /// Its shape.
        shape: [usize; 2],
    },
    /// The wrong number of parameter (or gradient, buffer) tensors.
    ParamCount {
        /// Tensors the model has.
        expected: usize,
        /// Tensors given.
        got: usize,
    },
    /// A parameter (or gradient, buffer) tensor of the wrong length.
    ParamLength {
        /// Its name.
        name: String,
        /// The length it must have.
        expected: usize,
        /// The length given.
        got: usize,
    },
    /// The inputs are not `micro_batch * inputs` values.
    InputLength {
        /// Values expected.
        expected: usize,
        /// Values given.
        got: usize,
    },
    /// The labels are not `micro_batch` values.
    LabelCount {
        /// Labels expected.
        expected: usize,
        /// Labels given.
        got: usize,
    },
    /// A label is not a class.
    LabelOutOfRange {
        /// The sample.
        sample: usize,
        /// Its label.
        label: u32,
        /// The number of classes.
        classes: usize,
    },
    /// The loss scale is not finite and positive.
    InvalidScale(f32),
    /// A buffer name [`Model::set_buffers`](super::Model::set_buffers) does not
    /// know.
    UnknownBuffer {
        /// The name.
        name: String,
    },
    /// The replica group's sum failed (set by a [`GroupSum`](super::GroupSum)).
    Group {
        /// What went wrong.
        reason: String,
    },
    /// A [`Placement`](super::Placement) that does not fit the model or
    /// the replica's IPUs.
    Placement {
        /// What is wrong.
        reason: String,
    },
    /// A network's device mapping that does not fit its blocks or the
    /// replica's IPUs.
    DeviceMapping(MappingError),
    /// Recomputation checkpoints that are not the network's block
    /// boundaries in order.
    Checkpoint(CheckpointError),
    /// A network whose layers do not fit together.
    InvalidNetwork {
        /// The layer (numbered as its tensors are named).
        layer: usize,
        /// What is wrong.
        reason: String,
    },
}

impl fmt::Display for ModelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroWidth { what } => write!(f, "the model's {what} width is zero"),
            Self::ZeroMicroBatch => f.write_str("the micro-batch size is zero"),
            Self::Graph(e) => write!(f, "building the model's graph: {e}"),
            Self::Build(e) => write!(f, "building the model's engine: {e}"),
            Self::OutOfTileMemory(e) => write!(f, "the model does not fit: {e}"),
            Self::TooLarge { tensor, shape } => write!(
                f,
                "tensor {tensor} of {} x {} f32 values is above the {} bytes a tensor may have",
                shape[0],
                shape[1],
                super::config::MAX_TENSOR_BYTES
            ),
            Self::ParamCount { expected, got } => {
                write!(f, "the model has {expected} parameter tensors, {got} given")
            }
            Self::ParamLength {
                name,
                expected,
                got,
            } => write!(f, "{name} has {expected} elements, {got} given"),
            Self::InputLength { expected, got } => {
                write!(f, "a micro-batch has {expected} input values, {got} given")
            }
            Self::LabelCount { expected, got } => {
                write!(f, "a micro-batch has {expected} labels, {got} given")
            }
            Self::LabelOutOfRange {
                sample,
                label,
                classes,
            } => write!(
                f,
                "label {label} of sample {sample} is not one of the {classes} classes"
            ),
            Self::InvalidScale(s) => {
                write!(f, "the loss scale must be finite and positive, got {s}")
            }
            Self::UnknownBuffer { name } => write!(f, "the model has no buffer {name}"),
            Self::Group { reason } => write!(f, "the replica group's sum failed: {reason}"),
            Self::Placement { reason } => write!(f, "layer placement: {reason}"),
            Self::DeviceMapping(e) => write!(f, "device mapping: {e}"),
            Self::Checkpoint(e) => write!(f, "{e}"),
            Self::InvalidNetwork { layer, reason } => write!(f, "network layer {layer}: {reason}"),
        }
    }
}

impl std::error::Error for ModelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Graph(e) => Some(e),
            Self::Build(e) => Some(e),
            _ => None,
        }
    }
}

impl From<GraphError> for ModelError {
    fn from(e: GraphError) -> Self {
        Self::Graph(e)
    }
}

impl From<BuildError> for ModelError {
    fn from(e: BuildError) -> Self {
        Self::Build(e)
    }
}

/// Why a network's device mapping is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MappingError {
    /// Not one IPU per top-level layer and the head.
    Length {
        /// Entries needed: the top-level layers and the head.
        blocks: usize,
        /// Entries given.
        got: usize,
    },
    /// A block mapped beyond the replica's IPUs.
    Ipu {
        /// The block (top-level layer; the last is the head).
        block: usize,
        /// What it is (`residual block`, `conv 3x3 s1 -> 16`, `head`).
        layer: String,
        /// The IPU named.
        ipu: u32,
        /// IPUs of a replica.
        ipus: u32,
    },
    /// A block on an IPU before its predecessor's.
    Order {
        /// The block.
        block: usize,
        /// What it is.
        layer: String,
        /// Its IPU.
        ipu: u32,
        /// The previous block's IPU.
        previous: u32,
    },
    /// IPUs listed for a block that is not parallel branches.
    NotBranches {
        /// The block.
        block: usize,
        /// What it is.
        layer: String,
        /// The IPUs listed.
        ipus: Vec<u32>,
    },
    /// Not one IPU per branch, or the branches' IPUs not increasing.
    BranchIpus {
        /// The block.
        block: usize,
        /// Its branches.
        branches: usize,
        /// The IPUs listed.
        ipus: Vec<u32>,
    },
    /// More IPUs to balance over than blocks.
    TooManyIpus {
        /// IPUs of a replica.
        ipus: u32,
        /// Blocks of the network.
        blocks: usize,
    },
}

impl fmt::Display for MappingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length { blocks, got } => write!(
                f,
                "the device mapping has {got} entries; the network needs {blocks}, one per \
                 top-level layer and one for the head"
            ),
            Self::Ipu {
                block,
                layer,
                ipu,
                ipus,
            } => write!(
                f,
                "block {block} ({layer}) is mapped to IPU {ipu}, but a replica has {ipus} IPUs \
                 (0..{ipus})"
            ),
            Self::Order {
                block,
                layer,
                ipu,
                previous,
            } => write!(
                f,
                "block {block} ({layer}) is on IPU {ipu} after block {} on IPU {previous}: \
                 stages must be contiguous, in increasing IPU order",
                block - 1
            ),
            Self::NotBranches { block, layer, ipus } => write!(
                f,
                "block {block} ({layer}) is mapped to IPUs {ipus:?}, but only a block of parallel \
                 branches runs on several IPUs (one per branch)"
            ),
            Self::BranchIpus {
                block,
                branches,
                ipus,
            } => write!(
                f,
                "block {block} ({branches} parallel branches) is mapped to IPUs {ipus:?}: a \
                 concurrent stage needs {branches} different IPUs, one per branch, in increasing \
                 order"
            ),
            Self::TooManyIpus { ipus, blocks } => write!(
                f,
                "{ipus} IPUs but only {blocks} blocks (top-level layers and the head): every \
                 IPU needs one"
            ),
        }
    }
}

impl std::error::Error for MappingError {}

/// Why checkpoints are refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CheckpointError {
    /// Not the input of a block after the first (`1..blocks`).
    OutOfRange {
        /// The block named.
        block: usize,
        /// Blocks of the network (its top-level layers and the head).
        blocks: usize,
    },
    /// Not after the previous checkpoint.
    NotIncreasing {
        /// The block named.
        block: usize,
        /// The one before it.
        previous: usize,
    },
}

impl fmt::Display for CheckpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfRange { block, blocks } => write!(
                f,
                "recomputation checkpoint {block} is not a block boundary: give blocks 1 to {} \
                 (the input of that top-level layer or the head is kept)",
                blocks - 1
            ),
            Self::NotIncreasing { block, previous } => write!(
                f,
                "recomputation checkpoint {block} follows {previous}: give them in increasing order"
            ),
        }
    }
}

impl std::error::Error for CheckpointError {}
