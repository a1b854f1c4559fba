//! What a Pod is made of: IPUs of one [`IpuSpec`] in IPU-M2000s, IPU-Links
//! inside an IPU-Link domain (up to a POD64), GW-Links between POD64s, and
//! the hosts' links.
//!
//! Every figure and its source is in the [`pod`](super) module's table;
//! the values come from [`IpuSpec`] and from `tessera-collectives`'
//! [`Topology::ipu_pod`] links, not from numbers of this file.

use core::fmt;
use core::str::FromStr;

use serde::Serialize;
use tessera_collectives::{ConfigError, Fabric, Link, Ports, Topology};

use super::error::PodError;
use crate::ipu::IpuSpec;

/// IPUs in one IPU-M2000 (and one Bow-2000).
pub const IPUS_PER_M2000: usize = 4;

/// IPU-M2000s in a POD16.
pub const M2000S_PER_POD16: usize = 4;

/// IPU-M2000s in a POD64.
pub const M2000S_PER_POD64: usize = 16;

/// IPUs of one IPU-Link domain: a POD64. Larger Pods join POD64s over
/// GW-Links.
pub const POD64_IPUS: usize = IPUS_PER_M2000 * M2000S_PER_POD64;

/// The most IPUs a Pod has: 1024 POD64s, 65,536 IPUs, the largest system
/// Graphcore's IPU-POD64 datasheet says the reference design scales to
/// ("scalable to 1,024 IPU-POD64 racks supporting 65,536 GC200 IPU
/// processors").
pub const MAX_POD_IPUS: usize = 1024 * POD64_IPUS;
// `PodError::PodSize`'s message states it (error.rs cannot import it: spec.rs imports the error).
const _: () = assert!(MAX_POD_IPUS == 65_536);

/// GW-Links per IPU-M2000: 2 x 100 Gbit/s (IPU-M2000 and Bow-2000
/// datasheets).
pub const GW_LINKS_PER_M2000: u32 = 2;

/// The smallest IPU-Link domain whose ladder's rails are closed into
/// rings: the IPU-POD64 datasheet gives a "2D-torus IPU-Link topology",
/// and Graphcore's GCL needs a ring of every power-of-two partition (the
/// reason replica counts are powers of two); that partitions of 8 and 16
/// IPUs (a POD16) loop back the same way is an assumption. A lone
/// IPU-M2000's ring closes through its own rungs.
pub const CLOSED_LADDER_IPUS: usize = 8;

/// One kind of link of a Pod, with the source of its figures in the
/// [`pod`](super) module's table.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct LinkSpec {
    /// What the link is.
    pub name: &'static str,
    /// Raw bytes per second of one link in one direction: per IPU-Link for
    /// [`LinkSpec::ipu_link`], per IPU-M2000 for [`LinkSpec::gw_link`] and
    /// [`LinkSpec::host_link`].
    pub bandwidth_bytes_per_s: f64,
    /// The fraction of the bandwidth that carries data, in `(0, 1]`.
    pub efficiency: f64,
    /// Seconds per message (the alpha of the cost model).
    pub latency_s: f64,
    /// Seconds per hop of a global sync across this link.
    pub sync_per_hop_s: f64,
}

impl LinkSpec {
    /// The IPU-Links of `ipu`: its own link speed, efficiency and sync
    /// latency per hop ([`crate::IpuParams`]), with the message latency of
    /// [`Topology::IPU_LINK`].
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::pod::{LinkSpec, PodSpec};
    ///
    /// let link = LinkSpec::ipu_link(&IpuSpec::MK2_GC200);
    /// assert_eq!(link.name, "IPU-Link");
    /// assert!(link.efficiency > 0.0 && link.efficiency <= 1.0);
    /// assert_eq!(PodSpec::pod16().ipu_link(), &link);
    /// ```
    #[must_use]
    pub fn ipu_link(ipu: &IpuSpec) -> Self {
        let p = ipu.params();
        Self {
            name: "IPU-Link",
            bandwidth_bytes_per_s: p.link_bits_per_second as f64 / 8.0,
            efficiency: f64::from(p.link_efficiency_percent) / 100.0,
            latency_s: Topology::IPU_LINK.alpha(),
            sync_per_hop_s: p.hop_latency_ps as f64 * 1e-12,
        }
    }

