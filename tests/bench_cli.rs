//! Tests: the `tessera bench` subcommands, run as a user would: the shape
//! of their output and their exit statuses, never their speed.

use crate::command::{stderr, stdout, tessera};

const KERNELS: [&str; 6] = [
    "f32_to_f16_rn",
    "f32_to_bf16_rn",
    "f16_to_f32",
    "bf16_to_f32",
    "f32_to_f16_sr",
    "f32_to_bf16_sr",
];

#[test]
fn bench_conversions_json_prints_one_valid_object_per_line() {
    let out = tessera(&[
        "bench",
        "conversions",
        "--quick",
        "--json",
        "--elements",
        "4096",
    ]);
    assert!(
        out.status.success(),
        "status {:?}, stderr: {}",
        out.status,
        stderr(&out)
    );
    let lines: Vec<&str> = stdout(&out).lines().collect();
    // Every kernel against both references, at the one size asked for.
    assert_eq!(lines.len(), KERNELS.len() * 2, "output:\n{}", stdout(&out));
    let mut seen = Vec::new();
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(v["suite"], "conversions", "{line}");
        assert_eq!(v["elements"], 4096, "{line}");
        let kernel = v["kernel"].as_str().expect("kernel is a string");
        assert!(KERNELS.contains(&kernel), "unknown kernel in {line}");
        let reference = v["reference"].as_str().expect("reference is a string");
        assert!(
            ["half", "memcpy"].contains(&reference),
            "unknown reference in {line}"
        );
        for field in [
            "seconds",
            "gbps",
            "ratio",
            "reference_seconds",
            "reference_gbps",
        ] {
            let x = v[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field} is not a number in {line}"));
            assert!(x.is_finite() && x > 0.0, "{field} = {x} in {line}");
        }
        seen.push((kernel.to_owned(), reference.to_owned()));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen.len(),
        KERNELS.len() * 2,
        "each (kernel, reference) once"
    );
}

const OPTIMIZER_KERNELS: [&str; 8] = [
    "lamb_f32",
    "lamb_f16_sr",
    "lars_f32",
    "lars_f16_sr",
    "adamw_f32",
    "adamw_f16_sr",
    "sgd_f32",
    "sgd_f16_sr",
];

#[test]
fn bench_optimizers_json_prints_one_valid_object_per_step_and_reference() {
    let out = tessera(&[
        "bench",
        "optimizers",
        "--quick",
        "--json",
        "--elements",
        "65536",
    ]);
    assert!(
        out.status.success(),
        "status {:?}, stderr: {}",
        out.status,
        stderr(&out)
    );
    let lines: Vec<&str> = stdout(&out).lines().collect();
    // Every step against the triad and the naive step, at the one size.
    assert_eq!(
        lines.len(),
        OPTIMIZER_KERNELS.len() * 2,
        "output:\n{}",
        stdout(&out)
    );
    let mut seen = Vec::new();
    for line in lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        assert_eq!(v["suite"], "optimizers", "{line}");
        assert_eq!(v["elements"], 65536, "{line}");
        let kernel = v["kernel"].as_str().expect("kernel is a string");
        assert!(
            OPTIMIZER_KERNELS.contains(&kernel),
            "unknown kernel in {line}"
        );
        let reference = v["reference"].as_str().expect("reference is a string");
        assert!(
            ["triad", "naive"].contains(&reference),
            "unknown reference in {line}"
        );
        let number = |field: &str| {
            let x = v[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field} is not a number in {line}"));
            assert!(x.is_finite() && x > 0.0, "{field} = {x} in {line}");
            x
        };
        let [seconds, gbps, ratio, reference_seconds, reference_gbps] = [
            "seconds",
            "gbps",
            "ratio",
            "reference_seconds",
            "reference_gbps",
        ]
        .map(number);
        // The definitions, not the speeds: the step's bandwidth is its
        // minimum bytes over its time, the ratio is bandwidth over bandwidth.
        let per_param = gbps * 1e9 * seconds / 65536.0;
        assert!(
            [14.0, 20.0, 22.0, 28.0]
                .iter()
                .any(|b| (per_param - b).abs() < 1e-6 * b),
            "{per_param} bytes per parameter in {line}"
        );
        let relative = (ratio - gbps / reference_gbps).abs() / ratio;
        assert!(relative < 1e-9, "ratio in {line}");
        if reference == "triad" {
            let per_element = reference_gbps * 1e9 * reference_seconds / 65536.0;
            assert!((per_element - 12.0).abs() < 1e-6, "triad bytes in {line}");
        }
        seen.push((kernel.to_owned(), reference.to_owned()));
    }
    seen.sort();
    seen.dedup();
    assert_eq!(
        seen.len(),
        OPTIMIZER_KERNELS.len() * 2,
        "each (kernel, reference) once"
    );
}

