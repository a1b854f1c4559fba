//! `tessera_sim::data`: the embedded digits, every loader on files written
//! here (and their errors), splits, the batch plan, the infeed and the
//! outfeed.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tessera_sim::data::{
    BatchPlan, DataError, Dataset, EpochOrder, FileProblem, IMAGES_MAGIC, Infeed, LABELS_MAGIC,
    MicroBatch, Outfeed, OutputMode, Position, Source, digits,
};

use crate::support::bits;

/// A directory under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("tessera-data-{}-{test}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

/// A small data set whose values are exact in decimal and in u8/255.
fn small() -> Dataset {
    let (samples, features) = (7, 3);
    let inputs = (0..samples * features).map(|i| i as f32 * 0.25).collect();
    let labels = (0..samples as u32).map(|i| (i * 5) % 4).collect();
    Dataset::new("small", features, 4, inputs, labels).unwrap()
}

fn malformed(e: DataError) -> (Position, FileProblem) {
    match e {
        DataError::Malformed { at, problem, .. } => (at, problem),
        other => panic!("expected a malformed-file error, got {other:?}"),
    }
}

fn load_csv(path: &Path) -> Result<Dataset, DataError> {
    Source::Csv(path.to_path_buf()).load()
}

// ---------------------------------------------------------------- digits

#[test]
fn digits_is_1797_by_64_with_the_pinned_label_counts() {
    let d = digits();
    assert_eq!((d.len(), d.features(), d.classes()), (1797, 64, 10));
    assert_eq!(d.name(), "digits");
    assert_eq!(
        d.class_counts(),
        [178, 182, 177, 183, 181, 182, 181, 179, 174, 180]
    );
    assert!(
        d.inputs()
            .iter()
            .all(|&x| (0.0..=1.0).contains(&x) && (x * 16.0).fract() == 0.0)
    );
    // The first row of the file, scaled by 1/16.
    assert_eq!(d.label(0), 0);
    assert_eq!(
        d.input(0)[..8],
        [
            0.0,
            0.0,
            5.0 / 16.0,
            13.0 / 16.0,
            9.0 / 16.0,
            1.0 / 16.0,
            0.0,
            0.0
        ]
    );
    assert_eq!(Source::Digits.load().unwrap(), d);
}

// ---------------------------------------------------------------- Dataset

#[test]
fn dataset_new_checks_lengths_labels_and_values() {
    assert_eq!(
        Dataset::new("x", 2, 3, vec![0.0; 5], vec![0, 1, 2]),
        Err(DataError::InputLength {
            features: 2,
            samples: 3,
            found: 5
        })
    );
    assert_eq!(
        Dataset::new("x", 1, 3, vec![0.0; 3], vec![0, 3, 2]),
        Err(DataError::LabelOutOfRange {
            sample: 1,
            label: 3,
            classes: 3
        })
    );
    assert_eq!(
        Dataset::new("x", 2, 3, vec![0.0, 1.0, f32::NAN, 0.0], vec![0, 1]),
        Err(DataError::NonFinite {
            sample: 1,
            feature: 0
        })
    );
    assert_eq!(
        Dataset::new("x", 0, 3, vec![], vec![]),
        Err(DataError::Zero { what: "features" })
    );
    let empty = Dataset::new("x", 2, 3, vec![], vec![]).unwrap();
    assert!(empty.is_empty());
}

#[test]
fn subset_and_gather_copy_the_samples_in_order() {
    let d = small();
    let s = d.subset(&[4, 0, 4]);
    assert_eq!(s.len(), 3);
    assert_eq!(s.input(0), d.input(4));
    assert_eq!(s.input(1), d.input(0));
    assert_eq!(s.labels(), [d.label(4), d.label(0), d.label(4)]);
    let (mut x, mut y) = (vec![9.0; 100], vec![9; 100]);
    d.gather(&[6, 1], &mut x, &mut y);
    assert_eq!(x, [d.input(6), d.input(1)].concat());
    assert_eq!(y, [d.label(6), d.label(1)]);
}

// ---------------------------------------------------------------- split

/// A data set whose single feature is the sample index, with unequal
/// classes: 50 even indices, 40 odd ones not multiples of 5, 10 odd
/// multiples of 5 (a quarter of 50 and of 10 rounds half away from zero).
fn indexed() -> Dataset {
    let labels: Vec<u32> = (0..100)
        .map(|i| match (i % 2, i % 5) {
            (0, _) => 0,
            (_, 0) => 2,
            _ => 1,
        })
        .collect();
    let inputs = (0..100).map(|i| i as f32).collect();
    Dataset::new("indexed", 1, 3, inputs, labels).unwrap()
}

