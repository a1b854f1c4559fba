//! Softmax cross-entropy over rows of logits (see the [module docs](super)
//! for the formulas and the evaluation order).

use core::num::NonZeroUsize;

use super::math::{exp, ln, ln_1p};
use crate::fp::{Element, Rounding};

use super::{ParamError, Reduction, canonical, check_loss_scale, round_total};

/// The settings of a softmax cross-entropy: number of classes, reduction,
/// ignore index and loss scale. Validated on construction.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrossEntropyParams {
    classes: NonZeroUsize,
    reduction: Reduction,
    ignore_index: Option<u32>,
    loss_scale: f32,
}

impl CrossEntropyParams {
    /// Cross-entropy over `classes` classes with `reduction`, no ignore
    /// index and a loss scale of 1.
    ///
    /// # Errors
    ///
    /// [`ParamError::NoClasses`] if `classes` is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CrossEntropyParams, ParamError, Reduction};
    ///
    /// let params = CrossEntropyParams::new(10, Reduction::Sum)?;
    /// assert_eq!((params.classes(), params.reduction()), (10, Reduction::Sum));
    /// assert_eq!(params.loss_scale(), 1.0);
    /// assert_eq!(CrossEntropyParams::new(0, Reduction::Sum), Err(ParamError::NoClasses));
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    pub fn new(classes: usize, reduction: Reduction) -> Result<Self, ParamError> {
        let classes = NonZeroUsize::new(classes).ok_or(ParamError::NoClasses)?;
        Ok(Self {
            classes,
            reduction,
            ignore_index: None,
            loss_scale: 1.0,
        })
    }

    /// Rows whose label is `index` are ignored: loss and gradient `+0.0`,
    /// not counted by [`Reduction::Mean`] (PyTorch's `ignore_index`).
    /// `index` may be any value, a class or not.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{self, CrossEntropyParams, Reduction};
    ///
    /// // The second row's label is the ignore index: loss 0, not counted by the mean.
    /// let params = CrossEntropyParams::new(2, Reduction::Mean)?.with_ignore_index(9);
    /// let mut losses = [1.0f32; 2];
    /// let mean = loss::softmax_cross_entropy(&params, &[0.0f32, 0.0, 5.0, 1.0], &[0, 9], &mut losses)?;
    /// assert_eq!((mean, losses[1]), (losses[0], 0.0));
    /// assert!((mean - core::f32::consts::LN_2).abs() < 1e-6);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn with_ignore_index(self, index: u32) -> Self {
        Self {
            ignore_index: Some(index),
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
    /// use tessera_core::loss::{self, CrossEntropyParams, Reduction};
    ///
    /// let params = CrossEntropyParams::new(2, Reduction::Sum)?.with_loss_scale(2.0)?;
    /// let (mut losses, mut grad) = ([0.0f32; 1], [0.0f32; 2]);
    /// loss::softmax_cross_entropy_with_grad(&params, &[0.0f32, 0.0], &[0], &mut losses, &mut grad)?;
    /// // 2 * (softmax - onehot) = 2 * ([0.5, 0.5] - [1, 0]); the loss is not scaled.
    /// assert_eq!(grad, [-1.0, 1.0]);
    /// assert!((losses[0] - core::f32::consts::LN_2).abs() < 1e-6);
    /// assert!(params.with_loss_scale(0.0).is_err());
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    pub fn with_loss_scale(self, loss_scale: f32) -> Result<Self, ParamError> {
        Ok(Self {
            loss_scale: check_loss_scale(loss_scale)?,
            ..self
        })
    }

    /// The number of classes (the row length).
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CrossEntropyParams, Reduction};
    ///
    /// assert_eq!(CrossEntropyParams::new(1000, Reduction::Mean)?.classes(), 1000);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn classes(&self) -> usize {
        self.classes.get()
    }

    /// The reduction.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CrossEntropyParams, Reduction};
    ///
    /// assert_eq!(CrossEntropyParams::new(3, Reduction::None)?.reduction(), Reduction::None);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn reduction(&self) -> Reduction {
        self.reduction
    }

    /// The ignore index, if any.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CrossEntropyParams, Reduction};
    ///
    /// let params = CrossEntropyParams::new(3, Reduction::Mean)?;
    /// assert_eq!(params.ignore_index(), None);
    /// assert_eq!(params.with_ignore_index(u32::MAX).ignore_index(), Some(u32::MAX));
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn ignore_index(&self) -> Option<u32> {
        self.ignore_index
    }

    /// The gradient's multiplier.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CrossEntropyParams, Reduction};
    ///
    /// let params = CrossEntropyParams::new(3, Reduction::Mean)?;
    /// assert_eq!(params.loss_scale(), 1.0);
    /// assert_eq!(params.with_loss_scale(128.0)?.loss_scale(), 128.0);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub const fn loss_scale(&self) -> f32 {
        self.loss_scale
    }
}

