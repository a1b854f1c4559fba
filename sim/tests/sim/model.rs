//! The MLP on tiles: block layouts,
//! gradients against finite differences of an f64 oracle, invariance under
//! the number of tiles, f16 rounding, initialisation, learning, errors.

use tessera_core::fp::{HalfFloat, f16};
use tessera_sim::ipu::{self, DType, Engine, EngineOptions, Graph, Mapping, Target};
use tessera_sim::kernels::matmul::{
    BlockLayout, GemmShape, Operand, Output, ProductPlan, gemm, matmul,
};
use tessera_sim::model::{
    Activation, Compute, GroupSum, MemoryEstimate, MlpConfig, Model, ModelError, NoGroup,
    ParamKind, Placement,
};
use tessera_sim::{IpuParams, IpuSpec};

use crate::support::{bits, target, uniform};

fn config(inputs: usize, hidden: &[usize], classes: usize, act: Activation, bn: bool) -> MlpConfig {
    MlpConfig {
        inputs,
        hidden: hidden.to_vec(),
        classes,
        activation: act,
        batch_norm: bn,
    }
}

fn labels(n: usize, classes: usize, seed: u64) -> Vec<u32> {
    uniform(n, seed, 0.0, classes as f32)
        .into_iter()
        .map(|x| (x as u32).min(classes as u32 - 1))
        .collect()
}

#[test]
fn block_layout_round_trips() {
    let l = BlockLayout::grid(7, 10, 3, 4, 5);
    assert_eq!((l.row_blocks(), l.col_blocks()), (3, 4));
    let x: Vec<f32> = (0..70).map(|v| v as f32).collect();
    let blocked = l.from_row_major(&x);
    for r in 0..7 {
        for c in 0..10 {
            assert_eq!(blocked[l.offset(r, c) as usize], x[r * 10 + c]);
        }
    }
    assert_eq!(l.to_row_major(&blocked), x);
    // Small products get few blocks, large ones up to one per tile.
    assert_eq!(
        BlockLayout::plan(4, 128, 64, 1472, 1 << 16, false, false).col_blocks(),
        1
    );
    let big = BlockLayout::plan(64, 1024, 1024, 1472, 1 << 16, false, false);
    assert_eq!(big.row_blocks() * big.col_blocks(), 1024);
}

/// The loss of the network in f64: `sum over samples of CE`, with batch
/// norm over the micro-batch (biased variance).
fn oracle_loss(cfg: &MlpConfig, params: &[Vec<f64>], x: &[f64], labels: &[u32]) -> f64 {
    let batch = labels.len();
    let mut a: Vec<f64> = x.to_vec();
    let mut width = cfg.inputs;
    let mut k = 0;
    let layers = cfg.hidden.len() + 1;
    for l in 0..layers {
        let out = if l + 1 < layers {
            cfg.hidden[l]
        } else {
            cfg.classes
        };
        let (w, b) = (&params[k], &params[k + 1]);
        k += 2;
        let mut z = vec![0.0; batch * out];
        for s in 0..batch {
            for o in 0..out {
                let mut acc = b[o];
                for i in 0..width {
                    acc += a[s * width + i] * w[i * out + o];
                }
                z[s * out + o] = acc;
            }
        }
        if l + 1 < layers {
            if cfg.batch_norm {
                let (gamma, beta) = (&params[k], &params[k + 1]);
                k += 2;
                for o in 0..out {
                    let mean = (0..batch).map(|s| z[s * out + o]).sum::<f64>() / batch as f64;
                    let var = (0..batch)
                        .map(|s| (z[s * out + o] - mean).powi(2))
                        .sum::<f64>()
                        / batch as f64;
                    for s in 0..batch {
                        let h = (z[s * out + o] - mean) / (var + 1e-5).sqrt();
                        z[s * out + o] = gamma[o] * h + beta[o];
                    }
                }
            }
            for v in &mut z {
                *v = match cfg.activation {
                    Activation::Relu => v.max(0.0),
                    Activation::Gelu => {
                        let c = (2.0 / core::f64::consts::PI).sqrt();
                        0.5 * *v * (1.0 + (c * (*v + 0.044715 * *v * *v * *v)).tanh())
                    }
                };
            }
        }
        a = z;
        width = out;
    }
    let mut total = 0.0;
    for s in 0..batch {
        let row = &a[s * width..(s + 1) * width];
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        total += lse - row[labels[s] as usize];
    }
    total
}

