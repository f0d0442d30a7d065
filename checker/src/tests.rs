//! The checker on constructed histories: each anomaly, and the clean hard cases that must
//! pass (indefinite sends that landed, seeks back, group rebalances).

use crate::anomaly::Anomaly;
use crate::history::{
    ConsumerMode, Event, EventKind, History, Offset, Partition, ProcessId, Value,
};
use crate::{check, check_history, CheckOptions, MetadataLog, ReplicaLog, Report};

/// Builds histories with explicit times (milliseconds).
#[derive(Default)]
pub struct Builder {
    events: Vec<Event>,
    now_ms: u64,
    next_op: u64,
}

impl Builder {
    pub fn at(&mut self, ms: u64) -> &mut Self {
        self.now_ms = ms;
        self
    }

    pub fn event(&mut self, kind: EventKind) -> &mut Self {
        self.events.push(Event {
            mono_ns: self.now_ms * 1_000_000,
            wall_ms: 1_700_000_000_000 + self.now_ms,
            kind,
        });
        self
    }

    pub fn invoke(&mut self, process: ProcessId, partition: Partition, value: Value) -> u64 {
        self.next_op += 1;
        let op = self.next_op;
        self.event(EventKind::SendInvoke {
            process,
            op,
            partition,
            value,
        });
        op
    }

    pub fn ok(&mut self, process: ProcessId, op: u64, offset: Offset) -> &mut Self {
        self.event(EventKind::SendOk {
            process,
            op,
            offset,
        })
    }

    pub fn info(&mut self, process: ProcessId, op: u64) -> &mut Self {
        self.event(EventKind::SendInfo {
            process,
            op,
            error: "RequestTimedOut".into(),
        })
    }

    pub fn fail(&mut self, process: ProcessId, op: u64) -> &mut Self {
        self.event(EventKind::SendFail {
            process,
            op,
            error: "NotEnoughReplicas".into(),
        })
    }

    /// Invoke and acknowledge.
    pub fn acked(
        &mut self,
        process: ProcessId,
        partition: Partition,
        value: Value,
        offset: Offset,
    ) -> &mut Self {
        let op = self.invoke(process, partition, value);
        self.ok(process, op, offset)
    }

    pub fn assign(
        &mut self,
        process: ProcessId,
        mode: ConsumerMode,
        partitions: &[Partition],
    ) -> &mut Self {
        self.event(EventKind::Assign {
            process,
            mode,
            partitions: partitions.to_vec(),
        })
    }

    pub fn seek(&mut self, process: ProcessId, partition: Partition, offset: Offset) -> &mut Self {
        self.event(EventKind::Seek {
            process,
            partition,
            offset: Some(offset),
        })
    }

    pub fn poll(
        &mut self,
        process: ProcessId,
        records: &[(Partition, Offset, Value)],
    ) -> &mut Self {
        self.event(EventKind::Poll {
            process,
            records: records.to_vec(),
        })
    }

    pub fn final_read(
        &mut self,
        process: ProcessId,
        partition: Partition,
        records: &[(Offset, Value)],
        hw: Offset,
    ) -> &mut Self {
        self.event(EventKind::FinalRead {
            process,
            partition,
            records: records.to_vec(),
        });
        self.event(EventKind::FinalEnd {
            process,
            partition,
            log_start: 0,
            hw,
        })
    }

    pub fn fault(
        &mut self,
        id: &str,
        start_ms: u64,
        end_ms: Option<u64>,
        partitions: &[Partition],
    ) -> &mut Self {
        let now = self.now_ms;
        self.at(start_ms).event(EventKind::FaultStart {
            id: id.into(),
            fault: "kill-leader".into(),
            target: "node 1".into(),
            partitions: partitions.to_vec(),
        });
        if let Some(end_ms) = end_ms {
            self.at(end_ms).event(EventKind::FaultEnd { id: id.into() });
        }
        self.at(now)
    }

    /// The events in time order (stable: equal times keep the order they were added in).
    pub fn history(&self) -> History {
        let mut events = self.events.clone();
        events.sort_by_key(|e| e.mono_ns);
        History { events }
    }

    pub fn check(&self) -> Report {
        check_history(&self.history(), &CheckOptions::default()).expect("valid history")
    }
}

fn names(report: &Report) -> Vec<&'static str> {
    report.anomalies.iter().map(|a| a.name()).collect()
}

