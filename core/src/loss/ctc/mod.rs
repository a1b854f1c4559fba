//! Connectionist temporal classification (Graves et al. 2006) as PyTorch's
//! `CTCLoss` (see the [module docs](super#ctc) for the recursions, the
//! gradient and the evaluation order).

use core::num::NonZeroUsize;

use crate::fp::Element;

use super::{ParamError, Reduction, canonical, check_loss_scale, round_total};

mod error;
mod item;

pub use error::CtcError;
use item::Item;

/// The settings of a CTC loss: classes, blank index, reduction,
/// `zero_infinity` and loss scale. Validated on construction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CtcParams {
    classes: NonZeroUsize,
    blank: u32,
    reduction: Reduction,
    zero_infinity: bool,
    loss_scale: f32,
}

impl CtcParams {
    /// CTC over `classes` classes (blank included) with blank index `blank`
    /// and `reduction`; `zero_infinity` off and a loss scale of 1.
    ///
    /// # Errors
    ///
    /// [`ParamError::NoClasses`] if `classes` is 0,
    /// [`ParamError::BlankOutOfRange`] if `blank >= classes`.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CtcParams, ParamError, Reduction};
    ///
    /// let params = CtcParams::new(5, 0, Reduction::Mean)?;
    /// assert_eq!((params.classes(), params.blank()), (5, 0));
    /// assert!(!params.zero_infinity() && params.loss_scale() == 1.0);
    /// let bad = CtcParams::new(5, 5, Reduction::Mean);
    /// assert_eq!(bad, Err(ParamError::BlankOutOfRange { blank: 5, classes: 5 }));
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    pub fn new(classes: usize, blank: u32, reduction: Reduction) -> Result<Self, ParamError> {
        let classes = NonZeroUsize::new(classes).ok_or(ParamError::NoClasses)?;
        if !super::is_class(blank, classes.get()) {
            return Err(ParamError::BlankOutOfRange {
                blank,
                classes: classes.get(),
            });
        }
        Ok(Self {
            classes,
            blank,
            reduction,
            zero_infinity: false,
            loss_scale: 1.0,
        })
    }

    /// PyTorch's `zero_infinity`: an infeasible item (infinite loss) gets
    /// loss `+0.0` and gradient `+0.0` instead of `+inf` and NaN.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{self, CtcInput, CtcParams, Reduction};
    ///
    /// // Target [1, 1] needs 3 time steps (a blank between the repeats); there is 1.
    /// let input = CtcInput { log_probs: &[0.5f32.ln(), 0.5f32.ln()], max_time: 1, input_lengths: &[1],
    ///     targets: &[1, 1], max_target_len: 2, target_lengths: &[2] };
    /// let params = CtcParams::new(2, 0, Reduction::Sum)?;
    /// let (mut losses, mut scratch) = ([0.0f32; 1], [0.0f32; loss::ctc_scratch_len(1, 2, 2)]);
    /// assert_eq!(loss::ctc_loss(&params, &input, &mut losses, &mut scratch)?, f32::INFINITY);
    /// let params = params.with_zero_infinity(true);
    /// assert_eq!(loss::ctc_loss(&params, &input, &mut losses, &mut scratch)?, 0.0);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn with_zero_infinity(self, zero_infinity: bool) -> Self {
        Self {
            zero_infinity,
            ..self
        }
    }

    /// Multiplies the gradient (not the losses) by `loss_scale`.
    ///
    /// # Errors
    ///
    /// [`ParamError::LossScale`] unless `loss_scale` is finite and positive.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{self, CtcInput, CtcParams, Reduction};
    ///
    /// // One step over classes [blank, 1], target [1]: the only alignment emits 1.
    /// let input = CtcInput { log_probs: &[0.25f32.ln(), 0.75f32.ln()], max_time: 1, input_lengths: &[1],
    ///     targets: &[1], max_target_len: 1, target_lengths: &[1] };
    /// let params = CtcParams::new(2, 0, Reduction::Sum)?.with_loss_scale(4.0)?;
    /// let (mut losses, mut grad, mut scratch) = ([0.0f32; 1], [0.0f32; 2], [0.0f32; 12]);
    /// loss::ctc_loss_with_grad(&params, &input, &mut losses, &mut grad, &mut scratch)?;
    /// // 4 * ([0.25, 0.75] - [0, 1]); the loss -ln 0.75 is not scaled.
    /// assert!((grad[0] - 1.0).abs() < 1e-5 && (grad[1] + 1.0).abs() < 1e-5);
    /// assert!((losses[0] + 0.75f32.ln()).abs() < 1e-6);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    pub fn with_loss_scale(self, loss_scale: f32) -> Result<Self, ParamError> {
        Ok(Self {
            loss_scale: check_loss_scale(loss_scale)?,
            ..self
        })
    }

    /// The number of classes, blank included.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CtcParams, Reduction};
    ///
    /// assert_eq!(CtcParams::new(29, 28, Reduction::Mean)?.classes(), 29);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn classes(&self) -> usize {
        self.classes.get()
    }

    /// The blank index.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CtcParams, Reduction};
    ///
    /// assert_eq!(CtcParams::new(29, 28, Reduction::Mean)?.blank(), 28);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn blank(&self) -> u32 {
        self.blank
    }

    /// The reduction.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CtcParams, Reduction};
    ///
    /// assert_eq!(CtcParams::new(3, 0, Reduction::Sum)?.reduction(), Reduction::Sum);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// Whether infinite losses and their gradients are zeroed.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CtcParams, Reduction};
    ///
    /// let params = CtcParams::new(3, 0, Reduction::Mean)?;
    /// assert!(!params.zero_infinity());
    /// assert!(params.with_zero_infinity(true).zero_infinity());
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn zero_infinity(&self) -> bool {
        self.zero_infinity
    }

    /// The gradient's multiplier.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CtcParams, Reduction};
    ///
    /// let params = CtcParams::new(3, 0, Reduction::Mean)?;
    /// assert_eq!(params.loss_scale(), 1.0);
    /// assert_eq!(params.with_loss_scale(0.5)?.loss_scale(), 0.5);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn loss_scale(&self) -> f32 {
        self.loss_scale
    }
}

