//! What a [`Layout`]'s collectives, barriers and host streams cost on the
//! Pod's links.

use core::fmt;

use serde::Serialize;

use tessera_collectives::route::cheapest;
use tessera_collectives::{Collective, Fabric};

use super::Layout;

/// The time of a collective on a Pod, by the links it spends it on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct CollectiveTime {
    /// Seconds on IPU-Links (within IPU-Link domains).
    pub ipu_link_s: f64,
    /// Seconds on GW-Links (between POD64s).
    pub gw_link_s: f64,
}

impl CollectiveTime {
    /// Seconds in all (the parts run one after the other).
    ///
    /// ```
    /// use tessera_sim::pod::CollectiveTime;
    ///
    /// let t = CollectiveTime { ipu_link_s: 0.5, gw_link_s: 0.25 };
    /// assert_eq!(t.total(), 0.75);
    /// ```
    #[must_use]
    pub fn total(&self) -> f64 {
        self.ipu_link_s + self.gw_link_s
    }
}

impl fmt::Display for CollectiveTime {
    /// Milliseconds: the total, then the parts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:.3} ms (IPU-Links {:.3} ms, GW-Links {:.3} ms)",
            self.total() * 1e3,
            self.ipu_link_s * 1e3,
            self.gw_link_s * 1e3
        )
    }
}

impl Layout {
    /// Bytes of one orthogonal group's share of a replica's `bytes`.
    fn share(&self, bytes: u64) -> usize {
        let b = bytes.div_ceil(self.ipus_per_replica as u64);
        usize::try_from(b).unwrap_or(usize::MAX)
    }

    /// Seconds of `collective` on buffers of `len` bytes in every IPU-Link
    /// domain at once, routed over the Pod's IPU-Links: the replicas'
    /// IPUs at each position `j` of a replica form a group (a ring in the
    /// fabric's ring order), the groups running together and sharing
    /// links. 0 for no bytes; infinite for a buffer too long to schedule.
    fn inside(&self, collective: Collective, len: usize) -> f64 {
        let k = self.ipus_per_replica;
        let fabric = self.pod.fabric();
        let groups: Vec<Vec<usize>> = (0..k)
            .map(|j| {
                let members: Vec<usize> = (0..self.group).map(|r| r * k + j).collect();
                fabric.in_ring_order(&members)
            })
            .collect();
        self.cheapest(fabric, collective, &groups, len)
    }

    /// Seconds of `collective` on buffers of `len` bytes among the IPUs
    /// at one place of every domain, over the ring of POD64s' GW-Links
    /// (each IPU's share of its IPU-M2000's links).
    fn across(&self, collective: Collective, len: usize) -> f64 {
        let ring = vec![(0..self.domains).collect::<Vec<_>>()];
        self.cheapest(&self.gw, collective, &ring, len)
    }

    fn cheapest(&self, fabric: &Fabric, c: Collective, groups: &[Vec<usize>], len: usize) -> f64 {
        if len == 0 {
            return 0.0;
        }
        let gamma = self.model.topology().gamma();
        cheapest(
            fabric,
            self.algorithms.candidates(),
            c,
            groups,
            len,
            1,
            gamma,
        )
        .map_or(f64::INFINITY, |e| e.seconds)
    }

