//! Whether a run fits, decided before anything is allocated for it, and
//! the memory figures it is decided on: each stage's activation stashes
//! ([`StageMemory`], from the graph's activations and the schedule's
//! micro-batches kept) and the optimizer's share ([`OptimizerMemory`]).
//!
//! - The tiles: the replica's model measured without building it
//!   ([`MemoryEstimate`]: tensors, vertex state and code to the byte, the
//!   exchange code at most the engine's), then the run's own check
//!   ([`MemoryReport`]: the fullest tile with the optimizer's share and the
//!   pipeline's stashes) on those figures. A run refused here would be
//!   refused by the engines and the run's check, after minutes and
//!   gigabytes of building.
//! - The host: what the replicas of this process allocate, at least: their
//!   two engines ([`MemoryEstimate::host_bytes`]) and their buffers (the
//!   weights, the master copy, the master's full copy while starting, the
//!   optimizer state, a gradient buffer per micro-batch of a step and the
//!   reduced one), and each instance's initial weights, against the memory
//!   available ([`available_host_memory`]).

use serde::Serialize;
use tessera_core::kernels::BLOCK;

use super::TrainError;
use super::config::{OptimizerConfig, TrainConfig};
use super::pipeline::{Schedule, stashed};
use super::precision::PrecisionMode;
use crate::ipu::{IpuSpec, MemorySummary};
use crate::model::{
    MemoryEstimate, NetworkConfig, ParamSpec, Placement, Recomputation, StageActivations,
};
use crate::pod::{Layout, ProcessId};

/// The variable that caps the host memory a run may use, in bytes (it
/// replaces what the system says is available).
pub const HOST_MEMORY_VARIABLE: &str = "TESSERA_HOST_MEMORY";

/// Memory of one replica.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryReport {
    /// The model's tensors, vertices, code and exchange buffers per tile.
    pub model: MemorySummary,
    /// The optimizer's state and master weights.
    pub optimizer: OptimizerMemory,
    /// The activation stashes of each stage (one stage when not
    /// pipelined).
    pub activations: Vec<StageMemory>,
    /// A network's recomputation from checkpoints
    /// ([`TrainConfig::recompute_checkpoints`]): its memory, and the
    /// cycles of the last training micro-batch (0 before one has run).
    pub recomputation: Option<Recomputation>,
}

impl MemoryReport {
    /// Bytes of the fullest tile: model, optimizer share and activation
    /// stashes together.
    ///
    /// ```
    /// use tessera_sim::data::Source;
    /// use tessera_sim::train::{RunOptions, TrainConfig, Trainer};
    ///
    /// let data = Source::Synthetic { samples: 32, features: 4, classes: 2, seed: 1 }.load().unwrap();
    /// let config = TrainConfig {
    ///     hidden: vec![4],
    ///     instances: 1,
    ///     replicas: 1,
    ///     micro_batch: 4,
    ///     device_iterations: 1,
    ///     epochs: 1,
    ///     test_fraction: 0.25,
    ///     ..TrainConfig::default()
    /// };
    /// let summary = Trainer::new(config, data).unwrap().run(&RunOptions::default(), &|_| {}).unwrap();
    /// let m = &summary.memory;
    /// assert_eq!(m.max_tile_bytes(), m.model.max + m.optimizer.per_tile_bytes + m.stash_per_tile());
    /// assert!(m.max_tile_bytes() <= m.model.capacity);
    /// ```
    #[must_use]
    pub fn max_tile_bytes(&self) -> u64 {
        self.model.max + self.optimizer.per_tile_bytes + self.stash_per_tile()
    }

    /// The largest activation stash per tile of an IPU: its stages'
    /// (parts of successive stages on one IPU add up).
    ///
    /// ```
    /// use tessera_sim::data::Source;
    /// use tessera_sim::train::{RunOptions, TrainConfig, Trainer};
    ///
    /// let data = Source::Synthetic { samples: 32, features: 4, classes: 2, seed: 1 }.load().unwrap();
    /// let config = TrainConfig {
    ///     hidden: vec![4],
    ///     instances: 1,
    ///     replicas: 1,
    ///     micro_batch: 4,
    ///     device_iterations: 1,
    ///     epochs: 1,
    ///     test_fraction: 0.25,
    ///     ..TrainConfig::default()
    /// };
    /// let summary = Trainer::new(config, data).unwrap().run(&RunOptions::default(), &|_| {}).unwrap();
    /// // Not pipelined: one stage, one micro-batch in flight, nothing stashed.
    /// assert_eq!(summary.memory.stash_per_tile(), 0);
    /// ```
    #[must_use]
    pub fn stash_per_tile(&self) -> u64 {
        busiest_ipu_stash(&self.activations)
    }

