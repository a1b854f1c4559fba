//! Softmax cross-entropy against an f64 reference and central finite
//! differences.

use half::{bf16, f16};
use proptest::prelude::*;
use tessera_core::fp::{Element, Rounding};
use tessera_core::loss::{
    self, CrossEntropyError, CrossEntropyParams, CtcParams, ParamError, Reduction,
};

use super::{U, bits, reductions, widen};

/// One row's loss, softmax and `1 - p_label` in f64, computed so that small
/// losses keep their relative precision.
fn ce_row_reference(row: &[f64], label: usize) -> (f64, Vec<f64>, f64) {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = row.iter().map(|x| (x - m).exp()).collect();
    let others: f64 = e
        .iter()
        .enumerate()
        .filter(|&(j, _)| j != label)
        .map(|(_, v)| v)
        .sum();
    let sum = others + e[label];
    let loss = if others <= e[label] {
        (others / e[label]).ln_1p()
    } else {
        sum.ln() - (row[label] - m)
    };
    let p = e.iter().map(|v| v / sum).collect();
    (loss, p, others / sum)
}

struct CeReference {
    losses: Vec<f64>,
    total: f64,
    grad: Vec<f64>,
}

fn ce_reference(
    logits: &[f64],
    labels: &[u32],
    classes: usize,
    reduction: Reduction,
    ignore: Option<u32>,
    loss_scale: f64,
) -> CeReference {
    let counted = labels.iter().filter(|&&l| Some(l) != ignore).count();
    let w = match reduction {
        Reduction::Mean => loss_scale / counted as f64,
        _ => loss_scale,
    };
    let mut losses = vec![0.0; labels.len()];
    let mut grad = vec![0.0; logits.len()];
    for (i, &label) in labels.iter().enumerate() {
        if Some(label) == ignore {
            continue;
        }
        let row = &logits[i * classes..][..classes];
        let (loss, p, not_label) = ce_row_reference(row, label as usize);
        losses[i] = loss;
        for (j, g) in grad[i * classes..][..classes].iter_mut().enumerate() {
            *g = w * if j == label as usize {
                -not_label
            } else {
                p[j]
            };
        }
    }
    let sum: f64 = losses.iter().sum();
    let total = match reduction {
        Reduction::Mean => sum / counted as f64,
        _ => sum,
    };
    CeReference {
        losses,
        total,
        grad,
    }
}

/// The kernel's outputs.
struct CeOut<G> {
    total: f32,
    losses: Vec<f32>,
    grad: Vec<G>,
}

fn run_ce<L: Element, G: Element>(
    params: &CrossEntropyParams,
    logits: &[L],
    labels: &[u32],
) -> Result<CeOut<G>, CrossEntropyError> {
    let mut losses = vec![-7.0; labels.len()];
    let mut grad = vec![G::store(-7.0, Rounding::Nearest, 0); logits.len()];
    let total =
        loss::softmax_cross_entropy_with_grad(params, logits, labels, &mut losses, &mut grad)?;
    Ok(CeOut {
        total,
        losses,
        grad,
    })
}

/// Checks the kernel against the f64 reference: losses and the total to a
/// relative `(4 classes + 8 + min(spread, 104)) u` (the spread being the
/// largest `max - min` of a row), the gradient to the same
/// relative bound plus an absolute 2^-120 for results near underflow.
fn check_ce_against_reference<L: Element>(
    params: &CrossEntropyParams,
    logits: &[L],
    labels: &[u32],
) {
    let classes = params.classes();
    let out = run_ce::<L, f32>(params, logits, labels).unwrap();
    let x = widen(logits);
    let reference = ce_reference(
        &x,
        labels,
        classes,
        params.reduction(),
        params.ignore_index(),
        f64::from(params.loss_scale()),
    );
    let spread = x
        .chunks(classes)
        .map(|row| {
            let max = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let min = row.iter().copied().fold(f64::INFINITY, f64::min);
            max - min
        })
        .fold(0.0, f64::max);
    // Rounding x_j - max costs |x_j - max| u/2 relative in e_j, which
    // matters only while e_j has not underflowed.
    let tol = (4.0 * classes as f64 + 8.0 + spread.min(104.0)) * U;
    let close =
        |got: f32, want: f64, slack: f64| (f64::from(got) - want).abs() <= tol * want.abs() + slack;
    for (i, (&got, &want)) in out.losses.iter().zip(&reference.losses).enumerate() {
        assert!(
            close(got, want, 0.0),
            "row {i}: loss {got:e}, want {want:e}"
        );
    }
    if labels.iter().any(|&l| Some(l) != params.ignore_index()) {
        assert!(
            close(out.total, reference.total, 0.0),
            "total {}, want {}",
            out.total,
            reference.total
        );
    }
    let slack = 2f64.powi(-120);
    for (i, (&got, &want)) in out.grad.iter().zip(&reference.grad).enumerate() {
        assert!(
            close(got, want, slack),
            "grad[{i}] = {got:e}, want {want:e} (tol {tol:e})"
        );
    }
}

