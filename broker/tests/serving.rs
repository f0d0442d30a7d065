//! The broker serving real clients over loopback: produce/fetch on every core, direct and
//! forwarded paths, long polls, offsets, restarts.

mod common;

use std::time::Duration;

use borges_protocol::batch::Compression;
use borges_protocol::ErrorCode;
use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{make_batch, make_batch_at, value, RawClient};

#[test]
fn produce_and_fetch_round_trip_on_every_partition_and_core() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("orders", 8, &[]), ErrorCode::None);
    let (_, leaders) = c.placement("orders");
    let cores: std::collections::BTreeSet<u16> = leaders.iter().copied().collect();
    assert_eq!(
        cores.len(),
        broker_cores(),
        "partitions spread over every core"
    );
    for p in 0..8 {
        for round in 0..3 {
            let values: Vec<String> = (0..5).map(|i| format!("p{p}-r{round}-v{i}")).collect();
            let refs: Vec<&str> = values.iter().map(String::as_str).collect();
            let acks = [1, -1, 1][round];
            let (code, base) = c.produce("orders", p, &refs, acks);
            assert_eq!(code, ErrorCode::None);
            assert_eq!(
                base,
                round as i64 * 5,
                "offsets are contiguous per partition"
            );
        }
    }
    for p in 0..8 {
        let records = c.fetch_all("orders", p, 0);
        assert_eq!(records.len(), 15);
        for (i, r) in records.iter().enumerate() {
            assert_eq!(r.offset, i as i64);
            assert_eq!(value(r), format!("p{p}-r{}-v{}", i / 5, i % 5));
        }
        // Reading from the middle of a batch skips the records before it.
        let (_, _, from7) = c.fetch("orders", p, 7);
        assert_eq!(from7.first().unwrap().offset, 7);
    }
}

fn broker_cores() -> usize {
    2.min(std::thread::available_parallelism().map_or(1, |n| n.get()))
}

#[test]
fn direct_and_forwarded_paths_give_identical_results() {
    let broker = BrokerProcess::start();
    let mut main = RawClient::connect(broker.addr());
    assert_eq!(main.create_topic("paths", 4, &[]), ErrorCode::None);
    let (cores, leaders) = main.placement("paths");
    assert_eq!(cores.len(), broker_cores());
    for (p, &owner) in leaders.iter().enumerate() {
        let direct_addr = cores[owner as usize];
        let other_addr = cores[(owner as usize + 1) % cores.len()];
        let mut direct = RawClient::connect(direct_addr);
        let mut other = RawClient::connect(other_addr);
        // Produce through the owner and through another core; both land in order.
        assert_eq!(
            direct.produce("paths", p as i32, &["a", "b"], 1),
            (ErrorCode::None, 0)
        );
        assert_eq!(
            other.produce("paths", p as i32, &["c"], -1),
            (ErrorCode::None, 2)
        );
        let (c1, hw1, _, bytes1) = direct.fetch_raw("paths", p as i32, 0, 0, 0);
        let (c2, hw2, _, bytes2) = other.fetch_raw("paths", p as i32, 0, 0, 0);
        assert_eq!((c1, c2), (ErrorCode::None, ErrorCode::None));
        assert_eq!(hw1, 3);
        assert_eq!(hw1, hw2);
        assert_eq!(bytes1, bytes2, "the same bytes come back on either path");
        let values: Vec<String> = common::decode(&bytes1, 0).iter().map(value).collect();
        assert_eq!(values, ["a", "b", "c"]);
        assert_eq!(
            other.list_offset("paths", p as i32, -1),
            direct.list_offset("paths", p as i32, -1)
        );
    }
}

#[test]
fn long_poll_wakes_when_data_arrives() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("poll", 2, &[]), ErrorCode::None);
    for p in 0..2 {
        let addr = broker.addr();
        let (sent_tx, sent_rx) = std::sync::mpsc::channel();
        let (reply_tx, reply_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut w = RawClient::connect(addr);
            sent_tx.send(()).unwrap();
            // Waits up to 60 s for 1 byte.
            let _ = reply_tx.send(w.fetch_raw("poll", p, 0, 60_000, 1));
        });
        sent_rx.recv().unwrap();
        // The fetch waits: no answer while there is no data.
        std::thread::sleep(Duration::from_millis(500));
        assert!(
            reply_rx.try_recv().is_err(),
            "partition {p}: the fetch was answered before any data arrived"
        );
        assert_eq!(c.produce("poll", p, &["wake"], 1).0, ErrorCode::None);
        // The append wakes it, long before its 60 s max_wait.
        let (code, hw, _, bytes) = reply_rx
            .recv_timeout(Duration::from_secs(20))
            .expect("the append did not wake the waiting fetch");
        assert_eq!(code, ErrorCode::None);
        assert_eq!(hw, 1);
        assert_eq!(common::decode(&bytes, 0).len(), 1);
    }
    // With no data, max_wait bounds the poll and the answer is empty, not an error; the broker
    // held it that long.
    let started = std::time::Instant::now();
    let (code, hw, _, bytes) = c.fetch_raw("poll", 0, 1, 200, 1);
    assert_eq!((code, hw, bytes.len()), (ErrorCode::None, 1, 0));
    assert!(
        started.elapsed() >= Duration::from_millis(190),
        "an empty long poll returned after {:?}, before its max_wait",
        started.elapsed()
    );
}

