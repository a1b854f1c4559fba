//! Global gradient-norm clipping (timm's `max_grad_norm`, PyTorch's
//! `clip_grad_norm_`) from exact, combinable partial sums.

use crate::fp::Element;
use crate::kernels::{self, ExactSum};

/// The exact sum of squares of gradients, over any number of tensors,
/// pieces, tiles and replicas: merge the pieces' sums in any order (or
/// all-reduce [`GradNorm::limbs`]) and every split into pieces that start
/// at multiples of [`BLOCK`](crate::kernels::BLOCK) gives the same norm
/// and the same clip.
///
/// timm's LAMB step with `max_grad_norm = 1` over three tensors:
///
/// ```
/// use tessera_core::optim::{GradNorm, Lamb, LambConfig, Param, Precision, StepCounter};
///
/// let lamb = Lamb::new(LambConfig::default())?;
/// let mut counter = StepCounter::default();
/// let mut w = [vec![0.5f32; 64], vec![-0.25; 32], vec![1.0; 8]];
/// let g = [vec![0.5f32; 64], vec![1.0; 32], vec![2.0; 8]];
/// let mut state = [0, 1, 2].map(|k| [vec![0.0f32; w[k].len()], vec![0.0f32; w[k].len()]]);
///
/// let norm = GradNorm::of(g.iter().map(Vec::as_slice));
/// let step = counter.next_step().with_grad_scale(norm.clip_scale(1.0));
/// for (id, ((w, g), [m, v])) in w.iter_mut().zip(&g).zip(&mut state).enumerate() {
///     lamb.step(step, &Precision::default(), &mut Param::new(id as u64, w, g, [m, v]));
/// }
/// counter.applied(step);
/// assert!(w[2][0] < 1.0);
/// # Ok::<(), tessera_core::optim::ConfigError>(())
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GradNorm {
    sum: ExactSum,
}

impl GradNorm {
    /// No gradients yet.
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// assert_eq!(GradNorm::new().norm(), 0.0);
    /// ```
    #[must_use]
    pub const fn new() -> Self {
        Self {
            sum: ExactSum::new(),
        }
    }

    /// The norm of these tensors (f32, f16 or bf16).
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// assert_eq!(GradNorm::of([&[3.0f32][..], &[4.0f32][..]]).norm(), 5.0);
    /// ```
    #[must_use]
    pub fn of<'a, E: Element>(tensors: impl IntoIterator<Item = &'a [E]>) -> Self {
        let mut norm = Self::new();
        for g in tensors {
            norm.add(g);
        }
        norm
    }

    /// Adds gradients of any storage format (exactly).
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    /// use tessera_core::fp::{bf16, f16};
    ///
    /// let mut norm = GradNorm::new();
    /// norm.add(&[2.0f32]);
    /// norm.add(&[f16::from_f32(4.0)]);
    /// norm.add(&[bf16::from_f32(4.0)]);
    /// assert_eq!(norm.norm(), 6.0);
    /// ```
    pub fn add<E: Element>(&mut self, grads: &[E]) {
        self.sum.merge(&kernels::sum_of_squares_partial(grads));
    }

    /// Adds another piece's sum (exact, so order does not matter).
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// let mut a = GradNorm::of([&[3.0f32][..]]);
    /// a.merge(&GradNorm::of([&[4.0f32][..]]));
    /// assert_eq!(a.norm(), 5.0);
    /// ```
    pub fn merge(&mut self, other: &Self) {
        self.sum.merge(&other.sum);
    }

    /// The exact sum of squares.
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// assert_eq!(GradNorm::of([&[1.0f32, 2.0][..]]).sum_of_squares().to_f32(), 5.0);
    /// ```
    #[must_use]
    pub const fn sum_of_squares(&self) -> &ExactSum {
        &self.sum
    }

    /// The limbs of the sum, for an integer all-reduce across replicas.
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// let norm = GradNorm::of([&[1.0f32, 2.0][..]]);
    /// assert_eq!(GradNorm::from_limbs(norm.limbs()), norm);
    /// ```
    #[must_use]
    pub fn limbs(&self) -> [i64; ExactSum::LIMBS] {
        self.sum.limbs()
    }

    /// Rebuilds a norm from (summed) [`GradNorm::limbs`].
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// // Two replicas' norms, all-reduced as integers.
    /// let (la, lb) = (GradNorm::of([&[3.0f32][..]]).limbs(), GradNorm::of([&[4.0f32][..]]).limbs());
    /// let summed = core::array::from_fn(|k| la[k] + lb[k]);
    /// assert_eq!(GradNorm::from_limbs(summed).norm(), 5.0);
    /// ```
    #[must_use]
    pub fn from_limbs(limbs: [i64; ExactSum::LIMBS]) -> Self {
        Self {
            sum: ExactSum::from_limbs(limbs),
        }
    }

    /// `||g||`: the square root of the sum rounded to f32.
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// assert_eq!(GradNorm::of([&[6.0f32, 8.0][..]]).norm(), 10.0);
    /// ```
    #[must_use]
    pub fn norm(&self) -> f32 {
        libm::sqrtf(self.sum.to_f32())
    }

    /// The gradient multiplier of a clip at `max_norm`:
    /// `1 / max(||g|| / max_norm, 1)`, as [`clip_scale`]. Pass it to
    /// [`Step::with_grad_scale`](super::Step::with_grad_scale).
    ///
    /// ```
    /// use tessera_core::optim::GradNorm;
    ///
    /// let norm = GradNorm::of([&[6.0f32, 8.0][..]]); // ||g|| = 10
    /// assert_eq!((norm.clip_scale(5.0), norm.clip_scale(20.0)), (0.5, 1.0));
    /// ```
    #[must_use]
    pub fn clip_scale(&self, max_norm: f32) -> f32 {
        clip_scale(&self.sum, max_norm)
    }
}

/// The gradient multiplier of a global gradient-norm clip (as timm's LAMB
/// and `clip_grad_norm_`): `1 / max(||g|| / max_norm, 1)`, where `||g||` is
/// the square root of `g_sq`, the exact sum of squares of every gradient.
/// [`GradNorm`] collects `g_sq`.
///
/// ```
/// use tessera_core::kernels::sum_of_squares_partial;
/// use tessera_core::optim::clip_scale;
///
/// let g_sq = sum_of_squares_partial(&[3.0, 4.0]); // ||g|| = 5
/// assert_eq!(clip_scale(&g_sq, 1.0), 0.2);
/// assert_eq!(clip_scale(&g_sq, 10.0), 1.0);
/// ```
#[must_use]
pub fn clip_scale(g_sq: &ExactSum, max_norm: f32) -> f32 {
    let norm = libm::sqrtf(g_sq.to_f32());
    let factor = norm / max_norm;
    if factor > 1.0 { 1.0 / factor } else { 1.0 }
}
