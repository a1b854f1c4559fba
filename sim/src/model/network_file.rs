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

use core::fmt;
use std::path::Path;

use serde::Deserialize;
use toml::Spanned;

use super::config::Activation;
use super::error::ModelError;
use super::network::Op;
use super::network::{BnGroup, NetLayer, NetworkConfig};
use super::shapes::{Pool2d, PoolKind};
use crate::toml_place::{key_at, line_of, one_line, place};

mod place;

pub use place::LayerStep;
use place::{Place, locate, outline_place};

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
    /// [`NetworkFile::MAX_SIZE`], an unknown kind, a key missing or not
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
    /// A network the trainer refuses ([`NetworkConfig::validate`]).
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

/// The file's top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Spec {
    #[serde(default)]
    name: Option<String>,
    input: [usize; 3],
    #[serde(default)]
    classes: Option<usize>,
    #[serde(default)]
    activation: ActivationName,
    #[serde(default)]
    bn_group: BnGroupName,
    #[serde(rename = "layer")]
    layers: Vec<Spanned<LayerSpec>>,
}

#[derive(Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum ActivationName {
    #[default]
    Relu,
    Gelu,
}

#[derive(Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
enum BnGroupName {
    #[default]
    Replica,
    All,
}

/// One layer as written: every key any kind has, checked against its
/// kind by [`LayerSpec::build`] (a flat table, not a tagged enum, so
/// that the parser's errors point at the key).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LayerSpec {
    kind: String,
    #[serde(default)]
    channels: Option<usize>,
    #[serde(default)]
    kernel: Option<usize>,
    #[serde(default)]
    stride: Option<usize>,
    #[serde(default)]
    padding: Option<usize>,
    #[serde(default)]
    body: Option<Vec<Spanned<LayerSpec>>>,
    #[serde(default)]
    branches: Option<Vec<Vec<Spanned<LayerSpec>>>>,
}

/// The kinds and the keys each takes (`kind` aside).
const KINDS: [(&str, &[&str]); 7] = [
    ("conv", &["channels", "kernel", "stride", "padding"]),
    ("bn_act", &[]),
    ("max_pool", &["kernel", "stride", "padding"]),
    ("avg_pool", &["kernel", "stride", "padding"]),
    ("global_avg_pool", &[]),
    ("residual", &["body"]),
    ("branches", &["branches"]),
];

/// Where a layer is: the file, the layer's first byte in the text and
/// its place (the byte made a line only for an error: counting lines for
/// every layer would take time quadratic in the layers).
struct At<'a> {
    origin: &'a str,
    text: &'a str,
    at: Option<usize>,
    layer: Vec<LayerStep>,
}

impl At<'_> {
    fn field(&self, field: &'static str, problem: String) -> NetworkFileError {
        NetworkFileError::Field {
            origin: self.origin.to_owned(),
            line: self.at.map(|at| line_of(self.text, at)),
            layer: self.layer.clone(),
            field,
            problem,
        }
    }

    /// `value` if it is from 1 to [`NetworkFile::MAX_SIZE`] (0 too for a
    /// padding).
    fn size(&self, field: &'static str, value: usize) -> Result<usize, NetworkFileError> {
        let least = usize::from(field != "padding");
        if (least..=NetworkFile::MAX_SIZE).contains(&value) {
            Ok(value)
        } else {
            Err(self.field(
                field,
                format!("is {value}: expected {least} to {}", NetworkFile::MAX_SIZE),
            ))
        }
    }
}

