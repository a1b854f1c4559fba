//! Where replicas run on a Pod, and what their collectives cost.

use core::fmt;
use core::ops::Range;

use serde::Serialize;

use tessera_collectives::route::{GCL, cheapest};
use tessera_collectives::{Algorithm, Collective, CostModel, Fabric, Ports, Topology};

use super::error::{DistributionField, PodError};
use super::process::ProcessId;
use super::spec::{GW_LINKS_PER_M2000, PodSpec};
use crate::ipu::Target;

/// Which algorithms a [`Layout`] prices its collectives with, each phase
/// taking the cheapest of them on the Pod's links.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Algorithms {
    /// Graphcore's GCL: rings, one way or both ([`GCL`]).
    #[default]
    Gcl,
    /// Any of [`Algorithm::ALL`], each at its routed cost.
    Auto,
    /// One algorithm.
    Only(Algorithm),
}

impl Algorithms {
    /// The candidates.
    ///
    /// ```
    /// use tessera_collectives::Algorithm;
    /// use tessera_sim::pod::Algorithms;
    ///
    /// let gcl = [Algorithm::Ring, Algorithm::BidirectionalRing];
    /// assert_eq!(Algorithms::Gcl.candidates(), &gcl);
    /// assert_eq!(Algorithms::Only(Algorithm::Ring).candidates(), &[Algorithm::Ring]);
    /// assert_eq!(Algorithms::Auto.candidates(), &Algorithm::ALL);
    /// ```
    #[must_use]
    pub fn candidates(self) -> &'static [Algorithm] {
        match self {
            Self::Gcl => &GCL,
            Self::Auto => &Algorithm::ALL,
            Self::Only(a) => match Algorithm::ALL.iter().position(|&b| b == a) {
                Some(i) => &Algorithm::ALL[i..=i],
                None => &GCL,
            },
        }
    }
}

/// How a run is spread over a Pod, as PopRun/PopDist and PopTorch say it:
/// `instances` processes, `replicas` replicas in all (the total
/// replication factor, `replicas / instances` per instance), each replica
/// on `ipus_per_replica` IPUs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Distribution {
    /// Processes (PopRun `--num-instances`).
    pub instances: usize,
    /// Replicas in all (PopRun `--num-replicas`).
    pub replicas: usize,
    /// IPUs per replica (a power of two).
    pub ipus_per_replica: usize,
}

impl Distribution {
    /// Checks the distribution against `pod` and places it: replica `r` on
    /// IPUs `r * ipus_per_replica ..`, instance `i` running replicas `i *
    /// replicas_per_instance ..`.
    ///
    /// # Errors
    /// In this order: [`PodError::Zero`];
    /// [`PodError::InstancesDoNotDivideReplicas`];
    /// [`PodError::IpusPerReplicaNotPowerOfTwo`];
    /// [`PodError::ReplicaLargerThanDomain`] (a replica must sit in one
    /// IPU-Link domain, which a power of two then divides);
    /// [`PodError::TooManyIpus`]; [`PodError::PartialDomain`] if the
    /// replicas spill over one POD64 without filling whole POD64s;
    /// [`PodError::Link`] if the Pod's links are invalid.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, DistributionField, PodError, PodSpec};
    ///
    /// let pod = PodSpec::pod16();
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&pod)?.ipus(), 16);
    /// let none = Distribution { replicas: 0, ..d };
    /// assert_eq!(none.layout(&pod), Err(PodError::Zero(DistributionField::Replicas)));
    /// let odd = Distribution { instances: 3, ..d };
    /// assert!(matches!(odd.layout(&pod), Err(PodError::InstancesDoNotDivideReplicas { .. })));
    /// # Ok::<(), PodError>(())
    /// ```
    pub fn layout(&self, pod: &PodSpec) -> Result<Layout, PodError> {
        let Self {
            instances,
            replicas,
            ipus_per_replica,
        } = *self;
        for (value, field) in [
            (instances, DistributionField::Instances),
            (replicas, DistributionField::Replicas),
            (ipus_per_replica, DistributionField::IpusPerReplica),
        ] {
            if value == 0 {
                return Err(PodError::Zero(field));
            }
        }
        if !replicas.is_multiple_of(instances) {
            return Err(PodError::InstancesDoNotDivideReplicas {
                instances,
                replicas,
            });
        }
        if !ipus_per_replica.is_power_of_two() {
            return Err(PodError::IpusPerReplicaNotPowerOfTwo { ipus_per_replica });
        }
        let domain_ipus = pod.domain_ipus();
        if ipus_per_replica > domain_ipus {
            return Err(PodError::ReplicaLargerThanDomain {
                ipus_per_replica,
                domain_ipus,
            });
        }
        let too_many = PodError::TooManyIpus {
            replicas,
            ipus_per_replica,
            available: pod.ipus(),
        };
        let ipus = replicas.checked_mul(ipus_per_replica).ok_or(too_many)?;
        if ipus > pod.ipus() {
            return Err(too_many);
        }
        if ipus > domain_ipus && !ipus.is_multiple_of(domain_ipus) {
            return Err(PodError::PartialDomain { ipus, domain_ipus });
        }
        Layout::new(pod, instances, replicas, ipus_per_replica)
    }
}

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

