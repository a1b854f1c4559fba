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
