//! What an IPU is made of: tiles, workers, memory, clock and compute rate.

use core::fmt;
use core::num::{NonZeroU32, NonZeroU64};

/// The numbers that describe an IPU, before validation.
///
/// `Default` is the Mk2 GC200 ([`IpuSpec::MK2_GC200`]); change fields and
/// pass the result to [`IpuSpec::new`] to model another machine (for example
/// a small IPU for tests, as Poplar's IPUModel allows with `tilesPerIPU`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpuParams {
    /// Tiles per IPU.
    pub tiles: u32,
    /// Hardware worker threads per tile.
    pub workers_per_tile: u32,
    /// Bytes of memory per tile.
    pub memory_per_tile: u64,
    /// Clock frequency in hertz.
    pub clock_hz: u64,
    /// Peak FP16 (f16 multiply, f32 accumulate) floating-point operations
    /// per cycle per tile, counting a multiply-add as two.
    pub fp16_flops_per_tile_cycle: u32,
}

impl Default for IpuParams {
    fn default() -> Self {
        MK2_GC200
    }
}

/// Mk2 GC200 (SEMANTICS.md section 5).
///
/// - 1,472 tiles with 6 worker threads each (Graphcore);
/// - 638,976 bytes (624 KiB) per tile, 940,572,672 bytes (about 900 MB) per
///   IPU (PopART tests);
/// - 1.33 GHz (third-party measurements);
/// - 128 FP16 flops per tile per cycle: derived, so that the peak is
///   Graphcore's 250 TFLOPS per IPU (250e12 / (1,472 x 1.33e9) = 127.7),
///   i.e. 64 multiply-adds per tile per cycle. This gives 250.6 TFLOPS.
const MK2_GC200: IpuParams = IpuParams {
    tiles: 1472,
    workers_per_tile: 6,
    memory_per_tile: 638_976,
    clock_hz: 1_330_000_000,
    fp16_flops_per_tile_cycle: 128,
};

/// Bow: the GC200 die with wafer-on-wafer power delivery, so the same
/// tiles, workers, memory and per-cycle rate, at 1.85 GHz (third-party,
/// SEMANTICS.md section 5). The derived peak, 348.6 TFLOPS, agrees with
/// Graphcore's stated 350 TFLOPS for the Bow IPU.
const BOW: IpuParams = IpuParams {
    clock_hz: 1_850_000_000,
    ..MK2_GC200
};

/// The field of [`IpuParams`] an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecField {
    /// [`IpuParams::tiles`].
    Tiles,
    /// [`IpuParams::workers_per_tile`].
    WorkersPerTile,
    /// [`IpuParams::memory_per_tile`].
    MemoryPerTile,
    /// [`IpuParams::clock_hz`].
    ClockHz,
    /// [`IpuParams::fp16_flops_per_tile_cycle`].
    Fp16FlopsPerTileCycle,
}

impl SpecField {
    /// The field's name in [`IpuParams`].
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tiles => "tiles",
            Self::WorkersPerTile => "workers_per_tile",
            Self::MemoryPerTile => "memory_per_tile",
            Self::ClockHz => "clock_hz",
            Self::Fp16FlopsPerTileCycle => "fp16_flops_per_tile_cycle",
        }
    }
}

/// Why [`IpuParams`] do not describe an IPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SpecError {
    /// A field that must be at least 1 is 0.
    Zero(SpecField),
    /// The IPU's total memory, `tiles * memory_per_tile`, does not fit in
    /// a `u64` of bytes.
    MemoryOverflow {
        /// Tiles per IPU.
        tiles: u32,
        /// Bytes per tile.
        memory_per_tile: u64,
    },
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Zero(field) => write!(f, "IPU {} must be at least 1", field.name()),
            Self::MemoryOverflow {
                tiles,
                memory_per_tile,
            } => write!(
                f,
                "IPU memory of {tiles} tiles x {memory_per_tile} bytes overflows 64 bits"
            ),
        }
    }
}

impl core::error::Error for SpecError {}

