//! NumPy `.npy` arrays: 2-D inputs and 1-D integer labels.
//!
//! An npy file is the magic `\x93NUMPY`, a version (1.0: a `u16` header
//! length; 2.0 and 3.0: `u32`), then a Python dict literal such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (1797, 64), }`,
//! padded, then the data. This loader reads little-endian C-order arrays:
//! inputs `<f4`, `<f8` (rounded to nearest f32) or `u1` (kept as 0..255,
//! not scaled: the file says what the values are), labels any integer
//! type `i1`..`<i8` / `u1`..`<u8`. Either file may be gzip-compressed.

use std::path::Path;

use super::file::shown;
use super::{DataError, Dataset, FileProblem, MAX_CLASSES, Position};

/// The first six bytes of every npy file.
const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// The inputs' element types, for messages.
const INPUT_TYPES: &str = "inputs of '<f4', '<f8' or '|u1': f32, f64 or u8, little-endian";

/// The labels' element types, for messages.
const LABEL_TYPES: &str = "labels of an integer type, '|i1', '|u1', '<i2' .. '<u8', little-endian";

/// An element type this loader knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Dtype {
    F32,
    F64,
    Int { bytes: usize, signed: bool },
}

impl Dtype {
    fn size(self) -> usize {
        match self {
            Self::F32 => 4,
            Self::F64 => 8,
            Self::Int { bytes, .. } => bytes,
        }
    }

    /// Parses a `descr`: little-endian (`<`) for every type; also `|`,
    /// `=` or no byte order for one-byte types.
    fn parse(descr: &str) -> Option<Self> {
        let (order, ty) = match descr.as_bytes().first() {
            Some(b'<' | b'>' | b'|' | b'=') => descr.split_at(1),
            _ => ("", descr),
        };
        let dtype = match ty {
            "f4" => Self::F32,
            "f8" => Self::F64,
            "u1" | "B" => Self::Int {
                bytes: 1,
                signed: false,
            },
            "i1" | "b" => Self::Int {
                bytes: 1,
                signed: true,
            },
            "u2" | "i2" | "u4" | "i4" | "u8" | "i8" => Self::Int {
                bytes: usize::from(ty.as_bytes()[1] - b'0'),
                signed: ty.starts_with('i'),
            },
            _ => return None,
        };
        (order == "<" || (order != ">" && dtype.size() == 1)).then_some(dtype)
    }
}

/// A parsed npy array.
struct Array<'a> {
    descr: String,
    dtype: Dtype,
    shape: Vec<usize>,
    data: &'a [u8],
    data_offset: u64,
}

/// The value after `'key':` in the header dict.
fn value_of<'h>(header: &'h str, key: &str) -> Option<&'h str> {
    let at = header
        .find(&format!("'{key}'"))
        .or_else(|| header.find(&format!("\"{key}\"")))?;
    let rest = &header[at + key.len() + 2..];
    Some(rest.trim_start().strip_prefix(':')?.trim_start())
}

/// The errors of one file, at byte offsets.
struct Errors<'p> {
    path: &'p Path,
    /// The file's length.
    len: u64,
}

impl Errors<'_> {
    fn at(&self, offset: u64, problem: FileProblem) -> DataError {
        DataError::Malformed {
            path: self.path.to_path_buf(),
            at: Position::Offset(offset),
            problem,
        }
    }

    /// A header that is not a valid npy dict.
    fn bad(&self, reason: &'static str) -> DataError {
        self.at(8, FileProblem::BadNpyHeader { reason })
    }

    /// A file shorter than `expected` bytes.
    fn truncated(&self, expected: u64) -> DataError {
        self.at(
            self.len,
            FileProblem::Truncated {
                expected,
                found: self.len,
            },
        )
    }
}

