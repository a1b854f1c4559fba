//! A resolved job: its configuration, its data and where its network came
//! from; the options that read back to it, and its description.

use std::path::PathBuf;

use tessera_sim::data::{Dataset, Source};
use tessera_sim::train::{PrecisionMode, TrainConfig};

use super::args::JobArgs;
use super::values::ModelArg;
use crate::cli::Failure;
use crate::cli::output::plural;
use crate::cli::parse::Widths;

/// A job: the configuration and the data it trains on.
#[derive(Clone, Debug)]
pub(in crate::cli) struct Job {
    pub(in crate::cli) config: TrainConfig,
    pub(in crate::cli) source: Source,
    /// Where the network came from, if the model is one.
    pub(in crate::cli) network: Option<NetworkSource>,
}

/// `source` with its files' paths made absolute, as config.toml records
/// them: its "runs it again" line then works from any directory.
fn absolute(source: &Source) -> Source {
    let abs = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
    match source {
        Source::Csv(path) => Source::Csv(abs(path)),
        Source::Idx { images, labels } => Source::Idx {
            images: abs(images),
            labels: abs(labels),
        },
        Source::Npy { inputs, labels } => Source::Npy {
            inputs: abs(inputs),
            labels: abs(labels),
        },
        other => other.clone(),
    }
}

/// Where a job's network came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(in crate::cli) enum NetworkSource {
    /// resnet-mini of these stage widths and block counts, with a block
    /// of parallel branches of this many channels each if given.
    ResnetMini(Vec<usize>, Vec<usize>, Option<usize>),
    /// A network file, its path made absolute (as config.toml records it),
    /// and its head's classes if it gives them (checked against the data).
    File(PathBuf, Option<usize>),
}

impl Job {
    /// Every option of this job, written out: what `--config` reads back
    /// to the same job.
    pub(in crate::cli) fn effective(&self) -> JobArgs {
        let c = &self.config;
        let low = match c.precision {
            PrecisionMode::Low(l) => Some(l),
            _ => None,
        };
        JobArgs {
            data: Some(absolute(&self.source).to_string()),
            test_fraction: Some(c.test_fraction),
            model: Some(match &self.network {
                None => ModelArg::Mlp,
                Some(NetworkSource::ResnetMini(..)) => ModelArg::ResnetMini,
                Some(NetworkSource::File(path, _)) => ModelArg::File(path.clone()),
            }),
            widths: self.resnet().map(|r| r.0.clone()),
            blocks: self.resnet().map(|r| r.1.clone()),
            branches: self.resnet().and_then(|r| r.2),
            bn_group: c.network.as_ref().map(|n| n.bn_group.into()),
            // The MLP's options only for the MLP: a network refuses them.
            hidden: self.network.is_none().then(|| Widths(c.hidden.clone())),
            activation: self.network.is_none().then(|| c.activation.into()),
            batch_norm: self.network.is_none().then_some(c.batch_norm),
            pod: Some(c.pod.name().to_ascii_lowercase()),
            // Mk2, the default, unsaid (as before the option).
            ipu: super::values::ipu_name(c.pod.ipu())
                .filter(|n| *n != "mk2")
                .map(str::to_owned),
            instances: Some(c.instances),
            replication_factor: Some(c.replicas_per_instance()),
            ipus_per_replica: Some(c.ipus_per_replica),
            pipeline_stages: c.pipeline.as_ref().map(|_| c.ipus_per_replica),
            schedule: c.pipeline.as_ref().map(|p| p.schedule.to_string()),
            device_mapping: c.pipeline.as_ref().and_then(|p| p.device_mapping.clone()),
            serial_branches: Some(c.pipeline.as_ref().is_some_and(|p| p.serial_branches)),
            recompute: Some(c.recompute),
            recompute_checkpoints: (!c.recompute_checkpoints.is_empty())
                .then(|| c.recompute_checkpoints.clone()),
            micro_batch: Some(c.micro_batch),
            gradient_accumulation: Some(c.gradient_accumulation),
            device_iterations: Some(c.device_iterations),
            precision: Some(c.precision.to_string()),
            quant_weights: low.map(|l| l.recipe.weights.to_string()),
            quant_activations: low.map(|l| l.recipe.activations.to_string()),
            quant_gradients: low.map(|l| l.recipe.gradients.to_string()),
            quant_accumulate: low.map(|l| l.recipe.accumulator.to_string()),
            loss_scaling: Some(c.loss_scaling.describe()),
            reduction: Some(c.reduction.to_string()),
            optimizer: Some(c.optimizer.name().to_owned()),
            lr: Some(c.optimizer.lr()),
            weight_decay: Some(c.optimizer.weight_decay()),
            max_grad_norm: c.max_grad_norm,
            warmup_steps: Some(c.warmup_steps),
            lr_schedule: Some(c.lr_schedule.to_string()),
            epochs: Some(c.epochs),
            seed: Some(c.seed),
            replicated_tensor_sharding: Some(c.replicated_tensor_sharding),
            offload_optimizer_state: Some(c.offload_optimizer_state),
            batch_invariant: Some(c.batch_invariant),
            output_mode: Some(c.output_mode.to_string()),
            check_replicas_every: Some(c.check_replicas_every),
        }
    }

