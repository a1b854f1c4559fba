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

/// The noise at position `p` of `stream`: `NOISE` times a sum of twelve
/// uniforms minus 6.
fn noise(stream: &RandomStream, p: u64) -> f32 {
    let sum: f32 = (0..12).map(|w| unit(stream.word(p, w))).sum();
    NOISE * (sum - 6.0)
}

/// Checks the counts of a generated data set; its `samples x features`
/// inputs and `samples` labels, reserved.
fn reserve(
    samples: usize,
    features: usize,
    classes: usize,
) -> Result<(Vec<f32>, Vec<u32>), DataError> {
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
    labels.try_reserve_exact(samples).map_err(|_| too_large)?;
    Ok((inputs, labels))
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
    let (mut inputs, mut labels) = reserve(samples, features, classes)?;
    let root = RandomStream::new(seed, SYNTHETIC_STREAM);
    let (means_stream, noise_stream) = (root.substream(0), root.substream(1));
    let too_large = DataError::Overflow {
        what: "synthetic samples x features x 4 bytes",
    };
    let mean_count = classes.checked_mul(features).ok_or(too_large.clone())?;
    let mut means = Vec::new();
    means.try_reserve_exact(mean_count).map_err(|_| too_large)?;
    means.extend((0..mean_count as u64).map(|p| 2.0 * unit(means_stream.bits(p)) - 1.0));
    for i in 0..samples {
        let label = i % classes;
        labels.push(label as u32);
        let mean = &means[label * features..(label + 1) * features];
        for (f, &mu) in mean.iter().enumerate() {
            inputs.push(mu + noise(&noise_stream, (i * features + f) as u64));
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

/// The shape of one synthetic image: channels, height, width.
pub(crate) type ImageShape = (usize, usize, usize);

/// `samples` seeded images of `shape` (NCHW per sample, `c h w` features)
/// in `classes` classes: class `k`'s template has, per channel, a bump
/// `a max(0, 1 - d^2 / r^2)` around a centre uniform over the image (`d`
/// the distance to it, `r` a third of the larger side, `a` uniform in
/// `[-1.5, -0.5) u [0.5, 1.5)`); sample `i` has label `i % classes` and its
/// class's template plus the noise of [`generate`] (standard deviation
/// 0.5). Plain f32 arithmetic from the seed's streams (substream 2 at
/// `3 (k c + ch) + {0, 1, 2}` for a bump's row, column and amplitude;
/// substream 1 for the noise as in [`generate`]): bitwise the same
/// everywhere.
///
/// # Errors
/// As [`generate`], for `c h w` features.
pub(crate) fn images(
    samples: usize,
    (c, h, w): ImageShape,
    classes: usize,
    seed: u64,
) -> Result<Dataset, DataError> {
    let features = c
        .checked_mul(h)
        .and_then(|n| n.checked_mul(w))
        .ok_or(DataError::Overflow {
            what: "synthetic image pixels",
        })?;
    let (mut inputs, mut labels) = reserve(samples, features, classes)?;
    let root = RandomStream::new(seed, SYNTHETIC_STREAM);
    let (noise_stream, bumps) = (root.substream(1), root.substream(2));
    let r2 = {
        let r = h.max(w) as f32 / 3.0;
        (r * r).max(1.0)
    };
    let template = |k: usize, f: usize| {
        let (ch, y, x) = (f / (h * w), f / w % h, f % w);
        let at = 3 * (k * c + ch) as u64;
        let cy = unit(bumps.bits(at)) * h as f32;
        let cx = unit(bumps.bits(at + 1)) * w as f32;
        let u = 2.0 * unit(bumps.bits(at + 2)) - 1.0;
        let a = if u < 0.0 { u - 0.5 } else { u + 0.5 };
        let (dy, dx) = (y as f32 + 0.5 - cy, x as f32 + 0.5 - cx);
        a * (1.0 - (dy * dy + dx * dx) / r2).max(0.0)
    };
    for i in 0..samples {
        let k = i % classes;
        labels.push(k as u32);
        for f in 0..features {
            inputs.push(template(k, f) + noise(&noise_stream, (i * features + f) as u64));
        }
    }
    Dataset::new(
        format!("images:{samples}:{c}x{h}x{w}:{classes}:{seed}"),
        features,
        classes,
        inputs,
        labels,
    )
}
