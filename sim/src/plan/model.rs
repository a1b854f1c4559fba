//! Model descriptions for the planner: a table of layers, each with its
//! parameters, its floating-point operations per sample forward and
//! backward, the activations its backward pass needs stashed, and what it
//! hands to the next layer.
//!
//! Tables come from three places: the built-in ResNet-50 and BERT-Large
//! ([`super::builtin`]), the trainer's MLP ([`ModelTable::from_mlp`]), and
//! TOML files for any other model ([`ModelTable::read`]):
//!
//! ```toml
//! name = "tiny"                # optional: the file's name otherwise
//! input_bytes = 1028           # per sample, from the host
//!
//! [[layer]]
//! name = "fc1"
//! params = 65792               # weights and biases
//! flops_forward = 131072       # per sample, a multiply-add counted as two
//! flops_backward = 131072      # per sample: weight and input gradients
//! activation_bytes = 1024      # per sample, stashed for the backward pass (16-bit)
//! output_bytes = 512           # optional: per sample, to the next layer
//! gemm = { m = 1, k = 256, n = 256 }   # optional: the layer's matrix product
//!
//! [[layer]]
//! name = "head"
//! params = 2570
//! flops_forward = 5120
//! flops_backward = 10240
//! activation_bytes = 40
//! tied = { layer = "fc1", params = 0 } # optional: weights shared with an earlier layer
//! ```
//!
//! Every key is checked: an unknown or missing one, a negative number or a
//! wrong type is an error naming the file, the line, the layer and the
//! field ([`ModelTableError`]). So are the values: every number, and every
//! sum over the layers, at most [`ModelTable::LIMIT`] (2^53); with a
//! `gemm`, `flops_forward` between 1% below and 4 times its `2 m k n`
//! ([`ModelTable::GEMM_FLOPS_BELOW`], [`ModelTable::GEMM_FLOPS_ABOVE`])
//! and `flops_backward` at most twice `flops_forward`.
//!
//! # Conventions
//!
//! - FLOPs count a multiply-add as two, and only the matrix products and
//!   the operations a layer without a product is made of (a pooling
//!   window's comparisons), as the simulator's MLP layers and the
//!   published GMAC counts do; the element-wise work after a product (bias,
//!   normalisation, activation) is priced separately by the planner from
//!   the layer's output size.
//! - The backward FLOPs are the weight gradient (as many as the forward
//!   pass, for a layer with parameters) plus the input gradient (as many
//!   again, except for the first layer, whose input is data).
//! - Bytes are for 16-bit activations; the planner doubles them in `32.32`.
//! - `output_bytes` defaults to the `gemm`'s output (`m x n` elements of 2
//!   bytes), else to `activation_bytes`.
//! - `gemm` is the product `[m, k] x [k, n]` per sample (`m` rows per
//!   sample: 1 for a dense layer, the output positions of a convolution,
//!   the tokens of a transformer's linear layer). It tells the planner how
//!   the layer's work spreads over tiles and what each tile must receive;
//!   a layer without one is priced as vector work over its elements.
//!

use core::fmt;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::calibrate::SimLayer;
use crate::model::{MlpConfig, NetworkConfig};
pub use crate::toml_place::LayerRef;
use crate::toml_place::{one_line, place};

/// The matrix product a layer is built around, per sample:
/// `[m, k] x [k, n]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gemm {
    /// Rows per sample (1 for a dense layer; output positions of a
    /// convolution; tokens of a transformer layer).
    pub m: u64,
    /// The reduction dimension (input features; `Cin x kh x kw` of a
    /// convolution).
    pub k: u64,
    /// Output columns (output features or channels).
    pub n: u64,
}

impl Gemm {
    /// FLOPs of the product per sample, `2 m k n` (saturating).
    #[must_use]
    pub const fn flops(&self) -> u64 {
        2u64.saturating_mul(self.m)
            .saturating_mul(self.k)
            .saturating_mul(self.n)
    }
}