fn check_gradients(cfg: &MlpConfig, batch: usize, tiles: u32) {
    // Nonzero biases and betas: with zero biases a sample whose inputs to a
    // ReLU layer are all zero sits on the kink, where finite differences
    // see a slope of 1/2.
    let mut params = cfg.network().init(3).unwrap();
    for (k, (p, spec)) in params
        .iter_mut()
        .zip(cfg.network().params().unwrap())
        .enumerate()
    {
        if spec.kind != ParamKind::Weight {
            let noise = uniform(p.len(), 50 + k as u64, -0.1, 0.1);
            p.iter_mut().zip(noise).for_each(|(v, n)| *v += n);
        }
    }
    let x = uniform(batch * cfg.inputs, 4, -1.0, 1.0);
    let y = labels(batch, cfg.classes, 5);
    let mut mlp = Model::new(&cfg.network(), target(tiles), batch, Compute::F32).unwrap();
    let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    mlp.set_params(&refs).unwrap();
    let mut grads = vec![Vec::new(); params.len()];
    let scale = 2.0f32;
    let out = mlp
        .train_micro_batch(&x, &y, scale, &mut NoGroup, &mut grads)
        .unwrap();
    let p64: Vec<Vec<f64>> = params
        .iter()
        .map(|p| p.iter().map(|&v| f64::from(v)).collect())
        .collect();
    let x64: Vec<f64> = x.iter().map(|&v| f64::from(v)).collect();
    let loss = oracle_loss(cfg, &p64, &x64, &y);
    assert!(
        (f64::from(out.loss_sum) - loss).abs() < 1e-4 * loss.max(1.0),
        "{} vs {loss}",
        out.loss_sum
    );
    let h = 1e-5;
    for (i, spec) in cfg.network().params().unwrap().iter().enumerate() {
        assert_eq!(grads[i].len(), spec.len(), "{}", spec.name);
        for j in 0..spec.len() {
            let mut p = p64.clone();
            p[i][j] += h;
            let up = oracle_loss(cfg, &p, &x64, &y);
            p[i][j] -= 2.0 * h;
            let down = oracle_loss(cfg, &p, &x64, &y);
            let fd = f64::from(scale) * (up - down) / (2.0 * h);
            let got = f64::from(grads[i][j]);
            assert!(
                (got - fd).abs() <= 2e-4 * fd.abs().max(1.0),
                "{}[{j}]: {got} vs finite difference {fd}",
                spec.name
            );
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    check_gradients(&config(5, &[7, 6], 4, Activation::Relu, false), 6, 4);
    check_gradients(&config(5, &[7], 3, Activation::Gelu, false), 5, 3);
}

#[test]
fn batch_norm_gradients_match_finite_differences() {
    check_gradients(&config(5, &[7, 6], 4, Activation::Gelu, true), 8, 4);
    check_gradients(&config(4, &[6], 3, Activation::Relu, true), 5, 1);
}

/// Every output of a training run, as bits.
fn run_bits(
    cfg: &MlpConfig,
    batch: usize,
    tiles: u32,
    compute: Compute,
) -> (Vec<Vec<u32>>, u32, usize) {
    let mut params = cfg.network().init(7).unwrap();
    if compute == Compute::F16 {
        for p in &mut params {
            for v in p.iter_mut() {
                *v = <f16 as HalfFloat>::from_f32(*v).to_f32();
            }
        }
    }
    let spec = IpuSpec::new(IpuParams {
        tiles,
        ..IpuParams::default()
    })
    .unwrap();
    let mut mlp = Model::new(&cfg.network(), Target::single(spec), batch, compute).unwrap();
    let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    mlp.set_params(&refs).unwrap();
    let x = uniform(batch * cfg.inputs, 8, -2.0, 2.0);
    let y = labels(batch, cfg.classes, 9);
    let mut grads = vec![Vec::new(); params.len()];
    let out = mlp
        .train_micro_batch(&x, &y, 64.0, &mut NoGroup, &mut grads)
        .unwrap();
    let eval = mlp.evaluate(&x, &y).unwrap();
    let mut all: Vec<Vec<u32>> = grads.iter().map(|g| bits(g)).collect();
    for (_, b) in mlp.buffers() {
        all.push(bits(&b));
    }
    all.push(vec![eval.loss_sum.to_bits()]);
    (all, out.loss_sum.to_bits(), out.correct)
}

#[test]
fn results_do_not_depend_on_the_number_of_tiles() {
    for (cfg, compute) in [
        (
            config(48, &[160, 64], 10, Activation::Relu, false),
            Compute::F32,
        ),
        (
            config(48, &[160, 64], 10, Activation::Gelu, true),
            Compute::F16,
        ),
    ] {
        // Products of 0.4 Mflop: one block on one tile, up to 6 on more.
        let reference = run_bits(&cfg, 24, 1, compute);
        for tiles in [7, 64, 1472] {
            assert_eq!(
                run_bits(&cfg, 24, tiles, compute),
                reference,
                "{tiles} tiles, {cfg:?}"
            );
        }
    }
}

#[test]
fn f16_mode_rounds_gradients() {
    let cfg = config(16, &[32], 5, Activation::Gelu, true);
    let (grads, loss, _) = run_bits(&cfg, 8, 16, Compute::F16);
    assert!(f32::from_bits(loss).is_finite());
    let mut any_changed = false;
    for g in &grads[..cfg.network().params().unwrap().len()] {
        for &b in g {
            let v = f32::from_bits(b);
            let r = <f16 as HalfFloat>::from_f32(v).to_f32();
            assert_eq!(r.to_bits(), b, "{v} is not an f16 value");
        }
    }
    // The f32 run differs (its values are not all f16).
    let (g32, _, _) = run_bits(&cfg, 8, 16, Compute::F32);
    for g in &g32[..cfg.network().params().unwrap().len()] {
        any_changed |= g.iter().any(|&b| {
            let v = f32::from_bits(b);
            <f16 as HalfFloat>::from_f32(v).to_f32().to_bits() != b
        });
    }
    assert!(any_changed);
}

#[test]
fn init_is_deterministic_and_pinned() {
    let cfg = config(8, &[16, 4], 3, Activation::Relu, true);
    let a = cfg.network().init(1).unwrap();
    assert_eq!(a, cfg.network().init(1).unwrap());
    assert_ne!(a, cfg.network().init(2).unwrap());
    let specs = cfg.network().params().unwrap();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "layer0.weight",
            "layer0.bias",
            "layer0.bn.gamma",
            "layer0.bn.beta",
            "layer1.weight",
            "layer1.bias",
            "layer1.bn.gamma",
            "layer1.bn.beta",
            "layer2.weight",
            "layer2.bias"
        ]
    );
    assert_eq!(specs[2].kind, ParamKind::Norm);
    assert_eq!(specs[8].shape, [4, 3]);
    for (p, s) in a.iter().zip(&specs) {
        assert_eq!(p.len(), s.len());
    }
    assert!(a[1].iter().all(|&v| v == 0.0) && a[2].iter().all(|&v| v == 1.0));
    // He-normal: about sqrt(2 / 8) = 0.5.
    let w = &a[0];
    let var = w.iter().map(|v| v * v).sum::<f32>() / w.len() as f32;
    assert!((var.sqrt() - 0.5).abs() < 0.1, "{var}");
    // FNV-1a over every value's bits, pinned.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in &a {
        for v in p {
            for byte in v.to_bits().to_le_bytes() {
                h = (h ^ u64::from(byte)).wrapping_mul(0x100_0000_01b3);
            }
        }
    }
    assert_eq!(h, 0x782c_a8b4_4ee0_313f, "fingerprint {h:#x}");
}

