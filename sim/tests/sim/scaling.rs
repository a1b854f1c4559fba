//! Scaling properties of the Pod model and the planner: with fixed work per
//! replica, throughput never grows faster than the IPUs; a ring all-reduce
//! inside an IPU-Link domain never gets cheaper as the domain grows; bad
//! topologies are typed errors.

use proptest::prelude::*;
use tessera_collectives::{Algorithm, Edge, Fabric, FabricError, Link, Ports};
use tessera_sim::IpuSpec;
use tessera_sim::plan::{Builtin, Optimizer, PlanConfig, Precision, Schedule};
use tessera_sim::pod::{Algorithms, Distribution, LinkSpec, PodError, PodSpec};

/// IPU-M2000 to POD256, each twice (or four times) the one before.
fn pods() -> Vec<PodSpec> {
    let mut pods = vec![PodSpec::m2000(), PodSpec::pod16(), PodSpec::pod64()];
    pods.extend([2, 4].map(|n| PodSpec::pods(n).unwrap()));
    pods
}

fn algorithms() -> impl Strategy<Value = Algorithms> {
    prop_oneof![
        Just(Algorithms::Gcl),
        Just(Algorithms::Auto),
        proptest::sample::select(Algorithm::ALL.to_vec()).prop_map(Algorithms::Only),
    ]
}

