//! The planner's calibration: layer costs from the simulator's engine
//! (cycles and memory of a convolution, taken once per layer), its typed
//! errors, and ResNet-50's layers described for the simulator.

use super::plan::close;
use tessera_sim::IpuSpec;
use tessera_sim::ipu::Target;
use tessera_sim::model::{Conv2d, conv2d_on_tiles};
use tessera_sim::plan::{
    Builtin, Calibration, CalibrationError, ModelTable, PlanConfig, PlanError, Precision, SimLayer,
};
use tessera_sim::pod::PodSpec;

/// A 3 x 3 convolution small enough for a debug build.
fn small_conv(batch_norm: bool) -> SimLayer {
    SimLayer::Conv2d {
        in_channels: 8,
        out_channels: 16,
        kernel: [3, 3],
        stride: 1,
        padding: 1,
        input: [6, 6],
        batch_norm,
        residual: false,
        input_grad: true,
    }
}

#[test]
fn plan_calibration_of_a_conv_is_the_engines_cycles_and_memory() {
    // The oracle: the same convolution run on the engine.
    let shape = Conv2d {
        in_channels: 8,
        out_channels: 16,
        kernel: (3, 3),
        stride: 1,
        padding: 1,
    }
    .on(2, (6, 6))
    .unwrap();
    let x = vec![0.5; shape.in_rows() * 8];
    let w = vec![0.01; shape.patch() * 16];
    let dy = vec![0.1; shape.out_rows() * 16];
    let run = conv2d_on_tiles(&shape, Target::single(IpuSpec::MK2_GC200), &x, &w, &dy).unwrap();
    let mut calibration = Calibration::new(IpuSpec::MK2_GC200);
    let cost = calibration.price(&small_conv(false), 2, false).unwrap();
    assert_eq!(cost.forward_cycles + cost.backward_cycles, run.cycles);
    assert_eq!(cost.max_tile_bytes, run.max_tile_bytes);
    assert!(cost.forward_cycles > 0 && cost.backward_cycles > cost.forward_cycles);
    // Batch norm and ReLU add to both passes; f16 compute is faster.
    let bn = calibration.price(&small_conv(true), 2, false).unwrap();
    assert!(bn.forward_cycles > cost.forward_cycles && bn.backward_cycles > cost.backward_cycles);
    let f16 = calibration.price(&small_conv(false), 2, true).unwrap();
    assert!(f16.forward_cycles < cost.forward_cycles);
    assert_eq!((calibration.compiled(), calibration.hits()), (3, 0));
}

/// A table of three rows, two of them the same layer, described for the
/// simulator.
fn described() -> ModelTable {
    let conv = |name: &str| {
        format!(
            "[[layer]]\nname = \"{name}\"\nparams = 1184\nflops_forward = 165888\n\
             flops_backward = 331776\nactivation_bytes = 2304\n\
             gemm = {{ m = 36, k = 72, n = 16 }}\n\
             sim = {{ conv2d = {{ in_channels = 8, out_channels = 16, kernel = [3, 3], \
             stride = 1, padding = 1, input = [6, 6], batch_norm = true, residual = false, \
             input_grad = true }} }}\n"
        )
    };
    let text = format!(
        "name = \"described\"\ninput_bytes = 1152\n{}{}\
         [[layer]]\nname = \"pool\"\nparams = 0\nflops_forward = 576\nflops_backward = 576\n\
         activation_bytes = 32\n\
         sim = {{ pool2d = {{ max = false, channels = 16, kernel = [6, 6], stride = 1, \
         padding = 0, input = [6, 6] }} }}\n",
        conv("a"),
        conv("b").replace("in_channels = 8", "in_channels = 16"),
    );
    // `b` reads 16 channels: a different layer from `a`; a third conv
    // like `b` repeats it.
    let text = format!(
        "{text}{}",
        conv("c").replace("in_channels = 8", "in_channels = 16")
    );
    ModelTable::from_toml_str(&text, "described.toml").unwrap()
}

