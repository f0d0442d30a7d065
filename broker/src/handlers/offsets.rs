//! ListOffsets: earliest (-2), latest (-1, the high watermark), max timestamp (-3), or the first
//! offset whose timestamp is at least the given one.

use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::acl::Operation;
use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ApiKey, ErrorCode};
use flatbuffers::FlatBufferBuilder;

use crate::failure::Failure;
use crate::partition::{ListOffsetsItem, OffsetLookup, MAX_TIMESTAMP};
use crate::shard::Shard;
use crate::types::PartitionRef;
use crate::wire as w;

type Outcome = Result<OffsetLookup, Failure>;

struct Slot {
    topic: Arc<str>,
    partition: i32,
    target: Result<(usize, ListOffsetsItem), Failure>,
    outcome: Option<Outcome>,
}

/// Serves a ListOffsets request from `principal`.
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
            s.target
                .as_ref()
                .ok()
                .map(|(owner, item)| (i, *owner, item.clone()))
        })
        .collect();
    for (i, outcome) in shard.list_offsets(items).await {
        slots[i].outcome = Some(outcome);
    }
    Some(respond(&header, None, &mut slots))
}

/// The request's slots; a topic `principal` may not Describe has its slots answered
/// `TopicAuthorizationFailed`.
fn parse(shard: &Shard, frame: &Frame, principal: &str) -> Result<Vec<Slot>, Failure> {
    let req = w::verify::<wire::ListOffsetsRequest>(&frame.message)?;
    let gate = shard.topic_gate(principal, ApiKey::ListOffsets, Operation::Describe);
    let mut slots = Vec::new();
    for topic in req.topics().iter().flatten() {
        let name: Arc<str> = Arc::from(topic.name());
        let allowed = gate.check(&name);
        for p in topic.partitions().iter().flatten() {
            let timestamp = p.timestamp();
            let target = if let Err(refused) = &allowed {
                Err(refused.clone())
            } else if timestamp < MAX_TIMESTAMP {
                Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    format!("timestamp {timestamp}: expected -2 (earliest), -1 (latest), -3 (max timestamp) or >= 0"),
                ))
            } else {
                shard
                    .partitions()
                    .locate(&name, p.partition())
                    .map(|(owner, _)| {
                        (
                            owner,
                            ListOffsetsItem {
                                partition: PartitionRef {
                                    topic: name.clone(),
                                    partition: p.partition() as u32,
                                },
                                timestamp,
                            },
                        )
                    })
            };
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
            strict_assert!(
                s.target.is_err() || s.outcome.is_some(),
                "a slot without an outcome"
            );
            let result = match (&s.target, s.outcome.take()) {
                (Err(f), _) => Err(f.clone()),
                (Ok(_), Some(o)) => o,
                (Ok(_), None) => Err(Failure::new(ErrorCode::UnknownServerError, "no outcome")),
            };
            let f = result.as_ref().err();
            let message = w::message(&mut fbb, f);
            let (offset, timestamp, size_bytes) = result.as_ref().map_or((-1, -1, -1), |v| {
                let size_bytes = i64::try_from(v.size_bytes).unwrap_or(i64::MAX);
                (v.offset, v.timestamp, size_bytes)
            });
            parts.push(wire::ListOffsetsPartitionResponse::create(
                &mut fbb,
                &wire::ListOffsetsPartitionResponseArgs {
                    partition: s.partition,
                    error_code: w::code(f),
                    error_message: message,
                    timestamp,
                    offset,
                    leader_epoch: if f.is_none() { 0 } else { -1 },
                    size_bytes,
                },
            ));
        }
        let parts = fbb.create_vector(&parts);
        let name = fbb.create_string(&name);
        topics.push(wire::ListOffsetsTopicResponse::create(
            &mut fbb,
            &wire::ListOffsetsTopicResponseArgs {
                name: Some(name),
                partitions: Some(parts),
            },
        ));
    }
    let topics = fbb.create_vector(&topics);
    let message = w::message(&mut fbb, failure);
    let root = wire::ListOffsetsResponse::create(
        &mut fbb,
        &wire::ListOffsetsResponseArgs {
            error_code: w::code(failure),
            error_message: message,
            topics: Some(topics),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}
