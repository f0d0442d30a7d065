//! The broker against docs/protocol.md, for the rules a client written from the document alone
//! depends on (issue 11 item 5): each test sends what the document describes and checks the
//! answer it promises, on a real broker process.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use borges_protocol::batch::Compression;
use borges_protocol::frame::FrameHeader;
use borges_protocol::message::{self, MessageHead};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::BrokerProcess;
use common::{make_batch, RawClient};
use flatbuffers::FlatBufferBuilder;

fn setup() -> BrokerProcess {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("t", 1, &[]), ErrorCode::None);
    broker
}

/// A frame with `message` as its flatbuffers message, unchecked.
fn raw_frame(api: ApiKey, version: u16, correlation_id: u32, message: &[u8]) -> Vec<u8> {
    let header =
        FrameHeader::new(api as u16, version, 0, correlation_id, message.len(), 0).unwrap();
    let mut out = header.to_bytes().to_vec();
    out.extend_from_slice(message);
    out
}

fn api_versions_frame(version: u16, correlation_id: u32) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let root = wire::ApiVersionsRequest::create(&mut fbb, &Default::default());
    fbb.finish(root, None);
    let head = MessageHead {
        api_key: ApiKey::ApiVersions as u16,
        api_version: version,
        flags: 0,
        correlation_id,
    };
    message::encode_message(head, &fbb, &[]).unwrap().to_vec()
}

/// Whether the broker closed `s` (end of stream, or a reset) without sending anything more.
fn closed_without_a_frame(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut buf = [0u8; 64];
    match s.read(&mut buf) {
        Ok(0) => true,
        Ok(n) => panic!("the broker sent {n} bytes: {:?}", &buf[..n]),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    }
}

fn error_response_code(r: &common::Reply) -> ErrorCode {
    assert!(
        r.header.is_error(),
        "an ErrorResponse frame: {:?}",
        r.header
    );
    message::decode_error_response(&r.message).unwrap().0
}

/// Section 2: a message that does not verify gets an `ErrorResponse` `MalformedFrame` with the
/// request's correlation id; the connection stays open (but for Produce).
#[test]
fn an_unverifiable_message_gets_an_error_response_and_the_connection_stays_open() {
    let broker = setup();
    let mut c = RawClient::connect(broker.addr());
    c.stream
        .write_all(&raw_frame(ApiKey::Metadata, 0, 11, &[0xff; 40]))
        .unwrap();
    let r = c.receive().expect("an answer");
    assert_eq!(r.header.correlation_id, 11);
    assert_eq!(error_response_code(&r), ErrorCode::MalformedFrame);
    // Still open and in step: the next request gets its own answer.
    c.stream.write_all(&api_versions_frame(0, 12)).unwrap();
    let r = c.receive().expect("ApiVersions answer");
    assert_eq!((r.header.correlation_id, r.header.is_error()), (12, false));
}

/// Section 2: a Produce that does not verify may have had acks = 0, so after its
/// `ErrorResponse` the broker closes the connection.
#[test]
fn an_unverifiable_produce_gets_an_error_response_then_the_connection_closes() {
    let broker = setup();
    let mut c = RawClient::connect(broker.addr());
    c.stream
        .write_all(&raw_frame(ApiKey::Produce, 0, 3, &[0xff; 40]))
        .unwrap();
    let r = c.receive().expect("an answer");
    assert_eq!(r.header.correlation_id, 3);
    assert_eq!(error_response_code(&r), ErrorCode::MalformedFrame);
    assert!(closed_without_a_frame(&mut c.stream));
    // Bad payload ranges (section 2.3) in an acks = 1 Produce: the same.
    let mut c = RawClient::connect(broker.addr());
    let range = wire::PayloadRange::new(0, 1_000);
    let fbb = message::one_topic_produce_request("t", &[(0, range)], 1, 1_000);
    let id = c.send(ApiKey::Produce, &fbb, b"short");
    let r = c.receive().expect("an answer");
    assert_eq!(r.header.correlation_id, id);
    assert_eq!(error_response_code(&r), ErrorCode::MalformedFrame);
    assert!(closed_without_a_frame(&mut c.stream));
}

/// Section 4.8: `acks = 0` never gets a frame; a successful one keeps the connection in step,
/// a failed one closes the connection after the answers to the requests before it.
#[test]
fn acks_0_never_gets_a_frame_and_a_failure_closes_the_connection() {
    let broker = setup();
    let mut c = RawClient::connect(broker.addr());
    assert!(c
        .produce_raw("t", 0, &make_batch(&["a"], Compression::None), 0)
        .is_none());
    c.stream.write_all(&api_versions_frame(0, 900)).unwrap();
    assert_eq!(c.receive().unwrap().header.correlation_id, 900, "no drift");
    // A partition-level failure (no such partition): no frame, the connection closes.
    c.stream.write_all(&api_versions_frame(0, 901)).unwrap();
    assert!(c
        .produce_raw("t", 7, &make_batch(&["b"], Compression::None), 0)
        .is_none());
    assert_eq!(c.receive().unwrap().header.correlation_id, 901);
    assert!(closed_without_a_frame(&mut c.stream));
    // A request-level failure (bad payload range): the same.
    let mut c = RawClient::connect(broker.addr());
    let range = wire::PayloadRange::new(0, 1_000);
    let fbb = message::one_topic_produce_request("t", &[(0, range)], 0, 1_000);
    c.send(ApiKey::Produce, &fbb, b"short");
    assert!(closed_without_a_frame(&mut c.stream));
    // Nothing of the failed requests was stored; the good one was.
    // (acks = 0 has no acknowledgement to wait for: a long poll waits for the record.)
    let mut c = RawClient::connect(broker.addr());
    let (code, hw, _, bytes) = c.fetch_raw("t", 0, 0, 30_000, 1);
    let records = common::decode(&bytes, 0);
    assert_eq!((code, hw, records.len()), (ErrorCode::None, 1, 1));
}