#[test]
fn a_tiny_net_learns_a_separable_problem() {
    let cfg = config(4, &[8], 2, Activation::Relu, false);
    let batch = 16;
    let mut params = cfg.network().init(11).unwrap();
    let mut mlp = Model::new(&cfg.network(), target(8), batch, Compute::F32).unwrap();
    let mut grads = vec![Vec::new(); params.len()];
    let mut losses = Vec::new();
    for step in 0..300u64 {
        let x = uniform(batch * 4, 100 + step, -1.0, 1.0);
        let y: Vec<u32> = x.chunks(4).map(|s| u32::from(s[0] + s[1] > 0.0)).collect();
        let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
        mlp.set_params(&refs).unwrap();
        let out = mlp
            .train_micro_batch(&x, &y, 1.0 / batch as f32, &mut NoGroup, &mut grads)
            .unwrap();
        losses.push(out.loss_sum / batch as f32);
        for (p, g) in params.iter_mut().zip(&grads) {
            for (p, g) in p.iter_mut().zip(g) {
                *p -= 0.5 * g;
            }
        }
    }
    let first: f32 = losses[..20].iter().sum::<f32>() / 20.0;
    let last: f32 = losses[280..].iter().sum::<f32>() / 20.0;
    assert!(last < 0.4 * first, "loss {first} -> {last}");
    let x = uniform(batch * 4, 9999, -1.0, 1.0);
    let y: Vec<u32> = x.chunks(4).map(|s| u32::from(s[0] + s[1] > 0.0)).collect();
    assert!(mlp.evaluate(&x, &y).unwrap().correct >= 13);
}

