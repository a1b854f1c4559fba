//! Tests: fuzz. Every file Tessera reads (CSV, IDX and npy data, the
//! `--config` TOML of `tessera train`, the planner's model TOML, network
//! files), mutated
//! from valid seeds (bit flips, bytes set, inserted, deleted and
//! duplicated, numbers replaced by edge cases, truncation, splicing of two
//! seeds) and given to the real loaders: the data sets through
//! [`Source::load`], the model tables through [`ModelTable::read`] and
//! [`PlanConfig::plan`], network files through [`NetworkFile::read`] and
//! the planner (and one in [`BINARY_EVERY`] through `tessera train`), the
//! config through the `tessera` binary itself.
//! No input may panic (nor abort, nor hang: a hang shows as the CI step's
//! timeout); whatever loads must be a valid data set, a finite plan, or a
//! one-line error with status 2.
//!
//! Inputs per format: [`CASES_VARIABLE`] (CI runs 10,000 in release),
//! [`DEFAULT_CASES`] otherwise. Seeded: a failure names the format and the
//! case, and `TESSERA_FUZZ_CASES=<case + 1>` replays it.

use std::path::{Path, PathBuf};
use std::process::Command;

use tessera::sim::data::{Dataset, MAX_CLASSES, Source};
use tessera::sim::model::NetworkFile;
use tessera::sim::plan::{ModelTable, PlanConfig};
use tessera::sim::pod::PodSpec;

use crate::command::scratch;
use rand_core::{Rng, SeedableRng};
use tessera_core::rng::StreamRng;

/// The environment variable of the inputs per format.
const CASES_VARIABLE: &str = "TESSERA_FUZZ_CASES";

/// Inputs per format when [`CASES_VARIABLE`] is not set: a quick pass
/// for `cargo test`.
const DEFAULT_CASES: u64 = 200;

fn cases() -> u64 {
    std::env::var(CASES_VARIABLE).map_or(DEFAULT_CASES, |v| {
        v.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{CASES_VARIABLE}={v:?} is not a count"))
    })
}

/// Numbers at the edges of what loaders parse, for text formats.
const LITERALS: [&str; 24] = [
    "0",
    "-1",
    "1",
    "255",
    "256",
    "65535",
    "65536",
    "4294967296",
    "9007199254740993",
    "18446744073709551615",
    "18446744073709551616",
    "-9223372036854775808",
    "1e39",
    "-1e39",
    "nan",
    "inf",
    "-inf",
    "1.5",
    "1e-45",
    "\"\"",
    "[]",
    "{}",
    "true",
    "\n[[layer]]\n",
];

/// 32-bit values at the edges, for binary formats (written either way
/// round).
const WORDS: [u32; 9] = [
    0,
    1,
    0x7f,
    0x801,
    0x803,
    0x903,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
];

/// Mutations of seeds, from a seeded generator.
struct Mutator {
    rng: StreamRng,
    /// A text format: numbers are replaced by edge cases more often (a
    /// mutation that keeps the syntax reaches the checks of the values).
    text: bool,
}

impl Mutator {
    fn below(&mut self, n: usize) -> usize {
        (self.rng.next_u64() % n.max(1) as u64) as usize
    }

    /// Mutations of `seed` (`others` for splicing): one, then each
    /// further one with probability 1/2.
    fn mutate(&mut self, seed: &[u8], others: &[Vec<u8>]) -> Vec<u8> {
        let mut b = seed.to_vec();
        loop {
            self.once(&mut b, others);
            if self.below(2) == 0 {
                return b;
            }
        }
    }

