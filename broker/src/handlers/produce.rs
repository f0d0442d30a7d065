//! Produce: validate every batch on the receiving core (CRC, size, codec, record framing), then
//! append on the owning core, locally or through its outbox, in request order.

use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::acl::Operation;
use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ApiKey, ErrorCode};
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;

use super::Completion;
use crate::acl::check::TopicGate;
use crate::failure::Failure;
use crate::partition::{self, AppendItem, ProduceAck};
use crate::shard::Shard;
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

/// Why a request failed as a whole, with its `acks` when they are known.
type Refusal = (Option<Acks>, Failure);

/// The request's slots; a topic `gate` refuses has its slots answered with the refusal.
fn parse(frame: &Frame, gate: &TopicGate<'_>) -> Result<Parsed, Refusal> {
    let req = w::verify::<wire::ProduceRequest>(&frame.message).map_err(|f| (None, f))?;
    let acks = Acks::from_wire(req.acks()).map_err(|f| (None, f))?;
    if req.transactional_id().is_some() {
        return Err((
            Some(acks),
            Failure::new(
                ErrorCode::InvalidRequest,
                "transactions are not supported yet",
            ),
        ));
    }
    let mut slots = Vec::new();
    let mut ranges = Vec::new();
    for topic in req.topics().iter().flatten() {
        let name: Arc<str> = Arc::from(topic.name());
        let refused = gate.check(&name).err();
        for p in topic.partitions().iter().flatten() {
            let range = p.records().map_or((0, 0), |r| (r.offset(), r.length()));
            ranges.push(range);
            slots.push(Slot {
                topic: name.clone(),
                partition: p.partition(),
                outcome: refused.clone().map(Err),
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

/// Ordered phase of a produce: validates and appends (or queues the appends) what `principal`
/// may write; returns the completion that waits for acknowledgements.
pub async fn handle(shard: &Rc<Shard>, frame: Frame, principal: &str) -> Completion {
    let header = frame.header;
    let gate = shard.topic_gate(principal, ApiKey::Produce, Operation::Write);
    let parsed = parse(&frame, &gate);
    drop(gate);
    let mut parsed = match parsed {
        Ok(p) => p,
        Err((acks, f)) => return Box::pin(async move { Some(refused(&header, acks, &f)) }),
    };
    let parts = match w::split_payload(frame.payload, &parsed.ranges) {
        Ok(p) => p,
        Err(f) => {
            let acks = Some(parsed.acks);
            return Box::pin(async move { Some(refused(&header, acks, &f)) });
        }
    };
    let request_bytes: usize = parts.iter().map(|b| b.len()).sum();
    shard.metrics().record_produce_request(request_bytes as u64);
    let mut items = Vec::with_capacity(parts.len());
    for (i, bytes) in parts.into_iter().enumerate() {
        let slot = &mut parsed.slots[i];
        if slot.outcome.is_some() {
            continue; // refused by the ACLs: nothing of this topic is appended
        }
        match prepare(shard, &slot.topic, slot.partition, bytes) {
            Ok((owner, item)) => items.push((i, owner, item)),
            Err(f) => {
                let rejected = &shard.metrics().produce_rejected;
                rejected.set(rejected.get() + 1);
                slot.outcome = Some(Err(f));
            }
        }
    }
    let acks = parsed.acks;
    let appended = shard.produce(items, acks, parsed.timeout_ms).await;
    Box::pin(async move {
        for (i, outcome) in appended.await {
            parsed.slots[i].outcome = Some(outcome);
        }
        if acks.responds() {
            return Some(response(&header, &parsed.slots));
        }
        // acks = 0: no frame; a failed partition closes the connection (Kafka's rule).
        let failed = parsed
            .slots
            .iter()
            .any(|s| matches!(s.outcome, Some(Err(_))));
        failed.then(w::Response::close_only)
    })
}

/// The answer to a Produce refused as a whole: none for `acks = 0` (the connection closes); an
/// `ErrorResponse` for a malformed request (bad payload ranges), after which the connection
/// closes as for any malformed Produce; else a `ProduceResponse` with the request-level error.
fn refused(header: &FrameHeader, acks: Option<Acks>, failure: &Failure) -> w::Response {
    match acks {
        Some(Acks::None) => w::Response::close_only(),
        _ if failure.code == ErrorCode::MalformedFrame => {
            w::error_response(header, failure).then_close()
        }
        _ => request_error(header, failure),
    }
}

/// Checks one partition's bytes and finds its owner.
fn prepare(
    shard: &Shard,
    topic: &Arc<str>,
    partition: i32,
    bytes: BytesMut,
) -> Result<(usize, AppendItem), Failure> {
    let (owner, image) = shard.partitions().locate(topic, partition)?;
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
    let max = topic_config::max_message_bytes(&record.configs, shard.config());
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
            strict_assert!(s.outcome.is_some(), "a produce slot without an outcome");
            let (failure, ack) = match &s.outcome {
                Some(Ok(ack)) if ack.duplicate => (Some(duplicate(ack)), Some(*ack)),
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

/// The answer to a retry of batches already appended: `DuplicateSequenceNumber`, with the
/// original `base_offset` in the response (producers treat it as success).
fn duplicate(ack: &ProduceAck) -> Failure {
    Failure::new(
        ErrorCode::DuplicateSequenceNumber,
        format!(
            "already appended at offset {} (a retry of an idempotent producer's batch)",
            ack.base_offset
        ),
    )
}