#[test]
fn split_is_deterministic_disjoint_and_stratified() {
    let d = indexed();
    let counts = d.class_counts();
    let (train, test) = d.split(0.25, 42).unwrap();
    assert_eq!(
        (train.name(), test.name()),
        ("indexed/train", "indexed/test")
    );
    assert_eq!(d.split(0.25, 42).unwrap(), (train.clone(), test.clone()));
    let (_, other) = d.split(0.25, 43).unwrap();
    assert_ne!(
        other.inputs(),
        test.inputs(),
        "the seed chooses the test samples"
    );
    // Per class: round(n_c / 4) test samples, the rest for training.
    let expected: Vec<usize> = counts
        .iter()
        .map(|&n| (n as f64 * 0.25).round() as usize)
        .collect();
    assert_eq!(test.class_counts(), expected);
    let (train_counts, test_counts) = (train.class_counts(), test.class_counts());
    for ((n, train_n), test_n) in counts.iter().zip(train_counts).zip(test_counts) {
        assert_eq!(train_n + test_n, *n);
    }
    // Disjoint, covering, each in the data set's order, labels kept.
    let mut all: Vec<f32> = train
        .inputs()
        .iter()
        .chain(test.inputs())
        .copied()
        .collect();
    assert!(train.inputs().is_sorted() && test.inputs().is_sorted());
    all.sort_by(f32::total_cmp);
    assert_eq!(all, d.inputs());
    for s in [&train, &test] {
        for i in 0..s.len() {
            assert_eq!(s.label(i), d.label(s.input(i)[0] as usize));
        }
    }
    // Stratified on the digits too.
    let (_, test) = digits().split(0.2, 0).unwrap();
    let expected: Vec<usize> = digits()
        .class_counts()
        .iter()
        .map(|&n| (n as f64 * 0.2).round() as usize)
        .collect();
    assert_eq!(test.class_counts(), expected);
}

#[test]
fn split_rejects_bad_fractions() {
    let d = indexed();
    assert_eq!(d.split(1.0, 0), Err(DataError::TestFraction(1.0)));
    assert!(matches!(d.split(-0.1, 0), Err(DataError::TestFraction(_))));
    assert!(matches!(
        d.split(f64::NAN, 0),
        Err(DataError::TestFraction(_))
    ));
    let (train, test) = d.split(0.0, 0).unwrap();
    assert_eq!((train.len(), test.len()), (100, 0));
    let one = Dataset::new("one", 1, 1, vec![1.0], vec![0]).unwrap();
    assert!(matches!(
        one.split(0.6, 0),
        Err(DataError::EmptyTrainingSet { samples: 1, .. })
    ));
}

// ---------------------------------------------------------------- CSV

fn to_csv(d: &Dataset, header: bool) -> String {
    let mut s = String::new();
    if header {
        let names: Vec<String> = (0..d.features()).map(|f| format!("x{f}")).collect();
        s += &format!("{},label\r\n", names.join(","));
    }
    for i in 0..d.len() {
        let row: Vec<String> = d.input(i).iter().map(f32::to_string).collect();
        s += &format!("{}, {}\n", row.join(","), d.label(i));
    }
    s + "\n"
}

#[test]
fn csv_round_trips_with_and_without_header_gzip_and_byte_order_mark() {
    let dir = TempDir::new("csv_round_trip");
    let d = small();
    for (name, bytes) in [
        ("plain.csv", to_csv(&d, false).into_bytes()),
        ("header.csv", to_csv(&d, true).into_bytes()),
        ("packed.csv.gz", gzip(to_csv(&d, true).as_bytes())),
        // Excel's "CSV UTF-8": a byte-order mark, which once made the first
        // sample a header.
        (
            "bom.csv",
            format!("\u{feff}{}", to_csv(&d, false)).into_bytes(),
        ),
        (
            "bom_header.csv",
            format!("\u{feff}{}", to_csv(&d, true)).into_bytes(),
        ),
    ] {
        let path = dir.write(name, &bytes);
        let loaded = load_csv(&path).unwrap();
        assert_eq!(loaded.name(), name);
        assert_eq!(loaded.inputs(), d.inputs(), "{name}");
        assert_eq!(loaded.labels(), d.labels(), "{name}");
        assert_eq!(loaded.classes(), 4);
        let parsed: Source = path.to_str().unwrap().parse().unwrap();
        assert_eq!(parsed, Source::Csv(path.clone()));
    }
}

