//! Time-based analyses from the fault events: failover time (fault start to the next
//! acknowledged write invoked after it) and liveness (after a heal, acknowledged writes resume
//! within a window).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::anomaly::{Anomaly, When};
use crate::history::{EventKind, History, Partition};
use crate::model::{Model, SendStatus};

const NS_PER_MS: u64 = 1_000_000;

/// One injected fault and what followed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultReport {
    /// Its id.
    pub id: String,
    /// Its name.
    pub fault: String,
    /// What it hit.
    pub target: String,
    /// When it started.
    pub start: When,
    /// When it was healed, if it was.
    pub end: Option<When>,
    /// Per affected partition, milliseconds from the start to the first acknowledgement of a
    /// send invoked after the start (`None`: none came before the history ended).
    pub failover_ms: Vec<(Partition, Option<u64>)>,
}

#[derive(Debug, Clone)]
struct Fault {
    id: String,
    fault: String,
    target: String,
    partitions: Vec<Partition>,
    start_ns: u64,
    start_wall_ms: u64,
    end: Option<(u64, u64)>,
}

/// What the timing pass found.
#[derive(Debug, Default)]
pub struct Timing {
    /// [`Anomaly::NoRecovery`].
    pub anomalies: Vec<Anomaly>,
    /// One per fault.
    pub faults: Vec<FaultReport>,
    /// Longest failover, ms.
    pub failover_ms_max: u64,
    /// What could not be judged.
    pub notes: Vec<String>,
}

fn faults(history: &History, notes: &mut Vec<String>) -> Vec<Fault> {
    let mut faults: Vec<Fault> = Vec::new();
    for event in &history.events {
        match &event.kind {
            EventKind::FaultStart {
                id,
                fault,
                target,
                partitions,
            } => faults.push(Fault {
                id: id.clone(),
                fault: fault.clone(),
                target: target.clone(),
                partitions: partitions.clone(),
                start_ns: event.mono_ns,
                start_wall_ms: event.wall_ms,
                end: None,
            }),
            EventKind::FaultEnd { id } => {
                let open = faults
                    .iter_mut()
                    .rev()
                    .find(|f| &f.id == id && f.end.is_none());
                match open {
                    Some(fault) => fault.end = Some((event.mono_ns, event.wall_ms)),
                    None => notes.push(format!("fault_end {id} without an open fault_start")),
                }
            }
            _ => {}
        }
    }
    faults
}

/// Per partition, the acknowledged sends as `(invoke_ns, complete_ns)`.
fn acks(model: &Model) -> BTreeMap<Partition, Vec<(u64, u64)>> {
    let mut acks: BTreeMap<Partition, Vec<(u64, u64)>> = BTreeMap::new();
    for send in &model.sends {
        if let (SendStatus::Ok(_), Some((complete_ns, _))) = (&send.status, send.complete) {
            acks.entry(send.partition)
                .or_default()
                .push((send.invoke_ns, complete_ns));
        }
    }
    acks
}

/// Failover times and liveness after every heal.
pub fn timing(history: &History, model: &Model, liveness_window_ms: u64) -> Timing {
    let mut out = Timing::default();
    let faults = faults(history, &mut out.notes);
    let acks = acks(model);
    let sent: Vec<Partition> = model.partitions.keys().copied().collect();
    for fault in &faults {
        let affected = if fault.partitions.is_empty() {
            &sent
        } else {
            &fault.partitions
        };
        let mut failover_ms = Vec::new();
        for &partition in affected {
            let first = acks.get(&partition).and_then(|acks| {
                acks.iter()
                    .filter(|(invoke, _)| *invoke >= fault.start_ns)
                    .map(|(_, complete)| *complete)
                    .min()
            });
            let ms = first.map(|ns| ns.saturating_sub(fault.start_ns) / NS_PER_MS);
            let bound = ms.unwrap_or_else(|| {
                out.notes.push(format!(
                    "fault {}: no acknowledged write to partition {partition} after it started; failover counted to the history's end",
                    fault.id
                ));
                model.end_ns.saturating_sub(fault.start_ns) / NS_PER_MS
            });
            out.failover_ms_max = out.failover_ms_max.max(bound);
            failover_ms.push((partition, ms));
        }
        out.faults.push(FaultReport {
            id: fault.id.clone(),
            fault: fault.fault.clone(),
            target: fault.target.clone(),
            start: model.when(fault.start_ns, fault.start_wall_ms),
            end: fault.end.map(|(ns, wall)| model.when(ns, wall)),
            failover_ms,
        });
        liveness(
            model,
            &faults,
            fault,
            affected,
            &acks,
            liveness_window_ms,
            &mut out,
        );
    }
    out
}

fn liveness(
    model: &Model,
    faults: &[Fault],
    fault: &Fault,
    affected: &[Partition],
    acks: &BTreeMap<Partition, Vec<(u64, u64)>>,
    window_ms: u64,
    out: &mut Timing,
) {
    let Some((healed_ns, healed_wall_ms)) = fault.end else {
        out.notes.push(format!(
            "fault {} never healed: liveness not judged",
            fault.id
        ));
        return;
    };
    let window_end_ns = healed_ns.saturating_add(window_ms * NS_PER_MS);
    if faults
        .iter()
        .any(|f| f.start_ns > healed_ns && f.start_ns <= window_end_ns)
    {
        out.notes.push(format!(
            "fault {}: another fault started within {window_ms} ms of its heal: liveness not judged",
            fault.id
        ));
        return;
    }
    for &partition in affected {
        let tried = model
            .sends
            .iter()
            .any(|s| s.partition == partition && s.invoke_ns >= healed_ns);
        let first_ns = acks.get(&partition).and_then(|acks| {
            acks.iter()
                .map(|(_, complete)| *complete)
                .filter(|complete| *complete >= healed_ns)
                .min()
        });
        if first_ns.is_some_and(|ns| ns <= window_end_ns) {
            continue;
        }
        if !tried || (first_ns.is_none() && model.end_ns < window_end_ns) {
            out.notes.push(format!(
                "fault {}: partition {partition} not written long enough after the heal: liveness not judged",
                fault.id
            ));
            continue;
        }
        out.anomalies.push(Anomaly::NoRecovery {
            fault_id: fault.id.clone(),
            fault: fault.fault.clone(),
            partition,
            healed: model.when(healed_ns, healed_wall_ms),
            first_ack_ms: first_ns.map(|ns| ns.saturating_sub(healed_ns) / NS_PER_MS),
            window_ms,
        });
    }
}