    /// Simulated seconds of an all-reduce of `bytes` (per replica) over all
    /// replicas. A replica of `k` IPUs holds `ceil(bytes / k)` on each IPU,
    /// and the `k` orthogonal groups reduce at once. Within one IPU-Link
    /// domain, one all-reduce over IPU-Links; across POD64s, hierarchical:
    /// reduce-scatter in each domain, all-reduce of the fragments over
    /// GW-Links, all-gather in each domain (as
    /// [`CostModel::hierarchical_all_reduce`](tessera_collectives::CostModel::hierarchical_all_reduce)).
    /// Each phase takes the cheapest of the layout's
    /// [`Algorithms`](super::Algorithms) (GCL's rings by default), each
    /// priced by routing its schedule over the Pod's links
    /// ([`tessera_collectives::route`]). No bytes take no time (no
    /// collective runs).
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// let t = l.all_reduce_time(1 << 20);
    /// assert!(t.ipu_link_s > 0.0 && t.gw_link_s == 0.0); // one IPU-Link domain
    /// assert_eq!(l.all_reduce_time(0).total(), 0.0);
    /// ```
    #[must_use]
    pub fn all_reduce_time(&self, bytes: u64) -> CollectiveTime {
        let len = self.share(bytes);
        if self.domains == 1 {
            return CollectiveTime {
                ipu_link_s: self.inside(Collective::AllReduce, len),
                gw_link_s: 0.0,
            };
        }
        let g = self.group;
        let rs = self.inside(Collective::ReduceScatter, len);
        let ar = self.across(Collective::AllReduce, len.div_ceil(g));
        let ag = self.inside(Collective::AllGather, len);
        CollectiveTime {
            ipu_link_s: rs + ag,
            gw_link_s: ar,
        }
    }

    /// Simulated seconds of a reduce-scatter of `bytes` (per replica) over
    /// all replicas, each left with `1 / replicas` of the sum (replicated
    /// tensor sharding): in each domain over IPU-Links, then across POD64s
    /// over GW-Links on the domain's fragments.
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// let rs = l.reduce_scatter_time(1 << 20);
    /// assert!(rs.ipu_link_s > 0.0 && rs.total() < l.all_reduce_time(1 << 20).total());
    /// ```
    #[must_use]
    pub fn reduce_scatter_time(&self, bytes: u64) -> CollectiveTime {
        let len = self.share(bytes);
        if self.domains == 1 {
            return CollectiveTime {
                ipu_link_s: self.inside(Collective::ReduceScatter, len),
                gw_link_s: 0.0,
            };
        }
        let g = self.group;
        CollectiveTime {
            ipu_link_s: self.inside(Collective::ReduceScatter, len),
            gw_link_s: self.across(Collective::ReduceScatter, len.div_ceil(g)),
        }
    }

    /// Simulated seconds of an all-gather into `bytes` (per replica, the
    /// gathered size) over all replicas: the reverse of
    /// [`Layout::reduce_scatter_time`], across POD64s first.
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// let ag = l.all_gather_time(1 << 20);
    /// // The same messages as the reduce-scatter's, without the reductions.
    /// assert!(ag.ipu_link_s > 0.0 && ag.total() <= l.reduce_scatter_time(1 << 20).total());
    /// ```
    #[must_use]
    pub fn all_gather_time(&self, bytes: u64) -> CollectiveTime {
        let len = self.share(bytes);
        if self.domains == 1 {
            return CollectiveTime {
                ipu_link_s: self.inside(Collective::AllGather, len),
                gw_link_s: 0.0,
            };
        }
        let g = self.group;
        CollectiveTime {
            ipu_link_s: self.inside(Collective::AllGather, len),
            gw_link_s: self.across(Collective::AllGather, len.div_ceil(g)),
        }
    }

    /// Simulated seconds of a broadcast of `bytes` (per replica) from
    /// replica 0 to all (the initial weights): across POD64s over GW-Links,
    /// then within each domain over IPU-Links.
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// assert!(l.broadcast_time(1 << 20).ipu_link_s > 0.0);
    /// assert_eq!(l.broadcast_time(0).total(), 0.0);
    /// ```
    #[must_use]
    pub fn broadcast_time(&self, bytes: u64) -> CollectiveTime {
        let len = self.share(bytes);
        let bcast = Collective::Broadcast { root: 0 };
        if self.domains == 1 {
            return CollectiveTime {
                ipu_link_s: self.inside(bcast, len),
                gw_link_s: 0.0,
            };
        }
        CollectiveTime {
            ipu_link_s: self.inside(bcast, len),
            gw_link_s: self.across(bcast, len),
        }
    }

