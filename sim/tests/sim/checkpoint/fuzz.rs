//! The checkpoint reader under mutated files: bit flips and byte writes
//! (anywhere, and in the header), truncations, insertions, removals and
//! copied ranges, up to 10 at once, on a trainer's checkpoint and on one of
//! every type. No input panics; a file that loads holds exactly the
//! original contents, so one with changed tensor bytes never loads.
//!
//! `TESSERA_CHECKPOINT_FUZZ_CASES` sets the mutated files per checkpoint
//! (default 10,000); the runner is seeded, so a run is reproducible.

use std::cell::Cell;
use std::path::Path;

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestRng, TestRunner};
use tessera_sim::checkpoint::Checkpoint;
use tessera_sim::train::NamedOptimizer;
use tessera_sim::train::{LossScaling, OptimizerConfig, PrecisionMode, RunOptions, Trainer};

use super::{Scratch, every_type};
use crate::train::{config, data};

/// One change to a file's bytes; positions are taken modulo the length
/// at the time.
#[derive(Clone, Debug)]
enum Mutation {
    /// Flips a bit, anywhere or within the header.
    Flip { at: Index, bit: u8, header: bool },
    /// Overwrites a byte.
    Set { at: Index, byte: u8 },
    /// Cuts the file at a position.
    Truncate { at: Index },
    /// Inserts bytes.
    Insert { at: Index, bytes: Vec<u8> },
    /// Removes up to `len` bytes.
    Remove { at: Index, len: usize },
    /// Copies up to `len` bytes from one place over another.
    Copy { from: Index, to: Index, len: usize },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<Index>(), 0..8u8, any::<bool>())
            .prop_map(|(at, bit, header)| Mutation::Flip { at, bit, header }),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::Set { at, byte }),
        1 => any::<Index>().prop_map(|at| Mutation::Truncate { at }),
        1 => (any::<Index>(), vec(any::<u8>(), 1..16))
            .prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (any::<Index>(), 1..64usize).prop_map(|(at, len)| Mutation::Remove { at, len }),
        1 => (any::<Index>(), any::<Index>(), 1..64usize)
            .prop_map(|(from, to, len)| Mutation::Copy { from, to, len }),
    ]
}

/// `bytes` after `mutations`, of which `header_end` bytes are the header.
fn apply(bytes: &[u8], header_end: usize, mutations: &[Mutation]) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for m in mutations {
        if b.is_empty() {
            break;
        }
        let n = b.len();
        match m {
            Mutation::Flip { at, bit, header } => {
                let span = if *header { header_end.min(n) } else { n };
                b[at.index(span)] ^= 1 << bit;
            }
            Mutation::Set { at, byte } => b[at.index(n)] = *byte,
            Mutation::Truncate { at } => b.truncate(at.index(n)),
            Mutation::Insert { at, bytes } => {
                let at = at.index(n + 1);
                b.splice(at..at, bytes.iter().copied());
            }
            Mutation::Remove { at, len } => {
                let at = at.index(n);
                b.drain(at..(at + len).min(n));
            }
            Mutation::Copy { from, to, len } => {
                let (from, to) = (from.index(n), to.index(n));
                let len = (*len).min(n - from).min(n - to);
                b.copy_within(from..from + len, to);
            }
        }
    }
    b
}

/// Mutated files per checkpoint.
fn cases() -> u32 {
    std::env::var("TESSERA_CHECKPOINT_FUZZ_CASES").map_or(10_000, |v| {
        v.parse()
            .expect("TESSERA_CHECKPOINT_FUZZ_CASES is a number")
    })
}

/// The file of a short run in `16.32` (master weights), LAMB (two state
/// tensors), batch norm and automatic loss scaling: every kind of tensor.
fn trainer_checkpoint() -> Vec<u8> {
    let scratch = Scratch::new("fuzz-trainer");
    let path = scratch.path("ckpt.safetensors");
    let c = tessera_sim::train::TrainConfig {
        precision: PrecisionMode::Mixed,
        optimizer: OptimizerConfig::named("lamb", 0.01).unwrap(),
        loss_scaling: LossScaling::Automatic(Default::default()),
        batch_norm: true,
        epochs: 1,
        ..config(1, 2, 8)
    };
    let options = RunOptions {
        checkpoint: Some(path.clone()),
        ..RunOptions::default()
    };
    Trainer::new(c, data())
        .unwrap()
        .run(&options, &|_| {})
        .unwrap();
    std::fs::read(&path).unwrap()
}

/// Whether `a` and `b` hold the same tensors and metadata, bit for bit.
fn same(a: &Checkpoint, b: &Checkpoint) -> bool {
    let bits = |c: &Checkpoint| {
        c.tensors
            .iter()
            .map(|t| (t.name.clone(), t.shape.clone(), super::data_bits(&t.data)))
            .collect::<Vec<_>>()
    };
    bits(a) == bits(b) && a.metadata == b.metadata
}

#[test]
fn mutated_checkpoints_never_load_changed_contents() {
    let mut every = every_type();
    every.metadata.insert("optimizer".into(), "lamb".into());
    let cases = cases();
    for (what, bytes) in [
        ("trainer", trainer_checkpoint()),
        ("every type", every.to_bytes().unwrap()),
    ] {
        let path = Path::new("fuzzed.safetensors");
        let original = Checkpoint::from_bytes(&bytes, path).unwrap();
        let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
        let header_end = 8 + usize::try_from(header_len).unwrap();
        let config = Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        };
        let rng = TestRng::deterministic_rng(config.rng_algorithm);
        let mut runner = TestRunner::new_with_rng(config, rng);
        let (ran, loaded, changed) = (Cell::new(0u32), Cell::new(0u32), Cell::new(0u32));
        runner
            .run(&vec(mutation(), 1..=10), |mutations| {
                ran.set(ran.get() + 1);
                let mutated = apply(&bytes, header_end, &mutations);
                let data_changed =
                    mutated.len() == bytes.len() && mutated[header_end..] != bytes[header_end..];
                changed.set(changed.get() + u32::from(data_changed));
                match Checkpoint::from_bytes(&mutated, path) {
                    Ok(c) => {
                        loaded.set(loaded.get() + 1);
                        prop_assert!(!data_changed, "changed tensor bytes loaded");
                        prop_assert!(same(&c, &original), "loaded other contents");
                    }
                    Err(e) => prop_assert!(!e.to_string().contains('\n'), "{e}"),
                }
                Ok(())
            })
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(ran.get() >= cases, "{what}: {} runs", ran.get());
        // Those that load changed only the header's padding.
        println!(
            "{what}: {} mutated files, {} with changed tensor bytes in place, {} loaded",
            ran.get(),
            changed.get(),
            loaded.get()
        );
    }
}