#[test]
fn csv_errors_name_the_line_column_and_problem() {
    let dir = TempDir::new("csv_errors");
    let case = |name: &str, text: &str| {
        malformed(load_csv(&dir.write(name, text.as_bytes())).unwrap_err())
    };
    assert_eq!(
        case("header.csv", "a,b,label\n1,2,3,0\n"),
        (
            Position::Line { line: 1, column: 0 },
            FileProblem::BadHeader { header: 3, data: 4 }
        )
    );
    assert_eq!(
        case("ragged.csv", "1,2,0\n3,4,1\n5,1\n"),
        (
            Position::Line { line: 3, column: 0 },
            FileProblem::RaggedRow {
                expected: 3,
                found: 2
            }
        )
    );
    assert_eq!(
        case("nan.csv", "1,2,0\n3,x4,1\n"),
        (
            Position::Line { line: 2, column: 2 },
            FileProblem::NotANumber { found: "x4".into() }
        )
    );
    assert_eq!(
        case("inf.csv", "1,inf,0\n"),
        (
            Position::Line { line: 1, column: 2 },
            FileProblem::NonFinite
        )
    );
    assert_eq!(
        case("negative.csv", "1,2,0\n3,4,-1\n"),
        (
            Position::Line { line: 2, column: 3 },
            FileProblem::LabelOutOfRange {
                found: "-1".into(),
                limit: 1024
            }
        )
    );
    assert!(matches!(
        case("huge.csv", "1,2,70000\n").1,
        FileProblem::LabelOutOfRange { .. }
    ));
    assert_eq!(
        case("fraction.csv", "1,2,0.5\n").1,
        FileProblem::NotALabel {
            found: "0.5".into()
        }
    );
    // (A second row, as one class is refused.)
    let float_label = load_csv(&dir.write("float_label.csv", b"1,2,3.0\n1,2,0\n")).unwrap();
    assert_eq!(
        (float_label.labels(), float_label.classes()),
        (&[3, 0][..], 4)
    );
    assert_eq!(
        case("one_column.csv", "1\n2\n").1,
        FileProblem::TooFewColumns { found: 1 }
    );
    assert_eq!(case("empty.csv", "a,b\n\n").1, FileProblem::NoSamples);
    let bad_gzip = load_csv(&dir.write("bad.csv.gz", b"\x1f\x8bgarbage")).unwrap_err();
    assert!(matches!(malformed(bad_gzip).1, FileProblem::Gzip(_)));
    let missing = dir.0.join("missing.csv");
    assert_eq!(
        load_csv(&missing),
        Err(DataError::Io {
            path: missing.clone(),
            kind: std::io::ErrorKind::NotFound
        })
    );
    // One clear line naming the file and the place, for every error.
    for e in [
        load_csv(&dir.write("l1.csv", b"a,b\n1,2,3\n")).unwrap_err(),
        load_csv(&missing).unwrap_err(),
        "synthetic:x".parse::<Source>().unwrap_err(),
        plan(1, 1, 0, 1).validate(5).unwrap_err(),
    ] {
        let line = e.to_string();
        assert!(!line.is_empty() && !line.contains('\n'), "{line:?}");
    }
    let e = load_csv(&dir.write("msg.csv", b"1,2,0\n3,x4,1\n"))
        .unwrap_err()
        .to_string();
    assert!(
        e.ends_with("msg.csv: line 2, column 2: expected a number, found \"x4\""),
        "{e}"
    );
}

// ---------------------------------------------------------------- IDX

fn idx(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut out = magic.to_be_bytes().to_vec();
    for d in dims {
        out.extend(d.to_be_bytes());
    }
    out.extend(data);
    out
}

/// Five 2x3 images with pixels `i * 7 + p` and labels `i % 3`.
fn idx_pair() -> (Vec<u8>, Vec<u8>) {
    let pixels: Vec<u8> = (0..5u8)
        .flat_map(|i| (0..6).map(move |p| i * 7 + p))
        .collect();
    let labels: Vec<u8> = (0..5).map(|i| i % 3).collect();
    (
        idx(IMAGES_MAGIC, &[5, 2, 3], &pixels),
        idx(LABELS_MAGIC, &[5], &labels),
    )
}

#[test]
fn idx_round_trips_plain_and_gzip() {
    let dir = TempDir::new("idx_round_trip");
    let (images, labels) = idx_pair();
    for (gz, (x, y)) in [
        (false, (images.clone(), labels.clone())),
        (true, (gzip(&images), gzip(&labels))),
    ] {
        let xi = dir.write(
            if gz {
                "x.idx3-ubyte.gz"
            } else {
                "x.idx3-ubyte"
            },
            &x,
        );
        let yi = dir.write(
            if gz {
                "y.idx1-ubyte.gz"
            } else {
                "y.idx1-ubyte"
            },
            &y,
        );
        let spec = format!("idx:{}:{}", xi.display(), yi.display());
        let source: Source = spec.parse().unwrap();
        assert_eq!(
            source,
            Source::Idx {
                images: xi,
                labels: yi
            }
        );
        let d = source.load().unwrap();
        assert_eq!((d.len(), d.features(), d.classes()), (5, 6, 3));
        for i in 0..5 {
            let expected: Vec<f32> = (0..6).map(|p| f32::from(i as u8 * 7 + p) / 255.0).collect();
            assert_eq!(d.input(i), expected);
            assert_eq!(d.label(i), i as u32 % 3);
        }
    }
}

