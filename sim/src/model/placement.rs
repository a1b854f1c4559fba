//! Where a replica's layers run: spread over every tile of the replica's
//! IPUs, or placed layer by layer on its IPUs (model sharding, pipeline
//! stages); and the cycles each stage of a placed model spends forward and
//! backward.

use core::ops::Range;

use super::error::ModelError;
use super::model_config::MlpConfig;
use super::network::{NetworkConfig, branch_of_ops};
use crate::ipu::{Profile, Target, Tile};

/// Where the layers of a replica's model run (a network's flattened
/// layers, placed block by block by [`Placement::network`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Placement {
    /// Every layer over every tile of the replica's IPUs.
    #[default]
    Spread,
    /// Layer `l` on IPU `ipus[l]` of the replica (its tiles only), IPUs
    /// non-decreasing from layer to layer: contiguous stages, activations
    /// and their gradients crossing IPU-Links between them.
    Ipus(Vec<u32>),
    /// A network's flattened layer `l` on IPU `ipus[l]` in pipeline stage
    /// `stages[l]` (both non-decreasing): a stage of parallel branches has
    /// a part on each branch's IPU, run concurrently (TF IPU's concurrent
    /// pipeline stages), and an IPU may hold parts of successive stages.
    Stages {
        /// Each layer's IPU.
        ipus: Vec<u32>,
        /// Each layer's stage.
        stages: Vec<u32>,
    },
}

/// Where one stage runs on one IPU: a stage has one part, or one per IPU
/// of its concurrent branches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Part {
    /// The stage.
    pub stage: usize,
    /// The IPU of the replica.
    pub ipu: u32,
}

impl Placement {
    /// Layers over `ipus` IPUs in contiguous stages balanced by parameter
    /// count (the bulk of a layer's memory: weights, gradients, optimizer
    /// state), every IPU holding at least one layer.
    ///
    /// # Errors
    /// [`ModelError::Placement`] if there are more IPUs than layers.
    pub fn by_memory(config: &MlpConfig, ipus: u32) -> Result<Self, ModelError> {
        let layers = config.layers();
        let n = layers.len();
        if ipus.max(1) as usize > n {
            return Err(ModelError::Placement {
                reason: format!(
                    "{} IPUs but only {n} layers: every IPU needs a layer",
                    ipus.max(1)
                ),
            });
        }
        // In u128 (saturating), so that no config, validated or not, can
        // overflow.
        let weight: Vec<u128> = layers
            .iter()
            .map(|&(i, o)| (i as u128 * o as u128).saturating_add(o as u128))
            .collect();
        Ok(Self::Ipus(contiguous_split(&weight, ipus)))
    }

    /// Checks the placement against the model and the replica's IPUs: it
    /// names one of `target`'s IPUs for every flattened layer of `config`,
    /// non-decreasing, one per block but for parallel branches (one per
    /// branch), and stages that do not go back.
    ///
    /// # Errors
    /// [`ModelError::Placement`] naming the layer or IPU that is wrong.
    pub fn validate(&self, config: &NetworkConfig, target: &Target) -> Result<(), ModelError> {
        let Some(per_op) = self.ipus() else {
            return Ok(());
        };
        let ops = config.ops(1)?;
        let layers = ops.len();
        let stages_go_back = match self {
            Self::Stages { stages, .. } => {
                stages.len() != layers || stages.windows(2).any(|w| w[1] < w[0])
            }
            _ => false,
        };
        let cut_block = config.blocks()?.into_iter().find(|r| {
            let branch = branch_of_ops(&ops[r.clone()]);
            let Some(ipus) = per_op.get(r.clone()) else {
                return false;
            };
            // Within a branch (or a block without branches) one IPU.
            (1..r.len()).any(|i| branch[i] == branch[i - 1] && ipus[i] != ipus[i - 1])
        });
        let reason = if per_op.len() != layers {
            format!("{} layers placed, the model has {layers}", per_op.len())
        } else if let Some(l) = per_op.iter().position(|&i| i >= target.ipus()) {
            let ipus = target.ipus();
            format!(
                "layer {l} is on IPU {}, but a replica has {ipus} IPUs",
                per_op[l]
            )
        } else if let Some(l) = per_op.windows(2).position(|w| w[1] < w[0]) {
            let (now, before) = (per_op[l + 1], per_op[l]);
            format!(
                "layer {} is on IPU {now} after layer {l} on IPU {before}: stages must be \
                 contiguous, in increasing IPU order",
                l + 1
            )
        } else if stages_go_back {
            "the layers' stages are not one per layer, non-decreasing".to_owned()
        } else if let Some(r) = cut_block {
            format!("layers {r:?} form one block, cut between IPUs")
        } else {
            return Ok(());
        };
        Err(ModelError::Placement { reason })
    }

