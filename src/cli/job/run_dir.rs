//! Where a job writes and how it reports: the run directory.

use std::io::{self, IsTerminal};
use std::path::{Path, PathBuf};

use clap::Args;

use crate::cli::Failure;

/// Where a job writes and how it reports: the flags `train` and `scale`
/// share that are not part of the job itself.
#[derive(Clone, Debug, Default, Args)]
pub(in crate::cli) struct OutputArgs {
    /// Read job options from this TOML file (the keys are the option
    /// names in snake_case: `device_iterations = 4`; at most 1 MiB);
    /// flags override it
    #[arg(long, value_name = "FILE.toml")]
    pub(in crate::cli) config: Option<PathBuf>,

    /// The run directory's name, under --runs-dir [default: train: default; scale: scale]
    #[arg(long)]
    pub(in crate::cli) name: Option<String>,

    /// Where run directories go [default: runs]
    #[arg(long, alias = "runs_dir", value_name = "DIR")]
    pub(in crate::cli) runs_dir: Option<PathBuf>,

    /// No progress bar (there is none either when stderr is not a terminal)
    #[arg(long, alias = "no_progress")]
    pub(in crate::cli) no_progress: bool,

    /// Print the final report as JSON on stdout instead of text
    #[arg(long)]
    pub(in crate::cli) json: bool,
}

impl OutputArgs {
    /// The directory of a new run, `RUNS_DIR/NAME`, created and claimed
    /// ([`RunDir`]). One holding an earlier run's files (any run's:
    /// [`RUN_FILES`]) is never silently reused: `overwrite` deletes them
    /// first; without `--name` the run moves on to `NAME-2`, `NAME-3`, ...
    /// (up to [`MAX_SUFFIX`]) and says why on stderr; with `--name` it is
    /// refused, the message ending with `hint`. So is one another run is
    /// writing. A directory that cannot be created or locked is an error
    /// whatever the name.
    pub(in crate::cli) fn new_run_dir(
        &self,
        default_name: &str,
        overwrite: bool,
        hint: &str,
    ) -> Result<RunDir, Failure> {
        let dir = self.run_dir_path(default_name)?;
        let named = self.name.is_some();
        let taken = match RunDir::try_claim(dir.clone())? {
            Some(run) if overwrite => return delete_run_files(run),
            Some(run) => {
                let found = existing(&run.path);
                if found.is_empty() {
                    return Ok(run);
                }
                if named {
                    return Err(self.holds_a_run(default_name, &dir, &found, hint));
                }
                "holds an earlier run"
            }
            None if named || overwrite => return Err(in_use(&dir)),
            None => "is in use by another run",
        };
        // The default name, taken: the first free `NAME-k`.
        for k in 2..=MAX_SUFFIX {
            let next = dir.with_file_name(format!("{default_name}-{k}"));
            if let Some(run) = RunDir::try_claim(next)?
                && existing(&run.path).is_empty()
            {
                eprintln!(
                    "tessera: {} {taken}; this one goes to {} (--name NAME to choose, \
                     --overwrite to replace {})",
                    dir.display(),
                    run.path.display(),
                    dir.display()
                );
                return Ok(run);
            }
        }
        Err(Failure::Usage(format!(
            "{} {taken}, and so do {default_name}-2 to {default_name}-{MAX_SUFFIX}: give --name",
            dir.display()
        )))
    }

    /// [`OutputArgs::new_run_dir`]'s refusal of a directory named by
    /// `--name` that holds a run, said before the job's data is loaded
    /// and without creating or claiming anything (the claim looks again,
    /// under its lock).
    pub(in crate::cli) fn check_new_run_dir(
        &self,
        default_name: &str,
        overwrite: bool,
        hint: &str,
    ) -> Result<(), Failure> {
        let dir = self.run_dir_path(default_name)?;
        let found = existing(&dir);
        if self.name.is_some() && !overwrite && !found.is_empty() {
            return Err(self.holds_a_run(default_name, &dir, &found, hint));
        }
        Ok(())
    }

    /// `dir`, named by `--name`, holds the run of the files `found`.
    fn holds_a_run(&self, default_name: &str, dir: &Path, found: &[String], hint: &str) -> Failure {
        Failure::Usage(format!(
            "--name {}: {} already holds a run ({}): give another --name, --overwrite to \
             replace it{hint}",
            self.name.as_deref().unwrap_or(default_name),
            dir.display(),
            found.join(", "),
        ))
    }