#[test]
fn idx_errors_name_the_offset_and_problem() {
    let dir = TempDir::new("idx_errors");
    let (images, labels) = idx_pair();
    let y = dir.write("y", &labels);
    let load = |x: &[u8]| {
        Source::Idx {
            images: dir.write("x", x),
            labels: y.clone(),
        }
        .load()
    };
    let n = images.len() as u64;
    assert_eq!(
        malformed(load(&images[..images.len() - 1]).unwrap_err()),
        (
            Position::Offset(n - 1),
            FileProblem::Truncated {
                expected: n,
                found: n - 1
            }
        )
    );
    assert!(matches!(
        malformed(load(&images[..9]).unwrap_err()).1,
        FileProblem::Truncated {
            expected: 16,
            found: 9
        }
    ));
    assert_eq!(
        malformed(load(&labels).unwrap_err()),
        (
            Position::Offset(0),
            FileProblem::WrongMagic {
                expected: IMAGES_MAGIC.to_be_bytes().to_vec(),
                found: LABELS_MAGIC.to_be_bytes().to_vec()
            }
        )
    );
    let mut floats = images.clone();
    floats[2] = 0x0d;
    let e = load(&floats).unwrap_err();
    assert!(matches!(
        &malformed(e.clone()).1,
        FileProblem::UnsupportedDtype { found, .. } if found == "0x0d"
    ));
    // The message lists IDX's element types, not npy's.
    let text = e.to_string();
    assert!(
        text.contains("unsupported element type 0x0d")
            && text.contains("0x08, unsigned bytes")
            && !text.contains("f64"),
        "{text}"
    );
    let mut longer = images.clone();
    longer.push(0);
    assert!(matches!(
        malformed(load(&longer).unwrap_err()).1,
        FileProblem::TrailingBytes { .. }
    ));
    let four = idx(IMAGES_MAGIC, &[4, 2, 3], &images[16..16 + 24]);
    assert!(matches!(
        load(&four),
        Err(DataError::SampleCountMismatch {
            input_samples: 4,
            label_samples: 5,
            ..
        })
    ));
}

// ---------------------------------------------------------------- npy

fn npy(descr: &str, fortran: bool, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let shape: Vec<String> = shape.iter().map(usize::to_string).collect();
    let shape = if shape.len() == 1 {
        format!("({},)", shape[0])
    } else {
        format!("({})", shape.join(", "))
    };
    let fortran = if fortran { "True" } else { "False" };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': {shape}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend(u16::try_from(header.len()).unwrap().to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

#[test]
fn npy_round_trips_f32_f64_u8_inputs_and_integer_labels() {
    let dir = TempDir::new("npy_round_trip");
    let d = small();
    let f32s: Vec<u8> = d.inputs().iter().flat_map(|x| x.to_le_bytes()).collect();
    let f64s: Vec<u8> = d
        .inputs()
        .iter()
        .flat_map(|&x| f64::from(x).to_le_bytes())
        .collect();
    let u8s: Vec<u8> = (0..21).collect();
    let shape = [d.len(), d.features()];
    let i64s: Vec<u8> = d
        .labels()
        .iter()
        .flat_map(|&l| i64::from(l).to_le_bytes())
        .collect();
    let u16s: Vec<u8> = d
        .labels()
        .iter()
        .flat_map(|&l| (l as u16).to_le_bytes())
        .collect();
    let u8l: Vec<u8> = d.labels().iter().map(|&l| l as u8).collect();
    for (name, x, y) in [
        (
            "f4",
            npy("<f4", false, &shape, &f32s),
            npy("<i8", false, &[7], &i64s),
        ),
        (
            "f8",
            npy("<f8", false, &shape, &f64s),
            npy("<u2", false, &[7], &u16s),
        ),
        (
            "gz",
            gzip(&npy("<f4", false, &shape, &f32s)),
            gzip(&npy("|u1", false, &[7], &u8l)),
        ),
    ] {
        let source = Source::Npy {
            inputs: dir.write(&format!("{name}_x.npy"), &x),
            labels: dir.write(&format!("{name}_y.npy"), &y),
        };
        let loaded = source.load().unwrap();
        assert_eq!(loaded.inputs(), d.inputs(), "{name}");
        assert_eq!(loaded.labels(), d.labels(), "{name}");
        assert_eq!(source.to_string().parse::<Source>().unwrap(), source);
    }
    let bytes = Source::Npy {
        inputs: dir.write("u1_x.npy", &npy("|u1", false, &shape, &u8s)),
        labels: dir.write(
            "u1_y.npy",
            &npy(
                "<i4",
                false,
                &[7],
                &d.labels()
                    .iter()
                    .flat_map(|&l| (l as i32).to_le_bytes())
                    .collect::<Vec<u8>>(),
            ),
        ),
    }
    .load()
    .unwrap();
    assert_eq!(
        bytes.inputs(),
        (0..21).map(|v| v as f32).collect::<Vec<_>>()
    );
}

#[test]
fn npy_rejects_fortran_order_unsupported_dtypes_and_bad_labels() {
    let dir = TempDir::new("npy_errors");
    let labels = dir.write("y.npy", &npy("|u1", false, &[2], &[0, 1]));
    let load = |x: &[u8], y: &Path| {
        Source::Npy {
            inputs: dir.write("x.npy", x),
            labels: y.to_path_buf(),
        }
        .load()
    };
    let data = [0u8; 16];
    assert_eq!(
        malformed(load(&npy("<f4", true, &[2, 2], &data), &labels).unwrap_err()).1,
        FileProblem::FortranOrder
    );
    for descr in ["<f2", ">f4", "<c8", "<i4"] {
        let e = load(&npy(descr, false, &[2, 2], &data), &labels).unwrap_err();
        assert!(
            matches!(&malformed(e.clone()).1, FileProblem::UnsupportedDtype { found, .. } if found == descr),
            "{descr}"
        );
        assert!(e.to_string().contains("expected inputs of '<f4'"), "{e}");
    }
    assert_eq!(
        malformed(load(&npy("<f4", false, &[4], &data), &labels).unwrap_err()).1,
        FileProblem::WrongRank {
            expected: 2,
            found: 1
        }
    );
    assert!(matches!(
        malformed(load(&npy("<f4", false, &[2, 2], &data[..15]), &labels).unwrap_err()).1,
        FileProblem::Truncated { found, .. } if found == 128 + 15
    ));
    assert_eq!(
        malformed(load(b"PK\x03\x04 not npy", &labels).unwrap_err()).1,
        FileProblem::WrongMagic {
            expected: b"\x93NUMPY".to_vec(),
            found: b"PK\x03\x04 n".to_vec(),
        }
    );
    // The first four bytes right, the next two wrong: the message shows all
    // six, so the two numbers differ (they read 0x934e554d twice before).
    let mut almost = npy("<f4", false, &[2, 2], &data);
    almost[4..6].copy_from_slice(b"XX");
    let e = load(&almost, &labels).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: byte 0: expected the magic bytes 93 4e 55 4d 50 59, found 93 4e 55 4d 58 58",
            dir.0.join("x.npy").display()
        )
    );
    let x = npy("<f4", false, &[2, 2], &data);
    let float_labels = dir.write("yf.npy", &npy("<f4", false, &[2], &[0; 8]));
    assert_eq!(
        malformed(load(&x, &float_labels).unwrap_err()).1,
        FileProblem::UnsupportedDtype {
            found: "<f4".into(),
            supported: "labels of an integer type, '|i1', '|u1', '<i2' .. '<u8', little-endian",
        }
    );
    let negative = dir.write("yn.npy", &npy("<i2", false, &[2], &[1, 0, 0xff, 0xff]));
    assert_eq!(
        malformed(load(&x, &negative).unwrap_err()),
        (
            Position::Offset(128 + 2),
            FileProblem::LabelOutOfRange {
                found: "-1".into(),
                limit: 1024
            }
        )
    );
    let nan: Vec<u8> = [0.0f32, f32::NAN, 0.0, 0.0]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    assert_eq!(
        malformed(load(&npy("<f4", false, &[2, 2], &nan), &labels).unwrap_err()),
        (Position::Offset(128 + 4), FileProblem::NonFinite)
    );
    let three = dir.write("y3.npy", &npy("|u1", false, &[3], &[0, 1, 2]));
    assert!(matches!(
        load(&x, &three),
        Err(DataError::SampleCountMismatch {
            input_samples: 2,
            label_samples: 3,
            ..
        })
    ));
}

