//! Delayed scaling's amax history (see [`super`]'s rules).

/// The larger of `a` and `b`, NaN if either is: amaxes' max, whatever
/// the order.
///
/// ```
/// use tessera_sim::model::quant::max_or_nan;
///
/// assert_eq!(max_or_nan(1.0, 2.0), 2.0);
/// assert!(max_or_nan(f32::NAN, 2.0).is_nan() && max_or_nan(2.0, f32::NAN).is_nan());
/// ```
#[must_use]
pub fn max_or_nan(a: f32, b: f32) -> f32 {
    if a.is_nan() || b.is_nan() {
        f32::NAN
    } else {
        a.max(b)
    }
}

/// The amax history of a delayed-scaled operand: the amaxes of the last
/// `n` applied steps, oldest first, zeros where no step has been yet (as
/// Transformer Engine's zero-initialised history).
///
/// ```
/// use tessera_core::fp::Format;
/// use tessera_sim::model::quant::{AmaxHistory, tensor_exponent};
///
/// let mut h = AmaxHistory::new(2);
/// assert_eq!(tensor_exponent(Format::F143, h.amax()), Some(0)); // empty: scale 1
/// h.push(1.0);
/// h.push(0.25);
/// assert_eq!(h.amax(), 1.0);
/// h.push(0.5); // 1.0 leaves the window
/// assert_eq!(h.entries(), [0.25, 0.5]);
/// assert_eq!(h.amax(), 0.5);
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct AmaxHistory {
    entries: Vec<f32>,
}

impl AmaxHistory {
    /// An empty history of `n` steps.
    ///
    /// ```
    /// use tessera_sim::model::quant::AmaxHistory;
    ///
    /// assert_eq!(AmaxHistory::new(3).entries(), [0.0; 3]);
    /// ```
    #[must_use]
    pub fn new(n: u16) -> Self {
        Self {
            entries: vec![0.0; usize::from(n)],
        }
    }

    /// Its entries, oldest first.
    ///
    /// ```
    /// use tessera_sim::model::quant::AmaxHistory;
    ///
    /// let mut h = AmaxHistory::new(2);
    /// h.push(3.0);
    /// assert_eq!(h.entries(), [0.0, 3.0]); // oldest first
    /// ```
    #[must_use]
    pub fn entries(&self) -> &[f32] {
        &self.entries
    }

    /// The largest entry (NaN if one is NaN): the amax the next step's
    /// scale is computed from ([`tensor_exponent`](super::tensor_exponent)
    /// of it).
    ///
    /// ```
    /// use tessera_sim::model::quant::AmaxHistory;
    ///
    /// let mut h = AmaxHistory::new(3);
    /// h.push(2.0);
    /// h.push(0.5);
    /// assert_eq!(h.amax(), 2.0);
    /// h.push(f32::NAN);
    /// assert!(h.amax().is_nan());
    /// ```
    #[must_use]
    pub fn amax(&self) -> f32 {
        self.entries.iter().copied().fold(0.0, max_or_nan)
    }

    /// Appends a step's amax; the oldest entry leaves.
    ///
    /// ```
    /// use tessera_sim::model::quant::AmaxHistory;
    ///
    /// let mut h = AmaxHistory::new(2);
    /// for a in [1.0, 2.0, 3.0] {
    ///     h.push(a);
    /// }
    /// assert_eq!(h.entries(), [2.0, 3.0]);
    /// let mut none = AmaxHistory::new(0);
    /// none.push(1.0); // a history of no steps keeps nothing
    /// assert!(none.entries().is_empty());
    /// ```
    pub fn push(&mut self, amax: f32) {
        if let Some(last) = self.entries.len().checked_sub(1) {
            self.entries.rotate_left(1);
            self.entries[last] = amax;
        }
    }

    /// Restores saved entries (oldest first).
    ///
    /// # Errors
    /// The expected length if `entries` has another.
    ///
    /// ```
    /// use tessera_sim::model::quant::AmaxHistory;
    ///
    /// let mut h = AmaxHistory::new(2);
    /// h.restore(&[0.5, 1.5]).unwrap();
    /// assert_eq!(h.amax(), 1.5);
    /// assert_eq!(h.restore(&[1.0]), Err(2)); // the expected length
    /// ```
    pub fn restore(&mut self, entries: &[f32]) -> Result<(), usize> {
        if entries.len() != self.entries.len() {
            return Err(self.entries.len());
        }
        self.entries.copy_from_slice(entries);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_amax_history_keeps_its_window_and_propagates_nan() {
        let mut h = AmaxHistory::new(3);
        for a in [4.0, 1.0, 2.0] {
            h.push(a);
        }
        assert_eq!(h.amax(), 4.0);
        h.push(0.5);
        assert_eq!((h.entries(), h.amax()), ([1.0, 2.0, 0.5].as_slice(), 2.0));
        h.push(f32::NAN);
        assert!(h.amax().is_nan());
        assert_eq!(h.restore(&[1.0]), Err(3));
        assert_eq!(h.restore(&[0.0; 3]), Ok(()));
        assert_eq!(h.amax(), 0.0);
    }
}
