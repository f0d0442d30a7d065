//! Injects one anomaly of a chosen kind into a simulated run (property tests).

use std::collections::HashMap;

use crate::history::{ConsumerMode, Event, EventKind, Offset, Partition, Value};
use crate::sim::Run;

/// The kinds of anomaly the property test injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Injection {
    Lost,
    Duplicate,
    Inconsistent,
    Aborted,
    Unknown,
    Skip,
    NonMonotonicPoll,
    NonMonotonicSend,
    Replica,
    Metadata,
    NoRecovery,
}

impl Injection {
    pub const ALL: [Injection; 11] = [
        Injection::Lost,
        Injection::Duplicate,
        Injection::Inconsistent,
        Injection::Aborted,
        Injection::Unknown,
        Injection::Skip,
        Injection::NonMonotonicPoll,
        Injection::NonMonotonicSend,
        Injection::Replica,
        Injection::Metadata,
        Injection::NoRecovery,
    ];

    /// The anomaly the checker must report.
    pub fn expected(self) -> &'static str {
        match self {
            Injection::Lost => "lost",
            Injection::Duplicate => "duplicate",
            Injection::Inconsistent => "inconsistent_offset",
            Injection::Aborted => "aborted_read",
            Injection::Unknown => "unknown_value",
            Injection::Skip => "skip",
            Injection::NonMonotonicPoll => "non_monotonic_poll",
            Injection::NonMonotonicSend => "non_monotonic_send",
            Injection::Replica => "replica_divergence",
            Injection::Metadata => "metadata_divergence",
            Injection::NoRecovery => "no_recovery",
        }
    }
}

const FRESH_VALUE: Value = u64::MAX - 7;
const FRESH_PROCESS: u64 = 5_000;
const ASSIGN_CONSUMERS: [u64; 2] = [100, 101];

/// Injects `injection`, choosing where with `pick`; false if this run has no place for it.
pub fn inject(run: &mut Run, injection: Injection, pick: u64) -> bool {
    match injection {
        Injection::Lost => lost(run, pick),
        Injection::Duplicate => nonempty(run, pick).is_some_and(|p| {
            let log = &run.logs[p as usize];
            let value = log[pick as usize % log.len()];
            append_to_final(run, p, value)
        }),
        Injection::Inconsistent => inconsistent(run, pick),
        Injection::Aborted => {
            let p = (pick % run.logs.len() as u64) as Partition;
            insert_send(
                run,
                p,
                EventKind::SendFail {
                    process: 1,
                    op: FRESH_VALUE,
                    error: "NotEnoughReplicas".into(),
                },
            );
            append_to_final(run, p, FRESH_VALUE)
        }
        Injection::Unknown => append_to_final(
            run,
            (pick % run.logs.len() as u64) as Partition,
            FRESH_VALUE,
        ),
        Injection::Skip => skip(run, pick),
        Injection::NonMonotonicPoll => non_monotonic_poll(run, pick),
        Injection::NonMonotonicSend => non_monotonic_send(run, pick),
        Injection::Replica => {
            let candidates: Vec<usize> = (0..run.replicas.len())
                .filter(|&i| run.replicas[i].node == 2 && !run.replicas[i].batches.is_empty())
                .collect();
            let Some(&i) = candidates.get(pick as usize % candidates.len().max(1)) else {
                return false;
            };
            let batches = &mut run.replicas[i].batches;
            let n = batches.len();
            batches[pick as usize % n].crc ^= 0x10;
            true
        }
        Injection::Metadata => {
            let log = &mut run.metadata[1];
            let committed = log
                .entries
                .iter()
                .filter(|e| e.index <= log.commit_index)
                .count();
            if committed == 0 {
                return false;
            }
            log.entries[pick as usize % committed].checksum ^= 0x10;
            true
        }
        Injection::NoRecovery => {
            no_recovery(run, pick);
            true
        }
    }
}

fn nonempty(run: &Run, pick: u64) -> Option<Partition> {
    let candidates: Vec<usize> = (0..run.logs.len())
        .filter(|&p| !run.logs[p].is_empty())
        .collect();
    candidates
        .get(pick as usize % candidates.len().max(1))
        .map(|&p| p as Partition)
}

