//! The `kafka` driver: Apache Kafka through librdkafka (the `rdkafka` crate, built from its
//! bundled sources).
//!
//! Producer: a `ThreadedProducer` whose delivery callback reports each acknowledgement straight
//! to the [`ClientStats`]. Consumer: a `BaseConsumer` with an explicit assignment and no offset
//! commits. Durability maps to topic configs: `fsync` -> `flush.messages=1`, `interval` ->
//! `flush.ms`, `none` -> Kafka's default.
//!
//! Extra librdkafka properties for experiments come from the environment variable
//! [`CONFIG_ENV`] (`KEY=VALUE,...`; a `producer.` or `consumer.` prefix limits one to that
//! client); they are applied last and listed in the result's driver information.

use std::sync::Arc;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode as Code;
use rdkafka::util::Timeout;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use super::{
    ConsumerDriver, ConsumerSpec, Driver, OutRecord, ProducerDriver, ProducerSpec, Result, StartAt,
    TopicSpec,
};
use crate::clock::now_ns;
use crate::error::LoadgenError;
use crate::stats::{ClientStats, SendToken};
use crate::workload::{AcksKind, CompressionKind, Durability};

const NAME: &str = "kafka";
/// How long admin operations may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(120);
/// Records one `poll` returns at most.
const POLL_RECORDS_MAX: usize = 10_000;
/// In-flight produce requests per connection for a producer without idempotence: one per
/// partition up to 1000 partitions (librdkafka's own default is 1,000,000). librdkafka puts
/// one partition's batch in each ProduceRequest (its issue 1700), so its
/// `max.in.flight.requests.per.connection` counts partition batches, where the Java client (and
/// a workload's `in_flight_requests_max`, 5 by default) counts requests that carry every ready
/// partition. Capping librdkafka at the Java value left a producer over 100 or 1000
/// partitions waiting behind five one-partition requests. An idempotent producer keeps the
/// workload's value (librdkafka allows at most 5 with idempotence).
pub const IN_FLIGHT_PARTITION_REQUESTS_MAX: u32 = 1_000;
/// librdkafka's upper bound for `queue.buffering.max.messages`.
const QUEUE_MESSAGES_MAX: usize = 2_000_000;

/// Environment variable with extra librdkafka properties, applied after the driver's own.
pub const CONFIG_ENV: &str = "BORGES_LOADGEN_KAFKA_CONFIG";

/// Which client an extra property is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// The producer only (`producer.` prefix).
    Producer,
    /// The consumer only (`consumer.` prefix).
    Consumer,
    /// Both (no prefix).
    Both,
}

/// One extra librdkafka property from [`CONFIG_ENV`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigOverride {
    /// The client it applies to.
    pub client: ClientKind,
    /// librdkafka property name.
    pub key: String,
    /// Its value.
    pub value: String,
}

/// Parses `KEY=VALUE,producer.KEY=VALUE,consumer.KEY=VALUE` (empty items are skipped).
pub fn parse_overrides(text: &str) -> Result<Vec<ConfigOverride>> {
    let mut out = Vec::new();
    for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(err(format!("{CONFIG_ENV}: `{item}` is not KEY=VALUE")));
        };
        let (client, key) = if let Some(k) = key.strip_prefix("producer.") {
            (ClientKind::Producer, k)
        } else if let Some(k) = key.strip_prefix("consumer.") {
            (ClientKind::Consumer, k)
        } else {
            (ClientKind::Both, key)
        };
        if key.trim().is_empty() {
            return Err(err(format!("{CONFIG_ENV}: `{item}` has no key")));
        }
        out.push(ConfigOverride {
            client,
            key: key.trim().to_string(),
            value: value.trim().to_string(),
        });
    }
    Ok(out)
}

fn err(e: impl std::fmt::Display) -> LoadgenError {
    LoadgenError::driver(NAME, e)
}

/// Apache Kafka via librdkafka.
pub struct KafkaDriver {
    bootstrap: String,
    runtime: tokio::runtime::Handle,
    /// The text of [`CONFIG_ENV`], parsed when a client is made.
    overrides: String,
}

