//! The result of one run: JSON on disk, a human table and `key=value` lines for scripts.

use std::fmt::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::LoadgenError;
use crate::machine::{cpu_list, MachineInfo};
use crate::procstat::ProcUsage;
use crate::stats::LatencySummary;
use crate::workload::{MaxRateMode, ProducerSettings, Workload};

/// Version of the JSON layout.
pub const RESULT_SCHEMA_VERSION: u32 = 1;
/// Bytes in the "MB" of `throughput_mb_s` (2^20, as Kafka's perf tools and the OpenMessaging
/// Benchmark count).
pub const MB_BYTES: f64 = 1_048_576.0;

/// Everything one run measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// [`RESULT_SCHEMA_VERSION`].
    pub schema_version: u32,
    /// The workload as run (after `--duration-s`).
    pub workload: Workload,
    /// `borges` or `kafka`.
    pub driver: String,
    /// Client library and settings.
    pub driver_info: Vec<String>,
    /// Bootstrap address.
    pub bootstrap: String,
    /// The command line of the run.
    pub command: String,
    /// Start, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// The machine.
    pub machine: MachineInfo,
    /// The broker process that was sampled, if any.
    pub broker_pid: Option<u32>,
    /// Totals and percentiles.
    pub summary: Summary,
    /// One entry per second.
    pub windows: Vec<Window>,
}

/// Totals over the measured part of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// Length of the measured interval.
    pub measured_s: f64,
    /// Acknowledged records per second.
    pub throughput_records_s: f64,
    /// Acknowledged value bytes per second / [`MB_BYTES`].
    pub throughput_mb_s: f64,
    /// Consumed records per second (all groups).
    pub consume_throughput_records_s: f64,
    /// Consumed value bytes per second / [`MB_BYTES`].
    pub consume_throughput_mb_s: f64,
    /// Publish latency: intended send -> acknowledgement.
    pub publish: LatencySummary,
    /// End-to-end latency: intended send -> consumer receive.
    pub e2e: LatencySummary,
    /// Records handed to producers over the whole run.
    pub sent_records: u64,
    /// Records acknowledged over the whole run.
    pub acked_records: u64,
    /// Records consumed over the whole run.
    pub consumed_records: u64,
    /// Failed sends and consumer errors.
    pub errors: u64,
    /// The first error message.
    pub first_error: Option<String>,
    /// For fixed-rate runs: records that should have been sent in the measured interval; the
    /// run did not keep up if `sent` is clearly below it.
    pub planned_records: Option<u64>,
    /// Mean broker CPU in percent of one core, over the measured interval.
    pub broker_cpu_pct_avg: Option<f64>,
    /// Peak broker resident memory.
    pub broker_rss_bytes_max: Option<u64>,
    /// Broker CPU seconds per GiB acknowledged (CPU cost of throughput).
    pub broker_cpu_s_per_gib: Option<f64>,
    /// Mean load-generator CPU in percent of one core.
    pub loadgen_cpu_pct_avg: f64,
    /// For catch-up workloads.
    pub backlog: Option<BacklogSummary>,
}

/// The catch-up phase of a backlog workload.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct BacklogSummary {
    /// Records in the backlog (acknowledged before consumers started).
    pub backlog_records: u64,
    /// Value bytes in the backlog.
    pub backlog_bytes: u64,
    /// Time the consumers took to read it all.
    pub catch_up_s: f64,
    /// True if the consumers read everything before the time limit.
    pub completed: bool,
}

