//! What the simulator supports of a network, checked from its description
//! alone, in time linear in its layers and before anything is built:
//! its depth ([`MAX_LAYERS`]), its nesting ([`MAX_NESTING`]), its
//! convolutions' widths ([`MAX_CHANNELS`]), residual bodies that are not
//! empty ([`check`]), and the least tile memory its training
//! graph takes ([`least_bytes`], [`check_fits`]).
//!
//! Building a model's graphs, even only to size them
//! ([`MemoryEstimate`](super::MemoryEstimate)), takes time and memory
//! that grow with its layers: 100,000 residual blocks took 40 s and 10
//! GB before an allocation failed. These checks refuse such a network at
//! once, with the numbers. [`ModelConfig::validate`](super::ModelConfig::validate)
//! (the trainer's check of its model) and network files
//! ([`NetworkFile`](super::NetworkFile)) call [`check`].

use core::fmt;

use super::error::ModelError;
use super::network::{NetLayer, NetworkConfig};
use crate::ipu::Target;

/// The most layers a network may have, numbered as its tensors are named
/// (a residual block's start and end count as layers, as do branches'
/// split, the steps between them and their concat; the head is the
/// last). Every layer puts a piece on the first tile of its IPU: one IPU
/// holds 1,000 dense layers one column wide but not 2,000 (measured, with
/// the default job's micro-batch), and 25 of resnet-mini's residual
/// blocks (150 layers) are already too many; 4096 leaves room for a
/// pipeline over a few IPUs.
pub const MAX_LAYERS: usize = 4096;

/// The deepest nesting of residual bodies and branches in each other.
pub const MAX_NESTING: usize = 32;

/// The most output channels of a convolution (twice ResNet-50's widest
/// layer; a network file's sizes have the same bound).
pub const MAX_CHANNELS: usize = 4096;

/// Checks `net`'s shape against what the simulator supports, without
/// inferring a tensor's shape: at most [`MAX_LAYERS`] layers and
/// [`MAX_NESTING`] levels of nesting, convolutions of at most
/// [`MAX_CHANNELS`] channels, no empty residual body (`x + x` is no
/// block; an empty branch is the identity, and is one), as
/// [`ModelConfig::validate`](super::ModelConfig::validate) checks it.
/// Time linear in the layers; no recursion,
/// so any nesting is refused rather than overflowing the stack.
///
/// The layers, the head included, when it is within the bounds.
///
/// # Errors
/// [`ModelError::InvalidNetwork`] naming the first layer (numbered as
/// [`NetworkConfig::params`] numbers them) past a bound or empty.
///
/// # Examples
/// ```
/// use tessera_sim::model::{NetLayer, NetworkConfig, bounds};
///
/// let mut net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[16], &[1]);
/// assert!(bounds::check(&net).is_ok());
/// net.layers.insert(1, NetLayer::Residual(Vec::new()));
/// let e = bounds::check(&net).unwrap_err().to_string();
/// assert!(e.contains("layer 1: a residual block with an empty body"), "{e}");
/// ```
pub fn check(net: &NetworkConfig) -> Result<usize, ModelError> {
    /// What is left to walk: a list of layers at a nesting depth, or a
    /// layer that closes a block (a residual block's end, a step to the
    /// next branch, the branches' concat).
    enum Walk<'a> {
        List(&'a [NetLayer], usize),
        Close,
    }
    let refused = |layer: usize, reason: String| ModelError::InvalidNetwork { layer, reason };
    let mut stack = vec![Walk::List(&net.layers, 0)];
    // Layers so far: the next layer's number.
    let mut l = 0usize;
    while let Some(walk) = stack.pop() {
        let (layer, depth) = match walk {
            Walk::Close => (None, 0),
            Walk::List(list, depth) => match list.split_first() {
                Some((layer, rest)) => {
                    stack.push(Walk::List(rest, depth));
                    (Some(layer), depth)
                }
                None => continue,
            },
        };
        if l >= MAX_LAYERS {
            return Err(refused(
                l,
                format!("more than {MAX_LAYERS} layers, the most the simulator supports"),
            ));
        }
        match layer {
            Some(NetLayer::Conv { channels, .. }) if *channels > MAX_CHANNELS => {
                return Err(refused(
                    l,
                    format!(
                        "a convolution onto {channels} channels: at most {MAX_CHANNELS} are supported"
                    ),
                ));
            }
            Some(NetLayer::Residual(body)) => {
                if body.is_empty() {
                    return Err(refused(
                        l,
                        "a residual block with an empty body: give it at least one layer".into(),
                    ));
                }
                stack.push(Walk::Close);
                stack.push(Walk::List(body, nested(l, depth)?));
            }
            Some(NetLayer::Branches(branches)) => {
                let inner = nested(l, depth)?;
                // Walked in order: branch 0, a step, branch 1, ..., the concat.
                stack.push(Walk::Close);
                for (i, branch) in branches.iter().enumerate().rev() {
                    stack.push(Walk::List(branch, inner));
                    if i > 0 {
                        stack.push(Walk::Close);
                    }
                }
            }
            _ => {}
        }
        l += 1;
    }
    // The head.
    if l >= MAX_LAYERS {
        return Err(refused(
            l,
            format!("more than {MAX_LAYERS} layers with the head, the most the simulator supports"),
        ));
    }
    Ok(l + 1)
}

