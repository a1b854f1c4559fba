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

mod automatic;
mod dynamic;
mod properties;
mod unscale;

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

fn half_bits<H: HalfFloat>(x: &[H]) -> Vec<u16> {
    x.iter().map(|&h| bytemuck::cast(h)).collect()
}
