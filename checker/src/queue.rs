//! Analyses of what the log held: inconsistent offsets, duplicates, aborted and unknown
//! reads, lost writes.

use std::collections::{HashMap, HashSet};

use crate::anomaly::{Anomaly, FinalRef, Passed};
use crate::history::{Partition, Value};
use crate::model::{Model, PartitionView, SendRecord, SendStatus};

/// One offset, two or more values (from acks, polls and final reads).
pub fn inconsistent_offsets(model: &Model) -> Vec<Anomaly> {
    let mut out = Vec::new();
    for (&partition, view) in &model.partitions {
        for (&offset, values) in &view.offsets {
            if values.len() > 1 {
                out.push(Anomaly::InconsistentOffset {
                    partition,
                    offset,
                    values: values.clone(),
                });
            }
        }
    }
    out
}

/// One value, two or more offsets.
pub fn duplicates(model: &Model) -> Vec<Anomaly> {
    let mut out = Vec::new();
    for (&partition, view) in &model.partitions {
        let mut values: Vec<_> = view.values.iter().filter(|(_, at)| at.len() > 1).collect();
        values.sort_by_key(|(value, _)| **value);
        for (&value, at) in values {
            let mut at = at.clone();
            at.sort_by_key(|s| s.offset);
            out.push(Anomaly::Duplicate {
                partition,
                value,
                at,
            });
        }
    }
    out
}

/// Values read whose send definitely failed (aborted reads), and values read that were
/// never sent to that partition (unknown values). One anomaly per value, with its first reader.
pub fn bad_reads(model: &Model) -> Vec<Anomaly> {
    let mut out = Vec::new();
    for (&partition, view) in &model.partitions {
        let mut values: Vec<Value> = view.read_values.iter().copied().collect();
        values.sort_unstable();
        for value in values {
            let Some(read) = view.values[&value]
                .iter()
                .find(|s| !matches!(s.source, crate::anomaly::Source::Ack { .. }))
                .copied()
            else {
                continue;
            };
            let send = model.by_value.get(&value).map(|&i| &model.sends[i]);
            match send {
                Some(send) if send.partition == partition => {
                    if let SendStatus::Fail(error) = &send.status {
                        out.push(Anomaly::AbortedRead {
                            partition,
                            read,
                            writer: send.process,
                            error: error.clone(),
                        });
                    }
                }
                _ => out.push(Anomaly::UnknownValue {
                    partition,
                    read,
                    sent_to: send.map(|s| s.partition),
                }),
            }
        }
    }
    out
}

/// Whether a send must have been committed: acknowledged, or indefinite and read by someone.
pub fn must_have_committed(send: &SendRecord, view: &PartitionView) -> bool {
    match send.status {
        SendStatus::Ok(_) => true,
        SendStatus::Info(_) | SendStatus::Pending => view.read_values.contains(&send.value),
        SendStatus::Fail(_) => false,
    }
}

/// Writes that must have been committed but are missing from a complete final read, or were
/// never read although an assign-mode consumer read across their acknowledged offset.
/// `passed` holds those consumers' stretches of reads per partition.
pub fn lost_writes(model: &Model, passed: &HashMap<Partition, Vec<Passed>>) -> Vec<Anomaly> {
    let final_sets: HashMap<Partition, Vec<(FinalRef, HashSet<Value>)>> = model
        .partitions
        .iter()
        .map(|(&partition, view)| {
            let sets = view
                .complete_finals()
                .map(|(read, log_start, hw)| {
                    let reference = FinalRef {
                        process: read.process,
                        log_start,
                        hw,
                    };
                    (reference, read.records.iter().map(|&(_, v)| v).collect())
                })
                .collect();
            (partition, sets)
        })
        .collect();
    let mut out = Vec::new();
    for send in &model.sends {
        let view = &model.partitions[&send.partition];
        if !must_have_committed(send, view) {
            continue;
        }
        let missing_from_final = final_sets[&send.partition]
            .iter()
            .find(|(_, values)| !values.contains(&send.value))
            .map(|(reference, _)| *reference);
        let offset = match send.status {
            SendStatus::Ok(offset) => Some(offset),
            _ => None,
        };
        let passed_by = match offset {
            Some(offset) if !view.read_values.contains(&send.value) => {
                passed.get(&send.partition).and_then(|stretches| {
                    stretches
                        .iter()
                        .find(|p| p.from <= offset && offset <= p.to)
                        .copied()
                })
            }
            _ => None,
        };
        if missing_from_final.is_some() || passed_by.is_some() {
            out.push(Anomaly::Lost {
                partition: send.partition,
                value: send.value,
                offset,
                writer: send.process,
                acked: send
                    .complete
                    .filter(|_| offset.is_some())
                    .map(|(ns, wall)| model.when(ns, wall)),
                missing_from_final,
                passed_by,
            });
        }
    }
    out
}
