//! What an IPU is made of: tiles, workers, memory, clock, compute rate, and
//! the figures the simulator's cost model uses (exchange, sync, IPU-Links,
//! host transfers, memory overheads, per-kernel cycle costs).
//!
//! Every figure, its value in the Mk2 GC200 preset and where it comes from
//! is in the table of the [`ipu`](super) module; this file holds the values.

use core::fmt;

use super::costs::{Kernel, KernelCosts, cost};

/// The numbers that describe an IPU, before validation.
///
/// `Default` is the Mk2 GC200 ([`IpuSpec::MK2_GC200`]); change fields and
/// pass the result to [`IpuSpec::new`] to model another machine (for example
/// a small IPU for tests, as Poplar's IPUModel allows with `tilesPerIPU`).
/// The [`ipu`](super) module documents every field's value and source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IpuParams {
    /// Tiles per IPU.
    pub tiles: u32,
    /// Hardware worker threads (contexts) per tile.
    pub workers_per_tile: u32,
    /// Bytes of memory per tile.
    pub memory_per_tile: u64,
    /// Clock frequency in hertz.
    pub clock_hz: u64,
    /// Peak FP16 (f16 multiply, f32 accumulate) floating-point operations
    /// per cycle per tile, counting a multiply-add as two.
    pub fp16_flops_per_tile_cycle: u32,
    /// Peak FP8 (8-bit float inputs) floating-point operations per cycle
    /// per tile, counting a multiply-add as two; 0 for an IPU without FP8
    /// units (Mk2 GC200, Bow), whose FP8 products are converted to FP16
    /// ([`IpuSpec::product`]).
    pub fp8_flops_per_tile_cycle: u32,
    /// Bytes a tile can send, and separately receive, per cycle over the
    /// on-chip exchange.
    pub exchange_bytes_per_cycle: u32,
    /// Bytes per cycle of a copy within one tile's memory.
    pub local_copy_bytes_per_cycle: u32,
    /// Cycles of a sync of the tiles of one IPU.
    pub sync_cycles: u32,
    /// Cycles the supervisor of each tile spends starting a compute set.
    pub compute_set_cycles: u32,
    /// Raw bits per second of one IPU-Link, one direction.
    pub link_bits_per_second: u64,
    /// Percent of [`IpuParams::link_bits_per_second`] that carries data
    /// (1 to 100).
    pub link_efficiency_percent: u32,
    /// Picoseconds of sync and link latency per hop between IPUs.
    pub hop_latency_ps: u64,
    /// Bytes per second between the host and one IPU.
    pub host_bytes_per_second: u64,
    /// Bytes of vertex state per vertex, before its fields.
    pub vertex_bytes: u32,
    /// Bytes of vertex state per field (a pointer and a length).
    pub vertex_field_bytes: u32,
    /// Bytes of code per codelet used on a tile (counted once per tile).
    pub codelet_code_bytes: u32,
    /// Bytes of exchange code per contiguous run a tile sends or receives.
    pub exchange_code_bytes: u32,
    /// Cycle costs of the kernels the simulator runs on tiles.
    pub costs: KernelCosts,
}

impl Default for IpuParams {
    fn default() -> Self {
        MK2_GC200
    }
}

/// Mk2 GC200: the figures of the [`ipu`](super) module's table.
const MK2_GC200: IpuParams = IpuParams {
    tiles: 1472,
    workers_per_tile: 6,
    memory_per_tile: 638_976,
    clock_hz: 1_330_000_000,
    fp16_flops_per_tile_cycle: 128,
    fp8_flops_per_tile_cycle: 0,
    exchange_bytes_per_cycle: 4,
    local_copy_bytes_per_cycle: 8,
    sync_cycles: 40,
    compute_set_cycles: 50,
    // 128 Gbit/s per link and direction: the GC200's 10 IPU-Links carry
    // 320 GB/s (Graphcore's Mk2 figures), 16 GB/s each way per link. The
    // same rate as collectives' `Topology::IPU_LINK`.
    link_bits_per_second: 128_000_000_000,
    link_efficiency_percent: 85,
    hop_latency_ps: 15_000,
    host_bytes_per_second: 16_000_000_000,
    vertex_bytes: 16,
    vertex_field_bytes: 8,
    codelet_code_bytes: 512,
    exchange_code_bytes: 16,
    costs: KernelCosts {
        convert_sr: cost(10, 4, 3),
        lamb_partials: cost(20, 2, 12),
        lamb_apply: cost(20, 2, 16),
        reduce_partial: cost(10, 2, 2),
        merge_exact: cost(10, 1, 40),
        combine: cost(10, 2, 2),
        scalar: cost(10, 1, 2),
        matmul_f16: cost(40, 128, 1),
        matmul_f32: cost(40, 32, 1),
        // No FP8 units: the C600's figure, used only by a custom spec that
        // sets `fp8_flops_per_tile_cycle`.
        matmul_f8: cost(40, 256, 1),
        // In software (no FP8 conversion instructions).
        convert_f8: cost(10, 2, 6),
        convert_mx: cost(10, 2, 8),
        activation: cost(10, 2, 6),
        activation_grad: cost(10, 2, 6),
        batch_norm: cost(10, 2, 6),
        cross_entropy: cost(20, 1, 12),
    },
};

