//! Compaction through the `borges` CLI against a real broker: `topic alter` switches
//! `cleanup.policy` from delete to compact and back (describe shows it; keyless records are
//! refused only while compacted), `produce --null-marker` sends tombstones that `consume`
//! prints as `null`, and a consumer reads across the holes the cleaner leaves (offsets jump,
//! each key's latest value is there, nothing breaks).

mod common;

use std::time::{Duration, Instant};

use borges_testkit::{BrokerOptions, BrokerProcess};
use common::{borges, failed, ok};

const TOPIC: &str = "table";

/// A broker whose cleaner looks for work every 50 ms.
fn broker() -> BrokerProcess {
    BrokerProcess::start_with(BrokerOptions {
        config_toml: Some("[storage]\ncleaner_backoff_ms = 50\n".to_string()),
        ..BrokerOptions::default()
    })
}

fn describe(broker: &BrokerProcess) -> String {
    ok(borges(broker, &["topic", "describe", TOPIC], None))
}

fn alter_policy(broker: &BrokerProcess, policy: &str) {
    let config = format!("cleanup.policy={policy}");
    ok(borges(
        broker,
        &["topic", "alter", TOPIC, "--config", &config],
        None,
    ));
}

/// `consume --print-offset --print-key` of the whole partition: (offset, key, value) lines.
fn consume_all(broker: &BrokerProcess) -> Vec<(i64, String, String)> {
    let out = ok(borges(
        broker,
        &[
            "consume",
            TOPIC,
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--timeout-ms",
            "1500",
            "--print-offset",
            "--print-key",
        ],
        None,
    ));
    out.lines()
        .map(|l| {
            let mut f = l.splitn(3, '\t');
            let offset = f.next().and_then(|o| o.strip_prefix("Offset:"));
            let offset = offset
                .and_then(|o| o.parse().ok())
                .unwrap_or_else(|| panic!("{l}"));
            let key = f.next().unwrap_or_default().to_string();
            (offset, key, f.next().unwrap_or_default().to_string())
        })
        .collect()
}

/// Lines `k<i>:r<round>-<padding>` for keys k0..k4; in the last round k4 gets the null marker.
fn rounds(from: usize, to: usize, tombstone_last: bool) -> String {
    let mut text = String::new();
    for r in from..to {
        for k in 0..5 {
            if tombstone_last && r + 1 == to && k == 4 {
                text.push_str("k4:NULL\n");
            } else {
                text.push_str(&format!("k{k}:r{r}-{}\n", "x".repeat(150)));
            }
        }
    }
    text
}

/// Creates the topic under delete (a keyless record is fine), alters it to compact (then a
/// keyless record is refused).
fn create_then_compact(broker: &BrokerProcess) {
    ok(borges(
        broker,
        &[
            "topic",
            "create",
            TOPIC,
            "--partitions",
            "1",
            "--config",
            "segment.bytes=4096",
            "--config",
            "min.cleanable.dirty.ratio=0.01",
        ],
        None,
    ));
    assert!(
        describe(broker).contains("cleanup.policy=delete")
            || !describe(broker).contains("cleanup.policy=compact")
    );
    // Under delete a keyless record is fine.
    ok(borges(broker, &["produce", TOPIC], Some("keyless\n")));
    alter_policy(broker, "compact");
    assert!(
        describe(broker).contains("cleanup.policy=compact"),
        "{}",
        describe(broker)
    );
    let refused = failed(borges(broker, &["produce", TOPIC], Some("keyless again\n")));
    assert!(refused.contains("key"), "{refused}");
}

