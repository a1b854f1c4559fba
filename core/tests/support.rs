//! Helpers shared by the test modules.

use tessera_core::rng::mix64;

/// A seeded SplitMix64 sequence.
pub(crate) struct Gen(pub(crate) u64);

impl Gen {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Sign, exponent in `lo..=hi` (unbiased), random mantissa.
    pub(crate) fn in_range(&mut self, lo: i32, hi: i32) -> f32 {
        let r = self.next();
        let exp = (lo + (r % (hi - lo + 1) as u64) as i32 + 127) as u32;
        let man = (r >> 8) as u32 & 0x007f_ffff;
        let sign = ((r >> 40) as u32 & 1) << 31;
        f32::from_bits(sign | exp << 23 | man)
    }
}