#[test]
fn offsets_out_of_range_and_list_offsets() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("times", 1, &[]), ErrorCode::None);
    let batches = [1_000i64, 2_000, 3_000];
    for (i, ts) in batches.iter().enumerate() {
        let b = make_batch_at(
            &[&format!("v{i}a"), &format!("v{i}b")],
            Compression::None,
            *ts,
        );
        assert_eq!(
            c.produce_raw("times", 0, &b, -1).unwrap().0,
            ErrorCode::None
        );
    }
    assert_eq!(c.list_offset("times", 0, -2), (ErrorCode::None, 0, -1));
    assert_eq!(c.list_offset("times", 0, -1), (ErrorCode::None, 6, -1));
    assert_eq!(
        c.list_offset("times", 0, 1_500),
        (ErrorCode::None, 2, 2_000)
    );
    assert_eq!(
        c.list_offset("times", 0, 3_000),
        (ErrorCode::None, 4, 3_000)
    );
    assert_eq!(c.list_offset("times", 0, 9_999), (ErrorCode::None, -1, -1));
    let (code, max_offset, max_ts) = c.list_offset("times", 0, -3);
    assert_eq!((code, max_ts), (ErrorCode::None, 3_000));
    assert!(max_offset == 4 || max_offset == 5);
    assert_eq!(c.fetch("times", 0, 7).0, ErrorCode::OffsetOutOfRange);
    assert_eq!(
        c.fetch("times", 0, 6).0,
        ErrorCode::None,
        "fetching at the end is empty, not an error"
    );
    assert_eq!(c.fetch("nope", 0, 0).0, ErrorCode::UnknownTopicOrPartition);
    assert_eq!(c.fetch("times", 5, 0).0, ErrorCode::UnknownTopicOrPartition);
}

#[test]
fn restart_keeps_topics_and_acknowledged_data() {
    let mut broker = BrokerProcess::start();
    {
        let mut c = RawClient::connect(broker.addr());
        assert_eq!(
            c.create_topic("durable", 3, &[("retention.ms", "-1")]),
            ErrorCode::None
        );
        for p in 0..3 {
            assert_eq!(
                c.produce("durable", p, &["one", "two"], -1).0,
                ErrorCode::None
            );
        }
    }
    // Clean stop: SIGTERM exits 0.
    let status = broker
        .terminate(Duration::from_secs(30))
        .expect("clean exit");
    assert!(status.success(), "exit status {status}");
    broker.restart();
    {
        let mut c = RawClient::connect(broker.addr());
        for p in 0..3 {
            let v: Vec<String> = c.fetch_all("durable", p, 0).iter().map(value).collect();
            assert_eq!(v, ["one", "two"]);
            assert_eq!(
                c.produce("durable", p, &["three"], -1),
                (ErrorCode::None, 2)
            );
        }
        assert_eq!(
            c.create_topic("durable", 3, &[]),
            ErrorCode::TopicAlreadyExists
        );
    }
    // Crash: acks=all records survive kill -9 under the default durability (fsync).
    broker.kill9();
    broker.restart();
    let mut c = RawClient::connect(broker.addr());
    for p in 0..3 {
        let v: Vec<String> = c.fetch_all("durable", p, 0).iter().map(value).collect();
        assert_eq!(v, ["one", "two", "three"]);
    }
}

#[test]
fn restart_with_another_core_count_keeps_every_partition() {
    let mut broker = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        ..Default::default()
    });
    {
        let mut c = RawClient::connect(broker.addr());
        assert_eq!(c.create_topic("moving", 4, &[]), ErrorCode::None);
        for p in 0..4 {
            assert_eq!(
                c.produce("moving", p, &[&format!("x{p}")], -1).0,
                ErrorCode::None
            );
        }
    }
    broker.terminate(Duration::from_secs(30));
    broker.restart_with(BrokerOptions::default());
    let mut c = RawClient::connect(broker.addr());
    let (cores, leaders) = c.placement("moving");
    assert!(leaders.iter().all(|&l| (l as usize) < cores.len()));
    for p in 0..4 {
        let v: Vec<String> = c.fetch_all("moving", p, 0).iter().map(value).collect();
        assert_eq!(v, [format!("x{p}")]);
    }
}

