//! Tests of network files: the docs' example, every key and error.

use super::*;
use crate::model::network::NetLayer;
use crate::model::shapes::{Pool2d, PoolKind};

/// The module docs' example.
pub(super) fn docs_example() -> String {
    include_str!("../network_file.rs")
        .lines()
        .filter_map(|l| l.strip_prefix("//!"))
        .map(|l| l.strip_prefix(' ').unwrap_or(l))
        .skip_while(|l| *l != "```toml")
        .skip(1)
        .take_while(|l| *l != "```")
        .map(|l| format!("{l}\n"))
        .collect()
}

#[test]
fn the_module_docs_example_parses_to_its_network() {
    let f = NetworkFile::from_toml_str(&docs_example(), "docs").unwrap();
    assert_eq!(f.name, "tiny-net");
    assert!(f.classes_given);
    let conv = |padding| NetLayer::Conv {
        channels: 8,
        kernel: 3,
        stride: 1,
        padding,
    };
    let expected = NetworkConfig {
        input: [1, 8, 8],
        layers: vec![
            conv(1),
            NetLayer::Residual(vec![NetLayer::BnAct, conv(1)]),
            NetLayer::Pool(Pool2d {
                kind: PoolKind::Max,
                kernel: (2, 2),
                stride: 2,
                padding: 0,
            }),
            NetLayer::Branches(vec![
                vec![NetLayer::BnAct, conv(1)],
                vec![
                    NetLayer::BnAct,
                    NetLayer::Conv {
                        channels: 8,
                        kernel: 1,
                        stride: 1,
                        padding: 0,
                    },
                ],
            ]),
            NetLayer::BnAct,
            NetLayer::GlobalAvgPool,
        ],
        classes: 10,
        activation: Activation::Relu,
        bn_group: BnGroup::Replica,
    };
    assert_eq!(f.network, expected);
}

fn error(from: &str, to: &str) -> NetworkFileError {
    let text = docs_example();
    assert!(text.contains(from), "{from}");
    NetworkFile::from_toml_str(&text.replacen(from, to, 1), "n.toml").unwrap_err()
}

/// The line and the layer an error names.
fn line_and_layer(e: &NetworkFileError) -> (Option<usize>, Option<(usize, String)>) {
    let (line, layer) = match e {
        NetworkFileError::Parse { line, layer, .. }
        | NetworkFileError::Field { line, layer, .. } => {
            (*line, layer.first().map(|s| s.layer.clone()))
        }
        _ => panic!("{e:?}"),
    };
    (line, layer.map(|l| (l.index, l.name.unwrap_or_default())))
}

#[test]
fn errors_name_the_file_the_line_the_layer_and_the_key() {
    for (from, to, line, layer, key) in [
        (
            "channels = 8\n",
            "chanels = 8\n",
            9,
            Some((0, "conv")),
            "chanels",
        ),
        (
            "stride = 1 ",
            "stride = -1 ",
            11,
            Some((0, "conv")),
            "`stride`",
        ),
        (
            "padding = 1 ",
            "padding = \"one\" ",
            12,
            Some((0, "conv")),
            "`padding`",
        ),
        (
            "kernel = 2\n",
            "\n",
            21,
            Some((2, "max_pool")),
            "`kernel` is missing",
        ),
        (
            "kind = \"bn_act\"\n",
            "kind = \"bn\"\n",
            32,
            Some((4, "bn")),
            "`kind` is `bn`",
        ),
        (
            "kind = \"bn_act\"\n",
            "kind = \"bn_act\"\nkernel = 3\n",
            32,
            Some((4, "bn_act")),
            "`kernel` is not a key of `bn_act`",
        ),
        ("input = [1, 8, 8]", "input = [1, 8]", 2, None, "input"),
        (
            "activation = \"relu\"",
            "activation = \"tanh\"",
            4,
            None,
            "tanh",
        ),
    ] {
        let e = error(from, to);
        let text = e.to_string();
        let (at_line, at_layer) = line_and_layer(&e);
        assert_eq!(at_line, Some(line), "{text}");
        assert!(
            text.starts_with(&format!("n.toml: line {line}: ")),
            "{text}"
        );
        let layer = layer.map(|(i, k): (usize, &str)| (i, k.to_owned()));
        assert_eq!(at_layer, layer, "{text}");
        assert!(text.contains(key), "{key}: {text}");
        assert!(!text.contains('\n'), "{text}");
    }
    // Within an inline residual body: the line and the key.
    let e = error(
        "{ kind = \"conv\", channels = 8,",
        "{ kind = \"conv\", channels = -8,",
    );
    let text = e.to_string();
    assert!(
        text.contains("line 18: layer 1 (`residual`): body layer 1 (`conv`): `channels`"),
        "{text}"
    );
}

