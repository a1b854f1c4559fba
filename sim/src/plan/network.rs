//! The table of the trainer's network ([`ModelTable::from_network`]; an
//! MLP is a network of dense blocks): a row per layer of the network's
//! own flattened, shape-inferred layers (`NetworkConfig::ops`, the list
//! the trainer builds), numbered as it numbers them (`layer{l}`, a
//! residual block's start and end counting), so the planner's rows and
//! the trainer's tensors share their names.
//!
//! Per sample, following the [conventions](super::table#conventions):
//!
//! - a convolution is its im2col product `[oh ow, kh kw c_in] x [kh kw
//!   c_in, c_out]` (`2 m k n` FLOPs forward; backward its weight gradient
//!   and, but for the first layer, its input gradient, a forward pass
//!   each); it stashes its input;
//! - batch norm with its activation is vector work of
//!   [`BN_FLOPS_FORWARD`] and [`BN_FLOPS_BACKWARD`] operations per
//!   element; it stashes its normalised input and its output;
//! - a pooling window's comparisons or additions, one per window element
//!   and output element forward, as many backward (the gradient routed or
//!   spread back); a max pool stashes its input;
//! - a residual block's end is an addition per element forward, and its
//!   gradient's addition where the block began backward; it stashes
//!   nothing (the block's start is no row: it only keeps its input);
//! - parallel branches' concat copies every element forward and back,
//!   and the branches' input gradients are added where they split; it
//!   stashes nothing (the split and the steps between branches are no
//!   rows);
//! - a dense block is the product `[1, i] x [i, o]` (`2 i o` FLOPs
//!   forward, backward twice that but the first layer's), stashing its
//!   output; batch norm adds its parameters, its extra phases not priced;
//!   the head is the product `[1, c] x [c, classes]` as a dense block.
//!
//! The host sends each sample's features as f32 and a `u32` label, as the
//! trainer does.

use super::table::{Gemm, Layer, ModelTable, ModelTableError};
use crate::model::{ConvShape, NetLayer, NetworkConfig, Op, Pool2d, PoolKind};

/// Operations per element of batch norm and its activation forward: the
/// statistics' sum and sum of squares (3), the normalisation (2), the
/// scale and shift (2) and the activation (1).
pub const BN_FLOPS_FORWARD: u64 = 8;

/// ... and backward: the activation's derivative (1), the sums of the
/// gradient and of its product with the normalised input (3), the input's
/// gradient from them (5).
pub const BN_FLOPS_BACKWARD: u64 = 9;

/// The shape a layer walks over: channels, height, width.
type Maps = (u64, (usize, usize));

impl ModelTable {
    /// The table of `config` (see the [module docs](self)), named `mlp
    /// I-H-...-C` after its widths if every layer is a dense block (an
    /// MLP, errors naming `mlp`), else `network CxHxW ...` after its input
    /// and its convolutions' channels.
    ///
    /// # Errors
    /// [`ModelTableError::Network`] naming the layer for a network the
    /// trainer refuses (its [`NetworkConfig::validate`]);
    /// [`ModelTableError::TooLarge`] for sizes beyond
    /// [`ModelTable::LIMIT`].
    ///
    /// ```
    /// use tessera_sim::model::{Activation, MlpConfig};
    /// use tessera_sim::plan::ModelTable;
    ///
    /// let mlp = MlpConfig { inputs: 2, hidden: vec![3], classes: 2, activation: Activation::Relu, batch_norm: false };
    /// let table = ModelTable::from_network(&mlp.network())?;
    /// assert_eq!((table.name(), table.params()), ("mlp 2-3-2", (2 * 3 + 3) + (3 * 2 + 2)));
    /// # Ok::<(), tessera_sim::plan::ModelTableError>(())
    /// ```
    pub fn from_network(config: &NetworkConfig) -> Result<Self, ModelTableError> {
        let mlp = config
            .layers
            .iter()
            .all(|l| matches!(l, NetLayer::Dense { .. }));
        let origin = if mlp { "mlp" } else { "network" };
        let ops = config.ops(1).map_err(|e| ModelTableError::Network {
            origin: origin.into(),
            message: e.to_string(),
        })?;
        let inputs = config.inputs() as u64;
        let table = Self::checked(
            if mlp {
                mlp_name(config)
            } else {
                network_name(config, &ops)
            },
            origin,
            inputs.saturating_mul(4).saturating_add(4),
            rows(&ops, config.input),
        )?;
        Ok(table.of_network(config.clone()))
    }
}

