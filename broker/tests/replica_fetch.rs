//! A follower's Fetch sent by hand to the leader of a replicated partition (three real broker
//! processes, testkit's `Cluster`): an answer with a diverging epoch comes at once, not after
//! the fetch wait. A new leader held a diverged follower's fetch for the whole wait (500 ms by
//! default), and with it its high watermark and every acks=all producer (docs/benchmarks.md,
//! partition-leader failover).

mod common;

use std::time::{Duration, Instant};

use borges_protocol::batch::Compression;
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::cluster::{Cluster, CLUSTER_WAIT};
use common::{make_batch, RawClient};
use flatbuffers::FlatBufferBuilder;

const TOPIC: &str = "diverged";
/// What the hand-made fetches ask the leader to wait for at most.
const MAX_WAIT_MS: i32 = 5_000;

/// Who asks, as a follower: (broker id, broker epoch).
type Replica = (i32, i64);

/// A replica Fetch of partition 0 at `offset`, following `leader_epoch`, with the follower's
/// log last in `last_fetched_epoch`: (partition error, diverging (epoch, end offset)).
fn replica_fetch(
    c: &mut RawClient,
    (replica_id, replica_epoch): Replica,
    (leader_epoch, last_fetched_epoch): (i32, i32),
    offset: i64,
) -> (ErrorCode, Option<(i32, i64)>) {
    let mut fbb = FlatBufferBuilder::new();
    let p = wire::FetchPartition::create(
        &mut fbb,
        &wire::FetchPartitionArgs {
            partition: 0,
            current_leader_epoch: leader_epoch,
            fetch_offset: offset,
            last_fetched_epoch,
            log_start_offset: 0,
            partition_max_bytes: 1 << 20,
        },
    );
    let parts = fbb.create_vector(&[p]);
    let name = fbb.create_string(TOPIC);
    let t = wire::FetchTopic::create(
        &mut fbb,
        &wire::FetchTopicArgs {
            name: Some(name),
            partitions: Some(parts),
        },
    );
    let topics = fbb.create_vector(&[t]);
    let root = wire::FetchRequest::create(
        &mut fbb,
        &wire::FetchRequestArgs {
            replica_id,
            replica_epoch,
            max_wait_ms: MAX_WAIT_MS,
            min_bytes: 1,
            max_bytes: 1 << 20,
            topics: Some(topics),
            ..Default::default()
        },
    );
    fbb.finish(root, None);
    let reply = c.call(ApiKey::Fetch, &fbb, &[]);
    assert!(!reply.header.is_error(), "answered, not refused");
    let r = flatbuffers::root::<wire::FetchResponse>(&reply.message).unwrap();
    assert_eq!(r.error_code(), 0, "{:?}", r.error_message());
    let p = r.topics().unwrap().get(0).partitions().unwrap().get(0);
    let diverging = p.diverging_epoch().map(|d| (d.epoch(), d.end_offset()));
    (ErrorCode::from_u16(p.error_code()), diverging)
}

/// Four records in two acks=all batches through `leader`, retried while it does not serve yet.
fn produce_four(c: &mut RawClient) {
    for round in 0..2 {
        let batch = make_batch(
            &[&format!("r{round}a"), &format!("r{round}b")],
            Compression::None,
        );
        let deadline = Instant::now() + CLUSTER_WAIT;
        loop {
            let (code, _, _) = c.produce_raw(TOPIC, 0, &batch, -1).unwrap();
            if code == ErrorCode::None {
                break;
            }
            assert!(Instant::now() < deadline, "never served: {code:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

#[test]
fn a_diverging_epoch_is_answered_without_the_fetch_wait() {
    let mut c = Cluster::start(3);
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
    ]);
    let images = c.wait_for_every_node("a leader and the full ISR", |i| {
        i.topics
            .get(TOPIC)
            .and_then(|t| t.partitions.first())
            .is_some_and(|p| p.leader >= 0 && p.isr.len() == 3)
    });
    let image = &images[0];
    let p = &image.topics[TOPIC].partitions[0];
    let (leader, epoch) = (p.leader, p.leader_epoch);
    let follower = *p.replicas.iter().find(|&&r| r != leader).unwrap();
    let replica = (follower, image.brokers[&follower].epoch as i64);
    let addr = c.node(leader as u64).addr().parse().unwrap();
    let mut raw = RawClient::connect(addr);
    produce_four(&mut raw);
    // The follower claims more of the leader's epoch than the leader has (a follower that
    // fetched records from an old leader that the new one never got), then an epoch the
    // leader does not know (a stale leader). Either way nothing will come by waiting.
    // The answers: the leader's epoch ends at 4; the leader knows no such epoch.
    let cases = [
        ("ahead", epoch, 7, (epoch, 4)),
        ("epoch above", epoch + 1, 2, (-1, -1)),
    ];
    for (what, last_epoch, offset, expected) in cases {
        let started = Instant::now();
        let (code, diverging) = replica_fetch(&mut raw, replica, (epoch, last_epoch), offset);
        let took = started.elapsed();
        assert_eq!(code, ErrorCode::None, "{what}");
        assert_eq!(diverging, Some(expected), "{what}");
        assert!(
            took < Duration::from_millis(MAX_WAIT_MS as u64 / 2),
            "{what}: a diverging answer waited {took:?} (the fetch wait is {MAX_WAIT_MS} ms)"
        );
    }
}
