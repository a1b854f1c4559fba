//! CTC against brute-force enumeration of every alignment on tiny cases
//! and an f64 forward recursion on long ones.

use half::{bf16, f16};
use proptest::prelude::*;
use tessera_core::loss::{self, CtcError, CtcInput, CtcParams, Reduction, math};

use super::ctc_oracle::{CtcCase, PAD, case, check_ctc, ctc_nll_f64, ctc_params, run_ctc};
use super::{U, bits, reductions, widen};

#[test]
fn ctc_single_step_is_exact() {
    // T = 1, target [1]: the only path is "1", nll = -lp_0(1) exactly.
    let log_probs = [-0.25f32, -1.5];
    let input = CtcInput {
        log_probs: &log_probs,
        max_time: 1,
        input_lengths: &[1],
        targets: &[1],
        max_target_len: 1,
        target_lengths: &[1],
    };
    let params = ctc_params(2, 0, Reduction::Sum);
    let mut losses = [0.0];
    let mut grad = [0.0f32; 2];
    let mut scratch = vec![0.0; loss::ctc_scratch_len(1, 1, 2)];
    let total =
        loss::ctc_loss_with_grad(&params, &input, &mut losses, &mut grad, &mut scratch).unwrap();
    assert_eq!(total, 1.5);
    assert_eq!(losses, [1.5]);
    // Occupancy 1 on class 1: grad = e^lp - onehot.
    assert_eq!(grad, [math::exp(-0.25), math::exp(-1.5) - 1.0]);
}

/// Uniform probabilities over the blank and one label, target `[1]`: the
/// alignments are the `T (T + 1) / 2` runs of the label among `2^T`
/// sequences, so the loss is known in closed form (`-ln 0.75` for `T =
/// 3`). Built with rustc 1.95 at opt-level 3, the loss-only kernel
/// once gave `-ln(1 - 2^-T)` here (0.13353139 for `T = 3`): LLVM's GVN
/// misread its rolling rows (see `read_write` in `loss/ctc.rs`). CI runs
/// this in release.
#[test]
fn ctc_uniform_two_classes_has_a_closed_form() {
    let params = ctc_params(2, 0, Reduction::Sum);
    for time in 1..=9 {
        let log_probs = vec![0.5f64.ln() as f32; 2 * time];
        let input = CtcInput {
            log_probs: &log_probs,
            max_time: time,
            input_lengths: &[time],
            targets: &[1],
            max_target_len: 1,
            target_lengths: &[1],
        };
        let (mut only, mut with_grad) = ([0.0], [0.0]);
        let mut scratch = vec![f32::NAN; 6]; // 2 (2 S + 1) for S = 1
        loss::ctc_loss(&params, &input, &mut only, &mut scratch).unwrap();
        let mut grad = vec![0.0f32; 2 * time];
        let mut scratch = vec![f32::NAN; loss::ctc_scratch_len(time, 1, 2)];
        loss::ctc_loss_with_grad(&params, &input, &mut with_grad, &mut grad, &mut scratch).unwrap();
        let nll = -((time * (time + 1) / 2) as f64 / 2f64.powi(time as i32)).ln();
        let tol = (4.0 + 2.0 * time as f64) * U * nll.max(1.0);
        for (what, got) in [("ctc_loss", only[0]), ("ctc_loss_with_grad", with_grad[0])] {
            let got = f64::from(got);
            assert!(
                (got - nll).abs() <= tol,
                "T = {time}: {what} {got}, exact {nll}"
            );
        }
    }
}

#[test]
fn ctc_distinct_labels() {
    for reduction in [Reduction::None, Reduction::Sum, Reduction::Mean] {
        check_ctc(&ctc_params(3, 0, reduction), &case(3, 0, &[4], &[&[1, 2]]));
        check_ctc(
            &ctc_params(4, 0, reduction),
            &case(4, 0, &[5], &[&[3, 1, 2]]),
        );
    }
}

#[test]
fn ctc_repeated_labels() {
    let params = ctc_params(3, 0, Reduction::Sum);
    check_ctc(&params, &case(3, 0, &[4], &[&[1, 1]]));
    check_ctc(&params, &case(3, 0, &[6], &[&[2, 2, 2]]));
    check_ctc(&params, &case(3, 0, &[5], &[&[1, 1, 2]]));
}

#[test]
fn ctc_empty_target() {
    for reduction in [Reduction::Sum, Reduction::Mean] {
        let params = ctc_params(3, 0, reduction);
        check_ctc(&params, &case(3, 0, &[3], &[&[]]));
        check_ctc(&params, &case(3, 0, &[1], &[&[]]));
    }
}