/// Bow: the GC200 die with wafer-on-wafer power delivery, so the same
/// tiles, workers, memory and per-cycle figures at 1.85 GHz; the sync, at
/// the same 15 ns per hop, takes 56 cycles.
const BOW: IpuParams = IpuParams {
    clock_hz: 1_850_000_000,
    sync_cycles: 56,
    ..MK2_GC200
};

/// C600: one Mk2 IPU with FP8 units on a PCIe card. Graphcore's figures
/// (900 MB, 280 TFLOPS FP16; the datasheet's "Mk2 IPU with FP8 support")
/// give the GC200's tiles and memory, and at its 128 FP16 flops per tile
/// cycle a 1.486 GHz clock; the FP8 rate is twice the FP16 rate (560
/// TFLOPS), and FP8 conversion is in hardware (see the [`ipu`](super)
/// module's table for which figures are assumed).
const C600: IpuParams = IpuParams {
    clock_hz: 1_486_000_000,
    fp8_flops_per_tile_cycle: 256,
    // ceil(2 x 15 ns x 1.486 GHz), as the other presets.
    sync_cycles: 45,
    costs: KernelCosts {
        convert_f8: cost(10, 4, 2),
        ..MK2_GC200.costs
    },
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
    /// [`IpuParams::exchange_bytes_per_cycle`].
    ExchangeBytesPerCycle,
    /// [`IpuParams::local_copy_bytes_per_cycle`].
    LocalCopyBytesPerCycle,
    /// [`IpuParams::link_bits_per_second`].
    LinkBitsPerSecond,
    /// [`IpuParams::link_efficiency_percent`].
    LinkEfficiencyPercent,
    /// [`IpuParams::host_bytes_per_second`].
    HostBytesPerSecond,
    /// [`KernelCost::vector_width`](super::KernelCost::vector_width) of a kernel.
    VectorWidth(Kernel),
}

impl SpecField {
    /// The field's name in [`IpuParams`] (a path for kernel costs).
    ///
    /// ```
    /// use tessera_sim::ipu::Kernel;
    /// use tessera_sim::SpecField;
    ///
    /// assert_eq!(SpecField::ClockHz.name(), "clock_hz");
    /// assert_eq!(SpecField::VectorWidth(Kernel::Scalar).name(), "costs.scalar.vector_width");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Tiles => "tiles",
            Self::WorkersPerTile => "workers_per_tile",
            Self::MemoryPerTile => "memory_per_tile",
            Self::ClockHz => "clock_hz",
            Self::Fp16FlopsPerTileCycle => "fp16_flops_per_tile_cycle",
            Self::ExchangeBytesPerCycle => "exchange_bytes_per_cycle",
            Self::LocalCopyBytesPerCycle => "local_copy_bytes_per_cycle",
            Self::LinkBitsPerSecond => "link_bits_per_second",
            Self::LinkEfficiencyPercent => "link_efficiency_percent",
            Self::HostBytesPerSecond => "host_bytes_per_second",
            Self::VectorWidth(kernel) => match kernel {
                Kernel::ConvertSr => "costs.convert_sr.vector_width",
                Kernel::LambPartials => "costs.lamb_partials.vector_width",
                Kernel::LambApply => "costs.lamb_apply.vector_width",
                Kernel::ReducePartial => "costs.reduce_partial.vector_width",
                Kernel::MergeExact => "costs.merge_exact.vector_width",
                Kernel::Combine => "costs.combine.vector_width",
                Kernel::Scalar => "costs.scalar.vector_width",
                Kernel::MatmulF16 => "costs.matmul_f16.vector_width",
                Kernel::MatmulF32 => "costs.matmul_f32.vector_width",
                Kernel::MatmulF8 => "costs.matmul_f8.vector_width",
                Kernel::ConvertF8 => "costs.convert_f8.vector_width",
                Kernel::ConvertMx => "costs.convert_mx.vector_width",
                Kernel::Activation => "costs.activation.vector_width",
                Kernel::ActivationGrad => "costs.activation_grad.vector_width",
                Kernel::BatchNorm => "costs.batch_norm.vector_width",
                Kernel::CrossEntropy => "costs.cross_entropy.vector_width",
            },
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
    /// [`IpuParams::link_efficiency_percent`] is above 100.
    EfficiencyAbove100(u32),
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
            Self::EfficiencyAbove100(p) => {
                write!(
                    f,
                    "IPU link_efficiency_percent must be at most 100, got {p}"
                )
            }
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
    params: IpuParams,
}

