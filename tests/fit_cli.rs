//! Tests: fit_cli. A run that cannot fit is refused before anything is
//! allocated for it (issue 12: `--hidden 100000000` aborted after 14 s on
//! a failed allocation of 3 GiB; `--hidden 1000000` took 42 s and 4.1 GB
//! to find the tiles too small).
//!
//! The commands run under an address-space limit, so a regression fails
//! (an allocation refused, status 134) instead of swapping the machine.

use std::process::{Command, Output};

use crate::command::{assert_usage_error, scratch, stderr};

/// The address-space limit of the runs, in KiB: 2 GiB, far below what
/// building the refused models takes, far above what refusing them does.
const LIMIT_KIB: u64 = 2 << 20;

/// `tessera args` under `ulimit -v LIMIT_KIB`, with `env` set.
fn limited(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {LIMIT_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_tessera"))
        .args(args)
        .env_remove(tessera::sim::train::HOST_MEMORY_VARIABLE);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("sh runs")
}

#[test]
fn models_beyond_the_tiles_are_refused_with_the_numbers() {
    let dir = scratch("fit");
    let runs = dir.to_str().unwrap();
    for (hidden, tensors) in [
        // The weights spread over every tile (the reduction of the last
        // layer's product split too): tile 0 holds a 1,472th of them.
        ("100000000", "layer0.weight 17391360"),
        ("1000000", "layer0.weight 174080"),
    ] {
        let out = limited(
            &[
                "train",
                "--hidden",
                hidden,
                "--epochs",
                "1",
                "--no-progress",
                "--runs-dir",
                runs,
            ],
            &[],
        );
        let what = format!("--hidden {hidden}");
        assert_usage_error(
            &out,
            &what,
            "the model does not fit: out of tile memory: tile 0",
        );
        let err = stderr(&out);
        assert!(err.contains(tensors), "{what}: {err}");
        assert!(err.contains("has 638976"), "{what}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn runs_beyond_the_host_memory_are_refused_with_the_numbers() {
    let dir = scratch("host");
    let runs = dir.to_str().unwrap();
    let args = [
        "train",
        "--hidden",
        "64",
        "--epochs",
        "1",
        "--no-progress",
        "--runs-dir",
        runs,
    ];
    // The default job's 16 replicas in 1 MB.
    let out = limited(&args, &[("TESSERA_HOST_MEMORY", "1000000")]);
    assert_usage_error(
        &out,
        "TESSERA_HOST_MEMORY=1000000",
        "out of host memory: the 16 replicas of this process need at least",
    );
    let err = stderr(&out);
    assert!(
        err.contains("1000000 bytes (0.0 GB) are available (TESSERA_HOST_MEMORY)"),
        "{err}"
    );
    // The same run with the memory there is (a cap of 1 GB) runs.
    let out = limited(&args, &[("TESSERA_HOST_MEMORY", "1000000000")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn networks_beyond_the_tiles_are_refused_with_the_numbers() {
    let dir = scratch("fit-network");
    let train = |widths: &str| {
        limited(
            &[
                "train",
                "--model",
                "resnet-mini",
                "--widths",
                widths,
                "--blocks",
                "1",
                "--epochs",
                "1",
                "--no-progress",
                "--runs-dir",
                dir.to_str().unwrap(),
            ],
            &[],
        )
    };
    // Within the bound estimated from its layers: measured, tile by tile.
    let out = train("2048");
    let what = "--model resnet-mini --widths 2048";
    assert_usage_error(
        &out,
        what,
        "the model does not fit: out of tile memory: tile ",
    );
    assert!(
        stderr(&out).contains("has 638976"),
        "{what}: {}",
        stderr(&out)
    );
    // Past it (issue 24): refused from its layers alone, with the bytes.
    let out = train("4096");
    assert_usage_error(
        &out,
        "--model resnet-mini --widths 4096",
        "--widths 4096 --blocks 1: the model does not fit: its parameters, their gradients and \
         its activations for a micro-batch of 4 take at least 2429091864 bytes (estimated from \
         its layers), more than the 940572672 bytes",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
