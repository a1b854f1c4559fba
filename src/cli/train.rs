//! `tessera train [OPTIONS]`: one data-parallel training run on the
//! simulated Pod, its report, and its run directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Args;
use serde_json::{Value, json};
use tessera_sim::data::Dataset;
use tessera_sim::ipu::Kernel;
use tessera_sim::model::Placement;
use tessera_sim::plan::ipu_name;
use tessera_sim::train::{
    Divergence, Event, Interrupt, MemoryReport, RunOptions, Summary, TrainConfig, TrainError,
    Trainer,
};

use super::history::{History, Metrics};
use super::job::{self, Job, JobArgs, OutputArgs, Progress, RunDir};
use super::output;
use super::parse;
use super::{Failure, launcher};

/// The run directory's name when `--name` is not given.
const DEFAULT_NAME: &str = "default";

/// Arguments of `tessera train`.
#[derive(Clone, Debug, Default, Args)]
pub(super) struct TrainArgs {
    #[command(flatten)]
    job: JobArgs,

    #[command(flatten)]
    output: OutputArgs,

    /// Resume from this checkpoint (a run's checkpoint.safetensors): every
    /// option that changes the result must be the same
    #[arg(long, value_name = "PATH")]
    resume: Option<PathBuf>,

    /// Also write the checkpoint after every N epochs (0: at the end only)
    #[arg(
        long,
        alias = "checkpoint_every",
        value_name = "N",
        value_parser = parse::whole::<u64, 0>,
        default_value_t = 0
    )]
    checkpoint_every: u64,

    /// Stop after N epochs with a checkpoint, as if interrupted (the
    /// learning-rate schedule stays the whole run's): `--resume` then
    /// finishes bitwise as the uninterrupted run
    #[arg(
        long,
        alias = "stop_after_epochs",
        value_name = "N",
        value_parser = parse::whole::<u64, 0>
    )]
    stop_after_epochs: Option<u64>,

    /// Stop the run as diverged (exit status 3) after N consecutive steps
    /// that loss scaling skipped or whose loss was not finite (0: never)
    #[arg(
        long,
        alias = "diverged_after",
        value_name = "N",
        value_parser = parse::whole::<u64, 0>,
        default_value_t = Divergence::DEFAULT_STEPS
    )]
    diverged_after: u64,

    /// Replace the run already in the run directory (its files are deleted
    /// first)
    #[arg(long)]
    overwrite: bool,
}

/// The files of a run directory.
struct Files {
    metrics: PathBuf,
    loss: PathBuf,
    scales: PathBuf,
    trace: PathBuf,
    checkpoint: PathBuf,
    config: PathBuf,
}

impl Files {
    /// Every file a run writes.
    const NAMES: [&str; 6] = [
        "metrics.jsonl",
        "loss.svg",
        "trace.json",
        "checkpoint.safetensors",
        "config.toml",
        "scales.svg",
    ];

    fn new(dir: &Path) -> Self {
        Self {
            metrics: dir.join(Self::NAMES[0]),
            loss: dir.join(Self::NAMES[1]),
            trace: dir.join(Self::NAMES[2]),
            checkpoint: dir.join(Self::NAMES[3]),
            config: dir.join(Self::NAMES[4]),
            scales: dir.join(Self::NAMES[5]),
        }
    }
}

impl TrainArgs {
    /// `tessera train` with every default: the digits MLP on a POD16.
    pub(super) fn default_job() -> Self {
        Self::default()
    }

