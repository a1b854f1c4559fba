//! A convolutional network's description: a sequence of layers over
//! feature maps (convolutions, batch norm with its activation, pooling,
//! residual blocks) and a dense head; its parameters and their
//! deterministic initialisation. [`NetworkConfig::resnet_mini`] is the
//! pre-activation residual network for the 8x8 digits.

use tessera_core::rng::RandomStream;

use super::ModelError;
use super::config::{Activation, ParamKind, ParamSpec, normals};
use super::layers::conv2d::{Conv2d, ConvShape};
use super::layers::pool::Pool2d;

/// One layer of a [`NetworkConfig`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NetLayer {
    /// A convolution without bias (PyTorch's `Conv2d(bias=False)`): its
    /// output channels, square kernel, stride and zero padding.
    Conv {
        /// Output channels.
        channels: usize,
        /// Kernel height and width.
        kernel: usize,
        /// Stride.
        stride: usize,
        /// Zero padding on every side.
        padding: usize,
    },
    /// Batch norm over the feature maps, then the network's activation.
    BnAct,
    /// Max or average pooling.
    Pool(Pool2d),
    /// Average over each whole feature map: `[n, c]`.
    GlobalAvgPool,
    /// `x + body(x)`: the body must keep the shape.
    Residual(Vec<NetLayer>),
}

/// How far batch-norm statistics reach (Graphcore's replica groups for
/// distributed batch norm).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum BnGroup {
    /// Each replica's micro-batch alone: the weights do not depend on the
    /// split of a global batch over instances, replicas and accumulation.
    #[default]
    Replica,
    /// Every replica's micro-batch of the same accumulation step: the
    /// statistics of `replicas x micro_batch` samples.
    All,
}

/// A network over images: `input` (channels, height, width) through
/// `layers`, then a dense head onto `classes` logits, softmax
/// cross-entropy. The head's input must be `[n, c]` (one pixel per
/// sample: end the layers with [`NetLayer::GlobalAvgPool`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NetworkConfig {
    /// Channels, height and width of a sample (its features in CHW order).
    pub input: [usize; 3],
    /// The layers before the head.
    pub layers: Vec<NetLayer>,
    /// Classes (the head's width).
    pub classes: usize,
    /// The activation after each batch norm.
    pub activation: Activation,
    /// Which replicas' samples batch norm's statistics cover.
    pub bn_group: BnGroup,
}

/// A layer of the flattened network, numbered as its tensors are named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Op {
    Conv(ConvShape),
    BnAct {
        channels: usize,
    },
    Pool(Pool2d, ConvShape),
    /// A residual block starts: its input is kept.
    Fork,
    /// A residual block ends: the kept input added.
    Join,
    /// The dense head `[fan_in, classes]`.
    Head {
        fan_in: usize,
        classes: usize,
    },
}

impl NetworkConfig {
    /// The pre-activation residual network for `input` images (He et
    /// al., *Identity Mappings in Deep Residual Networks*): a 3x3 stem
    /// convolution onto `widths[0]` channels; per stage `s`, `blocks[s]`
    /// blocks `x + conv(bn_relu(conv(bn_relu(x))))` of 3x3 convolutions
    /// at `widths[s]` channels, a stage after the first entered by
    /// `bn_relu` and a 3x3 stride-2 convolution onto its width; then
    /// `bn_relu`, global average pooling and the dense head.
    #[must_use]
    pub fn resnet_mini(
        input: [usize; 3],
        classes: usize,
        widths: &[usize],
        blocks: &[usize],
    ) -> Self {
        let conv = |channels, stride| NetLayer::Conv {
            channels,
            kernel: 3,
            stride,
            padding: 1,
        };
        let mut layers = Vec::new();
        for (s, (&w, &b)) in widths.iter().zip(blocks).enumerate() {
            if s == 0 {
                layers.push(conv(w, 1));
            } else {
                layers.extend([NetLayer::BnAct, conv(w, 2)]);
            }
            for _ in 0..b {
                let body = vec![NetLayer::BnAct, conv(w, 1), NetLayer::BnAct, conv(w, 1)];
                layers.push(NetLayer::Residual(body));
            }
        }
        layers.extend([NetLayer::BnAct, NetLayer::GlobalAvgPool]);
        Self {
            input,
            layers,
            classes,
            activation: Activation::Relu,
            bn_group: BnGroup::Replica,
        }
    }