    /// Pipeline stages: the IPUs used in turn (1 when spread), a
    /// concurrent stage counting once.
    #[must_use]
    pub fn stages(&self) -> usize {
        match self {
            Self::Spread => 1,
            Self::Ipus(ipus) => {
                let mut used: Vec<u32> = ipus.clone();
                used.dedup();
                used.len()
            }
            Self::Stages { stages, .. } => stages.last().map_or(1, |&s| s as usize + 1),
        }
    }

    /// The stage (0-based) of layer `l`.
    #[must_use]
    pub fn stage_of(&self, l: usize) -> usize {
        match self {
            Self::Spread => 0,
            Self::Ipus(ipus) => {
                let mut used: Vec<u32> = ipus[..=l].to_vec();
                used.dedup();
                used.len() - 1
            }
            Self::Stages { stages, .. } => stages[l] as usize,
        }
    }

    /// Each layer's IPU, unless spread.
    #[must_use]
    pub fn ipus(&self) -> Option<&[u32]> {
        match self {
            Self::Spread => None,
            Self::Ipus(ipus) | Self::Stages { ipus, .. } => Some(ipus),
        }
    }

    /// The parts of the stages, in the layers' order: one per stage, or
    /// one per IPU of a concurrent stage.
    #[must_use]
    pub fn parts(&self) -> Vec<Part> {
        self.parts_of_layers().0
    }

    /// [`Placement::parts`], and each layer's part (an index into them;
    /// none when spread: every layer is in the one part, so look a layer
    /// up as `of.get(l)`, part 0 when absent).
    #[must_use]
    pub fn parts_of_layers(&self) -> (Vec<Part>, Vec<usize>) {
        let Some(ipus) = self.ipus() else {
            return (vec![Part::default()], Vec::new());
        };
        let (mut parts, mut of): (Vec<Part>, Vec<usize>) = (Vec::new(), Vec::new());
        let mut stage = 0;
        for (l, &ipu) in ipus.iter().enumerate() {
            stage = match self {
                Self::Stages { stages, .. } => stages[l] as usize,
                // A stage per IPU in turn.
                _ => stage + usize::from(l > 0 && ipus[l - 1] != ipu),
            };
            let part = Part { stage, ipu };
            let i = parts.iter().position(|p| *p == part).unwrap_or_else(|| {
                parts.push(part);
                parts.len() - 1
            });
            of.push(i);
        }
        (parts, of)
    }

    /// The tiles layer `l` runs on.
    pub(crate) fn tiles(&self, l: usize, target: &Target) -> Range<Tile> {
        match self.ipus() {
            None => 0..target.tiles(),
            Some(ipus) => {
                let per = target.spec().tiles();
                ipus[l] * per..(ipus[l] + 1) * per
            }
        }
    }
}

/// The IPU of each of `weight.len() >= ipus` items in contiguous
/// stages over `ipus` IPUs (at least one item each) minimising the
/// heaviest stage (dynamic programming over the split points; the
/// counts are small).
pub(super) fn contiguous_split(weight: &[u128], ipus: u32) -> Vec<u32> {
    let n = weight.len();
    let ipus = (ipus.max(1) as usize).min(n.max(1));
    // `None` where no split reaches.
    let mut best: Vec<Vec<Option<(u128, usize)>>> = vec![vec![None; n + 1]; ipus + 1];
    best[0][0] = Some((0, 0));
    let prefix: Vec<u128> = core::iter::once(0)
        .chain(weight.iter().scan(0u128, |s, &w| {
            *s = s.saturating_add(w);
            Some(*s)
        }))
        .collect();
    for k in 1..=ipus {
        for end in k..=n {
            for start in (k - 1)..end {
                let Some((prev, _)) = best[k - 1][start] else {
                    continue;
                };
                let cost = prev.max(prefix[end] - prefix[start]);
                if best[k][end].is_none_or(|(b, _)| cost < b) {
                    best[k][end] = Some((cost, start));
                }
            }
        }
    }
    let mut ipu_of = vec![0u32; n];
    let mut end = n;
    for k in (1..=ipus).rev() {
        // Reached: every k <= n items split into k non-empty stages.
        let (_, start) = best[k][end].expect("a split of n >= ipus items");
        ipu_of[start..end].fill((k - 1) as u32);
        end = start;
    }
    ipu_of
}

