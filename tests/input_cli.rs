//! Tests: the inputs of `tessera` (issue 24): endless and oversized data
//! and config files, generated data past its limit, one-class data and
//! labels past the class limit, each refused with one line and status 2;
//! a run's config.toml runs it again from another directory.

use crate::command::{assert_usage_error, scratch, stderr, tessera};

#[cfg(target_os = "linux")]
#[test]
fn endless_data_and_config_files_are_refused_at_their_limits() {
    let out = tessera(&["train", "--data", "csv:/dev/zero"]);
    assert_usage_error(
        &out,
        "--data csv:/dev/zero",
        "/dev/zero: larger than the 268435456-byte limit per data file",
    );
    let out = tessera(&["train", "--config", "/dev/zero"]);
    assert_usage_error(
        &out,
        "--config /dev/zero",
        "--config /dev/zero: larger than the 1048576-byte limit for a config file",
    );
}

#[test]
fn generated_data_past_the_limit_says_its_bytes() {
    let out = tessera(&["train", "--data", "synthetic:300000000:10:2"]);
    assert_usage_error(
        &out,
        "synthetic",
        "= 13200000080 bytes, more than the 268435456-byte",
    );
    let out = tessera(&["train", "--data", "images:100000000:3x32x32:10"]);
    assert_usage_error(&out, "images", "more than the 268435456-byte limit");
}

#[test]
fn data_of_one_class_is_refused() {
    let out = tessera(&["train", "--data", "synthetic:2000:10:1"]);
    assert_usage_error(
        &out,
        "synthetic one class",
        "synthetic:2000:10:1:0: the labels hold 1",
    );
    let dir = scratch("one-class");
    let csv = dir.join("zeros.csv");
    let text: String = (0..200).map(|i| format!("{i},0\n")).collect();
    std::fs::write(&csv, text).unwrap();
    let runs = dir.join("runs");
    let out = tessera(&[
        "train",
        "--data",
        &format!("csv:{}", csv.display()),
        "--runs-dir",
        runs.to_str().unwrap(),
    ]);
    assert_usage_error(
        &out,
        "csv one class",
        "zeros.csv: the labels hold 1 distinct class",
    );
    assert!(!runs.exists(), "nothing written");
}

#[test]
fn a_label_past_the_class_limit_is_named_with_its_line() {
    let dir = scratch("label-limit");
    let csv = dir.join("labels.csv");
    std::fs::write(&csv, "1,0\n2,60000\n3,1\n").unwrap();
    let out = tessera(&[
        "train",
        "--data",
        &format!("csv:{}", csv.display()),
        "--runs-dir",
        dir.join("runs").to_str().unwrap(),
    ]);
    assert_usage_error(
        &out,
        "label 60000",
        "line 2, column 2: label 60000 is outside 0..1024 (at most 1024 classes",
    );
}

#[cfg(target_os = "linux")]
#[test]
fn an_unwritable_svg_directory_is_the_users_error() {
    let out = tessera(&["plan", "--model", "resnet50", "--svg", "/proc/x.svg"]);
    assert_usage_error(
        &out,
        "plan --svg /proc/x.svg",
        "--svg /proc/x.svg: its directory /proc is not writable",
    );
}

#[test]
fn options_out_of_range_are_named() {
    let out = tessera(&[
        "plan",
        "--model",
        "resnet50",
        "--ipus-per-replica=18446744073709551615",
    ]);
    assert_usage_error(
        &out,
        "plan --ipus-per-replica",
        "--ipus-per-replica 18446744073709551615: at most the Pod's 16 IPUs (--pod)",
    );
    let out = tessera(&["bench", "sim", "--quick", "--elements", "128Mi"]);
    assert_usage_error(
        &out,
        "bench sim --elements 128Mi",
        "--elements 134217728: the sim suite takes at most 50331648 (48Mi)",
    );
    let out = tessera(&["bench", "data", "--elements", "128Mi"]);
    assert_usage_error(
        &out,
        "bench data --elements 128Mi",
        "--elements 134217728: the data suite's micro-batch is at most 112",
    );
    let out = tessera(&["bench", "data", "--quick", "--elements", "450"]);
    assert_usage_error(&out, "bench data --quick", "at most 449");
}

