//! A minimal blocking protocol client for the broker's own integration tests: it speaks frames
//! directly, so tests control exactly which port (core) a request goes to and can send broken
//! input. The SDK has its own tests in `client/tests`.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use borges_protocol::batch::{BatchBuilder, BatchOptions, Compression, Record, RecordBatch};
use borges_protocol::frame::{FrameDecoder, FrameHeader, FRAME_SIZE_BYTES_MAX_DEFAULT};
use borges_protocol::message::{self, MessageHead};
use borges_protocol::{wire, ApiKey, ErrorCode};
use bytes::{Bytes, BytesMut};
use flatbuffers::FlatBufferBuilder;

/// A decoded response frame.
pub struct Reply {
    pub header: FrameHeader,
    pub message: Bytes,
    pub payload: Bytes,
}

pub struct RawClient {
    pub stream: TcpStream,
    correlation: u32,
    buf: BytesMut,
    decoder: FrameDecoder,
}

impl RawClient {
    pub fn connect(addr: SocketAddr) -> RawClient {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        stream.set_nodelay(true).unwrap();
        RawClient {
            stream,
            correlation: 0,
            buf: BytesMut::new(),
            decoder: FrameDecoder::new(FRAME_SIZE_BYTES_MAX_DEFAULT),
        }
    }

    /// Sends a request and returns its correlation id.
    pub fn send(&mut self, api: ApiKey, fbb: &FlatBufferBuilder, payload: &[u8]) -> u32 {
        self.correlation += 1;
        let head = MessageHead::request(api, 0, self.correlation);
        let frame = message::encode_message(head, fbb, payload).unwrap();
        self.stream.write_all(&frame).unwrap();
        self.correlation
    }