/// Counts its calls and doubles the values (a group of two identical
/// replicas).
struct Twice(usize);

impl GroupSum for Twice {
    fn sum(&mut self, values: &mut [f32]) -> Result<(), ModelError> {
        self.0 += 1;
        values.iter_mut().for_each(|v| *v *= 2.0);
        Ok(())
    }
}

struct Failing;

impl GroupSum for Failing {
    fn sum(&mut self, _: &mut [f32]) -> Result<(), ModelError> {
        Err(ModelError::Group {
            reason: "link down".into(),
        })
    }
}

#[test]
fn batch_norm_uses_the_group_and_keeps_running_statistics() {
    let cfg = config(6, &[8, 5], 3, Activation::Relu, true);
    let params = cfg.network().init(2).unwrap();
    let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    let x = uniform(4 * 6, 1, -1.0, 1.0);
    let y = labels(4, 3, 2);
    let run = |group: &mut dyn GroupSum| {
        let mut mlp = Model::new(&cfg.network(), target(4), 4, Compute::F32).unwrap();
        mlp.set_params(&refs).unwrap();
        let mut grads = vec![Vec::new(); params.len()];
        mlp.train_micro_batch(&x, &y, 1.0, group, &mut grads)
            .map(|_| (grads, mlp.buffers()))
    };
    let (alone, buffers) = run(&mut NoGroup).unwrap();
    // A group of two identical replicas has the same statistics.
    let mut twice = Twice(0);
    let (paired, _) = run(&mut twice).unwrap();
    // Three sums per batch-norm layer: the mean, the squared deviations
    // from it, the backward pass's.
    assert_eq!(twice.0, 6);
    for (a, b) in alone.iter().zip(&paired) {
        for (u, v) in a.iter().zip(b) {
            assert!((u - v).abs() <= 1e-5 * u.abs().max(1.0), "{u} vs {v}");
        }
    }
    assert_eq!(buffers.len(), 4);
    assert_eq!(buffers[0].0, "layer0.bn.running_mean");
    assert!(buffers[0].1.iter().any(|&m| m != 0.0));
    assert!(matches!(run(&mut Failing), Err(ModelError::Group { .. })));
    // Buffers round-trip.
    let mut mlp = Model::new(&cfg.network(), target(4), 4, Compute::F32).unwrap();
    mlp.set_buffers(&buffers).unwrap();
    assert_eq!(mlp.buffers(), buffers);
    assert!(matches!(
        mlp.set_buffers(&[("nope".into(), vec![])]),
        Err(ModelError::UnknownBuffer { .. })
    ));
}

