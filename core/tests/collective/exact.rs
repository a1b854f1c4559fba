//! Exact results.

use super::*;

fn matrix<T: Element>(
    ps: impl Iterator<Item = usize>,
    ns: impl Fn(usize) -> Vec<usize>,
    ops: &[ReduceOp],
) {
    for p in ps {
        for algorithm in Algorithm::ALL {
            for c in collectives(p) {
                for n in ns(p) {
                    for order in [Order::Schedule, Order::Deterministic] {
                        let s = CollectiveSchedule::new(algorithm, c, p, n)
                            .unwrap()
                            .with_order(order);
                        let these: &[ReduceOp] = if c.reduces() { ops } else { &[ReduceOp::Sum] };
                        for &op in these {
                            run_case::<T>(&s, &Reducer::new(op), (p * 1000 + n) as u64);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn exact_small_counts_f32() {
    matrix::<f32>(1..=16, counts, &ReduceOp::ALL);
}

#[test]
fn exact_small_counts_f16() {
    matrix::<f16>(1..=16, counts, &ReduceOp::ALL);
}

#[test]
fn exact_small_counts_bf16() {
    matrix::<bf16>(1..=16, counts, &ReduceOp::ALL);
}

#[test]
fn exact_large_counts() {
    let ps = [1, 2, 3, 5, 8, 13, 16].into_iter();
    matrix::<f32>(
        ps.clone(),
        |_| vec![1000, 10007],
        &[ReduceOp::Sum, ReduceOp::Max],
    );
    matrix::<bf16>(ps, |_| vec![10007], &[ReduceOp::Mean, ReduceOp::Min]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Random groups, lengths, roots and orders: exact answers.
    #[test]
    fn exact_random_cases(
        p in 1usize..=16,
        n in 0usize..300,
        alg in 0usize..4,
        which in 0usize..5,
        root in 0usize..16,
        det in any::<bool>(),
        op in 0usize..4,
        seed in any::<u64>(),
    ) {
        let root = root % p;
        let c = [
            Collective::ReduceScatter,
            Collective::AllGather,
            Collective::AllReduce,
            Collective::Reduce { root },
            Collective::Broadcast { root },
        ][which];
        let order = if det { Order::Deterministic } else { Order::Schedule };
        let s = CollectiveSchedule::new(Algorithm::ALL[alg], c, p, n).unwrap().with_order(order);
        let red = Reducer::new(ReduceOp::ALL[op]);
        run_case::<f32>(&s, &red, seed);
        run_case::<f16>(&s, &red, seed);
    }

    /// The deterministic order is `tree_sum` of the ranks' inputs, for
    /// arbitrary f32 and any algorithm.
    #[test]
    fn deterministic_is_tree_sum(
        p in 1usize..=16,
        n in 0usize..100,
        alg in 0usize..4,
        seed in any::<u64>(),
    ) {
        let mut g = Gen(seed);
        let inputs: Vec<Vec<f32>> = (0..p).map(|_| (0..n).map(|_| g.in_range(-30, 30)).collect()).collect();
        let refs: Vec<&[f32]> = inputs.iter().map(|b| &b[..]).collect();
        let mut want = vec![0.0f32; n];
        tree_sum(&refs, &mut want);
        let s = CollectiveSchedule::new(Algorithm::ALL[alg], Collective::AllReduce, p, n)
            .unwrap()
            .with_order(Order::Deterministic);
        let mut out = inputs.clone();
        exec(&s, &Reducer::new(ReduceOp::Sum), &mut out);
        for b in &out {
            assert_bits_eq(b, &want, "deterministic all-reduce");
        }
    }
}