    fn once(&mut self, b: &mut Vec<u8>, others: &[Vec<u8>]) {
        if self.text && self.below(2) == 0 {
            return self.literal(b);
        }
        let at = self.below(b.len() + 1);
        match self.below(10) {
            0 if !b.is_empty() => {
                let i = self.below(b.len());
                b[i] ^= 1 << self.below(8);
            }
            1 if !b.is_empty() => {
                let i = self.below(b.len());
                b[i] = [0, 0xff, 0x7f, 0x80, b'0', b'9', b',', b'\n', b'-', b'.'][self.below(10)];
            }
            2 => {
                let n = 1 + self.below(8);
                let bytes: Vec<u8> = (0..n).map(|_| self.rng.next_u64() as u8).collect();
                b.splice(at..at, bytes);
            }
            3 => {
                let end = (at + 1 + self.below(16)).min(b.len());
                b.drain(at.min(end)..end);
            }
            4 => b.truncate(at),
            5 if !others.is_empty() => {
                let other = &others[self.below(others.len())];
                let from = self.below(other.len() + 1);
                b.truncate(at);
                b.extend_from_slice(&other[from..]);
            }
            6 if !b.is_empty() => {
                let end = (at + 1 + self.below(32)).min(b.len());
                let copy = b[at.min(end)..end].to_vec();
                let to = self.below(b.len() + 1);
                b.splice(to..to, copy);
            }
            7 => self.literal(b),
            8 if b.len() >= 4 => {
                let i = self.below(b.len() - 3);
                let w = WORDS[self.below(WORDS.len())];
                let bytes = if self.below(2) == 0 {
                    w.to_be_bytes()
                } else {
                    w.to_le_bytes()
                };
                b[i..i + 4].copy_from_slice(&bytes);
            }
            _ => {
                let i = self.below(b.len() + 1);
                b.insert(i.min(b.len()), self.rng.next_u64() as u8);
            }
        }
    }

    /// Replaces a run of digits (or inserts, if there is none) with an edge
    /// case.
    fn literal(&mut self, b: &mut Vec<u8>) {
        let lit = LITERALS[self.below(LITERALS.len())].as_bytes();
        let digits: Vec<usize> = (0..b.len()).filter(|&i| b[i].is_ascii_digit()).collect();
        if digits.is_empty() {
            let at = self.below(b.len() + 1);
            b.splice(at..at, lit.iter().copied());
            return;
        }
        let start = digits[self.below(digits.len())];
        let end = (start..b.len())
            .find(|&i| !b[i].is_ascii_digit() && b[i] != b'.')
            .unwrap_or(b.len());
        b.splice(start..end, lit.iter().copied());
    }
}

/// Runs `check` on `cases()` mutations of the seeds, naming the format
/// and the case on failure.
fn fuzz(format: &str, seed: u64, seeds: &[Vec<u8>], mut check: impl FnMut(&[u8]) -> bool) {
    let mut m = Mutator {
        rng: StreamRng::seed_from_u64(seed),
        text: format != "idx" && format != "npy",
    };
    let mut loaded = 0;
    let n = cases();
    for case in 0..n {
        let s = &seeds[case as usize % seeds.len()];
        let input = m.mutate(s, seeds);
        let _guard = CaseGuard { format, case };
        if check(&input) {
            loaded += 1;
        }
    }
    println!(
        "fuzz {format}: {n} inputs, {loaded} loaded, {} refused",
        n - loaded
    );
}

/// Names the format and case of a failing input when a panic drops it.
struct CaseGuard<'a> {
    format: &'a str,
    case: u64,
}

impl Drop for CaseGuard<'_> {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        eprintln!(
            "fuzz {}: case {} failed (replay: {CASES_VARIABLE}={})",
            self.format,
            self.case,
            self.case + 1
        );
    }
}

/// A data set that loaded must be one.
fn valid(d: &Dataset) {
    assert!(!d.is_empty() && d.features() > 0);
    assert!(d.classes() >= 1 && d.classes() <= MAX_CLASSES);
    assert_eq!(d.inputs().len(), d.len() * d.features());
    assert!(d.inputs().iter().all(|x| x.is_finite()));
    assert!(d.labels().iter().all(|&l| (l as usize) < d.classes()));
}

/// A refusal must be one line.
fn one_line(message: &str) {
    assert!(
        !message.is_empty() && !message.contains('\n'),
        "{message:?}"
    );
}