/// A batch for the CTC kernels, in PyTorch's layout. The batch size `N` is
/// `input_lengths.len()`.
#[derive(Clone, Copy, Debug)]
pub struct CtcInput<'a, L> {
    /// Log-probabilities `[max_time, N, classes]`, time-major, normally
    /// `log_softmax` outputs.
    pub log_probs: &'a [L],
    /// The time dimension of `log_probs`.
    pub max_time: usize,
    /// Item `b` uses time steps `0..input_lengths[b]`.
    pub input_lengths: &'a [usize],
    /// Targets `[N, max_target_len]`, padded: item `b`'s target is
    /// `targets[b * max_target_len..][..target_lengths[b]]`; the padding is
    /// never read.
    pub targets: &'a [u32],
    /// The second dimension of `targets`.
    pub max_target_len: usize,
    /// The target length of each item.
    pub target_lengths: &'a [usize],
}

/// The scratch [`ctc_loss`] reads, in f32 elements: two rows of alpha,
/// `2 (2 max_target_len + 1)` (at most [`ctc_scratch_len`]).
///
/// # Panics
///
/// If the result overflows `usize`.
#[must_use]
pub(crate) const fn ctc_forward_scratch_len(max_target_len: usize) -> usize {
    match states(max_target_len).checked_mul(2) {
        Some(len) => len,
        None => panic!("ctc_forward_scratch_len overflows usize"),
    }
}

/// The scratch both CTC kernels take, in f32 elements: what
/// [`ctc_loss_with_grad`] needs, alpha for every time step and its shifts,
/// two rows of beta and one row of class occupancies, `(max_time + 2) (2
/// max_target_len + 1) + max_time + classes`. [`ctc_loss`] uses only its
/// first `2 (2 max_target_len + 1)` elements.
///
/// ```
/// assert_eq!(tessera_core::loss::ctc_scratch_len(10, 5, 7), 12 * 11 + 10 + 7);
/// ```
///
/// # Panics
///
/// If the result overflows `usize`.
#[must_use]
pub const fn ctc_scratch_len(max_time: usize, max_target_len: usize, classes: usize) -> usize {
    let len = match max_time.checked_add(2) {
        Some(rows) => rows.checked_mul(states(max_target_len)),
        None => None,
    };
    let len = match len {
        Some(len) => len.checked_add(max_time),
        None => None,
    };
    match len {
        Some(len) => match len.checked_add(classes) {
            Some(len) => len,
            None => panic!("ctc_scratch_len overflows usize"),
        },
        None => panic!("ctc_scratch_len overflows usize"),
    }
}

/// `2 s + 1`, the number of extended-target states.
const fn states(max_target_len: usize) -> usize {
    match max_target_len.checked_mul(2) {
        Some(n) if n < usize::MAX => n + 1,
        _ => panic!("CTC scratch length overflows usize"),
    }
}