/// A validated placement of a [`Distribution`] on a [`PodSpec`], with the
/// cost model of its collectives.
///
/// ```
/// use tessera_sim::pod::{Distribution, PodSpec};
///
/// let pod = PodSpec::pods(2)?; // POD128
/// let d = Distribution { instances: 4, replicas: 64, ipus_per_replica: 2 };
/// let layout = d.layout(&pod)?;
/// assert_eq!(layout.replicas_per_instance(), 16);
/// assert_eq!(layout.ipus_of(33), 66..68);
/// assert_eq!(layout.instance_of(33), 2);
/// // 64 replicas of 2 IPUs fill both POD64s: the all-reduce crosses GW-Links.
/// let t = layout.all_reduce_time(100 << 20);
/// assert!(t.ipu_link_s > 0.0 && t.gw_link_s > 0.0);
/// # Ok::<(), tessera_sim::pod::PodError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct Layout {
    pod: PodSpec,
    instances: usize,
    replicas: usize,
    ipus_per_replica: usize,
    /// Replicas per IPU-Link domain (all of them within one domain).
    group: usize,
    /// IPU-Link domains used.
    domains: usize,
    model: CostModel,
    /// The POD64s' GW-Links: a ring of the domains, each IPU's share.
    gw: Fabric,
    algorithms: Algorithms,
}

impl Layout {
    /// The layout of checked numbers.
    fn new(
        pod: &PodSpec,
        instances: usize,
        replicas: usize,
        ipus_per_replica: usize,
    ) -> Result<Self, PodError> {
        let group = replicas.min(pod.domain_ipus() / ipus_per_replica);
        let domains = replicas / group;
        // A rank of the model is one IPU of a replica: the replicas' IPUs at
        // the same position form `ipus_per_replica` orthogonal groups that
        // run at once on their own links. The GW-Links of an IPU-M2000 are
        // shared by its IPUs.
        let intra = *pod.fabric().link();
        let inter = pod.gw_link().link(pod.ipus_per_m2000(), Ports::Single)?;
        let topology = Topology::two_level(group, intra, inter, Topology::IPU_REDUCE_BANDWIDTH)
            .map_err(|error| PodError::Link {
                link: "reduction",
                error,
            })?;
        // Each IPU-M2000's GW-Links go one to each neighbouring POD64 of
        // a ring of them (both to the other of two: the IPU-POD128
        // datasheet's cross-connected racks); that POD256 and larger are
        // cabled as a ring is an assumption.
        let gw = Fabric::ring(domains, GW_LINKS_PER_M2000 / 2, inter)?;
        Ok(Self {
            pod: pod.clone(),
            instances,
            replicas,
            ipus_per_replica,
            group,
            domains,
            model: CostModel::new(topology),
            gw,
            algorithms: Algorithms::default(),
        })
    }

