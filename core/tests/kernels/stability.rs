//! Value stability: a change here is a breaking change.

use super::*;

/// FNV-1a over 32-bit words.
fn fnv(words: impl IntoIterator<Item = u32>) -> u64 {
    words.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, w| {
        (h ^ u64::from(w)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[test]
fn pinned_outputs() {
    on_every_backend("pinned_outputs", || {
        let n = 1000;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        let y: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 0.5)).collect();
        let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let b: Vec<bf16> = y.iter().map(|&v| bf16::from_f32(v)).collect();
        let sr = Rounding::Stochastic {
            sr: Stochastic::new(RandomStream::new(2024, 7), Overflow::Infinity),
            first_index: 5,
        };
        let mut axpy_sr = b.clone();
        kernels::axpy(0.37, &b, &mut axpy_sr, sr);
        let mut axpy_f32 = y.clone();
        kernels::axpy(-1.25, &x, &mut axpy_f32, Rounding::Nearest);

        let got = [
            u64::from(kernels::dot(&x, &y).to_bits()),
            u64::from(kernels::sum_of_squares(&x).to_bits()),
            u64::from(kernels::max_abs(&x).to_bits()),
            u64::from(kernels::dot(&h, &h).to_bits()),
            u64::from(kernels::sum_of_squares(&b).to_bits()),
            fnv(axpy_sr.iter().map(|v| u32::from(v.to_bits()))),
            fnv(axpy_f32.iter().map(|v| v.to_bits())),
            fnv(kernels::dot_partial(&x, &y)
                .limbs()
                .iter()
                .flat_map(|&l| [l as u32, (l >> 32) as u32])),
        ];
        let pinned: [u64; 8] = [
            0xbfb0_6f8d,
            0x430f_e4f7,
            0x3f26_6667,
            0x430f_e248,
            0x409d_f355,
            0x8557_89ea_5ee8_f19a,
            0x575d_0f86_af77_a404,
            0xe938_d411_1d22_5997,
        ];
        assert_eq!(got, pinned, "got {got:#x?}");
        // The twins give the same, by construction and by the tests above.
        assert_eq!(u64::from(scalar::dot(&x, &y).to_bits()), pinned[0]);
        assert_eq!(LANES, 8);
        assert_eq!(BLOCK, 256);
    });
}
