//! What the trainer is asked to build: an MLP ([`MlpConfig`]: widths,
//! activation, batch norm) or a network ([`NetworkConfig`]), both built as
//! the one network ([`ModelConfig::network`]; an MLP's is dense blocks).

use super::config::{Activation, ParamSpec, fits};
use super::error::ModelError;
use super::network::{BnGroup, NetLayer, NetworkConfig};

/// A multi-layer perceptron: `inputs -> hidden[0] -> ... -> classes`, the
/// activation after every hidden layer, softmax cross-entropy on the
/// logits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MlpConfig {
    /// Features per sample.
    pub inputs: usize,
    /// Widths of the hidden layers.
    pub hidden: Vec<usize>,
    /// Classes (width of the last layer).
    pub classes: usize,
    /// The hidden layers' activation.
    pub activation: Activation,
    /// Batch norm after every hidden layer's product, before its
    /// activation.
    pub batch_norm: bool,
}

impl MlpConfig {
    /// `(inputs, outputs)` of every layer.
    pub(crate) fn layers(&self) -> Vec<(usize, usize)> {
        let mut widths = vec![self.inputs];
        widths.extend(&self.hidden);
        widths.push(self.classes);
        widths.windows(2).map(|w| (w[0], w[1])).collect()
    }

    /// The network of this MLP: input `[inputs, 1, 1]`, a dense block per
    /// hidden width (batch norm if `batch_norm`), the head onto `classes`.
    /// Layer `l` keeps its index and parameter names: per layer
    /// `layer{l}.weight` `[in, out]`, `layer{l}.bias` `[out]`, then for
    /// hidden layers with batch norm `layer{l}.bn.gamma` and
    /// `layer{l}.bn.beta` `[out]`. Its initial weights are normal with
    /// standard deviation `sqrt(2 / in)` (He, for ReLU) or `sqrt(2 / (in +
    /// out))` (Xavier, for GELU), biases 0, gamma 1, beta 0.
    ///
    /// The normals come from Box-Muller on [`RandomStream::new(seed,
    /// 0)`](tessera_core::rng::RandomStream::new)`.substream(l)` for layer `l`: element `2p`
    /// and `2p + 1` take `r cos(t)` and `r sin(t)` with `r = sqrt(-2 ln
    /// u1)`, `t = 2 pi u2`, `u1 = (1 + (w(2p) >> 8)) / 2^24` (in `(0, 1]`),
    /// `u2 = (w(2p + 1) >> 8) / 2^24`, `w` the stream's words, in f64 with
    /// `libm`, rounded once to f32.
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, NetLayer};
    ///
    /// let mlp = MlpConfig {
    ///     inputs: 64,
    ///     hidden: vec![32],
    ///     classes: 10,
    ///     activation: Activation::Relu,
    ///     batch_norm: true,
    /// };
    /// let net = mlp.network();
    /// assert_eq!(net.input, [64, 1, 1]);
    /// assert_eq!(net.layers, [NetLayer::Dense { width: 32, batch_norm: true }]);
    /// let names: Vec<String> = net.params()?.into_iter().map(|p| p.name).collect();
    /// let bn = ["layer0.bn.gamma", "layer0.bn.beta"];
    /// assert_eq!(names[..2], ["layer0.weight", "layer0.bias"]);
    /// assert_eq!(names[2..4], bn);
    /// assert_eq!(names[4..], ["layer1.weight", "layer1.bias"]);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn network(&self) -> NetworkConfig {
        let dense = |&width| NetLayer::Dense {
            width,
            batch_norm: self.batch_norm,
        };
        NetworkConfig {
            input: [self.inputs, 1, 1],
            layers: self.hidden.iter().map(dense).collect(),
            classes: self.classes,
            activation: self.activation,
            bn_group: BnGroup::Replica,
        }
    }

    /// Checks that every width is at least 1 and every weight matrix has
    /// at most [`MAX_TENSOR_BYTES`](super::config::MAX_TENSOR_BYTES).
    ///
    /// # Errors
    /// [`ModelError::ZeroWidth`] naming the first zero width;
    /// [`ModelError::TooLarge`] naming the first weight matrix too large.
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelError};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![8, 0], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// assert!(matches!(mlp.validate(), Err(ModelError::ZeroWidth { what }) if what == "hidden[1]"));
    /// assert!(MlpConfig { hidden: vec![8], ..mlp }.validate().is_ok());
    /// ```
    pub fn validate(&self) -> Result<(), ModelError> {
        let zero = |what: String| Err(ModelError::ZeroWidth { what });
        if self.inputs == 0 {
            return zero("inputs".into());
        }
        if let Some(i) = self.hidden.iter().position(|&h| h == 0) {
            return zero(format!("hidden[{i}]"));
        }
        if self.classes == 0 {
            return zero("classes".into());
        }
        for (l, (fan_in, width)) in self.layers().into_iter().enumerate() {
            fits(fan_in, width).ok_or_else(|| ModelError::TooLarge {
                tensor: format!("layer{l}.weight"),
                shape: [fan_in, width],
            })?;
        }
        Ok(())
    }
}

