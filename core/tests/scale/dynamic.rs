//! DynamicLossScaler: GradScaler's state machine.

use super::*;

#[test]
fn grad_scaler_defaults() {
    let c = DynamicConfig::default();
    assert_eq!(c, DynamicConfig::GRAD_SCALER);
    assert_eq!(c.init_scale.to_bits(), 65536f32.to_bits());
    assert_eq!(c.growth_factor, 2.0);
    assert_eq!(c.backoff_factor, 0.5);
    assert_eq!(c.growth_interval.get(), 2000);
    assert_eq!((c.min_scale, c.max_scale), (None, None));
    assert_eq!(c.hysteresis.get(), 1);
    let s = DynamicLossScaler::new(c).unwrap();
    assert_eq!(s, DynamicLossScaler::default());
    assert_eq!(s.scale(), 65536.0);
    assert_eq!(s.inv_scale().to_bits(), 0x3780_0000); // 2^-16
    assert_eq!(s.growth_tracker(), 0);
    assert_eq!(DynamicConfig::APEX.max_scale, Some(16_777_216.0));
}

#[test]
fn grad_scaler_sequence_with_growth_interval_3() {
    let mut s = dynamic(DynamicConfig {
        growth_interval: nz(3),
        ..DynamicConfig::default()
    });
    let (t, f) = (true, false);
    let pattern = [f, f, f, t, f, f, t, f, f, f, f, f, f, t, t, f];
    let trace = run(&mut s, &pattern);
    // By hand from the update rule: the tracker counts good steps since the
    // last overflow or growth; growth on the third; an overflow halves and
    // resets it.
    let expected_scales = [
        65536.0, 65536.0, 131072.0, 65536.0, 65536.0, 65536.0, 32768.0, 32768.0, 32768.0, 65536.0,
        65536.0, 65536.0, 131072.0, 65536.0, 32768.0, 32768.0,
    ];
    let expected_trackers = [1, 2, 0, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 0, 0, 1];
    assert_eq!(to_bits(&scales(&trace)), to_bits(&expected_scales));
    let trackers: Vec<i32> = trace.iter().map(|t| t.1).collect();
    assert_eq!(trackers, expected_trackers);
}

#[test]
fn grad_scaler_default_interval_and_tracker_reset() {
    let mut s = DynamicLossScaler::default();
    run(&mut s, &[false; 1999]);
    assert_eq!((s.scale(), s.growth_tracker()), (65536.0, 1999));
    let _ = s.update(false);
    assert_eq!((s.scale(), s.growth_tracker()), (131072.0, 0));
    // 1999 good steps, then an overflow: the tracker restarts from 0.
    run(&mut s, &[false; 1999]);
    assert_eq!(s.update(true), StepDecision::Skip);
    assert_eq!((s.scale(), s.growth_tracker()), (65536.0, 0));
    run(&mut s, &[false; 1999]);
    assert_eq!(s.scale(), 65536.0);
    let _ = s.update(false);
    assert_eq!(s.scale(), 131072.0);
}