/// A validated description of one IPU.
///
/// ```
/// use tessera_sim::{IpuParams, IpuSpec, SpecError, SpecField};
///
/// let mk2 = IpuSpec::MK2_GC200;
/// assert_eq!(mk2.tiles(), 1472);
/// assert_eq!(mk2.total_memory(), 940_572_672);
///
/// // A small IPU for tests.
/// let tiny = IpuSpec::new(IpuParams { tiles: 4, ..IpuParams::default() })?;
/// assert_eq!(tiny.workers(), 24);
///
/// let bad = IpuSpec::new(IpuParams { clock_hz: 0, ..IpuParams::default() });
/// assert_eq!(bad, Err(SpecError::Zero(SpecField::ClockHz)));
/// # Ok::<(), SpecError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpuSpec {
    tiles: NonZeroU32,
    workers_per_tile: NonZeroU32,
    memory_per_tile: NonZeroU64,
    clock_hz: NonZeroU64,
    fp16_flops_per_tile_cycle: NonZeroU32,
}

impl IpuSpec {
    /// Graphcore's Mk2 GC200 IPU: 1,472 tiles, 6 workers each, 624 KiB per
    /// tile, 1.33 GHz, 250.6 TFLOPS FP16 peak.
    pub const MK2_GC200: Self = Self::preset(MK2_GC200);

    /// Graphcore's Bow IPU: the GC200 at 1.85 GHz, 348.6 TFLOPS FP16 peak.
    pub const BOW: Self = Self::preset(BOW);

    /// A preset, validated at compile time.
    const fn preset(params: IpuParams) -> Self {
        match Self::new(params) {
            Ok(spec) => spec,
            Err(_) => panic!("invalid IPU preset"),
        }
    }

    /// Validates `params`.
    ///
    /// # Errors
    /// [`SpecError::Zero`] naming the first field (in declaration order)
    /// that is 0; [`SpecError::MemoryOverflow`] if the total memory does not
    /// fit in a `u64`.
    pub const fn new(params: IpuParams) -> Result<Self, SpecError> {
        let IpuParams {
            tiles,
            workers_per_tile,
            memory_per_tile,
            clock_hz,
            fp16_flops_per_tile_cycle,
        } = params;
        let Some(tiles) = NonZeroU32::new(tiles) else {
            return Err(SpecError::Zero(SpecField::Tiles));
        };
        let Some(workers_per_tile) = NonZeroU32::new(workers_per_tile) else {
            return Err(SpecError::Zero(SpecField::WorkersPerTile));
        };
        let Some(memory_per_tile) = NonZeroU64::new(memory_per_tile) else {
            return Err(SpecError::Zero(SpecField::MemoryPerTile));
        };
        let Some(clock_hz) = NonZeroU64::new(clock_hz) else {
            return Err(SpecError::Zero(SpecField::ClockHz));
        };
        let Some(fp16_flops_per_tile_cycle) = NonZeroU32::new(fp16_flops_per_tile_cycle) else {
            return Err(SpecError::Zero(SpecField::Fp16FlopsPerTileCycle));
        };
        if memory_per_tile
            .get()
            .checked_mul(tiles.get() as u64)
            .is_none()
        {
            return Err(SpecError::MemoryOverflow {
                tiles: tiles.get(),
                memory_per_tile: memory_per_tile.get(),
            });
        }
        Ok(Self {
            tiles,
            workers_per_tile,
            memory_per_tile,
            clock_hz,
            fp16_flops_per_tile_cycle,
        })
    }

    /// The parameters this spec was built from.
    #[must_use]
    pub const fn params(&self) -> IpuParams {
        IpuParams {
            tiles: self.tiles.get(),
            workers_per_tile: self.workers_per_tile.get(),
            memory_per_tile: self.memory_per_tile.get(),
            clock_hz: self.clock_hz.get(),
            fp16_flops_per_tile_cycle: self.fp16_flops_per_tile_cycle.get(),
        }
    }

    /// Tiles per IPU.
    #[must_use]
    pub const fn tiles(&self) -> u32 {
        self.tiles.get()
    }

    /// Hardware worker threads per tile.
    #[must_use]
    pub const fn workers_per_tile(&self) -> u32 {
        self.workers_per_tile.get()
    }

    /// Worker threads in the whole IPU.
    #[must_use]
    pub const fn workers(&self) -> u64 {
        self.tiles.get() as u64 * self.workers_per_tile.get() as u64
    }

    /// Bytes of memory per tile.
    #[must_use]
    pub const fn memory_per_tile(&self) -> u64 {
        self.memory_per_tile.get()
    }

