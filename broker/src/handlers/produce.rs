//! Produce: validate every batch on the receiving core (CRC, size, codec, record framing), then
//! append on the owning core, locally or through its outbox, in request order.

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ErrorCode};
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;

use super::Completion;
use crate::core::Core;
use crate::failure::Failure;
use crate::partition::{self, AppendItem, ProduceAck};
use crate::router::{await_reply, CoreMessage};
use crate::topic_config;
use crate::types::{Acks, PartitionRef};
use crate::wire as w;

/// One partition of the request, in request order.
struct Slot {
    topic: Arc<str>,
    partition: i32,
    outcome: Option<Result<ProduceAck, Failure>>,
}

/// Parsed request: the slots and their payload ranges.
struct Parsed {
    acks: Acks,
    timeout_ms: u32,
    slots: Vec<Slot>,
    ranges: Vec<(u32, u32)>,
}

fn parse(frame: &Frame) -> Result<Parsed, Failure> {
    let req = w::verify::<wire::ProduceRequest>(&frame.message)?;
    let acks = Acks::from_wire(req.acks())?;
    if req.transactional_id().is_some() {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "transactions are not supported yet",
        ));
    }
    let mut slots = Vec::new();
    let mut ranges = Vec::new();
    for topic in req.topics().iter().flatten() {
        let name: Arc<str> = Arc::from(topic.name());
        for p in topic.partitions().iter().flatten() {
            let range = p.records().map_or((0, 0), |r| (r.offset(), r.length()));
            ranges.push(range);
            slots.push(Slot {
                topic: name.clone(),
                partition: p.partition(),
                outcome: None,
            });
        }
    }
    Ok(Parsed {
        acks,
        timeout_ms: req.timeout_ms().max(0) as u32,
        slots,
        ranges,
    })
}

/// Ordered phase of a produce: validates and appends (or queues the appends); returns the
/// completion that waits for acknowledgements.
pub async fn handle(core: &Rc<Core>, frame: Frame) -> Completion {
    let header = frame.header;
    let mut parsed = match parse(&frame) {
        Ok(p) => p,
        Err(f) => return Box::pin(async move { Some(request_error(&header, &f)) }),
    };
    let parts = match w::split_payload(frame.payload, &parsed.ranges) {
        Ok(p) => p,
        Err(f) => return Box::pin(async move { Some(request_error(&header, &f)) }),
    };
    // Validate and group by owning core, keeping each slot's index.
    let mut by_core: BTreeMap<usize, (Vec<usize>, Vec<AppendItem>)> = BTreeMap::new();
    for (i, bytes) in parts.into_iter().enumerate() {
        let slot = &mut parsed.slots[i];
        match prepare(core, &slot.topic, slot.partition, bytes) {
            Ok((owner, item)) => {
                let entry = by_core.entry(owner).or_default();
                entry.0.push(i);
                entry.1.push(item);
            }
            Err(f) => {
                core.metrics
                    .produce_rejected
                    .set(core.metrics.produce_rejected.get() + 1);
                slot.outcome = Some(Err(f));
            }
        }
    }
    let (acks, timeout_ms) = (parsed.acks, parsed.timeout_ms);
    let mut waits: Vec<(Vec<usize>, Pending)> = Vec::new();
    for (owner, (indexes, items)) in by_core {
        let pending = if owner == core.id {
            Pending::Local(Box::pin(
                core.partitions.append_all(items, acks, timeout_ms).await,
            ))
        } else {
            let (tx, rx) = futures_channel::oneshot::channel();
            core.metrics.forwarded.set(core.metrics.forwarded.get() + 1);
            core.send(
                owner,
                CoreMessage::Produce {
                    items,
                    acks,
                    timeout_ms,
                    reply: tx,
                },
            )
            .await;
            Pending::Remote(rx, indexes.len())
        };
        waits.push((indexes, pending));
    }
    Box::pin(async move {
        for (indexes, pending) in waits {
            let outcomes = pending.resolve().await;
            for (i, o) in indexes.into_iter().zip(outcomes) {
                parsed.slots[i].outcome = Some(o);
            }
        }
        acks.responds().then(|| response(&header, &parsed.slots))
    })
}

