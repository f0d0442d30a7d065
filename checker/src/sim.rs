//! A simulated correct log and the histories its clients record, for property tests: every
//! history it generates is valid and anomaly-free (a correct broker), and injecting one
//! anomaly of a chosen kind must always be reported.

use std::collections::BTreeMap;

use proptest::prelude::*;

use crate::history::{
    ConsumerMode, Event, EventKind, History, Offset, Partition, ProcessId, Value,
};
use crate::metadata::{MetadataEntry, MetadataLog};
use crate::replica::{BatchEntry, ReplicaLog};
use crate::{check, CheckOptions, Report};

/// xorshift64*: deterministic from the seed proptest picks.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

struct SimConsumer {
    process: ProcessId,
    mode: ConsumerMode,
    positions: BTreeMap<Partition, Offset>,
}

/// A run: the history, the replicas and the metadata logs.
pub struct Run {
    pub events: Vec<Event>,
    pub replicas: Vec<ReplicaLog>,
    pub metadata: Vec<MetadataLog>,
    pub logs: Vec<Vec<Value>>,
}

struct Sim {
    rng: Rng,
    now_ms: u64,
    next_id: u64,
    events: Vec<Event>,
    logs: Vec<Vec<Value>>,
    consumers: Vec<SimConsumer>,
    open_fault: Option<(String, Vec<Partition>)>,
}

const PRODUCERS: u64 = 3;
const FINAL_READER: ProcessId = 1_000;

impl Sim {
    fn event(&mut self, kind: EventKind) {
        self.now_ms += 1 + self.rng.below(20);
        self.events.push(Event {
            mono_ns: self.now_ms * 1_000_000,
            wall_ms: 1_700_000_000_000 + self.now_ms,
            kind,
        });
    }

    fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// One send; `force_ok` for the acknowledgement after a heal.
    fn send(&mut self, partition: Partition, force_ok: bool) {
        let process = 1 + self.rng.below(PRODUCERS);
        let (op, value) = (self.id(), self.id());
        self.event(EventKind::SendInvoke {
            process,
            op,
            partition,
            value,
        });
        let roll = if force_ok { 0 } else { self.rng.below(100) };
        let log = &mut self.logs[partition as usize];
        let offset = log.len() as Offset;
        let landed = roll < 85 && roll != 72;
        if landed {
            log.push(value);
        }
        let kind = match roll {
            0..70 => EventKind::SendOk {
                process,
                op,
                offset,
            },
            70..75 => return, // never completed (72 did not land, the others did)
            75..85 => EventKind::SendInfo {
                process,
                op,
                error: "landed".into(),
            },
            85..93 => EventKind::SendInfo {
                process,
                op,
                error: "lost in transit".into(),
            },
            _ => EventKind::SendFail {
                process,
                op,
                error: "NotEnoughReplicas".into(),
            },
        };
        self.event(kind);
    }

    fn poll(&mut self, index: usize) {
        let mut records = Vec::new();
        let consumer = &mut self.consumers[index];
        for (&partition, position) in consumer.positions.iter_mut() {
            let log = &self.logs[partition as usize];
            let count = self.rng.below(5) as usize;
            while (*position as usize) < log.len() && records.len() < count {
                records.push((partition, *position, log[*position as usize]));
                *position += 1;
            }
        }
        let process = consumer.process;
        if !records.is_empty() {
            self.event(EventKind::Poll { process, records });
        }
    }

    fn reassign(&mut self, index: usize, partitions: usize) {
        let chosen: Vec<Partition> = (0..partitions as Partition)
            .filter(|_| self.rng.chance(60))
            .collect();
        let group = self.consumers[index].mode == ConsumerMode::Group;
        let mut positions = BTreeMap::new();
        for &p in &chosen {
            let len = self.logs[p as usize].len() as u64;
            // Group members resume anywhere (committed offsets); assign keeps positions.
            let kept = self.consumers[index].positions.get(&p).copied();
            let position = match (group, kept) {
                (false, Some(kept)) => kept,
                _ => self.rng.below(len + 1) as Offset,
            };
            positions.insert(p, position);
        }
        let consumer = &mut self.consumers[index];
        consumer.positions = positions;
        let (process, mode) = (consumer.process, consumer.mode);
        self.event(EventKind::Assign {
            process,
            mode,
            partitions: chosen,
        });
        if !group {
            // New partitions of an assign-mode consumer: an explicit seek (resolved position).
            let positions: Vec<_> = self.consumers[index]
                .positions
                .clone()
                .into_iter()
                .collect();
            for (partition, offset) in positions {
                if self.rng.chance(50) {
                    self.event(EventKind::Seek {
                        process,
                        partition,
                        offset: Some(offset),
                    });
                }
            }
        }
    }

