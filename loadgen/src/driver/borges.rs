//! The `borges` driver: Borges through its Rust SDK (`borges-client`, tokio).
//!
//! The SDK is async; this driver's producer and consumer threads block on its futures with a
//! runtime handle. Acknowledgements: each `send` returns a `DeliveryFuture`; the producer's own
//! thread keeps them in one FIFO queue per partition (a partition's batches complete in order)
//! and collects the completed ones every [`COLLECT_INTERVAL_NS`] and on flush. The publish
//! latency of a record is taken from `DeliveryFuture::completed_at` (the instant the SDK
//! processed its batch's answer), so collecting late does not change it. Before, every record
//! went over a channel to a collector task on the runtime, which woke that task (and often a
//! parked worker thread) once per record. Durability maps to the topic config `durability`
//! (`fsync`, `interval` with `flush.ms`, `none`).

use std::collections::HashMap;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use borges_client::{
    Acks, Admin, ClientConfig, Compression, Consumer, ConsumerConfig, DeliveryFuture, NewTopic,
    Offset, OffsetReset, Producer, ProducerConfig, ProducerRecord, TopicPartition,
};
use bytes::{Bytes, BytesMut};
use tokio::runtime::Handle;

use super::{
    ConsumerDriver, ConsumerSpec, Driver, OutRecord, ProducerDriver, ProducerSpec, Result, StartAt,
    TopicSpec,
};
use crate::clock::now_ns;
use crate::error::LoadgenError;
use crate::stats::{ClientStats, SendToken};
use crate::workload::{AcksKind, CompressionKind, Durability};

const NAME: &str = "borges";
/// Records one consumer `poll` returns at most (as the kafka driver).
const POLL_RECORDS_MAX: usize = 10_000;
/// How long admin operations may take.
const ADMIN_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a producer thread collects completed acknowledgements while it sends (ns). Only
/// the counters wait for it; latencies use the SDK's completion instant.
pub const COLLECT_INTERVAL_NS: u64 = 200_000;

fn err(e: impl std::fmt::Display) -> LoadgenError {
    LoadgenError::driver(NAME, e)
}

/// Borges via `borges-client`.
pub struct BorgesDriver {
    bootstrap: String,
    runtime: Handle,
    shard_aware: bool,
    tls: Option<borges_client::TlsConfig>,
    sasl: Option<borges_client::SaslConfig>,
}

impl BorgesDriver {
    /// A driver for the broker at `bootstrap`; the SDK's tasks run on `runtime`.
    pub fn new(bootstrap: &str, runtime: Handle) -> Result<BorgesDriver> {
        ClientConfig::new(bootstrap).validate().map_err(err)?;
        Ok(BorgesDriver {
            bootstrap: bootstrap.to_string(),
            runtime,
            shard_aware: true,
            tls: None,
            sasl: None,
        })
    }

    /// Connects with TLS (none: plaintext).
    pub fn tls(mut self, tls: Option<borges_client::TlsConfig>) -> BorgesDriver {
        self.tls = tls;
        self
    }

    /// Authenticates every connection with SASL (none: no authentication).
    pub fn sasl(mut self, sasl: Option<borges_client::SaslConfig>) -> BorgesDriver {
        self.sasl = sasl;
        self
    }

    /// Whether clients connect to each partition's owning core (the default) or only to the
    /// broker's main listener (every request may cross cores).
    pub fn shard_aware(mut self, shard_aware: bool) -> BorgesDriver {
        self.shard_aware = shard_aware;
        self
    }

    fn config(&self, client_id: &str) -> ClientConfig {
        ClientConfig::new(&self.bootstrap)
            .client_id(client_id)
            .shard_aware(self.shard_aware)
            .tls(self.tls.clone())
            .sasl(self.sasl.clone())
    }

    fn admin(&self) -> Result<Admin> {
        self.runtime
            .block_on(Admin::new(self.config("borges-loadgen-admin")))
            .map_err(err)
    }
}

/// Borges topic configs for a durability policy.
pub fn topic_configs(spec: &TopicSpec) -> Vec<(&'static str, String)> {
    let mut c = vec![("durability", spec.durability.as_str().to_string())];
    if spec.durability == Durability::Interval {
        c.push((
            "flush.ms",
            spec.flush_interval_ms.unwrap_or(1_000).to_string(),
        ));
    }
    if let Some(n) = spec.min_insync_replicas {
        c.push(("min.insync.replicas", n.to_string()));
    }
    c
}