#[test]
fn bad_inputs_are_typed_errors() {
    let cfg = config(3, &[4], 2, Activation::Relu, false);
    assert!(matches!(
        config(3, &[0], 2, Activation::Relu, false).validate(),
        Err(ModelError::ZeroWidth { .. })
    ));
    assert_eq!(
        Model::new(&cfg.network(), target(2), 0, Compute::F32).unwrap_err(),
        ModelError::ZeroMicroBatch
    );
    let mut mlp = Model::new(&cfg.network(), target(2), 2, Compute::F32).unwrap();
    assert_eq!(mlp.micro_batch(), 2);
    assert_eq!(
        mlp.set_params(&[&[0.0; 12]]).unwrap_err(),
        ModelError::ParamCount {
            expected: 4,
            got: 1
        }
    );
    let bad: Vec<&[f32]> = vec![&[0.0; 12], &[0.0; 4], &[0.0; 8], &[0.0; 3]];
    assert_eq!(
        mlp.set_params(&bad).unwrap_err(),
        ModelError::ParamLength {
            name: "layer1.bias".into(),
            expected: 2,
            got: 3
        }
    );
    let mut grads = vec![Vec::new(); 4];
    let x = [0.5f32; 6];
    let mut train = |x: &[f32], y: &[u32], scale: f32| {
        mlp.train_micro_batch(x, y, scale, &mut NoGroup, &mut grads)
            .unwrap_err()
    };
    assert_eq!(
        train(&x[..5], &[0, 1], 1.0),
        ModelError::InputLength {
            expected: 6,
            got: 5
        }
    );
    assert_eq!(
        train(&x, &[0], 1.0),
        ModelError::LabelCount {
            expected: 2,
            got: 1
        }
    );
    assert_eq!(
        train(&x, &[0, 2], 1.0),
        ModelError::LabelOutOfRange {
            sample: 1,
            label: 2,
            classes: 2
        }
    );
    assert_eq!(train(&x, &[0, 1], 0.0), ModelError::InvalidScale(0.0));
    assert!(train(&x, &[0, 1], f32::NAN).to_string().contains("scale"));
    assert!(mlp.memory().tiles.len() == 2);
    // A tile without the memory is a typed error carrying the engine's.
    let small = IpuSpec::new(IpuParams {
        tiles: 1,
        memory_per_tile: 20_000,
        ..IpuParams::default()
    })
    .unwrap();
    let big = config(64, &[128], 10, Activation::Relu, false);
    match Model::new(&big.network(), Target::single(small), 4, Compute::F32) {
        Err(ModelError::Build(tessera_sim::ipu::BuildError::OutOfTileMemory(oom))) => {
            assert!(oom.needed > oom.available);
        }
        other => panic!("expected out of memory, got {other:?}"),
    }
}

#[test]
fn matmul_reads_resident_blocks_in_place() {
    // B laid out in C's column blocks on C's tiles: no exchange for B.
    let (m, k, n) = (3, 40, 50);
    let shape = GemmShape {
        m,
        k,
        n,
        a_transposed: false,
        b_transposed: false,
    };
    let a = uniform(m * k, 1, -1.0, 1.0);
    let b = uniform(k * n, 2, -1.0, 1.0);
    let mut whole = vec![0.0; m * n];
    gemm(shape, &a, &b, &mut whole);
    let mut g = Graph::new(target(5));
    let c_layout = BlockLayout::grid(m, n, 1, 5, 5);
    let b_layout = c_layout.columns_like(k);
    let at = g
        .add_tensor(
            "a",
            DType::F32,
            &[(m * k) as u64],
            Mapping::one_tile(0, (m * k) as u64),
        )
        .unwrap();
    let bt = g
        .add_tensor("b", DType::F32, &[(k * n) as u64], b_layout.mapping())
        .unwrap();
    let c = g
        .add_tensor("c", DType::F32, &[(m * n) as u64], c_layout.mapping())
        .unwrap();
    let a_op = Operand {
        tensor: at,
        layout: BlockLayout::dense(m, k, 0),
        transposed: false,
    };
    let b_op = Operand {
        tensor: bt,
        layout: b_layout.clone(),
        transposed: false,
    };
    let p = matmul(
        &mut g,
        "mm",
        &a_op,
        &b_op,
        c,
        &ProductPlan::unsplit(&c_layout, k),
        (
            tessera_sim::ipu::Kernel::MatmulF16,
            tessera_sim::kernels::matmul::Accumulator::F32,
        ),
        Output::F32,
    )
    .unwrap();
    let mut e = Engine::new(g, p, EngineOptions::default()).unwrap();
    e.write_tensor(at, &a).unwrap();
    e.write_tensor(bt, &b_layout.from_row_major(&b)).unwrap();
    let profile = e.run();
    assert_eq!(
        bits(&c_layout.to_row_major(&e.read_tensor::<f32>(c).unwrap())),
        bits(&whole)
    );
    // Only A (480 B) moves, multicast to the four tiles other than its
    // own (where it is read in place too).
    assert_eq!(profile.cycles.exchange, 480 / 4);
}

