//! `tessera_sim::data`'s bounds: what a source may read or generate
//! ([`MAX_SOURCE_BYTES`]), its labels ([`MAX_CLASSES`]) and its classes
//! (at least 2), each refused before the memory is spent, naming the
//! source.

use std::io::Write;
use std::path::PathBuf;

use tessera_sim::data::{DataError, FileProblem, MAX_CLASSES, MAX_SOURCE_BYTES, Position, Source};

/// `bytes` written to a fresh file of this test.
fn file(test: &str, name: &str, bytes: &[u8]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tessera-limits-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// Why the source `spec` does not load.
fn refusal(spec: &str) -> DataError {
    spec.parse::<Source>().unwrap().load().unwrap_err()
}

#[test]
fn a_gzip_bomb_is_refused_after_the_limit() {
    // One member of 1 MiB of zeros, repeated: a few KiB that gunzip to
    // just over the limit (the loader reads concatenated members).
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(&vec![0u8; 1 << 20]).unwrap();
    let member = e.finish().unwrap();
    let members = (MAX_SOURCE_BYTES >> 20) as usize + 1;
    let bomb = member.repeat(members);
    assert!(bomb.len() < MAX_SOURCE_BYTES as usize / 100);
    let path = file("bomb", "bomb.csv.gz", &bomb);
    let err = Source::Csv(path.clone()).load().unwrap_err();
    assert_eq!(
        err,
        DataError::FileTooLarge {
            path: path.clone(),
            limit: MAX_SOURCE_BYTES
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "{}: larger than the 268435456-byte limit per data file (before or after gunzipping)",
            path.display()
        )
    );
}

#[cfg(target_os = "linux")]
#[test]
fn an_endless_file_is_refused_after_the_limit() {
    let err = refusal("csv:/dev/zero");
    assert_eq!(
        err,
        DataError::FileTooLarge {
            path: "/dev/zero".into(),
            limit: MAX_SOURCE_BYTES
        }
    );
}

#[test]
fn a_generated_source_past_the_limit_says_its_bytes_before_allocating() {
    for (spec, bytes) in [
        // (samples x (features + 1) + classes x features) x 4
        ("synthetic:300000000:10:2", (300_000_000 * 11 + 20) * 4),
        (
            "images:100000000:3x32x32:10",
            (100_000_000 * 3073 + 30720) * 4,
        ),
    ] {
        let err = refusal(spec);
        let DataError::SourceTooLarge {
            bytes: found,
            limit,
            ..
        } = err
        else {
            panic!("{spec}: {err:?}");
        };
        assert_eq!((found, limit), (bytes, MAX_SOURCE_BYTES), "{spec}");
        let text = err.to_string();
        assert!(text.contains(&format!("= {bytes} bytes")), "{text}");
        assert!(!text.contains("overflow"), "{text}");
    }
}

#[test]
fn data_of_one_class_is_refused_naming_the_source() {
    let err = refusal("synthetic:2000:10:1");
    assert_eq!(
        err,
        DataError::OneClass {
            name: "synthetic:2000:10:1:0".into(),
            found: 1
        }
    );
    assert!(err.to_string().contains("at least 2"), "{err}");
    // All labels 0, or all 3 (4 classes by count, one present).
    for labels in ["0", "3"] {
        let text: String = (0..50).map(|i| format!("{i},{labels}\n")).collect();
        let path = file("one-class", &format!("one{labels}.csv"), text.as_bytes());
        assert_eq!(
            Source::Csv(path).load().unwrap_err(),
            DataError::OneClass {
                name: format!("one{labels}.csv"),
                found: 1
            }
        );
    }
}

#[test]
fn a_label_past_the_class_limit_is_refused_naming_its_line() {
    assert_eq!(MAX_CLASSES, 1024);
    let path = file("label", "label.csv", b"1,0\n2,60000\n3,1\n");
    let err = Source::Csv(path.clone()).load().unwrap_err();
    assert_eq!(
        err,
        DataError::Malformed {
            path,
            at: Position::Line { line: 2, column: 2 },
            problem: FileProblem::LabelOutOfRange {
                found: "60000".into(),
                limit: 1024
            }
        }
    );
    assert!(err.to_string().contains("at most 1024 classes"), "{err}");
    // The largest label allowed loads.
    let path = file("label", "largest.csv", b"1,0\n2,1023\n");
    assert_eq!(Source::Csv(path).load().unwrap().classes(), 1024);
}
