//! PyTorch's CTC layouts (`alloc`): `i64` lengths and 1-D concatenated or
//! 2-D padded targets, converted once into what [`CtcInput`] reads.

use alloc::vec::Vec;

use super::{CtcError, CtcInput};

/// A CTC batch's lengths and targets as `torch.nn.CTCLoss` takes them,
/// converted: `input_lengths` and `target_lengths` are `i64` (one per
/// item), and `targets` is either the concatenation of every item's
/// target (1-D, `sum(target_lengths)` elements) or a padded `[N, S]`
/// tensor (`N * S` elements, `S` at least the longest target).
///
/// ```
/// use tessera_core::loss::{self, CtcParams, CtcTargets, Reduction};
///
/// // Two items over 3 classes (blank 0), 4 time steps, uniform log-probs.
/// let log_probs = vec![-(3.0f32).ln(); 4 * 2 * 3];
/// let concatenated = CtcTargets::from_torch(&[4, 3], &[1, 2, 2], &[2, 1])?;
/// let padded = CtcTargets::from_torch(&[4, 3], &[1, 2, 2, 0], &[2, 1])?;
/// assert_eq!(concatenated, padded);
/// let input = padded.input(&log_probs, 4);
/// let params = CtcParams::new(3, 0, Reduction::Mean)?;
/// let mut losses = [0.0f32; 2];
/// let mut scratch = vec![0.0; loss::ctc_scratch_len(4, input.max_target_len, 3)];
/// let mean = loss::ctc_loss(&params, &input, &mut losses, &mut scratch)?;
/// assert!(mean > 0.0 && losses[0] > 0.0);
/// # Ok::<(), Box<dyn core::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(docsrs, doc(cfg(feature = "alloc")))]
pub struct CtcTargets {
    input_lengths: Vec<usize>,
    targets: Vec<u32>,
    max_target_len: usize,
    target_lengths: Vec<usize>,
}

impl CtcTargets {
    /// Converts PyTorch's lengths and targets.
    ///
    /// # Errors
    /// [`CtcError::BatchSize`] if the two length tensors differ in length,
    /// [`CtcError::Length`] for a negative length, [`CtcError::Label`] for
    /// a label outside `u32`, [`CtcError::TargetsLayout`] if `targets` is
    /// neither layout. Labels are checked against the classes by the
    /// kernels.
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::{CtcError, CtcTargets};
    ///
    /// // Targets [1, 2] and [3], concatenated or padded to [2, 2].
    /// let concatenated = CtcTargets::from_torch(&[5, 4], &[1, 2, 3], &[2, 1])?;
    /// assert_eq!(concatenated, CtcTargets::from_torch(&[5, 4], &[1, 2, 3, 0], &[2, 1])?);
    /// let negative = CtcTargets::from_torch(&[-1], &[1], &[1]);
    /// assert_eq!(negative, Err(CtcError::Length { batch: 0, length: -1 }));
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    pub fn from_torch(
        input_lengths: &[i64],
        targets: &[i64],
        target_lengths: &[i64],
    ) -> Result<Self, CtcError> {
        if input_lengths.len() != target_lengths.len() {
            return Err(CtcError::BatchSize {
                input_lengths: input_lengths.len(),
                target_lengths: target_lengths.len(),
            });
        }
        let input_lengths = lengths(input_lengths)?;
        let target_lengths = lengths(target_lengths)?;
        let n = target_lengths.len();
        let total: usize = target_lengths.iter().sum();
        let longest = target_lengths.iter().copied().max().unwrap_or(0);
        // Concatenated, or padded [N, S] (when every target is S long the
        // two layouts are the same).
        let (starts, max_target_len): (Vec<usize>, usize) = if targets.len() == total {
            let starts = target_lengths.iter().scan(0, |at, &l| {
                let start = *at;
                *at += l;
                Some(start)
            });
            (starts.collect(), longest)
        } else if n > 0 && targets.len().is_multiple_of(n) && targets.len() / n >= longest {
            let s = targets.len() / n;
            ((0..n).map(|b| b * s).collect(), s)
        } else {
            return Err(CtcError::TargetsLayout {
                targets: targets.len(),
                batch: n,
                total,
            });
        };
        let mut padded = alloc::vec![0u32; n * max_target_len];
        for (batch, (&start, &len)) in starts.iter().zip(&target_lengths).enumerate() {
            let row = &mut padded[batch * max_target_len..][..len];
            for (position, (out, &label)) in row.iter_mut().zip(&targets[start..]).enumerate() {
                *out = u32::try_from(label).map_err(|_| CtcError::Label {
                    batch,
                    position,
                    label,
                })?;
            }
        }
        Ok(Self {
            input_lengths,
            targets: padded,
            max_target_len,
            target_lengths,
        })
    }

    /// The kernels' input over `log_probs` (`[max_time, N, classes]`).
    ///
    /// # Examples
    ///
    /// ```
    /// use tessera_core::loss::CtcTargets;
    ///
    /// let targets = CtcTargets::from_torch(&[2, 1], &[1, 2, 3], &[2, 1])?;
    /// let log_probs = [0.0f32; 2 * 2 * 4]; // [max_time 2, N 2, classes 4]
    /// let input = targets.input(&log_probs, 2);
    /// assert_eq!((input.max_time, input.max_target_len), (2, 2));
    /// assert_eq!((input.input_lengths, input.target_lengths), (&[2, 1][..], &[2, 1][..]));
    /// assert_eq!(input.targets[..3], [1, 2, 3]);
    /// # Ok::<(), Box<dyn core::error::Error>>(())
    /// ```
    #[must_use]
    pub fn input<'a, L>(&'a self, log_probs: &'a [L], max_time: usize) -> CtcInput<'a, L> {
        CtcInput {
            log_probs,
            max_time,
            input_lengths: &self.input_lengths,
            targets: &self.targets,
            max_target_len: self.max_target_len,
            target_lengths: &self.target_lengths,
        }
    }
}

/// `i64` lengths as `usize`.
fn lengths(x: &[i64]) -> Result<Vec<usize>, CtcError> {
    x.iter()
        .enumerate()
        .map(|(batch, &length)| {
            usize::try_from(length).map_err(|_| CtcError::Length { batch, length })
        })
        .collect()
}
