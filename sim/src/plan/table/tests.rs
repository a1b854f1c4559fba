//! The table's files and checks.

use super::*;

const GOOD: &str = r#"
name = "two"
input_bytes = 1028

[[layer]]
name = "fc1"
params = 65792
flops_forward = 131072
flops_backward = 131072
activation_bytes = 1024
gemm = { m = 1, k = 256, n = 256 }

[[layer]]
name = "fc2"
params = 2570
flops_forward = 5120
flops_backward = 10240
activation_bytes = 40
output_bytes = 20
"#;

#[test]
fn the_module_docs_example_parses() {
    let source = include_str!("../table.rs");
    let toml: String = source
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```toml")
        .skip(1)
        .take_while(|l| *l != "```")
        .map(|l| format!("{l}\n"))
        .collect();
    let t = ModelTable::from_toml_str(&toml, "docs").unwrap();
    assert_eq!(t.name(), "tiny");
    assert_eq!(t.layers().len(), 2);
    assert_eq!(t.layers()[1].tied.as_ref().unwrap().layer, "fc1");
}

#[test]
fn a_good_file_parses() {
    let t = ModelTable::from_toml_str(GOOD, "two.toml").unwrap();
    assert_eq!(t.name(), "two");
    assert_eq!(t.input_bytes(), 1028);
    assert_eq!(t.params(), 65792 + 2570);
    assert_eq!(t.flops_per_sample(), (131_072 + 5120, 131_072 + 10240));
    assert_eq!(t.layers()[0].boundary_bytes(), 512);
    assert_eq!(t.layers()[0].output_elements(), 256);
    assert_eq!(t.layers()[1].boundary_bytes(), 20);
    // Unnamed: the origin.
    let t = ModelTable::from_toml_str(&GOOD.replace("name = \"two\"", ""), "x.toml").unwrap();
    assert_eq!(t.name(), "x.toml");
}