/// Where the header dict starts and its length, by the format version.
fn header_span(bytes: &[u8], e: &Errors<'_>) -> Result<(usize, usize), DataError> {
    if !bytes.starts_with(MAGIC) {
        return Err(e.at(
            0,
            FileProblem::WrongMagic {
                expected: MAGIC.to_vec(),
                found: bytes[..bytes.len().min(MAGIC.len())].to_vec(),
            },
        ));
    }
    match bytes.get(6) {
        Some(1) => match bytes.get(8..10) {
            Some(l) => Ok((10, usize::from(u16::from_le_bytes([l[0], l[1]])))),
            None => Err(e.truncated(10)),
        },
        Some(2 | 3) => match bytes.get(8..12) {
            Some(l) => Ok((12, u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize)),
            None => Err(e.truncated(12)),
        },
        Some(_) => Err(e.at(
            6,
            FileProblem::BadNpyHeader {
                reason: "unknown version",
            },
        )),
        None => Err(e.truncated(10)),
    }
}

/// The header's `descr` string and its element type.
fn descr_of<'h>(
    header: &'h str,
    header_start: usize,
    supported: &'static str,
    e: &Errors<'_>,
) -> Result<(&'h str, Dtype), DataError> {
    let descr = value_of(header, "descr").ok_or_else(|| e.bad("no 'descr'"))?;
    let quote = descr.chars().next().filter(|&c| c == '\'' || c == '"');
    let descr = quote
        .and_then(|q| descr[1..].split_once(q))
        .map(|(d, _)| d)
        .ok_or_else(|| e.bad("'descr' is not a string"))?;
    let dtype = Dtype::parse(descr).ok_or_else(|| {
        e.at(
            header_start as u64,
            FileProblem::UnsupportedDtype {
                found: shown(descr),
                supported,
            },
        )
    })?;
    Ok((descr, dtype))
}

/// The header's `shape`, of `rank` dimensions, in C order.
fn shape_of(
    header: &str,
    header_start: usize,
    rank: usize,
    e: &Errors<'_>,
) -> Result<Vec<usize>, DataError> {
    let fortran = value_of(header, "fortran_order").ok_or_else(|| e.bad("no 'fortran_order'"))?;
    if fortran.starts_with("True") {
        return Err(e.at(header_start as u64, FileProblem::FortranOrder));
    }
    if !fortran.starts_with("False") {
        return Err(e.bad("'fortran_order' is not True or False"));
    }
    let shape = value_of(header, "shape").ok_or_else(|| e.bad("no 'shape'"))?;
    let shape: Vec<usize> = shape
        .strip_prefix('(')
        .and_then(|s| s.split_once(')'))
        .map(|(s, _)| s)
        .ok_or_else(|| e.bad("'shape' is not a tuple"))?
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.trim_end_matches('L').parse())
        .collect::<Result<_, _>>()
        .map_err(|_| e.bad("'shape' is not a tuple of whole numbers"))?;
    if shape.len() != rank {
        return Err(e.at(
            header_start as u64,
            FileProblem::WrongRank {
                expected: rank,
                found: shape.len(),
            },
        ));
    }
    Ok(shape)
}

/// Parses an npy array of `rank` dimensions; `supported` names the
/// element types the caller takes, for messages.
fn parse<'a>(
    path: &Path,
    bytes: &'a [u8],
    rank: usize,
    supported: &'static str,
) -> Result<Array<'a>, DataError> {
    let e = Errors {
        path,
        len: bytes.len() as u64,
    };
    let (header_start, header_len) = header_span(bytes, &e)?;
    let data_start = header_start + header_len;
    let Some(header) = bytes.get(header_start..data_start) else {
        return Err(e.truncated(data_start as u64));
    };
    let header = std::str::from_utf8(header).map_err(|_| e.bad("not text"))?;
    let (descr, dtype) = descr_of(header, header_start, supported, &e)?;
    let shape = shape_of(header, header_start, rank, &e)?;
    let total = shape
        .iter()
        .try_fold(dtype.size(), |a, &d| a.checked_mul(d))
        .and_then(|n| n.checked_add(data_start))
        .ok_or_else(|| e.at(header_start as u64, FileProblem::TooLarge))?;
    if bytes.len() < total {
        return Err(e.truncated(total as u64));
    }
    if bytes.len() > total {
        return Err(e.at(
            total as u64,
            FileProblem::TrailingBytes {
                expected: total as u64,
                found: e.len,
            },
        ));
    }
    Ok(Array {
        descr: descr.to_owned(),
        dtype,
        shape,
        data: &bytes[data_start..],
        data_offset: data_start as u64,
    })
}

