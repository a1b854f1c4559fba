//! Wall-time benchmarks of the simulator, for `tessera bench sim`.
//!
//! - [`lamb_overhead`]: one LAMB step of `params` f32 parameters mapped
//!   over the tiles of a simulated IPU (tile-parallel program:
//!   [`kernels::lamb()`](crate::kernels::lamb())) against the fused core
//!   kernel [`Lamb::step`] on the same data, in the same run, samples
//!   interleaved, best sample reported. The target is a simulator time
//!   within 1.5x of the plain kernel's.
//! - [`ipu_scaling`]: the same LAMB step mapped over 1, 2, 4, ... IPUs,
//!   and a program of empty vertices (one per tile), giving the engine's
//!   own cost per superstep per tile.
//!
//! Both return plain data (`Serialize`) for the caller to print or write
//! as JSON. They allocate about `4 * params * 4` bytes for each side.

use core::num::NonZeroU64;
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tessera_core::kernels::BLOCK;
use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
use tessera_core::rng::RandomStream;

use crate::ipu::{
    Codelet, DType, Engine, EngineOptions, FieldSpec, Graph, GraphError, IpuSpec, Mapping, Program,
    Target, TargetError, VertexCycles, VertexIo,
};
use crate::kernels::lamb::{LambOptions, lamb};

/// Why a benchmark could not run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BenchError {
    /// The target could not be made.
    Target(TargetError),
    /// The graph could not be built.
    Graph(GraphError),
    /// The engine could not be built (for example out of tile memory).
    Build(crate::ipu::BuildError),
}

impl core::fmt::Display for BenchError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Target(e) => e.fmt(f),
            Self::Graph(e) => e.fmt(f),
            Self::Build(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<TargetError> for BenchError {
    fn from(e: TargetError) -> Self {
        Self::Target(e)
    }
}

impl From<GraphError> for BenchError {
    fn from(e: GraphError) -> Self {
        Self::Graph(e)
    }
}

impl From<crate::ipu::BuildError> for BenchError {
    fn from(e: crate::ipu::BuildError) -> Self {
        Self::Build(e)
    }
}

/// What [`lamb_overhead`] measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LambBench {
    /// f32 parameters (16 Mi in the issue's target).
    pub params: usize,
    /// The IPU (1,472 tiles for the Mk2).
    pub spec: IpuSpec,
    /// IPUs the parameter is spread over.
    pub ipus: u32,
    /// Timed samples of each side; the best is reported.
    pub samples: usize,
}

impl Default for LambBench {
    /// 16 Mi parameters on one Mk2 GC200, 7 samples.
    fn default() -> Self {
        Self {
            params: 16 << 20,
            spec: IpuSpec::MK2_GC200,
            ipus: 1,
            samples: 7,
        }
    }
}

/// The result of [`lamb_overhead`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LambOverhead {
    /// Parameters.
    pub params: usize,
    /// IPUs.
    pub ipus: u32,
    /// Tiles in all.
    pub tiles: u32,
    /// Best wall seconds of one fused [`Lamb::step`].
    pub plain_seconds: f64,
    /// Best wall seconds of one simulated step ([`Engine::run`]).
    pub sim_seconds: f64,
    /// Median wall seconds of the fused step.
    pub plain_median_seconds: f64,
    /// Median wall seconds of the simulated step.
    pub sim_median_seconds: f64,
    /// `sim_seconds / plain_seconds` (the target is at most 1.5).
    pub ratio: f64,
    /// Supersteps of one simulated step.
    pub supersteps: u64,
    /// Estimated device cycles of one step.
    pub estimated_cycles: u64,
    /// Estimated device seconds of one step.
    pub estimated_seconds: f64,
    /// Host threads rayon used.
    pub threads: usize,
}

/// `n` values uniform in `[lo, hi)`.
fn uniform(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let s = RandomStream::new(seed, 0);
    (0..n as u64)
        .map(|i| lo + (hi - lo) * (s.bits(i) >> 8) as f32 / (1u32 << 24) as f32)
        .collect()
}

