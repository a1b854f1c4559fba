//! Gradient accumulation.

use super::*;

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
