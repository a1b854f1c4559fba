//! The Pod model: presets, parsing, distributions and their errors,
//! layouts, collective costs against the collectives cost model, syncs,
//! host transfers, process identities.

use tessera_collectives::cost::terms;
use tessera_collectives::{Algorithm, Collective, ConfigError, Link, Ports, Topology};
use tessera_sim::IpuSpec;
use tessera_sim::ipu::TargetError;
use tessera_sim::pod::{
    Algorithms, CollectiveTime, Distribution, DistributionField, GW_LINKS_PER_M2000, LinkSpec,
    MAX_POD_IPUS, POD64_IPUS, PodError, PodSpec, Prefetch, ProcessId, RANK_VARIABLE, SIZE_VARIABLE,
    scaling_table,
};

fn dist(instances: usize, replicas: usize, ipus_per_replica: usize) -> Distribution {
    Distribution {
        instances,
        replicas,
        ipus_per_replica,
    }
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs())
}

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * a.abs().max(b.abs())
}

#[test]
fn presets_have_graphcore_ipu_counts() {
    assert_eq!(PodSpec::m2000().ipus(), 4);
    assert_eq!(PodSpec::pod16().ipus(), 16);
    assert_eq!(PodSpec::pod64().ipus(), 64);
    assert_eq!(PodSpec::pods(1).unwrap(), PodSpec::pod64());
    assert_eq!(PodSpec::pods(2).unwrap().ipus(), 128);
    assert_eq!(PodSpec::pods(4).unwrap().ipus(), 256);
    assert_eq!(PodSpec::pods(4).unwrap().name(), "POD256");
    assert_eq!(PodSpec::pods(4).unwrap().pod64s(), 4);
    assert_eq!(PodSpec::pods(0), Err(PodError::PodSize { ipus: 0 }));
    assert!(matches!(
        PodSpec::pods(usize::MAX),
        Err(PodError::PodSize { .. })
    ));
    for (pod, m2000s, domain) in [
        (PodSpec::m2000(), 1, 4),
        (PodSpec::pod16(), 4, 16),
        (PodSpec::pod64(), 16, 64),
        (PodSpec::pods(2).unwrap(), 32, 64),
    ] {
        assert_eq!(pod.m2000s(), m2000s, "{pod}");
        assert_eq!(pod.domain_ipus(), domain, "{pod}");
        assert_eq!(pod.ipu(), &IpuSpec::MK2_GC200);
        assert_eq!(pod.ipus_per_m2000(), 4);
    }
}

#[test]
fn preset_links_come_from_the_ipu_and_collectives() {
    let pod = PodSpec::pod64();
    let ipu = pod.ipu().params();
    let l = pod.ipu_link();
    // One IPU-Link rate everywhere: 128 Gbit/s each way (the GC200's 10
    // links carry 320 GB/s), at PopLibs' 0.85.
    assert_eq!(l.bandwidth_bytes_per_s, 16e9);
    assert_eq!(
        l.bandwidth_bytes_per_s * 8.0,
        ipu.link_bits_per_second as f64
    );
    assert_eq!(l.bandwidth_bytes_per_s, Topology::IPU_LINK.bandwidth());
    assert_eq!(pod.fabric().link().bandwidth(), 16e9);
    assert_eq!(l.efficiency, 0.85);
    assert_eq!(l.sync_per_hop_s, 15e-9);
    assert_eq!(l.latency_s, Topology::IPU_LINK.alpha());
    // One GW-Link: 100 Gbit/s, shared by the IPU-M2000's 4 IPUs; 2 each.
    let gw = pod.gw_link();
    assert_eq!(gw.bandwidth_bytes_per_s, 100e9 / 8.0);
    assert_eq!(
        gw.bandwidth_bytes_per_s / 4.0,
        Topology::GW_LINK_PER_IPU.bandwidth()
    );
    assert_eq!(GW_LINKS_PER_M2000, 2);
    assert_eq!(pod.host_link().bandwidth_bytes_per_s, 100e9 / 8.0);
    // The ladder: 10 IPU-Links per IPU, closed into a torus from a POD16;
    // a lone IPU-M2000's end IPUs have no loop-back cables.
    for (pod, closed) in [(PodSpec::pod16(), true), (PodSpec::pod64(), true)] {
        let f = pod.fabric();
        assert_eq!(f.nodes(), pod.domain_ipus());
        assert!((0..f.nodes()).all(|n| f.links_of(n) == 10));
        assert_eq!(f.hops(0, f.nodes() - 2) == 1, closed);
    }
    let m2000 = PodSpec::m2000();
    assert_eq!(m2000.fabric().links_of(0), 8);
    assert_eq!(PodSpec::pods(4).unwrap().fabric().nodes(), 64);
    // A Bow Pod keeps the ladder, at the Bow's link figures.
    let bow = PodSpec::pod16().with_ipu(IpuSpec::BOW);
    assert_eq!(bow.fabric().edges(), PodSpec::pod16().fabric().edges());
}