const P: ProcessId = 1;
const Q: ProcessId = 2;
const C: ProcessId = 10;
const F: ProcessId = 99;

/// Two producers, an assign-mode consumer and a final read of partition 0: `a b c d` at 0..4.
fn clean() -> Builder {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0)
        .acked(Q, 0, 200, 1)
        .acked(P, 0, 101, 2)
        .acked(Q, 0, 201, 3);
    b.assign(C, ConsumerMode::Assign, &[0]).seek(C, 0, 0);
    b.poll(C, &[(0, 0, 100), (0, 1, 200)])
        .poll(C, &[(0, 2, 101), (0, 3, 201)]);
    b.final_read(F, 0, &[(0, 100), (1, 200), (2, 101), (3, 201)], 4);
    b
}

#[test]
fn a_clean_history_has_no_anomalies() {
    let report = clean().check();
    assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
    assert_eq!(
        report.summary.to_string(),
        "anomalies=0 acked=4 lost=0 duplicates=0 inconsistent=0 skips=0 divergent_replicas=0 failover_ms_max=0"
    );
}

#[test]
fn indefinite_sends_that_landed_or_not_are_clean() {
    let mut b = Builder::default();
    let landed = b.invoke(P, 0, 100);
    b.info(P, landed);
    let dropped = b.invoke(P, 0, 101);
    b.info(P, dropped);
    b.invoke(P, 0, 102); // never completed: the writer died; it landed
    b.acked(P, 0, 103, 2);
    b.assign(C, ConsumerMode::Assign, &[0]).seek(C, 0, 0);
    b.poll(C, &[(0, 0, 100), (0, 1, 102), (0, 2, 103)]);
    b.final_read(F, 0, &[(0, 100), (1, 102), (2, 103)], 3);
    let report = b.check();
    assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
    assert_eq!(report.summary.acked, 1);
}

#[test]
fn a_send_that_landed_twice_after_a_retry_is_one_duplicate_and_nothing_else() {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0).acked(P, 0, 101, 2); // 101 first landed at 1, the retry at 2
    b.acked(P, 0, 102, 3);
    b.assign(C, ConsumerMode::Assign, &[0]).seek(C, 0, 0);
    b.poll(C, &[(0, 0, 100), (0, 1, 101), (0, 2, 101), (0, 3, 102)]);
    b.final_read(F, 0, &[(0, 100), (1, 101), (2, 101), (3, 102)], 4);
    let report = b.check();
    assert_eq!(names(&report), vec!["duplicate"], "{:?}", report.anomalies);
    match &report.anomalies[0] {
        Anomaly::Duplicate { value, at, .. } => {
            assert_eq!(*value, 101);
            assert_eq!(at.iter().map(|s| s.offset).collect::<Vec<_>>(), vec![1, 2]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn seeks_back_and_forward_and_group_rebalances_are_not_skips() {
    let mut b = clean();
    b.seek(C, 0, 1).poll(C, &[(0, 1, 200)]); // back
    b.seek(C, 0, 3).poll(C, &[(0, 3, 201)]); // forward
                                             // Re-assigning a kept partition keeps its position.
    b.assign(C, ConsumerMode::Assign, &[0, 1]).poll(C, &[]);
    let g = 11;
    b.assign(g, ConsumerMode::Group, &[0])
        .poll(g, &[(0, 2, 101)])
        .poll(g, &[(0, 0, 100)]);
    let report = b.check();
    assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
}

#[test]
fn an_ack_at_one_offset_and_a_read_at_another_is_a_duplicate() {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0)
        .acked(P, 0, 101, 2)
        .acked(Q, 0, 102, 2);
    // 101 landed at 1 (first attempt) and its ack names 2, where 102 is.
    b.final_read(F, 0, &[(0, 100), (1, 101), (2, 102)], 3);
    let report = b.check();
    assert!(
        names(&report).contains(&"duplicate"),
        "{:?}",
        report.anomalies
    );
    assert_eq!(report.summary.inconsistent, 1);
}

#[test]
fn partitions_kept_across_an_assign_keep_their_expected_position() {
    let mut b = clean();
    let c2 = 12;
    b.assign(c2, ConsumerMode::Assign, &[0]).seek(c2, 0, 0);
    b.poll(c2, &[(0, 0, 100), (0, 1, 200)]);
    b.assign(c2, ConsumerMode::Assign, &[0, 1])
        .poll(c2, &[(0, 3, 201)]);
    let report = b.check();
    assert_eq!(names(&report), vec!["skip"], "{:?}", report.anomalies);
}

#[test]
fn an_acknowledged_write_missing_from_the_final_read_is_lost() {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0).acked(P, 0, 101, 1);
    b.final_read(F, 0, &[(0, 100)], 1);
    let report = b.check();
    assert_eq!(names(&report), vec!["lost"], "{:?}", report.anomalies);
    assert!(matches!(
        report.anomalies[0],
        Anomaly::Lost {
            value: 101,
            offset: Some(1),
            missing_from_final: Some(_),
            ..
        }
    ));
    assert_eq!(report.summary.lost, 1);
}

#[test]
fn a_truncated_and_rewritten_log_shows_lost_writes_and_inconsistent_offsets() {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0).acked(P, 0, 101, 1);
    // A new leader without them takes writes at the same offsets.
    b.acked(Q, 0, 200, 0);
    b.final_read(F, 0, &[(0, 200)], 1);
    let report = b.check();
    assert_eq!(report.summary.lost, 2, "{:?}", report.anomalies);
    assert_eq!(report.summary.inconsistent, 1);
}

