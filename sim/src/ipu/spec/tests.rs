use super::*;
use crate::ipu::KernelCost;

#[test]
fn mk2_matches_the_published_figures() {
    let s = IpuSpec::MK2_GC200;
    assert_eq!(s.tiles(), 1472);
    assert_eq!(s.workers_per_tile(), 6);
    assert_eq!(s.workers(), 8832);
    assert_eq!(s.memory_per_tile(), 624 * 1024);
    // "About 900 MB per IPU".
    assert_eq!(s.total_memory(), 940_572_672);
    assert!((s.total_memory() as f64 / 1e6 - 900.0).abs() < 50.0);
    // 250 TFLOPS per IPU, 1 PFLOPS per IPU-M2000 (4 IPUs), within 1%.
    let peak = s.peak_fp16_flops();
    assert!((peak / 250e12 - 1.0).abs() < 0.01, "{peak}");
    assert!((4.0 * peak / 1e15 - 1.0).abs() < 0.01, "{peak}");
    assert_eq!(IpuSpec::new(IpuParams::default()), Ok(s));
    // The exchange: 4 B per tile per cycle is Graphcore's 8 TB/s
    // all-to-all within 3%.
    let exchange = f64::from(s.tiles()) * 4.0 * s.clock_hz() as f64;
    assert!((exchange / 8e12 - 1.0).abs() < 0.03, "{exchange}");
}

#[test]
fn bow_is_a_faster_clocked_gc200() {
    let (mk2, bow) = (IpuSpec::MK2_GC200, IpuSpec::BOW);
    assert_eq!(bow.clock_hz(), 1_850_000_000);
    assert_eq!(bow.tiles(), mk2.tiles());
    assert_eq!(bow.total_memory(), mk2.total_memory());
    assert!((bow.peak_fp16_flops() / 350e12 - 1.0).abs() < 0.01);
    // One second of clock cycles.
    assert_eq!(bow.seconds(1_850_000_000), 1.0);
}

#[test]
fn c600_is_a_gc200_with_fp8_units() {
    let (mk2, c600) = (IpuSpec::MK2_GC200, IpuSpec::C600);
    assert_eq!(c600.tiles(), mk2.tiles());
    assert_eq!(c600.total_memory(), mk2.total_memory());
    // Graphcore: 280 TFLOPS FP16; FP8 twice that (assumed, 560).
    assert!((c600.peak_fp16_flops() / 280e12 - 1.0).abs() < 0.001);
    assert!((c600.peak_fp8_flops() / 560e12 - 1.0).abs() < 0.001);
    assert!(c600.has_fp8_units());
    for s in [mk2, IpuSpec::BOW] {
        assert!(!s.has_fp8_units());
        assert_eq!(s.peak_fp8_flops(), 0.0);
    }
    // FP8 products at the FP8 rate per tile cycle, as FP16's.
    let p = c600.params();
    assert_eq!(p.costs.matmul_f8.vector_width, p.fp8_flops_per_tile_cycle);
    assert_eq!(p.costs.matmul_f16.vector_width, p.fp16_flops_per_tile_cycle);
    // Hardware conversion on the C600, software on the others.
    let per_element = |s: IpuSpec, k: Kernel| {
        let c = s.costs().get(k);
        f64::from(c.cycles_per_vector) / f64::from(c.vector_width)
    };
    assert!(per_element(c600, Kernel::ConvertF8) < per_element(IpuSpec::BOW, Kernel::ConvertF8));
    assert_eq!(
        IpuSpec::PRESETS.map(|(n, _)| n),
        ["Mk2 GC200", "Bow", "C600"]
    );
}

#[test]
fn one_ipu_sync_is_the_poplibs_one_hop_figure() {
    // ceil(2 hops x 15 ns x f) with one hop.
    for s in [IpuSpec::MK2_GC200, IpuSpec::BOW, IpuSpec::C600] {
        let one_hop = s.cycles_of_ps(2 * 15_000);
        assert_eq!(s.sync_cycles(1), one_hop);
    }
    assert_eq!(IpuSpec::MK2_GC200.sync_cycles(1), 40); // ceil(39.9)
    assert_eq!(IpuSpec::BOW.sync_cycles(1), 56); // ceil(55.5)
    assert_eq!(IpuSpec::C600.sync_cycles(1), 45); // ceil(44.6)
}

#[test]
fn params_round_trip() {
    for (_, s) in IpuSpec::PRESETS {
        assert_eq!(IpuSpec::new(s.params()), Ok(s));
    }
}

