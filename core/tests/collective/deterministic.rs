//! The deterministic order across algorithms and rank counts.

use super::*;

/// `C` arbitrary f32 contributions; for every `p` with `C = m * p`, `m` a
/// power of two (and `p = 1`), each rank passes `tree_sum` of its `m`: every
/// algorithm's all-reduce, reduce-scatter and reduce give `tree_sum` of all
/// `C`, bitwise.
#[test]
fn deterministic_across_algorithms_and_rank_counts() {
    let n = 1000;
    for total in [16usize, 24, 20, 12, 7] {
        let mut g = Gen(total as u64);
        let contributions: Vec<Vec<f32>> = (0..total)
            .map(|_| (0..n).map(|_| g.in_range(-24, 24)).collect())
            .collect();
        let refs: Vec<&[f32]> = contributions.iter().map(|c| &c[..]).collect();
        let mut want = vec![0.0f32; n];
        tree_sum(&refs, &mut want);
        let mut rank_counts = vec![1];
        let mut m = 1;
        while m <= total {
            if total % m == 0 {
                rank_counts.push(total / m);
            }
            m *= 2;
        }
        rank_counts.dedup();
        for &p in &rank_counts {
            let m = total / p;
            let inputs: Vec<Vec<f32>> = (0..p)
                .map(|r| {
                    let mut x = vec![0.0f32; n];
                    tree_sum(&refs[r * m..(r + 1) * m], &mut x);
                    x
                })
                .collect();
            for algorithm in Algorithm::ALL {
                for c in [
                    Collective::AllReduce,
                    Collective::ReduceScatter,
                    Collective::Reduce { root: p / 2 },
                ] {
                    let s = CollectiveSchedule::new(algorithm, c, p, n)
                        .unwrap()
                        .with_order(Order::Deterministic);
                    let mut out = inputs.clone();
                    exec(&s, &Reducer::new(ReduceOp::Sum), &mut out);
                    check_result(
                        &s,
                        &inputs,
                        &out,
                        &want,
                        &format!("deterministic C={total} p={p} {algorithm:?} {c:?}"),
                    );
                }
            }
        }
        // The test is not vacuous: the ring's own order differs somewhere.
        if total == 16 {
            let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, 16, n).unwrap();
            assert_eq!(s.order(), Order::Schedule);
            let mut out = contributions.clone();
            exec(&s, &Reducer::new(ReduceOp::Sum), &mut out);
            assert!(
                out[0]
                    .iter()
                    .zip(&want)
                    .any(|(a, b)| a.to_bits() != b.to_bits())
            );
        }
    }
}

/// 16-bit contributions, one per rank: every algorithm, the same bits.
#[test]
fn deterministic_half_across_algorithms() {
    fn case<T: Element>() {
        let n = 513;
        for p in [3, 5, 8, 11, 16] {
            let mut g = Gen(p as u64);
            let inputs: Vec<Vec<T>> = (0..p)
                .map(|_| {
                    (0..n)
                        .map(|_| T::store(g.in_range(-8, 8), Rounding::Nearest, 0))
                        .collect()
                })
                .collect();
            let mut first: Option<Vec<T>> = None;
            for algorithm in Algorithm::ALL {
                for op in [ReduceOp::Sum, ReduceOp::Mean] {
                    let s = CollectiveSchedule::new(algorithm, Collective::AllReduce, p, n)
                        .unwrap()
                        .with_order(Order::Deterministic);
                    let mut out = inputs.clone();
                    exec(&s, &Reducer::new(op).with_rounding(sr_rounding()), &mut out);
                    if op == ReduceOp::Sum {
                        match &first {
                            None => first = Some(out[0].clone()),
                            Some(f) => assert_bits_eq(
                                &out[0],
                                f,
                                &format!("{} p={p} {algorithm:?}", T::NAME),
                            ),
                        }
                    }
                    for o in &out[1..] {
                        assert_bits_eq(o, &out[0], "ranks differ");
                    }
                }
            }
        }
    }
    case::<f16>();
    case::<bf16>();
}

#[test]
fn tree_sum_order() {
    let c: Vec<[f32; 1]> = [1.0f32, 1.0e8, -1.0e8, 1.0, 3.0]
        .iter()
        .map(|&x| [x])
        .collect();
    let refs: Vec<&[f32]> = c.iter().map(|x| &x[..]).collect();
    let mut out = [0.0f32];
    // C = 5: ((c0 + c1) + c2) + (c3 + c4).
    tree_sum(&refs, &mut out);
    assert_eq!(out[0], ((1.0f32 + 1.0e8) + -1.0e8) + (1.0 + 3.0));
    tree_sum(&refs[..4], &mut out);
    assert_eq!(out[0], (1.0f32 + 1.0e8) + (-1.0e8 + 1.0));
    tree_sum::<f32>(&[], &mut out);
    assert_eq!(out[0].to_bits(), 0);
    // Pinned: C = 6 seeded values.
    let mut g = Gen(2024);
    let c: Vec<Vec<f32>> = (0..6).map(|_| vec![g.in_range(-20, 20)]).collect();
    let refs: Vec<&[f32]> = c.iter().map(|x| &x[..]).collect();
    tree_sum(&refs, &mut out);
    let v: Vec<f32> = c.iter().map(|x| x[0]).collect();
    assert_eq!(out[0], ((v[0] + v[1]) + (v[2] + v[3])) + (v[4] + v[5]));
}
