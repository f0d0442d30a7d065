//! Every family the metrics endpoint serves, built from the cores' snapshots and the broker's
//! own figures. The table in docs/operations.md lists them; the real-broker test in
//! broker/tests/metrics.rs checks each one's values.

use std::collections::{BTreeMap, HashMap};

use borges_protocol::ApiKey;

use super::expose::{encode, Exposition, Kind, Labels, Value};
use super::histogram::HistogramSnapshot;
use super::process::HostStats;
use super::{MetricsSnapshot, LOG_DIR_STATES};

/// How the endpoint renders (from `[metrics]` and the scrape's `Accept` header).
#[derive(Debug, Clone, Copy)]
pub struct MetricsOptions {
    /// Per-partition series (`false`: the low-cardinality mode, topics only).
    pub partition_series: bool,
    /// Series per family at most; the rest are left out and counted.
    pub series_per_family_max: usize,
    /// OpenMetrics text instead of the Prometheus text format.
    pub openmetrics: bool,
}

/// Whole-broker figures gathered on the scraping core.
#[derive(Debug, Clone, Default)]
pub struct BrokerFigures {
    /// The broker's version.
    pub version: &'static str,
    /// The commit it was built from (`unknown` outside a git checkout).
    pub commit: &'static str,
    /// Seconds since start-up.
    pub uptime_s: f64,
    /// Process and disk figures.
    pub host: HostStats,
    /// Cluster role and partition leadership.
    pub cluster: ClusterFigures,
}

/// This broker's place in the cluster (a single node is its own controller and leads every
/// partition).
#[derive(Debug, Clone, Default)]
pub struct ClusterFigures {
    /// A cluster member (`false`: the single-node default).
    pub clustered: bool,
    /// This broker is the active controller.
    pub active_controller: bool,
    /// The active controller's id, if known.
    pub controller_id: Option<i32>,
    /// Registered brokers per state (`fenced`, `running`, ...), as the image says.
    pub brokers: Vec<(&'static str, u64)>,
    /// Partitions this broker leads.
    pub leaders: u64,
    /// Led partitions whose ISR is smaller than their replica set.
    pub under_replicated: u64,
    /// Led partitions whose ISR is smaller than `min.insync.replicas`.
    pub under_min_isr: u64,
    /// Partitions without a leader (counted by the active controller only, as Kafka does).
    pub offline: u64,
    /// Unclean leader elections recorded in the metadata log (the same on every broker).
    pub unclean_leader_elections: u64,
}

/// Renders every family of one scrape.
pub fn render(snapshots: &[MetricsSnapshot], figures: &BrokerFigures, o: MetricsOptions) -> String {
    let mut ex = Exposition::new(o.series_per_family_max);
    requests(&mut ex, snapshots);
    authorization_failures(&mut ex, snapshots);
    histograms(&mut ex, snapshots);
    per_core(&mut ex, snapshots);
    log_dirs(&mut ex, snapshots, &figures.host);
    topics(&mut ex, snapshots);
    if o.partition_series {
        partitions(&mut ex, snapshots);
    }
    groups(&mut ex, snapshots, o.partition_series);
    cluster(&mut ex, &figures.cluster);
    build(&mut ex, figures);
    process(&mut ex, figures);
    encode(ex.finish(), o.openmetrics)
}

fn core(s: &MetricsSnapshot) -> (&'static str, String) {
    ("core", s.core.to_string())
}

fn api_name(key: u16) -> &'static str {
    ApiKey::from_u16(key).map_or("Unknown", |k| k.name())
}

fn int(v: u64) -> Value {
    Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
}

fn requests(ex: &mut Exposition, snapshots: &[MetricsSnapshot]) {
    type Get = fn(&(u16, u64, u64)) -> u64;
    let kinds: [(&'static str, &'static str, Get); 2] = [
        ("borges_requests_total", "Requests handled, per API", |r| {
            r.1
        }),
        (
            "borges_requests_refused_total",
            "Requests refused before their handler (unsupported API or version, shutdown)",
            |r| r.2,
        ),
    ];
    for (name, help, get) in kinds {
        ex.family(name, help, Kind::Counter);
        for s in snapshots {
            for r in &s.requests {
                let labels = vec![core(s), ("api", api_name(r.0).to_string())];
                ex.series(labels, int(get(r)));
            }
        }
    }
}

