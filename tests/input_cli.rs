//! Tests: the inputs of `tessera` (issue 24): endless and oversized data
//! and config files, generated data past its limit, one-class data and
//! labels past the class limit, each refused with one line and status 2.

use crate::command::{assert_usage_error, scratch, tessera};

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
