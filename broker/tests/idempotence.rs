//! The idempotent producer against a real broker process: InitProducerId, duplicates stored
//! once and answered with the original offset, gaps and stale epochs refused with nothing
//! appended, the state rebuilt after kill -9 and after a clean restart, idle producers expiring,
//! and 100,000 producer ids with bounded memory.

mod common;

use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::{BrokerOptions, BrokerProcess};
use bytes::{Bytes, BytesMut};
use common::{value, RawClient};
use flatbuffers::FlatBufferBuilder;

/// InitProducerId: (error, producer id, epoch).
fn init_producer_id(c: &mut RawClient, transactional_id: Option<&str>) -> (ErrorCode, i64, i16) {
    let mut fbb = FlatBufferBuilder::new();
    let tid = transactional_id.map(|t| fbb.create_string(t));
    let root = wire::InitProducerIdRequest::create(
        &mut fbb,
        &wire::InitProducerIdRequestArgs {
            transactional_id: tid,
            ..Default::default()
        },
    );
    fbb.finish(root, None);
    let reply = c.call(ApiKey::InitProducerId, &fbb, &[]);
    let r = flatbuffers::root::<wire::InitProducerIdResponse>(&reply.message).unwrap();
    (
        ErrorCode::from_u16(r.error_code()),
        r.producer_id(),
        r.producer_epoch(),
    )
}

/// One batch of `values` from producer `pid` at `epoch`, first sequence `seq`.
fn batch(pid: i64, epoch: i16, seq: i32, values: &[String]) -> Bytes {
    let mut b = BatchBuilder::new(BatchOptions::default(), 256);
    for v in values {
        b.push(common::now_ms(), None, Some(v.as_bytes()), &[]);
    }
    b.set_producer(pid, epoch, seq);
    b.build().unwrap()
}

