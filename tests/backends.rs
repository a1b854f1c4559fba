//! The kernels' backend as the `tessera` command sees it: `TESSERA_BACKEND`
//! refused with a clear error when the CPU lacks it, the default job's
//! weights the same on every backend, and `tessera bench formats` listing
//! its rows. (The kernels themselves are tested on every backend in
//! tessera-core's own tests, `core/tests/`.)

use tessera_core::arch::{self, Backend};
use tessera_core::kernels::GemmShape;

use crate::command::{assert_usage_error, scratch, stderr, stdout, tessera};

#[test]
fn the_command_refuses_a_bad_tessera_backend() {
    let run = |value: &str| {
        std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["bench", "conversions", "--quick", "--elements", "64"])
            .env("TESSERA_BACKEND", value)
            .output()
            .expect("the tessera binary runs")
    };
    let mut values = vec!["avx3".to_string()];
    values.extend(
        Backend::ALL
            .iter()
            .filter(|b| !b.is_available())
            .map(|b| b.to_string()),
    );
    for value in values {
        let out = run(&value);
        assert_usage_error(&out, &value, &format!("TESSERA_BACKEND={value}"));
    }
    let out = run("scalar");
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The default job (`tessera train`, here 2 epochs) forced onto each
/// backend: the same final weights. In `16.16` the products are of
/// 16-bit values, exact in f32; in `32.32` they are rounded, so an FMA
/// anywhere in the matrix products would change the weights.
#[test]
fn the_default_job_trains_the_same_weights_on_every_backend() {
    let dir = scratch("backend-fingerprints");
    for precision in ["16.16", "32.32"] {
        let mut fingerprints = Vec::new();
        for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
            let name = format!("{backend}-{precision}");
            let out = std::process::Command::new(env!("CARGO_BIN_EXE_tessera"))
                .args([
                    "train",
                    "--epochs",
                    "2",
                    "--precision",
                    precision,
                    "--no-progress",
                ])
                .args(["--json", "--name", &name, "--runs-dir"])
                .arg(&dir)
                .env("TESSERA_BACKEND", backend.name())
                .output()
                .expect("the tessera binary runs");
            let err = stderr(&out);
            assert!(out.status.success(), "{name}: {err}");
            let report: serde_json::Value =
                serde_json::from_str(stdout(&out)).expect("one JSON report");
            let fingerprint = report["fingerprint"]
                .as_str()
                .expect("a fingerprint")
                .to_owned();
            println!("default job, {precision}, {backend}: {fingerprint}");
            fingerprints.push((backend, fingerprint));
        }
        let (first, want) = &fingerprints[0];
        for (backend, got) in &fingerprints {
            assert_eq!(got, want, "{precision}: {backend} against {first}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `tessera bench formats --json` lists every row once, each against
/// `half` (no timing assertions).
#[test]
fn bench_formats_json_lists_the_rows() {
    let out = tessera(&[
        "bench",
        "formats",
        "--quick",
        "--json",
        "--elements",
        "4096",
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let mut kernels = Vec::new();
    for line in stdout(&out).lines() {
        let v: serde_json::Value = serde_json::from_str(line).expect("one JSON object a line");
        assert_eq!(
            (v["suite"].as_str(), v["reference"].as_str()),
            (Some("formats"), Some("half"))
        );
        assert!(v["ratio"].as_f64().is_some_and(|r| r > 0.0), "{line}");
        kernels.push(v["kernel"].as_str().expect("a kernel name").to_owned());
    }
    let mut rows = vec!["mxfp4_quantize_sr", "nvfp4_quantize_rn", "nvfp4_dequantize"];
    for f in ["e4m3fn", "e5m2", "e2m3fn", "e3m2fn", "e2m1fn", "e8m0fnu"] {
        rows.extend(
            [
                format!("encode_{f}_rn"),
                format!("encode_{f}_sr"),
                format!("decode_{f}"),
                format!("chop_{f}_rn"),
                format!("chop_{f}_sr"),
            ]
            .map(|s| &*s.leak()),
        );
        if Backend::Avx2.is_available() {
            rows.push(format!("encode_{f}_sr_avx2").leak());
        }
    }
    for row in rows {
        assert_eq!(
            kernels.iter().filter(|k| *k == row).count(),
            1,
            "{row} in {kernels:?}"
        );
    }
}

/// The simulator's products are core's GEMM, without FMA on every backend:
/// `x * y + z` with an FMA keeps 2^-24 where the rounded product added
/// gives 0 (matrixmultiply's FMA kernels give 2^-24 on CPUs with FMA).
#[test]
fn the_simulators_products_round_each_product_on_every_backend() {
    let x = 1.0 + 2f32.powi(-12); // squared: 1 + 2^-11 + 2^-24
    let shape = GemmShape {
        m: 1,
        k: 2,
        n: 16,
        a_transposed: false,
        b_transposed: true,
    };
    let a = [-(1.0 + 2f32.powi(-11)), x];
    let b: Vec<f32> = (0..16).flat_map(|_| [1.0, x]).collect();
    for backend in Backend::ALL.into_iter().filter(|b| b.is_available()) {
        let c = arch::with_backend(backend, || {
            let mut c = vec![1.0; 16];
            tessera::sim::kernels::matmul::gemm(shape, &a, &b, &mut c);
            c
        })
        .expect("an available backend");
        assert!(c.iter().all(|&c| c == 0.0), "{backend}: {c:?}");
    }
}
