//! Documented semantics.

use super::*;

#[test]
fn reduction_order_is_lanes_then_tree_then_exact_blocks() {
    on_every_backend(
        "reduction_order_is_lanes_then_tree_then_exact_blocks",
        || {
            // Elements 0, 8 and 16 share lane 0 of block 0: 2^24 + 1 rounds to 2^24
            // twice.
            let mut x = vec![0.0f32; 3 * BLOCK];
            x[0] = 16_777_216.0;
            x[8] = 1.0;
            x[16] = 1.0;
            let ones = vec![1.0f32; x.len()];
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_216.0));
            // Lanes 0, 1 and 2 meet in the tree: (2^24 + 1) + (1 + 0) rounds twice
            // too.
            let mut x = vec![0.0f32; 3 * BLOCK];
            x[0] = 16_777_216.0;
            x[1] = 1.0;
            x[2] = 1.0;
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_216.0));
            // Lanes 0 and 2 meet only at the root: 2^24 + (1 + 1) is exact.
            x[1] = 0.0;
            x[3] = 1.0;
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_218.0));
            // In different blocks the partials add exactly.
            let mut x = vec![0.0f32; 3 * BLOCK];
            x[0] = 16_777_216.0;
            x[BLOCK] = 1.0;
            x[2 * BLOCK] = 1.0;
            assert!(same_f32(kernels::dot(&x, &ones), 16_777_218.0));
            assert!(same_f32(
                kernels::sum_of_squares(&[1.0e30, 1.0]),
                f32::INFINITY
            )); // 1e60 overflows f32
            // Cancellation across blocks is exact.
            let mut x = vec![0.0f32; 2 * BLOCK + 1];
            x[0] = 1.0e30;
            x[BLOCK] = 1.0;
            x[2 * BLOCK] = -1.0e30;
            assert!(same_f32(kernels::dot(&x, &vec![1.0; x.len()]), 1.0));
        },
    );
}

#[test]
fn reductions_handle_special_values() {
    on_every_backend("reductions_handle_special_values", || {
        assert!(same_f32(kernels::dot::<f32>(&[], &[]), 0.0));
        assert!(same_f32(kernels::sum_of_squares::<f32>(&[]), 0.0));
        assert!(same_f32(kernels::max_abs::<f32>(&[]), 0.0));
        assert!(same_f32(kernels::dot(&[-0.0; 20], &[1.0; 20]), 0.0));
        assert!(same_f32(kernels::max_abs(&[-0.0]), 0.0));
        assert!(same_f32(
            kernels::max_abs(&[-3.0, 2.0, f32::from_bits(1)]),
            3.0
        ));
        assert!(same_f32(
            kernels::max_abs(&[1.0, f32::NEG_INFINITY]),
            f32::INFINITY
        ));
        // NaN propagates, as the canonical NaN, wherever it sits.
        for at in [0, 7, 8, 300] {
            let mut x = vec![1.0f32; 301];
            x[at] = f32::from_bits(0xffc0_1234);
            assert_eq!(kernels::max_abs(&x).to_bits(), 0x7fc0_0000);
            assert_eq!(kernels::dot(&x, &x).to_bits(), 0x7fc0_0000);
            assert_eq!(kernels::sum_of_squares(&x).to_bits(), 0x7fc0_0000);
        }
        // +inf and -inf in different blocks: NaN; in one: inf.
        let mut x = vec![0.0f32; 2 * BLOCK];
        x[0] = f32::INFINITY;
        x[BLOCK] = f32::NEG_INFINITY;
        assert!(kernels::dot(&x, &vec![1.0; x.len()]).is_nan());
        assert_eq!(kernels::dot(&[f32::MAX; 4], &[2.0; 4]), f32::INFINITY);
        assert_eq!(kernels::dot(&[f32::MAX; 4], &[-2.0; 4]), f32::NEG_INFINITY);
        // Inf * 0 is NaN.
        assert!(kernels::dot(&[f32::INFINITY], &[0.0]).is_nan());
        let h = [f16::from_f32(-2.0), f16::from_f32(3.0), f16::NAN];
        assert!(same_f32(kernels::max_abs(&h[..2]), 3.0));
        assert!(kernels::max_abs(&h).is_nan());
        assert!(same_f32(kernels::sum_of_squares(&h[..2]), 13.0));
        // f16 squares are exact in f32: 65504^2 does not overflow.
        assert!(same_f32(
            kernels::sum_of_squares(&[f16::MAX]),
            65504.0 * 65504.0
        ));
    });
}

#[test]
fn elementwise_nan_is_canonical_and_signed_zero_is_kept() {
    on_every_backend(
        "elementwise_nan_is_canonical_and_signed_zero_is_kept",
        || {
            let payload = f32::from_bits(0xffc0_1234);
            let x = vec![payload; 19];
            let mut y = vec![f32::from_bits(0x7f80_0001); 19];
            kernels::axpy(2.0, &x, &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x7fc0_0000));
            let mut y = x.clone();
            kernels::scale(3.0, &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x7fc0_0000));
            let mut y = vec![f32::INFINITY; 19];
            kernels::add(&[f32::NEG_INFINITY; 19], &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x7fc0_0000));

            let mut y = vec![-0.0f32; 19];
            kernels::add(&[-0.0; 19], &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x8000_0000));
            let mut y = vec![-0.0f32; 19];
            kernels::axpy(-1.0, &[0.0; 19], &mut y, Rounding::Nearest);
            assert!(y.iter().all(|v| v.to_bits() == 0x8000_0000));

            let mut h = vec![f16::from_bits(0xfe55); 19];
            kernels::scale(1.0, &mut h, Rounding::Nearest);
            assert!(h.iter().all(|v| v.to_bits() == 0x7e00));
            let mut b = vec![bf16::from_bits(0xffd5); 19];
            kernels::scale(1.0, &mut b, Rounding::Nearest);
            assert!(b.iter().all(|v| v.to_bits() == 0x7fc0));
        },
    );
}

