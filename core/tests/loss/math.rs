//! The f32 `exp`, `ln` and `ln_1p` against `std`'s f64 functions over
//! dense sweeps (all 2^32 inputs with `--ignored`).

use tessera_core::loss::math;

/// The documented bound: at most 0.5 + 2^-12 ulp.
const MAX_ULP: f64 = 0.5 + 1.0 / 4096.0;

/// The spacing of f32 values in the binade of `|y|` (2^-149 below the
/// normal range): the ulp of any f32 next to `y`, or the smaller of two.
fn f32_ulp(y: f64) -> f64 {
    let y = y.abs();
    if y < f64::from(f32::MIN_POSITIVE) {
        return 2f64.powi(-149);
    }
    let e = ((y.to_bits() >> 52) & 0x7ff) as i32 - 1023;
    2f64.powi(e - 23)
}

/// The error of `got` against the exact `want`, in f32 ulps. Results that
/// round to infinity (or NaN) must be exactly that.
fn ulp_error(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        assert_eq!(got.to_bits(), f32::NAN.to_bits(), "want NaN");
        return 0.0;
    }
    let rounded = want as f32;
    if rounded.is_infinite() || got.is_infinite() {
        assert_eq!(got, rounded, "want {want:e}");
        return 0.0;
    }
    (f64::from(got) - want).abs() / f32_ulp(want)
}

/// The worst ulp error of `f` against `reference` over the inputs `bits`,
/// and where it occurs.
fn worst_error(
    f: fn(f32) -> f32,
    reference: fn(f64) -> f64,
    bits: impl IntoIterator<Item = u32>,
) -> (f64, u32) {
    let mut worst = (0.0, 0);
    for b in bits {
        let x = f32::from_bits(b);
        let err = ulp_error(f(x), reference(f64::from(x)));
        if err > worst.0 {
            worst = (err, b);
        }
    }
    worst
}

/// Every f32 bit pattern in steps of 1021 (4.2 million inputs over the
/// whole space, both signs, NaNs and infinities included), and 2^17
/// consecutive patterns on each side of each centre.
fn sweep(centres: &[f32]) -> impl Iterator<Item = u32> + '_ {
    const RADIUS: u32 = 1 << 17;
    (0..=u32::MAX)
        .step_by(1021)
        .chain(centres.iter().flat_map(|c| {
            let b = c.to_bits();
            b.saturating_sub(RADIUS)..=b.saturating_add(RADIUS)
        }))
}

fn assert_within_bound(name: &str, (err, bits): (f64, u32)) {
    println!(
        "{name}: worst {err} ulp at {:e} ({bits:#010x})",
        f32::from_bits(bits)
    );
    assert!(
        err <= MAX_ULP,
        "{name}: {err} ulp at {:e} ({bits:#010x})",
        f32::from_bits(bits)
    );
}

#[test]
fn exp_is_within_half_an_ulp_and_a_bit() {
    let centres = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        core::f32::consts::LN_2,
        88.722_83,
        -87.336_55, // exp crosses into the subnormal range
        -103.972_08,
        -103.278_93, // 2^-149
        10.0,
        -10.0,
    ];
    assert_within_bound("exp", worst_error(math::exp, f64::exp, sweep(&centres)));
}

#[test]
fn ln_is_within_half_an_ulp_and_a_bit() {
    let centres = [
        1.0,
        0.5,
        2.0,
        core::f32::consts::SQRT_2,
        core::f32::consts::FRAC_1_SQRT_2,
        core::f32::consts::E,
        f32::MIN_POSITIVE,
        f32::from_bits(1),
        f32::MAX,
        1e-30,
        1e30,
    ];
    assert_within_bound("ln", worst_error(math::ln, f64::ln, sweep(&centres)));
}

#[test]
fn ln_1p_is_within_half_an_ulp_and_a_bit() {
    let centres = [
        0.0,
        -0.0,
        1e-8,
        -1e-8,
        f32::from_bits(1),
        -0.5,
        -0.999_999_9,
        -1.0,
        1.0,
        core::f32::consts::SQRT_2 - 1.0,
        1e20,
        f32::MAX,
    ];
    assert_within_bound(
        "ln_1p",
        worst_error(math::ln_1p, f64::ln_1p, sweep(&centres)),
    );
}