/// `mlp 64-128-64-10`: an MLP's (dense blocks only) widths, input to
/// classes.
fn mlp_name(config: &NetworkConfig) -> String {
    let mut widths = vec![config.inputs()];
    widths.extend(config.layers.iter().filter_map(|l| match l {
        NetLayer::Dense { width, .. } => Some(*width),
        _ => None,
    }));
    widths.push(config.classes);
    let widths: Vec<String> = widths.iter().map(ToString::to_string).collect();
    format!("mlp {}", widths.join("-"))
}

/// `network 1x8x8 conv 16,...,32 head 10`: the input and each
/// convolution's channels, in the order of the flattened layers `ops`.
fn network_name(config: &NetworkConfig, ops: &[Op]) -> String {
    let [c, h, w] = config.input;
    let convs: Vec<String> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Conv(s) => Some(s.conv.out_channels.to_string()),
            _ => None,
        })
        .collect();
    format!(
        "network {c}x{h}x{w} conv {} head {}",
        convs.join(","),
        config.classes
    )
}

/// Layer `index`'s row with nothing in it but its name and `gemm`.
fn row(index: usize, gemm: Option<Gemm>) -> Layer {
    Layer {
        name: format!("layer{index}"),
        params: 0,
        flops_forward: 0,
        flops_backward: 0,
        activation_bytes: 0,
        output_bytes: None,
        gemm,
        tied: None,
        sim: None,
    }
}

/// The rows of `ops` (the network's flattened, shape-inferred layers,
/// [`NetworkConfig::ops`]: the trainer's own walk) on `input` (channels,
/// height, width), row `l` of layer `l`: a residual block's start, the
/// split of parallel branches and the steps between them take a number
/// but make no row.
fn rows(ops: &[Op], [c, h, w]: [usize; 3]) -> Vec<Layer> {
    let (mut c, mut hw) = (c as u64, (h, w));
    // The shapes where open parallel branches split.
    let mut splits: Vec<Maps> = Vec::new();
    let mut out = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        let elements = c * (hw.0 * hw.1) as u64;
        match op {
            Op::Dense { fan_in, width, bn } => {
                out.push(dense_row(index, (*fan_in, *width), *bn));
                (c, hw) = (*width as u64, (1, 1));
            }
            Op::Head { fan_in, classes } => out.push(dense_row(index, (*fan_in, *classes), false)),
            Op::Conv(shape) => {
                out.push(conv_row(index, shape, elements));
                (c, hw) = (shape.conv.out_channels as u64, shape.output);
            }
            Op::BnAct { .. } => out.push(Layer {
                params: 2 * c,
                flops_forward: BN_FLOPS_FORWARD * elements,
                flops_backward: BN_FLOPS_BACKWARD * elements,
                activation_bytes: 2 * 2 * elements,
                output_bytes: Some(2 * elements),
                ..row(index, None)
            }),
            Op::Pool(p, shape) => {
                out.push(pool_row(index, p, shape));
                hw = shape.output;
            }
            Op::Fork => {}
            Op::Join => out.push(Layer {
                flops_forward: elements,
                flops_backward: elements,
                output_bytes: Some(2 * elements),
                ..row(index, None)
            }),
            Op::Split => splits.push((c, hw)),
            Op::NextBranch => (c, hw) = *splits.last().expect("a split before every branch"),
            Op::Concat { channels } => {
                let (ci, hwi) = splits.pop().expect("a split before every concat");
                let inputs = ci * (hwi.0 * hwi.1) as u64;
                c = channels.iter().sum::<usize>() as u64;
                let elements = c * (hw.0 * hw.1) as u64;
                out.push(Layer {
                    flops_forward: elements,
                    flops_backward: elements + (channels.len() as u64 - 1) * inputs,
                    output_bytes: Some(2 * elements),
                    ..row(index, None)
                });
            }
        }
    }
    out
}

/// A dense block's or the head's row, the product `[1, fan_in] x
/// [fan_in, width]`: `2 i o` FLOPs forward, the backward pass twice that
/// but the network's first layer's (no input gradient); batch norm adds
/// its parameters, its extra phases not priced.
fn dense_row(index: usize, (fan_in, width): (usize, usize), bn: bool) -> Layer {
    let gemm = Gemm {
        m: 1,
        k: fan_in as u64,
        n: width as u64,
    };
    let f = gemm.flops();
    let bn = if bn { 2 * gemm.n } else { 0 };
    Layer {
        params: (gemm.k * gemm.n).saturating_add(gemm.n + bn),
        flops_forward: f,
        flops_backward: if index == 0 { f } else { 2 * f },
        activation_bytes: gemm.n * 4,
        ..row(index, Some(gemm))
    }
}

