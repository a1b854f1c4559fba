//! Loss kernels: softmax cross-entropy against an f64 reference and central
//! finite differences; CTC against brute-force enumeration of every
//! alignment on tiny cases (and an f64 forward recursion on long ones); the
//! f32 `exp`, `ln` and `ln_1p` against `std`'s f64 functions over dense
//! sweeps (all 2^32 inputs with `--ignored`).

use half::{bf16, f16};
use proptest::prelude::*;
use tessera_core::fp::{Element, Rounding};
use tessera_core::loss::{
    self, CrossEntropyError, CrossEntropyParams, CtcError, CtcInput, CtcParams, ParamError,
    Reduction, math,
};

/// The unit roundoff of f32, 2^-24.
const U: f64 = f32::EPSILON as f64 / 2.0;

// ---------------------------------------------------------------------------
// exp, ln, ln_1p
// ---------------------------------------------------------------------------

/// The documented bound: at most 0.5 + 2^-12 ulp.
const MAX_ULP: f64 = 0.5 + 1.0 / 4096.0;

/// The spacing of f32 values in the binade of `|y|` (2^-149 below the
/// normal range): the ulp of any f32 next to `y`, or the smaller of two.
fn f32_ulp(y: f64) -> f64 {
    let y = y.abs();
    if y < f64::from(f32::MIN_POSITIVE) {
        return 2f64.powi(-149);
    }
    let e = ((y.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    2f64.powi(e - 23)
}

/// The error of `got` against the exact `want`, in f32 ulps. Results that
/// round to infinity (or NaN) must be exactly that.
fn ulp_error(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        assert_eq!(got.to_bits(), f32::NAN.to_bits(), "want NaN");
        return 0.0;
    }
    let rounded = want as f32;
    if rounded.is_infinite() || got.is_infinite() {
        assert_eq!(got, rounded, "want {want:e}");
        return 0.0;
    }
    (f64::from(got) - want).abs() / f32_ulp(want)
}

/// The worst ulp error of `f` against `reference` over the inputs `bits`,
/// and where it occurs.
fn worst_error(
    f: fn(f32) -> f32,
    reference: fn(f64) -> f64,
    bits: impl IntoIterator<Item = u32>,
) -> (f64, u32) {
    let mut worst = (0.0, 0);
    for b in bits {
        let x = f32::from_bits(b);
        let err = ulp_error(f(x), reference(f64::from(x)));
        if err > worst.0 {
            worst = (err, b);
        }
    }
    worst
}

/// Every f32 bit pattern in steps of 1021 (4.2 million inputs over the
/// whole space, both signs, NaNs and infinities included), and 2^17
/// consecutive patterns on each side of each centre.
fn sweep(centres: &[f32]) -> impl Iterator<Item = u32> + '_ {
    const RADIUS: u32 = 1 << 17;
    (0..=u32::MAX)
        .step_by(1021)
        .chain(centres.iter().flat_map(|c| {
            let b = c.to_bits();
            b.saturating_sub(RADIUS)..=b.saturating_add(RADIUS)
        }))
}

fn assert_within_bound(name: &str, (err, bits): (f64, u32)) {
    println!(
        "{name}: worst {err} ulp at {:e} ({bits:#010x})",
        f32::from_bits(bits)
    );
    assert!(
        err <= MAX_ULP,
        "{name}: {err} ulp at {:e} ({bits:#010x})",
        f32::from_bits(bits)
    );
}

#[test]
fn exp_is_within_half_an_ulp_and_a_bit() {
    let centres = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        core::f32::consts::LN_2,
        88.722_83,
        -87.336_55, // exp crosses into the subnormal range
        -103.972_08,
        -103.278_93, // 2^-149
        10.0,
        -10.0,
    ];
    assert_within_bound("exp", worst_error(math::exp, f64::exp, sweep(&centres)));
}

#[test]
fn ln_is_within_half_an_ulp_and_a_bit() {
    let centres = [
        1.0,
        0.5,
        2.0,
        core::f32::consts::SQRT_2,
        core::f32::consts::FRAC_1_SQRT_2,
        core::f32::consts::E,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        1e-30,
        1e30,
    ];
    assert_within_bound("ln", worst_error(math::ln, f64::ln, sweep(&centres)));
}

