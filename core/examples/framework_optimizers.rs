//! A framework reusing LAMB, AdamW and the dynamic loss scaler over f16
//! weights (no f32 master copy), with `std` and in `no_std`:
//!
//! - with `alloc`: one owned optimizer over two parameter groups, the
//!   loss scaler deciding each step; stopped at step 50, its state saved
//!   and restored into fresh objects, the run ends bitwise where the
//!   uninterrupted one does;
//! - in `no_std`: the same first step through the borrowed API, the
//!   caller owning the optimizer state, gives the same bits.
//!
//! Run with `cargo run -p tessera-core --example framework_optimizers`.

use tessera_core::fp::f16;
use tessera_core::optim::{
    AdamW, AdamWConfig, Group, Lamb, LambConfig, OwnedOptimizer, Param, Precision, Step, StepError,
    Tensor,
};
use tessera_core::scale::{DynamicLossScaler, GradSlice};

const N: usize = 300;
const STEPS: usize = 100;

/// The optimizer, the loss scaler and the weights: what a checkpoint holds.
type Run = (OwnedOptimizer, DynamicLossScaler, [Vec<f16>; 2]);

/// LAMB for tensor 0, AdamW for tensor 1.
fn configs() -> (LambConfig, AdamWConfig) {
    let lamb = LambConfig {
        lr: 0.02,
        ..LambConfig::default()
    };
    (
        lamb,
        AdamWConfig {
            lr: 0.01,
            ..AdamWConfig::default()
        },
    )
}

fn new_run() -> Result<Run, StepError> {
    let (lamb, adamw) = configs();
    let groups = vec![
        Group {
            config: lamb.into(),
            params: vec![(0, N)],
        },
        Group {
            config: adamw.into(),
            params: vec![(1, N)],
        },
    ];
    let w = |v: f32| {
        (0..N)
            .map(|i| f16::from_f32(v + i as f32 / 1024.0))
            .collect()
    };
    Ok((
        OwnedOptimizer::new(groups)?,
        DynamicLossScaler::default(),
        [w(1.0), w(-1.0)],
    ))
}

/// The f16 gradients of `scale * |w|^2 / 2`, with an overflow at step 7.
fn grads(w: &[Vec<f16>; 2], scale: f32, step: usize) -> [Vec<f16>; 2] {
    let mut g: [Vec<f16>; 2] = w.clone().map(|w| {
        w.iter()
            .map(|x| f16::from_f32(scale * x.to_f32()))
            .collect()
    });
    if step == 7 {
        g[1][5] = f16::INFINITY;
    }
    g
}

fn train((opt, scaler, w): &mut Run, steps: std::ops::Range<usize>) -> Result<(), StepError> {
    for step in steps {
        let mut g = grads(w, scaler.scale(), step);
        let [g0, g1] = &mut g;
        let decision = scaler.update(scaler.unscale([GradSlice::from(g0), GradSlice::from(g1)]));
        let [w0, w1] = w;
        let params = &mut [Tensor::new(0, w0, &g[0]), Tensor::new(1, w1, &g[1])];
        opt.step_on(decision, 1.0, params)?;
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut whole = new_run()?;
    train(&mut whole, 0..STEPS)?;

    let mut first = new_run()?;
    train(&mut first, 0..50)?;
    let (dict, scaler, weights) = (first.0.state_dict(), first.1.state(), first.2.clone());
    let mut resumed = (
        OwnedOptimizer::from_state_dict(dict)?,
        DynamicLossScaler::from_state(scaler)?,
        weights,
    );
    train(&mut resumed, 50..STEPS)?;
    assert_eq!(
        resumed.2, whole.2,
        "the resumed run ends bitwise where the whole one does"
    );
    let skipped = STEPS as u64 - whole.0.applied_steps(); // overflows, step 7's among them
    println!("resumed at step 50: bitwise the uninterrupted run ({skipped} of {STEPS} skipped)");

    // no_std: a step through the borrowed API, the state owned here.
    let (mut owned, mut borrowed) = (new_run()?, new_run()?.2);
    let g = grads(&borrowed, 1.0, 0);
    let [w0, w1] = &mut owned.2;
    owned.0.step(
        1.0,
        &mut [Tensor::new(0, w0, &g[0]), Tensor::new(1, w1, &g[1])],
    )?;
    let (lamb, adamw) = (Lamb::new(configs().0)?, AdamW::new(configs().1)?);
    let ([mut m0, mut v0], [mut m1, mut v1]) = ([[0.0f32; N]; 2], [[0.0f32; N]; 2]);
    let ([w0, w1], p) = (&mut borrowed, Precision::default());
    lamb.step(
        Step::first(),
        &p,
        &mut Param::new(0, w0, &g[0], [&mut m0, &mut v0]),
    );
    adamw.step(
        Step::first(),
        &p,
        &mut Param::new(1, w1, &g[1], [&mut m1, &mut v1]),
    )?;
    assert_eq!(
        borrowed, owned.2,
        "the borrowed API gives the owned optimizer's bits"
    );
    println!("no_std step: bitwise the owned optimizer's");
    Ok(())
}
