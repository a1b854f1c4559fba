//! Every format and rounding mode of `fp::Format` against an independent
//! oracle (`formats/oracle.rs`): every code decoded, a stratified sample
//! of f32 inputs rounded in every deterministic mode, the stochastic modes'
//! expectations by enumerating their random bits, and properties.

mod blocks;
mod oracle;
mod simd;

use core::num::NonZeroUsize;

use proptest::prelude::*;
use tessera_core::fp::{self, Format, Mode, NanEncoding, Overflow, Round, Subnormals};
use tessera_core::rng::{RandomBits, RandomStream, Replay};

use oracle::{Values, pow2, same};

/// Every named format, and CPFloat and Graphcore-scaled ones.
pub(crate) fn formats() -> Vec<(&'static str, Format)> {
    vec![
        ("e3m4", Format::E3M4),
        ("e4m3", Format::E4M3),
        ("e4m3fn", Format::E4M3FN),
        ("e4m3fnuz", Format::E4M3FNUZ),
        ("e4m3b11fnuz", Format::E4M3B11FNUZ),
        ("e5m2", Format::E5M2),
        ("e5m2fnuz", Format::E5M2FNUZ),
        ("e8m0fnu", Format::E8M0FNU),
        ("e2m3fn", Format::E2M3FN),
        ("e3m2fn", Format::E3M2FN),
        ("e2m1fn", Format::E2M1FN),
        ("f143 scale -32", Format::F143.with_scale_bias(-32).unwrap()),
        ("f152 scale 31", Format::F152.with_scale_bias(31).unwrap()),
        ("cpfloat p3 -6..7", Format::cpfloat(3, -6, 7, true).unwrap()),
        (
            "cpfloat p5 -3..10 flush",
            Format::cpfloat(5, -3, 10, false).unwrap(),
        ),
        (
            "cpfloat p2 -126..127",
            Format::cpfloat(2, -126, 127, true).unwrap(),
        ),
        ("f16", Format::F16),
        ("bf16", Format::BF16),
        ("tf32", Format::TF32),
    ]
}

fn rounds(modes: &[Mode]) -> Vec<Round> {
    let mut out = Vec::new();
    for &mode in modes {
        for overflow in [Overflow::Infinity, Overflow::Saturate] {
            for subnormals in [Subnormals::Keep, Subnormals::Flush] {
                out.push(Round {
                    mode,
                    overflow,
                    subnormals,
                });
            }
        }
    }
    out
}

const STREAM: RandomStream = RandomStream::new(25, 1);

/// The table of `fp`'s docs, checked: bits, bias, max, min normal, min
/// subnormal for every named format (ml_dtypes' finfo, OCP, gfloat).
#[test]
fn named_formats_have_the_published_figures() {
    let p = |e: i32| 2f32.powi(e);
    let table: [(Format, u32, i32, f32, f32, f32); 14] = [
        (Format::E3M4, 8, 3, 15.5, p(-2), p(-6)),
        (Format::E4M3, 8, 7, 240.0, p(-6), p(-9)),
        (Format::E4M3FN, 8, 7, 448.0, p(-6), p(-9)),
        (Format::E4M3FNUZ, 8, 8, 240.0, p(-7), p(-10)),
        (Format::E4M3B11FNUZ, 8, 11, 30.0, p(-10), p(-13)),
        (Format::E5M2, 8, 15, 57344.0, p(-14), p(-16)),
        (Format::E5M2FNUZ, 8, 16, 57344.0, p(-15), p(-17)),
        (Format::E8M0FNU, 8, 127, p(127), p(-127), p(-127)),
        (Format::E2M3FN, 6, 1, 7.5, 1.0, p(-3)),
        (Format::E3M2FN, 6, 3, 28.0, p(-2), p(-4)),
        (Format::E2M1FN, 4, 1, 6.0, 1.0, p(-1)),
        (Format::F16, 16, 15, 65504.0, p(-14), p(-24)),
        (
            Format::BF16,
            16,
            127,
            f32::from_bits(0x7f7f_0000),
            p(-126),
            p(-133),
        ),
        (
            Format::TF32,
            19,
            127,
            f32::from_bits(0x7f7f_e000),
            p(-126),
            p(-136),
        ),
    ];
    for (f, bits, bias, max, min_normal, min_sub) in table {
        assert_eq!(
            (
                f.bits(),
                f.bias(),
                f.max(),
                f.min_normal(),
                f.min_subnormal()
            ),
            (bits, bias, max, min_normal, min_sub),
            "{f:?}"
        );
        // The oracle's list agrees on max and the smallest positive value.
        let v = Values::new(f);
        assert_eq!(v.max().0, f64::from(max), "{f:?}");
        let smallest = v.all.iter().find(|(x, _)| *x > 0.0).unwrap().0;
        assert_eq!(smallest, f64::from(min_sub), "{f:?}");
    }
    assert_eq!(Format::F143, Format::E4M3FNUZ);
    assert_eq!(Format::F152, Format::E5M2FNUZ);
    assert!(!Format::E8M0FNU.has_zero() && !Format::E8M0FNU.is_signed());
    assert_eq!(Format::E4M3FN.nan_encoding(), NanEncoding::AllOnes);
}

