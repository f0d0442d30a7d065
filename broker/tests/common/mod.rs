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

    /// (core addresses by core id, leader core by partition) of a topic.
    pub fn placement(&mut self, topic: &str) -> (Vec<SocketAddr>, Vec<u16>) {
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
        let reply = self.call(ApiKey::Metadata, &fbb, &[]);
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
        let mut fbb = FlatBufferBuilder::new();
        let range = wire::PayloadRange::new(0, batches.len() as u32);
        let p = wire::PartitionProduceData::create(
            &mut fbb,
            &wire::PartitionProduceDataArgs {
                partition,
                records: Some(&range),
            },
        );
        let parts = fbb.create_vector(&[p]);
        let n = fbb.create_string(topic);
        let t = wire::TopicProduceData::create(
            &mut fbb,
            &wire::TopicProduceDataArgs {
                name: Some(n),
                partitions: Some(parts),
            },
        );
        let topics = fbb.create_vector(&[t]);
        let root = wire::ProduceRequest::create(
            &mut fbb,
            &wire::ProduceRequestArgs {
                transactional_id: None,
                acks,
                timeout_ms: 30000,
                topics: Some(topics),
            },
        );
        fbb.finish(root, None);
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
