//! The data files: CSV, IDX and npy loaders against files written here,
//! their errors naming the line, column or byte.

use super::*;

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
    // A typo in the first row is not taken for a header.
    assert_eq!(
        case("typo.csv", "1.5,2.x,0\n3,4,1\n"),
        (
            Position::Line { line: 1, column: 2 },
            FileProblem::MixedFirstLine {
                found: "2.x".into()
            }
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
