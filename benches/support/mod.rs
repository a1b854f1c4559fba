//! Helpers shared by the criterion benches: sizes, inputs and group settings.
//!
//! Every group measures Tessera's kernel and its references (the `half`
//! crate, `memcpy`, a naive scalar loop, the STREAM triad) side by side at
//! the same sizes, so the report compares them directly. `tessera bench`
//! prints the same comparisons as ratios.

// Each bench binary compiles this module and uses part of it.
#![allow(dead_code)]

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Throughput};
use tessera_core::rng::RandomStream;

/// About 4 Ki (L1), 256 Ki (L2) and 16 Mi (memory) elements.
pub(crate) const SIZES: [usize; 3] = [4 << 10, 256 << 10, 16 << 20];

/// 1 Mi parameters (the optimizer state fits in a 32 MB L3) and 16 Mi
/// (memory), as `tessera bench optimizers`.
pub(crate) const PARAMS: [usize; 2] = [1 << 20, 16 << 20];

/// The seed of the inputs (and of stochastic rounding where used).
pub(crate) const SEED: u64 = 0x7e55_e7a0;

/// `n` f32 values with a random sign and a magnitude log-uniform in
/// `[2^-12, 2^12)`, the normal range of f16 (as `tessera bench`).
pub(crate) fn inputs(n: usize) -> Vec<f32> {
    let stream = RandomStream::new(SEED, 0);
    (0..n as u64)
        .map(|i| {
            let (a, b) = (stream.word(i, 0), stream.word(i, 1));
            let exponent = 127 - 12 + b % 24;
            f32::from_bits(a & 0x8000_0000 | exponent << 23 | a & 0x007f_ffff)
        })
        .collect()
}

/// Modest measurement times, so that the whole suite runs in minutes on a
/// small machine; fewer samples at the largest size, where one call takes
/// milliseconds.
pub(crate) fn configure(group: &mut BenchmarkGroup<'_, WallTime>, elements: usize) {
    group
        .warm_up_time(Duration::from_millis(300))
        .measurement_time(Duration::from_secs(if elements >= 1 << 20 { 2 } else { 1 }))
        .sample_size(if elements >= 1 << 20 { 10 } else { 30 });
}

/// Declares the bytes one call reads plus writes.
pub(crate) fn bytes(group: &mut BenchmarkGroup<'_, WallTime>, read: usize, written: usize) {
    group.throughput(Throughput::Bytes((read + written) as u64));
}

/// `n` values uniform in `[-scale, scale)` from word `k` of the seeded
/// stream (24 random bits each), as `tessera bench optimizers` makes its
/// weights (`k` 0, scale 1) and gradients (`k` 1, scale 0.01).
pub(crate) fn uniform(n: usize, k: u32, scale: f32) -> Vec<f32> {
    let stream = RandomStream::new(SEED, 0);
    (0..n as u64)
        .map(|i| scale * ((stream.word(i, k) >> 8) as f32 * (1.0 / (1 << 23) as f32) - 1.0))
        .collect()
}

/// Bytes per element STREAM credits its triad with: read `b` and `c`,
/// write `a` (the write-allocate read of `a` is not counted).
pub(crate) const TRIAD_BYTES: usize = 3 * size_of::<f32>();

/// STREAM's triad, `a[i] = b[i] + s * c[i]`, as a plain loop the compiler
/// vectorises (Rust does not contract it into a fused multiply-add).
pub(crate) fn triad(a: &mut [f32], b: &[f32], c: &[f32], s: f32) {
    for (a, (b, c)) in a.iter_mut().zip(b.iter().zip(c)) {
        *a = b + s * c;
    }
}
