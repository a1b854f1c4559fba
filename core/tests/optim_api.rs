//! The optimizers' common interface: PyTorch's `amsgrad` and `maximize`
//! against torch's formulas, the learning rate and step number carried by
//! the step, timm's `max_grad_norm`, the run-time-chosen [`Optimizer`] and
//! the owned-state [`OwnedOptimizer`].

use half::f16;
use tessera_core::kernels::BLOCK;
use tessera_core::optim::{
    AdamW, AdamWConfig, Decay, GradNorm, Group, Lamb, LambConfig, LrSchedule, Optimizer,
    OptimizerConfig, OwnedOptimizer, Param, Precision, Sgd, SgdConfig, Step, StepCounter,
    StepError, Tensor, reference,
};

use crate::optim::{norm, values};

/// Within f32 rounding of the f64 reference: relative, or absolute for
/// values that cancelled to near 0 (the weights here are about 1).
fn close(got: f32, want: f64, what: &str) {
    let tol = 1e-5 * want.abs().max(1e-2);
    assert!(
        (f64::from(got) - want).abs() <= tol,
        "{what}: got {got}, want {want}"
    );
}

/// torch.optim.AdamW's `_single_tensor_adamw`, in f64.
#[test]
fn adamw_amsgrad_and_maximize_follow_torch() {
    let n = 23;
    let w0 = values(n, 3, 1.0);
    // Large gradients first, then small: `v` falls, so the maximum matters.
    let gs: Vec<Vec<f32>> = (0..6)
        .map(|t| values(n, 70 + t, 1.0 / (1 + 4 * t) as f32))
        .collect();
    for (amsgrad, maximize) in [(true, false), (false, true), (true, true)] {
        let c = AdamWConfig {
            lr: 0.01,
            weight_decay: 0.1,
            amsgrad,
            maximize,
            ..AdamWConfig::default()
        };
        let adamw = AdamW::new(c).unwrap();
        let mut w = w0.clone();
        let mut state = vec![vec![0.0f32; n]; adamw.state_tensors()];
        let mut rw: Vec<f64> = w0.iter().map(|&x| x.into()).collect();
        let (mut rm, mut rv, mut rmax) = (vec![0.0f64; n], vec![0.0f64; n], vec![0.0f64; n]);
        let (b1, b2, lr, wd, eps) = (0.9f64, 0.999f64, 0.01f64, 0.1f64, f64::from(1e-8f32));
        let mut counter = StepCounter::default();
        for g in &gs {
            let step = counter.next_step();
            match &mut state[..] {
                [m, v] => adamw.step(
                    step,
                    &Precision::default(),
                    &mut Param::new(0, &mut w, g, [m, v]),
                ),
                [m, v, x] => adamw.step(
                    step,
                    &Precision::default(),
                    &mut Param::new(0, &mut w, g, [m, v, x]),
                ),
                _ => unreachable!(),
            }
            .unwrap();
            counter.applied(step);
            let t = step.t() as i32;
            for i in 0..n {
                let gi = if maximize {
                    -f64::from(g[i])
                } else {
                    f64::from(g[i])
                };
                rw[i] *= 1.0 - lr * wd;
                rm[i] = b1 * rm[i] + (1.0 - b1) * gi;
                rv[i] = b2 * rv[i] + (1.0 - b2) * gi * gi;
                rmax[i] = rmax[i].max(rv[i]);
                let v = if amsgrad { rmax[i] } else { rv[i] };
                let denom = v.sqrt() / (1.0 - b2.powi(t)).sqrt() + eps;
                rw[i] -= lr / (1.0 - b1.powi(t)) * rm[i] / denom;
            }
        }
        let what = format!("amsgrad {amsgrad} maximize {maximize}");
        for i in 0..n {
            close(w[i], rw[i], &what);
            if amsgrad {
                close(state[2][i], rmax[i], &what);
            }
        }
        // AMSGrad changes the trajectory (the maximum is used).
        if amsgrad && !maximize {
            assert!((0..n).any(|i| rmax[i] > rv[i]));
        }
    }
}

/// The kernels' AMSGrad path against its scalar twin, bit for bit, on f16
/// weights (stochastic rounding) and a block-crossing length.
#[test]
fn adamw_amsgrad_twin_agrees() {
    let n = 1000;
    let adamw = AdamW::new(AdamWConfig {
        amsgrad: true,
        ..AdamWConfig::default()
    })
    .unwrap();
    let w0: Vec<f16> = values(n, 9, 1.0)
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let mut runs = [
        (w0.clone(), [vec![0.0f32; n], vec![0.0; n], vec![0.0; n]]),
        (w0, Default::default()),
    ];
    runs[1].1 = [vec![0.0f32; n], vec![0.0; n], vec![0.0; n]];
    for t in 0..3u32 {
        let g = values(n, 40 + t, 1.0 / (1 + t) as f32);
        let step = Step::after(t.into());
        for (k, (w, [m, v, x])) in runs.iter_mut().enumerate() {
            let mut p = Param::new(5, w, &g, [m, v, x]);
            if k == 0 {
                adamw.step(step, &Precision::default(), &mut p).unwrap();
            } else {
                reference::adamw_step(&adamw, step, &Precision::default(), &mut p).unwrap();
            }
        }
    }
    assert_eq!(runs[0], runs[1]);
}