// ---------------------------------------------------------------- Source

#[test]
fn sources_parse_from_the_command_line_forms() {
    let parse = |s: &str| s.parse::<Source>();
    assert_eq!(parse("digits"), Ok(Source::Digits));
    assert_eq!(
        parse("synthetic:100:8:3"),
        Ok(Source::Synthetic {
            samples: 100,
            features: 8,
            classes: 3,
            seed: 0
        })
    );
    assert_eq!(
        parse("synthetic:100:8:3:9"),
        Ok(Source::Synthetic {
            samples: 100,
            features: 8,
            classes: 3,
            seed: 9
        })
    );
    assert_eq!(
        parse("csv:data/a.txt"),
        Ok(Source::Csv("data/a.txt".into()))
    );
    assert_eq!(parse("a/b.csv.gz"), Ok(Source::Csv("a/b.csv.gz".into())));
    assert_eq!(
        parse("npy:x.npy:y.npy"),
        Ok(Source::Npy {
            inputs: "x.npy".into(),
            labels: "y.npy".into()
        })
    );
    for bad in [
        "",
        "mnist",
        "synthetic:1:2",
        "synthetic:1:2:x",
        "idx:only",
        "npy::y",
        "csv:",
    ] {
        assert!(
            matches!(parse(bad), Err(DataError::BadSpec { .. })),
            "{bad:?}"
        );
    }
    assert_eq!(
        Source::Synthetic {
            samples: 0,
            features: 2,
            classes: 2,
            seed: 0
        }
        .load(),
        Err(DataError::Zero { what: "samples" })
    );
    let huge = Source::Synthetic {
        samples: 1 << 40,
        features: 1 << 20,
        classes: 2,
        seed: 0,
    };
    assert!(matches!(
        huge.load(),
        Err(DataError::SourceTooLarge { bytes, .. }) if bytes == (1 << 62) + (1 << 42) + (1 << 23)
    ));
}