/// An npy data set from the (gunzipped) contents of an inputs file and a
/// labels file.
pub(crate) fn parse_pair(
    inputs_path: &Path,
    inputs: &[u8],
    labels_path: &Path,
    labels: &[u8],
    name: &str,
) -> Result<Dataset, DataError> {
    let x = parse(inputs_path, inputs, 2, INPUT_TYPES)?;
    if matches!(x.dtype, Dtype::Int { bytes, signed } if bytes > 1 || signed) {
        return Err(DataError::Malformed {
            path: inputs_path.to_path_buf(),
            at: Position::Offset(8),
            problem: FileProblem::UnsupportedDtype {
                found: shown(&x.descr),
                supported: INPUT_TYPES,
            },
        });
    }
    let y = parse(labels_path, labels, 1, LABEL_TYPES)?;
    let (samples, features) = (x.shape[0], x.shape[1]);
    if samples != y.shape[0] {
        return Err(DataError::SampleCountMismatch {
            inputs: Some(inputs_path.to_path_buf()),
            input_samples: samples,
            label_samples: y.shape[0],
        });
    }
    if samples == 0 {
        return Err(DataError::Malformed {
            path: inputs_path.to_path_buf(),
            at: Position::Offset(x.data_offset),
            problem: FileProblem::NoSamples,
        });
    }
    if features == 0 {
        return Err(DataError::Zero { what: "features" });
    }
    let size = x.dtype.size();
    let mut values = Vec::with_capacity(samples * features);
    for (i, e) in x.data.chunks_exact(size).enumerate() {
        let v = match x.dtype {
            Dtype::F32 => f32::from_le_bytes([e[0], e[1], e[2], e[3]]),
            Dtype::F64 => {
                f64::from_le_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]]) as f32
            }
            // Checked above: u1.
            Dtype::Int { .. } => f32::from(e[0]),
        };
        if !v.is_finite() {
            return Err(DataError::Malformed {
                path: inputs_path.to_path_buf(),
                at: Position::Offset(x.data_offset + (i * size) as u64),
                problem: FileProblem::NonFinite,
            });
        }
        values.push(v);
    }
    let Dtype::Int { bytes, signed } = y.dtype else {
        return Err(DataError::Malformed {
            path: labels_path.to_path_buf(),
            at: Position::Offset(8),
            problem: FileProblem::UnsupportedDtype {
                found: shown(&y.descr),
                supported: LABEL_TYPES,
            },
        });
    };
    let mut classes = 1;
    let mut labels = Vec::with_capacity(samples);
    for (i, e) in y.data.chunks_exact(bytes).enumerate() {
        let mut raw = [0u8; 8];
        raw[..bytes].copy_from_slice(e);
        let negative = signed && e[bytes - 1] & 0x80 != 0;
        if negative {
            raw[bytes..].fill(0xff);
        }
        let value = i64::from_le_bytes(raw);
        let label = (!negative)
            .then_some(value as u64)
            .filter(|&v| v < MAX_CLASSES as u64);
        let Some(label) = label else {
            let found = if signed {
                value.to_string()
            } else {
                (value as u64).to_string()
            };
            return Err(DataError::Malformed {
                path: labels_path.to_path_buf(),
                at: Position::Offset(y.data_offset + (i * bytes) as u64),
                problem: FileProblem::LabelOutOfRange {
                    found,
                    limit: MAX_CLASSES as u64,
                },
            });
        };
        classes = classes.max(label as usize + 1);
        labels.push(label as u32);
    }
    Dataset::new(name, features, classes, values, labels)
}
