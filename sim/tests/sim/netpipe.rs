//! Model parallelism on the convolutional network: resnet-mini's blocks
//! placed on a replica's IPUs (spread, sharded, pipelined under every
//! schedule, by hand or balanced, with and without recomputation) train
//! bitwise the weights of the data-parallel run; the stashes come from
//! the graph's activation tensors; bad device mappings name the block.

use tessera_sim::data::{Dataset, Source};
use tessera_sim::ipu::{IpuParams, IpuSpec};
use tessera_sim::model::{MappingError, ModelError, NetworkConfig, Placement};
use tessera_sim::pod::PodSpec;
use tessera_sim::train::{
    NamedOptimizer, OptimizerConfig, Pipeline, RunOptions, Schedule, Summary, TrainConfig,
    TrainError, Trainer,
};

use super::train::assert_same;

/// 64 synthetic 1x6x6 images of 3 classes.
pub(crate) fn images() -> Dataset {
    Source::Images {
        samples: 64,
        shape: (1, 6, 6),
        classes: 3,
        seed: 5,
    }
    .load()
    .unwrap()
}

/// resnet-mini of widths 4, 8 (blocks: stem, residual, bn, conv s2,
/// residual, bn, global pool, head) on `ipus` IPUs per replica, one
/// replica, 4 micro-batches of 2 per step, one epoch.
pub(crate) fn config(ipus: usize, pipeline: Option<Pipeline>, recompute: bool) -> TrainConfig {
    TrainConfig {
        network: Some(NetworkConfig::resnet_mini([1, 6, 6], 3, &[4, 8], &[1, 1])),
        pod: PodSpec::pod16(),
        instances: 1,
        replicas: 1,
        ipus_per_replica: ipus,
        micro_batch: 2,
        gradient_accumulation: 4,
        device_iterations: 2,
        epochs: 1,
        warmup_steps: 2,
        optimizer: OptimizerConfig::named("lamb", 0.01).unwrap(),
        pipeline,
        recompute,
        ..TrainConfig::default()
    }
}

pub(crate) fn run(config: TrainConfig) -> Summary {
    Trainer::new(config, images())
        .unwrap()
        .run(&RunOptions::default(), &|_| {})
        .unwrap()
}

fn pipeline(schedule: Schedule, mapping: Option<Vec<u32>>) -> Option<Pipeline> {
    Some(Pipeline {
        schedule,
        device_mapping: mapping.map(Into::into),
        serial_branches: false,
    })
}

#[test]
fn pipelined_and_sharded_networks_train_the_data_parallel_weights() {
    let plain = run(config(1, None, false));
    // Two IPUs without pipelining: every layer over both IPUs' tiles.
    let spread = run(config(2, None, false));
    assert_same(&plain, &spread, "spread over 2 IPUs");
    for schedule in [
        Schedule::Grouped,
        Schedule::Interleaved,
        Schedule::Sequential,
    ] {
        for (ipus, mapping) in [(4, None), (2, Some(vec![0, 0, 0, 1, 1, 1, 1, 1]))] {
            for recompute in [false, true] {
                let what = format!("{schedule} {ipus} IPUs {mapping:?} recompute {recompute}");
                let s = run(config(ipus, pipeline(schedule, mapping.clone()), recompute));
                assert_same(&plain, &s, &what);
                assert_eq!(s.memory.activations.len(), ipus, "{what}");
                let t = s.step_time;
                assert_eq!(t.recompute_s > 0.0, recompute, "{what}");
                assert_eq!(t.bubble_s > 0.0, schedule != Schedule::Sequential, "{what}");
            }
        }
    }
}

#[test]
fn network_stashes_come_from_the_activation_tensors() {
    let stashes = |schedule, recompute| {
        let s = run(config(2, pipeline(schedule, None), recompute));
        s.memory.activations
    };
    let grouped = stashes(Schedule::Grouped, false);
    // G = 4 micro-batches, P = 2: the first stage keeps min(3, 4), the
    // last one; the stash is what the first stage keeps beyond the
    // graph's own set.
    assert_eq!(
        grouped.iter().map(|a| a.stashed).collect::<Vec<_>>(),
        [3, 1]
    );
    assert!(grouped[0].stash_bytes_per_tile > 0);
    assert_eq!(grouped[1].stash_bytes_per_tile, 0);
    let interleaved = stashes(Schedule::Interleaved, false);
    assert_eq!(interleaved[0].stashed, 2);
    // Half the extra micro-batches: half the stash, to the byte.
    assert_eq!(
        2 * interleaved[0].stash_bytes_per_tile,
        grouped[0].stash_bytes_per_tile
    );
    // Recomputation keeps the stage's input only: the first stage's is
    // the images, far smaller than its feature maps.
    let recomputed = stashes(Schedule::Grouped, true);
    assert!(recomputed[0].recompute_saves_bytes > 0);
    assert!(recomputed[0].stash_bytes_per_tile < grouped[0].stash_bytes_per_tile);
}

