//! Bytes on the wire (SEMANTICS.md section 4).

use super::*;

fn sent(s: &CollectiveSchedule, op: ReduceOp, elem: usize) -> Vec<usize> {
    let mut v = vec![0; s.size()];
    let mut f = |t: Transfer| v[t.from] += if elem == 4 { t.bytes / 4 } else { t.bytes };
    match elem {
        4 => s.transfers::<f32>(op, &mut f),
        _ => s.transfers::<f16>(op, &mut f),
    }
    v
}

#[test]
fn bytes_match_the_formulas() {
    let sum = ReduceOp::Sum;
    for p in 2..=16usize {
        for n in [p * 5, p * 5 + 1, 1000, 10007, p - 1] {
            let sched = |a, c| CollectiveSchedule::new(a, c, p, n).unwrap();
            let f = n.div_ceil(p);
            let (h0, h1) = (f - f / 2, f / 2);
            // Ring all-reduce: 2 n (p - 1) / p per rank, padding counted.
            for a in [Algorithm::Ring, Algorithm::BidirectionalRing] {
                assert_eq!(
                    sent(&sched(a, Collective::AllReduce), sum, 4),
                    vec![2 * (p - 1) * f; p]
                );
                assert_eq!(
                    sent(&sched(a, Collective::ReduceScatter), sum, 4),
                    vec![(p - 1) * f; p]
                );
                assert_eq!(
                    sent(&sched(a, Collective::AllGather), sum, 4),
                    vec![(p - 1) * f; p]
                );
                let total = |c| sent(&sched(a, c), sum, 4).iter().sum::<usize>();
                assert_eq!(total(Collective::Reduce { root: 1 }), (p - 1) * p * f);
                assert_eq!(total(Collective::Broadcast { root: 1 }), (p - 1) * p * f);
            }
            let chain = sent(
                &sched(Algorithm::Ring, Collective::Reduce { root: 0 }),
                sum,
                4,
            );
            assert_eq!(chain[0], 0);
            assert!(chain[1..].iter().all(|&x| x == p * f));
            // 16-bit ring all-reduce: the first hop of a reduction carries a
            // 16-bit contribution, later hops f32 partial sums, the
            // all-gather 16-bit results; Max partials stay 16-bit.
            let ring = sched(Algorithm::Ring, Collective::AllReduce);
            assert_eq!(
                sent(&ring, sum, 2),
                vec![f * 2 + f * 4 * (p - 2) + (p - 1) * f * 2; p]
            );
            assert_eq!(sent(&ring, ReduceOp::Max, 2), vec![2 * (p - 1) * f * 2; p]);
            // Halving-doubling: the same per rank for powers of two; for
            // others the fold and unfold move whole buffers.
            let hd = |c| sent(&sched(Algorithm::HalvingDoubling, c), sum, 4);
            let big = 1 << p.ilog2();
            let r = p - big;
            if r == 0 {
                assert_eq!(hd(Collective::AllReduce), vec![2 * (p - 1) * f; p]);
                assert_eq!(hd(Collective::ReduceScatter), vec![(p - 1) * f; p]);
                assert_eq!(hd(Collective::AllGather), vec![(p - 1) * f; p]);
            }
            let total = |v: Vec<usize>| v.iter().sum::<usize>();
            assert_eq!(
                total(hd(Collective::AllReduce)),
                2 * r * p * f + 2 * p * f * (big - 1)
            );
            assert_eq!(
                total(hd(Collective::ReduceScatter)),
                r * p * f + p * f * (big - 1) + r * f
            );
            assert_eq!(
                total(hd(Collective::AllGather)),
                r * f + p * f * (big - 1) + r * p * f
            );
            // Double binary tree: every edge of each tree carries every
            // chunk up and down (all-reduce), or once (all-gather).
            let dbt = |c| total(sent(&sched(Algorithm::DoubleBinaryTree, c), sum, 4));
            assert_eq!(dbt(Collective::AllReduce), 2 * (p - 1) * p * (h0 + h1));
            assert_eq!(dbt(Collective::AllGather), (p - 1) * p * (h0 + h1));
        }
    }
}

/// What the deterministic order costs on the wire (elements of the
/// reduction phase relative to the schedule's own order), as documented.
#[test]
fn deterministic_cost() {
    let elements = |a, c, p, order| {
        let s = CollectiveSchedule::new(a, c, p, p * 64)
            .unwrap()
            .with_order(order);
        let mut e = 0;
        s.transfers::<f32>(ReduceOp::Sum, |t| {
            if matches!(t.kind, Kind::Reduce { .. }) {
                e += t.elements;
            }
        });
        e
    };
    let ratio = |a, c, p| {
        elements(a, c, p, Order::Deterministic) as f64 / elements(a, c, p, Order::Schedule) as f64
    };
    // Ring reduce-scatter: sum over messages of the subtrees covered.
    for (p, want) in [
        (2, 1.0),
        (3, 4.0 / 3.0),
        (4, 18.0 / 12.0),
        (8, 120.0 / 56.0),
        (16, 696.0 / 240.0),
    ] {
        assert_eq!(
            ratio(Algorithm::Ring, Collective::ReduceScatter, p),
            want,
            "p={p}"
        );
        assert_eq!(
            ratio(Algorithm::BidirectionalRing, Collective::ReduceScatter, p),
            want,
            "p={p}"
        );
    }
    for p in 1..=16 {
        assert_eq!(
            ratio(Algorithm::HalvingDoubling, Collective::AllReduce, p.max(2)),
            1.0
        );
        // Max needs no order: one partial per message.
        let s = CollectiveSchedule::new(Algorithm::Ring, Collective::AllReduce, p, 100)
            .unwrap()
            .with_order(Order::Deterministic);
        s.transfers::<f32>(ReduceOp::Max, |t| assert_eq!(t.partials, 1));
        assert_eq!(s.scratch_len::<f32>(ReduceOp::Max), 0);
        let d = CollectiveSchedule::new(Algorithm::DoubleBinaryTree, Collective::AllReduce, p, 100)
            .unwrap();
        let det = d.with_order(Order::Deterministic);
        let expected_scratch = if p > 2 { (p - 1) * 100 } else { 0 };
        assert_eq!(det.scratch_len::<f32>(ReduceOp::Sum), expected_scratch);
        assert_eq!(
            d.scratch_len::<f16>(ReduceOp::Sum),
            if p > 1 { p * 100 } else { 100 }
        );
    }
    let dbt: Vec<(usize, f64)> = [4, 8, 16]
        .into_iter()
        .map(|p| {
            (
                p,
                ratio(Algorithm::DoubleBinaryTree, Collective::AllReduce, p),
            )
        })
        .collect();
    for &(p, r) in &dbt {
        assert!(r > 1.0 && r < 3.0, "DBT p={p}: {r}");
    }
    println!("deterministic order, reduction-phase elements / schedule order: DBT {dbt:?}");
}
