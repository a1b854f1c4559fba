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