#[test]
fn synthetic_data_is_seeded_balanced_and_separable() {
    let source = |seed| Source::Synthetic {
        samples: 600,
        features: 16,
        classes: 6,
        seed,
    };
    let a = source(1).load().unwrap();
    let bits = |d: &Dataset| d.inputs().iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&a), bits(&source(1).load().unwrap()));
    assert_ne!(bits(&a), bits(&source(2).load().unwrap()));
    assert_eq!(a.class_counts(), [100; 6]);
    assert_eq!(a.name(), "synthetic:600:16:6:1");
    // Value stability: the generator's output is part of the contract.
    assert_eq!(a.input(0)[0].to_bits(), PINNED_FIRST_VALUE);
    // Learnable: nearest class centroid classifies almost all samples.
    let mut centroids = vec![0.0f32; 6 * 16];
    for i in 0..a.len() {
        let c = a.label(i) as usize;
        for (m, &x) in centroids[c * 16..][..16].iter_mut().zip(a.input(i)) {
            *m += x / 100.0;
        }
    }
    let correct = (0..a.len())
        .filter(|&i| {
            let dist = |c: usize| -> f32 {
                centroids[c * 16..][..16]
                    .iter()
                    .zip(a.input(i))
                    .map(|(m, x)| (m - x) * (m - x))
                    .sum()
            };
            (0..6).min_by(|&p, &q| dist(p).total_cmp(&dist(q))) == Some(a.label(i) as usize)
        })
        .count();
    assert!(correct >= 570, "{correct} of 600");
}

const PINNED_FIRST_VALUE: u32 = 1_068_470_641;

// ---------------------------------------------------------------- plan

fn plan(
    instances: usize,
    replicas_per_instance: usize,
    micro_batch: usize,
    accumulation: usize,
) -> BatchPlan {
    BatchPlan {
        instances,
        replicas_per_instance,
        micro_batch,
        accumulation,
        device_iterations: 1,
    }
}

#[test]
fn epoch_orders_are_seeded_permutations() {
    let a = EpochOrder::new(1000, 5, 0);
    let mut sorted = a.indices().to_vec();
    sorted.sort_unstable();
    assert_eq!(sorted, (0..1000).collect::<Vec<_>>());
    assert_eq!(a, EpochOrder::new(1000, 5, 0));
    assert_ne!(a.indices(), EpochOrder::new(1000, 5, 1).indices());
    assert_ne!(a.indices(), EpochOrder::new(1000, 6, 0).indices());
    assert!(EpochOrder::new(0, 5, 0).indices().is_empty());
    // Value stability.
    assert_eq!(EpochOrder::new(8, 0, 0).indices(), PINNED_ORDER);
}

const PINNED_ORDER: [usize; 8] = [5, 0, 3, 2, 6, 1, 7, 4];

#[test]
fn plan_arithmetic_and_validation_name_the_numbers() {
    let p = BatchPlan {
        instances: 2,
        replicas_per_instance: 4,
        micro_batch: 3,
        accumulation: 5,
        device_iterations: 4,
    };
    assert_eq!(
        (p.replicas(), p.global_batch(), p.host_batch()),
        (8, 120, 480)
    );
    assert_eq!(p.steps_per_epoch(1797), 14);
    assert_eq!(p.host_calls_per_epoch(1797), 4);
    assert_eq!(p.host_call_steps(1797, 3), 12..14);
    assert_eq!(p.instance_replicas(1), 4..8);
    assert_eq!(p.validate(120), Ok(()));
    assert_eq!(
        p.validate(119),
        Err(DataError::GlobalBatchTooLarge {
            global_batch: 120,
            micro_batch: 3,
            accumulation: 5,
            replicas: 8,
            samples: 119
        })
    );
    assert_eq!(
        p.validate(119).unwrap_err().to_string(),
        "global batch 120 (micro-batch 3 x accumulation 5 x 8 replicas) is larger than the 119 \
         training samples"
    );
    for (field, zeroed) in [
        ("instances", BatchPlan { instances: 0, ..p }),
        (
            "micro_batch",
            BatchPlan {
                micro_batch: 0,
                ..p
            },
        ),
        (
            "device_iterations",
            BatchPlan {
                device_iterations: 0,
                ..p
            },
        ),
    ] {
        assert_eq!(zeroed.validate(1000), Err(DataError::Zero { what: field }));
    }
    assert!(matches!(
        BatchPlan {
            micro_batch: usize::MAX,
            ..p
        }
        .validate(1000),
        Err(DataError::Overflow { .. })
    ));
}

