//! The embedded default data set: UCI's Optical Recognition of
//! Handwritten Digits (`sim/data/README.md` has its origin and licence).

use std::path::Path;
use std::sync::OnceLock;

use super::{Dataset, csv, file};

/// The gzip-compressed CSV, as scikit-learn ships it (57,523 bytes).
const DIGITS_CSV_GZ: &[u8] = include_bytes!("../../data/digits.csv.gz");

/// Samples in the embedded data set.
pub const DIGITS_SAMPLES: usize = 1797;
/// Pixels per sample (8 x 8).
pub const DIGITS_FEATURES: usize = 64;
/// Digits 0 to 9.
pub const DIGITS_CLASSES: usize = 10;

/// The embedded handwritten digits: 1,797 samples of 8 x 8 pixels, each
/// pixel (0..16 in the file) scaled to `[0, 1]` by `1/16` (exact), labels
/// 0 to 9, named `"digits"`.
///
/// Decompressed and parsed once per process, then cloned.
///
/// # Panics
///
/// Never for the file this crate embeds (the tests load it); only if that
/// file were replaced by a malformed one.
///
/// ```
/// use tessera_sim::data::{DIGITS_CLASSES, DIGITS_FEATURES, DIGITS_SAMPLES, digits};
///
/// let d = digits();
/// assert_eq!((d.len(), d.features(), d.classes()), (DIGITS_SAMPLES, DIGITS_FEATURES, DIGITS_CLASSES));
/// assert!(d.inputs().iter().all(|&p| (0.0..=1.0).contains(&p)));
/// ```
#[must_use]
pub fn digits() -> Dataset {
    static DIGITS: OnceLock<Dataset> = OnceLock::new();
    DIGITS
        .get_or_init(|| {
            let csv_bytes = file::gunzip_if_gzip(DIGITS_CSV_GZ)
                .unwrap_or_else(|e| panic!("the embedded digits.csv.gz does not gunzip: {e}"));
            let raw = csv::parse(Path::new("digits.csv.gz"), "digits", &csv_bytes)
                .unwrap_or_else(|e| panic!("the embedded digits data set is malformed: {e}"));
            let inputs = raw.inputs().iter().map(|&p| p / 16.0).collect();
            Dataset::new(
                "digits",
                raw.features(),
                raw.classes(),
                inputs,
                raw.labels().to_vec(),
            )
            .unwrap_or_else(|e| panic!("the embedded digits data set is malformed: {e}"))
        })
        .clone()
}
