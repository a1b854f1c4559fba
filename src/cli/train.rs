//! `tessera train [OPTIONS]`: one data-parallel training run on the
//! simulated Pod, its report, and its run directory.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use serde_json::{Value, json};
use tessera_sim::data::Dataset;
use tessera_sim::model::Placement;
use tessera_sim::train::{
    EpochRecord, Event, RunOptions, StepRecord, Summary, TrainConfig, Trainer,
};

use super::Failure;
use super::job::{self, Job, JobArgs, OutputArgs, Progress};
use super::plot::{Series, line_chart};

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
        default_value_t = 0
    )]
    checkpoint_every: u64,

    /// Stop after N epochs with a checkpoint, as if interrupted (the
    /// learning-rate schedule stays the whole run's): `--resume` then
    /// finishes bitwise as the uninterrupted run
    #[arg(long, alias = "stop_after_epochs", value_name = "N")]
    stop_after_epochs: Option<u64>,
}

/// The files of a run directory.
struct Files {
    metrics: PathBuf,
    loss: PathBuf,
    trace: PathBuf,
    checkpoint: PathBuf,
    config: PathBuf,
}

impl Files {
    fn new(dir: &Path) -> Self {
        Self {
            metrics: dir.join("metrics.jsonl"),
            loss: dir.join("loss.svg"),
            trace: dir.join("trace.json"),
            checkpoint: dir.join("checkpoint.safetensors"),
            config: dir.join("config.toml"),
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
        let config_toml = job.effective().to_toml()?;
        let data = job.load()?;
        let trainer = Trainer::new(job.config.clone(), data.clone()).map_err(job::usage)?;
        let dir = self.output.run_dir(DEFAULT_NAME)?;
        let files = Files::new(&dir);
        let options = RunOptions {
            resume: self.resume.clone(),
            checkpoint: Some(files.checkpoint.clone()),
            checkpoint_every: self.checkpoint_every,
            stop_after_epochs: self.stop_after_epochs,
        };
        let progress = Progress::new(self.output.progress(), &trainer, "train");
        let result = job::run_job(&trainer, &options, &|e: Event<'_>| progress.observe(e));
        progress.finish();
        let Some(summary) = result.map_err(job::usage)? else {
            return Ok(());
        };
        self.write(&trainer, &summary, &files, &config_toml)?;
        let report = if self.output.json {
            let mut line =
                serde_json::to_string(&self.json(&job, &data, &trainer, &summary, &files))
                    .expect("the report serializes");
            line.push('\n');
            line
        } else {
            self.text(&job, &data, &trainer, &summary, &files)
        };
        job::print(&report)
    }

    /// Writes the run directory's files (the checkpoint is the trainer's).
    fn write(
        &self,
        trainer: &Trainer,
        summary: &Summary,
        files: &Files,
        config_toml: &str,
    ) -> Result<(), Failure> {
        let metrics = Metrics::new(
            summary,
            trainer.steps_per_epoch(),
            self.resume.is_some().then_some(files.metrics.as_path()),
        );
        job::write_file(&files.metrics, metrics.lines.concat().as_bytes())?;
        let curves = [
            Series {
                name: "training loss".into(),
                points: metrics.loss,
            },
            Series {
                name: "test loss".into(),
                points: metrics.test_loss,
            },
        ];
        line_chart(&files.loss, "Loss", "step", "loss", &curves, true).map_err(Failure::Job)?;
        if let Some(trace) = &summary.trace {
            let bytes = serde_json::to_vec(trace).expect("a trace serializes");
            job::write_file(&files.trace, &bytes)?;
        }
        let text = format!(
            "# The effective configuration of this run: `tessera train --config {}`\n\
             # runs it again.\n{config_toml}",
            files.config.display()
        );
        job::write_file(&files.config, text.as_bytes())
    }

    /// The paths written, by name.
    fn written<'a>(&self, summary: &Summary, files: &'a Files) -> Vec<(&'static str, &'a Path)> {
        let mut paths = vec![
            ("metrics", files.metrics.as_path()),
            ("loss_chart", files.loss.as_path()),
        ];
        if summary.trace.is_some() {
            paths.push(("trace", files.trace.as_path()));
        }
        paths.push(("checkpoint", files.checkpoint.as_path()));
        paths.push(("config", files.config.as_path()));
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
            },
            "skipped_steps": skipped(s),
            "final_loss_scale": s.steps.last().map(|r| r.loss_scale),
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
        if let Placement::Ipus(ipus) = trainer.placement() {
            let schedule = job
                .config
                .pipeline
                .as_ref()
                .map_or_else(String::new, |p| p.schedule.to_string());
            let _ = writeln!(
                o,
                "stages       layers on IPUs {ipus:?}, {schedule}{}",
                if job.config.recompute {
                    ", recomputation"
                } else {
                    ""
                }
            );
        }
        for a in &m.activations {
            if a.stashed > 1 || job.config.recompute {
                let _ = writeln!(
                    o,
                    "  stage {}      keeps {} micro-batches: {} per tile of stashes; \
                     recomputation saves {} bytes",
                    a.stage,
                    a.stashed,
                    bytes(a.stash_bytes_per_tile),
                    a.recompute_saves_bytes
                );
            }
        }
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
        let _ = writeln!(o, "fingerprint  {:016x}", s.fingerprint);
        for (i, (_, path)) in self.written(s, files).into_iter().enumerate() {
            let head = if i == 0 { "wrote" } else { "" };
            let _ = writeln!(o, "{head:<12} {}", path.display());
        }
        o
    }
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

/// A run's records as JSON lines, and its loss curves.
struct Metrics {
    steps_per_epoch: u64,
    lines: Vec<String>,
    loss: Vec<(f64, f64)>,
    test_loss: Vec<(f64, f64)>,
}

impl Metrics {
    /// The records of `summary`, after those of `earlier` (a resumed run's
    /// metrics.jsonl, if it exists) from before the run resumed.
    fn new(summary: &Summary, steps_per_epoch: u64, earlier: Option<&Path>) -> Self {
        let mut m = Self {
            steps_per_epoch,
            lines: Vec::new(),
            loss: Vec::new(),
            test_loss: Vec::new(),
        };
        let first = summary
            .steps
            .first()
            .map_or(summary.test.epoch * steps_per_epoch, |r| r.step);
        if let Some(text) = earlier.and_then(|p| std::fs::read_to_string(p).ok()) {
            for line in text.lines() {
                if let Some(record) = Record::parse(line)
                    && m.before(&record, first)
                {
                    m.push(&record);
                }
            }
        }
        let mut epochs = summary.epochs.iter().peekable();
        for step in &summary.steps {
            m.push(&Record::Step(*step));
            if let Some(e) = epochs.next_if(|e| m.end(e) <= step.step) {
                m.push(&Record::Epoch(*e));
            }
        }
        for e in epochs {
            m.push(&Record::Epoch(*e));
        }
        m
    }

