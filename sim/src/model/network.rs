//! The model's description: a sequence of layers (dense blocks,
//! convolutions, batch norm with its activation, pooling, residual blocks,
//! parallel branches) and a dense head; its parameters and their
//! deterministic initialisation, walked once ([`NetworkConfig::ops`]: the
//! flattened, shape-inferred layers). An MLP is a network of dense blocks
//! ([`MlpConfig::network`](super::MlpConfig::network));
//! [`NetworkConfig::resnet_mini`] is the pre-activation residual network
//! for the 8x8 digits.

use tessera_core::rng::RandomStream;

use super::config::{Activation, ParamKind, ParamSpec, fits, normals};
use super::error::ModelError;
use super::shapes::{Conv2d, ConvShape, Pool2d};

/// One layer of a [`NetworkConfig`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum NetLayer {
    /// A dense block on `[n, c]` (one pixel per sample): the product onto
    /// `width` columns, then the bias, batch norm if `batch_norm`, and the
    /// network's activation, as one op (one layer index: an MLP's hidden
    /// layer).
    Dense {
        /// Output columns.
        width: usize,
        /// Batch norm after the bias, before the activation.
        batch_norm: bool,
    },
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
    /// Parallel branches on the same input, their outputs concatenated
    /// by channels in branch order (TF IPU's concurrent pipeline stages):
    /// at least two, every branch ending at the same height and width.
    Branches(Vec<Vec<NetLayer>>),
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
pub(crate) enum Op {
    /// A dense block `[fan_in, width]`, with batch norm if `bn`.
    Dense {
        fan_in: usize,
        width: usize,
        bn: bool,
    },
    Conv(ConvShape),
    BnAct {
        channels: usize,
    },
    Pool(Pool2d, ConvShape),
    /// A residual block starts: its input is kept.
    Fork,
    /// A residual block ends: the kept input added.
    Join,
    /// Parallel branches start: the input is kept for each.
    Split,
    /// A branch ends and the next starts from the kept input.
    NextBranch,
    /// The last branch ends: the branches' outputs concatenated by
    /// channels, `channels[i]` from branch `i`.
    Concat {
        channels: Vec<usize>,
    },
    /// The dense head `[fan_in, classes]`.
    Head {
        fan_in: usize,
        classes: usize,
    },
}

/// One parameter of the flattened layer `layer`: `layer{layer}.{suffix}`.
struct Param {
    layer: usize,
    suffix: &'static str,
    shape: Vec<usize>,
    kind: ParamKind,
    init: Init,
}

/// How a parameter starts.
enum Init {
    /// Normal with this standard deviation, from the layer's substream.
    Normal(f64),
    /// Every element this value.
    Fill(f32),
}

impl NetworkConfig {
    /// The pre-activation residual network for `input` images (He et
    /// al., *Identity Mappings in Deep Residual Networks*): a 3x3 stem
    /// convolution onto `widths[0]` channels; per stage `s`, `blocks[s]`
    /// blocks `x + conv(bn_relu(conv(bn_relu(x))))` of 3x3 convolutions
    /// at `widths[s]` channels, a stage after the first entered by
    /// `bn_relu` and a 3x3 stride-2 convolution onto its width; then
    /// `bn_relu`, global average pooling and the dense head.
    ///
    /// ```
    /// use tessera_sim::model::NetworkConfig;
    ///
    /// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4, 8], &[1, 1]);
    /// assert_eq!((net.input, net.classes, net.inputs()), ([1, 8, 8], 10, 64));
    /// assert!(net.validate().is_ok());
    /// ```
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

    /// The network with a block of two parallel branches inserted before
    /// its last two layers (resnet-mini's final `bn_relu` and global
    /// pool): `bn_relu` then a 3x3 convolution (padding 1), and `bn_relu`
    /// then a 1x1 convolution, each onto `channels` channels, their
    /// outputs concatenated (`2 channels` for the layers after).
    ///
    /// ```
    /// use tessera_sim::model::NetworkConfig;
    ///
    /// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4], &[1]);
    /// let branched = net.clone().with_branches(2);
    /// assert_eq!(branched.layers.len(), net.layers.len() + 1);
    /// assert!(branched.validate().is_ok());
    /// ```
    #[must_use]
    pub fn with_branches(mut self, channels: usize) -> Self {
        let conv = |kernel: usize| {
            vec![
                NetLayer::BnAct,
                NetLayer::Conv {
                    channels,
                    kernel,
                    stride: 1,
                    padding: kernel / 2,
                },
            ]
        };
        let at = self.layers.len().saturating_sub(2);
        self.layers
            .insert(at, NetLayer::Branches(vec![conv(3), conv(1)]));
        self
    }

