//! Options into a job: flags over a config file over a base job, each
//! option parsed and set on the [`TrainConfig`].

use std::fmt::Display;
use std::path::Path;

use tessera_sim::data::Source;
use tessera_sim::model::quant::RoleQuant;
use tessera_sim::train::{
    LowPrecision, NamedOptimizer, OptimizerConfig, PrecisionMode, TrainConfig,
};

use super::args::JobArgs;
use super::resolved::Job;
use super::run::usage;
use super::values::{LossScalingArg, parse};
use crate::cli::Failure;
use crate::cli::output::one_line;

impl JobArgs {
    /// These options (the flags) over those of the TOML file at `path`,
    /// if any.
    pub(in crate::cli) fn over_file(self, path: Option<&Path>) -> Result<Self, Failure> {
        match path {
            Some(path) => {
                let file = read_config(path)?;
                // Name the file in errors of its values.
                if let Err(Failure::Usage(e)) = file.resolve_unchecked(&TrainConfig::default()) {
                    return Err(Failure::Usage(format!("{}: {e}", path.display())));
                }
                Ok(self.over(file))
            }
            None => Ok(self),
        }
    }

    /// These options, with `base`'s where these have none.
    pub(in crate::cli) fn over(self, base: Self) -> Self {
        // Every field is optional: the merge is field by field, listed
        // without `..` so a new option cannot be forgotten.
        macro_rules! merge {
            ($($field:ident),* $(,)?) => {
                Self { $($field: self.$field.or(base.$field)),* }
            };
        }
        merge!(
            data,
            test_fraction,
            model,
            widths,
            blocks,
            branches,
            bn_group,
            hidden,
            activation,
            batch_norm,
            pod,
            ipu,
            instances,
            replication_factor,
            ipus_per_replica,
            pipeline_stages,
            schedule,
            device_mapping,
            serial_branches,
            recompute,
            recompute_checkpoints,
            micro_batch,
            gradient_accumulation,
            device_iterations,
            precision,
            quant_weights,
            quant_activations,
            quant_gradients,
            quant_accumulate,
            loss_scaling,
            reduction,
            optimizer,
            lr,
            weight_decay,
            max_grad_norm,
            warmup_steps,
            lr_schedule,
            epochs,
            seed,
            replicated_tensor_sharding,
            offload_optimizer_state,
            batch_invariant,
            output_mode,
            check_replicas_every,
        )
    }

    /// The effective options as TOML, for `config.toml`, checked to read
    /// back to the same options.
    ///
    /// # Errors
    /// A usage error if they do not: found before the run, not after it.
    pub(in crate::cli) fn to_toml(&self) -> Result<String, Failure> {
        let refused = |e: &dyn Display| {
            Failure::Usage(format!(
                "the options cannot be written to config.toml and read back: {}",
                one_line(&e.to_string())
            ))
        };
        let text = toml::to_string(self).map_err(|e| refused(&e))?;
        toml::from_str::<Self>(&text).map_err(|e| refused(&e))?;
        Ok(text)
    }

    /// The job: defaults from `base` where an option is absent; every
    /// option parsed and its combinations checked that need no data.
    pub(in crate::cli) fn resolve(&self, base: &TrainConfig) -> Result<Job, Failure> {
        let job = self.resolve_unchecked(base)?;
        job.config.validate().map_err(|e| match usage(e) {
            Failure::Usage(m) => Failure::Usage(name_the_option(m)),
            f => f,
        })?;
        Ok(job)
    }

