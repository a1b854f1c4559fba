//! Seeded Gaussian class clusters: a learnable data set of any size.
//!
//! Class `c` has a mean `mu[c]` with every feature uniform in `[-1, 1)`;
//! sample `i` has label `i % classes` and inputs `mu[label] + 0.5 * z`,
//! where every `z` is approximately standard normal: the sum of twelve
//! uniforms on `[0, 1)` minus 6 (Irwin-Hall), so that the generator is
//! plain f32 arithmetic, bitwise the same on every platform (no `ln` or
//! `cos` from the system's maths library).
//!
//! Random bits: the stream `RandomStream::new(seed, SYNTHETIC_STREAM)`;
//! its substream 0 at position `c * features + f` gives `mu[c][f]`, its
//! substream 1 at position `i * features + f`, words 0 to 11, gives the
//! twelve uniforms of `z[i][f]`. Each value is a pure function of the
//! seed and its position.

use tessera_core::rng::RandomStream;

use super::shuffle::SYNTHETIC_STREAM;
use super::{DataError, Dataset, MAX_CLASSES};

/// The standard deviation of the noise around each class mean.
const NOISE: f32 = 0.5;

/// A uniform value in `[0, 1)` from the top 24 bits of a word (exact).
fn unit(bits: u32) -> f32 {
    (bits >> 8) as f32 * (1.0 / (1u32 << 24) as f32)
}

/// `samples` samples of `features` features in `classes` clusters.
///
/// # Errors
///
/// [`DataError::Zero`] for a zero count, [`DataError::Overflow`] if
/// `samples * features` f32 values do not fit in memory,
/// [`DataError::LabelOutOfRange`] for
/// more than [`MAX_CLASSES`] classes.
pub(crate) fn generate(
    samples: usize,
    features: usize,
    classes: usize,
    seed: u64,
) -> Result<Dataset, DataError> {
    for (n, what) in [
        (samples, "samples"),
        (features, "features"),
        (classes, "classes"),
    ] {
        if n == 0 {
            return Err(DataError::Zero { what });
        }
    }
    if classes > MAX_CLASSES {
        return Err(DataError::LabelOutOfRange {
            sample: 0,
            label: u32::try_from(classes - 1).unwrap_or(u32::MAX),
            classes: MAX_CLASSES,
        });
    }
    let too_large = DataError::Overflow {
        what: "synthetic samples x features x 4 bytes",
    };
    let len = samples
        .checked_mul(features)
        .filter(|n| {
            n.checked_mul(size_of::<f32>())
                .is_some_and(|b| b <= isize::MAX as usize)
        })
        .ok_or(too_large.clone())?;
    let mut inputs = Vec::new();
    let mut labels = Vec::new();
    // Sizes from the command line: refuse what does not fit in memory
    // rather than abort.
    inputs
        .try_reserve_exact(len)
        .map_err(|_| too_large.clone())?;
    labels
        .try_reserve_exact(samples)
        .map_err(|_| too_large.clone())?;
    let root = RandomStream::new(seed, SYNTHETIC_STREAM);
    let (means_stream, noise_stream) = (root.substream(0), root.substream(1));
    let mean_count = classes.checked_mul(features).ok_or(too_large.clone())?;
    let mut means = Vec::new();
    means
        .try_reserve_exact(mean_count)
        .map_err(|_| too_large.clone())?;
    means.extend((0..mean_count as u64).map(|p| 2.0 * unit(means_stream.bits(p)) - 1.0));
    for i in 0..samples {
        let label = i % classes;
        labels.push(label as u32);
        let mean = &means[label * features..(label + 1) * features];
        for (f, &mu) in mean.iter().enumerate() {
            let p = (i * features + f) as u64;
            let sum: f32 = (0..12).map(|w| unit(noise_stream.word(p, w))).sum();
            inputs.push(mu + NOISE * (sum - 6.0));
        }
    }
    Dataset::new(
        format!("synthetic:{samples}:{features}:{classes}:{seed}"),
        features,
        classes,
        inputs,
        labels,
    )
}
