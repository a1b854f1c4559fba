//! A run's records, `metrics.jsonl`: appended as the trainer reports them
//! (so the file always holds the steps done, whatever stops the run), read
//! back when a run resumes (so the resumed run's files are the
//! uninterrupted run's), and drawn as `loss.svg`.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;
use tessera_sim::train::{Continuation, EpochRecord, Event, StepRecord};

use super::Failure;
use super::output::{self, one_line};
use super::plot::{Series, line_chart, scales_chart};

/// One line of metrics.jsonl.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Record {
    Step(StepRecord),
    Epoch(EpochRecord),
}

impl Record {
    /// The JSON line, with its newline.
    fn line(&self) -> String {
        match self {
            Self::Step(r) => output::tagged("step", r) + "\n",
            Self::Epoch(e) => output::tagged("epoch", e) + "\n",
        }
    }

    /// A line of metrics.jsonl, if it is a record.
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
                quant: v
                    .get("quant")
                    .and_then(|q| serde_json::from_value(q.clone()).ok())
                    .unwrap_or_default(),
            })),
            "epoch" => Some(Self::Epoch(EpochRecord {
                epoch: u("epoch")?,
                test_loss: f("test_loss")? as f32,
                test_accuracy: f("test_accuracy")? as f32,
            })),
            _ => None,
        }
    }

    /// Where it belongs in a run of `steps_per_epoch` steps an epoch: a
    /// step at its index, an epoch after its last step.
    const fn position(&self, steps_per_epoch: u64) -> (u64, bool) {
        match self {
            Self::Step(r) => (r.step, false),
            Self::Epoch(e) => (
                e.epoch
                    .saturating_add(1)
                    .saturating_mul(steps_per_epoch)
                    .saturating_sub(1),
                true,
            ),
        }
    }
}

/// The records of the steps before a resumed run's checkpoint.
#[derive(Debug, Default)]
pub(super) struct History {
    records: Vec<Record>,
}

impl History {
    /// The records of the run that wrote `checkpoint`, read from the
    /// metrics.jsonl beside it: every step before the checkpoint's `steps`
    /// and every epoch they end, in order (later ones, of a run that went on
    /// after its checkpoint, are dropped).
    ///
    /// # Errors
    /// A usage error if the file cannot be read, a line is not a record, or
    /// a record the resumed run needs is missing or out of place. A torn
    /// last line (not a record, no line end) is discarded, with a note on
    /// stderr, when the records before it reach the checkpoint.
    pub(super) fn load(
        checkpoint: &Path,
        steps: u64,
        steps_per_epoch: u64,
    ) -> Result<Self, Failure> {
        let path = checkpoint.with_file_name("metrics.jsonl");
        let refused = |why: String| {
            Failure::Usage(format!(
                "--resume {}: {}: {why}; a resumed run continues the records of the steps \
                 before its checkpoint, kept in the metrics.jsonl beside it",
                checkpoint.display(),
                path.display()
            ))
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|e| refused(format!("cannot read: {}", one_line(&e.to_string()))))?;
        let mut records = Vec::new();
        let lines: Vec<&str> = text.lines().collect();
        let mut torn = None;
        for (i, line) in lines.iter().enumerate() {
            let Some(record) = Record::parse(line) else {
                // A full disk or a power loss can tear the last record; it
                // is harmless when the records before it reach the
                // checkpoint (checked below with the rest).
                if i + 1 == lines.len() && !text.ends_with('\n') {
                    torn = Some(i + 1);
                    continue;
                }
                return Err(refused(format!(
                    "line {} is not a step or epoch record",
                    i + 1
                )));
            };
            if record.position(steps_per_epoch).0 < steps {
                records.push(record);
            }
        }
        // Exactly the records of steps 0..steps, in the order a run writes
        // them.
        let expected: Vec<(u64, bool)> = (0..steps)
            .flat_map(|step| {
                let ends = (step + 1).is_multiple_of(steps_per_epoch);
                std::iter::once((step, false)).chain(ends.then_some((step, true)))
            })
            .collect();
        let found: Vec<(u64, bool)> = records
            .iter()
            .map(|r| r.position(steps_per_epoch))
            .collect();
        if let Some(k) =
            (0..expected.len().max(found.len())).find(|&k| expected.get(k) != found.get(k))
        {
            let what = |(step, epoch): (u64, bool)| {
                if epoch {
                    format!("the epoch ending at step {step}")
                } else {
                    format!("step {step}")
                }
            };
            return Err(refused(match (found.get(k), expected.get(k)) {
                (Some(&got), Some(&want)) => {
                    format!("record {} is {}, not {}", k + 1, what(got), what(want))
                }
                (None, Some(&want)) => format!(
                    "it ends before {}, and the checkpoint is after step {}",
                    what(want),
                    steps.saturating_sub(1)
                ),
                (Some(&got), None) => format!("record {} repeats {}", k + 1, what(got)),
                (None, None) => unreachable!("k is below one of the lengths"),
            }));
        }
        if let Some(line) = torn {
            eprintln!(
                "tessera: {}: line {line}, a torn record after the checkpoint's step {}, \
                 is discarded",
                path.display(),
                steps.saturating_sub(1)
            );
        }
        Ok(Self { records })
    }