    /// One GW-Link of an IPU-M2000 (100 Gbit/s each way; an IPU-M2000 has
    /// [`GW_LINKS_PER_M2000`]): the per-IPU share of
    /// [`Topology::GW_LINK_PER_IPU`] times [`IPUS_PER_M2000`], its latency
    /// also charged per hop of a sync across POD64s.
    ///
    /// ```
    /// use tessera_sim::pod::{LinkSpec, PodSpec};
    ///
    /// assert_eq!(LinkSpec::gw_link().name, "GW-Link");
    /// assert_eq!(PodSpec::pods(2)?.gw_link(), &LinkSpec::gw_link());
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub fn gw_link() -> Self {
        let gw = Topology::GW_LINK_PER_IPU;
        Self {
            name: "GW-Link",
            bandwidth_bytes_per_s: gw.bandwidth() * IPUS_PER_M2000 as f64,
            efficiency: gw.efficiency(),
            latency_s: gw.alpha(),
            sync_per_hop_s: gw.alpha(),
        }
    }

    /// The host's link to one IPU-M2000: 100 Gbit/s Ethernet with RDMA
    /// (RoCE) at line rate, latency not modelled.
    ///
    /// ```
    /// use tessera_sim::pod::LinkSpec;
    ///
    /// let host = LinkSpec::host_link();
    /// assert_eq!(host.bandwidth_bytes_per_s, 12.5e9); // 100 Gbit/s
    /// assert_eq!((host.efficiency, host.latency_s), (1.0, 0.0));
    /// ```
    #[must_use]
    pub fn host_link() -> Self {
        Self {
            name: "host link (100 GbE RoCE)",
            bandwidth_bytes_per_s: 100.0e9 / 8.0,
            efficiency: 1.0,
            latency_s: 0.0,
            sync_per_hop_s: 0.0,
        }
    }

    /// A spec with the figures of a collectives [`Link`] (as
    /// [`LinkSpec::bandwidth_bytes_per_s`] the link's bandwidth as it is).
    ///
    /// ```
    /// use tessera_collectives::{Link, Ports};
    /// use tessera_sim::pod::LinkSpec;
    ///
    /// let link = Link::new(1e-6, 16e9, 0.5, Ports::PerPeer).unwrap();
    /// let spec = LinkSpec::from_link("mine", &link, 2e-7);
    /// assert_eq!((spec.bandwidth_bytes_per_s, spec.efficiency), (16e9, 0.5));
    /// assert_eq!(spec.data_bytes_per_s(), 8e9);
    /// ```
    #[must_use]
    pub fn from_link(name: &'static str, link: &Link, sync_per_hop_s: f64) -> Self {
        Self {
            name,
            bandwidth_bytes_per_s: link.bandwidth(),
            efficiency: link.efficiency(),
            latency_s: link.alpha(),
            sync_per_hop_s,
        }
    }

    /// Bytes of data per second: bandwidth times efficiency.
    ///
    /// ```
    /// use tessera_sim::pod::LinkSpec;
    ///
    /// let gw = LinkSpec::gw_link();
    /// assert_eq!(gw.data_bytes_per_s(), gw.bandwidth_bytes_per_s * gw.efficiency);
    /// assert_eq!(LinkSpec::host_link().data_bytes_per_s(), 12.5e9);
    /// ```
    #[must_use]
    pub fn data_bytes_per_s(&self) -> f64 {
        self.bandwidth_bytes_per_s * self.efficiency
    }

