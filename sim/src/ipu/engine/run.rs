//! Running an engine's program: supersteps on host threads, cycles
//! accumulated into a profile.

use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;

use super::Engine;
use crate::ipu::codelet::VertexIo;
use crate::ipu::profile::{
    ComputeSetRow, ExchangeRow, Phase, PhaseCycles, Profile, ProfileData, Step, StepKind,
    TargetInfo,
};
use crate::ipu::program::Program;
use crate::ipu::target::Tile;
use crate::ipu::tensor::Piece;

/// Compute sets with this few tiles run on the calling thread.
const SEQUENTIAL_TILES: usize = 4;
impl Engine {
    /// Runs the program once and returns its profile.
    ///
    /// ```
    /// use tessera_sim::ipu::{DType, Engine, EngineOptions, Graph, Mapping, Program, Target};
    /// use tessera_sim::{IpuParams, IpuSpec};
    ///
    /// let two_tiles = IpuSpec::new(IpuParams { tiles: 2, ..IpuParams::default() }).unwrap();
    /// let mut g = Graph::new(Target::single(two_tiles));
    /// let x = g.add_tensor("x", DType::F32, &[4], Mapping::one_tile(0, 4))?;
    /// let y = g.add_tensor("y", DType::F32, &[4], Mapping::one_tile(1, 4))?;
    /// let ex = g.add_exchange("x to y", &[(g.all(x), g.all(y))])?;
    /// let mut engine = Engine::new(g, Program::repeat(2, Program::Exchange(ex)), EngineOptions::default())?;
    /// engine.write_tensor(x, &[1.0f32, 2.0, 3.0, 4.0])?;
    /// let profile = engine.run();
    /// assert_eq!(engine.read_tensor::<f32>(y)?, [1.0, 2.0, 3.0, 4.0]);
    /// assert_eq!(profile.cycles.exchange, 2 * engine.exchange_cycles(ex));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn run(&mut self) -> Profile {
        let started = Instant::now();
        let program = Arc::clone(&self.program);
        let mut acc = Acc {
            cycles: PhaseCycles::default(),
            supersteps: 0,
            cs_runs: vec![0; self.compute_sets.len()],
            ex_runs: vec![0; self.exchanges.len()],
            stream_runs: vec![0; self.streams.len()],
            steps: Vec::new(),
            trace_steps: self.options.trace_steps,
            steps_dropped: 0,
        };
        self.exec(&program, &mut acc);
        let wall = started.elapsed().as_secs_f64();
        RUN_SECONDS.set(RUN_SECONDS.get() + wall);
        self.profile(acc, wall)
    }

    fn exec(&mut self, p: &Program, acc: &mut Acc) {
        match p {
            Program::Execute(cs) => {
                let k = cs.0 as usize;
                self.execute_compute_set(k);
                let c = &self.compute_sets[k];
                acc.cs_runs[k] += 1;
                acc.record(
                    Phase::Compute,
                    StepKind::ComputeSet(k),
                    c.cycles,
                    Some(c.busiest),
                );
                acc.sync(self.graph.target.sync_cycles());
            }
            Program::Exchange(ex) => {
                let k = ex.0 as usize;
                self.execute_exchange(k);
                let e = &self.exchanges[k];
                acc.ex_runs[k] += 1;
                acc.record(
                    Phase::Exchange,
                    StepKind::Exchange(k),
                    e.cycles,
                    Some(e.busiest),
                );
            }
            Program::Sequence(ps) => {
                for p in ps {
                    self.exec(p, acc);
                }
            }
            Program::Repeat { count, body } => {
                for _ in 0..*count {
                    self.exec(body, acc);
                }
            }
            Program::HostWrite(s) | Program::HostRead(s) => {
                let k = s.0 as usize;
                let to_device = matches!(p, Program::HostWrite(_));
                self.execute_stream(k, to_device);
                acc.stream_runs[k] += 1;
                acc.record(
                    Phase::Host,
                    StepKind::Stream(k),
                    self.streams[k].cycles,
                    None,
                );
                acc.sync(self.graph.target.sync_cycles());
            }
        }
    }

    fn execute_compute_set(&mut self, k: usize) {
        let cs = &self.compute_sets[k];
        let seeds = self.options.seeds;
        let workers = self.graph.target.spec().workers_per_tile();
        let run_tile = |k: usize, pieces: &mut Vec<Piece>| {
            let (tile, end) = cs.touched[k];
            let start = k.checked_sub(1).map_or(0, |p| cs.touched[p].1);
            for v in &cs.vertices[start as usize..end as usize] {
                let mut io = VertexIo {
                    pieces,
                    fields: &v.fields,
                    tile,
                    workers_per_tile: workers,
                    seeds,
                };
                v.codelet.run(&mut io);
            }
        };
        if cs.touched.len() <= SEQUENTIAL_TILES {
            for (k, &(t, _)) in cs.touched.iter().enumerate() {
                run_tile(k, &mut self.tiles[t as usize]);
            }
        } else {
            // Only the touched tiles go to rayon: a compute set on a few of
            // 1,472 tiles would otherwise split and visit them all.
            let mut touched = Vec::with_capacity(cs.touched.len());
            let (mut rest, mut base) = (&mut self.tiles[..], 0);
            for &(t, _) in &cs.touched {
                let (_, tail) = rest.split_at_mut(t as usize - base);
                let (pieces, tail) = tail.split_first_mut().expect("a tile of the target");
                touched.push(pieces);
                (rest, base) = (tail, t as usize + 1);
            }
            touched
                .par_iter_mut()
                .enumerate()
                .for_each(|(k, pieces)| run_tile(k, pieces));
        }
    }

    fn execute_exchange(&mut self, k: usize) {
        self.exchanges[k].run.run(&mut self.tiles);
    }

    fn execute_stream(&mut self, k: usize, to_device: bool) {
        let st = &mut self.streams[k];
        let info = &self.graph.tensors[st.tensor.index()];
        for p in &info.intervals {
            let range = p.range.start as usize..p.range.end as usize;
            let piece = &mut self.tiles[p.tile as usize][p.piece as usize];
            let len = range.len();
            if to_device {
                piece.copy_from(0..len, &st.buffer, range);
            } else {
                st.buffer.copy_from(range, piece, 0..len);
            }
        }
    }

    fn profile(&self, acc: Acc, wall: f64) -> Profile {
        let target = &self.graph.target;
        let spec = target.spec();
        let data = ProfileData {
            target: TargetInfo {
                ipus: target.ipus(),
                tiles_per_ipu: spec.tiles(),
                tiles: target.tiles(),
                workers_per_tile: spec.workers_per_tile(),
                memory_per_tile: spec.memory_per_tile(),
                clock_hz: spec.clock_hz(),
            },
            cycles: acc.cycles,
            supersteps: acc.supersteps,
            wall_seconds: wall,
            compute_sets: self
                .graph
                .compute_sets
                .iter()
                .zip(&self.compute_sets)
                .zip(&acc.cs_runs)
                .map(|((info, c), &runs)| ComputeSetRow {
                    name: info.name.clone(),
                    tile_cycles: &c.tile_cycles,
                    cycles: c.cycles,
                    busiest: c.busiest,
                    runs,
                })
                .collect(),
            exchanges: self
                .graph
                .exchanges
                .iter()
                .zip(&self.exchanges)
                .zip(&acc.ex_runs)
                .map(|((info, c), &runs)| ExchangeRow {
                    name: info.name.clone(),
                    cycles: c.cycles,
                    bytes: c.bytes,
                    link_bytes: c.link_bytes,
                    runs,
                })
                .collect(),
            streams: self
                .graph
                .streams
                .iter()
                .zip(&self.streams)
                .zip(&acc.stream_runs)
                .map(|((info, c), &runs)| (info.name.clone(), c.cycles, c.bytes, runs))
                .collect(),
            memory: &self.memory,
            steps: acc.steps,
            steps_dropped: acc.steps_dropped,
        };
        Profile::new(data, target)
    }
}