#[test]
fn ln_1p_is_within_half_an_ulp_and_a_bit() {
    let centres = [
        0.0,
        -0.0,
        1e-8,
        -1e-8,
        f32::from_bits(1),
        -0.5,
        -0.999_999_9,
        -1.0,
        1.0,
        core::f32::consts::SQRT_2 - 1.0,
        1e20,
        f32::MAX,
    ];
    assert_within_bound(
        "ln_1p",
        worst_error(math::ln_1p, f64::ln_1p, sweep(&centres)),
    );
}

#[test]
fn exp_ln_ln_1p_special_values() {
    let nan = f32::NAN.to_bits();
    let inf = f32::INFINITY;
    for x in [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc0_1234),
    ] {
        assert_eq!(math::exp(x).to_bits(), nan);
        assert_eq!(math::ln(x).to_bits(), nan);
        assert_eq!(math::ln_1p(x).to_bits(), nan);
    }
    assert_eq!(math::exp(inf), inf);
    assert_eq!(math::exp(-inf).to_bits(), 0);
    assert_eq!(math::exp(0.0), 1.0);
    assert_eq!(math::exp(-0.0), 1.0);
    assert_eq!(math::ln(1.0).to_bits(), 0);
    assert_eq!(math::ln(0.0), -inf);
    assert_eq!(math::ln(-0.0), -inf);
    assert_eq!(math::ln(inf), inf);
    assert_eq!(math::ln(-inf).to_bits(), nan);
    assert_eq!(math::ln(-1e-30).to_bits(), nan);
    assert_eq!(math::ln_1p(0.0).to_bits(), 0);
    assert_eq!(math::ln_1p(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(math::ln_1p(-1.0), -inf);
    assert_eq!(math::ln_1p(inf), inf);
    assert_eq!(math::ln_1p(-1.000_000_1).to_bits(), nan);
    assert_eq!(math::ln_1p(-inf).to_bits(), nan);
    assert_eq!(math::ln_1p(f32::from_bits(1)), f32::from_bits(1));

    // The overflow and underflow thresholds of exp, as the module documents
    // them and as correct rounding puts them.
    let last_finite = 88.722_83f32;
    assert_eq!(last_finite.to_bits(), 0x42b1_7217);
    assert!(math::exp(last_finite).is_finite());
    assert_eq!(math::exp(f32::from_bits(0x42b1_7218)), inf);
    let last_nonzero = f32::from_bits(0xc2cf_f1b4);
    assert_eq!((-103.972_08f32).to_bits(), 0xc2cf_f1b4);
    assert_eq!(math::exp(last_nonzero), f32::from_bits(1));
    assert_eq!(math::exp(f32::from_bits(last_nonzero.to_bits() + 1)), 0.0);
    for x in [last_finite, f32::from_bits(0x42b1_7218), last_nonzero] {
        assert_eq!(math::exp(x), f64::from(x).exp() as f32, "{x}");
    }

    // Exact at the points where the true value is an f32.
    assert_eq!(math::exp(core::f32::consts::LN_2), 2.0);
    assert_eq!(math::ln(2.0), core::f32::consts::LN_2);
    for k in -149..=127 {
        let x = 2f64.powi(k) as f32;
        assert_eq!(
            math::ln(x),
            (f64::from(k) * core::f64::consts::LN_2) as f32,
            "2^{k}"
        );
    }
}

/// `exp`, `ln` and `ln_1p` are `const fn`: usable in constants.
#[test]
fn math_is_const() {
    const E: f32 = math::exp(1.0);
    const ZERO: f32 = math::ln(1.0);
    const TINY: f32 = math::ln_1p(1e-20);
    assert_eq!(E, core::f32::consts::E);
    assert_eq!(ZERO, 0.0);
    assert_eq!(TINY, 1e-20);
}

/// All 2^32 inputs of `exp`, `ln` and `ln_1p` against `std`, split over
/// threads. Ignored unless run with `--ignored` (CI runs it in
/// release mode).
#[test]
#[ignore = "exhaustive: all 2^32 f32 inputs, run in release with --ignored"]
fn exhaustive_exp_ln_ln_1p_all_f32_inputs() {
    const BATCH: u64 = 1 << 20;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let batches = (1u64 << 32) / BATCH;
    let worst = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut worst = [(0.0, 0u32); 3];
                    for batch in (t..batches).step_by(threads as usize) {
                        let bits = (batch * BATCH) as u32..=((batch + 1) * BATCH - 1) as u32;
                        let found = [
                            worst_error(math::exp, f64::exp, bits.clone()),
                            worst_error(math::ln, f64::ln, bits.clone()),
                            worst_error(math::ln_1p, f64::ln_1p, bits),
                        ];
                        for (w, f) in worst.iter_mut().zip(found) {
                            if f.0 > w.0 {
                                *w = f;
                            }
                        }
                    }
                    worst
                })
            })
            .collect();
        let mut worst = [(0.0, 0u32); 3];
        for h in handles {
            for (w, f) in worst.iter_mut().zip(h.join().unwrap()) {
                if f.0 > w.0 {
                    *w = f;
                }
            }
        }
        worst
    });
    for (name, w) in ["exp", "ln", "ln_1p"].into_iter().zip(worst) {
        assert_within_bound(name, w);
    }
}

