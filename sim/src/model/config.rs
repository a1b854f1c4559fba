//! The network's description: widths, activation, batch norm; its
//! parameters and their deterministic initialisation.

use tessera_core::rng::RandomStream;

use super::ModelError;

/// The hidden layers' activation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `max(x, 0)` (derivative 0 at 0).
    Relu,
    /// The tanh approximation `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
    /// x^3)))`, with the exact derivative of that formula.
    Gelu,
}

/// What a parameter is, for the optimizer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ParamKind {
    /// A layer's weight matrix.
    Weight,
    /// A layer's bias.
    Bias,
    /// Batch norm's gamma or beta (excluded from weight decay).
    Norm,
}

/// One parameter tensor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ParamSpec {
    /// Its name, as `layer0.weight`.
    pub name: String,
    /// Its shape (row-major).
    pub shape: Vec<usize>,
    /// What it is.
    pub kind: ParamKind,
}

impl ParamSpec {
    /// Its number of elements.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether it has no elements.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

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

    /// The parameters, in order: per layer `l`, `layer{l}.weight` `[in,
    /// out]`, `layer{l}.bias` `[out]`, then for hidden layers with batch
    /// norm `layer{l}.bn.gamma` and `layer{l}.bn.beta` `[out]`.
    #[must_use]
    pub fn params(&self) -> Vec<ParamSpec> {
        let layers = self.layers();
        let mut out = Vec::new();
        for (l, &(i, o)) in layers.iter().enumerate() {
            let spec = |suffix: &str, shape: Vec<usize>, kind| ParamSpec {
                name: format!("layer{l}.{suffix}"),
                shape,
                kind,
            };
            out.push(spec("weight", vec![i, o], ParamKind::Weight));
            out.push(spec("bias", vec![o], ParamKind::Bias));
            if self.batch_norm && l + 1 < layers.len() {
                out.push(spec("bn.gamma", vec![o], ParamKind::Norm));
                out.push(spec("bn.beta", vec![o], ParamKind::Norm));
            }
        }
        out
    }

    /// Initial parameters: weights normal with standard deviation
    /// `sqrt(2 / in)` (He, for ReLU) or `sqrt(2 / (in + out))` (Xavier, for
    /// GELU), biases 0, gamma 1, beta 0.
    ///
    /// The normals come from Box-Muller on [`RandomStream::new(seed,
    /// 0)`](RandomStream::new)`.substream(l)` for layer `l`: element `2p`
    /// and `2p + 1` take `r cos(t)` and `r sin(t)` with `r = sqrt(-2 ln
    /// u1)`, `t = 2 pi u2`, `u1 = (1 + (w(2p) >> 8)) / 2^24` (in `(0, 1]`),
    /// `u2 = (w(2p + 1) >> 8) / 2^24`, `w` the stream's words, in f64 with
    /// `libm`, rounded once to f32.
    #[must_use]
    pub fn init(&self, seed: u64) -> Vec<Vec<f32>> {
        let base = RandomStream::new(seed, 0);
        let layers = self.layers();
        let mut out = Vec::new();
        for (l, &(i, o)) in layers.iter().enumerate() {
            let std = match self.activation {
                Activation::Relu => libm::sqrt(2.0 / i as f64),
                Activation::Gelu => libm::sqrt(2.0 / (i + o) as f64),
            };
            out.push(normals(&base.substream(l as u64), i * o, std));
            out.push(vec![0.0; o]);
            if self.batch_norm && l + 1 < layers.len() {
                out.push(vec![1.0; o]);
                out.push(vec![0.0; o]);
            }
        }
        out
    }

    /// Checks that every width is at least 1 and every weight matrix has
    /// at most [`MAX_TENSOR_BYTES`](super::MAX_TENSOR_BYTES).
    ///
    /// # Errors
    /// [`ModelError::ZeroWidth`] naming the first zero width;
    /// [`ModelError::TooLarge`] naming the first weight matrix too large.
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
            super::estimate::fits(fan_in, width).ok_or_else(|| ModelError::TooLarge {
                tensor: format!("layer{l}.weight"),
                shape: [fan_in, width],
            })?;
        }
        Ok(())
    }
}

/// `count` normals of standard deviation `std` from `stream` (Box-Muller,
/// as [`MlpConfig::init`] documents).
pub(super) fn normals(stream: &RandomStream, count: usize, std: f64) -> Vec<f32> {
    let unit = 1.0 / f64::from(1u32 << 24);
    (0..count as u64)
        .map(|e| {
            let p = e & !1;
            let u1 = f64::from((stream.bits(p) >> 8) + 1) * unit;
            let u2 = f64::from(stream.bits(p + 1) >> 8) * unit;
            let r = libm::sqrt(-2.0 * libm::log(u1));
            let t = 2.0 * core::f64::consts::PI * u2;
            let z = if e & 1 == 0 {
                libm::cos(t)
            } else {
                libm::sin(t)
            };
            (std * r * z) as f32
        })
        .collect()
}