/// torch.optim.SGD with `maximize`: the gradient negated before decay and
/// momentum.
#[test]
fn sgd_maximize_follows_torch() {
    let n = 11;
    let w0 = values(n, 4, 1.0);
    let gs: Vec<Vec<f32>> = (0..4).map(|t| values(n, 80 + t, 0.1)).collect();
    let c = SgdConfig {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.01,
        maximize: true,
        ..SgdConfig::default()
    };
    let sgd = Sgd::new(c).unwrap();
    let (mut w, mut buf) = (w0.clone(), vec![0.0f32; n]);
    let mut rw: Vec<f64> = w0.iter().map(|&x| x.into()).collect();
    let mut rb = vec![0.0f64; n];
    for (t, g) in gs.iter().enumerate() {
        sgd.step(
            Step::after(t as u64),
            &Precision::default(),
            &mut Param::new(0, &mut w, g, [&mut buf]),
        );
        for i in 0..n {
            let d = -f64::from(g[i]) + 0.01 * rw[i];
            rb[i] = if t == 0 { d } else { 0.9 * rb[i] + d };
            rw[i] -= 0.1 * rb[i];
        }
    }
    for i in 0..n {
        close(w[i], rw[i], "sgd maximize");
    }
}

/// A step's learning-rate factor gives bitwise the step of a config built
/// with the scaled rate: a schedule needs no rebuilt optimizer.
#[test]
fn the_learning_rate_comes_with_the_step() {
    let n = 300;
    let g = values(n, 12, 0.1);
    let schedule = LrSchedule {
        warmup: 3,
        decay: Decay::Cosine { final_factor: 0.1 },
        total: 10,
    };
    schedule.validate().unwrap();
    for config in [
        OptimizerConfig::from(LambConfig {
            decoupled_decay: true,
            ..LambConfig::default()
        }),
        AdamWConfig::default().into(),
        SgdConfig {
            momentum: 0.9,
            weight_decay: 1e-3,
            ..SgdConfig::default()
        }
        .into(),
        tessera_core::optim::LarsConfig {
            weight_decay: 1e-3,
            trust_clip: true,
            ..Default::default()
        }
        .into(),
    ] {
        let once = Optimizer::new(config).unwrap();
        for i in 0..10 {
            let factor = schedule.factor(i);
            let rebuilt = Optimizer::new(config.with_lr(config.lr() * factor)).unwrap();
            let mut out = Vec::new();
            for (o, step) in [
                (once, Step::after(i).with_lr_scale(factor)),
                (rebuilt, Step::after(i)),
            ] {
                let mut w = values(n, 13, 1.0);
                let mut state = vec![vec![0.25f32; n]; o.state_tensors()];
                let [s0, rest @ ..] = &mut state[..] else {
                    unreachable!()
                };
                match rest {
                    [] => o.step(
                        step,
                        &Precision::default(),
                        &mut Param::new(1, &mut w, &g, [s0]),
                    ),
                    [s1] => o.step(
                        step,
                        &Precision::default(),
                        &mut Param::new(1, &mut w, &g, [s0, s1]),
                    ),
                    _ => unreachable!(),
                }
                .unwrap();
                out.push((w, state));
            }
            assert_eq!(out[0], out[1], "{} at step {i}", config.name());
        }
    }
}

