//! The `kernels` suite: vector kernels against plain loops, and Tessera's
//! matrix product against `matrixmultiply`.
//!
//! - `dot`, `sum_of_squares`, `axpy`, `max_abs`, `unscale_and_check` (f32)
//!   and `accumulate` (f16 into f32) at `n` elements, against `naive`: the
//!   operation as a plain loop, as one would first write it (sequential f32
//!   sums for the reductions), compiled inside a function with the active
//!   backend's target features, chosen at run time
//!   ([`tessera_core::arch::with_backend_features`]: what the compiler does
//!   for this CPU). `dot` and `sum_of_squares` are also measured against
//!   `read`: the same bytes summed into 64 independent accumulators, which
//!   the compiler vectorises freely, the speed of reading them. `gbps`
//!   counts each kernel's bytes read plus written once; `ratio` is the
//!   reference's time over the kernel's.
//! - `exact_sum` and `exact_dot` (f32: the exact total, the same bits for
//!   any order and split) at 64 Ki (in cache) and 16 Mi elements (64 Ki
//!   with `--quick`), against Tessera's fixed order on the same bytes, in
//!   the same run: `exact_dot` against `dot` (`kernels::dot`), `exact_sum`
//!   against `fixed_order_sum`. Tessera has no plain sum kernel, so that is
//!   [`fixed_order_sum`]: `kernels::dot`'s order without the products
//!   (blocks of 256, eight f32 lane sums, the fixed tree, block partials
//!   added exactly; the same bits as `dot(x, ones)`, tested), a plain loop
//!   compiled with the active backend's target features as `naive` is.
//! - `gemm_nn` and `gemm_nt`: `C [n, n] = A [n, n] B [n, n]` (`nt`: `B`
//!   stored transposed, as the MLP's backward pass uses it) by
//!   `tessera_core::kernels::gemm` (the simulator's products: a fixed
//!   summation order, no FMA, the same bits on every CPU), against
//!   `matrixmultiply::sgemm` on the same operands (packed panels and FMA
//!   kernels where the CPU has them; its bits depend on the CPU). `elements`
//!   is `n`; `gbps` counts the three matrices once; `ratio` is
//!   matrixmultiply's time over Tessera's.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use tessera_core::arch;
use tessera_core::fp::{self, f16};
use tessera_core::kernels::{self, GemmShape};
use tessera_core::rng::RandomStream;
use tessera_sim::kernels::matmul::gemm_matrixmultiply;

use super::report::Sink;
use super::timing::{self, Measurement, Settings};
use super::{BenchError, Plan, Record, Suite, try_zeroed};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "kernels",
    about: "dot, sum of squares, exact dot and sum, axpy, max-abs, unscale-and-check, accumulate vs plain loops; the simulator's GEMM vs matrixmultiply",
    run,
};

/// Vector lengths: L2-resident (256 Ki) and memory (16 Mi).
const SIZES: [usize; 2] = [256 << 10, 16 << 20];
const QUICK_SIZES: [usize; 1] = [256 << 10];
/// The exact reductions' lengths: in cache (64 Ki) and memory (16 Mi).
const EXACT_SIZES: [usize; 2] = [64 << 10, 16 << 20];
const QUICK_EXACT_SIZES: [usize; 1] = [64 << 10];
/// Square matrix sizes: the digits MLP's layers are 64 to 128 wide.
const GEMM_SIZES: [usize; 3] = [64, 256, 1024];
const QUICK_GEMM_SIZES: [usize; 2] = [64, 256];