type Outcomes = Vec<Result<ProduceAck, Failure>>;

enum Pending {
    Local(std::pin::Pin<Box<dyn Future<Output = Outcomes>>>),
    Remote(futures_channel::oneshot::Receiver<Outcomes>, usize),
}

impl Pending {
    async fn resolve(self) -> Outcomes {
        match self {
            Pending::Local(f) => f.await,
            Pending::Remote(rx, n) => match await_reply(rx).await {
                Ok(v) => v,
                Err(f) => vec![Err(f); n],
            },
        }
    }
}

/// Checks one partition's bytes and finds its owner.
fn prepare(
    core: &Core,
    topic: &Arc<str>,
    partition: i32,
    bytes: BytesMut,
) -> Result<(usize, AppendItem), Failure> {
    let (owner, image) = core.partitions.locate(topic, partition)?;
    let Some(record) = image.topics.get(&**topic) else {
        return Err(Failure::new(
            ErrorCode::UnknownTopicOrPartition,
            "topic vanished",
        ));
    };
    if record.internal {
        return Err(Failure::new(
            ErrorCode::InvalidTopicOperation,
            format!("{topic} is internal; clients cannot produce to it"),
        ));
    }
    if bytes.is_empty() {
        return Err(Failure::new(
            ErrorCode::InvalidRecordBatch,
            "no record batch for this partition",
        ));
    }
    let max = topic_config::max_message_bytes(&record.configs, &core.config);
    let batches = partition::validate(bytes, max)?;
    Ok((
        owner,
        AppendItem {
            partition: PartitionRef {
                topic: topic.clone(),
                partition: partition as u32,
            },
            batches,
        },
    ))
}

fn request_error(header: &FrameHeader, failure: &Failure) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(128);
    let message = w::message(&mut fbb, Some(failure));
    let root = wire::ProduceResponse::create(
        &mut fbb,
        &wire::ProduceResponseArgs {
            error_code: failure.code as u16,
            error_message: message,
            topics: None,
            throttle_time_ms: 0,
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}

fn response(header: &FrameHeader, slots: &[Slot]) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(64 + slots.len() * 48);
    let mut topics = Vec::new();
    for run in w::topic_runs(slots, |s| &s.topic) {
        let name = slots[run.start].topic.clone();
        let mut parts = Vec::new();
        for i in run {
            let s = &slots[i];
            let (failure, ack) = match &s.outcome {
                Some(Ok(ack)) => (None, Some(*ack)),
                Some(Err(f)) => (Some(f.clone()), None),
                None => (
                    Some(Failure::new(ErrorCode::UnknownServerError, "no outcome")),
                    None,
                ),
            };
            let message = w::message(&mut fbb, failure.as_ref());
            parts.push(wire::PartitionProduceResponse::create(
                &mut fbb,
                &wire::PartitionProduceResponseArgs {
                    partition: s.partition,
                    error_code: w::code(failure.as_ref()),
                    error_message: message,
                    base_offset: ack.map_or(-1, |a| a.base_offset),
                    log_append_time_ms: -1,
                    log_start_offset: ack.map_or(-1, |a| a.log_start_offset),
                },
            ));
        }
        let parts = fbb.create_vector(&parts);
        let name = fbb.create_string(&name);
        topics.push(wire::TopicProduceResponse::create(
            &mut fbb,
            &wire::TopicProduceResponseArgs {
                name: Some(name),
                partitions: Some(parts),
            },
        ));
    }
    let topics = fbb.create_vector(&topics);
    let root = wire::ProduceResponse::create(
        &mut fbb,
        &wire::ProduceResponseArgs {
            error_code: 0,
            error_message: None,
            topics: Some(topics),
            throttle_time_ms: 0,
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}