#[test]
fn format_errors_carry_what_was_asked() {
    use tessera_core::fp::FormatError;
    assert_eq!(
        Format::cpfloat(1, -6, 7, true),
        Err(FormatError::Precision { precision: 1 })
    );
    assert_eq!(
        Format::cpfloat(8, -127, 127, true),
        Err(FormatError::ExponentRange {
            emin: -127,
            emax: 127
        })
    );
    assert_eq!(
        Format::cpfloat(8, 3, 2, true),
        Err(FormatError::ExponentRange { emin: 3, emax: 2 })
    );
    assert_eq!(
        Format::F143.with_scale_bias(32),
        Err(FormatError::ScaleBias { scale: 32 })
    );
    assert!(Format::BF16.with_scale_bias(1).is_err()); // past f32's range
    assert!(
        FormatError::ScaleBias { scale: 40 }
            .to_string()
            .contains("40")
    );
}

/// Every code of every format of 19 bits or fewer decodes to the
/// oracle's value (NaN to NaN, infinities with their sign, zeros signed).
#[test]
fn every_code_decodes_to_the_oracles_value() {
    for (name, f) in formats() {
        let mut decoded = vec![0.0f32; 1 << f.bits()];
        let codes: Vec<u32> = (0..1u32 << f.bits()).collect();
        fp::decode_slice(f, &codes, &mut decoded);
        for (code, y) in codes.iter().zip(&decoded) {
            let want = oracle::decode(f, *code);
            assert!(
                same(*y, want),
                "{name}: code {code:#x} gave {y:e}, want {want:?}"
            );
            assert_eq!(f.decode(*code).to_bits(), y.to_bits());
        }
    }
}

/// f32 inputs around every value of the format: the values, their f32
/// neighbours, the midpoints between neighbours and theirs, the tiny
/// range, the overflow threshold, specials; both signs. Formats with more
/// than 2^12 values take every `step`-th neighbour pair.
fn stratified(v: &Values) -> Vec<f32> {
    let f = v.format;
    let mut out = vec![
        0.0,
        f32::INFINITY,
        f32::NAN,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-45,
        1e-40,
    ];
    let step = (v.all.len() / 4096).max(1);
    let (max, _) = v.max();
    let top = max + pow2(f.emax() - i32::try_from(f.mantissa_bits()).unwrap());
    let mut pairs: Vec<(f64, f64)> = v
        .all
        .windows(2)
        .step_by(step)
        .map(|w| (w[0].0, w[1].0))
        .collect();
    pairs.push((max, top));
    // Between 0 and the smallest normal, as flushing sees it.
    pairs.push((0.0, pow2(f.emin())));
    for (a, b) in pairs {
        let mid = (a + b) / 2.0;
        for x in [a, b, mid, mid / 2.0, (a + mid) / 2.0] {
            let x32 = x as f32;
            out.extend([x32, x32.next_up(), x32.next_down()]);
        }
    }
    let min = f.min_subnormal();
    out.extend([min / 2.0, min / 4.0, min * 0.75, min / 3.0]);
    let negated: Vec<f32> = out.iter().map(|x| -x).collect();
    out.extend(negated);
    out.retain(|x| x.is_nan() || x.is_finite() || x.is_infinite());
    out
}