    /// Features per sample.
    #[must_use]
    pub fn inputs(&self) -> usize {
        self.input.iter().product()
    }

    /// The flattened layers for micro-batches of `n` samples, checked.
    pub(super) fn ops(&self, n: usize) -> Result<Vec<Op>, ModelError> {
        let [c, h, w] = self.input;
        if self.inputs() == 0 || self.classes == 0 {
            return Err(ModelError::ZeroWidth {
                what: if self.classes == 0 {
                    "classes"
                } else {
                    "input"
                }
                .into(),
            });
        }
        let mut ops = Vec::new();
        let (c, hw) = flatten(&self.layers, n.max(1), (c, (h, w)), &mut ops)?;
        if hw != (1, 1) {
            return Err(invalid(
                ops.len(),
                format!(
                    "the head needs one pixel per sample, got {}x{}: end with a global average pool",
                    hw.0, hw.1
                ),
            ));
        }
        ops.push(Op::Head {
            fan_in: c,
            classes: self.classes,
        });
        Ok(ops)
    }

    /// The top-level blocks, each a range of the flattened layers (numbered
    /// as [`NetworkConfig::params`] numbers them): one per entry of
    /// `layers` (a residual block whole, its start and end included), then
    /// the head. Pipeline stages are cut between blocks.
    ///
    /// # Errors
    /// As [`NetworkConfig::validate`].
    pub fn blocks(&self) -> Result<Vec<core::ops::Range<usize>>, ModelError> {
        let ops = self.ops(1)?;
        let [c, h, w] = self.input;
        let (mut shape, mut scratch, mut out) = ((c, (h, w)), Vec::new(), Vec::new());
        for layer in &self.layers {
            let start = scratch.len();
            shape = flatten(core::slice::from_ref(layer), 1, shape, &mut scratch)?;
            out.push(start..scratch.len());
        }
        out.push(scratch.len()..ops.len());
        Ok(out)
    }

    /// The parameters, in order: per layer `l` (numbered as
    /// `NetworkConfig::ops` flattens them, a residual block's start and
    /// end counting as layers) `layer{l}.weight` of a convolution
    /// `[kh, kw, c_in, c_out]` (the product's `[kh kw c_in, c_out]`),
    /// `layer{l}.bn.gamma` and `layer{l}.bn.beta` `[c]` of batch norm, and
    /// the head's `layer{l}.weight` `[c, classes]` and `layer{l}.bias`.
    ///
    /// # Errors
    /// As [`NetworkConfig::validate`].
    pub fn params(&self) -> Result<Vec<ParamSpec>, ModelError> {
        let mut out = Vec::new();
        for (l, op) in self.ops(1)?.iter().enumerate() {
            let spec = |suffix: &str, shape: Vec<usize>, kind| ParamSpec {
                name: format!("layer{l}.{suffix}"),
                shape,
                kind,
            };
            match op {
                Op::Conv(s) => {
                    let (kh, kw) = s.conv.kernel;
                    let shape = vec![kh, kw, s.conv.in_channels, s.conv.out_channels];
                    out.push(spec("weight", shape, ParamKind::Weight));
                }
                Op::BnAct { channels } => {
                    out.push(spec("bn.gamma", vec![*channels], ParamKind::Norm));
                    out.push(spec("bn.beta", vec![*channels], ParamKind::Norm));
                }
                Op::Head { fan_in, .. } => {
                    out.push(spec(
                        "weight",
                        vec![*fan_in, self.classes],
                        ParamKind::Weight,
                    ));
                    out.push(spec("bias", vec![self.classes], ParamKind::Bias));
                }
                Op::Pool(..) | Op::Fork | Op::Join => {}
            }
        }
        Ok(out)
    }

