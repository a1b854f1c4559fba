//! Quantised operands on the simulated hardware: held in their encoding's
//! bytes in tile memory and on the exchange, and the trainer's products
//! priced as the IPU runs them (the C600's FP8 units; conversion and FP16
//! products on Bow).

use tessera_core::fp::{Format, MxFormat};
use tessera_sim::ipu::{
    DType, Encoding, Engine, EngineOptions, Graph, Mapping, MemoryUsage, Program, Target,
};
use tessera_sim::model::{Activation, Compute, MlpConfig, Model, NoGroup, quant::Recipe};
use tessera_sim::{IpuParams, IpuSpec};

/// `spec` with `tiles` tiles.
fn small(spec: IpuSpec, tiles: u32) -> IpuSpec {
    IpuSpec::new(IpuParams {
        tiles,
        ..spec.params()
    })
    .unwrap()
}

#[test]
fn held_tensors_take_their_encodings_bytes_in_tile_memory_and_on_the_exchange() {
    let n = 96;
    // (held as, piece bytes (rounded to 8), exchange cycles at 4 B/cycle)
    let cases = [
        (None, 384, 96),
        (Some(Encoding::F16), 192, 48),
        (Some(Encoding::Scalar(Format::E4M3FN)), 96, 24),
        // 72 bytes of packed FP6 codes and 3 scales: 75.
        (Some(Encoding::Mx(MxFormat::E2M3)), 80, 19),
        // 48 bytes of FP4 codes and 3 scales: 51.
        (Some(Encoding::Mx(MxFormat::E2M1)), 56, 13),
    ];
    for (held, piece, cycles) in cases {
        let mut g = Graph::new(Target::single(small(IpuSpec::BOW, 2)));
        let x = g.add_tensor("x", DType::F32, &[n], Mapping::one_tile(0, n));
        let y = g.add_tensor("y", DType::F32, &[n], Mapping::one_tile(1, n));
        let (x, y) = (x.unwrap(), y.unwrap());
        if let Some(e) = held {
            g.hold(x, e);
            g.hold(y, e);
        }
        let ex = g.add_exchange("move", &[(g.all(x), g.all(y))]).unwrap();
        let memory = MemoryUsage::of(&g);
        assert_eq!(memory.tiles[0].tensors, piece, "{held:?}");
        assert_eq!(memory.tiles[1].tensors, piece, "{held:?}");
        assert_eq!(g.tensor_bytes(), [piece, piece], "{held:?}");
        let e = Engine::new(g, Program::Exchange(ex), EngineOptions::default()).unwrap();
        assert_eq!(e.exchange_cycles(ex), cycles, "{held:?}");
    }
}

/// Cycles of one training micro-batch's dense products (forward, `dW`,
/// `dA`) and the fullest tile, of a small MLP on 16 tiles of `spec`.
fn products(spec: IpuSpec, compute: Compute) -> (u64, u64) {
    let mlp = MlpConfig {
        inputs: 64,
        hidden: vec![32],
        classes: 10,
        activation: Activation::Relu,
        batch_norm: false,
    };
    let net = mlp.network();
    let mut model = Model::new(&net, Target::single(small(spec, 16)), 4, compute).unwrap();
    let params = net.init(0).unwrap();
    let refs: Vec<&[f32]> = params.iter().map(Vec::as_slice).collect();
    model.set_params(&refs).unwrap();
    let mut grads = vec![Vec::new(); params.len()];
    let inputs: Vec<f32> = (0..4 * 64).map(|i| (i % 7) as f32 - 3.0).collect();
    let labels = [1, 2, 3, 4];
    model
        .train_micro_batch(&inputs, &labels, 1.0, &mut NoGroup, &mut grads)
        .unwrap();
    let profile = model.last_profile().unwrap();
    let is_product = |name: &str| [".fwd", ".dw", ".da"].iter().any(|p| name.ends_with(p));
    let cycles = profile
        .compute_sets
        .iter()
        .filter(|cs| is_product(&cs.name))
        .map(|cs| cs.cycles)
        .sum();
    (cycles, model.memory().summary(1).max)
}

#[test]
fn the_trainers_fp8_products_run_on_the_c600s_fp8_units_and_converted_on_bow() {
    let (fp8, f16) = (Compute::Quantised(Recipe::FP8), Compute::F16);
    let (bow, c600) = (IpuSpec::BOW, IpuSpec::C600);
    // The same FP16 products on both (per cycle: only the clocks differ).
    let half = products(bow, f16).0;
    assert_eq!(products(c600, f16).0, half);
    // FP8 on the C600's units: cheaper than FP16; on Bow: converted
    // first, dearer than FP16.
    let (on_units, converted) = (products(c600, fp8).0, products(bow, fp8).0);
    assert!(
        on_units < half && half < converted,
        "{on_units} {half} {converted}"
    );
    // MX runs converted on both.
    let mx = Compute::Quantised(Recipe::MXFP8);
    assert_eq!(products(c600, mx).0, products(bow, mx).0);
    // Packed FP4 blocks take fewer bytes than FP8 blocks.
    let mx4 = Compute::Quantised(Recipe::MXFP4);
    assert!(products(bow, mx4).1 < products(bow, mx).1);
}