    /// resnet-mini's widths, blocks and branch channels, if it is the model.
    fn resnet(&self) -> Option<(&Vec<usize>, &Vec<usize>, Option<usize>)> {
        match &self.network {
            Some(NetworkSource::ResnetMini(w, b, c)) => Some((w, b, *c)),
            _ => None,
        }
    }

    /// Loads the data set, refusing one whose classes are not those a
    /// network file's head names.
    pub(in crate::cli) fn load(&self) -> Result<Dataset, Failure> {
        let data = self
            .source
            .load()
            .map_err(|e| Failure::Usage(format!("--data {}: {e}", self.source)))?;
        if let Some(NetworkSource::File(path, Some(classes))) = &self.network
            && *classes != data.classes()
        {
            return Err(Failure::Usage(format!(
                "--model {}: its head has {classes} classes (`classes`) but the data has {}; \
                 leave `classes` out to take the data's",
                path.display(),
                data.classes()
            )));
        }
        Ok(data)
    }

    /// The job's distribution and batch on one line.
    pub(in crate::cli) fn distribution(&self) -> String {
        let c = &self.config;
        format!(
            "{}: {} x {} replica{} x {} IPU{}; micro-batch {} x accumulation {} = global batch {}",
            c.pod.name(),
            plural(c.instances as u64, "instance"),
            c.replicas_per_instance(),
            if c.replicas_per_instance() == 1 {
                ""
            } else {
                "s"
            },
            c.ipus_per_replica,
            if c.ipus_per_replica == 1 { "" } else { "s" },
            c.micro_batch,
            c.gradient_accumulation,
            c.batch_plan().global_batch(),
        )
    }

    /// The job's model, numerics and length on one line.
    pub(in crate::cli) fn numerics(&self) -> String {
        let c = &self.config;
        let model = match &self.network {
            Some(NetworkSource::ResnetMini(w, b, branches)) => format!(
                "resnet-mini widths {w:?} blocks {b:?}{}",
                branches.map_or(String::new(), |c| format!(
                    " + branches 3x3|1x1 of {c} channels"
                ))
            ),
            Some(NetworkSource::File(path, _)) => format!("network {}", path.display()),
            None => format!(
                "hidden {:?} {:?}{}",
                c.hidden,
                c.activation,
                if c.batch_norm { " + batch norm" } else { "" }
            ),
        };
        format!(
            "{model}; {}{}, {} lr {}, {} loss scaling; {}, seed {}",
            c.precision,
            if c.batch_invariant {
                " batch-invariant"
            } else {
                ""
            },
            c.optimizer.name(),
            c.optimizer.lr(),
            c.loss_scaling.name(),
            plural(c.epochs, "epoch"),
            c.seed,
        )
    }
}
