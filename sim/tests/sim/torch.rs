//! PyTorch's conv2d, pooling and batch norm, forward and backward, against
//! the simulator's layers on tiles: the vectors in `tests/data/torch` were
//! written once by `tools/torch_vectors.py` with torch (its header says
//! which version and how to run it again); torch is not needed here.
//!
//! Tolerance: `|got - want| <= TOL (scale + |want|)`, `scale` the largest
//! `|want|` of the tensor (at least 1), `want` torch's float64 result on the
//! same f32 inputs. The absolute part is at the tensor's scale because sums
//! of up to 288 products cancel to values near zero; f32's unit roundoff is
//! 6e-8, and torch's own f32 kernels stay within 7% of this bound on every
//! vector (2% but for the batch norm with a large mean; the script checks
//! it and records `torch_f32_err`). The semantic slips these tests exist
//! for are far above it (each seen failing by altering the vectors): a
//! biased variance in the running statistics moves them by 12 to 118
//! times the tolerance in four of the five cases, `eps` 1e-7 instead of
//! 1e-5 or momentum 0.2 instead of 0.1 fail the training cases, and an
//! average not counting the padding is off by a third or more on the
//! border.

use std::path::Path;

use serde::Deserialize;
use serde::de::DeserializeOwned;
use tessera_sim::model::{
    Activation, Compute, Conv2d, MlpConfig, Model, Pool2d, PoolKind, batch_norm2d_on_tiles,
    conv2d_on_tiles, pool2d_on_tiles,
};

use crate::support::{bits, target};

const TOL: f64 = 1e-5;

/// Every layer runs on these tile counts, with the same bits.
const TILES: [u32; 3] = [1, 4, 16];

/// A vector file's common part.
#[derive(Deserialize)]
struct File<C> {
    torch: String,
    tol: f64,
    cases: Vec<C>,
}

/// Reads `tests/data/torch/{name}`: missing, unreadable or empty vectors
/// fail the test.
fn load<T: DeserializeOwned>(name: &str) -> T {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/torch")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e} (written by tools/torch_vectors.py)",
            path.display()
        )
    });
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn cases<C: DeserializeOwned>(name: &str) -> Vec<C> {
    let file: File<C> = load(name);
    assert_eq!(file.tol, TOL, "{name}: written for another tolerance");
    assert!(!file.cases.is_empty(), "{name}: no cases");
    println!(
        "{name}: {} cases from torch {}",
        file.cases.len(),
        file.torch
    );
    file.cases
}

/// Asserts `got` is `want` within the tolerance; returns the worst error
/// in units of it.
fn close(got: &[f32], want: &[f64], what: &str) -> f64 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    assert!(!want.is_empty(), "{what}: empty");
    let scale = want.iter().fold(1.0f64, |m, w| m.max(w.abs()));
    let mut worst = 0.0f64;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs() / (TOL * (scale + w.abs()));
        assert!(err <= 1.0, "{what}[{i}]: {g} vs torch {w}");
        worst = worst.max(err);
    }
    worst
}

/// Checks each `(got, want, name)` on `tiles` tiles, and that its bits are
/// those of the first tile count's run `first`.
fn check(case: &str, tiles: u32, runs: &[(&[f32], &[f64], &str)], first: &mut Vec<Vec<u32>>) {
    let mut worst = 0.0f64;
    for (k, (got, want, what)) in runs.iter().enumerate() {
        worst = worst.max(close(
            got,
            want,
            &format!("{case} on {tiles} tiles: {what}"),
        ));
        if first.len() == k {
            first.push(bits(got));
        }
        assert_eq!(bits(got), first[k], "{case}: {what} on {tiles} tiles");
    }
    println!("{case} on {tiles} tiles: worst error {worst:.3} of the tolerance");
}

/// A window's geometry in torch's names, as conv2d and pooling take it,
/// with the output size torch gave.
#[derive(Deserialize)]
struct Window {
    kernel: (usize, usize),
    stride: usize,
    padding: usize,
    input: (usize, usize),
    output: (usize, usize),
}

#[derive(Deserialize)]
struct ConvCase {
    name: String,
    n: usize,
    in_channels: usize,
    out_channels: usize,
    #[serde(flatten)]
    window: Window,
    x: Vec<f32>,
    w: Vec<f32>,
    dy: Vec<f32>,
    y: Vec<f64>,
    dx: Vec<f64>,
    dw: Vec<f64>,
}