fn check_against_oracle(name: &str, v: &Values, x: f32, round: Round) {
    let f = v.format;
    let want = v.round(x, round);
    let got = f.chop(x, round, STREAM, 0);
    assert!(
        same(got, want),
        "{name} {round:?}: chop({x:e} = {:#x}) = {got:e}, want {want:?}",
        x.to_bits()
    );
    let code = f.encode(x, round, STREAM, 0);
    match v.code(want) {
        Some(c) => assert_eq!(code, c, "{name} {round:?}: encode({x:e})"),
        None if f.has_nan() => assert!(f.decode(code).is_nan(), "{name}: encode({x:e}) not NaN"),
        None => assert_eq!(code & !(1 << (f.bits() - 1)), v.max().1, "{name}: NaN code"),
    }
}

/// The twins against the oracle on the stratified sample, every format,
/// every deterministic mode, both overflow policies, subnormals kept and
/// flushed. Prints how many inputs each format took.
#[test]
fn deterministic_modes_match_the_oracle() {
    for (name, f) in formats() {
        let v = Values::new(f);
        let inputs = stratified(&v);
        let all = rounds(&Mode::DETERMINISTIC);
        for round in &all {
            for &x in &inputs {
                check_against_oracle(name, &v, x, *round);
            }
        }
        println!(
            "formats: {name}: {} inputs x {} roundings against the oracle",
            inputs.len(),
            all.len()
        );
    }
}

/// Random bits fixed for every position: `half`, then `words`.
struct Fixed {
    half: u16,
    words: [u32; 9],
}

impl RandomBits for Fixed {
    fn half_bits(&self, _: u64) -> u16 {
        self.half
    }
    fn word(&self, _: u64, word: u32) -> u32 {
        self.words[word as usize - 1]
    }
}

/// Counts, over every value `r` of the low `d` random bits (half bits
/// first, then word 1), how often `x` rounds away from zero.
fn count_up(f: Format, x: f32, round: Round, d: u32) -> u64 {
    let mut ups = 0;
    let toward = f.chop(x, Round::new(Mode::TowardZero), STREAM, 0);
    for r in 0..1u64 << d {
        let bits = Fixed {
            half: r as u16,
            words: [(r >> 16) as u32, 0, 0, 0, 0, 0, 0, 0, 0],
        };
        let y = f.chop_with(x, round, &bits, 0);
        if y != toward {
            ups += 1;
        }
    }
    ups
}

/// `(|x| - a) / (b - a)` as the exact count out of `2^d`, if an integer.
fn exact_fraction(v: &Values, x: f32, d: u32) -> (f64, f64, f64) {
    let ((a, _), (b, _)) = v.neighbours(f64::from(x.abs()), Subnormals::Keep).unwrap();
    let count = (f64::from(x.abs()) - a) / (b - a) * pow2(i32::try_from(d).unwrap());
    (a, b, count)
}

/// Exact stochastic rounding: over all `2^d` values of the bits it reads,
/// `x` rounds up exactly `(|x| - a) / (b - a) * 2^d` times, so the
/// expectation is `x`. Normal and subnormal results, 8-bit to 16-bit.
#[test]
fn stochastic_expectation_is_exact_by_enumeration() {
    let cases: [(Format, f32, u32); 6] = [
        (Format::F16, 1.0 + 3.0 * 2f32.powi(-13), 13),
        (Format::BF16, -(1.0 + 5.0 * 2f32.powi(-16)), 16),
        (Format::E4M3FN, 0.3, 20),
        (Format::E4M3FN, -9e-3, 21), // subnormal result: 21 bits
        (Format::E2M1FN, 2.2, 22),
        (Format::E5M2, 2e-5, 23), // subnormal, at the edge of the grid rule
    ];
    for (f, x, d) in cases {
        let v = Values::new(f);
        let (_, _, want) = exact_fraction(&v, x, d);
        assert_eq!(
            want.fract(),
            0.0,
            "{f:?} {x}: fraction not exact at {d} bits"
        );
        let ups = count_up(f, x, Round::STOCHASTIC, d);
        assert_eq!(ups as f64, want, "{f:?} {x}");
        // k bits: floor(fraction * 2^k) / 2^k, bias toward zero.
        let k = 5;
        let got = count_up(f, x, Round::new(Mode::StochasticBits(k)), d);
        let step = pow2(i32::try_from(d).unwrap() - i32::from(k));
        assert_eq!(got as f64, (want / step).floor() * step, "{f:?} {x} k=5");
        // Equal probabilities: half of them.
        let half = count_up(f, x, Round::new(Mode::StochasticEqual), d);
        assert_eq!(half, 1 << (d - 1), "{f:?} {x} equal");
    }
}