/// Invalid data given to a cross-entropy kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CrossEntropyError {
    /// A label is neither a class nor the ignore index.
    LabelOutOfRange {
        /// The row (batch index) of the first such label.
        row: usize,
        /// The label.
        label: u32,
        /// The number of classes.
        classes: usize,
    },
}

impl core::fmt::Display for CrossEntropyError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match *self {
            Self::LabelOutOfRange {
                row,
                label,
                classes,
            } => write!(
                f,
                "label {label} of row {row} is not one of the {classes} classes"
            ),
        }
    }
}

impl core::error::Error for CrossEntropyError {}

/// Softmax cross-entropy losses of rows of logits, without the gradient.
///
/// `logits` is `[batch, classes]` row-major with `batch = labels.len()`;
/// `losses[i]` receives row `i`'s loss. Returns the [`Reduction`] of the
/// losses. The losses and the result are bitwise those of
/// [`softmax_cross_entropy_with_grad`].
///
/// # Errors
///
/// [`CrossEntropyError::LabelOutOfRange`] for the first label that is
/// neither below `classes` nor the ignore index; nothing is written.
///
/// # Panics
///
/// If `logits.len() != labels.len() * classes` or `losses.len() !=
/// labels.len()`.
///
/// # Examples
///
/// ```
/// use tessera_core::loss::{self, CrossEntropyError, CrossEntropyParams, Reduction};
///
/// let params = CrossEntropyParams::new(2, Reduction::Sum)?;
/// let mut losses = [0.0f32; 2];
/// // Equal logits: each loss is ln 2.
/// let sum = loss::softmax_cross_entropy(&params, &[0.0f32, 0.0, 3.0, 3.0], &[1, 0], &mut losses)?;
/// assert!((losses[0] - core::f32::consts::LN_2).abs() < 1e-6 && losses[1] == losses[0]);
/// assert!((sum - 2.0 * core::f32::consts::LN_2).abs() < 1e-6);
/// let bad = loss::softmax_cross_entropy(&params, &[0.0f32, 0.0], &[2], &mut losses[..1]);
/// assert_eq!(bad, Err(CrossEntropyError::LabelOutOfRange { row: 0, label: 2, classes: 2 }));
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
pub fn softmax_cross_entropy<L: Element>(
    params: &CrossEntropyParams,
    logits: &[L],
    labels: &[u32],
    losses: &mut [f32],
) -> Result<f32, CrossEntropyError> {
    check_shapes(params, logits.len(), labels.len(), losses.len());
    check_labels(params, labels)?;
    let classes = params.classes();
    let mut total = Total::default();
    for ((row, &label), loss) in logits.chunks_exact(classes).zip(labels).zip(losses) {
        *loss = if params.ignore_index == Some(label) {
            0.0
        } else {
            canonical(RowStats::new(row, label as usize).loss)
        };
        total.add(params, label, *loss);
    }
    Ok(total.reduce(params.reduction))
}

/// Softmax cross-entropy losses of rows of logits and the gradient with
/// respect to the logits, scaled by the reduction and the loss scale.
///
/// `logits` and `grad` are `[batch, classes]` row-major with `batch =
/// labels.len()`; `losses[i]` receives row `i`'s loss and `grad` row `i`
/// receives `w (softmax(x_i) - onehot(label_i))`, rounded to nearest even
/// once, with `w` the loss scale, divided by the number of non-ignored rows
/// for [`Reduction::Mean`]. Returns the [`Reduction`] of the losses (their
/// sum for [`Reduction::None`]). Formulas and the evaluation order are in
/// the [module docs](super#softmax-cross-entropy).
///
/// # Errors
///
/// [`CrossEntropyError::LabelOutOfRange`] for the first label that is
/// neither below `classes` nor the ignore index; nothing is written.
///
/// # Panics
///
/// If `logits.len() != labels.len() * classes`, `losses.len() !=
/// labels.len()` or `grad.len() != logits.len()`.
///
/// # Examples
///
/// ```
/// use tessera_core::loss::{self, CrossEntropyParams, Reduction};
///
/// let params = CrossEntropyParams::new(2, Reduction::Sum)?;
/// let (mut losses, mut grad) = ([0.0f32; 1], [0.0f32; 2]);
/// let sum = loss::softmax_cross_entropy_with_grad(&params, &[0.0f32, 0.0], &[0], &mut losses, &mut grad)?;
/// // softmax = [0.5, 0.5], onehot = [1, 0].
/// assert_eq!(grad, [-0.5, 0.5]);
/// assert!((sum - core::f32::consts::LN_2).abs() < 1e-6 && sum == losses[0]);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
pub fn softmax_cross_entropy_with_grad<L: Element, G: Element>(
    params: &CrossEntropyParams,
    logits: &[L],
    labels: &[u32],
    losses: &mut [f32],
    grad: &mut [G],
) -> Result<f32, CrossEntropyError> {
    check_shapes(params, logits.len(), labels.len(), losses.len());
    assert_eq!(
        grad.len(),
        logits.len(),
        "softmax_cross_entropy_with_grad: grad has {} elements, logits {}",
        grad.len(),
        logits.len()
    );
    check_labels(params, labels)?;
    let classes = params.classes();
    let weight = match params.reduction {
        Reduction::None | Reduction::Sum => params.loss_scale,
        Reduction::Mean => {
            let counted = labels
                .iter()
                .filter(|&&label| params.ignore_index != Some(label))
                .count();
            params.loss_scale / counted as f32
        }
    };
    let mut total = Total::default();
    let rows = logits
        .chunks_exact(classes)
        .zip(grad.chunks_exact_mut(classes));
    for (((row, grad), &label), loss) in rows.zip(labels).zip(losses) {
        if params.ignore_index == Some(label) {
            *loss = 0.0;
            grad.fill(store::<G>(0.0));
        } else {
            let stats = RowStats::new(row, label as usize);
            *loss = canonical(stats.loss);
            stats.write_grad(row, label as usize, weight, grad);
        }
        total.add(params, label, *loss);
    }
    Ok(total.reduce(params.reduction))
}