    /// The last step of epoch `e`.
    fn end(&self, e: &EpochRecord) -> u64 {
        ((e.epoch + 1) * self.steps_per_epoch).saturating_sub(1)
    }

    /// Whether `record` is of the run before step `first`.
    fn before(&self, record: &Record, first: u64) -> bool {
        match record {
            Record::Step(r) => r.step < first,
            Record::Epoch(e) => self.end(e) < first,
        }
    }

    fn push(&mut self, record: &Record) {
        match record {
            Record::Step(r) => {
                self.loss.push((r.step as f64, f64::from(r.loss)));
                self.lines.push(job::tagged("step", r) + "\n");
            }
            Record::Epoch(e) => {
                self.test_loss
                    .push((self.end(e) as f64, f64::from(e.test_loss)));
                self.lines.push(job::tagged("epoch", e) + "\n");
            }
        }
    }
}

/// One line of metrics.jsonl.
enum Record {
    Step(StepRecord),
    Epoch(EpochRecord),
}

impl Record {
    /// A line of an earlier metrics.jsonl, if it is a record.
    fn parse(line: &str) -> Option<Self> {
        let v: Value = serde_json::from_str(line).ok()?;
        // Non-finite numbers were written as null.
        let f = |k: &str| v.get(k).map(|x| x.as_f64().unwrap_or(f64::NAN));
        let u = |k: &str| v.get(k).and_then(Value::as_u64);
        match v.get("kind")?.as_str()? {
            "step" => Some(Self::Step(StepRecord {
                step: u("step")?,
                epoch: u("epoch")?,
                loss: f("loss")? as f32,
                accuracy: f("accuracy")? as f32,
                loss_scale: f("loss_scale")? as f32,
                lr: f("lr")? as f32,
                skipped: v.get("skipped")?.as_bool()?,
                sim_seconds: f("sim_seconds")?,
                wall_seconds: f("wall_seconds")?,
            })),
            "epoch" => Some(Self::Epoch(EpochRecord {
                epoch: u("epoch")?,
                test_loss: f("test_loss")? as f32,
                test_accuracy: f("test_accuracy")? as f32,
            })),
            _ => None,
        }
    }
}
