//! The engine: memory accounting, mappings, costs, BSP semantics, multi-IPU
//! exchange, profiles and traces, streams, per-worker random streams.

use core::num::NonZeroU64;
use std::sync::Arc;

use serde_json::Value;
use tessera_sim::ipu::{
    Access, BuildError, Codelet, DType, Direction, Engine, EngineOptions, FieldSpec, Graph,
    GraphError, Interval, IpuParams, IpuSpec, Mapping, OutOfMemory, Program, Seeds, StreamKind,
    Target, TensorSlice, TileMemory, VertexCycles, VertexIo,
};

use crate::support::{spec, target};

const fn nz(x: u64) -> NonZeroU64 {
    NonZeroU64::new(x).unwrap()
}

/// `x *= 2` over an f32 field, with a fixed cycle estimate.
#[derive(Debug)]
struct Double {
    cycles: VertexCycles,
    fields: [FieldSpec; 1],
}

fn double(cycles: VertexCycles) -> Arc<dyn Codelet> {
    Arc::new(Double {
        cycles,
        fields: [FieldSpec::new(DType::F32, Access::ReadWrite)],
    })
}

impl Codelet for Double {
    fn name(&self) -> &str {
        "double"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, _: &[u64], _: &IpuSpec) -> VertexCycles {
        self.cycles
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        for x in io.write::<f32>(0) {
            *x *= 2.0;
        }
    }
}

/// Writes word 0 of each worker's stream of `kind`.
#[derive(Debug)]
struct WorkerBits {
    kind: StreamKind,
    fields: [FieldSpec; 1],
}

impl Codelet for WorkerBits {
    fn name(&self) -> &str {
        "worker_bits"
    }
    fn fields(&self) -> &[FieldSpec] {
        &self.fields
    }
    fn cycles(&self, _: &[u64], _: &IpuSpec) -> VertexCycles {
        VertexCycles::AllWorkers(1)
    }
    fn run(&self, io: &mut VertexIo<'_>) {
        let words: Vec<i64> = (0..6)
            .map(|w| i64::from(io.worker_stream(self.kind, w).bits(0)))
            .collect();
        io.write::<i64>(0).copy_from_slice(&words);
    }
}

fn small(tiles: u32, memory: u64) -> Target {
    Target::single(
        IpuSpec::new(IpuParams {
            tiles,
            memory_per_tile: memory,
            vertex_bytes: 16,
            vertex_field_bytes: 8,
            codelet_code_bytes: 512,
            exchange_code_bytes: 16,
            ..IpuParams::default()
        })
        .unwrap(),
    )
}

#[test]
fn out_of_memory_is_an_error_at_build_with_exact_bytes() {
    let mut g = Graph::new(small(2, 1024));
    g.add_tensor("a", DType::F32, &[10], Mapping::one_tile(0, 10))
        .unwrap();
    // Adding tensors never fails for memory: the check is at build.
    g.add_tensor("big", DType::F32, &[300], Mapping::one_tile(1, 300))
        .unwrap();
    g.add_tensor("small", DType::F16, &[3], Mapping::one_tile(1, 3))
        .unwrap();
    let err = Engine::new(g, Program::empty(), EngineOptions::default()).unwrap_err();
    let BuildError::OutOfTileMemory(oom) = &err else {
        panic!("{err}")
    };
    assert_eq!(
        **oom,
        OutOfMemory {
            tile: 1,
            ipu: 0,
            // 1,200 bytes of f32 and 6 of f16 rounded up to 8.
            needed: 1208,
            available: 1024,
            breakdown: TileMemory {
                tensors: 1208,
                vertex_state: 0,
                code: 0,
                exchange: 0
            },
            largest: vec![(Arc::from("big"), 1200), (Arc::from("small"), 8)],
            tiles_over: 1,
        }
    );
    let msg = err.to_string();
    for part in ["tile 1", "1208", "1024", "big 1200", "small 8"] {
        assert!(msg.contains(part), "{msg}");
    }
}

