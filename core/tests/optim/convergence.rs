//! Convergence.

use super::*;

/// Minimises `0.5 sum a_i (w_i - c_i)^2` with Adam-style optimizers.
fn quadratic<W: Element>(lamb: &Lamb, precision: Precision, steps: u64) -> f64 {
    let n = 64;
    let a: Vec<f32> = (0..n).map(|i| 0.5 + i as f32 / 32.0).collect();
    let c: Vec<f32> = values(n, 77, 2.0);
    let mut w: Vec<W> = convert(&vec![0.0f32; n]);
    let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    for t in 1..=steps {
        let g: Vec<f32> = (0..n).map(|i| a[i] * (w[i].load() - c[i])).collect();
        lamb.step(
            Step::after(t - 1),
            &precision,
            &mut Param::new(0, &mut w, &g, [&mut m, &mut v]),
        );
    }
    (0..n)
        .map(|i| f64::from(w[i].load() - c[i]).powi(2))
        .sum::<f64>()
        .sqrt()
}

#[test]
fn lamb_converges_on_a_quadratic_in_f32_and_f16() {
    let lamb = Lamb::new(LambConfig {
        lr: 0.02,
        weight_decay: 0.0,
        ..LambConfig::default()
    })
    .unwrap();
    let f32_err = quadratic::<f32>(&lamb, Precision::default(), 800);
    let f16_err = quadratic::<f16>(&lamb, Precision::default(), 800);
    assert!(f32_err < 0.05, "{f32_err}");
    assert!(f16_err < 0.05, "{f16_err}");
}

/// f16 weights without a master copy: updates far below half an ulp vanish
/// under round to nearest but survive on average under stochastic rounding.
#[test]
fn f16_round_to_nearest_stalls_where_stochastic_rounding_does_not() {
    let sgd = Sgd::new(SgdConfig {
        lr: 1e-4,
        ..SgdConfig::default()
    })
    .unwrap();
    let n = 256;
    let g = vec![1.0f32; n]; // each step moves w by -1e-4; f16's ulp at 1 is ~1e-3
    let run = |rounding: Round| {
        let precision = Precision {
            weights: rounding,
            ..Precision::default()
        };
        let mut w = vec![f16::ONE; n];
        let mut no_buffer: [f32; 0] = [];
        for t in 1..=1000 {
            sgd.step(
                Step::after(t - 1),
                &precision,
                &mut Param::new(0, &mut w, &g, [&mut no_buffer]),
            );
        }
        w.iter().map(|x| f64::from(x.to_f32())).sum::<f64>() / n as f64
    };
    let nearest = run(Round::NEAREST_EVEN);
    let stochastic = run(Round::STOCHASTIC);
    assert_eq!(nearest, 1.0, "round to nearest never moves");
    assert!(
        (stochastic - 0.9).abs() < 0.005,
        "SR tracks the exact 0.9: {stochastic}"
    );
}

/// Logistic regression on a separable 2-D problem with AdamW in f32 and in
/// bf16 weights with stochastic rounding.
#[test]
fn adamw_trains_a_logistic_regression() {
    let n = 512;
    let xs: Vec<[f32; 2]> = (0..n)
        .map(|i| {
            let v = values(2, i as u32 + 1000, 2.0);
            [v[0], v[1]]
        })
        .collect();
    let ys: Vec<f32> = xs
        .iter()
        .map(|x| f32::from(u8::from(x[0] + 0.5 * x[1] > 0.2)))
        .collect();
    let adamw = AdamW::new(AdamWConfig {
        lr: 0.05,
        weight_decay: 0.0,
        ..AdamWConfig::default()
    })
    .unwrap();
    fn train<W: Element>(adamw: &AdamW, xs: &[[f32; 2]], ys: &[f32]) -> f64 {
        let mut w: Vec<W> = convert(&[0.0, 0.0, 0.0]);
        let (mut m, mut v) = (vec![0.0f32; 3], vec![0.0f32; 3]);
        for t in 1..=300 {
            let mut g = [0.0f32; 3];
            for (x, y) in xs.iter().zip(ys) {
                let z = w[0].load() * x[0] + w[1].load() * x[1] + w[2].load();
                let p = 1.0 / (1.0 + (-z).exp());
                let e = (p - y) / xs.len() as f32;
                g[0] += e * x[0];
                g[1] += e * x[1];
                g[2] += e;
            }
            adamw
                .step(
                    Step::after(t - 1),
                    &Precision::default(),
                    &mut Param::new(0, &mut w, &g, [&mut m, &mut v]),
                )
                .unwrap();
        }
        let correct = xs
            .iter()
            .zip(ys)
            .filter(|(x, y)| {
                let z = w[0].load() * x[0] + w[1].load() * x[1] + w[2].load();
                (z > 0.0) == (**y > 0.5)
            })
            .count();
        correct as f64 / xs.len() as f64
    }
    assert!(train::<f32>(&adamw, &xs, &ys) > 0.97);
    assert!(train::<bf16>(&adamw, &xs, &ys) > 0.97);
}

#[test]
fn value_stability_of_a_lamb_trajectory() {
    let n = 300;
    let lamb = Lamb::new(LambConfig::default()).unwrap();
    let mut w: Vec<f16> = convert(&values(n, 1, 1.0));
    let (mut m, mut v) = (vec![f16::ZERO; n], vec![f16::ZERO; n]);
    for t in 1..=5 {
        let g = values(n, 40 + t as u32, 0.1);
        lamb.step(
            Step::after(t - 1),
            &Precision {
                seed: 42,
                ..Precision::default()
            },
            &mut Param::new(11, &mut w, &g, [&mut m, &mut v]),
        );
    }
    // FNV-1a over the stored bits of weights and state.
    let h = fnv_bytes(
        w.iter()
            .chain(&m)
            .chain(&v)
            .flat_map(|x| x.to_bits().to_le_bytes()),
    );
    assert_eq!(h, PINNED_LAMB_TRAJECTORY, "{h:#x}");

    // And in f32, where every rounding of the formula shows.
    let mut w = values(n, 1, 1.0);
    let (mut m, mut v) = (vec![0.0f32; n], vec![0.0f32; n]);
    for t in 1..=5 {
        let g = values(n, 40 + t as u32, 0.1);
        lamb.step(
            Step::after(t - 1),
            &Precision::default(),
            &mut Param::new(11, &mut w, &g, [&mut m, &mut v]),
        );
    }
    let h = fnv_bytes(
        w.iter()
            .chain(&m)
            .chain(&v)
            .flat_map(|x| x.to_bits().to_le_bytes()),
    );
    assert_eq!(h, PINNED_LAMB_F32_TRAJECTORY, "{h:#x}");
}

const PINNED_LAMB_F32_TRAJECTORY: u64 = 0x44fd_51b8_91d6_d47f;

const PINNED_LAMB_TRAJECTORY: u64 = 0x040d_59fd_ad3b_4d7c;
