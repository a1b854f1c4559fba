//! The `formats` suite: f32 into every 8-, 6- and 4-bit format and back,
//! and MX / NVFP4 blocks, against the `half` crate in the same run.
//!
//! The reference of every encoding and quantizing row is `half`'s bulk
//! f32 -> f16 (`convert_from_f32_slice`); of every decoding and
//! dequantizing row, its f16 -> f32. Encode rows run nearest-even (`_rn`)
//! and exactly unbiased stochastic rounding (`_sr`) on the detected
//! backend, and again with AVX2 forced (`_avx2`, on CPUs that have it).
//! Inputs are those of the `conversions` suite: random sign, magnitude
//! log-uniform in `[2^-12, 2^12)`. Chop rows (`chop_slice`, nearest-even
//! and exactly stochastic, reference `half`'s f32 -> f16) round a copy of
//! the inputs clamped to the format's largest magnitude in place: the
//! first call leaves the format's values, which later calls keep, so every
//! call does the same work (finite lanes, no overflow to NaN).
//!
//! The floor rows (`sr_bits_floor`, and `_avx2` with AVX2 forced) draw
//! exactly the random bits an exact stochastic encode into an 8-bit format
//! reads, and only them (16 bits of word 0 and word 1 per element, summed:
//! [`RandomStream::encode_bits_sum`]): no stochastic encode can be faster.
//! Their GB/s count the bytes the encode would move.

use std::hint::black_box;
use std::num::NonZeroUsize;
use std::time::Duration;

use half::f16;
use half::slice::HalfFloatSliceExt;
use tessera_core::arch::{self, Backend};
use tessera_core::fp::{self, Format, Mx, MxFormat, Nvfp4, Round};
use tessera_core::rng::RandomStream;

use super::report::Sink;
use super::timing::{self, Settings};
use super::{BenchError, Plan, Record, Suite, try_zeroed};

/// The registry entry.
pub(crate) const SUITE: Suite = Suite {
    name: "formats",
    about: "f32 <-> FP8/FP6/FP4/E8M0 codes, MX and NVFP4 blocks, vs the half crate's f16",
    run,
};

/// The size: 16 Mi elements (memory bound).
const SIZES: [usize; 1] = [16 << 20];
const QUICK_SIZES: [usize; 1] = [1 << 20];

const FULL: Settings = Settings {
    samples: NonZeroUsize::new(9).unwrap(),
    min_sample: Duration::from_millis(5),
};
const QUICK: Settings = Settings {
    samples: NonZeroUsize::new(3).unwrap(),
    min_sample: Duration::from_millis(1),
};

const SEED: u64 = 0x7e55_e7a0;

/// What a row measures.
#[derive(Clone, Copy, Debug)]
enum Op {
    /// `encode_slice` into one byte per code; `avx2` forces AVX2.
    Encode {
        format: Format,
        round: Round,
        avx2: bool,
    },
    /// `chop_slice` in place, on the detected backend.
    Chop {
        format: Format,
        round: Round,
    },
    /// `decode_slice` of one byte per code.
    Decode(Format),
    MxQuantize(Mx),
    MxDequantize(MxFormat),
    Nvfp4Quantize(Round),
    Nvfp4Dequantize,
    /// The random bits of an 8-bit stochastic encode, drawn and summed;
    /// `avx2` forces AVX2.
    Floor {
        avx2: bool,
    },
}

/// The formats of 8 bits and fewer, with their row names.
macro_rules! encode_rows {
    ($($name:literal $f:ident),* $(,)?) => {
        &[$(
            (concat!("encode_", $name, "_rn"), Op::Encode { format: Format::$f, round: Round::NEAREST_EVEN, avx2: false }),
            (concat!("encode_", $name, "_sr"), Op::Encode { format: Format::$f, round: Round::STOCHASTIC, avx2: false }),
            (concat!("encode_", $name, "_rn_avx2"), Op::Encode { format: Format::$f, round: Round::NEAREST_EVEN, avx2: true }),
            (concat!("encode_", $name, "_sr_avx2"), Op::Encode { format: Format::$f, round: Round::STOCHASTIC, avx2: true }),
            (concat!("decode_", $name), Op::Decode(Format::$f)),
            (concat!("chop_", $name, "_rn"), Op::Chop { format: Format::$f, round: Round::NEAREST_EVEN }),
            (concat!("chop_", $name, "_sr"), Op::Chop { format: Format::$f, round: Round::STOCHASTIC }),
        )*]
    };
}