#[test]
fn vertex_state_code_and_exchange_are_counted() {
    let mut g = Graph::new(small(2, 1024));
    let a = g
        .add_tensor("a", DType::F32, &[10], Mapping::one_tile(0, 10))
        .unwrap();
    let b = g
        .add_tensor("b", DType::F32, &[10], Mapping::one_tile(1, 10))
        .unwrap();
    let cs = g.add_compute_set("double");
    let c = double(VertexCycles::Worker(1));
    g.add_vertex(cs, 0, c.clone(), &[TensorSlice::new(a, 0..5)])
        .unwrap();
    g.add_vertex(cs, 0, c, &[TensorSlice::new(a, 5..10)])
        .unwrap();
    // Two runs: a[0..4] -> b[0..4] (tiles 0 -> 1), a[4..6] -> a... no:
    // b[4..6] -> b[6..8] within tile 1.
    g.add_exchange(
        "x",
        &[
            (TensorSlice::new(a, 0..4), TensorSlice::new(b, 0..4)),
            (TensorSlice::new(b, 4..6), TensorSlice::new(b, 6..8)),
        ],
    )
    .unwrap();
    let e = Engine::new(g, Program::empty(), EngineOptions::default()).unwrap();
    let m = &e.memory().tiles;
    // Tile 0: 40 B of a, two vertices of 16 + 8, one codelet, one run sent.
    assert_eq!(
        m[0],
        TileMemory {
            tensors: 40,
            vertex_state: 48,
            code: 512,
            exchange: 16
        }
    );
    // Tile 1: 40 B of b, one run received, one run within the tile.
    assert_eq!(
        m[1],
        TileMemory {
            tensors: 40,
            vertex_state: 0,
            code: 0,
            exchange: 32
        }
    );
    // One more vertex state byte over the limit fails.
    let mut g = Graph::new(small(1, 40 + 24 + 512));
    let a = g
        .add_tensor("a", DType::F32, &[10], Mapping::one_tile(0, 10))
        .unwrap();
    let cs = g.add_compute_set("double");
    g.add_vertex(cs, 0, double(VertexCycles::Worker(1)), &[g.all(a)])
        .unwrap();
    assert!(Engine::new(g.clone(), Program::empty(), EngineOptions::default()).is_ok());
    g.add_vertex(
        cs,
        0,
        double(VertexCycles::Worker(1)),
        &[TensorSlice::new(a, 0..0)],
    )
    .unwrap();
    let err = Engine::new(g, Program::empty(), EngineOptions::default()).unwrap_err();
    assert!(
        matches!(err, BuildError::OutOfTileMemory(ref o) if o.needed == 600 && o.available == 576)
    );
}

#[test]
fn mappings_are_validated() {
    let mut g = Graph::new(target(4));
    let unmapped = g.add_tensor(
        "t",
        DType::F32,
        &[10],
        Mapping::Explicit(vec![Interval::new(0, 0..4), Interval::new(1, 5..10)]),
    );
    assert_eq!(
        unmapped,
        Err(GraphError::Unmapped {
            tensor: Arc::from("t"),
            at: 4
        })
    );
    let twice = g.add_tensor(
        "t",
        DType::F32,
        &[10],
        Mapping::Explicit(vec![Interval::new(0, 0..6), Interval::new(1, 5..10)]),
    );
    assert!(matches!(twice, Err(GraphError::Overmapped { at: 5, .. })));
    let beyond = g.add_tensor("t", DType::F32, &[4], Mapping::one_tile(0, 5));
    assert!(matches!(beyond, Err(GraphError::Overmapped { .. })));
    let tile = g.add_tensor("t", DType::F32, &[4], Mapping::one_tile(9, 4));
    assert_eq!(tile, Err(GraphError::TileOutOfRange { tile: 9, tiles: 4 }));
    // 2-D shapes, Like, and the memory-aware mapper filling the emptiest tiles.
    let a = g
        .add_tensor("a", DType::F32, &[4, 256], Mapping::one_tile(0, 1024))
        .unwrap();
    assert_eq!(g.len(a), 1024);
    let like = g
        .add_tensor("l", DType::F16, &[1024], Mapping::Like(a))
        .unwrap();
    assert_eq!(g.mapping(like), [Interval::new(0, 0..1024)]);
    assert_eq!(
        g.add_tensor("l2", DType::F16, &[1000], Mapping::Like(a)),
        Err(GraphError::LikeLength {
            len: 1000,
            like: 1024
        })
    );
    let m = g
        .add_tensor(
            "m",
            DType::F32,
            &[768],
            Mapping::MemoryAware { grain: nz(256) },
        )
        .unwrap();
    // Tile 0 holds 6 KiB already; tiles 1..4 take a grain each.
    assert_eq!(
        g.mapping(m),
        [
            Interval::new(1, 0..256),
            Interval::new(2, 256..512),
            Interval::new(3, 512..768)
        ]
    );
    assert_eq!(g.tensor_bytes(), [4096 + 2048, 1024, 1024, 1024]);
}

