//! The metrics and health endpoint of a real broker: every family has `# HELP` and its type,
//! and each one's values follow what the test did (records produced, bytes fetched, offsets
//! committed, frames broken); the series limit and the low-cardinality mode; `/healthz`,
//! `/readyz` and HTTP errors; and every metric the shipped Grafana dashboard queries exists.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{Read, Write};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use borges_protocol::batch::Compression;
use borges_protocol::message::{self, MessageHead};
use borges_protocol::{ApiKey, ErrorCode};
use borges_testkit::cluster::Cluster;
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, RawClient};

/// One sample line.
#[derive(Debug, Clone)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed scrape.
struct Scrape {
    samples: Vec<Sample>,
    /// Family name -> type, from `# TYPE`.
    types: HashMap<String, String>,
    /// Families with a `# HELP` line.
    helped: BTreeSet<String>,
}

impl Scrape {
    /// Samples named `name` whose labels include every pair of `with`.
    fn matching<'a>(&'a self, name: &'a str, with: &'a [(&str, &str)]) -> Vec<&'a Sample> {
        let has = |s: &Sample| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(v))
        };
        self.samples
            .iter()
            .filter(|s| s.name == name && has(s))
            .collect()
    }

    /// The sum of the samples named `name` with labels `with`.
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.matching(name, with).iter().map(|s| s.value).sum()
    }

    /// The single sample named `name` with labels `with`.
    fn one(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        let found = self.matching(name, with);
        assert_eq!(found.len(), 1, "{name}{with:?}: {found:?}");
        found[0].value
    }
}

fn http(addr: &str, request: &str) -> (u16, String, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let (head, body) = out.split_once("\r\n\r\n").expect("a head");
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, head.to_string(), body.to_string())
}

fn get(addr: &str, path: &str) -> (u16, String, String) {
    http(addr, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n"))
}

fn parse_labels(text: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = text;
    while let Some((key, after)) = rest.split_once("=\"") {
        let mut value = String::new();
        let mut chars = after.char_indices();
        let mut end = after.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => value.push(chars.next().map_or('\\', |(_, c)| c)),
                '"' => {
                    end = i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        labels.insert(key.trim_start_matches(',').to_string(), value);
        rest = &after[end..];
    }
    labels
}

fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape {
        samples: Vec::new(),
        types: HashMap::new(),
        helped: BTreeSet::new(),
    };
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            scrape
                .helped
                .insert(rest.split(' ').next().unwrap().to_string());
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            scrape.types.insert(name.to_string(), kind.to_string());
        } else {
            assert!(!line.starts_with('#'), "unexpected line {line:?}");
            let (series, value) = line.rsplit_once(' ').unwrap();
            let (name, labels) = match series.split_once('{') {
                Some((n, l)) => (n, parse_labels(l.trim_end_matches('}'))),
                None => (series, BTreeMap::new()),
            };
            let value = value
                .parse()
                .unwrap_or_else(|_| panic!("value of {line:?}"));
            scrape.samples.push(Sample {
                name: name.to_string(),
                labels,
                value,
            });
        }
    }
    scrape
}

fn scrape(broker: &BrokerProcess) -> Scrape {
    let (status, head, body) = get(&broker.metrics_addr(), "/metrics");
    assert_eq!(status, 200, "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    parse(&body)
}

/// Scrapes until `ok` holds of a scrape, for up to 10 s; the last scrape either way (the
/// assertions that follow say what is missing).
fn scrape_until(broker: &BrokerProcess, ok: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let s = scrape(broker);
        if ok(&s) || std::time::Instant::now() > deadline {
            return s;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The family a sample belongs to (histogram samples carry suffixes).
fn family_of<'a>(s: &'a Scrape, name: &'a str) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(f) = name.strip_suffix(suffix) {
            if s.types.get(f).map(String::as_str) == Some("histogram") {
                return f;
            }
        }
    }
    name
}

