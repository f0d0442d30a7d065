//! Metrics: counters and latency histograms kept per core without synchronisation, gathered by
//! message into snapshots and rendered in the Prometheus text format by the metrics endpoint.
//!
//! A leaf module: it names no other broker module; what it reports about partitions, groups
//! and connections is handed to [`CoreMetrics::snapshot`] as plain values.

use std::cell::{Cell, RefCell};
use std::fmt::Write as _;
use std::time::Duration;

use borges_protocol::ApiKey;
use hdrhistogram::Histogram;

/// API keys tracked (keys at or above are counted as the last slot).
const API_SLOTS: usize = 32;

/// One core's metrics. Lives on one core.
pub struct CoreMetrics {
    core: usize,
    requests: [Cell<u64>; API_SLOTS],
    refused: [Cell<u64>; API_SLOTS],
    latency_us: RefCell<Vec<Option<Histogram<u64>>>>,
    /// Bytes read from client sockets.
    pub bytes_received: Cell<u64>,
    /// Bytes written to client sockets.
    pub bytes_sent: Cell<u64>,
    /// Part of `bytes_sent` sent with sendfile.
    pub bytes_sendfile: Cell<u64>,
    /// Record batch bytes appended.
    pub produce_bytes: Cell<u64>,
    /// Records appended.
    pub produce_records: Cell<u64>,
    /// Produce partitions refused during validation.
    pub produce_rejected: Cell<u64>,
    /// Produce partitions that failed after validation.
    pub produce_failed: Cell<u64>,
    /// Record batch bytes returned by fetches.
    pub fetch_bytes: Cell<u64>,
    /// Connections accepted.
    pub connections_opened: Cell<u64>,
    /// Connections closed.
    pub connections_closed: Cell<u64>,
    /// Connections refused (connections_max).
    pub connections_refused: Cell<u64>,
    /// Frames that could not be decoded.
    pub malformed_frames: Cell<u64>,
    /// Frames not received whole within `frame_read_timeout_ms`.
    pub frames_timed_out: Cell<u64>,
    /// Accepts that failed for want of file descriptors (EMFILE, ENFILE).
    pub accept_descriptor_errors: Cell<u64>,
    /// Requests (or parts of them) forwarded to another core.
    pub forwarded: Cell<u64>,
    /// Cleanings of compacted partitions done.
    pub cleaner_runs: Cell<u64>,
    /// Bytes of segments the cleaner replaced.
    pub cleaner_bytes_in: Cell<u64>,
    /// Bytes of the segments the cleaner wrote in their place.
    pub cleaner_bytes_out: Cell<u64>,
    /// Wall-clock ms of the cleaner's last cleaning (0: none yet).
    pub cleaner_last_run_ms: Cell<u64>,
}