/// One second of a run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Window {
    /// End of the window, seconds since the run started.
    pub t_s: f64,
    /// `warmup`, `measure`, `drain`, `backlog` or `catch-up`.
    pub phase: String,
    /// Records acknowledged in the window.
    pub produced_records: u64,
    /// Value bytes acknowledged in the window.
    pub produced_bytes: u64,
    /// Records consumed in the window.
    pub consumed_records: u64,
    /// Value bytes consumed in the window.
    pub consumed_bytes: u64,
    /// Errors in the window.
    pub errors: u64,
    /// Broker CPU and memory, if a broker process is known.
    pub broker: Option<ProcUsage>,
    /// Load-generator CPU in percent of one core.
    pub loadgen_cpu_pct: f64,
    /// Rate discovery: the total target rate chosen for the next window.
    #[serde(default)]
    pub target_rate_records_s: Option<f64>,
    /// Publish latency p99 of the records acknowledged in this window.
    #[serde(default)]
    pub publish_p99_ms: Option<f64>,
    /// Largest publish latency acknowledged in this window.
    #[serde(default)]
    pub publish_max_ms: Option<f64>,
}

impl Window {
    /// Produce throughput in MB/s (windows are one second, but the last may be shorter).
    pub fn produced_mb_s(&self, seconds: f64) -> f64 {
        self.produced_bytes as f64 / MB_BYTES / seconds.max(1e-9)
    }
}

impl RunResult {
    /// Writes the result as pretty JSON.
    pub fn write_json(&self, path: &Path) -> Result<(), LoadgenError> {
        let text =
            serde_json::to_string_pretty(self).map_err(|e| LoadgenError::Report(e.to_string()))?;
        std::fs::write(path, text).map_err(|source| LoadgenError::Io {
            path: path.display().to_string(),
            source,
        })
    }

