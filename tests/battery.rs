//! Tests: battery (issue 24). Every user mistake on the command line is
//! one line on stderr and status 2, naming the option: a battery of bad
//! command lines generated from the commands' own definitions, run
//! through the built binary.
//!
//! - Every option that takes a value, of every command (read from `tessera
//!   COMMAND --help`, which clap renders from the definition: a new option
//!   is in the battery without a word here), given each of [`VALUES`]
//!   (0, -1, a huge value, NaN, a non-number, empty).
//! - The contradictions and cases of issue 24 ([`CASES`]).
//!
//! A value an option takes is no mistake, and the battery does not assert
//! one: `train` and `scale` run with data that does not exist, so a run
//! whose options are all taken fails on loading the data (its message
//! names the missing file), and that case is counted as taken; `plan` and
//! `bench` succeed. What is asserted, for every other case: status 2, one
//! line, that line names the option (`--name`), no panic, and the command
//! ends within [`TIMEOUT`] (a hang fails; the battery measures no time).
//! Checks made after the data is loaded (the run directory, `--resume`'s
//! checkpoint) are out of its reach for `train` and `scale`: their tests
//! are in `train_cli`, `input_cli` and `cli`.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::command::scratch;

/// The values each option is given: zero, negative, past every integer
/// type (2^64), not a number, a word, nothing.
const VALUES: [&str; 6] = ["0", "-1", "18446744073709551616", "NaN", "x", ""];

/// The data file that does not exist.
const ABSENT: &str = "absent.csv";

/// Longer than any case takes (a case takes a fraction of a second): only
/// a hang reaches it.
const TIMEOUT: Duration = Duration::from_secs(30);

/// The commands, each with arguments that make it cheap: a job whose
/// options are all taken fails at once on loading `ABSENT`.
const COMMANDS: [(&str, &[&str]); 4] = [
    (
        "train",
        &[
            "--data",
            "csv:ABSENT",
            "--runs-dir",
            "RUNS",
            "--no-progress",
        ],
    ),
    (
        "scale",
        &[
            "--data",
            "csv:ABSENT",
            "--runs-dir",
            "RUNS",
            "--no-progress",
        ],
    ),
    ("plan", &["--model", "mlp"]),
    ("bench", &["data", "--quick"]),
];

/// The contradictions and cases of issue 24, each with the option its one
/// line must name.
const CASES: [(&[&str], &str); 13] = [
    (
        &["train", "--pipeline-stages", "2", "--ipus-per-replica", "4"],
        "--pipeline-stages",
    ),
    (
        &[
            "train",
            "--pipeline-stages",
            "2",
            "--device-mapping",
            "0,0,0",
        ],
        "--device-mapping",
    ),
    (
        &[
            "train",
            "--pipeline-stages",
            "2",
            "--device-mapping",
            "1,1,1",
        ],
        "--device-mapping",
    ),
    (&["train", "--schedule", "grouped"], "--schedule"),
    (
        &["plan", "--schedule", "grouped", "--model", "mlp"],
        "--schedule",
    ),
    (
        &["train", "--stop-after-epochs", "50", "--epochs", "1"],
        "--stop-after-epochs",
    ),
    (
        &[
            "train",
            "--model",
            "resnet-mini",
            "--widths",
            "16",
            "--blocks",
            "100000",
        ],
        "--blocks",
    ),
    (
        &[
            "train",
            "--model",
            "resnet-mini",
            "--widths",
            "16",
            "--blocks",
            "4000",
        ],
        "--blocks",
    ),
    (
        &[
            "train",
            "--model",
            "resnet-mini",
            "--widths",
            "4096",
            "--blocks",
            "1",
        ],
        "--widths",
    ),
    (
        &["plan", "--model", "resnet-mini", "--blocks", "100000,1"],
        "--blocks",
    ),
    (
        &[
            "plan",
            "--ipus-per-replica=18446744073709551615",
            "--model",
            "mlp",
        ],
        "--ipus-per-replica",
    ),
    (&["plan", "--svg", "/proc/x.svg", "--model", "mlp"], "--svg"),
    (
        &["bench", "data", "--quick", "--elements", "128Mi"],
        "--elements",
    ),
];

/// The options of `command` that take a value, from its help.
fn options(command: &str) -> Vec<String> {
    let out = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args([command, "--help"])
        .output()
        .expect("the tessera binary runs");
    assert!(out.status.success(), "{command} --help");
    let help = String::from_utf8(out.stdout).expect("UTF-8 help");
    let mut found = Vec::new();
    for line in help.lines().map(str::trim_start) {
        // `--name <VALUE>`, `-n, --name <VALUE>`, `--flag[=<BOOL>]`.
        let line = line.split_once(", ").map_or(line, |(short, rest)| {
            if short.starts_with('-') && !short.starts_with("--") {
                rest
            } else {
                line
            }
        });
        let Some(rest) = line.strip_prefix("--") else {
            continue;
        };
        let end = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
            .unwrap_or(rest.len());
        let (name, after) = rest.split_at(end);
        if after.starts_with(" <") || after.starts_with("[=<") {
            found.push(format!("--{name}"));
        }
    }
    found.dedup();
    found
}