    fn seek(&mut self, index: usize) {
        let consumer = &self.consumers[index];
        let Some((&partition, _)) = consumer.positions.iter().next() else {
            return;
        };
        let len = self.logs[partition as usize].len() as u64;
        let offset = self.rng.below(len + 1) as Offset;
        let process = consumer.process;
        self.consumers[index].positions.insert(partition, offset);
        self.event(EventKind::Seek {
            process,
            partition,
            offset: Some(offset),
        });
    }

    fn fault(&mut self, partitions: usize) {
        match self.open_fault.take() {
            None => {
                let id = format!("f{}", self.id());
                let affected: Vec<Partition> = if self.rng.chance(30) {
                    Vec::new()
                } else {
                    vec![self.rng.below(partitions as u64) as Partition]
                };
                self.event(EventKind::FaultStart {
                    id: id.clone(),
                    fault: "kill-leader".into(),
                    target: "node 1".into(),
                    partitions: affected.clone(),
                });
                self.open_fault = Some((id, affected));
            }
            Some((id, affected)) => {
                self.event(EventKind::FaultEnd { id });
                let all: Vec<Partition> = (0..partitions as Partition).collect();
                for p in if affected.is_empty() { all } else { affected } {
                    self.send(p, true);
                }
            }
        }
    }

    fn final_reads(&mut self) {
        for partition in 0..self.logs.len() {
            let records: Vec<(Offset, Value)> = self.logs[partition]
                .iter()
                .enumerate()
                .map(|(o, v)| (o as Offset, *v))
                .collect();
            for chunk in records.chunks(5) {
                self.event(EventKind::FinalRead {
                    process: FINAL_READER,
                    partition: partition as Partition,
                    records: chunk.to_vec(),
                });
            }
            self.event(EventKind::FinalEnd {
                process: FINAL_READER,
                partition: partition as Partition,
                log_start: 0,
                hw: records.len() as Offset,
            });
        }
    }
}

fn replicas(logs: &[Vec<Value>], rng: &mut Rng) -> Vec<ReplicaLog> {
    let mut out = Vec::new();
    for (partition, log) in logs.iter().enumerate() {
        let mut batches = Vec::new();
        let mut base = 0;
        while base < log.len() {
            let last = (base + rng.below(3) as usize).min(log.len() - 1);
            let crc = log[base..=last]
                .iter()
                .fold(17u32, |h, v| h.wrapping_mul(31) ^ *v as u32);
            batches.push(BatchEntry {
                base_offset: base as Offset,
                last_offset: last as Offset,
                crc,
                leader_epoch: 1 + (base / 10) as i32,
            });
            base = last + 1;
        }
        for node in 1..=3u64 {
            let mut batches = batches.clone();
            if node == 3 {
                // An uncommitted tail above the high watermark is allowed to differ.
                let next = log.len() as Offset;
                batches.push(BatchEntry {
                    base_offset: next,
                    last_offset: next,
                    crc: 1,
                    leader_epoch: 99,
                });
            }
            out.push(ReplicaLog {
                node,
                topic: "t".into(),
                partition: partition as Partition,
                batches,
                problem: None,
                hw: None,
            });
        }
    }
    out
}

fn metadata(rng: &mut Rng) -> Vec<MetadataLog> {
    let length = 1 + rng.below(30);
    let entries: Vec<MetadataEntry> = (1..=length)
        .map(|index| MetadataEntry {
            index,
            term: 1 + index / 7,
            checksum: index.wrapping_mul(0x9e37_79b9),
        })
        .collect();
    (1..=3u64)
        .map(|node| {
            let mut entries = entries.clone();
            let commit_index = if node == 1 {
                length
            } else {
                length.saturating_sub(2)
            };
            if node == 3 && length > 2 {
                // An uncommitted entry of an old term, above the lowest commit index.
                entries.truncate(length as usize - 1);
                if let Some(last) = entries.last_mut() {
                    last.checksum ^= 1;
                }
            }
            MetadataLog {
                node,
                commit_index,
                entries,
            }
        })
        .collect()
}

