//! Tests: the `tessera` command with `--model resnet-mini`: `scale`
//! prints bitwise identical curves from 1 to 16 replicas, a bad model
//! is one line and status 2, resnet-mini's options are refused for the
//! MLP and the MLP's for resnet-mini; resnet-mini pipelined or sharded
//! over 2 IPUs trains the data-parallel fingerprint, and a bad device
//! mapping names its block; a network file (the shipped
//! `docs/resnet-mini.toml`) trains, resumes and plans as the built-in, and
//! its errors are one line and status 2; resnet-mini with parallel
//! branches (`--branches`) pipelined trains the data-parallel fingerprint,
//! and from its file (`docs/resnet-mini-branches.toml`) the built-in's.

use std::process::{Command, Output};

use crate::cli::{fingerprint, report};
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
            &["--branches", "4"][..],
            "--branches is an option of --model resnet-mini",
        ),
        (
            &["--model", "resnet-mini", "--branches", "0"][..],
            "expected a whole number >= 1",
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

#[test]
fn train_pipelines_resnet_mini_bitwise_as_data_parallel() {
    let dir = scratch("pipeline-resnet");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--runs-dir",
            dir.to_str().expect("UTF-8 path"),
            "--model",
            "resnet-mini",
            "--widths",
            "4,8",
            "--blocks",
            "1,1",
            "--data",
            "images:96:1x6x6:3:1",
            "--instances",
            "1",
            "--replication-factor",
            "2",
            "--micro-batch",
            "2",
            "--gradient-accumulation",
            "4",
            "--epochs",
            "1",
            "--no-progress",
            "--json",
            "--overwrite",
        ];
        args.extend(extra);
        tessera(&args)
    };
    let reference = fingerprint(&run(&[]));
    assert_eq!(fingerprint(&run(&["--ipus-per-replica", "2"])), reference);
    for schedule in ["grouped", "interleaved", "sequential"] {
        for recompute in ["false", "true"] {
            let out = run(&[
                "--pipeline-stages",
                "2",
                "--schedule",
                schedule,
                &format!("--recompute={recompute}"),
            ]);
            assert_eq!(fingerprint(&out), reference, "{schedule} {recompute}");
            let stashes = &report(&out)["memory"]["activation_stashes"];
            assert_eq!(stashes.as_array().map(Vec::len), Some(2), "{stashes}");
        }
    }
    // Recomputation from checkpoints on one IPU: the same bits, the
    // segments and memory in the report.
    let out = run(&["--recompute", "--recompute-checkpoints", "1,3"]);
    assert_eq!(fingerprint(&out), reference);
    let r = &report(&out)["memory"]["recomputation"];
    assert_eq!(r["segments"].as_array().map(Vec::len), Some(3), "{r}");
    assert!(
        r["kept_per_tile"].as_u64() < r["activations_per_tile"].as_u64(),
        "{r}"
    );
    for (bad, needle) in [
        ("8", "recomputation checkpoint 8 is not a block boundary"),
        ("3,2", "recomputation checkpoint 2 follows 3"),
        ("0", "expected a whole number"),
    ] {
        let out = run(&["--recompute", "--recompute-checkpoints", bad]);
        assert_usage_error(&out, bad, needle);
    }
    let mapping = ["--pipeline-stages", "2", "--device-mapping"];
    let out = run(&[&mapping[..], &["0,0,0,0,0,1,1,1"]].concat());
    assert_eq!(fingerprint(&out), reference);
    // resnet-mini of two stages has 8 blocks: stem, residual, batch
    // norm, the strided convolution, residual, batch norm, pool, head.
    for (bad, needle) in [
        ("0,1", "the network needs 8"),
        (
            "0,0,0,2,1,1,1,1",
            "block 3 (conv 3x3 s2 -> 8) is mapped to IPU 2",
        ),
        ("0,1,0,1,1,1,1,1", "block 2 (batch norm) is on IPU 0"),
    ] {
        let out = run(&[&mapping[..], &[bad]].concat());
        assert_usage_error(&out, bad, needle);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The shipped file `docs/{name}`.
fn docs_file(name: &str) -> String {
    format!("{}/docs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The shipped network file: `docs/resnet-mini.toml`.
fn resnet_mini_file() -> String {
    docs_file("resnet-mini.toml")
}

/// Two epochs of `--model` `model` (and `extra`) on 64 8x8 images of 10
/// classes over 2 replicas, in `runs` as `name`: the run's output.
fn train_tiny(runs: &str, model: &[&str], name: &str, extra: &[&str]) -> Output {
    train_tiny_on("images:64:1x8x8:10:1", runs, model, name, extra)
}

/// [`train_tiny`] on the data set `data`.
fn train_tiny_on(data: &str, runs: &str, model: &[&str], name: &str, extra: &[&str]) -> Output {
    let mut args = vec!["train", "--model"];
    args.extend(model);
    args.extend([
        "--epochs",
        "2",
        "--data",
        data,
        "--micro-batch",
        "2",
        "--instances",
        "1",
        "--replication-factor",
        "2",
        "--runs-dir",
        runs,
        "--name",
        name,
        "--no-progress",
        "--json",
    ]);
    args.extend(extra);
    let out = tessera(&args);
    assert!(out.status.success(), "{name}: {}", stderr(&out));
    out
}

#[test]
fn a_network_file_trains_as_the_builtin_and_resumes_from_its_config() {
    let dir = scratch("network-file");
    let runs = dir.to_str().unwrap();
    let file = resnet_mini_file();
    let train = |model: &str, name: &str, extra: &[&str]| train_tiny(runs, &[model], name, extra);
    let builtin = fingerprint(&train("resnet-mini", "builtin", &[]));
    assert_eq!(fingerprint(&train(&file, "file", &[])), builtin);
    // Without `classes` the head takes the data's: 5 classes here.
    let headless = dir.join("headless.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    let text: String = text
        .lines()
        .filter(|l| !l.starts_with("classes"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(&headless, text).unwrap();
    let five = |model: &str, name: &str| {
        fingerprint(&train_tiny_on(
            "images:64:1x8x8:5:1",
            runs,
            &[model],
            name,
            &[],
        ))
    };
    assert_eq!(
        five(headless.to_str().unwrap(), "headless"),
        five("resnet-mini", "builtin5")
    );
    // config.toml records the file's absolute path: the run interrupted
    // and resumed from it (elsewhere) finishes bitwise as the whole run.
    train(&file, "part", &["--stop-after-epochs", "1"]);
    let config = dir.join("part/config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains(&format!("model = \"{file}\"")), "{text}");
    let checkpoint = dir.join("part/checkpoint.safetensors");
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .current_dir(std::env::temp_dir())
        .arg("train")
        .arg("--config")
        .arg(&config)
        .arg("--resume")
        .arg(&checkpoint)
        .args([
            "--runs-dir",
            runs,
            "--name",
            "part",
            "--no-progress",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(fingerprint(&out), builtin);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_network_file_with_branches_trains_as_the_builtin_with_branches() {
    let dir = scratch("network-file-branches");
    let runs = dir.to_str().unwrap();
    let file = docs_file("resnet-mini-branches.toml");
    let builtin = train_tiny(runs, &["resnet-mini", "--branches", "8"], "builtin", &[]);
    let from_file = train_tiny(runs, &[&file], "file", &[]);
    assert_eq!(fingerprint(&from_file), fingerprint(&builtin));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn plan_prices_a_network_file_as_the_builtin() {
    let plan = |model: &[&str]| {
        let mut args = vec!["plan", "--model"];
        args.extend(model);
        let out = tessera(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).to_owned()
    };
    let (builtin, file) = (plan(&["resnet-mini"]), plan(&[&resnet_mini_file()]));
    let rest = |text: &str| text.lines().skip(1).collect::<Vec<_>>().join("\n");
    assert!(
        file.starts_with("plan         resnet-mini on POD16"),
        "{file}"
    );
    assert_eq!(rest(&file), rest(&builtin));
    // `--branches` as `train --branches`: the file of the same network.
    let branched = plan(&["resnet-mini", "--branches", "8"]);
    let file = plan(&[&docs_file("resnet-mini-branches.toml")]);
    assert_eq!(rest(&file), rest(&branched));
    assert_ne!(rest(&branched), rest(&builtin));
    for (model, needle) in [
        (
            "mlp",
            "--branches is an option of --model resnet-mini, not of mlp",
        ),
        ("resnet-mini", "expected a whole number >= 1"),
    ] {
        let branches = if model == "mlp" { "8" } else { "0" };
        let out = tessera(&["plan", "--model", model, "--branches", branches]);
        assert_usage_error(&out, model, needle);
    }
}

#[test]
fn network_file_errors_are_one_line_with_status_2() {
    let dir = scratch("network-file-usage");
    let costs = dir.join("costs.toml");
    std::fs::write(
        &costs,
        "input_bytes = 4\n[[layer]]\nname = \"a\"\nparams = 1\nflops_forward = 1\n\
         flops_backward = 1\nactivation_bytes = 1\n",
    )
    .unwrap();
    let bad = dir.join("bad.toml");
    std::fs::write(
        &bad,
        "input = [1, 8, 8]\n[[layer]]\nkind = \"conv\"\nchannels = 4\nkernel = 9\n",
    )
    .unwrap();
    // docs/training.md's example of an error within a branch.
    let typo = dir.join("typo.toml");
    let branches = std::fs::read_to_string(docs_file("resnet-mini-branches.toml")).unwrap();
    let needle = "channels = 8, kernel = 1 }";
    assert!(branches.contains(needle));
    std::fs::write(
        &typo,
        branches.replace(needle, "channels = 8, kernal = 1 }"),
    )
    .unwrap();
    let file = resnet_mini_file();
    let five = dir.join("five.toml");
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.contains("\nclasses = 10 "));
    std::fs::write(&five, text.replace("\nclasses = 10 ", "\nclasses = 5 ")).unwrap();
    let (costs, bad) = (costs.to_str().unwrap(), bad.to_str().unwrap());
    let (typo, five) = (typo.to_str().unwrap(), five.to_str().unwrap());
    for (extra, needle) in [
        (&["--model", costs][..], "describes costs"),
        (
            &["--model", bad][..],
            "bad.toml: line 2: layer 0 (`conv`): Conv2d",
        ),
        (
            &["--model", typo][..],
            "typo.toml: line 57: layer 5 (`branches`): branch 1 layer 1 (`conv`): unknown field \
             `kernal`",
        ),
        (
            &["--model", &file, "--widths", "8"][..],
            "--widths is not an option",
        ),
        (
            &["--model", &file, "--branches", "2"][..],
            "--branches is not an option",
        ),
        (
            &["--model", &file, "--hidden", "8"][..],
            "--hidden is not an option",
        ),
        (
            &["--model", &file, "--data", "images:64:3x8x8:10"][..],
            "the data's images are [3, 8, 8]",
        ),
        (&["--model", "net.json"][..], "a network FILE.toml"),
        (
            &["--model", five][..],
            "five.toml: its head has 5 classes (`classes`) but the data has 10",
        ),
    ] {
        let mut args = vec![
            "train",
            "--runs-dir",
            dir.to_str().unwrap(),
            "--no-progress",
        ];
        args.extend(extra);
        assert_usage_error(&tessera(&args), &format!("{extra:?}"), needle);
    }
    // The planner still reads the table of costs.
    assert!(tessera(&["plan", "--model", costs]).status.success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resnet_mini_with_branches_trains_pipelined_bitwise_as_data_parallel() {
    let dir = scratch("branches-resnet");
    let run = |extra: &[&str]| {
        let job = "--model resnet-mini --widths 4 --blocks 1 --branches 2 \
                   --data images:48:1x6x6:3:1 --instances 1 --replication-factor 2 \
                   --micro-batch 2 --gradient-accumulation 4 --epochs 1 --no-progress \
                   --json --overwrite";
        let mut args = vec!["train", "--runs-dir", dir.to_str().expect("UTF-8 path")];
        args.extend(job.split_whitespace());
        args.extend(extra);
        tessera(&args)
    };
    let reference = run(&[]);
    // The effective configuration keeps the branches.
    assert_eq!(report(&reference)["config"]["branches"], 2);
    // Blocks: stem, residual, the branches, batch norm, pool, head; the
    // branches whole on IPU 1.
    let mapping = ["--pipeline-stages", "2", "--device-mapping", "0,0,1,1,1,1"];
    assert_eq!(fingerprint(&run(&mapping)), fingerprint(&reference));
    let out = run(&["--pipeline-stages", "2", "--device-mapping", "0,0,2,1,1,1"]);
    assert_usage_error(
        &out,
        "2 on IPU 2",
        "block 2 (2 parallel branches) is mapped to IPU 2",
    );
    // One IPU per branch: one concurrent stage (3 stages), or a stage per
    // branch (4); the data-parallel weights either way.
    let nested = [
        "--pipeline-stages",
        "4",
        "--device-mapping",
        "0,0,[1,2],3,3,3",
    ];
    let stages = |out: &Output| -> Vec<u64> {
        let stashes = &report(out)["memory"]["activation_stashes"];
        let stages = stashes.as_array().expect("a stash per stage part");
        stages
            .iter()
            .map(|a| a["stage"].as_u64().unwrap())
            .collect()
    };
    let concurrent = run(&nested);
    assert_eq!(fingerprint(&concurrent), fingerprint(&reference));
    assert_eq!(stages(&concurrent), [0, 1, 1, 2]);
    assert_eq!(
        report(&concurrent)["config"]["device_mapping"],
        serde_json::json!([0, 0, [1, 2], 3, 3, 3])
    );
    let serial = run(&[&nested[..], &["--serial-branches"]].concat());
    assert_eq!(fingerprint(&serial), fingerprint(&reference));
    assert_eq!(stages(&serial), [0, 1, 2, 3]);
    // The run's config.toml keeps the nested mapping as TOML arrays.
    let config = std::fs::read_to_string(dir.join("default/config.toml")).unwrap();
    assert!(
        config.contains("device_mapping = [0, 0, [1, 2], 3, 3, 3]"),
        "{config}"
    );
    assert!(config.contains("serial_branches = true"), "{config}");
    for (mapping, needle) in [
        ("0,0,[1,2", "a `[` without its `]`"),
        (
            "0,[0,1],1,2,3,3",
            "block 1 (residual block) is mapped to IPUs [0, 1]",
        ),
        (
            "0,0,[1,2,3],3,3,3",
            "a concurrent stage needs 2 different IPUs",
        ),
    ] {
        let out = run(&["--pipeline-stages", "4", "--device-mapping", mapping]);
        assert_usage_error(&out, mapping, needle);
    }
    // Nothing to serialise without a pipeline.
    let out = run(&["--serial-branches"]);
    assert_usage_error(
        &out,
        "--serial-branches",
        "--serial-branches applies to a pipelined",
    );
    let _ = std::fs::remove_dir_all(&dir);
}