    /// Whether it fits a tile.
    pub(crate) fn check(&self) -> Result<(), TrainError> {
        let needed = self.max_tile_bytes();
        if needed > self.model.capacity {
            return Err(TrainError::OutOfTileMemory {
                needed,
                available: self.model.capacity,
                stash: self.stash_per_tile(),
            });
        }
        Ok(())
    }
}

/// The activation memory of one stage on one IPU (a concurrent stage has
/// one per IPU).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StageMemory {
    /// The stage.
    pub stage: usize,
    /// Its IPU in the replica (0 when the layers are spread).
    pub ipu: u32,
    /// Micro-batches whose activations (or, with recomputation, inputs)
    /// it keeps.
    pub stashed: usize,
    /// Bytes of activations it keeps beyond the one set the graph holds
    /// (the stashes), spread over its IPU's tiles: per tile.
    pub stash_bytes_per_tile: u64,
    /// Bytes recomputation saves on the stage (negative: it costs, as with
    /// one micro-batch in flight, where the input copy is extra).
    pub recompute_saves_bytes: i64,
}

/// The most stash per tile on one IPU: the sum of its stage parts'.
fn busiest_ipu_stash(parts: &[StageMemory]) -> u64 {
    super::pipeline::busiest_ipu(parts.iter().map(|a| (a.ipu, a.stash_bytes_per_tile)))
}

/// Each stage part's activation memory from its activations measured in
/// the graph (built or sized): with `k` micro-batches kept
/// ([`stashed`](super::stashed)), the stash per tile is `(k - 1)` times the fullest
/// tile's activations, or with recomputation `k` times its input's.
#[must_use]
fn measured_stage_memory(
    parts: &[StageActivations],
    g: usize,
    schedule: Schedule,
    recompute: bool,
) -> Vec<StageMemory> {
    let p = parts.iter().map(|a| a.part.stage + 1).max().unwrap_or(1);
    parts
        .iter()
        .map(|a| {
            let k = stashed(schedule, a.part.stage, p, g) as u64;
            let (plain, with) = ((k - 1) * a.bytes, k * a.input_bytes);
            StageMemory {
                stage: a.part.stage,
                ipu: a.part.ipu,
                stashed: k as usize,
                stash_bytes_per_tile: if recompute {
                    k * a.input_max_tile_bytes
                } else {
                    (k - 1) * a.max_tile_bytes
                },
                recompute_saves_bytes: plain as i64 - with as i64,
            }
        })
        .collect()
}

/// Bytes per replica of what the optimizer keeps between steps.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct OptimizerMemory {
    /// Optimizer state and master weights a replica holds (its shard with
    /// replicated tensor sharding), on chip or in streaming memory.
    pub bytes: u64,
    /// The same without sharding.
    pub unsharded_bytes: u64,
    /// Of [`bytes`](Self::bytes), what lives on chip, per tile (0 when
    /// offloaded), the replica's tiles sharing it evenly.
    pub per_tile_bytes: u64,
    /// Whether it lives in streaming memory.
    pub offloaded: bool,
}

/// Optimizer state and master bytes per parameter element.
pub(super) fn state_bytes_per_element(
    optimizer: &OptimizerConfig,
    precision: PrecisionMode,
) -> u64 {
    let master = u64::from(precision.f32_master());
    4 * (optimizer.state_tensors() as u64 + master)
}

/// What the optimizer keeps, for `elements` parameters over `shards`.
pub(crate) fn optimizer_memory(
    config: &TrainConfig,
    spec: &IpuSpec,
    elements: u64,
    shards: u64,
) -> OptimizerMemory {
    let per = state_bytes_per_element(&config.optimizer, config.precision);
    let unsharded_bytes = per * elements;
    let bytes = per * elements.div_ceil(shards.max(1));
    let tiles = u64::from(spec.tiles()) * config.ipus_per_replica as u64;
    OptimizerMemory {
        bytes,
        unsharded_bytes,
        per_tile_bytes: if config.offload_optimizer_state {
            0
        } else {
            bytes.div_ceil(tiles)
        },
        offloaded: config.offload_optimizer_state,
    }
}

