//! The history: what producers, consumers, final readers and the fault injector did, one
//! event per line of JSON (JSON lines), append-only.
//!
//! Every event carries `mono_ns` (CLOCK_MONOTONIC in nanoseconds: one clock for every process
//! of the machine, so a fault injector in another process can append to the same history) and
//! `wall_ms` (Unix time in milliseconds, to find the moment in broker logs). The remaining
//! fields depend on `type`:
//!
//! ```text
//! {"mono_ns":..,"wall_ms":..,"type":"header","topic":"jepsen"}
//! {..,"type":"send_invoke","process":1,"op":7,"partition":3,"value":42}
//! {..,"type":"send_ok","process":1,"op":7,"offset":17}
//! {..,"type":"send_fail","process":1,"op":7,"error":"NOT_ENOUGH_REPLICAS"}   definite: not appended
//! {..,"type":"send_info","process":1,"op":7,"error":"timed out"}             indefinite
//! {..,"type":"assign","process":2,"mode":"assign","partitions":[0,1]}
//! {..,"type":"seek","process":2,"partition":0,"offset":0}                     offset null: unknown
//! {..,"type":"poll","process":2,"records":[[0,17,42],[0,18,43]]}            [partition, offset, value]
//! {..,"type":"final_read","process":9,"partition":0,"records":[[0,40],[1,41]]}  [offset, value]
//! {..,"type":"final_end","process":9,"partition":0,"log_start":0,"hw":2}
//! {..,"type":"fault_start","id":"kill-1","fault":"kill-leader","target":"node 2","partitions":[3]}
//! {..,"type":"fault_end","id":"kill-1"}
//! ```
//!
//! A send without a completion (the writer died) counts as indefinite. A final read counts only
//! once its `final_end` is recorded: it then claims to hold every record from `log_start` to
//! `hw`.

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// A producer, consumer or final reader: performs its operations one after another.
pub type ProcessId = u64;
/// A partition of the workload's topic (Jepsen's "key").
pub type Partition = i32;
/// A record's offset in its partition.
pub type Offset = i64;
/// A record value; unique per write in this workload.
pub type Value = u64;

/// Longest history line read, in bytes (a final-read chunk of many records is the longest).
pub const HISTORY_LINE_BYTES_MAX: usize = 64 * 1024 * 1024;

/// How a consumer gets its partitions; order checks apply to `Assign` consumers only (a group
/// rebalance may legitimately move a position back or forward).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConsumerMode {
    /// `Consumer::assign`: partitions kept across assigns keep their positions.
    Assign,
    /// `Consumer::subscribe`: the group coordinator assigns partitions.
    Group,
}

/// One line of the history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub mono_ns: u64,
    /// Unix time, milliseconds.
    pub wall_ms: u64,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

/// What happened; see the module documentation for the JSON form.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// Names the workload's topic (replica directories are `<topic>-<partition>`).
    Header {
        /// The topic.
        topic: String,
    },
    /// A producer starts sending one record.
    SendInvoke {
        /// The producer.
        process: ProcessId,
        /// Operation id, unique in the history; the completion names it.
        op: u64,
        /// Target partition.
        partition: Partition,
        /// The value, unique in the history.
        value: Value,
    },
    /// Acknowledged at `offset`.
    SendOk {
        /// The producer.
        process: ProcessId,
        /// The invoke's op id.
        op: u64,
        /// The acknowledged offset.
        offset: Offset,
    },
    /// Definitely not appended (an error the broker only returns before appending).
    SendFail {
        /// The producer.
        process: ProcessId,
        /// The invoke's op id.
        op: u64,
        /// Why.
        error: String,
    },
    /// Unknown whether appended (timeout, connection loss, an error possible after append).
    SendInfo {
        /// The producer.
        process: ProcessId,
        /// The invoke's op id.
        op: u64,
        /// Why.
        error: String,
    },
    /// A consumer's assignment changed to exactly `partitions`.
    Assign {
        /// The consumer.
        process: ProcessId,
        /// Assign or group mode.
        mode: ConsumerMode,
        /// The partitions now assigned.
        partitions: Vec<Partition>,
    },
    /// A consumer moved its position; `offset` is the resolved position, `None` if unknown.
    Seek {
        /// The consumer.
        process: ProcessId,
        /// The partition.
        partition: Partition,
        /// The next offset the consumer will return, if known.
        offset: Option<Offset>,
    },
    /// One poll's records, in the order returned.
    Poll {
        /// The consumer.
        process: ProcessId,
        /// `(partition, offset, value)`.
        records: Vec<(Partition, Offset, Value)>,
    },
    /// A chunk of the final read of a partition, in order.
    FinalRead {
        /// The final reader.
        process: ProcessId,
        /// The partition.
        partition: Partition,
        /// `(offset, value)`.
        records: Vec<(Offset, Value)>,
    },
    /// The final read of a partition is complete: it covered `log_start..hw`.
    FinalEnd {
        /// The final reader.
        process: ProcessId,
        /// The partition.
        partition: Partition,
        /// First offset of the log.
        log_start: Offset,
        /// The high watermark the reader read up to.
        hw: Offset,
    },
    /// A fault was injected.
    FaultStart {
        /// Pairs the start with its end.
        id: String,
        /// The fault's name (`kill-leader`, `partition-majority`, ...).
        fault: String,
        /// What it hit (`node 2`, `leader of partition 3`, ...).
        target: String,
        /// Partitions it affects; empty means all.
        partitions: Vec<Partition>,
    },
    /// The fault was healed.
    FaultEnd {
        /// The start's id.
        id: String,
    },
}

