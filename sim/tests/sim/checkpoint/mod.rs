//! Checkpoints: the file (bitwise round trips of every type, safetensors
//! conformance, digests, the errors of damaged files and wrong requests,
//! atomic saves and stale temporaries), a fuzzed reader, and resuming a
//! run (what must match, what may change, what is refused).

mod file;
mod fuzz;
mod resume;

use std::fs;
use std::path::{Path, PathBuf};

use half::{bf16, f16};
use tessera_sim::checkpoint::{Checkpoint, DType, TensorData};

use crate::support::uniform;

/// A fresh empty directory for one test, removed by `drop`.
pub(super) struct Scratch(PathBuf);

impl Scratch {
    pub(super) fn new(test: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("tessera-checkpoint-{}-{test}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    pub(super) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The names of the directory's entries, sorted.
    pub(super) fn entries(&self) -> Vec<String> {
        entries(&self.0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

pub(super) fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

/// Special values of every float type: signed zeros, infinities, quiet and
/// signalling NaNs with payloads and both signs, subnormals, extremes.
pub(super) fn special_f32() -> Vec<f32> {
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

pub(super) fn special_16(exp_mask: u16) -> Vec<u16> {
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
pub(super) fn every_type() -> Checkpoint {
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
pub(super) fn data_bits(data: &TensorData) -> (DType, Vec<u64>) {
    let bits = match data {
        TensorData::F32(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        TensorData::F16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        TensorData::Bf16(v) => v.iter().map(|x| u64::from(x.to_bits())).collect(),
        TensorData::U64(v) => v.clone(),
        TensorData::U32(v) => v.iter().map(|&x| u64::from(x)).collect(),
    };
    (data.dtype(), bits)
}

pub(super) fn assert_bitwise_equal(a: &Checkpoint, b: &Checkpoint) {
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
