//! The settings that fix a run's trajectory, which a resumed run must
//! share with its checkpoint: everything that changes a bit of the
//! weights, and nothing else.
//!
//! | setting | why it is part of the trajectory |
//! |---|---|
//! | `data` (content digest), `test_fraction`, `seed` | the samples, their order, the initial weights, the random bits |
//! | `hidden`, `activation`, `batch_norm`, `network` | the model |
//! | `precision`, `loss_scaling` and its settings | the arithmetic, the skipped steps |
//! | `optimizer` and its hyperparameters (`lr`, `weight_decay`, ...), `exclude_bias_and_norm`, `max_grad_norm` | the update |
//! | `warmup_steps`, `lr_schedule`, `epochs` | the learning rate of each step (the cosine schedule spans all the run's steps) |
//! | `global_batch`, `micro_batch`, `reduction`, `batch_invariant` | the samples of a step and the order of their sums (the loss is averaged per micro-batch; exactly over the global batch with `batch_invariant`) |
//! | `split` | only where the split changes the sums (below) |
//!
//! Free, because the weights are bitwise the same whatever they are: the
//! Pod, IPUs per replica, pipelining, recomputation, device iterations,
//! replicated tensor sharding, offloading, the outfeed's mode, the replica
//! check interval, the infeed's depth, and every output and checkpoint
//! option. The split of the global batch over instances, replicas and
//! accumulation is free when the sums are one tree over the global
//! micro-batch index: the `Sum` or `PostMean` reduction, no batch norm, a
//! power of two of micro-batches per replica (unless one replica holds
//! them all) and per instance (unless there is one instance), because the
//! summation tree adds aligned power-of-two groups first. Otherwise the
//! split is recorded and must match.

use xxhash_rust::xxh3::Xxh3Default;

use crate::checkpoint::le_bytes;
use crate::data::Dataset;
use crate::model::BnGroup;
use crate::train::config::{GradReduction, LossScaling, OptimizerConfig, TrainConfig};
use crate::train::error::Difference;

/// The file format's name, compared like a setting.
const FORMAT: &str = "tessera-train-2";

/// The value of `split` for the splits that give the same bits.
const FREE_SPLIT: &str = "any with powers of two of micro-batches per replica and per instance";

/// Appends each field of a config struct as the setting `prefix` + field,
/// destructured without `..` so that a new field cannot be forgotten.
macro_rules! fields {
    ($out:expr, $prefix:literal, $value:expr, $ty:path { $($field:ident),* $(,)? }) => {{
        let $ty { $($field),* } = $value;
        $($out.push((concat!($prefix, stringify!($field)).to_owned(), format!("{:?}", $field)));)*
    }};
}

/// A setting and its value.
fn setting(key: &str, value: impl ToString) -> (String, String) {
    (key.to_owned(), value.to_string())
}

/// The settings of `config` on `data` that fix the trajectory, with their
/// values as the checkpoint's metadata stores them.
pub(super) fn settings(config: &TrainConfig, data: &Dataset) -> Vec<(String, String)> {
    let precision = config.precision;
    let mut s = vec![
        setting("format", FORMAT),
        setting("data", describe_data(data)),
        setting("test_fraction", config.test_fraction),
        setting("seed", config.seed),
        setting("hidden", format!("{:?}", config.hidden)),
        setting(
            "activation",
            format!("{:?}", config.activation).to_lowercase(),
        ),
        setting("batch_norm", config.batch_norm),
        setting("network", network(config)),
        // The name where it says everything (`16.16` hides the overflow).
        if precision.to_string().parse() == Ok(precision) {
            setting("precision", precision)
        } else {
            setting("precision", format!("{precision:?}"))
        },
        setting("loss_scaling", config.loss_scaling.describe()),
    ];
    loss_scaling_fields(&config.loss_scaling, &mut s);
    s.push(setting("optimizer", config.optimizer.name()));
    optimizer_fields(&config.optimizer, &mut s);
    s.extend([
        setting("exclude_bias_and_norm", config.exclude_bias_and_norm),
        setting("max_grad_norm", format!("{:?}", config.max_grad_norm)),
        setting("warmup_steps", config.warmup_steps),
        setting(
            "lr_schedule",
            format!("{:?}", config.lr_schedule).to_lowercase(),
        ),
        setting("epochs", config.epochs),
        setting("global_batch", config.batch_plan().global_batch()),
        setting("micro_batch", config.micro_batch),
        setting("reduction", format!("{:?}", config.reduction)),
        setting("batch_invariant", config.batch_invariant),
        setting("split", split(config)),
    ]);
    s
}

/// The optimizer's hyperparameters, `lr` among them.
fn optimizer_fields(optimizer: &OptimizerConfig, s: &mut Vec<(String, String)>) {
    use tessera_core::optim::{AdamWConfig, LambConfig, LarsConfig, SgdConfig};
    match *optimizer {
        OptimizerConfig::Sgd(c) => fields!(
            s,
            "",
            c,
            SgdConfig {
                lr,
                momentum,
                dampening,
                weight_decay,
                nesterov,
                maximize
            }
        ),
        OptimizerConfig::AdamW(c) => fields!(
            s,
            "",
            c,
            AdamWConfig {
                lr,
                betas,
                eps,
                weight_decay,
                amsgrad,
                maximize
            }
        ),
        OptimizerConfig::Lamb(c) => fields!(
            s,
            "",
            c,
            LambConfig {
                lr,
                betas,
                eps,
                weight_decay,
                bias_correction,
                grad_averaging,
                decoupled_decay,
                always_adapt,
                trust_clip,
                min_weight_norm,
                max_weight_norm
            }
        ),
        OptimizerConfig::Lars(c) => fields!(
            s,
            "",
            c,
            LarsConfig {
                lr,
                momentum,
                dampening,
                weight_decay,
                nesterov,
                trust_coeff,
                eps,
                trust_clip,
                always_adapt
            }
        ),
    }
}

