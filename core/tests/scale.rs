//! Loss scaling: GradScaler, apex/Megatron and PopART ALS sequences written
//! from the published formulas (pinned bit for bit), the unscale-and-check
//! step over mixed f32/f16/bf16 slices, the combinable statistics, and
//! property tests against reference models written here.

use std::num::NonZeroU32;

use proptest::prelude::*;
use tessera_core::fp::{HalfFloat, Overflow, Rounding, Stochastic, bf16, f16};
use tessera_core::rng::{RandomStream, mix64};
use tessera_core::scale::{
    AutomaticConfig, AutomaticLossScaler, BinCounts, BinEdge, DynamicConfig, DynamicLossScaler,
    GradSlice, GradStats, HistogramWindow, HysteresisReset, LossScaler, ScalerConfigError,
    StaticLossScaler, StepDecision, unscale_grads,
};

// ---------------------------------------------------------------------------
// Helpers.

fn nz(n: u32) -> NonZeroU32 {
    NonZeroU32::new(n).unwrap()
}

/// GradScaler's `inv_scale`: `scale.double().reciprocal().float()`.
fn inv_of(scale: f32) -> f32 {
    (1.0 / f64::from(scale)) as f32
}

/// GradScaler's CPU kernel product: float scale times double factor,
/// stored into a float.
fn product(scale: f32, factor: f64) -> f32 {
    (f64::from(scale) * factor) as f32
}

fn pow2(e: i32) -> f32 {
    2f32.powi(e)
}

fn dynamic(config: DynamicConfig) -> DynamicLossScaler {
    DynamicLossScaler::new(config).unwrap()
}

/// Runs one update per `found_inf`; returns (scale, growth tracker,
/// hysteresis tracker) after each.
fn run(s: &mut DynamicLossScaler, pattern: &[bool]) -> Vec<(f32, i32, u32)> {
    pattern
        .iter()
        .map(|&inf| {
            let _ = s.update(inf);
            (s.scale(), s.growth_tracker(), s.hysteresis_tracker())
        })
        .collect()
}

fn scales(trace: &[(f32, i32, u32)]) -> Vec<f32> {
    trace.iter().map(|t| t.0).collect()
}

fn to_bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn stats(found_inf: bool, upper: u64, lower: u64) -> GradStats {
    GradStats {
        found_inf,
        bins: BinCounts { lower, upper },
    }
}

/// A seeded SplitMix64 sequence.
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    /// A finite f32 with random sign, exponent in `lo..=hi`, random mantissa.
    fn f32_in(&mut self, lo: i32, hi: i32) -> f32 {
        let r = self.next();
        let exp = (lo + (r % (hi - lo + 1) as u64) as i32 + 127) as u32;
        let man = (r >> 8) as u32 & 0x007f_ffff;
        let sign = ((r >> 40) as u32 & 1) << 31;
        f32::from_bits(sign | exp << 23 | man)
    }

    fn vec_f32(&mut self, n: usize, lo: i32, hi: i32) -> Vec<f32> {
        (0..n).map(|_| self.f32_in(lo, hi)).collect()
    }

    fn vec_half<H: HalfFloat>(&mut self, n: usize, lo: i32, hi: i32) -> Vec<H> {
        (0..n).map(|_| H::from_f32(self.f32_in(lo, hi))).collect()
    }
}

// ---------------------------------------------------------------------------
// DynamicLossScaler: GradScaler's state machine.

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

// ---------------------------------------------------------------------------
// AutomaticLossScaler: PopART's ALS.

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

// ---------------------------------------------------------------------------
// Unscale and check over mixed slices.

/// Three slices of each type, lengths not multiples of 8.
struct Grads {
    a: Vec<f32>,
    b: Vec<f16>,
    c: Vec<bf16>,
    d: Vec<f32>,
    e: Vec<f16>,
    f: Vec<bf16>,
}

