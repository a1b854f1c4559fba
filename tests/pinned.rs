//! Tests: the fingerprints of the jobs the docs and issue 22 quote, pinned
//! (the final weights' bits: a change of structure must not move them).

use crate::cli::fingerprint;
use crate::command::{scratch, tessera};

/// `tessera train ARGS --json` into a fresh run directory: its fingerprint.
fn job(dir: &std::path::Path, name: &str, args: &[&str]) -> String {
    let mut all = vec!["train", "--no-progress", "--json", "--name", name];
    all.extend(["--runs-dir", dir.to_str().expect("UTF-8 path")]);
    all.extend(args);
    fingerprint(&tessera(&all))
}

#[test]
fn the_default_job_and_the_pipelined_mlp_keep_their_fingerprints() {
    let dir = scratch("pinned-mlp");
    assert_eq!(job(&dir, "default", &[]), "b0ac5e001c150f59");
    let pipelined = [
        "--pipeline-stages",
        "2",
        "--instances",
        "2",
        "--replication-factor",
        "4",
        "--gradient-accumulation",
        "4",
        "--epochs",
        "5",
    ];
    assert_eq!(job(&dir, "pipelined", &pipelined), "28ef034cce06c5e0");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_gelu_mlp_with_batch_norm_keeps_its_fingerprint() {
    let dir = scratch("pinned-gelu");
    let args = [
        "--hidden",
        "256,128",
        "--batch-norm",
        "--activation",
        "gelu",
        "--epochs",
        "5",
    ];
    assert_eq!(job(&dir, "gelu", &args), "a4ce2c646785f222");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resnet_mini_keeps_its_fingerprint() {
    let dir = scratch("pinned-resnet");
    let got = job(&dir, "resnet", &["--model", "resnet-mini"]);
    assert_eq!(got, "b94acca48cd34673");
    let _ = std::fs::remove_dir_all(&dir);
}