    /// Where the resumed run's records continue.
    pub(super) fn continuation(&self) -> Continuation {
        let steps = self.records.iter().filter_map(|r| match r {
            Record::Step(s) => Some(s),
            Record::Epoch(_) => None,
        });
        Continuation {
            sim_seconds: steps.clone().next_back().map_or(0.0, |s| s.sim_seconds),
            bad_steps: steps
                .rev()
                .take_while(|s| s.skipped || !s.loss.is_finite())
                .count() as u64,
        }
    }
}

/// A run's records as they come, appended to metrics.jsonl: the history
/// first, written with `config` (the run's other starting file) at the
/// first record, so that a run that never starts changes no file.
pub(super) struct Metrics {
    path: PathBuf,
    config: (PathBuf, String),
    steps_per_epoch: u64,
    live: Mutex<Live>,
}

/// What the observer thread updates.
struct Live {
    records: Vec<Record>,
    file: Option<File>,
    error: Option<String>,
}

impl Metrics {
    /// The records of a run writing `path`, after `history`.
    pub(super) fn new(
        path: PathBuf,
        config: (PathBuf, String),
        history: History,
        steps_per_epoch: u64,
    ) -> Self {
        Self {
            path,
            config,
            steps_per_epoch,
            live: Mutex::new(Live {
                records: history.records,
                file: None,
                error: None,
            }),
        }
    }

    /// Appends the record of `event` (the first also writes the history
    /// and the configuration). A failure is kept for [`Metrics::finish`].
    pub(super) fn observe(&self, event: Event<'_>) {
        let record = match event {
            Event::Step(r) => Record::Step(r.clone()),
            Event::Epoch(e) => Record::Epoch(*e),
        };
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        live.records.push(record.clone());
        if live.error.is_some() {
            return;
        }
        // An epoch's end is where checkpoints are written: the records
        // before it go to disk with them (fsync), so that a power loss
        // leaves at most a torn record after the checkpoint.
        let epoch_end = matches!(record, Record::Epoch(_));
        let written = match live.file.as_mut() {
            Some(file) => file
                .write_all(record.line().as_bytes())
                .and_then(|()| if epoch_end { file.sync_data() } else { Ok(()) })
                .map_err(|e| e.to_string()),
            None => self.start(&live.records).map(|file| live.file = Some(file)),
        };
        if let Err(e) = written {
            live.error = Some(format!(
                "cannot write {}: {}",
                self.path.display(),
                one_line(&e)
            ));
        }
    }

    /// Writes the configuration and the records so far, and opens
    /// metrics.jsonl for appending.
    fn start(&self, records: &[Record]) -> Result<File, String> {
        let failed = |e: Failure| e.to_string();
        output::write_file(&self.config.0, self.config.1.as_bytes()).map_err(failed)?;
        output::write_file(&self.path, lines(records).as_bytes()).map_err(failed)?;
        File::options()
            .append(true)
            .open(&self.path)
            .map_err(|e| e.to_string())
    }

    /// Writes metrics.jsonl whole (atomically, the same lines as
    /// appended), the configuration if no record came, and the loss curves
    /// to `chart`.
    ///
    /// # Errors
    /// [`Failure::Job`] if a file could not be written.
    pub(super) fn finish(&self, chart: &Path) -> Result<(), Failure> {
        let mut live = self
            .live
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = live.error.take() {
            return Err(Failure::Job(e));
        }
        if live.file.take().is_none() {
            // No record came: nothing was written yet.
            output::write_file(&self.config.0, self.config.1.as_bytes())?;
        }
        output::write_file(&self.path, lines(&live.records).as_bytes())?;
        let (mut loss, mut test_loss) = (Vec::new(), Vec::new());
        for r in &live.records {
            let (x, _) = r.position(self.steps_per_epoch);
            match r {
                Record::Step(s) => loss.push((x as f64, f64::from(s.loss))),
                Record::Epoch(e) => test_loss.push((x as f64, f64::from(e.test_loss))),
            }
        }
        let curves = [
            Series {
                name: "training loss".into(),
                points: loss,
            },
            Series {
                name: "test loss".into(),
                points: test_loss,
            },
        ];
        line_chart(chart, "Loss", "step", "loss", &curves, true).map_err(Failure::Job)?;
        let scales: Vec<(u64, &[_])> = live
            .records
            .iter()
            .filter_map(|r| match r {
                Record::Step(s) => Some((s.step, s.quant.as_slice())),
                Record::Epoch(_) => None,
            })
            .collect();
        scales_chart(&chart.with_file_name("scales.svg"), &scales).map_err(Failure::Job)
    }
}

/// The records as metrics.jsonl's text.
fn lines(records: &[Record]) -> String {
    records.iter().map(Record::line).collect()
}
