//! Tests: `tessera plan`, run as a user would: the report, the JSON, the
//! scaling chart, and every kind of bad input exiting with status 2 on one
//! line.

use crate::command::{assert_usage_error, scratch, stderr, stdout, tessera};

/// Runs `tessera plan ARGS --json` and parses its one line.
fn json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["plan"];
    all.extend(args);
    all.push("--json");
    let out = tessera(&all);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one JSON object: {text}");
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn plan_cli_reports_resnet50() {
    let out = tessera(&[
        "plan",
        "--model",
        "resnet50",
        "--micro-batch",
        "16",
        "--optimizer",
        "sgd",
        "--recompute",
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "ResNet-50 v1.5",
        "POD16",
        "25.56 M parameters",
        "memory       FITS",
        "fullest tile",
        "activations",
        "throughput",
        "samples/s",
        "step time",
        "compute",
        "all-reduce (IPU-Links)",
        "%",
        "POD64",
        "POD128",
        "POD256",
        "efficiency",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    assert!(stderr(&out).is_empty(), "{}", stderr(&out));
}

/// Issue 26: the FP8 and MX precisions on the C600 (FP8 units) and the
/// Bow (FP8 converted to FP16), and their bad values.
#[test]
fn plan_cli_prices_fp8_on_the_c600() {
    let out = tessera(&[
        "plan",
        "--model",
        "mlp",
        "--precision",
        "8.16",
        "--ipu",
        "c600",
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    for needle in [
        "C600 IPUs",
        "numerics     8.16, lamb, products: FP8 units",
        "FITS",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from:\n{text}");
    }
    let bow = json(&["--model", "mlp", "--precision", "mxfp4.16", "--ipu", "bow"]);
    assert_eq!(bow["precision"], "mxfp4.16");
    assert_eq!(
        bow["products"],
        "converted to FP16 (no FP8 units for this format)"
    );
    assert_eq!(bow["utilisation_peak"], "FP16");
    // The simulator builds the quantised layers too; the utilisation is of
    // the FP8 peak where the FP8 units run the products.
    let args = ["--model", "mlp", "--precision", "8.16", "--ipu", "c600"];
    let simulated = json(&[&args[..], &["--layer-costs", "simulated"]].concat());
    assert_eq!(simulated["utilisation_peak"], "FP8");
    assert!(simulated["calibration"].is_object(), "{simulated}");
    for (extra, needle) in [
        (&["--ipu", "c700"][..], "c700"),
        (&["--precision", "mxfp4"][..], "mxfp4.16"),
    ] {
        let mut args = vec!["plan", "--model", "mlp"];
        args.extend(extra);
        assert_usage_error(&tessera(&args), &format!("{extra:?}"), needle);
    }
}

#[test]
fn plan_cli_json_is_one_object() {
    let v = json(&[
        "--model",
        "bert-large-128",
        "--pod",
        "pod64",
        "--precision",
        "16.32",
        "--ipus-per-replica",
        "4",
        "--gradient-accumulation",
        "64",
        "--recompute",
        "--offload-optimizer-state",
    ]);
    assert_eq!(v["fits"], true);
    assert_eq!(v["replicas"], 16, "the Pod filled by default");
    assert_eq!(v["precision"], "16.32");
    assert_eq!(v["schedule"], "interleaved");
    assert_eq!(v["pipeline_steps"], 2 * 3 + (64 - 3));
    assert_eq!(v["stages"].as_array().unwrap().len(), 4);
    assert!(v["samples_per_second"].as_f64().unwrap() > 0.0);
    assert!(v["step"]["compute_s"].as_f64().unwrap() > 0.0);
    assert!(v["step"]["bubble_s"].as_f64().unwrap() > 0.0);
    let pods: Vec<&str> = v["scaling"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["pod"].as_str().unwrap())
        .collect();
    assert_eq!(pods, ["POD16", "POD64", "POD128", "POD256"]);
    assert_eq!(v["assumptions"]["matmul_plan"], "balanced");
}

#[test]
fn plan_cli_says_when_a_model_does_not_fit() {
    let args = ["plan", "--model", "bert-large-128", "--precision", "16.32"];
    let out = tessera(&args);
    // Not fitting is an answer, not an error.
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("DOES NOT FIT"), "{text}");
    assert!(text.contains("optimizer state"), "{text}");
    let v = json(&args[1..]);
    assert_eq!(v["fits"], false);
    assert_eq!(v["overflows"][0]["largest"], "optimizer state");
}

#[test]
fn plan_cli_draws_the_scaling_curve_and_reads_model_files() {
    let dir = scratch("svg");
    let svg = dir.join("scaling.svg");
    let model = dir.join("model.toml");
    std::fs::write(
        &model,
        "name = \"two layers\"\ninput_bytes = 1028\n\n[[layer]]\nname = \"fc1\"\nparams = 65792\n\
         flops_forward = 131072\nflops_backward = 131072\nactivation_bytes = 1024\n\
         gemm = { m = 1, k = 256, n = 256 }\n\n[[layer]]\nname = \"fc2\"\nparams = 2570\n\
         flops_forward = 5120\nflops_backward = 10240\nactivation_bytes = 40\n",
    )
    .unwrap();
    let out = tessera(&[
        "plan",
        "--model",
        model.to_str().unwrap(),
        "--ipu",
        "bow",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    assert!(stdout(&out).contains("two layers"), "{}", stdout(&out));
    assert!(stdout(&out).contains("Bow"), "{}", stdout(&out));
    assert!(stdout(&out).contains("scaling.svg"), "{}", stdout(&out));
    let chart = std::fs::read_to_string(&svg).unwrap();
    assert!(
        chart.starts_with("<svg"),
        "{}",
        &chart[..chart.len().min(80)]
    );
    // The step's parts per Pod size, stacked.
    for text in ["POD16 (100.0%)", "POD256", "all-reduce (IPU-Links)", "sync"] {
        assert!(chart.contains(text), "{text}");
    }
    // The trainer's MLP, priced as the simulator prices it.
    let v = json(&["--model", "mlp", "--assumptions", "simulator"]);
    assert_eq!(v["assumptions"]["matmul_plan"], "simulator");
    assert_eq!(v["replicas"], 16);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plan_cli_bad_input_exits_with_status_2_and_one_line() {
    let dir = scratch("bad");
    let path = |name: &str| dir.join(name).to_str().unwrap().to_owned();
    std::fs::write(
        path("typo.toml"),
        "input_bytes = 4\n[[layer]]\nname = \"fc\"\nparams = 1\nflops_forward = 2\n\
         flops_backwards = 2\nactivation_bytes = 2\n",
    )
    .unwrap();
    std::fs::write(path("broken.toml"), "input_bytes = [4,\n").unwrap();
    let (typo, broken, absent) = (path("typo.toml"), path("broken.toml"), path("absent.toml"));
    // Arguments split at spaces (the scratch paths have none).
    let cases: [(String, &str); 20] = [
        (String::new(), "--model"),
        ("--model resnet".into(), "unknown model"),
        ("--model mlp:1:2".into(), "mlp:INPUTS"),
        (
            "--model mlp:64:8:1".into(),
            "1 classes; a classifier needs at least 2",
        ),
        (format!("--model {typo}"), "layer 0 (`fc`)"),
        (format!("--model {typo}"), "flops_backwards"),
        (format!("--model {broken}"), "broken.toml"),
        (format!("--model {absent}"), "absent.toml"),
        (
            "--model resnet50 --device-iterations 0".into(),
            "--device-iterations",
        ),
        ("--model resnet50 --collectives fastest".into(), "gcl"),
        ("--model resnet50 --replicas 17".into(), "the Pod has 16"),
        (
            "--model resnet50 --ipus-per-replica 4 --replicas 8".into(),
            "32 IPUs",
        ),
        (
            "--model bert-large-128 --ipus-per-replica 4 --gradient-accumulation 2".into(),
            "pipeline stages",
        ),
        (
            "--model mlp --ipus-per-replica 4".into(),
            "every stage needs a layer",
        ),
        (
            "--model resnet50 --ipus-per-replica 3".into(),
            "power of two",
        ),
        (
            "--model resnet50 --micro-batch 0".into(),
            "invalid value '0' for '--micro-batch <N>': expected a whole number >= 1",
        ),
        ("--model resnet50 --precision 8.8".into(), "8.8"),
        ("--model resnet50 --pod pod100".into(), "100"),
        ("--model resnet50 --schedule 1f1b".into(), "1f1b"),
        // Issue 24: a schedule without a pipeline to schedule.
        (
            "--model mlp --schedule grouped".into(),
            "--schedule grouped schedules a pipeline",
        ),
    ];
    for (extra, needle) in &cases {
        let mut args = vec!["plan"];
        args.extend(extra.split_whitespace());
        let out = tessera(&args);
        assert_usage_error(&out, extra, needle);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 12: a layer of 2^64 - 1 parameters and FLOPs printed "inf s",
/// "NaN%" and an efficiency of 100% with status 0; FLOPs that contradict
/// the layer's gemm were taken silently.
#[test]
fn plan_cli_refuses_overflowing_and_contradictory_tables() {
    let dir = scratch("overflow");
    let max = u64::MAX;
    let table = |fields: &str| {
        format!(
            "input_bytes = 1028\n[[layer]]\nname = \"fc1\"\n{fields}\n\
             gemm = {{ m = 1, k = 256, n = 256 }}\n"
        )
    };
    let huge = dir.join("huge.toml");
    std::fs::write(
        &huge,
        table(&format!(
            "params = {max}\nflops_forward = {max}\nflops_backward = {max}\n\
             activation_bytes = 1024"
        )),
    )
    .unwrap();
    let contradicts = dir.join("contradicts.toml");
    std::fs::write(
        &contradicts,
        table("params = 65792\nflops_forward = 5\nflops_backward = 5\nactivation_bytes = 1024"),
    )
    .unwrap();
    for (path, needle) in [
        (
            &huge,
            format!(
                "{}: layer 0 (`fc1`): field `params` is {max}, above the planner's limit of \
                 2^53 = 9007199254740992",
                huge.display()
            ),
        ),
        (
            &contradicts,
            format!(
                "{}: layer 0 (`fc1`): field `flops_forward` is 5, but its gemm (m 1, k 256, \
                 n 256) is 2 m k n = 131072 FLOPs",
                contradicts.display()
            ),
        ),
    ] {
        for json in [false, true] {
            let mut args = vec!["plan", "--model", path.to_str().unwrap()];
            if json {
                args.push("--json");
            }
            assert_usage_error(&tessera(&args), &needle, &needle);
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plan_cli_plans_resnet_mini_by_its_widths_and_blocks() {
    let v = json(&["--model", "resnet-mini", "--micro-batch", "4"]);
    // resnet-mini 16,32 / 1,1 on 1x8x8 digits: convolutions 9 x 16 +
    // 2 x 9 x 16 x 16 + 9 x 16 x 32 + 2 x 9 x 32 x 32, six batch norms
    // 2 x (3 x 16 + 3 x 32), the head 32 x 10 + 10.
    assert_eq!(v["model"], "network 1x8x8 conv 16,16,16,32,32,32 head 10");
    assert_eq!(v["params"], 27_792 + 288 + 330);
    let wide = json(&[
        "--model",
        "resnet-mini",
        "--widths",
        "8,16,32",
        "--blocks",
        "1,0,2",
    ]);
    assert_eq!(
        wide["model"],
        "network 1x8x8 conv 8,8,8,16,32,32,32,32,32 head 10"
    );
    // Priced on the simulator: every row.
    let v = json(&[
        "--model",
        "resnet-mini",
        "--micro-batch",
        "4",
        "--layer-costs",
        "simulated",
    ]);
    assert_eq!(v["calibration"]["simulated_rows"], 16);
    for (args, needle) in [
        (&["--model", "resnet50", "--widths", "8"][..], "--widths"),
        (
            &[
                "--model",
                "resnet-mini",
                "--widths",
                "8,16",
                "--blocks",
                "1",
            ],
            "as many block counts",
        ),
        (&["--model", "resnet-mini", "--widths", "0"], "widths"),
    ] {
        let mut all = vec!["plan"];
        all.extend(args);
        assert_usage_error(&tessera(&all), &args.join(" "), needle);
    }
}
