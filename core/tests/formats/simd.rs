//! The SIMD format kernels against their scalar twins on every backend
//! this CPU has: encode in every mode, chop, decode, MX and NVFP4 blocks,
//! and the edges of the encoders' fast rule.
//! Sized for debug builds (a stratified sample, not a sweep).

use tessera_core::arch::{self, Backend};
use tessera_core::fp::{self, Format, Mode, Mx, MxFormat, Nvfp4, Overflow, Round, Subnormals};
use tessera_core::rng::RandomStream;

use super::formats;

pub(crate) const STREAM: RandomStream = RandomStream::new(25, 7);

/// Every vector backend this CPU can run.
fn vector_backends() -> Vec<Backend> {
    Backend::ALL
        .into_iter()
        .filter(|b| *b != Backend::Scalar && b.is_available())
        .collect()
}

/// f32 patterns from every exponent field (both signs; the edge and a few
/// random mantissas), denser between 2^-40 and 2^20, and specials.
pub(crate) fn sample() -> Vec<f32> {
    let mut g = crate::support::Gen(25);
    let mut out = Vec::new();
    for field in 0..256u32 {
        for man in [0, 1, 0x40_0000, 0x7f_ffff, g.below(1 << 23) as u32] {
            let bits = field << 23 | man;
            out.extend([f32::from_bits(bits), f32::from_bits(bits | 1 << 31)]);
        }
    }
    out.extend((0..1500).map(|_| g.in_range(-40, 20)));
    out.extend([f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001)]);
    out
}

/// Every mode with IEEE overflow and subnormals kept, and the common
/// ones with saturation and flushing too.
fn rounds() -> Vec<Round> {
    let mut modes = Mode::DETERMINISTIC.to_vec();
    modes.extend([
        Mode::Stochastic,
        Mode::StochasticBits(0),
        Mode::StochasticBits(3),
        Mode::StochasticBits(16),
        Mode::StochasticBits(19),
        Mode::StochasticEqual,
    ]);
    let mut out: Vec<Round> = modes.into_iter().map(Round::new).collect();
    for mode in [Mode::NearestEven, Mode::Stochastic, Mode::Up] {
        out.push(Round::new(mode).with_overflow(Overflow::Saturate));
        out.push(Round::new(mode).with_subnormals(Subnormals::Flush));
    }
    out
}

/// `f` on the scalar backend and on every vector backend: the same.
pub(crate) fn on_every_backend<R: PartialEq + std::fmt::Debug>(what: &str, f: impl Fn() -> R) {
    let twin = arch::with_backend(Backend::Scalar, &f).unwrap();
    for b in vector_backends() {
        let got = arch::with_backend(b, &f).unwrap();
        assert!(got == twin, "{what} on {b}: {got:?} != {twin:?}");
    }
}

/// Codes of `x` in `f` by `round`, in the narrowest code type, and the NaN
/// count; `first` is the first element's stream position.
fn encode(f: Format, x: &[f32], round: Round, first: u64) -> (Vec<u32>, usize) {
    match f.bits() {
        0..=8 => {
            let mut c = vec![0u8; x.len()];
            let n = fp::encode_slice(f, x, &mut c, round, &STREAM, first);
            (c.into_iter().map(u32::from).collect(), n)
        }
        9..=16 => {
            let mut c = vec![0u16; x.len()];
            let n = fp::encode_slice(f, x, &mut c, round, &STREAM, first);
            (c.into_iter().map(u32::from).collect(), n)
        }
        _ => {
            let mut c = vec![0u32; x.len()];
            let n = fp::encode_slice(f, x, &mut c, round, &STREAM, first);
            (c, n)
        }
    }
}

#[test]
fn encode_kernels_equal_the_twin_on_every_backend() {
    let x = sample();
    for (name, f) in formats() {
        for round in rounds() {
            // An odd start: lanes straddle the stream's groups of 8.
            for first in [0, 3] {
                on_every_backend(&format!("{name} {round:?} at {first}"), || {
                    encode(f, &x, round, first)
                });
            }
        }
    }
}