#[test]
fn ctc_tight_lengths() {
    let params = ctc_params(4, 0, Reduction::Mean);
    // T = L: one alignment.
    check_ctc(&params, &case(4, 0, &[3], &[&[1, 2, 3]]));
    // T = L + repeats: one alignment with the blank in between.
    check_ctc(&params, &case(4, 0, &[3], &[&[1, 1]]));
    check_ctc(&params, &case(4, 0, &[5], &[&[1, 1, 1]]));
}

#[test]
fn ctc_infeasible_targets() {
    // [1, 1] needs 3 steps; [1, 2, 3] needs 3.
    let c = case(4, 0, &[2, 2, 4], &[&[1, 1], &[1, 2, 3], &[1, 1]]);
    for reduction in [Reduction::None, Reduction::Sum, Reduction::Mean] {
        let params = ctc_params(4, 0, reduction);
        check_ctc(&params, &c);
        check_ctc(&params.with_zero_infinity(true), &c);
        let out =
            run_ctc::<f32, f32>(&params.with_zero_infinity(true), &c, &c.log_probs()).unwrap();
        assert_eq!(bits(&out.losses[..2]), [0, 0]);
        assert!(out.total.is_finite() && out.total > 0.0);
        let out = run_ctc::<f32, f32>(&params, &c, &c.log_probs()).unwrap();
        assert_eq!(out.total, f32::INFINITY);
        // The feasible item's gradient is untouched by its neighbours.
        for t in 0..4 {
            assert!(
                out.grad[(t * 3 + 2) * 4..][..4]
                    .iter()
                    .all(|g| g.is_finite())
            );
        }
    }
}

#[test]
fn ctc_batch_with_different_lengths() {
    let c = case(
        3,
        0,
        &[5, 3, 4, 0, 0, 2],
        &[&[1, 2], &[2], &[], &[], &[1], &[2, 1]],
    );
    for reduction in [Reduction::None, Reduction::Sum, Reduction::Mean] {
        for zero_infinity in [false, true] {
            let params = ctc_params(3, 0, reduction)
                .with_zero_infinity(zero_infinity)
                .with_loss_scale(4.0)
                .unwrap();
            check_ctc(&params, &c);
        }
    }
    // No time steps and an empty target: loss 0, not NaN.
    let out = run_ctc::<f32, f32>(&ctc_params(3, 0, Reduction::None), &c, &c.log_probs()).unwrap();
    assert_eq!(out.losses[3].to_bits(), 0);
    assert_eq!(out.losses[4], f32::INFINITY);
}

#[test]
fn ctc_blank_not_zero() {
    let params = ctc_params(4, 2, Reduction::Sum);
    check_ctc(&params, &case(4, 2, &[4, 3], &[&[0, 3], &[1, 1]]));
    let params = ctc_params(3, 2, Reduction::Mean);
    check_ctc(&params, &case(3, 2, &[5], &[&[0, 1, 0]]));
}