/// Every sample belongs to a family with HELP and TYPE; counters end in `_total`; histogram
/// buckets are cumulative and end in `+Inf` = `_count`.
fn check_shape(s: &Scrape) {
    for sample in &s.samples {
        let family = family_of(s, &sample.name);
        assert!(s.helped.contains(family), "{family}: no # HELP");
        let kind = s
            .types
            .get(family)
            .unwrap_or_else(|| panic!("{family}: no # TYPE"));
        assert_eq!(
            kind == "counter",
            family.ends_with("_total"),
            "{family} is a {kind}"
        );
    }
    let histograms = s
        .types
        .iter()
        .filter(|(_, k)| *k == "histogram")
        .map(|(f, _)| f);
    for family in histograms {
        type Buckets = Vec<(f64, f64)>;
        let mut series: BTreeMap<Vec<(String, String)>, Buckets> = BTreeMap::new();
        for b in s.matching(&format!("{family}_bucket"), &[]) {
            let mut labels = b.labels.clone();
            let le = labels.remove("le").expect("le");
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            series
                .entry(labels.into_iter().collect())
                .or_default()
                .push((le, b.value));
        }
        for (labels, buckets) in series {
            assert!(
                buckets
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{family}"
            );
            let with: Vec<(&str, &str)> = labels
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let count = s.one(&format!("{family}_count"), &with);
            assert_eq!(
                buckets.last(),
                Some(&(f64::INFINITY, count)),
                "{family}{labels:?}"
            );
        }
    }
}

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Sends one frame of `api` at an unsupported version: refused before any handler.
fn send_unsupported_version(addr: std::net::SocketAddr) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let mut fbb = flatbuffers::FlatBufferBuilder::new();
    let root = borges_protocol::wire::MetadataRequest::create(&mut fbb, &Default::default());
    fbb.finish(root, None);
    let frame = message::encode_message(MessageHead::request(ApiKey::Metadata, 999, 1), &fbb, &[]);
    s.write_all(&frame.unwrap()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 256];
    let _ = s.read(&mut buf);
}

#[test]
fn every_family_is_described_and_counts_what_was_done() {
    let test_start_s = now_s();
    let broker = BrokerProcess::start_with(BrokerOptions {
        cores: 2,
        ..Default::default()
    });
    let mut admin = RawClient::connect(broker.addr());
    assert_eq!(admin.create_topic("m", 2, &[]), ErrorCode::None);
    let (cores, leaders) = admin.placement("m");
    let before = scrape(&broker);
    check_shape(&before);

    // p0 through the core that does not own it (one forward), p1 on its owner.
    let owner0 = usize::from(leaders[0]);
    let other0 = 1 - owner0;
    let mut far = RawClient::connect(cores[other0]);
    let mut near = RawClient::connect(cores[usize::from(leaders[1])]);
    let a = make_batch(&["a1", "a2", "a3"], Compression::None);
    let b = make_batch(&["b1", "b2"], Compression::None);
    let c = make_batch(&["c1", "c2", "c3"], Compression::Zstd);
    assert_eq!(far.produce_raw("m", 0, &a, -1).unwrap().0, ErrorCode::None);
    assert_eq!(near.produce_raw("m", 1, &b, -1).unwrap().0, ErrorCode::None);
    assert_eq!(near.produce_raw("m", 1, &c, -1).unwrap().0, ErrorCode::None);
    let produced_bytes = (a.len() + b.len() + c.len()) as f64;
    let (_, hw, _, fetched) = near.fetch_raw("m", 1, 0, 0, 0);
    assert_eq!((hw, fetched.len()), (5, b.len() + c.len()));
    assert_eq!(admin.commit("g", "", -1, &[("m", 1, 2)]), [ErrorCode::None]);
    send_unsupported_version(cores[0]);
    let mut bad = std::net::TcpStream::connect(cores[1]).unwrap();
    bad.write_all(&[0xff; 64]).unwrap();
    let _ = bad.read(&mut [0u8; 256]);

    // The broker counts a close when its core sees it, which can be after the answer that
    // the reads above return on (CI once scraped in between): wait for the count, up to 10 s.
    let closed = "borges_connections_closed_total";
    let after = scrape_until(&broker, |s| s.sum(closed, &[]) > before.sum(closed, &[]));
    check_shape(&after);
    let done = Done {
        produced_bytes,
        fetched_bytes: fetched.len() as f64,
        forwarding_core: other0,
    };
    check_traffic(&before, &after, &done);
    check_partitions_and_groups(&after, (a.len(), b.len() + c.len()));
    check_broker_wide(&after, test_start_s);
}