#[test]
fn during_the_run_a_write_a_consumer_read_across_but_never_saw_is_lost() {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0)
        .acked(P, 0, 101, 1)
        .acked(P, 0, 102, 2);
    b.assign(C, ConsumerMode::Assign, &[0]).seek(C, 0, 0);
    b.poll(C, &[(0, 0, 100), (0, 2, 102)]);
    let report = b.check();
    let lost = report.anomalies.iter().find(|a| a.name() == "lost");
    assert!(
        matches!(
            lost,
            Some(Anomaly::Lost {
                value: 101,
                missing_from_final: None,
                passed_by: Some(_),
                ..
            })
        ),
        "{:?}",
        report.anomalies
    );
    assert!(names(&report).contains(&"skip"));
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("no complete final read")));
}

#[test]
fn an_indefinite_write_that_was_read_and_then_vanished_is_lost() {
    let mut b = Builder::default();
    let op = b.invoke(P, 0, 100);
    b.info(P, op);
    b.acked(P, 0, 101, 1);
    b.assign(C, ConsumerMode::Assign, &[0]).seek(C, 0, 0);
    b.poll(C, &[(0, 0, 100), (0, 1, 101)]);
    b.final_read(F, 0, &[(0, 101)], 1);
    let report = b.check();
    assert!(
        report.anomalies.iter().any(|a| matches!(
            a,
            Anomaly::Lost {
                value: 100,
                offset: None,
                ..
            }
        )),
        "{:?}",
        report.anomalies
    );
}

#[test]
fn two_values_at_one_offset_are_inconsistent() {
    let mut b = clean();
    b.acked(Q, 0, 300, 2);
    let report = b.check();
    assert!(
        names(&report).contains(&"inconsistent_offset"),
        "{:?}",
        report.anomalies
    );
    assert_eq!(report.summary.inconsistent, 1);
}

#[test]
fn a_read_of_a_definitely_failed_write_is_an_aborted_read() {
    let mut b = clean();
    let op = b.invoke(P, 0, 300);
    b.fail(P, op);
    b.poll(C, &[(0, 4, 300)]);
    let report = b.check();
    assert_eq!(
        names(&report),
        vec!["aborted_read"],
        "{:?}",
        report.anomalies
    );
}

#[test]
fn a_value_nobody_sent_to_the_partition_is_unknown() {
    let mut b = clean();
    b.acked(P, 1, 400, 0);
    b.poll(C, &[(0, 4, 400), (0, 5, 999)]);
    let report = b.check();
    let unknown: Vec<_> = report
        .anomalies
        .iter()
        .filter_map(|a| match a {
            Anomaly::UnknownValue { read, sent_to, .. } => Some((read.value, *sent_to)),
            _ => None,
        })
        .collect();
    assert_eq!(
        unknown,
        vec![(400, Some(1)), (999, None)],
        "{:?}",
        report.anomalies
    );
}