#[test]
fn a_torn_last_record_after_the_checkpoint_is_discarded_on_resume() {
    use crate::cli::{fingerprint, report, train};
    use crate::command::stderr;
    let dir = scratch("torn-record");
    let straight = fingerprint(&train(&dir, &["--epochs", "2", "--name", "s", "--json"]));
    let stop = [
        "--epochs",
        "2",
        "--name",
        "r",
        "--json",
        "--stop-after-epochs",
        "1",
    ];
    assert_eq!(report(&train(&dir, &stop))["steps_run"], 30);
    let (r, s) = (dir.join("r"), dir.join("s"));
    let metrics = r.join("metrics.jsonl");
    let history = std::fs::read_to_string(&metrics).unwrap();
    let ckpt = r.join("checkpoint.safetensors");
    let ckpt = ckpt.to_str().unwrap();
    // Line 32, torn, would be step 30: after the checkpoint's 30 steps.
    std::fs::write(&metrics, format!("{history}{{\"kind\":\"step\",\"st")).unwrap();
    let out = train(&dir, &["--epochs", "2", "--json", "--resume", ckpt]);
    assert!(
        stderr(&out).contains("line 32, a torn record after the checkpoint's step 29"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fingerprint(&out), straight);
    assert_eq!(
        std::fs::read_to_string(&metrics).unwrap().lines().count(),
        std::fs::read_to_string(s.join("metrics.jsonl"))
            .unwrap()
            .lines()
            .count()
    );
    // A torn record the checkpoint needs is still refused.
    let torn: String = history.lines().take(20).map(|l| format!("{l}\n")).collect();
    std::fs::write(&metrics, format!("{torn}{{\"kind\":\"step\",\"st")).unwrap();
    let out = train(&dir, &["--epochs", "2", "--resume", ckpt]);
    assert_usage_error(&out, "torn history", "ends before step 20");
    // So is a broken line that is not the last one.
    std::fs::write(&metrics, format!("{{\"kind\"\n{history}")).unwrap();
    let out = train(&dir, &["--epochs", "2", "--resume", ckpt]);
    assert_usage_error(&out, "broken line", "line 1 is not a step or epoch record");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tessera COMMAND` on the small job in `runs`, with `extra`, started
/// (not waited for).
fn start(command: &str, runs: &std::path::Path, extra: &[&str]) -> std::process::Child {
    use std::process::{Command, Stdio};
    let mut args = vec![command, "--runs-dir", runs.to_str().unwrap()];
    args.extend(crate::cli::SMALL);
    args.extend(extra);
    Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tessera binary runs")
}

#[test]
fn two_runs_started_together_into_one_directory_do_not_both_run() {
    let dir = scratch("race");
    for round in 0..3 {
        let name = format!("race{round}");
        let extra = ["--epochs", "2", "--name", name.as_str()];
        let (a, b) = (start("train", &dir, &extra), start("train", &dir, &extra));
        let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
        let ok: Vec<_> = outs.iter().filter(|o| o.status.success()).collect();
        assert_eq!(ok.len(), 1, "one of two runs: {outs:?}");
        let refused = outs.iter().find(|o| !o.status.success()).unwrap();
        // Refused while the other holds the directory, or after it wrote
        // its run there: either way, one line naming the directory.
        let err = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(
            err.contains("is in use") || err.contains("already holds a run"),
            "{err}"
        );
        assert!(err.contains(&name), "{err}");
        let run = dir.join(&name);
        assert!(run.join("checkpoint.safetensors").is_file());
        assert!(
            !run.join(".lock").exists(),
            "a run that ends removes its lock"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn train_and_scale_refuse_each_other_s_run_directory() {
    let dir = scratch("kinds");
    let d = dir.to_str().unwrap();
    let scale = |name: &str| {
        tessera(&[
            "scale",
            "--runs-dir",
            d,
            "--name",
            name,
            "--epochs",
            "1",
            "--replicas",
            "1,2",
            "--data",
            "synthetic:600:8:3:1",
            "--hidden",
            "16",
            "--no-progress",
        ])
    };
    let train = |name: &str| {
        let mut args = vec!["train", "--runs-dir", d, "--name", name, "--epochs", "1"];
        args.extend(crate::cli::SMALL);
        tessera(&args)
    };
    assert!(scale("s").status.success());
    let out = train("s");
    assert_usage_error(
        &out,
        "train into a scale run",
        "already holds a run (scale.jsonl",
    );
    assert!(!dir.join("s/metrics.jsonl").exists());
    // Said before the data is loaded (absent data would be named first).
    let absent = dir.join("absent.csv");
    let data = format!("csv:{}", absent.display());
    let out = tessera(&["train", "--runs-dir", d, "--name", "s", "--data", &data]);
    assert_usage_error(&out, "before the data", "already holds a run (scale.jsonl");
    assert!(train("t").status.success());
    let out = scale("t");
    assert_usage_error(
        &out,
        "scale into a train run",
        "already holds a run (metrics.jsonl",
    );
    assert!(!dir.join("t/scale.jsonl").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[cfg(unix)]
#[test]
fn a_run_killed_with_its_lock_held_resumes() {
    let dir = scratch("killed");
    let extra = ["--epochs", "20", "--checkpoint-every", "1", "--name", "k"];
    let mut child = start("train", &dir, &extra);
    let run = dir.join("k");
    let ckpt = run.join("checkpoint.safetensors");
    while !ckpt.is_file() {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SIGKILL: no destructor runs, the lock file stays behind.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(run.join(".lock").exists());
    let mut args = vec!["train", "--runs-dir", dir.to_str().unwrap()];
    args.extend(crate::cli::SMALL);
    args.extend(["--epochs", "20", "--resume", ckpt.to_str().unwrap()]);
    let out = tessera(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!run.join(".lock").exists());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn contradictions_and_the_data_are_named() {
    let dir = scratch("contradictions");
    let d = dir.to_str().unwrap();
    for (args, needle) in [
        (
            &["--pipeline-stages", "2", "--ipus-per-replica", "4"][..],
            "--pipeline-stages 2 and --ipus-per-replica 4 contradict each other",
        ),
        (
            &["--pipeline-stages", "2", "--device-mapping", "0,0,0"],
            "--device-mapping 0,0,0 puts no layer on IPU 1",
        ),
        (
            &["--pipeline-stages", "2", "--device-mapping", "1,1,1"],
            "--device-mapping 1,1,1 puts no layer on IPU 0",
        ),
        (
            &["--schedule", "grouped"],
            "--schedule grouped schedules a pipeline",
        ),
        (
            &["--stop-after-epochs", "50", "--epochs", "1"],
            "--stop-after-epochs 50 is past the run's 1 epochs",
        ),
        (
            &["--data", "csv:/no/such/file.csv"],
            "--data csv:/no/such/file.csv: /no/such/file.csv: cannot read",
        ),
    ] {
        let mut all = vec!["train", "--runs-dir", d];
        all.extend(args);
        assert_usage_error(&tessera(&all), &args.join(" "), needle);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn empty_residual_bodies_and_networks_past_the_bounds_are_refused_at_once() {
    let dir = scratch("bounds");
    let d = dir.to_str().unwrap();
    let file = dir.join("empty.toml");
    std::fs::write(
        &file,
        "input = [1, 8, 8]\n[[layer]]\nkind = \"conv\"\nchannels = 4\nkernel = 3\npadding = 1\n\
         [[layer]]\nkind = \"residual\"\nbody = [{ kind = \"residual\", body = [] }]\n\
         [[layer]]\nkind = \"global_avg_pool\"\n",
    )
    .unwrap();
    let deep: String = std::iter::once("input = [1, 8, 8]\n".to_owned())
        .chain((0..20_000).map(|_| "[[layer]]\nkind = \"bn_act\"\n".to_owned()))
        .chain(std::iter::once(
            "[[layer]]\nkind = \"global_avg_pool\"\n".to_owned(),
        ))
        .collect();
    let many = dir.join("many.toml");
    std::fs::write(&many, deep).unwrap();
    let model = |command: &str, path: &std::path::Path| {
        let path = path.to_str().unwrap();
        match command {
            "plan" => tessera(&[command, "--model", path]),
            _ => tessera(&[command, "--model", path, "--runs-dir", d]),
        }
    };
    for command in ["train", "plan"] {
        assert_usage_error(
            &model(command, &file),
            "an empty body",
            "layer 1 (`residual`): body layer 0 (`residual`): a residual block with an empty body",
        );
        assert_usage_error(
            &model(command, &many),
            "20,000 layers",
            "many.toml: line 8194: layer 4096 (`bn_act`): more than 4096 layers",
        );
    }
    for (blocks, needle) in [
        (
            "100000",
            "--blocks 100000: more residual blocks than the 4096 layers",
        ),
        (
            "4000",
            "--widths 16 --blocks 4000: network layer 4096: more than 4096 layers",
        ),
        (
            "18446744073709551615",
            "--blocks 18446744073709551615: more residual blocks",
        ),
    ] {
        let args = [
            "--model",
            "resnet-mini",
            "--widths",
            "16",
            "--blocks",
            blocks,
        ];
        let mut train = vec!["train", "--runs-dir", d];
        train.extend(args);
        assert_usage_error(&tessera(&train), blocks, needle);
        let mut plan = vec!["plan"];
        plan.extend(args);
        assert_usage_error(&tessera(&plan), blocks, needle);
    }
    let hidden = vec!["1"; 20_000].join(",");
    let out = tessera(&["train", "--hidden", &hidden, "--runs-dir", d]);
    assert_usage_error(&out, "--hidden of 20,000", "--hidden: 20000 layers");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoint_s_loss_scaler_out_of_range_is_named_with_the_checkpoint() {
    use tessera::sim::checkpoint::Checkpoint;

    let dir = scratch("scaler");
    let out = crate::cli::train(&dir, &["--epochs", "2", "--stop-after-epochs", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let ckpt = dir.join("default/checkpoint.safetensors");
    let mut c = Checkpoint::load(&ckpt).unwrap();
    // Signed again on saving: only the counters are wrong.
    c.push("scaler.counters", [3], vec![u64::MAX, 0, 0]);
    c.save(&ckpt).unwrap();
    let path = ckpt.to_str().unwrap();
    let out = crate::cli::train(&dir, &["--epochs", "2", "--resume", path]);
    assert_usage_error(
        &out,
        "scaler counters",
        &format!("--resume {path}: the checkpoint's loss scaler state: "),
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("growth_tracker"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_scale_run_ending_with_a_loss_that_is_not_finite_exits_3() {
    let dir = scratch("scale-nan");
    // 5 steps, fewer than the divergence patience: the runs end, NaN.
    let out = tessera(&[
        "scale",
        "--lr",
        "1e30",
        "--epochs",
        "1",
        "--replicas",
        "1,2",
        "--global-batch",
        "96",
        "--data",
        "synthetic:600:8:3:1",
        "--hidden",
        "16",
        "--no-progress",
        "--runs-dir",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("ended with a loss that is not finite (1 replica: NaN"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A run's config.toml records its data files' paths made absolute, so
/// that the command its first line gives runs it again from anywhere (it
/// kept a relative `--data` path, which only worked from the first run's
/// directory).
#[test]
fn config_toml_runs_again_from_another_directory() {
    let dir = scratch("relative-data");
    let text: String = (0..600).map(|i| format!("{},{}\n", i % 7, i % 2)).collect();
    std::fs::write(dir.join("two.csv"), text).unwrap();
    let run = |cwd: &std::path::Path, args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .current_dir(cwd)
            .args(["train", "--epochs", "1", "--json", "--no-progress"])
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["fingerprint"].as_str().unwrap().to_owned()
    };
    let first = run(
        &dir,
        &["--data", "csv:two.csv", "--runs-dir", "runs", "--name", "a"],
    );
    let config = dir.join("runs").join("a").join("config.toml");
    let toml = std::fs::read_to_string(&config).unwrap();
    let recorded = dir.join("two.csv");
    assert!(
        toml.contains(&format!("csv:{}", recorded.display())),
        "{toml}"
    );
    let elsewhere = dir.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let again = run(
        &elsewhere,
        &["--config", config.to_str().unwrap(), "--name", "b"],
    );
    assert_eq!(again, first);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_hidden_layer_is_the_same_linear_model_as_a_flag_and_in_a_config() {
    let dir = scratch("no-hidden");
    let runs = dir.to_str().unwrap();
    let config = dir.join("linear.toml");
    std::fs::write(&config, "hidden = []\n").unwrap();
    let common = [
        "train",
        "--runs-dir",
        runs,
        "--epochs",
        "1",
        "--no-progress",
        "--json",
    ];
    let fingerprint = |extra: &[&str]| {
        let out = tessera(&[&common[..], extra].concat());
        assert!(out.status.success(), "{extra:?}: {}", stderr(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            report["config"]["hidden"],
            serde_json::json!([]),
            "{report}"
        );
        report["fingerprint"].as_str().unwrap().to_owned()
    };
    let flag = fingerprint(&["--name", "flag", "--hidden", ""]);
    let file = fingerprint(&["--name", "file", "--config", config.to_str().unwrap()]);
    assert_eq!(flag, file);
    let out = tessera(&["train", "--hidden", "8,x"]);
    let allowed = "'x': expected a whole number >= 1 (widths separated by commas, or '' for none)";
    assert_usage_error(&out, "--hidden 8,x", allowed);
}
