//! SIMD against scalar twins.

use super::*;

#[test]
fn f32_elementwise_kernels_match_scalar_twins() {
    on_every_backend("f32_elementwise_kernels_match_scalar_twins", || {
        for n in lengths() {
            for (k, kind) in KINDS.into_iter().enumerate() {
                let x = f32_data(kind, n, 100 + k as u64);
                let y = f32_data(kind, n, 200 + n as u64);
                let ctx = |what: &str| format!("{what} n={n} {kind:?}");
                for a in FACTORS {
                    let (mut s, mut r) = (y.clone(), y.clone());
                    kernels::axpy(a, &x, &mut s, Rounding::Nearest);
                    scalar::axpy(a, &x, &mut r, Rounding::Nearest);
                    assert_bits_eq(&s, &r, &ctx(&format!("axpy a={a}")));

                    let (mut s, mut r) = (x.clone(), x.clone());
                    kernels::scale(a, &mut s, Rounding::Nearest);
                    scalar::scale(a, &mut r, Rounding::Nearest);
                    assert_bits_eq(&s, &r, &ctx(&format!("scale a={a}")));
                }
                let (mut s, mut r) = (y.clone(), y.clone());
                kernels::add(&x, &mut s, Rounding::Nearest);
                scalar::add(&x, &mut r, Rounding::Nearest);
                assert_bits_eq(&s, &r, &ctx("add"));

                for inv in INV_SCALES {
                    let (mut s, mut r) = (x.clone(), x.clone());
                    let fs = kernels::unscale_and_check(&mut s, inv, Rounding::Nearest);
                    let fr = scalar::unscale_and_check(&mut r, inv, Rounding::Nearest);
                    assert_eq!(fs, fr, "{}", ctx(&format!("unscale_and_check inv={inv}")));
                    assert_bits_eq(&s, &r, &ctx(&format!("unscale_and_check inv={inv}")));
                }
            }
        }
    });
}

fn check_half_elementwise<H: Bits16>() {
    for n in lengths() {
        for (k, kind) in KINDS.into_iter().enumerate() {
            let x: Vec<H> = half_data(kind, n, 300 + k as u64);
            let y: Vec<H> = half_data(kind, n, 400 + n as u64);
            let acc = f32_data(kind, n, 500 + k as u64);
            let ctx = |what: &str| format!("{what} {} n={n} {kind:?}", H::NAME);

            let (mut s, mut r) = (acc.clone(), acc.clone());
            kernels::accumulate(&x, &mut s);
            scalar::accumulate(&x, &mut r);
            assert_bits_eq(&s, &r, &ctx("accumulate"));

            for rounding in roundings() {
                for a in [1.5, -0.0, 3.0e-3, 1.0e5, f32::NAN] {
                    let (mut s, mut r) = (y.clone(), y.clone());
                    kernels::axpy(a, &x, &mut s, rounding);
                    scalar::axpy(a, &x, &mut r, rounding);
                    assert_half_eq(&s, &r, &ctx(&format!("axpy a={a} {rounding:?}")));

                    let (mut s, mut r) = (x.clone(), x.clone());
                    kernels::scale(a, &mut s, rounding);
                    scalar::scale(a, &mut r, rounding);
                    assert_half_eq(&s, &r, &ctx(&format!("scale a={a} {rounding:?}")));
                }
                let (mut s, mut r) = (y.clone(), y.clone());
                kernels::add(&x, &mut s, rounding);
                scalar::add(&x, &mut r, rounding);
                assert_half_eq(&s, &r, &ctx(&format!("add {rounding:?}")));

                for inv in [1.0, 0.25, 1.0 / 65536.0, 4.0, f32::INFINITY, f32::NAN] {
                    let (mut s, mut r) = (x.clone(), x.clone());
                    let fs = kernels::unscale_and_check(&mut s, inv, rounding);
                    let fr = scalar::unscale_and_check(&mut r, inv, rounding);
                    let what = ctx(&format!("unscale_and_check inv={inv} {rounding:?}"));
                    assert_eq!(fs, fr, "{what}");
                    assert_half_eq(&s, &r, &what);
                }
            }
        }
    }
}

#[test]
fn f16_elementwise_kernels_match_scalar_twins() {
    on_every_backend("f16_elementwise_kernels_match_scalar_twins", || {
        check_half_elementwise::<f16>();
    });
}

#[test]
fn bf16_elementwise_kernels_match_scalar_twins() {
    on_every_backend("bf16_elementwise_kernels_match_scalar_twins", || {
        check_half_elementwise::<bf16>();
    });
}

