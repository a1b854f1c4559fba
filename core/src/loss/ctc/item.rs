//! One batch item's recursions: alpha, beta, the loss and the gradient
//! (see the [module docs](super::super#ctc) for their order).

use super::super::canonical;
use super::super::math::{exp, ln};
use super::{CtcInput, CtcParams};
use crate::fp::{Element, Rounding};

const NEG_INF: f32 = f32::NEG_INFINITY;

/// One batch item: its time steps, target and place in `log_probs`.
pub(super) struct Item<'a, L> {
    log_probs: &'a [L],
    /// Elements between consecutive time steps of one item: `N * classes`.
    time_stride: usize,
    /// Offset of time step 0 of this item: `b * classes`.
    offset: usize,
    classes: usize,
    /// `T_b`.
    time: usize,
    /// The time dimension of `log_probs`.
    max_time: usize,
    pub(super) target: &'a [u32],
    blank: u32,
}

impl<'a, L: Element> Item<'a, L> {
    pub(super) fn new(params: &CtcParams, input: &CtcInput<'a, L>, b: usize) -> Self {
        let classes = params.classes();
        let target_start = b * input.max_target_len;
        Self {
            log_probs: input.log_probs,
            time_stride: input.input_lengths.len() * classes,
            offset: b * classes,
            classes,
            time: input.input_lengths[b],
            max_time: input.max_time,
            target: &input.targets[target_start..][..input.target_lengths[b]],
            blank: params.blank,
        }
    }

    /// `2 L + 1`.
    fn states(&self) -> usize {
        2 * self.target.len() + 1
    }

    /// `l'_s`.
    #[inline]
    fn label(&self, s: usize) -> u32 {
        if s.is_multiple_of(2) {
            self.blank
        } else {
            self.target[s / 2]
        }
    }

    /// Whether state `s` can be entered from `s - 2` (`l'_s != l'_(s-2)`,
    /// which needs `s` odd).
    #[inline]
    fn skip(&self, s: usize) -> bool {
        !s.is_multiple_of(2) && s >= 3 && self.target[s / 2] != self.target[s / 2 - 1]
    }