/// SDK producer settings for a workload.
pub fn producer_config(spec: &ProducerSpec) -> ProducerConfig {
    let s = &spec.settings;
    ProducerConfig {
        acks: match s.acks {
            AcksKind::None => Acks::None,
            AcksKind::Leader => Acks::Leader,
            AcksKind::All => Acks::All,
        },
        linger_ms: s.linger_ms,
        batch_size_bytes: s.batch_size_bytes,
        compression: match s.compression {
            CompressionKind::None => Compression::None,
            CompressionKind::Zstd => Compression::Zstd,
        },
        buffer_memory_bytes_max: s.buffer_memory_bytes_max,
        in_flight_requests_per_connection_max: s.in_flight_requests_max as usize,
        enable_idempotence: s.idempotence,
        ..ProducerConfig::default()
    }
}

impl Driver for BorgesDriver {
    fn name(&self) -> &'static str {
        NAME
    }

    fn create_topics(&self, topics: &[TopicSpec]) -> Result<()> {
        let admin = self.admin()?;
        let new_topics = topics
            .iter()
            .map(|t| {
                topic_configs(t).into_iter().fold(
                    NewTopic::new(&t.name, t.partitions as i32)
                        .replication_factor(t.replication_factor as i16),
                    |nt, (k, v)| nt.config(k, v),
                )
            })
            .collect();
        self.runtime
            .block_on(admin.create_topics(new_topics))
            .map_err(err)?;
        self.wait_for_leaders(&admin, topics)
    }

    fn delete_topics(&self, names: &[String]) -> Result<()> {
        let admin = self.admin()?;
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        self.runtime
            .block_on(admin.delete_topics(&refs))
            .map_err(err)
    }

    fn producer(
        &self,
        spec: &ProducerSpec,
        stats: Arc<ClientStats>,
    ) -> Result<Box<dyn ProducerDriver>> {
        let producer = self
            .runtime
            .block_on(Producer::new(
                self.config(&spec.client_id),
                producer_config(spec),
            ))
            .map_err(err)?;
        Ok(Box::new(BorgesProducer {
            producer,
            runtime: self.runtime.clone(),
            acks: AckQueues::new(stats),
            topics: HashMap::new(),
            last_topic: None,
            arena: BytesMut::new(),
        }))
    }

    fn consumer(&self, spec: &ConsumerSpec) -> Result<Box<dyn ConsumerDriver>> {
        let config = ConsumerConfig {
            fetch_max_wait_ms: spec.fetch_max_wait_ms,
            partition_fetch_bytes_max: u32::try_from(spec.partition_fetch_bytes_max)
                .unwrap_or(u32::MAX),
            auto_offset_reset: OffsetReset::Earliest,
            max_poll_records: POLL_RECORDS_MAX,
            group_id: None,
            enable_auto_commit: false,
            ..ConsumerConfig::default()
        };
        let tps: Vec<TopicPartition> = spec
            .assignment
            .iter()
            .map(|(t, p)| TopicPartition::new(t.as_str(), *p))
            .collect();
        let offset = match spec.start {
            StartAt::Beginning => Offset::Beginning,
        };
        let consumer = self
            .runtime
            .block_on(async {
                let mut c = Consumer::new(self.config(&spec.client_id), config).await?;
                c.assign(tps.clone()).await?;
                for tp in &tps {
                    c.seek(tp, offset).await?;
                }
                Ok::<_, borges_client::ClientError>(c)
            })
            .map_err(err)?;
        Ok(Box::new(BorgesConsumer {
            consumer,
            runtime: self.runtime.clone(),
        }))
    }

    fn describe(&self) -> Vec<String> {
        vec![format!(
            "client=borges-client {}",
            env!("CARGO_PKG_VERSION")
        )]
    }
}

