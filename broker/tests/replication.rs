//! What the leader side of replication serves on a real broker process today: where a leader
//! epoch ends (OffsetForLeaderEpoch), with the leader-epoch fencing of KIP-320.

mod common;

use borges_protocol::batch::Compression;
use borges_protocol::{wire, ApiKey, ErrorCode};
use borges_testkit::BrokerProcess;
use common::{make_batch, RawClient};
use flatbuffers::FlatBufferBuilder;

/// (error, leader epoch, end offset) for `leader_epoch` of `topic`/`partition`.
fn epoch_end(
    c: &mut RawClient,
    (topic, partition): (&str, i32),
    current_leader_epoch: i32,
    leader_epoch: i32,
) -> (ErrorCode, i32, i64) {
    let mut fbb = FlatBufferBuilder::new();
    let p = wire::OffsetForLeaderEpochPartition::create(
        &mut fbb,
        &wire::OffsetForLeaderEpochPartitionArgs {
            partition,
            current_leader_epoch,
            leader_epoch,
        },
    );
    let parts = fbb.create_vector(&[p]);
    let name = fbb.create_string(topic);
    let t = wire::OffsetForLeaderEpochTopic::create(
        &mut fbb,
        &wire::OffsetForLeaderEpochTopicArgs {
            name: Some(name),
            partitions: Some(parts),
        },
    );
    let topics = fbb.create_vector(&[t]);
    let root = wire::OffsetForLeaderEpochRequest::create(
        &mut fbb,
        &wire::OffsetForLeaderEpochRequestArgs {
            replica_id: 2,
            topics: Some(topics),
        },
    );
    fbb.finish(root, None);
    let reply = c.call(ApiKey::OffsetForLeaderEpoch, &fbb, &[]);
    assert!(!reply.header.is_error(), "answered, not refused");
    let r = flatbuffers::root::<wire::OffsetForLeaderEpochResponse>(&reply.message).unwrap();
    let p = r.topics().unwrap().get(0).partitions().unwrap().get(0);
    (
        ErrorCode::from_u16(p.error_code()),
        p.leader_epoch(),
        p.end_offset(),
    )
}

#[test]
fn offset_for_leader_epoch_answers_where_an_epoch_ends() {
    let broker = BrokerProcess::start();
    let mut c = RawClient::connect(broker.addr());
    assert_eq!(c.create_topic("epochs", 2, &[]), ErrorCode::None);
    let t = ("epochs", 0);
    assert_eq!(
        epoch_end(&mut c, t, -1, 0),
        (ErrorCode::None, -1, -1),
        "empty log"
    );
    for i in 0..3 {
        let b = make_batch(&[&format!("v{i}a"), &format!("v{i}b")], Compression::None);
        assert_eq!(
            c.produce_raw("epochs", 0, &b, -1).unwrap().0,
            ErrorCode::None
        );
    }
    // A single node leads every partition at epoch 0.
    assert_eq!(epoch_end(&mut c, t, -1, 0), (ErrorCode::None, 0, 6));
    assert_eq!(epoch_end(&mut c, t, 0, 0), (ErrorCode::None, 0, 6));
    assert_eq!(
        epoch_end(&mut c, t, 0, 4),
        (ErrorCode::None, -1, -1),
        "above the latest"
    );
    assert_eq!(
        epoch_end(&mut c, ("epochs", 1), 0, 0),
        (ErrorCode::None, -1, -1)
    );
    assert_eq!(
        epoch_end(&mut c, t, 1, 0).0,
        ErrorCode::UnknownLeaderEpoch,
        "the asker knows a newer leader epoch than this broker"
    );
    assert_eq!(
        epoch_end(&mut c, ("nope", 0), -1, 0).0,
        ErrorCode::UnknownTopicOrPartition
    );
    assert_eq!(
        epoch_end(&mut c, ("epochs", 7), -1, 0).0,
        ErrorCode::UnknownTopicOrPartition
    );
}