#[test]
fn parsing_names_and_errors() {
    for (s, ipus) in [
        ("m2000", 4),
        ("IPU-M2000", 4),
        ("pod16", 16),
        ("POD16", 16),
        ("Pod64", 64),
        ("pod128", 128),
        ("pod256", 256),
        (" pod512 ", 512),
        ("pod1024", 1024),
    ] {
        let pod: PodSpec = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(pod.ipus(), ipus, "{s}");
    }
    assert_eq!("pod128".parse::<PodSpec>().unwrap().name(), "POD128");
    for bad in [
        "", "pod", "pods", "m2001", "gpu64", "pod-64", "pod6 4", "pod+64",
    ] {
        assert_eq!(
            bad.parse::<PodSpec>(),
            Err(PodError::UnknownPodName),
            "{bad:?}"
        );
    }
    // The largest Pod Graphcore specifies parses; one POD64 more does not
    // (`plan` once aborted on a Pod of 2^60 IPUs, allocating its rings).
    assert_eq!(
        "pod65536".parse::<PodSpec>().map(|p| p.ipus()),
        Ok(MAX_POD_IPUS)
    );
    for (bad, ipus) in [
        ("pod0", 0),
        ("pod8", 8),
        ("pod100", 100),
        ("pod96", 96),
        ("pod65600", 65_600),
        ("pod999999999999999936", 999_999_999_999_999_936),
    ] {
        let err = bad.parse::<PodSpec>().unwrap_err();
        assert_eq!(err, PodError::PodSize { ipus }, "{bad}");
        assert!(err.to_string().contains(&ipus.to_string()), "{err}");
    }
    assert!(matches!(
        "pod99999999999999999999999".parse::<PodSpec>(),
        Err(PodError::PodSize { .. })
    ));
    assert!(
        PodError::UnknownPodName
            .to_string()
            .contains("pod16, pod64")
    );
}

#[test]
fn custom_pods_are_validated() {
    let ipu = IpuSpec::MK2_GC200;
    let (il, gw) = (LinkSpec::ipu_link(&ipu), LinkSpec::gw_link());
    for ipus in [1, 2, 8, 32, 64, 192] {
        let pod = PodSpec::custom("p", ipus, ipu, il, gw).unwrap();
        assert_eq!(pod.ipus(), ipus);
    }
    for ipus in [0, 3, 12, 96, 100, MAX_POD_IPUS + 64] {
        assert_eq!(
            PodSpec::custom("p", ipus, ipu, il, gw),
            Err(PodError::PodSize { ipus })
        );
    }
    let slow = LinkSpec {
        bandwidth_bytes_per_s: 0.0,
        ..il
    };
    assert!(matches!(
        PodSpec::custom("p", 4, ipu, slow, gw),
        Err(PodError::Link {
            link: "IPU-Link",
            error: ConfigError::NotPositive { .. }
        })
    ));
    let bad = LinkSpec {
        efficiency: 1.5,
        ..gw
    };
    assert!(matches!(
        PodSpec::custom("p", 4, ipu, il, bad),
        Err(PodError::Link {
            link: "GW-Link",
            error: ConfigError::Efficiency { .. }
        })
    ));
    let bad = LinkSpec {
        sync_per_hop_s: -1.0,
        ..il
    };
    assert!(matches!(
        PodSpec::custom("p", 4, ipu, bad, gw),
        Err(PodError::Link {
            error: ConfigError::Negative {
                field: "sync_per_hop_s",
                ..
            },
            ..
        })
    ));
    let host = LinkSpec {
        latency_s: f64::NAN,
        ..LinkSpec::host_link()
    };
    assert!(PodSpec::pod16().with_host_link(host).is_err());
}

