//! The IPU-Pod: IPU-M2000s of four IPUs, POD16s and POD64s joined by
//! IPU-Links, larger Pods of POD64s joined by GW-Links ([`PodSpec`]); how a
//! run is spread over one in instances and replicas, PopRun and PopDist's
//! way ([`Distribution`], [`Layout`], [`ProcessId`]); and what its
//! collectives, syncs and host transfers cost ([`CollectiveTime`],
//! [`scaling_table`], [`scaling_table_with`]).
//!
//! ```
//! use tessera_sim::pod::{Distribution, PodSpec};
//!
//! let pod: PodSpec = "pod64".parse()?;
//! let layout = Distribution { instances: 2, replicas: 16, ipus_per_replica: 4 }.layout(&pod)?;
//! assert_eq!(layout.replicas_of(1), 8..16);
//! assert_eq!(layout.replica_target()?.ipus(), 4);
//! let grads = layout.all_reduce_time(4 * 100_000_000);
//! assert_eq!(grads.gw_link_s, 0.0); // one IPU-Link domain
//! println!("all-reduce {:.3} ms, sync {:.0} ns", grads.total() * 1e3, layout.sync_time() * 1e9);
//! # Ok::<(), tessera_sim::pod::PodError>(())
//! ```
//!
//! # The figures and their sources
//!
//! The per-IPU figures are [`IpuSpec`](crate::IpuSpec)'s (see the
//! [`ipu`](crate::ipu) module's table), the link latencies and the GW-Link
//! rate `tessera-collectives`' [`Topology::ipu_pod`]; this module takes
//! them from there. "Assumption" marks a figure of our own.
//!
//! | figure | value | source |
//! |---|---|---|
//! | IPUs per IPU-M2000 | 4 ([`IPUS_PER_M2000`]) | Graphcore |
//! | POD16, POD64 | 4 and 16 IPU-M2000s (16 and 64 IPUs) | Graphcore |
//! | larger Pods | POD64s joined by GW-Links: POD128 = 2, POD256 = 4 | Graphcore |
//! | IPU-Link domain | one POD64 (fewer IPUs in a smaller Pod) | Graphcore: IPU-Links reach within a POD64 |
//! | IPU-Link | 128 x 2^30 bit/s per link and direction at 0.85 efficiency (14.6 GB/s of data) | PopLibs test model (`poplibs_test/Util.cpp`), via [`IpuParams::link_bits_per_second`](crate::IpuParams::link_bits_per_second) and `link_efficiency_percent` |
//! | IPU-Links per IPU | 10; Graphcore quotes 64 GB/s bidirectional per IPU pair | Graphcore; the collectives cost model charges one link per peer ([`Ports::PerPeer`](tessera_collectives::Ports::PerPeer)), as [`Topology::ipu_pod`] |
//! | ladder | IPUs `2k`, `2k+1` a card; 2 links up and down the sides | PopLibs test model; [`Target::route`](crate::ipu::Target::route) within a replica |
//! | IPU-Link message latency | 1 us | assumption of [`Topology::IPU_LINK`] |
//! | global sync | `2 x hops x 15 ns`, `hops = 1 + IPUs / 4` | PopLibs test model (`setGlobalSyncLatency`), [`IpuParams::hop_latency_ps`](crate::IpuParams::hop_latency_ps); 2 x for the round trip, as [`IpuSpec::sync_cycles`](crate::IpuSpec::sync_cycles) |
//! | GW-Links | 2 x 100 Gbit/s per IPU-M2000, shared by its 4 IPUs (6.25 GB/s each) | Bow-2000 datasheet; [`Topology::GW_LINK_PER_IPU`] |
//! | GW-Link latency, and per hop of a sync across POD64s | 10 us | assumption of [`Topology::GW_LINK_PER_IPU`] |
//! | reductions | 1 TB/s | assumption of [`Topology::IPU_REDUCE_BANDWIDTH`] |
//! | host link | 100 Gbit/s Ethernet (RoCE) per IPU-M2000, line rate, no latency; each IPU also at most [`IpuParams::host_bytes_per_second`](crate::IpuParams::host_bytes_per_second) | Graphcore IPU-POD64 build and test guide: servers with 100 GbE RDMA NICs reach the IPU-M2000s over the RDMA data-plane network (PCIe Gen4 is inside the server, to its NIC) |
//! | replicas | a power of two of IPUs each, in one IPU-Link domain | Graphcore docs |
//!
//! # The cost model
//!
//! A replica of `k` IPUs holds its tensors spread over its IPUs, so a
//! collective of `n` bytes per replica runs as `k` orthogonal groups (the
//! IPUs at the same position in every replica) of `ceil(n / k)` bytes at
//! once, each a collectives [`CostModel`](tessera_collectives::CostModel)
//! problem with one rank per replica: IPU-Links within a domain, the
//! IPU's share of its IPU-M2000's GW-Links between domains, and the
//! cheapest algorithm of each phase. Across POD64s the all-reduce is
//! hierarchical (reduce-scatter in each domain, all-reduce of the fragments
//! over GW-Links, all-gather in each domain), which is why replicated
//! tensor sharding stays inside a domain.
//!
//! # Determinism
//!
//! Everything here is a pure function of its inputs.
//!
//! [`Topology::ipu_pod`]: tessera_collectives::Topology::ipu_pod
//! [`Topology::IPU_LINK`]: tessera_collectives::Topology::IPU_LINK
//! [`Topology::GW_LINK_PER_IPU`]: tessera_collectives::Topology::GW_LINK_PER_IPU
//! [`Topology::IPU_REDUCE_BANDWIDTH`]: tessera_collectives::Topology::IPU_REDUCE_BANDWIDTH

mod error;
mod layout;
mod process;
mod scaling;
mod spec;

pub use error::{DistributionField, PodError};
pub use layout::{Algorithms, CollectiveTime, Distribution, Layout, Prefetch};
pub use process::{ProcessId, RANK_VARIABLE, SIZE_VARIABLE};
pub use scaling::{ScalingRow, scaling_table, scaling_table_with};
pub use spec::{
    CLOSED_LADDER_IPUS, GW_LINKS_PER_M2000, IPUS_PER_M2000, LinkSpec, M2000S_PER_POD16,
    M2000S_PER_POD64, POD64_IPUS, PodSpec,
};
