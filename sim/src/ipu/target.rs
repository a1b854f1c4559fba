//! The device a graph runs on: one or more IPUs of one [`IpuSpec`], joined
//! by IPU-Links in PopLibs' ladder.

use core::fmt;
use core::num::NonZeroU32;

use super::spec::IpuSpec;

/// A tile of the device: tiles of IPU `i` are `i * tiles_per_ipu ..
/// (i + 1) * tiles_per_ipu`.
pub type Tile = u32;

/// Why a [`Target`] cannot be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TargetError {
    /// No IPUs.
    NoIpus,
    /// More than one IPU, but an odd number: the ladder pairs IPUs.
    OddIpuCount(u32),
    /// `ipus * tiles` does not fit in a `u32` tile index.
    TooManyTiles {
        /// IPUs asked for.
        ipus: u32,
        /// Tiles per IPU.
        tiles_per_ipu: u32,
    },
}

impl fmt::Display for TargetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::NoIpus => f.write_str("a target needs at least one IPU"),
            Self::OddIpuCount(n) => write!(
                f,
                "{n} IPUs: a multi-IPU target needs an even number (IPUs are linked in pairs)"
            ),
            Self::TooManyTiles {
                ipus,
                tiles_per_ipu,
            } => write!(
                f,
                "{ipus} IPUs of {tiles_per_ipu} tiles overflow a 32-bit tile index"
            ),
        }
    }
}

impl core::error::Error for TargetError {}

/// One or more IPUs that run one program (one replica), as Poplar's
/// `Target` with `numIPUs`.
///
/// IPUs are joined as in PopLibs' test model of an IPU-Link ladder: IPUs
/// `2k` and `2k + 1` form a card (one rung) joined by 4 links; each IPU
/// has 2 links up to IPU `i + 2` and 2 down to `i - 2` (the ladder's
/// sides). Traffic to the partner uses the 4 card links; traffic to
/// another card first crosses the rung (2 of the card links, if the
/// destination is on the other side), then runs up or down the side, one
/// hop per card. See [`Target::route`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Target {
    spec: IpuSpec,
    ipus: NonZeroU32,
}

/// A group of IPU-Links leaving one IPU in one direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LinkGroup {
    /// From an IPU to its card partner, as the destination (4 links).
    Card(u32),
    /// From an IPU across its rung, on the way to another card (2 links).
    Rung(u32),
    /// From an IPU up its side to IPU `i + 2` (2 links).
    Up(u32),
    /// From an IPU down its side to IPU `i - 2` (2 links).
    Down(u32),
}

impl LinkGroup {
    /// Links in the group (PopLibs' test model).
    ///
    /// ```
    /// use tessera_sim::ipu::LinkGroup;
    ///
    /// assert_eq!((LinkGroup::Card(0).links(), LinkGroup::Up(0).links()), (4, 2));
    /// ```
    #[must_use]
    pub const fn links(self) -> u32 {
        match self {
            Self::Card(_) => 4,
            Self::Rung(_) | Self::Up(_) | Self::Down(_) => 2,
        }
    }
}

impl Target {
    /// One IPU.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Target;
    ///
    /// let t = Target::single(IpuSpec::BOW);
    /// assert_eq!((t.ipus(), t.tiles()), (1, 1472));
    /// ```
    #[must_use]
    pub const fn single(spec: IpuSpec) -> Self {
        Self {
            spec,
            ipus: NonZeroU32::MIN,
        }
    }

    /// `ipus` IPUs of `spec`.
    ///
    /// # Errors
    /// [`TargetError::NoIpus`], [`TargetError::OddIpuCount`] for 3, 5, ...
    /// IPUs, [`TargetError::TooManyTiles`].
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{Target, TargetError};
    ///
    /// assert_eq!(Target::new(IpuSpec::MK2_GC200, 4)?.ipus(), 4);
    /// assert_eq!(Target::new(IpuSpec::MK2_GC200, 3), Err(TargetError::OddIpuCount(3)));
    /// assert_eq!(Target::new(IpuSpec::MK2_GC200, 0), Err(TargetError::NoIpus));
    /// # Ok::<(), TargetError>(())
    /// ```
    pub const fn new(spec: IpuSpec, ipus: u32) -> Result<Self, TargetError> {
        let Some(n) = NonZeroU32::new(ipus) else {
            return Err(TargetError::NoIpus);
        };
        if ipus > 1 && ipus % 2 == 1 {
            return Err(TargetError::OddIpuCount(ipus));
        }
        if spec.tiles().checked_mul(ipus).is_none() {
            return Err(TargetError::TooManyTiles {
                ipus,
                tiles_per_ipu: spec.tiles(),
            });
        }
        Ok(Self { spec, ipus: n })
    }