#[test]
fn micro_batches_are_disjoint_and_cover_the_first_steps_global_batches() {
    let len = 1000;
    let p = BatchPlan {
        instances: 2,
        replicas_per_instance: 3,
        micro_batch: 7,
        accumulation: 4,
        device_iterations: 2,
    };
    p.validate(len).unwrap();
    let order = EpochOrder::new(len, 11, 3);
    let steps = p.steps_per_epoch(len);
    assert_eq!(steps, 1000 / 168);
    let mut seen = Vec::new();
    for step in 0..steps {
        for instance in 0..p.instances {
            for replica in p.instance_replicas(instance) {
                for k in 0..p.accumulation {
                    let mb = p.micro_batch_indices(&order, step, replica, k);
                    assert_eq!(mb.len(), 7);
                    seen.extend_from_slice(mb);
                }
            }
        }
    }
    // In (step, instance, replica, k) order the micro-batches read the
    // order's first steps * global_batch positions exactly once, in order.
    assert_eq!(seen, order.indices()[..steps * p.global_batch()]);
}

#[test]
fn the_global_order_is_the_same_for_every_replica_count() {
    let len = 500;
    let order = EpochOrder::new(len, 1, 0);
    // Global batch 64 = micro-batch 4 x 16 micro-batches, split over 1 to
    // 16 replicas, one or two instances.
    let global = |p: BatchPlan| -> Vec<Vec<usize>> {
        assert_eq!(p.global_batch(), 64);
        (0..p.steps_per_epoch(len))
            .map(|step| {
                (0..p.replicas())
                    .flat_map(|r| (0..p.accumulation).map(move |k| (r, k)))
                    .flat_map(|(r, k)| p.micro_batch_indices(&order, step, r, k).to_vec())
                    .collect()
            })
            .collect()
    };
    let reference = global(plan(1, 1, 4, 16));
    assert_eq!(reference.len(), 7);
    for replicas in [1, 2, 4, 8, 16] {
        assert_eq!(
            global(plan(1, replicas, 4, 16 / replicas)),
            reference,
            "{replicas} replicas"
        );
        if replicas > 1 {
            assert_eq!(
                global(plan(2, replicas / 2, 4, 16 / replicas)),
                reference,
                "2 instances"
            );
        }
    }
}

// ---------------------------------------------------------------- infeed

/// What the infeed of `instance` should deliver, from `start` on, for
/// `epochs` epochs.
fn expected_batches(
    d: &Dataset,
    p: BatchPlan,
    instance: usize,
    seed: u64,
    start: (u64, usize),
    epochs: u64,
) -> Vec<MicroBatch> {
    let mut out = Vec::new();
    for epoch in start.0..start.0 + epochs {
        let order = EpochOrder::new(d.len(), seed, epoch);
        let first = if epoch == start.0 { start.1 } else { 0 };
        for step in first..p.steps_per_epoch(d.len()) {
            for replica in p.instance_replicas(instance) {
                for k in 0..p.accumulation {
                    let mut mb = MicroBatch {
                        epoch,
                        step,
                        replica,
                        k,
                        inputs: vec![],
                        labels: vec![],
                    };
                    d.gather(
                        p.micro_batch_indices(&order, step, replica, k),
                        &mut mb.inputs,
                        &mut mb.labels,
                    );
                    out.push(mb);
                }
            }
        }
    }
    out
}

#[test]
fn the_infeed_yields_exactly_the_plans_batches_in_order() {
    let d = Arc::new(small_digits());
    let p = BatchPlan {
        instances: 2,
        replicas_per_instance: 2,
        micro_batch: 5,
        accumulation: 3,
        device_iterations: 2,
    };
    let steps = p.steps_per_epoch(d.len());
    assert_eq!(steps, 3);
    for instance in 0..2 {
        // From the last step of epoch 4 into epochs 5 and 6.
        let start = (4, steps - 1);
        let expected = expected_batches(&d, p, instance, 9, start, 3);
        assert_eq!(expected.len(), (1 + 2 * steps) * 2 * 3);
        let infeed = Infeed::start(Arc::clone(&d), p, instance, 9, start, 4);
        let got: Vec<MicroBatch> = infeed.take(expected.len()).collect();
        assert_eq!(got, expected);
    }
}

#[test]
fn recycled_buffers_do_not_change_what_the_infeed_yields() {
    let d = Arc::new(small_digits());
    let p = plan(1, 3, 7, 2);
    let expected = expected_batches(&d, p, 0, 3, (0, 0), 2);
    let mut infeed = Infeed::start(Arc::clone(&d), p, 0, 3, (0, 0), 6);
    // A foreign, larger buffer first: gather clears and refills.
    infeed.recycle(MicroBatch {
        epoch: 99,
        step: 99,
        replica: 99,
        k: 99,
        inputs: vec![-1.0; 1000],
        labels: vec![7; 100],
    });
    for (i, want) in expected.iter().enumerate() {
        let got = infeed.next().unwrap();
        assert_eq!(&got, want, "micro-batch {i}");
        infeed.recycle(got);
    }
}

/// The first 200 digits: three global batches of 60 with 20 left over.
fn small_digits() -> Dataset {
    digits().subset(&(0..200).collect::<Vec<_>>())
}

