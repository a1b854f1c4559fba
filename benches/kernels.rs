//! Vector kernels (axpy, dot, sum of squares, max-abs, unscale-and-check)
//! against naive scalar loops, at about 4 Ki, 256 Ki and 16 Mi elements.
//!
//! One group per kernel; inside it, per size, `tessera` (the kernel) and
//! `naive` (the same operation as a plain iterator loop over f32, as one
//! would first write it: sequential f32 sums for the reductions, which the
//! compiler cannot vectorise without reordering them; the element-wise
//! loops it vectorises). Throughput is the bytes each reads plus writes.
//!
//! Run with `cargo bench --bench kernels`; filter with e.g.
//! `cargo bench --bench kernels -- dot`.

mod support;

use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, criterion_group, criterion_main};
use tessera_core::fp::Rounding::Nearest;
use tessera_core::kernels;

use support::{SIZES, bytes, configure, inputs};

const F32: usize = size_of::<f32>();

/// Benches `ours` and `naive` over the same input at one size, declaring
/// `read` and `written` bytes.
fn pair<I: ?Sized>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    n: usize,
    (read, written): (usize, usize),
    input: &mut I,
    mut ours: impl FnMut(&mut I),
    mut naive: impl FnMut(&mut I),
) {
    configure(group, n);
    bytes(group, read, written);
    group.bench_function(BenchmarkId::new("tessera", n), |b| {
        b.iter(|| ours(black_box(&mut *input)));
    });
    group.bench_function(BenchmarkId::new("naive", n), |b| {
        b.iter(|| naive(black_box(&mut *input)));
    });
}

fn axpy(c: &mut Criterion) {
    let mut group = c.benchmark_group("axpy");
    for n in SIZES {
        let x = inputs(n);
        let mut y = inputs(n);
        y.reverse();
        // y grows by at most 2^11 per call: finite for any run length.
        pair(
            &mut group,
            n,
            (2 * n * F32, n * F32),
            &mut y[..],
            |y| kernels::axpy(0.5, black_box(&x), y, Nearest),
            |y| {
                for (y, x) in y.iter_mut().zip(black_box(&x)) {
                    *y += 0.5 * x;
                }
            },
        );
    }
    group.finish();
}

fn dot(c: &mut Criterion) {
    let mut group = c.benchmark_group("dot");
    for n in SIZES {
        let (x, mut y) = (inputs(n), inputs(n));
        y.reverse();
        pair(
            &mut group,
            n,
            (2 * n * F32, 0),
            &mut y[..],
            |y| {
                black_box(kernels::dot(black_box(&x), y));
            },
            |y| {
                black_box(
                    black_box(&x)
                        .iter()
                        .zip(&*y)
                        .map(|(a, b)| a * b)
                        .sum::<f32>(),
                );
            },
        );
    }
    group.finish();
}

fn sum_of_squares(c: &mut Criterion) {
    let mut group = c.benchmark_group("sum_of_squares");
    for n in SIZES {
        let mut x = inputs(n);
        pair(
            &mut group,
            n,
            (n * F32, 0),
            &mut x[..],
            |x| {
                black_box(kernels::sum_of_squares(x));
            },
            |x| {
                black_box(x.iter().map(|v| v * v).sum::<f32>());
            },
        );
    }
    group.finish();
}

fn max_abs(c: &mut Criterion) {
    let mut group = c.benchmark_group("max_abs");
    for n in SIZES {
        let mut x = inputs(n);
        pair(
            &mut group,
            n,
            (n * F32, 0),
            &mut x[..],
            |x| {
                black_box(kernels::max_abs(x));
            },
            |x| {
                black_box(x.iter().fold(0.0f32, |m, v| m.max(v.abs())));
            },
        );
    }
    group.finish();
}

fn unscale_and_check(c: &mut Criterion) {
    let mut group = c.benchmark_group("unscale_and_check");
    for n in SIZES {
        let mut x = inputs(n);
        // Alternate 1/2 and 2 (exact), so the values neither drift nor
        // become subnormal however many calls are made.
        let mut flip = false;
        let mut scale = move || {
            flip = !flip;
            if flip { 0.5 } else { 2.0 }
        };
        let mut scale_naive = scale;
        pair(
            &mut group,
            n,
            (n * F32, n * F32),
            &mut x[..],
            |x| {
                black_box(kernels::unscale_and_check(x, scale(), Nearest));
            },
            |x| {
                let inv_scale = scale_naive();
                let mut found = false;
                for v in x.iter_mut() {
                    *v *= inv_scale;
                    found |= !v.is_finite();
                }
                black_box(found);
            },
        );
    }
    group.finish();
}

criterion_group!(
    benches,
    axpy,
    dot,
    sum_of_squares,
    max_abs,
    unscale_and_check
);
criterion_main!(benches);