/// Cycles of one stage on one IPU (a [`Part`]) for one micro-batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageCycles {
    /// Where: the stage and its IPU.
    pub part: Part,
    /// The forward pass (and, on the last stage, the loss).
    pub forward: u64,
    /// The backward pass.
    pub backward: u64,
}

/// The cycles of a training run's profile by stage part ([`Placement::parts`]):
/// every compute set and exchange named after a layer goes to that
/// layer's part, forward or backward by its name; the rest (the loss,
/// host transfers, the parameters' staging, syncs) is shared out in
/// proportion, so that the parts add up to the profile's total (the
/// sharded, one-after-the-other time).
pub(crate) fn stage_cycles(profile: &Profile, placement: &Placement) -> Vec<StageCycles> {
    let (parts, part_of) = placement.parts_of_layers();
    let mut out: Vec<StageCycles> = parts
        .into_iter()
        .map(|part| StageCycles {
            part,
            ..StageCycles::default()
        })
        .collect();
    let named = profile
        .compute_sets
        .iter()
        .map(|c| (c.name.as_str(), c.cycles))
        .chain(
            profile
                .exchanges
                .iter()
                .map(|e| (e.name.as_str(), e.cycles)),
        );
    let mut attributed = 0u64;
    for (name, cycles) in named {
        let Some((layer, part)) = layer_of(name) else {
            continue;
        };
        let s = &mut out[part_of.get(layer).copied().unwrap_or(0)];
        if is_backward(part) {
            s.backward += cycles;
        } else {
            s.forward += cycles;
        }
        attributed += cycles;
    }
    let rest = profile.total_cycles.saturating_sub(attributed);
    if attributed == 0 {
        out[0].forward += rest;
        return out;
    }
    // Share the rest out in proportion, the rounding on the last stage.
    let mut given = 0;
    let last = out.len() - 1;
    for (i, s) in out.iter_mut().enumerate() {
        let own = s.forward + s.backward;
        let share = if i == last {
            rest - given
        } else {
            (u128::from(rest) * u128::from(own) / u128::from(attributed)) as u64
        };
        given += share;
        // Forward and backward keep their proportions.
        let f = if own == 0 {
            share
        } else {
            (u128::from(share) * u128::from(s.forward) / u128::from(own)) as u64
        };
        s.forward += f;
        s.backward += share - f;
    }
    out
}

/// `layerN.rest` as `(N, rest)`.
fn layer_of(name: &str) -> Option<(usize, &str)> {
    let rest = name.strip_prefix("layer")?;
    let dot = rest.find('.')?;
    Some((rest[..dot].parse().ok()?, &rest[dot + 1..]))
}