impl BorgesDriver {
    /// Waits until every partition of `topics` has a leader.
    fn wait_for_leaders(&self, admin: &Admin, topics: &[TopicSpec]) -> Result<()> {
        let deadline = Instant::now() + ADMIN_TIMEOUT;
        for t in topics {
            loop {
                let ready = self
                    .runtime
                    .block_on(admin.describe_topics(&[t.name.as_str()]))
                    .map(|d| {
                        d.iter().any(|td| {
                            td.partitions.len() == t.partitions as usize
                                && td.partitions.iter().all(|p| p.leader >= 0)
                        })
                    })
                    .unwrap_or(false);
                if ready {
                    break;
                }
                if Instant::now() > deadline {
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

/// One record awaiting its acknowledgement.
struct Pending {
    delivery: DeliveryFuture,
    token: SendToken,
}

/// The acknowledgements a producer waits for: one FIFO per partition, collected by the
/// producer's thread.
struct AckQueues {
    stats: Arc<ClientStats>,
    queues: Vec<VecDeque<Pending>>,
    outstanding: usize,
    next_collect_ns: u64,
    /// One instant and the same moment on [`now_ns`]'s clock, to convert SDK instants.
    base: (Instant, u64),
    /// The last completion instant converted, and its value: the records of one batch share
    /// their completion instant, so it is converted once per batch.
    last_completed: Option<(Instant, u64)>,
    /// The successful acknowledgements of one collection, recorded together.
    acked: Vec<(SendToken, u64)>,
}

impl AckQueues {
    fn new(stats: Arc<ClientStats>) -> AckQueues {
        AckQueues {
            stats,
            queues: Vec::new(),
            outstanding: 0,
            next_collect_ns: 0,
            base: (Instant::now(), now_ns()),
            last_completed: None,
            acked: Vec::new(),
        }
    }

    fn push(&mut self, p: Pending) {
        let partition = usize::try_from(p.delivery.partition()).unwrap_or(0);
        if self.queues.len() <= partition {
            self.queues.resize_with(partition + 1, VecDeque::new);
        }
        self.queues[partition].push_back(p);
        self.outstanding += 1;
    }

    /// Collects what completed, at most every [`COLLECT_INTERVAL_NS`].
    fn collect_due(&mut self) {
        let now = now_ns();
        if now >= self.next_collect_ns {
            self.next_collect_ns = now + COLLECT_INTERVAL_NS;
            self.collect();
        }
    }

    /// Records every completed acknowledgement (queue fronts first: a partition's batches
    /// complete in order). A front whose batch has no outcome yet is not polled (polling a
    /// pending future registers its waker under a lock).
    fn collect(&mut self) {
        let mut cx = Context::from_waker(Waker::noop());
        for q in &mut self.queues {
            while let Some(front) = q.front_mut() {
                let Some(completed) = front.delivery.completed_at() else {
                    break;
                };
                let Poll::Ready(result) = Pin::new(&mut front.delivery).poll(&mut cx) else {
                    break;
                };
                let acked_ns = match self.last_completed {
                    Some((at, ns)) if at == completed => ns,
                    _ => ns_of(self.base, Some(completed)),
                };
                self.last_completed = Some((completed, acked_ns));
                let token = front.token;
                q.pop_front();
                self.outstanding -= 1;
                match result {
                    Ok(_) => self.acked.push((token, acked_ns)),
                    Err(e) => self.stats.on_ack(token, acked_ns, Some(e.to_string())),
                }
            }
        }
        self.stats.on_acks(&self.acked);
        self.acked.clear();
    }
}

/// `at` on [`now_ns`]'s clock (both are CLOCK_MONOTONIC on Linux); now when unknown.
fn ns_of(base: (Instant, u64), at: Option<Instant>) -> u64 {
    match at {
        Some(at) if at >= base.0 => base.1 + (at - base.0).as_nanos() as u64,
        Some(at) => base.1.saturating_sub((base.0 - at).as_nanos() as u64),
        None => now_ns(),
    }
}

struct BorgesProducer {
    producer: Producer,
    runtime: Handle,
    acks: AckQueues,
    topics: HashMap<String, Arc<str>>,
    /// The last topic sent to (a producer thread sends to one topic; no hash per record).
    last_topic: Option<Arc<str>>,
    /// Where record values are copied to: each value is a slice of it (`Bytes` sharing the
    /// arena), so a record costs no allocation; a new arena is taken when this one is full
    /// and the old one is freed when the SDK dropped its last value (right after encoding).
    arena: BytesMut,
}

/// Bytes of one value arena of [`BorgesProducer`].
const VALUE_ARENA_BYTES: usize = 1 << 20;

impl BorgesProducer {
    fn topic(&mut self, name: &str) -> Arc<str> {
        if let Some(t) = self.last_topic.as_ref().filter(|t| ***t == *name) {
            return t.clone();
        }
        let t = match self.topics.get(name) {
            Some(t) => t.clone(),
            None => {
                let t: Arc<str> = Arc::from(name);
                self.topics.insert(name.to_string(), t.clone());
                t
            }
        };
        self.last_topic = Some(t.clone());
        t
    }

    /// `bytes` copied into the value arena.
    fn copy(&mut self, bytes: &[u8]) -> Bytes {
        if self.arena.capacity() - self.arena.len() < bytes.len() {
            self.arena = BytesMut::with_capacity(VALUE_ARENA_BYTES.max(bytes.len()));
        }
        self.arena.extend_from_slice(bytes);
        self.arena.split().freeze()
    }

    /// `Producer::send`, polled once in the runtime's context: with buffer memory free and the
    /// topic's metadata known it is ready at once, so the common case skips `block_on`'s cost
    /// per record (entering the runtime, a new RNG seed, a parked-thread waker: about 3% of the
    /// producer thread in the profile of docs/benchmarks.md section 14). It blocks only when the
    /// send has to wait (backpressure, metadata).
    fn send_now(&self, rec: ProducerRecord) -> borges_client::Result<DeliveryFuture> {
        let _context = self.runtime.enter();
        let mut send = std::pin::pin!(self.producer.send(rec));
        match send.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(result) => result,
            Poll::Pending => self.runtime.block_on(send),
        }
    }
}

impl ProducerDriver for BorgesProducer {
    fn send(&mut self, record: OutRecord<'_>, token: SendToken) -> Result<()> {
        let topic = self.topic(record.topic);
        let mut rec = ProducerRecord::new(topic).value(self.copy(record.value));
        if let Some(k) = record.key {
            rec = rec.key(self.copy(k));
        }
        let delivery = self.send_now(rec).map_err(err)?;
        self.acks.push(Pending { delivery, token });
        self.acks.collect_due();
        Ok(())
    }

    fn flush(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        self.runtime
            .block_on(async { tokio::time::timeout(timeout, self.producer.flush()).await })
            .map_err(|_| err(format!("flush did not finish in {timeout:?}")))?
            .map_err(err)?;
        loop {
            self.acks.collect();
            if self.acks.outstanding == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(err("acknowledgements missing after flush"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

struct BorgesConsumer {
    consumer: Consumer,
    runtime: Handle,
}

impl ConsumerDriver for BorgesConsumer {
    fn poll(&mut self, max_wait: Duration, on_value: &mut dyn FnMut(&[u8])) -> Result<usize> {
        let records = self
            .runtime
            .block_on(self.consumer.poll(max_wait))
            .map_err(err)?;
        for r in &records {
            on_value(r.value.as_deref().unwrap_or(&[]));
        }
        Ok(records.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::ProducerSettings;

    #[test]
    fn sdk_instants_convert_to_the_loadgen_clock() {
        let base = (Instant::now(), 5_000_000_000);
        let later = base.0 + Duration::from_micros(1500);
        assert_eq!(ns_of(base, Some(later)), 5_001_500_000);
        let earlier = base
            .0
            .checked_sub(Duration::from_micros(20))
            .expect("uptime");
        assert_eq!(ns_of(base, Some(earlier)), 4_999_980_000);
        let before = now_ns();
        assert!(ns_of(base, None) >= before);
    }

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
            vec![("durability", "fsync".to_string())]
        );
        assert_eq!(
            topic_configs(&spec(Durability::Interval, Some(50))),
            vec![
                ("durability", "interval".to_string()),
                ("flush.ms", "50".to_string())
            ]
        );
        assert_eq!(
            topic_configs(&spec(Durability::None, None)),
            vec![("durability", "none".to_string())]
        );
        let replicated = TopicSpec {
            replication_factor: 3,
            min_insync_replicas: Some(2),
            ..spec(Durability::None, None)
        };
        assert_eq!(
            topic_configs(&replicated),
            vec![
                ("durability", "none".to_string()),
                ("min.insync.replicas", "2".to_string())
            ]
        );
    }

    #[test]
    fn producer_settings_map_to_the_sdk() {
        let settings: ProducerSettings = toml::from_str(
            "acks = \"1\"\nlinger_ms = 3\nbatch_size_bytes = 1000\ncompression = \"zstd\"\n\
             buffer_memory_bytes_max = 5000\nin_flight_requests_max = 2\n",
        )
        .unwrap();
        let c = producer_config(&ProducerSpec {
            client_id: "x".into(),
            settings,
        });
        assert_eq!(c.acks, Acks::Leader);
        assert_eq!(c.linger_ms, 3);
        assert_eq!(c.batch_size_bytes, 1000);
        assert_eq!(c.compression, Compression::Zstd);
        assert_eq!(c.buffer_memory_bytes_max, 5000);
        assert_eq!(c.in_flight_requests_per_connection_max, 2);
    }
}