#[test]
fn sizes_out_of_range_name_the_layer_and_the_field() {
    let e = error("padding = 1 ", "padding = 4097 ");
    assert_eq!(
        e.to_string(),
        "n.toml: line 7: layer 0 (`conv`): field `padding` is 4097: expected 0 to 4096"
    );
    let e = error("channels = 8, kernel", "channels = 0, kernel");
    assert_eq!(
        e.to_string(),
        "n.toml: line 18: layer 1 (`residual`): body layer 1 (`conv`): field `channels` is 0: \
         expected 1 to 4096"
    );
    let e = error("input = [1, 8, 8]", "input = [1, 0, 8]");
    assert!(e.to_string().contains("field `input` is 0"), "{e}");
    let e = error("classes = 10", "classes = 0");
    assert!(e.to_string().contains("field `classes` is 0"), "{e}");
}

#[test]
fn networks_the_trainer_refuses_name_the_layer() {
    // The body's convolution changes the channels.
    let e = error("channels = 8, kernel", "channels = 4, kernel");
    let NetworkFileError::Network { layer, .. } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(layer[0].layer.name.as_deref(), Some("residual"), "{e}");
    // A kernel larger than its input, in the body.
    let e = error(
        "channels = 8, kernel = 3, padding = 1",
        "channels = 8, kernel = 30, padding = 1",
    );
    assert!(
        e.to_string()
            .starts_with("n.toml: line 18: layer 1 (`residual`): body layer 1 (`conv`): "),
        "{e}"
    );
    // No global pooling: the head.
    let e = error("kind = \"global_avg_pool\"", "kind = \"bn_act\"");
    assert!(e.to_string().contains("global average pool"), "{e}");
    // Feature maps that grow past the limit.
    let e = error("padding = 1 ", "padding = 3000 ");
    assert!(
        e.to_string()
            .starts_with("n.toml: line 7: layer 0 (`conv`): makes 6006x6006"),
        "{e}"
    );
}

#[test]
fn a_cost_table_is_told_apart() {
    let e = NetworkFile::from_toml_str("input_bytes = 4\n[[layer]]\nname = \"a\"\n", "t.toml")
        .unwrap_err();
    assert_eq!(
        e,
        NetworkFileError::CostTable {
            origin: "t.toml".into()
        }
    );
    assert!(e.to_string().contains("describes costs"), "{e}");
}

