//! A network file as written ([`Spec`], [`LayerSpec`]) and its layers
//! built from it, each key checked against its layer's kind.

use serde::Deserialize;
use toml::Spanned;

use super::NetworkFile;
use super::error::{LayerStep, NetworkFileError};
use crate::model::network::NetLayer;
use crate::model::shapes::{Pool2d, PoolKind};
use crate::toml_place::line_of;

/// The file's top level.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Spec {
    #[serde(default)]
    pub(super) name: Option<String>,
    pub(super) input: [usize; 3],
    #[serde(default)]
    pub(super) classes: Option<usize>,
    #[serde(default)]
    pub(super) activation: ActivationName,
    #[serde(default)]
    pub(super) bn_group: BnGroupName,
    #[serde(rename = "layer")]
    pub(super) layers: Vec<Spanned<LayerSpec>>,
}

#[derive(Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum ActivationName {
    #[default]
    Relu,
    Gelu,
}

#[derive(Clone, Copy, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum BnGroupName {
    #[default]
    Replica,
    All,
}

/// One layer as written: every key any kind has, checked against its
/// kind by [`LayerSpec::build`] (a flat table, not a tagged enum, so
/// that the parser's errors point at the key).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LayerSpec {
    pub(super) kind: String,
    #[serde(default)]
    pub(super) channels: Option<usize>,
    #[serde(default)]
    pub(super) kernel: Option<usize>,
    #[serde(default)]
    pub(super) stride: Option<usize>,
    #[serde(default)]
    pub(super) padding: Option<usize>,
    #[serde(default)]
    pub(super) body: Option<Vec<Spanned<LayerSpec>>>,
    #[serde(default)]
    pub(super) branches: Option<Vec<Vec<Spanned<LayerSpec>>>>,
}

/// The kinds and the keys each takes (`kind` aside).
const KINDS: [(&str, &[&str]); 7] = [
    ("conv", &["channels", "kernel", "stride", "padding"]),
    ("bn_act", &[]),
    ("max_pool", &["kernel", "stride", "padding"]),
    ("avg_pool", &["kernel", "stride", "padding"]),
    ("global_avg_pool", &[]),
    ("residual", &["body"]),
    ("branches", &["branches"]),
];

/// Where a layer is: the file, the layer's first byte in the text and
/// its place (the byte made a line only for an error: counting lines for
/// every layer would take time quadratic in the layers).
pub(super) struct At<'a> {
    pub(super) origin: &'a str,
    pub(super) text: &'a str,
    pub(super) at: Option<usize>,
    pub(super) layer: Vec<LayerStep>,
}

impl At<'_> {
    pub(super) fn field(&self, field: &'static str, problem: String) -> NetworkFileError {
        NetworkFileError::Field {
            origin: self.origin.to_owned(),
            line: self.at.map(|at| line_of(self.text, at)),
            layer: self.layer.clone(),
            field,
            problem,
        }
    }

    /// `value` if it is from 1 to [`NetworkFile::MAX_SIZE`] (0 too for a
    /// padding).
    pub(super) fn size(
        &self,
        field: &'static str,
        value: usize,
    ) -> Result<usize, NetworkFileError> {
        let least = usize::from(field != "padding");
        if (least..=NetworkFile::MAX_SIZE).contains(&value) {
            Ok(value)
        } else {
            Err(self.field(
                field,
                format!("is {value}: expected {least} to {}", NetworkFile::MAX_SIZE),
            ))
        }
    }
}

impl LayerSpec {
    /// The keys given (`kind` aside), with their names.
    fn given(&self) -> [(&'static str, bool); 6] {
        [
            ("channels", self.channels.is_some()),
            ("kernel", self.kernel.is_some()),
            ("stride", self.stride.is_some()),
            ("padding", self.padding.is_some()),
            ("body", self.body.is_some()),
            ("branches", self.branches.is_some()),
        ]
    }

    /// The layer, its keys checked against its kind and its sizes against
    /// [`NetworkFile::MAX_SIZE`].
    pub(super) fn build(&self, at: &At<'_>, text: &str) -> Result<NetLayer, NetworkFileError> {
        let kinds = || KINDS.map(|(k, _)| k).join(", ");
        let Some((kind, keys)) = KINDS.iter().find(|(k, _)| *k == self.kind) else {
            return Err(at.field(
                "kind",
                format!("is `{}`: expected one of {}", self.kind, kinds()),
            ));
        };
        if let Some((key, _)) = self.given().iter().find(|(k, g)| *g && !keys.contains(k)) {
            let takes = if keys.is_empty() {
                "none".to_owned()
            } else {
                keys.join(", ")
            };
            return Err(at.field(key, format!("is not a key of `{kind}` (it takes {takes})")));
        }
        let missing = |field| at.field(field, format!("is missing (`{kind}` needs it)"));
        let required = |field: &'static str, value: Option<usize>| {
            at.size(field, value.ok_or_else(|| missing(field))?)
        };
        let padding = at.size("padding", self.padding.unwrap_or(0))?;
        Ok(match *kind {
            "conv" => NetLayer::Conv {
                channels: required("channels", self.channels)?,
                kernel: required("kernel", self.kernel)?,
                stride: at.size("stride", self.stride.unwrap_or(1))?,
                padding,
            },
            "max_pool" | "avg_pool" => {
                let kernel = required("kernel", self.kernel)?;
                NetLayer::Pool(Pool2d {
                    kind: if *kind == "max_pool" {
                        PoolKind::Max
                    } else {
                        PoolKind::Avg
                    },
                    kernel: (kernel, kernel),
                    stride: at.size("stride", self.stride.unwrap_or(kernel))?,
                    padding,
                })
            }
            "bn_act" => NetLayer::BnAct,
            "global_avg_pool" => NetLayer::GlobalAvgPool,
            "residual" => {
                let body = self.body.as_deref().ok_or_else(|| missing("body"))?;
                NetLayer::Residual(build_all(body, at, None, text)?)
            }
            _ => {
                let branches = self
                    .branches
                    .as_deref()
                    .ok_or_else(|| missing("branches"))?;
                let built = branches.iter().enumerate();
                NetLayer::Branches(
                    built
                        .map(|(i, branch)| build_all(branch, at, Some(i), text))
                        .collect::<Result<_, _>>()?,
                )
            }
        })
    }
}

/// `layers` built; `within` the place of the residual or branches block
/// they are the body or branch `branch` of (the top level: no layer).
pub(super) fn build_all(
    layers: &[Spanned<LayerSpec>],
    within: &At<'_>,
    branch: Option<usize>,
    text: &str,
) -> Result<Vec<NetLayer>, NetworkFileError> {
    layers
        .iter()
        .enumerate()
        .map(|(index, l)| {
            let mut layer = within.layer.clone();
            layer.push(LayerStep::new(branch, index, &l.get_ref().kind));
            let at = At {
                origin: within.origin,
                text,
                at: Some(l.span().start),
                layer,
            };
            l.get_ref().build(&at, text)
        })
        .collect()
}
