//! f32 <-> f16/bf16 slice conversions against the `half` crate's bulk
//! conversions and `memcpy`, at about 4 Ki, 256 Ki and 16 Mi elements.
//!
//! One group per kernel; inside it, per size, `tessera` (the kernel),
//! `half` (`HalfFloatSliceExt` in the same direction; round to nearest for
//! the stochastic kernels, as `half` has no stochastic rounding) and
//! `memcpy` (`copy_from_slice` of the kernel's source). Throughput is the
//! bytes each function reads plus writes.
//!
//! Run with `cargo bench --bench conversions`; filter with e.g.
//! `cargo bench --bench conversions -- f32_to_f16_sr`.

mod support;

use std::hint::black_box;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use half::slice::HalfFloatSliceExt;
use tessera_core::fp::{self, HalfFloat, Overflow, Stochastic, bf16, f16};
use tessera_core::rng::RandomStream;

use support::{SEED, SIZES, bytes, configure, inputs};

const HALF: usize = size_of::<u16>();
const SINGLE: usize = size_of::<f32>();

/// Benches an f32 -> `H` kernel with its references.
fn narrow<H: HalfFloat>(c: &mut Criterion, name: &str, kernel: impl Fn(&[f32], &mut [H]))
where
    [H]: HalfFloatSliceExt,
{
    let mut group = c.benchmark_group(name);
    for n in SIZES {
        configure(&mut group, n);
        let x = inputs(n);
        let mut out = vec![H::default(); n];
        bytes(&mut group, n * SINGLE, n * HALF);
        group.bench_with_input(BenchmarkId::new("tessera", n), &x, |b, x| {
            b.iter(|| kernel(black_box(x), black_box(&mut out)));
        });
        group.bench_with_input(BenchmarkId::new("half", n), &x, |b, x| {
            b.iter(|| black_box(&mut out).convert_from_f32_slice(black_box(x)));
        });
        let mut copy = vec![0f32; n];
        bytes(&mut group, n * SINGLE, n * SINGLE);
        group.bench_with_input(BenchmarkId::new("memcpy", n), &x, |b, x| {
            b.iter(|| black_box(&mut copy).copy_from_slice(black_box(x)));
        });
    }
    group.finish();
}

/// Benches Tessera's `H` -> f32 kernel with its references.
fn widen<H: HalfFloat>(c: &mut Criterion, name: &str)
where
    [H]: HalfFloatSliceExt,
{
    let mut group = c.benchmark_group(name);
    for n in SIZES {
        configure(&mut group, n);
        let mut src = vec![H::default(); n];
        fp::f32_to_half_slice(&inputs(n), &mut src);
        let mut out = vec![0f32; n];
        bytes(&mut group, n * HALF, n * SINGLE);
        group.bench_with_input(BenchmarkId::new("tessera", n), &src, |b, src| {
            b.iter(|| fp::half_to_f32_slice(black_box(src), black_box(&mut out)));
        });
        group.bench_with_input(BenchmarkId::new("half", n), &src, |b, src| {
            b.iter(|| black_box(src).convert_to_f32_slice(black_box(&mut out)));
        });
        let mut copy = vec![H::default(); n];
        bytes(&mut group, n * HALF, n * HALF);
        group.bench_with_input(BenchmarkId::new("memcpy", n), &src, |b, src| {
            b.iter(|| black_box(&mut copy).copy_from_slice(black_box(src)));
        });
    }
    group.finish();
}

fn conversions(c: &mut Criterion) {
    let sr = Stochastic::new(RandomStream::new(SEED, 1), Overflow::Infinity);
    narrow::<f16>(c, "f32_to_f16_rn", fp::f32_to_half_slice);
    narrow::<bf16>(c, "f32_to_bf16_rn", fp::f32_to_half_slice);
    widen::<f16>(c, "f16_to_f32");
    widen::<bf16>(c, "bf16_to_f32");
    narrow::<f16>(c, "f32_to_f16_sr", |s, d| {
        fp::f32_to_half_sr_slice(s, d, sr, 0)
    });
    narrow::<bf16>(c, "f32_to_bf16_sr", |s, d| {
        fp::f32_to_half_sr_slice(s, d, sr, 0)
    });
}

criterion_group!(benches, conversions);
criterion_main!(benches);