#[test]
fn every_invalid_distribution_names_its_numbers() {
    let pod64 = PodSpec::pod64();
    let pod128 = PodSpec::pods(2).unwrap();
    let m2000 = PodSpec::m2000();
    let cases = [
        (
            dist(0, 4, 1),
            &pod64,
            PodError::Zero(DistributionField::Instances),
            "instances",
        ),
        (
            dist(1, 0, 1),
            &pod64,
            PodError::Zero(DistributionField::Replicas),
            "replicas",
        ),
        (
            dist(1, 4, 0),
            &pod64,
            PodError::Zero(DistributionField::IpusPerReplica),
            "ipus_per_replica",
        ),
        (
            dist(3, 8, 1),
            &pod64,
            PodError::InstancesDoNotDivideReplicas {
                instances: 3,
                replicas: 8,
            },
            "3 instances do not divide 8 replicas",
        ),
        (
            dist(1, 4, 3),
            &pod64,
            PodError::IpusPerReplicaNotPowerOfTwo {
                ipus_per_replica: 3,
            },
            "3 IPUs per replica",
        ),
        (
            dist(1, 1, 8),
            &m2000,
            PodError::ReplicaLargerThanDomain {
                ipus_per_replica: 8,
                domain_ipus: 4,
            },
            "8 IPUs per replica",
        ),
        (
            dist(1, 2, 128),
            &PodSpec::pods(4).unwrap(),
            PodError::ReplicaLargerThanDomain {
                ipus_per_replica: 128,
                domain_ipus: 64,
            },
            "domain of 64 IPUs",
        ),
        (
            dist(1, 17, 4),
            &pod64,
            PodError::TooManyIpus {
                replicas: 17,
                ipus_per_replica: 4,
                available: 64,
            },
            "need 68 IPUs, the Pod has 64",
        ),
        (
            dist(1, usize::MAX, 2),
            &pod64,
            PodError::TooManyIpus {
                replicas: usize::MAX,
                ipus_per_replica: 2,
                available: 64,
            },
            "the Pod has 64",
        ),
        (
            dist(1, 96, 1),
            &pod128,
            PodError::PartialDomain {
                ipus: 96,
                domain_ipus: 64,
            },
            "96 IPUs",
        ),
    ];
    for (d, pod, want, text) in cases {
        let err = d.layout(pod).unwrap_err();
        assert_eq!(err, want, "{d:?} on {pod}");
        let msg = err.to_string();
        assert!(msg.contains(text), "{msg:?} lacks {text:?}");
    }
    // Non-powers of two of replicas are fine, within one domain.
    assert!(dist(1, 3, 1).layout(&pod64).is_ok());
    assert!(dist(3, 12, 4).layout(&pod64).is_ok());
    assert!(dist(2, 128, 1).layout(&pod128).is_ok());
}

#[test]
fn layout_maps_are_consistent_and_disjoint() {
    let pods = [
        PodSpec::m2000(),
        PodSpec::pod16(),
        PodSpec::pod64(),
        PodSpec::pods(2).unwrap(),
        PodSpec::pods(4).unwrap(),
    ];
    let mut checked = 0;
    for pod in &pods {
        for k in [1usize, 2, 4, 8, 16, 32, 64] {
            for replicas in 1..=pod.ipus() / k {
                for instances in [1usize, 2, 3, 4, 8] {
                    let Ok(l) = dist(instances, replicas, k).layout(pod) else {
                        continue;
                    };
                    checked += 1;
                    assert_eq!(l.replicas(), replicas);
                    assert_eq!(l.instances(), instances);
                    assert_eq!(l.ipus_per_replica(), k);
                    assert_eq!(l.replicas_per_instance() * instances, replicas);
                    // Instances partition the replicas in order.
                    let mut next = 0;
                    for i in 0..instances {
                        let rs = l.replicas_of(i);
                        assert_eq!(rs.start, next);
                        assert_eq!(rs.len(), l.replicas_per_instance());
                        for r in rs.clone() {
                            assert_eq!(l.instance_of(r), i);
                        }
                        next = rs.end;
                    }
                    assert_eq!(next, replicas);
                    // Replicas take consecutive, disjoint IPUs of the Pod,
                    // each within one IPU-Link domain.
                    let mut ipu = 0;
                    for r in 0..replicas {
                        let ipus = l.ipus_of(r);
                        assert_eq!((ipus.start, ipus.len()), (ipu, k));
                        assert!(ipus.end <= pod.ipus());
                        let domain = pod.domain_ipus();
                        assert_eq!(ipus.start / domain, (ipus.end - 1) / domain);
                        assert_eq!(l.domain_of(r), ipus.start / domain);
                        ipu = ipus.end;
                    }
                    assert_eq!(l.ipus(), ipu);
                    assert_eq!(l.replicas_per_domain() * l.domains(), replicas);
                    assert_eq!(l.replica_target().unwrap().ipus() as usize, k);
                }
            }
        }
    }
    assert!(checked > 500, "{checked}");
}