/// CTC losses (negative log-likelihoods) of a batch, without the gradient.
///
/// `losses[b]` receives item `b`'s loss (`+0.0` for an infinite loss with
/// `zero_infinity`); returns the [`Reduction`] of the losses (their sum for
/// [`Reduction::None`]). The losses and the result are bitwise those of
/// [`ctc_loss_with_grad`]. `scratch` takes [`ctc_scratch_len`] elements
/// (it needs only `2 (2 max_target_len + 1)` of them); its contents on
/// entry do not matter and on return are unspecified. For PyTorch's
/// layouts (`i64` lengths, concatenated targets), see `CtcTargets` (feature
/// `alloc`).
///
/// # Errors
///
/// A [`CtcError`] if a length exceeds its tensor dimension or a target
/// label is the blank or not a class; nothing is written.
///
/// # Panics
///
/// If `log_probs.len() != max_time * N * classes`, `targets.len() != N *
/// max_target_len`, `target_lengths.len() != N`, `losses.len() != N` or
/// `scratch` is too short.
///
/// # Examples
///
/// ```
/// use tessera_core::loss::{self, CtcInput, CtcParams, Reduction};
///
/// // One step over classes [blank, 1], target [1]: the only alignment emits 1.
/// let input = CtcInput { log_probs: &[0.25f32.ln(), 0.75f32.ln()], max_time: 1, input_lengths: &[1],
///     targets: &[1], max_target_len: 1, target_lengths: &[1] };
/// let params = CtcParams::new(2, 0, Reduction::Sum)?;
/// let mut scratch = [0.0f32; loss::ctc_scratch_len(1, 1, 2)];
/// let mut losses = [0.0f32; 1];
/// let sum = loss::ctc_loss(&params, &input, &mut losses, &mut scratch)?;
/// assert!((sum + 0.75f32.ln()).abs() < 1e-6 && sum == losses[0]);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
pub fn ctc_loss<L: Element>(
    params: &CtcParams,
    input: &CtcInput<'_, L>,
    losses: &mut [f32],
    scratch: &mut [f32],
) -> Result<f32, CtcError> {
    check_shapes(params, input, losses.len());
    let needed = ctc_forward_scratch_len(input.max_target_len);
    assert!(
        scratch.len() >= needed,
        "ctc_loss: scratch has {} elements, needs {needed}",
        scratch.len()
    );
    check_data(params, input)?;
    let mut total = Total::default();
    for (b, loss) in losses.iter_mut().enumerate() {
        let item = Item::new(params, input, b);
        *loss = reported_loss(params, item.forward_rolling(scratch));
        total.add(params.reduction, *loss, item.target.len());
    }
    Ok(total.reduce(params.reduction, losses.len()))
}

/// CTC losses of a batch and their gradient with respect to the logits
/// behind `log_probs`, scaled by the reduction and the loss scale, as
/// PyTorch's `CTCLoss` backward.
///
/// `losses[b]` receives item `b`'s loss (`+0.0` for an infinite loss with
/// `zero_infinity`), `grad` (`[max_time, N, classes]` like `log_probs`)
/// the gradient, rounded to nearest even once: zero for `t >= T_b`, zero
/// for an infeasible item with `zero_infinity`, NaN (for `t < T_b`) for one
/// without. Returns the [`Reduction`] of the losses (their sum for
/// [`Reduction::None`]). Formulas and the evaluation order are in the
/// [module docs](super#ctc). `scratch` needs [`ctc_scratch_len`] elements;
/// its contents on entry do not matter and on return are unspecified.
///
/// # Errors
///
/// A [`CtcError`] if a length exceeds its tensor dimension or a target
/// label is the blank or not a class; nothing is written.
///
/// # Panics
///
/// If `log_probs.len() != max_time * N * classes`, `targets.len() != N *
/// max_target_len`, `target_lengths.len() != N`, `losses.len() != N`,
/// `grad.len() != log_probs.len()` or `scratch` is too short.
///
/// # Examples
///
/// ```
/// use tessera_core::loss::{self, CtcInput, CtcParams, Reduction};
///
/// // One step over classes [blank, 1], target [1]: the only alignment emits 1.
/// let input = CtcInput { log_probs: &[0.25f32.ln(), 0.75f32.ln()], max_time: 1, input_lengths: &[1],
///     targets: &[1], max_target_len: 1, target_lengths: &[1] };
/// let params = CtcParams::new(2, 0, Reduction::Sum)?;
/// let mut scratch = [0.0f32; loss::ctc_scratch_len(1, 1, 2)];
/// let (mut losses, mut grad) = ([0.0f32; 1], [0.0f32; 2]);
/// let sum = loss::ctc_loss_with_grad(&params, &input, &mut losses, &mut grad, &mut scratch)?;
/// assert!((sum + 0.75f32.ln()).abs() < 1e-6);
/// // softmax [0.25, 0.75] minus the posterior of each class ([0, 1]).
/// assert!((grad[0] - 0.25).abs() < 1e-6 && (grad[1] + 0.25).abs() < 1e-6);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
pub fn ctc_loss_with_grad<L: Element, G: Element>(
    params: &CtcParams,
    input: &CtcInput<'_, L>,
    losses: &mut [f32],
    grad: &mut [G],
    scratch: &mut [f32],
) -> Result<f32, CtcError> {
    check_shapes(params, input, losses.len());
    assert_eq!(
        grad.len(),
        input.log_probs.len(),
        "ctc_loss_with_grad: grad has {} elements, log_probs {}",
        grad.len(),
        input.log_probs.len()
    );
    let needed = ctc_scratch_len(input.max_time, input.max_target_len, params.classes());
    assert!(
        scratch.len() >= needed,
        "ctc_loss_with_grad: scratch has {} elements, needs {needed}",
        scratch.len()
    );
    check_data(params, input)?;
    let batch = losses.len();
    let mut total = Total::default();
    for (b, loss) in losses.iter_mut().enumerate() {
        let item = Item::new(params, input, b);
        let weight = match params.reduction {
            Reduction::None | Reduction::Sum => params.loss_scale,
            Reduction::Mean => params.loss_scale / batch as f32 / item.target.len().max(1) as f32,
        };
        let forward = item.forward_stored(scratch);
        *loss = reported_loss(params, forward.0);
        total.add(params.reduction, *loss, item.target.len());
        item.backward(params, forward, weight, scratch, grad);
    }
    Ok(total.reduce(params.reduction, batch))
}

