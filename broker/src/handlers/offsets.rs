//! ListOffsets: earliest (-2), latest (-1, the high watermark), max timestamp (-3), or the first
//! offset whose timestamp is at least the given one.

use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ErrorCode};
use flatbuffers::FlatBufferBuilder;

use crate::core::Core;
use crate::router::{CoreMessage, Failure, ListOffsetsItem, ListOffsetsOutcome, PartitionRef};
use crate::wire as w;

/// `timestamp` meaning the log start offset.
pub const EARLIEST: i64 = -2;
/// `timestamp` meaning the high watermark.
pub const LATEST: i64 = -1;
/// `timestamp` meaning the record with the largest timestamp.
pub const MAX_TIMESTAMP: i64 = -3;

struct Slot {
    topic: Arc<str>,
    partition: i32,
    target: Result<(usize, ListOffsetsItem), Failure>,
    outcome: Option<ListOffsetsOutcome>,
}

/// Serves a ListOffsets request.
pub async fn handle(core: Rc<Core>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let mut slots = match parse(&core, &frame) {
        Ok(s) => s,
        Err(f) => return Some(respond(&header, Some(&f), &mut [])),
    };
    let mut by_core: std::collections::BTreeMap<usize, (Vec<usize>, Vec<ListOffsetsItem>)> =
        std::collections::BTreeMap::new();
    for (i, s) in slots.iter().enumerate() {
        if let Ok((owner, item)) = &s.target {
            let e = by_core.entry(*owner).or_default();
            e.0.push(i);
            e.1.push(item.clone());
        }
    }
    for (owner, (indexes, items)) in by_core {
        let n = items.len();
        let outcomes = if owner == core.id {
            list_local(&core, &items).await
        } else {
            match core
                .ask(owner, |reply| CoreMessage::ListOffsets { items, reply })
                .await
            {
                Ok(v) => v,
                Err(f) => vec![ListOffsetsOutcome { result: Err(f) }; n],
            }
        };
        for (i, o) in indexes.into_iter().zip(outcomes) {
            slots[i].outcome = Some(o);
        }
    }
    Some(respond(&header, None, &mut slots))
}

fn parse(core: &Core, frame: &Frame) -> Result<Vec<Slot>, Failure> {
    let req = w::verify::<wire::ListOffsetsRequest>(&frame.message)?;
    let mut slots = Vec::new();
    for topic in req.topics().iter().flatten() {
        let name: Arc<str> = Arc::from(topic.name());
        for p in topic.partitions().iter().flatten() {
            let timestamp = p.timestamp();
            let target = if timestamp < MAX_TIMESTAMP {
                Err(Failure::new(
                    ErrorCode::InvalidRequest,
                    format!("timestamp {timestamp}: expected -2 (earliest), -1 (latest), -3 (max timestamp) or >= 0"),
                ))
            } else {
                core.locate(&name, p.partition()).map(|(owner, _)| {
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

/// Looks offsets up in partitions this core owns.
pub async fn list_local(core: &Rc<Core>, items: &[ListOffsetsItem]) -> Vec<ListOffsetsOutcome> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        out.push(ListOffsetsOutcome {
            result: list_one(core, item).await,
        });
    }
    out
}

async fn list_one(core: &Rc<Core>, item: &ListOffsetsItem) -> Result<(i64, i64), Failure> {
    let log = core.log(&item.partition)?;
    let fail = |e: borges_storage::StorageError| Failure::new(e.error_code(), e.to_string());
    let offsets = log.offsets();
    Ok(match item.timestamp {
        EARLIEST => (offsets.log_start_offset, -1),
        LATEST => (offsets.high_watermark, -1),
        MAX_TIMESTAMP => log.max_timestamp().await.map_err(fail)?.unwrap_or((-1, -1)),
        ts => log
            .offset_for_timestamp(ts)
            .await
            .map_err(fail)?
            .unwrap_or((-1, -1)),
    })
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
                (Ok(_), Some(o)) => o.result,
                (Ok(_), None) => Err(Failure::new(ErrorCode::UnknownServerError, "no outcome")),
            };
            let f = result.as_ref().err();
            let message = w::message(&mut fbb, f);
            let (offset, timestamp) = result.as_ref().map_or((-1, -1), |v| *v);
            parts.push(wire::ListOffsetsPartitionResponse::create(
                &mut fbb,
                &wire::ListOffsetsPartitionResponseArgs {
                    partition: s.partition,
                    error_code: w::code(f),
                    error_message: message,
                    timestamp,
                    offset,
                    leader_epoch: if f.is_none() { 0 } else { -1 },
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