/// The depth inside a block at `depth` opened by layer `l`.
fn nested(l: usize, depth: usize) -> Result<usize, ModelError> {
    if depth >= MAX_NESTING {
        return Err(ModelError::InvalidNetwork {
            layer: l,
            reason: format!(
                "residual bodies and branches nested more than {MAX_NESTING} deep, the most the \
                 simulator supports"
            ),
        });
    }
    Ok(depth + 1)
}

/// The fewest bytes of tensors `net`'s training graph holds over all its
/// tiles for micro-batches of `micro_batch` samples: every parameter and
/// its gradient, and the output of every convolution, dense block,
/// pooling and the head, 4 bytes a value (values are held in f32). The
/// graph holds more (batch norm's outputs, the backward pass's tensors,
/// exchange buffers): this is a lower bound, and a loose one (the
/// measured tensors of the networks its tests measure are 12 to 45 times
/// more), saturating at `u64::MAX`.
/// `None` for a network [`check`] or [`NetworkConfig::validate`] refuses.
///
/// # Examples
/// ```
/// use tessera_sim::model::{NetworkConfig, bounds};
///
/// let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[16], &[1]);
/// let bytes = bounds::least_bytes(&net, 8).unwrap();
/// // Three 3x3 convolutions' 16 x 64 outputs per sample, at least.
/// assert!(bytes > 3 * 8 * 16 * 64 * 4);
/// ```
#[must_use]
pub fn least_bytes(net: &NetworkConfig, micro_batch: usize) -> Option<u64> {
    use super::network::Op;
    check(net).ok()?;
    let n = micro_batch.max(1) as u64;
    let mut total = 0u64;
    let mut add = |values: u64| total = total.saturating_add(values.saturating_mul(4));
    for p in net.params().ok()? {
        // The parameter and its gradient.
        add((p.shape.iter().product::<usize>() as u64).saturating_mul(2));
    }
    for op in net.ops(micro_batch).ok()? {
        let per_sample = match op {
            Op::Conv(s) | Op::Pool(_, s) => s.conv.out_channels * s.output.0 * s.output.1,
            Op::Dense { width, .. } => width,
            Op::Head { classes, .. } => classes,
            _ => 0,
        };
        add((per_sample as u64).saturating_mul(n));
    }
    Some(total)
}

/// A network whose training graph needs more tile memory than a
/// replica's IPUs have ([`check_fits`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TooLargeNetwork {
    /// The fewest bytes it needs ([`least_bytes`]).
    pub least_bytes: u64,
    /// The bytes of every tile of the replica's IPUs.
    pub capacity: u64,
    /// The replica's IPUs.
    pub ipus: u32,
    /// The micro-batch the estimate is for.
    pub micro_batch: usize,
}

impl fmt::Display for TooLargeNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the model does not fit: its parameters, their gradients and its activations for a \
             micro-batch of {} take at least {} bytes (estimated from its layers), more than the \
             {} bytes of all the tiles of a replica's {} IPU{}",
            self.micro_batch,
            self.least_bytes,
            self.capacity,
            self.ipus,
            if self.ipus == 1 { "" } else { "s" }
        )
    }
}

impl core::error::Error for TooLargeNetwork {}

