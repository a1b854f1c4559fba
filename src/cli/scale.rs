//! `tessera scale [--replicas 1,2,4,8,16] [OPTIONS]`: one global batch
//! trained on each replica count (the rest made up by gradient
//! accumulation), with the simulated throughput and whether every loss
//! curve is bitwise the first one's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde::Serialize;
use tessera_sim::pod::{POD64_IPUS, PodSpec};
use tessera_sim::train::{Event, RunOptions, Summary, TrainConfig, Trainer};

use super::Failure;
use super::job::{self, JobArgs, OutputArgs, Progress};
use super::output;
use super::parse;
use super::plot::{Series, line_chart};

/// The run directory's name when `--name` is not given.
const DEFAULT_NAME: &str = "scale";

/// The files a scale run writes: the rows, the loss curves, the
/// throughput against replicas.
const FILES: [&str; 3] = ["scale.jsonl", "scale.svg", "scaling.svg"];

/// Epochs when `--epochs` is not given: enough to see the curves, quick.
const DEFAULT_EPOCHS: u64 = 5;

/// Instances at most, when `--instances` is not given.
const DEFAULT_INSTANCES: usize = 4;

/// Arguments of `tessera scale`.
#[derive(Clone, Debug, Args)]
pub(super) struct ScaleArgs {
    /// The replica counts to run, comma separated
    #[arg(
        long,
        value_name = "N,N",
        value_delimiter = ',',
        value_parser = parse::whole::<usize, 1>,
        default_values_t = [1, 2, 4, 8, 16]
    )]
    replicas: Vec<usize>,

    /// Samples per optimizer step, on every replica count [default:
    /// micro-batch x the largest replica count: 8 x 16 = 128]
    #[arg(
        long,
        alias = "global_batch",
        value_name = "N",
        value_parser = parse::whole::<usize, 1>
    )]
    global_batch: Option<usize>,

    /// Replace the run already in the run directory (its files are deleted
    /// first)
    #[arg(long)]
    overwrite: bool,

    #[command(flatten)]
    job: JobArgs,

    #[command(flatten)]
    output: OutputArgs,
}

/// One replica count's run, as printed and written to scale.jsonl.
#[derive(Clone, Debug, Serialize)]
struct Row {
    replicas: usize,
    instances: usize,
    replicas_per_instance: usize,
    gradient_accumulation: usize,
    pod: String,
    steps: usize,
    final_loss: Option<f32>,
    test_accuracy: f32,
    test_loss: f32,
    fingerprint: String,
    simulated_samples_per_second: f64,
    wall_samples_per_second: f64,
    /// Simulated throughput per replica over the first run's.
    scaling_efficiency: f64,
    /// Whether every step's loss and the final weights are bitwise the
    /// first run's.
    identical: bool,
    /// How the run differs from the first, if it does.
    difference: Option<String>,
}

impl ScaleArgs {
    pub(super) fn run(self) -> Result<(), Failure> {
        self.check()?;
        let job = self.base_job()?;
        let micro_batch = job.config.micro_batch;
        let global_batch = self.global_batch(micro_batch)?;
        // Every replica count's configuration checked before the data.
        let configs = self
            .replicas
            .iter()
            .map(|&r| self.config(&job, global_batch, r))
            .collect::<Result<Vec<_>, _>>()?;
        let data = job.load()?;
        let trainers = configs
            .into_iter()
            .map(|config| {
                let r = config.replicas;
                Trainer::new(config, data.clone())
                    .map_err(|e| Failure::Usage(format!("{r} replicas: {}", job::usage(e))))
            })
            .collect::<Result<Vec<_>, _>>()?;
        // Claimed until the run ends.
        let run_dir = self.output.new_run_dir(DEFAULT_NAME, self.overwrite, "")?;
        let dir = &run_dir.path;
        let Some(summaries) = self.train_all(&trainers)? else {
            return Ok(());
        };
        let rows = rows(&trainers, &summaries);
        let jsonl: String = rows
            .iter()
            .map(|r| serde_json::to_string(r).expect("rows serialize") + "\n")
            .collect();
        let files = write_files(dir, global_batch, (&rows, &summaries), &jsonl)?;
        let report = if self.output.json {
            jsonl
        } else {
            let head = format!(
                "data {}; global batch {global_batch} = micro-batch {micro_batch} x accumulation x replicas; {}",
                job.source,
                job.numerics()
            );
            table(&head, &rows, &files)
        };
        output::print(&report)?;
        finite(&rows)?;
        differences(&rows)
    }