/// Rows of logits with labels: `(classes, logits, labels)`.
fn ce_batch(
    max_batch: usize,
    max_classes: usize,
    range: f32,
) -> impl Strategy<Value = (usize, Vec<f32>, Vec<u32>)> {
    (1..=max_classes, 1..=max_batch).prop_flat_map(move |(classes, batch)| {
        (
            Just(classes),
            proptest::collection::vec(-range..range, classes * batch),
            proptest::collection::vec(0..classes as u32, batch),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(192))]

    #[test]
    fn ce_matches_f64_reference(
        (classes, logits, labels) in ce_batch(6, 24, 40.0),
        reduction in reductions(),
        ignore in proptest::option::of(0u32..24),
        loss_scale in prop_oneof![Just(1.0f32), Just(0.5), Just(1024.0), Just(65536.0)],
    ) {
        let mut params = CrossEntropyParams::new(classes, reduction)?.with_loss_scale(loss_scale)?;
        if let Some(ignore) = ignore {
            params = params.with_ignore_index(ignore);
        }
        check_ce_against_reference(&params, &logits, &labels);
    }

    #[test]
    fn ce_gradient_matches_central_differences(
        (classes, logits, labels) in ce_batch(4, 8, 6.0),
        reduction in reductions(),
        loss_scale in prop_oneof![Just(1.0f32), Just(8.0)],
    ) {
        let params = CrossEntropyParams::new(classes, reduction)?.with_loss_scale(loss_scale)?;
        let out = run_ce::<f32, f32>(&params, &logits, &labels).unwrap();
        let x = widen(&logits);
        // The differentiated function: loss_scale times the reduced loss.
        let f = |x: &[f64]| {
            f64::from(loss_scale)
                * ce_reference(x, &labels, classes, reduction, None, 1.0).total
        };
        let h = 1e-5;
        for i in 0..x.len() {
            let mut xp = x.clone();
            let mut xm = x.clone();
            xp[i] += h;
            xm[i] -= h;
            let fd = (f(&xp) - f(&xm)) / (2.0 * h);
            let got = f64::from(out.grad[i]);
            prop_assert!(
                (got - fd).abs() <= 2e-6 * f64::from(loss_scale),
                "grad[{}] = {}, central difference {}", i, got, fd
            );
        }
    }

    #[test]
    fn ce_f16_and_bf16_logits(
        (classes, logits, labels) in ce_batch(5, 16, 30.0),
        reduction in reductions(),
    ) {
        let params = CrossEntropyParams::new(classes, reduction)?.with_loss_scale(256.0)?;
        let h: Vec<f16> = logits.iter().map(|&x| f16::from_f32(x)).collect();
        let b: Vec<bf16> = logits.iter().map(|&x| bf16::from_f32(x)).collect();
        check_ce_against_reference(&params, &h, &labels);
        check_ce_against_reference(&params, &b, &labels);
        // 16-bit logits are widened exactly and computed in f32: the same
        // bits as f32 logits of the same values.
        let wide: Vec<f32> = h.iter().map(|v| v.to_f32()).collect();
        let from_half = run_ce::<f16, f32>(&params, &h, &labels).unwrap();
        let from_f32 = run_ce::<f32, f32>(&params, &wide, &labels).unwrap();
        prop_assert_eq!(bits(&from_half.losses), bits(&from_f32.losses));
        prop_assert_eq!(bits(&from_half.grad), bits(&from_f32.grad));
        prop_assert_eq!(from_half.total.to_bits(), from_f32.total.to_bits());
        // A 16-bit gradient is the f32 gradient rounded to nearest even.
        let g16 = run_ce::<f16, f16>(&params, &h, &labels).unwrap();
        let gb16 = run_ce::<f16, bf16>(&params, &h, &labels).unwrap();
        for ((g, gb), want) in g16.grad.iter().zip(&gb16.grad).zip(&from_half.grad) {
            prop_assert_eq!(g.to_bits(), f16::from_f32(*want).to_bits());
            prop_assert_eq!(gb.to_bits(), bf16::from_f32(*want).to_bits());
        }
        prop_assert_eq!(bits(&g16.losses), bits(&from_half.losses));
    }

    #[test]
    fn ce_mean_is_sum_with_a_divided_loss_scale(
        (classes, logits, labels) in ce_batch(7, 10, 20.0),
        ignore in proptest::option::of(0u32..10),
    ) {
        let mut mean = CrossEntropyParams::new(classes, Reduction::Mean)?.with_loss_scale(3.0)?;
        if let Some(ignore) = ignore {
            mean = mean.with_ignore_index(ignore);
        }
        let counted = labels.iter().filter(|&&l| Some(l) != ignore).count();
        prop_assume!(counted > 0);
        let mut sum = CrossEntropyParams::new(classes, Reduction::Sum)?
            .with_loss_scale(3.0 / counted as f32)?;
        if let Some(ignore) = ignore {
            sum = sum.with_ignore_index(ignore);
        }
        let m = run_ce::<f32, f32>(&mean, &logits, &labels).unwrap();
        let s = run_ce::<f32, f32>(&sum, &logits, &labels).unwrap();
        prop_assert_eq!(bits(&m.grad), bits(&s.grad));
        prop_assert_eq!(bits(&m.losses), bits(&s.losses));
        let want = f64::from(s.total) / counted as f64;
        prop_assert!((f64::from(m.total) - want).abs() <= 2.0 * U * want.abs());
    }

    /// A power-of-two loss scale multiplies every gradient exactly (away from
    /// overflow and underflow); losses are never scaled.
    #[test]
    fn ce_loss_scale_is_exact_for_powers_of_two(
        (classes, logits, labels) in ce_batch(5, 12, 10.0),
        reduction in reductions(),
        k in 0i32..20,
    ) {
        let one = CrossEntropyParams::new(classes, reduction)?;
        let scaled = one.with_loss_scale(2f32.powi(k))?;
        let a = run_ce::<f32, f32>(&one, &logits, &labels).unwrap();
        let b = run_ce::<f32, f32>(&scaled, &logits, &labels).unwrap();
        prop_assert_eq!(a.total.to_bits(), b.total.to_bits());
        prop_assert_eq!(bits(&a.losses), bits(&b.losses));
        for (x, y) in a.grad.iter().zip(&b.grad) {
            if x.abs() >= f32::MIN_POSITIVE {
                prop_assert_eq!((x * 2f32.powi(k)).to_bits(), y.to_bits());
            }
        }
    }

    /// Per-row outputs depend only on the row: any split of the batch gives
    /// the same bits (with Sum or None, whose weight does not depend on the
    /// batch).
    #[test]
    fn ce_split_batch_gives_the_same_rows(
        (classes, logits, labels) in ce_batch(8, 10, 20.0),
        cut in 0usize..=8,
    ) {
        let params = CrossEntropyParams::new(classes, Reduction::Sum)?.with_loss_scale(0.125)?;
        let cut = cut.min(labels.len());
        let whole = run_ce::<f32, f32>(&params, &logits, &labels).unwrap();
        let a = run_ce::<f32, f32>(&params, &logits[..cut * classes], &labels[..cut]).unwrap();
        let b = run_ce::<f32, f32>(&params, &logits[cut * classes..], &labels[cut..]).unwrap();
        prop_assert_eq!(bits(&whole.losses), bits(&[a.losses, b.losses].concat()));
        prop_assert_eq!(bits(&whole.grad), bits(&[a.grad, b.grad].concat()));
    }

    /// The loss-only kernel returns bitwise the losses of the full one.
    #[test]
    fn ce_loss_only_matches_with_grad(
        (classes, logits, labels) in ce_batch(6, 12, 50.0),
        reduction in reductions(),
        ignore in proptest::option::of(0u32..12),
    ) {
        let mut params = CrossEntropyParams::new(classes, reduction)?;
        if let Some(ignore) = ignore {
            params = params.with_ignore_index(ignore);
        }
        let full = run_ce::<f32, f32>(&params, &logits, &labels).unwrap();
        let mut losses = vec![0.0; labels.len()];
        let total = loss::softmax_cross_entropy(&params, &logits, &labels, &mut losses).unwrap();
        prop_assert_eq!(total.to_bits(), full.total.to_bits());
        prop_assert_eq!(bits(&losses), bits(&full.losses));
    }
}

#[test]
fn ce_huge_logits_are_stable() {
    let logits = [
        1e4f32, -1e4, 0.0, 5e3, // label 0: the max
        1e4, -1e4, 0.0, 5e3, // label 1: 2e4 below the max
        -1e4, -1e4, -1e4, -1e4, // all equal: ln 4
        3e38, -3e38, 3e38, 0.0, // near f32::MAX, two maxima
    ];
    let labels = [0, 1, 2, 0];
    for reduction in [Reduction::Sum, Reduction::Mean, Reduction::None] {
        let params = CrossEntropyParams::new(4, reduction).unwrap();
        check_ce_against_reference(&params, &logits, &labels);
        let out = run_ce::<f32, f32>(&params, &logits, &labels).unwrap();
        assert_eq!(out.losses[0], 0.0, "e^-5000 is far below an ulp of 0");
        assert_eq!(out.losses[1], 2e4);
        assert_eq!(out.losses[2], 4f64.ln() as f32);
        assert_eq!(out.losses[3], 2f64.ln() as f32);
        assert!(out.grad.iter().all(|g| g.is_finite()));
    }
    // f16 logits at the format's extremes.
    let h: Vec<f16> = [65504.0f32, -65504.0, 0.0, 1e4]
        .iter()
        .map(|&x| f16::from_f32(x))
        .collect();
    for label in 0..4 {
        let params = CrossEntropyParams::new(4, Reduction::Sum).unwrap();
        check_ce_against_reference(&params, &h, &[label]);
    }
}

/// A confident, correct row: the loss (about 2 e^-30) and the gradient of
/// the label keep full relative precision instead of rounding to 0.
#[test]
fn ce_small_losses_keep_relative_precision() {
    let params = CrossEntropyParams::new(3, Reduction::Sum).unwrap();
    let out = run_ce::<f32, f32>(&params, &[30.0, 0.0, 0.0], &[0]).unwrap();
    let want = 2.0 * (-30f64).exp();
    assert!((f64::from(out.losses[0]) - want).abs() <= 4.0 * U * want);
    assert!((f64::from(out.grad[0]) + want).abs() <= 4.0 * U * want);
    assert_eq!(out.grad[1], out.grad[2]);
    // The gradient row sums to zero to within a rounding of its parts.
    let sum: f64 = out.grad.iter().map(|&g| f64::from(g)).sum();
    assert!(sum.abs() <= 4.0 * U * want);
}

#[test]
fn ce_single_class_has_zero_loss_and_gradient() {
    let params = CrossEntropyParams::new(1, Reduction::Mean).unwrap();
    let out = run_ce::<f32, f32>(&params, &[3.5, -1e30], &[0, 0]).unwrap();
    assert_eq!(bits(&out.losses), [0, 0]);
    assert_eq!(bits(&out.grad), [0, 0], "+0.0, not -0.0");
    assert_eq!(out.total.to_bits(), 0);
}

#[test]
fn ce_ignore_index() {
    let logits = [1.0f32, 2.0, 3.0, 4.0, 0.5, -1.0, 2.0, 2.0, 0.0];
    let labels = [2, 7, 0];
    let params = CrossEntropyParams::new(3, Reduction::Mean)
        .unwrap()
        .with_ignore_index(7);
    let out = run_ce::<f32, f32>(&params, &logits, &labels).unwrap();
    assert_eq!(out.losses[1].to_bits(), 0);
    assert_eq!(bits(&out.grad[3..6]), [0, 0, 0]);
    check_ce_against_reference(&params, &logits, &labels);
    // The mean is over the two counted rows, and so is the gradient weight.
    let counted = (f64::from(out.losses[0]) + f64::from(out.losses[2])) / 2.0;
    assert!((f64::from(out.total) - counted).abs() <= U * counted);
    let sum_params = CrossEntropyParams::new(3, Reduction::Sum)
        .unwrap()
        .with_ignore_index(7)
        .with_loss_scale(0.5)
        .unwrap();
    let sum = run_ce::<f32, f32>(&sum_params, &logits, &labels).unwrap();
    assert_eq!(bits(&out.grad), bits(&sum.grad));

    // An ignore index that is a class ignores that class's rows.
    let params = CrossEntropyParams::new(3, Reduction::Sum)
        .unwrap()
        .with_ignore_index(0);
    let labels = [2, 1, 0];
    let out = run_ce::<f32, f32>(&params, &logits, &labels).unwrap();
    assert_eq!(out.losses[2].to_bits(), 0);
    // Every row ignored: the mean is NaN (as PyTorch), the sum +0.0.
    let all_ignored = [7, 7, 7];
    let mean = CrossEntropyParams::new(3, Reduction::Mean)
        .unwrap()
        .with_ignore_index(7);
    let out = run_ce::<f32, f32>(&mean, &logits, &all_ignored).unwrap();
    assert_eq!(out.total.to_bits(), f32::NAN.to_bits());
    assert!(out.grad.iter().all(|g| g.to_bits() == 0));
    let sum = CrossEntropyParams::new(3, Reduction::Sum)
        .unwrap()
        .with_ignore_index(7);
    assert_eq!(
        run_ce::<f32, f32>(&sum, &logits, &all_ignored)
            .unwrap()
            .total
            .to_bits(),
        0
    );
}

#[test]
fn ce_bad_labels_are_errors_and_write_nothing() {
    let logits = [0.0f32; 8];
    let params = CrossEntropyParams::new(4, Reduction::Mean).unwrap();
    let mut losses = [9.0f32; 2];
    let mut grad = [9.0f32; 8];
    let err =
        loss::softmax_cross_entropy_with_grad(&params, &logits, &[3, 4], &mut losses, &mut grad)
            .unwrap_err();
    assert_eq!(
        err,
        CrossEntropyError::LabelOutOfRange {
            row: 1,
            label: 4,
            classes: 4
        }
    );
    assert_eq!(
        err.to_string(),
        "label 4 of row 1 is not one of the 4 classes"
    );
    assert_eq!(losses, [9.0; 2]);
    assert_eq!(grad, [9.0; 8]);
    let err =
        loss::softmax_cross_entropy(&params, &logits, &[u32::MAX, 0], &mut losses).unwrap_err();
    assert!(matches!(
        err,
        CrossEntropyError::LabelOutOfRange { row: 0, .. }
    ));
    assert_eq!(losses, [9.0; 2]);
    // The ignore index is not an error even when it is not a class.
    let params = params.with_ignore_index(u32::MAX);
    assert!(loss::softmax_cross_entropy(&params, &logits, &[u32::MAX, 0], &mut losses).is_ok());
}

#[test]
#[should_panic(expected = "logits")]
fn ce_shape_mismatch_panics() {
    let params = CrossEntropyParams::new(3, Reduction::Sum).unwrap();
    let _ = loss::softmax_cross_entropy(&params, &[0.0f32; 5], &[0, 1], &mut [0.0; 2]);
}

#[test]
fn ce_nan_and_infinities() {
    let nan = f32::NAN.to_bits();
    let logits = [
        1.0f32,
        f32::from_bits(0xffc0_1234), // a NaN with a payload
        0.0,
        f32::INFINITY,
        0.0,
        1.0,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        f32::NEG_INFINITY,
        0.0,
        f32::NEG_INFINITY,
        2.0,
    ];
    let params = CrossEntropyParams::new(3, Reduction::None).unwrap();
    let out = run_ce::<f32, f32>(&params, &logits, &[0, 1, 0, 1]).unwrap();
    // NaN, +inf and all -inf rows: canonical NaN everywhere in the row.
    for row in 0..3 {
        assert_eq!(out.losses[row].to_bits(), nan, "row {row}");
        assert!(out.grad[row * 3..][..3].iter().all(|g| g.to_bits() == nan));
    }
    // A label logit of -inf beside finite ones: infinite loss, the limit
    // gradient.
    assert_eq!(out.losses[3], f32::INFINITY);
    let e2 = 2f64.exp();
    for (got, want) in out.grad[9..]
        .iter()
        .zip([1.0 / (1.0 + e2), -1.0, e2 / (1.0 + e2)])
    {
        assert!((f64::from(*got) - want).abs() <= 4.0 * U, "{got} vs {want}");
    }
    assert_eq!(out.total.to_bits(), nan);
    let h = run_ce::<f32, f16>(&params, &logits, &[0, 1, 0, 1]).unwrap();
    assert_eq!(h.grad[0].to_bits(), 0x7e00);
}

#[test]
fn loss_param_errors() {
    assert_eq!(
        CrossEntropyParams::new(0, Reduction::Sum),
        Err(ParamError::NoClasses)
    );
    assert_eq!(
        CtcParams::new(0, 0, Reduction::Sum),
        Err(ParamError::NoClasses)
    );
    assert_eq!(
        CtcParams::new(3, 3, Reduction::Sum),
        Err(ParamError::BlankOutOfRange {
            blank: 3,
            classes: 3
        })
    );
    let ce = CrossEntropyParams::new(2, Reduction::Sum).unwrap();
    let ctc = CtcParams::new(2, 1, Reduction::Sum).unwrap();
    for bad in [0.0f32, -1.0, f32::INFINITY, f32::NAN, -0.0] {
        let e = ce.with_loss_scale(bad).unwrap_err();
        assert!(
            matches!(e, ParamError::LossScale { loss_scale } if loss_scale.to_bits() == bad.to_bits())
        );
        assert!(ctc.with_loss_scale(bad).is_err());
    }
    assert_eq!(
        ParamError::BlankOutOfRange {
            blank: 5,
            classes: 2
        }
        .to_string(),
        "blank index 5 is not one of the 2 classes"
    );
    assert_eq!(ce.classes(), 2);
    assert_eq!(ce.loss_scale(), 1.0);
    assert_eq!(ce.ignore_index(), None);
    assert_eq!(ctc.blank(), 1);
    assert!(!ctc.zero_infinity());
    assert_eq!(Reduction::default(), Reduction::Mean);
}

/// Pinned outputs: a change of any of these bits is a breaking change.
#[test]
fn ce_value_stability() {
    let logits: Vec<f32> = (0..24)
        .map(|i| ((i * 37 % 23) as f32 - 11.0) * 0.71)
        .collect();
    let labels = [3, 0, 5, 1];
    let params = CrossEntropyParams::new(6, Reduction::Mean)
        .unwrap()
        .with_loss_scale(128.0)
        .unwrap();
    let out = run_ce::<f32, f32>(&params, &logits, &labels).unwrap();
    let h: Vec<f16> = logits.iter().map(|&x| f16::from_f32(x)).collect();
    let out16 = run_ce::<f16, f16>(&params, &h, &labels).unwrap();
    let pinned = (
        out.total.to_bits(),
        bits(&out.losses),
        bits(&out.grad),
        out16.total.to_bits(),
        out16.grad.iter().map(|g| g.to_bits()).collect::<Vec<_>>(),
    );
    assert_eq!(pinned, ce_pinned());
}

fn ce_pinned() -> (u32, Vec<u32>, Vec<u32>, u32, Vec<u16>) {
    (
        0x409b378a,
        vec![0x3cf5c421, 0x4068a649, 0x41149dba, 0x40ce59cd],
        vec![
            0x38345d03, 0x3f645b88, 0x3ac43860, 0xbf721dba, 0x3d557899, 0x38b76dc0, 0xc1f93f29,
            0x3ab9b124, 0x41eb1aa3, 0x3d4a0469, 0x38ad9638, 0x3fdbc71e, 0x3abeb4a2, 0x41f173a9,
            0x3d4f78bd, 0x38b2460a, 0x3fe1b631, 0xc1fff9ef, 0x41f17676, 0xc1ff9843, 0x38b2481b,
            0x3fe1b8cf, 0x3b41f49e, 0x36a6a8da,
        ],
        0x409b3b75,
        vec![
            0x02d3, 0x3b25, 0x1620, 0xbb93, 0x2aac, 0x05ba, 0xcfca, 0x15cb, 0x4f59, 0x2a4f, 0x056b,
            0x3edf, 0x15f3, 0x4f8c, 0x2a79, 0x0590, 0x3f0e, 0xd000, 0x4f8c, 0xcffd, 0x0596, 0x3f0e,
            0x1a12, 0x0054,
        ],
    )
}
