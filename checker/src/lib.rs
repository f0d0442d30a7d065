//! The Borges fault suite's checker: a history model, a recorder, and Jepsen-style analyses
//! of the Kafka "queue" workload (after jepsen/src/jepsen/tests/kafka.clj), plus replica and
//! metadata-log comparisons.
//!
//! Use:
//! 1. Record: one [`Recorder`] per run, cloned into every producer and consumer task
//!    ([`Recorder::send`] → [`PendingSend::ok`] / `fail` / `info` / `error_code`,
//!    [`Recorder::assign`], [`Recorder::seek`], [`Recorder::poll`], [`Recorder::final_read`] +
//!    [`Recorder::final_end`], [`Recorder::fault_start`] / [`Recorder::fault_end`]).
//! 2. Check: [`check`] with the history ([`History::read_jsonl`]), the replicas
//!    ([`replica::read_node`] per broker's copied data directory) and the metadata logs.
//! 3. Report: [`Report::anomalies`], and [`Report::summary`] whose `Display` is the suite's last
//!    line. The `borges-checker` binary does all three for the fault-suite script.
//!
//! Which anomalies exist and what the history looks like: docs/reliability.md ("The checker")
//! and the [`history`] module.

pub mod anomaly;
pub mod history;
pub mod metadata;
pub mod model;
pub mod order;
pub mod queue;
pub mod recorder;
pub mod replica;
pub mod timing;

#[cfg(test)]
mod inject;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::Serialize;

pub use anomaly::{Anomaly, Summary};
pub use history::{ConsumerMode, Event, EventKind, History, HistoryError};
pub use metadata::{MetadataEntry, MetadataLog};
pub use recorder::{classify_send_error, PendingSend, Recorder, SendErrorClass};
pub use replica::ReplicaLog;
pub use timing::FaultReport;

use history::{Offset, Partition};
use model::{Model, SendStatus};

/// Default liveness window: acknowledged writes must resume within 5 s of a heal.
pub const LIVENESS_WINDOW_MS_DEFAULT: u64 = 5_000;

/// Knobs of the analyses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckOptions {
    /// After a fault heals, each affected partition must acknowledge a write within this.
    pub liveness_window_ms: u64,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            liveness_window_ms: LIVENESS_WINDOW_MS_DEFAULT,
        }
    }
}

/// Everything the checker found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    /// The anomalies, grouped by analysis.
    pub anomalies: Vec<Anomaly>,
    /// The counts; `Display` is the suite's last line.
    pub summary: Summary,
    /// One per injected fault, with its failover times.
    pub faults: Vec<FaultReport>,
    /// What could not be judged, and why (not anomalies).
    pub notes: Vec<String>,
    /// Per partition, the high watermark of its complete final read (the lowest if several).
    pub final_hw: BTreeMap<Partition, Offset>,
}

/// Checks a history alone.
pub fn check_history(history: &History, options: &CheckOptions) -> Result<Report, HistoryError> {
    check(history, &[], &[], options)
}

/// Checks a history, the replicas of its partitions (compared up to each partition's final
/// read high watermark) and the metadata logs.
pub fn check(
    history: &History,
    replicas: &[ReplicaLog],
    metadata_logs: &[MetadataLog],
    options: &CheckOptions,
) -> Result<Report, HistoryError> {
    let model = Model::build(history)?;
    let mut report = Report::default();
    let order = order::consumer_order(history, &model);
    report
        .anomalies
        .extend(queue::lost_writes(&model, &order.passed));
    report.anomalies.extend(queue::duplicates(&model));
    report.anomalies.extend(queue::inconsistent_offsets(&model));
    report.anomalies.extend(queue::bad_reads(&model));
    report.anomalies.extend(order.anomalies);
    report.anomalies.extend(order::final_read_gaps(&model));
    report.anomalies.extend(order::non_monotonic_sends(&model));
    for process in order.unassigned_pollers {
        report.notes.push(format!(
            "p{process} polled before any assign: its order is not checked"
        ));
    }
    let timing = timing::timing(history, &model, options.liveness_window_ms);
    report.anomalies.extend(timing.anomalies);
    report.notes.extend(timing.notes);
    report.faults = timing.faults;
    for (&partition, view) in &model.partitions {
        if let Some(hw) = view.complete_finals().map(|(_, _, hw)| hw).min() {
            report.final_hw.insert(partition, hw);
        } else if view.read_values.is_empty() && view.finals.is_empty() {
            report.notes.push(format!(
                "partition {partition}: never read; lost writes cannot be judged there"
            ));
        } else {
            report.notes.push(format!(
                "partition {partition}: no complete final read; lost writes judged from polls only"
            ));
        }
    }
    if !replicas.is_empty() {
        let hw: BTreeMap<(String, Partition), Offset> = replicas
            .iter()
            .filter(|r| history.topic().is_none_or(|t| t == r.topic))
            .filter_map(|r| {
                let hw = report.final_hw.get(&r.partition)?;
                Some(((r.topic.clone(), r.partition), *hw))
            })
            .collect();
        let comparison = replica::compare(replicas, &hw);
        report.anomalies.extend(comparison.anomalies);
        report.notes.extend(comparison.notes);
    }
    report.anomalies.extend(metadata::compare(metadata_logs));
    if let Some(bound) = metadata_logs.iter().map(|l| l.commit_index).min() {
        report.notes.push(format!(
            "metadata logs of {} nodes compared up to the lowest commit index {bound}",
            metadata_logs.len()
        ));
    }
    let acked = model
        .sends
        .iter()
        .filter(|s| matches!(s.status, SendStatus::Ok(_)))
        .count();
    report.summary = Summary::count(&report.anomalies, acked, timing.failover_ms_max);
    Ok(report)
}