#[test]
fn products_are_formed_in_f64_then_rounded_once() {
    // 3 * 1.1 in f64 rounds to 0x40533333; in f32 (3 * f32(1.1)) it would
    // be 0x40533334.
    let mut s = dynamic(DynamicConfig {
        init_scale: 3.0,
        growth_factor: 1.1,
        growth_interval: nz(1),
        ..DynamicConfig::default()
    });
    let _ = s.update(false);
    assert_eq!(s.scale().to_bits(), 0x4053_3333);
    assert_ne!((3.0f32 * 1.1f32).to_bits(), 0x4053_3333);

    // From 1000, growth 1.1, backoff 0.7, interval 2: bits computed with
    // Python's struct (f32(f64(s) * factor)); the last five differ from an
    // all-f32 computation.
    let mut s = dynamic(DynamicConfig {
        init_scale: 1000.0,
        growth_factor: 1.1,
        backoff_factor: 0.7,
        growth_interval: nz(2),
        ..DynamicConfig::default()
    });
    let (t, f) = (true, false);
    let pattern = [f, f, f, f, t, f, f, t, t, f, f, f, f, f, f];
    let expected: [u32; 15] = [
        0x447a_0000,
        0x4489_8000,
        0x4489_8000,
        0x4497_4000,
        0x4453_c000,
        0x4453_c000,
        0x4468_eccd,
        0x4423_0c29,
        0x43e4_4439,
        0x43e4_4439,
        0x43fb_17d8,
        0x43fb_17d8,
        0x440a_19ea,
        0x440a_19ea,
        0x4417_e94e,
    ];
    let got = scales(&run(&mut s, &pattern));
    assert_eq!(to_bits(&got), expected);
    // The same from the formula, step by step.
    let mut scale = 1000.0f32;
    let mut tracker = 0;
    for (&inf, &bits) in pattern.iter().zip(&expected) {
        if inf {
            scale = product(scale, 0.7);
            tracker = 0;
        } else {
            tracker += 1;
            if tracker == 2 {
                scale = product(scale, 1.1);
                tracker = 0;
            }
        }
        assert_eq!(scale.to_bits(), bits);
    }
}

#[test]
fn growth_to_infinity_is_refused() {
    let mut s = dynamic(DynamicConfig {
        init_scale: pow2(127),
        growth_interval: nz(1),
        ..DynamicConfig::default()
    });
    let d = s.update(false);
    assert_eq!(
        d,
        StepDecision::Apply {
            inv_scale: pow2(-127)
        }
    );
    assert_eq!((s.scale(), s.growth_tracker()), (pow2(127), 0));

    // 1.7e38 doubles to a finite 3.4e38, then the next doubling is refused.
    let mut s = dynamic(DynamicConfig {
        init_scale: 1.7e38,
        growth_interval: nz(2),
        ..DynamicConfig::default()
    });
    let grown = product(1.7e38, 2.0);
    assert!(grown.is_finite());
    let trace = run(&mut s, &[false; 4]);
    assert_eq!(
        trace,
        [(1.7e38, 1, 1), (grown, 0, 1), (grown, 1, 1), (grown, 0, 1)]
    );

    // A product just above f32::MAX that rounds to nearest onto MAX is
    // finite, hence accepted; a larger one is refused.
    let mut s = dynamic(DynamicConfig {
        init_scale: f32::MAX,
        growth_factor: 1.0 + 2f64.powi(-30),
        growth_interval: nz(1),
        ..DynamicConfig::default()
    });
    let _ = s.update(false);
    assert_eq!(s.scale(), f32::MAX);
    let mut s = dynamic(DynamicConfig {
        init_scale: f32::MAX,
        growth_factor: 1.5,
        growth_interval: nz(1),
        ..DynamicConfig::default()
    });
    let _ = s.update(false);
    assert_eq!((s.scale(), s.growth_tracker()), (f32::MAX, 0));
}

#[test]
fn inv_scale_is_f32_of_the_f64_reciprocal() {
    let mut g = Gen(7);
    let mut scales: Vec<f32> = (-127..=127).map(pow2).collect();
    scales.extend([3.0, 1000.0, 98304.0, 0.1, 1e-30, 3e38, f32::MAX, 1.17e-38]);
    scales.extend((0..2000).map(|_| g.f32_in(-126, 127).abs()));
    for &scale in &scales {
        let expected = inv_of(scale).to_bits();
        assert!(f32::from_bits(expected).is_finite(), "{scale:e}");
        let st = StaticLossScaler::new(scale).unwrap();
        assert_eq!(st.inv_scale().to_bits(), expected, "static {scale:e}");
        let dy = dynamic(DynamicConfig {
            init_scale: scale,
            ..DynamicConfig::default()
        });
        assert_eq!(dy.inv_scale().to_bits(), expected, "dynamic {scale:e}");
        let als = AutomaticLossScaler::new(AutomaticConfig {
            init_scale: scale,
            ..AutomaticConfig::default()
        })
        .unwrap();
        assert_eq!(als.inv_scale().to_bits(), expected, "automatic {scale:e}");
        assert_eq!(LossScaler::inv_scale(&als).to_bits(), expected);
    }
    // Pinned values.
    assert_eq!(
        StaticLossScaler::new(3.0).unwrap().inv_scale().to_bits(),
        0x3eaa_aaab
    );
    assert_eq!(
        StaticLossScaler::new(1000.0).unwrap().inv_scale().to_bits(),
        0x3a83_126f
    );
    assert_eq!(
        StaticLossScaler::new(pow2(-127)).unwrap().inv_scale(),
        pow2(127)
    );
}

