//! OffsetForLeaderEpoch: where a leader epoch ends in each partition's log, answered by the
//! owning core (a follower asks after a leader change; the Fetch response's diverging epoch
//! carries the same answer).

use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::acl::Operation;
use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ApiKey, ErrorCode};
use flatbuffers::FlatBufferBuilder;

use crate::failure::Failure;
use crate::partition::{EpochEnd, EpochEndItem};
use crate::shard::Shard;
use crate::types::PartitionRef;
use crate::wire as w;

struct Slot {
    topic: Arc<str>,
    partition: i32,
    target: Result<(usize, EpochEndItem), Failure>,
    outcome: Option<Result<EpochEnd, Failure>>,
}

/// Serves an OffsetForLeaderEpoch request from `principal`.
pub async fn handle(shard: Rc<Shard>, frame: Frame, principal: Rc<str>) -> Option<w::Response> {
    let header = frame.header;
    let mut slots = match parse(&shard, &frame, &principal) {
        Ok(s) => s,
        Err(f) => return Some(respond(&header, Some(&f), &mut [])),
    };
    let items = slots
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let (owner, item) = s.target.as_ref().ok()?;
            Some((i, *owner, item.clone()))
        })
        .collect();
    for (i, outcome) in shard.epoch_ends(items).await {
        slots[i].outcome = Some(outcome);
    }
    Some(respond(&header, None, &mut slots))
}

/// The request's slots; a client's topic `principal` may not Describe has its slots answered
/// `TopicAuthorizationFailed` (a follower's request needed ClusterAction before dispatch).
fn parse(shard: &Shard, frame: &Frame, principal: &str) -> Result<Vec<Slot>, Failure> {
    let req = w::verify::<wire::OffsetForLeaderEpochRequest>(&frame.message)?;
    let gate = shard.topic_gate(principal, ApiKey::OffsetForLeaderEpoch, Operation::Describe);
    let mut slots = Vec::new();
    for topic in req.topics().iter().flatten() {
        let name: Arc<str> = Arc::from(topic.name());
        let allowed = match req.replica_id() >= 0 {
            true => Ok(()),
            false => gate.check(&name),
        };
        for p in topic.partitions().iter().flatten() {
            let target = allowed
                .clone()
                .and_then(|()| shard.partitions().locate(&name, p.partition()))
                .map(|(owner, _)| {
                    let partition = PartitionRef {
                        topic: name.clone(),
                        partition: p.partition() as u32,
                    };
                    let item = EpochEndItem {
                        partition,
                        current_leader_epoch: p.current_leader_epoch(),
                        leader_epoch: p.leader_epoch(),
                    };
                    (owner, item)
                });
            slots.push(Slot {
                topic: name.clone(),
                partition: p.partition(),
                target,
                outcome: None,
            });
        }
    }
    Ok(slots)
}

fn respond(header: &FrameHeader, failure: Option<&Failure>, slots: &mut [Slot]) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(64 + slots.len() * 48);
    let mut topics = Vec::new();
    for run in w::topic_runs(slots, |s| &s.topic) {
        let name = slots[run.start].topic.clone();
        let mut parts = Vec::new();
        for i in run {
            let s = &mut slots[i];
            let result = match (&s.target, s.outcome.take()) {
                (Err(f), _) => Err(f.clone()),
                (Ok(_), Some(o)) => o,
                (Ok(_), None) => Err(Failure::new(ErrorCode::UnknownServerError, "no outcome")),
            };
            let f = result.as_ref().err();
            let message = w::message(&mut fbb, f);
            let end = result
                .as_ref()
                .map_or((-1, -1), |e| (e.leader_epoch, e.end_offset));
            parts.push(wire::EpochEndOffsetResult::create(
                &mut fbb,
                &wire::EpochEndOffsetResultArgs {
                    partition: s.partition,
                    error_code: w::code(f),
                    error_message: message,
                    leader_epoch: end.0,
                    end_offset: end.1,
                },
            ));
        }
        let parts = fbb.create_vector(&parts);
        let name = fbb.create_string(&name);
        topics.push(wire::OffsetForLeaderEpochTopicResult::create(
            &mut fbb,
            &wire::OffsetForLeaderEpochTopicResultArgs {
                name: Some(name),
                partitions: Some(parts),
            },
        ));
    }
    let topics = fbb.create_vector(&topics);
    let message = w::message(&mut fbb, failure);
    let root = wire::OffsetForLeaderEpochResponse::create(
        &mut fbb,
        &wire::OffsetForLeaderEpochResponseArgs {
            error_code: w::code(failure),
            error_message: message,
            topics: Some(topics),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}