/// The memory of a replica whose model's tiles are `summary`: the figures
/// the run checks before it starts stepping. The stashes follow from its
/// stage parts' `activations` (its graph's, built or sized); with
/// recomputation checkpoints nothing is stashed beyond them.
pub(crate) fn memory_report(
    config: &TrainConfig,
    elements: u64,
    (summary, activations): (MemorySummary, &[StageActivations]),
    spec: &IpuSpec,
) -> MemoryReport {
    let optimizer = optimizer_memory(config, spec, elements, config.shards() as u64);
    let schedule = config
        .pipeline
        .as_ref()
        .map_or(Schedule::Sequential, |p| p.schedule);
    let mut activations = measured_stage_memory(
        activations,
        config.gradient_accumulation,
        schedule,
        config.recompute,
    );
    if !config.recompute_checkpoints.is_empty() {
        // The checkpoints are graph tensors: no stash beyond them.
        for a in &mut activations {
            (a.stash_bytes_per_tile, a.recompute_saves_bytes) = (0, 0);
        }
    }
    MemoryReport {
        recomputation: None,
        model: summary,
        optimizer,
        activations,
    }
}

/// Checks that the run fits the tiles and this process's host memory.
///
/// # Errors
/// [`TrainError::Model`] with [`ModelError::TooLarge`] or
/// [`ModelError::OutOfTileMemory`] (the tile, its bytes, the largest
/// tensors); [`TrainError::OutOfTileMemory`] (with the optimizer's share
/// and the stashes); [`TrainError::OutOfHostMemory`].
///
/// [`ModelError::TooLarge`]: crate::model::ModelError::TooLarge
/// [`ModelError::OutOfTileMemory`]: crate::model::ModelError::OutOfTileMemory
pub(crate) fn check(
    config: &TrainConfig,
    layout: &Layout,
    network: &NetworkConfig,
    placement: &Placement,
) -> Result<(), TrainError> {
    let target = layout.replica_target()?;
    let compute = config.precision.compute();
    let estimate = MemoryEstimate::of(network, target, placement, config.micro_batch, compute)?;
    let params = network.params()?;
    let elements = params
        .iter()
        .fold(0u64, |a, p| a.saturating_add(p.len() as u64));
    // Under mpirun this process runs one instance; else all of them.
    let (replicas, instances) = if matches!(ProcessId::from_env(), Ok(Some(_))) {
        (config.replicas_per_instance(), 1)
    } else {
        (config.replicas, config.instances)
    };
    let needed = host_bytes(config, &estimate, &params, replicas, instances);
    // The tiles first, then the host.
    memory_report(
        config,
        elements,
        (estimate.train.summary(10), &estimate.stage_activations),
        target.spec(),
    )
    .check()?;
    match available_host_memory().map_err(TrainError::Invalid)? {
        Some((bytes, source)) if needed > bytes => Err(TrainError::OutOfHostMemory {
            needed,
            available: bytes,
            source,
            replicas,
        }),
        _ => Ok(()),
    }
}

/// Bytes `replicas` replicas of `instances` instances allocate on the
/// host, at least (see the [module docs](self)). Saturating.
fn host_bytes(
    config: &TrainConfig,
    estimate: &MemoryEstimate,
    params: &[ParamSpec],
    replicas: usize,
    instances: usize,
) -> u64 {
    // The flat buffer: every parameter from a block boundary, the whole
    // in blocks of every shard (as `FlatParams` lays it out).
    let shards = config.shards().max(1) as u64;
    let block = BLOCK as u64;
    let n = params
        .iter()
        .fold(0u64, |a, p| {
            a.saturating_add((p.len() as u64).div_ceil(block).saturating_mul(block))
        })
        .div_ceil(block.saturating_mul(shards))
        .saturating_mul(block.saturating_mul(shards));
    let shard = n.div_ceil(shards);
    let weights = if config.precision == PrecisionMode::Fp32 {
        4
    } else {
        2
    };
    let master = if config.precision.f32_master() { 4 } else { 0 };
    let state = config.optimizer.state_tensors() as u64 * 4;
    let accumulation = config.gradient_accumulation as u64;
    // Per element of the flat buffer: weights, the master's full copy,
    // and the gradients of every micro-batch of a step and their sum;
    // per element of the shard: the master and the optimizer state.
    let per_replica = n
        .saturating_mul(weights + 4 + 4 * accumulation.saturating_add(1))
        .saturating_add(shard.saturating_mul(master + state))
        .saturating_add(estimate.host_bytes);
    (replicas as u64)
        .saturating_mul(per_replica)
        .saturating_add((instances as u64).saturating_mul(n.saturating_mul(4)))
}