/// Below the smallest value by more than 23 bits the rule compares a
/// uniform `U` (half bits, then words) with the significand: enumerate
/// the half bits and the top bits of word 1 for an input whose fraction
/// needs exactly those.
#[test]
fn tiny_stochastic_expectation_is_exact_by_enumeration() {
    // E2M1: smallest value 0.5 (t = -1); x = 0.3 in [2^-2, 2^-1) is
    // m * 2^(t - s) with m its 24-bit significand and s = 24.
    let f = Format::E2M1FN;
    let x = 0.3f32;
    let s = 24;
    let mut ups = 0u64;
    for half in 0..=u16::MAX {
        for top in 0..1u32 << (s - 16) {
            let bits = Fixed {
                half,
                words: [top << (32 - (s - 16)), 0, 0, 0, 0, 0, 0, 0, 0],
            };
            ups += u64::from(f.chop_with(x, Round::STOCHASTIC, &bits, 0) != 0.0);
        }
    }
    assert_eq!(ups as f64, f64::from(x) / 0.5 * pow2(s));
}

/// Stochastic results are always one of the two neighbours (or the
/// overflow value), for random inputs, positions and every format.
#[test]
fn stochastic_results_are_neighbours() {
    let modes = [
        Mode::Stochastic,
        Mode::StochasticBits(3),
        Mode::StochasticEqual,
    ];
    let mut g = crate::support::Gen(7);
    for (name, f) in formats() {
        let v = Values::new(f);
        let max = f.max();
        for i in 0..2000u64 {
            let x = f32::from_bits((g.next() as u32) & 0xbfff_ffff)
                * if i % 2 == 0 { 1.0 } else { 1e-30 };
            let x = if x.is_finite() && x.abs() < max {
                x
            } else {
                x.clamp(-max, max)
            };
            for round in rounds(&modes) {
                let y = f.chop(x, round, STREAM, i);
                let toward = v.round(
                    x,
                    Round {
                        mode: Mode::TowardZero,
                        ..round
                    },
                );
                let away = v.round(
                    x,
                    Round {
                        mode: if x < 0.0 { Mode::Down } else { Mode::Up },
                        ..round
                    },
                );
                assert!(
                    same(y, toward) || same(y, away),
                    "{name} {round:?}: {x:e} gave {y:e}, not {toward:?} or {away:?}"
                );
            }
        }
    }
}

/// A slice converted whole or in pieces (each with its offset) gives the
/// same codes, and caller-supplied bits recorded from the stream give the
/// stream's codes.
#[test]
fn split_and_replayed_bits_give_the_same_codes() {
    let mut g = crate::support::Gen(3);
    let x: Vec<f32> = (0..1000).map(|_| g.in_range(-40, 8)).collect();
    for (name, f) in formats().into_iter().filter(|(_, f)| f.bits() <= 8) {
        let round = Round::STOCHASTIC;
        let mut whole = vec![0u8; x.len()];
        let _ = fp::encode_slice(f, &x, &mut whole, round, &STREAM, 500);
        let mut pieces = vec![0u8; x.len()];
        for (start, end) in [(0, 3), (3, 517), (517, 1000)] {
            let _ = fp::encode_slice(
                f,
                &x[start..end],
                &mut pieces[start..end],
                round,
                &STREAM,
                500 + start as u64,
            );
        }
        assert_eq!(whole, pieces, "{name}");
        // Record 10 words per element: half bits, then words 1..=9.
        let mut words = vec![0u32; 10 * x.len()];
        for (i, w) in words.chunks_mut(10).enumerate() {
            let index = 500 + i as u64;
            w[0] = u32::from(STREAM.half_bits(index));
            for (k, wk) in w.iter_mut().enumerate().skip(1) {
                *wk = STREAM.word(index, k as u32);
            }
        }
        let replay = Replay::new(&words, NonZeroUsize::new(10).unwrap());
        let mut replayed = vec![0u8; x.len()];
        let _ = fp::encode_slice(f, &x, &mut replayed, round, &replay, 0);
        assert_eq!(whole, replayed, "{name}");
    }
}

