use super::fitted::cost;
use super::*;
use crate::error::ConfigError;
use crate::topology::Topology;
use tessera_core::collective::{Algorithm, Collective, CollectiveSchedule, ReduceOp};

fn link(ports: Ports) -> Link {
    Link::new(3e-6, 2e9, 0.8, ports).unwrap()
}

fn model() -> CostModel {
    CostModel::new(Topology::flat(link(Ports::Single), 5e9).unwrap())
}

#[test]
fn closed_forms_match_the_schedules_where_exact() {
    // Fragments that divide evenly, f32, schedule order: the closed
    // forms are the schedules' message-by-message cost.
    let m = model();
    for ports in [Ports::Single, Ports::PerPeer] {
        let l = link(ports);
        for p in [2usize, 3, 4, 5, 8, 16] {
            let len = p * 1024;
            for c in [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
            ] {
                for a in [Algorithm::Ring, Algorithm::BidirectionalRing] {
                    let s = CollectiveSchedule::new(a, c, p, len).unwrap();
                    let exact = m.schedule_time::<f32>(&s, ReduceOp::Sum, &l);
                    let closed = m.estimate(a, c, p, len, 4, &l).unwrap().seconds;
                    assert!(
                        (exact - closed).abs() <= 1e-9 * exact,
                        "{a:?} {c:?} p={p} {ports:?}: {exact} vs {closed}"
                    );
                }
                if p.is_power_of_two() {
                    let a = Algorithm::HalvingDoubling;
                    let s = CollectiveSchedule::new(a, c, p, len).unwrap();
                    let exact = m.schedule_time::<f32>(&s, ReduceOp::Sum, &l);
                    let closed = m.estimate(a, c, p, len, 4, &l).unwrap().seconds;
                    assert!(
                        (exact - closed).abs() <= 1e-9 * exact,
                        "{a:?} {c:?} p={p}: {exact} vs {closed}"
                    );
                }
            }
        }
    }
}

#[test]
fn closed_forms_bound_the_other_schedules() {
    // Trees, non-powers of two, reduce and broadcast: within a factor
    // of two of the message-by-message cost (the closed forms charge
    // the busiest rank at every step).
    let m = model();
    let l = link(Ports::Single);
    for p in [3usize, 5, 6, 7, 12] {
        let len = p * 4096;
        for a in Algorithm::ALL {
            for c in [
                Collective::AllReduce,
                Collective::ReduceScatter,
                Collective::AllGather,
                Collective::Reduce { root: 1 },
                Collective::Broadcast { root: 1 },
            ] {
                let s = CollectiveSchedule::new(a, c, p, len).unwrap();
                let exact = m.schedule_time::<f32>(&s, ReduceOp::Sum, &l);
                let closed = m.estimate(a, c, p, len, 4, &l).unwrap().seconds;
                let ratio = closed / exact;
                assert!((0.5..=2.0).contains(&ratio), "{a:?} {c:?} p={p}: {ratio}");
            }
        }
    }
}

#[test]
fn selection_follows_message_size() {
    let l = Link::new(10e-6, 10e9, 1.0, Ports::Single).unwrap();
    let m = CostModel::new(Topology::flat(l, 20e9).unwrap());
    let pick = |p, n| {
        m.select(Collective::AllReduce, p, n, 4, &l, &Algorithm::ALL)
            .unwrap()
            .algorithm
    };
    // Few steps win small messages; equal data per port ties the
    // ring with halving-doubling for large ones, and the tree sends
    // more through one port.
    assert_eq!(pick(16, 64), Algorithm::HalvingDoubling);
    assert_eq!(pick(8, 1), Algorithm::HalvingDoubling);
    let big = pick(16, 1 << 24);
    assert!(
        matches!(big, Algorithm::HalvingDoubling | Algorithm::Ring),
        "{big:?}"
    );
    // With a link per peer, the bidirectional ring halves the bandwidth
    // term and wins large messages.
    let l2 = Link::new(10e-6, 10e9, 1.0, Ports::PerPeer).unwrap();
    let e = m
        .select(Collective::AllReduce, 6, 1 << 24, 4, &l2, &Algorithm::ALL)
        .unwrap();
    assert!(
        matches!(
            e.algorithm,
            Algorithm::BidirectionalRing | Algorithm::DoubleBinaryTree
        ),
        "{e:?}"
    );
}

#[test]
fn a_fitted_link_is_charged_each_algorithms_measured_cost() {
    const RANKS: &[(usize, [AlgorithmCost; 4])] = &[
        (2, [cost(1e-6, 1e-10, 2e-10); 4]),
        (
            4,
            [
                cost(2e-6, 3e-10, 4e-10),
                cost(5e-6, 1e-10, 1e-10),
                cost(5e-6, 1e-10, 1e-10),
                cost(7e-6, 5e-10, 6e-10),
            ],
        ),
    ];
    let fitted = Fitted {
        cache: 4096.0,
        ranks: RANKS,
    };
    let link = link(Ports::Single).with_fitted(fitted);
    let m = model();
    for (p, len, ring) in [
        // In cache: alpha and beta_cached.
        (4, 1024, (2e-6, 3e-10, 0.0)),
        // A 16 KiB buffer: a quarter of its bandwidth term in cache.
        (4, 4096, (2e-6, 0.25 * 3e-10, 0.75 * 4e-10)),
        // 5 and 8 ranks take the 4-rank costs.
        (5, 1024, (2e-6, 3e-10, 0.0)),
        (8, 1024, (2e-6, 3e-10, 0.0)),
    ] {
        let t = terms(
            Algorithm::Ring,
            Collective::AllReduce,
            p,
            len,
            4,
            Ports::Single,
        )
        .unwrap();
        let e = m
            .estimate(Algorithm::Ring, Collective::AllReduce, p, len, 4, &link)
            .unwrap();
        let want = t.latency * ring.0 + t.bandwidth * (ring.1 + ring.2);
        assert!(
            (e.seconds - want).abs() <= 1e-12 * want,
            "p={p} n={len}: {e:?}"
        );
    }
    let two = m
        .estimate(
            Algorithm::HalvingDoubling,
            Collective::AllReduce,
            2,
            64,
            4,
            &link,
        )
        .unwrap();
    assert!(
        (two.seconds - (2.0 * 1e-6 + 256.0 * 1e-10)).abs() < 1e-15,
        "{two:?}"
    );
    // The fitted costs, not the link's alpha and beta, choose.
    let pick = m
        .select(Collective::AllReduce, 4, 1 << 20, 4, &link, &Algorithm::ALL)
        .unwrap();
    assert_eq!(pick.algorithm, Algorithm::BidirectionalRing);
}