/// A model the trainer can build, as the user describes it: an MLP or a
/// network. Both are built as the one network ([`ModelConfig::network`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ModelConfig {
    /// A multi-layer perceptron.
    Mlp(MlpConfig),
    /// A convolutional network.
    Network(NetworkConfig),
}

impl ModelConfig {
    /// Features per sample.
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelConfig, NetworkConfig};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// assert_eq!(ModelConfig::Mlp(mlp).inputs(), 4);
    /// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4], &[1]);
    /// assert_eq!(ModelConfig::Network(net).inputs(), 64);
    /// ```
    #[must_use]
    pub fn inputs(&self) -> usize {
        match self {
            Self::Mlp(c) => c.inputs,
            Self::Network(c) => c.inputs(),
        }
    }

    /// The network that is built.
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelConfig};
    ///
    /// let mlp = MlpConfig {
    ///     inputs: 4,
    ///     hidden: vec![],
    ///     classes: 2,
    ///     activation: Activation::Gelu,
    ///     batch_norm: false,
    /// };
    /// let model = ModelConfig::Mlp(mlp.clone());
    /// assert_eq!(model.network(), mlp.network());
    /// assert_eq!(model.params()?.len(), 2);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    #[must_use]
    pub fn network(&self) -> NetworkConfig {
        match self {
            Self::Mlp(c) => c.network(),
            Self::Network(c) => c.clone(),
        }
    }

    /// The parameters, in order ([`NetworkConfig::params`]).
    ///
    /// # Errors
    /// As [`ModelConfig::validate`].
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelConfig};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let params = ModelConfig::Mlp(mlp).params()?;
    /// let shapes: Vec<Vec<usize>> = params.into_iter().map(|p| p.shape).collect();
    /// assert_eq!(shapes, [vec![4, 3], vec![3], vec![3, 2], vec![2]]);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn params(&self) -> Result<Vec<ParamSpec>, ModelError> {
        self.validate()?;
        self.network().params()
    }

    /// The initial parameters of `seed` ([`NetworkConfig::init`]).
    ///
    /// # Panics
    /// If the model does not validate (check it first).
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelConfig};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let model = ModelConfig::Mlp(mlp);
    /// let w = model.init(7);
    /// assert_eq!(w.iter().map(Vec::len).collect::<Vec<_>>(), [12, 3, 6, 2]);
    /// assert!(w[1].iter().all(|&b| b == 0.0)); // biases start at 0
    /// assert_eq!(w, model.init(7)); // the seed decides
    /// ```
    #[must_use]
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        self.network().init(seed).expect("a validated model")
    }

    /// Checks the sizes.
    ///
    /// # Errors
    /// As [`MlpConfig::validate`] and [`NetworkConfig::validate`].
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelConfig, ModelError};
    ///
    /// let mlp = MlpConfig { inputs: 0, hidden: vec![], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// assert!(matches!(ModelConfig::Mlp(mlp).validate(), Err(ModelError::ZeroWidth { .. })));
    /// ```
    pub fn validate(&self) -> Result<(), ModelError> {
        match self {
            Self::Mlp(c) => c.validate(),
            Self::Network(c) => super::bounds::check(c).and_then(|_| c.validate()),
        }
    }

    /// The MLP, if it is one.
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig, ModelConfig, NetworkConfig};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// assert_eq!(ModelConfig::Mlp(mlp.clone()).mlp(), Some(&mlp));
    /// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4], &[1]);
    /// assert_eq!(ModelConfig::Network(net).mlp(), None);
    /// ```
    #[must_use]
    pub const fn mlp(&self) -> Option<&MlpConfig> {
        match self {
            Self::Mlp(c) => Some(c),
            Self::Network(_) => None,
        }
    }
}
