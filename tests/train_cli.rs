//! Tests: `tessera train`'s run directory: a resumed run's files equal the
//! uninterrupted run's, a run never silently replaces another, a run
//! directory that cannot be created is refused, an interrupted run keeps
//! its work, a diverged
//! run stops with status 3, and an MPI launch of a binary without MPI is
//! refused.

use std::path::Path;

use crate::cli::{fingerprint, report, train};
use crate::command::{assert_usage_error, scratch, stderr, stdout};

/// metrics.jsonl without its wall-clock field.
fn records(run: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
            v.as_object_mut().unwrap().remove("wall_seconds");
            v
        })
        .collect()
}

fn read(path: impl AsRef<Path>) -> Vec<u8> {
    std::fs::read(path).unwrap()
}

#[test]
fn a_resumed_run_writes_the_files_of_the_uninterrupted_run() {
    let dir = scratch("resume-files");
    let args = |name: &'static str| ["--epochs", "3", "--name", name, "--json"];
    let straight = fingerprint(&train(&dir, &args("straight")));
    // Stopped after an epoch, then resumed in place (no --name: the
    // checkpoint's directory).
    let stopped = train(
        &dir,
        &[&args("run")[..], &["--stop-after-epochs", "1"]].concat(),
    );
    assert_eq!(report(&stopped)["steps_run"], 30);
    let checkpoint = dir.join("run").join("checkpoint.safetensors");
    let ckpt = checkpoint.to_str().unwrap();
    let resumed = train(&dir, &["--epochs", "3", "--json", "--resume", ckpt]);
    assert_eq!(report(&resumed)["steps_run"], 60);
    assert_eq!(fingerprint(&resumed), straight);
    let (s, r) = (dir.join("straight"), dir.join("run"));
    assert_eq!(records(&r).len(), 90 + 3);
    assert_eq!(records(&r), records(&s), "metrics.jsonl but wall_seconds");
    assert_eq!(read(r.join("loss.svg")), read(s.join("loss.svg")));
    assert!(!dir.join("default").exists(), "resumed in place");

    // A run that went on after its checkpoint (interrupted later): its
    // records past the checkpoint are dropped, then run again.
    std::fs::copy(s.join("metrics.jsonl"), r.join("metrics.jsonl")).unwrap();
    let stopped = train(
        &dir,
        &[
            &args("run")[..],
            &["--stop-after-epochs", "2", "--overwrite"],
        ]
        .concat(),
    );
    assert_eq!(report(&stopped)["steps_run"], 60);
    std::fs::copy(s.join("metrics.jsonl"), r.join("metrics.jsonl")).unwrap();
    let out = train(&dir, &["--epochs", "3", "--json", "--resume", ckpt]);
    assert_eq!(fingerprint(&out), straight);
    assert_eq!(records(&r), records(&s));

    // Resumed into another directory: the history comes along.
    let out = train(
        &dir,
        &[
            "--epochs", "3", "--json", "--resume", ckpt, "--name", "copy",
        ],
    );
    assert_eq!(fingerprint(&out), straight);
    assert_eq!(records(&dir.join("copy")), records(&s));

    // Without the history beside the checkpoint: refused, nothing written.
    std::fs::remove_file(r.join("metrics.jsonl")).unwrap();
    let out = train(&dir, &["--epochs", "3", "--resume", ckpt, "--name", "lost"]);
    assert_usage_error(&out, "no history", "metrics.jsonl");
    assert!(!dir.join("lost").join("config.toml").exists());
    // A history that stops short of the checkpoint: refused.
    let short: String = std::fs::read_to_string(s.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .take(40)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(r.join("metrics.jsonl"), short).unwrap();
    let out = train(&dir, &["--epochs", "3", "--resume", ckpt]);
    assert_usage_error(&out, "short history", "ends before step 39");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_run_never_silently_replaces_the_first() {
    let dir = scratch("overwrite");
    let first = train(&dir, &["--epochs", "2", "--name", "fa"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let fa = dir.join("fa");
    let before = read(fa.join("metrics.jsonl"));
    let again = train(&dir, &["--epochs", "1", "--name", "fa"]);
    assert_usage_error(&again, "a second --name fa", "--overwrite");
    assert!(
        stderr(&again).contains("already holds a run"),
        "{}",
        stderr(&again)
    );
    assert_eq!(
        read(fa.join("metrics.jsonl")),
        before,
        "the first run is intact"
    );
    // --overwrite replaces it, files and all.
    let out = train(
        &dir,
        &["--epochs", "1", "--name", "fa", "--overwrite", "--json"],
    );
    assert_eq!(report(&out)["steps_run"], 30);
    assert_eq!(records(&fa).len(), 31);
    // The default name moves on to a fresh directory and says so.
    for expected in ["default", "default-2", "default-3"] {
        let out = train(&dir, &["--epochs", "1"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            dir.join(expected).join("metrics.jsonl").is_file(),
            "{expected}"
        );
        if expected != "default" {
            assert!(stderr(&out).contains(expected), "{}", stderr(&out));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run directory that cannot be created is an error with or without
/// `--name` (an unnamed run once looked for a free `default-k` for ever),
/// and neither `train` nor `scale` takes it for an earlier run.
#[test]
fn an_uncreatable_run_directory_is_refused_with_status_2() {
    let dir = scratch("uncreatable");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let runs = file.to_str().unwrap();
    for args in [
        &["train", "--epochs", "1", "--runs-dir", runs][..],
        &["train", "--epochs", "1", "--runs-dir", runs, "--name", "x"],
        &[
            "scale",
            "--epochs",
            "1",
            "--replicas",
            "1",
            "--runs-dir",
            runs,
        ],
    ] {
        let out = crate::command::tessera(args);
        assert_usage_error(&out, &args.join(" "), "cannot create the run directory");
    }
    // A plain file where the default run would go is not an earlier run.
    let runs = dir.join("runs");
    std::fs::create_dir_all(&runs).unwrap();
    std::fs::write(runs.join("default"), b"x").unwrap();
    let out = train(&runs, &["--epochs", "1"]);
    assert_usage_error(
        &out,
        "a file named default",
        "cannot create the run directory",
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Ctrl-C stops a run at the end of its epoch with the checkpoint a run
/// stopped there by `--stop-after-epochs` writes, byte for byte (which
/// resumes bitwise: `a_resumed_run_writes_the_files_of_the_uninterrupted_run`),
/// prints its report and the command that continues it, and exits 130.
#[cfg(unix)]
#[test]
fn an_interrupted_run_stops_at_its_epochs_end_with_a_checkpoint() {
    use std::process::{Command, Stdio};
    let dir = scratch("interrupt");
    let runs = dir.to_str().unwrap();
    // Long enough (about 100 s) that the signal comes first.
    let job = |name: &'static str| {
        let mut args = vec![
            "train",
            "--runs-dir",
            runs,
            "--epochs",
            "10000",
            "--name",
            name,
        ];
        args.extend(crate::cli::SMALL);
        args.push("--json");
        args
    };
    let child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(job("cut"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // config.toml comes with the first record: the handlers are in place.
    let config = dir.join("cut").join("config.toml");
    let waited = std::time::Instant::now();
    while !config.is_file() {
        assert!(waited.elapsed().as_secs() < 60, "no record after 60 s");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.starts_with("tessera: interrupted: stopped after step "),
        "{err}"
    );
    assert!(
        err.contains("--resume") && err.contains("config.toml"),
        "{err}"
    );
    let report: serde_json::Value = serde_json::from_str(stdout(&out).trim()).unwrap();
    assert_eq!(report["interrupted"], true);
    let steps = report["steps_run"].as_u64().unwrap();
    let per_epoch = report["steps_per_epoch"].as_u64().unwrap();
    assert_eq!(steps % per_epoch, 0, "stopped at an epoch's end");
    let epochs = steps / per_epoch;
    assert!((1..10000).contains(&epochs), "{epochs} epochs");
    let epochs_arg = epochs.to_string();
    let stop = ["--stop-after-epochs", epochs_arg.as_str()];
    let stopped = crate::command::tessera(&[&job("stopped")[..], &stop[..]].concat());
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    assert_eq!(
        read(dir.join("cut").join("checkpoint.safetensors")),
        read(dir.join("stopped").join("checkpoint.safetensors")),
        "the checkpoint of a run stopped after {epochs} epochs"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_diverging_run_stops_with_status_3_and_keeps_its_records() {
    let dir = scratch("diverged");
    // LAMB's step is lr times the weights' norm: 1e30 blows them up, and
    // every later step overflows and is skipped.
    let out = train(&dir, &["--lr", "1e30", "--epochs", "3", "--name", "nan"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("tessera: error: the run diverged"), "{err}");
    assert!(err.contains("the 20 steps 1 to 20"), "{err}");
    assert!(err.contains("no checkpoint was written"), "{err}");
    let run = dir.join("nan");
    let steps = records(&run)
        .into_iter()
        .filter(|r| r["kind"] == "step")
        .count();
    assert_eq!(steps, 21, "every step run is recorded");
    assert!(run.join("loss.svg").is_file() && run.join("config.toml").is_file());
    assert!(!run.join("checkpoint.safetensors").exists());
    // A static loss scale that overflows every gradient skips every step
    // and keeps the weights finite: with a checkpoint every epoch and 35
    // bad steps to stop, the last checkpoint before the divergence is kept.
    // (A non-finite state is never checkpointed: resuming would refuse it.)
    let diverging = |extra: &[&str]| {
        let args = [
            "--loss-scaling",
            "static:1e38",
            "--epochs",
            "6",
            "--diverged-after",
            "35",
        ];
        train(&dir, &[&args[..], extra].concat())
    };
    let out = diverging(&["--name", "kept", "--checkpoint-every", "1"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("checkpoint after 30 steps"),
        "{}",
        stderr(&out)
    );
    // Resumed from it, the run counts the bad steps before its checkpoint
    // and stops where it did, with the same records.
    let kept = dir.join("kept");
    let diverged = records(&kept);
    let ckpt = kept.join("checkpoint.safetensors");
    let out = diverging(&["--resume", ckpt.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(stderr(&out).contains("steps 0 to 34"), "{}", stderr(&out));
    assert_eq!(records(&kept), diverged);
    // --diverged-after 0 never stops, but a run that ends with a loss or
    // weights that are not finite is no success: status 3, and its report
    // names no checkpoint, which it could not write.
    let out = train(
        &dir,
        &[
            "--lr",
            "1e30",
            "--epochs",
            "1",
            "--name",
            "on",
            "--diverged-after",
            "0",
        ],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("not finite"), "{err}");
    assert!(err.contains("no checkpoint was written"), "{err}");
    assert!(!dir.join("on/checkpoint.safetensors").exists());
    // Fewer steps than the patience (11 < 20): the same.
    let out = train(&dir, &["--lr", "1e30", "--epochs", "1", "--name", "short"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(not(feature = "mpi"))]
#[test]
fn an_mpi_launch_of_a_binary_without_mpi_is_refused() {
    use crate::cli::SMALL;
    use crate::command::tessera_with;

    let dir = scratch("mpirun");
    let d = dir.to_str().unwrap();
    for (size, rank) in [
        ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK"),
        ("PMI_SIZE", "PMI_RANK"),
    ] {
        for command in ["train", "scale"] {
            let out = tessera_with(
                &[(size, "4"), (rank, "1")],
                &[command, "--runs-dir", d, "--epochs", "1"],
            );
            assert_usage_error(&out, command, "--features mpi");
            assert!(
                stderr(&out).contains(&format!("{size}=4")),
                "{}",
                stderr(&out)
            );
        }
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
    // One process is no parallel launch.
    let mut args = vec!["train", "--runs-dir", d, "--epochs", "1"];
    args.extend(SMALL);
    let out = tessera_with(&[("OMPI_COMM_WORLD_SIZE", "1")], &args);
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}
