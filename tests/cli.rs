//! Tests: cli. The built `tessera` binary, run as a user would.
//!
//! These never assert on speed: only on the shape of the output and on exit
//! statuses.

use std::process::Output;

use crate::command::{assert_usage_error, scratch, stderr, stdout, tessera};

#[test]
fn bad_input_exits_with_status_2_and_says_why() {
    let cases: [(&[&str], &str); 6] = [
        (&["bench", "conversions", "--elements", "0"], "--elements"),
        (
            &["bench", "conversions", "--elements", "many"],
            "--elements",
        ),
        (&["bench", "conversions", "--elements", "1Gi"], "at most"),
        (&["bench", "no-such-suite"], "no-such-suite"),
        (&["bench"], "SUITE"),
        (&["no-such-command"], "no-such-command"),
    ];
    for (args, needle) in cases {
        let out = tessera(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(needle),
            "{args:?}: stderr should mention {needle:?}: {}",
            stderr(&out)
        );
        assert!(
            !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
        assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn help_describes_the_commands() {
    let cases: [(&[&str], &[&str]); 4] = [
        (
            &["--help"],
            &["train", "scale", "plan", "bench", "default job"],
        ),
        (
            &["train", "--help"],
            &[
                "--device-iterations",
                "--replication-factor",
                "--gradient-accumulation",
                "--precision",
                "--loss-scaling",
                "--pipeline-stages",
                "--config",
                "--resume",
                "--json",
            ],
        ),
        (
            &["bench", "--help"],
            &[
                "conversions",
                "optimizers",
                "--quick",
                "--json",
                "--elements",
            ],
        ),
        (
            &["plan", "--help"],
            &["--model", "--ipus-per-replica", "--json"],
        ),
    ];
    for (args, needles) in cases {
        let out = tessera(args);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        for needle in needles {
            assert!(
                stdout(&out).contains(needle),
                "{args:?}: {needle} in {}",
                stdout(&out)
            );
        }
    }
}

/// A small, quick job: 480 training samples (and 120 test), global batch
/// 16 (2 instances x 2 replicas x micro-batch 4), 30 steps an epoch.
pub(crate) const SMALL: [&str; 13] = [
    "--data",
    "synthetic:600:8:3:1",
    "--hidden",
    "16",
    "--micro-batch",
    "4",
    "--instances",
    "2",
    "--replication-factor",
    "2",
    "--pod",
    "m2000",
    "--no-progress",
];

/// `tessera train` on the small job in `dir`, with `extra` arguments.
pub(crate) fn train(dir: &std::path::Path, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--runs-dir", dir.to_str().expect("UTF-8 path")];
    args.extend(SMALL);
    args.extend(extra);
    tessera(&args)
}

/// The JSON report of a successful `--json` run.
pub(crate) fn report(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "status {:?}, stderr: {}",
        out.status,
        stderr(out)
    );
    assert_eq!(stdout(out).lines().count(), 1, "{}", stdout(out));
    serde_json::from_str(stdout(out)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(out)))
}

pub(crate) fn fingerprint(out: &Output) -> String {
    report(out)["fingerprint"]
        .as_str()
        .expect("the fingerprint is a string")
        .to_owned()
}

#[test]
fn train_writes_every_file_and_a_metrics_line_per_record() {
    let dir = scratch("train-files");
    let out = train(&dir, &["--epochs", "2", "--name", "run"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "accuracy",
        "samples/s simulated",
        "compute",
        "all-reduce",
        "memory",
        "skipped steps",
        "fingerprint",
        "metrics.jsonl",
    ] {
        assert!(text.contains(needle), "{needle} in:\n{text}");
    }
    let run = dir.join("run");
    let mut names: Vec<String> = std::fs::read_dir(&run)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "checkpoint.safetensors",
            "config.toml",
            "loss.svg",
            "metrics.jsonl",
            "trace.json"
        ]
    );
    let metrics = std::fs::read_to_string(run.join("metrics.jsonl")).unwrap();
    let (mut steps, mut epochs) = (0, 0);
    for line in metrics.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        match v["kind"].as_str() {
            Some("step") => {
                assert_eq!(v["step"], steps, "{line}");
                assert!(v["loss"].as_f64().is_some_and(f64::is_finite), "{line}");
                steps += 1;
            }
            Some("epoch") => {
                assert_eq!(v["epoch"], epochs, "{line}");
                assert!(v["test_accuracy"].as_f64().is_some(), "{line}");
                epochs += 1;
            }
            _ => panic!("no kind in {line}"),
        }
    }
    assert_eq!((steps, epochs), (60, 2), "2 epochs of 30 steps");
    let svg = std::fs::read_to_string(run.join("loss.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("test loss"));
    let trace: serde_json::Value =
        serde_json::from_slice(&std::fs::read(run.join("trace.json")).unwrap()).unwrap();
    assert!(trace.is_object() || trace.is_array());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn train_config_toml_reads_back_to_the_same_run() {
    let dir = scratch("train-config");
    let first = fingerprint(&train(&dir, &["--epochs", "1", "--name", "a", "--json"]));
    let config = dir.join("a").join("config.toml");
    let config = config.to_str().unwrap();
    // Only the file: every option comes from it.
    let out = tessera(&[
        "train",
        "--config",
        config,
        "--runs-dir",
        dir.to_str().unwrap(),
        "--name",
        "b",
        "--json",
        "--no-progress",
    ]);
    assert_eq!(fingerprint(&out), first);
    // A flag overrides the file.
    let out = tessera(&[
        "train",
        "--config",
        config,
        "--seed",
        "7",
        "--runs-dir",
        dir.to_str().unwrap(),
        "--name",
        "c",
        "--json",
        "--no-progress",
    ]);
    let seven = report(&out);
    assert_ne!(seven["fingerprint"].as_str(), Some(first.as_str()));
    assert_eq!(seven["config"]["seed"], 7);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn train_resumed_after_an_epoch_finishes_bitwise_as_the_straight_run() {
    let dir = scratch("train-resume");
    let straight = fingerprint(&train(
        &dir,
        &["--epochs", "2", "--name", "straight", "--json"],
    ));
    let stopped = train(
        &dir,
        &[
            "--epochs",
            "2",
            "--stop-after-epochs",
            "1",
            "--name",
            "run",
            "--json",
        ],
    );
    assert_eq!(report(&stopped)["steps_run"], 30);
    let checkpoint = dir.join("run").join("checkpoint.safetensors");
    let resumed = train(
        &dir,
        &[
            "--epochs",
            "2",
            "--resume",
            checkpoint.to_str().unwrap(),
            "--name",
            "run",
            "--json",
        ],
    );
    assert_eq!(report(&resumed)["steps_run"], 30);
    assert_eq!(fingerprint(&resumed), straight);
    // The run directory's metrics hold both halves.
    let metrics = std::fs::read_to_string(dir.join("run").join("metrics.jsonl")).unwrap();
    let steps: Vec<u64> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "step")
        .map(|v| v["step"].as_u64().unwrap())
        .collect();
    assert_eq!(steps, (0..60).collect::<Vec<u64>>());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn train_bad_input_exits_with_status_2_and_one_line() {
    let dir = scratch("train-bad");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    std::fs::write(path("unknown.toml"), "epochs = 1\nbogus_key = 3\n").unwrap();
    std::fs::write(path("broken.toml"), "epochs = [1,\n").unwrap();
    std::fs::write(path("malformed.csv"), "a,b\n1,2,3\n0.5,x\n").unwrap();
    std::fs::write(path("garbage.safetensors"), [0x5a_u8; 300]).unwrap();
    // A checkpoint of another model (hidden widths 8, not 16: the last
    // --hidden wins).
    let other = train(&dir, &["--epochs", "1", "--hidden", "8", "--name", "other"]);
    assert!(other.status.success(), "stderr: {}", stderr(&other));
    let other = path("other/checkpoint.safetensors");
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--no-such-flag".into()], "--no-such-flag"),
        (vec!["--config".into(), path("unknown.toml")], "bogus_key"),
        (vec!["--config".into(), path("broken.toml")], "broken.toml"),
        (vec!["--config".into(), path("absent.toml")], "absent.toml"),
        (
            vec!["--ipus-per-replica".into(), "3".into()],
            "power of two",
        ),
        (
            vec!["--replication-factor".into(), "8".into()],
            "the Pod has 16",
        ),
        (
            vec![
                "--pod".into(),
                "pod128".into(),
                "--instances".into(),
                "1".into(),
                "--replication-factor".into(),
                "80".into(),
            ],
            "80 IPUs",
        ),
        (vec!["--micro-batch".into(), "100".into()], "global batch"),
        (
            vec!["--data".into(), "csv:".to_owned() + &path("absent.csv")],
            "absent.csv",
        ),
        (
            vec!["--data".into(), "csv:".to_owned() + &path("malformed.csv")],
            "malformed.csv",
        ),
        (vec!["--data".into(), "nonsense".into()], "nonsense"),
        (vec!["--precision".into(), "8.8".into()], "8.8"),
        (vec!["--loss-scaling".into(), "static:0".into()], "static"),
        (
            vec!["--test-fraction".into(), "0.0001".into()],
            "no test sample",
        ),
        (
            vec!["--resume".into(), path("garbage.safetensors")],
            "garbage.safetensors",
        ),
        (
            vec!["--resume".into(), path("absent.safetensors")],
            "absent.safetensors",
        ),
        (vec!["--resume".into(), other], "another run"),
        (vec!["--name".into(), "../escape".into()], "--name"),
    ];
    for (extra, needle) in cases {
        // The default distribution: 4 instances x 4 replicas on a POD16.
        let mut args: Vec<&str> = vec![
            "train",
            "--runs-dir",
            dir.to_str().unwrap(),
            "--hidden",
            "16",
            "--epochs",
            "1",
            "--name",
            "bad",
            "--no-progress",
        ];
        if !extra.contains(&"--data".to_owned()) {
            args.extend(["--data", "synthetic:600:8:3:1"]);
        }
        args.extend(extra.iter().map(String::as_str));
        let out = tessera(&args);
        assert_usage_error(&out, &format!("{extra:?}"), needle);
        assert!(stderr(&out).starts_with("tessera: error: "));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn scale_reports_bitwise_identical_curves_for_every_replica_count() {
    let dir = scratch("scale");
    let out = tessera(&[
        "scale",
        "--replicas",
        "1,2,4",
        "--epochs",
        "1",
        "--data",
        "synthetic:600:8:3:1",
        "--hidden",
        "16",
        "--micro-batch",
        "4",
        "--runs-dir",
        dir.to_str().unwrap(),
        "--no-progress",
        "--json",
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let rows: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert_eq!(rows.len(), 3, "{}", stdout(&out));
    // Global batch 4 x 4 = 16: accumulation makes up the rest.
    for (row, (replicas, accumulation)) in rows.iter().zip([(1, 4), (2, 2), (4, 1)]) {
        assert_eq!(row["replicas"], replicas, "{row}");
        assert_eq!(row["gradient_accumulation"], accumulation, "{row}");
        assert_eq!(row["identical"], true, "{row}");
        assert_eq!(row["fingerprint"], rows[0]["fingerprint"], "{row}");
        let efficiency = row["scaling_efficiency"].as_f64().unwrap();
        assert!(efficiency > 0.0, "{row}");
    }
    let run = dir.join("scale");
    for file in ["scale.jsonl", "scale.svg", "scaling.svg"] {
        assert!(run.join(file).is_file(), "{file}");
    }
    // The table: one line per replica count, all identical.
    let out = tessera(&[
        "scale",
        "--replicas",
        "1,2",
        "--epochs",
        "1",
        "--data",
        "synthetic:600:8:3:1",
        "--hidden",
        "16",
        "--runs-dir",
        dir.to_str().unwrap(),
        "--no-progress",
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_eq!(
        stdout(&out)
            .lines()
            .filter(|l| l.ends_with("identical"))
            .count(),
        1,
        "{}",
        stdout(&out)
    );
    // The first run's files are kept: the second went to scale-2 and said so.
    assert!(stderr(&out).contains("scale-2"), "{}", stderr(&out));
    let first = std::fs::read(run.join("scale.jsonl")).unwrap();
    assert_eq!(first.iter().filter(|&&b| b == b'\n').count(), 3);
    assert!(dir.join("scale-2").join("scale.jsonl").is_file());
    // Named over a run: refused (exit 2, one line), nothing written;
    // --overwrite replaces it.
    let again = |extra: &[&str]| {
        let mut args = vec![
            "scale",
            "--replicas",
            "1",
            "--epochs",
            "1",
            "--data",
            "synthetic:600:8:3:1",
            "--hidden",
            "16",
            "--runs-dir",
            dir.to_str().unwrap(),
            "--no-progress",
            "--name",
            "scale",
        ];
        args.extend(extra);
        tessera(&args)
    };
    let out = again(&[]);
    assert_usage_error(&out, "scale --name over a run", "--overwrite");
    assert_eq!(std::fs::read(run.join("scale.jsonl")).unwrap(), first);
    let out = again(&["--overwrite"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert_ne!(std::fs::read(run.join("scale.jsonl")).unwrap(), first);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn train_pipelines_the_digits_mlp_bitwise_as_data_parallel() {
    let dir = scratch("pipeline");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--runs-dir",
            dir.to_str().expect("UTF-8 path"),
            "--instances",
            "1",
            "--replication-factor",
            "2",
            "--gradient-accumulation",
            "4",
            "--epochs",
            "1",
            "--no-progress",
            "--json",
        ];
        args.extend(extra);
        tessera(&args)
    };
    let plain = run(&[]);
    let reference = fingerprint(&plain);
    for schedule in ["grouped", "interleaved", "sequential"] {
        let out = run(&[
            "--pipeline-stages",
            "2",
            "--schedule",
            schedule,
            "--recompute",
        ]);
        assert_eq!(fingerprint(&out), reference, "{schedule}");
        let stashes = &report(&out)["memory"]["activation_stashes"];
        assert_eq!(stashes.as_array().map(Vec::len), Some(2), "{stashes}");
    }
    let out = run(&["--pipeline-stages", "2", "--device-mapping", "0,0,1"]);
    assert_eq!(fingerprint(&out), reference);
    // Three layers on IPUs out of order: exit 2, one line.
    let out = run(&["--pipeline-stages", "2", "--device-mapping", "1,0,1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("contiguous"), "{}", stderr(&out));
}

#[test]
fn scale_takes_any_u64_seed_and_train_a_huge_device_iteration_count() {
    let dir = scratch("huge");
    let d = dir.to_str().expect("UTF-8 path");
    let out = tessera(&[
        "scale",
        "--runs-dir",
        d,
        "--replicas",
        "1,2",
        "--epochs",
        "1",
        "--no-progress",
        "--data",
        "synthetic:200:4:2:1",
        "--seed",
        "18446744073709551615",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    // More device iterations than steps: one host call per epoch, and no
    // queue sized by the flag.
    let out = train(
        &dir,
        &["--epochs", "1", "--device-iterations", "1000000000000"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// A checkpoint with flipped bits in a weight tensor, and resuming with
/// other epochs or learning rate: one line naming the tensor or each
/// setting, status 2.
#[test]
fn train_refuses_damaged_checkpoints_and_other_settings_naming_them() {
    let dir = scratch("train-refused");
    let stopped = train(
        &dir,
        &["--epochs", "2", "--stop-after-epochs", "1", "--name", "run"],
    );
    assert!(stopped.status.success(), "{}", stderr(&stopped));
    let checkpoint = dir.join("run").join("checkpoint.safetensors");
    let mut bytes = std::fs::read(&checkpoint).unwrap();
    let n = usize::try_from(u64::from_le_bytes(bytes[..8].try_into().unwrap())).unwrap();
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let start = header["weights.layer0.weight"]["data_offsets"][0]
        .as_u64()
        .unwrap();
    let start = 8 + n + usize::try_from(start).unwrap();
    for k in 0..10 {
        bytes[start + 7 * k] ^= 1 << (k % 8);
    }
    let damaged = dir.join("damaged.safetensors");
    std::fs::write(&damaged, &bytes).unwrap();
    let checkpoint = checkpoint.to_str().unwrap();
    for (name, resume, extra, needle) in [
        (
            "damaged",
            damaged.to_str().unwrap(),
            &["--epochs", "2"][..],
            "tensor `weights.layer0.weight` does not match its digest",
        ),
        (
            "epochs",
            checkpoint,
            &["--epochs", "3", "--lr", "0.01"][..],
            "lr: checkpoint 0.005, now 0.01; epochs: checkpoint 2, now 3",
        ),
    ] {
        let mut args = vec!["--resume", resume, "--name", name];
        args.extend(extra);
        assert_usage_error(&train(&dir, &args), name, needle);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Each message names the input, the value and what is allowed, on one
/// line with status 2 (issue 12's list of misleading messages).
#[test]
fn messages_name_the_input_the_value_and_what_is_allowed() {
    let dir = scratch("messages");
    let runs = dir.to_str().unwrap();
    let cases: [(&[&str], &str); 8] = [
        (
            &["scale", "--global-batch", "0"],
            "tessera: error: invalid value '0' for '--global-batch <N>': expected a whole number >= 1",
        ),
        (
            &["train", "--epochs", "-1"],
            "tessera: error: invalid value '-1' for '--epochs <N>': expected a whole number >= 1",
        ),
        (
            &["train", "--hidden", "64,-3"],
            "tessera: error: invalid value '64,-3' for '--hidden <W,W>': '-3': expected a whole \
             number >= 1 (widths separated by commas, or '' for none)",
        ),
        (
            &["train", "--device-mapping", "0,99999999999"],
            "tessera: error: invalid value '0,99999999999' for '--device-mapping <I,I>': \
             `99999999999` in device mapping `0,99999999999` is not an IPU number: expected a \
             whole number from 0 to 4294967295 (e.g. 0,0,1 or 0,[1,2],2)",
        ),
        (
            &["train", "--checkpoint-every", "-1"],
            "tessera: error: invalid value '-1' for '--checkpoint-every <N>': \
             expected a whole number >= 0",
        ),
        (
            &["train", "--lr", "-1", "--runs-dir", runs],
            "tessera: error: --lr: optimizer: lr must be finite and >= 0, got -1",
        ),
        (
            &["plan", "--model", "mlp", "--svg", "/nonexistent/dir/x.svg"],
            "tessera: error: --svg /nonexistent/dir/x.svg: its directory /nonexistent/dir \
             cannot be used: No such file or directory (os error 2)",
        ),
        (
            &["plan", "--model", "mlp", "--svg", runs],
            &format!("tessera: error: --svg {runs}: is a directory; give a file name"),
        ),
    ];
    for (args, line) in cases {
        let out = tessera(args);
        assert_usage_error(&out, &format!("{args:?}"), line);
        assert_eq!(stderr(&out).trim_end(), line, "{args:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