/// The estimate's memory against the built engines': per tile, the
/// tensors, the vertex state and the code equal, the exchange code at most
/// the engine's (only the receiving side of a product's gathers counted).
fn assert_estimate_bounds_engine(
    cfg: &MlpConfig,
    target: Target,
    placement: &Placement,
    batch: usize,
    compute: Compute,
) {
    let estimate = MemoryEstimate::of(&cfg.network(), target, placement, batch, compute).unwrap();
    let mlp = Model::placed(&cfg.network(), target, placement, batch, compute).unwrap();
    let what = format!("{cfg:?} {placement:?} batch {batch} {compute:?}");
    for (measured, built) in [
        (&estimate.train, mlp.memory()),
        (&estimate.eval, mlp.inference_memory()),
    ] {
        assert_eq!(measured.capacity, built.capacity);
        assert_eq!(measured.tiles.len(), built.tiles.len());
        for (t, (m, b)) in measured.tiles.iter().zip(&built.tiles).enumerate() {
            assert_eq!(m.tensors, b.tensors, "tile {t}: {what}");
            assert_eq!(m.vertex_state, b.vertex_state, "tile {t}: {what}");
            assert_eq!(m.code, b.code, "tile {t}: {what}");
            assert!(m.exchange <= b.exchange, "tile {t}: {what}");
        }
        assert!(measured.summary(1).max <= built.summary(1).max, "{what}");
    }
    // The engines hold at least every tensor's values on the host.
    let tensors: u64 = [mlp.memory(), mlp.inference_memory()]
        .iter()
        .flat_map(|m| m.tiles.iter().map(|t| t.tensors))
        .sum();
    assert!(estimate.host_bytes >= tensors / 2, "{what}");
}

#[test]
fn the_memory_estimate_agrees_with_the_engines_accounting() {
    let digits = config(64, &[128, 64], 10, Activation::Relu, false);
    let bn = config(64, &[128, 64], 10, Activation::Gelu, true);
    let wide = config(300, &[512, 256], 17, Activation::Relu, false);
    let spec = IpuSpec::MK2_GC200;
    let one = Target::single(spec);
    let two = Target::new(spec, 2).unwrap();
    assert_estimate_bounds_engine(&digits, one, &Placement::Spread, 8, Compute::F16);
    assert_estimate_bounds_engine(&bn, one, &Placement::Spread, 8, Compute::F32);
    assert_estimate_bounds_engine(&wide, one, &Placement::Spread, 16, Compute::F16);
    assert_estimate_bounds_engine(&wide, two, &Placement::Spread, 4, Compute::F32);
    assert_estimate_bounds_engine(&bn, two, &Placement::Ipus(vec![0, 0, 1]), 8, Compute::F16);
    assert_estimate_bounds_engine(&digits, target(16), &Placement::Spread, 5, Compute::F32);
}

#[test]
fn the_estimate_refuses_what_the_engine_refuses_without_building_it() {
    // Wider and wider single hidden layers on a 16-tile IPU: the engine
    // runs out of tile memory from some width on. The estimate refuses a
    // subset of those (it never refuses a model the engine accepts), and
    // its tile is one the engine finds over too.
    let spec = IpuSpec::MK2_GC200;
    let (mut both, mut neither) = (0, 0);
    for width in [512, 4096, 16_384, 65_536] {
        let cfg = config(64, &[width], 10, Activation::Relu, false);
        let target = crate::support::target(16);
        let estimate =
            MemoryEstimate::of(&cfg.network(), target, &Placement::Spread, 8, Compute::F16);
        let built = Model::placed(&cfg.network(), target, &Placement::Spread, 8, Compute::F16);
        match (estimate, built) {
            (Ok(_), Ok(_)) => neither += 1,
            (Err(ModelError::OutOfTileMemory(e)), Err(ModelError::Build(b))) => {
                let ipu::BuildError::OutOfTileMemory(b) = b else {
                    panic!("{width}: {b:?}");
                };
                // Every tile's estimate is at most its bytes in the engine:
                // the engine's first tile over comes no later.
                assert!(b.tile < e.tile || (b.tile == e.tile && e.needed <= b.needed));
                assert!(e.tiles_over <= b.tiles_over, "{width}");
                both += 1;
            }
            (Ok(_), Err(_)) => {} // over only by the uncounted exchange code
            (e, b) => panic!("{width}: the estimate {e:?}, the engine {b:?}"),
        }
    }
    assert!(both > 0 && neither > 0, "both {both}, neither {neither}");
    // Far beyond the tiles: refused from the shapes, with the numbers.
    let huge = config(64, &[100_000_000], 10, Activation::Relu, false);
    let e = MemoryEstimate::of(
        &huge.network(),
        Target::single(spec),
        &Placement::Spread,
        8,
        Compute::F16,
    )
    .unwrap_err();
    let ModelError::OutOfTileMemory(e) = e else {
        panic!("{e:?}");
    };
    assert_eq!((e.tile, e.available), (0, spec.memory_per_tile()));
    // The weights spread over every tile, tile 0 holds 17 MB of them.
    assert!(e.breakdown.tensors >= 17_000_000, "{e:?}");
    assert_eq!(e.tiles_over, spec.tiles(), "{e:?}");
    assert_eq!(&*e.largest[0].0, "layer0.weight");
    // Beyond what 2^58 bytes hold: a typed error, not an overflow.
    let absurd = config(64, &[usize::MAX], 10, Activation::Relu, false);
    assert!(matches!(
        MemoryEstimate::of(&absurd.network(), Target::single(spec), &Placement::Spread, 8, Compute::F16),
        Err(ModelError::TooLarge { ref tensor, .. }) if tensor == "layer0.weight"
    ));
    assert!(matches!(
        Model::new(&absurd.network(), Target::single(spec), 8, Compute::F16),
        Err(ModelError::TooLarge { .. })
    ));
    assert!(matches!(
        absurd.validate(),
        Err(ModelError::TooLarge { .. })
    ));
    // Placing it is refused as building it is, without overflow.
    let deep = config(64, &[usize::MAX, 4], 10, Activation::Relu, false);
    assert!(matches!(
        Placement::network_balanced(&deep.network(), 2, 8),
        Err(ModelError::TooLarge { .. })
    ));
}