    /// Reads a result written by [`Self::write_json`].
    pub fn read_json(path: &Path) -> Result<RunResult, LoadgenError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadgenError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let r: RunResult = serde_json::from_str(&text)
            .map_err(|e| LoadgenError::Report(format!("{}: {e}", path.display())))?;
        if r.schema_version != RESULT_SCHEMA_VERSION {
            return Err(LoadgenError::Report(format!(
                "{}: schema version {} (expected {RESULT_SCHEMA_VERSION})",
                path.display(),
                r.schema_version
            )));
        }
        Ok(r)
    }

    /// The human-readable summary table.
    pub fn human_table(&self) -> String {
        let s = &self.summary;
        let w = &self.workload;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "workload {} on {} ({}), {} s measured after {} s warm-up",
            w.name,
            self.driver,
            self.bootstrap,
            fmt_f(s.measured_s),
            w.run.warmup_s
        );
        let _ = writeln!(
            out,
            "  {} topic(s) x {} partition(s), {} B records, acks={}, durability={}, rate={}",
            w.topics,
            w.partitions_per_topic,
            w.record_size_bytes,
            w.producer.acks.as_kafka(),
            w.topic.durability.as_str(),
            rate_label(&w.producer)
        );
        let _ = writeln!(
            out,
            "  machine: {} cpus, loadgen on cpus {}",
            self.machine.cpus_online,
            cpu_list(&self.machine.loadgen_cpus)
        );
        let _ = writeln!(out);
        let _ = writeln!(out, "  {:<22} {:>14} {:>12}", "", "records/s", "MB/s");
        let _ = writeln!(
            out,
            "  {:<22} {:>14} {:>12}",
            "publish (acked)",
            fmt_f(s.throughput_records_s),
            fmt_f(s.throughput_mb_s)
        );
        let _ = writeln!(
            out,
            "  {:<22} {:>14} {:>12}",
            "consume",
            fmt_f(s.consume_throughput_records_s),
            fmt_f(s.consume_throughput_mb_s)
        );
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "  {:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "latency (ms)", "p50", "p99", "p99.9", "p99.99", "max", "count"
        );
        for (label, l) in [("publish", &s.publish), ("end-to-end", &s.e2e)] {
            let _ = writeln!(
                out,
                "  {:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                label,
                fmt_f(l.p50_ms),
                fmt_f(l.p99_ms),
                fmt_f(l.p999_ms),
                fmt_f(l.p9999_ms),
                fmt_f(l.max_ms),
                l.count
            );
        }
        let _ = writeln!(out);
        self.write_resources(&mut out);
        out
    }

    fn write_resources(&self, out: &mut String) {
        let s = &self.summary;
        if let (Some(cpu), Some(rss)) = (s.broker_cpu_pct_avg, s.broker_rss_bytes_max) {
            let _ = writeln!(
                out,
                "  broker (pid {}): cpu {}% avg, rss {} MiB max, {} cpu-s/GiB",
                self.broker_pid.unwrap_or(0),
                fmt_f(cpu),
                rss / (1 << 20),
                s.broker_cpu_s_per_gib.map_or("-".to_string(), fmt_f)
            );
        }
        let _ = writeln!(out, "  loadgen: cpu {}% avg", fmt_f(s.loadgen_cpu_pct_avg));
        let _ = writeln!(
            out,
            "  records: sent {}, acked {}, consumed {}, errors {}",
            s.sent_records, s.acked_records, s.consumed_records, s.errors
        );
        if let Some(p) = s.planned_records {
            let _ = writeln!(out, "  planned at the target rate: {p}");
        }
        if let Some(b) = s.backlog {
            let _ = writeln!(
                out,
                "  catch-up: {} records ({} MiB) read in {} s{}",
                b.backlog_records,
                b.backlog_bytes >> 20,
                fmt_f(b.catch_up_s),
                if b.completed { "" } else { " (INCOMPLETE)" }
            );
        }
        if let Some(e) = &s.first_error {
            let _ = writeln!(out, "  first error: {e}");
        }
    }

    /// `key=value` lines, one per line, for scripts.
    pub fn machine_lines(&self) -> String {
        let s = &self.summary;
        let mut lines = vec![
            ("throughput_mb_s", num(s.throughput_mb_s)),
            ("throughput_records_s", num(s.throughput_records_s)),
            ("publish_p50_ms", num(s.publish.p50_ms)),
            ("publish_p99_ms", num(s.publish.p99_ms)),
            ("publish_p999_ms", num(s.publish.p999_ms)),
            ("publish_p9999_ms", num(s.publish.p9999_ms)),
            ("publish_max_ms", num(s.publish.max_ms)),
            ("e2e_p50_ms", num(s.e2e.p50_ms)),
            ("e2e_p99_ms", num(s.e2e.p99_ms)),
            ("e2e_p999_ms", num(s.e2e.p999_ms)),
            ("consume_throughput_mb_s", num(s.consume_throughput_mb_s)),
            (
                "consume_throughput_records_s",
                num(s.consume_throughput_records_s),
            ),
            ("errors", s.errors.to_string()),
        ];
        if let Some(cpu) = s.broker_cpu_pct_avg {
            lines.push(("broker_cpu_pct_avg", num(cpu)));
        }
        if let Some(b) = s.backlog {
            lines.push(("catch_up_s", num(b.catch_up_s)));
        }
        lines
            .into_iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect()
    }
}

/// A number for `key=value` lines: up to 3 decimals, no exponent.
pub fn num(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.3}")
    } else {
        "0".to_string()
    }
}