#[test]
fn vertices_are_checked() {
    let mut g = Graph::new(target(2));
    let x = g
        .add_tensor("x", DType::F32, &[20], Mapping::linear(nz(10)))
        .unwrap();
    let h = g
        .add_tensor("h", DType::F16, &[20], Mapping::linear(nz(10)))
        .unwrap();
    let cs = g.add_compute_set("cs");
    let c = double(VertexCycles::Worker(1));
    assert_eq!(
        g.add_vertex(cs, 0, c.clone(), &[TensorSlice::new(x, 5..15)]),
        Err(GraphError::NotOnTile {
            field: 0,
            tile: 0,
            tensor: x,
            range: 5..15
        })
    );
    assert!(matches!(
        g.add_vertex(cs, 0, c.clone(), &[TensorSlice::new(h, 0..5)]),
        Err(GraphError::FieldType { field: 0, .. })
    ));
    assert!(matches!(
        g.add_vertex(cs, 0, c.clone(), &[]),
        Err(GraphError::FieldCount {
            expected: 1,
            got: 0
        })
    ));
    assert!(matches!(
        g.add_vertex(cs, 0, c.clone(), &[TensorSlice::new(x, 0..30)]),
        Err(GraphError::SliceOutOfRange { .. })
    ));
    // Two vertices writing the same elements race: refused at build.
    g.add_vertex(cs, 0, c.clone(), &[TensorSlice::new(x, 0..6)])
        .unwrap();
    g.add_vertex(cs, 0, c, &[TensorSlice::new(x, 4..10)])
        .unwrap();
    let err = Engine::new(g.clone(), Program::empty(), EngineOptions::default()).unwrap_err();
    assert!(
        matches!(err, BuildError::Graph(GraphError::Race { tile: 0, .. })),
        "{err}"
    );
    // An exchange writing what it reads is refused.
    assert!(matches!(
        g.add_exchange(
            "shift",
            &[(TensorSlice::new(x, 0..10), TensorSlice::new(x, 5..15))]
        ),
        Err(GraphError::ExchangeOverlap { .. })
    ));
    assert!(matches!(
        g.add_exchange(
            "types",
            &[(TensorSlice::new(x, 0..10), TensorSlice::new(h, 0..10))]
        ),
        Err(GraphError::CopyMismatch { copy: 0 })
    ));
}

#[test]
fn compute_cycles_follow_the_worker_model() {
    let mut g = Graph::new(target(2));
    let x = g
        .add_tensor("x", DType::F32, &[14], Mapping::one_tile(0, 14))
        .unwrap();
    let cs = g.add_compute_set("cs");
    for k in 0..7 {
        g.add_vertex(
            cs,
            0,
            double(VertexCycles::Worker(100)),
            &[TensorSlice::new(x, 2 * k..2 * k + 2)],
        )
        .unwrap();
    }
    let e = Engine::new(g.clone(), Program::Execute(cs), EngineOptions::default()).unwrap();
    // Seven vertices on six workers: one worker runs two. 50 supervisor
    // cycles + 6 x 200.
    assert_eq!(e.compute_set_cycles(cs), (50 + 6 * 200, 0));
    let all = g.add_compute_set("all");
    g.add_vertex(all, 0, double(VertexCycles::AllWorkers(10)), &[g.all(x)])
        .unwrap();
    let e = Engine::new(g, Program::Execute(all), EngineOptions::default()).unwrap();
    assert_eq!(e.compute_set_cycles(all), (50 + 6 * 10, 0));
}

