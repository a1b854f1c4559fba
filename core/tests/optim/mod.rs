//! Optimizers: SIMD against scalar twins, partition invariance, formulas
//! against independent f64 references, convergence, pinned trajectories.

use half::{bf16, f16};
use proptest::prelude::*;
use tessera_core::fp::{Element, Round};
use tessera_core::kernels::{BLOCK, ExactSum};
use tessera_core::optim::{
    AdamW, AdamWConfig, ConfigError, Lamb, LambConfig, Lars, LarsConfig, Param, Partials,
    Precision, Sgd, SgdConfig, Step, clip_scale, reference,
};

/// Deterministic pseudo-random values in about [-scale, scale].
pub(crate) fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    (0..n as u32)
        .map(|i| {
            let h = (i ^ seed.rotate_left(7))
                .wrapping_mul(0x9e37_79b9)
                .rotate_left(13)
                ^ seed;
            let h = h.wrapping_mul(0x85eb_ca6b);
            (h as f32 / u32::MAX as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

fn convert<E: Element>(x: &[f32]) -> Vec<E> {
    x.iter()
        .map(|&v| E::store(v, tessera_core::fp::Rounding::Nearest, 0))
        .collect()
}

fn bits<E: Element>(x: &[E]) -> Vec<u32> {
    x.iter().map(|v| v.load().to_bits()).collect()
}

fn lamb_configs() -> Vec<LambConfig> {
    let base = LambConfig::default();
    vec![
        base,
        LambConfig {
            decoupled_decay: true,
            trust_clip: true,
            ..base
        },
        LambConfig {
            bias_correction: false,
            grad_averaging: false,
            min_weight_norm: 0.0,
            max_weight_norm: 10.0,
            ..base
        },
        LambConfig {
            always_adapt: true,
            weight_decay: 0.0,
            ..base
        },
        base.excluded(),
    ]
}

/// Runs LAMB SIMD and scalar over typed copies of the same data and
/// compares every stored bit, for several steps.
fn lamb_twins<W: Element, G: Element, S: Element>(n: usize, precision: Precision) {
    for config in lamb_configs() {
        let lamb = Lamb::new(config).unwrap();
        let mut w: [Vec<W>; 2] = std::array::from_fn(|_| convert(&values(n, 1, 1.0)));
        let mut m: [Vec<S>; 2] = std::array::from_fn(|_| convert(&values(n, 2, 0.01)));
        let mut v: [Vec<S>; 2] = std::array::from_fn(|_| {
            convert(
                &values(n, 3, 1e-4)
                    .iter()
                    .map(|x| x.abs())
                    .collect::<Vec<_>>(),
            )
        });
        for t in 1..=3 {
            let g: Vec<G> = convert(&values(n, 10 + t as u32, 0.1));
            let step = Step::after(t - 1).with_grad_scale(0.5);
            let [w0, w1] = &mut w;
            let [m0, m1] = &mut m;
            let [v0, v1] = &mut v;
            let mut simd = Param::new(7, w0, &g, [m0, v0]);
            let mut scalar = Param::new(7, w1, &g, [m1, v1]);
            let a = lamb.partials(step, &simd);
            let b = reference::lamb_partials(&lamb, step, &scalar);
            assert_eq!(a, b, "partials, {}", W::NAME);
            lamb.apply(step, &a, &precision, &mut simd);
            reference::lamb_apply(&lamb, step, &b, &precision, &mut scalar);
        }
        assert_eq!(bits(&w[0]), bits(&w[1]), "weights {config:?}");
        assert_eq!(bits(&m[0]), bits(&m[1]));
        assert_eq!(bits(&v[0]), bits(&v[1]));
    }
}

#[test]
fn lamb_simd_matches_scalar_for_every_precision() {
    let sr = Precision {
        seed: 5,
        ..Precision::default()
    };
    let rn = Precision {
        weights: Round::NEAREST_EVEN,
        state: Round::NEAREST_EVEN,
        seed: 0,
    };
    for n in [0, 1, 7, 8, 9, 255, 256, 257, 1000] {
        lamb_twins::<f32, f32, f32>(n, sr);
        lamb_twins::<f16, f16, f32>(n, sr);
        lamb_twins::<bf16, bf16, bf16>(n, sr);
        lamb_twins::<f16, f32, f16>(n, rn);
        lamb_twins::<f32, bf16, f16>(n, sr);
    }
}

/// One optimizer step for SIMD and scalar, compared bit for bit.
fn twin_check<const N: usize>(
    n: usize,
    mut run: impl FnMut(bool, &mut Param<'_, f16, bf16, f32, N>),
) {
    let mut w: [Vec<f16>; 2] = std::array::from_fn(|_| convert(&values(n, 1, 1.0)));
    let mut s: [[Vec<f32>; N]; 2] =
        std::array::from_fn(|_| std::array::from_fn(|k| values(n, 20 + k as u32, 0.01)));
    let g: Vec<bf16> = convert(&values(n, 4, 0.1));
    for (twin, (w, s)) in w.iter_mut().zip(s.iter_mut()).enumerate() {
        let mut p = Param::new(3, w, &g, s.each_mut().map(|s| s.as_mut_slice()));
        run(twin == 1, &mut p);
    }
    assert_eq!(bits(&w[0]), bits(&w[1]));
    for (a, b) in s[0].iter().zip(&s[1]) {
        assert_eq!(bits(a), bits(b));
    }
}

#[test]
fn sgd_adamw_lars_simd_match_scalar() {
    let precision = Precision::default();
    for n in [0, 5, 8, 100, 513] {
        for t in [1, 2] {
            let step = Step::after(t - 1);
            for config in [
                SgdConfig::default(),
                SgdConfig {
                    momentum: 0.9,
                    dampening: 0.1,
                    weight_decay: 1e-4,
                    ..SgdConfig::default()
                },
                SgdConfig {
                    momentum: 0.9,
                    nesterov: true,
                    weight_decay: 1e-4,
                    ..SgdConfig::default()
                },
            ] {
                let sgd = Sgd::new(config).unwrap();
                twin_check::<1>(n, |scalar, p| {
                    if scalar {
                        reference::sgd_step(&sgd, step, &precision, p)
                    } else {
                        sgd.step(step, &precision, p)
                    }
                });
            }
            let adamw = AdamW::new(AdamWConfig::default()).unwrap();
            twin_check::<2>(n, |scalar, p| {
                if scalar {
                    reference::adamw_step(&adamw, step, &precision, p).unwrap();
                } else {
                    adamw.step(step, &precision, p).unwrap();
                }
            });
            for config in [
                LarsConfig {
                    weight_decay: 1e-4,
                    momentum: 0.9,
                    ..LarsConfig::default()
                },
                LarsConfig {
                    weight_decay: 1e-4,
                    trust_clip: true,
                    lr: 0.1,
                    ..LarsConfig::default()
                },
                LarsConfig::default(),
            ] {
                let lars = Lars::new(config).unwrap();
                twin_check::<1>(n, |scalar, p| {
                    if scalar {
                        let totals = reference::lars_partials(&lars, step, p);
                        reference::lars_apply(&lars, step, &totals, &precision, p);
                    } else {
                        lars.step(step, &precision, p);
                    }
                });
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any block-aligned partition, partials merged in any order, pieces
    /// applied separately: bitwise one `step` over the whole tensor.
    #[test]
    fn lamb_and_lars_are_partition_invariant(
        blocks in 1usize..12,
        tail in 0usize..BLOCK,
        cuts in proptest::collection::vec(0usize..12, 0..5),
        reverse: bool,
        seed in 0u32..1000,
    ) {
        let n = blocks * BLOCK + tail;
        let mut bounds: Vec<usize> = cuts.iter().map(|c| (c * BLOCK).min(n)).collect();
        bounds.extend([0, n]);
        bounds.sort_unstable();
        bounds.dedup();
        let g: Vec<f32> = values(n, seed, 0.1);
        let precision = Precision { seed: u64::from(seed), ..Precision::default() };
        let step = Step::after(2);

        // LAMB, f16 weights with stochastic rounding, f32 state.
        let lamb = Lamb::new(LambConfig::default()).unwrap();
        let w0: Vec<f16> = convert(&values(n, seed + 1, 1.0));
        let m0 = values(n, seed + 2, 0.01);
        let v0: Vec<f32> = values(n, seed + 3, 1e-4).iter().map(|x| x.abs()).collect();
        let (mut w_whole, mut m_whole, mut v_whole) = (w0.clone(), m0.clone(), v0.clone());
        lamb.step(step, &precision, &mut Param::new(9, &mut w_whole, &g, [&mut m_whole, &mut v_whole]));

        let (mut w, mut m, mut v) = (w0, m0, v0);
        let mut pieces: Vec<Partials> = bounds.windows(2).map(|b| {
            let (lo, hi) = (b[0], b[1]);
            let p = Param {
                weights: &mut w[lo..hi], grads: &g[lo..hi],
                state: [&mut m[lo..hi], &mut v[lo..hi]], id: 9, offset: lo as u64,
            };
            lamb.partials(step, &p)
        }).collect();
        if reverse { pieces.reverse(); }
        let mut totals = Partials::default();
        for piece in &pieces { totals.merge(piece); }
        // Apply over different, unaligned pieces.
        for (lo, hi) in [(0, n / 3), (n / 3, n)] {
            let mut p = Param {
                weights: &mut w[lo..hi], grads: &g[lo..hi],
                state: [&mut m[lo..hi], &mut v[lo..hi]], id: 9, offset: lo as u64,
            };
            lamb.apply(step, &totals, &precision, &mut p);
        }
        prop_assert_eq!(bits(&w), bits(&w_whole));
        prop_assert_eq!(bits(&m), bits(&m_whole));
        prop_assert_eq!(bits(&v), bits(&v_whole));

        // LARS with momentum, f32.
        let lars = Lars::new(LarsConfig { weight_decay: 1e-4, momentum: 0.9, ..LarsConfig::default() }).unwrap();
        let w0 = values(n, seed + 4, 1.0);
        let b0 = values(n, seed + 5, 0.01);
        let (mut w_whole, mut b_whole) = (w0.clone(), b0.clone());
        lars.step(step, &precision, &mut Param::new(1, &mut w_whole, &g, [&mut b_whole]));
        let (mut w, mut b) = (w0, b0);
        let mut totals = Partials::default();
        for bound in bounds.windows(2).rev() {
            let (lo, hi) = (bound[0], bound[1]);
            let p = Param { weights: &mut w[lo..hi], grads: &g[lo..hi], state: [&mut b[lo..hi]], id: 1, offset: lo as u64 };
            totals.merge(&lars.partials(step, &p));
        }
        // Across "replicas": the limbs survive an integer all-reduce.
        let totals = Partials::from_limbs(totals.limbs());
        lars.apply(step, &totals, &precision, &mut Param::new(1, &mut w, &g, [&mut b]));
        prop_assert_eq!(bits(&w), bits(&w_whole));
        prop_assert_eq!(bits(&b), bits(&b_whole));
    }
}

mod accumulation;
mod convergence;
mod decay;
mod formulas;

pub(crate) fn norm(x: &[f64]) -> f64 {
    x.iter().map(|v| v * v).sum::<f64>().sqrt()
}

/// FNV-1a over bytes: a stable fingerprint for pinned trajectories.
fn fnv_bytes(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}