    pub(super) fn run(self) -> Result<(), Failure> {
        let job = self
            .job
            .clone()
            .over_file(self.output.config.as_deref())?
            .resolve(&TrainConfig::default())?;
        self.check(&job)?;
        let config_toml = job.effective().to_toml()?;
        let data = job.load()?;
        let trainer = Trainer::new(job.config.clone(), data.clone()).map_err(job::usage)?;
        let history = match &self.resume {
            Some(path) => {
                let steps = trainer.resume_point(path).map_err(job::usage)?;
                History::load(path, steps, trainer.steps_per_epoch())?
            }
            None => History::default(),
        };
        let mut options = RunOptions {
            resume: self.resume.clone(),
            checkpoint: None,
            checkpoint_every: self.checkpoint_every,
            stop_after_epochs: self.stop_after_epochs,
            divergence: Divergence {
                steps: self.diverged_after,
            },
            // Every MPI rank continues alike (they stop together).
            continuation: history.continuation(),
            interrupt: Some(on_signals()?),
        };
        if !launcher::reports(launcher::Launch::from_env()) {
            // Another MPI rank than 0: the run without its files. Rank 0
            // reports a divergence (all stop at its step); exiting non-zero
            // first would make mpirun kill it before it writes its files.
            return match job::run_job(&trainer, &options, &|_| {}) {
                Ok(_) | Err(TrainError::Diverged { .. }) => Ok(()),
                Err(e) => Err(self.failure(e)),
            };
        }
        // Claimed until the run ends.
        let run_dir = self.run_dir()?;
        let files = Files::new(&run_dir.path);
        options.checkpoint = Some(files.checkpoint.clone());
        let config = format!(
            "# The effective configuration of this run: `tessera train --config {}`\n\
             # runs it again.\n{config_toml}",
            files.config.display()
        );
        let metrics = Metrics::new(
            files.metrics.clone(),
            (files.config.clone(), config),
            history,
            trainer.steps_per_epoch(),
        );
        let progress = Progress::new(self.output.progress(), &trainer, "train");
        let result = job::run_job(&trainer, &options, &|e: Event<'_>| {
            progress.observe(e);
            metrics.observe(e);
        });
        progress.finish();
        let summary = match result {
            Ok(Some(summary)) => summary,
            Ok(None) => return Ok(()),
            Err(e @ TrainError::Diverged { .. }) => {
                metrics.finish(&files.loss)?;
                return Err(diverged(e, &trainer, &files));
            }
            Err(e) => return Err(self.failure(e)),
        };
        metrics.finish(&files.loss)?;
        if let Some(failure) = not_finite(&summary, &trainer, &files) {
            return Err(failure);
        }
        if let Some(trace) = &summary.trace {
            let bytes = serde_json::to_vec(trace).expect("a trace serializes");
            output::write_file(&files.trace, &bytes)?;
        }
        let report = if self.output.json {
            let mut line =
                serde_json::to_string(&self.json(&job, &data, &trainer, &summary, &files))
                    .expect("the report serializes");
            line.push('\n');
            line
        } else {
            self.text(&job, &data, &trainer, &summary, &files)
        };
        output::print(&report)?;
        if summary.interrupted {
            let steps = summary.steps.last().map_or(0, |r| r.step + 1);
            return Err(Failure::Interrupted(format!(
                "interrupted: stopped after step {steps} of {} with a checkpoint; `tessera \
                 train --config {} --resume {}` continues it",
                trainer.steps_per_epoch() * job.config.epochs,
                files.config.display(),
                files.checkpoint.display()
            )));
        }
        Ok(())
    }

    /// What is wrong with this run's own options, said before the data
    /// is loaded: a stop past the run's end, the run directory's name or
    /// a run it already holds, a checkpoint that is not there.
    fn check(&self, job: &Job) -> Result<(), Failure> {
        if let Some(stop) = self.stop_after_epochs
            && stop > job.config.epochs
        {
            return Err(Failure::Usage(format!(
                "--stop-after-epochs {stop} is past the run's {} epochs (--epochs): it would \
                 never stop early",
                job.config.epochs
            )));
        }
        if let Ok(hint) = self.new_run()? {
            self.output
                .check_new_run_dir(DEFAULT_NAME, self.overwrite, &hint)?;
        }
        if let Some(path) = &self.resume
            && !path.is_file()
        {
            return Err(Failure::Usage(format!(
                "--resume {}: there is no checkpoint file there",
                path.display()
            )));
        }
        Ok(())
    }

    /// A run's failure: a resumed run's loss scaler refusing the state
    /// its checkpoint holds (counters out of range) names the checkpoint.
    fn failure(&self, e: TrainError) -> Failure {
        match (&self.resume, e) {
            (Some(path), e @ TrainError::LossScaling(_)) => Failure::Usage(format!(
                "--resume {}: the checkpoint's loss scaler state: {}",
                path.display(),
                output::one_line(&e.to_string())
            )),
            (_, e) => job::usage(e),
        }
    }

    /// The run directory: with `--resume` and no `--name`, the
    /// checkpoint's (the run continues, as it does into the directory it
    /// was resumed from); else a new run's (`--overwrite`, `default-2`,
    /// ...: [`OutputArgs::new_run_dir`](super::job::OutputArgs::new_run_dir)).
    fn run_dir(&self) -> Result<RunDir, Failure> {
        match self.new_run()? {
            Err(resumed) => RunDir::claim(resumed),
            Ok(hint) => self.output.new_run_dir(DEFAULT_NAME, self.overwrite, &hint),
        }
    }

    /// Whether the run goes to a new run directory, with the hint its
    /// refusal ends with, or continues in the directory it resumes from.
    fn new_run(&self) -> Result<Result<String, PathBuf>, Failure> {
        let resumed = self.resume.as_deref().map(|p| match p.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        });
        if let (Some(dir), None) = (&resumed, &self.output.name) {
            return Ok(Err(dir.clone()));
        }
        let dir = self.output.run_dir_path(DEFAULT_NAME)?;
        let same = |a: &Path, b: &Path| matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b);
        if resumed.as_deref().is_some_and(|r| same(r, &dir)) {
            return Ok(Err(dir));
        }
        let checkpoint = Files::new(&dir).checkpoint;
        Ok(Ok(if checkpoint.is_file() {
            format!(", or --resume {} to continue it", checkpoint.display())
        } else {
            String::new()
        }))
    }

    /// The paths written, by name: only those that exist (a run whose
    /// state is not finite writes no checkpoint).
    fn written<'a>(&self, summary: &Summary, files: &'a Files) -> Vec<(&'static str, &'a Path)> {
        let mut paths = vec![
            ("metrics", files.metrics.as_path()),
            ("loss_chart", files.loss.as_path()),
            ("scales_chart", files.scales.as_path()),
        ];
        if summary.trace.is_some() {
            paths.push(("trace", files.trace.as_path()));
        }
        paths.push(("checkpoint", files.checkpoint.as_path()));
        paths.push(("config", files.config.as_path()));
        paths.retain(|(_, path)| path.exists());
        paths
    }

    /// The final report as one JSON object.
    fn json(
        &self,
        job: &Job,
        data: &Dataset,
        trainer: &Trainer,
        s: &Summary,
        files: &Files,
    ) -> Value {
        let total = s.step_time.total();
        let parts: Vec<Value> = s
            .step_time
            .parts()
            .iter()
            .map(|&(part, seconds)| {
                json!({"part": part, "seconds": seconds, "percent": percent(seconds, total)})
            })
            .collect();
        let (train, test) = trainer.sets();
        let files: serde_json::Map<String, Value> = self
            .written(s, files)
            .into_iter()
            .map(|(k, p)| (k.to_owned(), Value::String(p.display().to_string())))
            .collect();
        json!({
            "config": job.effective(),
            "data": {
                "name": data.name(),
                "samples": data.len(),
                "features": data.features(),
                "classes": data.classes(),
                "train": train.len(),
                "test": test.len(),
            },
            "global_batch": s.global_batch,
            "steps_per_epoch": trainer.steps_per_epoch(),
            "steps_run": s.steps.len(),
            "interrupted": s.interrupted,
            "test_accuracy": s.test.test_accuracy,
            "test_loss": s.test.test_loss,
            "final_loss": s.steps.last().map(|r| r.loss),
            "simulated_samples_per_second": s.simulated_samples_per_second(),
            "wall_samples_per_second": s.wall_samples_per_second(),
            "wall_seconds": s.wall_seconds,
            "step_time": {"total_seconds": total, "parts": parts},
            "memory": {
                "tile_capacity_bytes": s.memory.model.capacity,
                "model_max_tile_bytes": s.memory.model.max,
                "model_mean_tile_bytes": s.memory.model.mean,
                "optimizer_per_tile_bytes": s.memory.optimizer.per_tile_bytes,
                "max_tile_bytes": s.memory.max_tile_bytes(),
                "optimizer_bytes": s.memory.optimizer.bytes,
                "optimizer_unsharded_bytes": s.memory.optimizer.unsharded_bytes,
                "optimizer_offloaded": s.memory.optimizer.offloaded,
                "activation_stashes": s.memory.activations,
                "recomputation": s.memory.recomputation,
            },
            "skipped_steps": skipped(s),
            "final_loss_scale": s.steps.last().map(|r| r.loss_scale),
            "products": products(job).1,
            "fingerprint": format!("{:016x}", s.fingerprint),
            "files": files,
        })
    }

    /// The final report as text.
    fn text(
        &self,
        job: &Job,
        data: &Dataset,
        trainer: &Trainer,
        s: &Summary,
        files: &Files,
    ) -> String {
        let mut o = String::new();
        let (train, test) = trainer.sets();
        let _ = writeln!(
            o,
            "data         {}: {} samples of {} features, {} classes ({} train, {} test)",
            data.name(),
            data.len(),
            data.features(),
            data.classes(),
            train.len(),
            test.len()
        );
        let _ = writeln!(o, "pod          {}", job.distribution());
        let _ = writeln!(o, "model        {}", job.numerics());
        let _ = writeln!(
            o,
            "steps        {} run, {} per epoch",
            s.steps.len(),
            trainer.steps_per_epoch()
        );
        let _ = writeln!(
            o,
            "test         accuracy {:.2}%, loss {:.4}",
            100.0 * s.test.test_accuracy,
            s.test.test_loss
        );
        let _ = writeln!(
            o,
            "throughput   {:.0} samples/s simulated, {:.0} samples/s wall clock ({:.2} s)",
            s.simulated_samples_per_second(),
            s.wall_samples_per_second(),
            s.wall_seconds
        );
        let total = s.step_time.total();
        let _ = writeln!(o, "step time    {} simulated per step", seconds(total));
        for (part, t) in s.step_time.parts() {
            let _ = writeln!(
                o,
                "  {part:<24} {:>10} {:>6.1}%",
                seconds(t),
                percent(t, total)
            );
        }
        let m = &s.memory;
        let _ = writeln!(
            o,
            "memory       max tile {} of {} (model {}, optimizer {} per tile{})",
            bytes(m.max_tile_bytes()),
            bytes(m.model.capacity),
            bytes(m.model.max),
            bytes(m.optimizer.per_tile_bytes),
            if m.optimizer.offloaded {
                ", offloaded"
            } else {
                ""
            }
        );
        model_parallelism(&mut o, job, trainer, &s.memory);
        let _ = writeln!(
            o,
            "optimizer    {} per replica {}, {} unsharded",
            bytes(m.optimizer.bytes),
            if job.config.replicated_tensor_sharding {
                "sharded"
            } else {
                "(not sharded)"
            },
            bytes(m.optimizer.unsharded_bytes)
        );
        let scale = s
            .steps
            .last()
            .map_or_else(|| "-".to_owned(), |r| r.loss_scale.to_string());
        let _ = writeln!(
            o,
            "loss scale   {} skipped steps, final scale {scale}",
            skipped(s)
        );
        if let Some(n) = job.config.precision.numerics() {
            let _ = writeln!(o, "numerics     {n}");
        }
        let _ = writeln!(o, "products     {}", products(job).0);
        let _ = writeln!(o, "fingerprint  {:016x}", s.fingerprint);
        for (i, (_, path)) in self.written(s, files).into_iter().enumerate() {
            let head = if i == 0 { "wrote" } else { "" };
            let _ = writeln!(o, "{head:<12} {}", path.display());
        }
        o
    }
}