#[test]
fn nan_never_becomes_a_number() {
    let s = &STREAM;
    for (name, f) in formats() {
        for round in rounds(&[Mode::NearestEven, Mode::TowardZero, Mode::Stochastic]) {
            for nan in [f32::NAN, -f32::NAN, f32::from_bits(0x7f80_0001)] {
                assert!(f.chop(nan, round, *s, 0).is_nan(), "{name}");
                let code = f.encode(nan, round, *s, 0);
                if f.has_nan() {
                    assert!(f.decode(code).is_nan(), "{name}");
                }
            }
        }
        let mut codes = [0u32; 3];
        let nans = fp::encode_slice(
            f,
            &[f32::NAN, 1.0, f32::NAN],
            &mut codes,
            Round::NEAREST_EVEN,
            s,
            0,
        );
        assert_eq!(nans, if f.has_nan() { 0 } else { 2 }, "{name}");
    }
}

/// E8M0 takes zero and negative inputs as ml_dtypes' `float8_e8m0fnu`
/// does: NaN, or its smallest value when saturating (`-inf` stays NaN);
/// positive values below its range round to its smallest value.
#[test]
fn e8m0_zero_and_negative_inputs_are_ml_dtypes() {
    let f = Format::E8M0FNU;
    let saturate = Round::NEAREST_EVEN.with_overflow(Overflow::Saturate);
    for x in [0.0, -0.0, -1.0, -3e-40, f32::MIN, f32::NEG_INFINITY] {
        for round in [Round::NEAREST_EVEN, Round::STOCHASTIC] {
            assert_eq!(f.encode(x, round, STREAM, 0), 0xff, "{x}");
            assert!(f.chop(x, round, STREAM, 0).is_nan(), "{x}");
        }
        let smallest = if x == f32::NEG_INFINITY { 0xff } else { 0 };
        assert_eq!(f.encode(x, saturate, STREAM, 0), smallest, "{x}");
    }
    assert_eq!(f.encode(1e-45, Round::NEAREST_EVEN, STREAM, 0), 0);
    assert_eq!(f.chop(0.0, saturate, STREAM, 0), 2f32.powi(-127));
}

#[test]
fn packing_round_trips_in_ocp_order() {
    let codes: Vec<u8> = (0..37u8).map(|i| i.wrapping_mul(7) & 0xf).collect();
    let mut packed = vec![0u8; fp::fp4_packed_len(codes.len())];
    fp::pack_fp4(&codes, &mut packed);
    assert_eq!(packed[0], codes[0] | codes[1] << 4);
    let mut back = vec![0u8; codes.len()];
    fp::unpack_fp4(&packed, &mut back);
    assert_eq!(back, codes);
    let codes: Vec<u8> = (0..37u8).map(|i| i.wrapping_mul(11) & 0x3f).collect();
    let mut packed = vec![0u8; fp::fp6_packed_len(codes.len())];
    fp::pack_fp6(&codes, &mut packed);
    let stream = u32::from(packed[0]) | u32::from(packed[1]) << 8 | u32::from(packed[2]) << 16;
    for (i, c) in codes.iter().take(4).enumerate() {
        assert_eq!((stream >> (6 * i)) & 0x3f, u32::from(*c));
    }
    let mut back = vec![0u8; codes.len()];
    fp::unpack_fp6(&packed, &mut back);
    assert_eq!(back, codes);
}

