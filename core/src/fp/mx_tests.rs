//! MX blocks against the f64 oracle of `block_oracle`: the scale rules,
//! quantize/dequantize in every deterministic mode, specials in every
//! position, zero, subnormal and saturating blocks, partial blocks, and
//! stochastic rounding (neighbours, split invariance).

use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::super::block_oracle::{
    Gen, ceil_log2, float_values, floor_log2, neighbours, p2, round_to, round_to_with,
};
use super::{MX_BLOCK, Mx, MxFormat};
use crate::fp::{Mode, Round, ScaleRule, Subnormals};
use crate::rng::RandomStream;

const RULES: [ScaleRule; 4] = [
    ScaleRule::Floor,
    ScaleRule::Ceil,
    ScaleRule::Rceil,
    ScaleRule::Even,
];

/// The spec's parameters, typed in from the OCP MX v1.0 tables:
/// (nonnegative element values, emax, max, mantissa bits).
fn spec(f: MxFormat) -> (Vec<f64>, i32, f64, i32) {
    match f {
        MxFormat::E4M3 => (float_values(4, 3, 7, 448.0), 8, 448.0, 3),
        MxFormat::E5M2 => (float_values(5, 2, 15, 57344.0), 15, 57344.0, 2),
        MxFormat::E2M3 => (float_values(2, 3, 1, 7.5), 2, 7.5, 3),
        MxFormat::E3M2 => (float_values(3, 2, 3, 28.0), 4, 28.0, 2),
        MxFormat::E2M1 => (float_values(2, 1, 1, 6.0), 2, 6.0, 1),
        MxFormat::Int8 => (
            (0..=127).map(|k| f64::from(k) / 64.0).collect(),
            0,
            127.0 / 64.0,
            6,
        ),
    }
}

/// The E8M0 exponent `s` of a block of largest finite magnitude `amax`.
fn oracle_exponent(f: MxFormat, rule: ScaleRule, amax: f32) -> i32 {
    let (_, emax, max, mbits) = spec(f);
    let a = f64::from(amax);
    if a == 0.0 {
        return -127;
    }
    let s = match rule {
        ScaleRule::Floor => floor_log2(a) - emax,
        ScaleRule::Ceil => ceil_log2(a) - emax,
        ScaleRule::Even => {
            let e = floor_log2(a);
            let sig = a / p2(e);
            let rounded = (sig * p2(mbits) + 0.5).floor() / p2(mbits);
            e + i32::from(rounded >= 2.0) - emax
        }
        ScaleRule::Rceil => {
            // fl(amax * fl(1 / max)): the f64 product of two f32 is exact.
            let rcp = f64::from((1.0 / max) as f32);
            let r = f64::from((a * rcp) as f32);
            if r == 0.0 { -127 } else { ceil_log2(r) }
        }
    };
    s.clamp(-127, 127 - emax)
}

/// The oracle's dequantized block (`None` entries: NaN) and scale code.
fn oracle_block(mx: Mx, block: &[f32]) -> (u8, Vec<f64>) {
    if block.iter().any(|x| !x.is_finite()) {
        return (255, vec![f64::NAN; block.len()]);
    }
    let amax = block.iter().fold(0.0f32, |m, x| m.max(x.abs()));
    let s = oracle_exponent(mx.format, mx.rule, amax);
    let (values, ..) = spec(mx.format);
    let out = block
        .iter()
        .map(|x| {
            let v = round_to(&values, f64::from(*x) * p2(-s), mx.round.mode) * p2(s);
            // INT8 has no negative zero.
            if mx.format == MxFormat::Int8 && v == 0.0 {
                0.0
            } else {
                v
            }
        })
        .collect();
    ((s + 127) as u8, out)
}

fn quantize(mx: Mx, x: &[f32], first_index: u64) -> (Vec<u8>, Vec<u8>, Vec<f32>) {
    let mut codes = vec![0u8; mx.format.codes_len(x.len())];
    let mut scales = vec![0u8; Mx::scales_len(x.len())];
    let stream = RandomStream::new(11, 3);
    mx.quantize(x, &mut codes, &mut scales, &stream, first_index)
        .unwrap();
    let mut y = vec![0.0f32; x.len()];
    mx.format.dequantize(&codes, &scales, &mut y).unwrap();
    (codes, scales, y)
}