impl Grads {
    fn new(seed: u64, lo: i32, hi: i32) -> Self {
        let mut g = Gen(seed);
        Self {
            a: g.vec_f32(37, lo, hi),
            b: g.vec_half(29, lo, hi),
            c: g.vec_half(40, lo, hi),
            d: g.vec_f32(3, lo, hi),
            e: g.vec_half(8, lo, hi),
            f: g.vec_half(1, lo, hi),
        }
    }

    fn slices(&mut self, rb: Rounding, rc: Rounding) -> [GradSlice<'_>; 6] {
        [
            GradSlice::from(&mut self.a[..]),
            GradSlice::F16(&mut self.b, rb),
            GradSlice::Bf16(&mut self.c, rc),
            GradSlice::from(&mut self.d[..]),
            GradSlice::from(&mut self.e[..]),
            GradSlice::from(&mut self.f[..]),
        ]
    }
}

fn sr(seed: u64, stream: u64, first_index: u64) -> Rounding {
    Rounding::Stochastic {
        sr: Stochastic::new(RandomStream::new(seed, stream), Overflow::Infinity),
        first_index,
    }
}

fn expect_f32(x: &[f32], inv: f32) -> Vec<u32> {
    x.iter().map(|&v| (v * inv).to_bits()).collect()
}

fn expect_half<H: HalfFloat>(x: &[H], inv: f32, r: Rounding) -> Vec<u16> {
    x.iter()
        .enumerate()
        .map(|(i, v)| {
            let p = v.to_f32() * inv;
            let h = match r {
                Rounding::Nearest => H::from_f32(p),
                Rounding::Stochastic { sr, first_index } => {
                    H::from_f32_sr(p, sr, first_index + i as u64)
                }
                other => other.round(p, i),
            };
            bytemuck::cast(h)
        })
        .collect()
}

fn half_bits<H: HalfFloat>(x: &[H]) -> Vec<u16> {
    x.iter().map(|&h| bytemuck::cast(h)).collect()
}

#[test]
fn unscale_mixed_slices_equals_scalar_multiply_and_rounding() {
    for (seed, inv) in [
        (1, pow2(-16)),
        (2, 1.0 / 3.0),
        (3, inv_of(1000.0)),
        (4, 1.0),
        (5, inv_of(98304.0)),
    ] {
        for (rb, rc) in [
            (Rounding::Nearest, Rounding::Nearest),
            (sr(seed, 1, 0), sr(seed, 2, 100)),
        ] {
            let mut g = Grads::new(seed, -10, 14);
            let want = (
                expect_f32(&g.a, inv),
                expect_half(&g.b, inv, rb),
                expect_half(&g.c, inv, rc),
                expect_f32(&g.d, inv),
                expect_half(&g.e, inv, Rounding::Nearest),
                expect_half(&g.f, inv, Rounding::Nearest),
            );
            // For nearest, the half crate's own conversion is the oracle.
            if rb == Rounding::Nearest {
                let half_rn: Vec<u16> =
                    g.b.iter()
                        .map(|v| half::f16::from_f32(v.to_f32() * inv).to_bits())
                        .collect();
                assert_eq!(want.1, half_rn);
            }
            let st = unscale_grads(g.slices(rb, rc), inv, None);
            assert_eq!(st, GradStats::default(), "seed {seed}");
            assert_eq!(to_bits(&g.a), want.0);
            assert_eq!(half_bits(&g.b), want.1);
            assert_eq!(half_bits(&g.c), want.2);
            assert_eq!(to_bits(&g.d), want.3);
            assert_eq!(half_bits(&g.e), want.4);
            assert_eq!(half_bits(&g.f), want.5);
        }
    }
}

