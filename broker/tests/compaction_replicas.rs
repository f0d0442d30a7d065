//! Compaction on a replicated partition, three real broker processes (testkit's `Cluster`):
//! every replica cleans its own log (each node's segment files shrink), followers fetch
//! across the holes, and each key's latest value is the same whichever replica leads: read
//! through the first leader, then through the next after a kill -9, then through the next
//! after the first returned and caught up and the second was killed.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_protocol::ErrorCode;
use borges_testkit::cluster::{Cluster, ClusterOptions, CLUSTER_WAIT};
use common::{value, RawClient};

const TOPIC: &str = "replicated-table";
const KEYS: usize = 3;

/// `rounds` batches of keys `<prefix>0`..`<prefix>2` with acks=all to leader `id`; the last
/// round's values.
fn produce_rounds(
    c: &mut Cluster,
    id: u64,
    prefix: &str,
    (from, rounds): (usize, usize),
) -> Vec<String> {
    let mut raw = RawClient::connect(c.node(id).socket_addr());
    let mut last = Vec::new();
    for r in from..from + rounds {
        let values: Vec<String> = (0..KEYS)
            .map(|k| format!("r{r}-k{k}-{}", "x".repeat(200)))
            .collect();
        let mut b = BatchBuilder::new(BatchOptions::default(), 1024);
        for (k, v) in values.iter().enumerate() {
            let key = format!("{prefix}{k}");
            b.push(
                common::now_ms(),
                Some(key.as_bytes()),
                Some(v.as_bytes()),
                &[],
            );
        }
        let batch = b.build().unwrap();
        let deadline = Instant::now() + CLUSTER_WAIT;
        loop {
            let (code, _, _) = raw.produce_raw(TOPIC, 0, &batch, -1).unwrap();
            if code == ErrorCode::None {
                break;
            }
            assert_eq!(code, ErrorCode::NotLeaderOrFollower, "round {r}");
            assert!(Instant::now() < deadline, "never served");
            std::thread::sleep(Duration::from_millis(50));
        }
        last = values;
    }
    last
}

/// (bytes in, bytes out) of every cleaning node `id` ran, from its metrics endpoint.
fn cleaned_bytes(c: &mut Cluster, id: u64) -> (u64, u64) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(c.node(id).metrics_addr()) else {
        return (0, 0);
    };
    let _ = write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let sum = |name: &str| -> u64 {
        text.lines()
            .filter(|l| l.starts_with(name))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>() as u64
    };
    (
        sum("borges_cleaner_bytes_in_total"),
        sum("borges_cleaner_bytes_out_total"),
    )
}

/// Each key's latest value as leader `id` serves the partition; offsets must increase.
fn latest_through(c: &mut Cluster, id: u64) -> BTreeMap<String, String> {
    let deadline = Instant::now() + CLUSTER_WAIT;
    let mut raw = RawClient::connect(c.node(id).socket_addr());
    loop {
        let (code, _, _) = raw.fetch(TOPIC, 0, 0);
        if code == ErrorCode::None {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leader {id} never served: {code:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let records = raw.fetch_all(TOPIC, 0, 0);
    assert!(records.windows(2).all(|w| w[0].offset < w[1].offset));
    let mut latest = BTreeMap::new();
    for r in &records {
        let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
        latest.insert(key, value(r));
    }
    latest
}

/// Each key's latest value through leader `id` is `want`. A new leader's high watermark can
/// stay below its log end until a follower fetched from it, and reads stop at the high
/// watermark: the last batch may show a moment later.
fn check_latest(c: &mut Cluster, id: u64, want: &BTreeMap<String, String>) {
    let deadline = Instant::now() + CLUSTER_WAIT;
    loop {
        let got = latest_through(c, id);
        if &got == want {
            return;
        }
        if Instant::now() > deadline {
            assert_eq!(&got, want, "latest values through leader {id}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn every_replica_compacts_its_own_log_and_the_latest_values_agree() {
    let mut c = Cluster::start_with(ClusterOptions {
        cluster_toml: "heartbeat_interval_ms = 200\nsession_timeout_ms = 3000\n\
                       [storage]\ncleaner_backoff_ms = 50\n"
            .into(),
        ..ClusterOptions::default()
    });
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "segment.bytes=4096",
        "--config",
        "min.cleanable.dirty.ratio=0.01",
    ]);
    let first = c.wait_for_agreed_leader(TOPIC, None, true);
    let latest = produce_rounds(&mut c, first, "k", (0, 60));
    // Rounds of other keys close the segments written above, so every replica may clean
    // them: the latest values of k0..k2 then live in cleaned segments.
    let filler = produce_rounds(&mut c, first, "f", (60, 20));
    let mut want = BTreeMap::new();
    for (prefix, values) in [("k", &latest), ("f", &filler)] {
        for (k, v) in values.iter().enumerate() {
            want.insert(format!("{prefix}{k}"), v.clone());
        }
    }
    // Every replica's own cleaner rewrites its segments: bytes in > bytes out on each node.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let cleaned: Vec<(u64, u64)> = (1..=3).map(|id| cleaned_bytes(&mut c, id)).collect();
        if cleaned.iter().all(|&(i, o)| i > 0 && o < i) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not every replica cleaned its log: (bytes in, out) {cleaned:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    check_latest(&mut c, first, &want);
    c.kill9(first);
    let second = c.wait_for_agreed_leader(TOPIC, Some(first as i32), false);
    check_latest(&mut c, second, &want);
    // The first returns and fetches across the second's holes; then it or the third leads.
    c.restart(first);
    c.wait_for_agreed_leader(TOPIC, None, true);
    c.kill9(second);
    let third = c.wait_for_agreed_leader(TOPIC, Some(second as i32), false);
    check_latest(&mut c, third, &want);
}