/// Weights a layer uses but another (earlier) layer owns, as BERT's MLM
/// decoder uses the word embeddings.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tied {
    /// The owning layer's name.
    pub layer: String,
    /// How many of its parameters are shared.
    pub params: u64,
}

/// One row of a [`ModelTable`] (see the [module docs](self) for the
/// conventions).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layer {
    /// A name, unique in the table.
    pub name: String,
    /// Trainable parameters the layer owns.
    pub params: u64,
    /// FLOPs of the forward pass per sample.
    pub flops_forward: u64,
    /// FLOPs of the backward pass per sample.
    pub flops_backward: u64,
    /// Bytes per sample the backward pass needs kept from the forward pass
    /// (16-bit).
    pub activation_bytes: u64,
    /// Bytes per sample handed to the next layer (16-bit), if not the
    /// default (see the [module docs](self)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// The layer's matrix product per sample, if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gemm: Option<Gemm>,
    /// Weights shared with an earlier layer: not counted in the model's
    /// parameters, but held (weights and gradients) on this layer's
    /// pipeline stage too when the owner is on another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tied: Option<Tied>,
    /// The layer as the simulator builds it, for pricing it on the
    /// simulated IPU instead of by the assumptions
    /// ([`super::calibrate`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sim: Option<SimLayer>,
}

impl Layer {
    /// Bytes per sample handed to the next layer: `output_bytes`, else the
    /// product's `2 m n`, else `activation_bytes`.
    #[must_use]
    pub fn boundary_bytes(&self) -> u64 {
        self.output_bytes
            .or_else(|| self.gemm.map(|g| g.m.saturating_mul(g.n).saturating_mul(2)))
            .unwrap_or(self.activation_bytes)
    }

    /// 16-bit elements per sample of the layer's output.
    #[must_use]
    pub fn output_elements(&self) -> u64 {
        match self.gemm {
            Some(g) => g.m.saturating_mul(g.n),
            None => self.boundary_bytes().div_ceil(2),
        }
    }
}

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
    /// A sum over the table (parameters, FLOPs) overflows 64 bits.
    Overflow {
        /// The table's origin.
        origin: String,
        /// The field summed.
        field: &'static str,
    },
    /// A number above [`ModelTable::LIMIT`]: a layer's field (`gemm`: its
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
            Self::Overflow { origin, field } => {
                write!(f, "{origin}: the model's total `{field}` overflows 64 bits")
            }
            Self::TooLarge {
                origin,
                layer,
                field,
                value,
            } => {
                let limit = ModelTable::LIMIT;
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

/// A model as the planner sees it: a name, the bytes per sample the host
/// sends, and its layers in order. Validated when made.
///
/// ```
/// use tessera_sim::model::{Activation, MlpConfig};
/// use tessera_sim::plan::ModelTable;
///
/// let mlp = MlpConfig { inputs: 64, hidden: vec![128, 64], classes: 10,
///                       activation: Activation::Relu, batch_norm: false };
/// let table = ModelTable::from_mlp(&mlp)?;
/// assert_eq!(table.layers().len(), 3);
/// assert_eq!(table.params(), (64 * 128 + 128) + (128 * 64 + 64) + (64 * 10 + 10));
/// # Ok::<(), tessera_sim::plan::ModelTableError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelTable {
    name: String,
    input_bytes: u64,
    layers: Vec<Layer>,
    #[serde(skip)]
    params: u64,
    #[serde(skip)]
    flops: (u64, u64),
    /// The network the table was made of, for pricing it on the simulator
    /// as the trainer builds it ([`super::network`]).
    #[serde(skip)]
    network: Option<NetworkConfig>,
}

/// The TOML file's top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    name: Option<String>,
    input_bytes: u64,
    #[serde(rename = "layer")]
    layers: Vec<Layer>,
}