    /// The run directory's path, `RUNS_DIR/NAME`. A name that is empty or
    /// not one path component is refused.
    pub(in crate::cli) fn run_dir_path(&self, default_name: &str) -> Result<PathBuf, Failure> {
        let name = self.name.as_deref().unwrap_or(default_name);
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains(['/', '\\'])
            && Path::new(name).file_name().is_some();
        if !plain {
            return Err(Failure::Usage(format!(
                "--name `{name}` is not a plain directory name"
            )));
        }
        Ok(self
            .runs_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("runs"))
            .join(name))
    }

    /// Whether to draw a progress bar.
    pub(in crate::cli) fn progress(&self) -> bool {
        !self.no_progress && !self.json && io::stderr().is_terminal()
    }
}

/// Every file a run of `train` or of `scale` writes: a directory holding
/// one of them holds a run, whichever command asks.
pub(in crate::cli) const RUN_FILES: [&str; 9] = [
    "metrics.jsonl",
    "loss.svg",
    "scales.svg",
    "trace.json",
    "checkpoint.safetensors",
    "config.toml",
    "scale.jsonl",
    "scale.svg",
    "scaling.svg",
];

/// How far an unnamed run looks for a free `NAME-k`.
const MAX_SUFFIX: u32 = 9999;

/// The file whose lock claims a run directory ([`RunDir`]).
const LOCK_FILE: &str = ".lock";

/// Those of [`RUN_FILES`] that exist in `dir`.
fn existing(dir: &Path) -> Vec<String> {
    RUN_FILES
        .iter()
        .filter(|f| dir.join(f).exists())
        .map(|f| (*f).to_owned())
        .collect()
}

/// A run directory this process writes, claimed for as long as the value
/// lives: an exclusive lock on its `.lock` file, taken before its files
/// are looked at, so two runs started together cannot both find it free.
/// The system releases the lock when the process ends, however it ends: a
/// run killed with `kill -9` leaves a `.lock` that no one holds, and its
/// directory is claimed again (`--resume`, `--overwrite`) as if it were
/// not there. A run that ends removes it.
#[derive(Debug)]
pub(in crate::cli) struct RunDir {
    /// The directory.
    pub(in crate::cli) path: PathBuf,
    lock: PathBuf,
    /// Held open: closing it releases the lock.
    _file: std::fs::File,
}

impl RunDir {
    /// Creates `dir` (and its parents) and claims it.
    ///
    /// # Errors
    /// A usage error when it cannot be created, or another run holds it.
    pub(in crate::cli) fn claim(dir: PathBuf) -> Result<Self, Failure> {
        Self::try_claim(dir.clone())?.ok_or_else(|| in_use(&dir))
    }

    /// Creates `dir` (and its parents) and claims it: `None` if another
    /// run holds it.
    ///
    /// # Errors
    /// A usage error when it cannot be created or locked.
    fn try_claim(dir: PathBuf) -> Result<Option<Self>, Failure> {
        std::fs::create_dir_all(&dir).map_err(|e| {
            Failure::Usage(format!(
                "cannot create the run directory {}: {e}",
                dir.display()
            ))
        })?;
        let lock = dir.join(LOCK_FILE);
        let cannot = |e: &dyn std::fmt::Display| {
            Failure::Usage(format!(
                "cannot claim the run directory {}: {e}",
                dir.display()
            ))
        };
        loop {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock)
                .map_err(|e| cannot(&e))?;
            match file.try_lock() {
                Ok(()) => {}
                Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
                Err(std::fs::TryLockError::Error(e)) => return Err(cannot(&e)),
            }
            // The run that held it may have removed it between our open and
            // our lock: then the lock is on a file no one else will open.
            if same_file(&file, &lock) {
                return Ok(Some(Self {
                    path: dir,
                    lock,
                    _file: file,
                }));
            }
        }
    }
}

/// The refusal of `dir`, which another run holds.
fn in_use(dir: &Path) -> Failure {
    Failure::Usage(format!(
        "{} is in use: another run is writing to it (it holds {}); wait for it, or give \
         another --name",
        dir.display(),
        dir.join(LOCK_FILE).display()
    ))
}

/// `run` emptied of an earlier run's files (`--overwrite`).
fn delete_run_files(run: RunDir) -> Result<RunDir, Failure> {
    for name in RUN_FILES {
        let path = run.path.join(name);
        if let Err(e) = std::fs::remove_file(&path)
            && e.kind() != io::ErrorKind::NotFound
        {
            return Err(Failure::Job(format!(
                "--overwrite: cannot delete {}: {e}",
                path.display()
            )));
        }
    }
    Ok(run)
}

/// Whether `file` is the file at `path` now.
#[cfg(unix)]
fn same_file(file: &std::fs::File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Whether `file` is the file at `path` now (no inode to compare: the
/// lock file is then never removed while held, so it is).
#[cfg(not(unix))]
fn same_file(_: &std::fs::File, _: &Path) -> bool {
    true
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if cfg!(not(unix)) {
            return;
        }
        // Still locked: a run that opens it now finds it held; one that
        // opens it after this makes a new one.
        let _ = std::fs::remove_file(&self.lock);
    }
}