fn ctc_cases() -> impl Strategy<Value = (CtcCase, Reduction, bool, f32)> {
    (2usize..=4, 1usize..=3, 1usize..=5, 0usize..=3)
        .prop_flat_map(|(classes, n, max_time, max_target_len)| {
            let item = (
                0..=max_time,
                proptest::collection::vec(0..classes as u32 - 1, 0..=max_target_len),
            );
            (
                Just((classes, max_time, max_target_len)),
                0..classes as u32,
                proptest::collection::vec(item, n),
                proptest::collection::vec(-3.0f64..3.0, max_time * n * classes),
                reductions(),
                any::<bool>(),
                prop_oneof![Just(1.0f32), Just(8.0)],
            )
        })
        .prop_map(
            |((classes, max_time, max_target_len), blank, items, logits, reduction, zi, scale)| {
                // Labels drawn from the classes other than the blank.
                let skip_blank = |k: u32| if k >= blank { k + 1 } else { k };
                (
                    CtcCase {
                        classes,
                        blank,
                        max_time,
                        max_target_len,
                        input_lengths: items.iter().map(|i| i.0).collect(),
                        targets: items
                            .iter()
                            .map(|i| i.1.iter().map(|&k| skip_blank(k)).collect())
                            .collect(),
                        logits,
                    },
                    reduction,
                    zi,
                    scale,
                )
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn ctc_matches_brute_force((c, reduction, zero_infinity, scale) in ctc_cases()) {
        let params = CtcParams::new(c.classes, c.blank, reduction)?
            .with_zero_infinity(zero_infinity)
            .with_loss_scale(scale)?;
        check_ctc(&params, &c);
    }

    /// 16-bit log-probabilities are widened exactly; 16-bit gradients are
    /// the f32 ones rounded to nearest even.
    #[test]
    fn ctc_half_inputs_and_outputs((c, reduction, zero_infinity, _) in ctc_cases()) {
        let params = CtcParams::new(c.classes, c.blank, reduction)?
            .with_zero_infinity(zero_infinity)
            .with_loss_scale(1024.0)?;
        let h: Vec<f16> = c.log_probs().iter().map(|&x| f16::from_f32(x)).collect();
        let wide: Vec<f32> = h.iter().map(|x| x.to_f32()).collect();
        let a = run_ctc::<f16, f32>(&params, &c, &h).unwrap();
        let b = run_ctc::<f32, f32>(&params, &c, &wide).unwrap();
        prop_assert_eq!(a.total.to_bits(), b.total.to_bits());
        prop_assert_eq!(bits(&a.losses), bits(&b.losses));
        prop_assert_eq!(bits(&a.grad), bits(&b.grad));
        let g = run_ctc::<f16, f16>(&params, &c, &h).unwrap();
        let gb = run_ctc::<f16, bf16>(&params, &c, &h).unwrap();
        for ((x, y), want) in g.grad.iter().zip(&gb.grad).zip(&a.grad) {
            prop_assert_eq!(x.to_bits(), f16::from_f32(*want).to_bits());
            prop_assert_eq!(y.to_bits(), bf16::from_f32(*want).to_bits());
        }
    }
}

/// Long sequences: the loss against the f64 recursion, the gradient against
/// its central differences at a spread of points, the gradient's rows
/// summing to zero (normalised inputs), and finite values throughout.
#[test]
fn ctc_long_sequences_are_accurate() {
    let (time, classes, len) = (400, 12, 60);
    let target: Vec<u32> = (0..len).map(|i| 1 + (i * 7 % 11) as u32).collect();
    let mut c = case(classes, 0, &[time, time - 37], &[&target, &target[..40]]);
    // Sharper distributions: logits in [-8, 8).
    for z in &mut c.logits {
        *z *= 4.0;
    }
    let params = ctc_params(classes, 0, Reduction::Mean)
        .with_loss_scale(64.0)
        .unwrap();
    let log_probs = c.log_probs();
    let out = run_ctc::<f32, f32>(&params, &c, &log_probs).unwrap();
    let lp = widen(&log_probs);
    let nll_f64 = |lp: &[f64], b: usize| {
        ctc_nll_f64(
            &c.item_lp(lp, b),
            c.input_lengths[b],
            classes,
            0,
            &c.targets[b],
        )
    };
    for b in 0..2 {
        let want = nll_f64(&lp, b);
        let got = f64::from(out.losses[b]);
        assert!(want.is_finite() && want > 1000.0, "{want}");
        // Observed: 3e-8.
        assert!(
            (got - want).abs() <= 3e-7 * want,
            "item {b}: {got} vs f64 recursion {want}"
        );
        let w = c.weight(&params, b);
        for t in 0..c.input_lengths[b] {
            let row = &out.grad[(t * 2 + b) * classes..][..classes];
            assert!(row.iter().all(|g| g.is_finite()));
            let sum: f64 = row.iter().map(|&g| f64::from(g)).sum();
            assert!(sum.abs() <= 1e-6 * w, "item {b}, t {t}: row sums to {sum}");
        }
    }
    // Observed: 2.5e-5 w at most (PyTorch's f32 algorithm: 2e-3 w).
    let h = 1e-5;
    for i in 0..32 {
        let b = i % 2;
        let (t, k) = ((i * 97 + 5) % c.input_lengths[b], (i * 5) % classes);
        let at = (t * 2 + b) * classes + k;
        let mut zp = c.logits.clone();
        let mut zm = c.logits.clone();
        zp[at] += h;
        zm[at] -= h;
        let fd =
            (nll_f64(&c.log_probs_f64(&zp), b) - nll_f64(&c.log_probs_f64(&zm), b)) / (2.0 * h);
        let w = c.weight(&params, b);
        let got = f64::from(out.grad[at]);
        assert!(
            (got - w * fd).abs() <= 1e-4 * w,
            "item {b}, t {t}, k {k}: grad {got}, central difference {}",
            w * fd
        );
    }
}

#[test]
fn ctc_bad_data_are_errors_and_write_nothing() {
    let params = ctc_params(4, 0, Reduction::Sum);
    let log_probs = vec![-1.0f32; 3 * 2 * 4];
    let mut losses = [9.0f32; 2];
    let mut grad = vec![9.0f32; log_probs.len()];
    let mut scratch = vec![0.0; loss::ctc_scratch_len(3, 2, 4)];
    let mut check =
        |input_lengths: &[usize], targets: &[u32], target_lengths: &[usize], want: CtcError| {
            let input = CtcInput {
                log_probs: &log_probs,
                max_time: 3,
                input_lengths,
                targets,
                max_target_len: 2,
                target_lengths,
            };
            let got =
                loss::ctc_loss_with_grad(&params, &input, &mut losses, &mut grad, &mut scratch);
            assert_eq!(got, Err(want));
            assert_eq!(losses, [9.0; 2]);
            assert!(grad.iter().all(|&g| g == 9.0));
            let mut small = vec![0.0; 2 * (2 * 2 + 1)];
            assert_eq!(
                loss::ctc_loss(&params, &input, &mut losses, &mut small),
                Err(want)
            );
            assert_eq!(losses, [9.0; 2]);
            want.to_string()
        };
    let msg = check(
        &[3, 4],
        &[1, 2, 1, 2],
        &[2, 2],
        CtcError::InputLength {
            batch: 1,
            length: 4,
            max_time: 3,
        },
    );
    assert_eq!(
        msg,
        "input length 4 of batch item 1 exceeds the 3 time steps"
    );
    check(
        &[3, 3],
        &[1, 2, 1, 2],
        &[3, 2],
        CtcError::TargetLength {
            batch: 0,
            length: 3,
            max_target_len: 2,
        },
    );
    check(
        &[3, 3],
        &[1, 2, 1, 4],
        &[2, 2],
        CtcError::LabelOutOfRange {
            batch: 1,
            position: 1,
            label: 4,
            classes: 4,
        },
    );
    let msg = check(
        &[3, 3],
        &[0, 2, 1, 3],
        &[2, 2],
        CtcError::BlankInTarget {
            batch: 0,
            position: 0,
            blank: 0,
        },
    );
    assert_eq!(msg, "batch item 0's target has the blank (0) at position 0");
    // Padding beyond a target's length is never read.
    let input = CtcInput {
        log_probs: &log_probs,
        max_time: 3,
        input_lengths: &[3, 3],
        targets: &[1, PAD, 0, PAD],
        max_target_len: 2,
        target_lengths: &[1, 0],
    };
    assert!(
        loss::ctc_loss_with_grad(&params, &input, &mut losses, &mut grad, &mut scratch).is_ok()
    );
}

#[test]
#[should_panic(expected = "scratch")]
fn ctc_short_scratch_panics() {
    let params = ctc_params(2, 0, Reduction::Sum);
    let input = CtcInput {
        log_probs: &[0.0f32; 4],
        max_time: 2,
        input_lengths: &[2],
        targets: &[1],
        max_target_len: 1,
        target_lengths: &[1],
    };
    let mut grad = [0.0f32; 4];
    let mut scratch = vec![0.0; loss::ctc_scratch_len(2, 1, 2) - 1];
    let _ = loss::ctc_loss_with_grad(&params, &input, &mut [0.0], &mut grad, &mut scratch);
}

#[test]
fn ctc_scratch_lengths() {
    assert_eq!(loss::ctc_scratch_len(10, 5, 7), 12 * 11 + 10 + 7);
    assert_eq!(loss::ctc_scratch_len(0, 0, 1), 3);
}

/// Pinned outputs: a change of any of these bits is a breaking change.
#[test]
fn ctc_value_stability() {
    let c = case(5, 0, &[7, 5, 6], &[&[1, 2, 2, 3], &[4], &[3, 1, 3]]);
    let params = ctc_params(5, 0, Reduction::Mean)
        .with_loss_scale(32.0)
        .unwrap();
    let out = run_ctc::<f32, f32>(&params, &c, &c.log_probs()).unwrap();
    let pinned = (out.total.to_bits(), bits(&out.losses), bits(&out.grad));
    assert_eq!(pinned, ctc_pinned());
}

fn ctc_pinned() -> (u32, Vec<u32>, Vec<u32>) {
    (
        0x40395d62,
        vec![0x4132515f, 0x40826528, 0x40af7ab3],
        vec![
            0xbf45e2b0, 0xbf956511, 0x3fc474be, 0x3eaa85d7, 0x3d94034c, 0xc1022c2a, 0x3f04a76c,
            0x40c474be, 0x3faa85d7, 0x3e15a642, 0xbe08981d, 0x3ecb4eaa, 0x3db0783b, 0xbf124680,
            0x3e62d8b3, 0x3da0e456, 0xbf714c08, 0xbd8adbcc, 0x3f440256, 0x3e2a2286, 0xc080b34a,
            0x3f987b00, 0x3e845a2c, 0x40440256, 0xbefb2424, 0x3d00b2c8, 0x3eae8430, 0x3e3255e2,
            0xbf7e8219, 0x3ee53eb9, 0x3c7dfc80, 0x3f749613, 0xbfe898f7, 0x3d86e5ae, 0x3f47c732,
            0xbf32f5b4, 0x40b30c36, 0x3f9b6996, 0x3e86e5ae, 0xc0cbf63e, 0x3dad95a8, 0xbfc9cfe4,
            0x3ecf3773, 0x3d3f26a2, 0x3f852f76, 0xbfedaa3f, 0x3d5858d7, 0x3d72d4ab, 0x3e0b0dc8,
            0x3fcdef1a, 0xbe595bcb, 0x3e5858d7, 0x40203386, 0x3f0b0dc8, 0xc042e6cb, 0xbf7f222b,
            0xbe930438, 0x4002f87e, 0xbf5be8ec, 0x3dc559ba, 0x3d911c50, 0x3e04a76c, 0xbf17fdc3,
            0x3ea45fe8, 0x3d94034c, 0xc08451a2, 0x3f987b00, 0x3e845a2c, 0x40440256, 0xbec13eba,
            0x3e8a8ac0, 0x3eae3d7e, 0x3db0783b, 0xbf6b2955, 0x3e62d8b3, 0x3f0adf68, 0x3e987b00,
            0xbef79396, 0xbf05dbba, 0x3e2a2286, 0x00000000, 0x00000000, 0x00000000, 0x00000000,
            0x00000000, 0xbfe516a4, 0x3feebaf2, 0x3ecf3773, 0xbfc2a1a3, 0x3f852f76, 0xbf3728d8,
            0x3fb30c36, 0x3e9b6996, 0xbfe235ca, 0x3f47c732, 0x00000000, 0x00000000, 0x00000000,
            0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000, 0x00000000,
        ],
    )
}

/// PyTorch's layouts: `i64` lengths and concatenated or padded targets
/// give bitwise the losses and gradient of the padded `u32` input.
#[test]
fn ctc_takes_torch_layouts() {
    use tessera_core::loss::CtcTargets;
    let (time, classes) = (6, 4);
    let log_probs: Vec<f32> = (0..time * 3 * classes)
        .map(|i| -1.0 - (i % 7) as f32 * 0.25)
        .collect();
    let padded = [1u32, 2, 3, 3, 0, 0, 2, 0, 0];
    let want = CtcInput {
        log_probs: &log_probs,
        max_time: time,
        input_lengths: &[6, 5, 4],
        targets: &padded,
        max_target_len: 3,
        target_lengths: &[3, 1, 1],
    };
    let run = |input: &CtcInput<'_, f32>| {
        let params = ctc_params(classes, 0, Reduction::Mean);
        let mut losses = [0.0f32; 3];
        let mut grad = vec![0.0f32; log_probs.len()];
        let mut scratch = vec![0.0; loss::ctc_scratch_len(time, input.max_target_len, classes)];
        let total = loss::ctc_loss_with_grad(&params, input, &mut losses, &mut grad, &mut scratch);
        (total.unwrap().to_bits(), bits(&losses), bits(&grad))
    };
    let concatenated = CtcTargets::from_torch(&[6, 5, 4], &[1, 2, 3, 3, 2], &[3, 1, 1]).unwrap();
    let torch_padded =
        CtcTargets::from_torch(&[6, 5, 4], &[1, 2, 3, 3, -1, -1, 2, -1, -1], &[3, 1, 1]).unwrap();
    assert_eq!(run(&concatenated.input(&log_probs, time)), run(&want));
    assert_eq!(run(&torch_padded.input(&log_probs, time)), run(&want));

    assert_eq!(
        CtcTargets::from_torch(&[6, -5], &[1, 2], &[1, 1]),
        Err(CtcError::Length {
            batch: 1,
            length: -5
        })
    );
    assert_eq!(
        CtcTargets::from_torch(&[6], &[1, 2], &[1, 1]),
        Err(CtcError::BatchSize {
            input_lengths: 1,
            target_lengths: 2
        })
    );
    assert_eq!(
        CtcTargets::from_torch(&[6, 6], &[1, 2, 3], &[1, 1]),
        Err(CtcError::TargetsLayout {
            targets: 3,
            batch: 2,
            total: 2
        })
    );
    assert_eq!(
        CtcTargets::from_torch(&[6], &[1 << 40], &[1]),
        Err(CtcError::Label {
            batch: 0,
            position: 0,
            label: 1 << 40
        })
    );
}