#[test]
fn topic_admin_validates_names_configs_and_existence() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    for bad in [".", "..", "a/b", "white space", &"x".repeat(250), ""] {
        assert_eq!(
            c.create_topic(bad, 1, &[]),
            ErrorCode::InvalidTopicName,
            "{bad:?}"
        );
    }
    assert_eq!(c.create_topic(&"y".repeat(249), 1, &[]), ErrorCode::None);
    assert_eq!(c.create_topic("t", 0, &[]), ErrorCode::InvalidPartitions);
    assert_eq!(
        c.create_topic("t", 1, &[("retention.ms", "soon")]),
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        c.create_topic("t", 1, &[("no.such.config", "1")]),
        ErrorCode::InvalidConfig
    );
    assert_eq!(
        c.create_topic("t", 1, &[("durability", "none")]),
        ErrorCode::None
    );
    assert_eq!(c.create_topic("t", 1, &[]), ErrorCode::TopicAlreadyExists);
    assert_eq!(c.delete_topic("t"), ErrorCode::None);
    assert_eq!(c.delete_topic("t"), ErrorCode::UnknownTopicOrPartition);
    assert_eq!(
        c.produce("t", 0, &["x"], 1).0,
        ErrorCode::UnknownTopicOrPartition
    );
    // Re-created topics start empty.
    assert_eq!(c.create_topic("t", 1, &[]), ErrorCode::None);
    assert_eq!(c.produce("t", 0, &["x"], 1), (ErrorCode::None, 0));
}

#[test]
fn acks_zero_gets_no_response_but_is_appended() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("fire", 1, &[]), ErrorCode::None);
    let batch = make_batch(&["and", "forget"], Compression::Zstd);
    assert!(c.produce_raw("fire", 0, &batch, 0).is_none());
    // The next response on the connection is the fetch's: nothing was sent for acks=0.
    let mut got = Vec::new();
    for _ in 0..100 {
        got = c.fetch_all("fire", 0, 0);
        if got.len() == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(got.iter().map(value).collect::<Vec<_>>(), ["and", "forget"]);
}

#[test]
fn metrics_endpoint_reports_traffic() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("m", 1, &[]), ErrorCode::None);
    assert_eq!(c.produce("m", 0, &["x"], 1).0, ErrorCode::None);
    let text = http_get(&broker.metrics_addr(), "/metrics");
    assert!(text.contains("borges_requests_total{core="), "{text}");
    assert!(text.contains("api=\"Produce\""), "{text}");
    assert!(
        text.contains("borges_partition_high_watermark{topic=\"m\",partition=\"0\""),
        "{text}"
    );
    assert!(
        text.contains("borges_request_latency_seconds_bucket{api=\"Produce\",le=\"+Inf\"} 1"),
        "{text}"
    );
}

fn http_get(addr: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

/// The copy path (`fetch.send_mode = "copy"`, the path of every TLS fetch) sends a read as
/// the chunks the log holds: closed segments' batches read from their files and recent ones
/// from the tail cache, one after the other. One fetch spanning many of both returns every
/// record once, in order, from the offset asked for. Planted: only the first chunk sent, or
/// the chunks reversed -> the values differ.
#[test]
fn the_copy_path_sends_every_chunk_of_a_read_in_order() {
    let broker = BrokerProcess::start_with(BrokerOptions {
        cores: 1,
        config_toml: Some("[fetch]\nsend_mode = \"copy\"\n".into()),
        ..BrokerOptions::default()
    });
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(
        c.create_topic("chunks", 1, &[("segment.bytes", "4096")]),
        ErrorCode::None
    );
    let pad = "x".repeat(700);
    let mut produced = Vec::new();
    for b in 0..40 {
        let values = [format!("b{b}-0-{pad}"), format!("b{b}-1-{pad}")];
        let refs: Vec<&str> = values.iter().map(String::as_str).collect();
        assert_eq!(c.produce("chunks", 0, &refs, -1).0, ErrorCode::None);
        produced.extend(values);
    }
    for from in [0i64, 1, 37, 79] {
        let (code, hw, _, bytes) = c.fetch_raw("chunks", 0, from, 0, 0);
        assert_eq!((code, hw), (ErrorCode::None, 80));
        let records = common::decode(&bytes, from);
        let offsets: Vec<i64> = records.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, (from..80).collect::<Vec<_>>(), "from {from}");
        let values: Vec<String> = records.iter().map(value).collect();
        assert_eq!(values, produced[from as usize..], "from {from}");
    }
}
