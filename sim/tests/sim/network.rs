//! The convolutional network in the trainer: resnet-mini end to end,
//! bitwise the same weights for every split of the global batch with
//! batch norm per replica (and per split of the same replicas with batch
//! norm over all of them), every precision mode, resume, gradients
//! against finite differences of an f64 oracle, a pinned run.

use tessera_sim::data::{Dataset, Source};
use tessera_sim::ipu::{IpuParams, IpuSpec, Target};
use tessera_sim::model::{
    BnGroup, Compute, Model, NetLayer, NetworkConfig, NoGroup, Pool2d, PoolKind,
};
use tessera_sim::pod::PodSpec;
use tessera_sim::train::{
    NamedOptimizer, OptimizerConfig, PrecisionMode, RunOptions, Summary, TrainConfig, Trainer,
};

use super::train::{assert_same, loss_bits};

/// 96 synthetic 1x6x6 images of 3 classes.
pub(super) fn images() -> Dataset {
    Source::Images {
        samples: 96,
        shape: (1, 6, 6),
        classes: 3,
        seed: 3,
    }
    .load()
    .unwrap()
}

/// A small resnet-mini (widths 4, 8; a block each) over 2 epochs of a
/// global batch of 16 (4 micro-batches of 4).
pub(super) fn config(instances: usize, replicas: usize, accumulation: usize) -> TrainConfig {
    TrainConfig {
        network: Some(NetworkConfig::resnet_mini([1, 6, 6], 3, &[4, 8], &[1, 1])),
        pod: PodSpec::pod16(),
        instances,
        replicas,
        micro_batch: 4,
        gradient_accumulation: accumulation,
        device_iterations: 2,
        epochs: 2,
        warmup_steps: 2,
        optimizer: OptimizerConfig::named("lamb", 0.01).unwrap(),
        check_replicas_every: 3,
        ..TrainConfig::default()
    }
}

pub(super) fn run(config: TrainConfig) -> Summary {
    Trainer::new(config, images())
        .unwrap()
        .run(&RunOptions::default(), &|_| {})
        .unwrap()
}

fn with_bn(c: TrainConfig, group: BnGroup) -> TrainConfig {
    let mut net = c.network.clone().unwrap();
    net.bn_group = group;
    TrainConfig {
        network: Some(net),
        ..c
    }
}

#[test]
fn batch_norm_per_replica_gives_the_same_bits_on_every_split() {
    let first = run(config(1, 1, 4));
    assert!(first.steps.iter().all(|s| s.loss.is_finite()));
    for (i, r, a) in [(1, 2, 2), (2, 2, 2), (1, 4, 1), (2, 4, 1), (4, 4, 1)] {
        assert_same(&first, &run(config(i, r, a)), &format!("{i} x {r} x {a}"));
    }
}

#[test]
fn batch_norm_over_all_replicas_depends_on_the_replicas_only() {
    // The statistics of one accumulation step cover every replica's
    // micro-batch: the same replicas split over instances give the same
    // bits; the same global batch over fewer replicas does not.
    let all = |i, r, a| with_bn(config(i, r, a), BnGroup::All);
    let four = run(all(1, 4, 1));
    assert_same(&four, &run(all(2, 4, 1)), "2 instances x 2 replicas");
    assert_same(&four, &run(all(4, 4, 1)), "4 instances x 1 replica");
    let two = run(all(1, 2, 2));
    assert_ne!(loss_bits(&four), loss_bits(&two));
}

#[test]
fn every_precision_mode_trains() {
    for precision in [
        PrecisionMode::Fp32,
        PrecisionMode::Mixed,
        PrecisionMode::HALF_SR,
        PrecisionMode::HALF_RN,
    ] {
        let s = run(TrainConfig {
            precision,
            epochs: 3,
            ..config(1, 2, 2)
        });
        let losses: Vec<f32> = s.steps.iter().map(|r| r.loss).collect();
        assert!(
            losses.iter().all(|l| l.is_finite()),
            "{precision}: {losses:?}"
        );
        let (head, tail) = (
            losses[..3].iter().sum::<f32>(),
            losses[losses.len() - 3..].iter().sum::<f32>(),
        );
        assert!(
            tail < head,
            "{precision}: the loss did not fall: {losses:?}"
        );
    }
}

