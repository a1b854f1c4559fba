//! Random streams per replica, tile and worker.
//!
//! Graphcore's hardware gives each worker a PRNG seeded per (tile, worker)
//! from one seed, and PopART keeps two states per replica: "identical"
//! (the seed itself, the same on every replica: weight updates, so
//! stochastic rounding of replicated weights cannot drift apart) and
//! "differing" (seed plus the replica index: dropout and other per-sample
//! noise). [`Seeds`] derives both from one seed with Tessera's
//! position-addressed generator:
//!
//! ```text
//! identical root = RandomStream::new(seed, IDENTICAL)
//! differing root = RandomStream::new(seed, DIFFERING).substream(replica)
//! (tile, worker) = root.substream(tile * workers_per_tile + worker)
//! ```
//!
//! Unlike PopART's `seed + replica`, replica `r` of seed `s` never shares
//! a stream with replica `r - 1` of seed `s + 1`.
//!
//! # How the per-tile streams relate to stochastic rounding
//!
//! Tessera's kernels address random bits by *element position*: element
//! `i` of a tensor rounded with a stream uses that stream's bits at
//! position `i`, whichever tile or worker rounds it. So the tile-parallel
//! kernels in [`crate::kernels`] round with one stream per tensor (for
//! optimizers `Precision::weight_stream(id, t)`, from the replicas' common
//! seed) and pass each tile its global offset: the bits, and so the
//! results, do not depend on the mapping or on the number of tiles, and
//! they equal the single-call kernel's. The (tile, worker) streams are for
//! codelets that draw bits in sequence, as the hardware's per-worker
//! generators do; their results do depend on the split, as on the IPU.

use serde::Serialize;
use tessera_core::rng::RandomStream;

use super::target::Tile;

/// "IDENTICL": the stream number of the identical root.
const IDENTICAL: u64 = u64::from_be_bytes(*b"IDENTICL");
/// "DIFFERNG": the stream number of the differing root.
const DIFFERING: u64 = u64::from_be_bytes(*b"DIFFERNG");

/// Which of a replica's two random states.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum StreamKind {
    /// The same on every replica (weight updates).
    Identical,
    /// Different on every replica (per-sample noise).
    Differing,
}

/// The seeds of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Seeds {
    /// The seed every replica shares.
    pub seed: u64,
    /// This replica's index.
    pub replica: u32,
}

impl Seeds {
    /// Replica `replica` of a run seeded with `seed`.
    ///
    /// ```
    /// use tessera_sim::ipu::Seeds;
    ///
    /// assert_eq!(Seeds::new(42, 3), Seeds { seed: 42, replica: 3 });
    /// ```
    #[must_use]
    pub const fn new(seed: u64, replica: u32) -> Self {
        Self { seed, replica }
    }

    /// The root stream of `kind`.
    ///
    /// ```
    /// use tessera_sim::ipu::{Seeds, StreamKind};
    ///
    /// let (a, b) = (Seeds::new(42, 0), Seeds::new(42, 1));
    /// // Identical streams are the same on every replica, differing ones are not.
    /// assert_eq!(a.root(StreamKind::Identical), b.root(StreamKind::Identical));
    /// assert_ne!(a.root(StreamKind::Differing), b.root(StreamKind::Differing));
    /// ```
    #[must_use]
    pub const fn root(&self, kind: StreamKind) -> RandomStream {
        match kind {
            StreamKind::Identical => RandomStream::new(self.seed, IDENTICAL),
            StreamKind::Differing => {
                RandomStream::new(self.seed, DIFFERING).substream(self.replica as u64)
            }
        }
    }

    /// The stream of `worker` on `tile`, with `workers_per_tile` workers a
    /// tile.
    ///
    /// ```
    /// use tessera_sim::ipu::{Seeds, StreamKind};
    ///
    /// let s = Seeds::new(42, 0);
    /// let root = s.root(StreamKind::Identical);
    /// // Worker 2 of tile 1, 6 workers a tile: substream 8 of the root.
    /// assert_eq!(s.worker(StreamKind::Identical, 1, 2, 6), root.substream(8));
    /// ```
    #[must_use]
    pub const fn worker(
        &self,
        kind: StreamKind,
        tile: Tile,
        worker: u32,
        workers_per_tile: u32,
    ) -> RandomStream {
        let index = tile as u64 * workers_per_tile as u64 + worker as u64;
        self.root(kind).substream(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_streams_agree_across_replicas_differing_do_not() {
        let (a, b) = (Seeds::new(7, 0), Seeds::new(7, 1));
        assert_eq!(a.root(StreamKind::Identical), b.root(StreamKind::Identical));
        assert_ne!(a.root(StreamKind::Differing), b.root(StreamKind::Differing));
        for tile in 0..4 {
            for w in 0..6 {
                assert_eq!(
                    a.worker(StreamKind::Identical, tile, w, 6),
                    b.worker(StreamKind::Identical, tile, w, 6)
                );
                assert_ne!(
                    a.worker(StreamKind::Differing, tile, w, 6),
                    b.worker(StreamKind::Differing, tile, w, 6)
                );
            }
        }
        // Not PopART's seed + replica.
        assert_ne!(
            Seeds::new(8, 0).root(StreamKind::Differing),
            Seeds::new(7, 1).root(StreamKind::Differing)
        );
    }

    #[test]
    fn every_worker_has_its_own_stream() {
        let s = Seeds::new(1, 0);
        let mut keys = std::collections::BTreeSet::new();
        for kind in [StreamKind::Identical, StreamKind::Differing] {
            for tile in 0..16 {
                for w in 0..6 {
                    assert!(keys.insert(s.worker(kind, tile, w, 6).bits(0)));
                }
            }
        }
    }
}