fn check_shapes(params: &CrossEntropyParams, logits: usize, batch: usize, losses: usize) {
    assert_eq!(
        Some(logits),
        batch.checked_mul(params.classes()),
        "softmax cross-entropy: {logits} logits for {batch} labels of {} classes",
        params.classes()
    );
    assert_eq!(
        losses, batch,
        "softmax cross-entropy: {losses} losses for {batch} labels"
    );
}

fn check_labels(params: &CrossEntropyParams, labels: &[u32]) -> Result<(), CrossEntropyError> {
    let classes = params.classes();
    match labels
        .iter()
        .position(|&label| params.ignore_index != Some(label) && !super::is_class(label, classes))
    {
        Some(row) => Err(CrossEntropyError::LabelOutOfRange {
            row,
            label: labels[row],
            classes,
        }),
        None => Ok(()),
    }
}

/// One row's maximum, sums and loss (steps 1 to 4 of the module docs).
struct RowStats {
    max: f32,
    /// `S_o`: the sum of `e_j` over `j != label`.
    others: f32,
    /// `S = S_o + e_label`.
    sum: f32,
    loss: f32,
}

impl RowStats {
    #[inline]
    fn new<L: Element>(row: &[L], label: usize) -> Self {
        let mut max = row[0].load();
        for x in &row[1..] {
            let x = x.load();
            if x > max {
                max = x;
            }
        }
        let mut others = 0.0f32;
        for (j, x) in row.iter().enumerate() {
            if j != label {
                others += exp(x.load() - max);
            }
        }
        let shifted = row[label].load() - max;
        let own = exp(shifted);
        let sum = others + own;
        // `others <= own` is false for NaN, which the `else` arm propagates.
        let loss = if others <= own {
            ln_1p(others / own)
        } else {
            ln(sum) - shifted
        };
        Self {
            max,
            others,
            sum,
            loss,
        }
    }

    /// Step 5: `grad_j = e_j * (w / S)`, `grad_label = (0 - S_o) * (w / S)`.
    #[inline]
    fn write_grad<L: Element, G: Element>(
        &self,
        row: &[L],
        label: usize,
        weight: f32,
        grad: &mut [G],
    ) {
        let r = weight / self.sum;
        for (j, (x, g)) in row.iter().zip(grad).enumerate() {
            let value = if j == label {
                (0.0 - self.others) * r
            } else {
                exp(x.load() - self.max) * r
            };
            *g = store::<G>(canonical(value));
        }
    }
}

/// The returned reduction: losses added in f64 in row order.
#[derive(Default)]
struct Total {
    sum: f64,
    counted: usize,
}

impl Total {
    #[inline]
    fn add(&mut self, params: &CrossEntropyParams, label: u32, loss: f32) {
        if params.ignore_index != Some(label) {
            self.sum += f64::from(loss);
            self.counted += 1;
        }
    }

    fn reduce(&self, reduction: Reduction) -> f32 {
        match reduction {
            Reduction::None | Reduction::Sum => round_total(self.sum),
            Reduction::Mean => round_total(self.sum / self.counted as f64),
        }
    }
}

/// Rounds a gradient value to `G`, to nearest even.
#[inline]
fn store<G: Element>(x: f32) -> G {
    G::store(x, Rounding::Nearest, 0)
}
