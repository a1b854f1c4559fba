//! The lane kernels of decode and of MX and NVFP4 blocks against their
//! scalar twins on every backend, at their edges: every code in every
//! code type (high bits set) and vector position, specials in every
//! position of a block, all-zero, denormal-scaled and saturating blocks,
//! every FP4/FP6 packing phase and partial last block, every scale code,
//! and random bits from a source other than the stream. Small inputs.

use core::num::NonZeroUsize;

use tessera_core::fp::{self, Mode, Mx, MxFormat, Nvfp4, Round, ScaleRule, Subnormals};
use tessera_core::rng::Replay;

use super::formats;
use super::simd::{STREAM, on_every_backend};

fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}

#[test]
fn decode_every_code_type_position_and_tail() {
    // 256 codes shifted by one per pass: every code in every lane, with a
    // tail shorter than a vector.
    let codes: Vec<u32> = (0..17 * 256 + 13)
        .map(|i| (i + i / 256) as u32 % 256)
        .collect();
    for (name, f) in formats().into_iter().filter(|(_, f)| f.bits() <= 8) {
        on_every_backend(name, || {
            let mut y = vec![0f32; codes.len()];
            let narrow: Vec<u8> = codes.iter().map(|c| *c as u8).collect();
            fp::decode_slice(f, &narrow, &mut y);
            let mut out = bits(&y);
            // Bits above the format's are ignored.
            let wide: Vec<u16> = codes.iter().map(|c| (*c | 0xa500) as u16).collect();
            fp::decode_slice(f, &wide, &mut y);
            out.extend(bits(&y));
            let word: Vec<u32> = codes.iter().map(|c| c | 0xdead_0000).collect();
            fp::decode_slice(f, &word[..1000], &mut y[..1000]);
            out.extend(bits(&y));
            out
        });
    }
}

/// Blocks of `block` elements: a special in every position (NaN, +inf,
/// -inf in turn), all zeros, signed zeros, denormal and tiny inputs (the
/// smallest scales), the largest f32 (the scale's top), and ordinary
/// blocks, then `tail` more.
fn edge_input(block: usize, tail: usize) -> Vec<f32> {
    let mut g = crate::support::Gen(27);
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
    let mut x = Vec::new();
    for p in 0..block {
        let mut b: Vec<f32> = (0..block).map(|_| g.in_range(-8, 8)).collect();
        b[p] = specials[p % 3];
        x.extend(b);
    }
    x.extend(vec![0.0; block]);
    x.extend((0..block).map(|i| if i % 2 == 0 { -0.0 } else { 0.0 }));
    x.extend(
        (0..block)
            .map(|i| f32::from_bits(1 + i as u32 * 977) * if i % 3 == 0 { -1.0 } else { 1.0 }),
    );
    x.extend((0..block).map(|_| g.in_range(-140, -120)));
    x.extend((0..block).map(|i| {
        if i % 2 == 0 {
            f32::MAX
        } else {
            -g.in_range(120, 127)
        }
    }));
    x.extend((0..block).map(|_| g.in_range(100, 127)));
    x.extend((0..4 * block + tail).map(|_| g.in_range(-20, 20)));
    x
}

/// MX quantize then dequantize of `x` (codes, scales, values).
fn mx_round_trip(mx: Mx, x: &[f32], first: u64, replay: bool) -> (Vec<u8>, Vec<u8>, Vec<u32>) {
    let mut codes = vec![0u8; mx.format.codes_len(x.len())];
    let mut scales = vec![0u8; Mx::scales_len(x.len())];
    let words: Vec<u32> = (0..2 * x.len() as u32)
        .map(|i| i.wrapping_mul(2_654_435_761))
        .collect();
    let source = Replay::new(&words, NonZeroUsize::new(2).unwrap());
    if replay {
        mx.quantize(x, &mut codes, &mut scales, &source, 0).unwrap();
    } else {
        mx.quantize(x, &mut codes, &mut scales, &STREAM, first)
            .unwrap();
    }
    let mut y = vec![0f32; x.len()];
    mx.format.dequantize(&codes, &scales, &mut y).unwrap();
    (codes, scales, bits(&y))
}

