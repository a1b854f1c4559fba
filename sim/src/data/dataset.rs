//! An in-memory labelled data set and its stratified split.

use tessera_core::rng::RandomStream;

use super::DataError;
use super::shuffle::{SPLIT_STREAM, shuffle};

/// `samples x features` f32 inputs (row-major, contiguous) with a `u32`
/// label per sample below [`Dataset::classes`].
///
/// Every constructor checks the invariants once; the accessors never fail
/// for an index below [`Dataset::len`].
#[derive(Clone, Debug, PartialEq)]
pub struct Dataset {
    name: String,
    features: usize,
    classes: usize,
    inputs: Vec<f32>,
    labels: Vec<u32>,
}

impl Dataset {
    /// A data set named `name` of `labels.len()` samples.
    ///
    /// # Errors
    ///
    /// [`DataError::Zero`] for 0 features or classes,
    /// [`DataError::InputLength`] unless `inputs.len() == labels.len() *
    /// features`, [`DataError::LabelOutOfRange`] for a label `>= classes`,
    /// [`DataError::NonFinite`] for a NaN or infinite input.
    ///
    /// ```
    /// use tessera_sim::data::{DataError, Dataset};
    ///
    /// let d = Dataset::new("xor", 2, 2, vec![0.0, 0.0, 0.0, 1.0, 1.0, 0.0], vec![0, 1, 1])?;
    /// assert_eq!((d.len(), d.features(), d.classes()), (3, 2, 2));
    /// let short = Dataset::new("xor", 2, 2, vec![0.0; 5], vec![0, 1, 1]);
    /// assert!(matches!(short, Err(DataError::InputLength { features: 2, samples: 3, found: 5 })));
    /// let label = Dataset::new("xor", 2, 2, vec![0.0; 6], vec![0, 2, 1]);
    /// assert!(matches!(label, Err(DataError::LabelOutOfRange { sample: 1, label: 2, classes: 2 })));
    /// # Ok::<(), DataError>(())
    /// ```
    pub fn new(
        name: impl Into<String>,
        features: usize,
        classes: usize,
        inputs: Vec<f32>,
        labels: Vec<u32>,
    ) -> Result<Self, DataError> {
        if features == 0 {
            return Err(DataError::Zero { what: "features" });
        }
        if classes == 0 {
            return Err(DataError::Zero { what: "classes" });
        }
        if labels.len().checked_mul(features) != Some(inputs.len()) {
            return Err(DataError::InputLength {
                features,
                samples: labels.len(),
                found: inputs.len(),
            });
        }
        if let Some((sample, &label)) = labels
            .iter()
            .enumerate()
            .find(|&(_, &l)| usize::try_from(l).map_or(true, |l| l >= classes))
        {
            return Err(DataError::LabelOutOfRange {
                sample,
                label,
                classes,
            });
        }
        if let Some(i) = inputs.iter().position(|x| !x.is_finite()) {
            return Err(DataError::NonFinite {
                sample: i / features,
                feature: i % features,
            });
        }
        Ok(Self {
            name: name.into(),
            features,
            classes,
            inputs,
            labels,
        })
    }

    /// The number of samples.
    ///
    /// ```
    /// use tessera_sim::data::{DIGITS_SAMPLES, digits};
    ///
    /// assert_eq!(digits().len(), DIGITS_SAMPLES);
    /// ```
    #[must_use]
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no samples.
    ///
    /// ```
    /// use tessera_sim::data::digits;
    ///
    /// assert!(!digits().is_empty());
    /// assert!(digits().subset(&[]).is_empty());
    /// ```
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Input values per sample.
    ///
    /// ```
    /// use tessera_sim::data::digits;
    ///
    /// assert_eq!(digits().features(), 64); // 8 x 8 pixels
    /// ```
    #[must_use]
    pub fn features(&self) -> usize {
        self.features
    }

