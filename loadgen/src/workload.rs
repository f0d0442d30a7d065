//! Workload definitions, read from TOML files in `loadgen/workloads/`.
//!
//! The shape follows the OpenMessaging Benchmark's workloads (topics, partitions per topic,
//! message size, key distributor, producers per topic, subscriptions per topic, consumers per
//! subscription, producer rate, consumer backlog, test and warm-up duration), extended with the
//! producer settings (batching, linger, compression, acks) and the durability of the topics, so
//! that one file fully states what is compared.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::LoadgenError;

/// Bytes at the start of every value that carry the send timestamp (see [`crate::payload`]).
pub const RECORD_HEADER_BYTES: usize = crate::payload::HEADER_BYTES;
/// Largest record value a workload may ask for.
pub const RECORD_SIZE_BYTES_MAX: usize = 16 << 20;
/// Most topics a workload may create.
pub const TOPICS_MAX: u32 = 10_000;
/// Most partitions a workload may create in all.
pub const PARTITIONS_TOTAL_MAX: u64 = 100_000;
/// Most producers or consumers (each is one thread).
pub const CLIENTS_MAX: u32 = 1_000;
/// Most distinct keys for the uniform and zipf key distributions.
pub const KEY_COUNT_MAX: u64 = 100_000_000;

/// One benchmark workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Short name, used in file names and reports.
    pub name: String,
    /// What the workload shows.
    #[serde(default)]
    pub description: String,
    /// Number of topics.
    pub topics: u32,
    /// Partitions of each topic.
    pub partitions_per_topic: u32,
    /// Size of every record value in bytes (including the 12-byte timestamp header).
    pub record_size_bytes: usize,
    /// What the value bytes after the header look like.
    #[serde(default)]
    pub payload: PayloadKind,
    /// How record keys are chosen.
    #[serde(default)]
    pub keys: KeyDistribution,
    /// Producer settings.
    pub producer: ProducerSettings,
    /// Consumer settings.
    #[serde(default)]
    pub consumer: ConsumerSettings,
    /// Topic settings, durability first.
    #[serde(default)]
    pub topic: TopicSettings,
    /// Duration and warm-up.
    pub run: RunSettings,
}

/// The bytes of a record value after its header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadKind {
    /// Random bytes: incompressible.
    #[default]
    Random,
    /// Repeated English-like text: compresses well (for compression workloads).
    Text,
}

/// How record keys are chosen.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(tag = "distribution", rename_all = "lowercase", deny_unknown_fields)]
pub enum KeyDistribution {
    /// No key: the client spreads records over partitions (sticky batching).
    #[default]
    None,
    /// Keys drawn uniformly from `count` distinct keys.
    Uniform {
        /// Number of distinct keys.
        count: u64,
    },
    /// Keys drawn from `count` distinct keys with a Zipf law: key rank `k` has weight
    /// `1 / k^exponent` (hot keys).
    Zipf {
        /// Number of distinct keys.
        count: u64,
        /// The Zipf exponent; 0.99 or 1.0 are usual.
        exponent: f64,
    },
}

/// The producer side of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProducerSettings {
    /// Producers per topic (each one thread with its own client).
    #[serde(default = "one")]
    pub producers_per_topic: u32,
    /// Target rate in records per second over all producers of all topics; 0 = find the
    /// maximum (see `max_rate_mode`).
    #[serde(default)]
    pub rate_records_s: u64,
    /// How `rate_records_s = 0` finds the maximum.
    #[serde(default)]
    pub max_rate_mode: MaxRateMode,
    /// Largest batch per partition.
    #[serde(default = "default_batch_size_bytes")]
    pub batch_size_bytes: usize,
    /// How long a batch may wait for more records.
    #[serde(default = "default_linger_ms")]
    pub linger_ms: u64,
    /// Batch compression.
    #[serde(default)]
    pub compression: CompressionKind,
    /// Acknowledgement level.
    #[serde(default)]
    pub acks: AcksKind,
    /// Memory a producer may use for unacknowledged records before `send` blocks.
    #[serde(default = "default_buffer_memory_bytes_max")]
    pub buffer_memory_bytes_max: usize,
    /// In-flight produce requests per connection.
    #[serde(default = "default_in_flight_requests_max")]
    pub in_flight_requests_max: u32,
    /// Idempotent producers (Borges: `enable_idempotence`; Kafka: `enable.idempotence`). Off
    /// by default in workloads so that results stay comparable with earlier runs; ignored
    /// with `acks = "0"` (and by Kafka, which needs `acks = "all"` for it, with `acks = "1"`).
    #[serde(default)]
    pub idempotence: bool,
}

