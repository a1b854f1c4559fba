//! Formulas against independent f64 references written from SEMANTICS.md.

use super::*;

fn close(got: f32, want: f64, what: &str) {
    let tol = 1e-5 * want.abs().max(1e-6);
    assert!(
        (f64::from(got) - want).abs() <= tol,
        "{what}: got {got}, want {want}"
    );
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

/// The weights and four steps' gradients the formula tests run on.
fn formula_inputs() -> (usize, Vec<f32>, Vec<Vec<f32>>) {
    let n = 19;
    let gs = (0..4).map(|t| values(n, 60 + t, 0.1)).collect();
    (n, values(n, 1, 1.0), gs)
}

#[test]
fn adamw_matches_its_formula() {
    let (n, w0, gs) = formula_inputs();
    let precision = Precision::default();
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
}

/// SGD with momentum, dampening, weight decay; and Nesterov.
#[test]
fn sgd_matches_its_formula() {
    let (n, w0, gs) = formula_inputs();
    let precision = Precision::default();
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
}

/// LARS with momentum.
#[test]
fn lars_matches_its_formula() {
    let (n, w0, gs) = formula_inputs();
    let precision = Precision::default();
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
