//! Profiles of a run: cycles by phase and by compute set, memory per tile,
//! the busiest tiles; as a table, as JSON, and as a Chrome trace.

use core::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde_json::{Value, json};

use super::memory::{MemorySummary, MemoryUsage};
use super::target::{Target, Tile};

/// The phases of a bulk-synchronous superstep (and host transfers).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Tiles compute on their own memory.
    Compute,
    /// Every tile waits for the others.
    Sync,
    /// Tiles exchange data.
    Exchange,
    /// Data moves between the host and the IPUs.
    Host,
}

impl Phase {
    const ALL: [Self; 4] = [Self::Compute, Self::Sync, Self::Exchange, Self::Host];

    const fn name(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Sync => "sync",
            Self::Exchange => "exchange",
            Self::Host => "host",
        }
    }
}

/// What a recorded step ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StepKind {
    ComputeSet(usize),
    Exchange(usize),
    Stream(usize),
    Sync,
}

/// One step of a run, as recorded for the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Step {
    pub(crate) phase: Phase,
    pub(crate) kind: StepKind,
    pub(crate) start: u64,
    pub(crate) cycles: u64,
    pub(crate) tile: Option<Tile>,
}

/// Cycles by phase.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct PhaseCycles {
    /// Compute phases (each the slowest tile's).
    pub compute: u64,
    /// Syncs.
    pub sync: u64,
    /// Exchange phases.
    pub exchange: u64,
    /// Host transfers.
    pub host: u64,
}

impl PhaseCycles {
    /// All phases.
    ///
    /// ```
    /// use tessera_sim::ipu::PhaseCycles;
    ///
    /// let c = PhaseCycles { compute: 100, sync: 40, exchange: 8, host: 0 };
    /// assert_eq!(c.total(), 148);
    /// ```
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.compute + self.sync + self.exchange + self.host
    }

    const fn get(&self, phase: Phase) -> u64 {
        match phase {
            Phase::Compute => self.compute,
            Phase::Sync => self.sync,
            Phase::Exchange => self.exchange,
            Phase::Host => self.host,
        }
    }
}

/// The machine a profile is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct TargetInfo {
    /// IPUs.
    pub ipus: u32,
    /// Tiles per IPU.
    pub tiles_per_ipu: u32,
    /// Tiles in all.
    pub tiles: u32,
    /// Worker contexts per tile.
    pub workers_per_tile: u32,
    /// Bytes per tile.
    pub memory_per_tile: u64,
    /// Clock in hertz.
    pub clock_hz: u64,
}

/// One compute set in a profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ComputeSetProfile {
    /// Its name.
    pub name: String,
    /// Times it ran.
    pub executions: u64,
    /// Cycles over all executions.
    pub cycles: u64,
    /// Cycles of one execution (its slowest tile).
    pub cycles_per_execution: u64,
    /// The slowest tile.
    pub busiest_tile: Tile,
    /// Tiles with vertices.
    pub tiles: u32,
}

/// One exchange in a profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ExchangeProfile {
    /// Its name.
    pub name: String,
    /// Times it ran.
    pub executions: u64,
    /// Cycles over all executions.
    pub cycles: u64,
    /// Cycles of one execution.
    pub cycles_per_execution: u64,
    /// Bytes sent between tiles per execution (a multicast counted once).
    pub bytes_per_execution: u64,
    /// Of those, bytes over IPU-Links (once per destination IPU).
    pub link_bytes_per_execution: u64,
}

/// One host stream in a profile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct StreamProfile {
    /// Its name.
    pub name: String,
    /// Times it ran.
    pub executions: u64,
    /// Cycles over all executions.
    pub cycles: u64,
    /// Bytes per execution.
    pub bytes_per_execution: u64,
}

/// A tile among the busiest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BusyTile {
    /// The tile.
    pub tile: Tile,
    /// Its IPU.
    pub ipu: u32,
    /// Its compute cycles over the run (the time it was not waiting).
    pub compute_cycles: u64,
    /// Its memory in bytes.
    pub memory: u64,
}

/// A step of the trace, with its name resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
struct TraceStep {
    name: Arc<str>,
    phase: Phase,
    start: u64,
    cycles: u64,
    tile: Option<Tile>,
}