fn any_format() -> impl Strategy<Value = Format> {
    let all: Vec<Format> = formats().into_iter().map(|(_, f)| f).collect();
    proptest::sample::select(all)
}

fn nearest_mode() -> impl Strategy<Value = Mode> {
    proptest::sample::select(vec![
        Mode::NearestEven,
        Mode::NearestAway,
        Mode::NearestZero,
    ])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn nearest_modes_are_monotonic(f in any_format(), mode in nearest_mode(), a: f32, b: f32) {
        prop_assume!(a.is_finite() && b.is_finite());
        let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
        let r = Round::new(mode).with_overflow(Overflow::Saturate);
        let (x, y) = (f.chop(lo, r, STREAM, 0), f.chop(hi, r, STREAM, 0));
        prop_assert!(x.is_nan() || y.is_nan() || x <= y, "{lo} -> {x}, {hi} -> {y}");
    }

    #[test]
    fn representable_values_round_trip(f in any_format(), code: u32, mode in nearest_mode()) {
        let code = code & ((1 << f.bits()) - 1);
        let x = f.decode(code);
        // Formats without subnormals never produce their subnormal codes.
        prop_assume!(!x.is_nan() && (f.has_subnormals() || x == 0.0 || x.abs() >= f.min_normal()));
        for m in [mode, Mode::TowardZero, Mode::ToOdd, Mode::Stochastic] {
            let r = Round::new(m);
            prop_assert_eq!(f.chop(x, r, STREAM, 9).to_bits(), x.to_bits());
            prop_assert_eq!(f.decode(f.encode(x, r, STREAM, 9)).to_bits(), x.to_bits());
        }
    }

    #[test]
    fn rounding_is_sign_symmetric(f in any_format(), x: f32, mode in nearest_mode()) {
        prop_assume!(f.is_signed() && f.nan_encoding() != NanEncoding::NegativeZero);
        let r = Round::new(mode);
        let (p, n) = (f.chop(x, r, STREAM, 0), f.chop(-x, r, STREAM, 0));
        prop_assert!(p.is_nan() && n.is_nan() || p.to_bits() == (-n).to_bits());
        let up = f.chop(x, Round::new(Mode::Up), STREAM, 0);
        let down = f.chop(-x, Round::new(Mode::Down), STREAM, 0);
        prop_assert!(up.is_nan() && down.is_nan() || up.to_bits() == (-down).to_bits());
    }

    #[test]
    fn chop_is_idempotent(f in any_format(), x: f32, mode in nearest_mode(), index: u64) {
        for m in [mode, Mode::Up, Mode::ToOdd, Mode::Stochastic] {
            let r = Round::new(m);
            let once = f.chop(x, r, STREAM, index);
            let twice = f.chop(once, r, STREAM, index.wrapping_add(1));
            prop_assert!(once.is_nan() && twice.is_nan() || once.to_bits() == twice.to_bits());
        }
    }
}

/// Which inputs the oracle treats alike, for the exhaustive sweep: inputs
/// with the same sign, f32 exponent field, top mantissa bits `q` and
/// sticky bit (any lower bit set) round to the same value in every
/// deterministic mode.
///
/// Proof: the oracle's result for `|x|` depends only on where `|x|` lies
/// among the format's values and the midpoints between them (and on the
/// sign): it is constant on each such point and on each open interval
/// between consecutive points. Within one f32 binade (exponent `ex`, last
/// bit `2^e0`, `e0 = max(ex, -126) - 23`) every such point is a multiple
/// of `2^(g - 1)` with `g = max(ex, emin) - m`, the format's finest
/// spacing there (`ex = min(emin, -126)` for f32's subnormals) (below the smallest value, 0, `2^(t - 1)` and `2^t` are
/// binade boundaries; past the largest value the result is constant).
/// With `k = clamp(g - 1 - e0, 0, 23)` every point in the binade is a
/// multiple of `2^k` pattern units, so inputs with the same bits above `k`
/// and none below are one input, and inputs with the same bits above `k`
/// and some below lie strictly between two consecutive multiples of
/// `2^k`, inside one open interval.
fn class_of(f: Format, x: u32) -> (u32, u32, bool) {
    let k = class_bits(f, (x >> 23) & 0xff);
    let man = x & 0x7f_ffff;
    (x >> 23, man >> k, man & ((1 << k) - 1) != 0)
}