/// timm's `Lamb(max_grad_norm=1.0)` over three tensors: the global norm of
/// all gradients divides every gradient when above the maximum.
#[test]
fn lamb_max_grad_norm_follows_timm() {
    let sizes = [64usize, 33, 7];
    let lamb = Lamb::new(LambConfig::default()).unwrap();
    let (b1, b2, lr, wd, eps) = (
        0.9f64,
        0.999f64,
        f64::from(1e-3f32),
        f64::from(0.01f32),
        f64::from(1e-6f32),
    );
    let mut w: Vec<Vec<f32>> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| values(n, k as u32, 1.0))
        .collect();
    let mut state: Vec<[Vec<f32>; 2]> = sizes
        .iter()
        .map(|&n| [vec![0.0; n], vec![0.0; n]])
        .collect();
    let mut rw: Vec<Vec<f64>> = w
        .iter()
        .map(|w| w.iter().map(|&x| x.into()).collect())
        .collect();
    let mut rs: Vec<[Vec<f64>; 2]> = sizes
        .iter()
        .map(|&n| [vec![0.0; n], vec![0.0; n]])
        .collect();
    let mut counter = StepCounter::default();
    for t in 0..5u32 {
        let g: Vec<Vec<f32>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &n)| values(n, 90 + 7 * t + k as u32, 0.5))
            .collect();
        // The library side: a handful of lines.
        let clip = GradNorm::of(g.iter().map(Vec::as_slice)).clip_scale(1.0);
        let step = counter.next_step().with_grad_scale(clip);
        for (id, ((w, g), [m, v])) in w.iter_mut().zip(&g).zip(&mut state).enumerate() {
            lamb.step(
                step,
                &Precision::default(),
                &mut Param::new(id as u64, w, g, [m, v]),
            );
        }
        counter.applied(step);
        // timm/optim/lamb.py in f64.
        let global = g
            .iter()
            .flatten()
            .map(|&x| f64::from(x).powi(2))
            .sum::<f64>()
            .sqrt();
        let divisor = if global > 1.0 { global } else { 1.0 };
        assert!(t > 0 || divisor > 1.0, "the clip is exercised");
        let tt = step.t() as i32;
        let (bc1, bc2) = (1.0 - b1.powi(tt), 1.0 - b2.powi(tt));
        for k in 0..sizes.len() {
            let [m, v] = &mut rs[k];
            let u: Vec<f64> = (0..sizes[k])
                .map(|i| {
                    let gi = f64::from(g[k][i]) / divisor;
                    m[i] = b1 * m[i] + (1.0 - b1) * gi;
                    v[i] = b2 * v[i] + (1.0 - b2) * gi * gi;
                    (m[i] / bc1) / ((v[i] / bc2).sqrt() + eps) + wd * rw[k][i]
                })
                .collect();
            let (wn, un) = (norm(&rw[k]), norm(&u));
            let ratio = if wn > 0.0 && un > 0.0 { wn / un } else { 1.0 };
            for i in 0..sizes[k] {
                rw[k][i] -= lr * ratio * u[i];
            }
        }
    }
    for k in 0..sizes.len() {
        for i in 0..sizes[k] {
            close(w[k][i], rw[k][i], "lamb max_grad_norm");
        }
    }
}

/// Clipping from merged pieces (two replicas, each owning block-aligned
/// pieces of every tensor) gives the clip of the whole, bitwise.
#[test]
fn the_clip_splits_over_replicas() {
    let g: Vec<Vec<f32>> = (0..3)
        .map(|k| values(3 * BLOCK + 50 * k, k as u32, 3.0))
        .collect();
    let whole = GradNorm::of(g.iter().map(Vec::as_slice));
    let part =
        |lo: bool| GradNorm::of(g.iter().map(|t| if lo { &t[..BLOCK] } else { &t[BLOCK..] }));
    let mut merged = GradNorm::from_limbs(part(true).limbs());
    merged.merge(&part(false));
    assert_eq!(merged, whole);
    assert_eq!(
        merged.clip_scale(1.0).to_bits(),
        whole.clip_scale(1.0).to_bits()
    );
    assert!(whole.clip_scale(1.0) < 1.0);
}

