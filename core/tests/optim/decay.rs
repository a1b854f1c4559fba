//! Weight decay in each reference's own f32 arithmetic, bit for bit.
//!
//! The references compute in f32 with hyperparameters that are Python floats
//! (f64), rounded to f32 where they meet a tensor. ATen's `x.add_(y,
//! alpha=a)` is `x + a * y` (ufunc/add.h; its AVX2 loop fuses the two, which
//! no path here may, for the same bits on every CPU) and `x.mul_(a)` is
//! `x * a`. Each step below is one call on weights spanning many binades,
//! with the gradient chosen so that the decay is all that happens (or with
//! the whole update written out).

use super::*;

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