#[test]
fn found_inf_from_a_single_non_finite_value_in_any_slice() {
    let inv = pow2(-10);
    let clean = Grads::new(11, -5, 5);
    let mut g = Grads::new(11, -5, 5);
    assert!(!unscale_grads(g.slices(Rounding::Nearest, Rounding::Nearest), inv, None).found_inf);
    for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
        for which in 0..6 {
            let lens = [37usize, 29, 40, 3, 8, 1];
            for at in [0, lens[which] / 2, lens[which] - 1] {
                let mut g = Grads {
                    a: clean.a.clone(),
                    b: clean.b.clone(),
                    c: clean.c.clone(),
                    d: clean.d.clone(),
                    e: clean.e.clone(),
                    f: clean.f.clone(),
                };
                match which {
                    0 => g.a[at] = bad,
                    1 => g.b[at] = f16::from_f32(bad),
                    2 => g.c[at] = bf16::from_f32(bad),
                    3 => g.d[at] = bad,
                    4 => g.e[at] = f16::from_f32(bad),
                    _ => g.f[at] = bf16::from_f32(bad),
                }
                let st = unscale_grads(
                    g.slices(sr(3, 3, 0), Rounding::Nearest),
                    inv,
                    Some(BinEdge::DEFAULT),
                );
                assert!(st.found_inf, "{bad} in slice {which} at {at}");
                // The non-finite value is in the upper bin.
                assert_eq!(st.bins.upper, 1, "{bad} in slice {which} at {at}");
                assert_eq!(st.bins.total(), 118);
            }
        }
    }
}

/// `|x| >= edge`, NaN upper, on the exact (widened) value.
fn is_upper(x: f32, edge: f32) -> bool {
    x.is_nan() || x.abs() >= edge
}

#[test]
fn histogram_counts_are_exact_and_taken_before_unscaling() {
    let edge = 8188.0f32;
    let below = f32::from_bits(edge.to_bits() - 1);
    let above = f32::from_bits(edge.to_bits() + 1);
    let mut a: Vec<f32> = vec![
        edge,
        -edge,
        below,
        -below,
        above,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NAN,
        65504.0,
        1e30,
        -1e-30,
        f32::MIN_POSITIVE,
    ];
    // 8188 is an f16 value; 8184 and 8192 are its neighbours.
    let mut b: Vec<f16> = [8184.0, 8188.0, 8192.0, -8188.0, 65504.0, 0.0]
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    b.push(f16::NAN);
    // 8188 is not a bf16 value: 8160 below, 8192 above.
    let mut c: Vec<bf16> = [8160.0, 8192.0, -8192.0, 1.0]
        .iter()
        .map(|&v| bf16::from_f32(v))
        .collect();
    let expected_upper = a.iter().filter(|&&v| is_upper(v, edge)).count()
        + b.iter().filter(|v| is_upper(v.to_f32(), edge)).count()
        + c.iter().filter(|v| is_upper(v.to_f32(), edge)).count();
    assert_eq!(expected_upper, 7 + 5 + 2);
    let total = a.len() + b.len() + c.len();
    // inv_scale 1/16 would take every value below the edge: the counts are
    // of the scaled values.
    let st = unscale_grads(
        [
            GradSlice::from(&mut a[..]),
            GradSlice::from(&mut b[..]),
            GradSlice::from(&mut c[..]),
        ],
        0.0625,
        Some(BinEdge::new(edge).unwrap()),
    );
    assert!(st.found_inf);
    assert_eq!(st.bins.upper, expected_upper as u64);
    assert_eq!(st.bins.lower, (total - expected_upper) as u64);
    assert_eq!(a[0], edge / 16.0);
}