    /// [`JobArgs::resolve`] without checking the combinations (the
    /// distribution, say, which `scale` replaces).
    pub(in crate::cli) fn resolve_unchecked(&self, base: &TrainConfig) -> Result<Job, Failure> {
        let source = match &self.data {
            Some(s) => parse::<Source>("data", s)?,
            None => Source::Digits,
        };
        let (mut c, network) = self.model_over(base, &source)?;
        if let Some(s) = &self.pod {
            c.pod = parse("pod", s)?;
        }
        if let Some(s) = &self.ipu {
            c.pod = c.pod.with_ipu(super::values::ipu_preset(s)?);
        }
        let instances = self.instances.unwrap_or(base.instances);
        let per_instance = self
            .replication_factor
            .unwrap_or(base.replicas_per_instance());
        c.instances = instances;
        c.replicas = instances.checked_mul(per_instance).ok_or_else(|| {
            Failure::Usage(format!(
                "{instances} instances x {per_instance} replicas is too many replicas"
            ))
        })?;
        self.model_parallelism_over(&mut c)?;
        set(&mut c.recompute, self.recompute);
        if let Some(b) = &self.recompute_checkpoints {
            c.recompute_checkpoints.clone_from(b);
        }
        set(&mut c.micro_batch, self.micro_batch);
        set(&mut c.gradient_accumulation, self.gradient_accumulation);
        set(&mut c.device_iterations, self.device_iterations);
        if let Some(h) = &self.hidden {
            c.hidden.clone_from(&h.0);
        }
        if let Some(a) = self.activation {
            c.activation = a.into();
        }
        set(&mut c.batch_norm, self.batch_norm);
        if let Some(s) = &self.precision {
            c.precision = parse("precision", s)?;
        }
        self.recipe_over(&mut c)?;
        if let Some(s) = &self.loss_scaling {
            c.loss_scaling = parse::<LossScalingArg>("loss_scaling", s)?.0;
        }
        if let Some(s) = &self.reduction {
            c.reduction = parse("reduction", s)?;
        }
        // Another optimizer brings its own defaults; a given --lr wins.
        if let Some(name) = self.optimizer.as_deref()
            && name != base.optimizer.name()
        {
            c.optimizer = OptimizerConfig::default_named(name)
                .map_err(|e| Failure::Usage(format!("optimizer: {e}")))?;
        }
        if let Some(lr) = self.lr {
            c.optimizer = c.optimizer.with_lr(lr);
        }
        if let Some(wd) = self.weight_decay {
            c.optimizer = c.optimizer.with_weight_decay(wd);
        }
        if self.max_grad_norm.is_some() {
            c.max_grad_norm = self.max_grad_norm;
        }
        set(&mut c.warmup_steps, self.warmup_steps);
        if let Some(s) = &self.lr_schedule {
            c.lr_schedule = parse("lr_schedule", s)?;
        }
        set(&mut c.epochs, self.epochs);
        set(&mut c.seed, self.seed);
        set(&mut c.test_fraction, self.test_fraction);
        set(
            &mut c.replicated_tensor_sharding,
            self.replicated_tensor_sharding,
        );
        set(&mut c.offload_optimizer_state, self.offload_optimizer_state);
        set(&mut c.batch_invariant, self.batch_invariant);
        if let Some(s) = &self.output_mode {
            c.output_mode = parse("output_mode", s)?;
        }
        set(&mut c.check_replicas_every, self.check_replicas_every);
        super::network::check_bounds(&c, network.as_ref())?;
        Ok(Job {
            config: c,
            source,
            network,
        })
    }
}

impl JobArgs {
    /// The quantised products' roles over `c`'s recipe (a quantised
    /// precision only).
    fn recipe_over(&self, c: &mut TrainConfig) -> Result<(), Failure> {
        let roles = [
            ("quant_weights", &self.quant_weights),
            ("quant_activations", &self.quant_activations),
            ("quant_gradients", &self.quant_gradients),
            ("quant_accumulate", &self.quant_accumulate),
        ];
        let PrecisionMode::Low(low) = c.precision else {
            return match roles.iter().find(|(_, v)| v.is_some()) {
                Some((name, _)) => Err(Failure::Usage(format!(
                    "{name}: precision {} quantises no products: choose 8.16, 8.32, mxfp8.16, mxfp6.16 or mxfp4.16",
                    c.precision
                ))),
                None => Ok(()),
            };
        };
        let mut recipe = low.recipe;
        if let Some(s) = &self.quant_accumulate {
            recipe.accumulator = parse("quant_accumulate", s)?;
        }
        for (k, (name, value)) in roles.iter().take(3).enumerate() {
            if let Some(s) = value {
                let q: RoleQuant = parse(name, s)?;
                *[
                    &mut recipe.weights,
                    &mut recipe.activations,
                    &mut recipe.gradients,
                ][k] = q;
            }
        }
        c.precision = PrecisionMode::Low(LowPrecision { recipe, ..low });
        Ok(())
    }