impl EventKind {
    /// The process of a client event; `None` for header and fault events.
    pub fn process(&self) -> Option<ProcessId> {
        match self {
            EventKind::SendInvoke { process, .. }
            | EventKind::SendOk { process, .. }
            | EventKind::SendFail { process, .. }
            | EventKind::SendInfo { process, .. }
            | EventKind::Assign { process, .. }
            | EventKind::Seek { process, .. }
            | EventKind::Poll { process, .. }
            | EventKind::FinalRead { process, .. }
            | EventKind::FinalEnd { process, .. } => Some(*process),
            EventKind::Header { .. }
            | EventKind::FaultStart { .. }
            | EventKind::FaultEnd { .. } => None,
        }
    }
}

/// A history cannot be read or is not a history of this workload.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// Reading the file failed.
    #[error("cannot read history {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// A line is not an event.
    #[error("{path}:{line}: not a history event: {reason}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// The events contradict the workload's rules (reused op id or value, completion without
    /// invoke, a process in two files ...): the recorder or the driver is broken.
    #[error("invalid history: {0}")]
    Invalid(String),
}

/// A whole history, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// The events; within one process, in the order the process did them.
    pub events: Vec<Event>,
}

impl History {
    /// Reads a JSON-lines history. A torn last line (the writer was killed mid-line) is
    /// ignored; any other bad line is an error.
    pub fn read_jsonl(path: &Path) -> Result<History, HistoryError> {
        let io = |source| HistoryError::Io {
            path: path.to_path_buf(),
            source,
        };
        let file = File::open(path).map_err(io)?;
        let mut reader = BufReader::new(file);
        let mut events = Vec::new();
        let mut line = String::new();
        let mut number = 0;
        loop {
            line.clear();
            let read = reader.read_line(&mut line).map_err(io)?;
            if read == 0 {
                break;
            }
            number += 1;
            let complete = line.ends_with('\n');
            if line.trim().is_empty() {
                continue;
            }
            let parse_error = |reason: String| HistoryError::Parse {
                path: path.to_path_buf(),
                line: number,
                reason,
            };
            if line.len() > HISTORY_LINE_BYTES_MAX {
                return Err(parse_error(format!(
                    "line of {} bytes exceeds {HISTORY_LINE_BYTES_MAX}",
                    line.len()
                )));
            }
            match serde_json::from_str::<Event>(&line) {
                Ok(event) => events.push(event),
                Err(_) if !complete => break,
                Err(e) => return Err(parse_error(e.to_string())),
            }
        }
        Ok(History { events })
    }

    /// Writes the history as JSON lines.
    pub fn write_jsonl(&self, path: &Path) -> std::io::Result<()> {
        let mut out = std::io::BufWriter::new(File::create(path)?);
        for event in &self.events {
            serde_json::to_writer(&mut out, event)?;
            out.write_all(b"\n")?;
        }
        out.flush()
    }