    /// The collectives [`Link`] with these figures, with `bandwidth`
    /// divided by `share` (ranks sharing it).
    pub(crate) fn link(&self, share: usize, ports: Ports) -> Result<Link, PodError> {
        if !(self.sync_per_hop_s.is_finite() && self.sync_per_hop_s >= 0.0) {
            return Err(PodError::Link {
                link: self.name,
                error: ConfigError::Negative {
                    field: "sync_per_hop_s",
                    value: self.sync_per_hop_s,
                },
            });
        }
        Link::new(
            self.latency_s,
            self.bandwidth_bytes_per_s / share.max(1) as f64,
            self.efficiency,
            ports,
        )
        .map_err(|error| PodError::Link {
            link: self.name,
            error,
        })
    }
}

/// A Graphcore Pod, or a partition of one: IPUs of one [`IpuSpec`], four
/// to an IPU-M2000, joined by IPU-Links in a ladder within each POD64 and
/// by GW-Links between POD64s.
///
/// ```
/// use tessera_sim::pod::PodSpec;
///
/// assert_eq!(PodSpec::pod16().ipus(), 16);
/// let pod256: PodSpec = "POD256".parse()?;
/// assert_eq!((pod256.ipus(), pod256.pod64s()), (256, 4));
/// assert!("pod100".parse::<PodSpec>().is_err());
/// # Ok::<(), tessera_sim::pod::PodError>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct PodSpec {
    name: String,
    ipus: usize,
    ipu: IpuSpec,
    ipu_link: LinkSpec,
    gw_link: LinkSpec,
    host_link: LinkSpec,
    /// The IPU-Links of one IPU-Link domain.
    fabric: Fabric,
}

/// Graphcore's IPU-Link ladder ([`Fabric::ladder`]) of a domain of
/// `domain_ipus` IPUs over `link`, closed from [`CLOSED_LADDER_IPUS`] up.
fn ladder(domain_ipus: usize, link: &LinkSpec) -> Result<Fabric, PodError> {
    let l = link.link(1, Ports::PerPeer)?;
    Ok(Fabric::ladder(
        domain_ipus,
        domain_ipus >= CLOSED_LADDER_IPUS,
        l,
    )?)
}

impl PodSpec {
    /// A preset of `ipus` Mk2 GC200 IPUs (valid by construction).
    fn mk2(name: String, ipus: usize) -> Self {
        let ipu = IpuSpec::MK2_GC200;
        let ipu_link = LinkSpec::ipu_link(&ipu);
        Self {
            name,
            ipus,
            ipu,
            fabric: preset_ladder(ipus.min(POD64_IPUS), &ipu_link),
            ipu_link,
            gw_link: LinkSpec::gw_link(),
            host_link: LinkSpec::host_link(),
        }
    }

    /// One IPU-M2000: 4 Mk2 IPUs.
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let m = PodSpec::m2000();
    /// assert_eq!((m.name(), m.ipus(), m.m2000s()), ("IPU-M2000", 4, 1));
    /// ```
    #[must_use]
    pub fn m2000() -> Self {
        Self::mk2("IPU-M2000".into(), IPUS_PER_M2000)
    }

    /// An IPU-POD16: 4 IPU-M2000s, 16 IPUs.
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let p = PodSpec::pod16();
    /// assert_eq!((p.ipus(), p.m2000s(), p.pod64s()), (16, 4, 1));
    /// ```
    #[must_use]
    pub fn pod16() -> Self {
        Self::mk2("POD16".into(), IPUS_PER_M2000 * M2000S_PER_POD16)
    }

    /// An IPU-POD64: 16 IPU-M2000s, 64 IPUs, one IPU-Link domain.
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let p = PodSpec::pod64();
    /// assert_eq!((p.ipus(), p.m2000s(), p.domain_ipus()), (64, 16, 64));
    /// ```
    #[must_use]
    pub fn pod64() -> Self {
        Self::mk2("POD64".into(), POD64_IPUS)
    }