/// `Err(SpecError::Zero(field))` if `value` is 0.
macro_rules! nonzero {
    ($value:expr, $field:expr) => {
        if $value == 0 {
            return Err(SpecError::Zero($field));
        }
    };
}

impl IpuSpec {
    /// Graphcore's Mk2 GC200 IPU: 1,472 tiles, 6 workers each, 624 KiB per
    /// tile, 1.33 GHz, 250.6 TFLOPS FP16 peak.
    pub const MK2_GC200: Self = Self::preset(MK2_GC200);

    /// Graphcore's Bow IPU: the GC200 at 1.85 GHz, 348.6 TFLOPS FP16 peak.
    pub const BOW: Self = Self::preset(BOW);

    /// Graphcore's C600 card: a Mk2 IPU with FP8 units at 1.486 GHz,
    /// 280 TFLOPS FP16 and 560 TFLOPS FP8 peak.
    pub const C600: Self = Self::preset(C600);

    /// The presets with their names: Mk2 GC200, Bow, C600.
    pub const PRESETS: [(&'static str, Self); 3] = [
        ("Mk2 GC200", Self::MK2_GC200),
        ("Bow", Self::BOW),
        ("C600", Self::C600),
    ];

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
    /// that must be at least 1 and is 0 (the cycle and byte overheads may
    /// be 0); [`SpecError::MemoryOverflow`] if the total memory does not fit
    /// in a `u64`; [`SpecError::EfficiencyAbove100`].
    ///
    /// ```
    /// use tessera_sim::{IpuParams, IpuSpec, SpecError, SpecField};
    ///
    /// assert_eq!(IpuSpec::new(IpuParams::default()), Ok(IpuSpec::MK2_GC200));
    /// let none = IpuParams { tiles: 0, ..IpuParams::default() };
    /// assert_eq!(IpuSpec::new(none), Err(SpecError::Zero(SpecField::Tiles)));
    /// let over = IpuParams { link_efficiency_percent: 101, ..IpuParams::default() };
    /// assert_eq!(IpuSpec::new(over), Err(SpecError::EfficiencyAbove100(101)));
    /// ```
    pub const fn new(params: IpuParams) -> Result<Self, SpecError> {
        nonzero!(params.tiles, SpecField::Tiles);
        nonzero!(params.workers_per_tile, SpecField::WorkersPerTile);
        nonzero!(params.memory_per_tile, SpecField::MemoryPerTile);
        nonzero!(params.clock_hz, SpecField::ClockHz);
        nonzero!(
            params.fp16_flops_per_tile_cycle,
            SpecField::Fp16FlopsPerTileCycle
        );
        nonzero!(
            params.exchange_bytes_per_cycle,
            SpecField::ExchangeBytesPerCycle
        );
        nonzero!(
            params.local_copy_bytes_per_cycle,
            SpecField::LocalCopyBytesPerCycle
        );
        nonzero!(params.link_bits_per_second, SpecField::LinkBitsPerSecond);
        nonzero!(
            params.link_efficiency_percent,
            SpecField::LinkEfficiencyPercent
        );
        nonzero!(params.host_bytes_per_second, SpecField::HostBytesPerSecond);
        let mut k = 0;
        while k < Kernel::ALL.len() {
            let kernel = Kernel::ALL[k];
            nonzero!(
                params.costs.get(kernel).vector_width,
                SpecField::VectorWidth(kernel)
            );
            k += 1;
        }
        if params
            .memory_per_tile
            .checked_mul(params.tiles as u64)
            .is_none()
        {
            return Err(SpecError::MemoryOverflow {
                tiles: params.tiles,
                memory_per_tile: params.memory_per_tile,
            });
        }
        if params.link_efficiency_percent > 100 {
            return Err(SpecError::EfficiencyAbove100(
                params.link_efficiency_percent,
            ));
        }
        Ok(Self { params })
    }

    /// The parameters this spec was built from.
    ///
    /// ```
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let p = IpuParams { tiles: 8, ..IpuParams::default() };
    /// assert_eq!(IpuSpec::new(p).unwrap().params(), p);
    /// ```
    #[must_use]
    pub const fn params(&self) -> IpuParams {
        self.params
    }

    /// Tiles per IPU.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::BOW.tiles(), 1472);
    /// ```
    #[must_use]
    pub const fn tiles(&self) -> u32 {
        self.params.tiles
    }

    /// Hardware worker threads per tile.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::MK2_GC200.workers_per_tile(), 6);
    /// ```
    #[must_use]
    pub const fn workers_per_tile(&self) -> u32 {
        self.params.workers_per_tile
    }

    /// Worker threads in the whole IPU.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::MK2_GC200.workers(), 1472 * 6);
    /// ```
    #[must_use]
    pub const fn workers(&self) -> u64 {
        self.params.tiles as u64 * self.params.workers_per_tile as u64
    }

    /// Bytes of memory per tile.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::MK2_GC200.memory_per_tile(), 624 * 1024);
    /// ```
    #[must_use]
    pub const fn memory_per_tile(&self) -> u64 {
        self.params.memory_per_tile
    }

    /// Bytes of memory in the whole IPU (checked not to overflow in
    /// [`IpuSpec::new`]).
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// let ipu = IpuSpec::C600;
    /// assert_eq!(ipu.total_memory(), ipu.memory_per_tile() * u64::from(ipu.tiles()));
    /// ```
    #[must_use]
    pub const fn total_memory(&self) -> u64 {
        self.params.memory_per_tile * self.params.tiles as u64
    }

    /// Clock frequency in hertz.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::C600.clock_hz(), 1_486_000_000);
    /// ```
    #[must_use]
    pub const fn clock_hz(&self) -> u64 {
        self.params.clock_hz
    }

    /// The per-kernel cycle costs.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Kernel;
    ///
    /// // The f16 product's vector width matches the 128 FP16 flops per tile cycle.
    /// assert_eq!(IpuSpec::MK2_GC200.costs().get(Kernel::MatmulF16).vector_width, 128);
    /// ```
    #[must_use]
    pub const fn costs(&self) -> &KernelCosts {
        &self.params.costs
    }

    /// Peak FP16 floating-point operations per second of the whole IPU.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// // 1472 tiles x 128 flops x 1.33 GHz: 250.6 TFLOPS.
    /// assert_eq!(IpuSpec::MK2_GC200.peak_fp16_flops(), 250_593_280_000_000.0);
    /// ```
    #[must_use]
    pub fn peak_fp16_flops(&self) -> f64 {
        f64::from(self.params.tiles)
            * f64::from(self.params.fp16_flops_per_tile_cycle)
            * self.params.clock_hz as f64
    }

    /// Whether the IPU has FP8 units
    /// ([`IpuParams::fp8_flops_per_tile_cycle`] is not 0).
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert!(IpuSpec::C600.has_fp8_units() && !IpuSpec::BOW.has_fp8_units());
    /// ```
    #[must_use]
    pub const fn has_fp8_units(&self) -> bool {
        self.params.fp8_flops_per_tile_cycle > 0
    }

    /// Peak FP8 floating-point operations per second of the whole IPU (0
    /// without FP8 units).
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::C600.peak_fp8_flops(), 2.0 * IpuSpec::C600.peak_fp16_flops());
    /// ```
    #[must_use]
    pub fn peak_fp8_flops(&self) -> f64 {
        f64::from(self.params.tiles)
            * f64::from(self.params.fp8_flops_per_tile_cycle)
            * self.params.clock_hz as f64
    }