#[test]
fn a_deep_mlp_is_refused_with_a_tile_that_grows_by_a_layers_bytes_per_layer() {
    // Thousands of layers of 8 on one Mk2: tile 0 holds a share of every
    // layer, so it is over, by the same bytes per layer at every depth;
    // the largest tensors on it (of thousands) are the first layer's.
    let spec = IpuSpec::MK2_GC200;
    let refused = |layers: usize| {
        let deep = config(64, &vec![8; layers], 10, Activation::Relu, false);
        let at = (Target::single(spec), &Placement::Spread);
        match MemoryEstimate::of(&deep.network(), at.0, at.1, 8, Compute::F16) {
            Err(ModelError::OutOfTileMemory(e)) => e,
            other => panic!("{layers} layers: {other:?}"),
        }
    };
    let [a, b, c] = [1000, 2000, 3000].map(refused);
    assert_eq!((a.tile, b.tile, c.tile), (0, 0, 0));
    assert_eq!(c.needed - b.needed, b.needed - a.needed);
    assert_eq!((b.needed - a.needed) % 1000, 0);
    let largest: Vec<&str> = c.largest.iter().map(|(n, _)| &**n).collect();
    assert_eq!(largest, ["x", "layer0.weight", "layer0.weight.grad"]);
}

#[test]
fn wide_dense_layers_fit_one_mk2_with_the_reduction_split() {
    // Before products split their reduction, every output block gathered
    // whole input rows: 256 -> 1024 -> 1024 at micro-batch 8 needed
    // 697,968 bytes on tile 0 (260,192 of exchange code) of 638,976.
    let one = Target::single(IpuSpec::MK2_GC200);
    let cases = [
        (config(1024, &[1024], 10, Activation::Relu, false), 32),
        (config(256, &[1024, 1024], 10, Activation::Relu, false), 8),
        (config(256, &[1024, 1024], 10, Activation::Relu, true), 8),
    ];
    for (cfg, batch) in cases {
        let e = MemoryEstimate::of(&cfg.network(), one, &Placement::Spread, batch, Compute::F16)
            .unwrap();
        let (train, eval) = (e.train.summary(1), e.eval.summary(1));
        println!(
            "{:?} at {batch}: train max tile {} (tile {}), eval {}",
            cfg.hidden, train.max, train.max_tile, eval.max
        );
        assert!(train.max <= train.capacity && eval.max <= eval.capacity);
    }
    // The engine agrees (it refuses a tile over its memory), also at the
    // small micro-batches of a test set's remainder, whose products are
    // cut over more tiles than their flops ask for when a tile cannot
    // hold them (micro-batch 3 needed 661,880 bytes on tile 0).
    let cfg = config(256, &[1024, 1024], 10, Activation::Relu, false);
    for batch in [8, 3, 1] {
        let mlp = Model::new(&cfg.network(), one, batch, Compute::F16).unwrap();
        println!(
            "engine at {batch}: max tile {}",
            mlp.memory().summary(1).max
        );
    }
}