/// Quantizes `x` and checks every block against the oracle.
fn check(mx: Mx, x: &[f32]) {
    let (_, scales, y) = quantize(mx, x, 0);
    for (b, block) in x.chunks(MX_BLOCK).enumerate() {
        let (scale, want) = oracle_block(mx, block);
        assert_eq!(scales[b], scale, "{mx:?} block {b} {block:?}");
        for (i, w) in want.iter().enumerate() {
            let got = y[b * MX_BLOCK + i];
            let same = if w.is_nan() {
                got.is_nan()
            } else {
                f64::from(got).to_bits() == w.to_bits()
            };
            assert!(same, "{mx:?} x = {:e}: got {got:e}, want {w:e}", block[i]);
        }
    }
}

/// Amax values at every edge: random patterns, powers of two and their
/// neighbours, each format's max times powers of two, the extremes.
fn edge_amaxes() -> Vec<f32> {
    let mut v = vec![0.0, f32::MIN_POSITIVE, f32::from_bits(1), f32::MAX, 1.0];
    for e in -149..=127 {
        let p = p2(e) as f32;
        v.extend([
            p,
            f32::from_bits(p.to_bits() + 1),
            f32::from_bits(p.to_bits().max(1) - 1),
        ]);
    }
    for f in MxFormat::ALL {
        for e in (-140..=120).step_by(7) {
            let m = (f64::from(f.max()) * p2(e)) as f32;
            v.extend([
                m,
                f32::from_bits(m.to_bits() + 1),
                f32::from_bits(m.to_bits() - 1),
            ]);
        }
    }
    let mut g = Gen(7);
    v.extend((0..2000).map(|_| f32::from_bits((g.next() as u32) % 0x7f80_0000)));
    v.retain(|a| a.is_finite());
    v
}

#[test]
fn scale_rules_match_the_oracle_at_every_edge() {
    let amaxes = edge_amaxes();
    for f in MxFormat::ALL {
        for rule in RULES {
            for a in &amaxes {
                let want = (oracle_exponent(f, rule, *a) + 127) as u8;
                assert_eq!(f.block_scale(rule, *a), want, "{f:?} {rule:?} amax {a:e}");
            }
        }
        assert_eq!(f.block_scale(ScaleRule::Floor, f32::NAN), 255);
        assert_eq!(f.block_scale(ScaleRule::Rceil, f32::INFINITY), 255);
    }
}

/// Blocks of mixed magnitudes around exponent `center`, with zeros.
fn random_blocks(g: &mut Gen, n: usize, center: i32, spread: i32) -> Vec<f32> {
    (0..n)
        .map(|_| match g.below(16) {
            0 => 0.0,
            1 => -0.0,
            _ => g.float((center - spread).max(-149), (center + 2).min(127)),
        })
        .collect()
}

#[test]
fn quantize_matches_the_oracle_in_every_deterministic_mode() {
    let mut g = Gen(42);
    // Lengths with partial last blocks; magnitudes from subnormal to huge.
    // Spreads of 149 and more put f32 subnormals beside large values
    // (quotients below 2^-126: the stand-in path).
    let sets = [
        (96, 0, 12),
        (70, -120, 30),
        (33, 100, 20),
        (45, -140, 8),
        (64, 126, 40),
        (64, 0, 149),
        (40, 100, 249),
    ];
    for (n, center, spread) in sets {
        let x = random_blocks(&mut g, n, center, spread);
        for f in MxFormat::ALL {
            for rule in RULES {
                for mode in Mode::DETERMINISTIC {
                    check(Mx::new(f).with_rule(rule).with_round(Round::new(mode)), &x);
                }
            }
        }
    }
}

#[test]
fn special_values_in_every_position_make_the_block_nan() {
    let mut g = Gen(5);
    for f in MxFormat::ALL {
        let mx = Mx::new(f);
        for special in [f32::NAN, -f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            for pos in 0..MX_BLOCK {
                // Two blocks: the special in the first, the second intact.
                let mut x = random_blocks(&mut g, 2 * MX_BLOCK, 3, 10);
                x[pos] = special;
                let (codes, scales, y) = quantize(mx, &x, 0);
                assert_eq!(scales[0], 255, "{f:?} {special} at {pos}");
                assert!(y[..MX_BLOCK].iter().all(|v| v.is_nan()));
                assert!(codes[..f.codes_len(MX_BLOCK)].iter().all(|c| *c == 0));
                check(mx, &x[MX_BLOCK..]);
                assert_eq!(&y[MX_BLOCK..], &quantize(mx, &x[MX_BLOCK..], 0).2[..]);
            }
        }
    }
}