// ---------------------------------------------------------------------------
// Softmax cross-entropy
// ---------------------------------------------------------------------------

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

fn widen<L: Element>(x: &[L]) -> Vec<f64> {
    x.iter().map(|v| f64::from(v.load())).collect()
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

fn reductions() -> impl Strategy<Value = Reduction> {
    prop_oneof![
        Just(Reduction::None),
        Just(Reduction::Sum),
        Just(Reduction::Mean)
    ]
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

fn bits<T: Element>(x: &[T]) -> Vec<u32> {
    x.iter().map(|v| v.load().to_bits()).collect()
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

// ---------------------------------------------------------------------------
// CTC
// ---------------------------------------------------------------------------

/// Removes repeats, then blanks.
fn collapse(path: &[u32], blank: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut prev = None;
    for &k in path {
        if Some(k) != prev && k != blank {
            out.push(k);
        }
        prev = Some(k);
    }
    out
}

/// Brute force over all `classes^time` paths: the probability of the
/// target, and for each `(t, k)` the probability of the target's paths that
/// emit `k` at `t`. `lp` is `[time, classes]`.
fn brute_force(
    lp: &[f64],
    time: usize,
    classes: usize,
    blank: u32,
    target: &[u32],
) -> (f64, Vec<f64>) {
    let mut total = 0.0;
    let mut through = vec![0.0; time * classes];
    let mut path = vec![0u32; time];
    for index in 0..classes.pow(time as u32) {
        let mut rest = index;
        for k in path.iter_mut() {
            *k = (rest % classes) as u32;
            rest /= classes;
        }
        if collapse(&path, blank) != target {
            continue;
        }
        let log_p: f64 = path
            .iter()
            .enumerate()
            .map(|(t, &k)| lp[t * classes + k as usize])
            .sum();
        let p = log_p.exp();
        total += p;
        for (t, &k) in path.iter().enumerate() {
            through[t * classes + k as usize] += p;
        }
    }
    (total, through)
}

fn log_softmax(z: &[f64]) -> Vec<f64> {
    let m = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + z.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
    z.iter().map(|x| x - lse).collect()
}

/// A CTC batch for the tests: logits `[max_time, N, classes]` in f64, from
/// which the kernel gets `log_softmax` rounded to f32.
#[derive(Clone, Debug)]
struct CtcCase {
    classes: usize,
    blank: u32,
    max_time: usize,
    max_target_len: usize,
    input_lengths: Vec<usize>,
    targets: Vec<Vec<u32>>,
    logits: Vec<f64>,
}

/// Padding for targets: not a class, so reading it would be an error.
const PAD: u32 = 77;

impl CtcCase {
    fn batch(&self) -> usize {
        self.input_lengths.len()
    }

    fn log_probs_f64(&self, logits: &[f64]) -> Vec<f64> {
        logits.chunks(self.classes).flat_map(log_softmax).collect()
    }

    fn log_probs(&self) -> Vec<f32> {
        self.log_probs_f64(&self.logits)
            .iter()
            .map(|&x| x as f32)
            .collect()
    }

    fn padded_targets(&self) -> Vec<u32> {
        let mut out = vec![PAD; self.batch() * self.max_target_len];
        for (b, target) in self.targets.iter().enumerate() {
            out[b * self.max_target_len..][..target.len()].copy_from_slice(target);
        }
        out
    }

    fn target_lengths(&self) -> Vec<usize> {
        self.targets.iter().map(Vec::len).collect()
    }

    /// Item `b`'s log-probabilities `[T_b, classes]` from `log_probs`
    /// (`[max_time, N, classes]`).
    fn item_lp(&self, log_probs: &[f64], b: usize) -> Vec<f64> {
        (0..self.input_lengths[b])
            .flat_map(|t| {
                log_probs[(t * self.batch() + b) * self.classes..][..self.classes].to_vec()
            })
            .collect()
    }

    /// The brute-force loss of item `b`.
    fn nll(&self, log_probs: &[f64], b: usize) -> f64 {
        let lp = self.item_lp(log_probs, b);
        let (p, _) = brute_force(
            &lp,
            self.input_lengths[b],
            self.classes,
            self.blank,
            &self.targets[b],
        );
        -p.ln()
    }

    /// The gradient weight of item `b`.
    fn weight(&self, params: &CtcParams, b: usize) -> f64 {
        let scale = f64::from(params.loss_scale());
        match params.reduction() {
            Reduction::Mean => scale / self.batch() as f64 / self.targets[b].len().max(1) as f64,
            _ => scale,
        }
    }
}

struct CtcOut<G> {
    total: f32,
    losses: Vec<f32>,
    grad: Vec<G>,
}

fn run_ctc<L: Element, G: Element>(
    params: &CtcParams,
    case: &CtcCase,
    log_probs: &[L],
) -> Result<CtcOut<G>, CtcError> {
    let targets = case.padded_targets();
    let target_lengths = case.target_lengths();
    let input = CtcInput {
        log_probs,
        max_time: case.max_time,
        input_lengths: &case.input_lengths,
        targets: &targets,
        max_target_len: case.max_target_len,
        target_lengths: &target_lengths,
    };
    let mut losses = vec![-7.0; case.batch()];
    let mut grad = vec![G::store(-7.0, Rounding::Nearest, 0); log_probs.len()];
    // Scratch full of garbage: its contents on entry must not matter.
    let mut scratch =
        vec![f32::NAN; loss::ctc_scratch_len(case.max_time, case.max_target_len, case.classes)];
    let total = loss::ctc_loss_with_grad(params, &input, &mut losses, &mut grad, &mut scratch)?;
    // The loss-only kernel agrees bit for bit, in its smaller scratch.
    let mut only = vec![-7.0; case.batch()];
    let mut small = vec![f32::NAN; 2 * (2 * case.max_target_len + 1)];
    let only_total = loss::ctc_loss(params, &input, &mut only, &mut small).unwrap();
    assert_eq!(only_total.to_bits(), total.to_bits());
    assert_eq!(bits(&only), bits(&losses));
    Ok(CtcOut {
        total,
        losses,
        grad,
    })
}

/// Runs `case` and checks everything the brute force can tell:
///
/// - each loss against `-ln` of the summed probability of every alignment,
///   computed from the same (f32) log-probabilities;
/// - the gradient against PyTorch's formula `w (e^lp - occupancy)`, the
///   occupancy summed over the alignments (same inputs);
/// - the gradient against central differences of the brute-force loss
///   with respect to the logits behind `log_probs = log_softmax(logits)`;
/// - infeasible items, zero gradient beyond `T_b`, and the reduction.
fn check_ctc(params: &CtcParams, case: &CtcCase) {
    let log_probs = case.log_probs();
    let out = run_ctc::<f32, f32>(params, case, &log_probs).unwrap();
    let lp = widen(&log_probs);
    let (n, c) = (case.batch(), case.classes);
    let mut total = 0.0;
    for b in 0..n {
        let time = case.input_lengths[b];
        let target = &case.targets[b];
        let item_lp = case.item_lp(&lp, b);
        let (p, through) = brute_force(&item_lp, time, c, case.blank, target);
        let nll = -p.ln();
        let w = case.weight(params, b);
        let grad_at = |t: usize, k: usize| out.grad[(t * n + b) * c + k];
        for t in time..case.max_time {
            for k in 0..c {
                assert_eq!(
                    grad_at(t, k).to_bits(),
                    0,
                    "item {b}: grad beyond T_b at t = {t}"
                );
            }
        }
        if p == 0.0 {
            // Infeasible: +inf, or +0.0 and zero gradient with zero_infinity.
            if params.zero_infinity() {
                assert_eq!(out.losses[b].to_bits(), 0, "item {b}");
                for t in 0..time {
                    for k in 0..c {
                        assert_eq!(grad_at(t, k).to_bits(), 0);
                    }
                }
            } else {
                assert_eq!(out.losses[b], f32::INFINITY, "item {b}");
                total = f64::INFINITY;
                for t in 0..time {
                    for k in 0..c {
                        assert_eq!(grad_at(t, k).to_bits(), f32::NAN.to_bits());
                    }
                }
            }
            continue;
        }
        // The loss: f32 log-space recursions over T steps (observed: 1.5 u
        // at most; the formula below, 2.1 u; central differences, 1.5e-7).
        let tol = (4.0 + 2.0 * time as f64) * U;
        let got = f64::from(out.losses[b]);
        assert!(
            (got - nll).abs() <= tol * nll.abs().max(1.0),
            "item {b}: loss {got}, brute force {nll}"
        );
        total += match params.reduction() {
            Reduction::Mean => nll / target.len().max(1) as f64,
            _ => nll,
        };
        // PyTorch's formula on the same inputs.
        for t in 0..time {
            for k in 0..c {
                let want = w * (item_lp[t * c + k].exp() - through[t * c + k] / p);
                let got = f64::from(grad_at(t, k));
                assert!(
                    (got - want).abs() <= tol * w,
                    "item {b}, t {t}, k {k}: grad {got}, formula {want}"
                );
            }
        }
        // Central differences of the brute-force loss in the logits.
        let h = 1e-6;
        for t in 0..time {
            for k in 0..c {
                let at = (t * n + b) * c + k;
                let mut zp = case.logits.clone();
                let mut zm = case.logits.clone();
                zp[at] += h;
                zm[at] -= h;
                let fd = (case.nll(&case.log_probs_f64(&zp), b)
                    - case.nll(&case.log_probs_f64(&zm), b))
                    / (2.0 * h);
                let got = f64::from(grad_at(t, k));
                assert!(
                    (got - w * fd).abs() <= 1e-6 * w,
                    "item {b}, t {t}, k {k}: grad {got}, central difference {}",
                    w * fd
                );
            }
        }
    }
    let want_total = match params.reduction() {
        Reduction::Mean => total / n as f64,
        _ => total,
    };
    if want_total.is_infinite() {
        assert_eq!(out.total, f32::INFINITY);
    } else {
        let tol = (4.0 + 2.0 * case.max_time as f64) * U;
        assert!(
            (f64::from(out.total) - want_total).abs() <= tol * want_total.abs().max(1.0),
            "total {}, want {want_total}",
            out.total
        );
    }
}

/// A deterministic pseudo-random logit in [-2, 2).
fn pseudo_logit(i: usize) -> f64 {
    let x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
}

fn case(classes: usize, blank: u32, input_lengths: &[usize], targets: &[&[u32]]) -> CtcCase {
    let max_time = input_lengths.iter().copied().max().unwrap_or(0);
    let max_target_len = targets.iter().map(|t| t.len()).max().unwrap_or(0);
    let n = input_lengths.len();
    CtcCase {
        classes,
        blank,
        max_time,
        max_target_len,
        input_lengths: input_lengths.to_vec(),
        targets: targets.iter().map(|t| t.to_vec()).collect(),
        logits: (0..max_time * n * classes).map(pseudo_logit).collect(),
    }
}

fn ctc_params(classes: usize, blank: u32, reduction: Reduction) -> CtcParams {
    CtcParams::new(classes, blank, reduction).unwrap()
}

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

/// An f64 log-space forward recursion, written from the paper, for lengths
/// the brute force cannot reach.
fn ctc_nll_f64(lp: &[f64], time: usize, classes: usize, blank: u32, target: &[u32]) -> f64 {
    let ext: Vec<u32> = (0..2 * target.len() + 1)
        .map(|s| if s % 2 == 0 { blank } else { target[s / 2] })
        .collect();
    let lse = |v: &[f64]| {
        let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            m
        } else {
            m + v.iter().map(|x| (x - m).exp()).sum::<f64>().ln()
        }
    };
    let mut alpha = vec![f64::NEG_INFINITY; ext.len()];
    alpha[0] = lp[blank as usize];
    if ext.len() > 1 {
        alpha[1] = lp[ext[1] as usize];
    }
    for t in 1..time {
        let prev = alpha.clone();
        for s in 0..ext.len() {
            let mut terms = vec![prev[s]];
            if s >= 1 {
                terms.push(prev[s - 1]);
            }
            if s >= 2 && ext[s] != ext[s - 2] {
                terms.push(prev[s - 2]);
            }
            alpha[s] = lse(&terms) + lp[t * classes + ext[s] as usize];
        }
    }
    let last = ext.len() - 1;
    -lse(&alpha[last.saturating_sub(1)..])
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