/// One command line and the option its error must name.
struct Case {
    args: Vec<String>,
    option: String,
    /// Whether the value may be one the option takes (then, if taken, it
    /// is counted, not checked).
    may_be_taken: bool,
}

/// What a case did.
enum Outcome {
    /// The option took the value.
    Taken,
    /// Refused as the battery asks.
    Refused,
}

/// Runs `case` in `dir`: how it went, or what is wrong with it.
fn run(case: &Case, dir: &Path) -> Result<Outcome, String> {
    let what = case.args.join(" ");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tessera"))
        .args(&case.args)
        .current_dir(dir)
        .env_remove("TESSERA_BACKEND")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the tessera binary runs");
    let mut stderr = child.stderr.take().expect("piped");
    // Read while it runs: a full pipe must not stall it.
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("`tessera {what}` still runs after {TIMEOUT:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = reader.join().expect("stderr read");
    if case.may_be_taken && (err.contains(ABSENT) || status.success()) {
        return Ok(Outcome::Taken);
    }
    let problem = if status.code() != Some(2) {
        Some(format!("status {status}"))
    } else if err.trim_end().lines().count() != 1 {
        Some("not one line".to_owned())
    } else if !err.starts_with("tessera: ") || err.contains("panicked") {
        Some("not tessera's error".to_owned())
    } else if !err.contains(&case.option) {
        Some(format!("does not name {}", case.option))
    } else {
        None
    };
    match problem {
        Some(p) => Err(format!("`tessera {what}`: {p}: {}", err.trim_end())),
        None => Ok(Outcome::Refused),
    }
}

/// Every generated case, then the issue's.
fn cases(dir: &Path) -> Vec<Case> {
    let absent = dir.join(ABSENT);
    let runs = dir.join("runs");
    let fill = |a: &str| {
        a.replace("ABSENT", absent.to_str().unwrap())
            .replace("RUNS", runs.to_str().unwrap())
    };
    let mut out = Vec::new();
    for (command, base) in COMMANDS {
        for option in options(command) {
            // The option's own value replaces the base's, if it has one.
            let mut args = vec![command.to_owned()];
            let mut base = base.iter();
            while let Some(a) = base.next() {
                if *a == option {
                    base.next();
                } else {
                    args.push(fill(a));
                }
            }
            for value in VALUES {
                let mut args = args.clone();
                args.push(format!("{option}={value}"));
                out.push(Case {
                    args,
                    option: option.clone(),
                    may_be_taken: true,
                });
            }
        }
    }
    for (args, option) in CASES {
        let mut args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        if matches!(args[0].as_str(), "train" | "scale") {
            args.extend(["--runs-dir".to_owned(), runs.display().to_string()]);
        }
        out.push(Case {
            args,
            option: option.to_owned(),
            may_be_taken: false,
        });
    }
    out
}

#[test]
fn every_bad_value_of_every_option_is_one_line_naming_it_and_status_2() {
    let dir = scratch("battery");
    let cases = cases(&dir);
    let options: usize = COMMANDS.iter().map(|(c, _)| options(c).len()).sum();
    // The commands' options are all there: a parse of the help that
    // found none would make an empty battery pass.
    assert!(options >= 70, "{options} options found");
    let next = AtomicUsize::new(0);
    let (taken, wrong) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    match run(case, &dir) {
                        Ok(Outcome::Taken) => taken.lock().unwrap().push(case.args.join(" ")),
                        Ok(Outcome::Refused) => {}
                        Err(e) => wrong.lock().unwrap().push(e),
                    }
                }
            });
        }
    });
    let (taken, wrong) = (taken.into_inner().unwrap(), wrong.into_inner().unwrap());
    println!(
        "battery: {} command lines ({options} options x {} values, {} cases of issue 24): \
         {} refused, {} values taken",
        cases.len(),
        VALUES.len(),
        CASES.len(),
        cases.len() - taken.len(),
        taken.len()
    );
    for args in &taken {
        println!("  taken: tessera {args}");
    }
    assert!(
        wrong.is_empty(),
        "{} cases:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // Most of the values are mistakes: a battery that found most taken
    // would be checking little.
    assert!(taken.len() * 3 < cases.len(), "{taken:#?}");
    let _ = std::fs::remove_dir_all(&dir);
}
