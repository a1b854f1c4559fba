//! The checkpoint file: bitwise round trips, safetensors conformance,
//! digests, damaged files, wrong requests, atomic saves.

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use half::f16;
use tessera_sim::checkpoint::{
    Checkpoint, CheckpointError, DType, Damage, TensorData, check_finite, write_atomic,
};

use super::{Scratch, assert_bitwise_equal, entries, every_type, special_16, special_f32};

#[test]
fn every_type_round_trips_bitwise() {
    let scratch = Scratch::new("round-trip");
    let path = scratch.path("ckpt.safetensors");
    let saved = every_type();
    saved.save(&path).unwrap();
    let loaded = Checkpoint::load(&path).unwrap();
    assert_bitwise_equal(&saved, &loaded);

    // Loaded tensors come in name order, and the takes see the same bits.
    let names: Vec<&str> = loaded.tensors.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        ["empty", "seeds", "step", "w.bf16", "w.f16", "w.f32"]
    );
    let f32s = loaded.take_f32("w.f32", &[9, 7]).unwrap();
    let expected: Vec<u32> = special_f32().iter().map(|x| x.to_bits()).collect();
    let got: Vec<u32> = f32s[..expected.len()].iter().map(|x| x.to_bits()).collect();
    assert_eq!(got, expected);
    let f16s = loaded.take_f16("w.f16", &[11]).unwrap();
    assert_eq!(
        f16s.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        special_16(0x7c00)
    );
    let bf16s = loaded.take_bf16("w.bf16", &[1, 11]).unwrap();
    assert_eq!(
        bf16s.iter().map(|x| x.to_bits()).collect::<Vec<_>>(),
        special_16(0x7f80)
    );
    assert_eq!(loaded.take_u64("step", &[]).unwrap(), [u64::MAX - 1]);
    assert_eq!(
        loaded.take_u32("seeds", &[2, 2]).unwrap(),
        [0, 1, u32::MAX, 0x8000_0000]
    );
    assert!(loaded.take_f32("empty", &[3, 0]).unwrap().is_empty());

    // Saving what was loaded gives the same bytes.
    let again = scratch.path("again.safetensors");
    loaded.save(&again).unwrap();
    assert_eq!(fs::read(&path).unwrap(), fs::read(&again).unwrap());
}

#[test]
fn metadata_round_trips() {
    let scratch = Scratch::new("metadata");
    let path = scratch.path("ckpt.safetensors");
    let mut saved = every_type();
    for (k, v) in [
        ("step", "1000"),
        ("optimizer", "lamb"),
        ("quotes \" and \\ and ünïcödé", "line\nbreak\ttab"),
        ("empty", ""),
    ] {
        saved.metadata.insert(k.into(), v.into());
    }
    saved.save(&path).unwrap();
    let loaded = Checkpoint::load(&path).unwrap();
    assert_eq!(loaded.metadata, saved.metadata);
    assert_eq!(loaded.meta("optimizer").unwrap(), "lamb");
    assert_eq!(loaded.meta("empty").unwrap(), "");
    assert_eq!(loaded.meta_parse::<u64>("step").unwrap(), 1000);

    let missing = loaded.meta("seed").unwrap_err();
    assert!(
        matches!(&missing, CheckpointError::Metadata { key, value: None, .. } if key == "seed")
    );
    assert_eq!(missing.to_string(), "the checkpoint has no metadata `seed`");
    let unparsable = loaded.meta_parse::<u64>("optimizer").unwrap_err();
    assert!(matches!(
        &unparsable,
        CheckpointError::Metadata { key, value: Some(v), expected: "u64" } if key == "optimizer" && v == "lamb"
    ));
}