#[test]
fn a_resumed_network_run_is_bitwise_the_uninterrupted_one() {
    let dir = std::env::temp_dir().join(format!("tessera-network-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let with = |i, r, a| TrainConfig {
        precision: PrecisionMode::Mixed,
        ..config(i, r, a)
    };
    let straight = run(with(1, 2, 2));
    let save = RunOptions {
        checkpoint: Some(path.clone()),
        stop_after_epochs: Some(1),
        ..RunOptions::default()
    };
    Trainer::new(with(1, 2, 2), images())
        .unwrap()
        .run(&save, &|_| {})
        .unwrap();
    // The batch-norm running statistics are in the checkpoint by name.
    let bytes = std::fs::read(&path).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        text.contains("layer2.bn.running_mean"),
        "no running statistics saved"
    );
    for (i, r, a) in [(1, 2, 2), (1, 4, 1)] {
        let resume = RunOptions {
            resume: Some(path.clone()),
            ..RunOptions::default()
        };
        let rest = Trainer::new(with(i, r, a), images())
            .unwrap()
            .run(&resume, &|_| {})
            .unwrap();
        let half = straight.steps.len() / 2;
        assert_eq!(loss_bits(&rest), loss_bits(&straight)[half..]);
        assert_eq!(rest.fingerprint, straight.fingerprint, "{i} x {r} x {a}");
        // The running statistics are the evaluating replica's (replica
        // 0's micro-batches): the same only on the same split.
        if (i, r, a) == (1, 2, 2) {
            assert_eq!(rest.test.test_accuracy, straight.test.test_accuracy);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_small_resnet_mini_run_is_pinned() {
    // Value stability: a change here changes every trained network.
    let s = run(config(2, 4, 1));
    assert_eq!(format!("{:016x}", s.fingerprint), "6ca94bd1ce6dc639");
}

#[test]
fn resnet_mini_fits_one_mk2_at_micro_batch_8() {
    // The default resnet-mini (digits as 1x8x8, widths 16, 32) at
    // micro-batch 8 in f16. With every channel whole on one of a few tiles
    // and each layer's blocks from tile 0, tile 0 needed 701,968 bytes of
    // 638,976; batch norm's row blocks spread the feature maps.
    let net = NetworkConfig::resnet_mini([1, 8, 8], 10, &[16, 32], &[1, 1]);
    let target = Target::single(IpuSpec::MK2_GC200);
    let model = Model::new(&net, target, 8, Compute::F16).unwrap();
    let fullest = model.memory().summary(1).max;
    assert!(fullest <= IpuSpec::MK2_GC200.memory_per_tile(), "{fullest}");
}

#[test]
fn networks_that_do_not_fit_together_are_refused() {
    let bad = |layers: Vec<NetLayer>| NetworkConfig {
        layers,
        ..NetworkConfig::resnet_mini([1, 6, 6], 3, &[4], &[1])
    };
    let conv = |channels, stride| NetLayer::Conv {
        channels,
        kernel: 3,
        stride,
        padding: 1,
    };
    // No global pool before the head.
    assert!(bad(vec![conv(4, 1)]).validate().is_err());
    // A residual body that changes the channels.
    let res = NetLayer::Residual(vec![conv(8, 1)]);
    assert!(
        bad(vec![conv(4, 1), res, NetLayer::GlobalAvgPool])
            .validate()
            .is_err()
    );
    // A window larger than the map.
    let pool = NetLayer::Pool(Pool2d {
        kind: PoolKind::Max,
        kernel: (9, 9),
        stride: 1,
        padding: 0,
    });
    assert!(bad(vec![pool, NetLayer::GlobalAvgPool]).validate().is_err());
    let ok = vec![conv(4, 2), NetLayer::BnAct, NetLayer::GlobalAvgPool];
    assert!(bad(ok).validate().is_ok());
}

/// The f64 oracle of a network of square convolutions, batch norm
/// (training statistics, biased variance) with ReLU, residual blocks,
/// parallel branches concatenated by channels, global average pooling
/// and the dense head: the sum over samples of the cross-entropy. Feature
/// maps are `[c][n][h w]`.
pub(super) mod oracle {
    use tessera_sim::model::NetLayer;

    pub(super) type Maps = Vec<Vec<Vec<f64>>>;

    pub(super) struct Params<'a> {
        pub(super) values: &'a [Vec<f64>],
        pub(super) next: usize,
    }

    impl Params<'_> {
        fn take(&mut self) -> &[f64] {
            self.next += 1;
            &self.values[self.next - 1]
        }
    }

    #[allow(clippy::needless_range_loop)] // the indices are the formula
    fn conv(
        x: &Maps,
        w: &[f64],
        (out, k, stride, pad): (usize, usize, usize, usize),
        (h, wd): (usize, usize),
    ) -> (Maps, (usize, usize)) {
        let (cin, n) = (x.len(), x[0].len());
        let (oh, ow) = (
            (h + 2 * pad - k) / stride + 1,
            (wd + 2 * pad - k) / stride + 1,
        );
        let mut y = vec![vec![vec![0.0; oh * ow]; n]; out];
        for o in 0..out {
            for s in 0..n {
                for p in 0..oh * ow {
                    let (py, px) = (p / ow, p % ow);
                    let mut acc = 0.0;
                    for t in 0..k * k {
                        let (iy, ix) = (
                            (py * stride + t / k) as isize - pad as isize,
                            (px * stride + t % k) as isize - pad as isize,
                        );
                        if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                            continue;
                        }
                        for c in 0..cin {
                            // The product's weight is [kh kw c_in, c_out].
                            acc += x[c][s][iy as usize * wd + ix as usize]
                                * w[(t * cin + c) * out + o];
                        }
                    }
                    y[o][s][p] = acc;
                }
            }
        }
        (y, (oh, ow))
    }

    fn bn_relu(x: &Maps, gamma: &[f64], beta: &[f64]) -> Maps {
        x.iter()
            .enumerate()
            .map(|(c, maps)| {
                let all: Vec<f64> = maps.iter().flatten().copied().collect();
                let m = all.iter().sum::<f64>() / all.len() as f64;
                let v = all.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / all.len() as f64;
                let inv = 1.0 / (v + 1e-5).sqrt();
                maps.iter()
                    .map(|p| {
                        p.iter()
                            .map(|a| (gamma[c] * (a - m) * inv + beta[c]).max(0.0))
                            .collect()
                    })
                    .collect()
            })
            .collect()
    }

    pub(super) fn layers(
        x: Maps,
        hw: (usize, usize),
        layers: &[NetLayer],
        p: &mut Params<'_>,
    ) -> (Maps, (usize, usize)) {
        let (mut x, mut hw) = (x, hw);
        for layer in layers {
            match layer {
                NetLayer::Conv {
                    channels,
                    kernel,
                    stride,
                    padding,
                } => {
                    let w = p.take().to_vec();
                    (x, hw) = conv(&x, &w, (*channels, *kernel, *stride, *padding), hw);
                }
                NetLayer::BnAct => {
                    let (g, b) = (p.take().to_vec(), p.take().to_vec());
                    x = bn_relu(&x, &g, &b);
                }
                NetLayer::Dense { .. } => unreachable!("the oracle's networks are convolutional"),
                NetLayer::GlobalAvgPool => {
                    x = x
                        .iter()
                        .map(|maps| {
                            maps.iter()
                                .map(|m| vec![m.iter().sum::<f64>() / m.len() as f64])
                                .collect()
                        })
                        .collect();
                    hw = (1, 1);
                }
                NetLayer::Residual(body) => {
                    let (y, _) = self::layers(x.clone(), hw, body, p);
                    for (a, b) in x
                        .iter_mut()
                        .flatten()
                        .flatten()
                        .zip(y.iter().flatten().flatten())
                    {
                        *a += b;
                    }
                }
                NetLayer::Branches(branches) => {
                    // Each branch on the same input, the outputs'
                    // channels one after the other.
                    let (input, at) = (std::mem::take(&mut x), hw);
                    for branch in branches {
                        let (y, out) = self::layers(input.clone(), at, branch, p);
                        x.extend(y);
                        hw = out;
                    }
                }
                NetLayer::Pool(_) => panic!(
                    "the oracle covers resnet-mini's layers, which have no pooling inside the body"
                ),
            }
        }
        (x, hw)
    }

    pub(super) fn loss(
        x: Maps,
        hw: (usize, usize),
        net: &[NetLayer],
        params: &[Vec<f64>],
        labels: &[u32],
    ) -> f64 {
        let mut p = Params {
            values: params,
            next: 0,
        };
        let (features, _) = layers(x, hw, net, &mut p);
        let (w, b) = (p.take().to_vec(), p.take().to_vec());
        let classes = b.len();
        let c = features.len();
        let mut total = 0.0;
        for (s, &label) in labels.iter().enumerate() {
            let logits: Vec<f64> = (0..classes)
                .map(|k| {
                    b[k] + (0..c)
                        .map(|i| features[i][s][0] * w[i * classes + k])
                        .sum::<f64>()
                })
                .collect();
            let max = logits.iter().copied().fold(f64::MIN, f64::max);
            let lse = max + logits.iter().map(|z| (z - max).exp()).sum::<f64>().ln();
            total += lse - logits[label as usize];
        }
        total
    }
}