    /// The IPU.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Target;
    ///
    /// assert_eq!(Target::single(IpuSpec::C600).spec(), &IpuSpec::C600);
    /// ```
    #[must_use]
    pub const fn spec(&self) -> &IpuSpec {
        &self.spec
    }

    /// IPUs.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Target;
    ///
    /// assert_eq!(Target::new(IpuSpec::MK2_GC200, 2).unwrap().ipus(), 2);
    /// ```
    #[must_use]
    pub const fn ipus(&self) -> u32 {
        self.ipus.get()
    }

    /// Tiles of all IPUs.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Target;
    ///
    /// assert_eq!(Target::new(IpuSpec::MK2_GC200, 2).unwrap().tiles(), 2 * 1472);
    /// ```
    #[must_use]
    pub const fn tiles(&self) -> u32 {
        self.spec.tiles() * self.ipus.get()
    }

    /// The IPU of `tile`.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Target;
    ///
    /// let t = Target::new(IpuSpec::MK2_GC200, 2).unwrap();
    /// assert_eq!((t.ipu_of(1471), t.ipu_of(1472)), (0, 1));
    /// ```
    #[must_use]
    pub const fn ipu_of(&self, tile: Tile) -> u32 {
        tile / self.spec.tiles()
    }

    /// Cycles of one sync of the whole target.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::Target;
    ///
    /// let ipu = IpuSpec::MK2_GC200;
    /// assert_eq!(Target::single(ipu).sync_cycles(), ipu.sync_cycles(1));
    /// assert_eq!(Target::new(ipu, 8).unwrap().sync_cycles(), ipu.sync_cycles(8));
    /// ```
    #[must_use]
    pub const fn sync_cycles(&self) -> u64 {
        self.spec.sync_cycles(self.ipus.get())
    }

    /// The link groups traffic from IPU `from` to IPU `to` crosses, in
    /// order (empty for `from == to`): PopLibs' ladder routing.
    ///
    /// # Panics
    /// If either IPU is out of range.
    ///
    /// ```
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{LinkGroup, Target};
    ///
    /// let t = Target::new(IpuSpec::MK2_GC200, 8).unwrap();
    /// assert!(t.route(3, 3).is_empty());
    /// assert_eq!(t.route(0, 1), [LinkGroup::Card(0)]);
    /// assert_eq!(t.route(1, 4), [LinkGroup::Rung(1), LinkGroup::Up(0), LinkGroup::Up(2)]);
    /// ```
    #[must_use]
    pub fn route(&self, from: u32, to: u32) -> Vec<LinkGroup> {
        let n = self.ipus();
        assert!(
            from < n && to < n,
            "IPU out of range: {from} -> {to} of {n}"
        );
        let mut hops = Vec::new();
        if from == to {
            return hops;
        }
        if from / 2 == to / 2 {
            hops.push(LinkGroup::Card(from));
            return hops;
        }
        let mut at = from;
        if at % 2 != to % 2 {
            hops.push(LinkGroup::Rung(at));
            at ^= 1;
        }
        while at != to {
            if at < to {
                hops.push(LinkGroup::Up(at));
                at += 2;
            } else {
                hops.push(LinkGroup::Down(at));
                at -= 2;
            }
        }
        hops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladder_routes() {
        let t = Target::new(IpuSpec::MK2_GC200, 8).unwrap();
        assert_eq!(t.tiles(), 8 * 1472);
        assert_eq!(t.ipu_of(1472), 1);
        assert!(t.route(3, 3).is_empty());
        assert_eq!(t.route(0, 1), [LinkGroup::Card(0)]);
        assert_eq!(t.route(0, 4), [LinkGroup::Up(0), LinkGroup::Up(2)]);
        assert_eq!(
            t.route(0, 5),
            [LinkGroup::Rung(0), LinkGroup::Up(1), LinkGroup::Up(3)]
        );
        assert_eq!(
            t.route(7, 2),
            [LinkGroup::Rung(7), LinkGroup::Down(6), LinkGroup::Down(4)]
        );
        assert_eq!(LinkGroup::Card(0).links(), 4);
        assert_eq!(LinkGroup::Up(0).links(), 2);
    }

    #[test]
    fn target_validation() {
        let s = IpuSpec::MK2_GC200;
        assert_eq!(Target::new(s, 0), Err(TargetError::NoIpus));
        assert_eq!(Target::new(s, 3), Err(TargetError::OddIpuCount(3)));
        assert!(Target::new(s, 1).is_ok());
        assert!(Target::new(s, 16).is_ok());
        assert!(matches!(
            Target::new(s, 1 << 30),
            Err(TargetError::TooManyTiles { .. })
        ));
        assert_eq!(Target::new(s, 16).unwrap().sync_cycles(), 200);
        assert_eq!(Target::single(s).sync_cycles(), 40);
    }
}