/// Section 3: ApiVersions at a version the broker does not support is answered with the
/// version-0 body, `UnsupportedVersion` and the full list of supported APIs.
#[test]
fn api_versions_at_an_unsupported_version_lists_the_supported_versions() {
    let broker = setup();
    let mut c = RawClient::connect(broker.addr());
    c.stream.write_all(&api_versions_frame(77, 5)).unwrap();
    let r = c.receive().expect("an answer");
    assert_eq!(r.header.correlation_id, 5);
    assert!(
        !r.header.is_error(),
        "an ApiVersionsResponse, not an ErrorResponse"
    );
    assert_eq!(r.header.api_version, 0, "the version-0 layout");
    let v = flatbuffers::root::<wire::ApiVersionsResponse>(&r.message).unwrap();
    assert_eq!(
        ErrorCode::from_u16(v.error_code()),
        ErrorCode::UnsupportedVersion
    );
    let listed: Vec<u16> = v
        .api_versions()
        .unwrap()
        .iter()
        .map(|a| a.api_key())
        .collect();
    assert!(listed.contains(&(ApiKey::ApiVersions as u16)), "{listed:?}");
    assert!(listed.contains(&(ApiKey::Produce as u16)), "{listed:?}");
    // And the connection goes on at version 0.
    c.stream.write_all(&api_versions_frame(0, 6)).unwrap();
    assert_eq!(c.receive().unwrap().header.correlation_id, 6);
}

/// Section 4.3: CreateTopics echoes every topic config with its effective value.
#[test]
fn create_topics_echoes_every_effective_config() {
    let broker = setup();
    let mut c = RawClient::connect(broker.addr());
    let mut fbb = FlatBufferBuilder::new();
    let name = fbb.create_string("echo");
    let (k, v) = (fbb.create_string("retention.ms"), fbb.create_string("1000"));
    let entry = wire::ConfigEntry::create(
        &mut fbb,
        &wire::ConfigEntryArgs {
            name: Some(k),
            value: Some(v),
        },
    );
    let configs = fbb.create_vector(&[entry]);
    let topic = wire::CreatableTopic::create(
        &mut fbb,
        &wire::CreatableTopicArgs {
            name: Some(name),
            num_partitions: 1,
            replication_factor: -1,
            configs: Some(configs),
        },
    );
    let topics = fbb.create_vector(&[topic]);
    let root = wire::CreateTopicsRequest::create(
        &mut fbb,
        &wire::CreateTopicsRequestArgs {
            topics: Some(topics),
            timeout_ms: 30_000,
            ..Default::default()
        },
    );
    fbb.finish(root, None);
    let r = c.call(ApiKey::CreateTopics, &fbb, &[]);
    let resp = flatbuffers::root::<wire::CreateTopicsResponse>(&r.message).unwrap();
    let t = resp.topics().unwrap().get(0);
    assert_eq!(ErrorCode::from_u16(t.error_code()), ErrorCode::None);
    let echoed: Vec<(String, String)> = t
        .configs()
        .unwrap()
        .iter()
        .map(|e| (e.name().to_string(), e.value().unwrap_or("").to_string()))
        .collect();
    let get = |n: &str| echoed.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(get("retention.ms").as_deref(), Some("1000"), "{echoed:?}");
    assert_eq!(
        get("segment.bytes").as_deref(),
        Some("1073741824"),
        "{echoed:?}"
    );
    assert_eq!(
        get("cleanup.policy").as_deref(),
        Some("delete"),
        "{echoed:?}"
    );
}

/// Section 4: a topic name that breaks the rules gets the non-retriable `InvalidTopicName`
/// from every API that names topics, never the retriable `UnknownTopicOrPartition`.
#[test]
fn an_invalid_topic_name_is_not_retriable_anywhere() {
    let broker = setup();
    let mut c = RawClient::connect(broker.addr());
    for bad in ["bad name", "..", "x/y"] {
        let (code, _) = c.produce(bad, 0, &["v"], -1);
        assert_eq!(code, ErrorCode::InvalidTopicName, "Produce {bad:?}");
        assert_eq!(
            c.fetch(bad, 0, 0).0,
            ErrorCode::InvalidTopicName,
            "Fetch {bad:?}"
        );
        assert_eq!(
            c.list_offset(bad, 0, -1).0,
            ErrorCode::InvalidTopicName,
            "ListOffsets"
        );
        assert_eq!(
            c.metadata_code(bad),
            ErrorCode::InvalidTopicName,
            "Metadata {bad:?}"
        );
        assert!(!ErrorCode::InvalidTopicName.is_retriable());
    }
    // A valid name that does not exist is still the retriable UnknownTopicOrPartition.
    assert_eq!(
        c.fetch("absent", 0, 0).0,
        ErrorCode::UnknownTopicOrPartition
    );
    assert_eq!(
        c.metadata_code("absent"),
        ErrorCode::UnknownTopicOrPartition
    );
}

/// The document is normative: it describes the broker as it is, with no behaviour marked as a
/// target the broker does not have yet (the rules above are the ones it used to mark).
#[test]
fn the_document_describes_no_future_behaviour() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md");
    let doc = std::fs::read_to_string(path).unwrap();
    for marker in ["**Target", "**Today", "Today:"] {
        let lines: Vec<&str> = doc.lines().filter(|l| l.contains(marker)).collect();
        assert!(
            lines.is_empty(),
            "docs/protocol.md still has {marker}: {lines:?}"
        );
    }
}