/// Produces keyed rounds (k4's last value a tombstone) and waits until the cleaner ran; returns
/// what a consumer reads then.
fn produce_and_wait_for_cleaning(broker: &BrokerProcess) -> Vec<(i64, String, String)> {
    // 40 rounds over five keys (k4's last value a tombstone), then 20 rounds of k0..k3 only
    // after it, so that the segments holding the superseded records are closed.
    let produce = [
        "produce",
        TOPIC,
        "--key-separator",
        ":",
        "--null-marker",
        "NULL",
    ];
    ok(borges(broker, &produce, Some(&rounds(0, 40, true))));
    let filler: String = rounds(40, 60, false)
        .lines()
        .filter(|l| !l.starts_with("k4:"))
        .map(|l| format!("{l}\n"))
        .collect();
    ok(borges(broker, &produce, Some(&filler)));
    let written = 1 + 40 * 5 + 20 * 4;
    // The cleaner may take several passes (a segment that closes while it runs waits for
    // the next), so wait until it ran and then left the log alone for a whole read (each
    // read takes at least 1.5 s, thirty cleaner periods): what the checks below compare
    // must not be compacted again under them.
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut previous = Vec::new();
    loop {
        let read = consume_all(broker);
        if read.len() < written / 2 && read == previous {
            return read;
        }
        assert!(
            Instant::now() < deadline,
            "the cleaner never ran or never settled ({} records)",
            read.len()
        );
        previous = read;
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Offsets increase with holes, each key's latest value is there (k4's printed null), and a
/// consumer positioned inside a hole starts at the next record.
fn check_holes_and_latest(broker: &BrokerProcess, read: &[(i64, String, String)]) {
    // Offsets increase and jump over the holes; every key's latest value is there.
    assert!(read.windows(2).all(|w| w[0].0 < w[1].0), "{read:?}");
    let offsets: Vec<i64> = read.iter().map(|r| r.0).collect();
    let hole = std::iter::once(-1)
        .chain(offsets.iter().copied())
        .zip(offsets.iter().copied())
        .find(|(a, b)| *b > a + 1)
        .map(|(a, _)| a + 1);
    let hole = hole.unwrap_or_else(|| panic!("no hole in {offsets:?}"));
    let latest = |key: &str| read.iter().rev().find(|r| r.1 == key).map(|r| r.2.clone());
    for k in 0..4 {
        let want = format!("r59-{}", "x".repeat(150));
        assert_eq!(latest(&format!("k{k}")), Some(want), "k{k}");
    }
    assert_eq!(
        latest("k4"),
        Some("null".to_string()),
        "the tombstone, printed null"
    );
    // A consumer positioned inside a hole starts at the next record that exists.
    let hole = hole.to_string();
    let from_hole = ok(borges(
        broker,
        &[
            "consume",
            TOPIC,
            "--partition",
            "0",
            "--offset",
            &hole,
            "--max-messages",
            "1",
            "--timeout-ms",
            "5000",
            "--print-offset",
        ],
        None,
    ));
    let next = read
        .iter()
        .find(|r| r.0 > hole.parse::<i64>().unwrap())
        .unwrap();
    assert!(
        from_hole.starts_with(&format!("Offset:{}\t", next.0)),
        "{from_hole}"
    );
}

#[test]
fn policy_alter_tombstones_and_reads_across_compaction_holes() {
    let broker = broker();
    create_then_compact(&broker);
    let read = produce_and_wait_for_cleaning(&broker);
    check_holes_and_latest(&broker, &read);
    // Back to delete: keyless records are accepted again, and nothing already there moves.
    alter_policy(&broker, "delete");
    assert!(
        !describe(&broker).contains("cleanup.policy=compact"),
        "{}",
        describe(&broker)
    );
    ok(borges(
        &broker,
        &["produce", TOPIC],
        Some("keyless at the end\n"),
    ));
    let after = consume_all(&broker);
    assert_eq!(
        &after[..read.len()],
        &read[..],
        "the compacted part is unchanged"
    );
    assert_eq!(
        after.last().map(|r| r.2.as_str()),
        Some("keyless at the end")
    );
}

/// A data directory from before compaction: its `__consumer_offsets` had the `delete` policy
/// and `retention.ms=-1`, so it grew without bound. After an upgrade it is compacted, with its
/// other configs kept. Planted: the migration call removed from the controller's `load` ->
/// describe still shows no policy and `retention.ms=-1`.
#[test]
fn an_offsets_topic_from_before_compaction_is_compacted_after_a_restart() {
    let mut b = broker();
    b.terminate(Duration::from_secs(10));
    let path = b.data_dir().join("meta").join("metadata.json");
    let text = std::fs::read_to_string(&path).expect("metadata.json of the stopped broker");
    let mut image: serde_json::Value = serde_json::from_str(&text).expect("metadata is JSON");
    let configs = image["topics"]["__consumer_offsets"]["configs"]
        .as_object_mut()
        .expect("the offsets topic has configs");
    configs.remove("cleanup.policy");
    configs.insert("retention.ms".into(), "-1".into());
    let old = serde_json::to_vec_pretty(&image).expect("encodes");
    std::fs::write(&path, old).expect("writes the old-style metadata");
    b.restart();
    let out = ok(borges(
        &b,
        &["topic", "describe", "__consumer_offsets"],
        None,
    ));
    assert!(out.contains("cleanup.policy=compact"), "{out}");
    assert!(!out.contains("retention.ms=-1"), "{out}");
    assert!(
        out.contains("durability=fsync"),
        "other configs kept: {out}"
    );
    assert!(
        b.log().contains("predates compaction"),
        "the change is logged"
    );
}