    /// `pod64s` POD64s joined by GW-Links: 2 is a POD128, 4 a POD256.
    ///
    /// # Errors
    /// [`PodError::PodSize`] for 0, or more IPUs than [`MAX_POD_IPUS`].
    ///
    /// ```
    /// use tessera_sim::pod::{PodError, PodSpec};
    ///
    /// let p = PodSpec::pods(2)?;
    /// assert_eq!((p.name(), p.ipus(), p.pod64s()), ("POD128", 128, 2));
    /// assert_eq!(PodSpec::pods(0), Err(PodError::PodSize { ipus: 0 }));
    /// assert_eq!(PodSpec::pods(1025), Err(PodError::PodSize { ipus: 65_600 }));
    /// # Ok::<(), PodError>(())
    /// ```
    pub fn pods(pod64s: usize) -> Result<Self, PodError> {
        let ipus = pod64s
            .checked_mul(POD64_IPUS)
            .ok_or(PodError::PodSize { ipus: usize::MAX })?;
        if ipus == 0 || ipus > MAX_POD_IPUS {
            return Err(PodError::PodSize { ipus });
        }
        Ok(Self::mk2(format!("POD{ipus}"), ipus))
    }

    /// Any Pod: `ipus` IPUs of `ipu` (a power of two up to 64, as the
    /// partitions of a POD64, or whole POD64s up to [`MAX_POD_IPUS`]), with
    /// the links given.
    ///
    /// # Errors
    /// [`PodError::PodSize`]; [`PodError::Link`] if a link's figures are
    /// not a link (a negative or non-finite latency or sync, a bandwidth
    /// that is not positive, an efficiency outside `(0, 1]`).
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::pod::{LinkSpec, PodError, PodSpec};
    ///
    /// let ipu = IpuSpec::MK2_GC200;
    /// let link = LinkSpec::ipu_link(&ipu);
    /// let pod8 = PodSpec::custom("pod8", 8, ipu, link, LinkSpec::gw_link())?;
    /// assert_eq!((pod8.ipus(), pod8.domain_ipus()), (8, 8));
    /// let odd = PodSpec::custom("pod12", 12, ipu, link, LinkSpec::gw_link());
    /// assert_eq!(odd, Err(PodError::PodSize { ipus: 12 }));
    /// # Ok::<(), PodError>(())
    /// ```
    pub fn custom(
        name: impl Into<String>,
        ipus: usize,
        ipu: IpuSpec,
        ipu_link: LinkSpec,
        gw_link: LinkSpec,
    ) -> Result<Self, PodError> {
        let valid = (ipus.is_power_of_two() && ipus <= POD64_IPUS)
            || (ipus > 0 && ipus <= MAX_POD_IPUS && ipus.is_multiple_of(POD64_IPUS));
        if !valid {
            return Err(PodError::PodSize { ipus });
        }
        gw_link.link(1, Ports::Single)?;
        Ok(Self {
            name: name.into(),
            ipus,
            ipu,
            fabric: ladder(ipus.min(POD64_IPUS), &ipu_link)?,
            ipu_link,
            gw_link,
            host_link: LinkSpec::host_link(),
        })
    }

    /// The same Pod with the IPUs of each IPU-Link domain joined as
    /// `fabric` says instead of Graphcore's ladder (its link's figures
    /// replace the IPU-Link's rate, efficiency and latency in collectives).
    ///
    /// ```
    /// use tessera_collectives::{Edge, Fabric, Link, Ports};
    /// use tessera_sim::pod::{PodError, PodSpec};
    ///
    /// let link = Link::new(1e-6, 16e9, 0.85, Ports::PerPeer).unwrap();
    /// let ring = Fabric::ring(16, 2, link).unwrap();
    /// assert!(PodSpec::pod16().with_fabric(ring).is_ok());
    /// let small = Fabric::ring(8, 2, link).unwrap();
    /// assert_eq!(
    ///     PodSpec::pod16().with_fabric(small),
    ///     Err(PodError::FabricSize { nodes: 8, domain_ipus: 16 })
    /// );
    /// ```
    ///
    /// # Errors
    /// [`PodError::FabricSize`] unless `fabric` joins exactly the IPUs of
    /// one domain ([`PodSpec::domain_ipus`]).
    pub fn with_fabric(mut self, fabric: Fabric) -> Result<Self, PodError> {
        if fabric.nodes() != self.domain_ipus() {
            return Err(PodError::FabricSize {
                nodes: fabric.nodes(),
                domain_ipus: self.domain_ipus(),
            });
        }
        self.fabric = fabric;
        Ok(self)
    }

