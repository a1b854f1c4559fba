//! The table: its layers checked when made, and its totals.

use serde::Serialize;

use super::error::ModelTableError;
use super::layer::{Gemm, LIMIT, Layer};
use crate::model::NetworkConfig;
use crate::toml_place::LayerRef;

/// A model as the planner sees it: a name, the bytes per sample the host
/// sends, and its layers in order. Validated when made.
///
/// ```
/// use tessera_sim::model::{Activation, MlpConfig};
/// use tessera_sim::plan::ModelTable;
///
/// let mlp = MlpConfig { inputs: 64, hidden: vec![128, 64], classes: 10,
///                       activation: Activation::Relu, batch_norm: false };
/// let table = ModelTable::from_network(&mlp.network())?;
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
    /// as the trainer builds it ([`crate::plan::network`]).
    #[serde(skip)]
    network: Option<NetworkConfig>,
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
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable, ModelTableError};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// assert_eq!(ModelTable::new("tiny", 260, vec![fc.clone()])?.params(), 650);
    /// assert!(matches!(ModelTable::new("none", 260, vec![]), Err(ModelTableError::NoLayers { .. })));
    /// let twice = ModelTable::new("twice", 260, vec![fc.clone(), fc]);
    /// assert!(matches!(twice, Err(ModelTableError::DuplicateName { .. })));
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
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
    pub(in crate::plan) fn trusted(name: String, input_bytes: u64, layers: Vec<Layer>) -> Self {
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
    pub const LIMIT: u64 = LIMIT;

    /// The tolerance of the check of a layer's FLOPs against its `gemm`:
    /// `flops_forward` may be this fraction below the product's `2 m k n`
    /// (counts rounded by hand) ...
    pub const GEMM_FLOPS_BELOW: f64 = 0.01;

    /// ... and up to this many times above it (a layer of several products
    /// of its shape: BERT's attention has two; its pre-training heads add
    /// 4% to the decoder's product).
    pub const GEMM_FLOPS_ABOVE: u64 = 4;

    /// [`ModelTable::new`], errors naming `origin`.
    pub(in crate::plan) fn checked(
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

    /// The model's name.
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert_eq!(table.name(), "tiny");
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This table named `name`.
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert_eq!(table.named("small").name(), "small");
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    #[must_use]
    pub fn named(self, name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ..self
        }
    }

    /// Bytes per sample the host sends (inputs and labels).
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert_eq!(table.input_bytes(), 260);
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    #[must_use]
    pub const fn input_bytes(&self) -> u64 {
        self.input_bytes
    }

    /// The layers, in order.
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert_eq!(table.layers()[0].name, "fc");
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    #[must_use]
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }

    /// Trainable parameters (tied weights once).
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert_eq!(table.params(), 650);
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    #[must_use]
    pub const fn params(&self) -> u64 {
        self.params
    }

    /// FLOPs per sample: `(forward, backward)`.
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert_eq!(table.flops_per_sample(), (1280, 2560));
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    #[must_use]
    pub const fn flops_per_sample(&self) -> (u64, u64) {
        self.flops
    }

    /// The network this table describes, if it was made of one
    /// ([`ModelTable::from_network`]).
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig};
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert!(table.network().is_none()); // made of its layers
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// assert_eq!(ModelTable::from_network(&mlp.network())?.network(), Some(&mlp.network()));
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    #[must_use]
    pub const fn network(&self) -> Option<&NetworkConfig> {
        self.network.as_ref()
    }

    /// This table describing `network`.
    pub(in crate::plan) fn of_network(self, network: NetworkConfig) -> Self {
        Self {
            network: Some(network),
            ..self
        }
    }

    /// Bytes per sample every layer stashes, summed.
    ///
    /// ```
    /// use tessera_sim::plan::{Layer, ModelTable};
    ///
    /// let fc = Layer { name: "fc".into(), params: 650, flops_forward: 1280, flops_backward: 2560,
    ///                  activation_bytes: 128, output_bytes: None, gemm: None, tied: None, sim: None };
    /// let table = ModelTable::new("tiny", 260, vec![fc])?;
    /// assert_eq!(table.activation_bytes(), 128);
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
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