fn values(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// (error, base offset) of producing `bytes` to partition 0 of `topic`.
fn produce(c: &mut RawClient, topic: &str, bytes: &[u8]) -> (ErrorCode, i64) {
    let (code, base, _) = c.produce_raw(topic, 0, bytes, -1).unwrap();
    (code, base)
}

fn log_end(c: &mut RawClient, topic: &str) -> i64 {
    c.list_offset(topic, 0, -1).1
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The `borges_partition_producers` gauge of partition 0 of `topic`.
fn producers(broker: &BrokerProcess, topic: &str) -> Option<u64> {
    let text = http_get(&broker.metrics_addr(), "/metrics");
    let prefix = format!("borges_partition_producers{{topic=\"{topic}\",partition=\"0\"");
    text.lines()
        .find(|l| l.starts_with(&prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// Waits (polling, no timing assertion) until `f` holds; panics after a generous deadline.
fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !f() {
        assert!(Instant::now() < deadline, "never happened: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn producer_ids_are_fresh_and_never_reused_after_a_restart() {
    let mut broker = BrokerProcess::start();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..3 {
        let mut c = RawClient::connect(broker.addr());
        for _ in 0..5 {
            let (code, pid, epoch) = init_producer_id(&mut c, None);
            assert_eq!((code, epoch), (ErrorCode::None, 0));
            assert!(pid >= 0 && seen.insert(pid), "{pid} handed out twice");
        }
        // Transactions are refused with a typed error; the connection stays usable.
        let (code, pid, _) = init_producer_id(&mut c, Some("txn-1"));
        assert_eq!((code, pid), (ErrorCode::InvalidRequest, -1));
        broker.restart();
    }
    broker.kill9();
}

#[test]
fn a_batch_sent_twice_is_stored_once_and_answered_with_its_offset() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("dup", 1, &[]), ErrorCode::None);
    let (_, pid, _) = init_producer_id(&mut c, None);
    assert_eq!(c.produce("dup", 0, &["plain"], -1), (ErrorCode::None, 0));
    let first = batch(pid, 0, 0, &values("a", 3));
    let second = batch(pid, 0, 3, &values("b", 2));
    assert_eq!(produce(&mut c, "dup", &first), (ErrorCode::None, 1));
    assert_eq!(produce(&mut c, "dup", &second), (ErrorCode::None, 4));
    // Retries of either, in any order, are answered with the original offsets.
    for _ in 0..2 {
        assert_eq!(
            produce(&mut c, "dup", &first),
            (ErrorCode::DuplicateSequenceNumber, 1)
        );
        assert_eq!(
            produce(&mut c, "dup", &second),
            (ErrorCode::DuplicateSequenceNumber, 4)
        );
    }
    let stored: Vec<String> = c.fetch_all("dup", 0, 0).iter().map(value).collect();
    assert_eq!(stored, ["plain", "a-0", "a-1", "a-2", "b-0", "b-1"]);
}

#[test]
fn gaps_stale_epochs_and_bad_producer_fields_are_refused_with_nothing_appended() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("seq", 1, &[]), ErrorCode::None);
    let (_, pid, _) = init_producer_id(&mut c, None);
    assert_eq!(
        produce(&mut c, "seq", &batch(pid, 0, 0, &values("a", 2))).0,
        ErrorCode::None
    );
    let end = log_end(&mut c, "seq");
    let refused = [
        // A gap after sequence 1.
        (
            batch(pid, 0, 5, &values("gap", 1)),
            ErrorCode::OutOfOrderSequenceNumber,
        ),
        // A new epoch must start at sequence 0.
        (
            batch(pid, 1, 2, &values("bump", 1)),
            ErrorCode::OutOfOrderSequenceNumber,
        ),
        // Sequence without an epoch, epoch without a sequence.
        (
            batch(pid, -1, 2, &values("bad", 1)),
            ErrorCode::InvalidRecordBatch,
        ),
        (
            batch(pid, 0, -1, &values("bad", 1)),
            ErrorCode::InvalidRecordBatch,
        ),
        (
            batch(-7, 0, 0, &values("bad", 1)),
            ErrorCode::InvalidRecordBatch,
        ),
    ];
    for (bytes, code) in &refused {
        let (got, _, message) = c.produce_raw("seq", 0, bytes, -1).unwrap();
        assert_eq!(got, *code, "{message:?}");
        assert!(message.is_some_and(|m| !m.is_empty()), "errors say why");
    }
    // The producer bumps its epoch (KIP-360): sequence 0 again; the old epoch is fenced.
    assert_eq!(
        produce(&mut c, "seq", &batch(pid, 1, 0, &values("e1", 1))).0,
        ErrorCode::None
    );
    assert_eq!(
        produce(&mut c, "seq", &batch(pid, 0, 2, &values("stale", 1))).0,
        ErrorCode::InvalidProducerEpoch
    );
    // A gap in one batch of a two-batch partition refuses both.
    let mut two = BytesMut::from(&batch(pid, 1, 1, &values("ok", 1))[..]);
    two.extend_from_slice(&batch(pid, 1, 9, &values("gap", 1)));
    assert_eq!(
        produce(&mut c, "seq", &two).0,
        ErrorCode::OutOfOrderSequenceNumber
    );
    assert_eq!(
        log_end(&mut c, "seq"),
        end + 1,
        "only the epoch bump was appended"
    );
    let stored: Vec<String> = c.fetch_all("seq", 0, 0).iter().map(value).collect();
    assert_eq!(stored, ["a-0", "a-1", "e1-0"]);
}

#[test]
fn the_state_is_rebuilt_after_kill_9_and_after_a_clean_restart() {
    let mut broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("crash", 1, &[]), ErrorCode::None);
    let (_, pid, _) = init_producer_id(&mut c, None);
    let mut sent = Vec::new();
    for round in 0..6 {
        let b = batch(pid, 0, round * 2, &values(&format!("r{round}"), 2));
        assert_eq!(produce(&mut c, "crash", &b).0, ErrorCode::None);
        sent.push(b);
    }
    for (how, next_seq) in [("kill -9", 12), ("clean restart", 14)] {
        if how == "kill -9" {
            broker.kill9();
        } else {
            assert!(broker
                .terminate(Duration::from_secs(30))
                .is_some_and(|s| s.success()));
        }
        broker.restart();
        let mut c = RawClient::connect(broker.addr());
        // The last five batches are recognised; the next sequence is the one after them.
        for (i, b) in sent.iter().enumerate().skip(sent.len() - 5) {
            assert_eq!(
                produce(&mut c, "crash", b),
                (ErrorCode::DuplicateSequenceNumber, 2 * i as i64),
                "{how}: batch {i}"
            );
        }
        let gap = batch(pid, 0, next_seq + 1, &values("gap", 1));
        assert_eq!(
            produce(&mut c, "crash", &gap).0,
            ErrorCode::OutOfOrderSequenceNumber,
            "{how}"
        );
        let b = batch(pid, 0, next_seq, &values(&format!("after {how}"), 2));
        assert_eq!(produce(&mut c, "crash", &b).0, ErrorCode::None, "{how}");
        sent.push(b);
    }
    assert_eq!(c_log_end(&broker, "crash"), 16);
}

fn c_log_end(broker: &BrokerProcess, topic: &str) -> i64 {
    log_end(&mut RawClient::connect(broker.addr()), topic)
}

#[test]
fn idle_producers_expire_and_a_hundred_thousand_ids_stay_bounded() {
    let broker = BrokerProcess::start_with(BrokerOptions {
        config_toml: Some(
            "[producers]\nproducer_id_expiration_ms = 3000\n\
             producer_id_expiration_check_interval_ms = 100\n\
             producers_per_partition_max = 20000\n"
                .into(),
        ),
        ..Default::default()
    });
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("idle", 1, &[]), ErrorCode::None);
    // 100,000 producers, 1,000 batches (one per producer id) per request.
    let one = values("x", 1);
    for chunk in 0..100 {
        let mut data = BytesMut::new();
        for i in 0..1000 {
            data.extend_from_slice(&batch(1_000_000 + chunk * 1000 + i, 0, 0, &one));
        }
        assert_eq!(produce(&mut c, "idle", &data).0, ErrorCode::None);
        let remembered = producers(&broker, "idle").unwrap();
        assert!(remembered <= 20_000, "{remembered} producers remembered");
    }
    assert_eq!(log_end(&mut c, "idle"), 100_000);
    eventually("every producer expires", || {
        producers(&broker, "idle") == Some(0)
    });
    // An idle producer's retry is appended again after expiry (as in Kafka); before, it is
    // recognised.
    let b = batch(7, 0, 0, &values("late", 1));
    assert_eq!(produce(&mut c, "idle", &b), (ErrorCode::None, 100_000));
    assert_eq!(
        produce(&mut c, "idle", &b),
        (ErrorCode::DuplicateSequenceNumber, 100_000)
    );
    eventually("the producer expires", || {
        producers(&broker, "idle") == Some(0)
    });
    assert_eq!(produce(&mut c, "idle", &b), (ErrorCode::None, 100_001));
}