#[test]
fn zero_blocks_take_the_smallest_scale_and_keep_signs() {
    for f in MxFormat::ALL {
        for rule in RULES {
            let x = [0.0f32, -0.0].repeat(20);
            let (_, scales, y) = quantize(Mx::new(f).with_rule(rule), &x, 0);
            assert_eq!(scales, [0, 0]);
            for (a, b) in x.iter().zip(&y) {
                let want = if f == MxFormat::Int8 { 0.0 } else { *a };
                assert_eq!(b.to_bits(), want.to_bits(), "{f:?}");
            }
        }
    }
}

#[test]
fn subnormal_inputs_and_scales_are_exact() {
    // Blocks of f32 subnormals: scale 2^-127 (itself an f32 subnormal).
    let mut g = Gen(9);
    let x: Vec<f32> = (0..64).map(|_| g.float(-149, -127)).collect();
    for f in MxFormat::ALL {
        let (_, scales, _) = quantize(Mx::new(f), &x, 0);
        assert!(scales.iter().all(|s| *s <= 1), "{f:?} {scales:?}");
        for mode in Mode::DETERMINISTIC {
            check(Mx::new(f).with_round(Round::new(mode)), &x);
        }
    }
    // Dequantizing with scale 2^-127 is exact: E2M1 0.5 gives 2^-128.
    let mut y = [0.0f32; 2];
    MxFormat::E2M1.dequantize(&[0x91], &[0], &mut y).unwrap();
    assert_eq!(y, [p2(-128) as f32, -p2(-128) as f32]);
}

#[test]
fn scales_saturate_at_f32_max() {
    let x = [f32::MAX, -f32::MAX, 1.0, f32::MAX / 3.0, 1e30];
    for f in MxFormat::ALL {
        for rule in RULES {
            for mode in Mode::DETERMINISTIC {
                check(Mx::new(f).with_rule(rule).with_round(Round::new(mode)), &x);
            }
            let (_, scales, y) = quantize(Mx::new(f).with_rule(rule), &x, 0);
            assert!(
                scales[0] <= 254 && y.iter().all(|v| v.is_finite()),
                "{f:?} {rule:?}"
            );
        }
    }
    // Ceil's scale would be 2^(128 - emax): it saturates one lower.
    for f in MxFormat::ALL {
        assert_eq!(
            i32::from(f.block_scale(ScaleRule::Ceil, f32::MAX)),
            254 - f.emax()
        );
    }
}

#[test]
fn partial_blocks_equal_their_own_quantize() {
    let mut g = Gen(77);
    let x = random_blocks(&mut g, 100, 0, 6);
    for f in MxFormat::ALL {
        let mx = Mx::new(f);
        for n in 1..=70 {
            let (_, scales, y) = quantize(mx, &x[..n], 0);
            let last = (n - 1) / MX_BLOCK * MX_BLOCK;
            let (_, tail_scales, tail) = quantize(mx, &x[last..n], 0);
            assert_eq!(scales.last(), tail_scales.last());
            assert_eq!(&y[last..], &tail[..]);
        }
    }
}

#[test]
fn stochastic_rounding_gives_a_neighbour_and_splits_agree() {
    let mut g = Gen(3);
    let x = random_blocks(&mut g, 160, 0, 10);
    for f in MxFormat::ALL {
        let (values, ..) = spec(f);
        for mode in [
            Mode::Stochastic,
            Mode::StochasticBits(3),
            Mode::StochasticEqual,
        ] {
            let mx = Mx::new(f)
                .with_rule(ScaleRule::Ceil)
                .with_round(Round::new(mode));
            let (codes, scales, y) = quantize(mx, &x, 1000);
            for (b, block) in x.chunks(MX_BLOCK).enumerate() {
                let s = i32::from(scales[b]) - 127;
                for (i, v) in block.iter().enumerate() {
                    let (lo, hi) = neighbours(&values, f64::from(*v) * p2(-s));
                    let got = f64::from(y[b * MX_BLOCK + i]) * p2(-s);
                    assert!(
                        got == lo || got == hi,
                        "{f:?} {mode:?} {v:e}: {got} not {lo} or {hi}"
                    );
                }
            }
            // Pieces starting on block boundaries, each with its offset.
            let mut pieces = (Vec::new(), Vec::new());
            for start in [0, 64, 96] {
                let end = if start == 96 {
                    x.len()
                } else {
                    start + if start == 0 { 64 } else { 32 }
                };
                let (c, s, _) = quantize(mx, &x[start..end], 1000 + start as u64);
                pieces.0.extend(c);
                pieces.1.extend(s);
            }
            assert_eq!((codes, scales), pieces, "{f:?} {mode:?}");
        }
    }
}