impl KafkaDriver {
    /// A driver for the cluster at `bootstrap` (`host:port[,host:port]`). Admin futures run on
    /// `runtime`. Extra properties come from [`CONFIG_ENV`]; ones that do not parse make
    /// creating a client fail.
    pub fn new(bootstrap: &str, runtime: tokio::runtime::Handle) -> KafkaDriver {
        KafkaDriver {
            bootstrap: bootstrap.to_string(),
            runtime,
            overrides: std::env::var(CONFIG_ENV).unwrap_or_default(),
        }
    }

    /// Applies the extra properties meant for `client`.
    fn apply_overrides(&self, config: &mut ClientConfig, client: ClientKind) -> Result<()> {
        for o in parse_overrides(&self.overrides)? {
            if o.client == client || o.client == ClientKind::Both {
                config.set(&o.key, &o.value);
            }
        }
        Ok(())
    }

    fn base_config(&self, client_id: &str) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap)
            .set("client.id", client_id)
            .set("log_level", "3");
        c
    }

    fn admin(&self) -> Result<AdminClient<DefaultClientContext>> {
        self.base_config("borges-loadgen-admin")
            .create()
            .map_err(err)
    }
}

/// Kafka topic configs for a durability policy.
pub fn topic_configs(spec: &TopicSpec) -> Vec<(&'static str, String)> {
    let mut c = match spec.durability {
        Durability::Fsync => vec![("flush.messages", "1".to_string())],
        Durability::Interval => vec![(
            "flush.ms",
            spec.flush_interval_ms.unwrap_or(1_000).to_string(),
        )],
        Durability::None => Vec::new(),
    };
    if let Some(n) = spec.min_insync_replicas {
        c.push(("min.insync.replicas", n.to_string()));
    }
    c
}

/// librdkafka producer settings for a workload.
pub fn producer_configs(spec: &ProducerSpec) -> Vec<(&'static str, String)> {
    let s = &spec.settings;
    let compression = match s.compression {
        CompressionKind::None => "none",
        CompressionKind::Zstd => "zstd",
    };
    let queue_kbytes = (s.buffer_memory_bytes_max / 1024).max(1);
    // librdkafka refuses idempotence without acks=all.
    let idempotent = s.idempotence && matches!(s.acks, AcksKind::All);
    let in_flight = if idempotent {
        s.in_flight_requests_max
    } else {
        IN_FLIGHT_PARTITION_REQUESTS_MAX
    };
    vec![
        ("acks", s.acks.as_kafka().to_string()),
        ("linger.ms", s.linger_ms.to_string()),
        ("batch.size", s.batch_size_bytes.to_string()),
        ("compression.type", compression.to_string()),
        ("queue.buffering.max.kbytes", queue_kbytes.to_string()),
        (
            "queue.buffering.max.messages",
            QUEUE_MESSAGES_MAX.to_string(),
        ),
        (
            "max.in.flight.requests.per.connection",
            in_flight.to_string(),
        ),
        // Java's (and Borges's) partitioner for keyed records.
        ("partitioner", "murmur2_random".to_string()),
        ("enable.idempotence", idempotent.to_string()),
        (
            "message.max.bytes",
            (s.batch_size_bytes.max(1 << 20) * 2).to_string(),
        ),
    ]
}

