//! The indexed form of a history that the analyses share: every send with its outcome, and
//! per partition every (offset, value) observation with its first observer (Jepsen's
//! "version orders", with the offsets kept: this workload has no transaction markers, so
//! offsets are dense).

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::anomaly::{Seen, Source, When};
use crate::history::{
    Event, EventKind, History, HistoryError, Offset, Partition, ProcessId, Value,
};

/// Offsets at or above this are refused as garbage (so `offset + 1` never overflows).
pub const OFFSET_MAX: Offset = 1 << 62;

/// What became of a send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendStatus {
    /// Invoked, never completed (the writer died): indefinite.
    Pending,
    /// Acknowledged at the offset.
    Ok(Offset),
    /// Definitely not appended.
    Fail(String),
    /// Perhaps appended.
    Info(String),
}

/// One send.
#[derive(Debug, Clone)]
pub struct SendRecord {
    /// The producer.
    pub process: ProcessId,
    /// Op id.
    pub op: u64,
    /// Target partition.
    pub partition: Partition,
    /// The value.
    pub value: Value,
    /// Invoke time, CLOCK_MONOTONIC ns.
    pub invoke_ns: u64,
    /// Completion time and wall clock, if completed.
    pub complete: Option<(u64, u64)>,
    /// The outcome.
    pub status: SendStatus,
}

/// A final read of one partition by one reader.
#[derive(Debug, Clone)]
pub struct FinalRead {
    /// The reader.
    pub process: ProcessId,
    /// Every record, in order.
    pub records: Vec<(Offset, Value)>,
    /// `(log_start, hw)` once complete.
    pub end: Option<(Offset, Offset)>,
}

/// Everything observed about one partition.
#[derive(Debug, Clone, Default)]
pub struct PartitionView {
    /// Per offset, each distinct value with its first observer.
    pub offsets: BTreeMap<Offset, Vec<Seen>>,
    /// Per value, each distinct offset with its first observer.
    pub values: HashMap<Value, Vec<Seen>>,
    /// Values returned by any poll or final read (acks excluded).
    pub read_values: HashSet<Value>,
    /// The final reads.
    pub finals: Vec<FinalRead>,
}

impl PartitionView {
    fn observe(&mut self, seen: Seen) {
        let at_offset = self.offsets.entry(seen.offset).or_default();
        if !at_offset.iter().any(|s| s.value == seen.value) {
            at_offset.push(seen);
        }
        let of_value = self.values.entry(seen.value).or_default();
        if !of_value.iter().any(|s| s.offset == seen.offset) {
            of_value.push(seen);
        }
        if !matches!(seen.source, Source::Ack { .. }) {
            self.read_values.insert(seen.value);
        }
    }

    /// The complete final reads.
    pub fn complete_finals(&self) -> impl Iterator<Item = (&FinalRead, Offset, Offset)> {
        self.finals
            .iter()
            .filter_map(|f| f.end.map(|(start, hw)| (f, start, hw)))
    }
}

/// The indexed history.
#[derive(Debug, Default)]
pub struct Model {
    /// `mono_ns` of the first event.
    pub start_ns: u64,
    /// `mono_ns` of the last event.
    pub end_ns: u64,
    /// Every send, in invoke order.
    pub sends: Vec<SendRecord>,
    /// Index into `sends` by value.
    pub by_value: HashMap<Value, usize>,
    /// Per partition observations (every partition sent to or read from).
    pub partitions: BTreeMap<Partition, PartitionView>,
}

impl Model {
    /// Indexes `history`; refuses histories that break the workload's rules.
    pub fn build(history: &History) -> Result<Model, HistoryError> {
        let mut model = Model {
            start_ns: history.events.first().map_or(0, |e| e.mono_ns),
            end_ns: history.events.iter().map(|e| e.mono_ns).max().unwrap_or(0),
            ..Model::default()
        };
        let mut by_op: HashMap<u64, usize> = HashMap::new();
        for event in &history.events {
            model.add(event, &mut by_op)?;
        }
        Ok(model)
    }

    /// The [`When`] of a monotonic time.
    pub fn when(&self, mono_ns: u64, wall_ms: u64) -> When {
        When {
            t_ms: mono_ns.saturating_sub(self.start_ns) / 1_000_000,
            wall_ms,
        }
    }