impl LayerSpec {
    /// The keys given (`kind` aside), with their names.
    fn given(&self) -> [(&'static str, bool); 6] {
        [
            ("channels", self.channels.is_some()),
            ("kernel", self.kernel.is_some()),
            ("stride", self.stride.is_some()),
            ("padding", self.padding.is_some()),
            ("body", self.body.is_some()),
            ("branches", self.branches.is_some()),
        ]
    }

    /// The layer, its keys checked against its kind and its sizes against
    /// [`NetworkFile::MAX_SIZE`].
    fn build(&self, at: &At<'_>, text: &str) -> Result<NetLayer, NetworkFileError> {
        let kinds = || KINDS.map(|(k, _)| k).join(", ");
        let Some((kind, keys)) = KINDS.iter().find(|(k, _)| *k == self.kind) else {
            return Err(at.field(
                "kind",
                format!("is `{}`: expected one of {}", self.kind, kinds()),
            ));
        };
        if let Some((key, _)) = self.given().iter().find(|(k, g)| *g && !keys.contains(k)) {
            let takes = if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            };
            return Err(at.field(key, format!("is not a key of `{kind}` (it takes {takes})")));
        }
        let missing = |field| at.field(field, format!("is missing (`{kind}` needs it)"));
        let required = |field: &'static str, value: Option<usize>| {
            at.size(field, value.ok_or_else(|| missing(field))?)
        };
        let padding = at.size("padding", self.padding.unwrap_or(0))?;
        Ok(match *kind {
            "conv" => NetLayer::Conv {
                channels: required("channels", self.channels)?,
                kernel: required("kernel", self.kernel)?,
                stride: at.size("stride", self.stride.unwrap_or(1))?,
                padding,
            },
            "max_pool" | "avg_pool" => {
                let kernel = required("kernel", self.kernel)?;
                NetLayer::Pool(Pool2d {
                    kind: if *kind == "max_pool" {
                        PoolKind::Max
                    } else {
                        PoolKind::Avg
                    },
                    kernel: (kernel, kernel),
                    stride: at.size("stride", self.stride.unwrap_or(kernel))?,
                    padding,
                })
            }
            "bn_act" => NetLayer::BnAct,
            "global_avg_pool" => NetLayer::GlobalAvgPool,
            "residual" => {
                let body = self.body.as_deref().ok_or_else(|| missing("body"))?;
                NetLayer::Residual(build_all(body, at, None, text)?)
            }
            _ => {
                let branches = self
                    .branches
                    .as_deref()
                    .ok_or_else(|| missing("branches"))?;
                let built = branches.iter().enumerate();
                NetLayer::Branches(
                    built
                        .map(|(i, branch)| build_all(branch, at, Some(i), text))
                        .collect::<Result<_, _>>()?,
                )
            }
        })
    }
}