/// `y[i] = 2 x[(i + 1) % n]` then `y *= 2`, mapped over `tiles` tiles.
fn rotate_and_double(tiles: u32, x: &[f32]) -> (Vec<f32>, u64) {
    let n = x.len() as u64;
    let mut g = Graph::new(target(tiles));
    let grain = nz(7);
    let xt = g
        .add_tensor("x", DType::F32, &[n], Mapping::linear(grain))
        .unwrap();
    let yt = g
        .add_tensor("y", DType::F32, &[n], Mapping::MemoryAware { grain })
        .unwrap();
    let c = double(VertexCycles::Worker(5));
    let dx = g.add_compute_set("double x");
    for i in g.mapping(xt) {
        g.add_vertex(dx, i.tile, c.clone(), &[TensorSlice::new(xt, i.range)])
            .unwrap();
    }
    let dy = g.add_compute_set("double y");
    for i in g.mapping(yt) {
        g.add_vertex(dy, i.tile, c.clone(), &[TensorSlice::new(yt, i.range)])
            .unwrap();
    }
    let rot = g
        .add_exchange(
            "rotate",
            &[
                (TensorSlice::new(xt, 1..n), TensorSlice::new(yt, 0..n - 1)),
                (TensorSlice::new(xt, 0..1), TensorSlice::new(yt, n - 1..n)),
            ],
        )
        .unwrap();
    let p = Program::sequence([
        Program::Execute(dx),
        Program::Exchange(rot),
        Program::Execute(dy),
    ]);
    let mut e = Engine::new(g, p, EngineOptions::default()).unwrap();
    e.write_tensor(xt, x).unwrap();
    let profile = e.run();
    (e.read_tensor(yt).unwrap(), profile.supersteps)
}

#[test]
fn results_do_not_depend_on_the_tile_count() {
    let x = crate::support::uniform(1000, 3, -1.0, 1.0);
    let want: Vec<f32> = (0..x.len()).map(|i| 4.0 * x[(i + 1) % x.len()]).collect();
    for tiles in [1, 2, 5, 16, 300] {
        let (y, supersteps) = rotate_and_double(tiles, &x);
        assert_eq!(
            crate::support::bits(&y),
            crate::support::bits(&want),
            "{tiles} tiles"
        );
        assert_eq!(supersteps, 2);
    }
}

#[test]
fn exchange_costs_bytes_and_multicast() {
    let mut g = Graph::new(target(4));
    let x = g
        .add_tensor("x", DType::F32, &[100], Mapping::one_tile(0, 100))
        .unwrap();
    let y = g
        .add_tensor("y", DType::F32, &[300], Mapping::linear(nz(100)))
        .unwrap();
    assert_eq!(g.mapping(y)[0], Interval::new(0, 0..100));
    // Broadcast x to y's thirds on tiles 0 (a copy within the tile), 1, 2.
    let copies: Vec<_> = (0..3)
        .map(|k| (g.all(x), TensorSlice::new(y, k * 100..(k + 1) * 100)))
        .collect();
    let ex = g.add_exchange("broadcast", &copies).unwrap();
    let mut e = Engine::new(g, Program::Exchange(ex), EngineOptions::default()).unwrap();
    e.write_tensor(x, &[1.5f32; 100]).unwrap();
    let p = e.run();
    assert_eq!(e.read_tensor::<f32>(y).unwrap(), vec![1.5; 300]);
    // Tile 0 sends its 400 bytes once for both receivers (400 / 4 = 100
    // cycles) and copies 400 bytes locally (50 cycles at 8 B per cycle).
    assert_eq!(p.exchanges[0].bytes_per_execution, 400);
    assert_eq!(p.exchanges[0].cycles_per_execution, 150);
    assert_eq!(p.cycles.exchange, 150);
    assert_eq!(p.supersteps, 0);
}