/// Bytes of host memory this process may still allocate, and where the
/// figure comes from: [`HOST_MEMORY_VARIABLE`] if set (a cap, in bytes),
/// else the system's available memory (`MemAvailable` of
/// `/proc/meminfo`), lowered to what the address-space limit (`ulimit
/// -v`) leaves this process; `None` where neither is known.
///
/// # Errors
/// A message if [`HOST_MEMORY_VARIABLE`] is set but not a whole number.
///
/// ```
/// use tessera_sim::train::{HOST_MEMORY_VARIABLE, available_host_memory};
///
/// if std::env::var_os(HOST_MEMORY_VARIABLE).is_none()
///     && let Ok(Some((bytes, source))) = available_host_memory()
/// {
///     assert!(bytes > 0 && source.contains("MemAvailable"));
/// }
/// ```
pub fn available_host_memory() -> Result<Option<(u64, &'static str)>, String> {
    if let Some(cap) = std::env::var_os(HOST_MEMORY_VARIABLE) {
        return match cap.to_str().and_then(|c| c.trim().parse().ok()) {
            Some(c) => Ok(Some((c, HOST_MEMORY_VARIABLE))),
            None => Err(format!(
                "{HOST_MEMORY_VARIABLE}={cap:?} is not a whole number of bytes"
            )),
        };
    }
    let proc = |path| std::fs::read_to_string(path).ok();
    let system = proc("/proc/meminfo")
        .and_then(|t| kib(&t, "MemAvailable:"))
        .map(|b| (b, "MemAvailable in /proc/meminfo"));
    let address_space = proc("/proc/self/limits")
        .and_then(|t| address_space_limit(&t))
        .map(|limit| {
            let used = proc("/proc/self/status")
                .and_then(|t| kib(&t, "VmSize:"))
                .unwrap_or(0);
            (
                limit.saturating_sub(used),
                "the address-space limit (ulimit -v) less what the process maps",
            )
        });
    Ok(match (system, address_space) {
        (Some(s), Some(a)) => Some(if a.0 < s.0 { a } else { s }),
        (s, a) => s.or(a),
    })
}

/// The value of a `KEY:   123 kB` line of `text`, in bytes.
fn kib(text: &str, key: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with(key))?;
    let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
    kb.checked_mul(1024)
}

/// The soft `Max address space` of a `/proc/self/limits` text, in bytes
/// (`None` when unlimited).
fn address_space_limit(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipus_stash_is_the_sum_of_its_parts() {
        let part = |stage, ipu, bytes| StageMemory {
            stage,
            ipu,
            stash_bytes_per_tile: bytes,
            ..StageMemory::default()
        };
        // IPU 2 holds a branch of stage 1 and stage 2: 30 + 25 > 50.
        let parts = [
            part(0, 0, 50),
            part(1, 1, 40),
            part(1, 2, 30),
            part(2, 2, 25),
        ];
        assert_eq!(busiest_ipu_stash(&parts), 55);
        assert_eq!(busiest_ipu_stash(&parts[..3]), 50);
        assert_eq!(busiest_ipu_stash(&[]), 0);
    }

    #[test]
    fn proc_files_parse() {
        let meminfo = "MemTotal:       24000000 kB\nMemAvailable:   12345678 kB\n";
        assert_eq!(kib(meminfo, "MemAvailable:"), Some(12_345_678 * 1024));
        assert_eq!(kib(meminfo, "VmSize:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         4294967296           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(4_294_967_296));
        let unlimited = limits.replace("4294967296", "unlimited");
        assert_eq!(address_space_limit(&unlimited), None);
    }
}
