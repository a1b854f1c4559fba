//! AutomaticLossScaler: PopART's ALS.

use super::*;

fn als(config: AutomaticConfig) -> AutomaticLossScaler {
    AutomaticLossScaler::new(config).unwrap()
}

/// The scale each step runs with (before its update).
fn als_run(s: &mut AutomaticLossScaler, steps: &[GradStats]) -> Vec<f32> {
    steps
        .iter()
        .map(|&st| {
            let used = s.scale();
            let _ = s.update(st);
            used
        })
        .collect()
}

#[test]
fn als_defaults() {
    let c = AutomaticConfig::default();
    assert_eq!(c.bin_edge_location, 0.125);
    assert_eq!(c.threshold.to_bits(), 1e-7f32.to_bits());
    assert_eq!(c.update_period.get(), 1);
    assert_eq!(c.window, HistogramWindow::UpdateStep);
    assert!(c.skip_non_finite);
    let s = als(c);
    assert_eq!(s.bin_edge().value(), 8188.0);
    assert_eq!(BinEdge::DEFAULT.value(), 8188.0);
    assert_eq!(BinEdge::default(), BinEdge::DEFAULT);
    assert_eq!(s.scale(), 65536.0);
}

#[test]
fn als_popart_update_period_sequences() {
    // PopART's test_auto_loss_scaling_identical_weight_updates_update_period
    // (and ..._period2): from 10, with nothing in the upper bin, the loss
    // scales of 8 steps are 10, 20, 40, ... and with period 2
    // 10, 20, 20, 40, 40, 80, 80, 160.
    let calm = [stats(false, 0, 1000); 8];
    let mut s = als(AutomaticConfig {
        init_scale: 10.0,
        ..AutomaticConfig::default()
    });
    assert_eq!(
        als_run(&mut s, &calm),
        [10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0, 1280.0]
    );
    let mut s = als(AutomaticConfig {
        init_scale: 10.0,
        update_period: nz(2),
        ..AutomaticConfig::default()
    });
    let mut needs = Vec::new();
    let mut used = Vec::new();
    for &st in &calm {
        needs.push(s.needs_histogram());
        assert_eq!(s.histogram_edge().is_some(), s.needs_histogram());
        used.push(s.scale());
        let _ = s.update(st);
    }
    assert_eq!(used, [10.0, 20.0, 20.0, 40.0, 40.0, 80.0, 80.0, 160.0]);
    assert_eq!(needs, [true, false, true, false, true, false, true, false]);
    // The counts of the steps between updates are ignored.
    let mut s = als(AutomaticConfig {
        init_scale: 10.0,
        update_period: nz(2),
        ..AutomaticConfig::default()
    });
    let noisy = [
        stats(false, 0, 10),
        stats(false, 10, 0),
        stats(false, 0, 10),
        stats(false, 10, 0),
    ];
    assert_eq!(als_run(&mut s, &noisy), [10.0, 20.0, 20.0, 40.0]);
    assert_eq!(s.step_in_period(), 0);
}

#[test]
fn als_period_window_sums_the_counts() {
    let steps = [
        stats(false, 0, 4),
        stats(false, 3, 1),
        stats(false, 0, 4),
        stats(false, 0, 4),
    ];
    let config = AutomaticConfig {
        init_scale: 1024.0,
        threshold: 0.25,
        update_period: nz(2),
        ..AutomaticConfig::default()
    };
    // Period: steps 1 and 3 decide on (3 of 8 upper: halve), (0 of 8:
    // double).
    let mut s = als(AutomaticConfig {
        window: HistogramWindow::Period,
        ..config
    });
    let after: Vec<f32> = steps
        .iter()
        .map(|&st| {
            assert!(s.needs_histogram());
            let _ = s.update(st);
            s.scale()
        })
        .collect();
    assert_eq!(after, [1024.0, 512.0, 512.0, 1024.0]);
    // UpdateStep: steps 0 and 2 decide on their own counts (0 of 4: double).
    let mut s = als(config);
    let after: Vec<f32> = steps
        .iter()
        .map(|&st| {
            let _ = s.update(st);
            s.scale()
        })
        .collect();
    assert_eq!(after, [2048.0, 2048.0, 4096.0, 4096.0]);
}

#[test]
fn als_threshold_edges() {
    let exceeds = |upper, lower, t| BinCounts { lower, upper }.upper_fraction_exceeds(t);
    // Exactly at the threshold does not exceed it.
    assert!(!exceeds(1, 3, 0.25));
    assert!(!exceeds(2, 6, 0.25));
    assert!(exceeds(1, 2, 0.25));
    assert!(exceeds(3, 8, 0.25));
    // f32(1e-7) = 14073749 / 2^47, a little above 1e-7: 1 in 10^7 is below
    // it, 1 in 10^7 - 1 above (checked with Python's fractions).
    assert!(!exceeds(1, 9_999_999, 1e-7));
    assert!(exceeds(1, 9_999_998, 1e-7));
    assert!(!exceeds(2, 19_999_998, 1e-7));
    assert!(exceeds(2, 19_999_997, 1e-7));
    // Threshold 0: any upper count; threshold 1: never.
    assert!(!exceeds(0, 5, 0.0));
    assert!(exceeds(1, 1_000_000_000, 0.0));
    assert!(!exceeds(5, 0, 1.0));
    assert!(!exceeds(u64::MAX, 0, 1.0));
    // No elements at all: never exceeds, so the scale doubles.
    for t in [0.0, 1e-7, 0.5, 1.0] {
        assert!(!exceeds(0, 0, t));
    }
    // Exact beyond f64: half of 2^65 elements, against 0.5 and the f32
    // just below it.
    assert!(!exceeds(u64::MAX, u64::MAX, 0.5));
    assert!(exceeds(
        u64::MAX,
        u64::MAX,
        f32::from_bits(0.5f32.to_bits() - 1)
    ));
    assert!(!exceeds(u64::MAX - 1, u64::MAX, 0.5));
    // Subnormal thresholds.
    assert!(exceeds(1, u64::MAX, f32::from_bits(1)));
    assert!(!exceeds(0, u64::MAX, f32::from_bits(1)));

    // Through the scaler.
    let mut s = als(AutomaticConfig {
        init_scale: 1024.0,
        threshold: 0.25,
        ..AutomaticConfig::default()
    });
    let got: Vec<f32> = [
        stats(false, 1, 3),
        stats(false, 1, 2),
        stats(false, 0, 0),
        stats(false, 2, 6),
    ]
    .iter()
    .map(|&st| {
        let _ = s.update(st);
        s.scale()
    })
    .collect();
    assert_eq!(got, [2048.0, 1024.0, 2048.0, 4096.0]);
}

