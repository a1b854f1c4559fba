//! Optimizers: SIMD against scalar twins, partition invariance, formulas
//! against independent f64 references, convergence, pinned trajectories.

use half::{bf16, f16};
use proptest::prelude::*;
use tessera_core::fp::{Element, Round};
use tessera_core::kernels::{BLOCK, ExactSum};
use tessera_core::optim::{
    AdamW, AdamWConfig, ConfigError, Lamb, LambConfig, Lars, LarsConfig, Param, Partials,
    Precision, Sgd, SgdConfig, Step, clip_scale, reference,
};

/// Deterministic pseudo-random values in about [-scale, scale].
pub(crate) fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = (i ^ seed.rotate_left(7))
                .wrapping_mul(0x9e37_79b9)
                .rotate_left(13)
                ^ seed;
            let h = h.wrapping_mul(0x85eb_ca6b);
            (h as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn convert<E: Element>(x: &[f32]) -> Vec<E> {
    x.iter()
        .map(|&v| E::store(v, tessera_core::fp::Rounding::Nearest, 0))
        .collect()
}

fn bits<E: Element>(x: &[E]) -> Vec<u32> {
    x.iter().map(|v| v.load().to_bits()).collect()
}

fn lamb_configs() -> Vec<LambConfig> {
    let base = LambConfig::default();
    vec![
        base,
        LambConfig {
            decoupled_decay: true,
            trust_clip: true,
            ..base
        },
        LambConfig {
            bias_correction: false,
            grad_averaging: false,
            min_weight_norm: 0.0,
            max_weight_norm: 10.0,
            ..base
        },
        LambConfig {
            always_adapt: true,
            weight_decay: 0.0,
            ..base
        },
        base.excluded(),
    ]
}

/// Runs LAMB SIMD and scalar over typed copies of the same data and
/// compares every stored bit, for several steps.
fn lamb_twins<W: Element, G: Element, S: Element>(n: usize, precision: Precision) {
    for config in lamb_configs() {
        let lamb = Lamb::new(config).unwrap();
        let mut w: [Vec<W>; 2] = std::array::from_fn(|_| convert(&values(n, 1, 1.0)));
        let mut m: [Vec<S>; 2] = std::array::from_fn(|_| convert(&values(n, 2, 0.01)));
        let mut v: [Vec<S>; 2] = std::array::from_fn(|_| {
            convert(
                &values(n, 3, 1e-4)
                    .iter()
                    .map(|x| x.abs())
                    .collect::<Vec<_>>(),
            )
        });
        for t in 1..=3 {
            let g: Vec<G> = convert(&values(n, 10 + t as u32, 0.1));
            let step = Step::after(t - 1).with_grad_scale(0.5);
            let [w0, w1] = &mut w;
            let [m0, m1] = &mut m;
            let [v0, v1] = &mut v;
            let mut simd = Param::new(7, w0, &g, [m0, v0]);
            let mut scalar = Param::new(7, w1, &g, [m1, v1]);
            let a = lamb.partials(step, &simd);
            let b = reference::lamb_partials(&lamb, step, &scalar);
            assert_eq!(a, b, "partials, {}", W::NAME);
            lamb.apply(step, &a, &precision, &mut simd);
            reference::lamb_apply(&lamb, step, &b, &precision, &mut scalar);
        }
        assert_eq!(bits(&w[0]), bits(&w[1]), "weights {config:?}");
        assert_eq!(bits(&m[0]), bits(&m[1]));
        assert_eq!(bits(&v[0]), bits(&v[1]));
    }
}

#[test]
fn lamb_simd_matches_scalar_for_every_precision() {
    let sr = Precision {
        seed: 5,
        ..Precision::default()
    };
    let rn = Precision {
        weights: Round::NEAREST_EVEN,
        state: Round::NEAREST_EVEN,
        seed: 0,
    };
    for n in [0, 1, 7, 8, 9, 255, 256, 257, 1000] {
        lamb_twins::<f32, f32, f32>(n, sr);
        lamb_twins::<f16, f16, f32>(n, sr);
        lamb_twins::<bf16, bf16, bf16>(n, sr);
        lamb_twins::<f16, f32, f16>(n, rn);
        lamb_twins::<f32, bf16, f16>(n, sr);
    }
}

/// One optimizer step for SIMD and scalar, compared bit for bit.
fn twin_check<const N: usize>(
    n: usize,
    mut run: impl FnMut(bool, &mut Param<'_, f16, bf16, f32, N>),
) {
    let mut w: [Vec<f16>; 2] = std::array::from_fn(|_| convert(&values(n, 1, 1.0)));
    let mut s: [[Vec<f32>; N]; 2] =
        std::array::from_fn(|_| std::array::from_fn(|k| values(n, 20 + k as u32, 0.01)));
    let g: Vec<bf16> = convert(&values(n, 4, 0.1));
    for (twin, (w, s)) in w.iter_mut().zip(s.iter_mut()).enumerate() {
        let mut p = Param::new(3, w, &g, s.each_mut().map(|s| s.as_mut_slice()));
        run(twin == 1, &mut p);
    }
    assert_eq!(bits(&w[0]), bits(&w[1]));
    for (a, b) in s[0].iter().zip(&s[1]) {
        assert_eq!(bits(a), bits(b));
    }
}

#[test]
fn sgd_adamw_lars_simd_match_scalar() {
    let precision = Precision::default();
    for n in [0, 5, 8, 100, 513] {
        for t in [1, 2] {
            let step = Step::after(t - 1);
            for config in [
                SgdConfig::default(),
                SgdConfig {
                    momentum: 0.9,
                    dampening: 0.1,
                    weight_decay: 1e-4,
                    ..SgdConfig::default()
                },
                SgdConfig {
                    momentum: 0.9,
                    nesterov: true,
                    weight_decay: 1e-4,
                    ..SgdConfig::default()
                },
            ] {
                let sgd = Sgd::new(config).unwrap();
                twin_check::<1>(n, |scalar, p| {
                    if scalar {
                        reference::sgd_step(&sgd, step, &precision, p)
                    } else {
                        sgd.step(step, &precision, p)
                    }
                });
            }
            let adamw = AdamW::new(AdamWConfig::default()).unwrap();
            twin_check::<2>(n, |scalar, p| {
                if scalar {
                    reference::adamw_step(&adamw, step, &precision, p).unwrap();
                } else {
                    adamw.step(step, &precision, p).unwrap();
                }
            });
            for config in [
                LarsConfig {
                    weight_decay: 1e-4,
                    momentum: 0.9,
                    ..LarsConfig::default()
                },
                LarsConfig {
                    weight_decay: 1e-4,
                    trust_clip: true,
                    lr: 0.1,
                    ..LarsConfig::default()
                },
                LarsConfig::default(),
            ] {
                let lars = Lars::new(config).unwrap();
                twin_check::<1>(n, |scalar, p| {
                    if scalar {
                        let totals = reference::lars_partials(&lars, step, p);
                        reference::lars_apply(&lars, step, &totals, &precision, p);
                    } else {
                        lars.step(step, &precision, p);
                    }
                });
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any block-aligned partition, partials merged in any order, pieces
    /// applied separately: bitwise one `step` over the whole tensor.
    #[test]
    fn lamb_and_lars_are_partition_invariant(
        blocks in 1usize..12,
        tail in 0usize..BLOCK,
        cuts in proptest::collection::vec(0usize..12, 0..5),
        reverse: bool,
        seed in 0u32..1000,
    ) {
        let n = blocks * BLOCK + tail;
        let mut bounds: Vec<usize> = cuts.iter().map(|c| (c * BLOCK).min(n)).collect();
        bounds.extend([0, n]);
        bounds.sort_unstable();
        bounds.dedup();
        let g: Vec<f32> = values(n, seed, 0.1);
        let precision = Precision { seed: u64::from(seed), ..Precision::default() };
        let step = Step::after(2);

        // LAMB, f16 weights with stochastic rounding, f32 state.
        let lamb = Lamb::new(LambConfig::default()).unwrap();
        let w0: Vec<f16> = convert(&values(n, seed + 1, 1.0));
        let m0 = values(n, seed + 2, 0.01);
        let v0: Vec<f32> = values(n, seed + 3, 1e-4).iter().map(|x| x.abs()).collect();
        let (mut w_whole, mut m_whole, mut v_whole) = (w0.clone(), m0.clone(), v0.clone());
        lamb.step(step, &precision, &mut Param::new(9, &mut w_whole, &g, [&mut m_whole, &mut v_whole]));

        let (mut w, mut m, mut v) = (w0, m0, v0);
        let mut pieces: Vec<Partials> = bounds.windows(2).map(|b| {
            let (lo, hi) = (b[0], b[1]);
            let p = Param {
                weights: &mut w[lo..hi], grads: &g[lo..hi],
                state: [&mut m[lo..hi], &mut v[lo..hi]], id: 9, offset: lo as u64,
            };
            lamb.partials(step, &p)
        }).collect();
        if reverse { pieces.reverse(); }
        let mut totals = Partials::default();
        for piece in &pieces { totals.merge(piece); }
        // Apply over different, unaligned pieces.
        for (lo, hi) in [(0, n / 3), (n / 3, n)] {
            let mut p = Param {
                weights: &mut w[lo..hi], grads: &g[lo..hi],
                state: [&mut m[lo..hi], &mut v[lo..hi]], id: 9, offset: lo as u64,
            };
            lamb.apply(step, &totals, &precision, &mut p);
        }
        prop_assert_eq!(bits(&w), bits(&w_whole));
        prop_assert_eq!(bits(&m), bits(&m_whole));
        prop_assert_eq!(bits(&v), bits(&v_whole));

        // LARS with momentum, f32.
        let lars = Lars::new(LarsConfig { weight_decay: 1e-4, momentum: 0.9, ..LarsConfig::default() }).unwrap();
        let w0 = values(n, seed + 4, 1.0);
        let b0 = values(n, seed + 5, 0.01);
        let (mut w_whole, mut b_whole) = (w0.clone(), b0.clone());
        lars.step(step, &precision, &mut Param::new(1, &mut w_whole, &g, [&mut b_whole]));
        let (mut w, mut b) = (w0, b0);
        let mut totals = Partials::default();
        for bound in bounds.windows(2).rev() {
            let (lo, hi) = (bound[0], bound[1]);
            let p = Param { weights: &mut w[lo..hi], grads: &g[lo..hi], state: [&mut b[lo..hi]], id: 1, offset: lo as u64 };
            totals.merge(&lars.partials(step, &p));
        }
        // Across "replicas": the limbs survive an integer all-reduce.
        let totals = Partials::from_limbs(totals.limbs());
        lars.apply(step, &totals, &precision, &mut Param::new(1, &mut w, &g, [&mut b]));
        prop_assert_eq!(bits(&w), bits(&w_whole));
        prop_assert_eq!(bits(&b), bits(&b_whole));
    }
}

// ---------------------------------------------------------------------------
// Formulas against independent f64 references written from SEMANTICS.md.

fn close(got: f32, want: f64, what: &str) {
    let tol = 1e-5 * want.abs().max(1e-6);
    assert!(
        (f64::from(got) - want).abs() <= tol,
        "{what}: got {got}, want {want}"
    );
}

pub(crate) fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

#[test]
fn lamb_matches_the_paper_formula() {
    let n = 37;
    let w0: Vec<f32> = values(n, 1, 1.0);
    let gs: Vec<Vec<f32>> = (0..4).map(|t| values(n, 50 + t, 0.1)).collect();
    for config in lamb_configs() {
        let lamb = Lamb::new(config).unwrap();
        let (mut w, mut m, mut v) = (w0.clone(), vec![0.0f32; n], vec![0.0f32; n]);
        let mut rw: Vec<f64> = w0.iter().map(|&x| x.into()).collect();
        let (mut rm, mut rv) = (vec![0.0f64; n], vec![0.0f64; n]);
        let (b1, b2) = (f64::from(config.betas.0), f64::from(config.betas.1));
        let (lr, wd, eps) = (
            f64::from(config.lr),
            f64::from(config.weight_decay),
            f64::from(config.eps),
        );
        for (t, g) in gs.iter().enumerate() {
            let t = t as i32 + 1;
            lamb.step(
                Step::after(t as u64 - 1),
                &Precision::default(),
                &mut Param::new(0, &mut w, g, [&mut m, &mut v]),
            );
            let (bc1, bc2) = if config.bias_correction {
                (1.0 - b1.powi(t), 1.0 - b2.powi(t))
            } else {
                (1.0, 1.0)
            };
            let b3 = if config.grad_averaging { 1.0 - b1 } else { 1.0 };
            let mut u = vec![0.0; n];
            for i in 0..n {
                let gi = f64::from(g[i]);
                rm[i] = b1 * rm[i] + b3 * gi;
                rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
                if config.decoupled_decay {
                    rw[i] *= 1.0 - lr * wd;
                }
                u[i] = (rm[i] / bc1) / ((rv[i] / bc2).sqrt() + eps);
                if !config.decoupled_decay {
                    u[i] += wd * rw[i];
                }
            }
            let adapt = (wd != 0.0 || config.always_adapt) && config.max_weight_norm != 0.0;
            let wn = norm(&rw).clamp(config.min_weight_norm.into(), config.max_weight_norm.into());
            let un = norm(&u);
            let mut ratio = if adapt && wn > 0.0 && un > 0.0 {
                wn / un
            } else {
                1.0
            };
            if config.trust_clip {
                ratio = ratio.min(1.0);
            }
            for i in 0..n {
                rw[i] -= lr * ratio * u[i];
            }
        }
        for i in 0..n {
            close(w[i], rw[i], "lamb w");
            close(m[i], rm[i], "lamb m");
            close(v[i], rv[i], "lamb v");
        }
    }
}

#[test]
fn adamw_sgd_lars_match_their_formulas() {
    let n = 19;
    let w0 = values(n, 1, 1.0);
    let gs: Vec<Vec<f32>> = (0..4).map(|t| values(n, 60 + t, 0.1)).collect();
    let precision = Precision::default();

    // AdamW.
    let c = AdamWConfig {
        weight_decay: 0.1,
        lr: 0.01,
        ..AdamWConfig::default()
    };
    let adamw = AdamW::new(c).unwrap();
    let (mut w, mut m, mut v) = (w0.clone(), vec![0.0f32; n], vec![0.0f32; n]);
    let mut rw: Vec<f64> = w0.iter().map(|&x| x.into()).collect();
    let (mut rm, mut rv) = (vec![0.0f64; n], vec![0.0f64; n]);
    let (b1, b2, lr, wd, eps) = (0.9f64, 0.999f64, 0.01f64, 0.1f64, f64::from(1e-8f32));
    for (t, g) in gs.iter().enumerate() {
        let t = t as i32 + 1;
        adamw
            .step(
                Step::after(t as u64 - 1),
                &precision,
                &mut Param::new(0, &mut w, g, [&mut m, &mut v]),
            )
            .unwrap();
        for i in 0..n {
            let gi = f64::from(g[i]);
            rw[i] *= 1.0 - lr * wd;
            rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
            rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
            let (mh, vh) = (rm[i] / (1.0 - b1.powi(t)), rv[i] / (1.0 - b2.powi(t)));
            rw[i] -= lr * mh / (vh.sqrt() + eps);
        }
    }
    for i in 0..n {
        close(w[i], rw[i], "adamw");
    }

    // SGD with momentum, dampening, weight decay; and Nesterov.
    for nesterov in [false, true] {
        let c = SgdConfig {
            lr: 0.1,
            momentum: 0.9,
            dampening: if nesterov { 0.0 } else { 0.25 },
            weight_decay: 0.01,
            nesterov,
            maximize: false,
        };
        let sgd = Sgd::new(c).unwrap();
        let (mut w, mut buf) = (w0.clone(), vec![0.0f32; n]);
        let mut rw: Vec<f64> = w0.iter().map(|&x| x.into()).collect();
        let mut rb = vec![0.0f64; n];
        for (t, g) in gs.iter().enumerate() {
            sgd.step(
                Step::after(t as u64),
                &precision,
                &mut Param::new(0, &mut w, g, [&mut buf]),
            );
            for i in 0..n {
                let d = f64::from(g[i]) + 0.01 * rw[i];
                rb[i] = if t == 0 {
                    d
                } else {
                    0.9 * rb[i] + (1.0 - f64::from(c.dampening)) * d
                };
                let d = if nesterov { d + 0.9 * rb[i] } else { rb[i] };
                rw[i] -= 0.1 * d;
            }
        }
        for i in 0..n {
            close(w[i], rw[i], "sgd");
        }
    }

    // LARS with momentum.
    let c = LarsConfig {
        lr: 0.5,
        momentum: 0.9,
        weight_decay: 1e-3,
        ..LarsConfig::default()
    };
    let lars = Lars::new(c).unwrap();
    let (mut w, mut buf) = (w0.clone(), vec![0.0f32; n]);
    let mut rw: Vec<f64> = w0.iter().map(|&x| x.into()).collect();
    let mut rb = vec![0.0f64; n];
    for (t, g) in gs.iter().enumerate() {
        lars.step(
            Step::after(t as u64),
            &precision,
            &mut Param::new(0, &mut w, g, [&mut buf]),
        );
        let gd: Vec<f64> = g.iter().map(|&x| x.into()).collect();
        let (wn, gn) = (norm(&rw), norm(&gd));
        let trust = 0.001 * wn / (gn + 1e-3 * wn + f64::from(1e-8f32));
        for i in 0..n {
            let d = (gd[i] + 1e-3 * rw[i]) * trust;
            rb[i] = if t == 0 { d } else { 0.9 * rb[i] + d };
            rw[i] -= 0.5 * rb[i];
        }
    }
    for i in 0..n {
        close(w[i], rw[i], "lars");
    }
}

// ---------------------------------------------------------------------------
// Weight decay in each reference's own f32 arithmetic, bit for bit.
//
// The references compute in f32 with hyperparameters that are Python floats
// (f64), rounded to f32 where they meet a tensor. ATen's `x.add_(y,
// alpha=a)` is `x + a * y` (ufunc/add.h; its AVX2 loop fuses the two, which
// no path here may, for the same bits on every CPU) and `x.mul_(a)` is
// `x * a`. Each step below is one call on weights spanning many binades,
// with the gradient chosen so that the decay is all that happens (or with
// the whole update written out).

/// Weights from 1e-6 to 1e3 in magnitude, signed zeros and a subnormal.
fn decay_weights() -> Vec<f32> {
    let mut w: Vec<f32> = [1e-6, 1e-2, 1.0, 1e3]
        .iter()
        .enumerate()
        .flat_map(|(k, &scale)| values(250, 90 + k as u32, scale))
        .collect();
    w.extend([0.0, -0.0, 1e-40, -3.5]);
    w
}

/// Runs `step` on the SIMD path and on the scalar twin (`true`) over fresh
/// copies of `w0` and checks every weight against `want`.
fn assert_decay(
    what: &str,
    w0: &[f32],
    want: impl Fn(usize, f32) -> f32,
    step: impl Fn(bool, &mut [f32]),
) {
    let want: Vec<u32> = w0
        .iter()
        .enumerate()
        .map(|(i, &w)| want(i, w).to_bits())
        .collect();
    for scalar in [false, true] {
        let mut w = w0.to_vec();
        step(scalar, &mut w);
        let wrong = bits(&w).iter().zip(&want).filter(|(a, b)| a != b).count();
        assert_eq!(
            wrong,
            0,
            "{what} (scalar {scalar}): {wrong} of {} weights differ",
            w.len()
        );
    }
}

#[test]
fn adamw_and_sgd_decay_as_torch() {
    let w0 = decay_weights();
    let n = w0.len();
    let precision = Precision::default();
    // torch.optim.AdamW: `param.mul_(1 - lr * weight_decay)`, then an
    // update that is zero for a zero gradient.
    let c = AdamWConfig {
        lr: 1e-3,
        weight_decay: 0.1,
        ..AdamWConfig::default()
    };
    let adamw = AdamW::new(c).unwrap();
    let keep = (1.0 - f64::from(c.lr) * f64::from(c.weight_decay)) as f32;
    assert_decay(
        "adamw",
        &w0,
        |_, w| w * keep,
        |scalar, w| {
            let g = vec![0.0f32; n];
            let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
            let mut p = Param::new(0, w, &g, [&mut m, &mut v]);
            if scalar {
                reference::adamw_step(&adamw, Step::first(), &precision, &mut p).unwrap();
            } else {
                adamw.step(Step::first(), &precision, &mut p).unwrap();
            }
        },
    );
    // torch.optim.SGD: `grad = grad.add(param, alpha=weight_decay)`, then
    // `param.add_(grad, alpha=-lr)`: the whole step without momentum.
    let c = SgdConfig {
        lr: 0.1,
        weight_decay: 0.01,
        ..SgdConfig::default()
    };
    let sgd = Sgd::new(c).unwrap();
    let g = values(n, 7, 0.1);
    let want = |i: usize, w: f32| w + -c.lr * (g[i] + c.weight_decay * w);
    assert_decay("sgd", &w0, want, |scalar, w| {
        let mut unused: [f32; 0] = [];
        let mut p = Param::new(0, w, &g, [&mut unused]);
        if scalar {
            reference::sgd_step(&sgd, Step::first(), &precision, &mut p);
        } else {
            sgd.step(Step::first(), &precision, &mut p);
        }
    });
}

#[test]
fn lars_decays_as_timm() {
    // timm's Lars: `grad = grad.add(p, alpha=weight_decay).mul_(trust_ratio)`,
    // then `p.add_(grad, alpha=-lr)` without momentum.
    let w0 = decay_weights();
    let n = w0.len();
    let c = LarsConfig {
        lr: 0.5,
        weight_decay: 1e-3,
        ..LarsConfig::default()
    };
    let lars = Lars::new(c).unwrap();
    let g = values(n, 8, 0.1);
    let (mut w, mut buf) = (w0.clone(), vec![0.0f32; n]);
    let norms = lars
        .partials(Step::first(), &Param::new(0, &mut w, &g, [&mut buf]))
        .norms();
    let ratio = lars.trust_ratio(norms).unwrap();
    let want = |i: usize, w: f32| w + -c.lr * ((g[i] + c.weight_decay * w) * ratio);
    assert_decay("lars", &w0, want, |scalar, w| {
        let mut buf = vec![0.0f32; n];
        let mut p = Param::new(0, w, &g, [&mut buf]);
        let step = Step::first();
        if scalar {
            let totals = reference::lars_partials(&lars, step, &p);
            reference::lars_apply(&lars, step, &totals, &Precision::default(), &mut p);
        } else {
            lars.step(step, &Precision::default(), &mut p);
        }
    });
}

/// One LAMB step with a zero gradient and zero moments (so `r = +0`) on the
/// read-only phases and on the fused form, each SIMD and scalar.
fn lamb_zero_gradient_step(lamb: &Lamb, scalar: bool, fused: bool, w: &mut [f32]) {
    let n = w.len();
    let (g, mut m, mut v, mut u) = (
        vec![0.0f32; n],
        vec![0.0f32; n],
        vec![0.0f32; n],
        vec![0.0f32; n],
    );
    let (step, precision) = (Step::first(), Precision::default());
    let mut p = Param::new(0, w, &g, [&mut m, &mut v]);
    match (fused, scalar) {
        (false, false) => lamb.step(step, &precision, &mut p),
        (false, true) => {
            let totals = reference::lamb_partials(lamb, step, &p);
            reference::lamb_apply(lamb, step, &totals, &precision, &mut p);
        }
        (true, false) => {
            let totals = lamb.partials_into(step, &precision, &mut p, &mut u);
            lamb.apply_update(step, &totals, &precision, &mut p, &u);
        }
        (true, true) => {
            let totals = reference::lamb_partials_into(lamb, step, &precision, &mut p, &mut u);
            reference::lamb_apply_update(lamb, step, &totals, &precision, &mut p, &u);
        }
    }
}

/// LAMB with decoupled decay, `lr wd = 1e-4`.
fn decoupled_lamb() -> LambConfig {
    LambConfig {
        lr: 1e-3,
        weight_decay: 0.1,
        decoupled_decay: true,
        ..LambConfig::default()
    }
}

#[test]
fn lamb_decays_as_timm() {
    let w0 = decay_weights();
    // timm's Lamb, decoupled: `p.add_(p, alpha=-lr * weight_decay)`; the
    // update is then zero and the ratio 1.
    let c = decoupled_lamb();
    let lamb = Lamb::new(c).unwrap();
    let alpha = (-(f64::from(c.lr) * f64::from(c.weight_decay))) as f32;
    for fused in [false, true] {
        assert_decay(
            "lamb decoupled",
            &w0,
            |_, w| w + alpha * w,
            |scalar, w| {
                lamb_zero_gradient_step(&lamb, scalar, fused, w);
            },
        );
    }
    // Coupled: `update.add_(p, alpha=weight_decay)`, `update.mul_(ratio)`,
    // `p.add_(update, alpha=-lr)`, with the ratio of ||w|| and ||wd w||.
    let c = LambConfig {
        decoupled_decay: false,
        ..c
    };
    let lamb = Lamb::new(c).unwrap();
    let u: Vec<f32> = w0.iter().map(|&w| 0.0 + c.weight_decay * w).collect();
    let n = w0.len();
    let (mut w, g, mut m, mut v) = (
        w0.clone(),
        vec![0.0f32; n],
        vec![0.0f32; n],
        vec![0.0f32; n],
    );
    let p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
    let ratio = lamb.trust_ratio(lamb.partials(Step::first(), &p).norms());
    for fused in [false, true] {
        assert_decay(
            "lamb coupled",
            &w0,
            |i, w| w + -c.lr * (u[i] * ratio),
            |scalar, w| {
                lamb_zero_gradient_step(&lamb, scalar, fused, w);
            },
        );
    }
}

/// Decoupled decay over 10^4 steps against `(1 - lr wd)^t` in f64: timm's
/// `p + (-lr wd) p` rounds each product to nearest, while multiplying by a
/// rounded `f32(1 - lr wd)` drifts by that constant's own error every step
/// (-1.7e-4 relative after 10^4 steps at `lr wd = 1e-4`).
#[test]
fn lamb_decoupled_decay_does_not_drift() {
    let c = decoupled_lamb();
    let lamb = Lamb::new(c).unwrap();
    let w0 = values(64, 3, 1.0);
    let mut w = w0.clone();
    let steps = 10_000;
    for _ in 0..steps {
        lamb_zero_gradient_step(&lamb, false, false, &mut w);
    }
    let keep = (1.0 - f64::from(c.lr) * f64::from(c.weight_decay)).powi(steps);
    let drift = w
        .iter()
        .zip(&w0)
        .map(|(&w, &w0)| (f64::from(w) / (f64::from(w0) * keep) - 1.0).abs())
        .fold(0.0, f64::max);
    println!("worst relative drift after {steps} steps: {drift:e}");
    assert!(drift < 1e-5, "drift {drift:e}");
}

#[test]
fn trust_ratio_edge_cases() {
    let lamb = Lamb::new(LambConfig::default()).unwrap();
    let norms = |w: f32, u: f32| tessera_core::optim::Norms { w, g: 1.0, u };
    assert_eq!(lamb.trust_ratio(norms(0.0, 2.0)), 1.0, "zero weights");
    assert_eq!(lamb.trust_ratio(norms(2.0, 0.0)), 1.0, "zero update");
    assert_eq!(lamb.trust_ratio(norms(3.0, 2.0)), 1.5);
    let clipped = Lamb::new(LambConfig {
        trust_clip: true,
        ..LambConfig::default()
    })
    .unwrap();
    assert_eq!(clipped.trust_ratio(norms(3.0, 2.0)), 1.0);
    let popart = Lamb::new(LambConfig {
        max_weight_norm: 2.0,
        ..LambConfig::default()
    })
    .unwrap();
    assert_eq!(
        popart.trust_ratio(norms(3.0, 2.0)),
        1.0,
        "phi clamps ||w|| to 2"
    );
    let off = Lamb::new(LambConfig {
        max_weight_norm: 0.0,
        ..LambConfig::default()
    })
    .unwrap();
    assert_eq!(
        off.trust_ratio(norms(3.0, 2.0)),
        1.0,
        "max_weight_norm 0 disables"
    );
    let no_wd = Lamb::new(LambConfig {
        weight_decay: 0.0,
        ..LambConfig::default()
    })
    .unwrap();
    assert_eq!(
        no_wd.trust_ratio(norms(3.0, 2.0)),
        1.0,
        "timm: no decay, no adaptation"
    );

    let lars = Lars::new(LarsConfig {
        weight_decay: 0.5,
        lr: 0.01,
        trust_clip: true,
        ..LarsConfig::default()
    })
    .unwrap();
    let r = lars.trust_ratio(norms(2.0, 0.0)).unwrap();
    // 0.001 * 2 / (1 + 2 * 0.5 + 1e-8) = 0.001, then min(0.001 / 0.01, 1) = 0.1.
    assert!((r - 0.1).abs() < 1e-7, "{r}");
    assert_eq!(
        Lars::new(LarsConfig::default())
            .unwrap()
            .trust_ratio(norms(2.0, 0.0)),
        None
    );
}

#[test]
fn global_clip_scale() {
    let mut g_sq = ExactSum::new();
    g_sq.add(9.0);
    g_sq.add(16.0);
    assert_eq!(clip_scale(&g_sq, 1.0), 0.2);
    assert_eq!(clip_scale(&g_sq, 10.0), 1.0);
}

#[test]
fn bad_configs_are_errors_not_nans_later() {
    assert!(matches!(
        Lamb::new(LambConfig {
            lr: f32::NAN,
            ..LambConfig::default()
        }),
        Err(ConfigError::NotFinite { field: "lr", .. })
    ));
    assert!(matches!(
        AdamW::new(AdamWConfig {
            eps: -1e-8,
            ..AdamWConfig::default()
        }),
        Err(ConfigError::OutOfRange { field: "eps", .. })
    ));
    assert!(matches!(
        Lamb::new(LambConfig {
            betas: (0.9, 1.0),
            ..LambConfig::default()
        }),
        Err(ConfigError::OutOfRange {
            field: "betas.1",
            ..
        })
    ));
    assert!(matches!(
        Sgd::new(SgdConfig {
            nesterov: true,
            ..SgdConfig::default()
        }),
        Err(ConfigError::Conflict { .. })
    ));
    assert!(
        Lars::new(LarsConfig {
            trust_clip: true,
            lr: 0.0,
            ..LarsConfig::default()
        })
        .is_err()
    );
    let e = Lamb::new(LambConfig {
        weight_decay: -1.0,
        ..LambConfig::default()
    })
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "weight_decay must be finite and >= 0, got -1"
    );
}

// ---------------------------------------------------------------------------
// Convergence.

/// Minimises `0.5 sum a_i (w_i - c_i)^2` with Adam-style optimizers.
fn quadratic<W: Element>(lamb: &Lamb, precision: Precision, steps: u64) -> f64 {
    let n = 64;
    let a: Vec<f32> = (0..n).map(|i| 0.5 + i as f32 / 32.0).collect();
    let c: Vec<f32> = values(n, 77, 2.0);
    let mut w: Vec<W> = convert(&vec![0.0f32; n]);
    let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    for t in 1..=steps {
        let g: Vec<f32> = (0..n).map(|i| a[i] * (w[i].load() - c[i])).collect();
        lamb.step(
            Step::after(t - 1),
            &precision,
            &mut Param::new(0, &mut w, &g, [&mut m, &mut v]),
        );
    }
    (0..n)
        .map(|i| f64::from(w[i].load() - c[i]).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn lamb_converges_on_a_quadratic_in_f32_and_f16() {
    let lamb = Lamb::new(LambConfig {
        lr: 0.02,
        weight_decay: 0.0,
        ..LambConfig::default()
    })
    .unwrap();
    let f32_err = quadratic::<f32>(&lamb, Precision::default(), 800);
    let f16_err = quadratic::<f16>(&lamb, Precision::default(), 800);
    assert!(f32_err < 0.05, "{f32_err}");
    assert!(f16_err < 0.05, "{f16_err}");
}

/// f16 weights without a master copy: updates far below half an ulp vanish
/// under round to nearest but survive on average under stochastic rounding.
#[test]
fn f16_round_to_nearest_stalls_where_stochastic_rounding_does_not() {
    let sgd = Sgd::new(SgdConfig {
        lr: 1e-4,
        ..SgdConfig::default()
    })
    .unwrap();
    let n = 256;
    let g = vec![1.0f32; n]; // each step moves w by -1e-4; f16's ulp at 1 is ~1e-3
    let run = |rounding: Round| {
        let precision = Precision {
            weights: rounding,
            ..Precision::default()
        };
        let mut w = vec![f16::ONE; n];
        let mut no_buffer: [f32; 0] = [];
        for t in 1..=1000 {
            sgd.step(
                Step::after(t - 1),
                &precision,
                &mut Param::new(0, &mut w, &g, [&mut no_buffer]),
            );
        }
        w.iter().map(|x| f64::from(x.to_f32())).sum::<f64>() / n as f64
    };
    let nearest = run(Round::NEAREST_EVEN);
    let stochastic = run(Round::STOCHASTIC);
    assert_eq!(nearest, 1.0, "round to nearest never moves");
    assert!(
        (stochastic - 0.9).abs() < 0.005,
        "SR tracks the exact 0.9: {stochastic}"
    );
}

/// Logistic regression on a separable 2-D problem with AdamW in f32 and in
/// bf16 weights with stochastic rounding.
#[test]
fn adamw_trains_a_logistic_regression() {
    let n = 512;
    let xs: Vec<[f32; 2]> = (0..n)
        .map(|i| {
            let v = values(2, i as u32 + 1000, 2.0);
            [v[0], v[1]]
        })
        .collect();
    let ys: Vec<f32> = xs
        .iter()
        .map(|x| f32::from(u8::from(x[0] + 0.5 * x[1] > 0.2)))
        .collect();
    let adamw = AdamW::new(AdamWConfig {
        lr: 0.05,
        weight_decay: 0.0,
        ..AdamWConfig::default()
    })
    .unwrap();
    fn train<W: Element>(adamw: &AdamW, xs: &[[f32; 2]], ys: &[f32]) -> f64 {
        let mut w: Vec<W> = convert(&[0.0, 0.0, 0.0]);
        let (mut m, mut v) = (vec![0.0f32; 3], vec![0.0f32; 3]);
        for t in 1..=300 {
            let mut g = [0.0f32; 3];
            for (x, y) in xs.iter().zip(ys) {
                let z = w[0].load() * x[0] + w[1].load() * x[1] + w[2].load();
                let p = 1.0 / (1.0 + (-z).exp());
                let e = (p - y) / xs.len() as f32;
                g[0] += e * x[0];
                g[1] += e * x[1];
                g[2] += e;
            }
            adamw
                .step(
                    Step::after(t - 1),
                    &Precision::default(),
                    &mut Param::new(0, &mut w, &g, [&mut m, &mut v]),
                )
                .unwrap();
        }
        let correct = xs
            .iter()
            .zip(ys)
            .filter(|(x, y)| {
                let z = w[0].load() * x[0] + w[1].load() * x[1] + w[2].load();
                (z > 0.0) == (**y > 0.5)
            })
            .count();
        correct as f64 / xs.len() as f64
    }
    assert!(train::<f32>(&adamw, &xs, &ys) > 0.97);
    assert!(train::<bf16>(&adamw, &xs, &ys) > 0.97);
}

#[test]
fn value_stability_of_a_lamb_trajectory() {
    let n = 300;
    let lamb = Lamb::new(LambConfig::default()).unwrap();
    let mut w: Vec<f16> = convert(&values(n, 1, 1.0));
    let (mut m, mut v) = (vec![f16::ZERO; n], vec![f16::ZERO; n]);
    for t in 1..=5 {
        let g = values(n, 40 + t as u32, 0.1);
        lamb.step(
            Step::after(t - 1),
            &Precision {
                seed: 42,
                ..Precision::default()
            },
            &mut Param::new(11, &mut w, &g, [&mut m, &mut v]),
        );
    }
    // FNV-1a over the stored bits of weights and state.
    let h = fnv_bytes(
        w.iter()
            .chain(&m)
            .chain(&v)
            .flat_map(|x| x.to_bits().to_le_bytes()),
    );
    assert_eq!(h, PINNED_LAMB_TRAJECTORY, "{h:#x}");

    // And in f32, where every rounding of the formula shows.
    let mut w = values(n, 1, 1.0);
    let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    for t in 1..=5 {
        let g = values(n, 40 + t as u32, 0.1);
        lamb.step(
            Step::after(t - 1),
            &Precision::default(),
            &mut Param::new(11, &mut w, &g, [&mut m, &mut v]),
        );
    }
    let h = fnv_bytes(
        w.iter()
            .chain(&m)
            .chain(&v)
            .flat_map(|x| x.to_bits().to_le_bytes()),
    );
    assert_eq!(h, PINNED_LAMB_F32_TRAJECTORY, "{h:#x}");
}

const PINNED_LAMB_F32_TRAJECTORY: u64 = 0x44fd_51b8_91d6_d47f;

const PINNED_LAMB_TRAJECTORY: u64 = 0x040d_59fd_ad3b_4d7c;

// ---------------------------------------------------------------------------
// Gradient accumulation.

#[test]
fn accumulation_modes_follow_poptorch() {
    use tessera_core::optim::Accumulation;
    let n = 37;
    let micro: Vec<Vec<f32>> = (0..5).map(|k| values(n, 300 + k, 4.0)).collect();
    let precision = Precision::default();
    for mode in [
        Accumulation::Sum,
        Accumulation::RunningMean,
        Accumulation::PostMean,
    ] {
        let mut acc = vec![f32::NAN; n]; // micro-batch 0 overwrites
        for (f, g) in micro.iter().enumerate() {
            mode.add(f as u32, g, &mut acc, &precision, 0);
        }
        mode.finish(micro.len() as u32, &mut acc, &precision, 0);
        for i in 0..n {
            // The same f32 operations, one element at a time.
            let mut s = micro[0][i];
            for (f, g) in micro.iter().enumerate().skip(1) {
                let f = f as f64;
                s = match mode {
                    Accumulation::RunningMean => {
                        (f / (f + 1.0)) as f32 * s + g[i] / (f + 1.0) as f32
                    }
                    _ => s + g[i],
                };
            }
            if mode == Accumulation::PostMean {
                s /= micro.len() as f32;
            }
            assert_eq!(acc[i].to_bits(), s.to_bits(), "{mode:?} element {i}");
            let exact_mean = micro.iter().map(|g| f64::from(g[i])).sum::<f64>() / 5.0;
            if mode != Accumulation::Sum {
                assert!((f64::from(acc[i]) - exact_mean).abs() < 1e-5, "{mode:?}");
                let largest = micro.iter().map(|g| g[i].abs()).fold(0.0, f32::max);
                assert!(
                    acc[i].abs() <= largest,
                    "a mean never exceeds the largest gradient"
                );
            }
        }
    }
}

#[test]
fn running_mean_in_f16_avoids_the_overflow_of_a_sum() {
    use tessera_core::optim::Accumulation;
    let n = 16;
    let g = vec![30000.0f32; n];
    let precision = Precision::default();
    let mut sum = vec![f16::ZERO; n];
    let mut mean = vec![f16::ZERO; n];
    for f in 0..4 {
        Accumulation::Sum.add(f, &g, &mut sum, &precision, 0);
        Accumulation::RunningMean.add(f, &g, &mut mean, &precision, 0);
    }
    assert!(
        sum.iter().all(|s| s.is_infinite()),
        "4 x 30000 overflows f16"
    );
    assert!(mean.iter().all(|s| s.to_f32() == 30000.0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Loss scaling says skip on an overflow in any replica's gradients, and a
    /// skipped step leaves weights and optimizer state bitwise unchanged.
    #[test]
    fn a_skipped_step_leaves_weights_and_state_unchanged(
        steps in proptest::collection::vec((any::<bool>(), 0usize..300, any::<u32>()), 1..8),
    ) {
        use tessera_core::scale::{DynamicLossScaler, GradSlice, StepDecision};
        let n = 300;
        let lamb = Lamb::new(LambConfig::default()).unwrap();
        let precision = Precision::default();
        let mut scaler = DynamicLossScaler::default();
        let mut w: Vec<f16> = convert(&values(n, 1, 1.0));
        let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
        let mut t = 0;
        for (overflow, at, seed) in steps {
            let mut g: Vec<f16> = convert(&values(n, seed, 0.5 * scaler.scale().min(60000.0)));
            if overflow {
                g[at] = f16::INFINITY;
            }
            let stats = scaler.unscale([GradSlice::from(g.as_mut_slice())]);
            let before = (bits(&w), bits(&m), bits(&v));
            match scaler.update(stats.found_inf) {
                StepDecision::Skip => {
                    prop_assert!(overflow);
                }
                StepDecision::Apply { .. } => {
                    prop_assert!(!overflow);
                    t += 1;
                    lamb.step(Step::after(t - 1), &precision, &mut Param::new(0, &mut w, &g, [&mut m, &mut v]));
                    continue;
                }
            }
            prop_assert_eq!((bits(&w), bits(&m), bits(&v)), before);
        }
    }
}

/// LAMB's fused form (phase 1 stores the moments and the update) gives
/// bitwise the two read-only phases' result, on pieces too, and its scalar
/// twin agrees.
fn lamb_fused_matches<W: Element, S: Element>(n: usize, config: LambConfig) {
    let lamb = Lamb::new(config).unwrap();
    let precision = Precision {
        seed: 3,
        ..Precision::default()
    };
    let w0: Vec<W> = convert(&values(n, 1, 1.0));
    let m0: Vec<S> = convert(&values(n, 2, 0.01));
    let v0: Vec<S> = convert(
        &values(n, 3, 1e-4)
            .iter()
            .map(|x| x.abs())
            .collect::<Vec<_>>(),
    );
    let g: Vec<f32> = values(n, 4, 0.1);
    let step = Step::after(1).with_grad_scale(0.25);
    let (mut w, mut m, mut v) = (w0.clone(), m0.clone(), v0.clone());
    lamb.step(
        step,
        &precision,
        &mut Param::new(5, &mut w, &g, [&mut m, &mut v]),
    );
    for scalar in [false, true] {
        let (mut wf, mut mf, mut vf) = (w0.clone(), m0.clone(), v0.clone());
        let mut update = vec![0.0f32; n];
        // Phase 1 in two block-aligned pieces, phase 2 in two other pieces.
        let cut = (n / 2) / BLOCK * BLOCK;
        let mut totals = Partials::default();
        for (lo, hi) in [(cut, n), (0, cut)] {
            let mut p = Param {
                weights: &mut wf[lo..hi],
                grads: &g[lo..hi],
                state: [&mut mf[lo..hi], &mut vf[lo..hi]],
                id: 5,
                offset: lo as u64,
            };
            let piece = if scalar {
                reference::lamb_partials_into(&lamb, step, &precision, &mut p, &mut update[lo..hi])
            } else {
                lamb.partials_into(step, &precision, &mut p, &mut update[lo..hi])
            };
            totals.merge(&piece);
        }
        for (lo, hi) in [(0, n / 3), (n / 3, n)] {
            let mut p = Param {
                weights: &mut wf[lo..hi],
                grads: &g[lo..hi],
                state: [&mut mf[lo..hi], &mut vf[lo..hi]],
                id: 5,
                offset: lo as u64,
            };
            if scalar {
                reference::lamb_apply_update(
                    &lamb,
                    step,
                    &totals,
                    &precision,
                    &mut p,
                    &update[lo..hi],
                );
            } else {
                lamb.apply_update(step, &totals, &precision, &mut p, &update[lo..hi]);
            }
        }
        assert_eq!(bits(&wf), bits(&w), "weights, scalar {scalar}");
        assert_eq!(bits(&mf), bits(&m), "m");
        assert_eq!(bits(&vf), bits(&v), "v");
    }
}

#[test]
fn lamb_fused_form_matches_the_read_only_phases() {
    for n in [1, 9, 300, 1000] {
        for config in lamb_configs() {
            lamb_fused_matches::<f32, f32>(n, config);
            lamb_fused_matches::<f16, f16>(n, config);
            lamb_fused_matches::<bf16, f32>(n, config);
        }
    }
}

/// FNV-1a over bytes: a stable fingerprint for pinned trajectories.
fn fnv_bytes(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
