//! The portable lane formulas against the scalar twins. (The dispatched
//! kernels are tested on every backend from the root package's integration
//! tests; this module reaches the formulas even where F16C replaces them.)

use wide::{f32x8, u32x8};

use super::lanes::{f16_to_f32_bits, f32_to_f16_bits};
use super::scalar::{f16_bits_to_f32_bits, f32_bits_to_f16_bits};

fn check_f32_to_f16(inputs: impl Iterator<Item = u32>) {
    let mut batch = [0u32; 8];
    let mut filled = 0;
    for bits in inputs {
        batch[filled] = bits;
        filled += 1;
        if filled == 8 {
            let got = f32_to_f16_bits::<f32x8>(u32x8::new(batch)).to_array();
            for (x, h) in batch.iter().zip(got) {
                assert_eq!(h, u32::from(f32_bits_to_f16_bits(*x)), "input {x:#010x}");
            }
            filled = 0;
        }
    }
}

#[test]
fn portable_f16_to_f32_matches_scalar_for_all_inputs() {
    for start in (0..=u16::MAX).step_by(8) {
        let h = u32x8::new(core::array::from_fn(|i| u32::from(start) + i as u32));
        let got = f16_to_f32_bits::<f32x8>(h).to_array();
        for (i, bits) in got.iter().enumerate() {
            let input = start + i as u16;
            assert_eq!(*bits, f16_bits_to_f32_bits(input), "input {input:#06x}");
        }
    }
}

#[test]
fn portable_f32_to_f16_matches_scalar_near_every_f16() {
    // Every f16 value widened, and the f32 patterns just around it and
    // around the midpoints to its neighbours (ties, round bits, sticky bits).
    let around = |h: u16| {
        let x = f16_bits_to_f32_bits(h);
        [0u32, 1, 0xfff, 0x1000, 0x1001, 0x1fff]
            .into_iter()
            .flat_map(move |d| [x.wrapping_add(d), x.wrapping_sub(d)])
    };
    check_f32_to_f16((0..=u16::MAX).flat_map(around));
}

#[test]
fn portable_f32_to_f16_matches_scalar_on_a_strided_sweep() {
    // One pattern in 4,099 (coprime to every power of two) over all 2^32.
    check_f32_to_f16((0..=u32::MAX).step_by(4099));
}

/// The generic twins on f16 and bf16 equal the dedicated ones (the
/// fingerprints depend on them) on a strided sweep of every f32 pattern
/// and around every f16 value, round to nearest and stochastic, both
/// overflow policies.
mod generic_matches_half {
    use super::super::scalar::{f32_to_bf16, f32_to_bf16_sr, f32_to_f16, f32_to_f16_sr};
    use super::super::{Format, Overflow, Round};
    use crate::rng::RandomStream;

    fn inputs() -> impl Iterator<Item = u32> {
        let around = (0..=u16::MAX).flat_map(|h| {
            let x = super::f16_bits_to_f32_bits(h);
            [0u32, 1, 0xfff, 0x1000, 0x1001, 0x8000, 0xffff]
                .into_iter()
                .flat_map(move |d| [x.wrapping_add(d), x.wrapping_sub(d)])
        });
        (0..=u32::MAX).step_by(65_537).chain(around)
    }

    #[test]
    fn nearest_and_stochastic() {
        let stream = RandomStream::new(11, 3);
        for (i, bits) in inputs().enumerate() {
            let x = f32::from_bits(bits);
            let index = i as u64 * 7;
            let rn = Round::NEAREST_EVEN;
            assert_eq!(
                Format::F16.encode(x, rn, stream, 0),
                u32::from(f32_to_f16(x).to_bits()),
                "{bits:#x}"
            );
            assert_eq!(
                Format::BF16.encode(x, rn, stream, 0),
                u32::from(f32_to_bf16(x).to_bits()),
                "{bits:#x}"
            );
            for overflow in [Overflow::Infinity, Overflow::Saturate] {
                let sr = Round::STOCHASTIC.with_overflow(overflow);
                let h = f32_to_f16_sr(x, stream, index, overflow).to_bits();
                assert_eq!(
                    Format::F16.encode(x, sr, stream, index),
                    u32::from(h),
                    "f16 {bits:#x}"
                );
                let b = f32_to_bf16_sr(x, stream, index, overflow).to_bits();
                assert_eq!(
                    Format::BF16.encode(x, sr, stream, index),
                    u32::from(b),
                    "bf16 {bits:#x}"
                );
            }
        }
    }

    #[test]
    fn decode() {
        for h in 0..=u16::MAX {
            let want = super::f16_bits_to_f32_bits(h);
            assert_eq!(Format::F16.decode(u32::from(h)).to_bits(), want, "{h:#x}");
            let want = super::super::scalar::bf16_to_f32(half::bf16::from_bits(h)).to_bits();
            assert_eq!(Format::BF16.decode(u32::from(h)).to_bits(), want, "{h:#x}");
        }
    }
}

/// Kernels that store through a `Rounding` built from any `Round` give,
/// lane by lane, the format twin's result at the element's position.
#[test]
fn every_round_stores_through_kernels_as_the_twin_rounds() {
    use super::{Format, Mode, Round, Rounding};
    use crate::rng::RandomStream;
    use half::f16;

    let stream = RandomStream::new(4, 4);
    let x: [f32; 37] = core::array::from_fn(|i| 1.0 + i as f32 * 1.37e-4);
    for mode in [
        Mode::TowardZero,
        Mode::Up,
        Mode::ToOdd,
        Mode::StochasticBits(4),
        Mode::Stochastic,
    ] {
        let round = Round::new(mode);
        let rounding = Rounding::new(round, stream, 100);
        let mut h: [f16; 37] = core::array::from_fn(|i| {
            f16::from_bits(Format::F16.encode(x[i], Round::NEAREST_EVEN, stream, 0) as u16)
        });
        let scaled: [f32; 37] = core::array::from_fn(|i| h[i].to_f32() * 1.001);
        crate::kernels::scale(1.001, &mut h, rounding);
        for (i, got) in h.iter().enumerate() {
            let want = Format::F16.encode(scaled[i], round, stream, 100 + i as u64);
            assert_eq!(u32::from(got.to_bits()), want, "{mode:?} {i}");
        }
    }
}