/// A convolution's row: its im2col product, `elements` its input's.
fn conv_row(index: usize, shape: &ConvShape, elements: u64) -> Layer {
    let conv = shape.conv;
    let (kh, kw) = conv.kernel;
    let gemm = Gemm {
        m: (shape.output.0 * shape.output.1) as u64,
        k: (kh * kw * conv.in_channels) as u64,
        n: conv.out_channels as u64,
    };
    let flops = gemm.flops();
    Layer {
        params: gemm.k * gemm.n,
        flops_forward: flops,
        flops_backward: if index == 0 { flops } else { 2 * flops },
        activation_bytes: 2 * elements,
        ..row(index, Some(gemm))
    }
}

/// A pooling's row.
fn pool_row(index: usize, p: &Pool2d, shape: &ConvShape) -> Layer {
    let c = shape.conv.in_channels as u64;
    let outputs = c * (shape.output.0 * shape.output.1) as u64;
    let window = (p.kernel.0 * p.kernel.1) as u64;
    let inputs = c * (shape.input.0 * shape.input.1) as u64;
    Layer {
        flops_forward: window * outputs,
        flops_backward: window * outputs,
        activation_bytes: if p.kind == PoolKind::Max {
            2 * inputs
        } else {
            0
        },
        output_bytes: Some(2 * outputs),
        ..row(index, None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Activation;

    fn mini() -> NetworkConfig {
        NetworkConfig::resnet_mini([1, 8, 8], 10, &[16, 32], &[1, 1])
    }

    #[test]
    fn the_table_has_the_networks_parameters_and_layer_names() {
        let net = mini();
        let t = ModelTable::from_network(&net).unwrap();
        let params: usize = net.params().unwrap().iter().map(|p| p.len()).sum();
        assert_eq!(t.params(), params as u64);
        // Each row owns exactly the parameters the network names after it.
        for row in t.layers() {
            let own: usize = net
                .params()
                .unwrap()
                .iter()
                .filter(|p| p.name.split('.').next() == Some(row.name.as_str()))
                .map(|p| p.len())
                .sum();
            assert_eq!(row.params, own as u64, "{}", row.name);
        }
        // 18 flattened layers, the two blocks' starts (layers 1 and 9)
        // without a row.
        let names: Vec<&str> = t.layers().iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names.len(), 16);
        assert!(!names.contains(&"layer1") && !names.contains(&"layer9"));
        assert_eq!(names.last(), Some(&"layer17"));
        assert_eq!(t.input_bytes(), 64 * 4 + 4);
        assert_eq!(t.network(), Some(&net));
        assert_eq!(t.name(), "network 1x8x8 conv 16,16,16,32,32,32 head 10");
    }

    #[test]
    fn parallel_branches_have_rows_for_their_layers_and_their_concat() {
        let net = mini().with_branches(4);
        let t = ModelTable::from_network(&net).unwrap();
        let params: usize = net.params().unwrap().iter().map(|p| p.len()).sum();
        assert_eq!(t.params(), params as u64);
        let names: Vec<&str> = t.layers().iter().map(|l| l.name.as_str()).collect();
        // resnet-mini's 18 flattened layers with the branches before its
        // last batch norm (15): the split (15), the 3x3 branch (16, 17),
        // the step (18), the 1x1 branch (19, 20), the concat (21). Every
        // layer but the blocks' starts, the split and the step has a row.
        let rowless: Vec<usize> = (0..25)
            .filter(|l| !names.contains(&format!("layer{l}").as_str()))
            .collect();
        assert_eq!(rowless, vec![1, 9, 15, 18]);
        assert_eq!(names.last(), Some(&"layer24"));
        // The concat copies 2 x 4 channels of 4x4 forward; backward that
        // and the second branch's input gradient (32 channels) added.
        let concat = &t.layers()[names.iter().position(|n| *n == "layer21").unwrap()];
        assert_eq!(
            (concat.flops_forward, concat.flops_backward),
            (128, 128 + 512)
        );
        // The branches' products and the head's, on the 8 channels.
        let products: Vec<u64> = t
            .layers()
            .iter()
            .filter_map(|l| l.gemm)
            .map(|g| g.k)
            .collect();
        assert!(products.ends_with(&[288, 32, 8]), "{products:?}");
    }

    #[test]
    fn the_products_flops_are_the_im2col_products_by_hand() {
        let t = ModelTable::from_network(&mini()).unwrap();
        // By hand: the stem 2 (8 8)(3 3 1) 16; two 16->16 convolutions on
        // 8x8; the stride-2 16->32 onto 4x4; two 32->32 on 4x4; the head.
        let convs = [
            2 * 64 * 9 * 16,
            2 * 64 * 144 * 16,
            2 * 64 * 144 * 16,
            2 * 16 * 144 * 32,
            2 * 16 * 288 * 32,
            2 * 16 * 288 * 32,
            2 * 32 * 10,
        ];
        let products: Vec<u64> = t
            .layers()
            .iter()
            .filter(|l| l.gemm.is_some())
            .map(|l| l.flops_forward)
            .collect();
        assert_eq!(products, convs);
        // Backward: the weight gradient, and the input gradient but for
        // the stem.
        let backward: Vec<u64> = t
            .layers()
            .iter()
            .filter(|l| l.gemm.is_some())
            .map(|l| l.flops_backward)
            .collect();
        let mut expected: Vec<u64> = convs.iter().map(|f| 2 * f).collect();
        expected[0] = convs[0];
        assert_eq!(backward, expected);
        // The engine's product of each convolution at 4 samples:
        // [n oh ow, kh kw c_in] x [kh kw c_in, c_out], 4 times the row's.
        let stem = crate::model::Conv2d {
            in_channels: 1,
            out_channels: 16,
            kernel: (3, 3),
            stride: 1,
            padding: 1,
        }
        .on(4, (8, 8))
        .unwrap();
        let engine = 2 * stem.out_rows() * stem.patch() * 16;
        assert_eq!(engine as u64, 4 * t.layers()[0].flops_forward);
        // Vector work: batch norm per element, the residual sums, the
        // global pool's additions.
        let bn = t.layers().iter().find(|l| l.name == "layer2").unwrap();
        assert_eq!(bn.flops_forward, BN_FLOPS_FORWARD * 16 * 64);
        assert_eq!(bn.output_elements(), 16 * 64);
        let sum = t.layers().iter().find(|l| l.name == "layer6").unwrap();
        assert_eq!((sum.flops_forward, sum.params), (16 * 64, 0));
        let pool = t.layers().iter().find(|l| l.name == "layer16").unwrap();
        assert_eq!(pool.flops_forward, 32 * 16);
        assert_eq!(pool.output_elements(), 32);
    }

    #[test]
    fn an_mlps_table_has_the_simulators_flops_and_its_widths_for_a_name() {
        let c = crate::model::MlpConfig {
            inputs: 64,
            hidden: vec![128, 64],
            classes: 10,
            activation: Activation::Relu,
            batch_norm: false,
        };
        let t = ModelTable::from_network(&c.network()).unwrap();
        assert_eq!(t.name(), "mlp 64-128-64-10");
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
        let with_bn = crate::model::MlpConfig {
            batch_norm: true,
            ..c.clone()
        };
        let bn = ModelTable::from_network(&with_bn.network()).unwrap();
        assert_eq!(bn.params(), t.params() + 2 * (128 + 64));
        // The head alone is the first layer: no input gradient.
        let head = crate::model::MlpConfig {
            hidden: vec![],
            ..c.clone()
        };
        let h = ModelTable::from_network(&head.network()).unwrap();
        assert_eq!(h.flops_per_sample(), (2 * 64 * 10, 2 * 64 * 10));
        let zero = crate::model::MlpConfig {
            hidden: vec![0],
            ..c
        };
        let e = ModelTable::from_network(&zero.network()).unwrap_err();
        assert!(matches!(e, ModelTableError::Network { .. }), "{e:?}");
        assert!(e.to_string().starts_with("mlp: "), "{e}");
    }

    #[test]
    fn an_invalid_network_is_refused_with_the_trainers_reason() {
        let net = NetworkConfig {
            input: [1, 8, 8],
            layers: vec![NetLayer::Conv {
                channels: 4,
                kernel: 3,
                stride: 1,
                padding: 1,
            }],
            classes: 10,
            activation: Activation::Relu,
            bn_group: crate::model::BnGroup::Replica,
        };
        let e = ModelTable::from_network(&net).unwrap_err();
        assert!(matches!(e, ModelTableError::Network { .. }), "{e:?}");
        assert!(e.to_string().contains("global average pool"), "{e}");
    }
}