#[test]
fn length_errors_carry_the_lengths() {
    let mx = Mx::new(MxFormat::E2M1);
    let s = RandomStream::new(0, 0);
    let err = mx.quantize(&[1.0; 33], &mut [0; 17], &mut [0; 1], &s, 0);
    assert_eq!(
        err,
        Err(super::BlockError::Length {
            what: "scales",
            expected: 2,
            got: 1
        })
    );
    let err = mx.format.dequantize(&[0; 16], &[0; 2], &mut [0.0; 33]);
    assert_eq!(
        err,
        Err(super::BlockError::Length {
            what: "codes",
            expected: 17,
            got: 16
        })
    );
}

/// A block of representable values `P_i 2^s`, element 0 in the top binade
/// (so Floor picks `s`): codes of no NaN or infinity.
fn representable_block(f: MxFormat, codes: &[u8], s: i32) -> Vec<f32> {
    let (values, emax, ..) = spec(f);
    let top: Vec<f64> = values.iter().copied().filter(|v| *v >= p2(emax)).collect();
    codes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let v = if i == 0 {
                top[usize::from(*c) % top.len()]
            } else {
                values[usize::from(*c) % values.len()]
            };
            // INT8 has no negative zero.
            let negative = c & 0x80 != 0 && !(f == MxFormat::Int8 && v == 0.0);
            let v = if negative { -v } else { v };
            (v * p2(s)) as f32
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn dequantize_of_quantize_is_exact_on_representable_blocks(
        f in prop::sample::select(MxFormat::ALL.to_vec()),
        codes in prop::collection::vec(any::<u8>(), 1..=40),
        s in -127i32..=112,
        mode in prop::sample::select(vec![Mode::NearestEven, Mode::Up, Mode::ToOdd, Mode::Stochastic, Mode::StochasticEqual]),
    ) {
        let x = representable_block(f, &codes, s);
        // Every block of the slice has its own top element only if it
        // starts at a multiple of 32: check the first block alone.
        let x = &x[..x.len().min(MX_BLOCK)];
        let (_, scales, y) = quantize(Mx::new(f).with_round(Round::new(mode)), x, 0);
        prop_assert_eq!(i32::from(scales[0]) - 127, s);
        let same = x.iter().zip(&y).all(|(a, b)| a.to_bits() == b.to_bits());
        prop_assert!(same, "{:?} {:?}", x, y);
    }
}