/// Stochastic rounding across the stream's blocks of 2^32 positions (the
/// kernels derive a block's keys once per call): word 1 crosses one at
/// element 2^32, word 0 (two elements per position) at 2^33, and element
/// indices wrap at 2^64; from starts that are multiples of 16 too, where
/// the encode loop draws whole groups of four vectors.
#[test]
fn stochastic_kernels_cross_the_streams_blocks() {
    let x: Vec<f32> = sample().into_iter().step_by(7).take(160).collect();
    let unaligned = [(1 << 32) - 72, (1 << 33) - 88, u64::MAX - 70];
    let aligned = [(1 << 32) - 64, (1 << 33) - 96, u64::MAX - 63];
    for (name, f) in formats().into_iter().filter(|(_, f)| f.bits() <= 8) {
        for first in unaligned.into_iter().chain(aligned) {
            on_every_backend(&format!("{name} at {first}"), || {
                (
                    encode(f, &x, Round::STOCHASTIC, first),
                    chop(f, &x, Round::STOCHASTIC, first),
                )
            });
        }
    }
}

/// Byte outputs of 16 MiB and more are written with streaming stores on
/// AVX-512 (where the output is 16-byte aligned): the codes must be those
/// of small pieces, aligned or not. On the detected backend only (the
/// others store normally; the twin tests above cover them).
#[test]
fn large_outputs_encode_to_the_same_codes() {
    let n = (16 << 20) + 1001;
    let x: Vec<f32> = (0..n as u32)
        .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9) >> 3 | 0x3800_0000))
        .collect();
    let (mut big, mut small) = (vec![0u8; n], vec![0u8; n]);
    for round in [Round::NEAREST_EVEN, Round::new(Mode::Stochastic)] {
        for skip in [0, 3] {
            let (x, big, small) = (&x[skip..], &mut big[skip..], &mut small[skip..]);
            let _ = fp::encode_slice(Format::E4M3FN, x, big, round, &STREAM, 5);
            for (k, (a, b)) in x.chunks(4096).zip(small.chunks_mut(4096)).enumerate() {
                let _ = fp::encode_slice(Format::E4M3FN, a, b, round, &STREAM, 5 + 4096 * k as u64);
            }
            assert!(big == small, "{round:?}, skip {skip}");
        }
    }
}

/// `x` chopped in place by `chop_slice`, as bits.
fn chop(f: Format, x: &[f32], round: Round, first: u64) -> Vec<u32> {
    let mut y = x.to_vec();
    fp::chop_slice(f, &mut y, round, &STREAM, first);
    y.into_iter().map(f32::to_bits).collect()
}

/// The fast rule's modes (nearest-even, exact stochastic) with both
/// overflow policies, one with subnormals flushed and one other mode
/// (both take the general rule).
fn fast_rounds() -> Vec<Round> {
    let mut out = Vec::new();
    for mode in [Mode::NearestEven, Mode::Stochastic] {
        out.push(Round::new(mode));
        out.push(Round::new(mode).with_overflow(Overflow::Saturate));
    }
    out.push(Round::STOCHASTIC.with_subnormals(Subnormals::Flush));
    out.push(Round::new(Mode::NearestAway));
    out
}

#[test]
fn chop_kernels_equal_the_twin_on_every_backend() {
    let x = sample();
    for (name, f) in formats() {
        for round in fast_rounds() {
            on_every_backend(&format!("chop {name} {round:?}"), || chop(f, &x, round, 3));
        }
    }
}

/// Inputs at the edges of the fast rule for `f` (a format of at most 8
/// bits): every value of the format, one f32 step either side, the
/// midpoints between neighbours and one step either side of them (ties
/// in every binade, normal and subnormal, and past the largest value),
/// the neighbourhood of the smallest value and its half, and tiny values
/// far below it, with both signs; then the same with a special lane (NaN,
/// infinity, an f32 subnormal) every 23 elements, so that vectors mix
/// lanes of both rules.
fn fast_rule_edges(f: Format) -> Vec<f32> {
    let mut values: Vec<f32> = (0..1u32 << f.bits())
        .map(|c| f.decode(c))
        .filter(|v| v.is_finite() && *v >= 0.0)
        .collect();
    values.sort_by(f32::total_cmp);
    values.dedup();
    let max = *values.last().unwrap();
    let spacing = max - values[values.len() - 2];
    values.push(max + spacing);
    let step = |v: f32, k: i32| f32::from_bits(v.to_bits().wrapping_add_signed(k));
    let mut x = Vec::new();
    for pair in values.windows(2) {
        let mid = pair[0] + (pair[1] - pair[0]) / 2.0;
        for v in [pair[0], mid] {
            x.extend([step(v, -1), v, step(v, 1)]);
        }
    }
    let smallest = f.min_subnormal();
    for k in 1..40 {
        x.push(smallest / 2f32.powi(k));
        x.push(step(smallest / 2f32.powi(k), 1));
    }
    x.extend([0.0, f32::MIN_POSITIVE, 3e38, f32::MAX]);
    x.retain(|v| v.is_finite() && *v > 0.0 || *v == 0.0);
    let negative: Vec<f32> = x.iter().map(|v| -v).collect();
    x.extend(negative);
    let mut mixed = x.clone();
    let specials = [f32::NAN, f32::INFINITY, -f32::INFINITY, f32::from_bits(3)];
    for (i, v) in mixed.iter_mut().enumerate().filter(|(i, _)| i % 23 == 7) {
        *v = specials[i % specials.len()];
    }
    x.extend(mixed);
    x
}

