//! Produce: validate every batch on the receiving core (CRC, size, codec, record framing), then
//! append on the owning core, locally or through its outbox, in request order.

use std::collections::BTreeMap;
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use borges_protocol::batch::{self, BatchError, BatchHeader, Compression};
use borges_protocol::frame::{Frame, FrameHeader};
use borges_protocol::varint::get_varint;
use borges_protocol::{wire, ErrorCode};
use borges_runtime::time;
use borges_storage::AckLevel;
use bytes::BytesMut;
use flatbuffers::FlatBufferBuilder;

use super::Completion;
use crate::core::Core;
use crate::router::{
    await_reply, CoreMessage, Failure, PartitionRef, ProduceAck, ProduceItem, ProduceOutcome,
};
use crate::topic_config;
use crate::wire as w;

/// One partition of the request, in request order.
struct Slot {
    topic: Arc<str>,
    partition: i32,
    outcome: Option<Result<ProduceAck, Failure>>,
}

/// Parsed request: the slots and their payload ranges.
struct Parsed {
    acks: i16,
    timeout_ms: u32,
    slots: Vec<Slot>,
    ranges: Vec<(u32, u32)>,
}

fn parse(frame: &Frame) -> Result<Parsed, Failure> {
    let req = w::verify::<wire::ProduceRequest>(&frame.message)?;
    let acks = req.acks();
    if !(-1..=1).contains(&acks) {
        return Err(Failure::new(
            ErrorCode::InvalidRequest,
            format!("acks = {acks}: expected 0, 1 or -1 (all)"),
        ));
    }
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
    let mut by_core: BTreeMap<usize, (Vec<usize>, Vec<ProduceItem>)> = BTreeMap::new();
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
            Pending::Local(Box::pin(append_local(core, items, acks, timeout_ms).await))
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
                parsed.slots[i].outcome = Some(o.result);
            }
        }
        (acks != 0).then(|| response(&header, &parsed.slots))
    })
}

enum Pending {
    Local(std::pin::Pin<Box<dyn Future<Output = Vec<ProduceOutcome>>>>),
    Remote(
        futures_channel::oneshot::Receiver<Vec<ProduceOutcome>>,
        usize,
    ),
}

