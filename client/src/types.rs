//! Plain data types of the public API: records, topic-partitions, offsets, topic and config
//! descriptions.

use std::fmt;
use std::sync::Arc;

use bytes::Bytes;

/// A topic name and a partition number.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition number, from 0.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic`-`partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// Where a consumer should continue reading a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Offset {
    /// The log start offset (the oldest record still kept).
    Beginning,
    /// The high watermark: the next record to be written.
    End,
    /// This exact offset.
    At(i64),
    /// The first record whose timestamp is at or after this many ms since the epoch; the end
    /// of the log when there is none.
    Timestamp(i64),
}

/// Which offset `Admin::list_offsets` looks up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The high watermark.
    Latest,
    /// The offset of the record with the largest timestamp.
    MaxTimestamp,
    /// The first offset whose timestamp is at or after this many ms since the epoch.
    Timestamp(i64),
}

impl OffsetSpec {
    /// The ListOffsets wire timestamp: -2 earliest, -1 latest, -3 max timestamp, or the time.
    pub fn wire_timestamp(self) -> i64 {
        match self {
            OffsetSpec::Earliest => -2,
            OffsetSpec::Latest => -1,
            OffsetSpec::MaxTimestamp => -3,
            OffsetSpec::Timestamp(ms) => ms.max(0),
        }
    }
}

/// A record to send. Built with [`ProducerRecord::new`] and the chained setters.
///
/// The topic is an `Arc<str>`: a producer that sends many records to one topic clones one
/// `Arc` per record instead of allocating a string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerRecord {
    /// Topic to send to.
    pub topic: Arc<str>,
    /// Explicit partition; `None` lets the partitioner choose (keyed: murmur2 like Kafka;
    /// keyless: sticky).
    pub partition: Option<i32>,
    /// Key; `None` is null.
    pub key: Option<Bytes>,
    /// Value; `None` is null (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in ms since the epoch; `None` uses the time of `send()`.
    pub timestamp: Option<i64>,
}

impl ProducerRecord {
    /// An empty record (null key and value) for `topic`.
    pub fn new(topic: impl Into<Arc<str>>) -> ProducerRecord {
        ProducerRecord {
            topic: topic.into(),
            partition: None,
            key: None,
            value: None,
            headers: Vec::new(),
            timestamp: None,
        }
    }

    /// Sets the key.
    pub fn key(mut self, key: impl Into<Bytes>) -> ProducerRecord {
        self.key = Some(key.into());
        self
    }

    /// Sets the value.
    pub fn value(mut self, value: impl Into<Bytes>) -> ProducerRecord {
        self.value = Some(value.into());
        self
    }

    /// Appends a header.
    pub fn header(mut self, key: impl Into<String>, value: impl Into<Bytes>) -> ProducerRecord {
        self.headers.push((key.into(), Some(value.into())));
        self
    }

    /// Sends to this partition.
    pub fn partition(mut self, partition: i32) -> ProducerRecord {
        self.partition = Some(partition);
        self
    }

    /// Sets the create time (ms since the epoch).
    pub fn timestamp(mut self, timestamp_ms: i64) -> ProducerRecord {
        self.timestamp = Some(timestamp_ms);
        self
    }
}

/// Where an acknowledged record was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset; -1 with `acks=0` (the broker does not answer).
    pub offset: i64,
    /// The record's timestamp (the broker's append time for LogAppendTime topics).
    pub timestamp: i64,
}

/// A record read by the consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// Topic.
    pub topic: Arc<str>,
    /// Partition.
    pub partition: i32,
    /// Offset.
    pub offset: i64,
    /// Timestamp in ms since the epoch (create time, or log append time).
    pub timestamp: i64,
    /// Key; `None` is null.
    pub key: Option<Bytes>,
    /// Value; `None` is null (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order (keys decoded as UTF-8, lossily).
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// A topic to create.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTopic {
    /// Name (`[a-zA-Z0-9._-]`, 1..=249 characters).
    pub name: String,
    /// Partition count; -1 for the broker default.
    pub num_partitions: i32,
    /// Replication factor; -1 for the broker default.
    pub replication_factor: i16,
    /// Topic configs (`retention.ms`, `cleanup.policy`, ...).
    pub configs: Vec<(String, String)>,
}

impl NewTopic {
    /// A topic with `num_partitions` partitions and the default replication factor.
    pub fn new(name: impl Into<String>, num_partitions: i32) -> NewTopic {
        NewTopic {
            name: name.into(),
            num_partitions,
            replication_factor: -1,
            configs: Vec::new(),
        }
    }

