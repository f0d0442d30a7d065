//! Metrics: counters and fixed-bucket histograms kept per core without synchronisation,
//! gathered by message into snapshots and, at each scrape, built into families (bounded per
//! family by `metrics.series_per_family_max`) that `prometheus-client` encodes.
//!
//! A leaf module: it names no other broker module; what it reports about partitions, groups,
//! connections and the cluster is handed to it as plain values ([`CoreReport`],
//! [`BrokerFigures`]).

mod expose;
mod families;
mod histogram;
mod process;

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use borges_protocol::acl::ResourceType;
use borges_protocol::ApiKey;

pub use families::{render, BrokerFigures, ClusterFigures, MetricsOptions};
pub use histogram::{Buckets, HistogramSnapshot, LATENCY_BOUNDS_S, SIZE_BOUNDS_BYTES};
pub use process::{mark_start, read_host, uptime_s, DiskSpace};

/// API keys tracked (keys at or above are counted as the last slot).
const API_SLOTS: usize = 32;

/// Resource types an authorization failure is counted by (the ACL model's, in wire order).
const RESOURCE_SLOTS: usize = ResourceType::ALL.len();

/// Traffic of one topic on one core.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicTraffic {
    /// Record batch bytes appended.
    pub bytes_in: u64,
    /// Records appended.
    pub records_in: u64,
    /// Record batch bytes returned by fetches.
    pub bytes_out: u64,
}