#[test]
fn errors_within_a_branch_name_the_branch_and_its_layer() {
    let e = error("channels = 8, kernel = 1 }", "channels = 8, kernel = 0 }");
    assert_eq!(
        e.to_string(),
        "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): field `kernel` \
         is 0: expected 1 to 4096"
    );
    let e = error(
        "[{ kind = \"bn_act\" }, { kind = \"conv\", channels = 8, kernel = 1",
        "[{ kind = \"bn_act\", kernel = 1 }, { kind = \"conv\", channels = 8, kernel = 1",
    );
    assert_eq!(
        e.to_string(),
        "n.toml: line 29: layer 3 (`branches`): branch 1 layer 0 (`bn_act`): field `kernel` \
         is not a key of `bn_act` (it takes none)"
    );
    let e = error(
        "kind = \"conv\", channels = 8, kernel = 1",
        "kind = \"conv\", kernel = 1",
    );
    assert_eq!(
        e.to_string(),
        "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): field `channels` \
         is missing (`conv` needs it)"
    );
    let e = error("kind = \"branches\" ", "kind = \"residual\" ");
    assert_eq!(
        e.to_string(),
        "n.toml: line 25: layer 3 (`residual`): field `branches` is not a key of `residual` \
         (it takes body)"
    );
    // A branch's layers cannot be a residual's body.
    let e = error("branches = [  ", "body = [  ");
    assert!(
        e.to_string()
            .starts_with("n.toml: line 28: layer 3 (`branches`): invalid type"),
        "{e}"
    );
    // The parser's errors: an unknown key, a negative size.
    let e = error("channels = 8, kernel = 1 }", "channels = 8, kernal = 1 }");
    assert!(
        e.to_string().starts_with(
            "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): unknown field \
             `kernal`"
        ),
        "{e}"
    );
    let e = error("channels = 8, kernel = 1 }", "channels = -8, kernel = 1 }");
    assert!(
        e.to_string().starts_with(
            "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): `channels`: "
        ),
        "{e}"
    );
    // A layer without a kind is named by its position alone.
    let e = error(
        "{ kind = \"conv\", channels = 8, kernel = 1",
        "{ channels = 8, kernel = 1",
    );
    assert!(
        e.to_string().starts_with(
            "n.toml: line 29: layer 3 (`branches`): branch 1 layer 1: missing field `kind`"
        ),
        "{e}"
    );
    // A residual within a branch, its body checked too.
    let e = error(
        "[{ kind = \"bn_act\" }, { kind = \"conv\", channels = 8, kernel = 1 }]",
        "[{ kind = \"residual\", body = [{ kind = \"pool\" }] }]",
    );
    assert!(
        e.to_string().starts_with(
            "n.toml: line 29: layer 3 (`branches`): branch 1 layer 0 (`residual`): body \
             layer 0 (`pool`): field `kind` is `pool`: expected one of conv, bn_act, \
             max_pool, avg_pool, global_avg_pool, residual, branches"
        ),
        "{e}"
    );
    // A branches block within a residual body.
    let e = error(
        "{ kind = \"bn_act\" },       #",
        "{ kind = \"branches\", branches = [[], [{ kind = \"conv\", channels = 8, kernel = 1, stride = 0 }]] }, #",
    );
    assert_eq!(
        e.to_string(),
        "n.toml: line 17: layer 1 (`residual`): body layer 0 (`branches`): branch 1 layer 0 \
         (`conv`): field `stride` is 0: expected 1 to 4096"
    );
}

#[test]
fn branches_the_trainer_refuses_name_the_layer() {
    // One branch only.
    let e = error(
        "  [{ kind = \"bn_act\" }, { kind = \"conv\", channels = 8, kernel = 1 }],\n",
        "",
    );
    assert_eq!(
        e.to_string(),
        "n.toml: line 25: layer 3 (`branches`): parallel branches need at least two, got 1"
    );
    // Branches ending at different sizes: 4x4 and 2x2.
    let e = error(
        "channels = 8, kernel = 1 }",
        "channels = 8, kernel = 1, stride = 2 }",
    );
    assert_eq!(
        e.to_string(),
        "n.toml: line 25: layer 3 (`branches`): branch 1 ends at 2x2, branch 0 at 4x4: branches are \
         concatenated by channels and must end at one height and width"
    );
    // A kernel larger than its input, in a branch.
    let e = error("channels = 8, kernel = 1 }", "channels = 8, kernel = 5 }");
    assert!(
        e.to_string()
            .starts_with("n.toml: line 29: layer 3 (`branches`): branch 1 layer 1 (`conv`): "),
        "{e}"
    );
    // After the concat: the layers see the branches' channels summed.
    let e = error(
        "kind = \"bn_act\"\n",
        "kind = \"residual\"\nbody = [{ kind = \"conv\", channels = 8, kernel = 1 }]\n",
    );
    assert!(
        e.to_string()
            .starts_with("n.toml: line 32: layer 4 (`residual`): a residual body turns 16x"),
        "{e}"
    );
}
