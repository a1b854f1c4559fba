//! What an [`Engine`](super::Engine) holds in host memory, by kind: the
//! simulator's own cost, which should follow the model (its tensors,
//! vertices and copies), not the target's tile count.

use serde::Serialize;

/// Host bytes of an engine's data, by kind (heap contents and the
/// structures that index them; allocator slack not counted).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct HostBytes {
    /// Every tile's pieces of tensors, where they are (their intervals),
    /// and the host streams' buffers.
    pub tensors: u64,
    /// The compute sets' vertices, their fields, and the per-tile index
    /// of each compute set.
    pub vertices: u64,
    /// The exchanges' copy plans.
    pub exchanges: u64,
    /// What every tile of the target costs whatever the model: its list
    /// of pieces and its memory record.
    pub per_tile: u64,
}

impl HostBytes {
    /// All of it.
    ///
    /// ```
    /// use tessera_sim::ipu::HostBytes;
    ///
    /// let h = HostBytes { tensors: 100, vertices: 20, exchanges: 3, per_tile: 64 };
    /// assert_eq!(h.total(), 187);
    /// ```
    #[must_use]
    pub const fn total(&self) -> u64 {
        self.tensors + self.vertices + self.exchanges + self.per_tile
    }
}