    /// Features per sample.
    ///
    /// ```
    /// use tessera_sim::model::NetworkConfig;
    ///
    /// assert_eq!(NetworkConfig::resnet_mini([3, 4, 4], 2, &[4], &[1]).inputs(), 48);
    /// ```
    #[must_use]
    pub fn inputs(&self) -> usize {
        self.input.iter().product()
    }

    /// The flattened layers for micro-batches of `n` samples, checked.
    pub(crate) fn ops(&self, n: usize) -> Result<Vec<Op>, ModelError> {
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
        let n = n.max(1);
        too_large("x", [n, self.inputs()])?;
        let mut ops = Vec::new();
        let (c, hw) = flatten(&self.layers, n, (c, (h, w)), &mut ops)?;
        if hw != (1, 1) {
            return Err(invalid(
                ops.len(),
                format!(
                    "the head needs one pixel per sample, got {}x{}: end with a global average pool",
                    hw.0, hw.1
                ),
            ));
        }
        let l = ops.len();
        too_large(&format!("layer{l}.weight"), [c, self.classes])?;
        too_large(&format!("layer{l}.y"), [n, self.classes])?;
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
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig};
    ///
    /// let mlp = MlpConfig { inputs: 4, hidden: vec![8, 4], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let blocks = mlp.network().blocks()?;
    /// assert_eq!(blocks.len(), 3); // two hidden layers and the head
    /// assert!(blocks.windows(2).all(|w| w[0].end == w[1].start)); // contiguous
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
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
    /// end counting as layers) `layer{l}.weight` `[fan_in, width]` and
    /// `layer{l}.bias` `[width]` of a dense block (then `layer{l}.bn.gamma`
    /// and `layer{l}.bn.beta` `[width]` with batch norm), `layer{l}.weight`
    /// of a convolution `[kh, kw, c_in, c_out]` (the product's `[kh kw
    /// c_in, c_out]`), `layer{l}.bn.gamma` and `layer{l}.bn.beta` `[c]` of
    /// batch norm, and the head's `layer{l}.weight` `[c, classes]` and
    /// `layer{l}.bias`.
    ///
    /// # Errors
    /// As [`NetworkConfig::validate`].
    ///
    /// ```
    /// use tessera_sim::model::NetworkConfig;
    ///
    /// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4], &[1]);
    /// let params = net.params()?;
    /// assert_eq!(params[0].shape, [3, 3, 1, 4]); // the stem: 3x3, 1 channel onto 4
    /// assert_eq!(params.last().unwrap().shape, [10]); // the head's bias
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn params(&self) -> Result<Vec<ParamSpec>, ModelError> {
        Ok(self
            .walk_params()?
            .into_iter()
            .map(|p| ParamSpec {
                name: format!("layer{}.{}", p.layer, p.suffix),
                shape: p.shape,
                kind: p.kind,
            })
            .collect())
    }

    /// Initial parameters in the order of [`NetworkConfig::params`]:
    /// weights normal from `RandomStream::new(seed, 0).substream(l)` for
    /// layer `l` (Box-Muller, as [`MlpConfig::network`](super::MlpConfig::network)
    /// documents) with standard deviation `sqrt(2 / fan_in)` (He; `fan_in
    /// = kh kw c_in` for a convolution), or for dense blocks under GELU
    /// `sqrt(2 / (fan_in + width))` (Xavier), the head's too when every
    /// layer before it is a dense block (an MLP); biases and beta 0, gamma
    /// 1.
    ///
    /// # Errors
    /// As [`NetworkConfig::validate`].
    ///
    /// ```
    /// use tessera_sim::model::NetworkConfig;
    ///
    /// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4], &[1]);
    /// let (params, init) = (net.params()?, net.init(1)?);
    /// assert!(params.iter().zip(&init).all(|(p, w)| p.shape.iter().product::<usize>() == w.len()));
    /// assert_eq!(init, net.init(1)?);
    /// # Ok::<(), tessera_sim::model::ModelError>(())
    /// ```
    pub fn init(&self, seed: u64) -> Result<Vec<Vec<f32>>, ModelError> {
        let base = RandomStream::new(seed, 0);
        Ok(self
            .walk_params()?
            .into_iter()
            .map(|p| match p.init {
                Init::Normal(std) => {
                    let count = p.shape.iter().product();
                    normals(&base.substream(p.layer as u64), count, std)
                }
                Init::Fill(v) => vec![v; p.shape.iter().product()],
            })
            .collect())
    }

