//! Tests: the `tessera` command with `--model resnet-mini`: `scale`
//! prints bitwise identical curves from 1 to 16 replicas, a bad model
//! is one line and status 2, resnet-mini's options are refused for the
//! MLP and the MLP's for resnet-mini.

use crate::command::{assert_usage_error, scratch, stderr, stdout, tessera};

#[test]
fn scale_resnet_mini_gives_identical_curves_from_1_to_16_replicas() {
    let dir = scratch("scale-resnet");
    let out = tessera(&[
        "scale",
        "--model",
        "resnet-mini",
        "--widths",
        "4",
        "--blocks",
        "1",
        "--replicas",
        "1,2,4,8,16",
        "--epochs",
        "1",
        "--data",
        "images:160:1x4x4:3:1",
        "--micro-batch",
        "2",
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
    assert_eq!(rows.len(), 5, "{}", stdout(&out));
    for (row, replicas) in rows.iter().zip([1, 2, 4, 8, 16]) {
        assert_eq!(row["replicas"], replicas, "{row}");
        assert_eq!(row["gradient_accumulation"], 16 / replicas, "{row}");
        assert_eq!(row["identical"], true, "{row}");
        assert_eq!(row["fingerprint"], rows[0]["fingerprint"], "{row}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_model_options_are_one_line_errors_with_status_2() {
    let dir = scratch("resnet-usage");
    for (extra, needle) in [
        (&["--model", "resnet"][..], "resnet"),
        (
            &["--widths", "8"][..],
            "--widths is an option of --model resnet-mini",
        ),
        (
            &[
                "--model",
                "resnet-mini",
                "--widths",
                "8,16",
                "--blocks",
                "1",
            ][..],
            "give as many block counts as widths",
        ),
        (
            &["--model", "resnet-mini", "--data", "synthetic:600:8:3:1"][..],
            "resnet-mini reads images",
        ),
        (
            &["--model", "resnet-mini", "--hidden", "32"][..],
            "--hidden is an option of the MLP",
        ),
        (
            &["--model", "resnet-mini", "--activation", "gelu"][..],
            "--activation is an option of the MLP",
        ),
        (
            &["--model", "resnet-mini", "--batch-norm"][..],
            "--batch-norm is an option of the MLP",
        ),
    ] {
        let mut args = vec![
            "train",
            "--runs-dir",
            dir.to_str().unwrap(),
            "--no-progress",
        ];
        args.extend(extra);
        let out = tessera(&args);
        assert_usage_error(&out, &format!("{extra:?}"), needle);
    }
    let _ = std::fs::remove_dir_all(&dir);
}