    /// Merges histories recorded by different OS processes (a driver and a fault injector):
    /// events ordered by `mono_ns`, each file's own order kept for equal times. Process ids
    /// must not appear in two of them.
    pub fn merge(histories: Vec<History>) -> Result<History, HistoryError> {
        let mut owner: std::collections::HashMap<ProcessId, usize> = Default::default();
        for (index, history) in histories.iter().enumerate() {
            for process in history.events.iter().filter_map(|e| e.kind.process()) {
                let first = *owner.entry(process).or_insert(index);
                if first != index {
                    return Err(HistoryError::Invalid(format!(
                        "process {process} appears in merged histories {first} and {index}"
                    )));
                }
            }
        }
        let mut events: Vec<Event> = histories.into_iter().flat_map(|h| h.events).collect();
        events.sort_by_key(|e| e.mono_ns);
        Ok(History { events })
    }

    /// The topic named by the first header event.
    pub fn topic(&self) -> Option<&str> {
        self.events.iter().find_map(|e| match &e.kind {
            EventKind::Header { topic } => Some(topic.as_str()),
            _ => None,
        })
    }
}

/// How to encode a value in a record so that consumers can decode it: decimal ASCII, readable
/// in `borges consume` output.
pub fn value_bytes(value: Value) -> Vec<u8> {
    value.to_string().into_bytes()
}

/// Decodes [`value_bytes`]; `None` for anything else.
pub fn parse_value(bytes: &[u8]) -> Option<Value> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(mono_ns: u64, kind: EventKind) -> Event {
        Event {
            mono_ns,
            wall_ms: 1,
            kind,
        }
    }

    #[test]
    fn round_trips_every_kind_through_jsonl() {
        let kinds = vec![
            EventKind::Header { topic: "t".into() },
            EventKind::SendInvoke {
                process: 1,
                op: 2,
                partition: 3,
                value: 4,
            },
            EventKind::SendOk {
                process: 1,
                op: 2,
                offset: 5,
            },
            EventKind::Seek {
                process: 1,
                partition: 3,
                offset: None,
            },
            EventKind::Poll {
                process: 1,
                records: vec![(3, 5, 4)],
            },
            EventKind::FaultStart {
                id: "f".into(),
                fault: "kill".into(),
                target: "node 1".into(),
                partitions: vec![],
            },
        ];
        let history = History {
            events: kinds
                .into_iter()
                .enumerate()
                .map(|(i, k)| event(i as u64, k))
                .collect(),
        };
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.jsonl");
        history.write_jsonl(&path).expect("write");
        assert_eq!(History::read_jsonl(&path).expect("read"), history);
        assert_eq!(history.topic(), Some("t"));
    }

    #[test]
    fn a_torn_last_line_is_ignored_but_a_bad_middle_line_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.jsonl");
        let good = r#"{"mono_ns":1,"wall_ms":1,"type":"fault_end","id":"x"}"#;
        std::fs::write(&path, format!("{good}\n{{\"mono_ns\":2,\"wa")).expect("write");
        assert_eq!(History::read_jsonl(&path).expect("read").events.len(), 1);
        std::fs::write(&path, format!("{{\"mono\n{good}\n")).expect("write");
        let err = History::read_jsonl(&path).expect_err("bad line");
        assert!(matches!(err, HistoryError::Parse { line: 1, .. }), "{err}");
    }

    #[test]
    fn merge_orders_by_time_and_refuses_a_process_in_two_files() {
        let a = History {
            events: vec![event(
                10,
                EventKind::Seek {
                    process: 1,
                    partition: 0,
                    offset: Some(0),
                },
            )],
        };
        let b = History {
            events: vec![event(5, EventKind::FaultEnd { id: "f".into() })],
        };
        let merged = History::merge(vec![a.clone(), b]).expect("merge");
        assert_eq!(merged.events[0].mono_ns, 5);
        assert!(History::merge(vec![a.clone(), a]).is_err());
    }

    #[test]
    fn values_encode_as_decimal() {
        assert_eq!(value_bytes(42), b"42");
        assert_eq!(parse_value(b"42"), Some(42));
        assert_eq!(parse_value(b"x"), None);
    }
}
