//! The `conversions` suite: f32 <-> f16/bf16 slice conversions.
//!
//! Each kernel is timed with two references in the same run:
//! - `half`: the `half` crate's bulk slice conversion in the same direction
//!   (`HalfFloatSliceExt::convert_from_f32_slice` / `convert_to_f32_slice`).
//!   `half` has no stochastic rounding, so the stochastic kernels are compared
//!   with its round-to-nearest conversion to the same format;
//! - `memcpy`: `copy_from_slice` of the kernel's source slice (the same bytes
//!   in, the same number of elements out).
//!
//! Inputs are f32 values with a random sign and a magnitude log-uniform in
//! `[2^-12, 2^12)` (the normal range of f16, where gradients and activations
//! live), generated from a fixed seed; the 16-bit sources of the widening
//! kernels are those values rounded to nearest.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use half::slice::HalfFloatSliceExt;
use tessera_core::fp::{self, HalfFloat, Overflow, Stochastic, bf16, f16};
use tessera_core::rng::RandomStream;

use super::report::Sink;
use super::timing::{self, Settings};
use super::{BenchError, Plan, Record, Suite, try_zeroed};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "conversions",
    about: "f32 <-> f16/bf16, round to nearest and stochastic, vs the half crate and memcpy",
    run,
};

/// About 4 Ki (L1), 256 Ki (L2) and 16 Mi (memory) elements.
const SIZES: [usize; 3] = [4 << 10, 256 << 10, 16 << 20];
/// `--quick`: the largest size shrunk to 1 Mi elements (still beyond L2).
const QUICK_SIZES: [usize; 3] = [4 << 10, 256 << 10, 1 << 20];

const FULL: Settings = Settings {
    samples: NonZeroUsize::new(15).unwrap(),
    min_sample: Duration::from_millis(5),
};
const QUICK: Settings = Settings {
    samples: NonZeroUsize::new(5).unwrap(),
    min_sample: Duration::from_millis(1),
};

/// The seed of the inputs and of the stochastic rounding.
const SEED: u64 = 0x7e55_e7a0;

/// The kernels, in the order they are reported.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    F32ToF16Rn,
    F32ToBf16Rn,
    F16ToF32,
    Bf16ToF32,
    F32ToF16Sr,
    F32ToBf16Sr,
}

impl Kernel {
    const ALL: [Self; 6] = [
        Self::F32ToF16Rn,
        Self::F32ToBf16Rn,
        Self::F16ToF32,
        Self::Bf16ToF32,
        Self::F32ToF16Sr,
        Self::F32ToBf16Sr,
    ];

    const fn name(self) -> &'static str {
        match self {
            Self::F32ToF16Rn => "f32_to_f16_rn",
            Self::F32ToBf16Rn => "f32_to_bf16_rn",
            Self::F16ToF32 => "f16_to_f32",
            Self::Bf16ToF32 => "bf16_to_f32",
            Self::F32ToF16Sr => "f32_to_f16_sr",
            Self::F32ToBf16Sr => "f32_to_bf16_sr",
        }
    }
}

/// Bytes read plus bytes written by every conversion, per element.
const CONVERSION_BYTES: usize = size_of::<f32>() + size_of::<u16>();

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let settings = if plan.quick { QUICK } else { FULL };
    let sizes: Vec<usize> = match &plan.elements {
        Some(sizes) => sizes.iter().map(|n| n.get()).collect(),
        None if plan.quick => QUICK_SIZES.to_vec(),
        None => SIZES.to_vec(),
    };
    sink.start(&format!(
        "conversions: best of {} samples (each >= {} ms) per kernel and reference, \
         interleaved; {}; ratio = reference time / kernel time",
        settings.samples,
        settings.min_sample.as_millis(),
        super::build_note(),
    ))?;
    for n in sizes {
        let x = inputs(n)?;
        for kernel in Kernel::ALL {
            measure(kernel, &x, settings, sink)?;
        }
    }
    Ok(())
}

/// `n` f32 inputs: random sign, magnitude log-uniform in `[2^-12, 2^12)`.
pub(crate) fn inputs(n: usize) -> Result<Vec<f32>, BenchError> {
    let stream = RandomStream::new(SEED, 0);
    let mut x = try_zeroed::<f32>(n)?;
    for (i, x) in (0u64..).zip(&mut x) {
        let (a, b) = (stream.word(i, 0), stream.word(i, 1));
        let exponent = 127 - 12 + b % 24;
        *x = f32::from_bits(a & 0x8000_0000 | exponent << 23 | a & 0x007f_ffff);
    }
    Ok(x)
}