/// A planner configuration of the options `tessera plan` accepts, but
/// replicated tensor sharding.
fn config() -> impl Strategy<Value = PlanConfig> {
    (
        proptest::sample::select(Builtin::ALL.to_vec()),
        (
            1usize..=32,
            1usize..=16,
            prop_oneof![Just(1usize), Just(2), Just(4)],
        ),
        (
            proptest::sample::select(vec![Precision::Fp32, Precision::Mixed, Precision::Half]),
            proptest::sample::select(vec![
                Optimizer::Sgd,
                Optimizer::AdamW,
                Optimizer::Lamb,
                Optimizer::Lars,
            ]),
        ),
        (any::<bool>(), any::<bool>(), any::<bool>()),
        (algorithms(), 1usize..=8),
        proptest::sample::select(vec![
            Schedule::Grouped,
            Schedule::Interleaved,
            Schedule::Sequential,
        ]),
    )
        .prop_map(
            |(model, (mb, g, stages), (precision, optimizer), flags, (alg, di), schedule)| {
                let (recompute, offload, bow) = flags;
                let mut c = PlanConfig::new(model.table(), PodSpec::pod16());
                c.ipu = if bow {
                    IpuSpec::BOW
                } else {
                    IpuSpec::MK2_GC200
                };
                c.micro_batch = mb;
                c.gradient_accumulation = g.max(stages);
                c.ipus_per_replica = stages;
                c.precision = precision;
                c.optimizer = optimizer;
                c.recompute = recompute;
                // Not replicated tensor sharding: it divides the
                // optimizer's work and state by the replicas of a domain,
                // so per-replica work is not fixed and a larger Pod is
                // rightly faster per IPU.
                c.offload_optimizer_state = offload;
                c.collectives = alg;
                c.device_iterations = di;
                c.schedule = schedule;
                c
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Never superlinear: the same replica on a Pod of `M` IPUs gives at
    /// most `M / N` times the throughput on `N` IPUs, planned Pod by Pod,
    /// and the plan's own scaling table says so too.
    #[test]
    fn throughput_never_grows_faster_than_the_ipus(base in config()) {
        let mut last: Option<(usize, f64)> = None;
        for pod in pods() {
            let mut c = base.clone();
            c.replicas = (pod.ipus() / c.ipus_per_replica).max(1);
            c.pod = pod.clone();
            // A lone IPU-M2000's rings of two IPUs (replicas of two) use
            // one neighbour's links where a POD16's closed rails give each
            // IPU two: it is slower per IPU (see ARCHITECTURE.md).
            if pod.ipus() == 4 && c.ipus_per_replica == 2 {
                continue;
            }
            let Ok(plan) = c.plan() else { continue };
            let (ipus, rate) = (c.replicas * c.ipus_per_replica, plan.samples_per_second);
            if let Some((n, before)) = last {
                prop_assert!(
                    rate * n as f64 <= before * ipus as f64 * (1.0 + 1e-12),
                    "{}: {rate} samples/s on {ipus} IPUs after {before} on {n}",
                    pod.name()
                );
            }
            last = Some((ipus, rate));
            for w in plan.scaling.windows(2) {
                prop_assert!(w[1].efficiency <= w[0].efficiency * (1.0 + 1e-12));
                prop_assert!(w[1].efficiency <= 1.0 + 1e-12);
            }
        }
    }

    /// A ring all-reduce inside one IPU-Link domain of 2 to 64 IPUs never
    /// gets cheaper as the domain grows, for replicas of 1, 2 or 4 IPUs,
    /// once its rings have three ranks or more (a ring of two has one
    /// neighbour, and more ranks bring each IPU a second one).
    #[test]
    fn ring_all_reduce_cost_grows_with_the_domain(
        bytes in 1u64..(1 << 28),
        k in prop_oneof![Just(1usize), Just(2), Just(4)],
        alg in prop_oneof![
            Just(Algorithms::Gcl),
            Just(Algorithms::Only(Algorithm::Ring)),
            Just(Algorithms::Only(Algorithm::BidirectionalRing)),
        ],
    ) {
        let ipu = IpuSpec::MK2_GC200;
        let mut last = 0.0;
        for ipus in [2usize, 4, 8, 16, 32, 64] {
            if ipus < k {
                continue;
            }
            if ipus / k == 2 {
                continue;
            }
            let pod = PodSpec::custom(
                format!("{ipus} IPUs"),
                ipus,
                ipu,
                LinkSpec::ipu_link(&ipu),
                LinkSpec::gw_link(),
            )
            .unwrap();
            let d = Distribution { instances: 1, replicas: ipus / k, ipus_per_replica: k };
            let t = d.layout(&pod).unwrap().with_algorithms(alg).all_reduce_time(bytes).total();
            prop_assert!(t >= last, "{ipus} IPUs, {k} per replica, {bytes} B: {t} < {last}");
            last = t;
        }
    }
}

#[test]
fn bad_pod_topologies_are_errors_with_their_numbers() {
    let link = Link::new(1e-6, 16e9, 0.85, Ports::PerPeer).unwrap();
    let e = |a, b, links| Edge { a, b, links };
    let ring: Vec<usize> = (0..16).collect();
    // A link to a missing IPU.
    let mut edges: Vec<Edge> = (0..15).map(|i| e(i, i + 1, 2)).collect();
    edges.push(e(15, 16, 2));
    let err = Fabric::new(16, edges, link, ring.clone()).unwrap_err();
    assert_eq!(
        err,
        FabricError::MissingNode {
            edge: 15,
            node: 16,
            nodes: 16
        }
    );
    assert_eq!(
        PodError::from(err).to_string(),
        "IPU-Link topology: edge 15 joins node 16, but the fabric has nodes 0..16"
    );
    // Zero bandwidth: the link is refused before any fabric.
    assert!(Link::new(1e-6, 0.0, 0.85, Ports::PerPeer).is_err());
    let zero = LinkSpec {
        bandwidth_bytes_per_s: 0.0,
        ..LinkSpec::ipu_link(&IpuSpec::MK2_GC200)
    };
    let pod = PodSpec::custom("zero", 16, IpuSpec::MK2_GC200, zero, LinkSpec::gw_link());
    assert!(
        matches!(
            pod,
            Err(PodError::Link {
                link: "IPU-Link",
                ..
            })
        ),
        "{pod:?}"
    );
    // Links of zero count, an IPU no link reaches.
    assert_eq!(
        Fabric::new(2, vec![e(0, 1, 0)], link, vec![0, 1]),
        Err(FabricError::NoLinks { edge: 0 })
    );
    assert_eq!(
        Fabric::new(3, vec![e(0, 1, 1)], link, vec![0, 1, 2]),
        Err(FabricError::Unreachable { node: 2 })
    );
    // A topology that does not fit the Pod's IPU-Link domain, and replicas
    // that do not fit the Pod.
    let eight = Fabric::ring(8, 2, link).unwrap();
    assert_eq!(
        PodSpec::pod16().with_fabric(eight),
        Err(PodError::FabricSize {
            nodes: 8,
            domain_ipus: 16
        })
    );
    let too_many = Distribution {
        instances: 1,
        replicas: 32,
        ipus_per_replica: 1,
    };
    assert_eq!(
        too_many.layout(&PodSpec::pod16()),
        Err(PodError::TooManyIpus {
            replicas: 32,
            ipus_per_replica: 1,
            available: 16
        })
    );
    // A custom ring of 16 IPUs is priced over its own links.
    let ring16 = Fabric::ring(16, 2, link).unwrap();
    let pod = PodSpec::pod16().with_fabric(ring16).unwrap();
    let t = Distribution {
        instances: 1,
        replicas: 16,
        ipus_per_replica: 1,
    }
    .layout(&pod)
    .unwrap()
    .all_reduce_time(1 << 20);
    assert!(t.ipu_link_s > 0.0);
}