/// What the traffic test did.
struct Done {
    produced_bytes: f64,
    fetched_bytes: f64,
    /// The core that forwarded the produce of partition 0.
    forwarding_core: usize,
}

fn check_traffic(before: &Scrape, after: &Scrape, done: &Done) {
    let delta = |name: &str, with: &[(&str, &str)]| after.sum(name, with) - before.sum(name, with);
    let (produced_bytes, other0) = (done.produced_bytes, done.forwarding_core);
    // Data in and out, per core and per topic.
    assert_eq!(delta("borges_produce_records_total", &[]), 8.0);
    assert_eq!(delta("borges_produce_bytes_total", &[]), produced_bytes);
    assert_eq!(
        after.one("borges_topic_records_in_total", &[("topic", "m")]),
        8.0
    );
    assert_eq!(
        after.one("borges_topic_bytes_in_total", &[("topic", "m")]),
        produced_bytes
    );
    let fetched_bytes = done.fetched_bytes;
    assert_eq!(delta("borges_fetch_bytes_total", &[]), fetched_bytes);
    assert_eq!(
        after.one("borges_topic_bytes_out_total", &[("topic", "m")]),
        fetched_bytes
    );
    assert_eq!(after.one("borges_topic_partitions", &[("topic", "m")]), 2.0);
    assert!(after.one("borges_topic_size_bytes", &[("topic", "m")]) >= produced_bytes);
    // Requests and their latency and size histograms.
    let produce = [("api", "Produce")];
    assert_eq!(delta("borges_requests_total", &produce), 3.0);
    assert_eq!(delta("borges_request_latency_seconds_count", &produce), 3.0);
    assert!(after.one("borges_request_latency_seconds_sum", &produce) > 0.0);
    assert_eq!(after.one("borges_produce_request_bytes_count", &[]), 3.0);
    assert_eq!(
        after.one("borges_produce_request_bytes_sum", &[]),
        produced_bytes
    );
    assert_eq!(
        after.one("borges_produce_request_bytes_bucket", &[("le", "256")]),
        3.0
    );
    assert_eq!(after.one("borges_fetch_response_bytes_count", &[]), 1.0);
    assert_eq!(
        after.one("borges_fetch_response_bytes_sum", &[]),
        fetched_bytes
    );
    assert_eq!(
        delta(
            "borges_requests_refused_total",
            &[("api", "Metadata"), ("core", "0")]
        ),
        1.0
    );
    // acks=all under durability fsync waited for an fdatasync of each partition.
    assert!(after.one("borges_storage_fsync_seconds_count", &[]) >= 2.0);
    // Cross-core routing, connections, broken frames.
    let other = other0.to_string();
    assert_eq!(
        delta("borges_cross_core_forwards_total", &[("core", &other)]),
        1.0
    );
    assert!(after.sum("borges_connections", &[]) >= 3.0);
    assert!(delta("borges_connections_opened_total", &[]) >= 4.0);
    assert!(delta("borges_connections_closed_total", &[]) >= 1.0);
    assert_eq!(
        delta("borges_malformed_frames_total", &[("core", "1")]),
        1.0
    );
    assert!(delta("borges_bytes_received_total", &[]) >= produced_bytes);
    assert!(delta("borges_bytes_sent_total", &[]) >= fetched_bytes);
}