    /// Sets the replication factor.
    pub fn replication_factor(mut self, replication_factor: i16) -> NewTopic {
        self.replication_factor = replication_factor;
        self
    }

    /// Adds a topic config.
    pub fn config(mut self, name: impl Into<String>, value: impl Into<String>) -> NewTopic {
        self.configs.push((name.into(), value.into()));
        self
    }
}

/// A topic's 128-bit id. Displays as Kafka prints topic ids: URL-safe base64 without padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TopicId(pub [u8; 16]);

impl TopicId {
    /// From the wire's big-endian halves.
    pub fn from_halves(hi: u64, lo: u64) -> TopicId {
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&hi.to_be_bytes());
        bytes[8..].copy_from_slice(&lo.to_be_bytes());
        TopicId(bytes)
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::with_capacity(22);
        for chunk in self.0.chunks(3) {
            let b = [
                chunk[0],
                *chunk.get(1).unwrap_or(&0),
                *chunk.get(2).unwrap_or(&0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            let chars = chunk.len() + 1;
            for i in 0..chars {
                out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
            }
        }
        f.write_str(&out)
    }
}

/// One partition of a described topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionInfo {
    /// Partition number.
    pub partition: i32,
    /// Leader broker id; -1 when there is none.
    pub leader: i32,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Replica broker ids.
    pub replicas: Vec<i32>,
    /// In-sync replica broker ids.
    pub isr: Vec<i32>,
    /// The leader's core that owns the partition.
    pub leader_core: u16,
}

/// A described topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicDescription {
    /// Name.
    pub name: String,
    /// Id.
    pub topic_id: TopicId,
    /// Internal topics (`__consumer_offsets`) cannot be produced to by clients.
    pub is_internal: bool,
    /// Partitions, by partition number.
    pub partitions: Vec<PartitionInfo>,
    /// Every config of the topic with its source.
    pub configs: Vec<ConfigEntry>,
}

impl TopicDescription {
    /// The replication factor (replicas of partition 0).
    pub fn replication_factor(&self) -> usize {
        self.partitions.first().map_or(0, |p| p.replicas.len())
    }
}

/// Where a config value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigSource {
    /// Set on the topic.
    Topic,
    /// Set in the broker configuration.
    Broker,
    /// The built-in default.
    Default,
    /// Not stated.
    Unknown,
}

/// One config of a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    /// Name (`retention.ms`).
    pub name: String,
    /// Value; `None` when unset or sensitive.
    pub value: Option<String>,
    /// Source of the value.
    pub source: ConfigSource,
    /// Whether it can be altered.
    pub read_only: bool,
}

/// One incremental config change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfig {
    /// Set `name` to `value` on the topic.
    Set(String, String),
    /// Remove the topic's own value for `name` (back to the default).
    Delete(String),
}

impl AlterConfig {
    /// Sets `name` to `value`.
    pub fn set(name: impl Into<String>, value: impl Into<String>) -> AlterConfig {
        AlterConfig::Set(name.into(), value.into())
    }

    /// Removes the topic's value for `name`.
    pub fn delete(name: impl Into<String>) -> AlterConfig {
        AlterConfig::Delete(name.into())
    }
}

/// A result of `Admin::list_offsets`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedOffset {
    /// The partition.
    pub topic_partition: TopicPartition,
    /// The offset; -1 when a timestamp lookup found no record at or after the time.
    pub offset: i64,
    /// The timestamp of that record (-1 when not applicable).
    pub timestamp: i64,
    /// Bytes of the partition's log on its leader (all segments); -1 when the broker did not
    /// say.
    pub size_bytes: i64,
}

/// The state of a consumer group, as its coordinator reports it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum GroupState {
    /// No members (committed offsets may remain).
    Empty,
    /// Membership changed; the coordinator is computing a new assignment.
    Assigning,
    /// Members are moving to the new assignment (revoking, taking partitions).
    Reconciling,
    /// Every member owns its target assignment.
    Stable,
    /// The group does not exist (or was deleted).
    Dead,
    /// A state this SDK does not know, as the broker named it.
    Other(String),
}