/// The `k` of [`class_of`] for f32 exponent field `field`.
fn class_bits(f: Format, field: u32) -> u32 {
    let ex = if field == 0 { -126 } else { field as i32 - 127 };
    // f32's subnormals (field 0) span every format binade below 2^-126
    // (E8M0 has one): the finest spacing there is the lowest binade's.
    let finest = if field == 0 { f.emin().min(ex) } else { ex };
    let g = finest.max(f.emin()) - i32::try_from(f.mantissa_bits()).unwrap();
    (g - 1 - (ex - 23)).clamp(0, 23) as u32
}

/// Inputs `lo, lo + step, ...` below `hi` of the exhaustive sweep: the
/// twin's code against the oracle's, the oracle evaluated once per class
/// (see [`class_of`]).
fn sweep(v: &Values, round: Round, lo: u64, hi: u64, step: usize) {
    let f = v.format;
    let mut class = None;
    let mut want = None;
    for bits in (lo..hi).step_by(step) {
        let x = bits as u32;
        let input = f32::from_bits(x);
        let code = f.encode(input, round, STREAM, bits);
        if input.is_nan() {
            assert!(!f.has_nan() || f.decode(code).is_nan(), "{x:#x}");
            continue;
        }
        let c = class_of(f, x);
        if class != Some(c) {
            class = Some(c);
            want = v.code(v.round(input, round));
        }
        match want {
            Some(w) => assert_eq!(code, w, "{f:?} {round:?}: {x:#010x}"),
            None => assert!(!f.has_nan() || f.decode(code).is_nan(), "{x:#x}"),
        }
    }
}

/// Every one of the 2^32 f32 inputs into E4M3FN (the MXFP8 element),
/// rounded to nearest even, against the oracle (split over threads); every
/// 31st input (coprime to every power of two, so every bit pattern of the
/// low bits occurs) into the other formats of 8 bits or fewer. Every
/// deterministic mode takes the class representatives of every binade (the
/// first, second, middle and last input of each class). Ignored unless run
/// with `--ignored` (CI runs it in release mode); prints the time of
/// each format. A full 2^32 sweep of every format took 98 s per format on
/// the loaded 2-core CI machine: over the 3 minutes this step may add.
#[test]
#[ignore = "exhaustive: all 2^32 f32 inputs, run in release with --ignored"]
fn exhaustive_all_f32_inputs_into_small_formats() {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let chunk = (1u64 << 32) / threads;
    for (name, f) in formats().into_iter().filter(|(_, f)| f.bits() <= 8) {
        let v = Values::new(f);
        let start = std::time::Instant::now();
        std::thread::scope(|scope| {
            for t in 0..threads {
                let v = &v;
                let hi = if t + 1 == threads {
                    1 << 32
                } else {
                    (t + 1) * chunk
                };
                let step = if f == Format::E4M3FN { 1 } else { 31 };
                scope.spawn(move || sweep(v, Round::NEAREST_EVEN, t * chunk, hi, step));
            }
        });
        let nearest = start.elapsed().as_secs_f64();
        let mut representatives = 0u64;
        for round in rounds(&Mode::DETERMINISTIC) {
            // Per sign and exponent field, each class is one exact input
            // `q << k` and the run of `2^k - 1` after it: check the exact
            // one and the run's first, middle and last.
            for top in 0..512u32 {
                let k = class_bits(f, top & 0xff);
                for q in 0..1u32 << (23 - k) {
                    let base = u64::from(top << 23 | q << k);
                    let last = base + (1 << k) - 1;
                    for x in [base, base + 1, (base + 1 + last) / 2, last] {
                        if x <= last {
                            sweep(&v, round, x, x + 1, 1);
                            representatives += 1;
                        }
                    }
                }
            }
        }
        println!(
            "formats: exhaustive {name}: 2^32 / {} inputs nearest even in {nearest:.1} s; \
             {representatives} class representatives in the other modes",
            if f == Format::E4M3FN { 1 } else { 31 }
        );
    }
}