#[test]
fn the_network_memory_estimate_agrees_with_the_engines_accounting() {
    use tessera_sim::model::{Model, NetworkConfig};
    let spec = IpuSpec::MK2_GC200;
    let mini = NetworkConfig::resnet_mini([1, 8, 8], 10, &[16, 32], &[1, 1]);
    let small = NetworkConfig::resnet_mini([3, 6, 6], 4, &[4], &[2]);
    // resnet-mini's 8 blocks over 2 IPUs: the stages' tiles, as built.
    let two = Target::new(crate::support::spec(64), 2).unwrap();
    let staged = Placement::network(&mini, &vec![0, 0, 0, 1, 1, 1, 1, 1].into(), 2, true).unwrap();
    for (net, target, placement, batch, compute) in [
        (
            &mini,
            Target::single(spec),
            &Placement::Spread,
            4,
            Compute::F16,
        ),
        (
            &small,
            Target::single(spec),
            &Placement::Spread,
            2,
            Compute::F32,
        ),
        (
            &small,
            crate::support::target(64),
            &Placement::Spread,
            3,
            Compute::F16,
        ),
        (&mini, two, &staged, 2, Compute::F32),
    ] {
        let what = format!("{net:?} {placement:?} batch {batch} {compute:?}");
        let estimate = MemoryEstimate::of(net, target, placement, batch, compute).unwrap();
        let built = Model::placed(net, target, placement, batch, compute).unwrap();
        // What a pipeline stashes, as the built network measures it.
        assert_eq!(
            estimate.stage_activations,
            built.stage_activations(),
            "{what}"
        );
        for (measured, built) in [
            (&estimate.train, built.memory()),
            (&estimate.eval, built.inference_memory()),
        ] {
            assert_eq!(measured.tiles.len(), built.tiles.len());
            for (t, (m, b)) in measured.tiles.iter().zip(&built.tiles).enumerate() {
                assert_eq!(m.tensors, b.tensors, "tile {t}: {what}");
                assert_eq!(m.vertex_state, b.vertex_state, "tile {t}: {what}");
                assert_eq!(m.code, b.code, "tile {t}: {what}");
                assert!(m.exchange <= b.exchange, "tile {t}: {what}");
            }
            assert!(measured.summary(1).max <= built.summary(1).max, "{what}");
        }
    }
    // Far beyond the tiles: refused from the sizing graph, with the tile.
    let huge = NetworkConfig::resnet_mini([1, 8, 8], 10, &[4096], &[1]);
    let e = MemoryEstimate::of(
        &huge,
        Target::single(spec),
        &Placement::Spread,
        4,
        Compute::F16,
    )
    .unwrap_err();
    let ModelError::OutOfTileMemory(e) = e else {
        panic!("{e:?}");
    };
    assert_eq!(e.available, spec.memory_per_tile());
    assert!(e.needed > e.available, "{e:?}");
}

#[test]
fn host_memory_follows_the_model_not_the_tile_count() {
    // The same MLP on 64 and 1,024 tiles: its tensors, vertices and copy
    // plans take the same host bytes (it uses the same tiles), and each
    // tile of the target adds a small fixed cost, not one per compute
    // set or exchange.
    let config = MlpConfig {
        inputs: 256,
        hidden: vec![128, 128],
        classes: 10,
        activation: Activation::Relu,
        batch_norm: false,
    };
    let bytes = |tiles| {
        let spec = IpuSpec::new(IpuParams {
            tiles,
            ..IpuParams::default()
        })
        .unwrap();
        Model::new(&config.network(), Target::single(spec), 8, Compute::F16)
            .unwrap()
            .host_bytes()
    };
    let (small, large) = (bytes(64), bytes(1024));
    assert!(small.tensors > 0 && small.vertices > 0 && small.exchanges > 0);
    assert_eq!(
        (small.tensors, small.vertices, small.exchanges),
        (large.tensors, large.vertices, large.exchanges)
    );
    // Two engines (training and inference), at most 128 bytes per tile each.
    assert!(large.per_tile <= 2 * 128 * 1024, "{large:?}");
}