#[test]
fn replica_targets_and_processes() {
    let pod = PodSpec::pod16();
    let l = dist(2, 4, 4).layout(&pod).unwrap();
    let t = l.replica_target().unwrap();
    assert_eq!((t.ipus(), t.spec()), (4, &IpuSpec::MK2_GC200));
    assert_eq!(
        l.replicas_of_process(ProcessId::new(1, 2).unwrap()),
        Ok(2..4)
    );
    assert_eq!(
        l.replicas_of_process(ProcessId::SINGLE),
        Err(PodError::ProcessCountMismatch {
            count: 1,
            instances: 2
        })
    );
    // A replica whose tiles overflow a tile index.
    let huge = IpuSpec::new(tessera_sim::IpuParams {
        tiles: u32::MAX / 2,
        memory_per_tile: 1,
        ..Default::default()
    })
    .unwrap();
    let pod = PodSpec::custom(
        "huge",
        4,
        huge,
        LinkSpec::ipu_link(&huge),
        LinkSpec::gw_link(),
    )
    .unwrap();
    let l = dist(1, 1, 4).layout(&pod).unwrap();
    assert_eq!(
        l.replica_target(),
        Err(PodError::Target(TargetError::TooManyTiles {
            ipus: 4,
            tiles_per_ipu: u32::MAX / 2
        }))
    );
}

#[test]
fn all_reduce_time_is_monotone_and_split_by_link() {
    let sizes = [0u64, 1, 7, 1000, 1 << 16, 1 << 20, 100 << 20, 1 << 32];
    let cases = [
        (PodSpec::pod16(), dist(1, 16, 1), false),
        (PodSpec::pod64(), dist(4, 64, 1), false),
        (PodSpec::pod64(), dist(1, 16, 4), false),
        (PodSpec::pods(2).unwrap(), dist(1, 64, 1), false),
        (PodSpec::pods(2).unwrap(), dist(2, 128, 1), true),
        (PodSpec::pods(4).unwrap(), dist(4, 64, 4), true),
        (PodSpec::pods(4).unwrap(), dist(1, 256, 1), true),
    ];
    for (pod, d, crosses) in cases {
        let l = d.layout(&pod).unwrap();
        let mut last = CollectiveTime::default();
        for bytes in sizes {
            let t = l.all_reduce_time(bytes);
            assert!(t.total().is_finite());
            assert!(t.total() >= last.total(), "{d:?} {bytes}: {t:?} < {last:?}");
            if crosses && bytes > 0 {
                assert!(t.gw_link_s > 0.0, "{d:?} {bytes}");
                assert!(t.ipu_link_s > 0.0, "{d:?} {bytes}");
            } else {
                assert_eq!(t.gw_link_s, 0.0, "{d:?} {bytes}");
            }
            for other in [
                l.reduce_scatter_time(bytes),
                l.all_gather_time(bytes),
                l.broadcast_time(bytes),
            ] {
                assert!(other.total().is_finite() && other.total() >= 0.0);
                assert_eq!(other.gw_link_s > 0.0, crosses && bytes > 0, "{d:?}");
            }
            last = t;
        }
        // All-reduce is reduce-scatter then all-gather, at most.
        let n = 100 << 20;
        let ar = l.all_reduce_time(n).total();
        let rs_ag = l.reduce_scatter_time(n).total() + l.all_gather_time(n).total();
        assert!(ar <= rs_ag * (1.0 + 1e-9), "{d:?}: {ar} vs {rs_ag}");
    }
    // One replica: nothing to reduce.
    let one = dist(1, 1, 4).layout(&PodSpec::pod16()).unwrap();
    assert_eq!(one.all_reduce_time(1 << 20), CollectiveTime::default());
    // GW-Links are slower: the same replicas over two POD64s cost more
    // than within one.
    let inside = dist(1, 64, 1).layout(&PodSpec::pods(2).unwrap()).unwrap();
    let across = dist(1, 64, 2).layout(&PodSpec::pods(2).unwrap()).unwrap();
    let n = 100 << 20;
    assert!(across.all_reduce_time(2 * n).total() > inside.all_reduce_time(n).total());
}

