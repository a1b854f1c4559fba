//! The IPU model: the machine ([`IpuSpec`], [`Target`]), tensors with
//! tile mappings, compute sets of vertices, exchanges and host streams
//! ([`Graph`]), programs ([`Program`]), and the bulk-synchronous
//! [`Engine`] that runs them on host threads with cycle estimates and
//! profiles ([`Profile`]).
//!
//! An IPU is a mosaic of tiles, each a processor with its own memory and a
//! few hardware worker threads; tiles compute on their own memory only, then
//! synchronise and exchange data (bulk-synchronous parallel). The
//! simulator computes every number for real (tiles run in parallel on host
//! threads with `rayon`) and *estimates* the cycles from the figures below.
//! Like Poplar's IPUModel it is configurable and estimates cycles; unlike
//! it, a program whose tiles do not fit in memory is refused when its
//! engine is built ([`BuildError::OutOfTileMemory`]), and every tile and
//! worker has its own random stream ([`Seeds`]).
//!
//! ```
//! use core::num::NonZeroU64;
//! use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
//! use tessera_sim::{IpuParams, IpuSpec};
//!
//! let spec = IpuSpec::new(IpuParams { tiles: 8, ..IpuParams::default() }).unwrap();
//! let mut g = Graph::new(Target::new(spec, 2).unwrap()); // two IPUs, 16 tiles
//! let x = g.add_tensor("x", DType::F32, &[1000], Mapping::linear(NonZeroU64::new(64).unwrap())).unwrap();
//! let y = g.add_tensor("y", DType::F32, &[1000], Mapping::one_tile(15, 1000)).unwrap();
//! let gather = g.add_exchange("gather", &[(g.all(x), g.all(y))]).unwrap();
//! let mut e = Engine::new(g, Program::Exchange(gather), EngineOptions::default()).unwrap();
//! e.write_tensor(x, &vec![2.5f32; 1000]).unwrap();
//! let profile = e.run();
//! assert_eq!(e.read_tensor::<f32>(y).unwrap(), vec![2.5; 1000]);
//! assert!(profile.cycles.exchange > 0);
//! println!("{profile}");
//! ```
//!
//! # The figures and their sources
//!
//! Every number the model uses, in one place. "Graphcore" means
//! Graphcore's product pages and documents; "PopLibs test model" means the
//! IPU model PopLibs' tests and tools configure (`poplibs_test`, and the
//! same code in its conv tool: link speed, link efficiency, ladder
//! topology, sync latency per hop); "assumption" means a round figure of
//! our own, with the reasoning given, to be replaced when a measurement is
//! at hand. All are [`IpuParams`] fields, settable and validated.
//!
//! | field | Mk2 GC200 (Bow) | source and reasoning |
//! |---|---|---|
//! | `tiles` | 1,472 | Graphcore |
//! | `workers_per_tile` | 6 | Graphcore: six hardware contexts, served round-robin |
//! | `memory_per_tile` | 638,976 B (624 KiB) | PopART tests; 940.6 MB per IPU, Graphcore's "900 MB" |
//! | `clock_hz` | 1.33 GHz (1.85 GHz) | third-party measurements (SEMANTICS.md section 5) |
//! | `fp16_flops_per_tile_cycle` | 128 | derived: Graphcore's 250 TFLOPS / (1,472 tiles x 1.33 GHz) = 127.7; Bow then gives 348.6, Graphcore says 350 |
//! | `fp8_flops_per_tile_cycle` | 0 (0) | Mk2 and Bow have no FP8 units: an FP8 product is converted to f16 and runs as FP16 ([`IpuSpec::product`]) |
//! | `exchange_bytes_per_cycle` | 4 B sent and 4 B received per tile | derived: Graphcore's 8 TB/s all-to-all exchange / (1,472 x 1.33 GHz) = 4.09; Jia et al. 2019 ("Dissecting the Graphcore IPU") measured the Mk1's at 7.7 TB/s, also ~4 B per tile per cycle |
//! | `local_copy_bytes_per_cycle` | 8 | assumption: one 64-bit load and store per cycle |
//! | `sync_cycles` (one IPU) | 40 (56) | PopLibs test model with one hop: ceil(2 x 15 ns x clock) |
//! | sync of `n` IPUs | ceil(2 x hops x 15 ns x clock), hops = 1 + n / 4 | PopLibs test model (`setGlobalSyncLatency`); 200 cycles for 16 Mk2 IPUs |
//! | `hop_latency_ps` | 15,000 | PopLibs test model (sync latency per hop); also charged once per hop of a message's route between IPUs (assumption) |
//! | `link_bits_per_second` | 128 Gbit/s per link and direction | Graphcore's GC200: 10 IPU-Links, 320 GB/s in all (16 GB/s each way per link); PopLibs' test model uses 128 x 2^30, 7% more |
//! | `link_efficiency_percent` | 85 | PopLibs test model (0.85): 13.6 GB/s of data per link |
//! | links between IPUs | 4 to the card partner; 2 across the rung; 2 up and 2 down the ladder | PopLibs test model (ladder); [`Target::route`]. Graphcore quotes 64 GB/s bidirectional per IPU pair (10 links per IPU); the model's 4 card links carry 54.4 GB/s of data each way (4 x 16 GB/s x 0.85) |
//! | `host_bytes_per_second` | 16 GB/s per IPU | assumption: of the order of a PCIe Gen4 x8 link; no latency |
//! | `compute_set_cycles` | 50 | assumption: the supervisor's start of a compute set and its workers |
//! | `vertex_bytes`, `vertex_field_bytes` | 16, 8 | assumption: a vertex header, and a pointer and a size per field (Poplar's vertex state) |
//! | `codelet_code_bytes` | 512 per codelet per tile | assumption: a small vectorised loop with its setup |
//! | `exchange_code_bytes` | 16 per run sent or received | assumption: a few send/receive instructions with addresses |
//!
//! ## Per-kernel cycle costs
//!
//! A [`KernelCost`] is `call + ceil(n / width) * per_vector` worker-thread
//! cycles for `n` elements, the form of PopLibs' cycle estimators. A
//! worker issues one instruction every `workers_per_tile` cycles, so a
//! tile's compute phase is `compute_set_cycles + workers_per_tile *` its
//! busiest worker's thread cycles (see [`codelet`]); a vertex over all six
//! workers costs about `n * per_vector / width` tile cycles. All are
//! assumptions from instruction counts (64-bit loads and stores, two-lane
//! f32 and four-lane f16 arithmetic, dual issue of a load beside an
//! arithmetic instruction), none measured:
//!
//! | kernel | call | width | per vector | reasoning |
//! |---|---|---|---|---|
//! | `convert_sr` | 10 | 4 | 3 | two 64-bit loads of f32, one convert of four with hardware stochastic rounding, one 64-bit store |
//! | `lamb_partials` | 20 | 2 | 12 | four loads (w, g, m, v), the moments, a square root and a divide, three multiply-accumulates |
//! | `lamb_apply` | 20 | 2 | 16 | the same formula, the update, three stores |
//! | `reduce_partial` | 10 | 2 | 2 | a load and a multiply-accumulate |
//! | `merge_exact` | 10 | 1 | 40 | per exact sum merged: thirteen 64-bit limbs with carries, as 32-bit operations |
//! | `combine` | 10 | 2 | 2 | a load and an add per two f32 |
//! | `scalar` | 10 | 1 | 2 | a load, an operation, a store |
//! | `matmul_f16` | 40 | 128 | 1 | per flop (a multiply-add is two): the AMP unit's 128 f16 flops per tile cycle (`fp16_flops_per_tile_cycle`, from Graphcore's 250 TFLOPS) shared by the six workers of a multi-vertex; the call covers pointer setup and the accumulators' drain |
//! | `matmul_f32` | 40 | 32 | 1 | per flop: a quarter of the f16 rate (Graphcore quotes 62.5 TFLOPS f32 for the GC200) |
//! | `matmul_f8` | 40 | 256 | 1 | per flop, on FP8 units only (the C600's `fp8_flops_per_tile_cycle`); unused on Mk2 and Bow |
//! | `convert_f8` | 10 | 2 | 6 | per element, either way, in software (no FP8 instructions): unpack a byte, move and rebias exponent and mantissa, round, handle subnormals and saturation by compare and select, on two 16-bit lanes |
//! | `convert_mx` | 10 | 2 | 8 | per element: `convert_f8`'s work and the block's share of its absolute maximum and E8M0 scale (an exponent add per element); no IPU has MX instructions |
//! | `activation` | 10 | 2 | 6 | bias add, f16 rounding and ReLU in a few instructions; GELU's tanh is charged the same (assumption: a hardware `tanh` on two lanes) |
//! | `activation_grad` | 10 | 2 | 6 | the derivative from the stored pre-activation, a multiply, f16 rounding |
//! | `batch_norm` | 10 | 2 | 6 | per pass over the elements: two multiply-accumulates for the sums, or a normalisation and an affine map |
//! | `cross_entropy` | 20 | 1 | 12 | per logit: a max, an exp, a sum, a divide and the gradient's store |
//!
//! ## The C600 ([`IpuSpec::C600`], `--ipu c600`)
//!
//! Graphcore's C600 is a PCIe card with one "Mk2 IPU with FP8 support"
//! and 900 MB of In-Processor-Memory (Graphcore's C600 datasheet,
//! docs.graphcore.ai/projects/C600-datasheet, overview), rated at 280
//! TFLOPS FP16 (Graphcore's announcement as reported by The Register,
//! 30 November 2022, "Graphcore makes China push with Mk2 AI chip").
//! What the sources do not give is assumed:
//!
//! | field | C600 | source and reasoning |
//! |---|---|---|
//! | `tiles`, `workers_per_tile`, `memory_per_tile` | 1,472, 6, 624 KiB | assumption: the GC200's ("Mk2 IPU"; 900 MB, the GC200's figure) |
//! | `fp16_flops_per_tile_cycle` | 128 | assumption: the GC200's AMP |
//! | `clock_hz` | 1.486 GHz | derived: 280 TFLOPS / (1,472 x 128) = 1.4861 GHz; no clock is published |
//! | `fp8_flops_per_tile_cycle` | 256 | assumption: twice the FP16 rate, 560 TFLOPS (the figure reported with the launch; no stored Graphcore page gives it), as FP8 units commonly double the 16-bit rate |
//! | `sync_cycles` | 45 | PopLibs test model with one hop at this clock |
//! | `convert_f8` | 10, 4, 2 | assumption: a hardware conversion of four elements per instruction, with a 64-bit load and a 32-bit store |
//! | the rest | the GC200's | assumption: same die, links and exchange; a Pod of C600s is hypothetical (C600s are PCIe cards linked card to card) |
//!
//! ## Exchange
//!
//! An exchange phase costs its busiest tile's `ceil(max(sent, received) /
//! exchange_bytes_per_cycle)` plus its copies within the tile at
//! `local_copy_bytes_per_cycle` (sending and receiving overlap; a source
//! run sent to several tiles is sent once, as the exchange multicasts).
//! Between IPUs, each link group's bytes (a run counted once per
//! destination IPU) take `ceil(8 bytes / (links * link_bits_per_second *
//! efficiency))` cycles, plus `hop_latency_ps` per hop of the longest
//! route; the phase is the larger of the tiles' and the links' time.
//! Every sync of a multi-IPU target is a global sync.