    /// The log-probabilities of time step `t`, one per class.
    #[inline]
    fn log_probs_at(&self, t: usize) -> &'a [L] {
        &self.log_probs[t * self.time_stride + self.offset..][..self.classes]
    }

    /// `lp_t(l'_s)`.
    #[inline]
    fn lp(&self, lp_t: &[L], s: usize) -> f32 {
        lp_t[self.label(s) as usize].load()
    }

    /// `alpha^_0`; returns the shift `c_0`.
    fn alpha_first(&self, row: &mut [f32]) -> f32 {
        row.fill(NEG_INF);
        row[0] = 0.0;
        if !self.target.is_empty() {
            row[1] = 0.0;
        }
        self.add_log_probs_and_shift(row, 0)
    }

    /// `alpha^_t` into `rows[to..]` from `alpha^_(t-1)` in `rows[from..]`;
    /// returns the shift `c_t`. Both rows are in one buffer: see
    /// [`read_write`].
    fn alpha_next(&self, rows: &mut [f32], from: usize, to: usize, t: usize) -> f32 {
        let (prev, row) = read_write(rows, from, to, self.states());
        for (s, alpha) in row.iter_mut().enumerate() {
            let stay = prev[s];
            let advance = if s > 0 { prev[s - 1] } else { NEG_INF };
            let jump = if self.skip(s) { prev[s - 2] } else { NEG_INF };
            *alpha = log_sum_exp3(stay, advance, jump);
        }
        self.add_log_probs_and_shift(row, t)
    }

    /// `beta^_(T-1)`; returns the shift `d_(T-1)`.
    fn beta_last(&self, row: &mut [f32]) -> f32 {
        let last = self.states() - 1;
        row.fill(NEG_INF);
        row[last] = 0.0;
        if !self.target.is_empty() {
            row[last - 1] = 0.0;
        }
        self.add_log_probs_and_shift(row, self.time - 1)
    }

    /// `beta^_t` into `rows[to..]` from `beta^_(t+1)` in `rows[from..]`;
    /// returns the shift `d_t`. Both rows are in one buffer: see
    /// [`read_write`].
    fn beta_prev(&self, rows: &mut [f32], from: usize, to: usize, t: usize) -> f32 {
        let (next, row) = read_write(rows, from, to, self.states());
        let last = self.states() - 1;
        for (s, beta) in row.iter_mut().enumerate() {
            let stay = next[s];
            let advance = if s < last { next[s + 1] } else { NEG_INF };
            let jump = if s + 2 <= last && self.skip(s + 2) {
                next[s + 2]
            } else {
                NEG_INF
            };
            *beta = log_sum_exp3(stay, advance, jump);
        }
        self.add_log_probs_and_shift(row, t)
    }

    /// Adds `lp_t(l'_s)` to each `row[s]` in f64, takes the shift `c =
    /// f32(max_s of those sums)` (the first sum, replaced by each later
    /// larger one; `0` if the maximum is `-inf`) and stores `f32(sum - c)`,
    /// so the largest stored value is within half an ulp of `c` of zero and
    /// the only rounding is of these small differences. Returns `c`.
    fn add_log_probs_and_shift(&self, row: &mut [f32], t: usize) -> f32 {
        let lp_t = self.log_probs_at(t);
        let sum = |s: usize, x: f32| f64::from(x) + f64::from(self.lp(lp_t, s));
        let mut max = sum(0, row[0]);
        for (s, &x) in row.iter().enumerate().skip(1) {
            let v = sum(s, x);
            if v > max {
                max = v;
            }
        }
        let shift = if max == f64::NEG_INFINITY {
            0.0
        } else {
            max as f32
        };
        for (s, x) in row.iter_mut().enumerate() {
            *x = (sum(s, *x) - f64::from(shift)) as f32;
        }
        shift
    }

    /// The log-likelihood `A_(T-1) + lse(alpha^_(T-1)(2L), alpha^_(T-1)(2L-1))`
    /// (`alpha^_(T-1)(0)` for an empty target), in f64.
    fn log_likelihood(&self, offset: f64, last_alpha: &[f32]) -> f64 {
        let tail = match self.target.len() {
            0 => last_alpha[0],
            len => log_sum_exp3(last_alpha[2 * len], last_alpha[2 * len - 1], NEG_INF),
        };
        offset + f64::from(tail)
    }

    /// The log-likelihood of an item with no time steps: 0 for an empty
    /// target, `-inf` otherwise.
    fn log_likelihood_empty_input(&self) -> f64 {
        if self.target.is_empty() {
            0.0
        } else {
            f64::NEG_INFINITY
        }
    }

    /// Alpha in two alternating rows; returns the log-likelihood.
    pub(super) fn forward_rolling(&self, scratch: &mut [f32]) -> f64 {
        if self.time == 0 {
            return self.log_likelihood_empty_input();
        }
        let width = self.states();
        let rows = &mut scratch[..2 * width];
        // Row `t` lives at `(t % 2) width`.
        let at = |t: usize| (t % 2) * width;
        let mut offset = f64::from(self.alpha_first(&mut rows[..width]));
        for t in 1..self.time {
            offset += f64::from(self.alpha_next(rows, at(t - 1), at(t), t));
        }
        self.log_likelihood(offset, &rows[at(self.time - 1)..][..width])
    }

    /// Alpha for every time step in `scratch[..T_b * (2L + 1)]` and the
    /// shifts `c_t` in the `T_b` elements after it; returns the
    /// log-likelihood and `A_(T-1)`.
    pub(super) fn forward_stored(&self, scratch: &mut [f32]) -> (f64, f64) {
        if self.time == 0 {
            return (self.log_likelihood_empty_input(), 0.0);
        }
        let width = self.states();
        let (alpha, rest) = scratch.split_at_mut(self.time * width);
        let shifts = &mut rest[..self.time];
        shifts[0] = self.alpha_first(&mut alpha[..width]);
        let mut offset = f64::from(shifts[0]);
        for (t, shift) in shifts.iter_mut().enumerate().skip(1) {
            *shift = self.alpha_next(alpha, (t - 1) * width, t * width, t);
            offset += f64::from(*shift);
        }
        let ll = self.log_likelihood(offset, &alpha[(self.time - 1) * width..]);
        (ll, offset)
    }

    /// Beta, backwards in time, and the gradient of each time step as soon
    /// as its beta row is known. `scratch` holds alpha and its shifts from
    /// [`Self::forward_stored`], which returned `ll` and `alpha_offset`.
    pub(super) fn backward<G: Element>(
        &self,
        params: &CtcParams,
        (ll, alpha_offset): (f64, f64),
        weight: f32,
        scratch: &mut [f32],
        grad: &mut [G],
    ) {
        let zero = store::<G>(0.0);
        if ll == f64::NEG_INFINITY {
            let fill = if params.zero_infinity {
                zero
            } else {
                store::<G>(f32::NAN)
            };
            for t in 0..self.time {
                self.grad_at(grad, t).fill(fill);
            }
        } else if self.time > 0 {
            let width = self.states();
            let (alpha, rest) = scratch.split_at_mut(self.time * width);
            let (shifts, rest) = rest.split_at_mut(self.time);
            let (beta, rest) = rest.split_at_mut(2 * width);
            let occupancy = &mut rest[..self.classes];
            // Row `t` of beta lives at `(t % 2) width`.
            let at = |t: usize| (t % 2) * width;
            let last = self.time - 1;
            // A_t and B_t in f64: A_(t) = A_(t+1) - c_(t+1), B_t = B_(t+1) + d_t.
            let mut a_offset = alpha_offset;
            let mut b_offset = f64::from(self.beta_last(&mut beta[at(last)..][..width]));
            for t in (0..self.time).rev() {
                if t < last {
                    a_offset -= f64::from(shifts[t + 1]);
                    b_offset += f64::from(self.beta_prev(beta, at(t + 1), at(t), t));
                }
                let shift = ((a_offset + b_offset) - ll) as f32;
                let (alpha_t, beta_t) = (&alpha[t * width..][..width], &beta[at(t)..][..width]);
                let grad_t = self.grad_at(grad, t);
                self.write_grad(alpha_t, beta_t, shift, weight, occupancy, grad_t, t);
            }
        }
        for t in self.time..self.max_time {
            self.grad_at(grad, t).fill(zero);
        }
    }

    #[inline]
    fn grad_at<'g, G>(&self, grad: &'g mut [G], t: usize) -> &'g mut [G] {
        &mut grad[t * self.time_stride + self.offset..][..self.classes]
    }

    /// `grad_t(k) = (exp(lp_t(k)) - occupancy(k) / total) * w`: the terms
    /// `exp(((alpha^ + beta^) + k_t) - lp)` (`shift = k_t`) summed per class
    /// and over all states.
    #[allow(clippy::too_many_arguments)]
    fn write_grad<G: Element>(
        &self,
        alpha: &[f32],
        beta: &[f32],
        shift: f32,
        weight: f32,
        occupancy: &mut [f32],
        grad: &mut [G],
        t: usize,
    ) {
        let lp_t = self.log_probs_at(t);
        occupancy.fill(0.0);
        let mut total = 0.0f32;
        for (s, (&a, &b)) in alpha.iter().zip(beta).enumerate() {
            let log_ab = a + b;
            if log_ab == NEG_INF {
                continue;
            }
            let k = self.label(s) as usize;
            let term = exp((log_ab + shift) - lp_t[k].load());
            occupancy[k] += term;
            total += term;
        }
        for ((g, lp), &occ) in grad.iter_mut().zip(lp_t).zip(occupancy.iter()) {
            *g = store::<G>(canonical((exp(lp.load()) - occ / total) * weight));
        }
    }
}

