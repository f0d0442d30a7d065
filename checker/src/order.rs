//! Order analyses: consumer skips and non-monotonic polls (assign-mode consumers, between
//! seeks), final-read contiguity, and non-monotonic sends per producer and partition.

use std::collections::{BTreeMap, HashMap};

use crate::anomaly::{Anomaly, Passed, SendRef, When, SKIPPED_LISTED_MAX};
use crate::history::{ConsumerMode, EventKind, History, Offset, Partition, ProcessId, Value};
use crate::model::{Model, SendStatus};

/// What the consumer-order pass found.
#[derive(Debug, Default)]
pub struct ConsumerOrder {
    /// Skips and non-monotonic polls.
    pub anomalies: Vec<Anomaly>,
    /// Per partition, the stretches assign-mode consumers read (for lost writes).
    pub passed: HashMap<Partition, Vec<Passed>>,
    /// Consumers that polled before any assign event (their order is not checked).
    pub unassigned_pollers: Vec<ProcessId>,
}

/// One consumer's reading of one partition since its last seek or assign.
#[derive(Debug, Default, Clone, Copy)]
struct Stretch {
    /// The offset the consumer must return next, when known.
    expected: Option<Offset>,
    /// Where the stretch started.
    from: Option<Offset>,
    /// The highest offset returned.
    to: Option<Offset>,
}

struct Consumer {
    mode: ConsumerMode,
    stretches: BTreeMap<Partition, Stretch>,
}

/// Walks every consumer's assigns, seeks and polls in history order.
pub fn consumer_order(history: &History, model: &Model) -> ConsumerOrder {
    let mut out = ConsumerOrder::default();
    let mut consumers: HashMap<ProcessId, Consumer> = HashMap::new();
    for event in &history.events {
        match &event.kind {
            EventKind::Assign {
                process,
                mode,
                partitions,
            } => {
                let consumer = consumers.entry(*process).or_insert(Consumer {
                    mode: *mode,
                    stretches: BTreeMap::new(),
                });
                assign(&mut out, *process, consumer, *mode, partitions);
            }
            EventKind::Seek {
                process,
                partition,
                offset,
            } => {
                if let Some(consumer) = consumers.get_mut(process) {
                    let fresh = Stretch {
                        expected: *offset,
                        from: *offset,
                        to: None,
                    };
                    if let Some(old) = consumer.stretches.insert(*partition, fresh) {
                        close(&mut out, *process, consumer.mode, *partition, old);
                    }
                }
            }
            EventKind::Poll { process, records } => match consumers.get_mut(process) {
                Some(consumer) => {
                    let at = model.when(event.mono_ns, event.wall_ms);
                    poll(&mut out, model, *process, consumer, records, at);
                }
                None if !out.unassigned_pollers.contains(process) => {
                    out.unassigned_pollers.push(*process)
                }
                None => {}
            },
            _ => {}
        }
    }
    for (process, consumer) in consumers {
        for (partition, stretch) in consumer.stretches {
            close(&mut out, process, consumer.mode, partition, stretch);
        }
    }
    out
}

/// Partitions kept across an assign keep their stretch (the client keeps their positions).
fn assign(
    out: &mut ConsumerOrder,
    process: ProcessId,
    consumer: &mut Consumer,
    mode: ConsumerMode,
    partitions: &[Partition],
) {
    let kept: BTreeMap<Partition, Stretch> = partitions
        .iter()
        .map(|p| (*p, consumer.stretches.get(p).copied().unwrap_or_default()))
        .collect();
    let old = std::mem::replace(&mut consumer.stretches, kept);
    for (partition, stretch) in old {
        if !partitions.contains(&partition) {
            close(out, process, consumer.mode, partition, stretch);
        }
    }
    consumer.mode = mode;
}

fn poll(
    out: &mut ConsumerOrder,
    model: &Model,
    process: ProcessId,
    consumer: &mut Consumer,
    records: &[(Partition, Offset, Value)],
    at: When,
) {
    for &(partition, offset, _) in records {
        let stretch = consumer.stretches.entry(partition).or_default();
        if consumer.mode == ConsumerMode::Assign {
            if let Some(anomaly) = check_next(model, process, partition, *stretch, offset, at) {
                out.anomalies.push(anomaly);
            }
        }
        stretch.expected = Some(offset + 1);
        stretch.from = Some(stretch.from.unwrap_or(offset));
        stretch.to = Some(stretch.to.map_or(offset, |to| to.max(offset)));
    }
}

fn close(
    out: &mut ConsumerOrder,
    process: ProcessId,
    mode: ConsumerMode,
    partition: Partition,
    stretch: Stretch,
) {
    if let (ConsumerMode::Assign, Some(from), Some(to)) = (mode, stretch.from, stretch.to) {
        out.passed
            .entry(partition)
            .or_default()
            .push(Passed { process, from, to });
    }
}

/// The anomaly, if an assign-mode consumer expected at `stretch.expected` returned `next`.
fn check_next(
    model: &Model,
    process: ProcessId,
    partition: Partition,
    stretch: Stretch,
    next: Offset,
    at: When,
) -> Option<Anomaly> {
    let expected = stretch.expected?;
    if next < expected {
        return Some(Anomaly::NonMonotonicPoll {
            partition,
            process,
            expected,
            next,
            at,
        });
    }
    if next == expected {
        return None;
    }
    // Skipped offsets only count where some observer knows a value: holes nobody saw are
    // not evidence (Jepsen's dense version order).
    let view = model.partitions.get(&partition)?;
    let known: Vec<(Offset, Value)> = view
        .offsets
        .range(expected..next)
        .map(|(&offset, seen)| (offset, seen[0].value))
        .collect();
    if known.is_empty() {
        return None;
    }
    Some(Anomaly::Skip {
        partition,
        process,
        expected,
        next,
        skipped_count: known.len(),
        skipped: known.into_iter().take(SKIPPED_LISTED_MAX).collect(),
        at,
    })
}

/// Each complete final read must hold exactly the offsets `log_start..hw`, in order.
pub fn final_read_gaps(model: &Model) -> Vec<Anomaly> {
    let mut out = Vec::new();
    for (&partition, view) in &model.partitions {
        for (read, log_start, hw) in view.complete_finals() {
            let mut expected = log_start;
            let mut found = None;
            for &(offset, _) in &read.records {
                if offset != expected || offset >= hw {
                    found = Some(Some(offset));
                    break;
                }
                expected += 1;
            }
            if found.is_none() && expected < hw {
                found = Some(None);
            }
            if let Some(found) = found {
                out.push(Anomaly::FinalReadGap {
                    partition,
                    process: read.process,
                    expected,
                    found,
                    log_start,
                    hw,
                });
            }
        }
    }
    out
}

/// A producer's acknowledged sends to one partition, in invoke order, must have increasing
/// offsets. Indefinite sends are not judged: after a timeout, a send that lands later on
/// another connection is allowed to land after the next one.
pub fn non_monotonic_sends(model: &Model) -> Vec<Anomaly> {
    let mut last: HashMap<(ProcessId, Partition), SendRef> = HashMap::new();
    let mut out = Vec::new();
    for send in &model.sends {
        let SendStatus::Ok(offset) = send.status else {
            continue;
        };
        let this = SendRef {
            op: send.op,
            value: send.value,
            offset,
        };
        if let Some(previous) = last.insert((send.process, send.partition), this) {
            if offset <= previous.offset {
                out.push(Anomaly::NonMonotonicSend {
                    partition: send.partition,
                    process: send.process,
                    previous,
                    next: this,
                });
            }
        }
    }
    out
}