impl Driver for KafkaDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn create_topics(&self, topics: &[TopicSpec]) -> Result<()> {
        let admin = self.admin()?;
        let configs: Vec<Vec<(&str, String)>> = topics.iter().map(topic_configs).collect();
        let new_topics: Vec<NewTopic<'_>> = topics
            .iter()
            .zip(&configs)
            .map(|(t, cfg)| {
                let replicas = TopicReplication::Fixed(i32::from(t.replication_factor));
                let mut nt = NewTopic::new(&t.name, t.partitions as i32, replicas);
                for (k, v) in cfg {
                    nt = nt.set(k, v);
                }
                nt
            })
            .collect();
        let opts = AdminOptions::new().operation_timeout(Some(Timeout::After(ADMIN_TIMEOUT)));
        let results = self
            .runtime
            .block_on(admin.create_topics(&new_topics, &opts))
            .map_err(err)?;
        for r in results {
            if let Err((topic, code)) = r {
                return Err(err(format!("create topic {topic}: {code}")));
            }
        }
        self.wait_for_leaders(topics)
    }

    fn delete_topics(&self, names: &[String]) -> Result<()> {
        let admin = self.admin()?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let opts = AdminOptions::new().operation_timeout(Some(Timeout::After(ADMIN_TIMEOUT)));
        let results = self
            .runtime
            .block_on(admin.delete_topics(&refs, &opts))
            .map_err(err)?;
        for r in results {
            if let Err((topic, code)) = r {
                return Err(err(format!("delete topic {topic}: {code}")));
            }
        }
        Ok(())
    }

    fn producer(
        &self,
        spec: &ProducerSpec,
        stats: Arc<ClientStats>,
    ) -> Result<Box<dyn ProducerDriver>> {
        let mut config = self.base_config(&spec.client_id);
        for (k, v) in producer_configs(spec) {
            config.set(k, v);
        }
        self.apply_overrides(&mut config, ClientKind::Producer)?;
        let producer: ThreadedProducer<AckContext> = config
            .create_with_context(AckContext { stats })
            .map_err(err)?;
        Ok(Box::new(KafkaProducer { producer }))
    }

    fn consumer(&self, spec: &ConsumerSpec) -> Result<Box<dyn ConsumerDriver>> {
        let mut config = self.base_config(&spec.client_id);
        config
            .set("group.id", &spec.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .set("fetch.wait.max.ms", spec.fetch_max_wait_ms.to_string())
            .set("fetch.min.bytes", "1")
            .set(
                "max.partition.fetch.bytes",
                spec.partition_fetch_bytes_max.to_string(),
            );
        self.apply_overrides(&mut config, ClientKind::Consumer)?;
        let consumer: BaseConsumer = config.create().map_err(err)?;
        let mut tpl = TopicPartitionList::new();
        let offset = match spec.start {
            StartAt::Beginning => Offset::Beginning,
        };
        for (topic, partition) in &spec.assignment {
            tpl.add_partition_offset(topic, *partition, offset)
                .map_err(err)?;
        }
        consumer.assign(&tpl).map_err(err)?;
        Ok(Box::new(KafkaConsumer { consumer }))
    }

    fn describe(&self) -> Vec<String> {
        let mut info = vec![format!(
            "client=librdkafka {}",
            rdkafka::util::get_rdkafka_version().1
        )];
        if !self.overrides.trim().is_empty() {
            info.push(format!("{CONFIG_ENV}={}", self.overrides.trim()));
        }
        info
    }
}

impl KafkaDriver {
    /// Waits until every partition of `topics` has a leader in the metadata.
    fn wait_for_leaders(&self, topics: &[TopicSpec]) -> Result<()> {
        let consumer: BaseConsumer = self
            .base_config("borges-loadgen-metadata")
            .create()
            .map_err(err)?;
        let deadline = std::time::Instant::now() + ADMIN_TIMEOUT;
        for t in topics {
            loop {
                let md = consumer
                    .fetch_metadata(Some(&t.name), Timeout::After(Duration::from_secs(10)))
                    .map_err(err)?;
                let ready = md.topics().iter().any(|mt| {
                    mt.error().is_none()
                        && mt.partitions().len() == t.partitions as usize
                        && mt.partitions().iter().all(|p| p.leader() >= 0)
                });
                if ready {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(err(format!(
                        "topic {} has no leaders after {ADMIN_TIMEOUT:?}",
                        t.name
                    )));
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        Ok(())
    }
}

/// Reports librdkafka delivery reports to the stats.
struct AckContext {
    stats: Arc<ClientStats>,
}

impl ClientContext for AckContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = Box<SendToken>;

    fn delivery(&self, result: &DeliveryResult<'_>, token: Box<SendToken>) {
        let error = result.as_ref().err().map(|(e, _)| e.to_string());
        self.stats.on_ack(*token, now_ns(), error);
    }
}

struct KafkaProducer {
    producer: ThreadedProducer<AckContext>,
}

impl ProducerDriver for KafkaProducer {
    fn send(&mut self, record: OutRecord<'_>, token: SendToken) -> Result<()> {
        let mut rec: BaseRecord<'_, [u8], [u8], Box<SendToken>> =
            BaseRecord::with_opaque_to(record.topic, Box::new(token)).payload(record.value);
        if let Some(k) = record.key {
            rec = rec.key(k);
        }
        loop {
            match self.producer.send(rec) {
                Ok(()) => return Ok(()),
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    // Backpressure: the client's buffer is full; wait for acknowledgements.
                    rec = back;
                    self.producer.poll(Duration::from_micros(100));
                }
                Err((e, _)) => return Err(err(format!("send: {e}"))),
            }
        }
    }

    fn flush(&mut self, timeout: Duration) -> Result<()> {
        self.producer.flush(Timeout::After(timeout)).map_err(err)
    }
}

struct KafkaConsumer {
    consumer: BaseConsumer,
}

impl ConsumerDriver for KafkaConsumer {
    fn poll(&mut self, max_wait: Duration, on_value: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let mut n = 0;
        let mut wait = max_wait;
        while n < POLL_RECORDS_MAX {
            match self.consumer.poll(wait) {
                None => break,
                Some(Ok(msg)) => {
                    on_value(msg.payload().unwrap_or(&[]));
                    n += 1;
                }
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) if is_transient(&e) => {}
                Some(Err(e)) => return Err(err(format!("poll: {e}"))),
            }
            wait = Duration::ZERO;
        }
        Ok(n)
    }
}