#[test]
#[should_panic(expected = "threshold")]
fn upper_fraction_exceeds_rejects_a_nan_threshold() {
    let _ = BinCounts::default().upper_fraction_exceeds(f32::NAN);
}

#[test]
fn als_bounds_and_range() {
    let calm = stats(false, 0, 100);
    let hot = stats(false, 100, 0);
    let mut s = als(AutomaticConfig {
        init_scale: pow2(14),
        max_scale: Some(32768.0),
        ..AutomaticConfig::default()
    });
    assert_eq!(als_run(&mut s, &[calm; 3]), [pow2(14), pow2(15), pow2(15)]);
    let mut s = als(AutomaticConfig {
        init_scale: 4.0,
        min_scale: Some(1.5),
        ..AutomaticConfig::default()
    });
    assert_eq!(als_run(&mut s, &[hot; 3]), [4.0, 2.0, 1.5]);
    assert_eq!(s.scale(), 1.5);
    // Without bounds: doubling to infinity and halving to a scale with an
    // infinite inverse are refused.
    let mut s = als(AutomaticConfig {
        init_scale: pow2(127),
        ..AutomaticConfig::default()
    });
    assert_eq!(als_run(&mut s, &[calm; 3]), [pow2(127); 3]);
    let mut s = als(AutomaticConfig {
        init_scale: pow2(-126),
        ..AutomaticConfig::default()
    });
    assert_eq!(
        als_run(&mut s, &[hot; 4]),
        [pow2(-126), pow2(-127), pow2(-127), pow2(-127)]
    );
    assert_eq!(s.inv_scale(), pow2(127));
}

#[test]
fn als_skips_non_finite_steps_unless_told_not_to() {
    let mut s = als(AutomaticConfig {
        init_scale: 1024.0,
        ..AutomaticConfig::default()
    });
    // The overflowing step is skipped, and its counts still move the scale.
    assert_eq!(s.update(stats(true, 1, 10)), StepDecision::Skip);
    assert_eq!(s.scale(), 512.0);
    assert_eq!(
        s.update(stats(false, 0, 10)),
        StepDecision::Apply {
            inv_scale: 1.0 / 512.0
        }
    );
    let mut s = als(AutomaticConfig {
        init_scale: 1024.0,
        skip_non_finite: false,
        ..AutomaticConfig::default()
    });
    assert_eq!(
        s.update(stats(true, 1, 10)),
        StepDecision::Apply {
            inv_scale: 1.0 / 1024.0
        }
    );
}

#[test]
fn als_config_errors() {
    let base = AutomaticConfig::default();
    let check = |c: AutomaticConfig, e: ScalerConfigError| {
        assert_eq!(AutomaticLossScaler::new(c), Err(e));
        assert_eq!(c.validate(), Err(e));
    };
    check(
        AutomaticConfig {
            init_scale: 0.0,
            ..base
        },
        ScalerConfigError::Scale(0.0),
    );
    for bad in [-0.1, 1.5] {
        check(
            AutomaticConfig {
                bin_edge_location: bad,
                ..base
            },
            ScalerConfigError::BinEdgeLocation(bad),
        );
        check(
            AutomaticConfig {
                threshold: bad,
                ..base
            },
            ScalerConfigError::Threshold(bad),
        );
    }
    assert!(matches!(
        AutomaticConfig { threshold: f32::NAN, ..base }.validate(),
        Err(ScalerConfigError::Threshold(t)) if t.is_nan()
    ));
    assert!(matches!(
        AutomaticConfig { bin_edge_location: f32::NAN, ..base }.validate(),
        Err(ScalerConfigError::BinEdgeLocation(t)) if t.is_nan()
    ));
    check(
        AutomaticConfig {
            min_scale: Some(2.0),
            max_scale: Some(1.0),
            ..base
        },
        ScalerConfigError::BoundsOrder { min: 2.0, max: 1.0 },
    );
    // The edge is 65504 * location in f32.
    for loc in [0.0, 0.0625, 0.125, 0.3, 1.0] {
        let s = als(AutomaticConfig {
            bin_edge_location: loc,
            ..base
        });
        assert_eq!(s.bin_edge().value().to_bits(), (65504.0f32 * loc).to_bits());
    }
    assert_eq!(BinEdge::new(-1.0), Err(ScalerConfigError::BinEdge(-1.0)));
    assert!(BinEdge::new(f32::NAN).is_err());
    assert_eq!(BinEdge::new(-0.0).unwrap().value().to_bits(), 0);
    assert_eq!(BinEdge::new(f32::INFINITY).unwrap().value(), f32::INFINITY);
}