#[test]
fn fast_rule_edges_equal_the_twin_on_every_backend() {
    for (name, f) in formats().into_iter().filter(|(_, f)| f.bits() <= 8) {
        let x = fast_rule_edges(f);
        for round in fast_rounds() {
            for first in [0, 5] {
                on_every_backend(&format!("edges of {name} {round:?} at {first}"), || {
                    (encode(f, &x, round, first), chop(f, &x, round, first))
                });
            }
        }
    }
}

#[test]
fn decode_kernels_equal_the_twin_on_every_backend() {
    let codes: Vec<u8> = (0..=255u8).chain(0..=255).rev().collect();
    let wide: Vec<u16> = (0..4096u16).map(|i| i.wrapping_mul(40503)).collect();
    for (name, f) in formats() {
        on_every_backend(name, || {
            let mut x = vec![0f32; wide.len()];
            if f.bits() <= 8 {
                x.truncate(codes.len());
                fp::decode_slice(f, &codes, &mut x);
            } else if f.bits() <= 16 {
                fp::decode_slice(f, &wide, &mut x);
            }
            x.into_iter().map(f32::to_bits).collect::<Vec<_>>()
        });
    }
}

/// Blocks with specials in every position, all-zero blocks, tiny and huge
/// blocks (the scale's limits), and ordinary data, with a partial last
/// block.
fn block_input() -> Vec<f32> {
    let mut g = crate::support::Gen(26);
    let mut x: Vec<f32> = (0..32 * 24).map(|_| g.in_range(-12, 12)).collect();
    for (b, special) in [f32::NAN, f32::INFINITY, -f32::INFINITY]
        .into_iter()
        .enumerate()
    {
        x[32 * b + (7 * b) % 32] = special;
    }
    x[32 * 3..32 * 4].fill(0.0);
    for v in &mut x[32 * 4..32 * 5] {
        *v *= 1e-38;
    }
    for v in &mut x[32 * 5..32 * 6] {
        *v = v.signum() * 3e38;
    }
    x[32 * 6] = f32::from_bits(1);
    x.extend([0.5, -3.0, 7.0]);
    x
}

#[test]
fn block_kernels_equal_the_twin_on_every_backend() {
    let x = block_input();
    let mut block_rounds = vec![Round::NEAREST_EVEN, Round::STOCHASTIC];
    block_rounds.push(Round::new(Mode::TowardZero).with_subnormals(Subnormals::Flush));
    for format in MxFormat::ALL {
        for rule in [fp::ScaleRule::Floor, fp::ScaleRule::Rceil] {
            for round in &block_rounds {
                let mx = Mx::new(format).with_rule(rule).with_round(*round);
                on_every_backend(&format!("{mx:?}"), || {
                    let mut codes = vec![0u8; format.codes_len(x.len())];
                    let mut scales = vec![0u8; Mx::scales_len(x.len())];
                    mx.quantize(&x, &mut codes, &mut scales, &STREAM, 5)
                        .unwrap();
                    let mut y = vec![0f32; x.len()];
                    format.dequantize(&codes, &scales, &mut y).unwrap();
                    (
                        codes,
                        scales,
                        y.into_iter().map(f32::to_bits).collect::<Vec<_>>(),
                    )
                });
            }
        }
    }
    let t = Nvfp4::tensor_scale(&x);
    for round in block_rounds {
        let nv = Nvfp4::new(round);
        on_every_backend(&format!("{nv:?}"), || {
            let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
            let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
            nv.quantize(&x, t, &mut codes, &mut scales, &STREAM, 16)
                .unwrap();
            let mut y = vec![0f32; x.len()];
            Nvfp4::dequantize(&codes, &scales, t, &mut y).unwrap();
            (
                codes,
                scales,
                y.into_iter().map(f32::to_bits).collect::<Vec<_>>(),
            )
        });
    }
}
