//! Fetch: read every partition on its owning core (file ranges for sendfile, or memory for the
//! recent tail and the copy path), long-poll until `min_bytes` or `max_wait_ms`, and answer with
//! the batches in the payload region.

use std::rc::Rc;
use std::sync::Arc;

use borges_protocol::acl::Operation;
use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ApiKey, ErrorCode};
use flatbuffers::FlatBufferBuilder;

use crate::config::FetchSendMode;
use crate::failure::Failure;
use crate::partition::{FetchItem, FetchOutcome, ReplicaFetchFields};
use crate::shard::FetchPlan;
use crate::shard::Shard;
use crate::types::PartitionRef;
use crate::wire as w;

/// One requested partition, in request order.
struct Slot {
    topic: Arc<str>,
    partition: i32,
    /// Owner core and what to read, when the partition exists.
    target: Result<(usize, FetchItem), Failure>,
    outcome: Option<FetchOutcome>,
}

struct Parsed {
    max_wait_ms: u64,
    min_bytes: u64,
    max_bytes: u64,
    slots: Vec<Slot>,
}

/// The request's slots; a consumer's topic `principal` may not Read has its slots answered
/// `TopicAuthorizationFailed` (a follower's fetch needed ClusterAction before dispatch).
fn parse(shard: &Shard, frame: &Frame, principal: &str) -> Result<Parsed, Failure> {
    let req = w::verify::<wire::FetchRequest>(&frame.message)?;
    let replica_id = req.replica_id();
    if replica_id != -1 && (replica_id < 0 || !shard.config().cluster.enabled()) {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!(
                "replica_id {replica_id}: replica fetches come from cluster brokers (ids >= 0) \
                 to a cluster broker; consumers send -1"
            ),
        ));
    }
    let settings = &shard.config().fetch;
    let max_bytes = if req.max_bytes() <= 0 {
        u64::from(settings.response_bytes_max)
    } else {
        (req.max_bytes() as u64).min(u64::from(settings.response_bytes_max))
    };
    let gate = shard.topic_gate(principal, ApiKey::Fetch, Operation::Read);
    let mut slots = Vec::new();
    for topic in req.topics().iter().flatten() {
        let name: Arc<str> = Arc::from(topic.name());
        let allowed = match replica_id >= 0 {
            true => Ok(()),
            false => gate.check(&name),
        };
        for p in topic.partitions().iter().flatten() {
            let target = allowed
                .clone()
                .and_then(|()| shard.partitions().locate(&name, p.partition()))
                .and_then(|(owner, _)| Ok((owner, item(&req, &name, &p)?)));
            slots.push(Slot {
                topic: name.clone(),
                partition: p.partition(),
                target,
                outcome: None,
            });
        }
    }
    Ok(Parsed {
        max_wait_ms: u64::from(req.max_wait_ms().max(0) as u32)
            .min(u64::from(settings.max_wait_ms_max)),
        min_bytes: req.min_bytes().max(0) as u64,
        max_bytes,
        slots,
    })
}

/// What to read of partition `p` of topic `name`.
fn item(
    req: &wire::FetchRequest<'_>,
    name: &Arc<str>,
    p: &wire::FetchPartition<'_>,
) -> Result<FetchItem, Failure> {
    if p.fetch_offset() < 0 {
        return Err(Failure::new(
            ErrorCode::OffsetOutOfRange,
            format!("fetch offset {} is negative", p.fetch_offset()),
        ));
    }
    let replica_id = req.replica_id();
    Ok(FetchItem {
        partition: PartitionRef {
            topic: name.clone(),
            partition: p.partition() as u32,
        },
        fetch_offset: p.fetch_offset(),
        max_bytes: p.partition_max_bytes().max(1) as u64,
        replica: (replica_id >= 0).then_some(ReplicaFetchFields {
            replica_id,
            broker_epoch: req.replica_epoch(),
            current_leader_epoch: p.current_leader_epoch(),
            last_fetched_epoch: p.last_fetched_epoch(),
        }),
    })
}