#[test]
fn unscale_and_check_reports_non_finite_results() {
    on_every_backend("unscale_and_check_reports_non_finite_results", || {
        let check = |x: &[f32], inv: f32| {
            let mut y = x.to_vec();
            let found = kernels::unscale_and_check(&mut y, inv, Rounding::Nearest);
            (found, y)
        };
        for n in [1, 8, 9, 40] {
            let mut x: Vec<f32> = (0..n).map(|i| i as f32 - 4.5).collect();
            assert!(!check(&x, 0.5).0);
            assert_eq!(check(&x, 0.5).1[0], -2.25);
            x[n - 1] = f32::INFINITY;
            let (found, y) = check(&x, 0.5);
            assert!(found);
            assert_eq!(y[n - 1], f32::INFINITY);
            x[n - 1] = f32::NAN;
            assert!(check(&x, 1.0).0);
            // Inf * 0 = NaN: flagged.
            x[n - 1] = f32::INFINITY;
            let (found, y) = check(&x, 0.0);
            assert!(found);
            assert_eq!(y[n - 1].to_bits(), 0x7fc0_0000);
            // A finite value that overflows when unscaled with inv_scale > 1:
            // flagged here (PyTorch checks the inputs and would not flag it).
            x[n - 1] = f32::MAX;
            assert!(check(&x, 2.0).0);
            x[n - 1] = 1.0e38;
            assert!(!check(&x, 2.0).0);
            // A non-finite inv_scale makes every result non-finite.
            assert!(check(&x, f32::INFINITY).0);
            assert!(check(&x, f32::NAN).0);
        }
        assert!(!check(&[], f32::NAN).0);

        // 16-bit storage: the stored value is checked, so f16 overflow counts.
        let mut h = vec![f16::from_f32(1000.0); 11];
        assert!(!kernels::unscale_and_check(&mut h, 2.0, Rounding::Nearest));
        assert!(h.iter().all(|v| v.to_f32() == 2000.0));
        let mut h = vec![f16::from_f32(40000.0); 11];
        assert!(kernels::unscale_and_check(&mut h, 2.0, Rounding::Nearest));
        assert!(h.iter().all(|v| v.is_infinite()));
        let sat = Rounding::Stochastic {
            sr: Stochastic::new(RandomStream::new(1, 1), Overflow::Saturate),
            first_index: 0,
        };
        let mut h = vec![f16::from_f32(40000.0); 11];
        assert!(!kernels::unscale_and_check(&mut h, 2.0, sat));
        assert!(h.iter().all(|v| *v == f16::MAX));
        let mut b = vec![bf16::from_f32(3.0e38); 11];
        assert!(kernels::unscale_and_check(&mut b, 2.0, Rounding::Nearest));
    });
}

#[test]
fn accumulate_widens_exactly() {
    on_every_backend("accumulate_widens_exactly", || {
        let src: Vec<f16> = (0..37)
            .map(|i| f16::from_f32(i as f32 * 0.125 - 2.0))
            .collect();
        let mut acc = vec![1.0f32; 37];
        kernels::accumulate(&src, &mut acc);
        for (i, a) in acc.iter().enumerate() {
            assert_eq!(*a, i as f32 * 0.125 - 1.0);
        }
        let sub = [f16::from_bits(1); 9]; // 2^-24
        let mut acc = [0.0f32; 9];
        kernels::accumulate(&sub, &mut acc);
        assert!(acc.iter().all(|&a| a == pow2(-24)));
    });
}

#[test]
#[should_panic(expected = "axpy: length mismatch")]
fn axpy_panics_on_length_mismatch() {
    kernels::axpy(1.0, &[1.0; 3], &mut [0.0; 4], Rounding::Nearest);
}

#[test]
#[should_panic(expected = "add: length mismatch")]
fn add_panics_on_length_mismatch() {
    kernels::add(&[1.0; 9], &mut [0.0; 8], Rounding::Nearest);
}

#[test]
#[should_panic(expected = "dot: length mismatch")]
fn dot_panics_on_length_mismatch() {
    let _ = kernels::dot(&[1.0; 3], &[0.0; 4]);
}

#[test]
#[should_panic(expected = "dot: length mismatch")]
fn dot_of_f16_panics_on_length_mismatch() {
    let _ = kernels::dot(&[f16::ONE; 3], &[f16::ONE; 2]);
}

#[test]
#[should_panic(expected = "accumulate: length mismatch")]
fn accumulate_panics_on_length_mismatch() {
    kernels::accumulate(&[bf16::ONE; 3], &mut [0.0; 2]);
}

#[test]
#[should_panic(expected = "axpy: length mismatch")]
fn axpy_of_bf16_panics_on_length_mismatch() {
    kernels::axpy(1.0, &[bf16::ONE; 3], &mut [bf16::ONE; 2], Rounding::Nearest);
}

#[test]
#[should_panic(expected = "add: length mismatch")]
fn add_of_f16_panics_on_length_mismatch() {
    kernels::add(&[f16::ONE; 3], &mut [f16::ONE; 2], Rounding::Nearest);
}

#[test]
fn scalar_twins_panic_like_the_kernels() {
    assert!(std::panic::catch_unwind(|| scalar::dot(&[1.0], &[])).is_err());
    assert!(
        std::panic::catch_unwind(|| scalar::axpy(1.0, &[1.0], &mut [], Rounding::Nearest)).is_err()
    );
}