impl GroupState {
    /// The state named by the wire's string (`Stable`, ...); `Other` for anything else.
    pub fn parse(name: &str) -> GroupState {
        match name {
            "Empty" => GroupState::Empty,
            "Assigning" => GroupState::Assigning,
            "Reconciling" => GroupState::Reconciling,
            "Stable" => GroupState::Stable,
            "Dead" => GroupState::Dead,
            other => GroupState::Other(other.to_string()),
        }
    }

    /// The name as Kafka's tools print it (`Stable`).
    pub fn as_str(&self) -> &str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::Assigning => "Assigning",
            GroupState::Reconciling => "Reconciling",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
            GroupState::Other(name) => name,
        }
    }
}

impl fmt::Display for GroupState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A consumer group as `Admin::list_groups` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    /// Group id.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
}

/// The broker core that coordinates a consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupCoordinator {
    /// The coordinator broker's id.
    pub node_id: i32,
    /// Host of the coordinating core's own listener.
    pub host: String,
    /// Port of the coordinating core's own listener.
    pub port: u16,
    /// The core of that broker that owns the group.
    pub core_id: u16,
}

/// What one topic's create or delete request came to, in request order.
#[derive(Debug, Clone)]
pub struct TopicResult {
    /// The topic.
    pub name: String,
    /// `Ok`, or the broker's error for this topic (its message names the topic).
    pub result: Result<(), crate::ClientError>,
}

/// One member of a described group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    /// Member id (assigned by the coordinator).
    pub member_id: String,
    /// The member's current epoch.
    pub member_epoch: i32,
    /// The client id the member sent.
    pub client_id: String,
    /// The member's address as the broker saw it (`/127.0.0.1`).
    pub client_host: String,
    /// Partitions the member owns now.
    pub assignment: Vec<TopicPartition>,
    /// Partitions the coordinator wants the member to own (differs from `assignment` while
    /// the member reconciles).
    pub target_assignment: Vec<TopicPartition>,
    /// The topics the member subscribed to.
    pub subscribed_topics: Vec<String>,
}

/// A described consumer group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    /// Group id.
    pub group_id: String,
    /// Its state.
    pub state: GroupState,
    /// Bumped by every membership or subscription change.
    pub group_epoch: i32,
    /// The group epoch the current target assignment was computed for.
    pub assignment_epoch: i32,
    /// The coordinator's assignor (`uniform`).
    pub assignor: String,
    /// Active members.
    pub members: Vec<MemberDescription>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_id_prints_like_kafka() {
        // The topic id in the seeds (kafka-topics.sh --describe): base64url, no padding.
        let id = TopicId([
            0xc8, 0x5d, 0xa9, 0x8a, 0xdb, 0x01, 0x4c, 0x73, 0xa9, 0xf1, 0xe3, 0xf1, 0xb8, 0x0a,
            0x6c, 0x73,
        ]);
        assert_eq!(id.to_string(), "yF2pitsBTHOp8ePxuApscw");
        assert_eq!(TopicId::default().to_string(), "AAAAAAAAAAAAAAAAAAAAAA");
        let halves = TopicId::from_halves(0x0102_0304_0506_0708, 0x090a_0b0c_0d0e_0f10);
        assert_eq!(halves.0[0], 1);
        assert_eq!(halves.0[15], 16);
        assert_eq!(halves.to_string().len(), 22);
    }

    #[test]
    fn record_builder_sets_every_field() {
        let r = ProducerRecord::new("t")
            .key("k")
            .value("v")
            .header("h", "x")
            .partition(3)
            .timestamp(42);
        assert_eq!(&*r.topic, "t");
        assert_eq!(r.key.as_deref(), Some(&b"k"[..]));
        assert_eq!(r.partition, Some(3));
        assert_eq!(r.headers.len(), 1);
        assert_eq!(r.timestamp, Some(42));
        assert_eq!(OffsetSpec::Earliest.wire_timestamp(), -2);
        assert_eq!(OffsetSpec::MaxTimestamp.wire_timestamp(), -3);
    }
}

#[cfg(test)]
mod group_state_tests {
    use super::*;

    #[test]
    fn group_states_parse_and_print_their_wire_names() {
        for name in ["Empty", "Assigning", "Reconciling", "Stable", "Dead"] {
            let state = GroupState::parse(name);
            assert!(!matches!(state, GroupState::Other(_)), "{name}");
            assert_eq!(state.to_string(), name);
        }
        assert_eq!(
            GroupState::parse("PreparingRebalance"),
            GroupState::Other("PreparingRebalance".into())
        );
        assert_eq!(GroupState::parse("x").as_str(), "x");
    }
}
