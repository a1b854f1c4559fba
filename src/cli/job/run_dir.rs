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
    /// The directory of a new run that writes `files` (names): `RUNS_DIR/NAME`,
    /// created. One holding an earlier run's files is never silently
    /// reused: `overwrite` deletes them first; without `--name` the run
    /// moves on to `NAME-2`, `NAME-3`, ... and says so on stderr; with
    /// `--name` it is refused, the message ending with `hint`.
    pub(in crate::cli) fn new_run_dir(
        &self,
        default_name: &str,
        files: &[&str],
        overwrite: bool,
        hint: &str,
    ) -> Result<PathBuf, Failure> {
        let dir = self.run_dir_path(default_name)?;
        let found = existing(&dir, files);
        if found.is_empty() {
            return create_dir(dir);
        }
        if overwrite {
            for name in files {
                let path = dir.join(name);
                if let Err(e) = std::fs::remove_file(&path)
                    && e.kind() != io::ErrorKind::NotFound
                {
                    return Err(Failure::Job(format!(
                        "--overwrite: cannot delete {}: {e}",
                        path.display()
                    )));
                }
            }
            return Ok(dir);
        }
        if self.name.is_none() {
            let next = (2u32..)
                .map(|k| dir.with_file_name(format!("{default_name}-{k}")))
                .find(|d| existing(d, files).is_empty())
                .expect("a free name");
            eprintln!(
                "tessera: {} holds an earlier run; this one goes to {} (--name NAME to \
                 choose, --overwrite to replace {})",
                dir.display(),
                next.display(),
                dir.display()
            );
            return create_dir(next);
        }
        Err(Failure::Usage(format!(
            "--name {}: {} already holds a run ({}): give another --name, --overwrite to \
             replace it{hint}",
            self.name.as_deref().unwrap_or(default_name),
            dir.display(),
            found.join(", "),
        )))
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

/// Those of `files` (names) that exist in `dir`.
fn existing(dir: &Path, files: &[&str]) -> Vec<String> {
    files
        .iter()
        .filter(|f| dir.join(f).exists())
        .map(|f| (*f).to_owned())
        .collect()
}

/// Creates the run directory `dir` (and its parents).
pub(in crate::cli) fn create_dir(dir: PathBuf) -> Result<PathBuf, Failure> {
    std::fs::create_dir_all(&dir).map_err(|e| {
        Failure::Usage(format!(
            "cannot create the run directory {}: {e}",
            dir.display()
        ))
    })?;
    Ok(dir)
}