fn sends(run: &Run) -> HashMap<u64, (u64, Partition, Value)> {
    run.events
        .iter()
        .filter_map(|e| match e.kind {
            EventKind::SendInvoke {
                process,
                op,
                partition,
                value,
            } => Some((op, (process, partition, value))),
            _ => None,
        })
        .collect()
}

/// Indices of the acknowledgement events, with (process, partition, value, offset).
fn acks(run: &Run) -> Vec<(usize, u64, Partition, Value, Offset)> {
    let sends = sends(run);
    run.events
        .iter()
        .enumerate()
        .filter_map(|(i, e)| match e.kind {
            EventKind::SendOk { op, offset, .. } => {
                let (process, partition, value) = sends[&op];
                Some((i, process, partition, value, offset))
            }
            _ => None,
        })
        .collect()
}

fn lost(run: &mut Run, pick: u64) -> bool {
    let acks = acks(run);
    let Some(&(_, _, partition, value, _)) = acks.get(pick as usize % acks.len().max(1)) else {
        return false;
    };
    for event in &mut run.events {
        if let EventKind::FinalRead {
            partition: p,
            records,
            ..
        } = &mut event.kind
        {
            if *p == partition {
                records.retain(|&(_, v)| v != value);
            }
        }
    }
    true
}

fn append_to_final(run: &mut Run, partition: Partition, value: Value) -> bool {
    let Some(end) = run
        .events
        .iter()
        .position(|e| matches!(e.kind, EventKind::FinalEnd { partition: p, .. } if p == partition))
    else {
        return false;
    };
    let mut event = run.events[end].clone();
    let EventKind::FinalEnd { process, hw, .. } = &mut event.kind else {
        return false;
    };
    let chunk = EventKind::FinalRead {
        process: *process,
        partition,
        records: vec![(*hw, value)],
    };
    *hw += 1;
    let mono_ns = event.mono_ns;
    run.events[end] = event;
    run.events.insert(
        end,
        Event {
            mono_ns,
            wall_ms: 0,
            kind: chunk,
        },
    );
    true
}

fn insert_send(run: &mut Run, partition: Partition, completion: EventKind) {
    let mono_ns = run.events[0].mono_ns;
    let invoke = EventKind::SendInvoke {
        process: 1,
        op: FRESH_VALUE,
        partition,
        value: FRESH_VALUE,
    };
    run.events.insert(
        1,
        Event {
            mono_ns,
            wall_ms: 0,
            kind: completion,
        },
    );
    run.events.insert(
        1,
        Event {
            mono_ns,
            wall_ms: 0,
            kind: invoke,
        },
    );
}

fn inconsistent(run: &mut Run, pick: u64) -> bool {
    // An offset observed twice (a poll, or an ack, beside the final read) gets another value
    // of its partition in the final read.
    let acks = acks(run);
    let Some(&(_, _, partition, _, offset)) = acks.get(pick as usize % acks.len().max(1)) else {
        return false;
    };
    let log = &run.logs[partition as usize];
    if log.len() < 2 {
        return false;
    }
    let other = log[(offset as usize + 1) % log.len()];
    for event in &mut run.events {
        if let EventKind::FinalRead {
            partition: p,
            records,
            ..
        } = &mut event.kind
        {
            if *p == partition {
                for record in records.iter_mut().filter(|r| r.0 == offset) {
                    record.1 = other;
                }
            }
        }
    }
    true
}

/// Assign-mode polls, as (event index, record index) of records followed by the next offset.
fn assign_polls(run: &Run, run_length: usize) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, event) in run.events.iter().enumerate() {
        let EventKind::Poll { process, records } = &event.kind else {
            continue;
        };
        if !ASSIGN_CONSUMERS.contains(process) {
            continue;
        }
        for r in 0..records.len() {
            let window = &records[r..(r + run_length).min(records.len())];
            let consecutive = window.len() == run_length
                && window
                    .windows(2)
                    .all(|w| w[0].0 == w[1].0 && w[0].1 + 1 == w[1].1);
            if consecutive {
                out.push((i, r));
            }
        }
    }
    out
}