#[test]
fn mx_edges_equal_the_twin_on_every_backend() {
    // Tails 0..=3 of a block past a multiple of 4: every FP6 phase.
    for (format, tail) in MxFormat::ALL.into_iter().zip([0, 1, 2, 3, 29, 31]) {
        let x = edge_input(32, tail);
        for rule in [ScaleRule::Floor, ScaleRule::Ceil, ScaleRule::Even] {
            for round in [Round::NEAREST_EVEN, Round::STOCHASTIC] {
                let mx = Mx::new(format).with_rule(rule).with_round(round);
                on_every_backend(&format!("{mx:?}"), || mx_round_trip(mx, &x, 3, false));
            }
        }
        let mx = Mx::new(format)
            .with_round(Round::new(Mode::StochasticBits(3)).with_subnormals(Subnormals::Flush));
        on_every_backend(&format!("{mx:?} replayed"), || {
            mx_round_trip(mx, &x, 0, true)
        });
    }
}

#[test]
fn mx_partial_lengths_equal_the_twin_on_every_backend() {
    let x = edge_input(32, 0);
    for format in [MxFormat::E2M1, MxFormat::E3M2, MxFormat::Int8] {
        let mx = Mx::new(format).with_rule(ScaleRule::Rceil);
        on_every_backend(&format!("{mx:?}"), || {
            [1, 2, 3, 5, 31, 33, 34, 35, 63, 97]
                .map(|n| mx_round_trip(mx, &x[32 * 33..32 * 33 + n], 32, false))
        });
    }
}

#[test]
fn dequantize_every_code_and_scale_equals_the_twin() {
    // Every byte in every position of a block, and every scale code.
    let codes: Vec<u8> = (0..256 * 24 + 7).map(|i| (i * 7 + i / 256) as u8).collect();
    for format in MxFormat::ALL {
        let n = (0..=256 * 32 + 7)
            .rev()
            .find(|n| format.codes_len(*n) <= codes.len())
            .unwrap();
        let scales: Vec<u8> = (0..Mx::scales_len(n)).map(|b| b as u8).collect();
        on_every_backend(&format!("{format:?}"), || {
            let mut y = vec![0f32; n];
            format
                .dequantize(&codes[..format.codes_len(n)], &scales, &mut y)
                .unwrap();
            bits(&y)
        });
    }
    let n = 256 * 16 + 5;
    let scales: Vec<u8> = (0..Nvfp4::scales_len(n)).map(|b| b as u8).collect();
    for t in [1.0, 2f32.powi(-140), 1e30] {
        on_every_backend(&format!("nvfp4 t = {t}"), || {
            let mut y = vec![0f32; n];
            Nvfp4::dequantize(&codes[..Nvfp4::codes_len(n)], &scales, t, &mut y).unwrap();
            bits(&y)
        });
    }
}

#[test]
fn nvfp4_edges_equal_the_twin_on_every_backend() {
    let x = edge_input(16, 7);
    let finite_t = Nvfp4::tensor_scale(&x);
    for t in [finite_t, 1.0, 2f32.powi(-149), 1e-30] {
        for round in [Round::NEAREST_EVEN, Round::STOCHASTIC, Round::new(Mode::Up)] {
            let nv = Nvfp4::new(round);
            on_every_backend(&format!("{nv:?} t = {t}"), || {
                let run = |x: &[f32]| {
                    let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
                    let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
                    nv.quantize(x, t, &mut codes, &mut scales, &STREAM, 16)
                        .unwrap();
                    let mut y = vec![0f32; x.len()];
                    Nvfp4::dequantize(&codes, &scales, t, &mut y).unwrap();
                    (codes, scales, bits(&y))
                };
                (run(&x), run(&x[..17]), run(&x[..3]))
            });
        }
    }
}

