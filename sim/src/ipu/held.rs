//! Tensors held in another encoding than their type: a quantised
//! operand's f32 values, exactly its format's, take the format's bytes in
//! tile memory and on the exchange ([`Graph::hold`]).

use super::encoding::Encoding;
use super::graph::{Graph, piece_bytes};
use super::tensor::TensorId;

impl Graph {
    /// Holds `t`'s elements as `encoding` in tile memory and on the
    /// exchange: its pieces take [`Encoding::bytes`] and copies from it move
    /// them. The values stay `t`'s type on the host (a quantised operand's
    /// f32 values are exactly its encoding's), so nothing computed changes.
    ///
    /// ```
    /// use tessera_core::fp::Format;
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Encoding, Graph, Mapping, MemoryUsage, Target};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let t = g.add_tensor("x", DType::F32, &[64], Mapping::one_tile(0, 64)).unwrap();
    /// g.hold(t, Encoding::Scalar(Format::E4M3FN));
    /// assert_eq!(g.held(t), Some(Encoding::Scalar(Format::E4M3FN)));
    /// assert_eq!(MemoryUsage::of(&g).tiles[0].tensors, 64);
    /// ```
    pub fn hold(&mut self, t: TensorId, encoding: Encoding) {
        let info = &mut self.tensors[t.index()];
        let old = info.held.replace(encoding);
        for p in &info.intervals {
            let piece = &mut self.tiles[p.tile as usize][p.piece as usize];
            let bytes = &mut self.tensor_bytes[p.tile as usize];
            *bytes = bytes
                .saturating_sub(piece_bytes(piece.dtype, old, piece.len))
                .saturating_add(piece_bytes(piece.dtype, Some(encoding), piece.len));
            piece.held = Some(encoding);
        }
    }

    /// How `t` is held, if not as its type ([`Graph::hold`]).
    ///
    /// ```
    /// use tessera_core::fp::Format;
    /// use tessera_sim::IpuSpec;
    /// use tessera_sim::ipu::{DType, Encoding, Graph, Mapping, Target};
    ///
    /// let mut g = Graph::new(Target::single(IpuSpec::MK2_GC200));
    /// let t = g.add_tensor("x", DType::F32, &[8], Mapping::one_tile(0, 8)).unwrap();
    /// assert_eq!(g.held(t), None); // as its type
    /// g.hold(t, Encoding::Scalar(Format::E5M2));
    /// assert_eq!(g.held(t), Some(Encoding::Scalar(Format::E5M2)));
    /// ```
    #[must_use]
    pub fn held(&self, t: TensorId) -> Option<Encoding> {
        self.tensors[t.index()].held
    }
}