    /// Every parameter in order, with how it starts: the one list
    /// [`NetworkConfig::params`] and [`NetworkConfig::init`] read.
    fn walk_params(&self) -> Result<Vec<Param>, ModelError> {
        let mlp = self
            .layers
            .iter()
            .all(|l| matches!(l, NetLayer::Dense { .. }));
        // He for ReLU; Xavier for GELU's dense blocks (the MLP's rule).
        let dense_std = |fan_in: usize, width: usize| match self.activation {
            Activation::Relu => libm::sqrt(2.0 / fan_in as f64),
            Activation::Gelu => libm::sqrt(2.0 / (fan_in + width) as f64),
        };
        let mut out = Vec::new();
        for (layer, op) in self.ops(1)?.iter().enumerate() {
            let mut push = |suffix, shape, kind, init| {
                out.push(Param {
                    layer,
                    suffix,
                    shape,
                    kind,
                    init,
                });
            };
            let norms = |c: usize| {
                [("bn.gamma", 1.0), ("bn.beta", 0.0)].map(|(s, v)| (s, vec![c], Init::Fill(v)))
            };
            match *op {
                Op::Dense { fan_in, width, bn } => {
                    let std = Init::Normal(dense_std(fan_in, width));
                    push("weight", vec![fan_in, width], ParamKind::Weight, std);
                    push("bias", vec![width], ParamKind::Bias, Init::Fill(0.0));
                    for (suffix, shape, init) in norms(width).into_iter().filter(|_| bn) {
                        push(suffix, shape, ParamKind::Norm, init);
                    }
                }
                Op::Conv(s) => {
                    let (kh, kw) = s.conv.kernel;
                    let shape = vec![kh, kw, s.conv.in_channels, s.conv.out_channels];
                    let std = Init::Normal(libm::sqrt(2.0 / s.patch() as f64));
                    push("weight", shape, ParamKind::Weight, std);
                }
                Op::BnAct { channels } => {
                    for (suffix, shape, init) in norms(channels) {
                        push(suffix, shape, ParamKind::Norm, init);
                    }
                }
                Op::Head { fan_in, classes } => {
                    let std = if mlp {
                        dense_std(fan_in, classes)
                    } else {
                        libm::sqrt(2.0 / fan_in as f64)
                    };
                    let shape = vec![fan_in, classes];
                    push("weight", shape, ParamKind::Weight, Init::Normal(std));
                    push("bias", vec![classes], ParamKind::Bias, Init::Fill(0.0));
                }
                Op::Pool(..)
                | Op::Fork
                | Op::Join
                | Op::Split
                | Op::NextBranch
                | Op::Concat { .. } => {}
            }
        }
        Ok(out)
    }

    /// Checks that every size is at least 1, every kernel fits, residual
    /// bodies keep their shape, parallel branches are at least two and
    /// end at one height and width, and the head gets one pixel per
    /// sample.
    ///
    /// # Errors
    /// [`ModelError::ZeroWidth`], [`ModelError::InvalidNetwork`] naming
    /// the layer.
    ///
    /// ```
    /// use tessera_sim::model::{ModelError, NetworkConfig};
    ///
    /// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4], &[1]);
    /// assert!(net.validate().is_ok());
    /// let none = NetworkConfig { input: [1, 0, 8], ..net };
    /// assert!(matches!(none.validate(), Err(ModelError::ZeroWidth { .. } | ModelError::InvalidNetwork { .. })));
    /// ```
    pub fn validate(&self) -> Result<(), ModelError> {
        self.ops(1).map(drop)
    }
}

/// For each of a block's flattened layers `ops`, the top-level branch it
/// belongs to: 0 throughout but in a block of parallel branches, whose
/// split is branch 0's, each step starts the next branch and the concat
/// is the last branch's.
pub(super) fn branch_of_ops(ops: &[Op]) -> Vec<usize> {
    let (mut depth, mut branch) = (0usize, 0usize);
    ops.iter()
        .map(|op| {
            match op {
                Op::Split => depth += 1,
                Op::NextBranch if depth == 1 => branch += 1,
                Op::Concat { .. } => depth -= 1,
                _ => {}
            }
            branch
        })
        .collect()
}

/// [`ModelError::TooLarge`] if a `[rows, cols]` f32 tensor `name` would
/// have more than [`MAX_TENSOR_BYTES`](super::MAX_TENSOR_BYTES).
fn too_large(name: &str, [rows, cols]: [usize; 2]) -> Result<(), ModelError> {
    match fits(rows, cols) {
        Some(_) => Ok(()),
        None => Err(ModelError::TooLarge {
            tensor: name.to_owned(),
            shape: [rows, cols],
        }),
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
            NetLayer::Dense { width, batch_norm } => {
                if hw != (1, 1) {
                    return Err(invalid(
                        l,
                        format!(
                            "a dense block needs one pixel per sample, got {}x{}: end with a \
                             global average pool",
                            hw.0, hw.1
                        ),
                    ));
                }
                too_large(&format!("layer{l}.weight"), [c, *width])?;
                too_large(&format!("layer{l}.y"), [n, *width])?;
                ops.push(Op::Dense {
                    fan_in: c,
                    width: *width,
                    bn: *batch_norm,
                });
                c = *width;
            }
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
            NetLayer::Branches(branches) => (c, hw) = flatten_branches(branches, n, (c, hw), ops)?,
        }
        if c == 0 {
            return Err(ModelError::ZeroWidth {
                what: format!("layer{l} channels"),
            });
        }
    }
    Ok((c, hw))
}

