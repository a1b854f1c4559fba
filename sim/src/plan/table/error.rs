//! Why a model table cannot be used.

use core::fmt;

use super::layer::LIMIT;
use crate::toml_place::LayerRef;

/// Why a model table cannot be used. Every variant names where it came
/// from (a file's path, or a built-in's name).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelTableError {
    /// The file cannot be read.
    Read {
        /// The file.
        origin: String,
        /// The operating system's message.
        message: String,
    },
    /// The TOML is malformed, or a key is unknown, missing, negative or of
    /// the wrong type.
    Parse {
        /// The file.
        origin: String,
        /// The line (from 1) where the problem is, if known.
        line: Option<usize>,
        /// The `[[layer]]` it is in, if it is in one.
        layer: Option<LayerRef>,
        /// The parser's message (it names the key).
        message: String,
    },
    /// A network description the trainer refuses (a kernel that does not
    /// fit its input, a residual body that changes the shape, ...).
    Network {
        /// Where it came from.
        origin: String,
        /// The trainer's message (it names the layer).
        message: String,
    },
    /// No layers.
    NoLayers {
        /// The table's origin.
        origin: String,
    },
    /// A field of a layer with a value that cannot be.
    Field {
        /// The table's origin.
        origin: String,
        /// The layer.
        layer: LayerRef,
        /// The field (`name`, `gemm`, `tied.layer`, ...).
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// Two layers with one name.
    DuplicateName {
        /// The table's origin.
        origin: String,
        /// The name.
        name: String,
        /// The first layer's position.
        first: usize,
        /// The second layer's position.
        second: usize,
    },
    /// A number above [`ModelTable::LIMIT`](super::ModelTable::LIMIT): a layer's field (`gemm`: its
    /// `2 m k n`), the table's `input_bytes`, or (no layer) a field summed
    /// over the layers.
    TooLarge {
        /// The table's origin.
        origin: String,
        /// The layer, if the number is one layer's.
        layer: Option<LayerRef>,
        /// The field.
        field: &'static str,
        /// Its value (a sum saturates at `u64::MAX`).
        value: u64,
    },
}

impl fmt::Display for ModelTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { origin, message } => write!(f, "{origin}: cannot read: {message}"),
            Self::Parse {
                origin,
                line,
                layer,
                message,
            } => {
                write!(f, "{origin}")?;
                if let Some(line) = line {
                    write!(f, ": line {line}")?;
                }
                if let Some(layer) = layer {
                    write!(f, ": {layer}")?;
                }
                write!(f, ": {message}")
            }
            Self::Network { origin, message } => write!(f, "{origin}: {message}"),
            Self::NoLayers { origin } => {
                write!(f, "{origin}: no layers (a model needs `[[layer]]` tables)")
            }
            Self::Field {
                origin,
                layer,
                field,
                problem,
            } => write!(f, "{origin}: {layer}: field `{field}` {problem}"),
            Self::DuplicateName {
                origin,
                name,
                first,
                second,
            } => write!(
                f,
                "{origin}: layers {first} and {second} are both named `{name}`"
            ),
            Self::TooLarge {
                origin,
                layer,
                field,
                value,
            } => {
                let limit = LIMIT;
                match layer {
                    Some(layer) => write!(f, "{origin}: {layer}: field `{field}` is {value}")?,
                    None if *field == "input_bytes" => write!(f, "{origin}: `{field}` is {value}")?,
                    None => write!(f, "{origin}: the layers' total `{field}` is {value}")?,
                }
                write!(f, ", above the planner's limit of 2^53 = {limit}")
            }
        }
    }
}

impl core::error::Error for ModelTableError {}