#[test]
fn half_counts_are_exact_for_every_value() {
    fn check<H: HalfFloat>(edge: f32) {
        let e = BinEdge::new(edge).unwrap();
        let all: Vec<H> = (0..=u16::MAX).map(bytemuck::cast::<u16, H>).collect();
        for &h in &all {
            let got = e.count_half(&[h]);
            let upper = is_upper(h.to_f32(), edge);
            assert_eq!(
                (got.upper, got.lower),
                (u64::from(upper), u64::from(!upper)),
                "{} {:#06x} against {edge:e}",
                H::NAME,
                bytemuck::cast::<H, u16>(h)
            );
        }
        let total = e.count_half(&all);
        let upper = all.iter().filter(|h| is_upper(h.to_f32(), edge)).count() as u64;
        assert_eq!((total.upper, total.lower), (upper, 65536 - upper));
    }
    let edges = [
        0.0,
        8188.0,
        8188.5,
        8190.0,
        65504.0,
        65510.0,
        65519.0,
        65520.0,
        1e-8,
        6e-8,
        3e-5,
        1e-40,
        3.38e38,
        3.4e38,
        f32::MAX,
        f32::INFINITY,
    ];
    for edge in edges {
        check::<f16>(edge);
        check::<bf16>(edge);
    }
    // f32 at the same edges, on special and neighbouring values.
    for edge in edges {
        let e = BinEdge::new(edge).unwrap();
        let mut xs = vec![
            0.0,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        if edge.is_finite() {
            let b = edge.to_bits();
            for v in [b.saturating_sub(1), b, b + 1] {
                xs.push(f32::from_bits(v));
                xs.push(-f32::from_bits(v));
            }
        }
        for x in xs {
            let got = e.count(&[x]);
            assert_eq!(
                got.upper,
                u64::from(is_upper(x, edge)),
                "{x:e} against {edge:e}"
            );
        }
    }
}

#[test]
fn merged_stats_of_split_replicas_equal_the_whole() {
    let edge = BinEdge::new(1000.0).unwrap();
    let inv = inv_of(3000.0);
    let mut g = Gen(21);
    let a0 = g.vec_f32(301, -4, 12);
    let b0: Vec<f16> = g.vec_half(133, -4, 12);
    let c0: Vec<bf16> = g.vec_half(77, -4, 12);

    let (mut a, mut b, mut c) = (a0.clone(), b0.clone(), c0.clone());
    let whole = unscale_grads(
        [
            GradSlice::from(&mut a[..]),
            GradSlice::from(&mut b[..]),
            GradSlice::from(&mut c[..]),
        ],
        inv,
        Some(edge),
    );
    assert!(whole.bins.upper > 0 && whole.bins.lower > 0);
    assert!(!whole.found_inf);

    for (sa, sb, sc) in [(0, 0, 0), (150, 64, 1), (7, 133, 76), (301, 1, 40)] {
        let (mut a2, mut b2, mut c2) = (a0.clone(), b0.clone(), c0.clone());
        let (a_lo, a_hi) = a2.split_at_mut(sa);
        let (b_lo, b_hi) = b2.split_at_mut(sb);
        let (c_lo, c_hi) = c2.split_at_mut(sc);
        // "Replica" 0 takes the low parts, replica 1 the high parts.
        let r0 = unscale_grads(
            [
                GradSlice::from(a_lo),
                GradSlice::from(b_lo),
                GradSlice::from(c_lo),
            ],
            inv,
            Some(edge),
        );
        let r1 = unscale_grads(
            [
                GradSlice::from(c_hi),
                GradSlice::from(a_hi),
                GradSlice::from(b_hi),
            ],
            inv,
            Some(edge),
        );
        assert_eq!(r0.merge(r1), whole);
        assert_eq!(r1.merge(r0), whole);
        // The same through a sum all-reduce of words.
        let w0 = r0.to_words();
        let w1 = r1.to_words();
        let sum = [0, 1, 2].map(|i| w0[i].wrapping_add(w1[i]));
        assert_eq!(GradStats::from_words(sum), whole);
        assert_eq!(to_bits(&a2), to_bits(&a));
        assert_eq!(half_bits(&b2), half_bits(&b));
        assert_eq!(half_bits(&c2), half_bits(&c));
    }
}

#[test]
fn grad_stats_merge_and_words() {
    let x = stats(true, 3, 4);
    let y = stats(false, 10, 20);
    assert_eq!(x.merge(y), stats(true, 13, 24));
    assert_eq!(y.merge(y), stats(false, 20, 40));
    assert_eq!(x.merge(GradStats::default()), x);
    assert_eq!(x.to_words(), [1, 4, 3]);
    assert_eq!(GradStats::from_words([3, 4, 3]), x); // three replicas found inf
    assert_eq!(GradStats::from_words(y.to_words()), y);
    // Counts wrap like u64 sums.
    let big = stats(false, u64::MAX, 0);
    assert_eq!(big.merge(stats(false, 2, 0)).bins.upper, 1);
}

#[test]
fn slices_kept_in_an_array_are_reborrowed_step_after_step() {
    let mut w = [1024.0f32; 10];
    let mut h = [f16::from_f32(1024.0); 9];
    let mut grads = [GradSlice::from(&mut w[..]), GradSlice::from(&mut h[..])];
    assert_eq!(grads[0].len() + grads[1].len(), 19);
    assert!(!grads[1].is_empty());
    for _ in 0..3 {
        let st = unscale_grads(grads.iter_mut().map(GradSlice::reborrow), 0.5, None);
        assert!(!st.found_inf);
    }
    assert_eq!(grads[1].bins(BinEdge::new(128.0).unwrap()).upper, 9);
    assert!(w.iter().all(|&v| v == 128.0));
    assert!(h.iter().all(|&v| v == f16::from_f32(128.0)));
}

/// A data-parallel step loop generic over the scaler, as a trainer would
/// write it.
fn train<S: LossScaler>(scaler: &mut S, replicas: &mut [Vec<f32>], steps: usize) -> Vec<bool> {
    let mut skipped = Vec::new();
    for step in 0..steps {
        let mut combined = GradStats::default();
        for (r, grad) in replicas.iter_mut().enumerate() {
            // Replica 1 overflows on step 2.
            let v = if r == 1 && step == 2 {
                f32::INFINITY
            } else {
                scaler.scale()
            };
            grad.fill(v);
            combined = combined.merge(scaler.unscale([GradSlice::from(&mut grad[..])]));
        }
        skipped.push(scaler.update(combined).is_skip());
    }
    skipped
}

#[test]
fn a_generic_trainer_skips_on_every_replica_together() {
    let mut replicas = vec![vec![0.0f32; 5]; 3];
    let mut d = DynamicLossScaler::default();
    assert_eq!(train(&mut d, &mut replicas, 4), [false, false, true, false]);
    assert_eq!(d.scale(), 32768.0);
    let mut a = AutomaticLossScaler::new(AutomaticConfig {
        init_scale: 16.0,
        update_period: nz(2),
        ..AutomaticConfig::default()
    })
    .unwrap();
    assert_eq!(a.histogram_edge(), Some(BinEdge::DEFAULT));
    assert_eq!(train(&mut a, &mut replicas, 4), [false, false, true, false]);
    // Steps 0 and 2 decide: 15 calm elements (double), then 5 infinities in
    // 15 (halve).
    assert_eq!(a.scale(), 16.0);
    let mut s = StaticLossScaler::new(8.0).unwrap();
    assert_eq!(train(&mut s, &mut replicas, 4), [false, false, true, false]);
    assert_eq!(replicas[0], [1.0; 5]);
}

// ---------------------------------------------------------------------------
// Property tests against reference models.

/// A plain reference of the dynamic scaler, written from the rules
/// (GradScaler's kernel, apex's clamps, Megatron/NeMo hysteresis with a
/// signed tracker, and the finite-reciprocal floor).
#[derive(Clone, Copy, Debug)]
struct DynRef {
    scale: f32,
    growth: i64,
    hysteresis: i64,
}

impl DynRef {
    fn step(&mut self, c: &DynamicConfig, inf: bool) -> StepDecision {
        let before = self.scale;
        let h = i64::from(c.hysteresis.get());
        if inf {
            self.growth = 0;
            self.hysteresis -= 1;
            if self.hysteresis <= 0 {
                let mut new = product(self.scale, c.backoff_factor);
                if let Some(min) = c.min_scale
                    && new < min
                {
                    new = min;
                }
                if new > 0.0 && inv_of(new).is_finite() {
                    self.scale = new;
                }
            }
            StepDecision::Skip
        } else {
            if c.hysteresis_reset == HysteresisReset::OnGoodStep {
                self.hysteresis = h;
            }
            self.growth += 1;
            if self.growth == i64::from(c.growth_interval.get()) {
                let mut new = product(self.scale, c.growth_factor);
                if let Some(max) = c.max_scale
                    && new > max
                {
                    new = max;
                }
                if new.is_finite() {
                    self.scale = new;
                }
                self.growth = 0;
                self.hysteresis = h;
            }
            StepDecision::Apply {
                inv_scale: inv_of(before),
            }
        }
    }
}

fn dynamic_config() -> impl Strategy<Value = DynamicConfig> {
    let init = prop_oneof![
        Just(65536.0f32),
        Just(3.0),
        Just(1000.0),
        Just(pow2(-120)),
        Just(pow2(-126)),
        Just(pow2(120)),
        Just(f32::MAX),
        (0x0080_0000u32..0x7f80_0000).prop_map(f32::from_bits),
    ];
    let growth = prop_oneof![
        Just(2.0f64),
        Just(1.5),
        Just(1.1),
        Just(4.0),
        Just(1.0 + 1e-7),
        Just(1e10)
    ];
    let backoff = prop_oneof![
        Just(0.5f64),
        Just(0.7),
        Just(0.25),
        Just(0.999),
        Just(1e-10)
    ];
    let reset = prop_oneof![
        Just(HysteresisReset::OnGoodStep),
        Just(HysteresisReset::OnGrowth)
    ];
    (
        init,
        growth,
        backoff,
        1u32..6,
        1u32..4,
        reset,
        prop::option::of(0.0f64..=1.0),
        prop::option::of(1.0f64..1e6),
    )
        .prop_map(
            |(init, growth, backoff, interval, hysteresis, reset, lo, hi)| {
                let min = lo
                    .map(|f| product(init, f))
                    .filter(|&m| m > 0.0 && inv_of(m).is_finite());
                let max = hi.map(|f| {
                    let m = product(init, f);
                    if m.is_finite() { m } else { f32::MAX }
                });
                DynamicConfig {
                    init_scale: init,
                    growth_factor: growth,
                    backoff_factor: backoff,
                    growth_interval: nz(interval),
                    min_scale: min,
                    max_scale: max,
                    hysteresis: nz(hysteresis),
                    hysteresis_reset: reset,
                }
            },
        )
}

/// found_inf sequences: random, or runs of one value (to reach the bounds
/// and the range ends).
fn found_inf_sequence() -> impl Strategy<Value = Vec<bool>> {
    prop_oneof![
        prop::collection::vec(any::<bool>(), 0..300),
        prop::collection::vec((any::<bool>(), 1usize..200), 0..8).prop_map(|runs| {
            runs.into_iter()
                .flat_map(|(v, n)| std::iter::repeat_n(v, n))
                .collect()
        }),
    ]
}

/// The reference ALS decision: `upper * 2^60 > m * (upper + lower)` with
/// `threshold = m / 2^60` (exact for thresholds with at most 60 fraction
/// bits).
fn als_exceeds_ref(upper: u64, lower: u64, threshold: f32) -> bool {
    let m = f64::from(threshold) * 2f64.powi(60);
    assert_eq!(m.fract(), 0.0);
    let n = u128::from(upper) + u128::from(lower);
    (u128::from(upper) << 60) > m as u128 * n
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn dynamic_scaler_matches_the_reference_and_stays_in_range(
        config in dynamic_config(),
        pattern in found_inf_sequence(),
    ) {
        let mut s = DynamicLossScaler::new(config).unwrap();
        let mut r = DynRef {
            scale: config.init_scale,
            growth: 0,
            hysteresis: i64::from(config.hysteresis.get()),
        };
        for &inf in &pattern {
            let d = s.update(inf);
            prop_assert_eq!(d, r.step(&config, inf));
            let scale = s.scale();
            prop_assert_eq!(scale.to_bits(), r.scale.to_bits());
            prop_assert!(scale.is_finite() && scale > 0.0);
            prop_assert!(s.inv_scale().is_finite() && s.inv_scale() > 0.0);
            prop_assert!(config.min_scale.is_none_or(|m| scale >= m));
            prop_assert!(config.max_scale.is_none_or(|m| scale <= m));
            prop_assert_eq!(i64::from(s.growth_tracker()), r.growth);
            prop_assert_eq!(i64::from(s.hysteresis_tracker()), r.hysteresis.max(0));
        }
    }

    #[test]
    fn dynamic_scaler_with_defaults_is_grad_scaler(
        init_exp in -100i32..120,
        interval in 1u32..5,
        pattern in found_inf_sequence(),
    ) {
        // GradScaler itself, no floor: while its inverse stays finite (it
        // does unless more than ~100 overflows run in a row from 2^-100 up),
        // the sequences agree bit for bit.
        let config = DynamicConfig {
            init_scale: pow2(init_exp),
            growth_interval: nz(interval),
            ..DynamicConfig::default()
        };
        let mut s = DynamicLossScaler::new(config).unwrap();
        let (mut scale, mut tracker) = (pow2(init_exp), 0i32);
        for &inf in &pattern {
            if inf {
                scale = product(scale, 0.5);
                tracker = 0;
            } else {
                tracker += 1;
                if tracker == interval as i32 {
                    let new = product(scale, 2.0);
                    if new.is_finite() {
                        scale = new;
                    }
                    tracker = 0;
                }
            }
            if !inv_of(scale).is_finite() {
                break;
            }
            let _ = s.update(inf);
            prop_assert_eq!(s.scale().to_bits(), scale.to_bits());
            prop_assert_eq!(s.growth_tracker(), tracker);
        }
    }

    #[test]
    fn automatic_scaler_matches_the_reference(
        init in prop_oneof![Just(1.0f32), Just(1024.0), Just(pow2(126)), Just(pow2(-125)), Just(10.0)],
        threshold in prop_oneof![Just(0.0f32), Just(1e-7), Just(0.25), Just(0.5), Just(1.0)],
        period in 1u32..5,
        whole_period in any::<bool>(),
        bounds in prop::option::of((0u32..4, 0u32..4)),
        steps in prop::collection::vec((any::<bool>(), 0u64..4, 0u64..30), 0..120),
    ) {
        let (min, max) = match bounds {
            Some((lo, hi)) => (
                Some((init / (1u32 << lo) as f32).max(pow2(-127))),
                Some((init * (1u32 << hi) as f32).min(f32::MAX)),
            ),
            None => (None, None),
        };
        let config = AutomaticConfig {
            init_scale: init,
            threshold,
            update_period: nz(period),
            window: if whole_period { HistogramWindow::Period } else { HistogramWindow::UpdateStep },
            min_scale: min,
            max_scale: max,
            ..AutomaticConfig::default()
        };
        let mut s = AutomaticLossScaler::new(config).unwrap();
        let mut scale = init;
        let (mut acc_u, mut acc_l) = (0u64, 0u64);
        for (k, &(inf, upper, lower)) in steps.iter().enumerate() {
            let pos = k as u32 % period;
            let decide = if whole_period {
                acc_u += upper;
                acc_l += lower;
                (pos == period - 1).then(|| {
                    let c = (acc_u, acc_l);
                    (acc_u, acc_l) = (0, 0);
                    c
                })
            } else {
                (pos == 0).then_some((upper, lower))
            };
            let before = scale;
            if let Some((u, l)) = decide {
                if als_exceeds_ref(u, l, threshold) {
                    let new = min.map_or(scale / 2.0, |m: f32| (scale / 2.0).max(m));
                    if inv_of(new).is_finite() && new > 0.0 {
                        scale = new;
                    }
                } else {
                    let new = max.map_or(scale * 2.0, |m: f32| (scale * 2.0).min(m));
                    if new.is_finite() {
                        scale = new;
                    }
                }
            }
            prop_assert_eq!(s.needs_histogram(), whole_period || pos == 0);
            let d = s.update(stats(inf, upper, lower));
            let want = if inf { StepDecision::Skip } else { StepDecision::Apply { inv_scale: inv_of(before) } };
            prop_assert_eq!(d, want);
            prop_assert_eq!(s.scale().to_bits(), scale.to_bits());
            prop_assert!(scale.is_finite() && scale > 0.0 && s.inv_scale().is_finite());
            prop_assert!(min.is_none_or(|m| scale >= m) && max.is_none_or(|m| scale <= m));
        }
    }

    #[test]
    fn upper_fraction_test_is_exact(
        upper in 0u64..1 << 40,
        lower in 0u64..1 << 40,
        threshold_bits in (0x3080_0000u32..=0x3f80_0000), // 2^-30 ..= 1
    ) {
        let threshold = f32::from_bits(threshold_bits);
        let counts = BinCounts { lower, upper };
        prop_assert_eq!(
            counts.upper_fraction_exceeds(threshold),
            als_exceeds_ref(upper, lower, threshold)
        );
        // Near the threshold: the count that puts the fraction just past it.
        let n = upper + lower;
        if n > 0 {
            let at = (f64::from(threshold) * n as f64).floor() as u64;
            for u in [at.saturating_sub(1), at, at + 1] {
                if u <= n {
                    let c = BinCounts { lower: n - u, upper: u };
                    prop_assert_eq!(
                        c.upper_fraction_exceeds(threshold),
                        als_exceeds_ref(u, n - u, threshold)
                    );
                }
            }
        }
    }

    #[test]
    fn split_unscale_stats_merge_to_the_whole(
        seed in any::<u64>(),
        len in 0usize..300,
        cut in 0usize..300,
        inv_exp in -20i32..2,
        edge in prop_oneof![Just(0.0f32), Just(1.0), Just(8188.0), Just(1e5), Just(f32::INFINITY)],
    ) {
        let cut = cut.min(len);
        let mut g = Gen(seed);
        let mut x = g.vec_f32(len, -8, 20);
        if len > 0 && seed % 3 == 0 {
            x[(seed as usize / 3) % len] = f32::INFINITY;
        }
        let h: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
        let edge = BinEdge::new(edge).unwrap();
        let inv = pow2(inv_exp);

        let (mut x1, mut h1, mut b1) = (x.clone(), h.clone(), b.clone());
        let whole = unscale_grads(
            [GradSlice::from(&mut x1[..]), GradSlice::from(&mut h1[..]), GradSlice::from(&mut b1[..])],
            inv,
            Some(edge),
        );
        let (mut x2, mut h2, mut b2) = (x.clone(), h.clone(), b.clone());
        let (xa, xb) = x2.split_at_mut(cut);
        let (ha, hb) = h2.split_at_mut(cut);
        let (ba, bb) = b2.split_at_mut(cut);
        let parts = [
            unscale_grads([GradSlice::from(xa)], inv, Some(edge)),
            unscale_grads([GradSlice::from(hb), GradSlice::from(ba)], inv, Some(edge)),
            unscale_grads([GradSlice::from(bb), GradSlice::from(ha), GradSlice::from(xb)], inv, Some(edge)),
        ];
        let merged = parts.iter().fold(GradStats::default(), |acc, p| acc.merge(*p));
        prop_assert_eq!(merged, whole);
        prop_assert_eq!(whole.bins.total(), 3 * len as u128);
        prop_assert_eq!(to_bits(&x2), to_bits(&x1));
        prop_assert_eq!(half_bits(&h2), half_bits(&h1));
        prop_assert_eq!(half_bits(&b2), half_bits(&b1));
    }
}