    /// The wall-clock seconds `cycles` clock cycles take.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::MK2_GC200.seconds(1_330_000_000), 1.0);
    /// assert_eq!(IpuSpec::BOW.seconds(925_000_000), 0.5);
    /// ```
    #[must_use]
    pub fn seconds(&self, cycles: u64) -> f64 {
        cycles as f64 / self.params.clock_hz as f64
    }

    /// Cycles (rounded up) that `picoseconds` take at this clock.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// let mk2 = IpuSpec::MK2_GC200;
    /// assert_eq!(mk2.cycles_of_ps(1_000_000), 1330); // a microsecond
    /// assert_eq!(mk2.cycles_of_ps(1000), 2); // 1.33 cycles, rounded up
    /// ```
    #[must_use]
    pub const fn cycles_of_ps(&self, picoseconds: u64) -> u64 {
        let c = picoseconds as u128 * self.params.clock_hz as u128;
        let c = c.div_ceil(1_000_000_000_000);
        if c > u64::MAX as u128 {
            u64::MAX
        } else {
            c as u64
        }
    }

    /// Cycles of the on-chip exchange for a tile that sends `sent` and
    /// receives `received` bytes: `ceil(max(sent, received) /
    /// exchange_bytes_per_cycle)` (sending and receiving overlap).
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// // 4 bytes a cycle each way; sending and receiving overlap.
    /// assert_eq!(IpuSpec::MK2_GC200.exchange_cycles(10, 3), 3);
    /// assert_eq!(IpuSpec::MK2_GC200.exchange_cycles(0, 8), 2);
    /// ```
    #[must_use]
    pub const fn exchange_cycles(&self, sent: u64, received: u64) -> u64 {
        let bytes = if sent > received { sent } else { received };
        bytes.div_ceil(self.params.exchange_bytes_per_cycle as u64)
    }