/// How the run's IPU runs its dense and convolution products (forward,
/// `dW`, `dA`), as the simulated step prices them: a line for the report
/// and its JSON.
fn products(job: &Job) -> (String, Value) {
    let ipu = job.config.pod.ipu();
    let name = ipu_name(ipu);
    let prices = job.config.precision.compute().products(ipu);
    let kernel = |k: Option<Kernel>| k.map(Kernel::name);
    let json: Vec<Value> = ["forward", "dW", "dA"]
        .iter()
        .zip(&prices)
        .map(|(product, p)| {
            json!({"product": product, "path": p.path.describe(),
                   "kernel": p.matmul.name(), "conversion": kernel(p.convert)})
        })
        .collect();
    let line = if prices.iter().all(|p| p.path == prices[0].path) {
        format!(
            "{} on the {name} (forward, dW, dA)",
            prices[0].path.describe()
        )
    } else {
        format!(
            "forward {}, dW {}, dA {} on the {name}",
            prices[0].path.describe(),
            prices[1].path.describe(),
            prices[2].path.describe()
        )
    };
    (line, json!({"ipu": name, "products": json}))
}

/// The failure of a diverged run, naming what it kept.
fn diverged(e: TrainError, trainer: &Trainer, files: &Files) -> Failure {
    let Failure::Diverged(message) = job::usage(e) else {
        unreachable!("a diverged run's failure")
    };
    let kept = match trainer.resume_point(&files.checkpoint) {
        Ok(steps) => format!(
            "{} is the checkpoint after {steps} steps",
            files.checkpoint.display()
        ),
        Err(_) => "no checkpoint was written (see --checkpoint-every)".to_owned(),
    };
    Failure::Diverged(format!(
        "{message}; the records are in {}, and {kept}",
        files.metrics.display()
    ))
}

