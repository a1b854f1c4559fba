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

mod feeds;
mod files;

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