impl ModelTable {
    /// A table of `layers` named `name`, the host sending `input_bytes` per
    /// sample (inputs and labels).
    ///
    /// # Errors
    /// [`ModelTableError::NoLayers`]; [`ModelTableError::Field`] for an
    /// empty name, a `gemm` with a zero dimension or FLOPs that contradict
    /// it (see [`ModelTable::GEMM_FLOPS_BELOW`]), a `tied` naming no
    /// earlier layer or more parameters than it owns;
    /// [`ModelTableError::DuplicateName`]; [`ModelTableError::TooLarge`]
    /// for a number or a total above [`ModelTable::LIMIT`].
    pub fn new(
        name: impl Into<String>,
        input_bytes: u64,
        layers: Vec<Layer>,
    ) -> Result<Self, ModelTableError> {
        let name = name.into();
        Self::checked(name.clone(), &name, input_bytes, layers)
    }

    /// A table built by this crate's code (the built-in models), valid by
    /// construction: the unit tests check that [`ModelTable::new`] accepts
    /// it unchanged.
    pub(super) fn trusted(name: String, input_bytes: u64, layers: Vec<Layer>) -> Self {
        let sum = |f: fn(&Layer) -> u64| layers.iter().fold(0u64, |a, l| a.saturating_add(f(l)));
        Self {
            params: sum(|l| l.params),
            flops: (sum(|l| l.flops_forward), sum(|l| l.flops_backward)),
            name,
            input_bytes,
            layers,
            network: None,
        }
    }

    /// The largest number a table may hold, in a field of a layer, in
    /// `input_bytes` or summed over the layers: 2^53, the largest integer
    /// below which f64 (the time model's arithmetic) holds every integer.
    /// No model comes near it (GPT-3's 175 G parameters are 2^37.4), and
    /// sums and products of such numbers stay far from 64-bit overflow.
    pub const LIMIT: u64 = 1 << 53;

    /// The tolerance of the check of a layer's FLOPs against its `gemm`:
    /// `flops_forward` may be this fraction below the product's `2 m k n`
    /// (counts rounded by hand) ...
    pub const GEMM_FLOPS_BELOW: f64 = 0.01;

    /// ... and up to this many times above it (a layer of several products
    /// of its shape: BERT's attention has two; its pre-training heads add
    /// 4% to the decoder's product).
    pub const GEMM_FLOPS_ABOVE: u64 = 4;

    /// [`ModelTable::new`], errors naming `origin`.
    pub(super) fn checked(
        name: String,
        origin: &str,
        input_bytes: u64,
        layers: Vec<Layer>,
    ) -> Result<Self, ModelTableError> {
        let too_large = |layer, field, value| ModelTableError::TooLarge {
            origin: origin.to_owned(),
            layer,
            field,
            value,
        };
        if layers.is_empty() {
            return Err(ModelTableError::NoLayers {
                origin: origin.to_owned(),
            });
        }
        if input_bytes > Self::LIMIT {
            return Err(too_large(None, "input_bytes", input_bytes));
        }
        for i in 0..layers.len() {
            check_layer(&layers, i, origin)?;
        }
        let sum = |f: fn(&Layer) -> u64| layers.iter().fold(0u64, |a, l| a.saturating_add(f(l)));
        let (params, fwd, bwd) = (
            sum(|l| l.params),
            sum(|l| l.flops_forward),
            sum(|l| l.flops_backward),
        );
        for (field, total) in [
            ("params", params),
            ("flops_forward", fwd),
            ("flops_backward", bwd),
            ("activation_bytes", sum(|l| l.activation_bytes)),
        ] {
            if total > Self::LIMIT {
                return Err(too_large(None, field, total));
            }
        }
        Ok(Self {
            name,
            input_bytes,
            layers,
            params,
            flops: (fwd, bwd),
            network: None,
        })
    }