/// `2^e` for `-149 <= e <= 127`, exactly.
fn pow2(e: i32) -> f32 {
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << (e + 149))
    }
}

/// Blocks of `block` elements, each led (at a varying position) by one
/// amax at an edge of the scale rules, its other elements below it:
/// every group of blocks whose amaxes and scales the kernels take in
/// lanes (zero, f32 subnormal, powers of two and their neighbours, near
/// f32's max), one NaN block near the end.
fn edge_amax_input(block: usize) -> Vec<f32> {
    let mut g = crate::support::Gen(41);
    let mut amaxes = vec![0.0, f32::from_bits(1), f32::from_bits(0x007f_ffff)];
    amaxes.extend([f32::MIN_POSITIVE, f32::MAX, 448.0, 6.0, 7.5, 28.0, 57344.0]);
    for e in (-149..=127).step_by(3) {
        let p = pow2(e);
        let bits = p.to_bits();
        amaxes.extend([p, f32::from_bits(bits + 1), f32::from_bits(bits - 1)]);
    }
    amaxes.extend((0..64).map(|_| g.in_range(-130, 127).abs()));
    // Whole groups of 16 blocks (the widest backend's), and one NaN block.
    amaxes.resize(amaxes.len().next_multiple_of(16) + 16, 1.0);
    let mut x = Vec::new();
    for (b, a) in amaxes.iter().enumerate() {
        x.extend((0..block).map(|i| {
            if i == b % block {
                if b % 2 == 0 { *a } else { -*a }
            } else {
                a * [0.5, -0.25, 0.0, 0.75][i % 4]
            }
        }));
    }
    let last = x.len() - 5;
    x[last] = f32::NAN;
    x
}

#[test]
fn scales_in_lanes_equal_the_twin_at_every_edge() {
    let x = edge_amax_input(32);
    for format in MxFormat::ALL {
        for rule in [
            ScaleRule::Floor,
            ScaleRule::Ceil,
            ScaleRule::Rceil,
            ScaleRule::Even,
        ] {
            let mx = Mx::new(format).with_rule(rule);
            on_every_backend(&format!("{mx:?}"), || mx_round_trip(mx, &x, 0, false));
        }
    }
    let x = edge_amax_input(16);
    for t in [Nvfp4::tensor_scale(&x), 1.0, pow2(-149), 1e-30, 1e30] {
        on_every_backend(&format!("nvfp4 t = {t}"), || nvfp4_nearest(&x, t));
    }
}

/// `x`'s NVFP4 codes and block scales under tensor scale `t`, nearest-even.
fn nvfp4_nearest(x: &[f32], t: f32) -> (Vec<u8>, Vec<u8>) {
    let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
    let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
    Nvfp4::new(Round::NEAREST_EVEN)
        .quantize(x, t, &mut codes, &mut scales, &STREAM, 0)
        .unwrap();
    (codes, scales)
}

#[test]
fn nvfp4_quotients_at_e2m1_boundaries_equal_the_twin() {
    // Blocks led by `6 s t` (block scale `s`), then elements whose
    // quotients lie within 12 units of an E2M1 value, midpoint or power
    // of two, or at random, for scales and tensor scales of every kind.
    let marks = [
        0.25f32, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0,
    ];
    let mut g = crate::support::Gen(43);
    for t in [1.0, 0.125, 0.3, 1e-30, pow2(-140)] {
        let mut x = Vec::new();
        for s in [1.0f32, 0.875, 3.25, 0.01171875, 448.0, 0.001953125] {
            let d = s * t;
            for (j, m) in marks.iter().enumerate() {
                for k in -12i32..=12 {
                    if x.len() % 16 == 0 {
                        x.push(6.0 * s * t);
                    }
                    let q = f32::from_bits((m * d).to_bits().wrapping_add_signed(k));
                    x.push(if (j as i32 + k).rem_euclid(2) == 0 {
                        q
                    } else {
                        -q
                    });
                }
            }
            x.extend((0..64).map(|_| g.in_range(-4, 2) * d));
        }
        x.truncate(x.len() / 16 * 16);
        on_every_backend(&format!("nvfp4 t = {t}"), || nvfp4_nearest(&x, t));
    }
}