    /// The same Pod with hosts reaching each IPU-M2000 over `host_link`.
    ///
    /// # Errors
    /// [`PodError::Link`] as [`PodSpec::custom`].
    ///
    /// ```
    /// use tessera_sim::pod::{LinkSpec, PodError, PodSpec};
    ///
    /// let fast = LinkSpec { bandwidth_bytes_per_s: 25e9, ..LinkSpec::host_link() };
    /// assert_eq!(PodSpec::pod16().with_host_link(fast)?.host_link(), &fast);
    /// let broken = LinkSpec { efficiency: 0.0, ..LinkSpec::host_link() };
    /// assert!(matches!(PodSpec::pod16().with_host_link(broken), Err(PodError::Link { .. })));
    /// # Ok::<(), PodError>(())
    /// ```
    pub fn with_host_link(mut self, host_link: LinkSpec) -> Result<Self, PodError> {
        host_link.link(1, Ports::Single)?;
        self.host_link = host_link;
        Ok(self)
    }

    /// The same Pod built of `ipu`s (a Bow Pod from a Mk2 preset, say):
    /// the IPU-Links take the new IPU's own figures
    /// ([`LinkSpec::ipu_link`]); the GW-Links, the host links and the name
    /// stay.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::pod::PodSpec;
    ///
    /// let bow = PodSpec::pod16().with_ipu(IpuSpec::BOW);
    /// assert_eq!(bow.ipu().clock_hz(), 1_850_000_000);
    /// assert_eq!(bow.ipus(), 16);
    /// ```
    #[must_use]
    pub fn with_ipu(mut self, ipu: IpuSpec) -> Self {
        self.ipu_link = LinkSpec::ipu_link(&ipu);
        self.fabric = preset_ladder(self.domain_ipus(), &self.ipu_link);
        self.ipu = ipu;
        self
    }

    /// The Pod's name.
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// assert_eq!(PodSpec::pod16().name(), "POD16");
    /// ```
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// IPUs.
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// assert_eq!(PodSpec::pod64().ipus(), 64);
    /// ```
    #[must_use]
    pub const fn ipus(&self) -> usize {
        self.ipus
    }

    /// The IPU.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::pod::PodSpec;
    ///
    /// assert_eq!(PodSpec::pod16().ipu(), &IpuSpec::MK2_GC200);
    /// assert_eq!(PodSpec::pod16().ipu().clock_hz(), 1_330_000_000);
    /// ```
    #[must_use]
    pub const fn ipu(&self) -> &IpuSpec {
        &self.ipu
    }

    /// The IPU-Links (within an IPU-Link domain).
    ///
    /// ```
    /// use tessera_sim::pod::{LinkSpec, PodSpec};
    ///
    /// let pod = PodSpec::pod16();
    /// assert_eq!(pod.ipu_link(), &LinkSpec::ipu_link(pod.ipu()));
    /// ```
    #[must_use]
    pub const fn ipu_link(&self) -> &LinkSpec {
        &self.ipu_link
    }

    /// The IPU-Links of one IPU-Link domain: which IPUs they join, how
    /// many, at what rate and latency.
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// // A POD256's IPU-Link domain is one POD64.
    /// assert_eq!(PodSpec::pods(4)?.fabric().nodes(), 64);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    /// One GW-Link of an IPU-M2000 (between POD64s).
    ///
    /// ```
    /// use tessera_sim::pod::{LinkSpec, PodSpec};
    ///
    /// assert_eq!(PodSpec::pod64().gw_link().name, LinkSpec::gw_link().name);
    /// ```
    #[must_use]
    pub const fn gw_link(&self) -> &LinkSpec {
        &self.gw_link
    }