#[test]
fn all_reduce_is_gcl_rings_routed_over_the_ladder() {
    let pod = PodSpec::pod64();
    let bytes = 4 * 25_000_001u64;
    let len = usize::try_from(bytes).unwrap();
    // Up the even rail, down the odd one: every ring step is one hop, and
    // the rails' 2 links per hop are the bottleneck (the rungs have 6). So
    // GCL's cheaper ring is the closed form over a link of twice the rate.
    let il = pod.fabric().link();
    let rail = Link::new(
        il.alpha(),
        2.0 * il.bandwidth(),
        il.efficiency(),
        Ports::PerPeer,
    )
    .unwrap();
    let gamma = Topology::ipu_pod(64).unwrap().gamma();
    for p in [4usize, 16, 64] {
        let l = dist(1, p, 1).layout(&pod).unwrap();
        let t = l.all_reduce_time(bytes);
        let closed = [Algorithm::Ring, Algorithm::BidirectionalRing]
            .map(|a| {
                terms(a, Collective::AllReduce, p, len, 1, Ports::PerPeer)
                    .unwrap()
                    .seconds(&rail, gamma)
            })
            .into_iter()
            .fold(f64::INFINITY, f64::min);
        // Within a byte per step: the routed schedule's halves of odd
        // fragments are whole elements.
        assert!(near(t.ipu_link_s, closed), "p={p}: {t:?} vs {closed}");
        assert_eq!(t.gw_link_s, 0.0);
        // `auto` picks among every algorithm at its routed cost: never
        // dearer than GCL's rings; halving-doubling's far partners cost
        // hops and shared links.
        let auto = l.clone().with_algorithms(Algorithms::Auto);
        assert!(auto.all_reduce_time(bytes).total() <= t.total());
        let hd = l.with_algorithms(Algorithms::Only(Algorithm::HalvingDoubling));
        assert!(hd.all_reduce_time(bytes).total() > t.total(), "p={p}");
    }
    // Two IPUs per replica: two rings, one per rail, each over half the
    // bytes; four IPUs per replica: four rings of every other IPU of a
    // rail, two per rail sharing its links, each step two hops: about as
    // fast as two (a quarter of the bytes, but shared links).
    let two = dist(1, 32, 2).layout(&pod).unwrap().all_reduce_time(bytes);
    let four = dist(1, 16, 4).layout(&pod).unwrap().all_reduce_time(bytes);
    let one = dist(1, 64, 1).layout(&pod).unwrap().all_reduce_time(bytes);
    assert!(two.total() < one.total());
    assert!(four.total() > 0.9 * two.total() && four.total() < one.total());

    // Hierarchical over four POD64s: reduce-scatter and all-gather inside
    // each, an all-reduce of the IPU's fragment over the GW-Links' ring.
    let pod256 = PodSpec::pods(4).unwrap();
    let l = dist(1, 256, 1).layout(&pod256).unwrap();
    let t = l.all_reduce_time(bytes);
    let inside = dist(1, 64, 1).layout(&pod256).unwrap();
    let rs = inside.reduce_scatter_time(bytes).total();
    let ag = inside.all_gather_time(bytes).total();
    assert!(close(t.ipu_link_s, rs + ag), "{t:?}");
    // The GW part: a bidirectional ring of 4 at one GW-Link's per-IPU share
    // each way to each neighbour, of a 64th of the bytes.
    let gw = Topology::GW_LINK_PER_IPU;
    let frag = len.div_ceil(64);
    let ring = terms(
        Algorithm::BidirectionalRing,
        Collective::AllReduce,
        4,
        frag,
        1,
        Ports::PerPeer,
    )
    .unwrap()
    .seconds(&gw, gamma);
    assert!(near(t.gw_link_s, ring), "{t:?} vs {ring}");
}

