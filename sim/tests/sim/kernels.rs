//! The tile-parallel kernels equal the single-call core kernels bit for
//! bit, for several tile counts and mappings (even, uneven, splitting
//! blocks, several intervals per tile, several IPUs).

use core::num::NonZeroU64;

use tessera_core::fp::{self, Element, HalfFloat, Overflow, Stochastic, bf16, f16};
use tessera_core::kernels;
use tessera_core::optim::{Lamb, LambConfig, Param, Precision, Step};
use tessera_core::rng::RandomStream;
use tessera_sim::ipu::{
    DType, Engine, EngineOptions, Graph, Interval, Mapping, Program, Scalar, Target, TensorId,
};
use tessera_sim::kernels::lamb::LambOptions;
use tessera_sim::kernels::{ReduceKind, convert_sr, lamb, reduce};

use crate::support::{spec, target, uniform};

const fn nz(x: u64) -> NonZeroU64 {
    NonZeroU64::new(x).unwrap()
}

/// The mappings every kernel is tested with, for `n` elements over
/// `tiles` tiles (named for failure messages).
fn mappings(n: u64, tiles: u32) -> Vec<(&'static str, Mapping)> {
    let s = RandomStream::new(99, u64::from(tiles));
    // Uneven: up to 3 intervals per tile at arbitrary cut points, tiles
    // in a scrambled order.
    let pieces = 3 * u64::from(tiles);
    let mut cuts: Vec<u64> = (0..pieces - 1).map(|k| u64::from(s.bits(k)) % n).collect();
    cuts.push(0);
    cuts.push(n);
    cuts.sort_unstable();
    let uneven = cuts
        .windows(2)
        .enumerate()
        .map(|(k, w)| Interval::new((k as u32 * 7 + 3) % tiles, w[0]..w[1]))
        .collect();
    vec![
        ("linear 256", Mapping::linear(nz(256))),
        ("linear 1", Mapping::linear(nz(1))),
        ("linear 100", Mapping::linear(nz(100))),
        ("memory-aware 64", Mapping::MemoryAware { grain: nz(64) }),
        ("uneven", Mapping::Explicit(uneven)),
    ]
}

/// Values with a spread of magnitudes (tiny, subnormal-range for f16,
/// large) and signs.
fn spread(n: usize, seed: u64) -> Vec<f32> {
    let u = uniform(n, seed, -1.0, 1.0);
    u.iter()
        .enumerate()
        .map(|(i, &x)| x * [1e-6f32, 1e-3, 1.0, 1e3, 7e4][i % 5])
        .collect()
}

fn sr_case<H: HalfFloat + Scalar>(tiles: u32, n: u64) {
    let x = spread(n as usize, 5);
    let sr = Stochastic::new(RandomStream::new(11, 3), Overflow::Saturate);
    let mut want = vec![H::default(); n as usize];
    fp::f32_to_half_sr_slice(&x, &mut want, sr, 0);
    for (name, mapping) in mappings(n, tiles) {
        for same in [true, false] {
            let mut g = Graph::new(target(tiles));
            // A tensor on tile 0 first, so the memory-aware mapper is uneven.
            g.add_tensor("pad", DType::F32, &[999], Mapping::one_tile(0, 999))
                .unwrap();
            let src = g
                .add_tensor("x", DType::F32, &[n], mapping.clone())
                .unwrap();
            let dst_map = if same {
                Mapping::Like(src)
            } else {
                Mapping::linear(nz(33))
            };
            let dst = g.add_tensor("h", H::DTYPE, &[n], dst_map).unwrap();
            let p = convert_sr(&mut g, "convert", src, dst, sr).unwrap();
            let mut e = Engine::new(g, p, EngineOptions::default()).unwrap();
            e.write_tensor(src, &x).unwrap();
            let profile = e.run();
            let got: Vec<H> = e.read_tensor(dst).unwrap();
            assert!(
                got == want,
                "{} {tiles} tiles, {name}, same mapping {same}",
                H::NAME
            );
            assert!(profile.cycles.compute > 0);
            assert_eq!(profile.cycles.exchange > 0, !same && tiles > 1, "{name}");
        }
    }
}