/// The owned optimizer gives bitwise the slice API's steps (f16 weights
/// without a master copy beside f32 ones), counts steps, and checks ids.
#[test]
fn the_owned_optimizer_matches_the_slice_api() {
    let config = LambConfig::default();
    let groups = vec![
        Group {
            config: config.into(),
            params: vec![(0, 40)],
        },
        Group {
            config: config.excluded().into(),
            params: vec![(7, 9)],
        },
    ];
    let mut owned = OwnedOptimizer::new(groups.clone())
        .and_then(|o| o.with_max_grad_norm(0.5))
        .unwrap();
    let mut w0: Vec<f16> = values(40, 1, 1.0)
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    let mut w1 = values(9, 2, 1.0);
    let (mut r0, mut r1) = (w0.clone(), w1.clone());
    let mut rs = [
        [vec![0.0f32; 40], vec![0.0; 40]],
        [vec![0.0f32; 9], vec![0.0; 9]],
    ];
    let (lamb, excluded) = (
        Lamb::new(config).unwrap(),
        Lamb::new(config.excluded()).unwrap(),
    );
    for t in 0..3u32 {
        let (g0, g1) = (values(40, 10 + t, 1.0), values(9, 20 + t, 1.0));
        let step = owned
            .step(
                0.5,
                &mut [Tensor::new(0, &mut w0, &g0), Tensor::new(7, &mut w1, &g1)],
            )
            .unwrap();
        let clip = GradNorm::of([&g0[..], &g1[..]]).clip_scale(0.5);
        let want = Step::after(t.into())
            .with_lr_scale(0.5)
            .with_grad_scale(clip);
        assert_eq!(step, want);
        let [[m0, v0], [m1, v1]] = &mut rs;
        lamb.step(
            want,
            &Precision::default(),
            &mut Param::new(0, &mut r0, &g0, [m0, v0]),
        );
        excluded.step(
            want,
            &Precision::default(),
            &mut Param::new(7, &mut r1, &g1, [m1, v1]),
        );
    }
    assert_eq!((w0, w1), (r0, r1));
    assert_eq!(owned.applied_steps(), 3);
    assert_eq!(owned.state(7).unwrap(), &rs[1][..]);

    let mut dup = groups.clone();
    dup[1].params.push((0, 3));
    assert_eq!(
        OwnedOptimizer::new(dup).unwrap_err(),
        StepError::DuplicateId { id: 0 }
    );
    let (mut w, g) = (vec![0.0f32; 9], vec![0.0f32; 9]);
    let e = owned
        .step(1.0, &mut [Tensor::new(8, &mut w, &g)])
        .unwrap_err();
    assert_eq!(e, StepError::UnknownId { id: 8 });
    let e = owned
        .step(1.0, &mut [Tensor::new(0, &mut w, &g)])
        .unwrap_err();
    assert_eq!(
        e,
        StepError::Length {
            id: 0,
            expected: 40,
            got: 9
        }
    );
    let e = owned
        .step(1.0, &mut [Tensor::new(7, &mut w, &g)])
        .unwrap_err();
    assert_eq!(e, StepError::Missing { ids: vec![0] });
    assert_eq!(w, [0.0; 9], "a refused step writes nothing");
    assert_eq!(owned.applied_steps(), 3, "a refused step is not counted");
    let fresh = OwnedOptimizer::new(groups).unwrap();
    assert!(fresh.with_max_grad_norm(0.0).is_err());
}

/// The run-time-chosen optimizer refuses the wrong number of state
/// tensors instead of reading past them.
#[test]
fn the_optimizer_enum_checks_state_tensors() {
    let adamw = Optimizer::new(
        AdamWConfig {
            amsgrad: true,
            ..AdamWConfig::default()
        }
        .into(),
    )
    .unwrap();
    assert_eq!(adamw.state_tensors(), 3);
    let (mut w, g, mut m, mut v) = ([1.0f32; 4], [1.0f32; 4], [0.0f32; 4], [0.0f32; 4]);
    let e = adamw.step(
        Step::first(),
        &Precision::default(),
        &mut Param::new(3, &mut w, &g, [&mut m, &mut v]),
    );
    assert_eq!(
        e,
        Err(StepError::StateTensors {
            id: 3,
            expected: 3,
            got: 2
        })
    );
    assert_eq!(w, [1.0; 4]);
    assert_eq!(Step::after(u64::MAX).t(), u64::MAX, "no overflow panic");
}

/// A restored optimizer continues bitwise as the one it was saved from.
#[test]
fn the_owned_optimizer_resumes() {
    let groups = vec![Group {
        config: AdamWConfig::default().into(),
        params: vec![(4, 30)],
    }];
    let mut first = OwnedOptimizer::new(groups.clone()).unwrap();
    let (mut w, g) = (values(30, 1, 1.0), values(30, 2, 0.1));
    for _ in 0..3 {
        first.step(1.0, &mut [Tensor::new(4, &mut w, &g)]).unwrap();
    }
    let saved = first.state_dict();
    let mut resumed = OwnedOptimizer::new(groups.clone()).unwrap();
    resumed.load_state_dict(saved.clone()).unwrap();
    let mut w2 = w.clone();
    let a = first.step(1.0, &mut [Tensor::new(4, &mut w, &g)]).unwrap();
    let b = resumed
        .step(1.0, &mut [Tensor::new(4, &mut w2, &g)])
        .unwrap();
    assert_eq!((a, w), (b, w2));
    assert_eq!(a.t(), 4);

    let mut wrong = saved.clone();
    wrong.state[0].tensors.pop();
    let e = resumed.load_state_dict(wrong).unwrap_err();
    assert_eq!(
        e,
        StepError::StateTensors {
            id: 4,
            expected: 2,
            got: 1
        }
    );
    // A refused load changes nothing.
    let before = resumed.state_dict();
    let mut other = saved.clone();
    other.groups[0].params[0].0 = 5;
    assert_eq!(
        resumed.load_state_dict(other.clone()).unwrap_err(),
        StepError::UnknownId { id: 4 }
    );
    other.state[0].id = 5;
    assert_eq!(
        resumed.load_state_dict(other).unwrap_err(),
        StepError::Layout
    );
    let mut missing = saved;
    missing.state.clear();
    assert_eq!(
        resumed.load_state_dict(missing).unwrap_err(),
        StepError::Missing { ids: vec![4] }
    );
    assert_eq!(resumed.state_dict(), before);
    assert_eq!(resumed.applied_steps(), 4);
}