#[test]
fn conv2d_matches_torch_forward_and_backward() {
    for c in cases::<ConvCase>("conv2d.json") {
        let conv = Conv2d {
            in_channels: c.in_channels,
            out_channels: c.out_channels,
            kernel: c.window.kernel,
            stride: c.window.stride,
            padding: c.window.padding,
        };
        let s = conv.on(c.n, c.window.input).expect(&c.name);
        assert_eq!(s.output, c.window.output, "{}: output size", c.name);
        let mut first = Vec::new();
        for tiles in TILES {
            let run = conv2d_on_tiles(&s, target(tiles), &c.x, &c.w, &c.dy).expect(&c.name);
            let runs = [
                (&run.y[..], &c.y[..], "y"),
                (&run.dx, &c.dx, "dx"),
                (&run.dw, &c.dw, "dw"),
            ];
            check(&c.name, tiles, &runs, &mut first);
        }
    }
}

#[derive(Deserialize)]
struct PoolCase {
    name: String,
    kind: String,
    n: usize,
    channels: usize,
    #[serde(flatten)]
    window: Window,
    x: Vec<f32>,
    dy: Vec<f32>,
    y: Vec<f64>,
    dx: Vec<f64>,
}

#[test]
fn pooling_matches_torch_forward_and_backward() {
    for c in cases::<PoolCase>("pool2d.json") {
        // torch's max_pool2d, avg_pool2d with count_include_pad=True,
        // adaptive_avg_pool2d(x, 1).
        let w = &c.window;
        let window = |kind| Pool2d {
            kind,
            kernel: w.kernel,
            stride: w.stride,
            padding: w.padding,
        };
        let p = match c.kind.as_str() {
            "max" => window(PoolKind::Max),
            "avg" => window(PoolKind::Avg),
            "global" => Pool2d::global(w.input),
            other => panic!("{}: unknown pooling {other}", c.name),
        };
        assert_eq!(
            (p.kernel, p.stride, p.padding),
            (w.kernel, w.stride, w.padding)
        );
        let s = p.on(c.n, c.channels, w.input).expect(&c.name);
        assert_eq!(s.output, w.output, "{}: output size", c.name);
        let mut first = Vec::new();
        for tiles in TILES {
            let run = pool2d_on_tiles(&p, &s, target(tiles), &c.x, &c.dy).expect(&c.name);
            let runs = [(&run.y[..], &c.y[..], "y"), (&run.dx, &c.dx, "dx")];
            check(&c.name, tiles, &runs, &mut first);
        }
    }
}

/// The batch-norm file: training and evaluation cases.
#[derive(Deserialize)]
struct BnFile {
    torch: String,
    tol: f64,
    eps: f32,
    momentum: f32,
    train: Vec<BnTrain>,
    /// Means many standard deviations from zero.
    train_large_mean: Vec<BnTrain>,
    eval: Vec<BnEval>,
}

/// What every batch-norm case has.
#[derive(Deserialize)]
struct BnInputs {
    name: String,
    n: usize,
    channels: usize,
    input: (usize, usize),
    x: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
}

/// `relu(batch_norm(x, zeros, ones, gamma, beta, training=True))` and its
/// backward from `dy`; the running statistics after the step.
#[derive(Deserialize)]
struct BnTrain {
    #[serde(flatten)]
    on: BnInputs,
    dy: Vec<f32>,
    y: Vec<f64>,
    dx: Vec<f64>,
    dgamma: Vec<f64>,
    dbeta: Vec<f64>,
    running_mean: Vec<f64>,
    running_var: Vec<f64>,
}

/// `relu(batch_norm(x, running_mean, running_var, gamma, beta,
/// training=False))`.
#[derive(Deserialize)]
struct BnEval {
    #[serde(flatten)]
    on: BnInputs,
    running_mean: Vec<f32>,
    running_var: Vec<f32>,
    y: Vec<f64>,
}

fn bn_file() -> BnFile {
    let f: BnFile = load("batch_norm2d.json");
    assert_eq!(f.tol, TOL, "written for another tolerance");
    let counts = [f.train.len(), f.train_large_mean.len(), f.eval.len()];
    assert!(!counts.contains(&0), "no cases: {counts:?}");
    // The simulator's constants are torch's defaults, which wrote the file.
    assert_eq!(
        (f.eps, f.momentum),
        (
            tessera_sim::model::BN_EPSILON,
            tessera_sim::model::BN_MOMENTUM
        )
    );
    println!("batch_norm2d.json: {counts:?} cases from torch {}", f.torch);
    f
}