/// `ln(e^a + e^b + e^c)` in the order of the module docs.
#[inline]
fn log_sum_exp3(a: f32, b: f32, c: f32) -> f32 {
    let mut m = a;
    if b > m {
        m = b;
    }
    if c > m {
        m = c;
    }
    if m == NEG_INF {
        return NEG_INF;
    }
    ln((exp(a - m) + exp(b - m)) + exp(c - m)) + m
}

/// `rows[from..][..len]` to read and the disjoint `rows[to..][..len]` to
/// write.
///
/// The recursions keep their two rolling rows in one buffer and hand it
/// whole, with offsets, to each step. Handing them over as two references
/// that swap roles from one time step to the next is what rustc 1.95
/// (LLVM 22) miscompiled at opt-level 3 (a standalone copy at 2 as well,
/// and nightly 1.97 likewise): once a step is inlined into the loop, its
/// parameters' `noalias` scopes, valid within one call, are applied across
/// the loop's back edge by GVN (llvm/llvm-project#223170), which then reads
/// a row's entry from before the step rewrote it in place.
fn read_write(rows: &mut [f32], from: usize, to: usize, len: usize) -> (&[f32], &mut [f32]) {
    if from < to {
        let (head, tail) = rows.split_at_mut(to);
        (&head[from..][..len], &mut tail[..len])
    } else {
        let (head, tail) = rows.split_at_mut(from);
        (&tail[..len], &mut head[to..][..len])
    }
}

/// Rounds a gradient value to `G`, to nearest even.
#[inline]
fn store<G: Element>(x: f32) -> G {
    G::store(x, Rounding::Nearest, 0)
}
