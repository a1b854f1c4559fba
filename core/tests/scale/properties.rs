//! Property tests against reference models.

use super::*;

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
