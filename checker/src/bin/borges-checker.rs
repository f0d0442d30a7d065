//! `borges-checker`: checks a fault-suite run, and lets a shell script record fault events.
//!
//! ```text
//! borges-checker check --history run.jsonl [--history faults.jsonl] \
//!     [--replica 1=/keep/data-1 --replica 2=... ] [--topic T] [--metadata meta.json] \
//!     [--metadata-dir 1=/keep/data-1 ...] [--json]
//! borges-checker fault --history faults.jsonl start --id kill-1 --fault kill-leader \
//!     --target "node 2" [--partitions 0,3]
//! borges-checker fault --history faults.jsonl end --id kill-1
//! ```
//!
//! `check` prints each anomaly, the faults with their failover times and the notes, then the
//! summary line last; it exits 0 without anomalies, 1 with anomalies, 2 when it cannot check.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use borges_checker::history::Partition;
use borges_checker::{replica, CheckOptions, History, MetadataLog, Recorder, Report};
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "borges-checker", about = "Checks Borges fault-suite histories")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Checks histories (merged), replica copies and metadata logs.
    Check {
        /// A history file (JSON lines); repeat to merge (driver + fault injector).
        #[arg(long = "history", required = true)]
        histories: Vec<PathBuf>,
        /// NODE=DIR: a copy of broker NODE's data directory.
        #[arg(long = "replica")]
        replicas: Vec<String>,
        /// The workload's topic (default: the history's header).
        #[arg(long)]
        topic: Option<String>,
        /// A JSON array of metadata logs: [{"node":1,"commit_index":9,"entries":[{"index":1,"term":1,"checksum":7},...]}].
        #[arg(long)]
        metadata: Option<PathBuf>,
        /// NODE=DIR: read broker NODE's metadata log from its data directory DIR (meta/).
        #[arg(long = "metadata-dir")]
        metadata_dirs: Vec<String>,
        /// Writes must resume within this after a heal.
        #[arg(long, default_value_t = borges_checker::LIVENESS_WINDOW_MS_DEFAULT)]
        liveness_window_ms: u64,
        /// Prints the whole report as JSON before the summary line.
        #[arg(long)]
        json: bool,
    },
    /// Appends a fault event (CLOCK_MONOTONIC time) to a history file.
    Fault {
        /// The history file to append to.
        #[arg(long)]
        history: PathBuf,
        #[command(subcommand)]
        phase: Phase,
    },
}

#[derive(Subcommand)]
enum Phase {
    /// The fault starts now.
    Start {
        /// Pairs start and end.
        #[arg(long)]
        id: String,
        /// The fault's name.
        #[arg(long)]
        fault: String,
        /// What it hits.
        #[arg(long, default_value = "")]
        target: String,
        /// Affected partitions, comma-separated (default: all).
        #[arg(long, value_delimiter = ',')]
        partitions: Vec<Partition>,
    },
    /// The fault is healed now.
    End {
        /// The start's id.
        #[arg(long)]
        id: String,
    },
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("borges-checker: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode> {
    match args.command {
        Command::Fault { history, phase } => {
            let recorder = Recorder::append(&history, 0)
                .with_context(|| format!("opening {}", history.display()))?;
            match phase {
                Phase::Start {
                    id,
                    fault,
                    target,
                    partitions,
                } => recorder.fault_start(&id, &fault, &target, &partitions),
                Phase::End { id } => recorder.fault_end(&id),
            }
            recorder.flush().context("writing the fault event")?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Check {
            histories,
            replicas,
            topic,
            metadata,
            metadata_dirs,
            liveness_window_ms,
            json,
        } => {
            let options = CheckOptions { liveness_window_ms };
            let mut metadata_logs = read_metadata_json(metadata)?;
            for spec in &metadata_dirs {
                let (node, dir) = node_dir(spec, "--metadata-dir")?;
                metadata_logs.push(borges_checker::metadata::read_node(node, dir.as_ref())?);
            }
            let report = check(&histories, &replicas, topic, &metadata_logs, &options)?;
            print(&report, json)?;
            Ok(if report.summary.anomalies > 0 {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            })
        }
    }
}

fn check(
    histories: &[PathBuf],
    replicas: &[String],
    topic: Option<String>,
    metadata_logs: &[MetadataLog],
    options: &CheckOptions,
) -> Result<Report> {
    let mut loaded = Vec::new();
    for path in histories {
        loaded.push(History::read_jsonl(path)?);
    }
    let history = History::merge(loaded)?;
    let topic = topic.or_else(|| history.topic().map(str::to_string));
    let mut logs = Vec::new();
    for spec in replicas {
        let (node, dir) = node_dir(spec, "--replica")?;
        let Some(topic) = topic.as_deref() else {
            bail!("--replica needs the topic: pass --topic or record a header event");
        };
        logs.extend(replica::read_node(node, dir.as_ref(), topic)?);
    }
    Ok(borges_checker::check(
        &history,
        &logs,
        metadata_logs,
        options,
    )?)
}

/// `NODE=DIR` of `--replica` and `--metadata-dir`.
fn node_dir<'a>(spec: &'a str, flag: &str) -> Result<(u64, &'a str)> {
    let Some((node, dir)) = spec.split_once('=') else {
        bail!("{flag} {spec}: expected NODE=DIR");
    };
    let node: u64 = node
        .parse()
        .with_context(|| format!("{flag} {spec}: NODE is not a number"))?;
    Ok((node, dir))
}

/// The logs of `--metadata FILE` (none without it).
fn read_metadata_json(metadata: Option<PathBuf>) -> Result<Vec<MetadataLog>> {
    let Some(path) = metadata else {
        return Ok(Vec::new());
    };
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
}

fn print(report: &Report, json: bool) -> Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        for anomaly in &report.anomalies {
            println!("anomaly {anomaly}");
        }
        for fault in &report.faults {
            let failover: Vec<String> = fault
                .failover_ms
                .iter()
                .map(|(p, ms)| {
                    format!("{p}:{}", ms.map_or("none".to_string(), |ms| ms.to_string()))
                })
                .collect();
            println!(
                "fault {} {} target '{}' at {} healed {} failover_ms {}",
                fault.id,
                fault.fault,
                fault.target,
                fault.start,
                fault.end.map_or("never".to_string(), |w| w.to_string()),
                failover.join(",")
            );
        }
        for note in &report.notes {
            println!("note {note}");
        }
    }
    println!("{}", report.summary);
    Ok(())
}