/// The settings of dynamic and automatic loss scaling (a static scale is
/// in `loss_scaling` itself).
fn loss_scaling_fields(scaling: &LossScaling, s: &mut Vec<(String, String)>) {
    use tessera_core::scale::{AutomaticConfig, DynamicConfig};
    match *scaling {
        LossScaling::Off | LossScaling::Static(_) => {}
        LossScaling::Dynamic(c) => fields!(
            s,
            "loss_scaling.",
            c,
            DynamicConfig {
                init_scale,
                growth_factor,
                backoff_factor,
                growth_interval,
                min_scale,
                max_scale,
                hysteresis,
                hysteresis_reset
            }
        ),
        LossScaling::Automatic(c) => fields!(
            s,
            "loss_scaling.",
            c,
            AutomaticConfig {
                init_scale,
                bin_edge_location,
                threshold,
                update_period,
                window,
                min_scale,
                max_scale,
                skip_non_finite
            }
        ),
    }
}

/// The data set by size and content (not by name: a moved file is the
/// same data).
fn describe_data(data: &Dataset) -> String {
    let mut h = Xxh3Default::new();
    h.update(&le_bytes(data.inputs()));
    h.update(&le_bytes(data.labels()));
    format!(
        "{} samples x {} features, {} classes, xxh3 {:032x}",
        data.len(),
        data.features(),
        data.classes(),
        h.digest128()
    )
}

/// [`FREE_SPLIT`] when every split of the global batch gives the same
/// bits (see the module docs), else this split.
fn split(config: &TrainConfig) -> String {
    let (i, m, a) = (
        config.instances,
        config.replicas_per_instance(),
        config.gradient_accumulation,
    );
    // A group of micro-batches summed first is a subtree of the global
    // tree when it is an aligned power of two, or everything.
    let nests = |group: usize, everything: bool| group.is_power_of_two() || everything;
    let tree = matches!(
        config.reduction,
        GradReduction::Sum | GradReduction::PostMean
    );
    // Batch norm over more than one micro-batch's samples couples them.
    let coupled = config
        .network
        .as_ref()
        .map_or(config.batch_norm, |n| n.bn_group != BnGroup::Replica);
    if tree && !coupled && nests(a, i * m == 1) && nests(m * a, i == 1) {
        FREE_SPLIT.to_owned()
    } else {
        format!("{i} instances x {m} replicas x {a} micro-batches")
    }
}

/// Settings added after checkpoints of this format were first written,
/// with the value every earlier run had: a checkpoint without one resumes
/// as if it said so.
const ADDED_LATER: [(&str, &str); 4] = [
    ("amsgrad", "false"),
    ("maximize", "false"),
    ("network", "none"),
    ("batch_invariant", "false"),
];

/// The network's layers, input, activation and batch-norm group, or
/// `none` for the MLP.
fn network(config: &TrainConfig) -> String {
    config.network.as_ref().map_or_else(
        || "none".to_owned(),
        |n| {
            format!(
                "{:?} {:?} {:?} {:?}",
                n.input, n.layers, n.activation, n.bn_group
            )
        },
    )
}

/// The settings whose values in the checkpoint's metadata `saved` differ
/// from `now`'s, in `now`'s order.
pub(super) fn differences(
    saved: &std::collections::BTreeMap<String, String>,
    now: &[(String, String)],
) -> Vec<Difference> {
    let saved_value = |key: &str| {
        saved.get(key).map(String::as_str).or_else(|| {
            ADDED_LATER
                .iter()
                .find(|(added, _)| *added == key)
                .map(|(_, value)| *value)
        })
    };
    now.iter()
        .filter(|(key, value)| saved_value(key) != Some(value.as_str()))
        .map(|(key, value)| Difference {
            setting: key.clone(),
            checkpoint: saved_value(key).unwrap_or("none").to_owned(),
            now: value.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::differences;

    fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
        p.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn settings_added_later_take_the_value_earlier_runs_had() {
        let saved = pairs(&[("lr", "0.1")]).into_iter().collect();
        let now = pairs(&[("lr", "0.1"), ("maximize", "false"), ("amsgrad", "false")]);
        assert!(differences(&saved, &now).is_empty());
        let now = pairs(&[("lr", "0.1"), ("maximize", "true"), ("momentum", "0.9")]);
        let found: Vec<_> = differences(&saved, &now)
            .into_iter()
            .map(|d| (d.setting, d.checkpoint, d.now))
            .collect();
        let want = [("maximize", "false", "true"), ("momentum", "none", "0.9")];
        assert_eq!(
            found,
            want.map(|(a, b, c)| (a.to_owned(), b.to_owned(), c.to_owned()))
        );
    }
}
