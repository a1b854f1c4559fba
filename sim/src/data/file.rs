//! Reading a whole data file, gunzipping it when it is gzip, never more
//! than [`MAX_SOURCE_BYTES`] of it.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::{DataError, FileProblem, MAX_SOURCE_BYTES, Position};

/// The first two bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The bytes of `path`, decompressed when they start with the gzip magic
/// (whatever the file name says). At most [`MAX_SOURCE_BYTES`] are read
/// from the file and at most as many decompressed, so an endless file
/// (`/dev/zero`) or a gzip bomb is refused after that many bytes.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, DataError> {
    let io = |e: std::io::Error| DataError::Io {
        path: path.to_path_buf(),
        kind: e.kind(),
    };
    let too_large = || DataError::FileTooLarge {
        path: path.to_path_buf(),
        limit: MAX_SOURCE_BYTES,
    };
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|f| f.take(MAX_SOURCE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(io)?;
    if bytes.len() as u64 > MAX_SOURCE_BYTES {
        return Err(too_large());
    }
    let out = gunzip_if_gzip(&bytes).map_err(|kind| DataError::Malformed {
        path: path.to_path_buf(),
        at: Position::Offset(0),
        problem: FileProblem::Gzip(kind),
    })?;
    if out.len() as u64 > MAX_SOURCE_BYTES {
        return Err(too_large());
    }
    Ok(out)
}

/// `bytes` decompressed if they are gzip (at most [`MAX_SOURCE_BYTES`] + 1
/// of them, so the caller sees a bomb as too large), else as they are.
pub(crate) fn gunzip_if_gzip(bytes: &[u8]) -> Result<Vec<u8>, std::io::ErrorKind> {
    if !bytes.starts_with(&GZIP_MAGIC) {
        return Ok(bytes.to_vec());
    }
    let mut out = Vec::new();
    MultiGzDecoder::new(bytes)
        .take(MAX_SOURCE_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| e.kind())?;
    Ok(out)
}

/// A field as shown in an error: at most 40 characters.
pub(crate) fn shown(field: &str) -> String {
    field.chars().take(40).collect()
}
