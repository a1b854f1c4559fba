//! Tests: the quantised precisions on the command line: a run's records
//! carry each quantised operand's scale and lost values, `scales.svg` is
//! drawn beside `loss.svg`, the summary says what rounds where, and bad
//! recipes are one-line usage errors.

use crate::cli::{report, train};
use crate::command::{assert_usage_error, scratch, stdout, tessera};

#[test]
fn a_quantised_run_records_its_scales_and_draws_them() {
    let dir = scratch("fp8-scales");
    let args = [
        "--precision",
        "8.16",
        "--ipu",
        "c600",
        "--epochs",
        "1",
        "--json",
    ];
    let out = train(&dir, &args);
    // The C600 runs the FP8 products on its FP8 units.
    let products = report(&out)["products"].clone();
    assert_eq!(products["ipu"], "C600", "{products}");
    for p in products["products"].as_array().unwrap() {
        assert_eq!(
            (&p["path"], &p["kernel"]),
            (&"FP8 units".into(), &"matmul_f8".into())
        );
    }
    let files = report(&out)["files"].clone();
    let scales = files["scales_chart"].as_str().expect("scales.svg written");
    assert!(
        std::fs::read_to_string(scales)
            .unwrap()
            .contains("layer0.fwd.weights")
    );
    let metrics = std::fs::read_to_string(files["metrics"].as_str().unwrap()).unwrap();
    let step: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
    let quant = step["quant"].as_array().expect("quant records");
    // Two layers, each forward (2 operands) and dW (2); dA of layer 1 (2).
    assert_eq!(quant.len(), 10, "{quant:?}");
    for q in quant {
        assert!(q["exponent"].is_i64() && q["saturated"] == 0, "{q}");
    }
    let mxfp4_f16 = [
        "--precision",
        "mxfp4.16",
        "--epochs",
        "1",
        "--quant-accumulate",
        "f16:32",
    ];
    let out = train(&dir, &mxfp4_f16);
    let text = stdout(&out);
    assert!(text.contains("numerics     products of weights e2m1:nearest:mx"));
    assert!(text.contains("(f16:32 accumulator)"), "{text}");
    assert!(text.contains(
        "products     converted to FP16 (no FP8 units for this format) on the Mk2 GC200"
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_recipes_are_one_line_usage_errors() {
    let run = |args: &[&str]| {
        let mut all = vec!["train", "--no-progress", "--epochs", "1"];
        all.extend(args);
        tessera(&all)
    };
    assert_usage_error(&run(&["--precision", "8.8"]), "8.8", "unknown precision");
    assert_usage_error(
        &run(&["--precision", "mxfp4.32"]),
        "mxfp4.32",
        "unknown precision",
    );
    let bad = ["--precision", "8.16", "--quant-weights", "e9m9"];
    assert_usage_error(&run(&bad), "e9m9", "unknown format");
    let not_mx = [
        "--precision",
        "mxfp8.16",
        "--quant-gradients",
        "f152:nearest:mx",
    ];
    assert_usage_error(&run(&not_mx), "f152 mx", "not an MX element format");
    let delayed0 = [
        "--precision",
        "8.16",
        "--quant-activations",
        "e4m3:nearest:delayed0",
    ];
    assert_usage_error(&run(&delayed0), "delayed0", "unknown scaling");
    let half = ["--precision", "16.16", "--quant-weights", "e4m3"];
    assert_usage_error(&run(&half), "16.16 recipe", "quantises no products");
    let half_acc = ["--precision", "16.16", "--quant-accumulate", "f16"];
    assert_usage_error(&run(&half_acc), "16.16 acc", "quantises no products");
    let acc = ["--precision", "8.16", "--quant-accumulate", "f8"];
    assert_usage_error(&run(&acc), "f8 accumulator", "unknown accumulator");
    let not_e2m1 = [
        "--precision",
        "8.16",
        "--quant-weights",
        "e4m3:nearest:nvfp4",
    ];
    assert_usage_error(&run(&not_e2m1), "e4m3 nvfp4", "not NVFP4's element format");
}
