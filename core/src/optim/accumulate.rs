//! Gradient accumulation over micro-batches, with PopTorch's reduction
//! types (`accumulationAndReplicationReductionType` Sum or Mean, with
//! `MeanReductionStrategy` Running or Post).

use crate::fp::Element;

use super::drive::{self, Update};
use super::real::Real;
use super::{Param, Precision};

/// How micro-batch gradients are combined into the accumulator.
///
/// With `f` micro-batches already accumulated (0-based micro-batch index):
///
/// | mode | micro-batch 0 | micro-batch `f > 0` | after the last (`count`) |
/// |---|---|---|---|
/// | `Sum` | `s = g` | `s = s + g` | - |
/// | `RunningMean` | `s = g` | `s = (f / (f + 1)) s + g / (f + 1)` | - |
/// | `PostMean` | `s = g` | `s = s + g` | `s = s / count` |
///
/// The running mean never exceeds the largest micro-batch gradient, which
/// is why PopTorch makes it the default with f16 accumulators; `f / (f + 1)`
/// is computed in f64 and rounded to f32 once per micro-batch.
/// Micro-batch 0 overwrites the accumulator, so it need not be zeroed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Accumulation {
    /// Sum of the micro-batch gradients.
    #[default]
    Sum,
    /// Mean, kept as a running mean.
    RunningMean,
    /// Mean, as a sum divided by the count at the end.
    PostMean,
}

impl Accumulation {
    /// Accumulates micro-batch `micro` (0-based) of parameter `id` from
    /// `grads` into `acc`, rounding a 16-bit accumulator as
    /// `precision.weights` says (the stochastic bits of micro-batch `micro`
    /// are those of step `micro + 1` of [`Precision::weight_stream`]).
    ///
    /// ```
    /// use tessera_core::optim::{Accumulation, Precision};
    ///
    /// let mut acc = [0.0f32; 2];
    /// for (micro, g) in [[1.0f32, 2.0], [3.0, 4.0]].iter().enumerate() {
    ///     Accumulation::RunningMean.add(micro as u32, g, &mut acc, &Precision::default(), 0);
    /// }
    /// assert_eq!(acc, [2.0, 3.0]);
    /// ```
    ///
    /// # Panics
    /// If the slices differ in length.
    pub fn add<A: Element, G: Element>(
        self,
        micro: u32,
        grads: &[G],
        acc: &mut [A],
        precision: &Precision,
        id: u64,
    ) {
        let f = f64::from(micro);
        let update = match (self, micro) {
            (_, 0) => Combine {
                keep: 0.0,
                divisor: 1.0,
            },
            (Self::Sum | Self::PostMean, _) => Combine {
                keep: 1.0,
                divisor: 1.0,
            },
            (Self::RunningMean, _) => Combine {
                keep: (f / (f + 1.0)) as f32,
                divisor: (f + 1.0) as f32,
            },
        };
        let mut p: Param<'_, A, G, A, 0> = Param::new(id, acc, grads, []);
        drive::apply(&update, &mut p, precision, u64::from(micro) + 1, false);
    }

    /// Finishes after `count` micro-batches: `PostMean` divides by `count`;
    /// the other modes leave `acc` as it is.
    ///
    /// ```
    /// use tessera_core::optim::{Accumulation, Precision};
    ///
    /// let (mut acc, p) = ([0.0f32; 1], Precision::default());
    /// Accumulation::PostMean.add(0, &[1.0f32], &mut acc, &p, 0);
    /// Accumulation::PostMean.add(1, &[2.0f32], &mut acc, &p, 0);
    /// Accumulation::PostMean.finish(2, &mut acc, &p, 0);
    /// assert_eq!(acc, [1.5]);
    /// ```
    pub fn finish<A: Element>(self, count: u32, acc: &mut [A], precision: &Precision, id: u64) {
        if self != Self::PostMean || count <= 1 {
            return;
        }
        let divide = Combine {
            keep: 0.0,
            divisor: count as f32,
        };
        // Exact for counts below 2^24, which is every realistic count.
        drive::apply_in_place(&divide, acc, precision, id, u64::from(count) + 1);
    }
}

/// `s = keep s + g / divisor`; `keep` 0 means "overwrite" (the old value is
/// never read, so garbage or NaN in a fresh accumulator cannot leak in).
struct Combine {
    keep: f32,
    divisor: f32,
}

impl Update<0> for Combine {
    #[inline(always)]
    fn update<T: Real>(&self, s: T, g: T, _: [T; 0]) -> (T, [T; 0]) {
        let g = if self.divisor == 1.0 {
            g
        } else {
            g / T::splat(self.divisor)
        };
        let s = if self.keep == 0.0 {
            g
        } else if self.keep == 1.0 {
            s + g
        } else {
            T::splat(self.keep) * s + g
        };
        (s, [])
    }
}