/// Loads `source`: a valid data set or a one-line error.
fn load(source: &Source) -> bool {
    match source.load() {
        Ok(d) => {
            valid(&d);
            true
        }
        Err(e) => {
            one_line(&e.to_string());
            false
        }
    }
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

/// `a,b,label` and three rows, gzip-compressed.
const CSV_GZ: [u8; 51] = [
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x4b, 0xd4, 0x49, 0xd2, 0xc9, 0x49,
    0x4c, 0x4a, 0xcd, 0xe1, 0x32, 0xd4, 0x31, 0xd2, 0x31, 0xe0, 0x32, 0xd6, 0x33, 0xd5, 0xd1, 0x35,
    0xd1, 0x31, 0xe4, 0x32, 0xd0, 0x31, 0xd0, 0x31, 0xe2, 0x02, 0x00, 0xc3, 0x4e, 0x68, 0xc4, 0x1f,
    0x00, 0x00, 0x00,
];

/// IDX labels 0, 1, 2, gzip-compressed.
const LABELS_GZ: [u8; 31] = [
    0x1f, 0x8b, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x03, 0x63, 0x60, 0xe0, 0x60, 0x64, 0x60,
    0x60, 0x60, 0x66, 0x60, 0x64, 0x02, 0x00, 0xe9, 0xec, 0x55, 0xf9, 0x0b, 0x00, 0x00, 0x00,
];

#[test]
fn fuzz_csv() {
    let dir = scratch("fuzz-csv");
    let seeds: Vec<Vec<u8>> = vec![
        b"a,b,label\n1,2,0\n3.5,-4,1\n0,0,2\n".to_vec(),
        b"0.25, 1e-3 ,7\r\n\r\n-1,2.5e2,3.0\n".to_vec(),
        b"1,2,3,4,5\n6,7,8,9,65535\n".to_vec(),
        CSV_GZ.to_vec(),
    ];
    fuzz("csv", 1, &seeds, |input| {
        load(&Source::Csv(write(&dir, "x.csv", input)))
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// An IDX file: magic, sizes, bytes.
fn idx(magic: u32, dims: &[u32], data: &[u8]) -> Vec<u8> {
    let mut b = magic.to_be_bytes().to_vec();
    for d in dims {
        b.extend(d.to_be_bytes());
    }
    b.extend_from_slice(data);
    b
}

/// Fuzzes a pair of files (inputs, labels): each case mutates one of them
/// or both, the other from the matching seed.
fn fuzz_pair(
    format: &str,
    seed: u64,
    pairs: &[(Vec<u8>, Vec<u8>)],
    mut load_pair: impl FnMut(&[u8], &[u8]) -> bool,
) {
    // Every file of every pair, for splicing.
    let files: Vec<Vec<u8>> = pairs
        .iter()
        .flat_map(|(x, y)| [x.clone(), y.clone()])
        .collect();
    let mut m = Mutator {
        rng: StreamRng::seed_from_u64(seed),
        text: false,
    };
    let mut loaded = 0;
    let n = cases();
    for case in 0..n {
        // Cycle over the pairs, and over which file(s) to mutate.
        let k = case as usize % (pairs.len() * 3);
        let (x, y) = &pairs[k / 3];
        let _guard = CaseGuard { format, case };
        let ok = match k % 3 {
            0 => load_pair(&m.mutate(x, &files), y),
            1 => load_pair(x, &m.mutate(y, &files)),
            _ => load_pair(&m.mutate(x, &files), &m.mutate(y, &files)),
        };
        loaded += usize::from(ok);
    }
    println!(
        "fuzz {format}: {n} inputs, {loaded} loaded, {} refused",
        n as usize - loaded
    );
}

#[test]
fn fuzz_idx() {
    let dir = scratch("fuzz-idx");
    let pixels: Vec<u8> = (0..18).map(|i| i * 14).collect();
    let pairs = vec![
        (
            idx(0x803, &[3, 2, 3], &pixels),
            idx(0x801, &[3], &[0, 1, 2]),
        ),
        (idx(0x803, &[3, 2, 3], &pixels), LABELS_GZ.to_vec()),
        (idx(0x803, &[1, 1, 1], &[255]), idx(0x801, &[1], &[9])),
    ];
    fuzz_pair("idx", 2, &pairs, |x, y| {
        load(&Source::Idx {
            images: write(&dir, "x.idx", x),
            labels: write(&dir, "y.idx", y),
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// An npy file (version 1.0, or 2.0 if `v2`).
fn npy(descr: &str, shape: &str, data: &[u8], v2: bool) -> Vec<u8> {
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
    let lead = if v2 { 12 } else { 10 };
    while (lead + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut b = b"\x93NUMPY".to_vec();
    if v2 {
        b.extend([2, 0]);
        b.extend((header.len() as u32).to_le_bytes());
    } else {
        b.extend([1, 0]);
        b.extend((header.len() as u16).to_le_bytes());
    }
    b.extend(header.bytes());
    b.extend_from_slice(data);
    b
}

#[test]
fn fuzz_npy() {
    let dir = scratch("fuzz-npy");
    let f4: Vec<u8> = (0..6)
        .flat_map(|i| (i as f32 * 0.5).to_le_bytes())
        .collect();
    let f8: Vec<u8> = (0..4)
        .flat_map(|i| (f64::from(i) - 1.0).to_le_bytes())
        .collect();
    let i4: Vec<u8> = [0i32, 1, 2].iter().flat_map(|l| l.to_le_bytes()).collect();
    let u8s: Vec<u8> = [1u64, 0].iter().flat_map(|l| l.to_le_bytes()).collect();
    let pairs = vec![
        (
            npy("<f4", "(3, 2)", &f4, false),
            npy("<i4", "(3,)", &i4, false),
        ),
        (
            npy("<f8", "(2, 2)", &f8, true),
            npy("<u8", "(2,)", &u8s, false),
        ),
        (
            npy("|u1", "(2, 3)", &[0, 1, 2, 3, 4, 255], false),
            npy("|u1", "(2,)", &[1, 0], true),
        ),
    ];
    fuzz_pair("npy", 3, &pairs, |x, y| {
        load(&Source::Npy {
            inputs: write(&dir, "x.npy", x),
            labels: write(&dir, "y.npy", y),
        })
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A model table that read must plan to finite figures (or be refused
/// by the planner with a one-line error).
fn plans(table: &ModelTable) {
    let layers = table.layers().len();
    for (stages, micro_batch) in [(1, 8), (2.min(layers), 3)] {
        let config = PlanConfig {
            micro_batch,
            ipus_per_replica: stages,
            replicas: 16 / stages,
            gradient_accumulation: 2 * stages,
            ..PlanConfig::new(table.clone(), PodSpec::pod16())
        };
        match config.plan() {
            Ok(p) => {
                assert!(p.step_s.is_finite() && p.step_s > 0.0, "{p:?}");
                assert!(p.samples_per_second.is_finite(), "{p:?}");
                assert!(p.flops_utilisation.is_finite(), "{p:?}");
                assert!(p.worst.fraction.is_finite(), "{p:?}");
                assert!(
                    p.scaling
                        .iter()
                        .all(|r| r.efficiency.is_finite() && r.step_s > 0.0)
                );
                assert!(p.stages.iter().all(|s| s.micro_batch_s.is_finite()));
            }
            Err(e) => one_line(&e.to_string()),
        }
    }
}

#[test]
fn fuzz_model_toml() {
    let dir = scratch("fuzz-model");
    let seeds: Vec<Vec<u8>> = vec![
        b"name = \"two\"\ninput_bytes = 1028\n\n[[layer]]\nname = \"fc1\"\nparams = 65792\n\
          flops_forward = 131072\nflops_backward = 131072\nactivation_bytes = 1024\n\
          gemm = { m = 1, k = 256, n = 256 }\n\n[[layer]]\nname = \"head\"\nparams = 2570\n\
          flops_forward = 5120\nflops_backward = 10240\nactivation_bytes = 40\n\
          tied = { layer = \"fc1\", params = 0 }\n"
            .to_vec(),
        b"input_bytes = 4\n[[layer]]\nname = \"pool\"\nparams = 0\nflops_forward = 9\n\
          flops_backward = 1\nactivation_bytes = 2\noutput_bytes = 2\n[[layer]]\nname = \"x\"\n\
          params = 10\nflops_forward = 40\nflops_backward = 40\nactivation_bytes = 8\n\
          gemm = { m = 2, k = 5, n = 2 }\n[[layer]]\nname = \"y\"\nparams = 3\n\
          flops_forward = 24\nflops_backward = 48\nactivation_bytes = 4\n\
          gemm = { m = 2, k = 2, n = 3 }\n"
            .to_vec(),
        // No products: any FLOPs go, so the planner meets the edge cases.
        b"name = \"vector\"\ninput_bytes = 3\n[[layer]]\nname = \"a\"\nparams = 7\n\
          flops_forward = 1000\nflops_backward = 2000\nactivation_bytes = 64\n[[layer]]\n\
          name = \"b\"\nparams = 0\nflops_forward = 5\nflops_backward = 0\n\
          activation_bytes = 1\noutput_bytes = 9\n"
            .to_vec(),
    ];
    fuzz("model toml", 4, &seeds, |input| {
        match ModelTable::read(&write(&dir, "m.toml", input)) {
            Ok(t) => {
                plans(&t);
                true
            }
            Err(e) => {
                one_line(&e.to_string());
                false
            }
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// Through the `tessera` binary, one network input in this many (each
/// is a process).
const BINARY_EVERY: u64 = 20;

#[test]
fn fuzz_network_toml() {
    // Every input through `NetworkFile::read` (a network must plan to
    // finite figures); one in BINARY_EVERY through `tessera train --model`
    // too, whose data is missing: status 2 and one line, every time.
    let dir = scratch("fuzz-network");
    let seeds: Vec<Vec<u8>> = vec![
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/resnet-mini.toml"
        ))
        .unwrap(),
        b"name = \"pools\"\ninput = [3, 12, 10]\nclasses = 4\nactivation = \"gelu\"\n\
          bn_group = \"all\"\n[[layer]]\nkind = \"conv\"\nchannels = 6\nkernel = 3\nstride = 2\n\
          [[layer]]\nkind = \"max_pool\"\nkernel = 2\nstride = 1\npadding = 1\n[[layer]]\n\
          kind = \"avg_pool\"\nkernel = 3\n[[layer]]\nkind = \"bn_act\"\n[[layer]]\n\
          kind = \"global_avg_pool\"\n"
            .to_vec(),
        b"input = [2, 4, 4]\n[[layer]]\nkind = \"residual\"\nbody = [{ kind = \"residual\", \
          body = [{ kind = \"bn_act\" }, { kind = \"conv\", channels = 2, kernel = 1 }] }]\n\
          [[layer]]\nkind = \"global_avg_pool\"\n"
            .to_vec(),
        std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/docs/resnet-mini-branches.toml"
        ))
        .unwrap(),
        // Branches and residual blocks within each other, an empty branch.
        b"input = [2, 6, 6]\n[[layer]]\nkind = \"branches\"\nbranches = [\n  [],\n  \
          [{ kind = \"residual\", body = [{ kind = \"branches\", branches = [\
          [{ kind = \"conv\", channels = 1, kernel = 3, padding = 1 }], \
          [{ kind = \"max_pool\", kernel = 3, stride = 1, padding = 1 }, { kind = \"conv\", \
          channels = 1, kernel = 1 }]] }] }],\n  [{ kind = \"avg_pool\", kernel = 2, stride = 1 \
          }, { kind = \"conv\", channels = 3, kernel = 2, padding = 1 }],\n]\n\
          [[layer]]\nkind = \"global_avg_pool\"\n"
            .to_vec(),
        // Issue 24's shapes: empty residual bodies (first, nested in a
        // branch), nesting past the parser's depth and within it, and more
        // layers than a network may have.
        b"input = [2, 4, 4]\n[[layer]]\nkind = \"residual\"\nbody = []\n[[layer]]\n\
          kind = \"branches\"\nbranches = [[{ kind = \"residual\", body = [] }], \
          [{ kind = \"bn_act\" }]]\n[[layer]]\nkind = \"global_avg_pool\"\n"
            .to_vec(),
        nested(40),
        nested(12),
        std::iter::once("input = [1, 8, 8]\n".to_owned())
            .chain((0..5000).map(|_| "[[layer]]\nkind = \"bn_act\"\n".to_owned()))
            .chain(std::iter::once(
                "[[layer]]\nkind = \"global_avg_pool\"\n".to_owned(),
            ))
            .collect::<String>()
            .into_bytes(),
    ];
    let file = dir.join("n.toml");
    let missing = format!("csv:{}", dir.join("absent.csv").display());
    let mut case = 0;
    fuzz("network toml", 6, &seeds, |input| {
        std::fs::write(&file, input).unwrap();
        let loaded = match NetworkFile::read(&file) {
            Ok(f) => {
                match ModelTable::from_network(&f.network) {
                    Ok(t) => plans(&t),
                    Err(e) => one_line(&e.to_string()),
                }
                true
            }
            Err(e) => {
                one_line(&e.to_string());
                false
            }
        };
        case += 1;
        if case % BINARY_EVERY == 1 {
            let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
                .args(["train", "--model"])
                .arg(&file)
                .args(["--data", &missing, "--no-progress", "--runs-dir"])
                .arg(&dir)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{err}");
            assert!(err.starts_with("tessera: error: "), "{err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{err}");
            // A network the library read fails on the data, not the file
            // (or on its estimated bytes, before the data: issue 24).
            let on_data = err.contains("absent.csv");
            let too_large = err.contains("the model does not fit");
            assert_eq!(loaded, on_data || too_large, "{err}");
        }
        loaded
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// A network file of a residual block nested `depth` deep in residual
/// blocks and branches, in turn.
fn nested(depth: usize) -> Vec<u8> {
    let mut layer = "{ kind = \"bn_act\" }".to_owned();
    for d in 0..depth {
        layer = if d % 2 == 0 {
            format!("{{ kind = \"residual\", body = [{layer}] }}")
        } else {
            format!("{{ kind = \"branches\", branches = [[{layer}], [{{ kind = \"bn_act\" }}]] }}")
        };
    }
    format!(
        "input = [1, 4, 4]\n[[layer]]\nkind = \"residual\"\nbody = [{layer}]\n[[layer]]\n\
         kind = \"global_avg_pool\"\n"
    )
    .into_bytes()
}

#[test]
fn fuzz_config_toml() {
    // `tessera train --config FILE` reads, merges, resolves and checks the
    // options, then fails to load the data: status 2 and one line, every
    // time (a panic is 101, an abort a signal).
    let dir = scratch("fuzz-config");
    let seeds: Vec<Vec<u8>> = vec![
        b"epochs = 3\nhidden = [16, 8]\nlr = 0.01\noptimizer = \"adamw\"\nseed = 7\n".to_vec(),
        b"pod = \"pod64\"\ninstances = 4\nreplication_factor = 8\nmicro_batch = 4\n\
          gradient_accumulation = 2\ndevice_iterations = 3\nprecision = \"16.32\"\n\
          loss_scaling = \"static:1024\"\nreduction = \"running-mean\"\n"
            .to_vec(),
        b"instances = 2\nreplication_factor = 4\npipeline_stages = 2\nschedule = \"grouped\"\n\
          device_mapping = [0, 1, 1]\n\
          recompute = true\nbatch_norm = true\nactivation = \"gelu\"\nweight_decay = 0.1\n\
          max_grad_norm = 1.5\nwarmup_steps = 5\nlr_schedule = \"constant\"\n\
          output_mode = \"every:2\"\ncheck_replicas_every = 0\ntest_fraction = 0.25\n\
          replicated_tensor_sharding = true\noffload_optimizer_state = false\n"
            .to_vec(),
    ];
    let config = dir.join("c.toml");
    let missing = format!("csv:{}", dir.join("absent.csv").display());
    fuzz("config toml", 5, &seeds, |input| {
        std::fs::write(&config, input).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
            .args(["train", "--config"])
            .arg(&config)
            .args(["--data", &missing, "--no-progress", "--runs-dir"])
            .arg(&dir)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.starts_with("tessera: error: "), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        // Loaded: the options were fine and the data was what failed.
        err.contains("absent.csv")
    });
    let _ = std::fs::remove_dir_all(&dir);
}