    /// Bytes of memory in the whole IPU (checked not to overflow in
    /// [`IpuSpec::new`]).
    #[must_use]
    pub const fn total_memory(&self) -> u64 {
        self.memory_per_tile.get() * self.tiles.get() as u64
    }

    /// Clock frequency in hertz.
    #[must_use]
    pub const fn clock_hz(&self) -> u64 {
        self.clock_hz.get()
    }

    /// Peak FP16 floating-point operations per second of the whole IPU.
    #[must_use]
    pub fn peak_fp16_flops(&self) -> f64 {
        f64::from(self.tiles.get())
            * f64::from(self.fp16_flops_per_tile_cycle.get())
            * self.clock_hz.get() as f64
    }

    /// The wall-clock seconds `cycles` clock cycles take.
    #[must_use]
    pub fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 / self.clock_hz.get() as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mk2_matches_the_published_figures() {
        let s = IpuSpec::MK2_GC200;
        assert_eq!(s.tiles(), 1472);
        assert_eq!(s.workers_per_tile(), 6);
        assert_eq!(s.workers(), 8832);
        assert_eq!(s.memory_per_tile(), 624 * 1024);
        // "About 900 MB per IPU".
        assert_eq!(s.total_memory(), 940_572_672);
        assert!((s.total_memory() as f64 / 1e6 - 900.0).abs() < 50.0);
        // 250 TFLOPS per IPU, 1 PFLOPS per IPU-M2000 (4 IPUs), within 1%.
        let peak = s.peak_fp16_flops();
        assert!((peak / 250e12 - 1.0).abs() < 0.01, "{peak}");
        assert!((4.0 * peak / 1e15 - 1.0).abs() < 0.01, "{peak}");
        assert_eq!(IpuSpec::new(IpuParams::default()), Ok(s));
    }

    #[test]
    fn bow_is_a_faster_clocked_gc200() {
        let (mk2, bow) = (IpuSpec::MK2_GC200, IpuSpec::BOW);
        assert_eq!(bow.clock_hz(), 1_850_000_000);
        assert_eq!(bow.tiles(), mk2.tiles());
        assert_eq!(bow.total_memory(), mk2.total_memory());
        assert!((bow.peak_fp16_flops() / 350e12 - 1.0).abs() < 0.01);
        // One second of clock cycles.
        assert_eq!(bow.seconds(1_850_000_000), 1.0);
    }

    #[test]
    fn params_round_trip() {
        for s in [IpuSpec::MK2_GC200, IpuSpec::BOW] {
            assert_eq!(IpuSpec::new(s.params()), Ok(s));
        }
    }

    #[test]
    fn every_zero_field_is_named() {
        let ok = IpuParams::default();
        let cases = [
            (IpuParams { tiles: 0, ..ok }, SpecField::Tiles),
            (
                IpuParams {
                    workers_per_tile: 0,
                    ..ok
                },
                SpecField::WorkersPerTile,
            ),
            (
                IpuParams {
                    memory_per_tile: 0,
                    ..ok
                },
                SpecField::MemoryPerTile,
            ),
            (IpuParams { clock_hz: 0, ..ok }, SpecField::ClockHz),
            (
                IpuParams {
                    fp16_flops_per_tile_cycle: 0,
                    ..ok
                },
                SpecField::Fp16FlopsPerTileCycle,
            ),
        ];
        for (params, field) in cases {
            let err = IpuSpec::new(params).unwrap_err();
            assert_eq!(err, SpecError::Zero(field));
            assert!(err.to_string().contains(field.name()), "{err}");
        }
    }

    #[test]
    fn total_memory_overflow_is_rejected() {
        let params = IpuParams {
            tiles: 2,
            memory_per_tile: u64::MAX / 2 + 1,
            ..IpuParams::default()
        };
        assert_eq!(
            IpuSpec::new(params),
            Err(SpecError::MemoryOverflow {
                tiles: 2,
                memory_per_tile: u64::MAX / 2 + 1
            })
        );
        // The largest that fits is accepted.
        let params = IpuParams {
            memory_per_tile: u64::MAX / 2,
            ..params
        };
        assert_eq!(IpuSpec::new(params).unwrap().total_memory(), u64::MAX - 1);
    }
}