#[test]
fn decision_carries_the_inv_scale_the_step_was_computed_with() {
    let mut s = dynamic(DynamicConfig {
        growth_interval: nz(1),
        ..DynamicConfig::default()
    });
    assert_eq!(
        s.update(false),
        StepDecision::Apply {
            inv_scale: pow2(-16)
        }
    );
    assert_eq!(s.scale(), pow2(17));
    let d = s.update(false);
    assert_eq!(d.inv_scale(), Some(pow2(-17)));
    assert!(!d.is_skip());
    let d = s.update(true);
    assert!(d.is_skip());
    assert_eq!(d.inv_scale(), None);
    assert_eq!(s.scale(), pow2(17));
}

#[test]
fn backoff_never_makes_inv_scale_infinite() {
    // GradScaler from 2^16 halves 143 times to 2^-127 (inverse 2^127, still
    // finite); its 144th halving gives 2^-128, whose f32 inverse is
    // infinite. Tessera refuses that backoff.
    let mut s = DynamicLossScaler::default();
    let trace = run(&mut s, &[true; 143]);
    for (k, &(scale, tracker, _)) in trace.iter().enumerate() {
        assert_eq!(scale, pow2(16 - 1 - k as i32));
        assert_eq!(tracker, 0);
    }
    assert_eq!(s.scale(), pow2(-127));
    assert!(inv_of(pow2(-128)).is_infinite());
    for _ in 0..10 {
        assert_eq!(s.update(true), StepDecision::Skip);
        assert_eq!(s.scale(), pow2(-127));
        assert_eq!(s.inv_scale(), pow2(127));
    }
    // It recovers by growth as usual.
    run(&mut s, &[false; 2000]);
    assert_eq!(s.scale(), pow2(-126));

    // A non-power backoff stops at the last scale whose inverse is finite.
    let mut s = dynamic(DynamicConfig {
        init_scale: pow2(-125),
        backoff_factor: 0.3,
        ..DynamicConfig::default()
    });
    let mut expected = pow2(-125);
    for _ in 0..5 {
        let _ = s.update(true);
        let next = product(expected, 0.3);
        if next > 0.0 && inv_of(next).is_finite() {
            expected = next;
        }
        assert_eq!(s.scale().to_bits(), expected.to_bits());
        assert!(s.inv_scale().is_finite());
    }
    assert!(inv_of(product(expected, 0.3)).is_infinite());
}

#[test]
fn apex_bounds() {
    // max_loss_scale 2^24: min(max, scale * 2).
    let mut s = dynamic(DynamicConfig {
        growth_interval: nz(1),
        ..DynamicConfig::APEX
    });
    let got = scales(&run(&mut s, &[false; 10]));
    let expected: Vec<f32> = (17..=24).map(pow2).chain([pow2(24), pow2(24)]).collect();
    assert_eq!(got, expected);

    // min_loss_scale 3: max(min, scale / 2).
    let mut s = dynamic(DynamicConfig {
        init_scale: 16.0,
        min_scale: Some(3.0),
        growth_interval: nz(1),
        ..DynamicConfig::default()
    });
    let got = scales(&run(&mut s, &[true, true, true, true, false, true, true]));
    assert_eq!(got, [8.0, 4.0, 3.0, 3.0, 6.0, 3.0, 3.0]);

    // A max that is not a power-of-two multiple of the scale clamps the
    // growth onto it exactly.
    let mut s = dynamic(DynamicConfig {
        init_scale: 1000.0,
        max_scale: Some(3000.0),
        growth_interval: nz(1),
        ..DynamicConfig::default()
    });
    let got = scales(&run(&mut s, &[false, false, false, true, false]));
    assert_eq!(got, [2000.0, 3000.0, 3000.0, 1500.0, 3000.0]);
}