/// The tensors of `checkpoint` as the `safetensors` crate's views.
fn crate_views(checkpoint: &Checkpoint) -> Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> {
    checkpoint
        .tensors
        .iter()
        .map(|t| {
            let (dtype, bytes) = match &t.data {
                TensorData::F32(v) => (
                    safetensors::Dtype::F32,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
                TensorData::F16(v) => (
                    safetensors::Dtype::F16,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
                TensorData::Bf16(v) => (
                    safetensors::Dtype::BF16,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
                TensorData::U64(v) => (
                    safetensors::Dtype::U64,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
                TensorData::U32(v) => (
                    safetensors::Dtype::U32,
                    v.iter().flat_map(|x| x.to_le_bytes()).collect(),
                ),
            };
            (t.name.clone(), dtype, t.shape.clone(), bytes)
        })
        .collect()
}

/// The `safetensors` crate's serialization of `views` with `metadata`.
fn crate_bytes(
    views: &[(String, safetensors::Dtype, Vec<usize>, Vec<u8>)],
    metadata: HashMap<String, String>,
) -> Vec<u8> {
    let views: Vec<_> = views
        .iter()
        .map(|(name, dtype, shape, bytes)| {
            let view = safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes);
            (name.clone(), view.unwrap())
        })
        .collect();
    safetensors::serialize(views, Some(metadata)).unwrap()
}

/// A file's header as JSON, and its data bytes.
fn split_file(bytes: &[u8]) -> (serde_json::Value, &[u8]) {
    let n = usize::try_from(u64::from_le_bytes(bytes[..8].try_into().unwrap())).unwrap();
    (
        serde_json::from_slice(&bytes[8..8 + n]).unwrap(),
        &bytes[8 + n..],
    )
}

/// The metadata stored in a file (digests included).
fn stored_metadata(bytes: &[u8]) -> HashMap<String, String> {
    serde_json::from_value(split_file(bytes).0["__metadata__"].clone()).unwrap()
}

/// The header is the `safetensors` crate's own (the same JSON, in an order
/// that does not depend on a `HashMap`), the data bytes are the same, and
/// the crate reads the file back.
#[test]
fn bytes_match_the_safetensors_crate() {
    for metadata in [None, Some(("step", "12"))] {
        let mut checkpoint = every_type();
        if let Some((k, v)) = metadata {
            checkpoint.metadata.insert(k.into(), v.into());
        }
        let ours = checkpoint.to_bytes().unwrap();
        let theirs = crate_bytes(&crate_views(&checkpoint), stored_metadata(&ours));
        assert_eq!(ours.len(), theirs.len(), "metadata {metadata:?}");
        assert_eq!(
            split_file(&ours),
            split_file(&theirs),
            "metadata {metadata:?}"
        );

        let parsed = safetensors::SafeTensors::deserialize(&ours).unwrap();
        assert_eq!(parsed.len(), checkpoint.tensors.len());
    }
}

#[test]
fn the_same_checkpoint_gives_the_same_bytes() {
    // Many metadata keys: a HashMap-ordered header would differ between runs
    // and between insertion orders.
    let build = |reverse: bool| {
        let mut c = Checkpoint::new();
        let mut keys: Vec<u32> = (0..40).collect();
        if reverse {
            keys.reverse();
        }
        for k in keys {
            c.metadata.insert(format!("key{k}"), format!("value{k}"));
            c.push(format!("t{k}"), [1], vec![k]);
        }
        c.to_bytes().unwrap()
    };
    assert_eq!(build(false), build(true));
}

#[test]
fn push_replaces_a_tensor_of_the_same_name() {
    let mut c = Checkpoint::new();
    c.push("w", [1], vec![1.0f32]).push("w", [2], vec![2u32, 3]);
    assert_eq!(c.tensors.len(), 1);
    assert_eq!(c.take_u32("w", &[2]).unwrap(), [2, 3]);
}

#[test]
fn wrong_requests_name_the_problem() {
    let c = every_type();
    let missing = c.take_f32("nope", &[1]).unwrap_err();
    assert!(matches!(&missing, CheckpointError::Missing { name } if name == "nope"));
    assert_eq!(missing.to_string(), "the checkpoint has no tensor `nope`");

    let dtype = c.take_f16("w.f32", &[9, 7]).unwrap_err();
    assert!(matches!(
        &dtype,
        CheckpointError::DType { name, expected: DType::F16, found: DType::F32 } if name == "w.f32"
    ));
    assert_eq!(
        dtype.to_string(),
        "checkpoint tensor `w.f32` holds F32, expected F16"
    );
    assert!(matches!(
        c.take_u32("step", &[]).unwrap_err(),
        CheckpointError::DType {
            expected: DType::U32,
            found: DType::U64,
            ..
        }
    ));
    assert!(matches!(
        c.take_bf16("w.f16", &[11]).unwrap_err(),
        CheckpointError::DType {
            expected: DType::Bf16,
            found: DType::F16,
            ..
        }
    ));

    let shape = c.take_f32("w.f32", &[7, 9]).unwrap_err();
    assert!(matches!(
        &shape,
        CheckpointError::Shape { name, expected, found }
            if name == "w.f32" && expected == &[7, 9] && found == &[9, 7]
    ));
    assert_eq!(
        shape.to_string(),
        "checkpoint tensor `w.f32` has shape [9, 7], expected [7, 9]"
    );
    // A scalar is not a one-element vector.
    assert!(matches!(
        c.take_u64("step", &[1]).unwrap_err(),
        CheckpointError::Shape { .. }
    ));
}

#[test]
fn a_shape_that_does_not_match_the_data_is_refused_at_save() {
    let scratch = Scratch::new("length");
    let mut c = Checkpoint::new();
    c.push("w", [2, 3], vec![0.0f32; 5]);
    let err = c.save(&scratch.path("x.safetensors")).unwrap_err();
    assert!(matches!(&err, CheckpointError::Length { name, elements: 5, .. } if name == "w"));
    assert_eq!(scratch.entries(), Vec::<String>::new());
}

fn assert_corrupt(path: &Path, what: &str) {
    match Checkpoint::load(path) {
        Err(CheckpointError::Corrupt { path: p, reason }) => {
            assert_eq!(p, path, "{what}");
            assert!(!reason.is_empty(), "{what}");
        }
        other => panic!("{what}: expected Corrupt, got {other:?}"),
    }
}

/// The [`Damage`] that loading `bytes` reports.
fn damage(bytes: &[u8]) -> Damage {
    match Checkpoint::from_bytes(bytes, Path::new("x.safetensors")) {
        Err(CheckpointError::Damaged { path, problem }) => {
            assert_eq!(path, Path::new("x.safetensors"));
            problem
        }
        other => panic!("expected Damaged, got {other:?}"),
    }
}

/// Where tensor `name`'s bytes are in `bytes`.
fn data_range(bytes: &[u8], name: &str) -> std::ops::Range<usize> {
    let (header, _) = split_file(bytes);
    let n = usize::try_from(u64::from_le_bytes(bytes[..8].try_into().unwrap())).unwrap();
    let offsets = &header[name]["data_offsets"];
    let at = |i: usize| 8 + n + usize::try_from(offsets[i].as_u64().unwrap()).unwrap();
    at(0)..at(1)
}

#[test]
fn truncated_files_say_where_they_are_cut() {
    let good = every_type().to_bytes().unwrap();
    let header_end = good.len() - split_file(&good).1.len();
    let ranges: Vec<(String, std::ops::Range<usize>)> = every_type()
        .tensors
        .iter()
        .map(|t| (t.name.clone(), data_range(&good, &t.name)))
        .collect();
    let w_f32 = data_range(&good, "w.f32");
    for cut in [
        0,
        5,
        8,
        header_end / 2,
        header_end,
        header_end + 1,
        w_f32.start,
        w_f32.start + 3,
        good.len() - 1,
    ] {
        // The tensor holding the first missing byte.
        let tensor = ranges
            .iter()
            .find(|(_, r)| r.contains(&cut))
            .map(|(name, _)| name.clone());
        assert_eq!(tensor.is_some(), cut >= header_end, "cut at {cut}");
        let expected = match cut {
            0..8 => 8,
            _ if cut < header_end => header_end,
            _ => good.len(),
        };
        assert_eq!(
            damage(&good[..cut]),
            Damage::Truncated {
                length: cut as u64,
                expected: expected as u64,
                tensor,
            },
            "cut at {cut}"
        );
    }
    let message = CheckpointError::Damaged {
        path: "c.safetensors".into(),
        problem: damage(&good[..w_f32.start + 3]),
    }
    .to_string();
    assert!(message.contains("tensor `w.f32` is cut short"), "{message}");
}

#[test]
fn damaged_files_are_refused() {
    let scratch = Scratch::new("damaged");
    let good = every_type().to_bytes().unwrap();
    let (header_json, data) = split_file(&good);
    let header_len = good.len() - data.len() - 8;
    let path = scratch.path("bad.safetensors");

    // Trailing garbage.
    let mut longer = good.clone();
    longer.push(0);
    fs::write(&path, &longer).unwrap();
    assert_corrupt(&path, "one byte too many");

    // Flipped header bytes that break the JSON or its layout: the length,
    // the opening brace, a digit of a shape, a quote.
    let text = std::str::from_utf8(&good[8..8 + header_len]).unwrap();
    let shape_digit = 8 + text.find("\"shape\":[9").unwrap() + "\"shape\":[".len();
    let quote = 8 + text.find("\"dtype\"").unwrap();
    for (at, mask) in [(0, 0x01), (8, 0x01), (shape_digit, 0x02), (quote, 0x40)] {
        let mut flipped = good.clone();
        flipped[at] ^= mask;
        fs::write(&path, &flipped).unwrap();
        assert_corrupt(&path, &format!("byte {at} ^ {mask:#x}"));
    }
    // A header length beyond the file.
    let mut flipped = good.clone();
    flipped[3] ^= 0x80;
    assert!(matches!(
        damage(&flipped),
        Damage::Truncated { tensor: None, .. }
    ));
    assert!(header_json["__metadata__"]["digest.tensors"].is_string());

    // Valid safetensors with a type Tessera does not read.
    let bytes = [1u8, 2];
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I8, vec![2], &bytes).unwrap();
    fs::write(&path, safetensors::serialize([("i8", view)], None).unwrap()).unwrap();
    assert_corrupt(&path, "I8 tensor");

    // Not there at all.
    let absent = scratch.path("absent.safetensors");
    assert!(matches!(
        Checkpoint::load(&absent),
        Err(CheckpointError::Io { path, .. }) if path == absent
    ));
}

/// Any changed bit of a tensor's bytes is refused, naming the tensor; so
/// are ten bit flips, a NaN written over an element, and a type changed
/// to another of the same size (the digest covers the type and shape).
#[test]
fn changed_tensors_are_refused_naming_them() {
    let good = every_type().to_bytes().unwrap();
    for tensor in &every_type().tensors {
        let range = data_range(&good, &tensor.name);
        for at in [range.start, range.end.saturating_sub(1)]
            .into_iter()
            .filter(|at| range.contains(at))
        {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[at] ^= 1 << bit;
                assert_eq!(
                    damage(&bad),
                    Damage::Tensor(tensor.name.clone()),
                    "byte {at} bit {bit}"
                );
            }
        }
    }
    let range = data_range(&good, "w.f32");
    let mut ten = good.clone();
    for k in 0..10 {
        ten[range.start + k * 17 % range.len()] ^= 1 << (k % 8);
    }
    assert_eq!(damage(&ten), Damage::Tensor("w.f32".into()));
    let mut nan = good.clone();
    nan[range.start + 40..range.start + 44].copy_from_slice(&f32::NAN.to_le_bytes());
    assert_eq!(damage(&nan), Damage::Tensor("w.f32".into()));

    let retyped = replace_once(&good, b"\"dtype\":\"U32\"", b"\"dtype\":\"F32\"");
    assert_eq!(damage(&retyped), Damage::Tensor("seeds".into()));
    let reshaped = replace_once(&good, b"\"shape\":[2,2]", b"\"shape\":[4,1]");
    assert_eq!(damage(&reshaped), Damage::Tensor("seeds".into()));
}

/// `bytes` with the one occurrence of `from` replaced by `to` (same length).
fn replace_once(bytes: &[u8], from: &[u8], to: &[u8]) -> Vec<u8> {
    assert_eq!(from.len(), to.len());
    let at: Vec<usize> = (0..=bytes.len() - from.len())
        .filter(|&i| &bytes[i..i + from.len()] == from)
        .collect();
    assert_eq!(at.len(), 1, "{}", String::from_utf8_lossy(from));
    let mut out = bytes.to_vec();
    out[at[0]..at[0] + to.len()].copy_from_slice(to);
    out
}

#[test]
fn changed_metadata_missing_extra_and_unsigned_tensors_are_refused() {
    let mut checkpoint = every_type();
    checkpoint
        .metadata
        .insert("optimizer".into(), "lamb".into());
    let good = checkpoint.to_bytes().unwrap();
    assert_eq!(
        damage(&replace_once(&good, b"\"lamb\"", b"\"lars\"")),
        Damage::Metadata
    );

    // Files the crate writes with the same (signed) metadata: one tensor
    // fewer, one more, and none of the digests.
    let metadata = stored_metadata(&good);
    let views = crate_views(&checkpoint);
    let fewer: Vec<_> = views.iter().filter(|v| v.0 != "w.f16").cloned().collect();
    assert_eq!(
        damage(&crate_bytes(&fewer, metadata.clone())),
        Damage::Missing("w.f16".into())
    );
    let mut more = views.clone();
    more.push(("extra".into(), safetensors::Dtype::U32, vec![1], vec![0; 4]));
    assert_eq!(
        damage(&crate_bytes(&more, metadata)),
        Damage::Extra("extra".into())
    );
    let plain = HashMap::from([("optimizer".to_owned(), "lamb".to_owned())]);
    assert_eq!(damage(&crate_bytes(&views, plain)), Damage::NoDigests);
    // As the crate writes them, but signed: loads.
    let signed = crate_bytes(&views, stored_metadata(&good));
    let loaded = Checkpoint::from_bytes(&signed, Path::new("x")).unwrap();
    assert_bitwise_equal(&loaded, &checkpoint);
}

#[test]
fn digest_keys_are_reserved() {
    for key in ["digest.tensors", "digest.metadata"] {
        let mut c = every_type();
        c.metadata.insert(key.into(), "x".into());
        let err = c.to_bytes().unwrap_err();
        assert!(
            matches!(&err, CheckpointError::Reserved { key: k } if k == key),
            "{err}"
        );
    }
}

#[test]
fn non_finite_values_are_named() {
    let nan = f16::from_bits(0x7e00);
    let values = [f16::ONE, f16::ZERO, nan, f16::INFINITY];
    let err = check_finite("weights.layer0.weight", &values).unwrap_err();
    assert!(matches!(
        &err,
        CheckpointError::NonFinite { name, index: 2, value } if name == "weights.layer0.weight" && value.is_nan()
    ));
    assert_eq!(
        err.to_string(),
        "checkpoint tensor `weights.layer0.weight` holds NaN at element 2: it must be finite"
    );
    assert!(matches!(
        check_finite("m", &[0.0f32, f32::NEG_INFINITY]),
        Err(CheckpointError::NonFinite { index: 1, .. })
    ));
    check_finite("ok", &[f32::MAX, -0.0, f32::MIN_POSITIVE / 2.0]).unwrap();
}

#[test]
fn save_replaces_an_existing_file_and_leaves_no_temporary() {
    let scratch = Scratch::new("replace");
    let path = scratch.path("ckpt.safetensors");
    let mut first = Checkpoint::new();
    first.push("w", [1], vec![1.0f32]);
    first.save(&path).unwrap();
    let second = every_type();
    second.save(&path).unwrap();
    assert_bitwise_equal(&Checkpoint::load(&path).unwrap(), &second);
    assert_eq!(scratch.entries(), ["ckpt.safetensors"]);

    // Plain bytes through the same path.
    write_atomic(&scratch.path("plain.txt"), b"abc").unwrap();
    assert_eq!(fs::read(scratch.path("plain.txt")).unwrap(), b"abc");
    assert_eq!(scratch.entries(), ["ckpt.safetensors", "plain.txt"]);
}

#[test]
fn a_failed_save_reports_io_and_keeps_the_old_file() {
    let scratch = Scratch::new("failed");
    let old_path = scratch.path("ckpt.safetensors");
    let mut old = Checkpoint::new();
    old.push("w", [1], vec![1.0f32]);
    old.save(&old_path).unwrap();
    let old_bytes = fs::read(&old_path).unwrap();
    let new = every_type();

    // The directory does not exist.
    let nowhere = scratch.path("missing").join("ckpt.safetensors");
    let err = new.save(&nowhere).unwrap_err();
    assert!(matches!(&err, CheckpointError::Io { .. }), "{err}");
    assert!(err.to_string().contains("missing"), "{err}");

    // The "directory" is a file.
    let under_file = old_path.join("ckpt.safetensors");
    assert!(matches!(
        new.save(&under_file),
        Err(CheckpointError::Io { .. })
    ));

    // The target is a non-empty directory: the rename fails after the
    // temporary file was written, which must be cleaned up.
    fs::create_dir(scratch.path("taken")).unwrap();
    fs::write(scratch.path("taken").join("inside"), b"x").unwrap();
    let err = new.save(&scratch.path("taken")).unwrap_err();
    assert!(
        matches!(&err, CheckpointError::Io { path, .. } if path == &scratch.path("taken")),
        "{err}"
    );
    assert_eq!(entries(&scratch.path("taken")), ["inside"]);

    assert_eq!(fs::read(&old_path).unwrap(), old_bytes);
    assert_eq!(scratch.entries(), ["ckpt.safetensors", "taken"]);
}

/// A read-only directory: the save fails with `Io` and the old file stays.
/// Where permissions are not enforced (running as root), the save succeeds
/// and must then have replaced the file whole.
#[cfg(unix)]
#[test]
fn a_save_into_a_read_only_directory_keeps_the_old_file() {
    use std::os::unix::fs::PermissionsExt;

    let scratch = Scratch::new("read-only");
    let dir = scratch.path("ro");
    fs::create_dir(&dir).unwrap();
    let path = dir.join("ckpt.safetensors");
    let mut old = Checkpoint::new();
    old.push("w", [1], vec![1.0f32]);
    old.save(&path).unwrap();
    let old_bytes = fs::read(&path).unwrap();

    fs::set_permissions(&dir, fs::Permissions::from_mode(0o555)).unwrap();
    let new = every_type();
    let result = new.save(&path);
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
    match result {
        Err(CheckpointError::Io { .. }) => assert_eq!(fs::read(&path).unwrap(), old_bytes),
        Err(other) => panic!("expected Io, got {other}"),
        Ok(()) => assert_bitwise_equal(&Checkpoint::load(&path).unwrap(), &new),
    }
    assert_eq!(entries(&dir), ["ckpt.safetensors"]);
}

#[test]
fn errors_display_on_one_line() {
    let damaged = |problem| CheckpointError::Damaged {
        path: "/x/y".into(),
        problem,
    };
    let errors = [
        CheckpointError::Io {
            path: "/x/y".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        },
        CheckpointError::Corrupt {
            path: "/x/y".into(),
            reason: "header too small".into(),
        },
        CheckpointError::Length {
            name: "w".into(),
            shape: vec![2],
            elements: 3,
        },
        damaged(Damage::Tensor("w".into())),
        damaged(Damage::Truncated {
            length: 10,
            expected: 20,
            tensor: None,
        }),
        damaged(Damage::NoDigests),
        damaged(Damage::Missing("w".into())),
        damaged(Damage::Extra("w".into())),
        CheckpointError::Unexpected { name: "w".into() },
    ];
    let expected = [
        "checkpoint I/O failed on /x/y: entity not found",
        "checkpoint /x/y is corrupt: header too small",
        "checkpoint tensor `w` of shape [2] has 3 elements",
        "checkpoint /x/y is damaged (changed or corrupted since it was written): \
         tensor `w` does not match its digest",
        "checkpoint /x/y is damaged (changed or corrupted since it was written): \
         it has 10 bytes where its header needs 20: the header is cut short",
        "checkpoint /x/y: it holds no digests, so its contents cannot be verified (every \
         checkpoint Tessera writes has them: this one comes from an older version or another \
         program)",
        "checkpoint /x/y is damaged (changed or corrupted since it was written): \
         tensor `w` is listed in its digests but absent",
        "checkpoint /x/y is damaged (changed or corrupted since it was written): \
         tensor `w` is not listed in its digests",
        "the checkpoint has a tensor `w` that this run does not use",
    ];
    for (e, text) in errors.iter().zip(expected) {
        assert_eq!(e.to_string(), text);
    }
}

/// A save removes the temporary files of writers that are gone (a child
/// process that has exited) and keeps those of live ones (this process)
/// and of other files.
#[cfg(target_os = "linux")]
#[test]
fn a_save_removes_the_temporaries_of_dead_writers_only() {
    let scratch = Scratch::new("stale");
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let live = std::process::id();
    let names = [
        format!(".ckpt.safetensors.{dead}.0.tmp"),
        format!(".ckpt.safetensors.{dead}.17.tmp"),
        format!(".ckpt.safetensors.{live}.99.tmp"),
        format!(".other.safetensors.{dead}.0.tmp"),
        format!(".ckpt.safetensors.{dead}.x.tmp"),
    ];
    for name in &names {
        fs::write(scratch.path(name), b"partial").unwrap();
    }
    every_type()
        .save(&scratch.path("ckpt.safetensors"))
        .unwrap();
    let mut kept = vec![
        "ckpt.safetensors".to_owned(),
        names[2].clone(),
        names[3].clone(),
        names[4].clone(),
    ];
    kept.sort();
    assert_eq!(scratch.entries(), kept);
}