/// A simulated LAMB step over `params` f32 parameters on `target`, with
/// its inputs written: the engine and its program's supersteps.
fn lamb_engine(target: Target, params: usize, lamb_opt: Lamb) -> Result<Engine, BenchError> {
    let n = params as u64;
    let mut g = Graph::new(target);
    let grain = NonZeroU64::new(BLOCK as u64).expect("nonzero");
    let w = g.add_tensor("w", DType::F32, &[n], Mapping::linear(grain))?;
    let gt = g.add_tensor("g", DType::F32, &[n], Mapping::Like(w))?;
    let m = g.add_tensor("m", DType::F32, &[n], Mapping::Like(w))?;
    let v = g.add_tensor("v", DType::F32, &[n], Mapping::Like(w))?;
    let lp = lamb::<f32, f32, f32>(&mut g, "lamb", w, gt, [m, v], &LambOptions::new(lamb_opt))?;
    let mut e = Engine::new(
        g,
        lp.program,
        EngineOptions {
            trace_steps: 0,
            ..EngineOptions::default()
        },
    )?;
    let inputs = inputs(params);
    for (t, data) in [w, gt, m, v].into_iter().zip(&inputs) {
        e.write_tensor(t, data).expect("f32 of the right length");
    }
    Ok(e)
}

/// Weights, gradients, m and v as after some steps.
fn inputs(n: usize) -> [Vec<f32>; 4] {
    [
        uniform(n, 1, -1.0, 1.0),
        uniform(n, 2, -0.01, 0.01),
        uniform(n, 3, -1e-3, 1e-3),
        uniform(n, 4, 0.0, 1e-5),
    ]
}

/// Best and median of `times`.
fn best_median(mut times: Vec<f64>) -> (f64, f64) {
    times.sort_by(f64::total_cmp);
    (times[0], times[times.len() / 2])
}

/// One LAMB step simulated over the tiles of `bench.ipus` IPUs against
/// the fused [`Lamb::step`] on the same data, samples interleaved (after
/// one warm-up call of each).
///
/// # Errors
/// [`BenchError`] if the target, graph or engine cannot be built.
///
/// ```
/// use tessera_sim::bench::{BenchError, LambBench, lamb_overhead};
/// use tessera_sim::ipu::TargetError;
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let spec = IpuSpec::new(IpuParams { tiles: 8, ..IpuParams::default() }).unwrap();
/// let bench = LambBench { params: 2000, spec, ipus: 2, samples: 1 };
/// let r = lamb_overhead(&bench).unwrap();
/// assert_eq!((r.params, r.tiles), (2000, 16));
/// assert!(r.supersteps > 0 && r.estimated_cycles > 0);
/// // Multi-IPU targets pair their IPUs.
/// let odd = LambBench { ipus: 3, ..bench };
/// assert_eq!(lamb_overhead(&odd), Err(BenchError::Target(TargetError::OddIpuCount(3))));
/// ```
pub fn lamb_overhead(bench: &LambBench) -> Result<LambOverhead, BenchError> {
    let target = Target::new(bench.spec, bench.ipus)?;
    let lamb_opt = Lamb::new(LambConfig::default()).expect("default LAMB is valid");
    let mut engine = lamb_engine(target, bench.params, lamb_opt)?;
    let [mut w, g, mut m, mut v] = inputs(bench.params);
    let precision = Precision::default();
    let mut t = 0;
    let mut plain = || {
        t += 1;
        let mut p = Param::new(0, &mut w, &g, [&mut m, &mut v]);
        lamb_opt.step(Step::after(t - 1), &precision, &mut p);
        black_box(&p.weights[0]);
    };
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        f();
        start.elapsed().as_secs_f64()
    };
    let mut profile = engine.run();
    plain();
    let (mut ts, mut tp) = (Vec::new(), Vec::new());
    for _ in 0..bench.samples.max(1) {
        tp.push(time(&mut plain));
        ts.push(time(&mut || profile = engine.run()));
    }
    let (plain_seconds, plain_median_seconds) = best_median(tp);
    let (sim_seconds, sim_median_seconds) = best_median(ts);
    Ok(LambOverhead {
        params: bench.params,
        ipus: bench.ipus,
        tiles: target.tiles(),
        plain_seconds,
        sim_seconds,
        plain_median_seconds,
        sim_median_seconds,
        ratio: sim_seconds / plain_seconds,
        supersteps: profile.supersteps,
        estimated_cycles: profile.total_cycles,
        estimated_seconds: profile.estimated_seconds,
        threads: rayon::current_num_threads(),
    })
}

/// One row of [`ipu_scaling`].
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ScalingRow {
    /// IPUs.
    pub ipus: u32,
    /// Tiles in all.
    pub tiles: u32,
    /// Best wall seconds of one simulated LAMB step.
    pub lamb_seconds: f64,
    /// Supersteps of the LAMB step.
    pub lamb_supersteps: u64,
    /// Estimated device seconds of the LAMB step.
    pub lamb_estimated_seconds: f64,
    /// Best wall seconds per superstep of a compute set of one empty
    /// vertex per tile.
    pub empty_superstep_seconds: f64,
    /// That divided by the tiles: the engine's cost per superstep per
    /// tile, in nanoseconds.
    pub ns_per_superstep_per_tile: f64,
}

