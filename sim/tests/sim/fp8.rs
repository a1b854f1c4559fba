//! Quantised products in training: every new mode gives bitwise the same
//! weights and losses over instances, replicas and accumulation splits
//! (per-tensor scales are a max over a micro-batch's tensor, MX scales a
//! max over 32 values of one sample or one weight line: neither depends
//! on the split), and differs from `16.16`; so does NVFP4 with an f16
//! accumulator (its tensor scale a max too, the accumulator's rounding
//! fixed by the product's tree).

use tessera_sim::model::quant::{Accumulator, Recipe};
use tessera_sim::train::{LowFamily, LowPrecision, PrecisionMode, TrainConfig};

use crate::train::{assert_same, config, run};

#[test]
fn every_new_mode_gives_the_same_bits_on_every_split() {
    let half = run(TrainConfig {
        epochs: 1,
        ..config(1, 1, 16)
    })
    .fingerprint;
    let nvfp4_f16 = PrecisionMode::Low(LowPrecision {
        family: LowFamily::Mxfp4,
        master: false,
        recipe: Recipe {
            accumulator: Accumulator::F16,
            ..Recipe::NVFP4
        },
    });
    let modes = ["8.16", "8.32", "mxfp8.16", "mxfp6.16", "mxfp4.16"]
        .map(|m| (m, m.parse::<PrecisionMode>().unwrap()));
    for (mode, precision) in modes.into_iter().chain([("nvfp4 f16", nvfp4_f16)]) {
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