/// A run of a correct broker: `steps` client operations over `partitions` partitions.
pub fn run(seed: u64, steps: usize, partitions: usize) -> Run {
    let mut sim = Sim {
        rng: Rng(seed | 1),
        now_ms: 0,
        next_id: 10_000,
        events: vec![],
        logs: vec![Vec::new(); partitions],
        consumers: vec![],
        open_fault: None,
    };
    sim.event(EventKind::Header { topic: "t".into() });
    for (i, mode) in [
        ConsumerMode::Assign,
        ConsumerMode::Assign,
        ConsumerMode::Group,
    ]
    .into_iter()
    .enumerate()
    {
        sim.consumers.push(SimConsumer {
            process: 100 + i as u64,
            mode,
            positions: BTreeMap::new(),
        });
        sim.reassign(i, partitions);
    }
    for _ in 0..steps {
        let consumer = sim.rng.below(3) as usize;
        match sim.rng.below(100) {
            0..50 => {
                let p = sim.rng.below(partitions as u64) as Partition;
                sim.send(p, false);
            }
            50..85 => sim.poll(consumer),
            85..90 => sim.seek(consumer),
            90..95 => sim.reassign(consumer, partitions),
            _ => sim.fault(partitions),
        }
    }
    sim.final_reads();
    let mut rng = Rng(seed.rotate_left(17) | 1);
    Run {
        replicas: replicas(&sim.logs, &mut rng),
        metadata: metadata(&mut rng),
        events: sim.events,
        logs: sim.logs,
    }
}

impl Run {
    pub fn check(&self) -> Report {
        let history = History {
            events: self.events.clone(),
        };
        check(
            &history,
            &self.replicas,
            &self.metadata,
            &CheckOptions::default(),
        )
        .expect("valid history")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inject::{inject, Injection};

    #[test]
    fn every_injection_finds_a_place_in_typical_runs_so_the_property_is_not_vacuous() {
        for injection in Injection::ALL {
            let injected = (1..=20u64)
                .filter(|&seed| inject(&mut run(seed, 300, 2), injection, seed * 7919))
                .count();
            assert!(
                injected >= 18,
                "{injection:?} injected in {injected} of 20 runs"
            );
        }
    }

    #[test]
    fn simulated_runs_exercise_every_kind_of_event() {
        let run = run(42, 400, 3);
        let count = |f: fn(&EventKind) -> bool| run.events.iter().filter(|e| f(&e.kind)).count();
        assert!(count(|k| matches!(k, EventKind::SendOk { .. })) > 50);
        assert!(count(|k| matches!(k, EventKind::SendInfo { .. })) > 5);
        assert!(count(|k| matches!(k, EventKind::SendFail { .. })) > 2);
        assert!(count(|k| matches!(k, EventKind::Seek { .. })) > 2);
        assert!(count(|k| matches!(k, EventKind::Poll { .. })) > 50);
        assert!(count(|k| matches!(k, EventKind::FaultEnd { .. })) > 2);
        let report = run.check();
        assert!(report.summary.failover_ms_max > 0);
        assert!(!report.faults.is_empty());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn histories_of_a_correct_log_have_no_anomalies(seed in any::<u64>(), steps in 0usize..400, partitions in 1usize..5) {
            let run = run(seed, steps, partitions);
            let report = run.check();
            prop_assert!(report.anomalies.is_empty(), "{:#?}", report.anomalies);
        }

        #[test]
        fn one_injected_anomaly_is_always_reported(
            seed in any::<u64>(),
            steps in 50usize..400,
            partitions in 1usize..4,
            injection in (0..Injection::ALL.len()).prop_map(|i| Injection::ALL[i]),
            pick in any::<u64>(),
        ) {
            let mut run = run(seed, steps, partitions);
            let injected = inject(&mut run, injection, pick);
            prop_assume!(injected);
            let report = run.check();
            let expected = injection.expected();
            for anomaly in &report.anomalies {
                prop_assert!(anomaly.to_string().starts_with(anomaly.name()), "{anomaly}");
                prop_assert!(serde_json::to_string(anomaly).is_ok());
            }
            prop_assert!(
                report.anomalies.iter().any(|a| a.name() == expected),
                "{injection:?} expected {expected}, got {:#?}",
                report.anomalies
            );
        }
    }
}