fn is_transient(e: &KafkaError) -> bool {
    matches!(
        e.rdkafka_error_code(),
        Some(
            Code::UnknownTopicOrPartition | Code::LeaderNotAvailable | Code::NotLeaderForPartition
        )
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::ProducerSettings;

    #[test]
    fn durability_maps_to_topic_configs() {
        let spec = |d, ms| TopicSpec {
            name: "t".into(),
            partitions: 1,
            durability: d,
            flush_interval_ms: ms,
            replication_factor: 1,
            min_insync_replicas: None,
        };
        assert_eq!(
            topic_configs(&spec(Durability::Fsync, None)),
            vec![("flush.messages", "1".to_string())]
        );
        assert_eq!(
            topic_configs(&spec(Durability::Interval, Some(50))),
            vec![("flush.ms", "50".to_string())]
        );
        assert!(topic_configs(&spec(Durability::None, None)).is_empty());
    }

    #[test]
    fn overrides_parse_with_client_prefixes() {
        let o =
            parse_overrides(" linger.ms=5, producer.batch.size=1000,,consumer.fetch.min.bytes=1")
                .unwrap();
        let got: Vec<(ClientKind, &str, &str)> = o
            .iter()
            .map(|o| (o.client, o.key.as_str(), o.value.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (ClientKind::Both, "linger.ms", "5"),
                (ClientKind::Producer, "batch.size", "1000"),
                (ClientKind::Consumer, "fetch.min.bytes", "1"),
            ]
        );
        assert!(parse_overrides("").unwrap().is_empty());
        assert!(parse_overrides("linger.ms").is_err());
        assert!(parse_overrides("producer.=3").is_err());
    }

    #[test]
    fn producer_settings_map_to_librdkafka() {
        let settings: ProducerSettings = toml::from_str(
            "acks = \"all\"\nlinger_ms = 3\nbatch_size_bytes = 1000\ncompression = \"zstd\"\n\
             buffer_memory_bytes_max = 5120\nin_flight_requests_max = 2\n",
        )
        .unwrap();
        let c = producer_configs(&ProducerSpec {
            client_id: "x".into(),
            settings,
        });
        let get = |k: &str| c.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("acks"), Some("all"));
        assert_eq!(get("linger.ms"), Some("3"));
        assert_eq!(get("batch.size"), Some("1000"));
        assert_eq!(get("compression.type"), Some("zstd"));
        assert_eq!(get("queue.buffering.max.kbytes"), Some("5"));
        // Without idempotence librdkafka's per-partition requests are not capped at the
        // workload's (Java-sense) in-flight count.
        assert_eq!(get("max.in.flight.requests.per.connection"), Some("1000"));
        assert_eq!(get("partitioner"), Some("murmur2_random"));
        let mut idempotent = ProducerSpec {
            client_id: "x".into(),
            settings: toml::from_str("acks = \"all\"\nin_flight_requests_max = 2\n").unwrap(),
        };
        idempotent.settings.idempotence = true;
        let c = producer_configs(&idempotent);
        let get = |k: &str| c.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("enable.idempotence"), Some("true"));
        assert_eq!(get("max.in.flight.requests.per.connection"), Some("2"));
    }
}