    /// Cycles of a copy of `bytes` within one tile.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(IpuSpec::MK2_GC200.local_copy_cycles(17), 3); // 8 bytes a cycle
    /// ```
    #[must_use]
    pub const fn local_copy_cycles(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.params.local_copy_bytes_per_cycle as u64)
    }

    /// Cycles to move `bytes` over `links` IPU-Links in parallel:
    /// `ceil(8 bytes / (links * link_bits_per_second * efficiency) *
    /// clock)`.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// let mk2 = IpuSpec::MK2_GC200;
    /// // A second of one link's data (128 Gbit/s at 85%) is a second of cycles.
    /// assert_eq!(mk2.link_cycles(13_600_000_000, 1), 1_330_000_000);
    /// assert_eq!(mk2.link_cycles(13_600_000_000, 2), 665_000_000);
    /// assert_eq!(mk2.link_cycles(0, 4), 0);
    /// ```
    #[must_use]
    pub const fn link_cycles(&self, bytes: u64, links: u32) -> u64 {
        if bytes == 0 {
            return 0;
        }
        let links = if links == 0 { 1 } else { links as u128 };
        let num = bytes as u128 * 8 * 100 * self.params.clock_hz as u128;
        let den = links
            * self.params.link_bits_per_second as u128
            * self.params.link_efficiency_percent as u128;
        let c = num.div_ceil(den);
        if c > u64::MAX as u128 {
            u64::MAX
        } else {
            c as u64
        }
    }

    /// Cycles of a sync across `ipus` IPUs: [`IpuParams::sync_cycles`] for
    /// one IPU; for more, PopLibs' test model `ceil(2 * hops *
    /// hop_latency * clock)` with `hops = 1 + ipus / 4`, and never less
    /// than one IPU's sync.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// let mk2 = IpuSpec::MK2_GC200;
    /// assert_eq!(mk2.sync_cycles(1), 40);
    /// // 8 IPUs: 3 hops of 15 ns, there and back, at 1.33 GHz.
    /// assert_eq!(mk2.sync_cycles(8), 120);
    /// ```
    #[must_use]
    pub const fn sync_cycles(&self, ipus: u32) -> u64 {
        let internal = self.params.sync_cycles as u64;
        if ipus <= 1 {
            return internal;
        }
        let hops = 1 + ipus as u64 / 4;
        let global = self.cycles_of_ps(2 * hops * self.params.hop_latency_ps);
        if global > internal { global } else { internal }
    }

    /// Cycles to move `bytes` between the host and one IPU.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    ///
    /// // 16 GB/s: a second's bytes take a second of cycles.
    /// assert_eq!(IpuSpec::MK2_GC200.host_cycles(16_000_000_000), 1_330_000_000);
    /// ```
    #[must_use]
    pub const fn host_cycles(&self, bytes: u64) -> u64 {
        let num = bytes as u128 * self.params.clock_hz as u128;
        let c = num.div_ceil(self.params.host_bytes_per_second as u128);
        if c > u64::MAX as u128 {
            u64::MAX
        } else {
            c as u64
        }
    }
}

#[cfg(test)]
mod tests;
