//! The parameters laid end to end in one flat buffer, each starting at a
//! multiple of [`BLOCK`], the whole padded to a multiple of `shards *
//! BLOCK`: so the equal fragments of replicated tensor sharding start at
//! block boundaries of every parameter, where the optimizers' two-phase
//! statistics may be split.

use core::ops::Range;

use tessera_core::kernels::BLOCK;

use crate::model::{ParamKind, ParamSpec};

/// Where every parameter sits in the flat buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FlatParams {
    specs: Vec<ParamSpec>,
    ranges: Vec<Range<usize>>,
    len: usize,
}

impl FlatParams {
    /// The layout of `specs` for `shards` equal fragments.
    pub(crate) fn new(specs: Vec<ParamSpec>, shards: usize) -> Self {
        let mut ranges = Vec::with_capacity(specs.len());
        let mut at = 0;
        for spec in &specs {
            ranges.push(at..at + spec.len());
            at += spec.len().next_multiple_of(BLOCK);
        }
        let len = at.next_multiple_of(BLOCK * shards.max(1));
        Self { specs, ranges, len }
    }

    /// The parameters.
    pub(crate) fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// Elements of the padded buffer.
    pub(crate) const fn len(&self) -> usize {
        self.len
    }

    /// Elements of the parameters themselves.
    pub(crate) fn elements(&self) -> usize {
        self.specs.iter().map(ParamSpec::len).sum()
    }

    /// Parameter `i`'s range.
    pub(crate) fn range(&self, i: usize) -> Range<usize> {
        self.ranges[i].clone()
    }

    /// Whether parameter `i` is a bias or a normalisation parameter.
    pub(crate) fn is_bias_or_norm(&self, i: usize) -> bool {
        self.specs[i].kind != ParamKind::Weight
    }

    /// The pieces of the parameters that lie in `shard`: `(parameter,
    /// range in the flat buffer)`, in order.
    pub(crate) fn pieces(
        &self,
        shard: Range<usize>,
    ) -> impl Iterator<Item = (usize, Range<usize>)> {
        self.ranges.iter().enumerate().filter_map(move |(i, r)| {
            let piece = r.start.max(shard.start)..r.end.min(shard.end);
            (piece.start < piece.end).then_some((i, piece))
        })
    }

    /// Copies per-parameter vectors into a flat buffer (padding untouched).
    pub(crate) fn flatten<T: Copy>(&self, params: &[Vec<T>], flat: &mut [T]) {
        for (r, p) in self.ranges.iter().zip(params) {
            flat[r.clone()].copy_from_slice(p);
        }
    }

    /// The parameters of a flat buffer, each converted by `f`.
    pub(crate) fn unflatten<T: Copy, U>(&self, flat: &[T], f: impl Fn(T) -> U) -> Vec<Vec<U>> {
        self.ranges
            .iter()
            .map(|r| flat[r.clone()].iter().map(|&x| f(x)).collect())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, len: usize, kind: ParamKind) -> ParamSpec {
        ParamSpec {
            name: name.into(),
            shape: vec![len],
            kind,
        }
    }

    #[test]
    fn parameters_start_on_blocks_and_fragments_split_on_blocks() {
        let p = FlatParams::new(
            vec![
                spec("w", 1000, ParamKind::Weight),
                spec("b", 10, ParamKind::Bias),
            ],
            4,
        );
        assert_eq!(p.range(0), 0..1000);
        assert_eq!(p.range(1), 1024..1034);
        assert_eq!(p.len(), 2048);
        assert_eq!(p.elements(), 1010);
        let shard = 512..1024;
        assert_eq!(p.pieces(shard).collect::<Vec<_>>(), vec![(0, 512..1000)]);
        assert_eq!(
            p.pieces(1024..1536).collect::<Vec<_>>(),
            vec![(1, 1024..1034)]
        );
        assert!(p.is_bias_or_norm(1) && !p.is_bias_or_norm(0));
    }
}