/// How a workload with `rate_records_s = 0` finds the maximum rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MaxRateMode {
    /// Rate discovery as in the OpenMessaging Benchmark: the rate ramps up while the broker
    /// keeps up and drops when acknowledgements or consumers fall behind, so latency stays
    /// that of a loaded but not overloaded broker. The result is the maximum *sustainable* rate.
    #[default]
    Discover,
    /// No pacing: producers send as fast as the client accepts records (backpressure from
    /// `buffer_memory_bytes_max`). The result is the maximum throughput; latency then mostly
    /// measures the time records wait in the full client buffer.
    Unthrottled,
}

/// Batch compression, the codecs both systems support.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompressionKind {
    /// No compression.
    #[default]
    None,
    /// zstd.
    Zstd,
}

/// The producer's acknowledgement level, as Kafka's `acks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum AcksKind {
    /// `acks=0`: no acknowledgement (publish latency is then the time to hand the record over).
    #[serde(rename = "0")]
    None,
    /// `acks=1`: the leader wrote it.
    #[serde(rename = "1")]
    Leader,
    /// `acks=all`: every in-sync replica has it, after the topic's durability policy.
    #[default]
    #[serde(rename = "all")]
    All,
}

impl AcksKind {
    /// Kafka's spelling: `0`, `1` or `all`.
    pub fn as_kafka(self) -> &'static str {
        match self {
            AcksKind::None => "0",
            AcksKind::Leader => "1",
            AcksKind::All => "all",
        }
    }
}

/// The consumer side of a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConsumerSettings {
    /// Independent consumer groups per topic; each receives every record. 0 = produce only.
    #[serde(default = "one")]
    pub subscriptions_per_topic: u32,
    /// Consumers in each group; the topic's partitions are split among them.
    #[serde(default = "one")]
    pub consumers_per_subscription: u32,
    /// If > 0: a catch-up workload. Producers first write this many bytes with no consumer
    /// running, then consumers read the backlog from the beginning while producers stop; the
    /// result is the catch-up (consume) throughput.
    #[serde(default)]
    pub backlog_size_bytes: u64,
    /// Longest wait of one fetch (long poll).
    #[serde(default = "default_fetch_max_wait_ms")]
    pub fetch_max_wait_ms: u64,
    /// Bytes one fetch returns at most per partition.
    #[serde(default = "default_partition_fetch_bytes_max")]
    pub partition_fetch_bytes_max: usize,
}

impl Default for ConsumerSettings {
    fn default() -> Self {
        ConsumerSettings {
            subscriptions_per_topic: 1,
            consumers_per_subscription: 1,
            backlog_size_bytes: 0,
            fetch_max_wait_ms: default_fetch_max_wait_ms(),
            partition_fetch_bytes_max: default_partition_fetch_bytes_max(),
        }
    }
}

/// Topic configuration that matters for a fair comparison.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicSettings {
    /// When the broker forces data to disk, relative to the acknowledgement.
    #[serde(default)]
    pub durability: Durability,
    /// For `durability = "interval"`: milliseconds between fsyncs.
    #[serde(default)]
    pub flush_interval_ms: Option<u64>,
    /// Replicas per partition (1 when absent); needs that many brokers.
    #[serde(default)]
    pub replication_factor: Option<u16>,
    /// The topic's `min.insync.replicas` (the broker's default when absent).
    #[serde(default)]
    pub min_insync_replicas: Option<u16>,
}

/// Durability: what an acknowledgement promises about the disk.
///
/// Borges: the topic config `durability`. Kafka: `fsync` sets the topic config
/// `flush.messages=1` (every append is fsync'd before the produce request is answered),
/// `interval` sets `flush.ms`, `none` keeps Kafka's default (page cache only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// fsync (fdatasync) before acknowledging.
    Fsync,
    /// fsync on an interval; acknowledgements do not wait for it.
    Interval,
    /// Never fsync; the OS writes back when it wants (Kafka's default).
    #[default]
    None,
}

impl Durability {
    /// `fsync`, `interval` or `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Interval => "interval",
            Durability::None => "none",
        }
    }
}