#[test]
fn multi_ipu_exchange_costs_links_latency_and_global_sync() {
    let s = spec(8);
    let t = Target::new(s, 4).unwrap();
    let mut g = Graph::new(t);
    // x on IPU 0's eight tiles, y on IPU 2's: the route is Up(0), 2 links.
    let x = g
        .add_tensor(
            "x",
            DType::F32,
            &[8000],
            Mapping::Linear {
                grain: nz(1000),
                tiles: Some(0..8),
            },
        )
        .unwrap();
    let y = g
        .add_tensor(
            "y",
            DType::F32,
            &[8000],
            Mapping::Linear {
                grain: nz(1000),
                tiles: Some(16..24),
            },
        )
        .unwrap();
    let ex = g
        .add_exchange("x to IPU 2", &[(g.all(x), g.all(y))])
        .unwrap();
    let cs = g.add_compute_set("double");
    for i in g.mapping(y) {
        g.add_vertex(
            cs,
            i.tile,
            double(VertexCycles::Worker(1)),
            &[TensorSlice::new(y, i.range)],
        )
        .unwrap();
    }
    let p = Program::sequence([Program::Exchange(ex), Program::Execute(cs)]);
    let mut e = Engine::new(g, p, EngineOptions::default()).unwrap();
    let data = crate::support::uniform(8000, 1, -1.0, 1.0);
    e.write_tensor(x, &data).unwrap();
    let p = e.run();
    let want: Vec<f32> = data.iter().map(|v| 2.0 * v).collect();
    assert_eq!(e.read_tensor::<f32>(y).unwrap(), want);
    // Each tile sends 4,000 bytes (1,000 cycles); the Up(0) links carry
    // 32,000 bytes, then one hop of latency.
    let link = s.link_cycles(32_000, 2) + s.cycles_of_ps(15_000);
    assert!(link > 1000, "{link}");
    assert_eq!(p.exchanges[0].cycles_per_execution, link);
    assert_eq!(p.exchanges[0].link_bytes_per_execution, 32_000);
    // Sync of 4 IPUs: hops = 2, ceil(2 x 2 x 15 ns x 1.33 GHz) = 80.
    assert_eq!(p.cycles.sync, 80);
    // The same traffic within one IPU is tile-bound.
    let mut g = Graph::new(Target::new(s, 2).unwrap());
    let x = g
        .add_tensor(
            "x",
            DType::F32,
            &[8000],
            Mapping::Linear {
                grain: nz(1000),
                tiles: Some(0..8),
            },
        )
        .unwrap();
    let y = g
        .add_tensor(
            "y",
            DType::F32,
            &[8000],
            Mapping::Linear {
                grain: nz(1000),
                tiles: Some(8..16),
            },
        )
        .unwrap();
    let ex = g
        .add_exchange("x to IPU 1", &[(g.all(x), g.all(y))])
        .unwrap();
    let mut e = Engine::new(g, Program::Exchange(ex), EngineOptions::default()).unwrap();
    let p = e.run();
    // The card's 4 links carry it in fewer cycles than the tiles send it.
    assert!(s.link_cycles(32_000, 4) + 20 < 1000);
    assert_eq!(p.cycles.exchange, 1000);
}

#[test]
fn host_streams_move_data_and_cost_host_cycles() {
    let s = spec(4);
    let mut g = Graph::new(Target::single(s));
    let x = g
        .add_tensor("x", DType::Bf16, &[64], Mapping::linear(nz(16)))
        .unwrap();
    let w = g.add_stream("in", x, Direction::ToDevice);
    let r = g.add_stream("out", x, Direction::ToHost);
    let p = Program::sequence([Program::HostWrite(w), Program::HostRead(r)]);
    let mut e = Engine::new(g, p, EngineOptions::default()).unwrap();
    let data: Vec<_> = (0..64)
        .map(|i| tessera_core::fp::bf16::from_f32(i as f32))
        .collect();
    e.stream_write(w, &data).unwrap();
    assert!(e.stream_write(r, &data).is_err());
    let p = e.run();
    assert_eq!(
        e.stream_read::<tessera_core::fp::bf16>(r).unwrap(),
        &data[..]
    );
    assert_eq!(p.cycles.host, 2 * s.host_cycles(128));
    assert_eq!(p.supersteps, 2);
    assert_eq!(p.streams[0].bytes_per_execution, 128);
}

