//! Why a network file cannot be used ([`NetworkFileError`]): every error
//! names the file and, where it can, the line and the layer: its place in
//! the file's layers and, within residual bodies and branches, theirs
//! ([`LayerStep`], shown by [`Place`]).

use core::fmt;

use crate::toml_place::LayerRef;

/// Why a network file cannot be used. Every variant names the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NetworkFileError {
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
        /// The line (from 1), if known.
        line: Option<usize>,
        /// The layer it is in, as [`NetworkFileError::Field`]'s; when the
        /// file's layers cannot be told apart, the `[[layer]]` it is in.
        layer: Vec<LayerStep>,
        /// The parser's message, the key first when the parser's message
        /// does not name it.
        message: String,
    },
    /// The file is the planner's table of costs (it has `input_bytes`),
    /// not a network.
    CostTable {
        /// The file.
        origin: String,
    },
    /// A key with a value that cannot be: a size that is zero or above
    /// [`NetworkFile::MAX_SIZE`](super::NetworkFile::MAX_SIZE), an unknown kind, a key missing or not
    /// of the layer's kind.
    Field {
        /// The file.
        origin: String,
        /// The layer's line (from 1), if in a layer.
        line: Option<usize>,
        /// The layer and, within residual bodies and branches, their
        /// layers; empty for the file's top level.
        layer: Vec<LayerStep>,
        /// The key.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A network the trainer refuses ([`NetworkConfig::validate`](crate::model::NetworkConfig::validate)).
    Network {
        /// The file.
        origin: String,
        /// The line (from 1) of the layer it names, if it names one.
        line: Option<usize>,
        /// As [`NetworkFileError::Field`]'s.
        layer: Vec<LayerStep>,
        /// The trainer's reason.
        reason: String,
    },
}

impl fmt::Display for NetworkFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { origin, message } => write!(f, "{origin}: cannot read: {message}"),
            Self::Parse {
                origin,
                line,
                layer,
                message,
            } => write!(f, "{}{message}", Place(origin, *line, layer)),
            Self::CostTable { origin } => write!(
                f,
                "{origin}: describes costs (a planner's table with `input_bytes`), not a network \
                 (`input` and layers of a `kind`)"
            ),
            Self::Field {
                origin,
                line,
                layer,
                field,
                problem,
            } => write!(
                f,
                "{}field `{field}` {problem}",
                Place(origin, *line, layer)
            ),
            Self::Network {
                origin,
                line,
                layer,
                reason,
            } => write!(f, "{}{reason}", Place(origin, *line, layer)),
        }
    }
}

impl core::error::Error for NetworkFileError {}

/// One step of a layer's place in a network file: its place in its list
/// of layers (the file's, a residual body's or a branch's) and, when the
/// list is a branch of a `branches` layer, which branch (from 0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LayerStep {
    /// The branch the layer is in, if in one.
    pub branch: Option<usize>,
    /// The layer's position in its list and its kind.
    pub layer: LayerRef,
}

impl LayerStep {
    pub(super) fn new(branch: Option<usize>, index: usize, kind: &str) -> Self {
        Self {
            branch,
            layer: LayerRef {
                index,
                name: Some(kind.to_owned()),
            },
        }
    }
}

impl fmt::Display for LayerStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(branch) = self.branch {
            write!(f, "branch {branch} ")?;
        }
        write!(f, "{}", self.layer)
    }
}

/// `layer 2 (`residual`): body layer 1 (`conv`): `,
/// `layer 3 (`branches`): branch 1 layer 0 (`conv`): `, or nothing.
pub(super) struct Within<'a>(pub(super) &'a [LayerStep]);

impl fmt::Display for Within<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (depth, step) in self.0.iter().enumerate() {
            let within = if depth == 0 || step.branch.is_some() {
                ""
            } else {
                "body "
            };
            write!(f, "{within}{step}: ")?;
        }
        Ok(())
    }
}

/// `n.toml: line 4: layer 2 (`residual`): `: the file, the line if known
/// and the layer if in one.
pub(super) struct Place<'a>(
    pub(super) &'a str,
    pub(super) Option<usize>,
    pub(super) &'a [LayerStep],
);

impl fmt::Display for Place<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Self(origin, line, layer) = self;
        write!(f, "{origin}: ")?;
        if let Some(line) = line {
            write!(f, "line {line}: ")?;
        }
        write!(f, "{}", Within(layer))
    }
}