/// A number for tables: 3 significant digits for small values, thousands separated for large.
pub fn fmt_f(v: f64) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    if v == 0.0 {
        return "0".to_string();
    }
    let a = v.abs();
    if a >= 10_000.0 {
        group_thousands(v.round() as i64)
    } else if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn group_thousands(v: i64) -> String {
    let digits = v.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// `max (discover)`, `max (unthrottled)` or `N/s`.
pub fn rate_label(p: &ProducerSettings) -> String {
    match (p.rate_records_s, p.max_rate_mode) {
        (0, MaxRateMode::Discover) => "max (discover)".to_string(),
        (0, MaxRateMode::Unthrottled) => "max (unthrottled)".to_string(),
        (rate, _) => format!("{rate}/s"),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample_result(driver: &str, mb_s: f64, p999: f64) -> RunResult {
        let workload = Workload::from_toml(
            r#"
            name = "w1"
            topics = 1
            partitions_per_topic = 2
            record_size_bytes = 1024
            [producer]
            [run]
            duration_s = 3
            "#,
        )
        .unwrap();
        let windows = (1..=3)
            .map(|i| Window {
                t_s: f64::from(i),
                phase: "measure".into(),
                produced_records: 1000 * i as u64,
                produced_bytes: 1024 * 1000 * i as u64,
                publish_p99_ms: Some(f64::from(i)),
                publish_max_ms: Some(f64::from(i) * 2.0),
                ..Default::default()
            })
            .collect();
        RunResult {
            schema_version: RESULT_SCHEMA_VERSION,
            workload,
            driver: driver.into(),
            driver_info: vec![],
            bootstrap: "127.0.0.1:1".into(),
            command: "borges-loadgen run".into(),
            started_unix_s: 1,
            machine: MachineInfo::default(),
            broker_pid: Some(42),
            summary: Summary {
                measured_s: 3.0,
                throughput_mb_s: mb_s,
                throughput_records_s: mb_s * 1024.0,
                publish: LatencySummary {
                    count: 10,
                    p50_ms: 1.0,
                    p99_ms: 2.0,
                    p999_ms: p999,
                    p9999_ms: p999 * 2.0,
                    max_ms: p999 * 3.0,
                    mean_ms: 1.1,
                },
                broker_cpu_pct_avg: Some(90.0),
                broker_rss_bytes_max: Some(100 << 20),
                ..Default::default()
            },
            windows,
        }
    }

    #[test]
    fn machine_lines_have_the_required_keys_once_each() {
        let text = sample_result("borges", 123.4567, 4.0).machine_lines();
        for key in [
            "throughput_mb_s=",
            "throughput_records_s=",
            "publish_p50_ms=",
            "publish_p99_ms=",
            "publish_p999_ms=",
            "e2e_p99_ms=",
        ] {
            let n = text.lines().filter(|l| l.starts_with(key)).count();
            assert_eq!(n, 1, "{key} in\n{text}");
        }
        assert!(text.contains("throughput_mb_s=123.457\n"));
        assert!(text.contains("publish_p999_ms=4.000\n"));
    }

    #[test]
    fn json_round_trips_and_rejects_other_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r.json");
        let r = sample_result("kafka", 10.0, 5.0);
        r.write_json(&path).unwrap();
        assert_eq!(RunResult::read_json(&path).unwrap(), r);
        let mut other = r.clone();
        other.schema_version = 99;
        other.write_json(&path).unwrap();
        assert!(RunResult::read_json(&path).is_err());
        assert!(RunResult::read_json(&dir.path().join("missing.json")).is_err());
    }

    #[test]
    fn human_table_names_the_essentials() {
        let t = sample_result("borges", 10.0, 5.0).human_table();
        for s in [
            "w1",
            "borges",
            "publish",
            "end-to-end",
            "p99.9",
            "broker (pid 42)",
        ] {
            assert!(t.contains(s), "{s} missing in\n{t}");
        }
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_f(1234567.4), "1,234,567");
        assert_eq!(fmt_f(123.4), "123");
        assert_eq!(fmt_f(12.34), "12.3");
        assert_eq!(fmt_f(1.234), "1.23");
        assert_eq!(fmt_f(0.1234), "0.123");
        assert_eq!(fmt_f(f64::NAN), "-");
        assert_eq!(fmt_f(0.0), "0");
        assert_eq!(num(f64::INFINITY), "0");
        assert_eq!(num(1.0), "1.000");
        let mut p = sample_result("x", 1.0, 1.0).workload.producer;
        assert_eq!(rate_label(&p), "max (discover)");
        p.max_rate_mode = MaxRateMode::Unthrottled;
        assert_eq!(rate_label(&p), "max (unthrottled)");
        p.rate_records_s = 5;
        assert_eq!(rate_label(&p), "5/s");
    }
}