#[test]
fn hysteresis_reset_on_good_step() {
    let mut s = dynamic(DynamicConfig {
        init_scale: 1024.0,
        growth_interval: nz(3),
        hysteresis: nz(2),
        hysteresis_reset: HysteresisReset::OnGoodStep,
        ..DynamicConfig::default()
    });
    let (t, f) = (true, false);
    let trace = run(&mut s, &[t, t, t, f, t, f, f, f, t, t]);
    let expected = [
        (1024.0, 0, 1), // absorbed
        (512.0, 0, 0),  // second in a row: back off
        (256.0, 0, 0),  // and every further one in the run
        (256.0, 1, 2),  // a good step refills the budget
        (256.0, 0, 1),  // absorbed again
        (256.0, 1, 2),
        (256.0, 2, 2),
        (512.0, 0, 2), // growth
        (512.0, 0, 1),
        (256.0, 0, 0),
    ];
    assert_eq!(trace, expected);
}

#[test]
fn hysteresis_reset_on_growth() {
    let mut s = dynamic(DynamicConfig {
        init_scale: 1024.0,
        growth_interval: nz(3),
        hysteresis: nz(2),
        hysteresis_reset: HysteresisReset::OnGrowth,
        ..DynamicConfig::default()
    });
    let (t, f) = (true, false);
    let trace = run(&mut s, &[t, f, t, f, t, f, f, f, t, f, t]);
    let expected = [
        (1024.0, 0, 1), // absorbed
        (1024.0, 1, 1), // a good step does not refill
        (512.0, 0, 0),  // budget spent: back off
        (512.0, 1, 0),
        (256.0, 0, 0), // (OnGoodStep would have absorbed this one)
        (256.0, 1, 0),
        (256.0, 2, 0),
        (512.0, 0, 2), // growth refills
        (512.0, 0, 1),
        (512.0, 1, 1),
        (256.0, 0, 0),
    ];
    assert_eq!(trace, expected);
}

#[test]
fn dynamic_config_errors() {
    let base = DynamicConfig::default();
    let check = |c: DynamicConfig, e: ScalerConfigError| {
        assert_eq!(DynamicLossScaler::new(c), Err(e));
        assert_eq!(c.validate(), Err(e));
    };
    for bad in [0.0, -1.0, f32::INFINITY, pow2(-130)] {
        check(
            DynamicConfig {
                init_scale: bad,
                ..base
            },
            ScalerConfigError::Scale(bad),
        );
    }
    let nan = DynamicLossScaler::new(DynamicConfig {
        init_scale: f32::NAN,
        ..base
    });
    assert!(matches!(nan, Err(ScalerConfigError::Scale(x)) if x.is_nan()));
    for bad in [1.0, 0.5, f64::INFINITY] {
        check(
            DynamicConfig {
                growth_factor: bad,
                ..base
            },
            ScalerConfigError::GrowthFactor(bad),
        );
    }
    for bad in [0.0, 1.0, -0.5, 2.0] {
        check(
            DynamicConfig {
                backoff_factor: bad,
                ..base
            },
            ScalerConfigError::BackoffFactor(bad),
        );
    }
    let too_long = i32::MAX as u32 + 1;
    check(
        DynamicConfig {
            growth_interval: nz(too_long),
            ..base
        },
        ScalerConfigError::GrowthInterval(too_long),
    );
    assert!(
        DynamicLossScaler::new(DynamicConfig {
            growth_interval: nz(i32::MAX as u32),
            ..base
        })
        .is_ok()
    );
    check(
        DynamicConfig {
            min_scale: Some(0.0),
            ..base
        },
        ScalerConfigError::MinScale(0.0),
    );
    check(
        DynamicConfig {
            max_scale: Some(f32::INFINITY),
            ..base
        },
        ScalerConfigError::MaxScale(f32::INFINITY),
    );
    check(
        DynamicConfig {
            min_scale: Some(4.0),
            max_scale: Some(2.0),
            ..base
        },
        ScalerConfigError::BoundsOrder { min: 4.0, max: 2.0 },
    );
    check(
        DynamicConfig {
            max_scale: Some(1024.0),
            ..base
        },
        ScalerConfigError::ScaleOutsideBounds {
            scale: 65536.0,
            min: None,
            max: Some(1024.0),
        },
    );
    check(
        DynamicConfig {
            min_scale: Some(1e6),
            ..base
        },
        ScalerConfigError::ScaleOutsideBounds {
            scale: 65536.0,
            min: Some(1e6),
            max: None,
        },
    );
}

