//! NVFP4 against an f64 oracle of NVIDIA's recipe: the tensor and block
//! scales, the elements, specials in every position, zero and tiny
//! blocks, partial blocks, stochastic rounding.

use std::vec;
use std::vec::Vec;

use super::super::block_oracle::{Gen, float_values, neighbours, round_to};
use super::{NVFP4_BLOCK, Nvfp4};
use crate::fp::{BlockError, Mode, Round};
use crate::rng::RandomStream;

fn e2m1() -> Vec<f64> {
    float_values(2, 1, 1, 6.0)
}

fn e4m3() -> Vec<f64> {
    float_values(4, 3, 7, 448.0)
}

/// `fl(a / b)` for f32 operands: the f64 quotient rounded to f32 is the
/// correctly rounded f32 quotient (53 >= 2 * 24 + 2).
fn div(a: f64, b: f64) -> f64 {
    f64::from((a / b) as f32)
}

/// `fl(a * b)` for f32 operands (the f64 product is exact).
fn mul(a: f64, b: f64) -> f64 {
    f64::from((a * b) as f32)
}

fn oracle_tensor_scale(x: &[f32]) -> f32 {
    let amax = x
        .iter()
        .filter(|v| v.is_finite())
        .fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
    if amax == 0.0 {
        1.0
    } else {
        div(amax, 2688.0).max(f64::from(f32::from_bits(1))) as f32
    }
}

/// (block scale value or NaN, dequantized elements) of one block.
fn oracle_block(block: &[f32], t: f32, mode: Mode) -> (f64, Vec<f64>) {
    if block.iter().any(|v| !v.is_finite()) {
        return (f64::NAN, vec![f64::NAN; block.len()]);
    }
    let t = f64::from(t);
    let amax = block.iter().fold(0.0f64, |m, v| m.max(f64::from(v.abs())));
    let scale = round_to(&e4m3(), div(div(amax, 6.0), t), Mode::NearestEven);
    let d = mul(scale, t);
    let out = block
        .iter()
        .map(|x| {
            let q = if d == 0.0 {
                f64::from(*x) * 0.0
            } else {
                div(f64::from(*x), d)
            };
            mul(round_to(&e2m1(), q, mode) * scale, t)
        })
        .collect();
    (scale, out)
}

fn run(nv: Nvfp4, x: &[f32], t: f32, first: u64) -> (Vec<u8>, Vec<u8>, Vec<f32>) {
    let mut codes = vec![0u8; Nvfp4::codes_len(x.len())];
    let mut scales = vec![0u8; Nvfp4::scales_len(x.len())];
    nv.quantize(
        x,
        t,
        &mut codes,
        &mut scales,
        &RandomStream::new(4, 4),
        first,
    )
    .unwrap();
    let mut y = vec![0.0f32; x.len()];
    Nvfp4::dequantize(&codes, &scales, t, &mut y).unwrap();
    (codes, scales, y)
}

fn check(x: &[f32], mode: Mode) {
    let t = Nvfp4::tensor_scale(x);
    assert_eq!(t.to_bits(), oracle_tensor_scale(x).to_bits());
    let (_, scales, y) = run(Nvfp4::new(Round::new(mode)), x, t, 0);
    for (b, block) in x.chunks(NVFP4_BLOCK).enumerate() {
        let (scale, want) = oracle_block(block, t, mode);
        let got_scale = crate::fp::Format::E4M3FN.decode(u32::from(scales[b]));
        assert!(got_scale.is_nan() && scale.is_nan() || f64::from(got_scale) == scale);
        for (i, w) in want.iter().enumerate() {
            let got = y[b * NVFP4_BLOCK + i];
            let same = if w.is_nan() {
                got.is_nan()
            } else {
                f64::from(got).to_bits() == w.to_bits()
            };
            assert!(same, "{mode:?} x = {:e}: got {got:e}, want {w:e}", block[i]);
        }
    }
}

fn data(g: &mut Gen, n: usize, lo: i32, hi: i32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            if g.below(10) == 0 {
                0.0
            } else {
                g.float(lo, hi)
            }
        })
        .collect()
}

#[test]
fn quantize_matches_the_oracle() {
    let mut g = Gen(21);
    for (n, lo, hi) in [
        (64, -8, 4),
        (50, -30, 10),
        (37, -149, -120),
        (40, 100, 127),
        (16, -3, -3),
    ] {
        let x = data(&mut g, n, lo, hi);
        for mode in Mode::DETERMINISTIC {
            check(&x, mode);
        }
    }
}

