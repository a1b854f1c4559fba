//! MNIST's IDX files: `idx3-ubyte` images and `idx1-ubyte` labels.
//!
//! An IDX file is the magic number `00 00 TT DD` (element type `TT`,
//! `0x08` = unsigned byte, the only one read here; `DD` dimensions), `DD`
//! big-endian `u32` sizes, then the elements in C order. Images are
//! `0x00000803` (`samples x rows x cols`, flattened to `rows * cols`
//! features, each byte scaled by `1/255`), labels `0x00000801`. Either
//! file may be gzip-compressed. The class count is the largest label plus
//! one.

use std::path::Path;

use super::{DataError, Dataset, FileProblem, MAX_CLASSES, Position};

/// The magic number of a u8 array of 3 dimensions (MNIST images).
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// The magic number of a u8 array of 1 dimension (MNIST labels).
pub const LABELS_MAGIC: u32 = 0x0000_0801;

/// A parsed IDX array of bytes: sizes and data.
struct Array<'a> {
    dims: Vec<usize>,
    data: &'a [u8],
}

/// Parses an IDX u8 array of `rank` dimensions (magic `expected`).
fn parse<'a>(
    path: &Path,
    bytes: &'a [u8],
    expected: u32,
    rank: usize,
) -> Result<Array<'a>, DataError> {
    let malformed = |offset: u64, problem| DataError::Malformed {
        path: path.to_path_buf(),
        at: Position::Offset(offset),
        problem,
    };
    let found_len = bytes.len() as u64;
    let truncated = |expected: u64| {
        malformed(
            found_len,
            FileProblem::Truncated {
                expected,
                found: found_len,
            },
        )
    };
    let Some(magic) = bytes.first_chunk::<4>().map(|m| u32::from_be_bytes(*m)) else {
        return Err(truncated(4));
    };
    // Right dimension count and zero prefix, but another element type.
    if magic & 0xffff_00ff == expected & 0xffff_00ff && magic != expected {
        return Err(malformed(
            2,
            FileProblem::UnsupportedDtype {
                found: format!("{:#04x}", (magic >> 8) & 0xff),
                supported: "0x08, unsigned bytes: the only IDX element type read",
            },
        ));
    }
    if magic != expected {
        return Err(malformed(
            0,
            FileProblem::WrongMagic {
                expected: expected.to_be_bytes().to_vec(),
                found: bytes[..4].to_vec(),
            },
        ));
    }
    let header = 4 + 4 * rank;
    if bytes.len() < header {
        return Err(truncated(header as u64));
    }
    let dims: Vec<usize> = bytes[4..header]
        .chunks_exact(4)
        .map(|d| u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize)
        .collect();
    let too_large = || malformed(4, FileProblem::TooLarge);
    let len = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .ok_or_else(too_large)?;
    let total = len.checked_add(header).ok_or_else(too_large)?;
    if bytes.len() < total {
        return Err(truncated(total as u64));
    }
    if bytes.len() > total {
        return Err(malformed(
            total as u64,
            FileProblem::TrailingBytes {
                expected: total as u64,
                found: found_len,
            },
        ));
    }
    Ok(Array {
        dims,
        data: &bytes[header..],
    })
}

/// An IDX data set from the (gunzipped) contents of an image file and a
/// label file.
pub(crate) fn parse_pair(
    images_path: &Path,
    images: &[u8],
    labels_path: &Path,
    labels: &[u8],
    name: &str,
) -> Result<Dataset, DataError> {
    let images = parse(images_path, images, IMAGES_MAGIC, 3)?;
    let labels = parse(labels_path, labels, LABELS_MAGIC, 1)?;
    let samples = images.dims[0];
    // The product of all three sizes was checked, but with no samples the
    // other two may still overflow a 32-bit usize.
    let features =
        images.dims[1]
            .checked_mul(images.dims[2])
            .ok_or_else(|| DataError::Malformed {
                path: images_path.to_path_buf(),
                at: Position::Offset(8),
                problem: FileProblem::TooLarge,
            })?;
    if samples != labels.dims[0] {
        return Err(DataError::SampleCountMismatch {
            inputs: Some(images_path.to_path_buf()),
            input_samples: samples,
            label_samples: labels.dims[0],
        });
    }
    if samples == 0 {
        return Err(DataError::Malformed {
            path: images_path.to_path_buf(),
            at: Position::Offset(4),
            problem: FileProblem::NoSamples,
        });
    }
    if features == 0 {
        return Err(DataError::Zero { what: "features" });
    }
    let inputs = images.data.iter().map(|&b| f32::from(b) / 255.0).collect();
    let labels: Vec<u32> = labels.data.iter().map(|&b| u32::from(b)).collect();
    let classes = labels.iter().max().map_or(1, |&m| m as usize + 1);
    debug_assert!(classes <= MAX_CLASSES);
    Dataset::new(name, features, classes, inputs, labels)
}