/// The profile of one [`Engine::run`](super::Engine::run).
///
/// `Display` prints it as a table; [`Profile::to_json`] writes it as JSON
/// (every field but the trace); [`Profile::chrome_trace`] gives the
/// supersteps as a Chrome trace for Perfetto or `chrome://tracing`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Profile {
    /// The machine.
    pub target: TargetInfo,
    /// Estimated cycles by phase.
    pub cycles: PhaseCycles,
    /// Estimated cycles in all.
    pub total_cycles: u64,
    /// Estimated seconds on the device.
    pub estimated_seconds: f64,
    /// Supersteps (syncs).
    pub supersteps: u64,
    /// Host seconds the run took.
    pub wall_seconds: f64,
    /// Every compute set of the graph.
    pub compute_sets: Vec<ComputeSetProfile>,
    /// Every exchange of the graph.
    pub exchanges: Vec<ExchangeProfile>,
    /// Every host stream of the graph.
    pub streams: Vec<StreamProfile>,
    /// Memory per tile.
    pub memory: MemorySummary,
    /// The tiles with the most compute cycles, most first (at most 8).
    pub busiest_tiles: Vec<BusyTile>,
    /// Steps left out of the trace (beyond the engine's `trace_steps`).
    pub trace_steps_dropped: u64,
    #[serde(skip)]
    trace: Vec<TraceStep>,
}

/// What the engine hands over to make a profile.
pub(crate) struct ProfileData<'a> {
    pub(crate) target: TargetInfo,
    pub(crate) cycles: PhaseCycles,
    pub(crate) supersteps: u64,
    pub(crate) wall_seconds: f64,
    pub(crate) compute_sets: Vec<ComputeSetRow<'a>>,
    pub(crate) exchanges: Vec<ExchangeRow>,
    pub(crate) streams: Vec<(Arc<str>, u64, u64, u64)>,
    pub(crate) memory: &'a MemoryUsage,
    pub(crate) steps: Vec<Step>,
    pub(crate) steps_dropped: u64,
}

/// A compute set as the engine compiled it, and its runs.
pub(crate) struct ComputeSetRow<'a> {
    pub(crate) name: Arc<str>,
    /// Cycles per tile with a vertex.
    pub(crate) tile_cycles: &'a [(Tile, u64)],
    /// The slowest tile's cycles and the tile.
    pub(crate) cycles: u64,
    pub(crate) busiest: Tile,
    pub(crate) runs: u64,
}

/// An exchange as the engine compiled it, and its runs.
pub(crate) struct ExchangeRow {
    pub(crate) name: Arc<str>,
    pub(crate) cycles: u64,
    /// Bytes sent off-tile and bytes crossing IPU-Links per run.
    pub(crate) bytes: u64,
    pub(crate) link_bytes: u64,
    pub(crate) runs: u64,
}

/// Most tiles listed as busiest.
const BUSIEST: usize = 8;
/// Buckets of the memory histogram.
const BUCKETS: usize = 16;

impl Profile {
    pub(crate) fn new(d: ProfileData<'_>, target: &Target) -> Self {
        let tiles = d.target.tiles as usize;
        let mut busy = vec![0u64; tiles];
        for c in &d.compute_sets {
            if c.runs > 0 {
                for &(t, cyc) in c.tile_cycles {
                    busy[t as usize] += cyc * c.runs;
                }
            }
        }
        let mut order: Vec<usize> = (0..tiles).filter(|&t| busy[t] > 0).collect();
        order.sort_by(|&a, &b| busy[b].cmp(&busy[a]).then(a.cmp(&b)));
        let busiest_tiles = order
            .iter()
            .take(BUSIEST)
            .map(|&t| BusyTile {
                tile: t as Tile,
                ipu: target.ipu_of(t as Tile),
                compute_cycles: busy[t],
                memory: d.memory.tiles[t].total(),
            })
            .collect();
        let trace = d
            .steps
            .iter()
            .map(|s| TraceStep {
                name: match s.kind {
                    StepKind::ComputeSet(k) => d.compute_sets[k].name.clone(),
                    StepKind::Exchange(k) => d.exchanges[k].name.clone(),
                    StepKind::Stream(k) => d.streams[k].0.clone(),
                    StepKind::Sync => Arc::from("sync"),
                },
                phase: s.phase,
                start: s.start,
                cycles: s.cycles,
                tile: s.tile,
            })
            .collect();
        let total = d.cycles.total();
        Self {
            target: d.target,
            cycles: d.cycles,
            total_cycles: total,
            estimated_seconds: target.spec().seconds(total),
            supersteps: d.supersteps,
            wall_seconds: d.wall_seconds,
            compute_sets: d
                .compute_sets
                .iter()
                .map(|c| ComputeSetProfile {
                    name: c.name.to_string(),
                    executions: c.runs,
                    cycles: c.cycles * c.runs,
                    cycles_per_execution: c.cycles,
                    busiest_tile: c.busiest,
                    tiles: c.tile_cycles.len() as u32,
                })
                .collect(),
            exchanges: d
                .exchanges
                .iter()
                .map(|c| ExchangeProfile {
                    name: c.name.to_string(),
                    executions: c.runs,
                    cycles: c.cycles * c.runs,
                    cycles_per_execution: c.cycles,
                    bytes_per_execution: c.bytes,
                    link_bytes_per_execution: c.link_bytes,
                })
                .collect(),
            streams: d
                .streams
                .iter()
                .map(|(name, cycles, bytes, runs)| StreamProfile {
                    name: name.to_string(),
                    executions: *runs,
                    cycles: cycles * runs,
                    bytes_per_execution: *bytes,
                })
                .collect(),
            memory: d.memory.summary(BUCKETS),
            busiest_tiles,
            trace_steps_dropped: d.steps_dropped,
            trace,
        }
    }