    /// The class count: every label is below it.
    ///
    /// ```
    /// use tessera_sim::data::digits;
    ///
    /// let d = digits();
    /// assert_eq!(d.classes(), 10);
    /// assert!(d.labels().iter().all(|&l| (l as usize) < d.classes()));
    /// ```
    #[must_use]
    pub fn classes(&self) -> usize {
        self.classes
    }

    /// The data set's name (for logs and reports).
    ///
    /// ```
    /// use tessera_sim::data::digits;
    ///
    /// assert_eq!(digits().name(), "digits");
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All inputs, row-major: sample `i` is `inputs()[i * features..][..features]`.
    ///
    /// ```
    /// use tessera_sim::data::Dataset;
    ///
    /// let d = Dataset::new("two", 2, 2, vec![1.0, 2.0, 3.0, 4.0], vec![0, 1]).unwrap();
    /// assert_eq!(d.inputs(), &[1.0, 2.0, 3.0, 4.0]);
    /// assert_eq!(&d.inputs()[d.features()..], d.input(1));
    /// ```
    #[must_use]
    pub fn inputs(&self) -> &[f32] {
        &self.inputs
    }

    /// All labels.
    ///
    /// ```
    /// use tessera_sim::data::Dataset;
    ///
    /// let d = Dataset::new("two", 1, 3, vec![0.5, 0.25], vec![2, 0]).unwrap();
    /// assert_eq!(d.labels(), &[2, 0]);
    /// ```
    #[must_use]
    pub fn labels(&self) -> &[u32] {
        &self.labels
    }

    /// The inputs of sample `i`.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    ///
    /// ```
    /// use tessera_sim::data::Dataset;
    ///
    /// let d = Dataset::new("two", 2, 2, vec![1.0, 2.0, 3.0, 4.0], vec![0, 1]).unwrap();
    /// assert_eq!(d.input(1), &[3.0, 4.0]);
    /// ```
    #[must_use]
    pub fn input(&self, i: usize) -> &[f32] {
        &self.inputs[i * self.features..(i + 1) * self.features]
    }

    /// The label of sample `i`.
    ///
    /// # Panics
    ///
    /// If `i >= self.len()`.
    ///
    /// ```
    /// use tessera_sim::data::Dataset;
    ///
    /// let d = Dataset::new("two", 1, 3, vec![0.5, 0.25], vec![2, 0]).unwrap();
    /// assert_eq!((d.label(0), d.label(1)), (2, 0));
    /// ```
    #[must_use]
    pub fn label(&self, i: usize) -> u32 {
        self.labels[i]
    }

    /// Samples per class, indexed by label.
    ///
    /// ```
    /// use tessera_sim::data::{Dataset, digits};
    ///
    /// let d = Dataset::new("three", 1, 3, vec![0.0; 4], vec![2, 0, 2, 2]).unwrap();
    /// assert_eq!(d.class_counts(), vec![1, 0, 3]);
    /// assert_eq!(digits().class_counts().iter().sum::<usize>(), digits().len());
    /// ```
    #[must_use]
    pub fn class_counts(&self) -> Vec<usize> {
        let mut counts = vec![0; self.classes];
        for &l in &self.labels {
            counts[l as usize] += 1;
        }
        counts
    }

    /// The samples `indices`, in that order, as a new data set with the
    /// same name, features and classes.
    ///
    /// # Panics
    ///
    /// If an index is not below `self.len()`.
    ///
    /// ```
    /// use tessera_sim::data::Dataset;
    ///
    /// let d = Dataset::new("abc", 1, 3, vec![0.0, 1.0, 2.0], vec![0, 1, 2]).unwrap();
    /// let s = d.subset(&[2, 0]);
    /// assert_eq!((s.name(), s.inputs(), s.labels()), ("abc", &[2.0, 0.0][..], &[2, 0][..]));
    /// ```
    #[must_use]
    pub fn subset(&self, indices: &[usize]) -> Dataset {
        let mut inputs = Vec::new();
        let mut labels = Vec::new();
        self.gather(indices, &mut inputs, &mut labels);
        Self {
            name: self.name.clone(),
            features: self.features,
            classes: self.classes,
            inputs,
            labels,
        }
    }