/// `layers` built; `within` the place of the residual or branches block
/// they are the body or branch `branch` of (the top level: no layer).
fn build_all(
    layers: &[Spanned<LayerSpec>],
    within: &At<'_>,
    branch: Option<usize>,
    text: &str,
) -> Result<Vec<NetLayer>, NetworkFileError> {
    layers
        .iter()
        .enumerate()
        .map(|(index, l)| {
            let mut layer = within.layer.clone();
            layer.push(LayerStep::new(branch, index, &l.get_ref().kind));
            let at = At {
                origin: within.origin,
                text,
                at: Some(l.span().start),
                layer,
            };
            l.get_ref().build(&at, text)
        })
        .collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The module docs' example.
    pub(super) fn docs_example() -> String {
        include_str!("network_file.rs")
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .map(|l| l.strip_prefix(' ').unwrap_or(l))
            .skip_while(|l| *l != "```toml")
            .skip(1)
            .take_while(|l| *l != "```")
            .map(|l| format!("{l}\n"))
            .collect()
    }

    #[test]
    fn the_module_docs_example_parses_to_its_network() {
        let f = NetworkFile::from_toml_str(&docs_example(), "docs").unwrap();
        assert_eq!(f.name, "tiny-net");
        assert!(f.classes_given);
        let conv = |padding| NetLayer::Conv {
            channels: 8,
            kernel: 3,
            stride: 1,
            padding,
        };
        let expected = NetworkConfig {
            input: [1, 8, 8],
            layers: vec![
                conv(1),
                NetLayer::Residual(vec![NetLayer::BnAct, conv(1)]),
                NetLayer::Pool(Pool2d {
                    kind: PoolKind::Max,
                    kernel: (2, 2),
                    stride: 2,
                    padding: 0,
                }),
                NetLayer::Branches(vec![
                    vec![NetLayer::BnAct, conv(1)],
                    vec![
                        NetLayer::BnAct,
                        NetLayer::Conv {
                            channels: 8,
                            kernel: 1,
                            stride: 1,
                            padding: 0,
                        },
                    ],
                ]),
                NetLayer::BnAct,
                NetLayer::GlobalAvgPool,
            ],
            classes: 10,
            activation: Activation::Relu,
            bn_group: BnGroup::Replica,
        };
        assert_eq!(f.network, expected);
    }

    fn error(from: &str, to: &str) -> NetworkFileError {
        let text = docs_example();
        assert!(text.contains(from), "{from}");
        NetworkFile::from_toml_str(&text.replacen(from, to, 1), "n.toml").unwrap_err()
    }

    /// The line and the layer an error names.
    fn line_and_layer(e: &NetworkFileError) -> (Option<usize>, Option<(usize, String)>) {
        let (line, layer) = match e {
            NetworkFileError::Parse { line, layer, .. }
            | NetworkFileError::Field { line, layer, .. } => {
                (*line, layer.first().map(|s| s.layer.clone()))
            }
            _ => panic!("{e:?}"),
        };
        (line, layer.map(|l| (l.index, l.name.unwrap_or_default())))
    }

    #[test]
    fn errors_name_the_file_the_line_the_layer_and_the_key() {
        for (from, to, line, layer, key) in [
            (
                "channels = 8\n",
                "chanels = 8\n",
                9,
                Some((0, "conv")),
                "chanels",
            ),
            (
                "stride = 1 ",
                "stride = -1 ",
                11,
                Some((0, "conv")),
                "`stride`",
            ),
            (
                "padding = 1 ",
                "padding = \"one\" ",
                12,
                Some((0, "conv")),
                "`padding`",
            ),
            (
                "kernel = 2\n",
                "\n",
                21,
                Some((2, "max_pool")),
                "`kernel` is missing",
            ),
            (
                "kind = \"bn_act\"\n",
                "kind = \"bn\"\n",
                32,
                Some((4, "bn")),
                "`kind` is `bn`",
            ),
            (
                "kind = \"bn_act\"\n",
                "kind = \"bn_act\"\nkernel = 3\n",
                32,
                Some((4, "bn_act")),
                "`kernel` is not a key of `bn_act`",
            ),
            ("input = [1, 8, 8]", "input = [1, 8]", 2, None, "input"),
            (
                "activation = \"relu\"",
                "activation = \"tanh\"",
                4,
                None,
                "tanh",
            ),
        ] {
            let e = error(from, to);
            let text = e.to_string();
            let (at_line, at_layer) = line_and_layer(&e);
            assert_eq!(at_line, Some(line), "{text}");
            assert!(
                text.starts_with(&format!("n.toml: line {line}: ")),
                "{text}"
            );
            let layer = layer.map(|(i, k): (usize, &str)| (i, k.to_owned()));
            assert_eq!(at_layer, layer, "{text}");
            assert!(text.contains(key), "{key}: {text}");
            assert!(!text.contains('\n'), "{text}");
        }
        // Within an inline residual body: the line and the key.
        let e = error(
            "{ kind = \"conv\", channels = 8,",
            "{ kind = \"conv\", channels = -8,",
        );
        let text = e.to_string();
        assert!(
            text.contains("line 18: layer 1 (`residual`): body layer 1 (`conv`): `channels`"),
            "{text}"
        );
    }

    #[test]
    fn sizes_out_of_range_name_the_layer_and_the_field() {
        let e = error("padding = 1 ", "padding = 4097 ");
        assert_eq!(
            e.to_string(),
            "n.toml: line 7: layer 0 (`conv`): field `padding` is 4097: expected 0 to 4096"
        );
        let e = error("channels = 8, kernel", "channels = 0, kernel");
        assert_eq!(
            e.to_string(),
            "n.toml: line 18: layer 1 (`residual`): body layer 1 (`conv`): field `channels` is 0: \
             expected 1 to 4096"
        );
        let e = error("input = [1, 8, 8]", "input = [1, 0, 8]");
        assert!(e.to_string().contains("field `input` is 0"), "{e}");
        let e = error("classes = 10", "classes = 0");
        assert!(e.to_string().contains("field `classes` is 0"), "{e}");
    }

    #[test]
    fn networks_the_trainer_refuses_name_the_layer() {
        // The body's convolution changes the channels.
        let e = error("channels = 8, kernel", "channels = 4, kernel");
        let NetworkFileError::Network { layer, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(layer[0].layer.name.as_deref(), Some("residual"), "{e}");
        // A kernel larger than its input, in the body.
        let e = error(
            "channels = 8, kernel = 3, padding = 1",
            "channels = 8, kernel = 30, padding = 1",
        );
        assert!(
            e.to_string()
                .starts_with("n.toml: line 18: layer 1 (`residual`): body layer 1 (`conv`): "),
            "{e}"
        );
        // No global pooling: the head.
        let e = error("kind = \"global_avg_pool\"", "kind = \"bn_act\"");
        assert!(e.to_string().contains("global average pool"), "{e}");
        // Feature maps that grow past the limit.
        let e = error("padding = 1 ", "padding = 3000 ");
        assert!(
            e.to_string()
                .starts_with("n.toml: line 7: layer 0 (`conv`): makes 6006x6006"),
            "{e}"
        );
    }

    #[test]
    fn a_cost_table_is_told_apart() {
        let e = NetworkFile::from_toml_str("input_bytes = 4\n[[layer]]\nname = \"a\"\n", "t.toml")
            .unwrap_err();
        assert_eq!(
            e,
            NetworkFileError::CostTable {
                origin: "t.toml".into()
            }
        );
        assert!(e.to_string().contains("describes costs"), "{e}");
    }

    #[test]
    fn errors_within_a_branch_name_the_branch_and_its_layer() {
        let e = error("channels = 8, kernel = 1 }", "channels = 8, kernel = 0 }");
        assert_eq!(
            e.to_string(),
            "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): field `kernel` \
             is 0: expected 1 to 4096"
        );
        let e = error(
            "[{ kind = \"bn_act\" }, { kind = \"conv\", channels = 8, kernel = 1",
            "[{ kind = \"bn_act\", kernel = 1 }, { kind = \"conv\", channels = 8, kernel = 1",
        );
        assert_eq!(
            e.to_string(),
            "n.toml: line 29: layer 3 (`branches`): branch 1 layer 0 (`bn_act`): field `kernel` \
             is not a key of `bn_act` (it takes none)"
        );
        let e = error(
            "kind = \"conv\", channels = 8, kernel = 1",
            "kind = \"conv\", kernel = 1",
        );
        assert_eq!(
            e.to_string(),
            "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): field `channels` \
             is missing (`conv` needs it)"
        );
        let e = error("kind = \"branches\" ", "kind = \"residual\" ");
        assert_eq!(
            e.to_string(),
            "n.toml: line 25: layer 3 (`residual`): field `branches` is not a key of `residual` \
             (it takes body)"
        );
        // A branch's layers cannot be a residual's body.
        let e = error("branches = [  ", "body = [  ");
        assert!(
            e.to_string()
                .starts_with("n.toml: line 28: layer 3 (`branches`): invalid type"),
            "{e}"
        );
        // The parser's errors: an unknown key, a negative size.
        let e = error("channels = 8, kernel = 1 }", "channels = 8, kernal = 1 }");
        assert!(
            e.to_string().starts_with(
                "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): unknown field \
                 `kernal`"
            ),
            "{e}"
        );
        let e = error("channels = 8, kernel = 1 }", "channels = -8, kernel = 1 }");
        assert!(
            e.to_string().starts_with(
                "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): `channels`: "
            ),
            "{e}"
        );
        // A layer without a kind is named by its position alone.
        let e = error(
            "{ kind = \"conv\", channels = 8, kernel = 1",
            "{ channels = 8, kernel = 1",
        );
        assert!(
            e.to_string().starts_with(
                "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1: missing field `kind`"
            ),
            "{e}"
        );
        // A residual within a branch, its body checked too.
        let e = error(
            "[{ kind = \"bn_act\" }, { kind = \"conv\", channels = 8, kernel = 1 }]",
            "[{ kind = \"residual\", body = [{ kind = \"pool\" }] }]",
        );
        assert!(
            e.to_string().starts_with(
                "n.toml: line 29: layer 3 (`branches`): branch 1 layer 0 (`residual`): body \
                 layer 0 (`pool`): field `kind` is `pool`: expected one of conv, bn_act, \
                 max_pool, avg_pool, global_avg_pool, residual, branches"
            ),
            "{e}"
        );
        // A branches block within a residual body.
        let e = error(
            "{ kind = \"bn_act\" },       #",
            "{ kind = \"branches\", branches = [[], [{ kind = \"conv\", channels = 8, kernel = 1, stride = 0 }]] }, #",
        );
        assert_eq!(
            e.to_string(),
            "n.toml: line 17: layer 1 (`residual`): body layer 0 (`branches`): branch 1 layer 0 \
             (`conv`): field `stride` is 0: expected 1 to 4096"
        );
    }

    #[test]
    fn branches_the_trainer_refuses_name_the_layer() {
        // One branch only.
        let e = error(
            "  [{ kind = \"bn_act\" }, { kind = \"conv\", channels = 8, kernel = 1 }],\n",
            "",
        );
        assert_eq!(
            e.to_string(),
            "n.toml: line 25: layer 3 (`branches`): parallel branches need at least two, got 1"
        );
        // Branches ending at different sizes: 4x4 and 2x2.
        let e = error(
            "channels = 8, kernel = 1 }",
            "channels = 8, kernel = 1, stride = 2 }",
        );
        assert_eq!(
            e.to_string(),
            "n.toml: line 25: layer 3 (`branches`): branch 1 ends at 2x2, branch 0 at 4x4: branches are \
             concatenated by channels and must end at one height and width"
        );
        // A kernel larger than its input, in a branch.
        let e = error("channels = 8, kernel = 1 }", "channels = 8, kernel = 5 }");
        assert!(
            e.to_string()
                .starts_with("n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): "),
            "{e}"
        );
        // After the concat: the layers see the branches' channels summed.
        let e = error(
            "kind = \"bn_act\"\n",
            "kind = \"residual\"\nbody = [{ kind = \"conv\", channels = 8, kernel = 1 }]\n",
        );
        assert!(
            e.to_string()
                .starts_with("n.toml: line 32: layer 4 (`residual`): a residual body turns 16x"),
            "{e}"
        );
    }
}