#[test]
fn profile_json_and_trace_shapes() {
    let x = crate::support::uniform(1000, 3, -1.0, 1.0);
    let mut g = Graph::new(target(4));
    let xt = g
        .add_tensor("x", DType::F32, &[1000], Mapping::linear(nz(100)))
        .unwrap();
    let cs = g.add_compute_set("double");
    for i in g.mapping(xt) {
        g.add_vertex(
            cs,
            i.tile,
            double(VertexCycles::Worker(7)),
            &[TensorSlice::new(xt, i.range)],
        )
        .unwrap();
    }
    let p = Program::repeat(3, Program::Execute(cs));
    let mut e = Engine::new(g, p, EngineOptions::default()).unwrap();
    e.write_tensor(xt, &x).unwrap();
    let profile = e.run();
    assert_eq!(profile.compute_sets[0].executions, 3);
    assert_eq!(profile.compute_sets[0].cycles_per_execution, 50 + 6 * 7);
    assert_eq!(profile.cycles.compute, 3 * 92);
    assert_eq!(profile.cycles.sync, 3 * 40);
    assert_eq!(profile.total_cycles, 3 * 132);
    assert_eq!(profile.busiest_tiles.len(), 4);
    let json: Value = serde_json::from_str(&profile.to_json()).unwrap();
    for key in [
        "target",
        "cycles",
        "total_cycles",
        "estimated_seconds",
        "supersteps",
        "wall_seconds",
        "compute_sets",
        "exchanges",
        "streams",
        "memory",
        "busiest_tiles",
    ] {
        assert!(json.get(key).is_some(), "{key}");
    }
    for key in ["compute", "sync", "exchange", "host"] {
        assert!(json["cycles"][key].is_u64(), "{key}");
    }
    assert_eq!(json["compute_sets"][0]["name"], "double");
    assert_eq!(json["memory"]["histogram"].as_array().unwrap().len(), 16);
    assert_eq!(json["memory"]["max"], 1200 + 24 + 512); // 300 f32, a vertex, its code
    let trace = profile.chrome_trace();
    let events = trace["traceEvents"].as_array().unwrap();
    let complete: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert_eq!(complete.len(), 6); // three compute phases, three syncs
    let mut last = -1.0;
    for ev in &complete {
        let ts = ev["ts"].as_f64().unwrap();
        assert!(ts > last);
        last = ts;
        assert!(ev["dur"].as_f64().unwrap() > 0.0);
        assert!(ev["name"].is_string() && ev["pid"].is_u64() && ev["tid"].is_u64());
    }
    assert_eq!(complete[0]["name"], "double");
    assert_eq!(complete[0]["args"]["cycles"], 92);
    assert_eq!(complete[1]["cat"], "sync");
    let table = profile.to_string();
    assert!(
        table.contains("double") && table.contains("memory per tile"),
        "{table}"
    );
}

#[test]
fn worker_streams_per_replica() {
    let run = |kind, replica| {
        let mut g = Graph::new(target(3));
        let out = g
            .add_tensor("bits", DType::I64, &[18], Mapping::linear(nz(6)))
            .unwrap();
        let cs = g.add_compute_set("bits");
        let c: Arc<dyn Codelet> = Arc::new(WorkerBits {
            kind,
            fields: [FieldSpec::new(DType::I64, Access::Write)],
        });
        for i in g.mapping(out) {
            g.add_vertex(cs, i.tile, c.clone(), &[TensorSlice::new(out, i.range)])
                .unwrap();
        }
        let opts = EngineOptions {
            seeds: Seeds::new(42, replica),
            ..EngineOptions::default()
        };
        let mut e = Engine::new(g, Program::Execute(cs), opts).unwrap();
        e.run();
        e.read_tensor::<i64>(out).unwrap()
    };
    let (a, b) = (run(StreamKind::Identical, 0), run(StreamKind::Identical, 1));
    assert_eq!(a, b);
    let (c, d) = (run(StreamKind::Differing, 0), run(StreamKind::Differing, 1));
    assert!(c.iter().zip(&d).all(|(x, y)| x != y));
    // Every (tile, worker) has its own stream.
    let mut seen = a.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), 18);
    // And it is the documented derivation.
    let s = Seeds::new(42, 1);
    assert_eq!(
        d[7],
        i64::from(s.worker(StreamKind::Differing, 1, 1, 6).bits(0))
    );
}