/// How long a run lasts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    /// Measured duration after the warm-up.
    pub duration_s: u64,
    /// Warm-up before measuring (same load, not recorded).
    #[serde(default)]
    pub warmup_s: u64,
}

fn one() -> u32 {
    1
}
fn default_batch_size_bytes() -> usize {
    128 * 1024
}
fn default_linger_ms() -> u64 {
    1
}
fn default_buffer_memory_bytes_max() -> usize {
    32 << 20
}
fn default_in_flight_requests_max() -> u32 {
    5
}
fn default_fetch_max_wait_ms() -> u64 {
    100
}
fn default_partition_fetch_bytes_max() -> usize {
    1 << 20
}

impl Workload {
    /// Reads and validates a workload file.
    pub fn from_file(path: &Path) -> Result<Workload, LoadgenError> {
        let text = std::fs::read_to_string(path).map_err(|source| LoadgenError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Workload::from_toml(&text).map_err(|e| match e {
            LoadgenError::Workload(msg) => {
                LoadgenError::Workload(format!("{}: {msg}", path.display()))
            }
            other => other,
        })
    }

    /// Parses and validates a workload from TOML text.
    pub fn from_toml(text: &str) -> Result<Workload, LoadgenError> {
        let workload: Workload =
            toml::from_str(text).map_err(|e| LoadgenError::Workload(e.to_string()))?;
        workload.validate()?;
        Ok(workload)
    }

    /// Checks the limits and the combinations that make no sense.
    pub fn validate(&self) -> Result<(), LoadgenError> {
        let fail = |msg: String| Err(LoadgenError::Workload(msg));
        if self.name.is_empty() || !self.name.chars().all(is_name_char) {
            return fail(format!("name {:?}: use [A-Za-z0-9._-]+", self.name));
        }
        if self.topics == 0 || self.topics > TOPICS_MAX {
            return fail(format!("topics = {}: 1..={TOPICS_MAX}", self.topics));
        }
        if self.partitions_per_topic == 0 {
            return fail("partitions_per_topic must be >= 1".into());
        }
        if self.partitions_total() > PARTITIONS_TOTAL_MAX {
            return fail(format!(
                "more than {PARTITIONS_TOTAL_MAX} partitions in all"
            ));
        }
        if self.record_size_bytes < RECORD_HEADER_BYTES
            || self.record_size_bytes > RECORD_SIZE_BYTES_MAX
        {
            return fail(format!(
                "record_size_bytes = {}: {RECORD_HEADER_BYTES}..={RECORD_SIZE_BYTES_MAX}",
                self.record_size_bytes
            ));
        }
        self.validate_keys()?;
        self.validate_clients()?;
        if self.run.duration_s == 0 {
            return fail("run.duration_s must be >= 1".into());
        }
        match (self.topic.durability, self.topic.flush_interval_ms) {
            (Durability::Interval, None) | (Durability::Interval, Some(0)) => {
                fail("durability = \"interval\" needs flush_interval_ms >= 1".into())
            }
            (Durability::Fsync | Durability::None, Some(_)) => {
                fail("flush_interval_ms only applies to durability = \"interval\"".into())
            }
            _ => Ok(()),
        }
    }

    fn validate_keys(&self) -> Result<(), LoadgenError> {
        let count = match self.keys {
            KeyDistribution::None => return Ok(()),
            KeyDistribution::Uniform { count } => count,
            KeyDistribution::Zipf { count, exponent } => {
                if !(exponent.is_finite() && exponent > 0.0 && exponent <= 10.0) {
                    return Err(LoadgenError::Workload(format!(
                        "zipf exponent {exponent}: 0 < exponent <= 10"
                    )));
                }
                count
            }
        };
        if count == 0 || count > KEY_COUNT_MAX {
            return Err(LoadgenError::Workload(format!(
                "keys.count = {count}: 1..={KEY_COUNT_MAX}"
            )));
        }
        Ok(())
    }

    fn validate_clients(&self) -> Result<(), LoadgenError> {
        let p = &self.producer;
        let c = &self.consumer;
        if p.producers_per_topic == 0 {
            return Err(LoadgenError::Workload(
                "producer.producers_per_topic must be >= 1".into(),
            ));
        }
        if self.producers_total() > CLIENTS_MAX as u64
            || self.consumers_total() > CLIENTS_MAX as u64
        {
            return Err(LoadgenError::Workload(format!(
                "at most {CLIENTS_MAX} producers and {CLIENTS_MAX} consumers"
            )));
        }
        if c.subscriptions_per_topic > 0 && c.consumers_per_subscription == 0 {
            return Err(LoadgenError::Workload(
                "consumer.consumers_per_subscription must be >= 1".into(),
            ));
        }
        if c.backlog_size_bytes > 0 && c.subscriptions_per_topic == 0 {
            return Err(LoadgenError::Workload(
                "a backlog workload needs consumers (subscriptions_per_topic >= 1)".into(),
            ));
        }
        if p.batch_size_bytes == 0 || p.buffer_memory_bytes_max < p.batch_size_bytes {
            return Err(LoadgenError::Workload(
                "producer: 0 < batch_size_bytes <= buffer_memory_bytes_max".into(),
            ));
        }
        if p.in_flight_requests_max == 0 {
            return Err(LoadgenError::Workload(
                "producer.in_flight_requests_max must be >= 1".into(),
            ));
        }
        Ok(())
    }

    /// Partitions over all topics.
    pub fn partitions_total(&self) -> u64 {
        u64::from(self.topics) * u64::from(self.partitions_per_topic)
    }

    /// Producers over all topics.
    pub fn producers_total(&self) -> u64 {
        u64::from(self.topics) * u64::from(self.producer.producers_per_topic)
    }

    /// Consumers over all topics and groups.
    pub fn consumers_total(&self) -> u64 {
        u64::from(self.topics)
            * u64::from(self.consumer.subscriptions_per_topic)
            * u64::from(self.consumer.consumers_per_subscription)
    }

    /// Topic names for one run: `<prefix>-<i>`.
    pub fn topic_names(&self, prefix: &str) -> Vec<String> {
        (0..self.topics).map(|i| format!("{prefix}-{i}")).collect()
    }

    /// Target rate of one producer in records per second (0 = unthrottled).
    pub fn rate_per_producer_records_s(&self) -> f64 {
        if self.producer.rate_records_s == 0 {
            0.0
        } else {
            self.producer.rate_records_s as f64 / self.producers_total() as f64
        }
    }

    /// Overrides the measured duration (the `--duration-s` flag).
    pub fn with_duration_s(mut self, duration_s: u64) -> Workload {
        self.run.duration_s = duration_s.max(1);
        self.run.warmup_s = self.run.warmup_s.min(duration_s / 2);
        self
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')
}

/// The partitions consumer `index` (of `count`) in one group reads: round-robin.
pub fn assign_partitions(partitions: u32, index: u32, count: u32) -> Vec<i32> {
    assert!(count > 0 && index < count);
    (0..partitions)
        .filter(|p| p % count == index)
        .map(|p| p as i32)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
        name = "t"
        topics = 1
        partitions_per_topic = 16
        record_size_bytes = 1024
        [producer]
        [run]
        duration_s = 10
    "#;

    #[test]
    fn minimal_workload_gets_defaults() {
        let w = Workload::from_toml(MINIMAL).unwrap();
        assert_eq!(w.partitions_total(), 16);
        assert_eq!(w.producer.producers_per_topic, 1);
        assert_eq!(w.producer.rate_records_s, 0);
        assert_eq!(w.producer.max_rate_mode, MaxRateMode::Discover);
        assert_eq!(w.producer.buffer_memory_bytes_max, 32 << 20);
        assert_eq!(w.producer.acks, AcksKind::All);
        assert_eq!(w.producer.compression, CompressionKind::None);
        assert_eq!(w.keys, KeyDistribution::None);
        assert_eq!(w.topic.durability, Durability::None);
        assert_eq!(w.consumer.subscriptions_per_topic, 1);
        assert_eq!(w.run.warmup_s, 0);
        assert_eq!(w.rate_per_producer_records_s(), 0.0);
    }

    #[test]
    fn full_workload_parses() {
        let text = r#"
            name = "full"
            description = "everything"
            topics = 2
            partitions_per_topic = 4
            record_size_bytes = 100
            payload = "text"
            keys = { distribution = "zipf", count = 1000, exponent = 0.99 }
            [producer]
            producers_per_topic = 2
            rate_records_s = 40000
            max_rate_mode = "unthrottled"
            batch_size_bytes = 65536
            linger_ms = 5
            compression = "zstd"
            acks = "1"
            [consumer]
            subscriptions_per_topic = 2
            consumers_per_subscription = 3
            [topic]
            durability = "interval"
            flush_interval_ms = 100
            [run]
            duration_s = 60
            warmup_s = 10
        "#;
        let w = Workload::from_toml(text).unwrap();
        assert_eq!(
            w.keys,
            KeyDistribution::Zipf {
                count: 1000,
                exponent: 0.99
            }
        );
        assert_eq!(w.payload, PayloadKind::Text);
        assert_eq!(w.producer.max_rate_mode, MaxRateMode::Unthrottled);
        assert_eq!(w.producer.acks, AcksKind::Leader);
        assert_eq!(w.producer.compression, CompressionKind::Zstd);
        assert_eq!(w.topic.durability, Durability::Interval);
        assert_eq!(w.producers_total(), 4);
        assert_eq!(w.consumers_total(), 12);
        assert_eq!(w.rate_per_producer_records_s(), 10_000.0);
        assert_eq!(w.topic_names("x"), vec!["x-0", "x-1"]);
    }

    #[test]
    fn acks_spellings() {
        for (s, a) in [
            ("0", AcksKind::None),
            ("1", AcksKind::Leader),
            ("all", AcksKind::All),
        ] {
            let text = MINIMAL.replace("[producer]", &format!("[producer]\nacks = \"{s}\""));
            assert_eq!(Workload::from_toml(&text).unwrap().producer.acks, a);
            assert_eq!(a.as_kafka(), s);
        }
    }

    #[test]
    fn rejects_bad_input() {
        let cases = [
            ("record_size_bytes = 1024", "record_size_bytes = 4"),
            ("topics = 1", "topics = 0"),
            ("partitions_per_topic = 16", "partitions_per_topic = 0"),
            ("duration_s = 10", "duration_s = 0"),
            ("name = \"t\"", "name = \"a b\""),
            ("[producer]", "[producer]\nproducers_per_topic = 0"),
            ("[producer]", "[producer]\nacks = \"2\""),
            ("[producer]", "[producer]\ncompression = \"lz4\""),
            ("[producer]", "[producer]\nunknown_field = 1"),
            ("[run]", "[topic]\ndurability = \"interval\"\n[run]"),
            ("[run]", "[topic]\nflush_interval_ms = 5\n[run]"),
            (
                "[producer]",
                "keys = { distribution = \"uniform\", count = 0 }\n[producer]",
            ),
            (
                "[producer]",
                "keys = { distribution = \"zipf\", count = 10, exponent = -1.0 }\n[producer]",
            ),
            (
                "[producer]",
                "[consumer]\nsubscriptions_per_topic = 0\nbacklog_size_bytes = 10\n[producer]",
            ),
        ];
        for (from, to) in cases {
            let text = MINIMAL.replace(from, to);
            assert_ne!(text, MINIMAL, "{to}");
            let err = Workload::from_toml(&text).unwrap_err();
            assert!(matches!(err, LoadgenError::Workload(_)), "{to}: {err}");
        }
    }

    #[test]
    fn workloads_round_trip_through_toml() {
        let w = Workload::from_toml(MINIMAL).unwrap();
        let text = toml::to_string(&w).unwrap();
        assert_eq!(Workload::from_toml(&text).unwrap(), w);
    }

    #[test]
    fn duration_override_keeps_warmup_below_half() {
        let text = MINIMAL.replace("duration_s = 10", "duration_s = 100\nwarmup_s = 30");
        let w = Workload::from_toml(&text).unwrap().with_duration_s(10);
        assert_eq!(w.run.duration_s, 10);
        assert_eq!(w.run.warmup_s, 5);
    }

    #[test]
    fn partitions_are_split_round_robin() {
        assert_eq!(assign_partitions(5, 0, 2), vec![0, 2, 4]);
        assert_eq!(assign_partitions(5, 1, 2), vec![1, 3]);
        assert_eq!(assign_partitions(2, 2, 3), Vec::<i32>::new());
        let all: usize = (0..7).map(|i| assign_partitions(100, i, 7).len()).sum();
        assert_eq!(all, 100);
    }

    #[test]
    fn shipped_workloads_parse() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("workloads");
        let mut n = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let w = Workload::from_file(&path).unwrap();
                assert_eq!(
                    Some(w.name.as_str()),
                    path.file_stem().and_then(|s| s.to_str()),
                    "file name = workload name"
                );
                n += 1;
            }
        }
        assert!(n >= 8, "only {n} workloads shipped");
    }
}
