//! A numerics researcher's checks of stochastic rounding, written against
//! the public API alone:
//!
//! - enumerated: for any `x` (f16: `|x| >= 2^-17`, where 16 random bits
//!   decide; bf16: any finite), rounding over all 2^16 random bit patterns
//!   lands on one of `x`'s two neighbours and averages to `x` exactly
//!   (summed with `ExactSum`, no floating-point error);
//! - property-tested with proptest: the SIMD slice conversion and a
//!   generic kernel rounding stochastically equal their scalar twins on
//!   every backend this CPU has, and a slice rounded in pieces (each with
//!   its own `first_index`) equals it rounded whole.
//!
//! Run with `cargo run -p tessera-core --example rounding_properties`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use tessera_core::arch::{self, Backend};
use tessera_core::fp::{self, HalfFloat, Overflow, Rounding, Stochastic, bf16, f16, scalar};
use tessera_core::kernels::{self, ExactSum};
use tessera_core::rng::{RandomBits, RandomStream};

/// Rounds `x` with every 16-bit random pattern: the outcomes are the two
/// neighbours of `x` (one, if `x` is representable) and their mean is `x`.
fn check_unbiased<H: HalfFloat>(
    x: f32,
    round: impl Fn(f32, u16) -> H,
) -> Result<(), TestCaseError> {
    let (lo, hi) = (round(x, 0).to_f32(), round(x, u16::MAX).to_f32());
    prop_assert!(lo.abs() <= x.abs() && x.abs() <= hi.abs(), "{x}: {lo} {hi}");
    let (mut sum, mut want) = (ExactSum::new(), ExactSum::new());
    for bits in 0..=u16::MAX {
        let r = round(x, bits).to_f32();
        prop_assert!(r == lo || r == hi, "{x} -> {r}");
        sum.add(r);
        want.add(x);
    }
    prop_assert_eq!(sum, want, "biased at {}", x);
    Ok(())
}

/// `f(backend)` equals `f(Backend::Scalar)` on every backend the CPU has.
fn on_every_backend<R: PartialEq + std::fmt::Debug>(
    f: impl Fn() -> R,
) -> Result<(), TestCaseError> {
    let twin = arch::with_backend(Backend::Scalar, &f).unwrap();
    for b in Backend::ALL.iter().copied().filter(|b| b.is_available()) {
        prop_assert_eq!(
            &arch::with_backend(b, &f).unwrap(),
            &twin,
            "backend {}",
            b.name()
        );
    }
    Ok(())
}

/// The same 16 random bits for every element (and zero extra words).
struct Fixed(u16);

impl RandomBits for Fixed {
    fn half_bits(&self, _: u64) -> u16 {
        self.0
    }
    fn word(&self, _: u64, _: u32) -> u32 {
        0
    }
}

fn main() {
    let config = Config {
        cases: 48,
        failure_persistence: None,
        ..Config::default()
    };
    let mut runner = TestRunner::new(config);
    let f16_range = prop_oneof![2f32.powi(-17)..65504.0, -65504.0f32..-(2f32.powi(-17))];
    runner
        .run(&f16_range, |x| {
            check_unbiased(x, |x, b| {
                scalar::f32_to_f16_sr_with(x, &Fixed(b), 0, Overflow::Saturate)
            })
        })
        .unwrap();
    let bf16_range = any::<f32>().prop_filter("finite", |x| x.abs() < bf16::MAX.to_f32());
    runner
        .run(&bf16_range, |x| {
            check_unbiased(x, |x, b| {
                scalar::f32_to_bf16_sr_with(x, &Fixed(b), 0, Overflow::Saturate)
            })
        })
        .unwrap();
    println!("enumerated stochastic rounding: exactly unbiased (f16 and bf16)");

    let cases = (
        prop::collection::vec(-100.0f32..100.0, 0..300),
        any::<u64>(),
        any::<u64>(),
        0..300usize,
    );
    runner
        .run(&cases, |(x, seed, first, cut)| {
            let sr = Stochastic::new(RandomStream::new(seed, 0), Overflow::Infinity);
            let rounding = Rounding::Stochastic {
                sr,
                first_index: first,
            };
            on_every_backend(|| {
                let mut h = vec![f16::ZERO; x.len()];
                fp::f32_to_half_sr_slice(&x, &mut h, sr, first);
                let b: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
                let mut y = b.clone();
                kernels::axpy(0.3, &b, &mut y, rounding);
                (h, y)
            })?;
            let mut whole = vec![f16::ZERO; x.len()];
            fp::f32_to_half_sr_slice(&x, &mut whole, sr, first);
            let cut = cut.min(x.len());
            let mut pieces = vec![f16::ZERO; x.len()];
            let (a, b) = pieces.split_at_mut(cut);
            fp::f32_to_half_sr_slice(&x[..cut], a, sr, first);
            fp::f32_to_half_sr_slice(&x[cut..], b, sr, first.wrapping_add(cut as u64));
            prop_assert_eq!(pieces, whole);
            Ok(())
        })
        .unwrap();
    println!("SIMD = scalar twin on every backend, and split-invariant");
}