/// A new assign-mode consumer at the end of the history reading `records` of `partition`.
fn fresh_consumer(run: &mut Run, partition: Partition, records: Vec<(Partition, Offset, Value)>) {
    let last = run.events.last().map_or(0, |e| e.mono_ns);
    let kinds = [
        EventKind::Assign {
            process: FRESH_PROCESS,
            mode: ConsumerMode::Assign,
            partitions: vec![partition],
        },
        EventKind::Seek {
            process: FRESH_PROCESS,
            partition,
            offset: Some(0),
        },
        EventKind::Poll {
            process: FRESH_PROCESS,
            records,
        },
    ];
    for (i, kind) in kinds.into_iter().enumerate() {
        run.events.push(Event {
            mono_ns: last + i as u64 + 1,
            wall_ms: 0,
            kind,
        });
    }
}

fn skip(run: &mut Run, pick: u64) -> bool {
    let candidates = assign_polls(run, 3);
    if let Some(&(event, record)) = candidates.get(pick as usize % candidates.len().max(1)) {
        if let EventKind::Poll { records, .. } = &mut run.events[event].kind {
            records.remove(record + 1);
        }
        return true;
    }
    let Some(p) = (0..run.logs.len()).find(|&p| run.logs[p].len() >= 3) else {
        return false;
    };
    let log = &run.logs[p];
    let records = vec![(p as Partition, 0, log[0]), (p as Partition, 2, log[2])];
    fresh_consumer(run, p as Partition, records);
    true
}

fn non_monotonic_poll(run: &mut Run, pick: u64) -> bool {
    let candidates = assign_polls(run, 1);
    if let Some(&(event, record)) = candidates.get(pick as usize % candidates.len().max(1)) {
        if let EventKind::Poll { records, .. } = &mut run.events[event].kind {
            let copy = records[record];
            records.insert(record + 1, copy);
        }
        return true;
    }
    let Some(p) = nonempty(run, pick) else {
        return false;
    };
    let value = run.logs[p as usize][0];
    fresh_consumer(run, p, vec![(p, 0, value), (p, 0, value)]);
    true
}

fn non_monotonic_send(run: &mut Run, pick: u64) -> bool {
    let acks = acks(run);
    let mut pairs = Vec::new();
    for (a, first) in acks.iter().enumerate() {
        if let Some(second) = acks[a + 1..]
            .iter()
            .find(|s| s.1 == first.1 && s.2 == first.2)
        {
            pairs.push((first.0, second.0));
        }
    }
    let Some(&(first, second)) = pairs.get(pick as usize % pairs.len().max(1)) else {
        return false;
    };
    let offset_of = |event: &Event| match event.kind {
        EventKind::SendOk { offset, .. } => offset,
        _ => unreachable!("an ack event"),
    };
    let (a, b) = (
        offset_of(&run.events[first]),
        offset_of(&run.events[second]),
    );
    for (index, offset) in [(first, b), (second, a)] {
        if let EventKind::SendOk { offset: o, .. } = &mut run.events[index].kind {
            *o = offset;
        }
    }
    true
}

fn no_recovery(run: &mut Run, pick: u64) {
    let partition = (pick % run.logs.len() as u64) as Partition;
    let last = run.events.last().map_or(0, |e| e.mono_ns);
    let ms = 1_000_000;
    let kinds = [
        (
            1,
            EventKind::FaultStart {
                id: "injected".into(),
                fault: "pause-leader".into(),
                target: "node 2".into(),
                partitions: vec![partition],
            },
        ),
        (
            2,
            EventKind::FaultEnd {
                id: "injected".into(),
            },
        ),
        (
            3,
            EventKind::SendInvoke {
                process: 1,
                op: FRESH_VALUE,
                partition,
                value: FRESH_VALUE,
            },
        ),
        (
            8_000,
            EventKind::SendInfo {
                process: 1,
                op: FRESH_VALUE,
                error: "RequestTimedOut".into(),
            },
        ),
    ];
    for (after_ms, kind) in kinds {
        run.events.push(Event {
            mono_ns: last + after_ms * ms,
            wall_ms: 0,
            kind,
        });
    }
}
