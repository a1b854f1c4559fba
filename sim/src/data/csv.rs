//! CSV data sets: one sample per line, the features then the label.
//!
//! Fields are separated by commas (no quoting) and may be padded with
//! spaces; blank lines are skipped; `\r\n` line ends and a leading UTF-8
//! byte-order mark (Excel's "CSV UTF-8") are accepted. The first line is a
//! header, and skipped, if none of its fields is a number; it must then
//! have as many fields as the data rows. A first line with both numbers
//! and other fields is refused (a data row with a typo would otherwise be
//! dropped as a header). Feature values are parsed
//! as `f32` (round to nearest) and must be finite; the label must be a
//! whole number (`3` or `3.0`) below [`MAX_CLASSES`]. The class count is
//! the largest label plus one.

use std::path::Path;

use super::file::shown;
use super::{DataError, Dataset, FileProblem, MAX_CLASSES, Position};

/// Parses CSV `text` (the contents of `path`, which only names errors)
/// into a data set named `name`.
pub(crate) fn parse(path: &Path, name: &str, bytes: &[u8]) -> Result<Dataset, DataError> {
    let malformed = |at: Position, problem: FileProblem| DataError::Malformed {
        path: path.to_path_buf(),
        at,
        problem,
    };
    let text = std::str::from_utf8(bytes).map_err(|e| {
        malformed(
            Position::Offset(e.valid_up_to() as u64),
            FileProblem::NotUtf8,
        )
    })?;
    // Excel's "CSV UTF-8" starts with a byte-order mark: it would make the
    // first field of a data row a non-number, and the row a header.
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut header: Option<(usize, usize)> = None; // (line, fields)
    let mut width = 0; // fields per data row, 0 until the first row
    let mut inputs = Vec::new();
    let mut labels = Vec::new();
    let mut fields: Vec<&str> = Vec::new();
    let mut first_line = true;
    for (n, line) in text.split('\n').enumerate() {
        let line_no = n + 1;
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.trim().is_empty() {
            continue;
        }
        fields.clear();
        fields.extend(line.split(',').map(str::trim));
        let at = |column: usize| Position::Line {
            line: line_no,
            column,
        };
        if std::mem::take(&mut first_line)
            && is_header(&fields).map_err(|(c, p)| malformed(at(c), p))?
        {
            header = Some((line_no, fields.len()));
            continue;
        }
        if width == 0 {
            if fields.len() < 2 {
                return Err(malformed(
                    at(0),
                    FileProblem::TooFewColumns {
                        found: fields.len(),
                    },
                ));
            }
            if let Some((header_line, header_fields)) = header
                && header_fields != fields.len()
            {
                return Err(malformed(
                    Position::Line {
                        line: header_line,
                        column: 0,
                    },
                    FileProblem::BadHeader {
                        header: header_fields,
                        data: fields.len(),
                    },
                ));
            }
            width = fields.len();
        } else if fields.len() != width {
            return Err(malformed(
                at(0),
                FileProblem::RaggedRow {
                    expected: width,
                    found: fields.len(),
                },
            ));
        }
        let (label, features) = fields.split_last().unwrap_or((&"", &[]));
        for (c, field) in features.iter().enumerate() {
            let x: f32 = field.parse().map_err(|_| {
                malformed(
                    at(c + 1),
                    FileProblem::NotANumber {
                        found: shown(field),
                    },
                )
            })?;
            if !x.is_finite() {
                return Err(malformed(at(c + 1), FileProblem::NonFinite));
            }
            inputs.push(x);
        }
        labels.push(parse_label(label).map_err(|p| malformed(at(width), p))?);
    }
    if labels.is_empty() {
        return Err(malformed(
            Position::Line { line: 1, column: 0 },
            FileProblem::NoSamples,
        ));
    }
    let classes = labels.iter().max().map_or(1, |&m| m as usize + 1);
    Dataset::new(name, width - 1, classes, inputs, labels)
}

/// Whether the first line's `fields` are a header (no field a number) or
/// a data row (every field one); `Err((column, problem))` for a mix.
fn is_header(fields: &[&str]) -> Result<bool, (usize, FileProblem)> {
    let is_number = |f: &&str| f.parse::<f64>().is_ok();
    match fields.iter().position(|f| !is_number(f)) {
        None => Ok(false),
        Some(_) if !fields.iter().any(is_number) => Ok(true),
        Some(c) => Err((
            c + 1,
            FileProblem::MixedFirstLine {
                found: shown(fields[c]),
            },
        )),
    }
}

/// A label field: a whole number (integer or float notation) in
/// `0..MAX_CLASSES`.
fn parse_label(field: &str) -> Result<u32, FileProblem> {
    let out_of_range = || FileProblem::LabelOutOfRange {
        found: shown(field),
        limit: MAX_CLASSES as u64,
    };
    if let Ok(l) = field.parse::<i64>() {
        return u32::try_from(l)
            .ok()
            .filter(|&l| (l as usize) < MAX_CLASSES)
            .ok_or_else(out_of_range);
    }
    match field.parse::<f64>() {
        Ok(x) if x.is_finite() && x.fract() == 0.0 => {
            if (0.0..MAX_CLASSES as f64).contains(&x) {
                Ok(x as u32)
            } else {
                Err(out_of_range())
            }
        }
        Ok(_) => Err(FileProblem::NotALabel {
            found: shown(field),
        }),
        Err(_) => Err(FileProblem::NotANumber {
            found: shown(field),
        }),
    }
}
