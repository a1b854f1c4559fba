//! What CTC is checked against: brute-force enumeration of every
//! alignment and an f64 forward recursion written from the paper, and the
//! harness that runs a case through the kernel and checks it.

use tessera_core::fp::{Element, Rounding};
use tessera_core::loss::{self, CtcError, CtcInput, CtcParams, Reduction};

use super::{U, bits, widen};

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
pub(super) struct CtcCase {
    pub(super) classes: usize,
    pub(super) blank: u32,
    pub(super) max_time: usize,
    pub(super) max_target_len: usize,
    pub(super) input_lengths: Vec<usize>,
    pub(super) targets: Vec<Vec<u32>>,
    pub(super) logits: Vec<f64>,
}

/// Padding for targets: not a class, so reading it would be an error.
pub(super) const PAD: u32 = 77;

impl CtcCase {
    fn batch(&self) -> usize {
        self.input_lengths.len()
    }

    pub(super) fn log_probs_f64(&self, logits: &[f64]) -> Vec<f64> {
        logits.chunks(self.classes).flat_map(log_softmax).collect()
    }

    pub(super) fn log_probs(&self) -> Vec<f32> {
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
    pub(super) fn item_lp(&self, log_probs: &[f64], b: usize) -> Vec<f64> {
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
    pub(super) fn weight(&self, params: &CtcParams, b: usize) -> f64 {
        let scale = f64::from(params.loss_scale());
        match params.reduction() {
            Reduction::Mean => scale / self.batch() as f64 / self.targets[b].len().max(1) as f64,
            _ => scale,
        }
    }
}

pub(super) struct CtcOut<G> {
    pub(super) total: f32,
    pub(super) losses: Vec<f32>,
    pub(super) grad: Vec<G>,
}

pub(super) fn run_ctc<L: Element, G: Element>(
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
pub(super) fn check_ctc(params: &CtcParams, case: &CtcCase) {
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
        assert_central_differences(case, b, w, &out.grad);
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

/// Item `b`'s gradient `grad` (weighted by `w`) against central differences
/// of the brute-force loss in the logits.
fn assert_central_differences(case: &CtcCase, b: usize, w: f64, grad: &[f32]) {
    let (n, c) = (case.batch(), case.classes);
    let h = 1e-6;
    for t in 0..case.input_lengths[b] {
        for k in 0..c {
            let at = (t * n + b) * c + k;
            let mut zp = case.logits.clone();
            let mut zm = case.logits.clone();
            zp[at] += h;
            zm[at] -= h;
            let fd = (case.nll(&case.log_probs_f64(&zp), b)
                - case.nll(&case.log_probs_f64(&zm), b))
                / (2.0 * h);
            let got = f64::from(grad[at]);
            assert!(
                (got - w * fd).abs() <= 1e-6 * w,
                "item {b}, t {t}, k {k}: grad {got}, central difference {}",
                w * fd
            );
        }
    }
}

/// A deterministic pseudo-random logit in [-2, 2).
fn pseudo_logit(i: usize) -> f64 {
    let x = (i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    ((x >> 11) as f64 / (1u64 << 53) as f64) * 4.0 - 2.0
}

pub(super) fn case(
    classes: usize,
    blank: u32,
    input_lengths: &[usize],
    targets: &[&[u32]],
) -> CtcCase {
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

pub(super) fn ctc_params(classes: usize, blank: u32, reduction: Reduction) -> CtcParams {
    CtcParams::new(classes, blank, reduction).unwrap()
}

/// An f64 log-space forward recursion, written from the paper, for lengths
/// the brute force cannot reach.
pub(super) fn ctc_nll_f64(
    lp: &[f64],
    time: usize,
    classes: usize,
    blank: u32,
    target: &[u32],
) -> f64 {
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
