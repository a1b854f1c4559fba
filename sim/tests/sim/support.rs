//! Shared helpers: small IPUs and seeded data.

use tessera_core::rng::RandomStream;
use tessera_sim::ipu::{IpuParams, IpuSpec, Target};

/// An IPU of `tiles` tiles, otherwise a Mk2.
pub(crate) fn spec(tiles: u32) -> IpuSpec {
    IpuSpec::new(IpuParams {
        tiles,
        ..IpuParams::default()
    })
    .unwrap()
}

/// One IPU of `tiles` tiles.
pub(crate) fn target(tiles: u32) -> Target {
    Target::single(spec(tiles))
}

/// `n` values uniform in `[lo, hi)` from stream `(seed, 0)`.
pub(crate) fn uniform(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let s = RandomStream::new(seed, 0);
    (0..n as u64)
        .map(|i| lo + (hi - lo) * (s.bits(i) >> 8) as f32 / (1u32 << 24) as f32)
        .collect()
}

/// The bits of f32 values.
pub(crate) fn bits(x: &[f32]) -> Vec<u32> {
    x.iter().map(|v| v.to_bits()).collect()
}
