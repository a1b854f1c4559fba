//! A training loop with LAMB: a warm-up-plus-cosine schedule, timm's
//! global gradient clip, dynamic loss scaling (with an injected overflow
//! that skips a step), and f16 weights without an f32 master copy next to
//! f32 weights.
//!
//! The "model" fits `w` to a target under a squared loss, so the gradient
//! of the scaled loss is `scale * (w - target)`.
//!
//! Run with `cargo run -p tessera-core --example train_lamb`.

use tessera_core::fp::f16;
use tessera_core::optim::{
    Decay, Group, LambConfig, LrSchedule, OwnedOptimizer, StepError, Tensor,
};
use tessera_core::scale::{DynamicLossScaler, GradSlice};

fn main() -> Result<(), StepError> {
    let (n0, n1) = (256, 64);
    let lamb = LambConfig {
        lr: 0.05,
        ..LambConfig::default()
    };
    let groups = vec![Group {
        config: lamb.into(),
        params: vec![(0, n0), (1, n1)],
    }];
    // Stochastic rounding of the f16 weights (the default precision),
    // timm's max_grad_norm = 1.
    let mut optimizer = OwnedOptimizer::new(groups)?.with_max_grad_norm(1.0)?;
    let steps = 40;
    let schedule = LrSchedule {
        warmup: 5,
        decay: Decay::Cosine { final_factor: 0.0 },
        total: steps,
    };
    let mut scaler = DynamicLossScaler::default();

    let mut w0 = vec![f16::from_f32(1.0); n0]; // f16, no master copy
    let mut w1 = vec![-1.0f32; n1];
    let (t0, t1) = (0.25f32, 0.5f32);
    let distance = |w0: &[f16], w1: &[f32]| {
        let d0 = w0.iter().map(|w| (w.to_f32() - t0).abs()).sum::<f32>();
        d0 + w1.iter().map(|w| (w - t1).abs()).sum::<f32>()
    };
    let start = distance(&w0, &w1);
    for step in 0..steps {
        // The backward pass of `scale * loss`, in f16 for the first tensor.
        let s = scaler.scale();
        let mut g0: Vec<f16> = w0
            .iter()
            .map(|w| f16::from_f32(s * (w.to_f32() - t0)))
            .collect();
        let mut g1: Vec<f32> = w1.iter().map(|w| s * (w - t1)).collect();
        if step == 7 {
            g1[3] = f32::INFINITY; // an overflow: the step is skipped
        }
        let stats = scaler.unscale([GradSlice::from(&mut g0), GradSlice::from(&mut g1)]);
        let decision = scaler.update(stats);
        let g0: Vec<f32> = g0.iter().map(|g| g.to_f32()).collect();
        let params = &mut [Tensor::new(0, &mut w0, &g0), Tensor::new(1, &mut w1, &g1)];
        match optimizer.step_on(decision, schedule.factor(step), params)? {
            Some(applied) => println!(
                "step {step:2}: t {:2}, lr x{:.3}, clip x{:.3}, scale {s}",
                applied.t(),
                applied.lr_scale(),
                applied.grad_scale()
            ),
            None => println!(
                "step {step:2}: skipped (overflow), scale {s} -> {}",
                scaler.scale()
            ),
        }
    }
    let end = distance(&w0, &w1);
    println!("distance to the target: {start} -> {end}");
    assert_eq!(optimizer.applied_steps(), steps - 1);
    assert!(end < start / 2.0);
    Ok(())
}
