//! `--batch-invariant`: the same weights (and loss curve) for every
//! micro-batch size and every instance, replica and accumulation split of
//! a global batch of 128, for an MLP and a residual network without batch
//! norm, in every precision mode; batch norm, `sum` and more than 256
//! replicas refused.

use tessera_core::kernels::ExactSum;
use tessera_sim::data::{Dataset, Source};
use tessera_sim::ipu::{IpuSpec, Target};
use tessera_sim::model::{Compute, Model, NetLayer, NetworkConfig, NoGroup};
use tessera_sim::pod::PodSpec;
use tessera_sim::train::{
    GradReduction, NamedOptimizer, OptimizerConfig, PrecisionMode, RunOptions, Summary,
    TrainConfig, TrainError, Trainer,
};

use super::train::assert_same;

/// 161 synthetic 1x4x4 images of 3 classes: 128 train (one global batch
/// of 128 per epoch), 32 test.
fn images() -> Dataset {
    Source::Images {
        samples: 161,
        shape: (1, 4, 4),
        classes: 3,
        seed: 5,
    }
    .load()
    .unwrap()
}

/// A residual network without batch norm: a convolution, a residual block
/// of two, global average pooling, a hidden dense block (ReLU), the head.
fn residual_net() -> NetworkConfig {
    let conv = NetLayer::Conv {
        channels: 4,
        kernel: 3,
        stride: 1,
        padding: 1,
    };
    NetworkConfig {
        layers: vec![
            conv.clone(),
            NetLayer::Residual(vec![conv.clone(), conv]),
            NetLayer::GlobalAvgPool,
            NetLayer::Dense {
                width: 8,
                batch_norm: false,
            },
        ],
        ..NetworkConfig::resnet_mini([1, 4, 4], 3, &[4], &[1])
    }
}

/// Two steps of 128 samples: `instances` x `replicas` x `micro_batch` x
/// the accumulation that makes 128.
fn config(
    network: Option<NetworkConfig>,
    precision: PrecisionMode,
    (instances, replicas, micro_batch): (usize, usize, usize),
) -> TrainConfig {
    TrainConfig {
        hidden: vec![8],
        network,
        precision,
        pod: PodSpec::pod16(),
        instances,
        replicas,
        micro_batch,
        gradient_accumulation: 128 / (replicas * micro_batch),
        device_iterations: 1,
        epochs: 2,
        warmup_steps: 1,
        optimizer: OptimizerConfig::named("lamb", 0.01).unwrap(),
        check_replicas_every: 1,
        batch_invariant: true,
        ..TrainConfig::default()
    }
}

fn run(config: TrainConfig) -> Summary {
    Trainer::new(config, images())
        .unwrap()
        .run(&RunOptions::default(), &|_| {})
        .unwrap()
}

/// Every micro-batch size of one replica gives the weights of
/// micro-batches of 32.
fn micro_batches_agree(network: Option<NetworkConfig>, precision: PrecisionMode) {
    let at = |m| run(config(network.clone(), precision, (1, 1, m)));
    let reference = at(32);
    assert!(reference.steps.iter().all(|s| s.loss.is_finite()));
    for m in [1, 2, 4, 8, 16] {
        assert_same(&reference, &at(m), &format!("{precision} micro-batch {m}"));
    }
}

#[test]
fn every_micro_batch_size_gives_the_same_mlp() {
    for precision in [PrecisionMode::Fp32, PrecisionMode::Mixed] {
        micro_batches_agree(None, precision);
    }
}

#[test]
fn every_micro_batch_size_gives_the_same_residual_network() {
    for precision in [PrecisionMode::Fp32, PrecisionMode::Mixed] {
        micro_batches_agree(Some(residual_net()), precision);
    }
}

/// `16.16` too: the gradients are summed exactly and rounded once before
/// the f16 update (stochastic rounding seeded per element and step).
#[test]
fn every_micro_batch_size_gives_the_same_half_mlp() {
    for precision in [PrecisionMode::HALF_SR, PrecisionMode::HALF_RN] {
        let at = |m| run(config(None, precision, (1, 1, m)));
        let reference = at(32);
        for m in [1, 8] {
            assert_same(&reference, &at(m), &format!("{precision} micro-batch {m}"));
        }
    }
}