#[test]
fn bench_conversions_table_lists_every_kernel() {
    let out = tessera(&["bench", "conversions", "--quick", "--elements", "1000"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    for kernel in KERNELS {
        assert_eq!(
            text.lines()
                .filter(|l| l.starts_with(kernel) && l.contains(" 1000 "))
                .count(),
            2,
            "{kernel} in:\n{text}"
        );
    }
}
#[test]
fn bench_sim_json_reports_the_simulator_against_the_kernel_and_one_ipu() {
    let out = tessera(&["bench", "sim", "--quick", "--json", "--elements", "65536"]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let records: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    // With --quick: the MLP step at width 256 and resnet-mini's against
    // the direct kernels, lamb_sim, then a LAMB step and an empty
    // superstep for 1, 2 and 4 IPUs.
    let kernels: Vec<&str> = records
        .iter()
        .filter_map(|r| r["kernel"].as_str())
        .collect();
    assert_eq!(
        kernels,
        [
            "mlp256_step",
            "resnet_mini_step",
            "lamb_sim",
            "lamb_sim_1ipu",
            "superstep_1ipu",
            "lamb_sim_2ipu",
            "superstep_2ipu",
            "lamb_sim_4ipu",
            "superstep_4ipu",
        ],
        "{}",
        stdout(&out)
    );
    assert!(records[..2].iter().all(|r| r["reference"] == "direct"));
    assert_eq!(records[2]["reference"], "lamb_kernel");
    assert_eq!(records[2]["elements"], 65536);
    for r in &records {
        assert_eq!(r["suite"], "sim");
        for field in ["seconds", "ratio", "reference_seconds"] {
            let x = r[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field} in {r}"));
            assert!(x.is_finite() && x > 0.0, "{field} in {r}");
        }
    }
    assert_eq!(records[7]["elements"], 4 * 1472, "tiles");
}

#[test]
fn bench_allreduce_json_reports_every_algorithm_against_memcpy() {
    let out = tessera(&[
        "bench",
        "allreduce",
        "--quick",
        "--json",
        "--elements",
        "1024",
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let records: Vec<serde_json::Value> = stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    // --quick: 2 thread ranks; four algorithms and the cost model's choice
    // (4 KiB is below the chunked ring's slice size), then the cost model's
    // choice in the deterministic and the order-free orders.
    let kernels = [
        "allreduce_ring_p2",
        "allreduce_bidirectional_ring_p2",
        "allreduce_double_binary_tree_p2",
        "allreduce_halving_doubling_p2",
        "allreduce_auto_p2",
        "allreduce_deterministic_p2",
        "allreduce_order_free_p2",
    ];
    assert_eq!(records.len(), kernels.len(), "{}", stdout(&out));
    for (r, kernel) in records.iter().zip(kernels) {
        assert_eq!(r["suite"], "allreduce", "{r}");
        assert_eq!(r["kernel"], kernel, "{r}");
        assert_eq!(r["elements"], 1024, "{r}");
        assert_eq!(r["reference"], "memcpy", "{r}");
        let number = |field: &str| {
            let x = r[field]
                .as_f64()
                .unwrap_or_else(|| panic!("{field} in {r}"));
            assert!(x.is_finite() && x > 0.0, "{field} = {x} in {r}");
            x
        };
        let [seconds, gbps, ratio, reference_seconds, reference_gbps] = [
            "seconds",
            "gbps",
            "ratio",
            "reference_seconds",
            "reference_gbps",
        ]
        .map(number);
        // The definitions: busbw = bytes / time x 2 (p - 1) / p (1 for two
        // ranks), memcpy GB/s = bytes copied / time, ratio = busbw / memcpy.
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
        assert!(close(gbps, 4096.0 / seconds / 1e9), "busbw in {r}");
        assert!(
            close(reference_gbps, 4096.0 / reference_seconds / 1e9),
            "memcpy GB/s in {r}"
        );
        assert!(close(ratio, gbps / reference_gbps), "ratio in {r}");
    }
}

#[test]
fn bench_allreduce_over_mpi_without_mpirun_exits_with_status_2() {
    // Built without the `mpi` feature, or not launched by mpirun: either
    // way the command says what is missing and does not start.
    let out = tessera(&["bench", "allreduce", "--transport", "mpi", "--quick"]);
    assert_eq!(out.status.code(), Some(2), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("--transport mpi"), "{}", stderr(&out));
    assert!(stderr(&out).contains("mpirun"), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "nothing on stdout: {}", stdout(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}