    /// The options scale sets itself, and the replica counts.
    fn check(&self) -> Result<(), Failure> {
        self.output.run_dir_path(DEFAULT_NAME)?;
        for (flag, given) in [
            ("--replication-factor", self.job.replication_factor),
            ("--gradient-accumulation", self.job.gradient_accumulation),
        ] {
            if given.is_some() {
                return Err(Failure::Usage(format!(
                    "{flag} is set by scale from --replicas and --global-batch"
                )));
            }
        }
        if self.replicas.is_empty() || self.replicas.contains(&0) {
            return Err(Failure::Usage(
                "--replicas must list replica counts of at least 1".into(),
            ));
        }
        Ok(())
    }

    /// The job every replica count shares: the flags over the config
    /// file, whose distribution (a train run's config.toml, say) is
    /// ignored since it comes from --replicas.
    fn base_job(&self) -> Result<job::Job, Failure> {
        let mut file = JobArgs::default().over_file(self.output.config.as_deref())?;
        file.pod = None;
        file.instances = None;
        file.replication_factor = None;
        file.gradient_accumulation = None;
        let args = self.job.clone().over(file);
        let mut job = args.resolve_unchecked(&TrainConfig::default())?;
        if args.epochs.is_none() {
            job.config.epochs = DEFAULT_EPOCHS;
        }
        Ok(job)
    }

    /// `--global-batch`, or the micro-batch times the largest replica
    /// count.
    fn global_batch(&self, micro_batch: usize) -> Result<usize, Failure> {
        let largest = self.replicas.iter().copied().max().unwrap_or(1);
        match self.global_batch {
            Some(b) => Ok(b),
            None => micro_batch.checked_mul(largest).ok_or_else(|| {
                Failure::Usage(format!(
                    "micro-batch {micro_batch} x {largest} replicas is too large"
                ))
            }),
        }
    }

    /// The configuration of `r` replicas, checked: accumulation makes up
    /// the global batch, on at most [`DEFAULT_INSTANCES`] instances and
    /// the smallest Pod that holds them (unless given).
    fn config(
        &self,
        job: &job::Job,
        global_batch: usize,
        r: usize,
    ) -> Result<TrainConfig, Failure> {
        let micro_batch = job.config.micro_batch;
        let per_replica = micro_batch.checked_mul(r).filter(|&n| n > 0);
        let accumulation = match per_replica {
            Some(n) if global_batch.is_multiple_of(n) => global_batch / n,
            _ => {
                return Err(Failure::Usage(format!(
                    "global batch {global_batch} is not a multiple of micro-batch \
                     {micro_batch} x {r} replicas"
                )));
            }
        };
        let instances = self
            .job
            .instances
            .unwrap_or(DEFAULT_INSTANCES)
            .min(r)
            .max(1);
        let pod = match &self.job.pod {
            Some(p) => p
                .parse()
                .map_err(|e| Failure::Usage(format!("--pod: {e}")))?,
            None => smallest_pod(r.saturating_mul(job.config.ipus_per_replica))?,
        };
        let config = TrainConfig {
            pod,
            instances,
            replicas: r,
            gradient_accumulation: accumulation,
            ..job.config.clone()
        };
        config.validate().map_err(|e| match job::usage(e) {
            Failure::Usage(m) => {
                Failure::Usage(format!("{r} replicas: {}", job::name_the_option(m)))
            }
            f => f,
        })?;
        Ok(config)
    }