    /// Simulated seconds of a global sync of the IPUs used: PopLibs' test
    /// model, `2 x hops x sync_per_hop` with `hops = 1 + IPUs / 4` over
    /// IPU-Links (the same figure as [`crate::IpuSpec::sync_cycles`], in
    /// seconds); across POD64s, the sync of one POD64 and a round trip of
    /// one GW-Link hop.
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// // 4 IPUs: 2 hops, there and back.
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// assert_eq!(l.sync_time(), 2.0 * 2.0 * l.pod().ipu_link().sync_per_hop_s);
    /// ```
    #[must_use]
    pub fn sync_time(&self) -> f64 {
        let ipus = self.ipus().min(self.pod.domain_ipus());
        let hops = 1 + ipus / 4;
        let domain = 2.0 * hops as f64 * self.pod.ipu_link().sync_per_hop_s;
        if self.domains == 1 {
            domain
        } else {
            domain + 2.0 * self.pod.gw_link().sync_per_hop_s
        }
    }

    /// Simulated seconds to move `bytes_per_replica` between the hosts and
    /// every replica at once. Each replica's data enters through its first
    /// IPU, over the host link of that IPU's IPU-M2000, which the replicas
    /// starting there share; the IPU's own host rate
    /// ([`crate::IpuParams::host_bytes_per_second`]) also bounds it.
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// assert!(l.host_io_time(2 << 20) > l.host_io_time(1 << 20));
    /// ```
    #[must_use]
    pub fn host_io_time(&self, bytes_per_replica: u64) -> f64 {
        let per_m2000 =
            (self.pod.ipus_per_m2000() / self.ipus_per_replica).clamp(1, self.replicas.max(1));
        let link = self.pod.host_link();
        let bytes = bytes_per_replica as f64;
        let shared = bytes * per_m2000 as f64 / link.data_bytes_per_s();
        let ipu = self.pod.ipu();
        let own = ipu.seconds(ipu.host_cycles(bytes_per_replica));
        link.latency_s + shared.max(own)
    }

    /// Simulated seconds a step waits for its input, `bytes_per_replica`
    /// of it, when input streams ahead of the `busy_s` seconds the IPUs
    /// compute (Poplar prefetches host streams; PopTorch feeds
    /// `device_iterations` steps per run). With `prefetch.depth` of at
    /// least one micro-batch, a micro-batch's input arrives while the one
    /// before computes: only the first micro-batch of each run waits for
    /// all of its input, and the rest waits only where the link is slower
    /// than compute. Without prefetch, all of it ([`Layout::host_io_time`]).
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec, Prefetch};
    ///
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// let io = l.host_io_time(1 << 20);
    /// let none = Prefetch { micro_batches_per_step: 4, steps_per_run: 2, depth: 0 };
    /// assert_eq!(l.host_input_wait(1 << 20, 10.0 * io, none), io);
    /// // Compute hides all but the first of the run's 8 micro-batches.
    /// let ahead = Prefetch { depth: 1, ..none };
    /// assert_eq!(l.host_input_wait(1 << 20, 10.0 * io, ahead), io / 8.0);
    /// ```
    #[must_use]
    pub fn host_input_wait(&self, bytes_per_replica: u64, busy_s: f64, prefetch: Prefetch) -> f64 {
        let io = self.host_io_time(bytes_per_replica);
        if prefetch.depth == 0 || io == 0.0 {
            return io;
        }
        let per_step = prefetch.micro_batches_per_step.max(1);
        let first = io / (per_step.saturating_mul(prefetch.steps_per_run.max(1))) as f64;
        ((io - busy_s).max(0.0) + first).min(io)
    }
}

/// How input streams ahead of compute: see [`Layout::host_input_wait`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Prefetch {
    /// Micro-batches per replica per step (the gradient accumulation).
    pub micro_batches_per_step: usize,
    /// Steps per run of the device (PopTorch's `device_iterations`).
    pub steps_per_run: usize,
    /// Micro-batches the input runs ahead (the infeed's capacity; Poplar's
    /// stream prefetch is one). 0: none, input in series with compute.
    pub depth: usize,
}