#[test]
fn stochastic_rounding_equals_the_single_call() {
    for tiles in [1, 3, 16] {
        sr_case::<f16>(tiles, 20_000);
        sr_case::<bf16>(tiles, 20_000);
    }
}

/// Runs `steps` tile-parallel LAMB steps and compares with as many
/// [`Lamb::step`] calls.
fn lamb_case<W, G>(target: Target, mapping: Mapping, label: &str, n: usize, fan_in: usize)
where
    W: Element + Scalar,
    G: Element + Scalar,
{
    let lamb_opt = Lamb::new(LambConfig {
        weight_decay: 0.01,
        ..LambConfig::default()
    })
    .unwrap();
    let precision = Precision {
        weights: fp::Round::STOCHASTIC,
        state: fp::Round::NEAREST_EVEN,
        seed: 1234,
    };
    let w0: Vec<W> = uniform(n, 1, -1.0, 1.0)
        .iter()
        .map(|&x| W::store(x, fp::Rounding::Nearest, 0))
        .collect();
    let g0: Vec<G> = uniform(n, 2, -0.01, 0.01)
        .iter()
        .map(|&x| G::store(x, fp::Rounding::Nearest, 0))
        .collect();
    let m0 = uniform(n, 3, -0.001, 0.001);
    let v0: Vec<f32> = uniform(n, 4, 0.0, 1e-5);
    let steps = 2;
    // The reference: whole-tensor steps 1 and 2.
    let (mut w, mut m, mut v) = (w0.clone(), m0.clone(), v0.clone());
    for t in 1..=steps {
        let mut p = Param::new(9, &mut w, &g0, [&mut m, &mut v]);
        lamb_opt.step(Step::after(t - 1), &precision, &mut p);
    }
    let mut graph = Graph::new(target);
    graph
        .add_tensor("pad", DType::F32, &[500], Mapping::one_tile(0, 500))
        .unwrap();
    let n64 = n as u64;
    let wt = graph.add_tensor("w", W::DTYPE, &[n64], mapping).unwrap();
    let like = |g: &mut Graph, name, d| g.add_tensor(name, d, &[n64], Mapping::Like(wt)).unwrap();
    let gt = like(&mut graph, "g", G::DTYPE);
    let mt = like(&mut graph, "m", DType::F32);
    let vt = like(&mut graph, "v", DType::F32);
    let options = LambOptions {
        precision,
        id: 9,
        fan_in,
        ..LambOptions::new(lamb_opt)
    };
    let lp = lamb::<W, G, f32>(&mut graph, "lamb", wt, gt, [mt, vt], &options).unwrap();
    let program = Program::repeat(steps, lp.program.clone());
    let mut e = Engine::new(graph, program, EngineOptions::default()).unwrap();
    e.write_tensor(wt, &w0).unwrap();
    e.write_tensor(gt, &g0).unwrap();
    e.write_tensor(mt, &m0).unwrap();
    e.write_tensor(vt, &v0).unwrap();
    let profile = e.run();
    let got_w: Vec<W> = e.read_tensor(wt).unwrap();
    assert!(got_w == w, "weights: {label}");
    assert!(got_w != w0, "the steps changed the weights: {label}");
    assert!(e.read_tensor::<f32>(mt).unwrap() == m, "m: {label}");
    assert!(e.read_tensor::<f32>(vt).unwrap() == v, "v: {label}");
    let counters = e.read_tensor::<i64>(lp.steps).unwrap();
    assert!(counters.iter().all(|&c| c == steps as i64), "{label}");
    assert!(profile.cycles.compute > 0 && profile.cycles.sync > 0);
    if lp.tiles.len() > 1 {
        assert!(profile.cycles.exchange > 0, "{label}");
    }
}

#[test]
fn lamb_equals_the_fused_kernel() {
    let n = 5000;
    for tiles in [1, 3, 8, 13] {
        for (name, mapping) in mappings(n as u64, tiles) {
            let label = format!("{tiles} tiles, {name}");
            lamb_case::<f32, f32>(target(tiles), mapping, &label, n, 8);
        }
    }
}

#[test]
fn lamb_with_f16_weights_and_other_fan_ins() {
    let n = 3000;
    for (tiles, fan_in) in [(5, 2), (16, 3)] {
        for (name, mapping) in mappings(n as u64, tiles) {
            let label = format!("f16, {tiles} tiles, fan-in {fan_in}, {name}");
            lamb_case::<f16, f16>(target(tiles), mapping, &label, n, fan_in);
        }
    }
}