    /// The table of the trainer's MLP ([`crate::model`]): a row per dense
    /// layer (`layer{l}`), with the simulator's FLOP counts
    /// (`2 i o` per layer forward, twice that backward but the first
    /// layer's),
    /// the pre-activation and the activation stashed, and the trainer's
    /// host input per sample (f32 features and a `u32` label). Batch norm
    /// adds its parameters; its extra phases are not priced.
    ///
    /// # Errors
    /// [`ModelTableError::Field`] for a zero width,
    /// [`ModelTableError::Overflow`] for widths whose products overflow.
    pub fn from_mlp(config: &MlpConfig) -> Result<Self, ModelTableError> {
        let mut widths = vec![config.inputs];
        widths.extend(&config.hidden);
        widths.push(config.classes);
        let last = widths.len() - 2;
        let overflow = |field| ModelTableError::Overflow {
            origin: "mlp".into(),
            field,
        };
        let mut layers = Vec::with_capacity(widths.len() - 1);
        for (l, w) in widths.windows(2).enumerate() {
            let (i, o) = (w[0] as u64, w[1] as u64);
            let bn = if config.batch_norm && l < last {
                o.saturating_mul(2)
            } else {
                0
            };
            let weights = i.checked_mul(o).ok_or_else(|| overflow("params"))?;
            // 2 i o forward; the backward pass twice that (but the first
            // layer's): 4 i o must fit.
            let f = weights
                .checked_mul(4)
                .map(|x| x / 2)
                .ok_or_else(|| overflow("flops_backward"))?;
            layers.push(Layer {
                name: format!("layer{l}"),
                params: weights
                    .checked_add(o.saturating_add(bn))
                    .ok_or_else(|| overflow("params"))?,
                flops_forward: f,
                flops_backward: if l == 0 { f } else { 2 * f },
                activation_bytes: o.saturating_mul(4),
                output_bytes: None,
                gemm: Some(Gemm { m: 1, k: i, n: o }),
                tied: None,
                sim: None,
            });
        }
        Self::checked(
            format!("mlp {}", mlp_name(config)),
            "mlp",
            (config.inputs as u64).saturating_mul(4).saturating_add(4),
            layers,
        )
    }

    /// Parses a TOML model description (see the [module docs](self));
    /// `origin` (the file's path) names it in errors, and is its name if
    /// the file gives none.
    ///
    /// # Errors
    /// [`ModelTableError::Parse`] naming the line, the layer and (in the
    /// parser's message) the key; the errors of [`ModelTable::new`].
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Self, ModelTableError> {
        let file: File = toml::from_str(text).map_err(|e| {
            let (line, layer) = place(text, &e, "name");
            ModelTableError::Parse {
                origin: origin.to_owned(),
                line,
                layer,
                message: one_line(e.message()),
            }
        })?;
        let name = file.name.unwrap_or_else(|| origin.to_owned());
        Self::checked(name, origin, file.input_bytes, file.layers)
    }

    /// Reads a TOML model description from `path`.
    ///
    /// # Errors
    /// [`ModelTableError::Read`]; the errors of
    /// [`ModelTable::from_toml_str`].
    pub fn read(path: &Path) -> Result<Self, ModelTableError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| ModelTableError::Read {
            origin: origin.clone(),
            message: e.to_string(),
        })?;
        Self::from_toml_str(&text, &origin)
    }

    /// The model's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This table named `name`.
    #[must_use]
    pub fn named(self, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..self
        }
    }

    /// Bytes per sample the host sends (inputs and labels).
    #[must_use]
    pub const fn input_bytes(&self) -> u64 {
        self.input_bytes
    }

    /// The layers, in order.
    #[must_use]
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// Trainable parameters (tied weights once).
    #[must_use]
    pub const fn params(&self) -> u64 {
        self.params
    }

    /// FLOPs per sample: `(forward, backward)`.
    #[must_use]
    pub const fn flops_per_sample(&self) -> (u64, u64) {
        self.flops
    }

    /// The network this table describes, if it was made of one
    /// ([`ModelTable::from_network`]).
    #[must_use]
    pub const fn network(&self) -> Option<&NetworkConfig> {
        self.network.as_ref()
    }

    /// This table describing `network`.
    pub(super) fn of_network(self, network: NetworkConfig) -> Self {
        Self {
            network: Some(network),
            ..self
        }
    }

    /// Bytes per sample every layer stashes, summed.
    #[must_use]
    pub fn activation_bytes(&self) -> u64 {
        self.layers
            .iter()
            .fold(0u64, |a, l| a.saturating_add(l.activation_bytes))
    }
}

