//! A [`NetworkConfig`] described in a TOML file, in the planner's
//! `[[layer]]` style with a `kind` per layer, so that one description
//! serves `tessera train`, `scale` and `plan` ([`NetworkFile::read`]):
//!
//! ```toml
//! name = "tiny-net"            # optional: the file's path otherwise
//! input = [1, 8, 8]            # channels, height, width of a sample
//! classes = 10                 # optional: the head (default 10); training checks it against the data
//! activation = "relu"          # optional: relu (default) or gelu, after each batch norm
//! bn_group = "replica"         # optional: replica (default) or all
//!
//! [[layer]]
//! kind = "conv"                # a convolution without bias
//! channels = 8
//! kernel = 3                   # square
//! stride = 1                   # optional, default 1
//! padding = 1                  # optional, default 0
//!
//! [[layer]]
//! kind = "residual"            # x + body(x): the body keeps the shape
//! body = [
//!   { kind = "bn_act" },       # batch norm, then the activation
//!   { kind = "conv", channels = 8, kernel = 3, padding = 1 },
//! ]
//!
//! [[layer]]
//! kind = "max_pool"            # or avg_pool: kernel, stride (default the kernel), padding (default 0)
//! kernel = 2
//!
//! [[layer]]
//! kind = "branches"            # parallel branches on the same input, concatenated by channels:
//! branches = [                 # at least two, all ending at one height and width
//!   [{ kind = "bn_act" }, { kind = "conv", channels = 8, kernel = 3, padding = 1 }],
//!   [{ kind = "bn_act" }, { kind = "conv", channels = 8, kernel = 1 }],
//! ]
//!
//! [[layer]]
//! kind = "bn_act"
//!
//! [[layer]]
//! kind = "global_avg_pool"     # the dense head needs one pixel per sample
//! ```
//!
//! Every key is checked: an unknown or missing key, a wrong type or a
//! negative number is an error naming the file, the line, the layer
//! (position and kind) and the key ([`NetworkFileError`]); so is every
//! size that is zero or above [`NetworkFile::MAX_SIZE`], and a network
//! that [`NetworkConfig::validate`] refuses (a kernel larger than its
//! input, a residual body that changes the shape, fewer than two branches,
//! branches ending at different sizes, no global pooling before the head),
//! which names the layer, within a residual body or a branch its place
//! there too (`body layer 1`, `branch 1 layer 0`). Residual bodies and
//! branches nest in each other. A file with `input_bytes` is the planner's
//! table of costs ([`crate::plan::ModelTable`]):
//! [`NetworkFileError::CostTable`].

use std::path::Path;

use toml::Spanned;

use super::config::Activation;
use super::error::ModelError;
use super::network::Op;
use super::network::{BnGroup, NetworkConfig};
use crate::toml_place::{key_at, line_of, one_line, place};

mod error;
mod place;
mod spec;
#[cfg(test)]
mod tests;

pub use error::{LayerStep, NetworkFileError};
use place::{locate, outline_place};
use spec::{ActivationName, At, BnGroupName, LayerSpec, Spec, build_all};

/// A network read from a file: its name and the network.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetworkFile {
    /// The file's `name`, else its path.
    pub name: String,
    /// The network; its `classes` is the file's, else
    /// [`NetworkFile::DEFAULT_CLASSES`].
    pub network: NetworkConfig,
    /// Whether the file gives `classes`.
    pub classes_given: bool,
}

impl NetworkFile {
    /// The head's classes when the file gives none (the digits').
    pub const DEFAULT_CLASSES: usize = 10;

    /// The largest size a file may give or a layer may produce: channels,
    /// kernel, stride, padding, input and feature-map height and width,
    /// classes. 4096 is twice ResNet-50's widest layer (2048 channels)
    /// and keeps every product of sizes the planner forms within 64 bits.
    pub const MAX_SIZE: usize = 4096;

    /// The most bytes a network file may hold: 4 MiB, some 40 times a
    /// file of the most layers a network may have
    /// ([`bounds::MAX_LAYERS`](super::bounds::MAX_LAYERS)).
    pub const MAX_BYTES: u64 = 4 << 20;