#[test]
fn sync_time_is_the_poplibs_model() {
    let pod = PodSpec::pods(2).unwrap();
    let ipu = pod.ipu();
    for (replicas, k) in [(1usize, 1usize), (2, 1), (4, 1), (4, 4), (16, 1), (16, 4)] {
        let l = dist(1, replicas, k).layout(&pod).unwrap();
        let n = replicas * k;
        let hops = 1 + n / 4;
        assert!(close(l.sync_time(), 2.0 * hops as f64 * 15e-9), "{n}");
        // The IPU's own sync figure, within a cycle of rounding.
        let cycles = ipu.sync_cycles(n as u32);
        let seconds = ipu.seconds(cycles);
        if n > 1 {
            assert!(
                seconds >= l.sync_time() && seconds - l.sync_time() < ipu.seconds(1),
                "{n}"
            );
        }
    }
    // 64 IPUs: 17 hops; across POD64s a GW-Link round trip more.
    let one = dist(1, 64, 1).layout(&pod).unwrap().sync_time();
    assert!(close(one, 2.0 * 17.0 * 15e-9));
    let two = dist(1, 128, 1).layout(&pod).unwrap().sync_time();
    assert!(close(two, one + 2.0 * pod.gw_link().sync_per_hop_s));
}

#[test]
fn host_io_shares_each_m2000_link() {
    let pod = PodSpec::pod64();
    let bytes = 1u64 << 30;
    let link = pod.host_link().data_bytes_per_s();
    // One IPU per replica: 4 replicas share an IPU-M2000's 100 GbE.
    let l1 = dist(1, 64, 1).layout(&pod).unwrap();
    assert!(close(l1.host_io_time(bytes), 4.0 * bytes as f64 / link));
    // Two replicas of 2 IPUs each share one.
    let l2 = dist(1, 32, 2).layout(&pod).unwrap();
    assert!(close(l2.host_io_time(bytes), 2.0 * bytes as f64 / link));
    // One replica alone on its IPU-M2000 is bound by the IPU's host rate
    // (16 GB/s) or the link (12.5 GB/s), whichever is slower.
    let l4 = dist(1, 16, 4).layout(&pod).unwrap();
    assert!(close(l4.host_io_time(bytes), bytes as f64 / link));
    let single = dist(1, 1, 1).layout(&pod).unwrap();
    assert!(close(single.host_io_time(bytes), bytes as f64 / link));
    assert_eq!(l1.host_io_time(0), 0.0);
    // A faster host link leaves the IPU's own rate.
    let fast = LinkSpec {
        bandwidth_bytes_per_s: 1e12,
        ..LinkSpec::host_link()
    };
    let pod = PodSpec::pod64().with_host_link(fast).unwrap();
    let l = dist(1, 16, 4).layout(&pod).unwrap();
    let ipu = pod.ipu();
    assert_eq!(l.host_io_time(bytes), ipu.seconds(ipu.host_cycles(bytes)));
}

#[test]
fn host_input_streams_ahead_of_compute() {
    let l = dist(1, 64, 1).layout(&PodSpec::pod64()).unwrap();
    let bytes = 1u64 << 24;
    let io = l.host_io_time(bytes);
    let ahead = |g, n| Prefetch {
        micro_batches_per_step: g,
        steps_per_run: n,
        depth: 1,
    };
    // No prefetch: all of it, in series with compute.
    let none = Prefetch {
        depth: 0,
        ..ahead(4, 8)
    };
    assert_eq!(l.host_input_wait(bytes, 10.0 * io, none), io);
    // Compute hides all but the first micro-batch of each run: of 4
    // micro-batches a step and 8 steps a run, a 32nd.
    assert!(close(
        l.host_input_wait(bytes, 10.0 * io, ahead(4, 8)),
        io / 32.0
    ));
    assert!(close(l.host_input_wait(bytes, io, ahead(1, 1)), io));
    // A link slower than compute: the excess too, never more than all.
    let busy = 0.5 * io;
    assert!(close(
        l.host_input_wait(bytes, busy, ahead(4, 8)),
        io - busy + io / 32.0
    ));
    assert!(l.host_input_wait(bytes, 0.0, ahead(4, 8)) <= io);
    assert_eq!(l.host_input_wait(0, 1.0, ahead(4, 8)), 0.0);
}