/// Every row, in the order reported.
const ENCODE_ROWS: &[(&str, Op)] = encode_rows!(
    "e3m4" E3M4, "e4m3" E4M3, "e4m3fn" E4M3FN, "e4m3fnuz" E4M3FNUZ,
    "e4m3b11fnuz" E4M3B11FNUZ, "e5m2" E5M2, "e5m2fnuz" E5M2FNUZ, "e8m0fnu" E8M0FNU,
    "e2m3fn" E2M3FN, "e3m2fn" E3M2FN, "e2m1fn" E2M1FN,
);

const BLOCK_ROWS: &[(&str, Op)] = &[
    (
        "mxfp8_e4m3_quantize_rn",
        Op::MxQuantize(Mx::new(MxFormat::E4M3)),
    ),
    (
        "mxfp8_e5m2_quantize_rn",
        Op::MxQuantize(Mx::new(MxFormat::E5M2)),
    ),
    (
        "mxfp6_e2m3_quantize_rn",
        Op::MxQuantize(Mx::new(MxFormat::E2M3)),
    ),
    (
        "mxfp6_e3m2_quantize_rn",
        Op::MxQuantize(Mx::new(MxFormat::E3M2)),
    ),
    ("mxfp4_quantize_rn", Op::MxQuantize(Mx::new(MxFormat::E2M1))),
    (
        "mxfp4_quantize_sr",
        Op::MxQuantize(Mx::new(MxFormat::E2M1).with_round(Round::STOCHASTIC)),
    ),
    (
        "mxint8_quantize_rn",
        Op::MxQuantize(Mx::new(MxFormat::Int8)),
    ),
    ("nvfp4_quantize_rn", Op::Nvfp4Quantize(Round::NEAREST_EVEN)),
    ("nvfp4_quantize_sr", Op::Nvfp4Quantize(Round::STOCHASTIC)),
    ("mxfp8_e4m3_dequantize", Op::MxDequantize(MxFormat::E4M3)),
    ("mxfp4_dequantize", Op::MxDequantize(MxFormat::E2M1)),
    ("nvfp4_dequantize", Op::Nvfp4Dequantize),
    ("sr_bits_floor", Op::Floor { avx2: false }),
    ("sr_bits_floor_avx2", Op::Floor { avx2: true }),
];

fn run(plan: &Plan, sink: &mut dyn Sink) -> Result<(), BenchError> {
    let settings = if plan.quick { QUICK } else { FULL };
    let sizes: Vec<usize> = match &plan.elements {
        Some(sizes) => sizes.iter().map(|n| n.get()).collect(),
        None if plan.quick => QUICK_SIZES.to_vec(),
        None => SIZES.to_vec(),
    };
    sink.start(&format!(
        "formats: best of {} samples (each >= {} ms) per kernel and reference, interleaved; {}; \
         ratio = half's f16 time / kernel time (_avx2 rows: AVX2 forced)",
        settings.samples,
        settings.min_sample.as_millis(),
        super::build_note(),
    ))?;
    let avx2 = Backend::Avx2.is_available();
    for n in sizes {
        let x = super::conversions::inputs(n)?;
        for (name, op) in ENCODE_ROWS.iter().chain(BLOCK_ROWS) {
            if matches!(op, Op::Encode { avx2: true, .. } | Op::Floor { avx2: true }) && !avx2 {
                continue;
            }
            measure(name, *op, &x, settings, sink)?;
        }
    }
    Ok(())
}