#[test]
fn special_values_in_every_position_make_only_their_block_nan() {
    let mut g = Gen(8);
    for special in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        for pos in 0..NVFP4_BLOCK {
            let mut x = data(&mut g, 2 * NVFP4_BLOCK, -2, 2);
            x[pos] = special;
            check(&x, Mode::NearestEven);
            let (codes, scales, y) = run(Nvfp4::default(), &x, Nvfp4::tensor_scale(&x), 0);
            assert_eq!(scales[0], 0x7f);
            assert!(codes[..8].iter().all(|c| *c == 0));
            assert!(y[..NVFP4_BLOCK].iter().all(|v| v.is_nan()));
            assert!(y[NVFP4_BLOCK..].iter().all(|v| v.is_finite()));
        }
    }
}

#[test]
fn zero_and_vanishing_blocks_keep_signs() {
    let x = [0.0f32, -0.0].repeat(10);
    check(&x, Mode::NearestEven);
    // A block far below the tensor's amax: its scale rounds to 0.
    let mut x = vec![1e-6f32, -1e-6, 3e-7, 0.0];
    x.extend([1000.0f32; 16]);
    x.rotate_left(4);
    let (_, scales, y) = run(Nvfp4::default(), &x, Nvfp4::tensor_scale(&x), 0);
    assert_eq!(scales[1], 0);
    assert_eq!(
        y[16..].iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
        [0, 0x8000_0000, 0, 0]
    );
    check(&x, Mode::Up);
}

#[test]
fn partial_blocks_and_stochastic_rounding() {
    let mut g = Gen(12);
    let x = data(&mut g, 75, -6, 6);
    let t = Nvfp4::tensor_scale(&x);
    for mode in [
        Mode::Stochastic,
        Mode::StochasticBits(2),
        Mode::StochasticEqual,
    ] {
        let nv = Nvfp4::new(Round::new(mode));
        let (codes, scales, y) = run(nv, &x, t, 500);
        for (b, block) in x.chunks(NVFP4_BLOCK).enumerate() {
            let (scale, _) = oracle_block(block, t, Mode::NearestEven);
            let d = mul(scale, f64::from(t));
            for (i, v) in block.iter().enumerate() {
                let (lo, hi) = neighbours(&e2m1(), div(f64::from(*v), d));
                let got = f64::from(y[b * NVFP4_BLOCK + i]);
                assert!(
                    got == mul(lo * scale, f64::from(t)) || got == mul(hi * scale, f64::from(t))
                );
            }
        }
        // Pieces on block boundaries with the tensor's scale.
        let (c1, s1, _) = run(nv, &x[..32], t, 500);
        let (c2, s2, _) = run(nv, &x[32..], t, 532);
        assert_eq!(codes, [c1, c2].concat());
        assert_eq!(scales, [s1, s2].concat());
    }
    // The last, partial block is scaled by its own amax.
    let (_, _, y) = run(Nvfp4::default(), &x, t, 0);
    let (_, _, tail) = run(Nvfp4::default(), &x[64..], t, 0);
    assert_eq!(&y[64..], &tail[..]);
}

#[test]
fn bad_arguments_are_typed_errors() {
    let s = RandomStream::new(0, 0);
    let nv = Nvfp4::default();
    assert_eq!(
        nv.quantize(&[1.0; 4], 0.0, &mut [0; 2], &mut [0; 1], &s, 0),
        Err(BlockError::TensorScale { scale: 0.0 })
    );
    assert_eq!(
        Nvfp4::dequantize(&[0; 2], &[0; 2], 1.0, &mut [0.0; 4]),
        Err(BlockError::Length {
            what: "scales",
            expected: 1,
            got: 2
        })
    );
}

/// The block scale's specialised E4M3 rounding equals the general
/// encoder's on every exponent field, around every rounding boundary of
/// the normal and subnormal grids, and at the saturation edge.
#[test]
fn block_scale_rounding_equals_the_encoder() {
    use crate::fp::{Format, Overflow};
    let nearest = Round::NEAREST_EVEN.with_overflow(Overflow::Saturate);
    let stream = RandomStream::new(0, 0);
    let mut g = Gen(41);
    for field in 0..=255u32 {
        let mut mans = vec![
            0, 1, 0x7_fffe, 0x7_ffff, 0x8_0000, 0x8_0001, 0xf_ffff, 0x7f_ffff,
        ];
        // Every pattern of the top four mantissa bits: the ties of the
        // normal grid (bit 19) and of the subnormal one (bits 20 to 22).
        mans.extend((0..16).map(|k| k << 19));
        mans.extend((0..8).map(|_| g.below(1 << 23) as u32));
        for man in mans {
            let q = f32::from_bits(field << 23 | man);
            if q.is_nan() {
                continue;
            }
            let want = Format::E4M3FN.encode(q, nearest, stream, 0) as u8;
            assert_eq!(super::e4m3_nearest(q), want, "{q:e}");
        }
    }
}