#[test]
fn errors_name_the_file_the_line_the_layer_and_the_field() {
    let e = ModelTable::from_toml_str(
        &GOOD.replace("flops_backward = 10240", "flops_bakward = 1"),
        "m.toml",
    )
    .unwrap_err();
    let ModelTableError::Parse {
        line,
        layer,
        message,
        ..
    } = &e
    else {
        panic!("{e:?}");
    };
    assert_eq!(layer.as_ref().unwrap().index, 1);
    assert_eq!(layer.as_ref().unwrap().name.as_deref(), Some("fc2"));
    assert!(line.is_some());
    assert!(message.contains("flops_bakward"), "{message}");
    let text = e.to_string();
    assert!(text.starts_with("m.toml: line "), "{text}");
    assert!(text.contains("layer 1 (`fc2`)"), "{text}");

    // A missing key, a negative number, a wrong type.
    for (from, to, key) in [
        ("activation_bytes = 1024\n", "", "activation_bytes"),
        ("params = 65792", "params = -1", "params"),
        ("params = 65792", "params = \"many\"", "params"),
    ] {
        let e = ModelTable::from_toml_str(&GOOD.replace(from, to), "m.toml").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("layer 0 (`fc1`)"), "{text}");
        assert!(text.contains(key) || text.contains("invalid"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }
    // Top level.
    let e =
        ModelTable::from_toml_str(&GOOD.replace("input_bytes", "inputs"), "m.toml").unwrap_err();
    assert!(e.to_string().contains("inputs"), "{e}");
    let e = ModelTable::from_toml_str("input_bytes = 4\nlayer = []\n", "m.toml").unwrap_err();
    assert_eq!(
        e,
        ModelTableError::NoLayers {
            origin: "m.toml".into()
        }
    );
    let e = ModelTable::from_toml_str("input_bytes = [", "m.toml").unwrap_err();
    assert!(matches!(e, ModelTableError::Parse { .. }), "{e:?}");
}

#[test]
fn semantic_errors() {
    let e = ModelTable::from_toml_str(&GOOD.replace("m = 1,", "m = 0,"), "m.toml").unwrap_err();
    assert!(
        matches!(&e, ModelTableError::Field { field: "gemm", layer, .. } if layer.index == 0),
        "{e:?}"
    );
    let e = ModelTable::from_toml_str(&GOOD.replace("\"fc2\"", "\"fc1\""), "m.toml").unwrap_err();
    assert!(
        matches!(
            e,
            ModelTableError::DuplicateName {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{e:?}"
    );
    let tied = GOOD.replace(
        "output_bytes = 20",
        "output_bytes = 20\ntied = { layer = \"fc9\", params = 1 }",
    );
    let e = ModelTable::from_toml_str(&tied, "m.toml").unwrap_err();
    assert!(e.to_string().contains("tied.layer"), "{e}");
    let tied = GOOD.replace(
        "output_bytes = 20",
        "output_bytes = 20\ntied = { layer = \"fc1\", params = 100000 }",
    );
    let e = ModelTable::from_toml_str(&tied, "m.toml").unwrap_err();
    assert!(e.to_string().contains("tied.params"), "{e}");
    let big = format!(
        "{}\n[[layer]]\nname = \"fc3\"\nparams = {}\nflops_forward = 0\nflops_backward = 0\nactivation_bytes = 0\n",
        GOOD.replace("params = 2570", &format!("params = {}", i64::MAX)),
        i64::MAX
    );
    let e = ModelTable::from_toml_str(&big, "m.toml").unwrap_err();
    assert!(
        matches!(
            &e,
            ModelTableError::TooLarge {
                field: "params",
                layer: Some(LayerRef { index: 1, .. }),
                value,
                ..
            } if *value == i64::MAX as u64
        ),
        "{e:?}"
    );
}

/// A table with `fc1`'s `from` replaced by `to`.
fn edited(from: &str, to: &str) -> Result<ModelTable, ModelTableError> {
    assert!(GOOD.contains(from), "{from}");
    ModelTable::from_toml_str(&GOOD.replacen(from, to, 1), "m.toml")
}

#[test]
fn numbers_beyond_the_limit_are_refused_with_the_layer_field_and_value() {
    let max = u64::MAX.to_string();
    for field in [
        "params",
        "flops_forward",
        "flops_backward",
        "activation_bytes",
    ] {
        let line = GOOD
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap()
            .to_owned();
        let e = edited(&line, &format!("{field} = {max}")).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "m.toml: layer 0 (`fc1`): field `{field}` is {max}, above the planner's \
                 limit of 2^53 = 9007199254740992"
            )
        );
    }
    // Up to 2^53 in all is allowed.
    let limit = ModelTable::LIMIT;
    let t = edited("params = 65792", &format!("params = {}", limit - 2570)).unwrap();
    assert_eq!(t.params(), limit);
    let e = edited(
        "input_bytes = 1028",
        &format!("input_bytes = {}", limit + 1),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.toml: `input_bytes` is 9007199254740993, above the planner's limit of 2^53 = \
         9007199254740992"
    );
    // Each layer within the limit, the sum not.
    let half = limit / 2 + 1;
    let text = GOOD
        .replace("params = 65792", &format!("params = {half}"))
        .replace("params = 2570", &format!("params = {half}"));
    let e = ModelTable::from_toml_str(&text, "m.toml").unwrap_err();
    assert_eq!(
        e,
        ModelTableError::TooLarge {
            origin: "m.toml".into(),
            layer: None,
            field: "params",
            value: 2 * half,
        }
    );
    assert!(e.to_string().contains("the layers' total `params`"), "{e}");
    // A gemm whose 2 m k n is beyond it.
    let e = edited("m = 1, k = 256", &format!("m = {limit}, k = 256")).unwrap_err();
    assert!(
        matches!(e, ModelTableError::TooLarge { field: "gemm", .. }),
        "{e:?}"
    );
}

#[test]
fn flops_that_contradict_the_gemm_are_refused_with_both_numbers() {
    // fc1: gemm 1 x 256 x 256 is 131072 FLOPs.
    let e = edited("flops_forward = 131072", "flops_forward = 1").unwrap_err();
    assert_eq!(
        e.to_string(),
        "m.toml: layer 0 (`fc1`): field `flops_forward` is 1, but its gemm (m 1, k 256, \
         n 256) is 2 m k n = 131072 FLOPs: expected 129762 to 524288 (1% below to 4x the \
         product)"
    );
    // The tolerance's edges are accepted, one past them is not.
    for (fwd, ok) in [
        (129_762, true),
        (129_761, false),
        (524_288, true),
        (524_289, false),
    ] {
        let r = edited(
            "flops_forward = 131072\nflops_backward = 131072",
            &format!("flops_forward = {fwd}\nflops_backward = {fwd}"),
        );
        assert_eq!(r.is_ok(), ok, "{fwd}: {r:?}");
    }
    let e = edited("flops_backward = 131072", "flops_backward = 262145").unwrap_err();
    assert!(
        matches!(
            &e,
            ModelTableError::Field {
                field: "flops_backward",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(
        e.to_string().contains("262145") && e.to_string().contains("131072"),
        "{e}"
    );
    edited("flops_backward = 131072", "flops_backward = 262144").unwrap();
}