fn check_partitions_and_groups(s: &Scrape, sizes: (usize, usize)) {
    let p = |n: &'static str| [("topic", "m"), ("partition", n)];
    assert_eq!(s.one("borges_partition_high_watermark", &p("0")), 3.0);
    assert_eq!(s.one("borges_partition_high_watermark", &p("1")), 5.0);
    assert_eq!(s.one("borges_partition_log_end_offset", &p("1")), 5.0);
    assert_eq!(s.one("borges_partition_log_start_offset", &p("1")), 0.0);
    assert_eq!(
        s.one("borges_partition_size_bytes", &p("0")),
        sizes.0 as f64
    );
    assert_eq!(
        s.one("borges_partition_size_bytes", &p("1")),
        sizes.1 as f64
    );
    assert_eq!(s.one("borges_partition_segments", &p("1")), 1.0);
    assert_eq!(s.one("borges_partition_producers", &p("1")), 0.0);
    assert!(s
        .matching("borges_partition_cleaner_dirty_ratio", &p("1"))
        .is_empty());
    let g = [("group", "g"), ("topic", "m"), ("partition", "1")];
    assert_eq!(s.one("borges_consumer_group_committed_offset", &g), 2.0);
    assert_eq!(s.one("borges_consumer_group_lag", &g), 3.0);
    // The 16 partitions of __consumer_offsets and the 2 of m, spread over both cores.
    assert_eq!(s.sum("borges_partitions", &[]), 18.0);
    assert_eq!(s.one("borges_partitions_leader", &[]), 18.0);
    assert!(s.sum("borges_storage_open_descriptors", &[]) >= 2.0);
    let memory = s.one("borges_request_memory_available_bytes", &[("core", "1")]);
    assert_eq!(
        memory,
        512.0 * 1024.0 * 1024.0,
        "no request in flight holds memory"
    );
}

fn check_broker_wide(s: &Scrape, test_start_s: f64) {
    let version = [("version", env!("CARGO_PKG_VERSION"))];
    assert_eq!(s.one("borges_build_info", &version), 1.0);
    let commit = &s.matching("borges_build_info", &[])[0].labels["commit"];
    assert!(!commit.is_empty());
    let uptime = s.one("borges_uptime_seconds", &[]);
    assert!(
        uptime > 0.0 && uptime <= now_s() - test_start_s + 1.0,
        "{uptime}"
    );
    let started = s.one("process_start_time_seconds", &[]);
    assert!(
        started >= test_start_s - 1.0 && started <= now_s(),
        "{started}"
    );
    assert!(s.one("process_resident_memory_bytes", &[]) > 1e6);
    assert!(
        s.one("process_virtual_memory_bytes", &[]) >= s.one("process_resident_memory_bytes", &[])
    );
    assert!(s.one("process_cpu_seconds_total", &[]) > 0.0);
    let fds = s.one("process_open_fds", &[]);
    assert!(fds >= 10.0 && fds <= s.one("process_max_fds", &[]), "{fds}");
    assert!(s.one("process_threads", &[]) >= 3.0, "main and two cores");
    for core in ["0", "1"] {
        let state = |st| s.one("borges_log_dir_state", &[("core", core), ("state", st)]);
        assert_eq!(
            (state("writable"), state("read_only"), state("failed")),
            (1.0, 0.0, 0.0)
        );
    }
    let free = s.sum("borges_log_dir_free_bytes", &[]);
    assert!(free > 0.0 && free <= s.sum("borges_log_dir_total_bytes", &[]));
    assert_eq!(s.one("borges_cluster_member", &[]), 0.0);
    assert_eq!(s.one("borges_cluster_active_controller", &[]), 1.0);
    assert_eq!(s.one("borges_cluster_controller_id", &[]), 0.0);
    assert_eq!(s.one("borges_partitions_under_replicated", &[]), 0.0);
    assert_eq!(s.one("borges_partitions_under_min_isr", &[]), 0.0);
    assert_eq!(s.one("borges_partitions_offline", &[]), 0.0);
    assert_eq!(s.one("borges_unclean_leader_elections_total", &[]), 0.0);
    assert!(s.matching("borges_metrics_series_omitted", &[]).is_empty());
}