#[test]
fn a_pipeline_whose_stashes_overflow_a_tile_is_refused_before_it_is_built() {
    // IPUs of 32 tiles: the grouped pipeline's stash is a visible share
    // of a tile.
    let on = |memory_per_tile| {
        let ipu = IpuSpec::new(IpuParams {
            tiles: 32,
            memory_per_tile,
            ..IpuParams::default()
        })
        .unwrap();
        TrainConfig {
            pod: PodSpec::pod16().with_ipu(ipu),
            ..config(2, pipeline(Schedule::Grouped, None), false)
        }
    };
    let fits = run(on(IpuParams::default().memory_per_tile)).memory;
    let stash = fits.stash_per_tile();
    assert!(stash > 0);
    // Room for the built graph and its optimizer share, none for the
    // stash: `Trainer::new` refuses it from the sizing graph (whose
    // exchange code is at most the engine's) with the built run's stash,
    // before building anything.
    let room = fits.model.max + fits.optimizer.per_tile_bytes;
    let e = Trainer::new(on(room), images()).err().unwrap();
    assert!(
        matches!(
            e,
            TrainError::OutOfTileMemory { needed, available, stash: s }
                if available == room && needed > room
                    && needed <= fits.max_tile_bytes() && s == stash
        ),
        "{e:?}"
    );
}

