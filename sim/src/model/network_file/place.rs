//! Where in a network file a layer is ([`LayerStep`]s): found from an op
//! of the flattened network ([`locate`]) or from a byte of the text that
//! does not parse ([`outline_place`]).

use serde::Deserialize;
use toml::Spanned;

use super::error::LayerStep;
use super::spec::LayerSpec;
use crate::toml_place::LayerRef;

/// The place in `layers` (branch `branch` of a branches block, or not;
/// its first layer flattened op `first`) of flattened op `op`, numbered as
/// [`NetworkConfig::ops`] numbers them (a residual block's fork and join,
/// a branches block's split, steps between branches and concat
/// counting): the layer and, within residual bodies and branches, their
/// layers; and the byte of the text where the innermost of them starts.
/// A block's own ops are the block's.
pub(super) fn locate(
    layers: &[Spanned<LayerSpec>],
    branch: Option<usize>,
    op: usize,
    first: usize,
) -> Option<(Vec<LayerStep>, usize)> {
    let mut next = first;
    for (index, spanned) in layers.iter().enumerate() {
        let layer = spanned.get_ref();
        let end = next + flattened(layer);
        if op < end {
            let mut path = vec![LayerStep::new(branch, index, &layer.kind)];
            let mut at = spanned.span().start;
            // A body starts after the fork; a branch after the split or
            // the step from the branch before it.
            let mut start = next + 1;
            for (i, list) in layer.lists() {
                let stop = start + list.iter().map(|l| flattened(l.get_ref())).sum::<usize>();
                if (start..stop).contains(&op) {
                    let (inner, inner_at) = locate(list, i, op, start)?;
                    path.extend(inner);
                    at = inner_at;
                    break;
                }
                start = stop + 1;
            }
            return Some((path, at));
        }
        next = end;
    }
    None
}

impl LayerSpec {
    /// The lists of layers within this layer: a residual body (no
    /// branch), or each branch with its number.
    fn lists(&self) -> Vec<(Option<usize>, &[Spanned<Self>])> {
        lists(self.body.as_ref(), self.branches.as_ref())
    }
}

/// A residual `body` (no branch) and each of `branches` with its number.
fn lists<'a, T>(
    body: Option<&'a Vec<T>>,
    branches: Option<&'a Vec<Vec<T>>>,
) -> Vec<(Option<usize>, &'a [T])> {
    let body = body.map(|b| (None, b.as_slice()));
    let branches = branches.into_iter().flatten().enumerate();
    body.into_iter()
        .chain(branches.map(|(i, b)| (Some(i), b.as_slice())))
        .collect()
}

/// A file's layers as far as they nest, every other key and any kind's
/// type let be, so that a parse error within a body or a branch is placed
/// there ([`outline_place`]).
#[derive(Deserialize)]
struct Outline {
    #[serde(default, rename = "layer")]
    layers: Vec<Spanned<LayerOutline>>,
}

#[derive(Deserialize)]
struct LayerOutline {
    #[serde(default)]
    kind: Option<toml::Value>,
    #[serde(default)]
    body: Option<Vec<Spanned<LayerOutline>>>,
    #[serde(default)]
    branches: Option<Vec<Vec<Spanned<LayerOutline>>>>,
}

/// The place of byte `at` of `text`, in `[[layer]]` `top`: `top`, then
/// the layers of its bodies and branches that hold `at`, as far as `text`
/// outlines ([`Outline`]).
pub(super) fn outline_place(text: &str, top: LayerRef, at: usize) -> Vec<LayerStep> {
    fn within(
        candidates: Vec<(Option<usize>, &[Spanned<LayerOutline>])>,
        at: usize,
    ) -> Vec<LayerStep> {
        for (branch, list) in candidates {
            let mut layers = list.iter().enumerate();
            if let Some((index, layer)) = layers.find(|(_, l)| l.span().contains(&at)) {
                let layer = layer.get_ref();
                let name = layer.kind.as_ref().map(|kind| match kind {
                    toml::Value::String(kind) => kind.clone(),
                    kind => kind.to_string(),
                });
                let mut path = vec![LayerStep {
                    branch,
                    layer: LayerRef { index, name },
                }];
                path.extend(within(
                    lists(layer.body.as_ref(), layer.branches.as_ref()),
                    at,
                ));
                return path;
            }
        }
        Vec::new()
    }
    let outline = toml::from_str::<Outline>(text).ok();
    let layer = outline.as_ref().and_then(|o| o.layers.get(top.index));
    let mut path = vec![LayerStep {
        branch: None,
        layer: top,
    }];
    if let Some(layer) = layer.map(Spanned::get_ref) {
        path.extend(within(
            lists(layer.body.as_ref(), layer.branches.as_ref()),
            at,
        ));
    }
    path
}

/// How many flattened ops `layer` (built) makes: one, or a block's
/// layers and the ops around them (a residual's fork and join; a
/// branches block's split, a step between each two branches, concat).
fn flattened(layer: &LayerSpec) -> usize {
    if layer.body.is_none() && layer.branches.is_none() {
        return 1;
    }
    let lists = layer.lists();
    let within: usize = lists
        .iter()
        .flat_map(|(_, list)| list.iter())
        .map(|l| flattened(l.get_ref()))
        .sum();
    within + lists.len().saturating_sub(1) + 2
}