pub mod codelet;
mod costs;
mod encoding;
mod engine;
mod exchange;
mod graph;
mod held;
mod host;
mod lowering;
pub mod mapping;
mod memory;
mod profile;
mod program;
mod rng;
mod spec;
mod target;
mod tensor;

pub use codelet::{Access, Codelet, FieldMut, FieldSpec, VertexCycles, VertexIo};
pub use costs::{Kernel, KernelCost, KernelCosts};
pub use encoding::Encoding;
pub use engine::{AccessError, BuildError, Engine, EngineOptions, run_seconds_on_this_thread};
pub use graph::{ComputeSetId, Direction, ExchangeId, Graph, GraphError, StreamId};
pub use host::HostBytes;
pub use lowering::{ProductPath, ProductPrice};
pub use mapping::{Interval, Mapping};
pub use memory::{Bucket, MemorySummary, MemoryUsage, OutOfMemory, TileMemory};
pub use profile::{
    BusyTile, ComputeSetProfile, ExchangeProfile, Phase, PhaseCycles, Profile, StreamProfile,
    TargetInfo,
};
pub use program::Program;
pub use rng::{Seeds, StreamKind};
pub use spec::{IpuParams, IpuSpec, SpecError, SpecField};
pub use target::{LinkGroup, Target, TargetError, Tile};
pub use tensor::{DType, Piece, Scalar, TensorId, TensorSlice};