    /// Initial parameters in the order of [`NetworkConfig::params`]:
    /// weights normal with standard deviation `sqrt(2 / fan_in)` (He;
    /// `fan_in = kh kw c_in` for a convolution) from
    /// `RandomStream::new(seed, 0).substream(l)` as
    /// [`MlpConfig::init`](super::MlpConfig::init) draws them; gamma 1,
    /// beta and the head's bias 0.
    ///
    /// # Errors
    /// As [`NetworkConfig::validate`].
    pub fn init(&self, seed: u64) -> Result<Vec<Vec<f32>>, ModelError> {
        let base = RandomStream::new(seed, 0);
        let mut out = Vec::new();
        for (l, op) in self.ops(1)?.iter().enumerate() {
            let stream = base.substream(l as u64);
            match op {
                Op::Conv(s) => {
                    let fan_in = s.patch();
                    let std = libm::sqrt(2.0 / fan_in as f64);
                    out.push(normals(&stream, fan_in * s.conv.out_channels, std));
                }
                Op::BnAct { channels } => {
                    out.push(vec![1.0; *channels]);
                    out.push(vec![0.0; *channels]);
                }
                Op::Head { fan_in, .. } => {
                    let std = libm::sqrt(2.0 / *fan_in as f64);
                    out.push(normals(&stream, fan_in * self.classes, std));
                    out.push(vec![0.0; self.classes]);
                }
                Op::Pool(..) | Op::Fork | Op::Join => {}
            }
        }
        Ok(out)
    }

    /// Checks that every size is at least 1, every kernel fits, residual
    /// bodies keep their shape and the head gets one pixel per sample.
    ///
    /// # Errors
    /// [`ModelError::ZeroWidth`], [`ModelError::InvalidNetwork`] naming
    /// the layer.
    pub fn validate(&self) -> Result<(), ModelError> {
        self.ops(1).map(drop)
    }
}

/// [`ModelError::InvalidNetwork`] at layer `layer`.
fn invalid(layer: usize, reason: String) -> ModelError {
    ModelError::InvalidNetwork { layer, reason }
}

/// Appends `layers` on `n` samples of `(channels, (height, width))` to
/// `ops`: the shape after them.
fn flatten(
    layers: &[NetLayer],
    n: usize,
    (mut c, mut hw): (usize, (usize, usize)),
    ops: &mut Vec<Op>,
) -> Result<(usize, (usize, usize)), ModelError> {
    for layer in layers {
        let l = ops.len();
        match layer {
            NetLayer::Conv {
                channels,
                kernel,
                stride,
                padding,
            } => {
                let conv = Conv2d {
                    in_channels: c,
                    out_channels: *channels,
                    kernel: (*kernel, *kernel),
                    stride: *stride,
                    padding: *padding,
                };
                let shape = conv.on(n, hw).ok_or_else(|| {
                    invalid(
                        l,
                        format!("{conv:?} does not fit a {}x{} input", hw.0, hw.1),
                    )
                })?;
                (c, hw) = (*channels, shape.output);
                ops.push(Op::Conv(shape));
            }
            NetLayer::BnAct => ops.push(Op::BnAct { channels: c }),
            NetLayer::Pool(p) => {
                let shape = p.on(n, c, hw).ok_or_else(|| {
                    invalid(l, format!("{p:?} does not fit a {}x{} input", hw.0, hw.1))
                })?;
                hw = shape.output;
                ops.push(Op::Pool(*p, shape));
            }
            NetLayer::GlobalAvgPool => {
                let p = Pool2d::global(hw);
                let shape = p.on(n, c, hw).expect("the whole map fits");
                hw = (1, 1);
                ops.push(Op::Pool(p, shape));
            }
            NetLayer::Residual(body) => {
                ops.push(Op::Fork);
                let out = flatten(body, n, (c, hw), ops)?;
                if out != (c, hw) {
                    return Err(invalid(
                        l,
                        format!(
                            "a residual body turns {c}x{hw:?} into {}x{:?}",
                            out.0, out.1
                        ),
                    ));
                }
                ops.push(Op::Join);
            }
        }
        if c == 0 {
            return Err(ModelError::ZeroWidth {
                what: format!("layer{l} channels"),
            });
        }
    }
    Ok((c, hw))
}