/// An empty vertex (the engine's own cost).
#[derive(Debug)]
struct Empty {
    fields: [FieldSpec; 0],
}

impl Codelet for Empty {
    fn name(&self) -> &str {
        "empty"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, _: &[u64], _: &IpuSpec) -> VertexCycles {
        VertexCycles::Worker(1)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        black_box(io.tile());
    }
}

/// Supersteps of the empty-vertex program per sample.
const EMPTY_SUPERSTEPS: u64 = 20;

/// The LAMB step of `params` parameters and an empty superstep over each
/// of `ipus` IPU counts (each even or 1), `samples` samples each.
///
/// # Errors
/// [`BenchError`] if a target, graph or engine cannot be built.
///
/// ```
/// use tessera_sim::bench::ipu_scaling;
/// use tessera_sim::{IpuParams, IpuSpec};
///
/// let spec = IpuSpec::new(IpuParams { tiles: 4, ..IpuParams::default() }).unwrap();
/// let rows = ipu_scaling(spec, 1000, &[1, 2], 1).unwrap();
/// let tiles: Vec<u32> = rows.iter().map(|r| r.tiles).collect();
/// assert_eq!(tiles, [4, 8]);
/// assert!(rows.iter().all(|r| r.lamb_supersteps > 0));
/// assert!(ipu_scaling(spec, 1000, &[0], 1).is_err());
/// ```
pub fn ipu_scaling(
    spec: IpuSpec,
    params: usize,
    ipus: &[u32],
    samples: usize,
) -> Result<Vec<ScalingRow>, BenchError> {
    let lamb_opt = Lamb::new(LambConfig::default()).expect("default LAMB is valid");
    let mut rows = Vec::new();
    for &n in ipus {
        let target = Target::new(spec, n)?;
        let mut engine = lamb_engine(target, params, lamb_opt)?;
        let mut profile = engine.run();
        let mut times = Vec::new();
        for _ in 0..samples.max(1) {
            let start = Instant::now();
            profile = engine.run();
            times.push(start.elapsed().as_secs_f64());
        }
        drop(engine);
        let (lamb_seconds, _) = best_median(times);
        let mut g = Graph::new(target);
        let cs = g.add_compute_set("empty");
        let empty: Arc<dyn Codelet> = Arc::new(Empty { fields: [] });
        for t in 0..target.tiles() {
            g.add_vertex(cs, t, empty.clone(), &[])?;
        }
        let program = Program::repeat(EMPTY_SUPERSTEPS, Program::Execute(cs));
        let opts = EngineOptions {
            trace_steps: 0,
            ..EngineOptions::default()
        };
        let mut e = Engine::new(g, program, opts)?;
        e.run();
        let mut times = Vec::new();
        for _ in 0..samples.max(1) {
            let start = Instant::now();
            e.run();
            times.push(start.elapsed().as_secs_f64() / EMPTY_SUPERSTEPS as f64);
        }
        let (empty_superstep_seconds, _) = best_median(times);
        rows.push(ScalingRow {
            ipus: n,
            tiles: target.tiles(),
            lamb_seconds,
            lamb_supersteps: profile.supersteps,
            lamb_estimated_seconds: profile.estimated_seconds,
            empty_superstep_seconds,
            ns_per_superstep_per_tile: empty_superstep_seconds * 1e9 / f64::from(target.tiles()),
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipu::IpuParams;

    #[test]
    fn benchmarks_run_small() {
        let spec = IpuSpec::new(IpuParams {
            tiles: 8,
            ..IpuParams::default()
        })
        .unwrap();
        let r = lamb_overhead(&LambBench {
            params: 10_000,
            spec,
            ipus: 2,
            samples: 2,
        })
        .unwrap();
        assert_eq!(r.tiles, 16);
        assert!(r.plain_seconds > 0.0 && r.sim_seconds > 0.0 && r.supersteps > 0);
        let rows = ipu_scaling(spec, 10_000, &[1, 2], 1).unwrap();
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[1].tiles, 16);
        // Serialises.
        assert!(
            serde_json::to_string(&rows)
                .unwrap()
                .contains("ns_per_superstep_per_tile")
        );
    }
}