#[cfg(test)]
mod tests {
    use super::super::NetworkFile;
    use super::super::error::Within;
    use super::super::spec::Spec;
    use super::super::tests::docs_example;
    use super::*;
    use crate::model::network::Op;
    use crate::model::shapes::PoolKind;

    /// The place [`locate`] gives `op` in `text`, as [`Within`] shows it.
    fn located(text: &str, op: usize) -> Option<String> {
        let spec: Spec = toml::from_str(text).unwrap();
        locate(&spec.layers, None, op, 0).map(|(path, _)| Within(&path).to_string())
    }

    #[test]
    fn locate_numbers_as_ops_do() {
        let text = docs_example();
        // conv 0; residual fork 1, bn 2, conv 3, join 4; pool 5; branches
        // split 6, bn 7, conv 8, next 9, bn 10, conv 11, concat 12; bn 13;
        // gap 14.
        let expected = [
            "layer 0 (`conv`)",
            "layer 1 (`residual`)",
            "layer 1 (`residual`): body layer 0 (`bn_act`)",
            "layer 1 (`residual`): body layer 1 (`conv`)",
            "layer 1 (`residual`)",
            "layer 2 (`max_pool`)",
            "layer 3 (`branches`)",
            "layer 3 (`branches`): branch 0 layer 0 (`bn_act`)",
            "layer 3 (`branches`): branch 0 layer 1 (`conv`)",
            "layer 3 (`branches`)",
            "layer 3 (`branches`): branch 1 layer 0 (`bn_act`)",
            "layer 3 (`branches`): branch 1 layer 1 (`conv`)",
            "layer 3 (`branches`)",
            "layer 4 (`bn_act`)",
            "layer 5 (`global_avg_pool`)",
        ];
        let ops = NetworkFile::from_toml_str(&text, "docs")
            .unwrap()
            .network
            .ops(1)
            .unwrap();
        // The head comes after the layers.
        assert_eq!(ops.len(), expected.len() + 1);
        for (op, place) in expected.iter().enumerate() {
            assert_eq!(located(&text, op).as_deref(), Some(&*format!("{place}: ")));
        }
        // The ops of the built network are the kinds named, in order.
        for (op, place) in ops.iter().zip(expected) {
            let kind = match op {
                Op::Conv(_) => "(`conv`)",
                Op::BnAct { .. } => "(`bn_act`)",
                Op::Pool(p, _) if p.kind == PoolKind::Max => "(`max_pool`)",
                Op::Pool(..) => "(`global_avg_pool`)",
                Op::Fork | Op::Join => "(`residual`)",
                Op::Split | Op::NextBranch | Op::Concat { .. } => "(`branches`)",
                Op::Head { .. } | Op::Dense { .. } => {
                    unreachable!("the head is last; network files have no dense blocks")
                }
            };
            assert!(place.ends_with(kind), "{op:?} at {place}");
        }
        assert!(located(&text, expected.len()).is_none());
    }

    #[test]
    fn locate_finds_blocks_nested_in_each_other() {
        let text = "input = [1, 8, 8]\n[[layer]]\nkind = \"conv\"\nchannels = 4\nkernel = 1\n\
                    [[layer]]\nkind = \"branches\"\nbranches = [\n\
                    [{ kind = \"residual\", body = [{ kind = \"bn_act\" }] }],\n\
                    [],\n\
                    [{ kind = \"bn_act\" }, { kind = \"branches\", branches = [[], \
                    [{ kind = \"conv\", channels = 2, kernel = 1 }]] }],\n]\n\
                    [[layer]]\nkind = \"global_avg_pool\"\n";
        let network = NetworkFile::from_toml_str(text, "n").unwrap().network;
        // conv 0; split 1, fork 2, bn 3, join 4, next 5, next 6, bn 7,
        // split 8, next 9, conv 10, concat 11, concat 12; gap 13; head 14.
        assert_eq!(network.ops(1).unwrap().len(), 15);
        let outer = "layer 1 (`branches`): ";
        let inner = format!("{outer}branch 2 layer 1 (`branches`): ");
        for (op, place) in [
            (1, outer.to_owned()),
            (2, format!("{outer}branch 0 layer 0 (`residual`): ")),
            (
                3,
                format!("{outer}branch 0 layer 0 (`residual`): body layer 0 (`bn_act`): "),
            ),
            (4, format!("{outer}branch 0 layer 0 (`residual`): ")),
            (5, outer.to_owned()),
            (6, outer.to_owned()),
            (7, format!("{outer}branch 2 layer 0 (`bn_act`): ")),
            (8, inner.clone()),
            (9, inner.clone()),
            (10, format!("{inner}branch 1 layer 0 (`conv`): ")),
            (11, inner),
            (12, outer.to_owned()),
            (13, "layer 2 (`global_avg_pool`): ".to_owned()),
        ] {
            assert_eq!(located(text, op), Some(place), "op {op}");
        }
    }
}