#[test]
fn the_series_limit_and_the_low_cardinality_mode_bound_a_scrape() {
    let limited = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        config_toml: Some("[metrics]\nseries_per_family_max = 3\n".into()),
        ..Default::default()
    });
    let mut c = RawClient::connect(limited.addr());
    assert_eq!(
        c.create_topic("wide", 5, &[("min.insync.replicas", "2")]),
        ErrorCode::None
    );
    let s = scrape(&limited);
    assert_eq!(s.matching("borges_partition_high_watermark", &[]).len(), 3);
    // 5 partitions of wide and 16 of __consumer_offsets, 3 shown.
    let omitted = [("family", "borges_partition_high_watermark")];
    assert_eq!(s.one("borges_metrics_series_omitted", &omitted), 18.0);
    assert_eq!(s.one("borges_partitions_under_min_isr", &[]), 5.0);

    let low = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        config_toml: Some("[metrics]\npartition_series = false\n".into()),
        ..Default::default()
    });
    let mut c = RawClient::connect(low.addr());
    assert_eq!(c.create_topic("t", 3, &[]), ErrorCode::None);
    for p in 0..3 {
        assert_eq!(c.produce("t", p, &["x", "y"], 1).0, ErrorCode::None);
    }
    let commits = [("t", 0, 1), ("t", 1, 0), ("t", 2, 2)];
    assert_eq!(c.commit("g", "", -1, &commits), [ErrorCode::None; 3]);
    let s = scrape(&low);
    let with_partition = s
        .samples
        .iter()
        .find(|s| s.labels.contains_key("partition"));
    assert!(with_partition.is_none(), "{with_partition:?}");
    assert_eq!(
        s.one(
            "borges_consumer_group_lag",
            &[("group", "g"), ("topic", "t")]
        ),
        3.0
    );
    assert_eq!(
        s.one("borges_topic_records_in_total", &[("topic", "t")]),
        6.0
    );
}

#[test]
fn health_readiness_and_http_refusals() {
    let broker = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        ..Default::default()
    });
    let addr = broker.metrics_addr();
    assert_eq!(
        get(&addr, "/healthz"),
        (200, get(&addr, "/healthz").1, "ok\n".into())
    );
    assert_eq!(get(&addr, "/readyz").2, "ok\n");
    let (status, head, body) = http(&addr, "HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!((status, body.as_str()), (200, ""));
    assert!(!head.contains("Content-Length: 0"), "{head}");
    let open =
        "GET /metrics HTTP/1.1\r\nAccept: application/openmetrics-text; version=1.0.0\r\n\r\n";
    let (status, head, body) = http(&addr, open);
    assert_eq!(status, 200);
    assert!(head.contains("application/openmetrics-text"), "{head}");
    assert_eq!(body.lines().last(), Some("# EOF"));
    assert!(
        body.contains("# TYPE borges_requests counter"),
        "OpenMetrics names counters bare"
    );
    assert_eq!(http(&addr, "POST /metrics HTTP/1.1\r\n\r\n").0, 405);
    assert_eq!(http(&addr, "\x16\x03\x01 hello\r\n\r\n").0, 400);
    let huge = format!("GET /{} HTTP/1.1\r\n", "a".repeat(9000));
    assert_eq!(http(&addr, &huge).0, 431);
    assert_eq!(get(&addr, "/nope").0, 404);
    // The broker keeps serving after all that.
    assert_eq!(get(&addr, "/metrics").0, 200);
}