#[test]
fn exp_ln_ln_1p_special_values() {
    let nan = f32::NAN.to_bits();
    let inf = f32::INFINITY;
    for x in [
        f32::NAN,
        -f32::NAN,
        f32::from_bits(0x7f80_0001),
        f32::from_bits(0xffc0_1234),
    ] {
        assert_eq!(math::exp(x).to_bits(), nan);
        assert_eq!(math::ln(x).to_bits(), nan);
        assert_eq!(math::ln_1p(x).to_bits(), nan);
    }
    assert_eq!(math::exp(inf), inf);
    assert_eq!(math::exp(-inf).to_bits(), 0);
    assert_eq!(math::exp(0.0), 1.0);
    assert_eq!(math::exp(-0.0), 1.0);
    assert_eq!(math::ln(1.0).to_bits(), 0);
    assert_eq!(math::ln(0.0), -inf);
    assert_eq!(math::ln(-0.0), -inf);
    assert_eq!(math::ln(inf), inf);
    assert_eq!(math::ln(-inf).to_bits(), nan);
    assert_eq!(math::ln(-1e-30).to_bits(), nan);
    assert_eq!(math::ln_1p(0.0).to_bits(), 0);
    assert_eq!(math::ln_1p(-0.0).to_bits(), (-0.0f32).to_bits());
    assert_eq!(math::ln_1p(-1.0), -inf);
    assert_eq!(math::ln_1p(inf), inf);
    assert_eq!(math::ln_1p(-1.000_000_1).to_bits(), nan);
    assert_eq!(math::ln_1p(-inf).to_bits(), nan);
    assert_eq!(math::ln_1p(f32::from_bits(1)), f32::from_bits(1));

    // The overflow and underflow thresholds of exp, as the module documents
    // them and as correct rounding puts them.
    let last_finite = 88.722_83f32;
    assert_eq!(last_finite.to_bits(), 0x42b1_7217);
    assert!(math::exp(last_finite).is_finite());
    assert_eq!(math::exp(f32::from_bits(0x42b1_7218)), inf);
    let last_nonzero = f32::from_bits(0xc2cf_f1b4);
    assert_eq!((-103.972_08f32).to_bits(), 0xc2cf_f1b4);
    assert_eq!(math::exp(last_nonzero), f32::from_bits(1));
    assert_eq!(math::exp(f32::from_bits(last_nonzero.to_bits() + 1)), 0.0);
    for x in [last_finite, f32::from_bits(0x42b1_7218), last_nonzero] {
        assert_eq!(math::exp(x), f64::from(x).exp() as f32, "{x}");
    }

    // Exact at the points where the true value is an f32.
    assert_eq!(math::exp(core::f32::consts::LN_2), 2.0);
    assert_eq!(math::ln(2.0), core::f32::consts::LN_2);
    for k in -149..=127 {
        let x = 2f64.powi(k) as f32;
        assert_eq!(
            math::ln(x),
            (f64::from(k) * core::f64::consts::LN_2) as f32,
            "2^{k}"
        );
    }
}

/// `exp`, `ln` and `ln_1p` are `const fn`: usable in constants.
#[test]
fn math_is_const() {
    const E: f32 = math::exp(1.0);
    const ZERO: f32 = math::ln(1.0);
    const TINY: f32 = math::ln_1p(1e-20);
    assert_eq!(E, core::f32::consts::E);
    assert_eq!(ZERO, 0.0);
    assert_eq!(TINY, 1e-20);
}

/// All 2^32 inputs of `exp`, `ln` and `ln_1p` against `std`, split over
/// threads. Ignored unless run with `--ignored` (CI runs it in
/// release mode).
#[test]
#[ignore = "exhaustive: all 2^32 f32 inputs, run in release with --ignored"]
fn exhaustive_exp_ln_ln_1p_all_f32_inputs() {
    const BATCH: u64 = 1 << 20;
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get()) as u64;
    let batches = (1u64 << 32) / BATCH;
    let worst = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    let mut worst = [(0.0, 0u32); 3];
                    for batch in (t..batches).step_by(threads as usize) {
                        let bits = (batch * BATCH) as u32..=((batch + 1) * BATCH - 1) as u32;
                        let found = [
                            worst_error(math::exp, f64::exp, bits.clone()),
                            worst_error(math::ln, f64::ln, bits.clone()),
                            worst_error(math::ln_1p, f64::ln_1p, bits),
                        ];
                        for (w, f) in worst.iter_mut().zip(found) {
                            if f.0 > w.0 {
                                *w = f;
                            }
                        }
                    }
                    worst
                })
            })
            .collect();
        let mut worst = [(0.0, 0u32); 3];
        for h in handles {
            for (w, f) in worst.iter_mut().zip(h.join().unwrap()) {
                if f.0 > w.0 {
                    *w = f;
                }
            }
        }
        worst
    });
    for (name, w) in ["exp", "ln", "ln_1p"].into_iter().zip(worst) {
        assert_within_bound(name, w);
    }
}