#[test]
fn bad_network_device_mappings_name_the_block() {
    let err = |ipus, mapping: Vec<u32>| {
        let c = config(ipus, pipeline(Schedule::Interleaved, Some(mapping)), false);
        Trainer::new(c, images()).unwrap_err()
    };
    let mapping = |e: TrainError| match e {
        TrainError::Model(ModelError::DeviceMapping(m)) => m,
        other => panic!("not a device-mapping error: {other}"),
    };
    assert_eq!(
        mapping(err(2, vec![0, 1])),
        MappingError::Length { blocks: 8, got: 2 }
    );
    let e = mapping(err(2, vec![0, 0, 0, 2, 1, 1, 1, 1]));
    assert!(
        matches!(
            e,
            MappingError::Ipu {
                block: 3,
                ipu: 2,
                ipus: 2,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("block 3 (conv 3x3 s2 -> 8)"), "{e}");
    let e = mapping(err(2, vec![0, 1, 0, 1, 1, 1, 1, 1]));
    assert!(matches!(e, MappingError::Order { block: 2, .. }), "{e:?}");
    assert!(e.to_string().contains("batch norm"), "{e}");
    // Sixteen IPUs for eight blocks.
    let c = config(16, pipeline(Schedule::Sequential, None), false);
    let e = mapping(Trainer::new(c, images()).unwrap_err());
    assert_eq!(
        e,
        MappingError::TooManyIpus {
            ipus: 16,
            blocks: 8
        }
    );
}

#[test]
fn balanced_placements_cut_between_blocks() {
    let net = NetworkConfig::resnet_mini([1, 6, 6], 3, &[4, 8], &[1, 1]);
    let blocks = net.blocks().unwrap();
    assert_eq!(blocks.len(), 8);
    // A residual block is one block: its start, body and end.
    assert_eq!(blocks[1], 1..7);
    for ipus in 1..=4 {
        let p = Placement::network_balanced(&net, ipus, 2).unwrap();
        let mapping = p.network_mapping(&net).unwrap();
        assert_eq!(p.stages(), ipus as usize, "{mapping:?}");
        assert_eq!(Placement::network(&net, &mapping, ipus, true).unwrap(), p);
    }
}

/// [`config`] on one IPU with recomputation from `checkpoints`.
fn checkpointed(checkpoints: &[usize]) -> TrainConfig {
    TrainConfig {
        recompute_checkpoints: checkpoints.to_vec(),
        ..config(1, None, true)
    }
}

#[test]
fn recomputation_checkpoints_cost_segments_and_keep_the_bits() {
    let plain = run(config(1, None, false));
    let whole = run(config(1, None, true));
    assert_same(&plain, &whole, "recomputed whole");
    assert!(plain.memory.recomputation.is_none());
    // Blocks 0-2 (stem, residual, batch norm) recomputed from block 3's
    // input; blocks 3-7 kept from the forward pass.
    let early = run(checkpointed(&[3]));
    assert_same(&plain, &early, "checkpoint at block 3");
    let r = early.memory.recomputation.clone().unwrap();
    assert_eq!(r.segments, [0..3, 3..8]);
    let t = (early.step_time.recompute_s, whole.step_time.recompute_s);
    assert!(t.0 > 0.0 && t.0 < t.1, "{t:?}");
    assert!(r.kept_per_tile < r.activations_per_tile, "{r:?}");
    assert!(r.saved_per_tile() > 0);
    // More checkpoints, more segments recomputed: more time, and the
    // same activations without recomputation.
    let more = run(checkpointed(&[1, 2, 3, 5]));
    assert_same(&plain, &more, "four checkpoints");
    let m = more.memory.recomputation.unwrap();
    assert_eq!(m.segments.len(), 5);
    assert_eq!(m.activations_per_tile, r.activations_per_tile);
    assert!(more.step_time.recompute_s > early.step_time.recompute_s);
}

#[test]
fn checkpoint_activations_are_the_networks_stage_activations() {
    use tessera_sim::ipu::{IpuParams, IpuSpec, Target};
    use tessera_sim::model::{Compute, Model};
    let net = NetworkConfig::resnet_mini([1, 6, 6], 3, &[4, 8], &[1, 1]);
    let spec = IpuSpec::new(IpuParams {
        tiles: 32,
        ..IpuParams::default()
    })
    .unwrap();
    let model = Model::new(&net, Target::single(spec), 2, Compute::F32).unwrap();
    let one = model.stage_activations()[0];
    // Every block its own segment or one segment: the same activations.
    let r = model.recomputation(&[1, 2, 3, 4, 5, 6, 7]).unwrap();
    assert_eq!(r.activations_per_tile, one.max_tile_bytes);
    assert_eq!(r.segments.len(), 8);
    // Before a training micro-batch, no cycles are known.
    assert_eq!(r.cycles, 0);
}

#[test]
fn an_mlp_takes_checkpoints_at_its_layers() {
    // The MLP is a network of dense blocks: its layers are its blocks.
    let mlp = |checkpoints: &[usize]| TrainConfig {
        network: None,
        hidden: vec![8, 8, 8],
        recompute_checkpoints: checkpoints.to_vec(),
        ..config(1, None, true)
    };
    let whole = run(mlp(&[]));
    let checkpointed = run(mlp(&[2]));
    assert_same(&whole, &checkpointed, "an MLP checkpointed at layer 2");
    let r = checkpointed.memory.recomputation.unwrap();
    assert_eq!(r.segments, [0..2, 2..4]);
    assert!(checkpointed.step_time.recompute_s < whole.step_time.recompute_s);
}

#[test]
fn bad_recomputation_checkpoints_are_explained() {
    let err = |c: TrainConfig| Trainer::new(c, images()).unwrap_err();
    let checkpoint = |e: TrainError| match e {
        TrainError::Model(ModelError::Checkpoint(c)) => c,
        other => panic!("not a checkpoint error: {other}"),
    };
    use tessera_sim::model::CheckpointError;
    assert_eq!(
        checkpoint(err(checkpointed(&[0]))),
        CheckpointError::OutOfRange {
            block: 0,
            blocks: 8
        }
    );
    assert_eq!(
        checkpoint(err(checkpointed(&[8]))),
        CheckpointError::OutOfRange {
            block: 8,
            blocks: 8
        }
    );
    assert_eq!(
        checkpoint(err(checkpointed(&[3, 3]))),
        CheckpointError::NotIncreasing {
            block: 3,
            previous: 3
        }
    );
    for (c, says) in [
        (
            TrainConfig {
                recompute: false,
                ..checkpointed(&[3])
            },
            "need recomputation",
        ),
        (
            TrainConfig {
                recompute_checkpoints: vec![3],
                ..config(2, pipeline(Schedule::Interleaved, None), true)
            },
            "without --pipeline-stages",
        ),
    ] {
        let e = err(c).to_string();
        assert!(e.contains(says), "{e}");
    }
}
