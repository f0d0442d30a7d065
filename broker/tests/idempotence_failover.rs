//! The idempotent producer across leaders, on three real broker processes (testkit's
//! `Cluster`): a batch acknowledged by a leader that is then killed (-9) is recognised by the
//! new leader when the producer retries it (`DuplicateSequenceNumber` with the original base
//! offset, nothing appended), a gap is still refused there, and the same holds after the old
//! leader comes back, catches up and leads again. Followers learn the producer state only from
//! the batches they replicate, so this is what makes a retry after failover duplicate-free.

mod common;

use std::time::{Duration, Instant};

use borges_protocol::batch::{BatchBuilder, BatchOptions};
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::cluster::{Cluster, CLUSTER_WAIT};
use bytes::Bytes;
use common::{value, RawClient};
use flatbuffers::FlatBufferBuilder;

const TOPIC: &str = "dedup";
const ACKS_ALL: i16 = -1;

/// InitProducerId on node `id` (a producer id from the controller's metadata log).
fn init_producer_id(c: &mut Cluster, id: u64) -> (i64, i16) {
    let mut raw = RawClient::connect(c.node(id).socket_addr());
    let mut fbb = FlatBufferBuilder::new();
    let root =
        wire::InitProducerIdRequest::create(&mut fbb, &wire::InitProducerIdRequestArgs::default());
    fbb.finish(root, None);
    let reply = raw.call(ApiKey::InitProducerId, &fbb, &[]);
    let r = flatbuffers::root::<wire::InitProducerIdResponse>(&reply.message).unwrap();
    assert_eq!(ErrorCode::from_u16(r.error_code()), ErrorCode::None);
    (r.producer_id(), r.producer_epoch())
}

/// One batch of `n` keyless records `prefix-i` from `pid` at `epoch`, first sequence `seq`.
fn batch(pid: i64, epoch: i16, seq: i32, prefix: &str, n: usize) -> Bytes {
    let mut b = BatchBuilder::new(BatchOptions::default(), 256);
    for i in 0..n {
        let v = format!("{prefix}-{i}");
        b.push(common::now_ms(), None, Some(v.as_bytes()), &[]);
    }
    b.set_producer(pid, epoch, seq);
    b.build().unwrap()
}

/// Produces `bytes` with acks=all to node `id`, retrying while the node does not serve the
/// partition yet (its image can name it leader a moment before its core serves).
fn produce(c: &mut Cluster, id: u64, bytes: &[u8]) -> (ErrorCode, i64) {
    let deadline = Instant::now() + CLUSTER_WAIT;
    let mut raw = RawClient::connect(c.node(id).socket_addr());
    loop {
        let (code, base, message) = raw.produce_raw(TOPIC, 0, bytes, ACKS_ALL).unwrap();
        let retriable = matches!(
            code,
            ErrorCode::NotLeaderOrFollower | ErrorCode::NotEnoughReplicas
        );
        if !retriable {
            return (code, base);
        }
        assert!(
            Instant::now() < deadline,
            "never served: {code:?} {message:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Every value of the partition, as its leader `id` serves them.
fn stored(c: &mut Cluster, id: u64) -> Vec<String> {
    let mut raw = RawClient::connect(c.node(id).socket_addr());
    raw.fetch_all(TOPIC, 0, 0).iter().map(value).collect()
}

#[test]
fn a_retry_after_the_leader_is_killed_is_recognised_by_the_new_leader() {
    let mut c = Cluster::start(3);
    c.cli(&[
        "topic",
        "create",
        TOPIC,
        "--partitions",
        "1",
        "--replication-factor",
        "3",
        "--config",
        "min.insync.replicas=2",
    ]);
    let first = c.wait_for_agreed_leader(TOPIC, None, true);
    let (pid, epoch) = init_producer_id(&mut c, first);
    let sent = [
        batch(pid, epoch, 0, "a", 3),
        batch(pid, epoch, 3, "b", 2),
        batch(pid, epoch, 5, "c", 1),
    ];
    for (b, base) in sent.iter().zip([0, 3, 5]) {
        assert_eq!(produce(&mut c, first, b), (ErrorCode::None, base));
    }
    // acks=all with the full ISR: both followers have every batch, and learnt the producer
    // only from them. The leader goes before the producer hears of its last batch.
    c.kill9(first);
    let second = c.wait_for_agreed_leader(TOPIC, Some(first as i32), false);
    for (b, base) in sent.iter().zip([0, 3, 5]) {
        assert_eq!(
            produce(&mut c, second, b),
            (ErrorCode::DuplicateSequenceNumber, base),
            "a retry to the new leader {second} is answered with its offset"
        );
    }
    let gap = batch(pid, epoch, 7, "gap", 1);
    assert_eq!(
        produce(&mut c, second, &gap).0,
        ErrorCode::OutOfOrderSequenceNumber
    );
    let d = batch(pid, epoch, 6, "d", 2);
    assert_eq!(produce(&mut c, second, &d), (ErrorCode::None, 6));
    // The old leader returns, catches up as a follower (learning `d` from the batches it
    // fetches), and leads again once the second leader is killed too.
    c.restart(first);
    c.wait_for_agreed_leader(TOPIC, None, true);
    c.kill9(second);
    let third = c.wait_for_agreed_leader(TOPIC, Some(second as i32), false);
    for (b, base) in sent.iter().chain([&d]).zip([0, 3, 5, 6]) {
        assert_eq!(
            produce(&mut c, third, b),
            (ErrorCode::DuplicateSequenceNumber, base),
            "a retry to leader {third}"
        );
    }
    let e = batch(pid, epoch, 8, "e", 1);
    assert_eq!(produce(&mut c, third, &e), (ErrorCode::None, 8));
    assert_eq!(
        stored(&mut c, third),
        ["a-0", "a-1", "a-2", "b-0", "b-1", "c-0", "d-0", "d-1", "e-0"],
        "every record exactly once, in order"
    );
}