#[test]
fn every_split_over_instances_and_replicas_gives_the_same_weights() {
    for (network, precision) in [
        (None, PrecisionMode::Mixed),
        (Some(residual_net()), PrecisionMode::Fp32),
    ] {
        let at = |split| run(config(network.clone(), precision, split));
        let reference = at((1, 1, 32));
        for split in [(1, 2, 16), (2, 4, 4), (4, 8, 1), (2, 16, 8)] {
            assert_same(&reference, &at(split), &format!("{precision} {split:?}"));
        }
    }
}

/// Without the flag the micro-batch size changes the bits (the test above
/// is not vacuous), and with it the run differs from the normal one only
/// by rounding.
#[test]
fn the_normal_mode_depends_on_the_micro_batch() {
    let normal = |m| {
        run(TrainConfig {
            batch_invariant: false,
            ..config(None, PrecisionMode::Fp32, (1, 1, m))
        })
    };
    let (one, many) = (normal(1), normal(32));
    assert_ne!(one.fingerprint, many.fingerprint);
    let exact = run(config(None, PrecisionMode::Fp32, (1, 1, 32)));
    for (a, b) in exact
        .weights
        .iter()
        .flatten()
        .zip(many.weights.iter().flatten())
    {
        assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{a} against {b}");
    }
}

#[test]
fn batch_norm_and_summed_reductions_are_refused() {
    let refused = |c: TrainConfig, what: &str| match Trainer::new(c, images()) {
        Err(TrainError::Invalid(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("{what}: {other:?}"),
    };
    let mlp = config(None, PrecisionMode::Fp32, (1, 1, 8));
    refused(
        TrainConfig {
            batch_norm: true,
            ..mlp.clone()
        },
        "batch norm",
    );
    let resnet = NetworkConfig::resnet_mini([1, 4, 4], 3, &[4], &[1]);
    refused(
        config(Some(resnet), PrecisionMode::Fp32, (1, 1, 8)),
        "batch norm",
    );
    refused(
        TrainConfig {
            reduction: GradReduction::Sum,
            ..mlp.clone()
        },
        "--reduction sum",
    );
    refused(
        TrainConfig {
            pod: PodSpec::pods(8).unwrap(),
            instances: 8,
            replicas: 512,
            gradient_accumulation: 1,
            ..mlp
        },
        "at most 256",
    );
}

/// The exact gradient states of `samples` samples (of `images()`) run in
/// micro-batches of `m`, and their outputs' exact loss sum.
fn exact_states(
    net: &NetworkConfig,
    compute: Compute,
    m: usize,
    samples: usize,
) -> Vec<Vec<ExactSum>> {
    let data = images();
    let mut model = Model::new(net, Target::single(IpuSpec::MK2_GC200), m, compute).unwrap();
    let params = net.init(3).unwrap();
    let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    model.set_params(&refs).unwrap();
    let mut grads = vec![Vec::new(); params.len()];
    let mut sums = vec![Vec::new(); params.len()];
    let mut loss = ExactSum::new();
    let (mut inputs, mut labels) = (Vec::new(), Vec::new());
    for first in (0..samples).step_by(m) {
        let indices: Vec<usize> = (first..first + m).collect();
        data.gather(&indices, &mut inputs, &mut labels);
        let out = model
            .train_micro_batch(&inputs, &labels, 1.0 / 64.0, &mut NoGroup, &mut grads)
            .unwrap();
        model.add_exact_grads(&mut sums).unwrap();
        loss.merge(&out.losses);
    }
    sums.push(vec![loss]);
    sums
}

/// A sample's activations and gradients do not depend on the micro-batch
/// it is in (no product's reduction is cut by the batch, every other
/// vertex works per row), so the exact states of 16 samples are the same
/// for micro-batches of 1, 4 and 16, in f32 and in f16 compute.
#[test]
fn a_samples_products_do_not_depend_on_its_micro_batch() {
    let mlp = tessera_sim::model::MlpConfig {
        inputs: 16,
        hidden: vec![8, 8],
        classes: 3,
        activation: tessera_sim::model::Activation::Gelu,
        batch_norm: false,
    }
    .network();
    for net in [mlp, residual_net()] {
        for compute in [Compute::F32, Compute::F16] {
            let whole = exact_states(&net, compute, 16, 16);
            assert!(whole.iter().flatten().any(|s| s.to_f32() != 0.0));
            for m in [1, 4] {
                assert!(
                    whole == exact_states(&net, compute, m, 16),
                    "{compute:?} {m}"
                );
            }
        }
    }
}
