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
//! rate `tessera-collectives`' [`Topology::ipu_pod`], which IPUs the links
//! join its [`Fabric::ladder`]; this module takes them from there.
//! "Assumption" marks a figure of our own.
//!
//! | figure | value | source |
//! |---|---|---|
//! | IPUs per IPU-M2000 | 4 ([`IPUS_PER_M2000`]) | Graphcore |
//! | POD16, POD64 | 4 and 16 IPU-M2000s (16 and 64 IPUs) | Graphcore |
//! | larger Pods | POD64s joined by GW-Links: POD128 = 2, POD256 = 4 | Graphcore |
//! | IPU-Link domain | one POD64 (fewer IPUs in a smaller Pod) | Graphcore: IPU-Links reach within a POD64 |
//! | IPU-Link | 128 Gbit/s per link and direction at 0.85 efficiency (13.6 GB/s of data) | Graphcore's GC200: 10 IPU-Links, 320 GB/s in all; efficiency from PopLibs' test model (`poplibs_test/Util.cpp`); via [`IpuParams::link_bits_per_second`](crate::IpuParams::link_bits_per_second) and `link_efficiency_percent`, the same rate as [`Topology::IPU_LINK`] |
//! | IPU-Links per IPU | 10: 6 to its partner on the rung, 2 up and 2 down its rail ([`Fabric::ladder`]) | PopLibs' test model (4 + 2 to the card partner, 2 up, 2 down); the IPU-M2000's block diagram joins each IPU pair by 6 ports; Graphcore's 10 links per GC200 |
//! | ladder | IPUs `2r`, `2r + 1` a rung; rails of even and odd IPUs; closed into rings (a torus) from 8 IPUs ([`CLOSED_LADDER_IPUS`]) | IPU-POD64 datasheet ("2D-torus IPU-Link topology"); closed POD16s and 8-IPU partitions an assumption (GCL needs a ring of every power-of-two partition) |
//! | IPU-Link latency | 1 us per hop | assumption of [`Topology::IPU_LINK`] (Graphcore publishes none) |
//! | global sync | `2 x hops x 15 ns`, `hops = 1 + IPUs / 4` | PopLibs test model (`setGlobalSyncLatency`), [`IpuParams::hop_latency_ps`](crate::IpuParams::hop_latency_ps); 2 x for the round trip, as [`IpuSpec::sync_cycles`](crate::IpuSpec::sync_cycles) |
//! | GW-Links | 2 x 100 Gbit/s per IPU-M2000 ([`GW_LINKS_PER_M2000`]), each shared by its 4 IPUs (3.125 GB/s each way per IPU per link) | IPU-M2000 and Bow-2000 datasheets; [`Topology::GW_LINK_PER_IPU`] |
//! | GW-Link topology | POD64s in a ring, one GW-Link of each IPU-M2000 to each neighbour (both to the other of two) | IPU-POD128 datasheet (two racks cross-connected); a ring for POD256 and up is an assumption |
//! | GW-Link latency, and per hop of a sync across POD64s | 10 us | assumption of [`Topology::GW_LINK_PER_IPU`]: a RoCE message through two IPU-Gateways; no published figure |
//! | reductions | 1 TB/s | assumption of [`Topology::IPU_REDUCE_BANDWIDTH`] |
//! | host link | 100 Gbit/s Ethernet (RoCE) per IPU-M2000, line rate, no latency; each IPU also at most [`IpuParams::host_bytes_per_second`](crate::IpuParams::host_bytes_per_second) | Graphcore IPU-POD64 build and test guide: servers with 100 GbE RDMA NICs reach the IPU-M2000s over the RDMA data-plane network (PCIe Gen4 is inside the server, to its NIC) |
//! | host input | streams ahead of compute: a step waits for the first micro-batch of each run of device iterations, and where the link is slower than compute ([`Layout::host_input_wait`]) | Poplar prefetches host streams (`exchange.enablePrefetch`, on by default); PopTorch's device iterations |
//! | replicas | a power of two of IPUs each, in one IPU-Link domain | Graphcore docs |
//!
//! # The cost model
//!
//! A replica of `k` IPUs holds its tensors spread over its IPUs, so a
//! collective of `n` bytes per replica runs as `k` orthogonal groups (the
//! IPUs at the same position in every replica) of `ceil(n / k)` bytes at
//! once. Each group is a ring in the fabric's ring order (up the even rail,
//! down the odd one), and every message of the algorithm's schedule is
//! routed over the domain's [`Fabric`] ([`tessera_collectives::route`]): a
//! message crossing `h` links pays `h` latencies, and messages crossing one
//! link in one direction at once share its bandwidth, the `k` groups'
//! included. By default the algorithms are GCL's rings, one way or both
//! ([`Algorithms::Gcl`]); [`Algorithms::Auto`] takes the cheapest of all at
//! its routed cost. Across POD64s the all-reduce is hierarchical
//! (reduce-scatter in each domain, all-reduce of each IPU's fragment over
//! the ring of GW-Links, all-gather in each domain), which is why
//! replicated tensor sharding stays inside a domain.
//!
//! Rings grow with the domain, so with fixed work per replica a larger Pod
//! is never faster per IPU (tested over the planner's options), with one
//! exception: a lone IPU-M2000 with replicas of 2 IPUs runs rings of two,
//! each IPU using one neighbour's links, where a POD16's closed rails give
//! each IPU two.
//!
//! # Determinism
//!
//! Everything here is a pure function of its inputs.
//!
//! [`Topology::ipu_pod`]: tessera_collectives::Topology::ipu_pod
//! [`Topology::IPU_LINK`]: tessera_collectives::Topology::IPU_LINK
//! [`Topology::GW_LINK_PER_IPU`]: tessera_collectives::Topology::GW_LINK_PER_IPU
//! [`Topology::IPU_REDUCE_BANDWIDTH`]: tessera_collectives::Topology::IPU_REDUCE_BANDWIDTH
//! [`Fabric`]: tessera_collectives::Fabric
//! [`Fabric::ladder`]: tessera_collectives::Fabric::ladder

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
    M2000S_PER_POD64, MAX_POD_IPUS, POD64_IPUS, PodSpec,
};