/// A core's metrics at one moment; crosses cores.
pub struct MetricsSnapshot {
    /// Core index.
    pub core: usize,
    /// (api key, count).
    pub requests: Vec<(u16, u64, u64)>,
    /// Latency histograms in microseconds, by API key.
    pub latency_us: Vec<(u16, Histogram<u64>)>,
    /// Named counters.
    pub counters: Vec<(&'static str, u64)>,
    /// Named gauges.
    pub gauges: Vec<(&'static str, u64)>,
    /// The core's log directory and its state (one of [`LOG_DIR_STATES`]).
    pub log_dir: (String, &'static str),
    /// Per-partition figures of the partitions this core owns.
    pub partitions: Vec<PartitionStats>,
    /// Committed offsets of the groups this core coordinates: (group, topic, partition, offset).
    pub group_offsets: Vec<(String, String, i32, i64)>,
}

/// Figures of one partition.
#[derive(Debug, Clone)]
pub struct PartitionStats {
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: u32,
    /// Log start offset.
    pub log_start_offset: i64,
    /// High watermark.
    pub high_watermark: i64,
    /// Log end offset.
    pub log_end_offset: i64,
    /// Bytes on disk.
    pub size_bytes: u64,
    /// Segment count.
    pub segments: usize,
    /// Idempotent producers remembered.
    pub producers: usize,
    /// Compacted partitions: dirty bytes / cleanable bytes (the cleaner's lag), 0..1.
    pub cleaner_dirty_ratio: Option<f64>,
}

impl CoreMetrics {
    /// Empty metrics for core `core`.
    pub fn new(core: usize) -> CoreMetrics {
        CoreMetrics {
            core,
            requests: std::array::from_fn(|_| Cell::new(0)),
            refused: std::array::from_fn(|_| Cell::new(0)),
            latency_us: RefCell::new((0..API_SLOTS).map(|_| None).collect()),
            bytes_received: Cell::new(0),
            bytes_sent: Cell::new(0),
            bytes_sendfile: Cell::new(0),
            produce_bytes: Cell::new(0),
            produce_records: Cell::new(0),
            produce_rejected: Cell::new(0),
            produce_failed: Cell::new(0),
            fetch_bytes: Cell::new(0),
            connections_opened: Cell::new(0),
            connections_closed: Cell::new(0),
            connections_refused: Cell::new(0),
            malformed_frames: Cell::new(0),
            frames_timed_out: Cell::new(0),
            accept_descriptor_errors: Cell::new(0),
            forwarded: Cell::new(0),
            cleaner_runs: Cell::new(0),
            cleaner_bytes_in: Cell::new(0),
            cleaner_bytes_out: Cell::new(0),
            cleaner_last_run_ms: Cell::new(0),
        }
    }

    fn slot(key: u16) -> usize {
        usize::from(key).min(API_SLOTS - 1)
    }

    /// Counts a request (refused before its handler ran, or not).
    pub fn count_request(&self, key: u16, refused: bool) {
        let cells = if refused {
            &self.refused
        } else {
            &self.requests
        };
        let c = &cells[Self::slot(key)];
        c.set(c.get() + 1);
    }

    /// Records the time from a request's decode to its response being ready.
    pub fn record_latency(&self, api: ApiKey, elapsed: Duration) {
        let mut h = self.latency_us.borrow_mut();
        let slot = &mut h[Self::slot(api as u16)];
        if slot.is_none() {
            *slot = Histogram::new_with_bounds(1, 3_600_000_000, 3).ok();
        }
        if let Some(h) = slot {
            let _ = h.record((elapsed.as_micros() as u64).max(1));
        }
    }

    /// Counts appended bytes and records.
    pub fn record_produce(&self, bytes: u64, records: u64) {
        self.produce_bytes.set(self.produce_bytes.get() + bytes);
        self.produce_records
            .set(self.produce_records.get() + records);
    }

    /// Counts fetched bytes.
    pub fn record_fetch(&self, bytes: u64) {
        self.fetch_bytes.set(self.fetch_bytes.get() + bytes);
    }

    /// A snapshot of this core, with the figures its services report.
    pub fn snapshot(&self, report: CoreReport) -> MetricsSnapshot {
        let requests = (0..API_SLOTS)
            .filter(|&i| self.requests[i].get() + self.refused[i].get() > 0)
            .map(|i| (i as u16, self.requests[i].get(), self.refused[i].get()))
            .collect();
        let latency_us = self
            .latency_us
            .borrow()
            .iter()
            .enumerate()
            .filter_map(|(i, h)| h.as_ref().map(|h| (i as u16, h.clone())))
            .collect();
        let counters = vec![
            ("borges_bytes_received_total", self.bytes_received.get()),
            ("borges_bytes_sent_total", self.bytes_sent.get()),
            ("borges_bytes_sendfile_total", self.bytes_sendfile.get()),
            ("borges_produce_bytes_total", self.produce_bytes.get()),
            ("borges_produce_records_total", self.produce_records.get()),
            ("borges_produce_rejected_total", self.produce_rejected.get()),
            ("borges_produce_failed_total", self.produce_failed.get()),
            ("borges_fetch_bytes_total", self.fetch_bytes.get()),
            (
                "borges_connections_opened_total",
                self.connections_opened.get(),
            ),
            (
                "borges_connections_refused_total",
                self.connections_refused.get(),
            ),
            ("borges_malformed_frames_total", self.malformed_frames.get()),
            ("borges_frames_timed_out_total", self.frames_timed_out.get()),
            (
                "borges_accept_descriptor_errors_total",
                self.accept_descriptor_errors.get(),
            ),
            ("borges_cross_core_forwards_total", self.forwarded.get()),
            ("borges_cleaner_runs_total", self.cleaner_runs.get()),
            ("borges_cleaner_bytes_in_total", self.cleaner_bytes_in.get()),
            (
                "borges_cleaner_bytes_out_total",
                self.cleaner_bytes_out.get(),
            ),
        ];
        let gauges = vec![
            ("borges_connections", u64::from(report.connections)),
            ("borges_cleaner_last_run_ms", self.cleaner_last_run_ms.get()),
            ("borges_storage_unflushed_bytes", report.unflushed_bytes),
            ("borges_storage_tail_cache_bytes", report.tail_cache_bytes),
            ("borges_storage_open_descriptors", report.open_descriptors),
            (
                "borges_request_memory_available_bytes",
                report.request_memory_available_bytes,
            ),
        ];
        MetricsSnapshot {
            core: self.core,
            requests,
            latency_us,
            counters,
            gauges,
            log_dir: (report.log_dir, report.log_dir_state),
            partitions: report.partitions,
            group_offsets: report.group_offsets,
        }
    }
}

/// What a core's services report for a snapshot.
pub struct CoreReport {
    /// Open connections.
    pub connections: u32,
    /// Bytes appended and not yet flushed.
    pub unflushed_bytes: u64,
    /// Bytes in the tail cache.
    pub tail_cache_bytes: u64,
    /// Descriptors storage holds (at most its budget, `StorageConfig::descriptors_max`).
    pub open_descriptors: u64,
    /// The core's log directory.
    pub log_dir: String,
    /// Its state: one of [`LOG_DIR_STATES`].
    pub log_dir_state: &'static str,
    /// Request memory not in use.
    pub request_memory_available_bytes: u64,
    /// The partitions the core owns.
    pub partitions: Vec<PartitionStats>,
    /// Committed offsets of the groups the core coordinates: (group, topic, partition, offset).
    pub group_offsets: Vec<(String, String, i32, i64)>,
}

fn api_name(key: u16) -> &'static str {
    ApiKey::from_u16(key).map_or("Unknown", |k| k.name())
}

/// Renders snapshots of every core in the Prometheus text exposition format.
pub fn render(snapshots: &[MetricsSnapshot]) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = writeln!(out, "# TYPE borges_requests_total counter");
    for s in snapshots {
        for (key, ok, _) in &s.requests {
            let _ = writeln!(
                out,
                "borges_requests_total{{core=\"{}\",api=\"{}\"}} {ok}",
                s.core,
                api_name(*key)
            );
        }
    }
    let _ = writeln!(out, "# TYPE borges_requests_refused_total counter");
    for s in snapshots {
        for (key, _, refused) in &s.requests {
            let _ = writeln!(
                out,
                "borges_requests_refused_total{{core=\"{}\",api=\"{}\"}} {refused}",
                s.core,
                api_name(*key)
            );
        }
    }
    render_latency(&mut out, snapshots);
    if let Some(first) = snapshots.first() {
        for (i, (name, _)) in first.counters.iter().enumerate() {
            let _ = writeln!(out, "# TYPE {name} counter");
            for s in snapshots {
                let _ = writeln!(out, "{name}{{core=\"{}\"}} {}", s.core, s.counters[i].1);
            }
        }
        for (i, (name, _)) in first.gauges.iter().enumerate() {
            let _ = writeln!(out, "# TYPE {name} gauge");
            for s in snapshots {
                let _ = writeln!(out, "{name}{{core=\"{}\"}} {}", s.core, s.gauges[i].1);
            }
        }
    }
    render_log_dirs(&mut out, snapshots);
    render_partitions(&mut out, snapshots);
    render_lag(&mut out, snapshots);
    out
}

/// The states a log directory can be in, as `borges_log_dir_state` labels them: writable
/// (online), read-only (disk full: reads go on, writes resume once space is freed), failed (an
/// IO error: offline until a restart).
pub const LOG_DIR_STATES: [&str; 3] = ["writable", "read_only", "failed"];

/// `borges_log_dir_state{core, dir, state}`: 1 for the state each core's directory is in, 0 for
/// the others.
fn render_log_dirs(out: &mut String, snapshots: &[MetricsSnapshot]) {
    let _ = writeln!(out, "# TYPE borges_log_dir_state gauge");
    for s in snapshots {
        let (dir, current) = &s.log_dir;
        strict_assert!(LOG_DIR_STATES.contains(current), "unknown state {current}");
        let dir = dir.replace('\\', "\\\\").replace('"', "\\\"");
        for state in LOG_DIR_STATES {
            let _ = writeln!(
                out,
                "borges_log_dir_state{{core=\"{}\",dir=\"{dir}\",state=\"{state}\"}} {}",
                s.core,
                u8::from(state == *current)
            );
        }
    }
}

/// Committed offsets and lag (high watermark - committed) per group and partition.
fn render_lag(out: &mut String, snapshots: &[MetricsSnapshot]) {
    let hw: std::collections::HashMap<(&str, u32), i64> = snapshots
        .iter()
        .flat_map(|s| s.partitions.iter())
        .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
        .collect();
    let _ = writeln!(out, "# TYPE borges_consumer_group_committed_offset gauge");
    for s in snapshots {
        for (g, t, p, offset) in &s.group_offsets {
            let _ = writeln!(
                out,
                "borges_consumer_group_committed_offset{{group=\"{g}\",topic=\"{t}\",partition=\"{p}\"}} {offset}"
            );
        }
    }
    let _ = writeln!(out, "# TYPE borges_consumer_group_lag gauge");
    for s in snapshots {
        for (g, t, p, offset) in &s.group_offsets {
            if let Some(h) = hw.get(&(t.as_str(), *p as u32)) {
                let _ = writeln!(
                    out,
                    "borges_consumer_group_lag{{group=\"{g}\",topic=\"{t}\",partition=\"{p}\"}} {}",
                    (h - offset).max(0)
                );
            }
        }
    }
}

fn render_latency(out: &mut String, snapshots: &[MetricsSnapshot]) {
    let mut merged: Vec<(u16, Histogram<u64>)> = Vec::new();
    for s in snapshots {
        for (key, h) in &s.latency_us {
            match merged.iter_mut().find(|(k, _)| k == key) {
                Some((_, m)) => {
                    let _ = m.add(h);
                }
                None => merged.push((*key, h.clone())),
            }
        }
    }
    merged.sort_by_key(|(k, _)| *k);
    let _ = writeln!(out, "# TYPE borges_request_latency_seconds summary");
    for (key, h) in &merged {
        let api = api_name(*key);
        for q in [0.5, 0.9, 0.99, 0.999] {
            let _ = writeln!(
                out,
                "borges_request_latency_seconds{{api=\"{api}\",quantile=\"{q}\"}} {:.6}",
                h.value_at_quantile(q) as f64 / 1e6
            );
        }
        let sum: f64 = h.mean() * h.len() as f64 / 1e6;
        let _ = writeln!(
            out,
            "borges_request_latency_seconds_sum{{api=\"{api}\"}} {sum:.6}"
        );
        let _ = writeln!(
            out,
            "borges_request_latency_seconds_count{{api=\"{api}\"}} {}",
            h.len()
        );
    }
}

fn render_partitions(out: &mut String, snapshots: &[MetricsSnapshot]) {
    type Getter = fn(&PartitionStats) -> String;
    let series: [(&str, Getter); 7] = [
        ("borges_partition_log_start_offset", |p| {
            p.log_start_offset.to_string()
        }),
        ("borges_partition_high_watermark", |p| {
            p.high_watermark.to_string()
        }),
        ("borges_partition_log_end_offset", |p| {
            p.log_end_offset.to_string()
        }),
        ("borges_partition_size_bytes", |p| p.size_bytes.to_string()),
        ("borges_partition_segments", |p| p.segments.to_string()),
        ("borges_partition_producers", |p| p.producers.to_string()),
        ("borges_partition_cleaner_dirty_ratio", |p| {
            p.cleaner_dirty_ratio
                .map_or(String::new(), |r| format!("{r:.3}"))
        }),
    ];
    for (name, get) in series {
        let _ = writeln!(out, "# TYPE {name} gauge");
        for s in snapshots {
            for p in &s.partitions {
                let value = get(p);
                if value.is_empty() {
                    continue;
                }
                let _ = writeln!(
                    out,
                    "{name}{{topic=\"{}\",partition=\"{}\",core=\"{}\"}} {}",
                    p.topic, p.partition, s.core, value
                );
            }
        }
    }
}