/// Runs the training cases on every tile count.
fn check_bn_training(cases: &[BnTrain]) {
    for c in cases {
        let on = &c.on;
        let shape = (on.n, on.channels, on.input.0 * on.input.1);
        let mut first = Vec::new();
        for tiles in TILES {
            let run =
                batch_norm2d_on_tiles(shape, target(tiles), &on.x, (&on.gamma, &on.beta), &c.dy)
                    .expect(&on.name);
            let runs = [
                (&run.y[..], &c.y[..], "y"),
                (&run.dx, &c.dx, "dx"),
                (&run.dgamma, &c.dgamma, "dgamma"),
                (&run.dbeta, &c.dbeta, "dbeta"),
                (&run.running.0, &c.running_mean, "running_mean"),
                (&run.running.1, &c.running_var, "running_var"),
            ];
            check(&on.name, tiles, &runs, &mut first);
        }
    }
}

#[test]
fn batch_norm_in_training_matches_torch_forward_backward_and_running_statistics() {
    check_bn_training(&bn_file().train);
}

/// Torch's CPU kernel takes the mean, then the sum of squared deviations
/// from it: its f32 results keep this tolerance with a mean 28 standard
/// deviations from zero. A variance taken as `E[x^2] - E[x]^2` in f32
/// cancels about `2 log2(mean / std)` bits; the tiles take two passes too.
#[test]
fn batch_norm_keeps_f32_precision_when_the_mean_dwarfs_the_spread() {
    check_bn_training(&bn_file().train_large_mean);
}

/// `relu(batch_norm(x))` in evaluation, per pixel, through the only public
/// path that uses running statistics: the MLP's inference graph. In
/// evaluation a pixel's channels are normalised on their own, so each pixel
/// is one sample of `c + 1` features: identity products around a hidden
/// layer with batch norm and ReLU, the extra feature held at zero (`beta =
/// -1`). With the logits `a` and the dead logit 0, the loss of label `l` is
/// `LSE(a) - a_l`: `a_l` is the dead label's loss minus label `l`'s.
fn bn_eval_through_mlp(c: &BnEval, tiles: u32) -> Vec<f32> {
    let on = &c.on;
    let (ch, hw) = (on.channels, on.input.0 * on.input.1);
    let width = ch + 1;
    let cfg = MlpConfig {
        inputs: width,
        hidden: vec![width],
        classes: width,
        activation: Activation::Relu,
        batch_norm: true,
    };
    let mut mlp = Model::new(&cfg.network(), target(tiles), 1, Compute::F32).expect(&on.name);
    let eye: Vec<f32> = (0..width * width)
        .map(|k| if k / width == k % width { 1.0 } else { 0.0 })
        .collect();
    let zeros = vec![0.0; width];
    let with = |v: &[f32], last: f32| [v, &[last]].concat();
    let (gamma, beta) = (with(&on.gamma, 1.0), with(&on.beta, -1.0));
    let params: [&[f32]; 6] = [&eye, &zeros, &gamma, &beta, &eye, &zeros];
    mlp.set_params(&params).expect(&on.name);
    let buffers = [
        (
            "layer0.bn.running_mean".to_string(),
            with(&c.running_mean, 0.0),
        ),
        (
            "layer0.bn.running_var".to_string(),
            with(&c.running_var, 1.0),
        ),
    ];
    mlp.set_buffers(&buffers).expect(&on.name);
    let mut y = vec![0.0; on.x.len()];
    for (s, p) in (0..on.n).flat_map(|s| (0..hw).map(move |p| (s, p))) {
        let at = |k: usize| (s * ch + k) * hw + p;
        let pixel: Vec<f32> = (0..width)
            .map(|k| if k < ch { on.x[at(k)] } else { 0.0 })
            .collect();
        let mut loss = |label: usize| {
            mlp.evaluate(&pixel, &[label as u32])
                .expect(&on.name)
                .loss_sum
        };
        let lse = loss(ch);
        for k in 0..ch {
            y[at(k)] = lse - loss(k);
        }
    }
    y
}

#[test]
fn batch_norm_in_evaluation_matches_torch() {
    for c in bn_file().eval {
        let mut first = Vec::new();
        for tiles in [1, 4] {
            let y = bn_eval_through_mlp(&c, tiles);
            check(&c.on.name, tiles, &[(&y, &c.y, "y")], &mut first);
        }
    }
}