/// Checks layer `i` of `layers` (a table from `origin`): its name, its
/// numbers against [`ModelTable::LIMIT`], its `gemm` against its FLOPs, its
/// `tied` against the earlier layers.
fn check_layer(layers: &[Layer], i: usize, origin: &str) -> Result<(), ModelTableError> {
    let layer = &layers[i];
    let at = || LayerRef {
        index: i,
        name: Some(layer.name.clone()),
    };
    let field = |field: &'static str, problem: String| ModelTableError::Field {
        origin: origin.to_owned(),
        layer: at(),
        field,
        problem,
    };
    if layer.name.trim().is_empty() {
        return Err(ModelTableError::Field {
            origin: origin.to_owned(),
            layer: LayerRef {
                index: i,
                name: None,
            },
            field: "name",
            problem: "is empty".into(),
        });
    }
    if let Some(first) = layers[..i].iter().position(|l| l.name == layer.name) {
        return Err(ModelTableError::DuplicateName {
            origin: origin.to_owned(),
            name: layer.name.clone(),
            first,
            second: i,
        });
    }
    let gemm = layer.gemm.map(|g| g.flops());
    for (name, value) in [
        ("params", Some(layer.params)),
        ("flops_forward", Some(layer.flops_forward)),
        ("flops_backward", Some(layer.flops_backward)),
        ("activation_bytes", Some(layer.activation_bytes)),
        ("output_bytes", layer.output_bytes),
        ("gemm", gemm),
        ("tied.params", layer.tied.as_ref().map(|t| t.params)),
    ] {
        if let Some(value) = value.filter(|&v| v > ModelTable::LIMIT) {
            return Err(ModelTableError::TooLarge {
                origin: origin.to_owned(),
                layer: Some(at()),
                field: name,
                value,
            });
        }
    }
    if let Some(g) = layer.gemm {
        check_gemm(layer, &g).map_err(|(name, problem)| field(name, problem))?;
    }
    if let Some(t) = &layer.tied {
        let Some(owner) = layers[..i].iter().find(|l| l.name == t.layer) else {
            return Err(field(
                "tied.layer",
                format!("names no earlier layer: `{}`", t.layer),
            ));
        };
        if t.params > owner.params {
            return Err(field(
                "tied.params",
                format!(
                    "is {}, more than the {} parameters of `{}`",
                    t.params, owner.params, owner.name
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `layer`'s FLOPs agree with its product `g` (within
/// [`ModelTable::GEMM_FLOPS_BELOW`] and [`ModelTable::GEMM_FLOPS_ABOVE`]
/// forward, at most twice the forward FLOPs backward: the weight and the
/// input gradient each cost a forward pass), else the field and the
/// problem. All numbers are at most [`ModelTable::LIMIT`] here.
fn check_gemm(layer: &Layer, g: &Gemm) -> Result<(), (&'static str, String)> {
    if g.m == 0 || g.k == 0 || g.n == 0 {
        return Err((
            "gemm",
            format!("has a zero dimension (m {}, k {}, n {})", g.m, g.k, g.n),
        ));
    }
    let product = g.flops();
    let (fwd, bwd) = (layer.flops_forward, layer.flops_backward);
    let low = (product as f64 * (1.0 - ModelTable::GEMM_FLOPS_BELOW)).ceil() as u64;
    let high = product * ModelTable::GEMM_FLOPS_ABOVE;
    if fwd < low || fwd > high {
        return Err((
            "flops_forward",
            format!(
                "is {fwd}, but its gemm (m {}, k {}, n {}) is 2 m k n = {product} FLOPs: \
                 expected {low} to {high} ({}% below to {}x the product)",
                g.m,
                g.k,
                g.n,
                ModelTable::GEMM_FLOPS_BELOW * 100.0,
                ModelTable::GEMM_FLOPS_ABOVE
            ),
        ));
    }
    if bwd > 2 * fwd {
        return Err((
            "flops_backward",
            format!(
                "is {bwd}, more than twice flops_forward ({fwd}): with a gemm, the backward \
                 pass is its weight and input gradients, a forward pass each"
            ),
        ));
    }
    Ok(())
}

/// `64-128-64-10`.
fn mlp_name(c: &MlpConfig) -> String {
    let mut w = vec![c.inputs];
    w.extend(&c.hidden);
    w.push(c.classes);
    w.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Activation;

    const GOOD: &str = r#"
name = "two"
input_bytes = 1028

[[layer]]
name = "fc1"
params = 65792
flops_forward = 131072
flops_backward = 131072
activation_bytes = 1024
gemm = { m = 1, k = 256, n = 256 }

[[layer]]
name = "fc2"
params = 2570
flops_forward = 5120
flops_backward = 10240
activation_bytes = 40
output_bytes = 20
"#;

    #[test]
    fn the_module_docs_example_parses() {
        let source = include_str!("model.rs");
        let toml: String = source
            .lines()
            .filter_map(|l| l.strip_prefix("//!"))
            .map(|l| l.strip_prefix(' ').unwrap_or(l))
            .skip_while(|l| *l != "```toml")
            .skip(1)
            .take_while(|l| *l != "```")
            .map(|l| format!("{l}\n"))
            .collect();
        let t = ModelTable::from_toml_str(&toml, "docs").unwrap();
        assert_eq!(t.name(), "tiny");
        assert_eq!(t.layers().len(), 2);
        assert_eq!(t.layers()[1].tied.as_ref().unwrap().layer, "fc1");
    }

    #[test]
    fn a_good_file_parses() {
        let t = ModelTable::from_toml_str(GOOD, "two.toml").unwrap();
        assert_eq!(t.name(), "two");
        assert_eq!(t.input_bytes(), 1028);
        assert_eq!(t.params(), 65792 + 2570);
        assert_eq!(t.flops_per_sample(), (131_072 + 5120, 131_072 + 10240));
        assert_eq!(t.layers()[0].boundary_bytes(), 512);
        assert_eq!(t.layers()[0].output_elements(), 256);
        assert_eq!(t.layers()[1].boundary_bytes(), 20);
        // Unnamed: the origin.
        let t = ModelTable::from_toml_str(&GOOD.replace("name = \"two\"", ""), "x.toml").unwrap();
        assert_eq!(t.name(), "x.toml");
    }

    #[test]
    fn errors_name_the_file_the_line_the_layer_and_the_field() {
        let e = ModelTable::from_toml_str(
            &GOOD.replace("flops_backward = 10240", "flops_bakward = 1"),
            "m.toml",
        )
        .unwrap_err();
        let ModelTableError::Parse {
            line,
            layer,
            message,
            ..
        } = &e
        else {
            panic!("{e:?}");
        };
        assert_eq!(layer.as_ref().unwrap().index, 1);
        assert_eq!(layer.as_ref().unwrap().name.as_deref(), Some("fc2"));
        assert!(line.is_some());
        assert!(message.contains("flops_bakward"), "{message}");
        let text = e.to_string();
        assert!(text.starts_with("m.toml: line "), "{text}");
        assert!(text.contains("layer 1 (`fc2`)"), "{text}");

        // A missing key, a negative number, a wrong type.
        for (from, to, key) in [
            ("activation_bytes = 1024\n", "", "activation_bytes"),
            ("params = 65792", "params = -1", "params"),
            ("params = 65792", "params = \"many\"", "params"),
        ] {
            let e = ModelTable::from_toml_str(&GOOD.replace(from, to), "m.toml").unwrap_err();
            let text = e.to_string();
            assert!(text.contains("layer 0 (`fc1`)"), "{text}");
            assert!(text.contains(key) || text.contains("invalid"), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
        // Top level.
        let e = ModelTable::from_toml_str(&GOOD.replace("input_bytes", "inputs"), "m.toml")
            .unwrap_err();
        assert!(e.to_string().contains("inputs"), "{e}");
        let e = ModelTable::from_toml_str("input_bytes = 4\nlayer = []\n", "m.toml").unwrap_err();
        assert_eq!(
            e,
            ModelTableError::NoLayers {
                origin: "m.toml".into()
            }
        );
        let e = ModelTable::from_toml_str("input_bytes = [", "m.toml").unwrap_err();
        assert!(matches!(e, ModelTableError::Parse { .. }), "{e:?}");
    }

    #[test]
    fn semantic_errors() {
        let e = ModelTable::from_toml_str(&GOOD.replace("m = 1,", "m = 0,"), "m.toml").unwrap_err();
        assert!(
            matches!(&e, ModelTableError::Field { field: "gemm", layer, .. } if layer.index == 0),
            "{e:?}"
        );
        let e =
            ModelTable::from_toml_str(&GOOD.replace("\"fc2\"", "\"fc1\""), "m.toml").unwrap_err();
        assert!(
            matches!(
                e,
                ModelTableError::DuplicateName {
                    first: 0,
                    second: 1,
                    ..
                }
            ),
            "{e:?}"
        );
        let tied = GOOD.replace(
            "output_bytes = 20",
            "output_bytes = 20\ntied = { layer = \"fc9\", params = 1 }",
        );
        let e = ModelTable::from_toml_str(&tied, "m.toml").unwrap_err();
        assert!(e.to_string().contains("tied.layer"), "{e}");
        let tied = GOOD.replace(
            "output_bytes = 20",
            "output_bytes = 20\ntied = { layer = \"fc1\", params = 100000 }",
        );
        let e = ModelTable::from_toml_str(&tied, "m.toml").unwrap_err();
        assert!(e.to_string().contains("tied.params"), "{e}");
        let big = format!(
            "{}\n[[layer]]\nname = \"fc3\"\nparams = {}\nflops_forward = 0\nflops_backward = 0\nactivation_bytes = 0\n",
            GOOD.replace("params = 2570", &format!("params = {}", i64::MAX)),
            i64::MAX
        );
        let e = ModelTable::from_toml_str(&big, "m.toml").unwrap_err();
        assert!(
            matches!(
                &e,
                ModelTableError::TooLarge {
                    field: "params",
                    layer: Some(LayerRef { index: 1, .. }),
                    value,
                    ..
                } if *value == i64::MAX as u64
            ),
            "{e:?}"
        );
    }

    /// A table with `fc1`'s `from` replaced by `to`.
    fn edited(from: &str, to: &str) -> Result<ModelTable, ModelTableError> {
        assert!(GOOD.contains(from), "{from}");
        ModelTable::from_toml_str(&GOOD.replacen(from, to, 1), "m.toml")
    }

    #[test]
    fn numbers_beyond_the_limit_are_refused_with_the_layer_field_and_value() {
        let max = u64::MAX.to_string();
        for field in [
            "params",
            "flops_forward",
            "flops_backward",
            "activation_bytes",
        ] {
            let line = GOOD
                .lines()
                .find(|l| l.starts_with(field))
                .unwrap()
                .to_owned();
            let e = edited(&line, &format!("{field} = {max}")).unwrap_err();
            assert_eq!(
                e.to_string(),
                format!(
                    "m.toml: layer 0 (`fc1`): field `{field}` is {max}, above the planner's \
                     limit of 2^53 = 9007199254740992"
                )
            );
        }
        // Up to 2^53 in all is allowed.
        let limit = ModelTable::LIMIT;
        let t = edited("params = 65792", &format!("params = {}", limit - 2570)).unwrap();
        assert_eq!(t.params(), limit);
        let e = edited(
            "input_bytes = 1028",
            &format!("input_bytes = {}", limit + 1),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.toml: `input_bytes` is 9007199254740993, above the planner's limit of 2^53 = \
             9007199254740992"
        );
        // Each layer within the limit, the sum not.
        let half = limit / 2 + 1;
        let text = GOOD
            .replace("params = 65792", &format!("params = {half}"))
            .replace("params = 2570", &format!("params = {half}"));
        let e = ModelTable::from_toml_str(&text, "m.toml").unwrap_err();
        assert_eq!(
            e,
            ModelTableError::TooLarge {
                origin: "m.toml".into(),
                layer: None,
                field: "params",
                value: 2 * half,
            }
        );
        assert!(e.to_string().contains("the layers' total `params`"), "{e}");
        // A gemm whose 2 m k n is beyond it.
        let e = edited("m = 1, k = 256", &format!("m = {limit}, k = 256")).unwrap_err();
        assert!(
            matches!(e, ModelTableError::TooLarge { field: "gemm", .. }),
            "{e:?}"
        );
    }

    #[test]
    fn flops_that_contradict_the_gemm_are_refused_with_both_numbers() {
        // fc1: gemm 1 x 256 x 256 is 131072 FLOPs.
        let e = edited("flops_forward = 131072", "flops_forward = 1").unwrap_err();
        assert_eq!(
            e.to_string(),
            "m.toml: layer 0 (`fc1`): field `flops_forward` is 1, but its gemm (m 1, k 256, \
             n 256) is 2 m k n = 131072 FLOPs: expected 129762 to 524288 (1% below to 4x the \
             product)"
        );
        // The tolerance's edges are accepted, one past them is not.
        for (fwd, ok) in [
            (129_762, true),
            (129_761, false),
            (524_288, true),
            (524_289, false),
        ] {
            let r = edited(
                "flops_forward = 131072\nflops_backward = 131072",
                &format!("flops_forward = {fwd}\nflops_backward = {fwd}"),
            );
            assert_eq!(r.is_ok(), ok, "{fwd}: {r:?}");
        }
        let e = edited("flops_backward = 131072", "flops_backward = 262145").unwrap_err();
        assert!(
            matches!(
                &e,
                ModelTableError::Field {
                    field: "flops_backward",
                    ..
                }
            ),
            "{e:?}"
        );
        assert!(
            e.to_string().contains("262145") && e.to_string().contains("131072"),
            "{e}"
        );
        edited("flops_backward = 131072", "flops_backward = 262144").unwrap();
    }

    #[test]
    fn the_mlp_table_has_the_simulators_flops() {
        let c = MlpConfig {
            inputs: 64,
            hidden: vec![128, 64],
            classes: 10,
            activation: Activation::Relu,
            batch_norm: false,
        };
        let t = ModelTable::from_mlp(&c).unwrap();
        let params: usize = c.network().params().unwrap().iter().map(|p| p.len()).sum();
        assert_eq!(t.params(), params as u64);
        // The simulator's MLP: the backward pass is dW for every layer and
        // dA for all but the first.
        let f = [2 * 64 * 128, 2 * 128 * 64, 2 * 64 * 10];
        assert_eq!(
            t.flops_per_sample(),
            (f.iter().sum(), f[0] + 2 * f[1] + 2 * f[2])
        );
        assert_eq!(t.input_bytes(), 4 * 64 + 4);
        let bn = ModelTable::from_mlp(&MlpConfig {
            batch_norm: true,
            ..c.clone()
        })
        .unwrap();
        assert_eq!(bn.params(), t.params() + 2 * (128 + 64));
        let zero = MlpConfig {
            hidden: vec![0],
            ..c
        };
        assert!(ModelTable::from_mlp(&zero).is_err());
    }
}
