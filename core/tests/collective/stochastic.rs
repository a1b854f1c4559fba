//! Stochastic rounding: addressed by the global element index.

use super::*;

/// Contributions `1 + k * 2^-10` (f16) or `1 + k * 2^-7` (bf16), random
/// signs: their f32 sums are exact, but need rounding to 16 bits.
fn fine_grid<T: Element>(p: usize, n: usize, bits: i32, seed: u64) -> Vec<Vec<T>> {
    let mut g = Gen(seed);
    let unit = 2f32.powi(-bits);
    (0..p)
        .map(|_| {
            (0..n)
                .map(|_| {
                    let v = 1.0 + g.below(1 << bits) as f32 * unit;
                    T::store(if g.below(2) == 0 { v } else { -v }, Rounding::Nearest, 0)
                })
                .collect()
        })
        .collect()
}

fn sr_case<T: Element + fp::HalfFloat>(grid_bits: i32) {
    let n = 997;
    for p in [2, 3, 4, 6, 8, 16] {
        let inputs = fine_grid::<T>(p, n, grid_bits, p as u64);
        for op in [ReduceOp::Sum, ReduceOp::Mean] {
            // The oracle: exact f32 sums (Mean: one division), rounded by the
            // fp module's slice kernel with the same stream and first index.
            let sums: Vec<f32> = (0..n)
                .map(|i| {
                    let s = inputs.iter().map(|b| f64::from(b[i].load())).sum::<f64>() as f32;
                    op.finish(s, p)
                })
                .collect();
            let Rounding::Stochastic { sr, first_index } = sr_rounding() else {
                unreachable!()
            };
            let mut want = vec![T::default(); n];
            fp::f32_to_half_sr_slice(&sums, &mut want, sr, first_index);
            let mut nearest = vec![T::default(); n];
            fp::f32_to_half_slice(&sums, &mut nearest);
            assert_ne!(want, nearest, "the test must round something up");
            let red = Reducer::new(op).with_rounding(sr_rounding());
            for algorithm in Algorithm::ALL {
                for order in [Order::Schedule, Order::Deterministic] {
                    for c in [
                        Collective::AllReduce,
                        Collective::ReduceScatter,
                        Collective::Reduce { root: p - 1 },
                    ] {
                        let s = CollectiveSchedule::new(algorithm, c, p, n)
                            .unwrap()
                            .with_order(order);
                        let mut out = inputs.clone();
                        exec(&s, &red, &mut out);
                        check_result(
                            &s,
                            &inputs,
                            &out,
                            &want,
                            &format!("SR {} {algorithm:?} {c:?} p={p}", <T as Element>::NAME),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn stochastic_rounding_independent_of_algorithm() {
    sr_case::<f16>(10);
    sr_case::<bf16>(7);
}

/// The same exact sums over 4 ranks and over 8 (each contribution split
/// into two exact halves): fragments of different sizes, the same bits.
#[test]
fn stochastic_rounding_independent_of_fragmenting() {
    let n = 1001;
    let four = fine_grid::<f16>(4, n, 10, 99);
    let eight: Vec<Vec<f16>> = four
        .iter()
        .flat_map(|b| {
            let sign = |x: f16| if x.to_f32() < 0.0 { -1.0 } else { 1.0 };
            let frac: Vec<f16> = b
                .iter()
                .map(|&x| f16::from_f32(x.to_f32() - sign(x)))
                .collect();
            let unit: Vec<f16> = b.iter().map(|&x| f16::from_f32(sign(x))).collect();
            [frac, unit]
        })
        .collect();
    let red = Reducer::new(ReduceOp::Sum).with_rounding(sr_rounding());
    let mut results = Vec::new();
    for (inputs, p) in [(&four, 4), (&eight, 8)] {
        for algorithm in Algorithm::ALL {
            let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n).unwrap();
            let mut out = inputs.clone();
            exec(&s, &red, &mut out);
            results.push(out.swap_remove(0));
        }
    }
    for r in &results[1..] {
        assert_bits_eq(r, &results[0], "SR across rank counts and algorithms");
    }
}