    /// One replica per IPU of `pod`, one instance: plain data parallelism
    /// over the whole Pod.
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// let l = Layout::data_parallel(&PodSpec::pod16());
    /// assert_eq!((l.replicas(), l.instances(), l.ipus_per_replica()), (16, 1, 1));
    /// ```
    #[must_use]
    pub fn data_parallel(pod: &PodSpec) -> Self {
        let d = Distribution {
            instances: 1,
            replicas: pod.ipus(),
            ipus_per_replica: 1,
        };
        // Every PodSpec has a valid size and links (checked when made), so
        // this layout exists; the fallback is never taken.
        d.layout(pod)
            .expect("one replica per IPU of a valid Pod is a valid layout")
    }

    /// The same layout with its collectives priced over `algorithms`.
    ///
    /// ```
    /// use tessera_sim::pod::{Algorithms, Layout, PodSpec};
    ///
    /// let gcl = Layout::data_parallel(&PodSpec::m2000());
    /// let auto = gcl.clone().with_algorithms(Algorithms::Auto);
    /// // Auto's candidates include GCL's rings: never dearer.
    /// assert!(auto.all_reduce_time(1 << 20).total() <= gcl.all_reduce_time(1 << 20).total());
    /// ```
    #[must_use]
    pub const fn with_algorithms(mut self, algorithms: Algorithms) -> Self {
        self.algorithms = algorithms;
        self
    }

    /// The algorithms its collectives are priced with.
    ///
    /// ```
    /// use tessera_sim::pod::{Algorithms, Layout, PodSpec};
    ///
    /// let l = Layout::data_parallel(&PodSpec::m2000());
    /// assert_eq!(l.algorithms(), Algorithms::Gcl);
    /// assert_eq!(l.with_algorithms(Algorithms::Auto).algorithms(), Algorithms::Auto);
    /// ```
    #[must_use]
    pub const fn algorithms(&self) -> Algorithms {
        self.algorithms
    }

    /// The Pod.
    ///
    /// ```
    /// use tessera_sim::pod::{Layout, PodSpec};
    ///
    /// assert_eq!(Layout::data_parallel(&PodSpec::pod16()).pod(), &PodSpec::pod16());
    /// ```
    #[must_use]
    pub const fn pod(&self) -> &PodSpec {
        &self.pod
    }