const FULL: Settings = Settings {
    samples: NonZeroUsize::new(9).unwrap(),
    min_sample: Duration::from_millis(5),
};
const QUICK: Settings = Settings {
    samples: NonZeroUsize::new(3).unwrap(),
    min_sample: Duration::from_millis(1),
};

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let settings = if plan.quick { QUICK } else { FULL };
    let (sizes, exact_sizes, gemm_sizes) = match &plan.elements {
        Some(sizes) => {
            let sizes: Vec<usize> = sizes.iter().map(|n| n.get()).collect();
            (sizes.clone(), sizes, Vec::new())
        }
        None if plan.quick => (
            QUICK_SIZES.to_vec(),
            QUICK_EXACT_SIZES.to_vec(),
            QUICK_GEMM_SIZES.to_vec(),
        ),
        None => (SIZES.to_vec(), EXACT_SIZES.to_vec(), GEMM_SIZES.to_vec()),
    };
    let backend = arch::active();
    sink.start(&format!(
        "kernels: best of {} samples per kernel and reference, interleaved; {}; naive and \
         read compiled with the {backend} backend's target features ({}); \
         ratio = reference time / kernel time; gemm: n x n matrices (elements = n)",
        settings.samples,
        super::build_note(),
        backend.target_features(),
    ))?;
    for n in sizes {
        vector_kernels(n, settings, sink)?;
    }
    for n in exact_sizes {
        exact_reductions(n, settings, sink)?;
    }
    for n in gemm_sizes {
        for (kernel, b_transposed) in [("gemm_nn", false), ("gemm_nt", true)] {
            gemm(n, kernel, b_transposed, settings, sink)?;
        }
    }
    Ok(())
}

/// `n` values uniform in `[-1, 1)` from stream `stream`.
fn values(n: usize, stream: u64) -> Result<Vec<f32>, BenchError> {
    let rng = RandomStream::new(0x6e33, stream);
    let mut x = try_zeroed::<f32>(n)?;
    for (i, x) in (0u64..).zip(&mut x) {
        *x = (rng.bits(i) >> 8) as f32 / (1 << 23) as f32 - 1.0;
    }
    Ok(x)
}

/// Runs `f` compiled with the active backend's target features.
#[inline(always)]
fn native<R>(f: impl FnOnce() -> R) -> R {
    arch::with_backend_features(f)
}

