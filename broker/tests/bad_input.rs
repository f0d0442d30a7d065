//! Hostile and broken input: every case gets a typed error (or a closed connection) and the
//! broker keeps serving everyone else with nothing appended.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use borges_protocol::batch::{self, Compression};
use borges_protocol::frame::{FrameHeader, FLAG_RESPONSE};
use borges_protocol::message::{self, MessageHead};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, value, RawClient};
use flatbuffers::FlatBufferBuilder;

fn still_serving(broker: &BrokerProcess) {
    let mut c = RawClient::connect(broker.addr());
    let (code, _, records) = c.fetch("good", 0, 0);
    assert_eq!(code, ErrorCode::None);
    assert_eq!(records.iter().map(value).collect::<Vec<_>>(), ["ok"]);
}

fn setup() -> BrokerProcess {
    let broker = BrokerProcess::start_with(BrokerOptions {
        config_toml: Some(
            "[limits]\nframe_size_bytes_max = 1048576\n[log]\nmax_message_bytes = 65536\n".into(),
        ),
        ..Default::default()
    });
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(
        c.create_topic("good", 1, &[("max.message.bytes", "4096")]),
        ErrorCode::None
    );
    assert_eq!(c.produce("good", 0, &["ok"], -1).0, ErrorCode::None);
    broker
}

/// Reads until the broker closes; returns what it sent.
fn drain(mut s: TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    out
}

fn error_code_of(bytes: &[u8]) -> ErrorCode {
    let h = FrameHeader::decode(bytes, u32::MAX).expect("an error frame");
    assert!(h.is_response() && h.is_error());
    let msg = &bytes[24..24 + h.message_size_bytes as usize];
    message::decode_error_response(msg).unwrap().0
}

#[test]
fn random_bytes_close_the_connection_with_an_error() {
    let broker = setup();
    let mut seed = 0x9e3779b97f4a7c15u64;
    for round in 0..20 {
        let mut s = TcpStream::connect(broker.addr()).unwrap();
        let garbage: Vec<u8> = (0..(64 + round * 97))
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let _ = s.write_all(&garbage);
        // A header whose checksum does not match: the broker answers MalformedFrame, then
        // closes (it lingers, so the answer is not lost to a reset). Silence is a failure.
        let reply = drain(s);
        assert!(
            !reply.is_empty(),
            "round {round}: closed without the MalformedFrame answer"
        );
        assert_eq!(
            error_code_of(&reply),
            ErrorCode::MalformedFrame,
            "round {round}"
        );
    }
    still_serving(&broker);
}

#[test]
fn huge_length_prefix_is_refused_before_allocation() {
    let broker = setup();
    for size in [2u32 << 20, u32::MAX] {
        let mut s = TcpStream::connect(broker.addr()).unwrap();
        // A valid header (checksum included) whose only problem is the size.
        let fixed = FrameHeader::new(6, 0, 0, 7, 10, size as usize - 34).unwrap();
        assert_eq!(fixed.frame_size_bytes, size);
        s.write_all(&fixed.to_bytes()).unwrap();
        let reply = drain(s);
        assert_eq!(error_code_of(&reply), ErrorCode::FrameTooLarge);
    }
    still_serving(&broker);
}

#[test]
fn truncated_frames_and_silent_peers_do_not_disturb_others() {
    let broker = setup();
    let mut fbb = FlatBufferBuilder::new();
    let root = wire::MetadataRequest::create(
        &mut fbb,
        &wire::MetadataRequestArgs {
            topics: None,
            all_topics: true,
        },
    );
    fbb.finish(root, None);
    let frame =
        message::encode_message(MessageHead::request(ApiKey::Metadata, 0, 1), &fbb, &[]).unwrap();
    let mut idle = Vec::new();
    for cut in [1, 10, 23, 24, frame.len() - 1] {
        let mut s = TcpStream::connect(broker.addr()).unwrap();
        s.write_all(&frame[..cut]).unwrap();
        idle.push(s);
    }
    still_serving(&broker);
    drop(idle);
    still_serving(&broker);
}

