//! Quantised products in training: every new mode gives bitwise the same
//! weights and losses over instances, replicas and accumulation splits
//! (per-tensor scales are a max over a micro-batch's tensor, MX scales a
//! max over 32 values of one sample or one weight line: neither depends
//! on the split), and differs from `16.16`.

use tessera_sim::train::{PrecisionMode, TrainConfig};

use crate::train::{assert_same, config, run};

#[test]
fn every_new_mode_gives_the_same_bits_on_every_split() {
    let half = run(TrainConfig {
        epochs: 1,
        ..config(1, 1, 16)
    })
    .fingerprint;
    for mode in ["8.16", "8.32", "mxfp8.16", "mxfp6.16", "mxfp4.16"] {
        let precision: PrecisionMode = mode.parse().unwrap();
        let with = |i, r, a| TrainConfig {
            precision,
            epochs: 1,
            ..config(i, r, a)
        };
        let reference = run(with(1, 1, 16));
        assert!(reference.steps.iter().all(|s| s.loss.is_finite()), "{mode}");
        for (i, r, a) in [(2, 4, 4), (4, 16, 1)] {
            let what = format!("{mode} {i} instances x {r} replicas x {a}");
            assert_same(&reference, &run(with(i, r, a)), &what);
        }
        assert_ne!(reference.fingerprint, half, "{mode}");
    }
}