    /// Writes samples `indices` into `inputs`/`labels` (cleared and refilled).
    ///
    /// Reuses the vectors' capacity: an infeed gathering micro-batches of
    /// one size allocates once.
    ///
    /// # Panics
    ///
    /// If an index is not below `self.len()`.
    ///
    /// ```
    /// use tessera_sim::data::Dataset;
    ///
    /// let d = Dataset::new("abc", 1, 3, vec![0.0, 1.0, 2.0], vec![0, 1, 2]).unwrap();
    /// let (mut inputs, mut labels) = (vec![9.0; 8], vec![9; 8]);
    /// d.gather(&[1, 1], &mut inputs, &mut labels);
    /// assert_eq!((inputs, labels), (vec![1.0, 1.0], vec![1, 1]));
    /// ```
    pub fn gather(&self, indices: &[usize], inputs: &mut Vec<f32>, labels: &mut Vec<u32>) {
        inputs.clear();
        labels.clear();
        inputs.reserve(indices.len() * self.features);
        labels.reserve(indices.len());
        for &i in indices {
            inputs.extend_from_slice(self.input(i));
            labels.push(self.labels[i]);
        }
    }

    /// Splits into `(train, test)`, stratified per class: of the `n_c`
    /// samples of class `c`, `round(n_c * test_fraction)` (halves away from
    /// zero) go to the test set, chosen by a Fisher-Yates shuffle of the
    /// class's samples from `RandomStream::new(seed, SPLIT_STREAM)
    /// .substream(c)`. Both sets keep the data set's order, and are named
    /// `"<name>/train"` and `"<name>/test"`.
    ///
    /// The split depends only on the data set, the fraction and the seed.
    ///
    /// # Errors
    ///
    /// [`DataError::TestFraction`] unless `0 <= test_fraction < 1`;
    /// [`DataError::EmptyTrainingSet`] if no sample is left for training.
    ///
    /// ```
    /// use tessera_sim::data::{DataError, digits};
    ///
    /// let d = digits();
    /// let (train, test) = d.split(0.2, 42)?;
    /// assert_eq!(train.len() + test.len(), d.len());
    /// assert_eq!(test.name(), "digits/test");
    /// assert_eq!(d.split(0.2, 42)?.1, test); // the seed decides
    /// assert!(matches!(d.split(1.0, 42), Err(DataError::TestFraction(_))));
    /// # Ok::<(), DataError>(())
    /// ```
    pub fn split(&self, test_fraction: f64, seed: u64) -> Result<(Dataset, Dataset), DataError> {
        if !(0.0..1.0).contains(&test_fraction) {
            return Err(DataError::TestFraction(test_fraction));
        }
        let mut by_class: Vec<Vec<usize>> = vec![Vec::new(); self.classes];
        for (i, &l) in self.labels.iter().enumerate() {
            by_class[l as usize].push(i);
        }
        let mut in_test = vec![false; self.len()];
        let root = RandomStream::new(seed, SPLIT_STREAM);
        for (c, members) in by_class.iter_mut().enumerate() {
            shuffle(members, root.substream(c as u64));
            // Exact for every class size a Vec can hold, far below 2^53.
            let take = (members.len() as f64 * test_fraction).round() as usize;
            for &i in &members[..take.min(members.len())] {
                in_test[i] = true;
            }
        }
        let (test, train): (Vec<usize>, Vec<usize>) = (0..self.len()).partition(|&i| in_test[i]);
        if train.is_empty() {
            return Err(DataError::EmptyTrainingSet {
                samples: self.len(),
                test_fraction,
            });
        }
        let mut train = self.subset(&train);
        let mut test = self.subset(&test);
        train.name = format!("{}/train", self.name);
        test.name = format!("{}/test", self.name);
        Ok((train, test))
    }
}