/// An interrupt that Ctrl-C and SIGTERM raise: the run then stops at the
/// end of the epoch with a checkpoint. A second one ends the process at
/// once (status 130, as a shell reports SIGINT).
fn on_signals() -> Result<Interrupt, Failure> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let interrupt = Interrupt::default();
    for signal in [SIGINT, SIGTERM] {
        let flag = interrupt.flag();
        // The shutdown first: it looks at the flag before the second
        // handler raises it, so only a signal after the first ends the run.
        signal_hook::flag::register_conditional_shutdown(signal, 130, Arc::clone(flag))
            .and_then(|_| signal_hook::flag::register(signal, Arc::clone(flag)))
            .map_err(|e| Failure::Job(format!("cannot handle signal {signal}: {e}")))?;
    }
    Ok(interrupt)
}

/// The failure (exit status 3, as a diverged run's) of a run that ended
/// with a loss or weights that are not finite: it wrote no checkpoint of
/// that state, and its result is no result. `None` when all is finite.
fn not_finite(s: &Summary, trainer: &Trainer, files: &Files) -> Option<Failure> {
    let (loss, steps) = s.steps.last().map_or((0.0, 0), |r| (r.loss, r.step + 1));
    let weights = s.weights.iter().flatten().all(|w| w.is_finite());
    if loss.is_finite() && weights {
        return None;
    }
    let what = match (loss.is_finite(), weights) {
        (false, false) => "a loss and weights",
        (false, true) => "a loss",
        _ => "weights",
    };
    let kept = match trainer.resume_point(&files.checkpoint) {
        Ok(steps) => format!(
            "{} is the last finite checkpoint, after {steps} steps",
            files.checkpoint.display()
        ),
        Err(_) => "no checkpoint was written".to_owned(),
    };
    Some(Failure::Diverged(format!(
        "the run ended with {what} that are not finite (final loss {loss} after {steps} steps); \
         the records are in {}, and {kept}; try a smaller learning rate or gradient clipping",
        files.metrics.display()
    )))
}

