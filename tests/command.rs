//! Helpers for the tests that run the built `tessera` binary as a user
//! would.

use std::path::PathBuf;
use std::process::{Command, Output};

/// Runs `tessera args`.
pub(crate) fn tessera(args: &[&str]) -> Output {
    tessera_with(&[], args)
}

/// Runs `tessera args` with the environment variables `vars` set.
pub(crate) fn tessera_with(vars: &[(&str, &str)], args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .envs(vars.iter().copied())
        .args(args)
        .output()
        .expect("the tessera binary runs")
}

pub(crate) fn stdout(out: &Output) -> &str {
    std::str::from_utf8(&out.stdout).expect("stdout is UTF-8")
}

pub(crate) fn stderr(out: &Output) -> &str {
    std::str::from_utf8(&out.stderr).expect("stderr is UTF-8")
}

/// A fresh scratch directory for one test.
pub(crate) fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-cmd-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a scratch directory");
    dir
}

/// Asserts that `out` is the user's error `what`: status 2, one line on
/// stderr starting `tessera: ` and mentioning `needle`, no panic, nothing
/// on stdout.
pub(crate) fn assert_usage_error(out: &Output, what: &str, needle: &str) {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(2), "{what}: {err}");
    assert!(
        err.contains(needle),
        "{what}: should mention {needle:?}: {err}"
    );
    assert!(err.starts_with("tessera: "), "{what}: {err}");
    assert!(err.contains("error"), "{what}: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{what}: one line: {err}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    assert!(out.stdout.is_empty(), "{what}: nothing on stdout");
}
