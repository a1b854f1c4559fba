//! What every subcommand writes: stdout, files written atomically, and
//! the text helpers of its reports.

use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;
use tessera_sim::checkpoint::write_atomic;

use super::Failure;

/// Writes `text` to stdout; a closed stdout is [`Failure::Closed`].
pub(super) fn print(text: &str) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| {
            if e.kind() == io::ErrorKind::BrokenPipe {
                Failure::Closed
            } else {
                Failure::Job(format!("cannot write to stdout: {e}"))
            }
        })
}

/// Writes `bytes` to `path` atomically.
pub(super) fn write_file(path: &Path, bytes: &[u8]) -> Result<(), Failure> {
    write_atomic(path, bytes).map_err(|e| Failure::Job(write_failed(path, &e)))
}

/// `cannot write PATH: WHY` for a failed [`write_atomic`] of `path`: the
/// file the user named and what the system said (the error's own text
/// names the temporary file and the checkpoint module it comes from).
pub(crate) fn write_failed(path: &Path, e: &(dyn std::error::Error + 'static)) -> String {
    let why = e
        .source()
        .map_or_else(|| e.to_string(), ToString::to_string);
    one_line(&format!("cannot write {}: {why}", path.display()))
}

/// Checks, before any work, that `flag`'s output file `path` can be
/// created: its directory exists and is writable, and the path is not a
/// directory.
///
/// # Errors
/// A usage error naming the flag, the path and what is wrong.
pub(super) fn output_file(flag: &str, path: &Path) -> Result<(), Failure> {
    let bad = |why: String| Err(Failure::Usage(format!("{flag} {}: {why}", path.display())));
    if path.is_dir() || path.file_name().is_none() {
        return bad("is a directory; give a file name".into());
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => writable(dir).or_else(|e| {
            bad(format!(
                "its directory {} is not writable: {e}",
                dir.display()
            ))
        }),
        Ok(_) => bad(format!("{} is not a directory", dir.display())),
        Err(e) => bad(format!(
            "its directory {} cannot be used: {e}",
            dir.display()
        )),
    }
}

/// Whether a file can be created in `dir` (as the atomic write will):
/// creates and removes a probe file named after this process.
fn writable(dir: &Path) -> std::io::Result<()> {
    let probe = dir.join(format!(".tessera-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)?;
    std::fs::remove_file(&probe)
}

/// A JSON line of `record` with `"kind": kind` first.
pub(super) fn tagged<T: Serialize>(kind: &str, record: &T) -> String {
    #[derive(Serialize)]
    struct Tagged<'a, T> {
        kind: &'a str,
        #[serde(flatten)]
        record: &'a T,
    }
    serde_json::to_string(&Tagged { kind, record }).expect("records serialize")
}

/// `n thing` or `n things`.
pub(super) fn plural(n: u64, thing: &str) -> String {
    if n == 1 {
        format!("{n} {thing}")
    } else {
        format!("{n} {thing}s")
    }
}

/// `text` on one line: its lines trimmed and joined.
pub(super) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}