/// Whole groups of blocks (16, the widest backend's) of ordinary data, in
/// the loop compiled with the encoder's fast rule: per block, magnitudes
/// spread below the amax by 0 to 40 binades (elements below every
/// format's smallest value, f32 subnormals beside normal amaxes), zeros,
/// and elements of the amax's binade above the element max (Floor
/// saturates them); then a partial group.
fn fast_group_input(block: usize) -> Vec<f32> {
    let mut g = crate::support::Gen(47);
    let mut x = Vec::new();
    for b in 0..3 * 16 + 5 {
        let top = g.in_range(-30, 30).abs().log2().floor() as i32;
        let spread = (b % 5 * 10) as i32;
        x.extend((0..block).map(|i| match (i + b) % 11 {
            0 => 0.0,
            1 => -0.0,
            2 => f32::from_bits(g.next() as u32 & 0x807f_ffff),
            3 => g.in_range(top, top) * if b % 2 == 0 { 1.0 } else { -1.0 },
            _ => g.in_range((top - spread).max(-126), top),
        }));
    }
    x
}

#[test]
fn fast_groups_equal_the_twin_on_every_backend() {
    let x = fast_group_input(32);
    for format in MxFormat::ALL {
        for rule in [ScaleRule::Floor, ScaleRule::Even] {
            for round in [Round::NEAREST_EVEN, Round::STOCHASTIC] {
                let mx = Mx::new(format).with_rule(rule).with_round(round);
                on_every_backend(&format!("{mx:?}"), || {
                    (
                        mx_round_trip(mx, &x, 3, false),
                        mx_round_trip(mx, &x, 0, true),
                    )
                });
            }
        }
    }
    let x = fast_group_input(16);
    // 2^-149: the quotients of large blocks pass f32's range.
    for t in [Nvfp4::tensor_scale(&x), 0.3, pow2(-149)] {
        for round in [Round::NEAREST_EVEN, Round::STOCHASTIC] {
            let nv = Nvfp4::new(round);
            on_every_backend(&format!("{nv:?} t = {t}"), || {
                let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
                let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
                nv.quantize(&x, t, &mut codes, &mut scales, &STREAM, 5)
                    .unwrap();
                (codes, scales)
            });
        }
    }
}

/// MXFP8 codes of 16 MiB and more (written with streaming stores where
/// the backend has them) equal those of small pieces, aligned or not. On
/// the detected backend only (the others store normally; the twin tests
/// above cover them).
#[test]
fn large_block_outputs_quantize_to_the_same_codes() {
    let n = (16 << 20) + 1001;
    let x: Vec<f32> = (0..n as u32)
        .map(|i| f32::from_bits(i.wrapping_mul(0x9e37_79b9) >> 3 | 0x3800_0000))
        .collect();
    let mut scales = (vec![0u8; Mx::scales_len(n)], vec![0u8; Mx::scales_len(n)]);
    let (mut big, mut small) = (vec![0u8; n + 1], vec![0u8; n + 1]);
    for round in [Round::NEAREST_EVEN, Round::STOCHASTIC] {
        let mx = Mx::new(MxFormat::E4M3).with_round(round);
        for skip in [0, 1] {
            let (big, small) = (&mut big[skip..skip + n], &mut small[skip..skip + n]);
            mx.quantize(&x, big, &mut scales.0, &STREAM, 5).unwrap();
            let pieces = x.chunks(4096).zip(small.chunks_mut(4096));
            for (k, ((a, b), s)) in pieces.zip(scales.1.chunks_mut(128)).enumerate() {
                mx.quantize(a, b, s, &STREAM, 5 + 4096 * k as u64).unwrap();
            }
            assert!(
                big == small && scales.0 == scales.1,
                "{round:?}, skip {skip}"
            );
        }
    }
}