/// Steps whose update loss scaling skipped.
fn skipped(s: &Summary) -> usize {
    s.steps.iter().filter(|r| r.skipped).count()
}

/// `part` as a percentage of `total`.
pub(super) fn percent(part: f64, total: f64) -> f64 {
    if total > 0.0 {
        100.0 * part / total
    } else {
        0.0
    }
}

/// Seconds with a unit that keeps three significant figures.
pub(super) fn seconds(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.3} us", s * 1e6)
    }
}

/// Bytes in binary units.
fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", b / (1024.0 * 1024.0))
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{b} B")
    }
}

/// The report's lines on the replica's stages, their stashes and the
/// recomputation checkpoints.
fn model_parallelism(o: &mut String, job: &Job, trainer: &Trainer, m: &MemoryReport) {
    let placement = trainer.placement();
    // The placement as the device mapping of the network's blocks (an
    // MLP's are its dense layers and the head).
    if let Some(ipus) = placement.network_mapping(&trainer.model().network()) {
        let schedule = job
            .config
            .pipeline
            .as_ref()
            .map_or_else(String::new, |p| p.schedule.to_string());
        let concurrent = if matches!(placement, Placement::Stages { .. }) {
            " (branches concurrent)"
        } else {
            ""
        };
        let _ = writeln!(
            o,
            "stages       {} stages: blocks on IPUs {ipus}{concurrent}, {schedule}{}",
            placement.stages(),
            if job.config.recompute {
                ", recomputation"
            } else {
                ""
            }
        );
    }
    for a in &m.activations {
        let whole = job.config.recompute && job.config.recompute_checkpoints.is_empty();
        if a.stashed > 1 || whole {
            let _ = writeln!(
                o,
                "  stage {} IPU {} keeps {} micro-batch{}: {} per tile of stashes; \
                 recomputation saves {} bytes",
                a.stage,
                a.ipu,
                a.stashed,
                if a.stashed == 1 { "" } else { "es" },
                bytes(a.stash_bytes_per_tile),
                a.recompute_saves_bytes
            );
        }
    }
    if let Some(r) = &m.recomputation {
        let _ = writeln!(
            o,
            "checkpoints  blocks {:?}: {} segments, {} forward cycles per micro-batch run \
             again; activations {} per tile kept of {}",
            job.config.recompute_checkpoints,
            r.segments.len(),
            r.cycles,
            bytes(r.kept_per_tile),
            bytes(r.activations_per_tile)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_train_run_s_files_are_run_files() {
        for name in Files::NAMES {
            assert!(job::RUN_FILES.contains(&name), "{name}");
        }
    }
}