#[test]
fn plan_with_simulated_layer_costs_takes_the_engines_cycles_once_per_layer() {
    let model = described();
    let mut calibration = Calibration::new(IpuSpec::MK2_GC200);
    let costs = calibration.price_model(&model, 2, Precision::Fp32).unwrap();
    // Four rows, three distinct layers: `c` from the cache.
    assert_eq!((calibration.compiled(), calibration.hits()), (3, 1));
    assert_eq!(costs.layers[1], costs.layers[3]);
    // The cache gives the figures a fresh compile gives.
    let fresh = Calibration::new(IpuSpec::MK2_GC200)
        .price(model.layers()[3].sim.as_ref().unwrap(), 2, false)
        .unwrap();
    assert_eq!(costs.layers[3], Some(fresh));
    let mut config = PlanConfig::new(model, PodSpec::pod16());
    config.micro_batch = 2;
    config.precision = Precision::Fp32;
    let assumed = config.plan().unwrap();
    assert!(assumed.calibration.is_none());
    config.layer_costs = Some(costs.clone());
    let plan = config.plan().unwrap();
    let c = plan.calibration.as_ref().unwrap();
    let rows: Vec<(&str, usize)> = c
        .layers
        .iter()
        .map(|l| (l.first.as_str(), l.rows))
        .collect();
    assert_eq!(rows, [("a", 1), ("b", 2), ("pool", 1)]);
    let simulated: u64 = costs
        .layers
        .iter()
        .flatten()
        .map(|s| s.forward_cycles + s.backward_cycles)
        .sum();
    assert_eq!(c.simulated_cycles, simulated);
    // The stage's passes are the simulator's.
    let spec = IpuSpec::MK2_GC200;
    let forward: u64 = costs
        .layers
        .iter()
        .flatten()
        .map(|s| s.forward_cycles)
        .sum();
    assert!(close(
        plan.stages[0].forward_s,
        spec.seconds(forward),
        1e-12
    ));
    assert_eq!(c.assumed.samples_per_second, assumed.samples_per_second);
    assert_ne!(plan.samples_per_second, assumed.samples_per_second);
    // The fullest tile is at least the largest layer graph's.
    let largest = costs
        .layers
        .iter()
        .flatten()
        .map(|s| s.max_tile_bytes)
        .max();
    assert!(plan.worst.bytes >= largest.unwrap());
    // Deterministic: the same costs give the same plan.
    assert_eq!(config.plan().unwrap(), plan);
}

#[test]
fn plan_calibration_errors_are_typed() {
    let mut calibration = Calibration::new(IpuSpec::MK2_GC200);
    // A kernel larger than the padded input; no samples.
    let big = SimLayer::Conv2d {
        in_channels: 1,
        out_channels: 1,
        kernel: [5, 5],
        stride: 1,
        padding: 0,
        input: [3, 3],
        batch_norm: false,
        residual: false,
        input_grad: false,
    };
    assert_eq!(
        calibration.price(&big, 1, false),
        Err(CalibrationError::Shape {
            layer: big,
            micro_batch: 1
        })
    );
    assert!(matches!(
        calibration.price(&small_conv(false), 0, false),
        Err(CalibrationError::Shape { micro_batch: 0, .. })
    ));
    // Too large for a tile (one window of 800 kB): the simulator's
    // error, kept.
    let huge = SimLayer::Pool2d {
        max: false,
        channels: 1,
        kernel: [1, 200_000],
        stride: 1,
        padding: 0,
        input: [1, 200_000],
    };
    let e = calibration.price(&huge, 1, false).unwrap_err();
    assert!(
        matches!(&e, CalibrationError::Simulator { layer, micro_batch: 1, .. } if *layer == huge),
        "{e}"
    );
    assert!(
        e.to_string().contains("avgpool 1x200000/1 1 @1x200000"),
        "{e}"
    );
    // A model that describes nothing.
    let bert = Builtin::BertLarge128.table();
    assert!(matches!(
        calibration.price_model(&bert, 1, Precision::Half),
        Err(CalibrationError::NothingToCalibrate { .. })
    ));
    assert_eq!(calibration.compiled(), 0);
    // Costs for another micro-batch or precision are refused.
    let model = described();
    let costs = calibration.price_model(&model, 1, Precision::Fp32).unwrap();
    let mut config = PlanConfig::new(model, PodSpec::pod16());
    config.precision = Precision::Fp32;
    config.micro_batch = 2;
    config.layer_costs = Some(costs.clone());
    assert_eq!(
        config.plan().unwrap_err(),
        PlanError::LayerCostsMismatch {
            what: "micro-batch",
            priced: "1".into(),
            planned: "2".into()
        }
    );
    config.micro_batch = 1;
    config.precision = Precision::Half;
    assert!(matches!(
        config.plan(),
        Err(PlanError::LayerCostsMismatch {
            what: "compute precision",
            ..
        })
    ));
}

#[test]
fn plan_resnet50_describes_its_layers_for_the_simulator() {
    let table = Builtin::Resnet50.table();
    let described: Vec<SimLayer> = table.layers().iter().filter_map(|l| l.sim).collect();
    // Every row: 53 convolutions, two pools, the classifier.
    assert_eq!(described.len(), table.layers().len());
    let mut distinct = described.clone();
    distinct.sort_by_key(SimLayer::describe);
    distinct.dedup();
    // 23 distinct convolutions, the pools and the classifier.
    assert_eq!(distinct.len(), 23 + 3);
    // Each convolution row's product is the one the simulator builds.
    for l in table.layers() {
        if let (
            Some(SimLayer::Conv2d {
                in_channels,
                out_channels,
                kernel,
                stride,
                input,
                ..
            }),
            Some(g),
        ) = (l.sim, l.gemm)
        {
            let out = input[0] / stride;
            assert_eq!(g.m, (out * out) as u64, "{}", l.name);
            assert_eq!(
                g.k,
                (in_channels * kernel[0] * kernel[1]) as u64,
                "{}",
                l.name
            );
            assert_eq!(g.n, out_channels as u64, "{}", l.name);
        }
    }
}
