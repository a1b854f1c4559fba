//! Parallel branches joined by channel concatenation
//! ([`NetLayer::Branches`]): gradients against central differences of the
//! f64 oracle, the same bits on every tile count, parameter names, the
//! checks, and a checkpoint of a branched network resumed bitwise.

use tessera_sim::ipu::{IpuParams, IpuSpec, Target};
use tessera_sim::model::{Compute, Model, ModelError, NetLayer, NetworkConfig, NoGroup};
use tessera_sim::train::{RunOptions, TrainConfig, Trainer};

use super::network::check_gradients_against_the_oracle;

fn conv(channels: usize, kernel: usize, stride: usize) -> NetLayer {
    NetLayer::Conv {
        channels,
        kernel,
        stride,
        padding: kernel / 2,
    }
}

/// resnet-mini (width 3, a block) with its block of a 3x3 and a 1x1
/// branch of 2 channels each.
pub(super) fn branched() -> NetworkConfig {
    NetworkConfig::resnet_mini([1, 6, 6], 3, &[3], &[1]).with_branches(2)
}

/// Three branches ending at stride 2 (one of them two convolutions deep)
/// after a stem convolution: 2, 1 and 3 channels.
fn three_branches() -> NetworkConfig {
    NetworkConfig {
        layers: vec![
            conv(3, 3, 1),
            NetLayer::Branches(vec![
                vec![NetLayer::BnAct, conv(2, 3, 2)],
                vec![conv(1, 1, 2)],
                vec![
                    NetLayer::BnAct,
                    conv(3, 3, 1),
                    NetLayer::BnAct,
                    conv(3, 3, 2),
                ],
            ]),
            NetLayer::BnAct,
            NetLayer::GlobalAvgPool,
        ],
        ..NetworkConfig::resnet_mini([1, 6, 6], 3, &[3], &[1])
    }
}

#[test]
fn branch_gradients_match_finite_differences_of_the_oracle() {
    for net in [branched(), three_branches()] {
        let checked = check_gradients_against_the_oracle(&net, 16);
        assert!(checked > 20, "{checked}");
    }
}

#[test]
fn branches_give_the_same_bits_on_every_tile_count() {
    let data = super::network::images();
    let n = 4;
    let (inputs, labels) = (&data.inputs()[..n * 36], &data.labels()[..n]);
    for net in [branched(), three_branches()] {
        let params = net.init(5).unwrap();
        let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
        let run = |tiles: u32| {
            let spec = IpuSpec::new(IpuParams {
                tiles,
                ..IpuParams::default()
            })
            .unwrap();
            let mut model = Model::new(&net, Target::single(spec), n, Compute::F32).unwrap();
            model.set_params(&refs).unwrap();
            let mut grads = vec![Vec::new(); params.len()];
            let out = model
                .train_micro_batch(inputs, labels, 1.0, &mut NoGroup, &mut grads)
                .unwrap();
            let bits: Vec<Vec<u32>> = grads
                .iter()
                .map(|g| g.iter().map(|v| v.to_bits()).collect())
                .collect();
            (out.loss_sum.to_bits(), out.correct, bits)
        };
        let first = run(4);
        for tiles in [16, 64] {
            assert_eq!(run(tiles), first, "{tiles} tiles");
        }
    }
}

#[test]
fn branch_parameters_are_named_in_flattened_order() {
    let names: Vec<String> = branched()
        .params()
        .unwrap()
        .into_iter()
        .map(|p| format!("{}{:?}", p.name, p.shape))
        .collect();
    // layer0 stem; 1-6 the residual block; 7 the split, 8-9 the 3x3
    // branch, 10 the step to the next, 11-12 the 1x1 branch, 13 the
    // concat; 14 batch norm over both branches' 4 channels; 16 the head.
    let tail = [
        "layer8.bn.gamma[3]",
        "layer8.bn.beta[3]",
        "layer9.weight[3, 3, 3, 2]",
        "layer11.bn.gamma[3]",
        "layer11.bn.beta[3]",
        "layer12.weight[1, 1, 3, 2]",
        "layer14.bn.gamma[4]",
        "layer14.bn.beta[4]",
        "layer16.weight[4, 3]",
        "layer16.bias[3]",
    ];
    assert_eq!(names[names.len() - tail.len()..], tail);
}

#[test]
fn branches_that_cannot_be_concatenated_are_refused() {
    let with = |layers| NetworkConfig {
        layers,
        ..NetworkConfig::resnet_mini([1, 6, 6], 3, &[3], &[1])
    };
    let end = [NetLayer::BnAct, NetLayer::GlobalAvgPool];
    let one = with(
        [
            vec![NetLayer::Branches(vec![vec![conv(2, 3, 1)]])],
            end.to_vec(),
        ]
        .concat(),
    );
    assert!(matches!(
        one.validate(),
        Err(ModelError::InvalidNetwork { layer: 0, ref reason }) if reason.contains("at least two")
    ));
    let apart = NetLayer::Branches(vec![vec![conv(2, 3, 1)], vec![conv(2, 3, 2)]]);
    let apart = with([vec![conv(3, 3, 1), apart], end.to_vec()].concat());
    assert!(matches!(
        apart.validate(),
        Err(ModelError::InvalidNetwork { layer: 1, ref reason })
            if reason.contains("branch 1 ends at 3x3, branch 0 at 6x6")
    ));
}

#[test]
fn a_branched_run_resumes_bitwise_from_its_checkpoint() {
    let dir = std::env::temp_dir().join(format!("tessera-branches-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let config = || TrainConfig {
        network: Some(branched()),
        ..super::network::config(1, 2, 2)
    };
    let straight = super::network::run(config());
    let save = RunOptions {
        checkpoint: Some(path.clone()),
        stop_after_epochs: Some(1),
        ..RunOptions::default()
    };
    let images = super::network::images;
    Trainer::new(config(), images())
        .unwrap()
        .run(&save, &|_| {})
        .unwrap();
    // The branches' batch norms are in the checkpoint by name.
    let bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    for name in [
        "layer8.bn.running_mean",
        "layer12.weight",
        "layer14.bn.gamma",
    ] {
        assert!(text.contains(name), "{name} not saved");
    }
    let resume = RunOptions {
        resume: Some(path.clone()),
        ..RunOptions::default()
    };
    let rest = Trainer::new(config(), images())
        .unwrap()
        .run(&resume, &|_| {})
        .unwrap();
    assert_eq!(rest.fingerprint, straight.fingerprint);
    std::fs::remove_dir_all(&dir).unwrap();
}
