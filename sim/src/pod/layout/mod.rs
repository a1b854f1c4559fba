//! Where replicas run on a Pod, and what their collectives cost.

use core::ops::Range;

use serde::Serialize;

use tessera_collectives::route::GCL;
use tessera_collectives::{Algorithm, CostModel, Fabric, Ports, Topology};

use super::error::{DistributionField, PodError};
use super::process::ProcessId;
use super::spec::{GW_LINKS_PER_M2000, PodSpec};
use crate::ipu::Target;

mod costs;

pub use costs::{CollectiveTime, Prefetch};

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
}
