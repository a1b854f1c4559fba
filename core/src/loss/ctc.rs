//! Connectionist temporal classification (Graves et al. 2006) as PyTorch's
//! `CTCLoss` (see the [module docs](super#ctc) for the recursions, the
//! gradient and the evaluation order).

use core::num::NonZeroUsize;

use super::math::{exp, ln};
use crate::fp::{Element, Rounding};

use super::{ParamError, Reduction, canonical, check_loss_scale, round_total};

const NEG_INF: f32 = f32::NEG_INFINITY;

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

/// Invalid data given to a CTC kernel; the first offending item in batch
/// order is reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtcError {
    /// An input length exceeds the time dimension of the log-probabilities.
    InputLength {
        /// The batch item.
        batch: usize,
        /// Its input length.
        length: usize,
        /// The time dimension.
        max_time: usize,
    },
    /// A target length exceeds the second dimension of the targets.
    TargetLength {
        /// The batch item.
        batch: usize,
        /// Its target length.
        length: usize,
        /// The targets' second dimension.
        max_target_len: usize,
    },
    /// A target label is not a class.
    LabelOutOfRange {
        /// The batch item.
        batch: usize,
        /// The position in its target.
        position: usize,
        /// The label.
        label: u32,
        /// The number of classes.
        classes: usize,
    },
    /// A target contains the blank.
    BlankInTarget {
        /// The batch item.
        batch: usize,
        /// The position in its target.
        position: usize,
        /// The blank index.
        blank: u32,
    },
    /// PyTorch's input and target lengths differ in count.
    BatchSize {
        /// Items in `input_lengths`.
        input_lengths: usize,
        /// Items in `target_lengths`.
        target_lengths: usize,
    },
    /// A PyTorch length is negative (or beyond `usize`).
    Length {
        /// The batch item.
        batch: usize,
        /// The length given.
        length: i64,
    },
    /// A PyTorch target label is outside `u32`.
    Label {
        /// The batch item.
        batch: usize,
        /// The position in its target.
        position: usize,
        /// The label given.
        label: i64,
    },
    /// PyTorch targets that are neither concatenated nor padded.
    TargetsLayout {
        /// Elements in `targets`.
        targets: usize,
        /// Items in the batch.
        batch: usize,
        /// The sum of the target lengths.
        total: usize,
    },
}

impl core::fmt::Display for CtcError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::InputLength {
                batch,
                length,
                max_time,
            } => write!(
                f,
                "input length {length} of batch item {batch} exceeds the {max_time} time steps"
            ),
            Self::TargetLength {
                batch,
                length,
                max_target_len,
            } => write!(
                f,
                "target length {length} of batch item {batch} exceeds the targets' {max_target_len} columns"
            ),
            Self::LabelOutOfRange {
                batch,
                position,
                label,
                classes,
            } => write!(
                f,
                "label {label} at position {position} of batch item {batch}'s target is not one of the {classes} classes"
            ),
            Self::BlankInTarget {
                batch,
                position,
                blank,
            } => write!(
                f,
                "batch item {batch}'s target has the blank ({blank}) at position {position}"
            ),
            Self::BatchSize {
                input_lengths,
                target_lengths,
            } => write!(
                f,
                "{input_lengths} input lengths but {target_lengths} target lengths"
            ),
            Self::Length { batch, length } => {
                write!(f, "length {length} of batch item {batch} is negative")
            }
            Self::Label {
                batch,
                position,
                label,
            } => write!(
                f,
                "label {label} at position {position} of batch item {batch}'s target is not a class index"
            ),
            Self::TargetsLayout {
                targets,
                batch,
                total,
            } => write!(
                f,
                "targets have {targets} elements: neither the {total} of the concatenated targets nor [{batch}, S] padded"
            ),
        }
    }
}

impl core::error::Error for CtcError {}

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

/// One batch item: its time steps, target and place in `log_probs`.
struct Item<'a, L> {
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
    target: &'a [u32],
    blank: u32,
}

impl<'a, L: Element> Item<'a, L> {
    fn new(params: &CtcParams, input: &CtcInput<'a, L>, b: usize) -> Self {
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
    fn forward_rolling(&self, scratch: &mut [f32]) -> f64 {
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
    fn forward_stored(&self, scratch: &mut [f32]) -> (f64, f64) {
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
    fn backward<G: Element>(
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

/// The loss from the log-likelihood: `0 - ll` rounded once to f32 (never
/// `-0.0`), and `+0.0` for `+inf` with `zero_infinity`.
fn reported_loss(params: &CtcParams, ll: f64) -> f32 {
    if params.zero_infinity && ll == f64::NEG_INFINITY {
        0.0
    } else {
        canonical((0.0 - ll) as f32)
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

/// Rounds a gradient value to `G`, to nearest even.
#[inline]
fn store<G: Element>(x: f32) -> G {
    G::store(x, Rounding::Nearest, 0)
}