#[test]
fn unknown_api_and_version_get_typed_errors_and_the_connection_lives_on() {
    let broker = setup();
    let mut s = TcpStream::connect(broker.addr()).unwrap();
    let mut fbb = FlatBufferBuilder::new();
    let root = wire::MetadataRequest::create(
        &mut fbb,
        &wire::MetadataRequestArgs {
            topics: None,
            all_topics: true,
        },
    );
    fbb.finish(root, None);
    let frame = |api_key: u16, api_version: u16, flags: u16, correlation_id: u32| {
        let head = MessageHead {
            api_key,
            api_version,
            flags,
            correlation_id,
        };
        message::encode_message(head, &fbb, &[]).unwrap()
    };
    let metadata = ApiKey::Metadata as u16;
    let unknown = frame(999, 0, 0, 5);
    let bad_version = frame(metadata, 77, 0, 6);
    let as_response = frame(metadata, 0, FLAG_RESPONSE, 7);
    let good =
        message::encode_message(MessageHead::request(ApiKey::Metadata, 0, 8), &fbb, &[]).unwrap();
    for f in [&unknown, &bad_version, &as_response, &good] {
        s.write_all(f).unwrap();
    }
    let mut c = RawClient::connect(broker.addr());
    c.stream = s;
    let r = c.receive().unwrap();
    assert_eq!((r.header.correlation_id, r.header.is_error()), (5, true));
    assert_eq!(
        message::decode_error_response(&r.message).unwrap().0,
        ErrorCode::UnsupportedApi
    );
    let r = c.receive().unwrap();
    assert_eq!(r.header.correlation_id, 6);
    assert_eq!(
        message::decode_error_response(&r.message).unwrap().0,
        ErrorCode::UnsupportedVersion
    );
    let r = c.receive().unwrap();
    assert_eq!(r.header.correlation_id, 7);
    assert_eq!(
        message::decode_error_response(&r.message).unwrap().0,
        ErrorCode::InvalidRequest
    );
    let r = c.receive().unwrap();
    assert_eq!((r.header.correlation_id, r.header.is_error()), (8, false));
    still_serving(&broker);
}

#[test]
fn malformed_message_gets_a_typed_error() {
    let broker = setup();
    let mut s = TcpStream::connect(broker.addr()).unwrap();
    let junk = [0xffu8; 40];
    let header = FrameHeader::new(ApiKey::Produce as u16, 0, 0, 3, junk.len(), 0).unwrap();
    s.write_all(&header.to_bytes()).unwrap();
    s.write_all(&junk).unwrap();
    let mut c = RawClient::connect(broker.addr());
    c.stream = s;
    let r = c.receive().unwrap();
    assert_eq!(r.header.correlation_id, 3);
    assert!(
        r.header.is_error(),
        "an ErrorResponse (docs/protocol.md section 2)"
    );
    assert_eq!(
        message::decode_error_response(&r.message).unwrap().0,
        ErrorCode::MalformedFrame
    );
    still_serving(&broker);
}