#[test]
fn config_errors_display_and_error_trait() {
    let errors = [
        ScalerConfigError::Scale(-1.0),
        ScalerConfigError::MinScale(0.0),
        ScalerConfigError::MaxScale(f32::NAN),
        ScalerConfigError::BoundsOrder { min: 2.0, max: 1.0 },
        ScalerConfigError::ScaleOutsideBounds {
            scale: 5.0,
            min: Some(1.0),
            max: Some(2.0),
        },
        ScalerConfigError::ScaleOutsideBounds {
            scale: 5.0,
            min: None,
            max: None,
        },
        ScalerConfigError::GrowthFactor(0.5),
        ScalerConfigError::BackoffFactor(1.5),
        ScalerConfigError::GrowthInterval(u32::MAX),
        ScalerConfigError::BinEdgeLocation(2.0),
        ScalerConfigError::BinEdge(-1.0),
        ScalerConfigError::Threshold(1.5),
    ];
    for e in errors {
        let err: &dyn std::error::Error = &e;
        let text = err.to_string();
        assert!(!text.is_empty() && !text.contains('\n'), "{text}");
    }
    assert_eq!(
        ScalerConfigError::BackoffFactor(1.5).to_string(),
        "backoff factor 1.5 is not in the open interval (0, 1)"
    );
    assert_eq!(
        ScalerConfigError::ScaleOutsideBounds {
            scale: 5.0,
            min: Some(1.0),
            max: Some(2.0),
        }
        .to_string(),
        "initial loss scale 5e0 is outside [1e0, 2e0]"
    );
}

// ---------------------------------------------------------------------------
// StaticLossScaler.

#[test]
fn static_loss_scale() {
    let mut s = StaticLossScaler::new(4096.0).unwrap();
    assert_eq!(s.scale(), 4096.0);
    assert_eq!(s.inv_scale(), pow2(-12));
    assert_eq!(s.fold_into_lr(0.5), 0.5 / 4096.0);
    let s3 = StaticLossScaler::new(3.0).unwrap();
    assert_eq!(s3.fold_into_lr(1.0).to_bits(), (1.0f32 / 3.0).to_bits());
    assert_eq!(
        s.update(false),
        StepDecision::Apply {
            inv_scale: pow2(-12)
        }
    );
    assert_eq!(s.update(true), StepDecision::Skip);
    assert_eq!(StaticLossScaler::default().scale(), 1.0);
    let mut s2 = s;
    assert_eq!(s2.update(stats(true, 0, 0)), StepDecision::Skip);
    assert_eq!(s2, s); // the scale never moves
    for bad in [0.0, -0.0, -4.0, f32::INFINITY, pow2(-130)] {
        assert_eq!(
            StaticLossScaler::new(bad),
            Err(ScalerConfigError::Scale(bad))
        );
    }
    assert!(StaticLossScaler::new(f32::NAN).is_err());
}
