//! Drivers: one trait, two systems. The measurement code ([`crate::runner`]) sees only these
//! traits, so Borges and Kafka are measured by exactly the same code.
//!
//! The traits are blocking: every producer and consumer runs on its own OS thread, so a fixed
//! rate can be paced precisely (see [`crate::clock::sleep_until_ns`]). A driver whose client is
//! async (Borges's tokio SDK) blocks on its futures with a runtime handle.

pub mod borges;
pub mod kafka;

use std::sync::Arc;
use std::time::Duration;

use crate::error::LoadgenError;
use crate::stats::{ClientStats, SendToken};
use crate::workload::{Durability, ProducerSettings};

/// Result of driver calls.
pub type Result<T> = std::result::Result<T, LoadgenError>;

/// A topic to create.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicSpec {
    /// Topic name.
    pub name: String,
    /// Partition count.
    pub partitions: u32,
    /// Durability policy, mapped to each system's topic configs.
    pub durability: Durability,
    /// For [`Durability::Interval`].
    pub flush_interval_ms: Option<u64>,
    /// Replicas per partition.
    pub replication_factor: u16,
    /// The topic's `min.insync.replicas`, when set.
    pub min_insync_replicas: Option<u16>,
}

/// A producer to create.
#[derive(Debug, Clone)]
pub struct ProducerSpec {
    /// Client id (for the broker's logs).
    pub client_id: String,
    /// Batching, compression, acks, buffer limits.
    pub settings: ProducerSettings,
}

/// Where a consumer starts reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    /// The first offset of each partition.
    Beginning,
}

/// A consumer to create. Partitions are assigned explicitly (no group rebalancing), the same way
/// for both systems, so that group-protocol behaviour does not blur the comparison.
#[derive(Debug, Clone)]
pub struct ConsumerSpec {
    /// Client id.
    pub client_id: String,
    /// The group this consumer belongs to (consumers of one group split the partitions).
    pub group_id: String,
    /// `(topic, partition)` pairs this consumer reads.
    pub assignment: Vec<(String, i32)>,
    /// Start position.
    pub start: StartAt,
    /// Longest wait of one fetch.
    pub fetch_max_wait_ms: u64,
    /// Bytes one fetch returns at most per partition.
    pub partition_fetch_bytes_max: usize,
}

/// One record to send. Drivers copy what they need; the caller reuses the buffers.
#[derive(Debug, Clone, Copy)]
pub struct OutRecord<'a> {
    /// Topic.
    pub topic: &'a str,
    /// Key, if keyed (partition chosen by the client's murmur2 partitioner).
    pub key: Option<&'a [u8]>,
    /// Value.
    pub value: &'a [u8],
}

/// A system under test: creates topics, producers and consumers.
pub trait Driver: Send + Sync {
    /// `borges` or `kafka`.
    fn name(&self) -> &'static str;
    /// Creates `topics` and waits until they can be written.
    fn create_topics(&self, topics: &[TopicSpec]) -> Result<()>;
    /// Deletes topics (after a run).
    fn delete_topics(&self, names: &[String]) -> Result<()>;
    /// A new producer that reports acknowledgements to `stats`.
    fn producer(
        &self,
        spec: &ProducerSpec,
        stats: Arc<ClientStats>,
    ) -> Result<Box<dyn ProducerDriver>>;
    /// A new consumer reading `spec.assignment`.
    fn consumer(&self, spec: &ConsumerSpec) -> Result<Box<dyn ConsumerDriver>>;
    /// Settings of this driver's clients worth printing in a report (`name=value`).
    fn describe(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A producer. Owned by one thread.
pub trait ProducerDriver: Send {
    /// Hands a record to the client; blocks while the client's buffer is full (backpressure).
    /// The acknowledgement (or failure) is reported later through
    /// [`ClientStats::on_ack`] with `token`.
    fn send(&mut self, record: OutRecord<'_>, token: SendToken) -> Result<()>;
    /// Waits until every record sent so far is acknowledged or failed, at most `timeout`.
    fn flush(&mut self, timeout: Duration) -> Result<()>;
}

/// A consumer. Owned by one thread.
pub trait ConsumerDriver: Send {
    /// Waits up to `max_wait` for records and calls `on_value` with each value. Returns the
    /// number of records.
    fn poll(&mut self, max_wait: Duration, on_value: &mut dyn FnMut(&[u8])) -> Result<usize>;
}
