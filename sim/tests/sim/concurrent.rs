//! Concurrent pipeline stages (TF IPU's `device_mapping=[0, [1, 2], 3]`):
//! a block of parallel branches mapped one branch per IPU trains bitwise
//! the data-parallel weights, as does the same mapping serialised (a stage
//! per branch); the concurrent pipeline is a stage shorter, its bubble and
//! its first stage's stash smaller by exactly that stage; bad nested
//! mappings are typed errors naming the block.

use tessera_sim::model::{DeviceMapping, MappingError, ModelError, NetworkConfig};
use tessera_sim::train::{Pipeline, Schedule, Summary, TrainConfig, TrainError, Trainer};

use super::netpipe::{config, images, run};
use super::train::assert_same;

/// resnet-mini of widths 4, 8 with a block of a 3x3 and a 1x1 branch of
/// 2 channels each (blocks: stem, residual, bn, conv s2, residual,
/// branches, bn, global pool, head).
fn branched() -> NetworkConfig {
    NetworkConfig::resnet_mini([1, 6, 6], 3, &[4, 8], &[1, 1]).with_branches(2)
}

/// [`branched`] on `ipus` IPUs, pipelined by `mapping` (text), the
/// branches serialised if `serial`.
fn staged(ipus: usize, mapping: &str, schedule: Schedule, serial: bool) -> TrainConfig {
    let pipeline = Pipeline {
        schedule,
        device_mapping: Some(mapping.parse().unwrap()),
        serial_branches: serial,
    };
    TrainConfig {
        network: Some(branched()),
        ..config(ipus, Some(pipeline), false)
    }
}

/// The stage and IPU of each part's memory record, and what each keeps.
fn parts(s: &Summary) -> Vec<(usize, u32, usize)> {
    let a = &s.memory.activations;
    a.iter().map(|m| (m.stage, m.ipu, m.stashed)).collect()
}

#[test]
fn concurrent_branches_shorten_the_pipeline_and_keep_the_weights() {
    let plain = run(TrainConfig {
        network: Some(branched()),
        ..config(1, None, false)
    });
    let mapping = "0,0,0,0,0,[1,2],3,3,3";
    let concurrent = run(staged(4, mapping, Schedule::Interleaved, false));
    let serial = run(staged(4, mapping, Schedule::Interleaved, true));
    // Value stability: the branched network's weights, pinned.
    assert_eq!(format!("{:016x}", plain.fingerprint), "deb480a366cff545");
    assert_same(&plain, &concurrent, "concurrent branches");
    assert_same(&plain, &serial, "serialised branches");
    // G = 4: stage s of P keeps min(P - s, 4) micro-batches.
    assert_eq!(
        parts(&concurrent),
        [(0, 0, 3), (1, 1, 2), (1, 2, 2), (2, 3, 1)]
    );
    assert_eq!(parts(&serial), [(0, 0, 4), (1, 1, 3), (2, 2, 2), (3, 3, 1)]);
    // The first stage's stash: 2 extra micro-batches against 3.
    let stash = |s: &Summary| s.memory.activations[0].stash_bytes_per_tile;
    assert!(stash(&concurrent) > 0);
    assert_eq!(3 * stash(&concurrent), 2 * stash(&serial));
    // The same busiest IPU per pipeline cycle; 6 cycles against 7, of
    // which 2 against 3 ramping.
    let (c, s) = (concurrent.step_time, serial.step_time);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs();
    assert!(close(c.compute_s, s.compute_s), "{c:?} {s:?}");
    assert!(c.bubble_s > 0.0 && close(3.0 * c.bubble_s, 2.0 * s.bubble_s));
    // Sharded (no pipelining): the branches take the slower one's time,
    // not their sum.
    let seq = |serial| run(staged(4, mapping, Schedule::Sequential, serial));
    let (c, s) = (seq(false), seq(true));
    assert_same(&plain, &c, "sequential, concurrent branches");
    assert!(c.step_time.compute_s < s.step_time.compute_s);
}

#[test]
fn tf_ipus_own_example_shares_an_ipu_between_stages() {
    // As [s0, [s1a, s1b], s2, s3] on [0, [1, 2], 2, 3] (a replica's IPUs
    // are a power of two): IPU 2 runs the second branch in stage 1 and
    // batch norm in stage 2.
    let plain = run(TrainConfig {
        network: Some(branched()),
        ..config(1, None, false)
    });
    let shared = run(staged(
        4,
        "0,0,0,0,0,[1,2],2,3,3",
        Schedule::Interleaved,
        false,
    ));
    assert_same(&plain, &shared, "IPU 2 in two stages");
    assert_eq!(
        parts(&shared),
        [(0, 0, 4), (1, 1, 3), (1, 2, 3), (2, 2, 2), (3, 3, 1)]
    );
    // IPU 2's tiles hold both stages' stashes: the memory report adds
    // them (pipeline's `an_ipus_stash_is_the_sum_of_its_parts`).
    let m = &shared.memory;
    let stash = |i: usize| m.activations[i].stash_bytes_per_tile;
    assert!(stash(2) > 0 && stash(3) > 0);
    assert!(m.stash_per_tile() >= stash(2) + stash(3));
}

#[test]
fn bad_nested_mappings_name_the_block() {
    let err = |ipus: usize, mapping: &str| {
        let c = staged(ipus, mapping, Schedule::Interleaved, false);
        match Trainer::new(c, images()).unwrap_err() {
            TrainError::Model(ModelError::DeviceMapping(m)) => m,
            other => panic!("{mapping}: not a device-mapping error: {other}"),
        }
    };
    let e = err(4, "0,0,[0,1],1,1,1,2,2,2");
    assert!(
        matches!(e, MappingError::NotBranches { block: 2, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("block 2 (batch norm)"), "{e}");
    for list in ["[1]", "[1,2,3]", "[2,1]", "[1,1]"] {
        let e = err(4, &format!("0,0,0,0,0,{list},3,3,3"));
        assert!(
            matches!(
                e,
                MappingError::BranchIpus {
                    block: 5,
                    branches: 2,
                    ..
                }
            ),
            "{list}: {e:?}"
        );
        assert!(e.to_string().contains("one per branch"), "{e}");
    }
    // After branches on IPUs 1 and 2, IPU 1 goes back.
    let e = err(4, "0,0,0,0,0,[1,2],1,3,3");
    assert!(
        matches!(
            e,
            MappingError::Order {
                block: 6,
                ipu: 1,
                previous: 2,
                ..
            }
        ),
        "{e:?}"
    );
    let e = err(4, "0,0,0,0,0,[1,4],3,3,3");
    assert!(
        matches!(
            e,
            MappingError::Ipu {
                block: 5,
                ipu: 4,
                ipus: 4,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn the_mlp_refuses_a_list_of_ipus() {
    let pipeline = Pipeline {
        schedule: Schedule::Interleaved,
        device_mapping: Some(DeviceMapping(vec![
            tessera_sim::model::MappingEntry::Ipu(0),
            tessera_sim::model::MappingEntry::Branches(vec![0, 1]),
        ])),
        serial_branches: false,
    };
    let c = TrainConfig {
        network: None,
        hidden: vec![8],
        ..config(2, Some(pipeline), false)
    };
    // As a network's: the head is no block of parallel branches.
    match Trainer::new(c, images()).unwrap_err() {
        TrainError::Model(ModelError::DeviceMapping(e)) => {
            let reason = e.to_string();
            assert!(reason.contains("block 1 (head)"), "{reason}");
            assert!(reason.contains("parallel branches"), "{reason}");
        }
        other => panic!("not a device mapping error: {other}"),
    }
}
