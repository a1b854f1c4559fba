//! Optimizers on every backend: each step, forced onto a backend, gives
//! bitwise the scalar backend's (the scalar twins') weights and state.

use super::*;

use tessera_core::fp::{Element, Round};
use tessera_core::optim::{
    Accumulation, AdamW, AdamWConfig, Lamb, LambConfig, Lars, LarsConfig, Param, Partials,
    Precision, Sgd, SgdConfig, Step,
};

/// Weights, gradients and state with special values mixed in.
fn optimizer_data<E: Element>(n: usize, seed: u64, scale: f32) -> Vec<E> {
    f32_data(Kind::Special, n, seed)
        .into_iter()
        .map(|v| E::store(v * scale, Rounding::Nearest, 0))
        .collect()
}

fn bytes<E: Element>(x: &[E]) -> Vec<u8> {
    bytemuck::cast_slice(x).to_vec()
}

/// Runs `step` over fresh copies of one parameter's data (weights,
/// gradients, `N` state tensors, as a piece at `offset`) and returns the
/// bytes of the weights and state afterwards.
fn after_step<W: Element, G: Element, S: Element, const N: usize>(
    n: usize,
    offset: u64,
    step: &dyn Fn(&mut Param<'_, W, G, S, N>),
) -> Vec<Vec<u8>> {
    let mut w: Vec<W> = optimizer_data(n, 1, 1.0);
    let g: Vec<G> = optimizer_data(n, 2, 0.1);
    let mut state: [Vec<S>; N] = core::array::from_fn(|k| optimizer_data(n, 3 + k as u64, 0.01));
    let mut p = Param::new(9, &mut w, &g, state.each_mut().map(|s| &mut s[..])).at_offset(offset);
    step(&mut p);
    let mut out = vec![bytes(&w)];
    out.extend(state.iter().map(|s| bytes(s)));
    out
}

/// Every optimizer's step with storage `W`, `G`, `S`.
fn optimizer_steps<W: Element, G: Element, S: Element>(precision: Precision) -> Vec<Vec<u8>> {
    let step = Step::after(2).with_grad_scale(0.5);
    let sgd = |momentum, nesterov, weight_decay| {
        Sgd::new(SgdConfig {
            lr: 0.1,
            momentum,
            nesterov,
            weight_decay,
            ..SgdConfig::default()
        })
        .unwrap()
    };
    let adamw = AdamW::new(AdamWConfig::default()).unwrap();
    let lamb = Lamb::new(LambConfig::default()).unwrap();
    let lars = Lars::new(LarsConfig {
        momentum: 0.9,
        weight_decay: 1e-4,
        ..LarsConfig::default()
    })
    .unwrap();
    let mut out = Vec::new();
    for (n, offset) in [(37, 0), (1000, 512), (300, 5)] {
        for (momentum, nesterov, wd) in [(0.0, false, 0.0), (0.9, true, 1e-4), (0.9, false, 0.0)] {
            let sgd = sgd(momentum, nesterov, wd);
            out.extend(after_step::<W, G, S, 1>(n, offset, &|p| {
                sgd.step(step, &precision, p);
            }));
        }
        out.extend(after_step::<W, G, S, 2>(n, offset, &|p| {
            adamw.step(step, &precision, p).unwrap();
        }));
        let aligned = offset / BLOCK as u64 * BLOCK as u64;
        out.extend(after_step::<W, G, S, 2>(n, aligned, &|p| {
            lamb.step(step, &precision, p);
        }));
        out.extend(after_step::<W, G, S, 2>(n, aligned, &|p| {
            let mut update = vec![0.0f32; p.weights.len()];
            let totals: Partials = lamb.partials_into(step, &precision, p, &mut update);
            lamb.apply_update(step, &totals, &precision, p, &update);
        }));
        out.extend(after_step::<W, G, S, 1>(n, aligned, &|p| {
            lars.step(step, &precision, p);
        }));
        out.extend(after_step::<W, G, W, 0>(n, offset, &|p| {
            for mode in [Accumulation::RunningMean, Accumulation::PostMean] {
                mode.add(2, p.grads, p.weights, &precision, p.id);
                mode.finish(3, p.weights, &precision, p.id);
            }
        }));
    }
    out
}

#[test]
fn optimizers_match_the_scalar_backend_on_every_backend() {
    fn check<W: Element, G: Element, S: Element>() {
        for rounding in [
            Round::NEAREST_EVEN,
            Round::STOCHASTIC,
            Round::STOCHASTIC.with_overflow(Overflow::Saturate),
        ] {
            let precision = Precision {
                weights: rounding,
                state: rounding,
                seed: 11,
            };
            let scalar =
                arch::with_backend(Backend::Scalar, || optimizer_steps::<W, G, S>(precision))
                    .unwrap();
            let what = format!("{} {} {} {rounding:?}", W::NAME, G::NAME, S::NAME);
            on_every_backend(&format!("optimizers {what}"), || {
                assert!(optimizer_steps::<W, G, S>(precision) == scalar, "{what}");
            });
        }
    }
    check::<f32, f32, f32>();
    check::<f16, f16, f16>();
    check::<bf16, bf16, bf16>();
    check::<f32, f16, bf16>();
    check::<bf16, f32, f16>();
}
