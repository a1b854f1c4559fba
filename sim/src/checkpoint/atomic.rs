//! Atomic file replacement, and the removal of the temporary files that
//! writers killed mid-write leave behind.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use super::CheckpointError;

/// Replaces the file at `path` with `bytes` so that a crash at any point
/// leaves either the old file or the complete new one, never a torn file.
///
/// Writes a temporary file `.NAME.PID.N.tmp` in the same directory (a
/// rename is only atomic within a file system), flushes it to disk,
/// renames it over `path`, then flushes the directory so that the rename
/// itself is durable. On failure the temporary file is removed and `path`
/// is untouched. A writer killed before it could clean up leaves its
/// temporary file behind; each write first removes those of `path` whose
/// writer's process is gone (on Linux, where `/proc` tells; a process of
/// another machine or PID namespace sharing the directory counts as gone).
///
/// # Errors
///
/// [`CheckpointError::Io`], naming the path that failed.
///
/// ```
/// use tessera_sim::checkpoint::write_atomic;
///
/// let path = std::env::temp_dir().join(format!("tessera-write-atomic-{}.txt", std::process::id()));
/// write_atomic(&path, b"old")?;
/// write_atomic(&path, b"new")?; // replaces it whole
/// assert_eq!(std::fs::read(&path).unwrap(), b"new");
/// std::fs::remove_file(&path).unwrap();
/// assert!(write_atomic(std::path::Path::new("/"), b"x").is_err()); // no file name
/// # Ok::<(), tessera_sim::checkpoint::CheckpointError>(())
/// ```
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), CheckpointError> {
    static NEXT_TEMPORARY: AtomicU64 = AtomicU64::new(0);

    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| CheckpointError::Io { path, source }
    };
    let file_name = path.file_name().ok_or_else(|| {
        io(path)(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the path does not name a file",
        ))
    })?;
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    remove_stale_temporaries(directory, file_name);
    // Unique per process and call, so concurrent saves never share one.
    let mut temporary_name = OsString::from(".");
    temporary_name.push(file_name);
    temporary_name.push(format!(
        ".{}.{}.tmp",
        std::process::id(),
        NEXT_TEMPORARY.fetch_add(1, Ordering::Relaxed)
    ));
    let temporary = directory.join(temporary_name);

    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&temporary)?;
        file.write_all(bytes)?;
        file.sync_all()
    })();
    if let Err(source) = written {
        // Best effort: the write already failed, and that is what to report.
        let _ = fs::remove_file(&temporary);
        return Err(io(&temporary)(source));
    }
    if let Err(source) = fs::rename(&temporary, path) {
        let _ = fs::remove_file(&temporary);
        return Err(io(path)(source));
    }
    sync_directory(directory).map_err(io(directory))
}

/// Removes the temporary files `.{file_name}.PID.N.tmp` in `directory`
/// whose writer (process `PID`) is gone; never one of a live process. Best
/// effort: what cannot be listed or removed stays.
fn remove_stale_temporaries(directory: &Path, file_name: &OsStr) {
    let Some(file_name) = file_name.to_str() else {
        return;
    };
    let Ok(entries) = fs::read_dir(directory) else {
        return;
    };
    let prefix = format!(".{file_name}.");
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(writer) = name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix)?.strip_suffix(".tmp"))
            .and_then(|rest| {
                let (pid, n) = rest.split_once('.')?;
                n.parse::<u64>().ok()?;
                pid.parse::<u32>().ok()
            })
        else {
            continue;
        };
        if entry.file_type().is_ok_and(|t| t.is_file()) && process_is_gone(writer) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Whether no process `pid` exists: on Linux, no `/proc/PID` while
/// `/proc` is mounted.
#[cfg(target_os = "linux")]
fn process_is_gone(pid: u32) -> bool {
    let proc = Path::new("/proc");
    proc.join("self").exists() && !proc.join(pid.to_string()).exists()
}

/// Elsewhere a process cannot be looked up without `unsafe`: every
/// temporary file stays.
#[cfg(not(target_os = "linux"))]
fn process_is_gone(_pid: u32) -> bool {
    false
}

/// Makes a rename in `directory` durable.
#[cfg(unix)]
fn sync_directory(directory: &Path) -> io::Result<()> {
    File::open(directory)?.sync_all()
}

/// Directories cannot be opened for syncing here; NTFS journals renames.
#[cfg(not(unix))]
fn sync_directory(_directory: &Path) -> io::Result<()> {
    Ok(())
}