/// The sum of `x[i] * y[i]` in 64 independent accumulators.
#[inline(always)]
fn read_sum(x: &[f32], y: &[f32]) -> f32 {
    let mut acc = [0.0f32; 64];
    let (xs, ys) = (x.chunks_exact(64), y.chunks_exact(64));
    let tail: f32 = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .map(|(a, b)| a * b)
        .sum();
    for (x, y) in xs.zip(ys) {
        for ((a, x), y) in acc.iter_mut().zip(x).zip(y) {
            *a += x * y;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Times the vector kernels at `n` elements against their references.
fn vector_kernels(n: usize, settings: Settings, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let (x, y) = (values(n, 0)?, values(n, 1)?);
    let mut emit = |kernel, bytes: usize, m: &[Measurement], references: &[&'static str]| {
        for (k, reference) in references.iter().enumerate() {
            sink.record(&record(kernel, n, bytes, m[0], reference, m[k + 1]))?;
        }
        Ok::<(), BenchError>(())
    };
    reductions(&x, &y, settings, &mut emit)?;
    elementwise(&x, &y, settings, &mut emit)
}

/// Passes a kernel's measurements (kernel first, then each reference's)
/// on as records: `(kernel, bytes, measurements, reference names)`.
type Emit<'e> =
    dyn FnMut(&'static str, usize, &[Measurement], &[&'static str]) -> Result<(), BenchError> + 'e;

/// dot, sum of squares and max-abs against naive loops and the read sum.
fn reductions(
    x: &[f32],
    y: &[f32],
    settings: Settings,
    emit: &mut Emit<'_>,
) -> Result<(), BenchError> {
    let f32s = size_of_val(x);

    let m = timing::compare(
        settings,
        &mut [
            &mut || {
                black_box(kernels::dot(black_box(x), black_box(y)));
            },
            &mut || {
                black_box(native(
                    #[inline(always)]
                    || x.iter().zip(y).map(|(a, b)| a * b).sum::<f32>(),
                ));
            },
            &mut || {
                black_box(native(
                    #[inline(always)]
                    || read_sum(x, y),
                ));
            },
        ],
    );
    emit("dot", 2 * f32s, &m, &["naive", "read"])?;

    let m = timing::compare(
        settings,
        &mut [
            &mut || {
                black_box(kernels::sum_of_squares(black_box(x)));
            },
            &mut || {
                black_box(native(
                    #[inline(always)]
                    || x.iter().map(|a| a * a).sum::<f32>(),
                ));
            },
            &mut || {
                black_box(native(
                    #[inline(always)]
                    || read_sum(x, x),
                ));
            },
        ],
    );
    emit("sum_of_squares", f32s, &m, &["naive", "read"])?;

    let m = timing::compare(
        settings,
        &mut [
            &mut || {
                black_box(kernels::max_abs(black_box(x)));
            },
            &mut || {
                black_box(native(
                    #[inline(always)]
                    || x.iter().fold(0.0f32, |m, v| m.max(v.abs())),
                ));
            },
        ],
    );
    emit("max_abs", f32s, &m, &["naive"])
}

/// A fixed-order f32 sum in `kernels::dot`'s order (the kernels module's
/// "Determinism"): blocks of [`kernels::BLOCK`] values, [`kernels::LANES`]
/// f32 lane sums (lane `j` adds the values at `j`, `j + 8`, ...), a fixed
/// tree over the lanes, the block partials added exactly; what Tessera's
/// fixed-order `sum` would be.
#[inline(always)]
fn fixed_order_sum(x: &[f32]) -> f32 {
    let mut sum = kernels::ExactSum::new();
    for block in x.chunks(kernels::BLOCK) {
        let mut acc = [0.0f32; kernels::LANES];
        let chunks = block.chunks_exact(kernels::LANES);
        let rest = chunks.remainder();
        for c in chunks {
            for (a, v) in acc.iter_mut().zip(c) {
                *a += v;
            }
        }
        for (a, v) in acc.iter_mut().zip(rest) {
            *a += v;
        }
        sum.add(((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])));
    }
    sum.to_f32()
}

/// The exact sum and dot against the fixed-order ones at `n` elements,
/// each pair timed interleaved in one run.
fn exact_reductions(n: usize, settings: Settings, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let (x, y) = (values(n, 0)?, values(n, 1)?);
    let (x, y, f32s) = (&x[..], &y[..], n * size_of::<f32>());
    let m = timing::compare(
        settings,
        &mut [
            &mut || {
                black_box(kernels::exact_sum(black_box(x)));
            },
            &mut || {
                black_box(native(
                    #[inline(always)]
                    || fixed_order_sum(black_box(x)),
                ));
            },
        ],
    );
    sink.record(&record("exact_sum", n, f32s, m[0], "fixed_order_sum", m[1]))?;
    let m = timing::compare(
        settings,
        &mut [
            &mut || {
                black_box(kernels::exact_dot(black_box(x), black_box(y)));
            },
            &mut || {
                black_box(kernels::dot(black_box(x), black_box(y)));
            },
        ],
    );
    sink.record(&record("exact_dot", n, 2 * f32s, m[0], "dot", m[1]))
}

/// axpy, unscale-and-check and f16 accumulation against naive loops.
fn elementwise(
    x: &[f32],
    y: &[f32],
    settings: Settings,
    emit: &mut Emit<'_>,
) -> Result<(), BenchError> {
    let (n, f32s) = (x.len(), size_of_val(x));
    let mut h = try_zeroed::<f16>(n)?;
    fp::f32_to_half_slice(x, &mut h);
    let h = &h[..];
    let (mut out, mut theirs) = (try_zeroed::<f32>(n)?, try_zeroed::<f32>(n)?);

    // y = y + a x with a = 0 keeps the values from drifting over calls.
    out.copy_from_slice(y);
    theirs.copy_from_slice(y);
    let m = timing::compare(
        settings,
        &mut [
            &mut || {
                kernels::axpy(
                    0.0,
                    black_box(x),
                    black_box(&mut out),
                    fp::Rounding::Nearest,
                )
            },
            &mut || {
                native(
                    #[inline(always)]
                    || {
                        for (y, x) in theirs.iter_mut().zip(black_box(x)) {
                            *y += 0.0 * x;
                        }
                    },
                );
            },
        ],
    );
    emit("axpy", 3 * f32s, &m, &["naive"])?;

    // Scaling by 1 keeps the values; the check still reads every result.
    let m = timing::compare(
        settings,
        &mut [
            &mut || {
                black_box(kernels::unscale_and_check(
                    black_box(&mut out),
                    1.0,
                    fp::Rounding::Nearest,
                ));
            },
            &mut || {
                black_box(native(
                    #[inline(always)]
                    || {
                        let mut found = false;
                        for v in theirs.iter_mut() {
                            *v *= black_box(1.0);
                            found |= !v.is_finite();
                        }
                        found
                    },
                ));
            },
        ],
    );
    emit("unscale_and_check", 2 * f32s, &m, &["naive"])?;

    let m = timing::compare(
        settings,
        &mut [
            &mut || kernels::accumulate(black_box(h), black_box(&mut out)),
            &mut || {
                native(
                    #[inline(always)]
                    || {
                        for (a, s) in theirs.iter_mut().zip(black_box(h)) {
                            *a += s.to_f32();
                        }
                    },
                );
            },
        ],
    );
    emit("accumulate_f16", f32s * 2 + n * 2, &m, &["naive"])
}

/// A kernel's record against one reference over the same bytes.
fn record(
    kernel: &'static str,
    n: usize,
    bytes: usize,
    ours: Measurement,
    reference: &'static str,
    theirs: Measurement,
) -> Record {
    Record {
        suite: SUITE.name,
        kernel,
        elements: n,
        seconds: ours.best,
        gbps: bytes as f64 / ours.best / 1e9,
        reference,
        ratio: theirs.best / ours.best,
        reference_seconds: theirs.best,
        reference_gbps: bytes as f64 / theirs.best / 1e9,
    }
}

/// Times both products of `n x n` matrices and reports the pair.
fn gemm(
    n: usize,
    kernel: &'static str,
    b_transposed: bool,
    settings: Settings,
    sink: &mut dyn Sink,
) -> Result<(), BenchError> {
    let shape = GemmShape {
        m: n,
        k: n,
        n,
        a_transposed: false,
        b_transposed,
    };
    let (a, b) = (values(n * n, 0)?, values(n * n, 1)?);
    let (mut c, mut theirs) = (try_zeroed::<f32>(n * n)?, try_zeroed::<f32>(n * n)?);
    let mut scratch = try_zeroed::<f32>(kernels::gemm_scratch_len(&shape))?;
    let mut ours = || {
        kernels::gemm(shape, black_box(&a), black_box(&b), &mut c, &mut scratch);
        black_box(&mut c);
    };
    let mut reference = || {
        gemm_matrixmultiply(shape, black_box(&a), black_box(&b), &mut theirs);
        black_box(&mut theirs);
    };
    let m = timing::compare(settings, &mut [&mut ours, &mut reference]);
    let bytes = 3 * n * n * size_of::<f32>();
    sink.record(&record(kernel, n, bytes, m[0], "matrixmultiply", m[1]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_order_sum_is_dot_with_ones_bit_for_bit() {
        for n in [0, 1, 7, 255, 256, 263, 1000, 4099] {
            let x = values(n, 3).expect("small");
            let ones = vec![1.0f32; n];
            let want = kernels::dot(&x, &ones);
            assert_eq!(fixed_order_sum(&x).to_bits(), want.to_bits(), "{n}");
            assert_eq!(
                native(|| fixed_order_sum(&x)).to_bits(),
                want.to_bits(),
                "{n}"
            );
        }
    }
}