#[test]
fn an_assigned_consumer_that_skips_known_records_is_reported_but_a_group_member_is_not() {
    let mut b = clean();
    let c2 = 12;
    b.assign(c2, ConsumerMode::Assign, &[0]).seek(c2, 0, 0);
    b.poll(c2, &[(0, 0, 100)]).poll(c2, &[(0, 3, 201)]);
    let g = 13;
    b.assign(g, ConsumerMode::Group, &[0])
        .poll(g, &[(0, 0, 100), (0, 3, 201)]);
    let report = b.check();
    assert_eq!(names(&report), vec!["skip"], "{:?}", report.anomalies);
    match &report.anomalies[0] {
        Anomaly::Skip {
            process,
            expected,
            next,
            skipped,
            ..
        } => assert_eq!(
            (*process, *expected, *next, skipped.clone()),
            (c2, 1, 3, vec![(1, 200), (2, 101)])
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_first_poll_after_a_seek_must_start_at_the_seek_position() {
    let mut b = clean();
    b.seek(C, 0, 1).poll(C, &[(0, 2, 101)]);
    b.seek(C, 0, 2).poll(C, &[(0, 1, 200)]);
    let report = b.check();
    assert_eq!(
        names(&report),
        vec!["skip", "non_monotonic_poll"],
        "{:?}",
        report.anomalies
    );
}

#[test]
fn an_assigned_consumer_that_goes_back_without_a_seek_is_non_monotonic() {
    let mut b = clean();
    b.poll(C, &[(0, 2, 101)]);
    let report = b.check();
    assert_eq!(
        names(&report),
        vec!["non_monotonic_poll"],
        "{:?}",
        report.anomalies
    );
    assert_eq!(report.summary.skips, 1);
}

#[test]
fn a_final_read_with_a_hole_or_ending_early_is_a_gap() {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0)
        .acked(P, 0, 101, 1)
        .acked(P, 0, 102, 2);
    b.final_read(F, 0, &[(0, 100), (2, 102)], 3);
    b.final_read(F + 1, 0, &[(0, 100), (1, 101)], 3);
    let report = b.check();
    let gaps: Vec<_> = report
        .anomalies
        .iter()
        .filter_map(|a| match a {
            Anomaly::FinalReadGap {
                expected, found, ..
            } => Some((*expected, *found)),
            _ => None,
        })
        .collect();
    assert_eq!(
        gaps,
        vec![(1, Some(2)), (2, None)],
        "{:?}",
        report.anomalies
    );
}

#[test]
fn a_producer_whose_acknowledged_offsets_go_back_is_non_monotonic() {
    let mut b = Builder::default();
    b.acked(P, 0, 100, 1)
        .acked(P, 0, 101, 0)
        .acked(Q, 0, 200, 2);
    b.acked(P, 1, 102, 0); // another partition: its own order
    b.final_read(F, 0, &[(0, 101), (1, 100), (2, 200)], 3);
    let report = b.check();
    assert_eq!(
        names(&report),
        vec!["non_monotonic_send"],
        "{:?}",
        report.anomalies
    );
}

#[test]
fn writes_must_resume_within_the_window_after_a_heal() {
    let mut b = Builder::default();
    b.fault("f1", 1_000, Some(3_000), &[0]);
    // Invoked before the fault: ignored for failover.
    let early = b.at(900).invoke(P, 0, 100);
    b.at(1_050).ok(P, early, 0);
    let op = b.at(1_100).invoke(Q, 0, 101);
    b.at(1_400).ok(Q, op, 1);
    let op = b.at(3_100).invoke(P, 0, 102);
    b.at(9_000).ok(P, op, 2);
    b.at(9_500)
        .final_read(F, 0, &[(0, 100), (1, 101), (2, 102)], 3);
    let report = b.check();
    assert_eq!(
        names(&report),
        vec!["no_recovery"],
        "{:?}",
        report.anomalies
    );
    assert!(matches!(
        report.anomalies[0],
        Anomaly::NoRecovery {
            first_ack_ms: Some(6_000),
            ..
        }
    ));
    assert_eq!(report.summary.failover_ms_max, 400);
    assert_eq!(report.faults[0].failover_ms, vec![(0, Some(400))]);
}

#[test]
fn liveness_is_not_judged_when_another_fault_follows_or_nothing_was_sent() {
    let mut b = Builder::default();
    b.fault("f1", 1_000, Some(2_000), &[0])
        .fault("f2", 4_000, Some(20_000), &[0]);
    let op = b.at(2_100).invoke(P, 0, 100);
    b.at(19_000).ok(P, op, 0);
    b.at(30_000).final_read(F, 0, &[(0, 100)], 1);
    let report = b.check();
    assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
    assert!(
        report.notes.iter().any(|n| n.contains("f1: another fault")),
        "{:?}",
        report.notes
    );
    assert!(report
        .notes
        .iter()
        .any(|n| n.contains("f2") && n.contains("not written long enough")));
    // f2 started at 4 s; the next ack of a send invoked after it never came.
    assert_eq!(report.summary.failover_ms_max, 26_000);
}

#[test]
fn broken_histories_are_errors_not_anomalies() {
    let mut b = Builder::default();
    b.ok(P, 7, 0);
    assert!(check_history(&b.history(), &CheckOptions::default()).is_err());
    let mut b = Builder::default();
    b.acked(P, 0, 100, 0).acked(Q, 0, 100, 1);
    assert!(check_history(&b.history(), &CheckOptions::default()).is_err());
    let mut b = Builder::default();
    b.acked(P, 0, 100, -1);
    assert!(check_history(&b.history(), &CheckOptions::default()).is_err());
}

#[test]
fn polls_before_any_assign_are_noted() {
    let mut b = clean();
    b.poll(77, &[(0, 3, 201), (0, 0, 100)]);
    let report = b.check();
    assert!(report.anomalies.is_empty());
    assert!(report.notes.iter().any(|n| n.contains("p77")));
}

#[test]
fn replicas_are_compared_up_to_the_final_read_high_watermark_and_metadata_logs_agree() {
    use crate::replica::BatchEntry;
    let mut b = clean();
    b.event(EventKind::Header { topic: "t".into() });
    let entry = |base, last, crc| BatchEntry {
        base_offset: base,
        last_offset: last,
        crc,
        leader_epoch: 1,
    };
    let replica = |node, batches: Vec<BatchEntry>| ReplicaLog {
        node,
        topic: "t".into(),
        partition: 0,
        batches,
        problem: None,
        hw: None,
    };
    let good = vec![entry(0, 1, 5), entry(2, 3, 6)];
    let replicas = vec![
        replica(1, good.clone()),
        replica(2, good.clone()),
        replica(3, vec![entry(0, 1, 5)]), // short of the final read's hw 4
    ];
    let metadata = vec![
        MetadataLog {
            node: 1,
            commit_index: 1,
            entries: vec![crate::MetadataEntry {
                index: 1,
                term: 1,
                checksum: 9,
            }],
        };
        2
    ];
    let report =
        check(&b.history(), &replicas, &metadata, &CheckOptions::default()).expect("check");
    assert_eq!(
        names(&report),
        vec!["replica_divergence"],
        "{:?}",
        report.anomalies
    );
    assert_eq!(report.summary.divergent_replicas, 1);
    let report = check(
        &b.history(),
        &replicas[..2],
        &metadata,
        &CheckOptions::default(),
    )
    .expect("check");
    assert!(report.anomalies.is_empty(), "{:?}", report.anomalies);
}

mod arbitrary {
    use super::*;
    use proptest::prelude::*;

    fn partition() -> std::ops::Range<i32> {
        0..3
    }

    fn offset() -> impl Strategy<Value = i64> + Clone {
        prop_oneof![50 => 0..6i64, 1 => Just(-1i64), 1 => Just(i64::MAX)]
    }

    fn value() -> std::ops::Range<u64> {
        0..40
    }

    fn id() -> std::ops::Range<u64> {
        0..4
    }

    fn op() -> std::ops::Range<u64> {
        0..40
    }

    /// Every kind of event, each of the eleven equally likely.
    fn kind() -> impl Strategy<Value = EventKind> {
        prop_oneof![4 => send_kind(), 5 => read_kind(), 2 => fault_kind()]
    }

    fn send_kind() -> impl Strategy<Value = EventKind> {
        prop_oneof![
            (id(), id(), partition(), value()).prop_map(|(process, op, partition, value)| {
                EventKind::SendInvoke {
                    process,
                    op,
                    partition,
                    value,
                }
            }),
            (id(), op(), offset()).prop_map(|(process, op, offset)| {
                EventKind::SendOk {
                    process,
                    op,
                    offset,
                }
            }),
            (id(), op()).prop_map(|(process, op)| EventKind::SendFail {
                process,
                op,
                error: "x".into()
            }),
            (id(), op()).prop_map(|(process, op)| EventKind::SendInfo {
                process,
                op,
                error: "x".into()
            }),
        ]
    }

    fn read_kind() -> impl Strategy<Value = EventKind> {
        let records = proptest::collection::vec((partition(), offset(), value()), 0..4);
        let final_records = proptest::collection::vec((offset(), value()), 0..4);
        prop_oneof![
            (
                id(),
                any::<bool>(),
                proptest::collection::vec(partition(), 0..3)
            )
                .prop_map(|(process, group, partitions)| {
                    let mode = if group {
                        ConsumerMode::Group
                    } else {
                        ConsumerMode::Assign
                    };
                    EventKind::Assign {
                        process,
                        mode,
                        partitions,
                    }
                }),
            (id(), partition(), proptest::option::of(offset())).prop_map(
                |(process, partition, offset)| EventKind::Seek {
                    process,
                    partition,
                    offset,
                }
            ),
            (id(), records).prop_map(|(process, records)| EventKind::Poll { process, records }),
            (id(), partition(), final_records).prop_map(|(process, partition, records)| {
                EventKind::FinalRead {
                    process,
                    partition,
                    records,
                }
            }),
            (id(), partition(), 0..3i64, 0..8i64).prop_map(
                |(process, partition, log_start, hw)| EventKind::FinalEnd {
                    process,
                    partition,
                    log_start,
                    hw,
                }
            ),
        ]
    }

    fn fault_kind() -> impl Strategy<Value = EventKind> {
        prop_oneof![
            (id(), proptest::collection::vec(partition(), 0..2)).prop_map(|(id, partitions)| {
                EventKind::FaultStart {
                    id: id.to_string(),
                    fault: "f".into(),
                    target: "t".into(),
                    partitions,
                }
            }),
            id().prop_map(|id| EventKind::FaultEnd { id: id.to_string() }),
        ]
    }

    /// Unique op ids and values, and completions of earlier uncompleted invokes (with the
    /// invoker's process), so that most histories are valid and reach every analysis.
    fn repair(events: Vec<(u64, EventKind)>) -> Vec<Event> {
        let mut open: Vec<(u64, u64)> = Vec::new();
        let mut out = Vec::new();
        for (i, (ms, mut kind)) in events.into_iter().enumerate() {
            match &mut kind {
                EventKind::SendInvoke {
                    op, value, process, ..
                } => {
                    (*op, *value) = (i as u64, i as u64);
                    open.push((*op, *process));
                }
                EventKind::SendOk { op, process, .. }
                | EventKind::SendFail { op, process, .. }
                | EventKind::SendInfo { op, process, .. } => {
                    if open.is_empty() {
                        continue;
                    }
                    (*op, *process) = open.remove(*op as usize % open.len());
                }
                _ => {}
            }
            out.push(Event {
                mono_ns: ms * 1_000_000,
                wall_ms: ms,
                kind,
            });
        }
        out
    }

    fn events() -> impl Strategy<Value = Vec<(u64, EventKind)>> {
        proptest::collection::vec((0..20_000u64, kind()), 0..60)
    }

    #[test]
    fn most_arbitrary_histories_are_valid_so_the_property_reaches_the_analyses() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let valid = (0..500)
            .filter(|_| {
                let events = events().new_tree(&mut runner).expect("tree").current();
                let history = History {
                    events: repair(events),
                };
                check_history(&history, &CheckOptions::default()).is_ok()
            })
            .count();
        assert!(valid >= 150, "only {valid} of 500 valid");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(500))]

        /// Whatever a broken driver writes, the checker answers with a report or an error,
        /// never a panic or a hang.
        #[test]
        fn arbitrary_histories_never_panic_the_checker(
            events in events(),
        ) {
            let history = History { events: repair(events) };
            let _ = check_history(&history, &CheckOptions::default());
            // And sorted by time, as recorded histories are.
            let mut sorted = history.clone();
            sorted.events.sort_by_key(|e| e.mono_ns);
            let _ = check_history(&sorted, &CheckOptions::default());
        }
    }
}
