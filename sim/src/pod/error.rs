//! Why a Pod, a distribution over it, or a process identity is invalid.

use core::fmt;

use tessera_collectives::{ConfigError, FabricError};

use crate::ipu::TargetError;

/// A count of [`Distribution`](super::Distribution) that must be at least 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DistributionField {
    /// `instances` (PopDist processes).
    Instances,
    /// `replicas` (the total replication factor).
    Replicas,
    /// `ipus_per_replica`.
    IpusPerReplica,
}

impl DistributionField {
    /// The field's name.
    ///
    /// ```
    /// use tessera_sim::pod::DistributionField;
    ///
    /// assert_eq!(DistributionField::IpusPerReplica.name(), "ipus_per_replica");
    /// ```
    #[must_use]
    pub const fn name(self) -> &'static str {
        match self {
            Self::Instances => "instances",
            Self::Replicas => "replicas",
            Self::IpusPerReplica => "ipus_per_replica",
        }
    }
}

/// Why a Pod, a distribution over it, or a process identity is invalid.
/// Every variant carries the numbers that disagree.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum PodError {
    /// A Pod name that is none of `m2000`, `pod16`, `pod64`, `podN`.
    UnknownPodName,
    /// A Pod of `ipus` IPUs: Pods (and their partitions) have a power of
    /// two of at most 64 IPUs, or whole POD64s up to
    /// [`MAX_POD_IPUS`](super::MAX_POD_IPUS).
    PodSize {
        /// IPUs asked for.
        ipus: usize,
    },
    /// A link's figures are not a link (see [`ConfigError`]).
    Link {
        /// The link's name.
        link: &'static str,
        /// What is wrong.
        error: ConfigError,
    },
    /// An IPU-Link or GW-Link topology that cannot be built (a link to a
    /// missing IPU, an IPU no link reaches, see [`FabricError`]).
    Fabric(FabricError),
    /// An IPU-Link topology whose IPUs are not the Pod's IPU-Link domain.
    FabricSize {
        /// IPUs the topology joins.
        nodes: usize,
        /// IPUs of the Pod's IPU-Link domain.
        domain_ipus: usize,
    },
    /// A count of the distribution is 0.
    Zero(DistributionField),
    /// The instances do not divide the replicas evenly (PopDist gives every
    /// instance the same number of replicas).
    InstancesDoNotDivideReplicas {
        /// Instances.
        instances: usize,
        /// Replicas.
        replicas: usize,
    },
    /// IPUs per replica that are not a power of two.
    IpusPerReplicaNotPowerOfTwo {
        /// IPUs per replica.
        ipus_per_replica: usize,
    },
    /// A replica larger than the IPU-Link domain it must sit in (the
    /// Pod's IPUs up to a POD64), so it does not divide the domain.
    ReplicaLargerThanDomain {
        /// IPUs per replica.
        ipus_per_replica: usize,
        /// IPUs of the IPU-Link domain.
        domain_ipus: usize,
    },
    /// More IPUs than the Pod has.
    TooManyIpus {
        /// Replicas.
        replicas: usize,
        /// IPUs per replica.
        ipus_per_replica: usize,
        /// The Pod's IPUs.
        available: usize,
    },
    /// Replicas spanning several IPU-Link domains that leave one partly
    /// filled: the hierarchical all-reduce pairs equal domains.
    PartialDomain {
        /// IPUs the replicas use.
        ipus: usize,
        /// IPUs of one IPU-Link domain.
        domain_ipus: usize,
    },
    /// The replica's IPUs do not make a [`Target`](crate::ipu::Target).
    Target(TargetError),
    /// A process index or count that is not a number (from the
    /// environment variable named).
    ProcessNotANumber {
        /// The variable.
        variable: &'static str,
    },
    /// Only one of the process index and count is set (the other variable
    /// named).
    ProcessMissing {
        /// The variable not set.
        variable: &'static str,
    },
    /// A process index not below the process count, or a count of 0.
    ProcessOutOfRange {
        /// The index.
        index: usize,
        /// The count.
        count: usize,
    },
    /// A process count different from the layout's instances.
    ProcessCountMismatch {
        /// Processes.
        count: usize,
        /// Instances of the layout.
        instances: usize,
    },
}

impl fmt::Display for PodError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::UnknownPodName => f.write_str(
                "unknown Pod: expected m2000, pod16, pod64 or podN with N a multiple of 64",
            ),
            Self::PodSize { ipus } => write!(
                f,
                "a Pod of {ipus} IPUs: a Pod has a power of two of at most 64 IPUs or whole \
                 POD64s, up to 65536 IPUs (1024 POD64s)"
            ),
            Self::Link { link, error } => write!(f, "{link}: {error}"),
            Self::Fabric(e) => write!(f, "IPU-Link topology: {e}"),
            Self::FabricSize { nodes, domain_ipus } => write!(
                f,
                "an IPU-Link topology of {nodes} IPUs for an IPU-Link domain of {domain_ipus} IPUs"
            ),
            Self::Zero(field) => write!(f, "{} must be at least 1", field.name()),
            Self::InstancesDoNotDivideReplicas {
                instances,
                replicas,
            } => write!(
                f,
                "{instances} instances do not divide {replicas} replicas evenly"
            ),
            Self::IpusPerReplicaNotPowerOfTwo { ipus_per_replica } => write!(
                f,
                "{ipus_per_replica} IPUs per replica: Graphcore needs a power of two"
            ),
            Self::ReplicaLargerThanDomain {
                ipus_per_replica,
                domain_ipus,
            } => write!(
                f,
                "{ipus_per_replica} IPUs per replica do not fit in (divide) an IPU-Link domain of {domain_ipus} IPUs"
            ),
            Self::TooManyIpus {
                replicas,
                ipus_per_replica,
                available,
            } => write!(
                f,
                "{replicas} replicas x {ipus_per_replica} IPUs need {} IPUs, the Pod has {available}",
                replicas.saturating_mul(ipus_per_replica)
            ),
            Self::PartialDomain { ipus, domain_ipus } => write!(
                f,
                "{ipus} IPUs span IPU-Link domains of {domain_ipus} IPUs but do not fill them"
            ),
            Self::Target(e) => write!(f, "replica target: {e}"),
            Self::ProcessNotANumber { variable } => {
                write!(f, "{variable} is not a non-negative integer")
            }
            Self::ProcessMissing { variable } => write!(
                f,
                "{variable} is not set, but the other process variable is"
            ),
            Self::ProcessOutOfRange { index, count } => write!(
                f,
                "process index {index} is not below the process count {count}"
            ),
            Self::ProcessCountMismatch { count, instances } => {
                write!(f, "{count} processes for a layout of {instances} instances")
            }
        }
    }
}

impl core::error::Error for PodError {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Link { error, .. } => Some(error),
            Self::Fabric(e) => Some(e),
            Self::Target(e) => Some(e),
            _ => None,
        }
    }
}

impl From<FabricError> for PodError {
    fn from(e: FabricError) -> Self {
        Self::Fabric(e)
    }
}

impl From<TargetError> for PodError {
    fn from(e: TargetError) -> Self {
        Self::Target(e)
    }
}
