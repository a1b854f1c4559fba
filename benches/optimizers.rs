//! One optimizer step (LAMB, LARS with momentum, AdamW, SGD with momentum)
//! against the STREAM triad, at 1 Mi and 16 Mi parameters.
//!
//! One group per optimizer and storage mode (`lamb_f32`, `lamb_f16_sr`,
//! ...); inside it, per size, `tessera` (one step over the whole tensor)
//! and `triad` (`a[i] = b[i] + s * c[i]` over three f32 arrays of that
//! length). A step's throughput is the *minimum* bytes it must move: read
//! the weights, gradients and state once, write the weights and state once
//! (LAMB and AdamW in f32: 28 B per parameter; LARS and SGD with momentum:
//! 20 B; with f16 weights and gradients 22 B and 14 B). The triad's is
//! STREAM's 12 B per element. `tessera bench optimizers` measures the same
//! steps and adds a naive scalar implementation as a second reference.
//!
//! Settings as `tessera bench optimizers`: timm's LAMB and PyTorch's AdamW
//! defaults, LARS and SGD with momentum 0.9 and weight decay 1e-4, step 10,
//! f16 weights stored with stochastic rounding, f32 state.
//!
//! Run with `cargo bench --bench optimizers`; filter with e.g.
//! `cargo bench --bench optimizers -- lamb_f32`.

mod support;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use tessera_core::fp::{self, Element, f16};
use tessera_core::optim::{
    AdamW, AdamWConfig, Lamb, LambConfig, Lars, LarsConfig, Param, Precision, Sgd, SgdConfig, Step,
};

use support::{PARAMS, SEED, TRIAD_BYTES, bytes, configure, triad, uniform};

/// The step number of every call (past step 1, where momentum buffers are
/// written without being read).
const STEP: u64 = 10;
/// The parameter's id (it addresses the stochastic-rounding bits).
const ID: u64 = 7;

/// A parameter's buffers: weights and gradients in `W`, `N` f32 state
/// tensors (the first moment or momentum buffer as after some steps).
struct Tensor<W, const N: usize> {
    w: Vec<W>,
    g: Vec<W>,
    state: [Vec<f32>; N],
}

impl<W: Element, const N: usize> Tensor<W, N> {
    fn new(n: usize, round: impl Fn(&[f32]) -> Vec<W>) -> Self {
        let (w, g) = (uniform(n, 0, 1.0), uniform(n, 1, 0.01));
        let (w, g) = (round(&w), round(&g));
        let state = core::array::from_fn(|k| {
            g.iter()
                .map(|g| {
                    let g = g.load();
                    if k == 0 { 0.5 * g } else { 0.5 * g * g }
                })
                .collect()
        });
        Self { w, g, state }
    }

    fn param(&mut self) -> Param<'_, W, W, f32, N> {
        let state = self.state.each_mut().map(Vec::as_mut_slice);
        Param::new(ID, &mut self.w, &self.g, state)
    }
}

/// Benches one step, `step(param)`, with weights and gradients in `W`
/// (`round` makes them from f32), and the triad.
fn optimizer<W: Element, const N: usize>(
    c: &mut Criterion,
    name: &str,
    round: impl Fn(&[f32]) -> Vec<W>,
    step: impl Fn(&mut Param<'_, W, W, f32, N>),
) {
    let mut group = c.benchmark_group(name);
    let per_param = 3 * size_of::<W>() + 2 * N * size_of::<f32>();
    for n in PARAMS {
        configure(&mut group, n);
        let mut tensor = Tensor::<W, N>::new(n, &round);
        bytes(&mut group, n * per_param, 0);
        group.bench_function(BenchmarkId::new("tessera", n), |b| {
            b.iter(|| step(black_box(&mut tensor.param())));
        });
        drop(tensor);
        let (mut a, x, y) = (vec![0f32; n], vec![1f32; n], vec![2f32; n]);
        bytes(&mut group, n * TRIAD_BYTES, 0);
        group.bench_function(BenchmarkId::new("triad", n), |b| {
            b.iter(|| triad(black_box(&mut a), black_box(&x), black_box(&y), 3.0));
        });
    }
    group.finish();
}

fn f32s(x: &[f32]) -> Vec<f32> {
    x.to_vec()
}

fn f16s(x: &[f32]) -> Vec<f16> {
    let mut h = vec![f16::ZERO; x.len()];
    fp::f32_to_half_slice(x, &mut h);
    h
}

fn optimizers(c: &mut Criterion) {
    let precision = Precision {
        seed: SEED,
        ..Precision::default()
    };
    let t = Step::after(STEP - 1);
    let lamb = Lamb::new(LambConfig::default()).expect("valid");
    let lars = Lars::new(LarsConfig {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..LarsConfig::default()
    })
    .expect("valid");
    let adamw = AdamW::new(AdamWConfig::default()).expect("valid");
    let sgd = Sgd::new(SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 1e-4,
        ..SgdConfig::default()
    })
    .expect("valid");
    let p = &precision;
    optimizer::<f32, 2>(c, "lamb_f32", f32s, |x| lamb.step(t, p, x));
    optimizer::<f16, 2>(c, "lamb_f16_sr", f16s, |x| lamb.step(t, p, x));
    optimizer::<f32, 1>(c, "lars_f32", f32s, |x| lars.step(t, p, x));
    optimizer::<f16, 1>(c, "lars_f16_sr", f16s, |x| lars.step(t, p, x));
    let two = "two state tensors";
    optimizer::<f32, 2>(c, "adamw_f32", f32s, |x| adamw.step(t, p, x).expect(two));
    optimizer::<f16, 2>(c, "adamw_f16_sr", f16s, |x| adamw.step(t, p, x).expect(two));
    optimizer::<f32, 1>(c, "sgd_f32", f32s, |x| sgd.step(t, p, x));
    optimizer::<f16, 1>(c, "sgd_f16_sr", f16s, |x| sgd.step(t, p, x));
}

criterion_group!(benches, optimizers);
criterion_main!(benches);