#[test]
fn lamb_across_ipus() {
    let t = Target::new(spec(4), 4).unwrap();
    for (name, mapping) in mappings(4000, 16) {
        let label = format!("4 IPUs, {name}");
        lamb_case::<f32, bf16>(t, mapping, &label, 4000, 4);
    }
}

fn reduce_case<T: Scalar>(tiles: u32, x: &[T], y: &[T], want_sq: f32, want_dot: f32) {
    let n = x.len() as u64;
    for (name, mapping) in mappings(n, tiles) {
        for dot in [false, true] {
            let mut g = Graph::new(target(tiles));
            let xt = g.add_tensor("x", T::DTYPE, &[n], mapping.clone()).unwrap();
            let yt = g
                .add_tensor("y", T::DTYPE, &[n], Mapping::Like(xt))
                .unwrap();
            let kind = if dot {
                ReduceKind::Dot(yt)
            } else {
                ReduceKind::SumOfSquares
            };
            let r = reduce(&mut g, "norm", xt, kind, 4, true).unwrap();
            let mut e = Engine::new(g, r.program.clone(), EngineOptions::default()).unwrap();
            e.write_tensor(xt, x).unwrap();
            e.write_tensor(yt, y).unwrap();
            e.run();
            let want = if dot { want_dot } else { want_sq };
            let got = r.value(&e).unwrap();
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{tiles} tiles, {name}, dot {dot}"
            );
            // Every tile that holds x got the same total.
            let totals = e.read_tensor::<i64>(r.totals.unwrap()).unwrap();
            let root = e.read_tensor::<i64>(r.rows).unwrap();
            for row in totals.chunks_exact(13) {
                assert_eq!(row, &root[..13]);
            }
        }
    }
}

#[test]
fn reductions_equal_the_single_call() {
    let n = 7001;
    let x = spread(n, 8);
    let y = spread(n, 9);
    let (sq, dot) = (kernels::sum_of_squares(&x), kernels::dot(&x, &y));
    let xh: Vec<bf16> = x.iter().map(|&v| bf16::from_f32(v)).collect();
    let yh: Vec<bf16> = y.iter().map(|&v| bf16::from_f32(v)).collect();
    let (sqh, doth) = (kernels::sum_of_squares(&xh), kernels::dot(&xh, &yh));
    for tiles in [1, 4, 11] {
        reduce_case(tiles, &x, &y, sq, dot);
        reduce_case(tiles, &xh, &yh, sqh, doth);
    }
}

#[test]
fn lamb_profile_names_its_phases() {
    let n = 256 * 40;
    let mut g = Graph::new(target(8));
    let m = Mapping::linear(nz(256));
    let w = g.add_tensor("w", DType::F32, &[n], m).unwrap();
    let t: Vec<TensorId> = ["g", "m", "v"]
        .iter()
        .map(|name| {
            g.add_tensor(name, DType::F32, &[n], Mapping::Like(w))
                .unwrap()
        })
        .collect();
    let opts = LambOptions::new(Lamb::new(LambConfig::default()).unwrap());
    let lp = lamb::<f32, f32, f32>(&mut g, "lamb", w, t[0], [t[1], t[2]], &opts).unwrap();
    assert!(lp.halo.is_none());
    let mut e = Engine::new(g, lp.program, EngineOptions::default()).unwrap();
    let p = e.run();
    let names: Vec<&str> = p.compute_sets.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        ["lamb.merge0", "lamb.partials", "lamb.apply", "lamb.advance"]
    );
    // 8 rows, fan-in 8: one level (7 rows of 312 bytes into row 0's inbox),
    // then the broadcast of 312 bytes.
    let ex: Vec<(&str, u64)> = p
        .exchanges
        .iter()
        .map(|e| (e.name.as_str(), e.bytes_per_execution))
        .collect();
    assert_eq!(ex, [("lamb.level0", 7 * 312), ("lamb.broadcast", 312)]);
    // Phases: partials, merge, apply, advance each end with a sync.
    assert_eq!(p.supersteps, 4);
}