fn authorization_failures(ex: &mut Exposition, snapshots: &[MetricsSnapshot]) {
    ex.family(
        "borges_authorization_failures_total",
        "Refusals by the ACL authorizer (whole requests and resources answered refused)",
        Kind::Counter,
    );
    for s in snapshots {
        for (api, resource, n) in &s.authorization_failures {
            let labels = vec![
                core(s),
                ("api", api_name(*api).to_string()),
                ("resource_type", resource.name().to_ascii_lowercase()),
            ];
            ex.series(labels, int(*n));
        }
    }
}

fn merged<'a>(parts: impl Iterator<Item = &'a HistogramSnapshot>) -> Option<HistogramSnapshot> {
    parts.fold(None, |acc: Option<HistogramSnapshot>, h| match acc {
        None => Some(h.clone()),
        Some(mut m) => {
            m.merge(h);
            Some(m)
        }
    })
}

/// Histograms, merged over cores (their core label would multiply the buckets).
fn histograms(ex: &mut Exposition, snapshots: &[MetricsSnapshot]) {
    ex.family(
        "borges_request_latency_seconds",
        "Time from a request's decode to its response being ready, per API",
        Kind::Histogram,
    );
    let mut by_api: BTreeMap<u16, HistogramSnapshot> = BTreeMap::new();
    for (key, h) in snapshots.iter().flat_map(|s| &s.latency) {
        match by_api.get_mut(key) {
            Some(m) => m.merge(h),
            None => {
                by_api.insert(*key, h.clone());
            }
        }
    }
    for (key, h) in by_api {
        ex.series(
            vec![("api", api_name(key).to_string())],
            Value::Histogram(h),
        );
    }
    type Get = fn(&MetricsSnapshot) -> &HistogramSnapshot;
    let sizes: [(&'static str, &'static str, Get); 3] = [
        (
            "borges_produce_request_bytes",
            "Record data bytes per produce request",
            |s| &s.produce_request_bytes,
        ),
        (
            "borges_fetch_response_bytes",
            "Record data bytes per fetch response",
            |s| &s.fetch_response_bytes,
        ),
        (
            "borges_storage_fsync_seconds",
            "fdatasync latency of partition logs",
            |s| &s.fsync,
        ),
    ];
    for (name, help, get) in sizes {
        ex.family(name, help, Kind::Histogram);
        if let Some(h) = merged(snapshots.iter().map(get)) {
            ex.series(Vec::new(), Value::Histogram(h));
        }
    }
}

fn per_core(ex: &mut Exposition, snapshots: &[MetricsSnapshot]) {
    let Some(first) = snapshots.first() else {
        return;
    };
    for (i, (name, help, _)) in first.counters.iter().enumerate() {
        ex.family(name, help, Kind::Counter);
        for s in snapshots {
            ex.series(vec![core(s)], int(s.counters[i].2));
        }
    }
    for (i, (name, help, _)) in first.gauges.iter().enumerate() {
        ex.family(name, help, Kind::Gauge);
        for s in snapshots {
            ex.series(vec![core(s)], int(s.gauges[i].2));
        }
    }
}

fn log_dirs(ex: &mut Exposition, snapshots: &[MetricsSnapshot], host: &HostStats) {
    ex.family(
        "borges_log_dir_state",
        "1 for the state each core's log directory is in (writable, read_only, failed), else 0",
        Kind::Gauge,
    );
    for s in snapshots {
        let (dir, current) = &s.log_dir;
        strict_assert!(LOG_DIR_STATES.contains(current), "unknown state {current}");
        for state in LOG_DIR_STATES {
            let labels = vec![core(s), ("dir", dir.clone()), ("state", state.to_string())];
            ex.series(labels, Value::Int(i64::from(state == *current)));
        }
    }
    type Get = fn(&super::DiskSpace) -> u64;
    let space: [(&'static str, &'static str, Get); 2] = [
        (
            "borges_log_dir_free_bytes",
            "Bytes available on the filesystem of a log directory",
            |d| d.free_bytes,
        ),
        (
            "borges_log_dir_total_bytes",
            "Size of the filesystem of a log directory",
            |d| d.total_bytes,
        ),
    ];
    for (name, help, get) in space {
        ex.family(name, help, Kind::Gauge);
        for d in &host.disks {
            ex.series(vec![("dir", d.dir.display().to_string())], int(get(d)));
        }
    }
}