impl Pending {
    async fn resolve(self) -> Vec<ProduceOutcome> {
        match self {
            Pending::Local(f) => f.await,
            Pending::Remote(rx, n) => match await_reply(rx).await {
                Ok(v) => v,
                Err(f) => vec![ProduceOutcome { result: Err(f) }; n],
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
) -> Result<(usize, ProduceItem), Failure> {
    let (owner, image) = core.locate(topic, partition)?;
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
    let batches = batch::split_batches(bytes, max).map_err(batch_failure)?;
    let mut size_bytes = 0u64;
    let mut out = Vec::with_capacity(batches.len());
    for (header, b) in batches {
        check_batch(&header, &b).map_err(batch_failure)?;
        size_bytes += b.len() as u64;
        out.push(b);
    }
    Ok((
        owner,
        ProduceItem {
            partition: PartitionRef {
                topic: topic.clone(),
                partition: partition as u32,
            },
            batches: out,
            size_bytes,
        },
    ))
}

fn batch_failure(e: BatchError) -> Failure {
    Failure::new(e.error_code(), e.to_string())
}

/// Checks what the CRC cannot: a supported codec, no control or transactional batches, and for
/// uncompressed batches that the records section holds exactly `records_count` records.
fn check_batch(header: &BatchHeader, bytes: &[u8]) -> Result<(), BatchError> {
    let compression = header.compression();
    if !compression.is_supported() {
        return Err(BatchError::UnsupportedCompression(compression));
    }
    if header.is_control() || header.is_transactional() {
        return Err(BatchError::InvalidRecord {
            index: 0,
            reason: "transactional and control batches are not supported yet",
        });
    }
    if header.records_count == 0 {
        return Err(BatchError::InvalidRecordCount {
            records_count: 0,
            last_offset_delta: header.last_offset_delta,
        });
    }
    if compression == Compression::None {
        check_record_framing(header, &bytes[batch::field::RECORDS..])?;
    }
    Ok(())
}

/// Walks the length prefixes of an uncompressed records section.
fn check_record_framing(header: &BatchHeader, mut records: &[u8]) -> Result<(), BatchError> {
    let mut index = 0u32;
    while !records.is_empty() {
        let (len, n) = get_varint(records).map_err(|_| BatchError::InvalidRecord {
            index,
            reason: "bad record length",
        })?;
        if len <= 0 || (len as usize) > records.len() - n {
            return Err(BatchError::InvalidRecord {
                index,
                reason: "record length exceeds the batch",
            });
        }
        records = &records[n + len as usize..];
        index += 1;
    }
    if index as i32 != header.records_count {
        return Err(BatchError::InvalidRecordCount {
            records_count: header.records_count,
            last_offset_delta: header.last_offset_delta,
        });
    }
    Ok(())
}

/// Appends on the owning core, now, in order; returns the completion that waits for
/// acknowledgements. Runs for local requests and for `CoreMessage::Produce`.
pub async fn append_local(
    core: &Rc<Core>,
    items: Vec<ProduceItem>,
    acks: i16,
    timeout_ms: u32,
) -> impl Future<Output = Vec<ProduceOutcome>> + 'static {
    let mut appended = Vec::with_capacity(items.len());
    for item in items {
        appended.push(append_one(core, item, acks).await);
    }
    let core = core.clone();
    // One deadline for the whole request: partitions waited for one after another share it.
    let deadline = time::Instant::now() + Duration::from_millis(u64::from(timeout_ms));
    async move {
        let mut out = Vec::with_capacity(appended.len());
        for a in appended {
            let result = match a {
                Err(f) => Err(f),
                Ok((_, ack)) if acks == 0 => Ok(ack.into()),
                Ok((log, ack)) => {
                    let level = if acks == -1 {
                        AckLevel::All
                    } else {
                        AckLevel::Leader
                    };
                    let left = deadline.saturating_duration_since(time::Instant::now());
                    match time::timeout(left, log.wait_acked(ack.last_offset, level)).await {
                        Some(Ok(())) => Ok(ProduceAck {
                            base_offset: ack.base_offset,
                            log_start_offset: log.offsets().log_start_offset,
                        }),
                        Some(Err(e)) => Err(Failure::new(e.error_code(), e.to_string())),
                        None => Err(Failure::new(
                            ErrorCode::RequestTimedOut,
                            format!("not acknowledged within {timeout_ms} ms"),
                        )),
                    }
                }
            };
            if let Err(f) = &result {
                core.metrics
                    .produce_failed
                    .set(core.metrics.produce_failed.get() + 1);
                tracing::debug!(code = %f.code, "produce failed: {:?}", f.message);
            }
            out.push(ProduceOutcome { result });
        }
        out
    }
}

/// What a completion needs from an append.
#[derive(Clone, Copy)]
struct AckInfo {
    base_offset: i64,
    last_offset: i64,
}

impl From<AckInfo> for ProduceAck {
    fn from(a: AckInfo) -> ProduceAck {
        ProduceAck {
            base_offset: a.base_offset,
            log_start_offset: -1,
        }
    }
}

async fn append_one(
    core: &Rc<Core>,
    item: ProduceItem,
    acks: i16,
) -> Result<(Rc<borges_storage::PartitionLog>, AckInfo), Failure> {
    let log = core.log(&item.partition)?;
    let (epoch, min_isr) = {
        let image = core.metadata.borrow();
        let t = image.topics.get(&*item.partition.topic);
        let epoch = t
            .and_then(|t| t.partitions.get(item.partition.partition as usize))
            .map_or(0, |p| p.leader_epoch);
        (
            epoch,
            t.map_or(1, |t| topic_config::min_insync_replicas(&t.configs)),
        )
    };
    if acks == -1 && min_isr > 1 {
        return Err(Failure::new(
            ErrorCode::NotEnoughReplicas,
            format!("min.insync.replicas = {min_isr} but the in-sync replica set has 1 member"),
        ));
    }
    log.wait_writable(item.size_bytes).await;
    let records: i64 = item
        .batches
        .iter()
        .filter_map(|b| BatchHeader::parse(b).ok())
        .map(|h| i64::from(h.records_count))
        .sum();
    let info = log
        .append(item.batches, epoch)
        .map_err(|e| Failure::new(e.error_code(), e.to_string()))?;
    core.metrics.record_produce(item.size_bytes, records as u64);
    Ok((
        log,
        AckInfo {
            base_offset: info.base_offset,
            last_offset: info.last_offset,
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

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::batch::{BatchBuilder, BatchOptions};

    #[test]
    fn record_framing_catches_a_lying_count() {
        let mut b = BatchBuilder::new(BatchOptions::default(), 64);
        b.push(1, Some(b"k"), Some(b"v"), &[]);
        b.push(2, None, Some(b"w"), &[]);
        let bytes = b.build().unwrap();
        let header = batch::validate(&bytes).unwrap();
        assert!(check_batch(&header, &bytes).is_ok());
        let mut lying = header;
        lying.records_count = 3;
        lying.last_offset_delta = 2;
        assert!(check_record_framing(&lying, &bytes[batch::field::RECORDS..]).is_err());
        assert!(
            check_record_framing(&header, &bytes[batch::field::RECORDS..bytes.len() - 1]).is_err()
        );
    }
}
