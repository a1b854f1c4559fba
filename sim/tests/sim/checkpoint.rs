//! Checkpoints: bitwise round trips of every type, safetensors conformance,
//! the errors of damaged files and wrong requests, and atomic saves.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use tessera_sim::checkpoint::{Checkpoint, CheckpointError, DType, TensorData, write_atomic};

use crate::support::uniform;

/// A fresh empty directory for one test, removed by `drop`.
struct Scratch(PathBuf);

impl Scratch {
    fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("tessera-checkpoint-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The names of the directory's entries, sorted.
    fn entries(&self) -> Vec<String> {
        entries(&self.0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Special values of every float type: signed zeros, infinities, quiet and
/// signalling NaNs with payloads and both signs, subnormals, extremes.
fn special_f32() -> Vec<f32> {
    [
        0x0000_0000u32,
        0x8000_0000,
        0x7f80_0000,
        0xff80_0000,
        0x7fc0_0000,
        0xffc0_0001,
        0x7f80_0001,
        0x7fbf_ffff,
        0xff8a_bcde,
        0x0000_0001,
        0x807f_ffff,
        0x7f7f_ffff,
        0x3f80_0000,
    ]
    .into_iter()
    .map(f32::from_bits)
    .collect()
}

fn special_16(exp_mask: u16) -> Vec<u16> {
    let quiet = exp_mask | (exp_mask >> 1 & !exp_mask);
    vec![
        0x0000,
        0x8000,
        exp_mask,
        exp_mask | 0x8000,
        exp_mask | 1,
        quiet,
        quiet | 0x8003,
        0x0001,
        0x8001,
        exp_mask - 1,
        0x3c00,
    ]
}

/// A checkpoint with one tensor of every type, special values first.
fn every_type() -> Checkpoint {
    let mut f32s = special_f32();
    f32s.extend(uniform(50, 7, -3.0, 3.0));
    let f16s: Vec<f16> = special_16(0x7c00).into_iter().map(f16::from_bits).collect();
    let bf16s: Vec<bf16> = special_16(0x7f80)
        .into_iter()
        .map(bf16::from_bits)
        .collect();
    let mut checkpoint = Checkpoint::new();
    checkpoint
        .push("w.f32", [9, 7], f32s)
        .push("w.f16", [f16s.len()], f16s)
        .push("w.bf16", [1, bf16s.len()], bf16s)
        .push("step", [], vec![u64::MAX - 1])
        .push("seeds", [2, 2], vec![0u32, 1, u32::MAX, 0x8000_0000])
        .push("empty", [3, 0], Vec::<f32>::new());
    checkpoint
}

/// The bits of any tensor data, for bitwise comparison (NaN != NaN).
fn data_bits(data: &TensorData) -> (DType, Vec<u64>) {
    let bits = match data {
        TensorData::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        TensorData::F16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        TensorData::Bf16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        TensorData::U64(v) => v.clone(),
        TensorData::U32(v) => v.iter().map(|&x| u64::from(x)).collect(),
    };
    (data.dtype(), bits)
}

fn assert_bitwise_equal(a: &Checkpoint, b: &Checkpoint) {
    let summary = |c: &Checkpoint| {
        let mut tensors: Vec<_> = c
            .tensors
            .iter()
            .map(|t| (t.name.clone(), t.shape.clone(), data_bits(&t.data)))
            .collect();
        tensors.sort_by(|x, y| x.0.cmp(&y.0));
        (tensors, c.metadata.clone())
    };
    assert_eq!(summary(a), summary(b));
}

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

/// The bytes are the `safetensors` crate's own serialization (with at most
/// one metadata key, where its `HashMap` order cannot differ), and the
/// crate reads them back.
#[test]
fn bytes_match_the_safetensors_crate() {
    for metadata in [None, Some(("step", "12"))] {
        let mut checkpoint = every_type();
        if let Some((k, v)) = metadata {
            checkpoint.metadata.insert(k.into(), v.into());
        }
        let ours = checkpoint.to_bytes().unwrap();

        let owned: Vec<(String, safetensors::Dtype, Vec<usize>, Vec<u8>)> = checkpoint
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
            .collect();
        let mut views = Vec::new();
        for (name, dtype, shape, bytes) in &owned {
            views.push((
                name.clone(),
                safetensors::tensor::TensorView::new(*dtype, shape.clone(), bytes).unwrap(),
            ));
        }
        let info = metadata.map(|(k, v)| HashMap::from([(k.to_owned(), v.to_owned())]));
        let theirs = safetensors::serialize(views, info).unwrap();
        assert_eq!(ours, theirs, "metadata {metadata:?}");

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

#[test]
fn damaged_files_are_reported_corrupt() {
    let scratch = Scratch::new("damaged");
    let good = every_type().to_bytes().unwrap();
    let header_len = usize::try_from(u64::from_le_bytes(good[..8].try_into().unwrap())).unwrap();
    let path = scratch.path("bad.safetensors");

    // Truncated anywhere: in the length, the header, the data, one byte short.
    for cut in [
        0,
        5,
        8,
        8 + header_len / 2,
        8 + header_len + 3,
        good.len() - 1,
    ] {
        fs::write(&path, &good[..cut]).unwrap();
        assert_corrupt(&path, &format!("truncated to {cut} bytes"));
    }
    // Trailing garbage.
    let mut longer = good.clone();
    longer.push(0);
    fs::write(&path, &longer).unwrap();
    assert_corrupt(&path, "one byte too many");

    // Flipped header bytes: the length, the opening brace, a digit of a
    // shape, a quote.
    let text = std::str::from_utf8(&good[8..8 + header_len]).unwrap();
    let shape_digit = 8 + text.find("\"shape\":[9").unwrap() + "\"shape\":[".len();
    let quote = 8 + text.find("\"dtype\"").unwrap();
    for (at, mask) in [
        (0, 0x01),
        (3, 0x80),
        (8, 0x01),
        (shape_digit, 0x02),
        (quote, 0x40),
    ] {
        let mut flipped = good.clone();
        flipped[at] ^= mask;
        fs::write(&path, &flipped).unwrap();
        assert_corrupt(&path, &format!("byte {at} ^ {mask:#x}"));
    }

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
    ];
    let expected = [
        "checkpoint I/O failed on /x/y: entity not found",
        "checkpoint /x/y is corrupt: header too small",
        "checkpoint tensor `w` of shape [2] has 3 elements",
    ];
    for (e, text) in errors.iter().zip(expected) {
        assert_eq!(e.to_string(), text);
    }
}