/// Metric names in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts = expr[i..].starts_with("borges_") || expr[i..].starts_with("process_");
        let boundary = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts && boundary {
            let end = expr[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(expr.len(), |n| i + n);
            names.push(expr[i..end].to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    names
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn every_metric_the_dashboard_queries_exists() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/grafana/borges.json");
    let text = std::fs::read_to_string(path).expect("docs/grafana/borges.json");
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("dashboard JSON");
    let mut queries = Vec::new();
    exprs(&dashboard, &mut queries);
    let names: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    assert!(names.len() >= 25, "the dashboard queries only {names:?}");
    let broker = BrokerProcess::start();
    let s = scrape(&broker);
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !s.types.contains_key(family_of(&s, n)))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics the broker lacks: {missing:?}"
    );
}

#[test]
fn metric_names_are_found_in_expressions() {
    let names = metric_names("sum by (api) (rate(borges_requests_total[5m])) / process_max_fds");
    assert_eq!(names, ["borges_requests_total", "process_max_fds"]);
    assert!(metric_names("my_borges_x + label_borges").is_empty());
}

#[test]
fn a_cluster_has_one_active_controller_and_a_leader_for_every_partition() {
    use borges_broker::metadata::BrokerState;
    let mut c = Cluster::start(3);
    c.wait_for_controller();
    c.wait_for_every_node("three running brokers", |i| {
        i.brokers.len() == 3 && i.brokers.values().all(|b| b.state == BrokerState::Running)
    });
    c.cli(&[
        "topic",
        "create",
        "orders",
        "--partitions",
        "6",
        "--replication-factor",
        "3",
    ]);
    let images = c.wait_for_every_node("orders everywhere", |i| {
        i.topics
            .get("orders")
            .is_some_and(|t| t.partitions.len() == 6)
    });
    let all = || images[0].topics.values().flat_map(|t| &t.partitions);
    let partitions = all().count() as f64;
    let under = all().filter(|p| p.isr.len() < p.replicas.len()).count() as f64;
    let scrapes = scrape_agreed(&mut c, partitions);
    let controller = scrapes[0].one("borges_cluster_controller_id", &[]) as u64;
    for (i, s) in scrapes.iter().enumerate() {
        check_shape(s);
        let active = s.one("borges_cluster_active_controller", &[]);
        assert_eq!(
            active,
            f64::from(u8::from(i as u64 + 1 == controller)),
            "node {}",
            i + 1
        );
        assert_eq!(
            s.one("borges_cluster_controller_id", &[]),
            controller as f64
        );
        assert_eq!(s.one("borges_cluster_member", &[]), 1.0);
        assert_eq!(
            s.one("borges_cluster_brokers", &[("state", "running")]),
            3.0
        );
    }
    let sum = |name: &str| scrapes.iter().map(|s| s.one(name, &[])).sum::<f64>();
    assert_eq!(sum("borges_partitions_offline"), 0.0);
    assert_eq!(sum("borges_partitions_under_replicated"), under);
}

/// Every node's scrape once they lead `partitions` in all and name one controller.
fn scrape_agreed(c: &mut Cluster, partitions: f64) -> Vec<Scrape> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let scrapes: Vec<Scrape> = (1..=3)
            .map(|id| parse(&get(&c.node(id).metrics_addr(), "/metrics").2))
            .collect();
        let leaders: f64 = scrapes
            .iter()
            .map(|s| s.one("borges_partitions_leader", &[]))
            .sum();
        // Polls (no timing asserted) until the metrics follow the image and, as an election
        // may move the controller under load, every node names the same controller.
        let ids: Vec<f64> = scrapes
            .iter()
            .map(|s| s.one("borges_cluster_controller_id", &[]))
            .collect();
        let agreed = ids.iter().all(|id| *id == ids[0] && *id > 0.0);
        if leaders == partitions && agreed {
            return scrapes;
        }
        let now = std::time::Instant::now();
        assert!(
            now < deadline,
            "{leaders} leaders for {partitions}, controllers {ids:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
