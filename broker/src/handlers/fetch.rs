//! Fetch: read every partition on its owning core (file ranges for sendfile, or memory for the
//! recent tail and the copy path), long-poll until `min_bytes` or `max_wait_ms`, and answer with
//! the batches in the payload region.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::{wire, ErrorCode};
use borges_runtime::{task, time};
use flatbuffers::FlatBufferBuilder;

use crate::config::FetchSendMode;
use crate::core::Core;
use crate::failure::Failure;
use crate::partition::{first_of, FetchItem, FetchOutcome};
use crate::router::{await_reply, CoreMessage};
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

fn parse(core: &Core, frame: &Frame) -> Result<Parsed, Failure> {
    let req = w::verify::<wire::FetchRequest>(&frame.message)?;
    if req.replica_id() != -1 {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            "replica fetches arrive with replication; consumers must send replica_id -1",
        ));
    }
    let settings = &core.config.fetch;
    let max_bytes = if req.max_bytes() <= 0 {
        u64::from(settings.response_bytes_max)
    } else {
        (req.max_bytes() as u64).min(u64::from(settings.response_bytes_max))
    };
    let mut slots = Vec::new();
    for topic in req.topics().iter().flatten() {
        let name: Arc<str> = Arc::from(topic.name());
        for p in topic.partitions().iter().flatten() {
            let target = core
                .partitions
                .locate(&name, p.partition())
                .and_then(|(owner, _)| {
                    if p.fetch_offset() < 0 {
                        return Err(Failure::new(
                            ErrorCode::OffsetOutOfRange,
                            format!("fetch offset {} is negative", p.fetch_offset()),
                        ));
                    }
                    Ok((
                        owner,
                        FetchItem {
                            partition: PartitionRef {
                                topic: name.clone(),
                                partition: p.partition() as u32,
                            },
                            fetch_offset: p.fetch_offset(),
                            max_bytes: p.partition_max_bytes().max(1) as u64,
                        },
                    ))
                });
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

/// Serves a Fetch request.
pub async fn handle(core: Rc<Core>, frame: Frame) -> Option<w::Response> {
    let header = frame.header;
    let mut parsed = match parse(&core, &frame) {
        Ok(p) => p,
        Err(f) => return Some(request_error(&header, &f)),
    };
    drop(frame);
    let copy = core.config.fetch.send_mode == FetchSendMode::Copy;
    let deadline = Instant::now() + Duration::from_millis(parsed.max_wait_ms);
    loop {
        read_all(&core, &mut parsed.slots, copy).await;
        let total: u64 = parsed
            .slots
            .iter()
            .filter_map(|s| s.outcome.as_ref())
            .map(|o| o.size_bytes)
            .sum();
        let failed = parsed
            .slots
            .iter()
            .any(|s| s.target.is_err() || s.outcome.as_ref().is_some_and(|o| o.failure.is_some()));
        if parsed.min_bytes == 0
            || total >= parsed.min_bytes
            || failed
            || Instant::now() >= deadline
        {
            break;
        }
        wait_all(&core, &parsed.slots, deadline).await;
        if Instant::now() >= deadline {
            read_all(&core, &mut parsed.slots, copy).await;
            break;
        }
    }
    trim(&mut parsed.slots, parsed.max_bytes);
    let response = response(&header, &mut parsed.slots);
    let sent: u64 = response.payload.iter().map(|c| c.len()).sum();
    core.metrics.record_fetch(sent);
    Some(response)
}

/// Reads every slot on its owner (concurrently across cores).
async fn read_all(core: &Rc<Core>, slots: &mut [Slot], copy: bool) {
    let mut by_core: std::collections::BTreeMap<usize, (Vec<usize>, Vec<FetchItem>)> =
        std::collections::BTreeMap::new();
    for (i, s) in slots.iter().enumerate() {
        if let Ok((owner, item)) = &s.target {
            let e = by_core.entry(*owner).or_default();
            e.0.push(i);
            e.1.push(item.clone());
        }
    }
    let mut pending = Vec::new();
    for (owner, (indexes, items)) in by_core {
        let n = items.len();
        let t = if owner == core.id {
            let core = core.clone();
            task::spawn(async move { core.partitions.read_all(&items, copy).await })
        } else {
            core.metrics.forwarded.set(core.metrics.forwarded.get() + 1);
            let core = core.clone();
            task::spawn(async move {
                match core
                    .ask(owner, |reply| CoreMessage::Fetch { items, copy, reply })
                    .await
                {
                    Ok(v) => v,
                    Err(f) => (0..n).map(|_| FetchOutcome::failed(f.clone())).collect(),
                }
            })
        };
        pending.push((indexes, t));
    }
    for (indexes, t) in pending {
        for (i, o) in indexes.into_iter().zip(t.await) {
            slots[i].outcome = Some(o);
        }
    }
}

/// Waits until any slot's partition has data past its fetch offset, or the deadline.
async fn wait_all(core: &Rc<Core>, slots: &[Slot], deadline: Instant) {
    let mut by_core: std::collections::BTreeMap<usize, Vec<(PartitionRef, i64)>> =
        std::collections::BTreeMap::new();
    for s in slots {
        if let Ok((owner, item)) = &s.target {
            by_core
                .entry(*owner)
                .or_default()
                .push((item.partition.clone(), item.fetch_offset));
        }
    }
    let mut waits: Vec<Pin<Box<dyn Future<Output = ()>>>> = Vec::new();
    for (owner, items) in by_core {
        if owner == core.id {
            let core = core.clone();
            waits.push(Box::pin(async move {
                core.partitions.wait_for_data(&items, deadline).await
            }));
        } else {
            let (tx, rx) = futures_channel::oneshot::channel();
            core.send(
                owner,
                CoreMessage::WaitForData {
                    items,
                    deadline,
                    reply: tx,
                },
            )
            .await;
            waits.push(Box::pin(async move {
                let _ = await_reply(rx).await;
            }));
        }
    }
    let remaining = deadline.saturating_duration_since(Instant::now());
    time::timeout(remaining, first_of(waits)).await;
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
            let outcome = match (&s.target, s.outcome.take()) {
                (Err(f), _) => FetchOutcome::failed(f.clone()),
                (Ok(_), Some(o)) => o,
                (Ok(_), None) => FetchOutcome::failed(Failure::new(
                    ErrorCode::UnknownServerError,
                    "no read outcome",
                )),
            };
            let message = w::message(&mut fbb, outcome.failure.as_ref());
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
                    diverging_epoch: None,
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
