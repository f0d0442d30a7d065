//! Compaction and the idempotent producer against a real broker process: the cleaner keeps
//! each producer's last batch (as an empty batch once every record in it is superseded, as
//! Kafka does), so the producer state rebuilt from the cleaned log alone (every producer
//! snapshot removed, broker killed -9) still recognises each producer's last batch as a
//! duplicate and takes its next sequence.

mod common;

use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchBuilder, BatchOptions, RecordBatch};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::{BrokerOptions, BrokerProcess};
use bytes::Bytes;
use common::{value, RawClient};
use flatbuffers::FlatBufferBuilder;

const TOPIC: &str = "table";
const KEYS: usize = 3;

fn init_producer_id(c: &mut RawClient) -> i64 {
    let mut fbb = FlatBufferBuilder::new();
    let root =
        wire::InitProducerIdRequest::create(&mut fbb, &wire::InitProducerIdRequestArgs::default());
    fbb.finish(root, None);
    let reply = c.call(ApiKey::InitProducerId, &fbb, &[]);
    let r = flatbuffers::root::<wire::InitProducerIdResponse>(&reply.message).unwrap();
    assert_eq!(ErrorCode::from_u16(r.error_code()), ErrorCode::None);
    r.producer_id()
}

/// One batch from `pid` (epoch 0) at sequence `seq`: keys k0..k2, values `tag-k<i>` padded.
fn batch(pid: i64, seq: i32, tag: &str) -> Bytes {
    let mut b = BatchBuilder::new(BatchOptions::default(), 1024);
    for k in 0..KEYS {
        let v = format!("{tag}-k{k}-{}", "x".repeat(200));
        b.push(
            common::now_ms(),
            Some(format!("k{k}").as_bytes()),
            Some(v.as_bytes()),
            &[],
        );
    }
    b.set_producer(pid, 0, seq);
    b.build().unwrap()
}

fn produce(c: &mut RawClient, bytes: &[u8]) -> (ErrorCode, i64) {
    let (code, base, _) = c.produce_raw(TOPIC, 0, bytes, -1).unwrap();
    (code, base)
}

/// Sends `rounds` batches from `pid`, sequences from 0; returns the last batch and its offset.
fn rounds(c: &mut RawClient, pid: i64, tag: &str, rounds: usize) -> (Bytes, i64) {
    let mut last = None;
    for r in 0..rounds {
        let b = batch(pid, (r * KEYS) as i32, &format!("{tag}{r}"));
        let (code, base) = produce(c, &b);
        assert_eq!(code, ErrorCode::None);
        last = Some((b, base));
    }
    last.expect("at least one round")
}

/// Every batch of the partition (empty ones included) up to the high watermark.
fn batches(c: &mut RawClient) -> Vec<RecordBatch> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let (code, hw, _, bytes) = c.fetch_raw(TOPIC, 0, offset, 0, 0);
        assert_eq!(code, ErrorCode::None);
        if offset >= hw {
            return out;
        }
        let from = offset;
        for b in RecordBatch::parse_many(&bytes).unwrap() {
            if b.last_offset() >= from {
                offset = b.last_offset() + 1;
                out.push(b);
            }
        }
        assert!(
            offset > from,
            "a fetch at {from} below {hw} returned nothing"
        );
    }
}

/// The batch of producer `pid` that starts at `base`, if the log still has it.
fn batch_of(all: &[RecordBatch], pid: i64, base: i64) -> Option<&RecordBatch> {
    all.iter()
        .find(|b| b.header().producer_id == pid && b.base_offset() == base)
}

/// Waits until the cleaner took p2's last batch, then checks that p1's and p2's last batches
/// are kept, emptied, with their producer fields, and p2's earlier ones are gone.
fn check_cleaned(c: &mut RawClient, (p1, p1_base): (i64, i64), (p2, p2_base): (i64, i64)) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let all = batches(c);
        // p2's last batch is emptied (or, wrongly, dropped) once the cleaner took it.
        let p2_cleaned = batch_of(&all, p2, p2_base).is_none_or(|b| b.header().records_count == 0);
        if p2_cleaned {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cleaner never cleaned p2's last batch"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let all = batches(c);
    for (pid, base, seq) in [(p1, p1_base, 3), (p2, p2_base, 29 * 3)] {
        let b = batch_of(&all, pid, base).expect("the producer's last batch is kept");
        let h = b.header();
        assert_eq!(
            (h.records_count, h.base_sequence, h.last_offset_delta),
            (0, seq, 2),
            "emptied, with its producer fields and offsets"
        );
    }
    assert!(
        batch_of(&all, p2, p2_base - 3).is_none(),
        "p2's earlier batches are gone"
    );
}

#[test]
fn the_cleaner_keeps_each_producers_last_batch_so_dedup_survives_cleaning() {
    let mut broker = BrokerProcess::start_with(BrokerOptions {
        config_toml: Some("[storage]\ncleaner_backoff_ms = 50\n".to_string()),
        ..BrokerOptions::default()
    });
    let mut c = RawClient::connect(broker.addr());
    let config = [
        ("cleanup.policy", "compact"),
        ("segment.bytes", "4096"),
        ("min.cleanable.dirty.ratio", "0.01"),
    ];
    assert_eq!(c.create_topic(TOPIC, 1, &config), ErrorCode::None);
    // p1 writes two batches, p2 thirty, p3 thirty: every record of p1 and p2 is superseded
    // by p3's (same keys), and p2's last batch lies in a closed segment the cleaner takes.
    let (p1, p2, p3) = (
        init_producer_id(&mut c),
        init_producer_id(&mut c),
        init_producer_id(&mut c),
    );
    let (p1_last, p1_base) = rounds(&mut c, p1, "p1-", 2);
    let (p2_last, p2_base) = rounds(&mut c, p2, "p2-", 30);
    let (_, p3_base) = rounds(&mut c, p3, "p3-", 30);
    assert_eq!(
        (p1_base, p2_base, p3_base),
        (3, 6 + 29 * 3, 6 + 90 + 29 * 3)
    );
    check_cleaned(&mut c, (p1, p1_base), (p2, p2_base));
    let records = c.fetch_all(TOPIC, 0, 0);
    assert!(records.iter().all(|r| value(r).starts_with("p3-")));
    // Producer state from the cleaned log alone.
    broker.kill9();
    let dir = broker.data_dir().join(format!("{TOPIC}-0"));
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.to_string_lossy().ends_with(".producer-snapshot") {
            std::fs::remove_file(path).unwrap();
        }
    }
    broker.restart();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(
        produce(&mut c, &p1_last),
        (ErrorCode::DuplicateSequenceNumber, p1_base),
        "p1's last batch is still known"
    );
    assert_eq!(
        produce(&mut c, &p2_last),
        (ErrorCode::DuplicateSequenceNumber, p2_base),
        "p2's last batch is still known"
    );
    let end = c.list_offset(TOPIC, 0, -1).1;
    let gap = batch(p1, 9, "p1-gap");
    assert_eq!(produce(&mut c, &gap).0, ErrorCode::OutOfOrderSequenceNumber);
    assert_eq!(
        produce(&mut c, &batch(p1, 6, "p1-next")),
        (ErrorCode::None, end)
    );
    assert_eq!(
        produce(&mut c, &batch(p2, 30 * 3, "p2-next")),
        (ErrorCode::None, end + 3)
    );
}