    /// Replicas in all.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pod16())?.replicas(), 8);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn replicas(&self) -> usize {
        self.replicas
    }

    /// Instances (processes).
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pod16())?.instances(), 2);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn instances(&self) -> usize {
        self.instances
    }

    /// Replicas per instance.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pod16())?.replicas_per_instance(), 4);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn replicas_per_instance(&self) -> usize {
        self.replicas / self.instances
    }

    /// IPUs per replica.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pod16())?.ipus_per_replica(), 2);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn ipus_per_replica(&self) -> usize {
        self.ipus_per_replica
    }

    /// IPUs used by all replicas.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 1, replicas: 4, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pod16())?.ipus(), 8); // of the Pod's 16
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn ipus(&self) -> usize {
        self.replicas * self.ipus_per_replica
    }

    /// Replicas in one IPU-Link domain (all replicas if they fit in one).
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// // POD128: two POD64 domains of 32 two-IPU replicas each.
    /// let d = Distribution { instances: 1, replicas: 64, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pods(2)?)?.replicas_per_domain(), 32);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn replicas_per_domain(&self) -> usize {
        self.group
    }

    /// IPU-Link domains (POD64s) the replicas use.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 1, replicas: 64, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pods(2)?)?.domains(), 2);
    /// let half = Distribution { replicas: 32, ..d };
    /// assert_eq!(half.layout(&PodSpec::pods(2)?)?.domains(), 1);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn domains(&self) -> usize {
        self.domains
    }

    /// The links' figures and the reduction rate of one orthogonal group
    /// (ranks are replicas, [`Topology::domain`] the replicas per IPU-Link
    /// domain). Its collectives are priced by routing over the Pod's
    /// [`Fabric`] and the GW-Links' ring, not by this model's closed forms.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 1, replicas: 64, ipus_per_replica: 2 };
    /// let l = d.layout(&PodSpec::pods(2)?)?;
    /// assert_eq!(l.cost_model().topology().domain(), l.replicas_per_domain());
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn cost_model(&self) -> &CostModel {
        &self.model
    }

    /// The instance that runs `replica`.
    ///
    /// # Panics
    /// If `replica >= replicas()`.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// let l = d.layout(&PodSpec::pod16())?;
    /// assert_eq!((l.instance_of(3), l.instance_of(4)), (0, 1));
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub fn instance_of(&self, replica: usize) -> usize {
        assert!(
            replica < self.replicas,
            "replica {replica} of {}",
            self.replicas
        );
        replica / self.replicas_per_instance()
    }

    /// The replicas `instance` runs.
    ///
    /// # Panics
    /// If `instance >= instances()`.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pod16())?.replicas_of(1), 4..8);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub fn replicas_of(&self, instance: usize) -> Range<usize> {
        assert!(
            instance < self.instances,
            "instance {instance} of {}",
            self.instances
        );
        let per = self.replicas_per_instance();
        instance * per..(instance + 1) * per
    }

    /// The replicas of `process`.
    ///
    /// # Errors
    /// [`PodError::ProcessCountMismatch`] unless the process count is the
    /// number of instances.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodError, PodSpec, ProcessId};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// let l = d.layout(&PodSpec::pod16())?;
    /// assert_eq!(l.replicas_of_process(ProcessId::new(1, 2)?)?, 4..8);
    /// let four = ProcessId::new(0, 4)?;
    /// let mismatch = PodError::ProcessCountMismatch { count: 4, instances: 2 };
    /// assert_eq!(l.replicas_of_process(four), Err(mismatch));
    /// # Ok::<(), PodError>(())
    /// ```
    pub fn replicas_of_process(&self, process: ProcessId) -> Result<Range<usize>, PodError> {
        if process.count != self.instances {
            return Err(PodError::ProcessCountMismatch {
                count: process.count,
                instances: self.instances,
            });
        }
        Ok(self.replicas_of(process.index))
    }

    /// The IPUs of `replica`, consecutive.
    ///
    /// # Panics
    /// If `replica >= replicas()`.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// assert_eq!(d.layout(&PodSpec::pod16())?.ipus_of(3), 6..8);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub fn ipus_of(&self, replica: usize) -> Range<usize> {
        assert!(
            replica < self.replicas,
            "replica {replica} of {}",
            self.replicas
        );
        let k = self.ipus_per_replica;
        replica * k..(replica + 1) * k
    }

    /// The IPU-Link domain (POD64) of `replica`.
    ///
    /// # Panics
    /// If `replica >= replicas()`.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 1, replicas: 64, ipus_per_replica: 2 };
    /// let l = d.layout(&PodSpec::pods(2)?)?;
    /// assert_eq!((l.domain_of(31), l.domain_of(32)), (0, 1));
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub fn domain_of(&self, replica: usize) -> usize {
        self.ipus_of(replica).start / self.pod.domain_ipus()
    }

    /// The [`Target`] one replica runs on: `ipus_per_replica` IPUs of the
    /// Pod's IPU.
    ///
    /// # Errors
    /// [`PodError::Target`] if the IPUs' tiles overflow a tile index.
    ///
    /// ```
    /// use tessera_sim::pod::{Distribution, PodSpec};
    ///
    /// let d = Distribution { instances: 2, replicas: 8, ipus_per_replica: 2 };
    /// let target = d.layout(&PodSpec::pod16())?.replica_target()?;
    /// assert_eq!((target.ipus(), target.tiles()), (2, 2 * 1472));
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    pub fn replica_target(&self) -> Result<Target, PodError> {
        let ipus = u32::try_from(self.ipus_per_replica).unwrap_or(u32::MAX);
        Ok(Target::new(*self.pod.ipu(), ipus)?)
    }

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
    /// [`CostModel::hierarchical_all_reduce`]). Each phase takes the
    /// cheapest of the layout's [`Algorithms`] (GCL's rings by default),
    /// each priced by routing its schedule over the Pod's links
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