fn topics(ex: &mut Exposition, snapshots: &[MetricsSnapshot]) {
    let mut traffic: BTreeMap<&str, super::TopicTraffic> = BTreeMap::new();
    for (t, v) in snapshots.iter().flat_map(|s| &s.topics) {
        let sum = traffic.entry(t.as_str()).or_default();
        sum.bytes_in += v.bytes_in;
        sum.records_in += v.records_in;
        sum.bytes_out += v.bytes_out;
    }
    type Get = fn(&super::TopicTraffic) -> u64;
    let counters: [(&'static str, &'static str, Get); 3] = [
        (
            "borges_topic_bytes_in_total",
            "Record batch bytes appended, per topic",
            |t| t.bytes_in,
        ),
        (
            "borges_topic_records_in_total",
            "Records appended, per topic",
            |t| t.records_in,
        ),
        (
            "borges_topic_bytes_out_total",
            "Record batch bytes fetched, per topic",
            |t| t.bytes_out,
        ),
    ];
    for (name, help, get) in counters {
        ex.family(name, help, Kind::Counter);
        for (t, v) in &traffic {
            ex.series(vec![("topic", t.to_string())], int(get(v)));
        }
    }
    let mut sizes: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for p in snapshots.iter().flat_map(|s| &s.partitions) {
        let e = sizes.entry(p.topic.as_str()).or_default();
        e.0 += 1;
        e.1 += p.size_bytes;
    }
    ex.family(
        "borges_topic_partitions",
        "Partitions of a topic on this broker",
        Kind::Gauge,
    );
    for (t, (n, _)) in &sizes {
        ex.series(vec![("topic", t.to_string())], int(*n));
    }
    ex.family(
        "borges_topic_size_bytes",
        "Bytes on disk of a topic's partitions",
        Kind::Gauge,
    );
    for (t, (_, bytes)) in &sizes {
        ex.series(vec![("topic", t.to_string())], int(*bytes));
    }
}

fn partitions(ex: &mut Exposition, snapshots: &[MetricsSnapshot]) {
    type Get = fn(&super::PartitionStats) -> Option<Value>;
    let series: [(&'static str, &'static str, Get); 7] = [
        (
            "borges_partition_log_start_offset",
            "First offset kept",
            |p| Some(Value::Int(p.log_start_offset)),
        ),
        (
            "borges_partition_high_watermark",
            "Offset below which consumers read",
            |p| Some(Value::Int(p.high_watermark)),
        ),
        (
            "borges_partition_log_end_offset",
            "Offset the next record gets",
            |p| Some(Value::Int(p.log_end_offset)),
        ),
        ("borges_partition_size_bytes", "Bytes on disk", |p| {
            Some(int(p.size_bytes))
        }),
        ("borges_partition_segments", "Segment files", |p| {
            Some(int(p.segments as u64))
        }),
        (
            "borges_partition_producers",
            "Idempotent producers remembered",
            |p| Some(int(p.producers as u64)),
        ),
        (
            "borges_partition_cleaner_dirty_ratio",
            "Compacted partitions: dirty / cleanable bytes (the cleaner's lag)",
            |p| p.cleaner_dirty_ratio.map(Value::Float),
        ),
    ];
    for (name, help, get) in series {
        ex.family(name, help, Kind::Gauge);
        for s in snapshots {
            for p in &s.partitions {
                if let Some(v) = get(p) {
                    ex.series(partition_labels(&p.topic, p.partition, Some(s.core)), v);
                }
            }
        }
    }
}

fn partition_labels(topic: &str, partition: u32, core_id: Option<usize>) -> Labels {
    let mut labels = vec![
        ("topic", topic.to_string()),
        ("partition", partition.to_string()),
    ];
    if let Some(c) = core_id {
        labels.push(("core", c.to_string()));
    }
    labels
}

/// Committed offsets and lag (high watermark - committed), per partition or, in the
/// low-cardinality mode, lag summed per group and topic.
fn groups(ex: &mut Exposition, snapshots: &[MetricsSnapshot], partition_series: bool) {
    let hw: HashMap<(&str, u32), i64> = snapshots
        .iter()
        .flat_map(|s| s.partitions.iter())
        .map(|p| ((p.topic.as_str(), p.partition), p.high_watermark))
        .collect();
    let commits = || snapshots.iter().flat_map(|s| &s.group_offsets);
    let lag_of = |t: &str, p: i32, offset: i64| {
        let h = hw.get(&(t, u32::try_from(p).ok()?))?;
        Some((h - offset).max(0))
    };
    if partition_series {
        ex.family(
            "borges_consumer_group_committed_offset",
            "Committed offset of a group in a partition",
            Kind::Gauge,
        );
        for (g, t, p, offset) in commits() {
            let mut labels = vec![("group", g.clone())];
            labels.extend(partition_labels(t, *p as u32, None));
            ex.series(labels, Value::Int(*offset));
        }
    }
    let mut lag: BTreeMap<Labels, i64> = BTreeMap::new();
    for (g, t, p, offset) in commits() {
        let Some(l) = lag_of(t, *p, *offset) else {
            continue;
        };
        let mut labels = vec![("group", g.clone()), ("topic", t.clone())];
        if partition_series {
            labels.push(("partition", p.to_string()));
        }
        *lag.entry(labels).or_default() += l;
    }
    ex.family(
        "borges_consumer_group_lag",
        "High watermark minus committed offset (per partition, or per topic when \
         metrics.partition_series = false)",
        Kind::Gauge,
    );
    for (labels, l) in lag {
        ex.series(labels, Value::Int(l));
    }
}