#[test]
fn network_gradients_match_finite_differences_of_an_f64_oracle() {
    let net = NetworkConfig::resnet_mini([1, 6, 6], 3, &[3, 4], &[1, 1]);
    let checked = check_gradients_against_the_oracle(&net, 16);
    assert!(checked > 20, "{checked}");
}

/// The gradients of `net` (over 1x6x6 images, 4 samples) on an IPU of
/// `tiles` tiles against central differences of the oracle: how many
/// were checked.
pub(super) fn check_gradients_against_the_oracle(net: &NetworkConfig, tiles: u32) -> usize {
    let n = 4;
    let spec = IpuSpec::new(IpuParams {
        tiles,
        ..IpuParams::default()
    })
    .unwrap();
    let mut model = Model::new(net, Target::single(spec), n, Compute::F32).unwrap();
    let mut params = net.init(7).unwrap();
    // Non-trivial gamma and beta.
    for (spec, p) in net.params().unwrap().iter().zip(&mut params) {
        if spec.name.ends_with("gamma")
            || spec.name.ends_with("beta")
            || spec.name.ends_with("bias")
        {
            for (i, v) in p.iter_mut().enumerate() {
                *v += 0.1 * ((i % 5) as f32 - 2.0);
            }
        }
    }
    let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    model.set_params(&refs).unwrap();
    let data = images();
    let inputs = data.inputs()[..n * 36].to_vec();
    let labels = data.labels()[..n].to_vec();
    let mut grads = vec![Vec::new(); params.len()];
    model
        .train_micro_batch(&inputs, &labels, 1.0, &mut NoGroup, &mut grads)
        .unwrap();
    let x: oracle::Maps = vec![
        (0..n)
            .map(|s| {
                inputs[s * 36..(s + 1) * 36]
                    .iter()
                    .map(|&v| f64::from(v))
                    .collect()
            })
            .collect(),
    ];
    let p64: Vec<Vec<f64>> = params
        .iter()
        .map(|p| p.iter().map(|&v| f64::from(v)).collect())
        .collect();
    let loss = |p: &[Vec<f64>]| oracle::loss(x.clone(), (6, 6), &net.layers, p, &labels);
    let h = 1e-5;
    let (mut checked, mut wrong) = (0, Vec::new());
    for (t, spec) in net.params().unwrap().iter().enumerate() {
        for i in (0..spec.len()).step_by(spec.len().div_ceil(3).max(1)) {
            let mut plus = p64.clone();
            plus[t][i] += h;
            let mut minus = p64.clone();
            minus[t][i] -= h;
            let fd = (loss(&plus) - loss(&minus)) / (2.0 * h);
            let got = f64::from(grads[t][i]);
            let tol = 2e-3 * (1.0 + fd.abs());
            if (got - fd).abs() > tol {
                wrong.push(format!("{}[{i}]: {got} against {fd}", spec.name));
            }
            checked += 1;
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    checked
}