/// Serves a Fetch request from `principal`.
pub async fn handle(shard: Rc<Shard>, frame: Frame, principal: Rc<str>) -> Option<w::Response> {
    let header = frame.header;
    let mut parsed = match parse(&shard, &frame, &principal) {
        Ok(p) => p,
        Err(f) => return Some(request_error(&header, &f)),
    };
    drop(frame);
    let plan = FetchPlan {
        targets: parsed.slots.iter().map(|s| s.target.clone().ok()).collect(),
        min_bytes: parsed.min_bytes,
        max_wait_ms: parsed.max_wait_ms,
        // TLS encrypts in user space: file pages cannot go to the socket as they are.
        copy: shard.config().fetch.send_mode == FetchSendMode::Copy || shard.config().tls.enabled(),
    };
    let outcomes = shard.fetch(plan).await;
    for (slot, outcome) in parsed.slots.iter_mut().zip(outcomes) {
        slot.outcome = outcome;
    }
    trim(&mut parsed.slots, parsed.max_bytes);
    let metrics = shard.metrics();
    for s in &parsed.slots {
        metrics.record_fetch(&s.topic, s.outcome.as_ref().map_or(0, |o| o.size_bytes));
    }
    let response = response(&header, &mut parsed.slots);
    let sent: u64 = response.payload.iter().map(|c| c.len()).sum();
    metrics.record_fetch_response(sent);
    Some(response)
}

/// Keeps the response within `max_bytes`: the first partition with data always keeps its data
/// (so consumers progress); later ones are emptied once the budget is spent.
fn trim(slots: &mut [Slot], max_bytes: u64) {
    let mut used = 0u64;
    let mut first = true;
    for s in slots.iter_mut() {
        let Some(o) = s.outcome.as_mut() else {
            continue;
        };
        if o.size_bytes == 0 {
            continue;
        }
        if first || used + o.size_bytes <= max_bytes {
            used += o.size_bytes;
            first = false;
        } else {
            o.chunks.clear();
            o.size_bytes = 0;
        }
    }
}

fn request_error(header: &FrameHeader, failure: &Failure) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(128);
    let message = w::message(&mut fbb, Some(failure));
    let root = wire::FetchResponse::create(
        &mut fbb,
        &wire::FetchResponseArgs {
            error_code: failure.code as u16,
            error_message: message,
            throttle_time_ms: 0,
            topics: None,
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), Vec::new())
}

fn response(header: &FrameHeader, slots: &mut [Slot]) -> w::Response {
    let mut fbb = FlatBufferBuilder::with_capacity(64 + slots.len() * 64);
    let mut payload = Vec::new();
    let mut position: u64 = 0;
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
            let outcome = match (&s.target, s.outcome.take()) {
                (Err(f), _) => FetchOutcome::failed(f.clone()),
                (Ok(_), Some(o)) => o,
                (Ok(_), None) => FetchOutcome::failed(Failure::new(
                    ErrorCode::UnknownServerError,
                    "no read outcome",
                )),
            };
            let message = w::message(&mut fbb, outcome.failure.as_ref());
            let diverging = outcome
                .diverging_epoch
                .map(|(epoch, end)| wire::EpochEndOffset::new(epoch, end));
            let range = wire::PayloadRange::new(position as u32, outcome.size_bytes as u32);
            position += outcome.size_bytes;
            parts.push(wire::FetchPartitionResponse::create(
                &mut fbb,
                &wire::FetchPartitionResponseArgs {
                    partition: s.partition,
                    error_code: w::code(outcome.failure.as_ref()),
                    error_message: message,
                    high_watermark: outcome.high_watermark,
                    last_stable_offset: outcome.high_watermark,
                    log_start_offset: outcome.log_start_offset,
                    diverging_epoch: diverging.as_ref(),
                    records: Some(&range),
                },
            ));
            payload.extend(outcome.chunks);
        }
        let parts = fbb.create_vector(&parts);
        let name = fbb.create_string(&name);
        topics.push(wire::FetchTopicResponse::create(
            &mut fbb,
            &wire::FetchTopicResponseArgs {
                name: Some(name),
                partitions: Some(parts),
            },
        ));
    }
    let topics = fbb.create_vector(&topics);
    let root = wire::FetchResponse::create(
        &mut fbb,
        &wire::FetchResponseArgs {
            error_code: 0,
            error_message: None,
            throttle_time_ms: 0,
            topics: Some(topics),
        },
    );
    fbb.finish(root, None);
    w::response(header, fbb.finished_data(), payload)
}
