//! The grammars of a job's options that are not plain numbers: the
//! enumerations as named on the command line and in a config file.

use std::fmt::Display;
use std::path::PathBuf;
use std::str::FromStr;

use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use tessera_core::scale::{AutomaticConfig, DynamicConfig};
use tessera_sim::IpuSpec;
use tessera_sim::model::{Activation, BnGroup};
use tessera_sim::train::{LossScaling, TrainConfig};

use crate::cli::Failure;

/// The hidden layers' activation, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::cli) enum ActivationArg {
    /// max(x, 0)
    Relu,
    /// GELU (tanh approximation)
    Gelu,
}

impl From<ActivationArg> for Activation {
    fn from(a: ActivationArg) -> Self {
        match a {
            ActivationArg::Relu => Self::Relu,
            ActivationArg::Gelu => Self::Gelu,
        }
    }
}

impl From<Activation> for ActivationArg {
    fn from(a: Activation) -> Self {
        match a {
            Activation::Relu => Self::Relu,
            Activation::Gelu => Self::Gelu,
        }
    }
}

/// The model, as named on the command line (and in a config file: the
/// same text).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub(in crate::cli) enum ModelArg {
    /// The multi-layer perceptron of --hidden
    Mlp,
    /// A small pre-activation residual network with batch norm
    ResnetMini,
    /// A network file (`NetworkFile`)
    File(PathBuf),
}

impl FromStr for ModelArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mlp" => Ok(Self::Mlp),
            "resnet-mini" => Ok(Self::ResnetMini),
            _ if s.ends_with(".toml") => Ok(Self::File(PathBuf::from(s))),
            _ => Err(format!(
                "unknown model `{s}`: expected mlp, resnet-mini or a network FILE.toml"
            )),
        }
    }
}

impl TryFrom<String> for ModelArg {
    type Error = String;

    fn try_from(s: String) -> Result<Self, String> {
        s.parse()
    }
}

impl From<ModelArg> for String {
    fn from(m: ModelArg) -> Self {
        match m {
            ModelArg::Mlp => "mlp".into(),
            ModelArg::ResnetMini => "resnet-mini".into(),
            ModelArg::File(path) => path.display().to_string(),
        }
    }
}

/// Batch norm's replica group, as named on the command line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(in crate::cli) enum BnGroupArg {
    /// Each replica's micro-batch
    Replica,
    /// Every replica's micro-batch of the same accumulation step
    All,
}

impl From<BnGroupArg> for BnGroup {
    fn from(a: BnGroupArg) -> Self {
        match a {
            BnGroupArg::Replica => Self::Replica,
            BnGroupArg::All => Self::All,
        }
    }
}

impl From<BnGroup> for BnGroupArg {
    fn from(a: BnGroup) -> Self {
        match a {
            BnGroup::Replica => Self::Replica,
            BnGroup::All => Self::All,
        }
    }
}

/// `--loss-scaling`'s grammar: `off`, `static:SCALE`, `dynamic`,
/// `automatic`.
pub(super) struct LossScalingArg(pub(super) LossScaling);

impl FromStr for LossScalingArg {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("unknown loss scaling `{s}`: expected off, static:SCALE, dynamic or automatic")
        };
        Ok(Self(match s {
            "off" => LossScaling::Off,
            "dynamic" => LossScaling::Dynamic(default_dynamic()),
            "automatic" => LossScaling::Automatic(AutomaticConfig::default()),
            _ => {
                let scale = s.strip_prefix("static:").ok_or_else(bad)?;
                let scale: f32 = scale.parse().map_err(|_| bad())?;
                if !(scale.is_finite() && scale > 0.0) {
                    return Err(format!(
                        "static loss scale {scale} is not a finite positive number"
                    ));
                }
                LossScaling::Static(scale)
            }
        }))
    }
}

/// The default job's dynamic loss scaling (GradScaler's with a shorter
/// growth interval).
fn default_dynamic() -> DynamicConfig {
    match TrainConfig::default().loss_scaling {
        LossScaling::Dynamic(c) => c,
        _ => DynamicConfig::default(),
    }
}

/// A value parser that checks the text parses as a `T` and keeps the text.
pub(super) fn checked<T: FromStr>(s: &str) -> Result<String, String>
where
    T::Err: Display,
{
    s.parse::<T>()
        .map(|_| s.to_owned())
        .map_err(|e| e.to_string())
}

/// Parses option `name`'s text, naming the option on failure (flags are
/// checked by clap as they are parsed: this finds a config file's).
pub(super) fn parse<T: FromStr>(name: &str, s: &str) -> Result<T, Failure>
where
    T::Err: Display,
{
    s.parse::<T>()
        .map_err(|e| Failure::Usage(format!("{name}: {e}")))
}

/// The IPUs `--ipu` names, with their presets.
const IPUS: [(&str, IpuSpec); 3] = [
    ("mk2", IpuSpec::MK2_GC200),
    ("bow", IpuSpec::BOW),
    ("c600", IpuSpec::C600),
];

/// The preset `--ipu NAME` names.
pub(super) fn ipu_preset(name: &str) -> Result<IpuSpec, Failure> {
    IPUS.iter()
        .find(|(n, _)| *n == name)
        .map(|(_, s)| *s)
        .ok_or_else(|| {
            Failure::Usage(format!(
                "--ipu: unknown IPU `{name}`: expected mk2, bow or c600"
            ))
        })
}

/// The `--ipu` name of `spec`, if it is a preset.
pub(super) fn ipu_name(spec: &IpuSpec) -> Option<&'static str> {
    IPUS.iter().find(|(_, s)| s == spec).map(|(n, _)| *n)
}