    /// The host's link to one IPU-M2000.
    ///
    /// ```
    /// use tessera_sim::pod::{LinkSpec, PodSpec};
    ///
    /// assert_eq!(PodSpec::pod16().host_link(), &LinkSpec::host_link());
    /// ```
    #[must_use]
    pub const fn host_link(&self) -> &LinkSpec {
        &self.host_link
    }

    /// IPUs per IPU-M2000: [`IPUS_PER_M2000`].
    ///
    /// ```
    /// use tessera_sim::pod::{IPUS_PER_M2000, PodSpec};
    ///
    /// assert_eq!(PodSpec::pod64().ipus_per_m2000(), IPUS_PER_M2000);
    /// ```
    #[must_use]
    pub const fn ipus_per_m2000(&self) -> usize {
        IPUS_PER_M2000
    }

    /// IPU-M2000s (a partition of fewer than 4 IPUs uses part of one).
    ///
    /// ```
    /// use tessera_sim::pod::{LinkSpec, PodSpec};
    /// use tessera_sim::IpuSpec;
    ///
    /// assert_eq!(PodSpec::pod64().m2000s(), 16);
    /// let ipu = IpuSpec::MK2_GC200;
    /// let two = PodSpec::custom("two", 2, ipu, LinkSpec::ipu_link(&ipu), LinkSpec::gw_link())?;
    /// assert_eq!(two.m2000s(), 1); // part of one
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn m2000s(&self) -> usize {
        self.ipus.div_ceil(IPUS_PER_M2000)
    }

    /// IPUs of one IPU-Link domain: the Pod's IPUs up to a POD64.
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// assert_eq!(PodSpec::pod16().domain_ipus(), 16);
    /// assert_eq!(PodSpec::pods(2)?.domain_ipus(), 64);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn domain_ipus(&self) -> usize {
        if self.ipus < POD64_IPUS {
            self.ipus
        } else {
            POD64_IPUS
        }
    }

    /// IPU-Link domains (POD64s; 1 for a smaller Pod).
    ///
    /// ```
    /// use tessera_sim::pod::PodSpec;
    ///
    /// assert_eq!(PodSpec::pods(4)?.pod64s(), 4);
    /// # Ok::<(), tessera_sim::pod::PodError>(())
    /// ```
    #[must_use]
    pub const fn pod64s(&self) -> usize {
        self.ipus / self.domain_ipus()
    }
}

/// [`ladder`] of figures valid by construction: a power of two of IPUs up
/// to a POD64 (1 or even), and an [`IpuSpec`]'s link, whose rate and
/// efficiency `IpuSpec` validates as nonzero and at most 100%.
fn preset_ladder(domain_ipus: usize, link: &LinkSpec) -> Fabric {
    ladder(domain_ipus, link).expect("a preset Pod's ladder is valid")
}

impl fmt::Display for PodSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} IPUs)", self.name, self.ipus)
    }
}

impl FromStr for PodSpec {
    type Err = PodError;

    /// `m2000` (or `ipu-m2000`), `pod16`, `pod64`, `pod128`, `pod256`, and
    /// `podN` for any multiple `N` of 64 up to [`MAX_POD_IPUS`], in any
    /// case (an `ipu-` prefix allowed).
    fn from_str(s: &str) -> Result<Self, PodError> {
        let lower = s.trim().to_ascii_lowercase();
        let name = lower.strip_prefix("ipu-").unwrap_or(&lower);
        if name == "m2000" {
            return Ok(Self::m2000());
        }
        let digits = name.strip_prefix("pod").ok_or(PodError::UnknownPodName)?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(PodError::UnknownPodName);
        }
        let ipus: usize = digits
            .parse()
            .map_err(|_| PodError::PodSize { ipus: usize::MAX })?;
        match ipus {
            16 => Ok(Self::pod16()),
            n if n > 0 && n.is_multiple_of(POD64_IPUS) => Self::pods(n / POD64_IPUS),
            _ => Err(PodError::PodSize { ipus }),
        }
    }
}