    /// The model-parallelism options over `c`: IPUs per replica, the
    /// pipeline (stages, schedule, device mapping, serialised branches).
    fn model_parallelism_over(&self, c: &mut TrainConfig) -> Result<(), Failure> {
        if let (Some(stages), Some(ipus)) = (self.pipeline_stages, self.ipus_per_replica)
            && stages != ipus
        {
            return Err(Failure::Usage(format!(
                "--pipeline-stages {stages} and --ipus-per-replica {ipus} contradict each other: \
                 a pipeline's stages are its replica's IPUs (give one of them)"
            )));
        }
        set(&mut c.ipus_per_replica, self.ipus_per_replica);
        set(&mut c.ipus_per_replica, self.pipeline_stages);
        if self.pipeline_stages.is_some()
            || self.schedule.is_some()
            || self.device_mapping.is_some()
        {
            let mut p = c.pipeline.clone().unwrap_or_default();
            if let Some(s) = &self.schedule {
                p.schedule = parse("schedule", s)?;
            }
            if let Some(m) = &self.device_mapping {
                p.device_mapping = Some(m.clone());
            }
            c.pipeline = Some(p);
        }
        check_pipeline(self, c)?;
        match (&mut c.pipeline, self.serial_branches) {
            (Some(p), Some(serial)) => p.serial_branches = serial,
            (None, Some(true)) => {
                return Err(Failure::Usage(
                    "--serial-branches applies to a pipelined network's branches mapped to a \
                     list of IPUs (--pipeline-stages, --device-mapping 0,[1,2],3)"
                        .into(),
                ));
            }
            _ => {}
        }
        Ok(())
    }
}

/// A pipeline's options that contradict its stages: a schedule without
/// stages to schedule, a device mapping that leaves an IPU of the replica
/// without layers (`--pipeline-stages 2 --device-mapping 0,0,0`).
fn check_pipeline(args: &JobArgs, c: &TrainConfig) -> Result<(), Failure> {
    let Some(p) = &c.pipeline else {
        return Ok(());
    };
    let ipus = c.ipus_per_replica;
    if let Some(schedule) = &args.schedule
        && ipus < 2
    {
        return Err(Failure::Usage(format!(
            "--schedule {schedule} schedules a pipeline's stages, and there is one: give \
             --pipeline-stages P (2 or more)"
        )));
    }
    if let Some(m) = &p.device_mapping {
        let used: std::collections::BTreeSet<u32> =
            m.0.iter().flat_map(|e| e.ipus().iter().copied()).collect();
        let idle = (0..ipus).find(|&i| u32::try_from(i).is_ok_and(|i| !used.contains(&i)));
        if let Some(idle) = idle
            && used.iter().all(|&i| (i as usize) < ipus)
        {
            return Err(Failure::Usage(format!(
                "--device-mapping {m} puts no layer on IPU {idle} of the replica's {ipus} \
                 (--pipeline-stages, --ipus-per-replica): a stage without layers; map a layer \
                 to every IPU, or use fewer"
            )));
        }
    }
    Ok(())
}

/// `message` led by the flag of the option it is about, when it names
/// the option only by its field (`test_fraction 0 is not in (0, 1)`, as
/// the trainer's checks of a configuration do): `--test-fraction:
/// test_fraction 0 ...`; the last field named when there are several
/// (`optimizer: lr must be ...`). A message that names a flag is kept.
pub(in crate::cli) fn name_the_option(message: String) -> String {
    use clap::Args as _;
    if message.contains("--") {
        return message;
    }
    let command = JobArgs::augment_args(clap::Command::new("job"));
    let ids: Vec<(&str, &str)> = command
        .get_arguments()
        .filter_map(|a| Some((a.get_id().as_str(), a.get_long()?)))
        .collect();
    let named = message
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        // The last: `optimizer: lr must be ...` is about the lr.
        .rev()
        .find_map(|word| ids.iter().find(|(id, _)| *id == word));
    match named {
        Some((_, long)) => format!("--{long}: {message}"),
        None => message,
    }
}