#[test]
fn the_thread_transport_is_costed_as_measured() {
    // `tessera bench allreduce` at 4 thread ranks: halving-doubling's
    // fewer steps win small buffers, the ring (1.6 to 2.4x faster from
    // 4 MiB) large ones, which one link's alpha and beta cannot say.
    let m = CostModel::default();
    let link = *m.topology().intra();
    assert!(link.fitted().is_some());
    let pick = |p, bytes: usize| {
        m.select(
            Collective::AllReduce,
            p,
            bytes / 4,
            4,
            &link,
            &Algorithm::ALL,
        )
        .unwrap()
        .algorithm
    };
    for bytes in [4 << 10, 16 << 10, 64 << 10] {
        assert_eq!(pick(4, bytes), Algorithm::HalvingDoubling, "{bytes} B");
    }
    for bytes in [256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20] {
        assert_eq!(pick(4, bytes), Algorithm::Ring, "{bytes} B");
    }
    // MPI processes have their own: not halving-doubling from 1 MiB at
    // 4 ranks (1.22 to 1.46x the fastest there).
    let m = CostModel::new(Topology::processes());
    let link = *m.topology().intra();
    for bytes in [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20] {
        let e = m
            .select(
                Collective::AllReduce,
                4,
                bytes / 4,
                4,
                &link,
                &Algorithm::ALL,
            )
            .unwrap();
        assert_ne!(e.algorithm, Algorithm::HalvingDoubling, "{bytes} B");
    }
}

#[test]
fn bus_bandwidth_factors_are_nccl_tests() {
    assert_eq!(bus_factor(Collective::AllReduce, 4), 1.5);
    assert_eq!(bus_factor(Collective::ReduceScatter, 4), 0.75);
    assert_eq!(bus_factor(Collective::AllGather, 8), 0.875);
    assert_eq!(bus_factor(Collective::Broadcast { root: 0 }, 8), 1.0);
    assert_eq!(busbw(Collective::AllReduce, 2, 1000, 1e-6), 1e9);
}

#[test]
fn invalid_configurations_are_typed_errors() {
    assert_eq!(
        Link::new(-1.0, 1.0, 1.0, Ports::Single),
        Err(ConfigError::Negative {
            field: "latency",
            value: -1.0
        })
    );
    assert!(matches!(
        Link::new(0.0, 0.0, 1.0, Ports::Single),
        Err(ConfigError::NotPositive {
            field: "bandwidth",
            ..
        })
    ));
    assert!(matches!(
        Link::new(0.0, 1.0, 1.5, Ports::Single),
        Err(ConfigError::Efficiency { .. })
    ));
    assert!(matches!(
        Link::new(0.0, 1.0, f64::NAN, Ports::Single),
        Err(ConfigError::Efficiency { .. })
    ));
    let l = link(Ports::Single);
    assert!(Topology::two_level(0, l, l, 1.0).is_err());
    assert!(Topology::flat(l, 0.0).is_err());
}

#[test]
fn the_pod_preset_prefers_ipu_links() {
    let t = Topology::ipu_pod(64).unwrap();
    assert_eq!(t.intra().ports(), Ports::PerPeer);
    assert!(t.intra().beta() < t.inter().beta());
    assert_eq!(*t.link_for([0, 63]), *t.intra());
    assert_eq!(*t.link_for([0, 64]), *t.inter());
    assert!(Topology::ipu_pod(0).is_err());
}

#[test]
fn two_level_topologies_pick_the_link_of_the_members() {
    let fast = Link::new(1e-6, 100e9, 1.0, Ports::PerPeer).unwrap();
    let slow = Link::new(10e-6, 10e9, 1.0, Ports::Single).unwrap();
    let t = Topology::two_level(4, fast, slow, 50e9).unwrap();
    assert_eq!(*t.link_for([4, 5, 6, 7]), fast);
    assert_eq!(*t.link_for([1, 5, 9, 13]), slow);
    let m = CostModel::new(t);
    let h = m.hierarchical_all_reduce(16, 4, 1 << 20, 4).unwrap();
    let flat = m
        .select(
            Collective::AllReduce,
            16,
            1 << 20,
            4,
            &slow,
            &Algorithm::ALL,
        )
        .unwrap()
        .seconds;
    assert!(h < flat, "hierarchical {h} vs flat {flat}");
    assert!(m.hierarchical_all_reduce(16, 3, 10, 4).is_err());
}
