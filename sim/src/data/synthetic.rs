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
use super::{DataError, Dataset, MAX_CLASSES, MAX_SOURCE_BYTES};

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

/// Checks the counts of the generated data set `name`; its `samples x
/// features` inputs and `samples` labels, reserved. Their bytes are bounded
/// by [`MAX_SOURCE_BYTES`] before anything is allocated.
fn reserve(
    name: &str,
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
    if classes < 2 {
        return Err(DataError::OneClass {
            name: name.to_owned(),
            found: classes,
        });
    }
    // Inputs, labels and the class means, 4 bytes a value.
    let values = samples as u128 * (features as u128 + 1) + classes as u128 * features as u128;
    let bytes = u64::try_from(values * 4).unwrap_or(u64::MAX);
    if bytes > MAX_SOURCE_BYTES {
        return Err(DataError::SourceTooLarge {
            source: name.to_owned(),
            what: "(samples x (features + 1) + classes x features) x 4 bytes",
            bytes,
            limit: MAX_SOURCE_BYTES,
        });
    }
    // Below the limit, so the products fit in usize.
    Ok((
        Vec::with_capacity(samples * features),
        Vec::with_capacity(samples),
    ))
}

/// `samples` samples of `features` features in `classes` clusters.
///
/// # Errors
///
/// [`DataError::Zero`] for a zero count, [`DataError::OneClass`] for 1
/// class, [`DataError::SourceTooLarge`] if the data would take more than
/// [`MAX_SOURCE_BYTES`], [`DataError::LabelOutOfRange`] for more than
/// [`MAX_CLASSES`] classes.
pub(crate) fn generate(
    samples: usize,
    features: usize,
    classes: usize,
    seed: u64,
) -> Result<Dataset, DataError> {
    let name = format!("synthetic:{samples}:{features}:{classes}:{seed}");
    let (mut inputs, mut labels) = reserve(&name, samples, features, classes)?;
    let root = RandomStream::new(seed, SYNTHETIC_STREAM);
    let (means_stream, noise_stream) = (root.substream(0), root.substream(1));
    let mean_count = classes * features;
    let mut means = Vec::with_capacity(mean_count);
    means.extend((0..mean_count as u64).map(|p| 2.0 * unit(means_stream.bits(p)) - 1.0));
    for i in 0..samples {
        let label = i % classes;
        labels.push(label as u32);
        let mean = &means[label * features..(label + 1) * features];
        for (f, &mu) in mean.iter().enumerate() {
            inputs.push(mu + noise(&noise_stream, (i * features + f) as u64));
        }
    }
    Dataset::new(name, features, classes, inputs, labels)
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
    let name = format!("images:{samples}:{c}x{h}x{w}:{classes}:{seed}");
    let features = c
        .checked_mul(h)
        .and_then(|n| n.checked_mul(w))
        .ok_or_else(|| DataError::SourceTooLarge {
            source: name.clone(),
            what: "channels x height x width",
            bytes: u64::MAX,
            limit: MAX_SOURCE_BYTES,
        })?;
    let (mut inputs, mut labels) = reserve(&name, samples, features, classes)?;
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
    Dataset::new(name, features, classes, inputs, labels)
}