/// `*field = value` if there is one.
fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

/// The most bytes a `--config` file may hold: far more than every option
/// takes, so an endless file (`/dev/zero`) is refused at once.
pub(crate) const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads job options from a TOML file of at most [`MAX_CONFIG_BYTES`]; an
/// unknown key is an error naming it.
fn read_config(path: &Path) -> Result<JobArgs, Failure> {
    use std::io::Read;
    let cannot = |e: std::io::Error| {
        Failure::Usage(format!("--config {}: cannot read: {e}", path.display()))
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_CONFIG_BYTES + 1).read_to_end(&mut bytes))
        .map_err(cannot)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(Failure::Usage(format!(
            "--config {}: larger than the {MAX_CONFIG_BYTES}-byte limit for a config file",
            path.display()
        )));
    }
    let text = String::from_utf8(bytes).map_err(|_| {
        cannot(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    toml::from_str(&text).map_err(|e| {
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].lines().count().max(1));
        let message = one_line(e.message());
        Failure::Usage(match line {
            Some(line) => format!("{}: line {line}: {message}", path.display()),
            None => format!("{}: {message}", path.display()),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::super::values::ActivationArg;
    use super::*;
    use crate::cli::parse::Widths;

    fn job(args: &JobArgs) -> Job {
        args.resolve(&TrainConfig::default()).unwrap()
    }

    #[test]
    fn no_options_is_the_default_job() {
        let j = job(&JobArgs::default());
        assert_eq!(j.config, TrainConfig::default());
        assert_eq!(j.source, Source::Digits);
    }

    #[test]
    fn the_effective_options_resolve_to_the_same_job_through_toml() {
        let args = JobArgs {
            data: Some("synthetic:300:8:3:1".into()),
            hidden: Some(Widths(vec![16])),
            activation: Some(ActivationArg::Gelu),
            precision: Some("16.32".into()),
            loss_scaling: Some("static:1024.5".into()),
            optimizer: Some("adamw".into()),
            lr: Some(0.003),
            weight_decay: Some(0.05),
            max_grad_norm: Some(1.5),
            reduction: Some("running-mean".into()),
            lr_schedule: Some("constant".into()),
            output_mode: Some("every:3".into()),
            pod: Some("m2000".into()),
            instances: Some(2),
            replication_factor: Some(2),
            test_fraction: Some(0.3),
            ..JobArgs::default()
        };
        for args in [JobArgs::default(), args] {
            let first = job(&args);
            let text = toml::to_string(&first.effective()).unwrap();
            let back: JobArgs = toml::from_str(&text).unwrap();
            let second = job(&back);
            assert_eq!(first.config, second.config, "{text}");
            assert_eq!(first.source, second.source, "{text}");
        }
    }

    #[test]
    fn the_defaults_in_the_help_are_the_default_job() {
        use clap::{CommandFactory, Parser};

        #[derive(Parser)]
        struct Wrapper {
            #[command(flatten)]
            job: JobArgs,
        }
        let table = toml::Table::try_from(job(&JobArgs::default()).effective()).unwrap();
        let mut checked = 0;
        for arg in Wrapper::command().get_arguments() {
            let id = arg.get_id().as_str();
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            let Some(default) = help
                .split_once("[default: ")
                .and_then(|(_, rest)| rest.split_once(']'))
                .map(|(d, _)| d.split(';').next().unwrap_or(d))
            else {
                continue;
            };
            if default.contains(' ') {
                continue; // a description, not a value
            }
            // Unsaid in the effective config at their default: the IPU (Mk2,
            // as before the option) and the accumulator (written only with a
            // quantised precision).
            if let Some((_, unsaid)) = [("ipu", "mk2"), ("quant_accumulate", "f32")]
                .into_iter()
                .find(|(key, _)| *key == id)
            {
                assert_eq!(default, unsaid, "--{id}");
                assert!(!table.contains_key(id), "--{id}: unsaid by default");
                checked += 1;
                continue;
            }
            if default == "none" {
                assert!(!table.contains_key(id), "--{id}: none by default");
                checked += 1;
                continue;
            }
            let value = match &table[id] {
                toml::Value::String(s) => s.clone(),
                toml::Value::Array(a) => a
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(","),
                // f32 options are f64 in a table: compare as f32.
                &toml::Value::Float(x) => {
                    let given: f64 = default.parse().unwrap();
                    assert_eq!(given as f32, x as f32, "--{id}");
                    default.to_owned()
                }
                other => other.to_string(),
            };
            assert_eq!(default, value, "--{id}");
            checked += 1;
        }
        assert!(checked >= 25, "{checked} defaults checked");
    }

    #[test]
    fn each_optimizer_has_the_defaults_its_help_states_and_lr_wins() {
        use clap::CommandFactory;

        #[derive(clap::Parser)]
        struct Wrapper {
            #[command(flatten)]
            job: JobArgs,
        }
        let command = Wrapper::command();
        let help = |id: &str| {
            let arg = command.get_arguments().find(|a| a.get_id() == id);
            one_line(&arg.and_then(|a| a.get_help()).unwrap().to_string())
        };
        let (lr_help, wd_help) = (help("lr"), help("weight_decay"));
        for name in ["sgd", "adamw", "lamb", "lars"] {
            let args = JobArgs {
                optimizer: Some(name.into()),
                ..JobArgs::default()
            };
            let o = job(&args).config.optimizer;
            assert_eq!(o, OptimizerConfig::default_named(name).unwrap());
            assert!(lr_help.contains(&format!("{name} {}", o.lr())), "{lr_help}");
            let wd = o.weight_decay();
            assert!(wd_help.contains(&format!("{name} {wd}")), "{wd_help}");
            let given = JobArgs {
                lr: Some(0.25),
                ..args
            };
            assert_eq!(job(&given).config.optimizer, o.with_lr(0.25));
        }
    }

    #[test]
    fn a_delayed_scaling_reads_from_toml_and_round_trips() {
        use tessera_sim::model::quant::Scaling;
        let text = "precision = \"8.16\"\nquant_gradients = \"f152:nearest:delayed16\"\n\
                    quant_weights = \"e4m3:stochastic:delayed\"\n";
        let args: JobArgs = toml::from_str(text).unwrap();
        let first = job(&args);
        let PrecisionMode::Low(low) = first.config.precision else {
            panic!("{:?}", first.config.precision);
        };
        assert_eq!(low.recipe.gradients.scaling, Scaling::Delayed(16));
        assert_eq!(low.recipe.weights.to_string(), "e4m3:stochastic:delayed16");
        let effective = toml::to_string(&first.effective()).unwrap();
        assert!(effective.contains("f152:nearest:delayed16"), "{effective}");
        let back: JobArgs = toml::from_str(&effective).unwrap();
        assert_eq!(job(&back).config, first.config);
    }

    #[test]
    fn flags_override_the_file_and_keep_what_they_do_not_set() {
        let file = JobArgs {
            epochs: Some(3),
            seed: Some(7),
            ..JobArgs::default()
        };
        let flags = JobArgs {
            epochs: Some(5),
            micro_batch: Some(4),
            ..JobArgs::default()
        };
        let merged = flags.over(file);
        assert_eq!(
            (merged.epochs, merged.seed, merged.micro_batch),
            (Some(5), Some(7), Some(4))
        );
    }

    #[test]
    fn bad_values_name_the_option() {
        for (args, needle) in [
            (
                JobArgs {
                    precision: Some("8.8".into()),
                    ..JobArgs::default()
                },
                "precision: unknown precision",
            ),
            (
                JobArgs {
                    loss_scaling: Some("static:-1".into()),
                    ..JobArgs::default()
                },
                "loss_scaling: static loss scale -1",
            ),
            (
                JobArgs {
                    replication_factor: Some(8),
                    ..JobArgs::default()
                },
                "the Pod has 16",
            ),
        ] {
            match args.resolve(&TrainConfig::default()) {
                Err(Failure::Usage(m)) => assert!(m.contains(needle), "{m}"),
                other => panic!("{other:?}"),
            }
        }
    }
}
