//! The table of the trainer's convolutional network
//! ([`ModelTable::from_network`]): a row per layer as the network numbers
//! them (`layer{l}`, a residual block's start and end counting), so the
//! planner's rows and the trainer's tensors share their names.
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
//! - the dense head is the product `[1, c] x [c, classes]`, as the MLP's
//!   last layer.
//!
//! The host sends each sample's features as f32 and a `u32` label, as the
//! trainer does.

use super::table::{Gemm, Layer, ModelTable, ModelTableError};
use crate::model::{Conv2d, ConvShape, NetLayer, NetworkConfig, Pool2d, PoolKind};

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
    /// The table of `config` (see the [module docs](self)), named
    /// `network CxHxW ...` after its input and its layers' channels.
    ///
    /// # Errors
    /// [`ModelTableError::Network`] naming the layer for a network the
    /// trainer refuses (its [`NetworkConfig::validate`]);
    /// [`ModelTableError::TooLarge`] for sizes beyond
    /// [`ModelTable::LIMIT`].
    pub fn from_network(config: &NetworkConfig) -> Result<Self, ModelTableError> {
        config.validate().map_err(|e| ModelTableError::Network {
            origin: "network".into(),
            message: e.to_string(),
        })?;
        let [c, h, w] = config.input;
        let (mut layers, mut next) = (Vec::new(), 0);
        let (c, _) = rows(&config.layers, (c as u64, (h, w)), &mut next, &mut layers);
        let head = Gemm {
            m: 1,
            k: c,
            n: config.classes as u64,
        };
        layers.push(Layer {
            params: c * head.n + head.n,
            flops_forward: head.flops(),
            flops_backward: 2 * head.flops(),
            activation_bytes: head.n * 4,
            ..row(next, Some(head))
        });
        let inputs = config.inputs() as u64;
        let table = Self::checked(
            network_name(config),
            "network",
            inputs.saturating_mul(4).saturating_add(4),
            layers,
        )?;
        Ok(table.of_network(config.clone()))
    }
}

/// `network 1x8x8 c16 ... c32 head 10`: the input and each convolution's
/// channels.
fn network_name(config: &NetworkConfig) -> String {
    let [c, h, w] = config.input;
    let mut convs = Vec::new();
    walk(&config.layers, &mut |l| {
        if let NetLayer::Conv { channels, .. } = l {
            convs.push(channels.to_string());
        }
    });
    format!(
        "network {c}x{h}x{w} conv {} head {}",
        convs.join(","),
        config.classes
    )
}

/// Calls `f` on every layer of `layers`, a residual block's body or
/// parallel branches after it.
fn walk(layers: &[NetLayer], f: &mut impl FnMut(&NetLayer)) {
    for l in layers {
        f(l);
        match l {
            NetLayer::Residual(body) => walk(body, f),
            NetLayer::Branches(branches) => branches.iter().for_each(|b| walk(b, f)),
            _ => {}
        }
    }
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

/// Appends the rows of `layers` over `maps` to `out`, layer `*next`
/// first (numbered as the network flattens them: a residual block's
/// start takes a number but makes no row): the shape after them. The
/// network is valid.
fn rows(
    layers: &[NetLayer],
    (mut c, mut hw): Maps,
    next: &mut usize,
    out: &mut Vec<Layer>,
) -> Maps {
    for layer in layers {
        let index = *next;
        *next += 1;
        let elements = c * (hw.0 * hw.1) as u64;
        match layer {
            NetLayer::Conv {
                channels,
                kernel,
                stride,
                padding,
            } => {
                let conv = Conv2d {
                    in_channels: c as usize,
                    out_channels: *channels,
                    kernel: (*kernel, *kernel),
                    stride: *stride,
                    padding: *padding,
                };
                let shape = conv.on(1, hw).expect("a valid network");
                out.push(conv_row(index, &shape, elements));
                (c, hw) = (*channels as u64, shape.output);
            }
            NetLayer::BnAct => out.push(Layer {
                params: 2 * c,
                flops_forward: BN_FLOPS_FORWARD * elements,
                flops_backward: BN_FLOPS_BACKWARD * elements,
                activation_bytes: 2 * 2 * elements,
                output_bytes: Some(2 * elements),
                ..row(index, None)
            }),
            NetLayer::Pool(p) => {
                let shape = p.on(1, c as usize, hw).expect("a valid network");
                out.push(pool_row(index, p, &shape));
                hw = shape.output;
            }
            NetLayer::GlobalAvgPool => {
                let p = Pool2d::global(hw);
                let shape = p.on(1, c as usize, hw).expect("the whole map fits");
                out.push(pool_row(index, &p, &shape));
                hw = (1, 1);
            }
            NetLayer::Residual(body) => {
                rows(body, (c, hw), next, out);
                out.push(Layer {
                    flops_forward: elements,
                    flops_backward: elements,
                    output_bytes: Some(2 * elements),
                    ..row(*next, None)
                });
                *next += 1;
            }
            NetLayer::Branches(branches) => (c, hw) = branch_rows(branches, (c, hw), next, out),
        }
    }
    (c, hw)
}

/// [`rows`] for parallel `branches` whose split took the number before
/// `*next`: each branch's rows (a step between branches takes a number
/// but makes no row), then the concat's row: a copy of every output
/// element forward; backward the gradient's copy back into the branches
/// and the branches' input gradients added where they split.
fn branch_rows(
    branches: &[Vec<NetLayer>],
    maps: Maps,
    next: &mut usize,
    out: &mut Vec<Layer>,
) -> Maps {
    let inputs = maps.0 * (maps.1.0 * maps.1.1) as u64;
    let (mut c, mut hw) = (0, maps.1);
    for (i, branch) in branches.iter().enumerate() {
        if i > 0 {
            *next += 1;
        }
        let (ci, hwi) = rows(branch, maps, next, out);
        (c, hw) = (c + ci, hwi);
    }
    let elements = c * (hw.0 * hw.1) as u64;
    out.push(Layer {
        flops_forward: elements,
        flops_backward: elements + (branches.len() as u64 - 1) * inputs,
        output_bytes: Some(2 * elements),
        ..row(*next, None)
    });
    *next += 1;
    (c, hw)
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