fn check_shapes<L>(params: &CtcParams, input: &CtcInput<'_, L>, losses: usize) {
    let batch = input.input_lengths.len();
    assert_eq!(
        Some(input.log_probs.len()),
        input
            .max_time
            .checked_mul(batch)
            .and_then(|n| n.checked_mul(params.classes())),
        "CTC: {} log-probabilities for [{}, {batch}, {}]",
        input.log_probs.len(),
        input.max_time,
        params.classes()
    );
    assert_eq!(
        Some(input.targets.len()),
        batch.checked_mul(input.max_target_len),
        "CTC: {} targets for [{batch}, {}]",
        input.targets.len(),
        input.max_target_len
    );
    assert_eq!(
        input.target_lengths.len(),
        batch,
        "CTC: {} target lengths for a batch of {batch}",
        input.target_lengths.len()
    );
    assert_eq!(losses, batch, "CTC: {losses} losses for a batch of {batch}");
}

fn check_data<L>(params: &CtcParams, input: &CtcInput<'_, L>) -> Result<(), CtcError> {
    let rows = input.input_lengths.iter().zip(input.target_lengths);
    for (batch, (&length, &target_length)) in rows.enumerate() {
        if length > input.max_time {
            return Err(CtcError::InputLength {
                batch,
                length,
                max_time: input.max_time,
            });
        }
        if target_length > input.max_target_len {
            return Err(CtcError::TargetLength {
                batch,
                length: target_length,
                max_target_len: input.max_target_len,
            });
        }
        let target = &input.targets[batch * input.max_target_len..][..target_length];
        for (position, &label) in target.iter().enumerate() {
            if !super::is_class(label, params.classes()) {
                return Err(CtcError::LabelOutOfRange {
                    batch,
                    position,
                    label,
                    classes: params.classes(),
                });
            }
            if label == params.blank {
                return Err(CtcError::BlankInTarget {
                    batch,
                    position,
                    blank: params.blank,
                });
            }
        }
    }
    Ok(())
}

/// The loss from the log-likelihood: `0 - ll` rounded once to f32 (never
/// `-0.0`), and `+0.0` for `+inf` with `zero_infinity`.
fn reported_loss(params: &CtcParams, ll: f64) -> f32 {
    if params.zero_infinity && ll == f64::NEG_INFINITY {
        0.0
    } else {
        canonical((0.0 - ll) as f32)
    }
}

/// The returned reduction: losses added in f64 in batch order.
#[derive(Default)]
struct Total {
    sum: f64,
}

impl Total {
    #[inline]
    fn add(&mut self, reduction: Reduction, loss: f32, target_len: usize) {
        self.sum += match reduction {
            Reduction::None | Reduction::Sum => f64::from(loss),
            Reduction::Mean => f64::from(loss) / target_len.max(1) as f64,
        };
    }

    fn reduce(&self, reduction: Reduction, batch: usize) -> f32 {
        match reduction {
            Reduction::None | Reduction::Sum => round_total(self.sum),
            Reduction::Mean => round_total(self.sum / batch as f64),
        }
    }
}
