//! Reading a whole data file, gunzipping it when it is gzip.

use std::io::Read;
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::{DataError, FileProblem, Position};

/// The first two bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The bytes of `path`, decompressed when they start with the gzip magic
/// (whatever the file name says).
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, DataError> {
    let bytes = std::fs::read(path).map_err(|e| DataError::Io {
        path: path.to_path_buf(),
        kind: e.kind(),
    })?;
    gunzip_if_gzip(&bytes).map_err(|kind| DataError::Malformed {
        path: path.to_path_buf(),
        at: Position::Offset(0),
        problem: FileProblem::Gzip(kind),
    })
}

/// `bytes` decompressed if they are gzip, else as they are.
pub(crate) fn gunzip_if_gzip(bytes: &[u8]) -> Result<Vec<u8>, std::io::ErrorKind> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(bytes.to_vec());
    }
    let mut out = Vec::new();
    MultiGzDecoder::new(bytes)
        .read_to_end(&mut out)
        .map_err(|e| e.kind())?;
    Ok(out)
}

/// A field as shown in an error: at most 40 characters.
pub(crate) fn shown(field: &str) -> String {
    field.chars().take(40).collect()
}