/// One core's metrics. Lives on one core.
pub struct CoreMetrics {
    core: usize,
    requests: [Cell<u64>; API_SLOTS],
    refused: [Cell<u64>; API_SLOTS],
    authorization_failures: [[Cell<u64>; RESOURCE_SLOTS]; API_SLOTS],
    latency: RefCell<Vec<Option<Buckets>>>,
    produce_request_bytes: Buckets,
    fetch_response_bytes: Buckets,
    fsync: Buckets,
    topics: RefCell<HashMap<Arc<str>, TopicTraffic>>,
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
    /// TLS handshakes completed.
    pub tls_handshakes: Cell<u64>,
    /// TLS handshakes that failed (bad certificate, protocol error, timeout, peer gone).
    pub tls_handshake_failures: Cell<u64>,
    /// Connections refused for sending plaintext to a TLS listener.
    pub tls_plaintext_refused: Cell<u64>,
    /// SASL authentications that succeeded.
    pub sasl_authentications: Cell<u64>,
    /// SASL exchanges that failed (bad credentials, malformed, out of sequence).
    pub sasl_authentication_failures: Cell<u64>,
    /// Follower fetch connections whose SASL authentication to the leader failed.
    pub replica_fetch_authentication_failures: Cell<u64>,
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
    /// (api key, handled, refused).
    pub requests: Vec<(u16, u64, u64)>,
    /// (api key, resource type, refusals by the authorizer); only those counted.
    pub authorization_failures: Vec<(u16, ResourceType, u64)>,
    /// Request latency in seconds, by API key.
    pub latency: Vec<(u16, HistogramSnapshot)>,
    /// Bytes of record data per produce request.
    pub produce_request_bytes: HistogramSnapshot,
    /// Bytes of record data per fetch response.
    pub fetch_response_bytes: HistogramSnapshot,
    /// fdatasync latency of the core's logs, seconds.
    pub fsync: HistogramSnapshot,
    /// Named counters: (name, help, value).
    pub counters: Vec<(&'static str, &'static str, u64)>,
    /// Named gauges: (name, help, value).
    pub gauges: Vec<(&'static str, &'static str, u64)>,
    /// The core's log directory and its state (one of [`LOG_DIR_STATES`]).
    pub log_dir: (String, &'static str),
    /// Traffic per topic on this core (topics it still knows).
    pub topics: Vec<(String, TopicTraffic)>,
    /// Per-partition figures of the partitions this core owns.
    pub partitions: Vec<PartitionStats>,
    /// Committed offsets of the groups this core coordinates: (group, topic, partition, offset).
    pub group_offsets: Vec<(String, String, i32, i64)>,
}

/// The states a log directory can be in, as `borges_log_dir_state` labels them: writable
/// (online), read-only (disk full: reads go on, writes resume once space is freed), failed (an
/// IO error: offline until a restart).
pub const LOG_DIR_STATES: [&str; 3] = ["writable", "read_only", "failed"];

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

/// What a core's services report for a snapshot.
pub struct CoreReport {
    /// Open connections.
    pub connections: u32,
    /// Bytes appended and not yet flushed.
    pub unflushed_bytes: u64,
    /// Bytes in the tail cache.
    pub tail_cache_bytes: u64,
    /// Descriptors storage holds (at most its budget).
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

fn bump(c: &Cell<u64>, by: u64) {
    c.set(c.get() + by);
}

impl CoreMetrics {
    /// Empty metrics for core `core`.
    pub fn new(core: usize) -> CoreMetrics {
        let zero = || Cell::new(0);
        CoreMetrics {
            core,
            requests: std::array::from_fn(|_| zero()),
            refused: std::array::from_fn(|_| zero()),
            authorization_failures: std::array::from_fn(|_| std::array::from_fn(|_| zero())),
            latency: RefCell::new((0..API_SLOTS).map(|_| None).collect()),
            produce_request_bytes: Buckets::new(SIZE_BOUNDS_BYTES),
            fetch_response_bytes: Buckets::new(SIZE_BOUNDS_BYTES),
            fsync: Buckets::new(LATENCY_BOUNDS_S),
            topics: RefCell::new(HashMap::new()),
            bytes_received: zero(),
            bytes_sent: zero(),
            bytes_sendfile: zero(),
            produce_bytes: zero(),
            produce_records: zero(),
            produce_rejected: zero(),
            produce_failed: zero(),
            fetch_bytes: zero(),
            connections_opened: zero(),
            connections_closed: zero(),
            connections_refused: zero(),
            malformed_frames: zero(),
            frames_timed_out: zero(),
            accept_descriptor_errors: zero(),
            tls_handshakes: zero(),
            tls_handshake_failures: zero(),
            tls_plaintext_refused: zero(),
            sasl_authentications: zero(),
            sasl_authentication_failures: zero(),
            replica_fetch_authentication_failures: zero(),
            forwarded: zero(),
            cleaner_runs: zero(),
            cleaner_bytes_in: zero(),
            cleaner_bytes_out: zero(),
            cleaner_last_run_ms: zero(),
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
        bump(&cells[Self::slot(key)], 1);
    }

    /// Counts one refusal by the authorizer: of a whole request of `api`, or of one resource
    /// in its answer, for want of a permission on a resource of type `resource`.
    pub fn count_authorization_failure(&self, api: ApiKey, resource: ResourceType) {
        let kind = ResourceType::ALL.iter().position(|r| *r == resource);
        let kind = kind.unwrap_or(RESOURCE_SLOTS - 1);
        bump(
            &self.authorization_failures[Self::slot(api as u16)][kind],
            1,
        );
    }

    fn authorization_failures(&self) -> Vec<(u16, ResourceType, u64)> {
        let mut out = Vec::new();
        for (api, cells) in self.authorization_failures.iter().enumerate() {
            for (kind, cell) in cells.iter().enumerate() {
                if cell.get() > 0 {
                    out.push((api as u16, ResourceType::ALL[kind], cell.get()));
                }
            }
        }
        out
    }

    /// Records the time from a request's decode to its response being ready.
    pub fn record_latency(&self, api: ApiKey, elapsed: Duration) {
        let mut h = self.latency.borrow_mut();
        h[Self::slot(api as u16)]
            .get_or_insert_with(|| Buckets::new(LATENCY_BOUNDS_S))
            .record(elapsed.as_secs_f64());
    }

    /// Counts bytes and records appended to a partition of `topic`.
    pub fn record_produce(&self, topic: &Arc<str>, bytes: u64, records: u64) {
        bump(&self.produce_bytes, bytes);
        bump(&self.produce_records, records);
        let mut topics = self.topics.borrow_mut();
        let t = topics.entry(topic.clone()).or_default();
        t.bytes_in += bytes;
        t.records_in += records;
    }

    /// Counts the record data of one produce request.
    pub fn record_produce_request(&self, bytes: u64) {
        self.produce_request_bytes.record(bytes as f64);
    }

    /// Counts fetched bytes of `topic`.
    pub fn record_fetch(&self, topic: &Arc<str>, bytes: u64) {
        bump(&self.fetch_bytes, bytes);
        if bytes > 0 {
            self.topics
                .borrow_mut()
                .entry(topic.clone())
                .or_default()
                .bytes_out += bytes;
        }
    }

    /// Counts the record data of one fetch response.
    pub fn record_fetch_response(&self, bytes: u64) {
        self.fetch_response_bytes.record(bytes as f64);
    }

    /// Records one fdatasync of a log on this core.
    pub fn record_fsync(&self, elapsed: Duration) {
        self.fsync.record(elapsed.as_secs_f64());
    }

    /// A snapshot of this core, with the figures its services report. Topics the core no
    /// longer owns a partition of (deleted, or moved at a restart) are forgotten here, so the
    /// traffic map stays as large as the core's topics.
    pub fn snapshot(&self, report: CoreReport) -> MetricsSnapshot {
        let requests = (0..API_SLOTS)
            .filter(|&i| self.requests[i].get() + self.refused[i].get() > 0)
            .map(|i| (i as u16, self.requests[i].get(), self.refused[i].get()))
            .collect();
        let latency = self.latency.borrow();
        let latency = (latency.iter().enumerate())
            .filter_map(|(i, h)| h.as_ref().map(|h| (i as u16, h.snapshot())))
            .collect();
        let mut topics = self.topics.borrow_mut();
        let owned: std::collections::HashSet<&str> =
            report.partitions.iter().map(|p| p.topic.as_str()).collect();
        topics.retain(|t, _| owned.contains(&**t));
        let topics = topics.iter().map(|(t, v)| (t.to_string(), *v)).collect();
        MetricsSnapshot {
            core: self.core,
            requests,
            authorization_failures: self.authorization_failures(),
            latency,
            produce_request_bytes: self.produce_request_bytes.snapshot(),
            fetch_response_bytes: self.fetch_response_bytes.snapshot(),
            fsync: self.fsync.snapshot(),
            counters: self.counters(),
            gauges: gauges(&report, self.cleaner_last_run_ms.get()),
            log_dir: (report.log_dir, report.log_dir_state),
            topics,
            partitions: report.partitions,
            group_offsets: report.group_offsets,
        }
    }

    fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        COUNTERS
            .iter()
            .map(|(name, help, cell)| (*name, *help, cell(self).get()))
            .collect()
    }
}

/// A per-core counter's cell.
type CounterCell = fn(&CoreMetrics) -> &Cell<u64>;

/// The per-core counters: name, help, cell.
const COUNTERS: [(&str, &str, CounterCell); 24] = [
    (
        "borges_bytes_received_total",
        "Bytes read from client sockets",
        |m| &m.bytes_received,
    ),
    (
        "borges_bytes_sent_total",
        "Bytes written to client sockets",
        |m| &m.bytes_sent,
    ),
    (
        "borges_bytes_sendfile_total",
        "Part of bytes sent with sendfile (zero copy)",
        |m| &m.bytes_sendfile,
    ),
    (
        "borges_produce_bytes_total",
        "Record batch bytes appended",
        |m| &m.produce_bytes,
    ),
    ("borges_produce_records_total", "Records appended", |m| {
        &m.produce_records
    }),
    (
        "borges_produce_rejected_total",
        "Produce partitions refused in validation",
        |m| &m.produce_rejected,
    ),
    (
        "borges_produce_failed_total",
        "Produce partitions that failed after validation",
        |m| &m.produce_failed,
    ),
    (
        "borges_fetch_bytes_total",
        "Record batch bytes returned by fetches",
        |m| &m.fetch_bytes,
    ),
    (
        "borges_connections_opened_total",
        "Connections accepted",
        |m| &m.connections_opened,
    ),
    (
        "borges_connections_closed_total",
        "Connections closed",
        |m| &m.connections_closed,
    ),
    (
        "borges_connections_refused_total",
        "Connections refused (connections_max, descriptors)",
        |m| &m.connections_refused,
    ),
    (
        "borges_malformed_frames_total",
        "Frames that could not be decoded",
        |m| &m.malformed_frames,
    ),
    (
        "borges_frames_timed_out_total",
        "Frames not whole within frame_read_timeout_ms",
        |m| &m.frames_timed_out,
    ),
    (
        "borges_accept_descriptor_errors_total",
        "Accepts failed for want of descriptors",
        |m| &m.accept_descriptor_errors,
    ),
    (
        "borges_tls_handshakes_total",
        "TLS handshakes completed",
        |m| &m.tls_handshakes,
    ),
    (
        "borges_tls_handshake_failures_total",
        "TLS handshakes failed (certificate, protocol, timeout)",
        |m| &m.tls_handshake_failures,
    ),
    (
        "borges_tls_plaintext_refused_total",
        "Plaintext connections refused by a TLS listener",
        |m| &m.tls_plaintext_refused,
    ),
    (
        "borges_sasl_authentications_total",
        "SASL authentications that succeeded",
        |m| &m.sasl_authentications,
    ),
    (
        "borges_sasl_authentication_failures_total",
        "SASL exchanges that failed (credentials, malformed, out of sequence)",
        |m| &m.sasl_authentication_failures,
    ),
    (
        "borges_replica_fetch_authentication_failures_total",
        "Follower fetch connections whose SASL authentication to the leader failed",
        |m| &m.replica_fetch_authentication_failures,
    ),
    (
        "borges_cross_core_forwards_total",
        "Requests (parts) forwarded to another core",
        |m| &m.forwarded,
    ),
    (
        "borges_cleaner_runs_total",
        "Cleanings of compacted partitions",
        |m| &m.cleaner_runs,
    ),
    (
        "borges_cleaner_bytes_in_total",
        "Bytes of segments the cleaner replaced",
        |m| &m.cleaner_bytes_in,
    ),
    (
        "borges_cleaner_bytes_out_total",
        "Bytes the cleaner wrote in their place",
        |m| &m.cleaner_bytes_out,
    ),
];

fn gauges(report: &CoreReport, cleaner_last_run_ms: u64) -> Vec<(&'static str, &'static str, u64)> {
    vec![
        (
            "borges_connections",
            "Open client connections",
            u64::from(report.connections),
        ),
        (
            "borges_partitions",
            "Partitions this core owns",
            report.partitions.len() as u64,
        ),
        (
            "borges_cleaner_last_run_ms",
            "Wall-clock ms of the last cleaning (0: none)",
            cleaner_last_run_ms,
        ),
        (
            "borges_storage_unflushed_bytes",
            "Bytes appended, not yet written",
            report.unflushed_bytes,
        ),
        (
            "borges_storage_tail_cache_bytes",
            "Bytes in the tail cache",
            report.tail_cache_bytes,
        ),
        (
            "borges_storage_open_descriptors",
            "Descriptors storage holds",
            report.open_descriptors,
        ),
        (
            "borges_request_memory_available_bytes",
            "Request memory not in use",
            report.request_memory_available_bytes,
        ),
    ]
}
