//! Compacted topics against a real broker process: policies at create, keyless records
//! refused, the cleaner keeping the latest record per key with holes that fetch crosses, a
//! broker killed (-9) again and again while it cleans, and group offsets following their topic.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchBuilder, BatchOptions, Compression};
use borges_protocol::ErrorCode;
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, value, RawClient};

/// A broker whose cleaner looks for work every 50 ms.
fn eager_cleaner() -> BrokerOptions {
    BrokerOptions {
        config_toml: Some("[storage]\ncleaner_backoff_ms = 50\n".to_string()),
        ..BrokerOptions::default()
    }
}

const COMPACT: &[(&str, &str)] = &[
    ("cleanup.policy", "compact"),
    ("segment.bytes", "4096"),
    ("min.cleanable.dirty.ratio", "0.01"),
];

#[test]
fn policies_are_checked_and_compacted_topics_refuse_keyless_records() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    let bad = c.create_topic("bad", 1, &[("cleanup.policy", "shred")]);
    assert_eq!(bad, ErrorCode::InvalidConfig);
    let bad = c.create_topic("bad", 1, &[("min.cleanable.dirty.ratio", "2")]);
    assert_eq!(bad, ErrorCode::InvalidConfig);
    assert_eq!(
        c.create_topic("both", 1, &[("cleanup.policy", "compact,delete")]),
        ErrorCode::None
    );
    assert_eq!(c.create_topic("table", 1, COMPACT), ErrorCode::None);
    let mut b = BatchBuilder::new(BatchOptions::default(), 64);
    b.push(common::now_ms(), Some(b"k"), Some(b"keyed"), &[]);
    b.push(common::now_ms(), None, Some(b"keyless"), &[]);
    let batch = b.build().unwrap();
    let (code, _, message) = c.produce_raw("table", 0, &batch, 1).unwrap();
    assert_eq!(code, ErrorCode::InvalidRecord);
    assert!(message.unwrap_or_default().contains("with a key"));
    assert_eq!(
        c.fetch("table", 0, 0).2.len(),
        0,
        "nothing of the refused batch appended"
    );
    // The same batch is fine on a topic under the delete policy.
    assert_eq!(c.create_topic("events", 1, &[]), ErrorCode::None);
    assert_eq!(
        c.produce_raw("events", 0, &batch, 1).unwrap().0,
        ErrorCode::None
    );
    assert_eq!(c.produce("table", 0, &["v"], 1).0, ErrorCode::None);
}

/// Produces `rounds` batches of three records with keys k0, k1, k2; returns the last value of
/// each key.
fn produce_rounds(c: &mut RawClient, topic: &str, from: usize, rounds: usize) -> Vec<String> {
    let mut last = Vec::new();
    for r in from..from + rounds {
        let values: Vec<String> = (0..3)
            .map(|k| format!("r{r}-k{k}-{}", "x".repeat(200)))
            .collect();
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        let batch = make_batch(&refs, Compression::None);
        assert_eq!(
            c.produce_raw(topic, 0, &batch, -1).unwrap().0,
            ErrorCode::None
        );
        last = values;
    }
    last
}

/// Checks the partition: offsets increase, and each key's last record is `latest`.
fn check_latest(c: &mut RawClient, topic: &str, latest: &[String]) -> usize {
    let records = c.fetch_all(topic, 0, 0);
    assert!(records.windows(2).all(|w| w[0].offset < w[1].offset));
    let mut last = BTreeMap::new();
    for r in &records {
        last.insert(r.key.clone().unwrap(), value(r));
    }
    for (k, v) in latest.iter().enumerate() {
        let key = bytes::Bytes::from(format!("k{k}"));
        assert_eq!(last.get(&key), Some(v), "key k{k}: latest value");
    }
    records.len()
}

#[test]
fn the_cleaner_keeps_the_latest_value_per_key_and_fetch_crosses_the_holes() {
    let broker = BrokerProcess::start_with(eager_cleaner());
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("table", 1, COMPACT), ErrorCode::None);
    let latest = produce_rounds(&mut c, "table", 0, 120);
    // Closes the last segment written above, so the cleaner may take it.
    let filler = produce_rounds(&mut c, "table", 120, 20);
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let n = check_latest(&mut c, "table", &filler);
        if n < 120 * 3 / 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cleaner never ran ({n} records)"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let records = c.fetch_all("table", 0, 0);
    assert!(records[0].offset > 0 || records.windows(2).any(|w| w[1].offset > w[0].offset + 1));
    // A consumer positioned inside a hole gets the next existing record.
    let hole = (0..records[0].offset).next().unwrap_or(0);
    let (code, _, from_hole) = c.fetch("table", 0, hole);
    assert_eq!(code, ErrorCode::None);
    // (The cleaner may have removed more since: records only ever go, never come back.)
    let first = from_hole.first().map(|r| r.offset);
    assert!(first.is_some_and(|o| o >= records[0].offset), "{first:?}");
    let metrics = std::net::TcpStream::connect(broker.metrics_addr()).is_ok();
    assert!(metrics);
    let _ = latest;
}

#[test]
fn a_broker_killed_while_it_cleans_keeps_the_latest_values() {
    let mut broker = BrokerProcess::start_with(eager_cleaner());
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("table", 1, COMPACT), ErrorCode::None);
    let mut round = 0;
    for kill in 0..6u64 {
        let latest = produce_rounds(&mut c, "table", round, 60);
        round += 60;
        // The cleaner picks the new dirty segments within 50 ms; kill at varying moments.
        std::thread::sleep(Duration::from_millis(20 + kill * 37));
        broker.restart();
        c = RawClient::connect(broker.addr());
        check_latest(&mut c, "table", &latest);
    }
}

#[test]
fn deleting_a_topic_deletes_its_committed_offsets() {
    let mut broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("orders", 2, &[]), ErrorCode::None);
    assert_eq!(c.create_topic("kept", 1, &[]), ErrorCode::None);
    let commits = [("orders", 0, 5), ("orders", 1, 7), ("kept", 0, 3)];
    assert_eq!(
        c.commit("billing", "", -1, &commits),
        vec![ErrorCode::None; 3]
    );
    assert_eq!(c.delete_topic("orders"), ErrorCode::None);
    assert_eq!(c.committed("billing"), vec![("kept".to_string(), 0, 3)]);
    assert_eq!(c.describe_group("billing").0, ErrorCode::None);
    assert_eq!(c.create_topic("orders", 2, &[]), ErrorCode::None);
    assert_eq!(c.committed("billing"), vec![("kept".to_string(), 0, 3)]);
    broker.restart();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.committed("billing"), vec![("kept".to_string(), 0, 3)]);
}