#[test]
fn the_infeed_stops_cleanly_when_dropped_early_or_given_a_bad_plan() {
    let d = Arc::new(small_digits());
    let p = plan(1, 2, 10, 1);
    for capacity in [0, 1, 64] {
        let mut infeed = Infeed::start(Arc::clone(&d), p, 0, 0, (0, 0), capacity);
        assert!(infeed.next().is_some());
        // The thread is blocked on a full queue (or still running): drop
        // must close the queue and join it.
        drop(infeed);
    }
    // Never read at all.
    drop(Infeed::start(Arc::clone(&d), p, 0, 0, (0, 0), 2));
    let mut too_large = Infeed::start(Arc::clone(&d), plan(1, 1, 201, 1), 0, 0, (0, 0), 2);
    assert_eq!(too_large.next(), None);
    let mut no_instance = Infeed::start(d, p, 1, 0, (0, 0), 2);
    assert_eq!(no_instance.next(), None);
}

// ---------------------------------------------------------------- outfeed

#[test]
fn outfeed_modes_keep_what_poptorch_keeps() {
    let run = |mode: OutputMode| {
        let out = Outfeed::new(mode);
        let reader = out.clone();
        for step in 0..7 {
            out.push(step, step as f64 + 0.5);
        }
        reader.snapshot()
    };
    assert_eq!(
        run(OutputMode::All),
        (0..7).map(|s| (s, s as f64 + 0.5)).collect::<Vec<_>>()
    );
    assert_eq!(run(OutputMode::Sum), [(6, 24.5)]);
    assert_eq!(run(OutputMode::Final), [(6, 6.5)]);
    assert_eq!(run(OutputMode::EveryN(3)), [(2, 2.5), (5, 5.5)]);
    assert_eq!(run(OutputMode::EveryN(0)).len(), 7);
    let out = Outfeed::new(OutputMode::All);
    out.push(0, 1u32);
    assert_eq!(out.take(), [(0, 1)]);
    assert!(out.snapshot().is_empty());
    // Readable from another thread while pushes go on.
    let writer = out.clone();
    let handle = std::thread::spawn(move || (0..100).for_each(|s| writer.push(s, 1)));
    let _partial = out.snapshot();
    handle.join().unwrap();
    assert_eq!(out.snapshot().len(), 100);
}

#[test]
fn output_modes_parse() {
    for (text, mode) in [
        ("all", OutputMode::All),
        ("sum", OutputMode::Sum),
        ("final", OutputMode::Final),
        ("every:4", OutputMode::EveryN(4)),
    ] {
        assert_eq!(text.parse::<OutputMode>(), Ok(mode));
        assert_eq!(mode.to_string(), text);
    }
    for bad in ["every:0", "every:", "every", "mean", ""] {
        assert_eq!(
            bad.parse::<OutputMode>(),
            Err(DataError::BadOutputMode(bad.into()))
        );
    }
}

#[test]
fn synthetic_images_parse_generate_and_are_separable() {
    let s: Source = "images:600:3x8x8:10:7".parse().unwrap();
    assert_eq!(
        s,
        Source::Images {
            samples: 600,
            shape: (3, 8, 8),
            classes: 10,
            seed: 7
        }
    );
    assert_eq!(s.to_string().parse::<Source>().unwrap(), s);
    assert!("images:600:3x8:10".parse::<Source>().is_err());
    assert!("images:600:3x8x8".parse::<Source>().is_err());
    let data = s.load().unwrap();
    assert_eq!(
        (data.len(), data.features(), data.classes()),
        (600, 192, 10)
    );
    assert_eq!(data.name(), "images:600:3x8x8:10:7");
    // A pure function of the seed.
    let again = s.load().unwrap();
    assert_eq!(bits(data.inputs()), bits(again.inputs()));
    let other: Source = "images:600:3x8x8:10:8".parse().unwrap();
    assert_ne!(bits(data.inputs()), bits(other.load().unwrap().inputs()));
    // Learnable: the nearest class mean (from the first half) labels the
    // second half well.
    let f = data.features();
    let mut means = vec![0.0f64; 10 * f];
    for i in 0..300 {
        let k = data.labels()[i] as usize;
        for j in 0..f {
            means[k * f + j] += f64::from(data.inputs()[i * f + j]) / 30.0;
        }
    }
    let right = (300..600)
        .filter(|&i| {
            let x = &data.inputs()[i * f..(i + 1) * f];
            let d = |k: usize| -> f64 {
                x.iter()
                    .zip(&means[k * f..])
                    .map(|(a, m)| (f64::from(*a) - m).powi(2))
                    .sum()
            };
            let best = (0..10).min_by(|&a, &b| d(a).total_cmp(&d(b))).unwrap();
            best == data.labels()[i] as usize
        })
        .count();
    assert!(right > 270, "{right} of 300");
    // Zero sizes are refused.
    assert!(matches!(
        "images:10:0x8x8:2".parse::<Source>().unwrap().load(),
        Err(DataError::Zero { .. })
    ));
}