/// Whether a layer's compute set or exchange belongs to the backward pass.
fn is_backward(part: &str) -> bool {
    // The MLP's products and activations; a convolution's patches'
    // gradient, their sum into the input's and its move home; pooling's
    // and the residual sum's gradients; batch norm's (and its group's).
    [
        "dw",
        "db",
        "da",
        "dz",
        "activation_grad",
        "bn.grad",
        "dcols",
        "col2im",
        "dx",
        "pool_grad",
        "grad_sum",
    ]
    .iter()
    .any(|p| part.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Activation;

    fn mlp(hidden: &[usize]) -> MlpConfig {
        MlpConfig {
            inputs: 64,
            hidden: hidden.to_vec(),
            classes: 10,
            activation: Activation::Relu,
            batch_norm: false,
        }
    }

    #[test]
    fn memory_placement_balances_contiguous_stages() {
        // Layers of 64x512, 512x512, 512x512, 512x10 parameters.
        let c = mlp(&[512, 512, 512]);
        assert_eq!(
            Placement::by_memory(&c, 1).unwrap(),
            Placement::Ipus(vec![0; 4])
        );
        assert_eq!(
            Placement::by_memory(&c, 2).unwrap(),
            Placement::Ipus(vec![0, 0, 1, 1])
        );
        let p = Placement::by_memory(&c, 4).unwrap();
        assert_eq!(p, Placement::Ipus(vec![0, 1, 2, 3]));
        assert_eq!((p.stages(), p.stage_of(2)), (4, 2));
        assert!(Placement::by_memory(&c, 5).is_err());
    }

    #[test]
    fn names_split_into_layer_and_pass() {
        assert_eq!(layer_of("layer12.dw.gather"), Some((12, "dw.gather")));
        assert_eq!(layer_of("loss"), None);
        assert!(is_backward("activation_grad") && is_backward("bn.grad_sums"));
        assert!(!is_backward("fwd.gather") && !is_backward("bn.stats") && !is_backward("bias_act"));
    }

    #[test]
    fn a_networks_compute_sets_and_exchanges_split_into_forward_and_backward() {
        use crate::ipu::{IpuParams, IpuSpec};
        use crate::model::{Compute, Model, NetLayer, NetworkConfig, NoGroup, Pool2d, PoolKind};
        // Every kind of layer: convolutions (one strided), batch norm, a
        // max and an average pool, parallel branches, a residual block,
        // the head.
        let mut net = NetworkConfig::resnet_mini([2, 6, 6], 3, &[4, 8], &[1, 1]);
        let pool = |kind| {
            NetLayer::Pool(Pool2d {
                kind,
                kernel: (2, 2),
                stride: 1,
                padding: 0,
            })
        };
        net.layers.insert(1, pool(PoolKind::Max));
        net.layers.insert(2, pool(PoolKind::Avg));
        let conv = |kernel: usize| NetLayer::Conv {
            channels: 2,
            kernel,
            stride: 1,
            padding: kernel / 2,
        };
        let branches = vec![vec![NetLayer::BnAct, conv(3)], vec![conv(1)]];
        net.layers.insert(3, NetLayer::Branches(branches));
        let spec = IpuSpec::new(IpuParams {
            tiles: 16,
            ..IpuParams::default()
        })
        .unwrap();
        let mut model = Model::new(&net, Target::single(spec), 2, Compute::F32).unwrap();
        let params = net.init(1).unwrap();
        let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
        model.set_params(&refs).unwrap();
        let mut grads = vec![Vec::new(); params.len()];
        let x: Vec<f32> = (0..2 * 72).map(|i| (i % 7) as f32 / 7.0).collect();
        model
            .train_micro_batch(&x, &[0, 2], 1.0, &mut NoGroup, &mut grads)
            .unwrap();
        let profile = model.last_profile().unwrap();
        // The graph is built forward, then the loss (its compute set) and
        // the parameters' staging (its exchange), then backward: the
        // names before are forward, after backward.
        let sets: Vec<&str> = profile
            .compute_sets
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        let exchanges: Vec<&str> = profile.exchanges.iter().map(|e| e.name.as_str()).collect();
        let mut parts = std::collections::BTreeSet::new();
        for (names, boundary) in [(&sets, "loss"), (&exchanges, "params.stage")] {
            let at = names.iter().position(|n| *n == boundary).unwrap();
            for (i, name) in names.iter().enumerate() {
                let Some((_, part)) = layer_of(name) else {
                    continue;
                };
                assert_eq!(is_backward(part), i > at, "{name}");
                let head = part.split('.').next().unwrap_or(part);
                parts.insert(head.trim_end_matches(|c: char| c.is_ascii_digit()));
            }
        }
        // The network's own backward names are among them.
        for p in [
            "dcols",
            "col2im",
            "dx_join",
            "dx_split",
            "pool_grad",
            "grad_sum",
            "dw",
            "da",
        ] {
            assert!(parts.contains(p), "{p} in {parts:?}");
        }
    }
}