    /// Every trainer's run in turn; `None` if the user closed the output.
    fn train_all(&self, trainers: &[Trainer]) -> Result<Option<Vec<Summary>>, Failure> {
        let mut summaries = Vec::with_capacity(trainers.len());
        for trainer in trainers {
            let r = trainer.config().replicas;
            let label = format!("{r:>2} replica{}", if r == 1 { " " } else { "s" });
            let progress = Progress::new(self.output.progress(), trainer, &label);
            let result = job::run_job(trainer, &RunOptions::default(), &|e: Event<'_>| {
                progress.observe(e);
            });
            progress.finish();
            match result {
                Ok(Some(s)) => summaries.push(s),
                Ok(None) => return Ok(None),
                Err(e) => return Err(prefixed(&format!("{r} replicas"), job::usage(e))),
            }
        }
        Ok(Some(summaries))
    }
}

/// `failure` with its message prefixed by `what: `.
fn prefixed(what: &str, failure: Failure) -> Failure {
    match failure {
        Failure::Usage(m) => Failure::Usage(format!("{what}: {m}")),
        Failure::Job(m) => Failure::Job(format!("{what}: {m}")),
        Failure::Diverged(m) => Failure::Diverged(format!("{what}: {m}")),
        Failure::Interrupted(m) => Failure::Interrupted(format!("{what}: {m}")),
        Failure::Closed => Failure::Closed,
    }
}

/// Writes scale.jsonl, the loss curves (scale.svg) and the throughput
/// against replicas (scaling.svg) into `dir`: their paths.
fn write_files(
    dir: &Path,
    global_batch: usize,
    (rows, summaries): (&[Row], &[Summary]),
    jsonl: &str,
) -> Result<[PathBuf; 3], Failure> {
    let files = FILES.map(|name| dir.join(name));
    output::write_file(&files[0], jsonl.as_bytes())?;
    let curves: Vec<Series> = rows
        .iter()
        .zip(summaries)
        .map(|(row, s)| Series {
            name: format!("{} replicas", row.replicas),
            points: s
                .steps
                .iter()
                .map(|r| (r.step as f64, f64::from(r.loss)))
                .collect(),
        })
        .collect();
    line_chart(
        &files[1],
        &format!("Training loss, global batch {global_batch}"),
        "step",
        "loss",
        &curves,
        true,
    )
    .map_err(Failure::Job)?;
    let first = &rows[0];
    let per_replica = first.simulated_samples_per_second / first.replicas as f64;
    let series = |name: &str, y: &dyn Fn(&Row) -> f64| Series {
        name: name.into(),
        points: rows.iter().map(|r| (r.replicas as f64, y(r))).collect(),
    };
    let throughput = [
        series("simulated", &|r| r.simulated_samples_per_second),
        series("linear", &|r| per_replica * r.replicas as f64),
    ];
    line_chart(
        &files[2],
        &format!("Simulated throughput, global batch {global_batch}"),
        "replicas",
        "samples/s",
        &throughput,
        false,
    )
    .map_err(Failure::Job)?;
    Ok(files)
}

/// The runs that differ from the first, as the job's failure.
fn differences(rows: &[Row]) -> Result<(), Failure> {
    let differing: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            r.difference
                .as_ref()
                .map(|d| format!("{}: {d}", output::plural(r.replicas as u64, "replica")))
        })
        .collect();
    if differing.is_empty() {
        return Ok(());
    }
    Err(Failure::Job(format!(
        "the runs differ from the first ({}): {}",
        output::plural(rows[0].replicas as u64, "replica"),
        differing.join("; ")
    )))
}

/// A diverged failure (status 3, as `train`'s) when a run ended with a
/// loss that is not finite: its result is no result.
fn finite(rows: &[Row]) -> Result<(), Failure> {
    let diverged: Vec<String> = rows
        .iter()
        .filter_map(|r| {
            let loss = r.final_loss?;
            (!loss.is_finite())
                .then(|| format!("{}: {loss}", output::plural(r.replicas as u64, "replica")))
        })
        .collect();
    if diverged.is_empty() {
        return Ok(());
    }
    Err(Failure::Diverged(format!(
        "the runs ended with a loss that is not finite ({}); try a smaller learning rate or \
         gradient clipping",
        diverged.join("; ")
    )))
}