#[test]
fn bad_batches_are_refused_and_nothing_is_appended() {
    let broker = setup();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(
        c.create_topic("strict", 1, &[("max.message.bytes", "4096")]),
        ErrorCode::None
    );
    let good = make_batch(&["fine"], Compression::None);

    let mut corrupt = good.to_vec();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0x01;
    let mut cases: Vec<(Vec<u8>, ErrorCode)> = vec![(corrupt, ErrorCode::CorruptRecordBatch)];

    let big: Vec<String> = (0..50).map(|i| format!("{i:0>100}")).collect();
    let refs: Vec<&str> = big.iter().map(String::as_str).collect();
    cases.push((
        make_batch(&refs, Compression::None).to_vec(),
        ErrorCode::RecordBatchTooLarge,
    ));

    let mut gzip = good.to_vec();
    gzip[batch::field::ATTRIBUTES + 1] |= 1; // compression bits = 1 (gzip)
    let crc = crc32c::crc32c(&gzip[batch::field::ATTRIBUTES..]);
    gzip[batch::field::CRC..batch::field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    cases.push((gzip, ErrorCode::UnsupportedCompression));

    let mut bad_magic = good.to_vec();
    bad_magic[batch::field::MAGIC] = 1;
    cases.push((bad_magic, ErrorCode::InvalidRecordBatch));

    // A good batch followed by a torn one: the whole partition request is refused.
    let mut torn = good.to_vec();
    torn.extend_from_slice(&good[..good.len() - 5]);
    cases.push((torn, ErrorCode::InvalidRecordBatch));

    cases.push((Vec::new(), ErrorCode::InvalidRecordBatch));

    for (bytes, expected) in cases {
        let (code, offset, msg) = c.produce_raw("strict", 0, &bytes, -1).unwrap();
        assert_eq!(code, expected, "{msg:?}");
        assert_eq!(offset, -1);
        assert!(msg.is_some(), "errors carry a message");
    }
    let (code, hw, records) = c.fetch("strict", 0, 0);
    assert_eq!(
        (code, hw, records.len()),
        (ErrorCode::None, 0, 0),
        "nothing appended"
    );
    assert_eq!(c.produce_raw("strict", 0, &good, -1).unwrap().1, 0);
    assert_eq!(
        c.produce("strict", 0, &["x"], 7).0,
        ErrorCode::InvalidRequest,
        "acks 7 is refused at request level"
    );
    still_serving(&broker);
}

#[test]
fn invalid_broker_config_fails_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "[limits]\nframe_size_bytes_max = \"big\"\n").unwrap();
    let out = std::process::Command::new(borges_testkit::borges_bin())
        .args(["broker", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&cfg)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("frame_size_bytes_max"), "{err}");

    let out = std::process::Command::new(borges_testkit::borges_bin())
        .args(["broker", "--listen", "not-an-address", "--data-dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("listen"));
}

#[test]
fn a_second_broker_on_the_same_data_dir_is_refused() {
    let broker = setup();
    let out = std::process::Command::new(borges_testkit::borges_bin())
        .args([
            "broker",
            "--listen",
            "127.0.0.1:1",
            "--metrics-listen",
            "",
            "--data-dir",
        ])
        .arg(broker.data_dir())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("in use by another broker"));
    still_serving(&broker);
}

fn start_refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(borges_testkit::borges_bin())
        .arg("broker")
        .args(args)
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success(), "the broker started: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_second_broker_on_the_same_listen_address_is_refused() {
    // Every core binds the main address with SO_REUSEPORT; a second broker must not silently
    // join it and take half of the connections.
    let broker = setup();
    let listen = broker.addr().to_string();
    let stderr = start_refused(&["--listen", &listen, "--metrics-listen", ""]);
    assert!(
        stderr.contains(&format!("cannot listen on {listen}")),
        "{stderr}"
    );
    still_serving(&broker);
}

#[test]
fn a_metrics_address_on_a_core_port_is_refused() {
    let listen = format!("127.0.0.1:{}", borges_testkit::free_port());
    // Core 0's port is the base; both ports are the test's own (listen port + 1, the
    // default, may be another test's: the metrics endpoint is bound first and would hold it).
    let base = borges_testkit::free_port();
    let metrics = format!("127.0.0.1:{base}");
    let stderr = start_refused(&[
        "--cores",
        "1",
        "--listen",
        &listen,
        "--core-port-base",
        &base.to_string(),
        "--metrics-listen",
        &metrics,
    ]);
    assert!(
        stderr.contains(&format!("127.0.0.1:{base}")) && stderr.contains("in use"),
        "{stderr}"
    );
}
