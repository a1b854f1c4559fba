//! `tessera train --batch-invariant`: the mode in the report and in
//! `config.toml`, the same fingerprint for micro-batches of 1 and 8, batch
//! norm refused with status 2.

use super::command::{assert_usage_error, scratch, stdout, tessera};

/// A small job: 41 synthetic samples (32 train: one global batch over 2
/// instances x 2 replicas x `micro_batch` x `accumulation` = 8 each).
fn train(dir: &std::path::Path, name: &str, micro_batch: &str, accumulation: &str) -> String {
    let out = tessera(&[
        "train",
        "--batch-invariant",
        "--data",
        "synthetic:41:6:3",
        "--hidden",
        "8",
        "--instances",
        "2",
        "--replication-factor",
        "2",
        "--micro-batch",
        micro_batch,
        "--gradient-accumulation",
        accumulation,
        "--epochs",
        "2",
        "--no-progress",
        "--runs-dir",
        dir.to_str().unwrap(),
        "--name",
        name,
    ]);
    assert!(out.status.success(), "{out:?}");
    stdout(&out).to_owned()
}

fn fingerprint(report: &str) -> &str {
    report
        .lines()
        .find(|l| l.starts_with("fingerprint"))
        .expect("a fingerprint line")
}

#[test]
fn the_mode_is_reported_and_kept_and_the_micro_batch_changes_no_bit() {
    let dir = scratch("batch-invariant");
    let one = train(&dir, "one", "1", "8");
    let eight = train(&dir, "eight", "8", "1");
    assert!(one.contains("batch-invariant"), "{one}");
    assert_eq!(fingerprint(&one), fingerprint(&eight));
    let config = std::fs::read_to_string(dir.join("one").join("config.toml")).unwrap();
    assert!(config.contains("batch_invariant = true"), "{config}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn batch_norm_is_refused() {
    for model in [&["--batch-norm"][..], &["--model", "resnet-mini"]] {
        let mut args = vec!["train", "--batch-invariant", "--no-progress"];
        args.extend_from_slice(model);
        let out = tessera(&args);
        assert_usage_error(&out, "--batch-invariant with batch norm", "batch norm");
    }
}