#[test]
fn every_zero_field_is_named() {
    let ok = IpuParams::default();
    let mut cases = vec![
        (IpuParams { tiles: 0, ..ok }, SpecField::Tiles),
        (
            IpuParams {
                workers_per_tile: 0,
                ..ok
            },
            SpecField::WorkersPerTile,
        ),
        (
            IpuParams {
                memory_per_tile: 0,
                ..ok
            },
            SpecField::MemoryPerTile,
        ),
        (IpuParams { clock_hz: 0, ..ok }, SpecField::ClockHz),
        (
            IpuParams {
                fp16_flops_per_tile_cycle: 0,
                ..ok
            },
            SpecField::Fp16FlopsPerTileCycle,
        ),
        (
            IpuParams {
                exchange_bytes_per_cycle: 0,
                ..ok
            },
            SpecField::ExchangeBytesPerCycle,
        ),
        (
            IpuParams {
                local_copy_bytes_per_cycle: 0,
                ..ok
            },
            SpecField::LocalCopyBytesPerCycle,
        ),
        (
            IpuParams {
                link_bits_per_second: 0,
                ..ok
            },
            SpecField::LinkBitsPerSecond,
        ),
        (
            IpuParams {
                link_efficiency_percent: 0,
                ..ok
            },
            SpecField::LinkEfficiencyPercent,
        ),
        (
            IpuParams {
                host_bytes_per_second: 0,
                ..ok
            },
            SpecField::HostBytesPerSecond,
        ),
    ];
    for kernel in Kernel::ALL {
        let mut costs = ok.costs;
        costs.get_mut(kernel).vector_width = 0;
        cases.push((IpuParams { costs, ..ok }, SpecField::VectorWidth(kernel)));
    }
    for (params, field) in cases {
        let err = IpuSpec::new(params).unwrap_err();
        assert_eq!(err, SpecError::Zero(field));
        assert!(err.to_string().contains(field.name()), "{err}");
    }
    // Overheads may be zero.
    let free = IpuParams {
        sync_cycles: 0,
        compute_set_cycles: 0,
        vertex_bytes: 0,
        vertex_field_bytes: 0,
        codelet_code_bytes: 0,
        exchange_code_bytes: 0,
        hop_latency_ps: 0,
        ..ok
    };
    assert!(IpuSpec::new(free).is_ok());
    assert_eq!(
        IpuSpec::new(IpuParams {
            link_efficiency_percent: 101,
            ..ok
        }),
        Err(SpecError::EfficiencyAbove100(101))
    );
}

#[test]
fn total_memory_overflow_is_rejected() {
    let params = IpuParams {
        tiles: 2,
        memory_per_tile: u64::MAX / 2 + 1,
        ..IpuParams::default()
    };
    assert_eq!(
        IpuSpec::new(params),
        Err(SpecError::MemoryOverflow {
            tiles: 2,
            memory_per_tile: u64::MAX / 2 + 1
        })
    );
    // The largest that fits is accepted.
    let params = IpuParams {
        memory_per_tile: u64::MAX / 2,
        ..params
    };
    assert_eq!(IpuSpec::new(params).unwrap().total_memory(), u64::MAX - 1);
}

#[test]
fn cost_arithmetic() {
    let s = IpuSpec::MK2_GC200;
    let c = KernelCost {
        call_cycles: 10,
        vector_width: 4,
        cycles_per_vector: 3,
    };
    assert_eq!(c.thread_cycles(0), 10);
    assert_eq!(c.thread_cycles(1), 13);
    assert_eq!(c.thread_cycles(8), 16);
    assert_eq!(c.thread_cycles(9), 19);
    // 100 elements = 25 vectors over 6 workers: 5 for the busiest.
    assert_eq!(c.multi_thread_cycles(100, 6), 10 + 5 * 3);
    assert_eq!(c.multi_thread_cycles(0, 6), 10);
    // Exchange: max of sent and received, 4 B per cycle, rounded up.
    assert_eq!(s.exchange_cycles(10, 3), 3);
    assert_eq!(s.exchange_cycles(3, 16), 4);
    assert_eq!(s.local_copy_cycles(17), 3);
    // One link: 128 Gbit/s x 0.85 = 13.6 GB/s; 1 MiB takes 77.1 us
    // = 102,545.6 cycles at 1.33 GHz.
    let one = s.link_cycles(1 << 20, 1);
    let expect: f64 = (8.0 * 1_048_576.0 * 1.33e9) / (128.0e9 * 0.85);
    assert_eq!(one, expect.ceil() as u64);
    assert_eq!(s.link_cycles(1 << 20, 2), (expect / 2.0).ceil() as u64);
    assert_eq!(s.link_cycles(0, 2), 0);
    // Sync: hops = 1 + ipus / 4, 2 x 15 ns per hop.
    assert_eq!(s.sync_cycles(2), 40);
    assert_eq!(s.sync_cycles(4), s.cycles_of_ps(2 * 2 * 15_000)); // 80
    assert_eq!(s.sync_cycles(16), s.cycles_of_ps(2 * 5 * 15_000)); // 200
    assert_eq!(s.sync_cycles(16), 200);
    // Host: 16 GB/s; 16 kB take 1 us = 1,330 cycles.
    assert_eq!(s.host_cycles(16_000), 1330);
}