    fn add(&mut self, event: &Event, by_op: &mut HashMap<u64, usize>) -> Result<(), HistoryError> {
        let at = self.when(event.mono_ns, event.wall_ms);
        match &event.kind {
            EventKind::SendInvoke {
                process,
                op,
                partition,
                value,
            } => self.invoke(event, *process, *op, *partition, *value, by_op)?,
            EventKind::SendOk {
                process,
                op,
                offset,
            } => {
                check_offset(*offset)?;
                let index = self.complete(event, *process, *op, SendStatus::Ok(*offset), by_op)?;
                let send = &self.sends[index];
                let seen = Seen {
                    offset: *offset,
                    value: send.value,
                    source: Source::Ack {
                        process: *process,
                        op: *op,
                        at,
                    },
                };
                self.view(send.partition).observe(seen);
            }
            EventKind::SendFail { process, op, error } => {
                self.complete(event, *process, *op, SendStatus::Fail(error.clone()), by_op)?;
            }
            EventKind::SendInfo { process, op, error } => {
                self.complete(event, *process, *op, SendStatus::Info(error.clone()), by_op)?;
            }
            EventKind::Poll { process, records } => {
                for &(partition, offset, value) in records {
                    check_offset(offset)?;
                    let source = Source::Poll {
                        process: *process,
                        at,
                    };
                    self.view(partition).observe(Seen {
                        offset,
                        value,
                        source,
                    });
                }
            }
            EventKind::FinalRead {
                process,
                partition,
                records,
            } => self.final_read(*process, *partition, records)?,
            EventKind::FinalEnd {
                process,
                partition,
                log_start,
                hw,
            } => self.final_end(*process, *partition, *log_start, *hw)?,
            EventKind::Header { .. }
            | EventKind::Assign { .. }
            | EventKind::Seek { .. }
            | EventKind::FaultStart { .. }
            | EventKind::FaultEnd { .. } => {}
        }
        Ok(())
    }

    fn view(&mut self, partition: Partition) -> &mut PartitionView {
        self.partitions.entry(partition).or_default()
    }

    fn invoke(
        &mut self,
        event: &Event,
        process: ProcessId,
        op: u64,
        partition: Partition,
        value: Value,
        by_op: &mut HashMap<u64, usize>,
    ) -> Result<(), HistoryError> {
        if by_op.insert(op, self.sends.len()).is_some() {
            return Err(HistoryError::Invalid(format!("op {op} invoked twice")));
        }
        if self.by_value.insert(value, self.sends.len()).is_some() {
            return Err(HistoryError::Invalid(format!(
                "value {value} sent twice (values must be unique; op {op})"
            )));
        }
        self.sends.push(SendRecord {
            process,
            op,
            partition,
            value,
            invoke_ns: event.mono_ns,
            complete: None,
            status: SendStatus::Pending,
        });
        self.view(partition);
        Ok(())
    }

    fn complete(
        &mut self,
        event: &Event,
        process: ProcessId,
        op: u64,
        status: SendStatus,
        by_op: &HashMap<u64, usize>,
    ) -> Result<usize, HistoryError> {
        let index = *by_op
            .get(&op)
            .ok_or_else(|| HistoryError::Invalid(format!("op {op} completed, never invoked")))?;
        let send = &mut self.sends[index];
        if send.process != process {
            return Err(HistoryError::Invalid(format!(
                "op {op} invoked by p{} but completed by p{process}",
                send.process
            )));
        }
        if send.status != SendStatus::Pending {
            return Err(HistoryError::Invalid(format!("op {op} completed twice")));
        }
        send.status = status;
        send.complete = Some((event.mono_ns, event.wall_ms));
        Ok(index)
    }

    fn final_read(
        &mut self,
        process: ProcessId,
        partition: Partition,
        records: &[(Offset, Value)],
    ) -> Result<(), HistoryError> {
        let view = self.view(partition);
        for &(offset, value) in records {
            check_offset(offset)?;
            view.observe(Seen {
                offset,
                value,
                source: Source::FinalRead { process },
            });
        }
        let open = view
            .finals
            .iter_mut()
            .find(|f| f.process == process && f.end.is_none());
        match open {
            Some(read) => read.records.extend_from_slice(records),
            None => view.finals.push(FinalRead {
                process,
                records: records.to_vec(),
                end: None,
            }),
        }
        Ok(())
    }

    fn final_end(
        &mut self,
        process: ProcessId,
        partition: Partition,
        log_start: Offset,
        hw: Offset,
    ) -> Result<(), HistoryError> {
        check_offset(log_start)?;
        check_offset(hw)?;
        let view = self.view(partition);
        let open = view
            .finals
            .iter_mut()
            .find(|f| f.process == process && f.end.is_none());
        match open {
            Some(read) => read.end = Some((log_start, hw)),
            None => view.finals.push(FinalRead {
                process,
                records: Vec::new(),
                end: Some((log_start, hw)),
            }),
        }
        Ok(())
    }
}

fn check_offset(offset: Offset) -> Result<(), HistoryError> {
    if (0..OFFSET_MAX).contains(&offset) {
        Ok(())
    } else {
        Err(HistoryError::Invalid(format!(
            "offset {offset} outside 0..{OFFSET_MAX}"
        )))
    }
}