/// Known answers from outside: torchao's `test_to_mx_rceil` vectors
/// (test/prototype/mx_formats/test_mx_tensor.py: f32 bit patterns in,
/// E8M0 scale and E4M3 codes out, RCEIL).
#[test]
fn rceil_matches_torchaos_vectors() {
    let cases: [([u32; 32], u8, [u8; 32]); 2] = [
        (
            [
                1037408064, 1058534842, 1053630662, 1063310394, 994704128, 1057245441, 1060663708,
                1058053571, 1052395648, 1064831570, 1038427336, 1064777688, 1059248393, 1060959028,
                1062878286, 1057799482, 1057854101, 1053562724, 1027482352, 1060498324, 1063238522,
                1060472055, 1054346794, 1029092912, 1056687298, 1059146141, 1037992128, 1064097772,
                1056522806, 1059255744, 1064364912, 1060606252,
            ],
            119,
            [
                93, 113, 109, 118, 53, 112, 116, 113, 108, 120, 94, 119, 114, 116, 118, 113, 113,
                109, 84, 115, 118, 115, 110, 85, 112, 114, 94, 119, 112, 114, 119, 115,
            ],
        ),
        (
            [
                8388608, 1063716449, 1064039365, 1063568877, 1051091338, 1062185569, 1034449408,
                1060813641, 1054893736, 1034907680, 1036660744, 1023639888, 1058536559, 1050896496,
                1049237634, 1064950601, 1051852994, 1059794063, 1054011102, 1062023602, 1059467900,
                1062276774, 1059155029, 1053287574, 1064378711, 1055768540, 1045266076, 1059575077,
                1054928758, 1040468200, 1058061961, 1053066436,
            ],
            119,
            [
                0, 118, 119, 118, 106, 117, 91, 116, 110, 91, 93, 80, 113, 106, 105, 120, 107, 115,
                109, 117, 114, 117, 114, 108, 119, 111, 101, 114, 110, 96, 113, 108,
            ],
        ),
    ];
    let mx = Mx::new(MxFormat::E4M3).with_rule(ScaleRule::Rceil);
    for (bits, scale, want) in cases {
        let x = bits.map(f32::from_bits);
        let (codes, scales, _) = quantize(mx, &x, 0);
        assert_eq!((scales[0], &codes[..]), (scale, &want[..]));
    }
}

#[test]
fn caller_supplied_bits_replay_the_stream() {
    use crate::rng::Replay;
    let mut g = Gen(13);
    let x = random_blocks(&mut g, 70, 0, 6);
    let s = RandomStream::new(11, 3);
    // Record the bits stochastic rounding reads here (half bits, word 1).
    let first = 1000u64;
    let words: Vec<u32> = (0..x.len() as u64)
        .flat_map(|i| [u32::from(s.half_bits(first + i)), s.word(first + i, 1)])
        .collect();
    let replay = Replay::new(&words, core::num::NonZeroUsize::new(2).unwrap());
    for f in MxFormat::ALL {
        let mx = Mx::new(f).with_round(Round::STOCHASTIC);
        let (codes, scales, _) = quantize(mx, &x, first);
        let mut replayed = (vec![0u8; codes.len()], vec![0u8; scales.len()]);
        mx.quantize(&x, &mut replayed.0, &mut replayed.1, &replay, 0)
            .unwrap();
        assert_eq!((codes, scales), replayed, "{f:?}");
    }
}

#[test]
fn flushed_subnormals_match_the_oracle() {
    let mut g = Gen(17);
    let x = random_blocks(&mut g, 96, 0, 14);
    for f in MxFormat::ALL {
        let (values, _, _, mbits) = spec(f);
        for rule in RULES {
            for mode in Mode::DETERMINISTIC {
                let flush = Round::new(mode).with_subnormals(Subnormals::Flush);
                let mx = Mx::new(f).with_rule(rule).with_round(flush);
                let (_, scales, y) = quantize(mx, &x, 0);
                if f == MxFormat::Int8 {
                    // INT8 has no subnormals: Flush changes nothing.
                    let keep = quantize(mx.with_round(Round::new(mode)), &x, 0);
                    assert_eq!((scales, y), (keep.1, keep.2));
                    continue;
                }
                // Values without subnormals; parity from the mantissa.
                // 0, then 2^mbits - 1 subnormals, then the smallest normal.
                let min_normal = values[1 << mbits];
                let flushed: Vec<f64> = values
                    .iter()
                    .copied()
                    .filter(|v| *v == 0.0 || *v >= min_normal)
                    .collect();
                let odd = |i: usize| {
                    let v = flushed[i];
                    v != 0.0 && ((v / p2(floor_log2(v)) - 1.0) * p2(mbits)) as u32 & 1 == 1
                };
                for (b, block) in x.chunks(MX_BLOCK).enumerate() {
                    let s = i32::from(scales[b]) - 127;
                    assert_eq!(scales[b], oracle_block(mx, block).0);
                    for (i, v) in block.iter().enumerate() {
                        let want =
                            round_to_with(&flushed, odd, f64::from(*v) * p2(-s), mode) * p2(s);
                        let got = f64::from(y[b * MX_BLOCK + i]);
                        assert_eq!(got.to_bits(), want.to_bits(), "{f:?} {mode:?} {v:e}");
                    }
                }
            }
        }
    }
}
