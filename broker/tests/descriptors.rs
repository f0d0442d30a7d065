//! File descriptors against a real broker started with a low `RLIMIT_NOFILE`: the connection
//! limit follows from the descriptor limit (said in one start-up line), a flood of connections
//! is answered `TooManyConnections` on every refused connection, and storage keeps the
//! descriptors it needs to create topics and roll segments while the flood holds every slot.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use borges_protocol::frame::FrameHeader;
use borges_protocol::message::{self, MessageHead};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, value, RawClient};
use flatbuffers::FlatBufferBuilder;

/// How long the flood's answers may take in all (generous: "answered" against "never").
const ANSWERS_DEADLINE: Duration = Duration::from_secs(60);

fn start(soft: u64, hard: u64) -> BrokerProcess {
    BrokerProcess::start_with(BrokerOptions {
        cores: 2,
        open_files_limit: Some((soft, hard)),
        config_toml: Some("[log]\nsegment_size_bytes = 1048576\n".into()),
        ..Default::default()
    })
}

/// The start-up line that shares the descriptors out.
fn descriptor_line(broker: &BrokerProcess) -> String {
    let log = broker.log();
    log.lines()
        .find(|l| l.contains("connections_max ") && l.contains("RLIMIT_NOFILE"))
        .unwrap_or_else(|| panic!("no descriptor line in the log:\n{log}"))
        .to_string()
}

fn api_versions_frame(correlation_id: u32) -> Vec<u8> {
    let mut fbb = FlatBufferBuilder::new();
    let root = wire::ApiVersionsRequest::create(&mut fbb, &Default::default());
    fbb.finish(root, None);
    let head = MessageHead::request(ApiKey::ApiVersions, 0, correlation_id);
    message::encode_message(head, &fbb, &[]).unwrap().to_vec()
}

#[derive(Debug, PartialEq)]
enum Answer {
    Served,
    Refused,
    Nothing(String),
}

/// Reads the answer to the ApiVersions request `correlation_id` sent on `s`.
fn answer(s: &mut TcpStream, correlation_id: u32, deadline: Instant) -> Answer {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Ok(h) = FrameHeader::decode(&buf, u32::MAX) {
            if buf.len() >= h.frame_size_bytes as usize {
                if h.correlation_id != correlation_id || !h.is_response() {
                    return Answer::Nothing(format!("a frame for another request: {h:?}"));
                }
                if !h.is_error() {
                    return Answer::Served;
                }
                let msg = &buf[24..24 + h.message_size_bytes as usize];
                let (code, text) = message::decode_error_response(msg).unwrap();
                return match code {
                    ErrorCode::TooManyConnections => Answer::Refused,
                    other => Answer::Nothing(format!("{other:?}: {text:?}")),
                };
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        s.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match s.read(&mut chunk) {
            Ok(0) => return Answer::Nothing(format!("closed after {} bytes", buf.len())),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) => return Answer::Nothing(format!("{e} after {} bytes", buf.len())),
        }
    }
}

/// Creates a topic, produces enough to roll its segments, and reads it all back.
fn storage_works(c: &mut RawClient, topic: &str) {
    assert_eq!(c.create_topic(topic, 2, &[]), ErrorCode::None);
    let big = "x".repeat(400 << 10);
    for p in 0..2 {
        for _ in 0..4 {
            let batch = make_batch(&[big.as_str()], borges_protocol::batch::Compression::None);
            let (code, _, message) = c.produce_raw(topic, p, &batch, -1).unwrap();
            assert_eq!(code, ErrorCode::None, "{message:?}");
        }
        assert_eq!(c.produce(topic, p, &["last"], -1).0, ErrorCode::None);
        let records = c.fetch_all(topic, p, 0);
        assert_eq!(records.len(), 5);
        assert_eq!(value(&records[4]), "last");
    }
}

#[test]
fn a_connection_flood_under_a_low_descriptor_limit_is_refused_and_storage_keeps_working() {
    let broker = start(1000, 1000);
    let line = descriptor_line(&broker);
    assert!(line.contains("lowered to"), "{line}");
    assert!(line.contains("RLIMIT_NOFILE 1000,"), "{line}");
    let mut c = RawClient::connect(broker.addr());
    // 600 connections would need 1,200 descriptors: far beyond the limit.
    let mut flood = Vec::new();
    for i in 0..600u32 {
        let mut s = TcpStream::connect(broker.addr()).expect("connect");
        s.write_all(&api_versions_frame(i + 1)).unwrap();
        flood.push(s);
    }
    let deadline = Instant::now() + ANSWERS_DEADLINE;
    let mut answers = Vec::new();
    for (i, s) in flood.iter_mut().enumerate() {
        answers.push(answer(s, i as u32 + 1, deadline));
    }
    let served = answers.iter().filter(|a| **a == Answer::Served).count();
    let refused = answers.iter().filter(|a| **a == Answer::Refused).count();
    let unanswered: Vec<_> = answers
        .iter()
        .enumerate()
        .filter(|(_, a)| matches!(a, Answer::Nothing(_)))
        .take(5)
        .collect();
    assert!(
        unanswered.is_empty(),
        "{} of 600 connections got no TooManyConnections (served {served}, refused {refused}); \
         first: {unanswered:?}; {line}",
        600 - served - refused
    );
    assert!(
        refused > 0 && served > 0,
        "served {served}, refused {refused}"
    );
    // Every connection slot is taken: storage still has its descriptors.
    storage_works(&mut c, "during-flood");
    drop(flood);
    storage_works(&mut RawClient::connect(broker.addr()), "after-flood");
}

#[test]
fn the_soft_descriptor_limit_is_raised_to_the_hard_one_and_said_at_start_up() {
    let broker = start(700, 1200);
    let line = descriptor_line(&broker);
    assert!(
        line.contains("RLIMIT_NOFILE 1200 (raised from 700)"),
        "{line}"
    );
    assert!(line.contains("connections_max 10000 lowered to"), "{line}");
    storage_works(&mut RawClient::connect(broker.addr()), "t");
}