/// Times one row and half's conversion in the same direction.
fn measure(
    name: &'static str,
    op: Op,
    x: &[f32],
    settings: Settings,
    sink: &mut dyn Sink,
) -> Result<(), BenchError> {
    let n = x.len();
    let bits = RandomStream::new(SEED, 2);
    let mut codes = try_zeroed::<u8>(n)?;
    let mut scales = try_zeroed::<u8>(n.div_ceil(16))?;
    let mut y = try_zeroed::<f32>(n)?;
    let mut h = try_zeroed::<f16>(n)?;
    h.convert_from_f32_slice(x);
    let mut h_out = try_zeroed::<f16>(n)?;
    let mut y_half = try_zeroed::<f32>(n)?;
    let widening = matches!(
        op,
        Op::Decode(_) | Op::MxDequantize(_) | Op::Nvfp4Dequantize
    );
    // The decoding rows read what their encoding writes.
    prepare(op, x, &mut codes, &mut scales, &bits);
    if let Op::Chop { format, .. } = op {
        clamp_into(format, x, &mut y);
    }
    let t = Nvfp4::tensor_scale(x);
    let mut sum = 0u32;
    let mut ours = || {
        match op {
            Op::Encode {
                format,
                round,
                avx2,
            } => {
                let call = || fp::encode_slice(format, black_box(x), &mut codes, round, &bits, 0);
                let _ = on_avx2_if(avx2, call);
            }
            Op::Chop { format, round } => {
                fp::chop_slice(format, black_box(&mut y), round, &bits, 0)
            }
            Op::Decode(format) => fp::decode_slice(format, black_box(&codes), &mut y),
            Op::MxQuantize(mx) => {
                let c = &mut codes[..mx.format.codes_len(n)];
                let _ = mx.quantize(black_box(x), c, &mut scales[..Mx::scales_len(n)], &bits, 0);
            }
            Op::MxDequantize(f) => {
                let c = &codes[..f.codes_len(n)];
                let _ = f.dequantize(c, &scales[..Mx::scales_len(n)], &mut y);
            }
            Op::Nvfp4Quantize(round) => {
                let c = &mut codes[..Nvfp4::codes_len(n)];
                let s = &mut scales[..Nvfp4::scales_len(n)];
                let _ = Nvfp4::new(round).quantize(black_box(x), t, c, s, &bits, 0);
            }
            Op::Nvfp4Dequantize => {
                let c = &codes[..Nvfp4::codes_len(n)];
                let s = &scales[..Nvfp4::scales_len(n)];
                let _ = Nvfp4::dequantize(c, s, t, &mut y);
            }
            Op::Floor { avx2 } => {
                sum = sum.wrapping_add(on_avx2_if(avx2, || black_box(bits).encode_bits_sum(0, n)));
            }
        }
        black_box(&mut codes);
        black_box(&mut y);
    };
    let mut half = || {
        if widening {
            black_box(&h).convert_to_f32_slice(black_box(&mut y_half));
        } else {
            black_box(&mut h_out).convert_from_f32_slice(black_box(x));
        }
        black_box(&mut h_out);
        black_box(&mut y_half);
    };
    let m = timing::compare(settings, &mut [&mut ours, &mut half]);
    black_box(sum);
    let moved = if matches!(op, Op::Chop { .. }) {
        n * (4 + 4)
    } else {
        n * (4 + 1)
    };
    let reference_moved = n * (4 + 2);
    sink.record(&Record {
        suite: SUITE.name,
        kernel: name,
        elements: n,
        seconds: m[0].best,
        gbps: moved as f64 / m[0].best / 1e9,
        reference: "half",
        ratio: m[1].best / m[0].best,
        reference_seconds: m[1].best,
        reference_gbps: reference_moved as f64 / m[1].best / 1e9,
    })?;
    Ok(())
}

/// `f()` with AVX2 forced if `avx2` (the caller checked that the CPU has
/// it), else on the detected backend.
fn on_avx2_if<R: Default>(avx2: bool, f: impl FnOnce() -> R) -> R {
    if avx2 {
        arch::with_backend(Backend::Avx2, f).unwrap_or_default()
    } else {
        f()
    }
}

/// `x` clamped to `format`'s largest magnitude (unsigned E8M0: the
/// magnitudes), into `y`: what a chop row rounds.
fn clamp_into(format: Format, x: &[f32], y: &mut [f32]) {
    let max = format.max();
    for (c, v) in y.iter_mut().zip(x) {
        let v = if format.is_signed() { *v } else { v.abs() };
        *c = v.clamp(-max, max);
    }
}

/// Fills the codes (and scales) a decoding row reads.
fn prepare(op: Op, x: &[f32], codes: &mut [u8], scales: &mut [u8], bits: &RandomStream) {
    let n = x.len();
    match op {
        Op::Decode(format) => {
            let _ = fp::encode_slice(format, x, codes, Round::NEAREST_EVEN, bits, 0);
        }
        Op::MxDequantize(f) => {
            let c = &mut codes[..f.codes_len(n)];
            let _ = Mx::new(f).quantize(x, c, &mut scales[..Mx::scales_len(n)], bits, 0);
        }
        Op::Nvfp4Dequantize => {
            let c = &mut codes[..Nvfp4::codes_len(n)];
            let s = &mut scales[..Nvfp4::scales_len(n)];
            let _ =
                Nvfp4::new(Round::NEAREST_EVEN).quantize(x, Nvfp4::tensor_scale(x), c, s, bits, 0);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_names_are_distinct() {
        let rows: Vec<&str> = ENCODE_ROWS.iter().chain(BLOCK_ROWS).map(|r| r.0).collect();
        for (i, a) in rows.iter().enumerate() {
            assert!(!rows[i + 1..].contains(a), "{a}");
        }
    }
}