    /// The profile as pretty-printed JSON (everything but the trace).
    ///
    /// ```
    /// use tessera_sim::ipu::{Engine, EngineOptions, Graph, Program, Target};
    /// use tessera_sim::IpuSpec;
    ///
    /// let graph = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let mut engine = Engine::new(graph, Program::empty(), EngineOptions::default())?;
    /// let profile = engine.run();
    /// let json: serde_json::Value = serde_json::from_str(&profile.to_json())?;
    /// assert_eq!(json["total_cycles"], profile.total_cycles);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile serialises")
    }

    /// The run's steps as a Chrome trace (the JSON object format): one
    /// complete (`"X"`) event per step, on one track per phase (compute,
    /// sync, exchange, host) of process 0, times in microseconds of
    /// estimated device time; `args` carry the cycles and the busiest
    /// tile. Open it in Perfetto (ui.perfetto.dev) or `chrome://tracing`.
    ///
    /// ```
    /// use tessera_sim::ipu::{Engine, EngineOptions, Graph, Program, Target};
    /// use tessera_sim::IpuSpec;
    ///
    /// let graph = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let mut engine = Engine::new(graph, Program::empty(), EngineOptions::default())?;
    /// let profile = engine.run();
    /// let trace = profile.chrome_trace();
    /// assert!(trace["traceEvents"].as_array().is_some_and(|events| !events.is_empty()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[must_use]
    pub fn chrome_trace(&self) -> Value {
        let us = |cycles: u64| cycles as f64 * 1e6 / self.target.clock_hz as f64;
        let mut events = vec![json!({
            "name": "process_name", "ph": "M", "pid": 0,
            "args": { "name": format!(
                "{} IPU{} x {} tiles", self.target.ipus,
                if self.target.ipus == 1 { "" } else { "s" }, self.target.tiles_per_ipu) },
        })];
        for (tid, phase) in Phase::ALL.iter().enumerate() {
            events.push(json!({
                "name": "thread_name", "ph": "M", "pid": 0, "tid": tid,
                "args": { "name": phase.name() },
            }));
        }
        for s in &self.trace {
            let tid = Phase::ALL.iter().position(|&p| p == s.phase).unwrap_or(0);
            let mut args = json!({ "cycles": s.cycles });
            if let Some(t) = s.tile {
                args["busiest_tile"] = json!(t);
            }
            events.push(json!({
                "name": &*s.name, "cat": s.phase.name(), "ph": "X",
                "ts": us(s.start), "dur": us(s.cycles), "pid": 0, "tid": tid,
                "args": args,
            }));
        }
        json!({
            "traceEvents": events,
            "displayTimeUnit": "ns",
            "otherData": {
                "total_cycles": self.total_cycles,
                "clock_hz": self.target.clock_hz,
                "steps_dropped": self.trace_steps_dropped,
            },
        })
    }
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (k, c) in s.chars().enumerate() {
        if k > 0 && (s.len() - k).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_cycles(f)?;
        self.fmt_programs(f)?;
        self.fmt_memory(f)?;
        self.fmt_busiest(f)
    }
}