/// Appends parallel `branches` on `n` samples of `(c, hw)` to `ops` (a
/// split, each branch, a step to the next between them, the concat): the
/// concatenated shape.
fn flatten_branches(
    branches: &[Vec<NetLayer>],
    n: usize,
    (c, hw): (usize, (usize, usize)),
    ops: &mut Vec<Op>,
) -> Result<(usize, (usize, usize)), ModelError> {
    let l = ops.len();
    if branches.len() < 2 {
        return Err(invalid(
            l,
            format!(
                "parallel branches need at least two, got {}",
                branches.len()
            ),
        ));
    }
    ops.push(Op::Split);
    let mut channels = Vec::new();
    for (i, branch) in branches.iter().enumerate() {
        if i > 0 {
            ops.push(Op::NextBranch);
        }
        let (ci, hwi) = flatten(branch, n, (c, hw), ops)?;
        channels.push((ci, hwi));
    }
    let first = channels[0].1;
    if let Some(i) = channels.iter().position(|&(_, hwi)| hwi != first) {
        return Err(invalid(
            l,
            format!(
                "branch {i} ends at {}x{}, branch 0 at {}x{}: branches are concatenated by \
                 channels and must end at one height and width",
                channels[i].1.0, channels[i].1.1, first.0, first.1
            ),
        ));
    }
    let channels: Vec<usize> = channels.into_iter().map(|(ci, _)| ci).collect();
    let total = channels.iter().sum();
    ops.push(Op::Concat { channels });
    Ok((total, first))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dense_block_takes_one_pixel_per_sample_and_keeps_the_mlp_names() {
        let conv = NetLayer::Conv {
            channels: 4,
            kernel: 3,
            stride: 1,
            padding: 1,
        };
        let dense = NetLayer::Dense {
            width: 6,
            batch_norm: true,
        };
        let mut net = NetworkConfig {
            input: [1, 4, 4],
            layers: vec![conv.clone(), dense.clone(), NetLayer::GlobalAvgPool],
            classes: 3,
            activation: Activation::Relu,
            bn_group: BnGroup::Replica,
        };
        let err = net.validate().unwrap_err().to_string();
        assert!(err.contains("one pixel per sample"), "{err}");
        net.layers = vec![conv, NetLayer::GlobalAvgPool, dense];
        let params = net.params().unwrap();
        let names: Vec<&str> = params.iter().map(|p| p.name.as_str()).collect();
        let want = [
            "layer0.weight",
            "layer2.weight",
            "layer2.bias",
            "layer2.bn.gamma",
            "layer2.bn.beta",
            "layer3.weight",
            "layer3.bias",
        ];
        assert_eq!(names, want);
        assert_eq!(params[1].shape, [4, 6]);
        assert_eq!(params[5].shape, [6, 3]);
        // Gamma 1, beta and the biases 0; a convolution before the dense
        // block: the head draws He, not the MLP's rule.
        let init = net.init(3).unwrap();
        assert!(init[3].iter().all(|&g| g == 1.0));
        assert!(
            init[2]
                .iter()
                .chain(&init[4])
                .chain(&init[6])
                .all(|&b| b == 0.0)
        );
    }

    #[test]
    fn an_mlp_under_gelu_draws_xavier_and_a_network_he() {
        let mlp = NetworkConfig {
            input: [8, 1, 1],
            layers: vec![NetLayer::Dense {
                width: 8,
                batch_norm: false,
            }],
            classes: 8,
            activation: Activation::Gelu,
            bn_group: BnGroup::Replica,
        };
        // The head's weights: the last parameter but one, layer 1's.
        let head = |net: &NetworkConfig| {
            let init = net.init(1).unwrap();
            init[init.len() - 2].clone()
        };
        let stream = RandomStream::new(1, 0).substream(1);
        assert_eq!(head(&mlp), normals(&stream, 64, libm::sqrt(2.0 / 16.0)));
        let net = NetworkConfig {
            layers: vec![NetLayer::GlobalAvgPool],
            ..mlp
        };
        assert_eq!(head(&net), normals(&stream, 64, libm::sqrt(2.0 / 8.0)));
    }
}
