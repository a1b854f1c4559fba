//! Where a data set comes from, as named on the command line.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use super::{DataError, Dataset, csv, digits, file, idx, npy, synthetic};

/// A data set to load.
///
/// Parsed from the command line by [`FromStr`]:
///
/// | text | source |
/// | --- | --- |
/// | `digits` | [`Source::Digits`] |
/// | `synthetic:SAMPLES:FEATURES:CLASSES[:SEED]` | [`Source::Synthetic`] (seed 0 if omitted) |
/// | `images:SAMPLES:CxHxW:CLASSES[:SEED]` | [`Source::Images`] (seed 0 if omitted) |
/// | `csv:PATH`, or a path ending `.csv` or `.csv.gz` | [`Source::Csv`] |
/// | `idx:IMAGES:LABELS` | [`Source::Idx`] |
/// | `npy:INPUTS:LABELS` | [`Source::Npy`] |
///
/// ```
/// use tessera_sim::data::Source;
///
/// let s: Source = "synthetic:1000:16:4:7".parse()?;
/// let data = s.load()?;
/// assert_eq!((data.len(), data.features(), data.classes()), (1000, 16, 4));
/// assert_eq!(s.to_string().parse::<Source>()?, s);
/// # Ok::<(), tessera_sim::data::DataError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// The embedded handwritten digits ([`digits()`](super::digits())).
    Digits,
    /// A CSV file, the label in the last column, optionally gzip
    /// compressed, optionally with a header line (module `csv` rules: the
    /// first line is a header if no field is a number; one with both is refused).
    Csv(PathBuf),
    /// MNIST-style IDX files: `idx3-ubyte` images (u8 pixels scaled by
    /// `1/255`) and `idx1-ubyte` labels, each optionally gzip compressed.
    Idx {
        /// The images file.
        images: PathBuf,
        /// The labels file.
        labels: PathBuf,
    },
    /// NumPy `.npy` files: a 2-D `f32`, `f64` or `u8` array of inputs and
    /// a 1-D integer array of labels, little-endian, C order, each
    /// optionally gzip compressed.
    Npy {
        /// The inputs file.
        inputs: PathBuf,
        /// The labels file.
        labels: PathBuf,
    },
    /// Seeded Gaussian class clusters (see [`Source::load`]).
    Synthetic {
        /// Samples to generate.
        samples: usize,
        /// Features per sample.
        features: usize,
        /// Classes (labels `i % classes`).
        classes: usize,
        /// The seed of the class means and the noise.
        seed: u64,
    },
    /// Seeded images: per class and channel a bump at a random place,
    /// plus noise (see [`Source::load`]).
    Images {
        /// Samples to generate.
        samples: usize,
        /// Channels, height and width of every image (NCHW per sample).
        shape: (usize, usize, usize),
        /// Classes (labels `i % classes`).
        classes: usize,
        /// The seed of the templates and the noise.
        seed: u64,
    },
}

/// The grammar, for error messages.
const EXPECTED: &str = "digits, synthetic:SAMPLES:FEATURES:CLASSES[:SEED], \
                        images:SAMPLES:CxHxW:CLASSES[:SEED], csv:PATH, \
                        a path ending .csv or .csv.gz, idx:IMAGES:LABELS or npy:INPUTS:LABELS";

impl Source {
    /// Loads the data set, reading files whole.
    ///
    /// Synthetic data: class `c`'s mean has every feature uniform in
    /// `[-1, 1)`; sample `i` has label `i % classes` and inputs its class
    /// mean plus noise of standard deviation 0.5 (a sum of twelve uniforms,
    /// so plain f32 arithmetic), all from
    /// [`RandomStream`](tessera_core::rng::RandomStream)s of the seed:
    /// bitwise the same everywhere. Synthetic images: class `k`'s template
    /// has, per channel, a bump `a max(0, 1 - d^2 / r^2)` around a centre
    /// uniform over the image (`r` a third of the larger side, `|a|` in
    /// `[0.5, 1.5)`), and each sample adds the same noise.
    ///
    /// The data set is named after the source (`digits`, the file name,
    /// `synthetic:...`, `images:...`).
    ///
    /// # Errors
    ///
    /// [`DataError::Io`] if a file cannot be read, [`DataError::Malformed`]
    /// with the file, the position and the problem if its contents are
    /// wrong, [`DataError::SampleCountMismatch`] if inputs and labels
    /// disagree, [`DataError::Zero`] for a zero synthetic count,
    /// [`DataError::FileTooLarge`] or [`DataError::SourceTooLarge`] past
    /// [`MAX_SOURCE_BYTES`](super::MAX_SOURCE_BYTES), [`DataError::OneClass`]
    /// if the labels hold fewer than 2 distinct classes.
    ///
    /// ```
    /// use tessera_sim::data::{DataError, Source};
    ///
    /// let d = Source::Synthetic { samples: 12, features: 3, classes: 4, seed: 1 }.load()?;
    /// assert_eq!((d.len(), d.features(), d.classes()), (12, 3, 4));
    /// assert_eq!(d.class_counts(), vec![3, 3, 3, 3]); // labels i % classes
    /// let one = Source::Synthetic { samples: 12, features: 3, classes: 1, seed: 1 }.load();
    /// assert!(matches!(one, Err(DataError::OneClass { found: 1, .. })));
    /// # Ok::<(), DataError>(())
    /// ```
    pub fn load(&self) -> Result<Dataset, DataError> {
        let data = self.load_any()?;
        let found = data.class_counts().iter().filter(|&&n| n > 0).count();
        if found < 2 {
            return Err(DataError::OneClass {
                name: data.name().to_owned(),
                found,
            });
        }
        Ok(data)
    }