/// `net`'s [`least_bytes`] against all the tile memory of a replica's
/// IPUs `target`: a network that needs more cannot fit, whatever its
/// placement. The estimate, if it may fit; `Ok(None)` for a network
/// [`check`] or [`NetworkConfig::validate`] refuses (their errors are
/// theirs to give).
///
/// # Errors
/// [`TooLargeNetwork`] when it cannot fit.
///
/// # Examples
/// ```
/// use tessera_sim::IpuSpec;
/// use tessera_sim::ipu::Target;
/// use tessera_sim::model::{NetworkConfig, bounds};
///
/// let target = Target::single(IpuSpec::MK2_GC200);
/// let small = NetworkConfig::resnet_mini([1, 8, 8], 10, &[16], &[1]);
/// assert!(bounds::check_fits(&small, &target, 8).unwrap().is_some());
/// let wide = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4096], &[1]);
/// let e = bounds::check_fits(&wide, &target, 8).unwrap_err();
/// assert!(e.least_bytes > e.capacity);
/// ```
pub fn check_fits(
    net: &NetworkConfig,
    target: &Target,
    micro_batch: usize,
) -> Result<Option<u64>, TooLargeNetwork> {
    let Some(least) = least_bytes(net, micro_batch) else {
        return Ok(None);
    };
    let capacity = u64::from(target.tiles()).saturating_mul(target.spec().memory_per_tile());
    if least > capacity {
        return Err(TooLargeNetwork {
            least_bytes: least,
            capacity,
            ipus: target.ipus(),
            micro_batch,
        });
    }
    Ok(Some(least))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::IpuSpec;
    use crate::model::{
        Activation, BnGroup, Compute, MemoryEstimate, MlpConfig, ModelConfig, Placement,
    };

    fn conv(channels: usize) -> NetLayer {
        NetLayer::Conv {
            channels,
            kernel: 3,
            stride: 1,
            padding: 1,
        }
    }

    fn net(layers: Vec<NetLayer>) -> NetworkConfig {
        NetworkConfig {
            input: [2, 4, 4],
            layers,
            classes: 3,
            activation: Activation::Relu,
            bn_group: BnGroup::Replica,
        }
    }

    #[test]
    fn the_least_bytes_are_at_most_the_measured_training_graph_s_tensors() {
        let target = Target::single(IpuSpec::MK2_GC200);
        let mlp = MlpConfig {
            inputs: 64,
            hidden: vec![32, 16],
            classes: 10,
            activation: Activation::Gelu,
            batch_norm: true,
        };
        let nets = [
            NetworkConfig::resnet_mini([1, 8, 8], 10, &[16, 32], &[1, 1]).with_branches(8),
            NetworkConfig::resnet_mini([3, 12, 12], 4, &[8], &[2]),
            mlp.network(),
            NetworkConfig::resnet_mini([1, 8, 8], 10, &[192], &[1]),
        ];
        for net in &nets {
            for (micro_batch, compute) in [(1, Compute::F32), (4, Compute::F16)] {
                let measured =
                    MemoryEstimate::of(net, target, &Placement::Spread, micro_batch, compute)
                        .unwrap();
                let tensors: u64 = measured.train.tiles.iter().map(|t| t.tensors).sum();
                let least = least_bytes(net, micro_batch).unwrap();
                assert!(least <= tensors, "{least} > {tensors}: {net:?}");
                // A loose bound: the measured tensors are 12 to 45 times
                // more (the backward pass's, the products' operands and
                // partial sums, the exchange buffers).
                assert!(least * 64 > tensors, "{least} of {tensors}: {net:?}");
            }
        }
    }

    #[test]
    fn empty_residual_bodies_are_refused_naming_the_layer() {
        let body = vec![NetLayer::BnAct, conv(2)];
        for (layers, at, needle) in [
            (vec![NetLayer::Residual(Vec::new())], 0, "empty body"),
            (
                vec![
                    conv(2),
                    NetLayer::Residual(vec![NetLayer::Residual(vec![])]),
                ],
                2,
                "empty body",
            ),
        ] {
            let mut layers = layers;
            layers.push(NetLayer::GlobalAvgPool);
            let n = net(layers);
            let model = ModelConfig::Network(n.clone());
            for e in [check(&n).unwrap_err(), model.validate().unwrap_err()] {
                match e {
                    ModelError::InvalidNetwork { layer, reason } => {
                        assert_eq!(layer, at, "{reason}");
                        assert!(reason.contains(needle), "{reason}");
                    }
                    e => panic!("{e}"),
                }
            }
        }
        // A body of one layer is a block; an empty branch, the identity.
        let one = net(vec![
            NetLayer::Residual(body.clone()),
            NetLayer::GlobalAvgPool,
        ]);
        assert_eq!(check(&one), Ok(6));
        assert!(ModelConfig::Network(one).validate().is_ok());
        let identity = net(vec![
            NetLayer::Branches(vec![body, Vec::new()]),
            NetLayer::GlobalAvgPool,
        ]);
        assert!(ModelConfig::Network(identity).validate().is_ok());
    }

    #[test]
    fn depth_nesting_and_width_are_bounded_without_recursion() {
        // The layers count as `NetworkConfig::ops` numbers them.
        let mut layers = vec![conv(2), NetLayer::Residual(vec![NetLayer::BnAct])];
        layers.push(NetLayer::Branches(vec![vec![NetLayer::BnAct]; 3]));
        layers.push(NetLayer::GlobalAvgPool);
        let n = net(layers);
        assert_eq!(check(&n).unwrap(), n.ops(1).unwrap().len());
        // MAX_LAYERS with the head: accepted; one more: refused.
        let most = net(vec![NetLayer::BnAct; MAX_LAYERS - 1]);
        assert_eq!(check(&most), Ok(MAX_LAYERS));
        let over = net(vec![NetLayer::BnAct; MAX_LAYERS]);
        assert!(
            check(&over)
                .unwrap_err()
                .to_string()
                .contains("4096 layers")
        );
        let blocks = NetworkConfig::resnet_mini([1, 8, 8], 10, &[16], &[1000]);
        assert!(ModelConfig::Network(blocks).validate().is_err());
        // Nesting far past the stack a recursive walk would take.
        let mut deep = vec![NetLayer::BnAct];
        for _ in 0..MAX_NESTING {
            deep = vec![NetLayer::Residual(deep)];
        }
        assert!(check(&net(deep.clone())).is_ok());
        let deeper = net(vec![NetLayer::Residual(deep)]);
        let e = check(&deeper).unwrap_err().to_string();
        assert!(e.contains("nested more than 32 deep"), "{e}");
        let wide = net(vec![conv(MAX_CHANNELS + 1)]);
        let e = check(&wide).unwrap_err().to_string();
        assert!(e.contains("4097 channels"), "{e}");
    }

    #[test]
    fn a_network_beyond_its_replica_s_tiles_is_refused_with_the_bytes() {
        let one = Target::single(IpuSpec::MK2_GC200);
        let wide = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4096], &[1]);
        let e = check_fits(&wide, &one, 4).unwrap_err();
        assert_eq!(e.capacity, 1472 * 638_976);
        assert_eq!(Some(e.least_bytes), least_bytes(&wide, 4));
        assert!(e.to_string().contains(&e.least_bytes.to_string()));
        // On more IPUs it may fit (the estimate is all it says).
        let four = Target::new(IpuSpec::MK2_GC200, 4).unwrap();
        assert!(check_fits(&wide, &four, 4).unwrap().is_some());
        // An invalid network is not this check's to refuse.
        assert_eq!(check_fits(&net(vec![]), &one, 4), Ok(None));
    }

    #[test]
    fn a_model_of_a_network_with_an_empty_body_is_a_typed_error() {
        use crate::model::Model;

        // Built in code, never validated: the model and its estimate check
        // it themselves (it once panicked in a codelet).
        for at in [0, 1] {
            let mut n = NetworkConfig::resnet_mini([1, 8, 8], 10, &[8], &[1]);
            n.layers.insert(at, NetLayer::Residual(Vec::new()));
            let target = Target::single(IpuSpec::MK2_GC200);
            let estimate = MemoryEstimate::of(&n, target, &Placement::Spread, 2, Compute::F32);
            let model = Model::new(&n, target, 2, Compute::F32).map(|_| ());
            for e in [estimate.map(|_| ()).unwrap_err(), model.unwrap_err()] {
                assert!(
                    matches!(&e, ModelError::InvalidNetwork { layer, reason }
                        if *layer == at && reason.contains("empty body")),
                    "{e}"
                );
            }
        }
    }

    #[test]
    fn a_trainer_of_a_network_with_an_empty_body_is_a_typed_error() {
        use crate::data::Source;
        use crate::train::{TrainConfig, Trainer};

        let mut config = TrainConfig::resnet_mini([1, 8, 8]);
        let net = config.network.as_mut().unwrap();
        net.layers.insert(1, NetLayer::Residual(Vec::new()));
        let data = Source::Digits.load().unwrap();
        match Trainer::new(config, data) {
            Err(e) => assert!(
                e.to_string()
                    .contains("layer 1: a residual block with an empty body")
            ),
            Ok(_) => panic!("an empty residual body trains"),
        }
    }
}