    /// Reads the next response frame; `None` when the broker closed the connection.
    pub fn receive(&mut self) -> Option<Reply> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf).expect("response frame") {
                return Some(Reply {
                    header: frame.header,
                    message: frame.message,
                    payload: frame.payload.freeze(),
                });
            }
            let mut chunk = [0u8; 65536];
            let n = self.stream.read(&mut chunk).ok()?;
            if n == 0 {
                return None;
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub fn call(&mut self, api: ApiKey, fbb: &FlatBufferBuilder, payload: &[u8]) -> Reply {
        let id = self.send(api, fbb, payload);
        let reply = self.receive().expect("broker closed the connection");
        assert_eq!(reply.header.correlation_id, id, "responses out of order");
        assert!(reply.header.is_response());
        assert!(
            !reply.header.is_error(),
            "request-level error: {:?}",
            message::decode_error_response(&reply.message)
        );
        reply
    }

    pub fn create_topic(
        &mut self,
        name: &str,
        partitions: i32,
        configs: &[(&str, &str)],
    ) -> ErrorCode {
        let mut fbb = FlatBufferBuilder::new();
        let entries: Vec<_> = configs
            .iter()
            .map(|(k, v)| {
                let k = fbb.create_string(k);
                let v = fbb.create_string(v);
                wire::ConfigEntry::create(
                    &mut fbb,
                    &wire::ConfigEntryArgs {
                        name: Some(k),
                        value: Some(v),
                    },
                )
            })
            .collect();
        let entries = fbb.create_vector(&entries);
        let n = fbb.create_string(name);
        let t = wire::CreatableTopic::create(
            &mut fbb,
            &wire::CreatableTopicArgs {
                name: Some(n),
                num_partitions: partitions,
                replication_factor: -1,
                configs: Some(entries),
            },
        );
        let topics = fbb.create_vector(&[t]);
        let root = wire::CreateTopicsRequest::create(
            &mut fbb,
            &wire::CreateTopicsRequestArgs {
                topics: Some(topics),
                timeout_ms: 30000,
                validate_only: false,
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::CreateTopics, &fbb, &[]);
        let r = flatbuffers::root::<wire::CreateTopicsResponse>(&reply.message).unwrap();
        let t = r.topics().unwrap().get(0);
        ErrorCode::from_u16(t.error_code())
    }

    pub fn delete_topic(&mut self, name: &str) -> ErrorCode {
        let mut fbb = FlatBufferBuilder::new();
        let n = fbb.create_string(name);
        let names = fbb.create_vector(&[n]);
        let root = wire::DeleteTopicsRequest::create(
            &mut fbb,
            &wire::DeleteTopicsRequestArgs {
                topic_names: Some(names),
                timeout_ms: 30000,
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::DeleteTopics, &fbb, &[]);
        let r = flatbuffers::root::<wire::DeleteTopicsResponse>(&reply.message).unwrap();
        ErrorCode::from_u16(r.topics().unwrap().get(0).error_code())
    }

    /// The Metadata answer for `topic` alone.
    pub fn metadata_of(&mut self, topic: &str) -> Reply {
        let mut fbb = FlatBufferBuilder::new();
        let n = fbb.create_string(topic);
        let topics = fbb.create_vector(&[n]);
        let root = wire::MetadataRequest::create(
            &mut fbb,
            &wire::MetadataRequestArgs {
                topics: Some(topics),
                all_topics: false,
            },
        );
        fbb.finish(root, None);
        self.call(ApiKey::Metadata, &fbb, &[])
    }

    /// The topic-level error code Metadata gives `topic`.
    pub fn metadata_code(&mut self, topic: &str) -> ErrorCode {
        let reply = self.metadata_of(topic);
        let r = flatbuffers::root::<wire::MetadataResponse>(&reply.message).unwrap();
        ErrorCode::from_u16(r.topics().unwrap().get(0).error_code())
    }

    /// (core addresses by core id, leader core by partition) of a topic.
    pub fn placement(&mut self, topic: &str) -> (Vec<SocketAddr>, Vec<u16>) {
        let reply = self.metadata_of(topic);
        let r = flatbuffers::root::<wire::MetadataResponse>(&reply.message).unwrap();
        let broker = r.brokers().unwrap().get(0);
        let mut cores: Vec<(u16, SocketAddr)> = broker
            .cores()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c.core_id(),
                    format!("{}:{}", c.host(), c.port()).parse().unwrap(),
                )
            })
            .collect();
        cores.sort_by_key(|c| c.0);
        let t = r.topics().unwrap().get(0);
        assert_eq!(
            t.error_code(),
            0,
            "metadata for {topic}: {:?}",
            t.error_message()
        );
        let leaders = t
            .partitions()
            .unwrap()
            .iter()
            .map(|p| p.leader_core())
            .collect();
        (cores.into_iter().map(|c| c.1).collect(), leaders)
    }

    /// Produces raw batch bytes to one partition: (error, base offset).
    pub fn produce_raw(
        &mut self,
        topic: &str,
        partition: i32,
        batches: &[u8],
        acks: i16,
    ) -> Option<(ErrorCode, i64, Option<String>)> {
        self.produce_raw_within(topic, partition, batches, acks, 30_000)
    }

    /// [`RawClient::produce_raw`] with the request's `timeout_ms`.
    pub fn produce_raw_within(
        &mut self,
        topic: &str,
        partition: i32,
        batches: &[u8],
        acks: i16,
        timeout_ms: i32,
    ) -> Option<(ErrorCode, i64, Option<String>)> {
        let range = wire::PayloadRange::new(0, batches.len() as u32);
        let fbb =
            message::one_topic_produce_request(topic, &[(partition, range)], acks, timeout_ms);
        if acks == 0 {
            self.send(ApiKey::Produce, &fbb, batches);
            return None;
        }
        let reply = self.call(ApiKey::Produce, &fbb, batches);
        let r = flatbuffers::root::<wire::ProduceResponse>(&reply.message).unwrap();
        if r.error_code() != 0 {
            return Some((
                ErrorCode::from_u16(r.error_code()),
                -1,
                r.error_message().map(str::to_string),
            ));
        }
        let p = r.topics().unwrap().get(0).partitions().unwrap().get(0);
        Some((
            ErrorCode::from_u16(p.error_code()),
            p.base_offset(),
            p.error_message().map(str::to_string),
        ))
    }

    /// Produces `values` as one batch with keys `k<i>`.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        values: &[&str],
        acks: i16,
    ) -> (ErrorCode, i64) {
        let batch = make_batch(values, Compression::None);
        let (code, offset, _) = self.produce_raw(topic, partition, &batch, acks).unwrap();
        (code, offset)
    }

    /// Fetches one partition: (error, high watermark, log start, raw payload).
    pub fn fetch_raw(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        max_wait_ms: i32,
        min_bytes: i32,
    ) -> (ErrorCode, i64, i64, Bytes) {
        let mut fbb = FlatBufferBuilder::new();
        let p = wire::FetchPartition::create(
            &mut fbb,
            &wire::FetchPartitionArgs {
                partition,
                fetch_offset: offset,
                partition_max_bytes: 4 << 20,
                ..Default::default()
            },
        );
        let parts = fbb.create_vector(&[p]);
        let n = fbb.create_string(topic);
        let t = wire::FetchTopic::create(
            &mut fbb,
            &wire::FetchTopicArgs {
                name: Some(n),
                partitions: Some(parts),
            },
        );
        let topics = fbb.create_vector(&[t]);
        let root = wire::FetchRequest::create(
            &mut fbb,
            &wire::FetchRequestArgs {
                max_wait_ms,
                min_bytes,
                max_bytes: 16 << 20,
                topics: Some(topics),
                ..Default::default()
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::Fetch, &fbb, &[]);
        let r = flatbuffers::root::<wire::FetchResponse>(&reply.message).unwrap();
        assert_eq!(r.error_code(), 0, "{:?}", r.error_message());
        let p = r.topics().unwrap().get(0).partitions().unwrap().get(0);
        let range = message::resolve_payload_range(p.records(), reply.payload.len()).unwrap();
        (
            ErrorCode::from_u16(p.error_code()),
            p.high_watermark(),
            p.log_start_offset(),
            reply.payload.slice(range),
        )
    }

    /// Fetches and decodes records at or after `offset`.
    pub fn fetch(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> (ErrorCode, i64, Vec<Record>) {
        let (code, hw, _, bytes) = self.fetch_raw(topic, partition, offset, 0, 0);
        (code, hw, decode(&bytes, offset))
    }

    /// Every record of a partition from `offset` up to the high watermark.
    pub fn fetch_all(&mut self, topic: &str, partition: i32, mut offset: i64) -> Vec<Record> {
        let mut out = Vec::new();
        loop {
            let (code, hw, records) = self.fetch(topic, partition, offset);
            assert_eq!(code, ErrorCode::None);
            if let Some(last) = records.last() {
                offset = last.offset + 1;
            }
            out.extend(records);
            if offset >= hw {
                return out;
            }
        }
    }

    /// ListOffsets for one partition: (error, offset, timestamp).
    pub fn list_offset(
        &mut self,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> (ErrorCode, i64, i64) {
        let mut fbb = FlatBufferBuilder::new();
        let p = wire::ListOffsetsPartition::create(
            &mut fbb,
            &wire::ListOffsetsPartitionArgs {
                partition,
                current_leader_epoch: -1,
                timestamp,
            },
        );
        let parts = fbb.create_vector(&[p]);
        let n = fbb.create_string(topic);
        let t = wire::ListOffsetsTopic::create(
            &mut fbb,
            &wire::ListOffsetsTopicArgs {
                name: Some(n),
                partitions: Some(parts),
            },
        );
        let topics = fbb.create_vector(&[t]);
        let root = wire::ListOffsetsRequest::create(
            &mut fbb,
            &wire::ListOffsetsRequestArgs {
                topics: Some(topics),
                ..Default::default()
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::ListOffsets, &fbb, &[]);
        let r = flatbuffers::root::<wire::ListOffsetsResponse>(&reply.message).unwrap();
        let p = r.topics().unwrap().get(0).partitions().unwrap().get(0);
        (
            ErrorCode::from_u16(p.error_code()),
            p.offset(),
            p.timestamp(),
        )
    }
}

/// One uncompressed batch of `values`, keys `k0`, `k1`, ..., timestamps now.
pub fn make_batch(values: &[&str], compression: Compression) -> Bytes {
    make_batch_at(values, compression, now_ms())
}

/// One batch with the given timestamp for every record.
pub fn make_batch_at(values: &[&str], compression: Compression, timestamp: i64) -> Bytes {
    let mut b = BatchBuilder::new(
        BatchOptions {
            compression,
            ..BatchOptions::default()
        },
        1024,
    );
    for (i, v) in values.iter().enumerate() {
        let key = format!("k{i}");
        b.push(timestamp, Some(key.as_bytes()), Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Decodes the records of a fetch payload, skipping those below `from`.
pub fn decode(bytes: &Bytes, from: i64) -> Vec<Record> {
    RecordBatch::parse_many(bytes)
        .unwrap()
        .into_iter()
        .flat_map(|b| b.records(64 << 20).unwrap())
        .filter(|r| r.offset >= from)
        .collect()
}

pub fn value(r: &Record) -> String {
    String::from_utf8(r.value.as_ref().unwrap().to_vec()).unwrap()
}

/// Partitions by topic, as group APIs carry them.
pub type Assignment = std::collections::BTreeMap<String, Vec<i32>>;

/// A heartbeat answer: (error, member id, member epoch, assignment).
pub type Beat = (ErrorCode, String, i32, Assignment);

fn topic_partitions<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    a: &Assignment,
) -> flatbuffers::WIPOffset<
    flatbuffers::Vector<'a, flatbuffers::ForwardsUOffset<wire::TopicPartitions<'a>>>,
> {
    let items: Vec<_> = a
        .iter()
        .map(|(t, ps)| {
            let ps = fbb.create_vector(ps);
            let t = fbb.create_string(t);
            wire::TopicPartitions::create(
                fbb,
                &wire::TopicPartitionsArgs {
                    topic: Some(t),
                    partitions: Some(ps),
                },
            )
        })
        .collect();
    fbb.create_vector(&items)
}

impl RawClient {
    pub fn heartbeat(
        &mut self,
        group: &str,
        member_id: &str,
        epoch: i32,
        topics: Option<&[&str]>,
        owned: &Assignment,
    ) -> Beat {
        let mut fbb = FlatBufferBuilder::new();
        let g = fbb.create_string(group);
        let m = fbb.create_string(member_id);
        let c = fbb.create_string("raw-test");
        let topics = topics.map(|ts| {
            let v: Vec<_> = ts.iter().map(|t| fbb.create_string(t)).collect();
            fbb.create_vector(&v)
        });
        let owned = topic_partitions(&mut fbb, owned);
        let root = wire::ConsumerGroupHeartbeatRequest::create(
            &mut fbb,
            &wire::ConsumerGroupHeartbeatRequestArgs {
                group_id: Some(g),
                member_id: Some(m),
                member_epoch: epoch,
                client_id: Some(c),
                session_timeout_ms: 2_000,
                subscribed_topic_names: topics,
                owned_partitions: Some(owned),
                ..Default::default()
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::ConsumerGroupHeartbeat, &fbb, &[]);
        let r = flatbuffers::root::<wire::ConsumerGroupHeartbeatResponse>(&reply.message).unwrap();
        let mut a = Assignment::new();
        for tp in r.assignment().iter().flatten() {
            a.insert(
                tp.topic().to_string(),
                tp.partitions().unwrap().iter().collect(),
            );
        }
        (
            ErrorCode::from_u16(r.error_code()),
            r.member_id().unwrap_or_default().to_string(),
            r.member_epoch(),
            a,
        )
    }

    /// Joins and heartbeats until the member owns a stable assignment (acknowledging what it is
    /// given each time).
    pub fn join(&mut self, group: &str, topics: &[&str]) -> Beat {
        let (code, id, epoch, a) = self.heartbeat(group, "", 0, Some(topics), &Assignment::new());
        assert_eq!(code, ErrorCode::None);
        self.heartbeat(group, &id, epoch, None, &a)
    }

    pub fn commit(
        &mut self,
        group: &str,
        member_id: &str,
        epoch: i32,
        offsets: &[(&str, i32, i64)],
    ) -> Vec<ErrorCode> {
        let mut fbb = FlatBufferBuilder::new();
        let mut topics = Vec::new();
        for (t, p, o) in offsets {
            let part = wire::OffsetCommitPartition::create(
                &mut fbb,
                &wire::OffsetCommitPartitionArgs {
                    partition: *p,
                    committed_offset: *o,
                    committed_leader_epoch: -1,
                    committed_metadata: None,
                },
            );
            let parts = fbb.create_vector(&[part]);
            let n = fbb.create_string(t);
            topics.push(wire::OffsetCommitTopic::create(
                &mut fbb,
                &wire::OffsetCommitTopicArgs {
                    name: Some(n),
                    partitions: Some(parts),
                },
            ));
        }
        let topics = fbb.create_vector(&topics);
        let g = fbb.create_string(group);
        let m = fbb.create_string(member_id);
        let root = wire::OffsetCommitRequest::create(
            &mut fbb,
            &wire::OffsetCommitRequestArgs {
                group_id: Some(g),
                member_id: Some(m),
                member_epoch: epoch,
                topics: Some(topics),
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::OffsetCommit, &fbb, &[]);
        let r = flatbuffers::root::<wire::OffsetCommitResponse>(&reply.message).unwrap();
        assert_eq!(r.error_code(), 0, "{:?}", r.error_message());
        r.topics()
            .unwrap()
            .iter()
            .flat_map(|t| {
                t.partitions()
                    .unwrap()
                    .iter()
                    .map(|p| ErrorCode::from_u16(p.error_code()))
                    .collect::<Vec<_>>()
            })
            .collect()
    }

    /// Every committed offset of a group: (topic, partition, offset).
    pub fn committed(&mut self, group: &str) -> Vec<(String, i32, i64)> {
        let mut fbb = FlatBufferBuilder::new();
        let g = fbb.create_string(group);
        let root = wire::OffsetFetchRequest::create(
            &mut fbb,
            &wire::OffsetFetchRequestArgs {
                group_id: Some(g),
                member_epoch: -1,
                ..Default::default()
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::OffsetFetch, &fbb, &[]);
        let r = flatbuffers::root::<wire::OffsetFetchResponse>(&reply.message).unwrap();
        assert_eq!(r.error_code(), 0, "{:?}", r.error_message());
        let mut out = Vec::new();
        for t in r.topics().iter().flatten() {
            for p in t.partitions().iter().flatten() {
                out.push((t.name().to_string(), p.partition(), p.committed_offset()));
            }
        }
        out
    }

    /// (group, state) of every group.
    pub fn list_groups(&mut self) -> Vec<(String, String)> {
        let mut fbb = FlatBufferBuilder::new();
        let root = wire::ListGroupsRequest::create(
            &mut fbb,
            &wire::ListGroupsRequestArgs {
                states_filter: None,
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::ListGroups, &fbb, &[]);
        let r = flatbuffers::root::<wire::ListGroupsResponse>(&reply.message).unwrap();
        r.groups()
            .iter()
            .flatten()
            .map(|g| {
                (
                    g.group_id().to_string(),
                    g.group_state().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// (error, state, member count) of a group.
    pub fn describe_group(&mut self, group: &str) -> (ErrorCode, String, usize) {
        let mut fbb = FlatBufferBuilder::new();
        let g = fbb.create_string(group);
        let ids = fbb.create_vector(&[g]);
        let root = wire::DescribeGroupsRequest::create(
            &mut fbb,
            &wire::DescribeGroupsRequestArgs {
                group_ids: Some(ids),
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::DescribeGroups, &fbb, &[]);
        let r = flatbuffers::root::<wire::DescribeGroupsResponse>(&reply.message).unwrap();
        let d = r.groups().unwrap().get(0);
        (
            ErrorCode::from_u16(d.error_code()),
            d.group_state().unwrap_or_default().to_string(),
            d.members().map_or(0, |m| m.len()),
        )
    }

    pub fn delete_group(&mut self, group: &str) -> ErrorCode {
        let mut fbb = FlatBufferBuilder::new();
        let g = fbb.create_string(group);
        let ids = fbb.create_vector(&[g]);
        let root = wire::DeleteGroupsRequest::create(
            &mut fbb,
            &wire::DeleteGroupsRequestArgs {
                group_ids: Some(ids),
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::DeleteGroups, &fbb, &[]);
        let r = flatbuffers::root::<wire::DeleteGroupsResponse>(&reply.message).unwrap();
        ErrorCode::from_u16(r.results().unwrap().get(0).error_code())
    }

    /// (error, port, core) of a group's coordinator.
    pub fn find_coordinator(&mut self, group: &str) -> (ErrorCode, u16, u16) {
        let mut fbb = FlatBufferBuilder::new();
        let g = fbb.create_string(group);
        let keys = fbb.create_vector(&[g]);
        let root = wire::FindCoordinatorRequest::create(
            &mut fbb,
            &wire::FindCoordinatorRequestArgs {
                keys: Some(keys),
                ..Default::default()
            },
        );
        fbb.finish(root, None);
        let reply = self.call(ApiKey::FindCoordinator, &fbb, &[]);
        let r = flatbuffers::root::<wire::FindCoordinatorResponse>(&reply.message).unwrap();
        let c = r.coordinators().unwrap().get(0);
        (ErrorCode::from_u16(c.error_code()), c.port(), c.core_id())
    }
}