#[test]
fn f32_reductions_match_scalar_twins() {
    on_every_backend("f32_reductions_match_scalar_twins", || {
        for n in lengths() {
            for (k, kind) in KINDS.into_iter().enumerate() {
                let x = f32_data(kind, n, 600 + k as u64);
                let y = f32_data(kind, n, 700 + n as u64);
                let ctx = format!("n={n} {kind:?}");
                assert_eq!(
                    kernels::dot_partial(&x, &y),
                    scalar::dot_partial(&x, &y),
                    "dot {ctx}"
                );
                assert!(
                    same_f32(kernels::dot(&x, &y), scalar::dot(&x, &y)),
                    "dot {ctx}"
                );
                assert_eq!(
                    kernels::sum_of_squares_partial(&x),
                    scalar::sum_of_squares_partial(&x),
                    "sum_of_squares {ctx}"
                );
                assert!(
                    same_f32(kernels::sum_of_squares(&x), scalar::sum_of_squares(&x)),
                    "sum_of_squares {ctx}"
                );
                assert_eq!(
                    kernels::max_abs_partial(&x),
                    scalar::max_abs_partial(&x),
                    "max_abs {ctx}"
                );
                assert!(
                    same_f32(kernels::max_abs(&x), scalar::max_abs(&x)),
                    "max_abs {ctx}"
                );
            }
        }
    });
}

fn check_half_reductions<H: Bits16>() {
    for n in lengths() {
        for (k, kind) in KINDS.into_iter().enumerate() {
            let x: Vec<H> = half_data(kind, n, 800 + k as u64);
            let y: Vec<H> = half_data(kind, n, 900 + n as u64);
            let ctx = format!("{} n={n} {kind:?}", H::NAME);
            assert_eq!(
                kernels::dot_partial(&x, &y),
                scalar::dot_partial(&x, &y),
                "dot {ctx}"
            );
            assert!(
                same_f32(kernels::dot(&x, &y), scalar::dot(&x, &y)),
                "dot {ctx}"
            );
            assert_eq!(
                kernels::sum_of_squares_partial(&x),
                scalar::sum_of_squares_partial(&x),
                "sum_of_squares {ctx}"
            );
            assert!(
                same_f32(kernels::sum_of_squares(&x), scalar::sum_of_squares(&x)),
                "sum_of_squares {ctx}"
            );
            assert_eq!(
                kernels::max_abs_partial(&x),
                scalar::max_abs_partial(&x),
                "max_abs {ctx}"
            );
            assert!(
                same_f32(kernels::max_abs(&x), scalar::max_abs(&x)),
                "max_abs {ctx}"
            );
        }
    }
}

#[test]
fn f16_reductions_match_scalar_twins() {
    on_every_backend("f16_reductions_match_scalar_twins", || {
        check_half_reductions::<f16>();
    });
}

#[test]
fn bf16_reductions_match_scalar_twins() {
    on_every_backend("bf16_reductions_match_scalar_twins", || {
        check_half_reductions::<bf16>();
    });
}

/// Every one of the 65,536 values of each format through the element-wise
/// kernels (lengths cover SIMD chunks and the scalar tail).
#[test]
fn every_half_value_through_the_kernels() {
    on_every_backend("every_half_value_through_the_kernels", || {
        fn check<H: Bits16>() {
            let all: Vec<H> = (0..=u16::MAX)
                .map(H::from_bits16)
                .chain([H::from_bits16(0x3c00)])
                .collect();
            let rev: Vec<H> = all.iter().rev().copied().collect();
            let sr = Rounding::Stochastic {
                sr: Stochastic::new(RandomStream::new(9, 9), Overflow::Infinity),
                first_index: 77,
            };
            for rounding in [Rounding::Nearest, sr] {
                let (mut s, mut r) = (rev.clone(), rev.clone());
                kernels::axpy(0.75, &all, &mut s, rounding);
                scalar::axpy(0.75, &all, &mut r, rounding);
                assert_half_eq(&s, &r, &format!("axpy {}", H::NAME));
                let (mut s, mut r) = (all.clone(), all.clone());
                let fs = kernels::unscale_and_check(&mut s, 0.5, rounding);
                let fr = scalar::unscale_and_check(&mut r, 0.5, rounding);
                assert!(fs && fr);
                assert_half_eq(&s, &r, &format!("unscale_and_check {}", H::NAME));
            }
            let acc: Vec<f32> = (0..all.len()).map(|i| i as f32 * 0.5 - 3000.0).collect();
            let (mut s, mut r) = (acc.clone(), acc);
            kernels::accumulate(&all, &mut s);
            scalar::accumulate(&all, &mut r);
            assert_bits_eq(&s, &r, &format!("accumulate {}", H::NAME));
            assert!(same_f32(kernels::dot(&all, &rev), scalar::dot(&all, &rev)));
            assert!(kernels::max_abs(&all).is_nan());
        }
        check::<f16>();
        check::<bf16>();
    });
}