    /// Parses a network file (see the [module docs](self)); `origin` (its
    /// path) names it in errors, and is its name if it gives none.
    ///
    /// # Errors
    /// [`NetworkFileError::Parse`], [`NetworkFileError::CostTable`],
    /// [`NetworkFileError::Field`], [`NetworkFileError::Network`].
    ///
    /// ```
    /// use tessera_sim::model::{NetworkFile, NetworkFileError};
    ///
    /// let text = r#"
    /// name = "tiny"
    /// input = [1, 8, 8]
    ///
    /// [[layer]]
    /// kind = "conv"
    /// channels = 4
    /// kernel = 3
    /// padding = 1
    ///
    /// [[layer]]
    /// kind = "bn_act"
    ///
    /// [[layer]]
    /// kind = "global_avg_pool"
    /// "#;
    /// let file = NetworkFile::from_toml_str(text, "tiny.toml")?;
    /// assert_eq!(file.name, "tiny");
    /// assert_eq!((file.network.input, file.network.layers.len()), ([1, 8, 8], 3));
    /// assert_eq!(file.network.classes, NetworkFile::DEFAULT_CLASSES);
    /// assert!(!file.classes_given);
    /// // An unknown key names its line.
    /// let bad = text.replace("padding = 1", "pading = 1");
    /// assert!(matches!(
    ///     NetworkFile::from_toml_str(&bad, "tiny.toml"),
    ///     Err(NetworkFileError::Parse { line: Some(9), .. })
    /// ));
    /// # Ok::<(), NetworkFileError>(())
    /// ```
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, NetworkFileError> {
        let parse_error = |e: toml::de::Error| {
            let (line, top) = place(text, &e, "kind");
            let layer = match (top, e.span()) {
                (Some(top), Some(span)) => outline_place(text, top, span.start),
                (top, _) => top
                    .map(|layer| LayerStep {
                        branch: None,
                        layer,
                    })
                    .into_iter()
                    .collect(),
            };
            let mut message = one_line(e.message());
            if let Some(key) = key_at(text, &e).filter(|k| !message.contains(&format!("`{k}`"))) {
                message = format!("`{key}`: {message}");
            }
            NetworkFileError::Parse {
                origin: origin.to_owned(),
                line,
                layer,
                message,
            }
        };
        // Told apart by the keys alone: a cost table's numbers may be
        // beyond what a TOML table of any values holds (u64 above i64).
        let keys = top_level_keys(text);
        if keys.contains(&"input_bytes") && !keys.contains(&"input") {
            return Err(NetworkFileError::CostTable {
                origin: origin.to_owned(),
            });
        }
        let spec: Spec = toml::from_str(text).map_err(parse_error)?;
        let top = At {
            origin,
            text,
            at: None,
            layer: Vec::new(),
        };
        for value in spec.input {
            top.size("input", value)?;
        }
        let classes = top.size("classes", spec.classes.unwrap_or(Self::DEFAULT_CLASSES))?;
        let network = NetworkConfig {
            input: spec.input,
            layers: build_all(&spec.layers, &top, None, text)?,
            classes,
            activation: match spec.activation {
                ActivationName::Relu => Activation::Relu,
                ActivationName::Gelu => Activation::Gelu,
            },
            bn_group: match spec.bn_group {
                BnGroupName::Replica => BnGroup::Replica,
                BnGroupName::All => BnGroup::All,
            },
        };
        check_network(&network, &spec.layers, origin, text)?;
        Ok(Self {
            name: spec.name.unwrap_or_else(|| origin.to_owned()),
            network,
            classes_given: spec.classes.is_some(),
        })
    }

    /// Reads a network file of at most [`NetworkFile::MAX_BYTES`] from
    /// `path`.
    ///
    /// # Errors
    /// [`NetworkFileError::Read`]; those of
    /// [`NetworkFile::from_toml_str`].
    ///
    /// ```
    /// use tessera_sim::model::{NetworkFile, NetworkFileError};
    ///
    /// let dir = std::env::temp_dir().join(format!("tessera-doc-net-{}", std::process::id()));
    /// std::fs::create_dir_all(&dir)?;
    /// let path = dir.join("net.toml");
    /// let text = "input = [1, 4, 4]\nclasses = 3\n[[layer]]\nkind = \"global_avg_pool\"\n";
    /// std::fs::write(&path, text)?;
    /// let file = NetworkFile::read(&path)?;
    /// // No `name`: the path names it.
    /// assert_eq!(file.name, path.display().to_string());
    /// assert_eq!((file.network.classes, file.classes_given), (3, true));
    /// let missing = dir.join("none.toml");
    /// assert!(matches!(NetworkFile::read(&missing), Err(NetworkFileError::Read { .. })));
    /// # std::fs::remove_dir_all(&dir)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read(path: &Path) -> Result<Self, NetworkFileError> {
        use std::io::Read;
        let origin = path.display().to_string();
        let refused = |message: String| NetworkFileError::Read {
            origin: origin.clone(),
            message,
        };
        // Bounded before it is read: an endless file (`/dev/zero`) is
        // refused at once.
        let mut bytes = Vec::new();
        std::fs::File::open(path)
            .and_then(|f| f.take(Self::MAX_BYTES + 1).read_to_end(&mut bytes))
            .map_err(|e| refused(e.to_string()))?;
        if bytes.len() as u64 > Self::MAX_BYTES {
            return Err(refused(format!(
                "larger than the {}-byte limit for a network file",
                Self::MAX_BYTES
            )));
        }
        let text = String::from_utf8(bytes)
            .map_err(|_| refused("stream did not contain valid UTF-8".to_owned()))?;
        Self::from_toml_str(&text, &origin)
    }
}

/// The keys before the first table header of `text`.
fn top_level_keys(text: &str) -> Vec<&str> {
    text.lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with('['))
        .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().trim_matches('"')))
        .collect()
}

/// `network` through the trainer's own checks ([`NetworkConfig::ops`]),
/// then every feature map's size against [`NetworkFile::MAX_SIZE`]; errors
/// name the layer of `layers`.
fn check_network(
    network: &NetworkConfig,
    layers: &[Spanned<LayerSpec>],
    origin: &str,
    text: &str,
) -> Result<(), NetworkFileError> {
    let refused = |op: Option<usize>, reason: String| {
        let (layer, at) = op
            .and_then(|op| locate(layers, None, op, 0))
            .map_or((Vec::new(), None), |(path, at)| (path, Some(at)));
        NetworkFileError::Network {
            origin: origin.to_owned(),
            line: at.map(|at| line_of(text, at)),
            layer,
            reason,
        }
    };
    let ops = super::bounds::check(network)
        .and_then(|_| network.ops(1))
        .map_err(|e| match e {
            ModelError::InvalidNetwork { layer, reason } => refused(Some(layer), reason),
            e => refused(None, e.to_string()),
        })?;
    for (l, op) in ops.iter().enumerate() {
        let shape = match op {
            Op::Conv(s) | Op::Pool(_, s) => s,
            _ => continue,
        };
        let (h, w) = shape.output;
        if h.max(w) > NetworkFile::MAX_SIZE {
            return Err(refused(
                Some(l),
                format!(
                    "makes {h}x{w} feature maps, above {}",
                    NetworkFile::MAX_SIZE
                ),
            ));
        }
    }
    Ok(())
}