/// The smallest Pod with `ipus` IPUs: an IPU-M2000, a POD16, a POD64, or
/// enough POD64s.
fn smallest_pod(ipus: usize) -> Result<PodSpec, Failure> {
    Ok(match ipus {
        0..=4 => PodSpec::m2000(),
        5..=16 => PodSpec::pod16(),
        17..=POD64_IPUS => PodSpec::pod64(),
        _ => PodSpec::pods(ipus.div_ceil(POD64_IPUS))
            .map_err(|e| Failure::Usage(format!("{ipus} IPUs: {e}")))?,
    })
}

/// The table's rows, each compared with the first run.
fn rows(trainers: &[Trainer], summaries: &[Summary]) -> Vec<Row> {
    let first = &summaries[0];
    let first_replicas = trainers[0].config().replicas as f64;
    let base = first.simulated_samples_per_second() / first_replicas;
    trainers
        .iter()
        .zip(summaries)
        .map(|(t, s)| {
            let c = t.config();
            let difference = difference(first, s);
            Row {
                replicas: c.replicas,
                instances: c.instances,
                replicas_per_instance: c.replicas_per_instance(),
                gradient_accumulation: c.gradient_accumulation,
                pod: c.pod.name().to_owned(),
                steps: s.steps.len(),
                final_loss: s.steps.last().map(|r| r.loss),
                test_accuracy: s.test.test_accuracy,
                test_loss: s.test.test_loss,
                fingerprint: format!("{:016x}", s.fingerprint),
                simulated_samples_per_second: s.simulated_samples_per_second(),
                wall_samples_per_second: s.wall_samples_per_second(),
                scaling_efficiency: s.simulated_samples_per_second() / c.replicas as f64 / base,
                identical: difference.is_none(),
                difference,
            }
        })
        .collect()
}

/// How run `s`'s loss curve or final weights differ from `first`'s.
fn difference(first: &Summary, s: &Summary) -> Option<String> {
    if first.steps.len() != s.steps.len() {
        return Some(format!(
            "{} steps, not {}",
            s.steps.len(),
            first.steps.len()
        ));
    }
    if let Some((a, b)) = first
        .steps
        .iter()
        .zip(&s.steps)
        .find(|(a, b)| a.loss.to_bits() != b.loss.to_bits())
    {
        return Some(format!(
            "the loss differs first at step {}: {}, not {}",
            b.step, b.loss, a.loss
        ));
    }
    (first.fingerprint != s.fingerprint).then(|| {
        format!(
            "the final weights differ: fingerprint {:016x}, not {:016x}",
            s.fingerprint, first.fingerprint
        )
    })
}

/// The table as text.
fn table(head: &str, rows: &[Row], files: &[PathBuf]) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "{head}");
    let _ = writeln!(
        o,
        "{:>8} {:>9} {:>12} {:<9} {:>10} {:>9} {:<16} {:>15} {:>10}  curve",
        "replicas",
        "instances",
        "accumulation",
        "pod",
        "final loss",
        "test acc",
        "fingerprint",
        "sim samples/s",
        "efficiency"
    );
    for (i, r) in rows.iter().enumerate() {
        let curve = match (&r.difference, i) {
            (_, 0) => "reference",
            (None, _) => "identical",
            (Some(_), _) => "DIFFERS",
        };
        let _ = writeln!(
            o,
            "{:>8} {:>9} {:>12} {:<9} {:>10} {:>8.2}% {:<16} {:>15.0} {:>9.1}%  {curve}",
            r.replicas,
            r.instances,
            r.gradient_accumulation,
            r.pod,
            r.final_loss
                .map_or_else(|| "-".into(), |l| format!("{l:.4}")),
            100.0 * r.test_accuracy,
            r.fingerprint,
            r.simulated_samples_per_second,
            100.0 * r.scaling_efficiency,
        );
    }
    for (i, path) in files.iter().enumerate() {
        let head = if i == 0 { "wrote" } else { "" };
        let _ = writeln!(o, "{head:<5} {}", path.display());
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_run_s_files_are_run_files() {
        for name in FILES {
            assert!(job::RUN_FILES.contains(&name), "{name}");
        }
    }
}