#[test]
fn process_identity_from_variables() {
    let p = |i, c| ProcessId { index: i, count: c };
    assert_eq!(ProcessId::from_vars(None, None), Ok(None));
    assert_eq!(
        ProcessId::from_vars(Some("0"), Some("1")),
        Ok(Some(p(0, 1)))
    );
    assert_eq!(
        ProcessId::from_vars(Some(" 7 "), Some("8\n")),
        Ok(Some(p(7, 8)))
    );
    assert_eq!(
        ProcessId::from_vars(Some("8"), Some("8")),
        Err(PodError::ProcessOutOfRange { index: 8, count: 8 })
    );
    assert_eq!(
        ProcessId::from_vars(Some("0"), Some("0")),
        Err(PodError::ProcessOutOfRange { index: 0, count: 0 })
    );
    assert_eq!(
        ProcessId::from_vars(Some("x"), Some("2")),
        Err(PodError::ProcessNotANumber {
            variable: RANK_VARIABLE
        })
    );
    assert_eq!(
        ProcessId::from_vars(Some("1"), Some("-2")),
        Err(PodError::ProcessNotANumber {
            variable: SIZE_VARIABLE
        })
    );
    assert_eq!(
        ProcessId::from_vars(Some("1"), None),
        Err(PodError::ProcessMissing {
            variable: SIZE_VARIABLE
        })
    );
    assert_eq!(
        ProcessId::from_vars(None, Some("2")),
        Err(PodError::ProcessMissing {
            variable: RANK_VARIABLE
        })
    );
    let err = ProcessId::from_vars(Some("1"), None).unwrap_err();
    assert!(err.to_string().contains("OMPI_COMM_WORLD_SIZE"), "{err}");

    // Explicit first, then the environment, then the single process.
    let env = |r: Option<&'static str>, s: Option<&'static str>| move || ProcessId::from_vars(r, s);
    assert_eq!(
        ProcessId::resolve_from(Some((1, 4)), || unreachable!()),
        Ok(p(1, 4))
    );
    assert_eq!(
        ProcessId::resolve_from(Some((4, 4)), || unreachable!()),
        Err(PodError::ProcessOutOfRange { index: 4, count: 4 })
    );
    assert_eq!(
        ProcessId::resolve_from(None, env(Some("2"), Some("3"))),
        Ok(p(2, 3))
    );
    assert_eq!(
        ProcessId::resolve_from(None, env(None, None)),
        Ok(ProcessId::SINGLE)
    );
    assert!(ProcessId::resolve_from(None, env(Some("a"), Some("3"))).is_err());
    // The real environment of the test runner: whatever it holds, resolve
    // gives a valid identity or a typed error, and an explicit identity
    // never looks at it.
    assert_eq!(ProcessId::resolve(Some((0, 2))), Ok(p(0, 2)));
    if let Ok(id) = ProcessId::resolve(None) {
        assert!(id.index < id.count);
    }
}

#[test]
fn scaling_table_over_pod_sizes() {
    let pods = [
        PodSpec::m2000(),
        PodSpec::pod16(),
        PodSpec::pod64(),
        PodSpec::pods(2).unwrap(),
        PodSpec::pods(4).unwrap(),
    ];
    let bytes = 2 * 340_000_000; // BERT-Large gradients in f16
    let rows = scaling_table(&pods, bytes, 0.25);
    assert_eq!(rows.len(), 5);
    for (row, pod) in rows.iter().zip(&pods) {
        assert_eq!(row.pod, pod.name());
        assert_eq!(row.replicas, pod.ipus());
        assert!(close(
            row.step_s,
            0.25 + row.all_reduce.total() + row.sync_s
        ));
        // Per-IPU throughput relative to the smallest Pod's.
        assert!(close(row.efficiency, rows[0].step_s / row.step_s));
        assert!(close(
            row.speedup,
            row.replicas as f64 / 4.0 * row.efficiency
        ));
        assert_eq!(
            row.all_reduce.gw_link_s > 0.0,
            pod.ipus() > POD64_IPUS,
            "{}",
            row.pod
        );
    }
    // More replicas: more samples per step, never more per IPU (rings get
    // longer; crossing POD64s adds GW-Links).
    assert_eq!(rows[0].efficiency, 1.0);
    for w in rows.windows(2) {
        assert!(w[1].speedup > w[0].speedup);
        assert!(
            w[1].efficiency < w[0].efficiency,
            "{} {}",
            w[0].pod,
            w[1].pod
        );
    }
    assert!(scaling_table(&[], bytes, 1.0).is_empty());
    let json = serde_json::to_value(&rows[4]).unwrap();
    assert_eq!(json["pod"], "POD256");
    assert_eq!(json["replicas"], 256);
    assert!(json["all_reduce"]["gw_link_s"].as_f64().unwrap() > 0.0);
    let shown = rows[4].all_reduce.to_string();
    assert!(
        shown.contains(" ms (IPU-Links ") && shown.contains("GW-Links"),
        "{shown}"
    );
}