impl Profile {
    /// The target, the total and the cycles by phase.
    fn fmt_cycles(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = &self.target;
        let total = self.total_cycles.max(1);
        let pct = |c: u64| 100.0 * c as f64 / total as f64;
        writeln!(
            f,
            "{} IPU(s) x {} tiles, {} workers/tile, {:.3} GHz",
            t.ipus,
            t.tiles_per_ipu,
            t.workers_per_tile,
            t.clock_hz as f64 / 1e9
        )?;
        writeln!(
            f,
            "cycles: {} in all ({:.3} us on the device; {} supersteps; host wall time {:.3} ms)",
            thousands(self.total_cycles),
            self.estimated_seconds * 1e6,
            self.supersteps,
            self.wall_seconds * 1e3
        )?;
        writeln!(f, "{:<10} {:>16} {:>7}", "phase", "cycles", "share")?;
        for p in Phase::ALL {
            let c = self.cycles.get(p);
            writeln!(f, "{:<10} {:>16} {:>6.1}%", p.name(), thousands(c), pct(c))?;
        }
        Ok(())
    }

    /// A table per kind of program: compute sets, exchanges, host streams.
    fn fmt_programs(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        writeln!(
            f,
            "{:<28} {:>6} {:>14} {:>12} {:>8} {:>7}",
            "compute set", "runs", "cycles", "per run", "busiest", "tiles"
        )?;
        for c in &self.compute_sets {
            writeln!(
                f,
                "{:<28} {:>6} {:>14} {:>12} {:>8} {:>7}",
                c.name,
                c.executions,
                thousands(c.cycles),
                thousands(c.cycles_per_execution),
                c.busiest_tile,
                c.tiles
            )?;
        }
        if !self.exchanges.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "{:<28} {:>6} {:>14} {:>12} {:>12} {:>12}",
                "exchange", "runs", "cycles", "per run", "bytes/run", "link B/run"
            )?;
            for e in &self.exchanges {
                writeln!(
                    f,
                    "{:<28} {:>6} {:>14} {:>12} {:>12} {:>12}",
                    e.name,
                    e.executions,
                    thousands(e.cycles),
                    thousands(e.cycles_per_execution),
                    thousands(e.bytes_per_execution),
                    thousands(e.link_bytes_per_execution)
                )?;
            }
        }
        if !self.streams.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "{:<28} {:>6} {:>14} {:>12}",
                "host stream", "runs", "cycles", "bytes/run"
            )?;
            for s in &self.streams {
                writeln!(
                    f,
                    "{:<28} {:>6} {:>14} {:>12}",
                    s.name,
                    s.executions,
                    thousands(s.cycles),
                    thousands(s.bytes_per_execution)
                )?;
            }
        }
        Ok(())
    }

    /// Memory per tile: the fullest, by category and a histogram.
    fn fmt_memory(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = &self.memory;
        writeln!(f)?;
        writeln!(
            f,
            "memory per tile: max {} B ({:.1}% of {}) on tile {}, mean {:.0} B",
            thousands(m.max),
            100.0 * m.max as f64 / m.capacity.max(1) as f64,
            thousands(m.capacity),
            m.max_tile,
            m.mean
        )?;
        writeln!(
            f,
            "  all tiles: tensors {} B, vertex state {} B, code {} B, exchange {} B",
            thousands(m.by_category.tensors),
            thousands(m.by_category.vertex_state),
            thousands(m.by_category.code),
            thousands(m.by_category.exchange)
        )?;
        for b in m.histogram.iter().filter(|b| b.tiles > 0) {
            writeln!(
                f,
                "  {:>9} ..{:>9} B: {} tiles",
                thousands(b.from),
                thousands(b.to),
                b.tiles
            )?;
        }
        Ok(())
    }

    /// The busiest tiles, if recorded.
    fn fmt_busiest(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.busiest_tiles.is_empty() {
            writeln!(f)?;
            writeln!(
                f,
                "{:<8} {:>5} {:>16} {:>12}",
                "tile", "ipu", "compute cycles", "memory B"
            )?;
            for b in &self.busiest_tiles {
                writeln!(
                    f,
                    "{:<8} {:>5} {:>16} {:>12}",
                    b.tile,
                    b.ipu,
                    thousands(b.compute_cycles),
                    thousands(b.memory)
                )?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1_234_567), "1,234,567");
    }
}