fn cluster(ex: &mut Exposition, c: &ClusterFigures) {
    let gauges: [(&'static str, &'static str, i64); 7] = [
        (
            "borges_cluster_member",
            "1 in a cluster, 0 as a single node",
            i64::from(c.clustered),
        ),
        (
            "borges_cluster_active_controller",
            "1 if this broker is the active controller (a single node always is)",
            i64::from(c.active_controller),
        ),
        (
            "borges_cluster_controller_id",
            "Node id of the active controller (-1: none known)",
            c.controller_id.map_or(-1, i64::from),
        ),
        (
            "borges_partitions_leader",
            "Partitions this broker leads",
            c.leaders as i64,
        ),
        (
            "borges_partitions_under_replicated",
            "Led partitions whose ISR is smaller than their replica set",
            c.under_replicated as i64,
        ),
        (
            "borges_partitions_under_min_isr",
            "Led partitions whose ISR is below min.insync.replicas (acks=all refused)",
            c.under_min_isr as i64,
        ),
        (
            "borges_partitions_offline",
            "Partitions without a leader (reported by the active controller only)",
            c.offline as i64,
        ),
    ];
    for (name, help, v) in gauges {
        ex.family(name, help, Kind::Gauge)
            .series(Vec::new(), Value::Int(v));
    }
    ex.family(
        "borges_unclean_leader_elections_total",
        "Unclean leader elections in the cluster's metadata log (unclean.leader.election.enable; \
         each may have lost acknowledged records)",
        Kind::Counter,
    )
    .series(Vec::new(), int(c.unclean_leader_elections));
    ex.family(
        "borges_cluster_brokers",
        "Registered brokers per state, as this broker's metadata image says",
        Kind::Gauge,
    );
    for (state, n) in &c.brokers {
        ex.series(vec![("state", state.to_string())], int(*n));
    }
}

fn build(ex: &mut Exposition, f: &BrokerFigures) {
    ex.family(
        "borges_build_info",
        "Version and commit of the running broker (always 1)",
        Kind::Gauge,
    )
    .series(
        vec![
            ("version", f.version.to_string()),
            ("commit", f.commit.to_string()),
        ],
        Value::Int(1),
    );
    ex.family(
        "borges_uptime_seconds",
        "Seconds since the broker started",
        Kind::Gauge,
    )
    .series(Vec::new(), Value::Float(f.uptime_s));
}

fn process(ex: &mut Exposition, f: &BrokerFigures) {
    let p = &f.host.process;
    let float = |v: Option<f64>| v.map(Value::Float);
    let whole = |v: Option<u64>| v.map(int);
    let all: [(&'static str, &'static str, Kind, Option<Value>); 7] = [
        (
            "process_cpu_seconds_total",
            "User and system CPU time",
            Kind::Counter,
            float(p.cpu_s),
        ),
        (
            "process_resident_memory_bytes",
            "Resident memory",
            Kind::Gauge,
            whole(p.resident_bytes),
        ),
        (
            "process_virtual_memory_bytes",
            "Virtual memory",
            Kind::Gauge,
            whole(p.virtual_bytes),
        ),
        (
            "process_start_time_seconds",
            "Start time of the process since the Unix epoch",
            Kind::Gauge,
            float(p.start_time_s),
        ),
        (
            "process_open_fds",
            "Open file descriptors",
            Kind::Gauge,
            whole(p.open_fds),
        ),
        (
            "process_max_fds",
            "File descriptor limit (RLIMIT_NOFILE)",
            Kind::Gauge,
            whole(p.max_fds),
        ),
        (
            "process_threads",
            "Threads of the process",
            Kind::Gauge,
            whole(p.threads),
        ),
    ];
    for (name, help, kind, value) in all {
        ex.family(name, help, kind);
        if let Some(v) = value {
            ex.series(Vec::new(), v);
        }
    }
}