    /// The data set, whatever its labels.
    fn load_any(&self) -> Result<Dataset, DataError> {
        match self {
            Self::Digits => Ok(digits()),
            Self::Csv(path) => csv::parse(path, &file_name(path), &file::read(path)?),
            Self::Idx { images, labels } => idx::parse_pair(
                images,
                &file::read(images)?,
                labels,
                &file::read(labels)?,
                &file_name(images),
            ),
            Self::Npy { inputs, labels } => npy::parse_pair(
                inputs,
                &file::read(inputs)?,
                labels,
                &file::read(labels)?,
                &file_name(inputs),
            ),
            &Self::Synthetic {
                samples,
                features,
                classes,
                seed,
            } => synthetic::generate(samples, features, classes, seed),
            &Self::Images {
                samples,
                shape,
                classes,
                seed,
            } => synthetic::images(samples, shape, classes, seed),
        }
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

impl FromStr for Source {
    type Err = DataError;

    fn from_str(s: &str) -> Result<Self, DataError> {
        let bad = |expected| DataError::BadSpec {
            spec: s.to_owned(),
            expected,
        };
        let pair = |rest: &str| -> Result<(PathBuf, PathBuf), DataError> {
            match rest.split_once(':') {
                Some((a, b)) if !a.is_empty() && !b.is_empty() => Ok((a.into(), b.into())),
                _ => Err(bad("two paths separated by ':'")),
            }
        };
        if s == "digits" {
            return Ok(Self::Digits);
        }
        if let Some(rest) = s.strip_prefix("synthetic:") {
            let expected = "synthetic:SAMPLES:FEATURES:CLASSES[:SEED] with whole numbers";
            let parts: Vec<&str> = rest.split(':').collect();
            if !(3..=4).contains(&parts.len()) {
                return Err(bad(expected));
            }
            let count = |p: &str| p.parse::<usize>().map_err(|_| bad(expected));
            let seed = parts
                .get(3)
                .map_or(Ok(0), |p| p.parse::<u64>().map_err(|_| bad(expected)))?;
            return Ok(Self::Synthetic {
                samples: count(parts[0])?,
                features: count(parts[1])?,
                classes: count(parts[2])?,
                seed,
            });
        }
        if let Some(rest) = s.strip_prefix("images:") {
            return images(rest)
                .ok_or_else(|| bad("images:SAMPLES:CxHxW:CLASSES[:SEED] with whole numbers"));
        }
        if let Some(path) = s.strip_prefix("csv:") {
            if path.is_empty() {
                return Err(bad("csv:PATH"));
            }
            return Ok(Self::Csv(path.into()));
        }
        if let Some(rest) = s.strip_prefix("idx:") {
            let (images, labels) = pair(rest)?;
            return Ok(Self::Idx { images, labels });
        }
        if let Some(rest) = s.strip_prefix("npy:") {
            let (inputs, labels) = pair(rest)?;
            return Ok(Self::Npy { inputs, labels });
        }
        if s.ends_with(".csv") || s.ends_with(".csv.gz") {
            return Ok(Self::Csv(s.into()));
        }
        Err(bad(EXPECTED))
    }
}

impl fmt::Display for Source {
    /// The text [`FromStr`] parses back to the same source (for paths that
    /// are valid UTF-8 and have no `:`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Digits => f.write_str("digits"),
            Self::Csv(path) => write!(f, "csv:{}", path.display()),
            Self::Idx { images, labels } => {
                write!(f, "idx:{}:{}", images.display(), labels.display())
            }
            Self::Npy { inputs, labels } => {
                write!(f, "npy:{}:{}", inputs.display(), labels.display())
            }
            Self::Synthetic {
                samples,
                features,
                classes,
                seed,
            } => write!(f, "synthetic:{samples}:{features}:{classes}:{seed}"),
            Self::Images {
                samples,
                shape: (c, h, w),
                classes,
                seed,
            } => write!(f, "images:{samples}:{c}x{h}x{w}:{classes}:{seed}"),
        }
    }
}

/// `SAMPLES:CxHxW:CLASSES[:SEED]` of an `images:` source.
fn images(rest: &str) -> Option<Source> {
    let parts: Vec<&str> = rest.split(':').collect();
    if !(3..=4).contains(&parts.len()) {
        return None;
    }
    let dims: Vec<usize> = parts[1]
        .split('x')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    let &[c, h, w] = dims.as_slice() else {
        return None;
    };
    Some(Source::Images {
        samples: parts[0].parse().ok()?,
        shape: (c, h, w),
        classes: parts[2].parse().ok()?,
        seed: parts.get(3).map_or(Some(0), |p| p.parse().ok())?,
    })
}