/// Measures one kernel at `x.len()` elements and reports it against both
/// references.
fn measure(
    kernel: Kernel,
    x: &[f32],
    settings: Settings,
    sink: &mut dyn Sink,
) -> Result<(), BenchError> {
    let sr = Stochastic::new(RandomStream::new(SEED, 1), Overflow::Infinity);
    let [ours, half, memcpy] = match kernel {
        Kernel::F32ToF16Rn => narrow::<f16>(x, settings, fp::f32_to_half_slice)?,
        Kernel::F32ToBf16Rn => narrow::<bf16>(x, settings, fp::f32_to_half_slice)?,
        Kernel::F32ToF16Sr => {
            narrow::<f16>(x, settings, |s, d| fp::f32_to_half_sr_slice(s, d, sr, 0))?
        }
        Kernel::F32ToBf16Sr => {
            narrow::<bf16>(x, settings, |s, d| fp::f32_to_half_sr_slice(s, d, sr, 0))?
        }
        Kernel::F16ToF32 => widen::<f16>(x, settings)?,
        Kernel::Bf16ToF32 => widen::<bf16>(x, settings)?,
    };
    let n = x.len();
    // memcpy copies the kernel's source: f32 when narrowing, 16-bit when
    // widening; it reads and writes those bytes.
    let copied = match kernel {
        Kernel::F16ToF32 | Kernel::Bf16ToF32 => 2 * n * size_of::<u16>(),
        _ => 2 * n * size_of::<f32>(),
    };
    let moved = n * CONVERSION_BYTES;
    for (reference, theirs, bytes) in [("half", half, moved), ("memcpy", memcpy, copied)] {
        sink.record(&Record {
            suite: SUITE.name,
            kernel: kernel.name(),
            elements: n,
            seconds: ours.best,
            gbps: moved as f64 / ours.best / 1e9,
            reference,
            ratio: theirs.best / ours.best,
            reference_seconds: theirs.best,
            reference_gbps: bytes as f64 / theirs.best / 1e9,
        })?;
    }
    Ok(())
}

/// Times an f32 -> `H` kernel, `half`'s bulk round to nearest into `H`, and
/// a copy of `x`.
fn narrow<H: HalfFloat>(
    x: &[f32],
    settings: Settings,
    kernel: impl Fn(&[f32], &mut [H]),
) -> Result<[timing::Measurement; 3], BenchError>
where
    [H]: HalfFloatSliceExt,
{
    let n = x.len();
    let (mut ours, mut theirs) = (try_zeroed::<H>(n)?, try_zeroed::<H>(n)?);
    let mut copy = try_zeroed::<f32>(n)?;
    let mut ours_fn = || {
        kernel(black_box(x), black_box(&mut ours));
        black_box(&mut ours);
    };
    let mut half = || {
        black_box(&mut theirs).convert_from_f32_slice(black_box(x));
        black_box(&mut theirs);
    };
    let mut memcpy = || {
        black_box(&mut copy).copy_from_slice(black_box(x));
        black_box(&mut copy);
    };
    let m = timing::compare(settings, &mut [&mut ours_fn, &mut half, &mut memcpy]);
    Ok([m[0], m[1], m[2]])
}

/// Times Tessera's `H` -> f32 kernel, `half`'s bulk widening, and a copy of
/// the 16-bit source.
fn widen<H: HalfFloat>(
    x: &[f32],
    settings: Settings,
) -> Result<[timing::Measurement; 3], BenchError>
where
    [H]: HalfFloatSliceExt,
{
    let n = x.len();
    let mut src = try_zeroed::<H>(n)?;
    fp::f32_to_half_slice(x, &mut src);
    let src = &src[..];
    let (mut ours, mut theirs) = (try_zeroed::<f32>(n)?, try_zeroed::<f32>(n)?);
    let mut copy = try_zeroed::<H>(n)?;
    let mut ours_fn = || {
        fp::half_to_f32_slice(black_box(src), black_box(&mut ours));
        black_box(&mut ours);
    };
    let mut half = || {
        black_box(src).convert_to_f32_slice(black_box(&mut theirs));
        black_box(&mut theirs);
    };
    let mut memcpy = || {
        black_box(&mut copy).copy_from_slice(black_box(src));
        black_box(&mut copy);
    };
    let m = timing::compare(settings, &mut [&mut ours_fn, &mut half, &mut memcpy]);
    Ok([m[0], m[1], m[2]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_are_deterministic_and_in_range() {
        let x = inputs(1000).unwrap();
        assert_eq!(x, inputs(1000).unwrap());
        assert!(
            x.iter()
                .all(|v| (2f32.powi(-12)..2f32.powi(12)).contains(&v.abs()))
        );
        assert!(x.iter().any(|v| *v < 0.0) && x.iter().any(|v| *v > 0.0));
    }

    #[test]
    fn kernel_names_are_distinct() {
        for (i, a) in Kernel::ALL.iter().enumerate() {
            for b in &Kernel::ALL[i + 1..] {
                assert_ne!(a.name(), b.name());
            }
        }
    }
}