std::thread_local! {
    static RUN_SECONDS: core::cell::Cell<f64> = const { core::cell::Cell::new(0.0) };
}

/// Wall seconds this thread has spent in [`Engine::run`] since it started:
/// how a benchmark separates running a program from building its engine
/// when both happen inside a function it calls (the layer runners of
/// [`model`](crate::model)).
///
/// ```
/// use tessera_sim::ipu::{Engine, EngineOptions, Graph, Program, Target, run_seconds_on_this_thread};
/// use tessera_sim::IpuSpec;
///
/// let graph = Graph::new(Target::single(IpuSpec::MK2_GC200));
/// let mut engine = Engine::new(graph, Program::empty(), EngineOptions::default())?;
/// let before = run_seconds_on_this_thread();
/// engine.run();
/// assert!(run_seconds_on_this_thread() >= before);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[must_use]
pub fn run_seconds_on_this_thread() -> f64 {
    RUN_SECONDS.get()
}

/// What a run accumulates.
struct Acc {
    cycles: PhaseCycles,
    supersteps: u64,
    cs_runs: Vec<u64>,
    ex_runs: Vec<u64>,
    stream_runs: Vec<u64>,
    steps: Vec<Step>,
    trace_steps: usize,
    steps_dropped: u64,
}

impl Acc {
    fn record(&mut self, phase: Phase, kind: StepKind, cycles: u64, tile: Option<Tile>) {
        let start = self.cycles.total();
        match phase {
            Phase::Compute => self.cycles.compute += cycles,
            Phase::Exchange => self.cycles.exchange += cycles,
            Phase::Host => self.cycles.host += cycles,
            Phase::Sync => self.cycles.sync += cycles,
        }
        if self.steps.len() < self.trace_steps {
            self.steps.push(Step {
                phase,
                kind,
                start,
                cycles,
                tile,
            });
        } else {
            self.steps_dropped += 1;
        }
    }

    fn sync(&mut self, cycles: u64) {
        self.supersteps += 1;
        self.record(Phase::Sync, StepKind::Sync, cycles, None);
    }
}
