//! [`Recorder`]: appends history events from many tokio tasks (or threads) to one file.
//!
//! A `Recorder` is an `Arc` handle: clone it into every producer and consumer task. Each event
//! is serialized, timestamped and written under one short mutex (a `memcpy` into a 64 KiB
//! buffer; a `write` syscall when the buffer is full), so the file's order is the order of the
//! timestamps and a line is never interleaved with another. Test-only code, never on the
//! broker's data path. Write errors do not panic the workload: the first one is kept and
//! returned by [`Recorder::flush`].

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use borges_protocol::ErrorCode;

use crate::history::{
    ConsumerMode, Event, EventKind, History, Offset, Partition, ProcessId, Value,
};

/// Buffer of the history file.
pub const RECORDER_BUFFER_BYTES: usize = 64 * 1024;

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the machine.
pub fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Unix time in milliseconds (0 if the clock is before 1970).
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Whether a send that failed with a broker error code was appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendErrorClass {
    /// The broker refuses with this code only before appending: record `send_fail`.
    Definite,
    /// The record may have been appended: record `send_info`.
    Indefinite,
}

/// Classifies one attempt's error code. Only codes the broker returns before appending are
/// definite (validation, `NotEnoughReplicas`); everything else, `NotLeaderOrFollower` and
/// `RequestTimedOut` included (a leader change or timeout can end an append that happened),
/// is indefinite. If the client retried, an earlier attempt may have landed: every failure
/// after a retry is indefinite whatever its code.
pub fn classify_send_error(code: ErrorCode) -> SendErrorClass {
    match code {
        ErrorCode::NotEnoughReplicas
        | ErrorCode::CorruptRecordBatch
        | ErrorCode::InvalidRecordBatch
        | ErrorCode::RecordBatchTooLarge
        | ErrorCode::UnsupportedCompression
        | ErrorCode::InvalidTimestamp
        | ErrorCode::InvalidTopicOperation
        | ErrorCode::UnknownTopicOrPartition => SendErrorClass::Definite,
        _ => SendErrorClass::Indefinite,
    }
}

enum Sink {
    File(BufWriter<File>),
    Memory(Vec<Event>),
}

struct Inner {
    sink: Mutex<(Sink, Option<std::io::Error>)>,
    next_id: AtomicU64,
}

/// Shared handle that records history events; cheap to clone (one `Arc`).
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Inner>,
}

impl Recorder {
    /// Records into a new file at `path` (truncated if it exists). Process ids, op ids and
    /// values handed out start at `id_base`: give recorders of one run disjoint bases.
    pub fn create(path: &Path, id_base: u64) -> std::io::Result<Recorder> {
        Ok(Self::with_sink(
            Sink::File(BufWriter::with_capacity(
                RECORDER_BUFFER_BYTES,
                File::create(path)?,
            )),
            id_base,
        ))
    }

    /// Appends to `path` (created if missing); used by the fault injector's CLI.
    pub fn append(path: &Path, id_base: u64) -> std::io::Result<Recorder> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self::with_sink(
            Sink::File(BufWriter::with_capacity(RECORDER_BUFFER_BYTES, file)),
            id_base,
        ))
    }

    /// Records in memory; [`Recorder::history`] returns the events.
    pub fn in_memory() -> Recorder {
        Self::with_sink(Sink::Memory(Vec::new()), 0)
    }

    fn with_sink(sink: Sink, id_base: u64) -> Recorder {
        Recorder {
            inner: Arc::new(Inner {
                sink: Mutex::new((sink, None)),
                next_id: AtomicU64::new(id_base),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, (Sink, Option<std::io::Error>)> {
        // A panicking recorder thread cannot leave the sink half-written: lines are written
        // whole, so a poisoned lock is still usable.
        self.inner.sink.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records one event now.
    pub fn record(&self, kind: EventKind) {
        let mut guard = self.lock();
        let event = Event {
            mono_ns: mono_ns(),
            wall_ms: wall_ms(),
            kind,
        };
        let (sink, error) = &mut *guard;
        match sink {
            Sink::Memory(events) => events.push(event),
            Sink::File(out) => {
                if error.is_some() {
                    return;
                }
                let written = serde_json::to_writer(&mut *out, &event)
                    .map_err(std::io::Error::from)
                    .and_then(|()| out.write_all(b"\n"));
                if let Err(e) = written {
                    *error = Some(e);
                }
            }
        }
    }

    /// A new unique id (process, op or value).
    pub fn next_id(&self) -> u64 {
        self.inner.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// A new process id for a producer, consumer or final reader.
    pub fn process(&self) -> ProcessId {
        self.next_id()
    }

    /// A new unique value to send.
    pub fn value(&self) -> Value {
        self.next_id()
    }

    /// Names the workload's topic.
    pub fn header(&self, topic: &str) {
        self.record(EventKind::Header {
            topic: topic.to_string(),
        });
    }

    /// Records a send's invocation; complete it through the returned [`PendingSend`].
    pub fn send(&self, process: ProcessId, partition: Partition, value: Value) -> PendingSend {
        let op = self.next_id();
        self.record(EventKind::SendInvoke {
            process,
            op,
            partition,
            value,
        });
        PendingSend {
            recorder: self.clone(),
            process,
            op,
            completed: false,
        }
    }

    /// A consumer's assignment is now exactly `partitions`.
    pub fn assign(&self, process: ProcessId, mode: ConsumerMode, partitions: &[Partition]) {
        self.record(EventKind::Assign {
            process,
            mode,
            partitions: partitions.to_vec(),
        });
    }

    /// A consumer sought; `offset` is its resolved position (`Consumer::position`), if known.
    pub fn seek(&self, process: ProcessId, partition: Partition, offset: Option<Offset>) {
        self.record(EventKind::Seek {
            process,
            partition,
            offset,
        });
    }

    /// One poll's records `(partition, offset, value)`, in the order returned. Empty polls
    /// are not recorded.
    pub fn poll(&self, process: ProcessId, records: &[(Partition, Offset, Value)]) {
        if !records.is_empty() {
            self.record(EventKind::Poll {
                process,
                records: records.to_vec(),
            });
        }
    }

    /// A chunk of the final read of `partition`, in order.
    pub fn final_read(
        &self,
        process: ProcessId,
        partition: Partition,
        records: &[(Offset, Value)],
    ) {
        self.record(EventKind::FinalRead {
            process,
            partition,
            records: records.to_vec(),
        });
    }

    /// The final read of `partition` covered `log_start..hw`.
    pub fn final_end(
        &self,
        process: ProcessId,
        partition: Partition,
        log_start: Offset,
        hw: Offset,
    ) {
        self.record(EventKind::FinalEnd {
            process,
            partition,
            log_start,
            hw,
        });
    }

    /// A fault was injected; `partitions` empty means it affects all.
    pub fn fault_start(&self, id: &str, fault: &str, target: &str, partitions: &[Partition]) {
        self.record(EventKind::FaultStart {
            id: id.to_string(),
            fault: fault.to_string(),
            target: target.to_string(),
            partitions: partitions.to_vec(),
        });
    }

    /// The fault `id` was healed.
    pub fn fault_end(&self, id: &str) {
        self.record(EventKind::FaultEnd { id: id.to_string() });
    }

    /// Writes buffered lines to the file; returns the first write error since creation.
    pub fn flush(&self) -> std::io::Result<()> {
        let mut guard = self.lock();
        let (sink, error) = &mut *guard;
        if let Some(e) = error.take() {
            return Err(e);
        }
        match sink {
            Sink::File(out) => out.flush(),
            Sink::Memory(_) => Ok(()),
        }
    }

    /// The events of an in-memory recorder; `None` for a file recorder (read the file).
    pub fn history(&self) -> Option<History> {
        match &self.lock().0 {
            Sink::Memory(events) => Some(History {
                events: events.clone(),
            }),
            Sink::File(_) => None,
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Ok(guard) = self.sink.get_mut() {
            if let Sink::File(out) = &mut guard.0 {
                let _ = out.flush();
            }
        }
    }
}

/// A send in flight. Complete it with [`ok`](PendingSend::ok), [`fail`](PendingSend::fail),
/// [`info`](PendingSend::info) or [`error_code`](PendingSend::error_code); dropping it
/// uncompleted (a cancelled task) records `send_info` "abandoned".
pub struct PendingSend {
    recorder: Recorder,
    process: ProcessId,
    op: u64,
    completed: bool,
}

impl PendingSend {
    /// The op id.
    pub fn op(&self) -> u64 {
        self.op
    }

    /// Acknowledged at `offset`.
    pub fn ok(mut self, offset: Offset) {
        self.completed = true;
        self.recorder.record(EventKind::SendOk {
            process: self.process,
            op: self.op,
            offset,
        });
    }

    /// Definitely not appended.
    pub fn fail(mut self, error: &str) {
        self.completed = true;
        self.recorder.record(EventKind::SendFail {
            process: self.process,
            op: self.op,
            error: error.to_string(),
        });
    }

    /// Perhaps appended.
    pub fn info(mut self, error: &str) {
        self.completed = true;
        self.recorder.record(EventKind::SendInfo {
            process: self.process,
            op: self.op,
            error: error.to_string(),
        });
    }

    /// Failed with a broker error code after `attempts` attempts (1 = no retry); recorded as
    /// fail or info per [`classify_send_error`].
    pub fn error_code(self, code: ErrorCode, attempts: u32) {
        if attempts <= 1 && classify_send_error(code) == SendErrorClass::Definite {
            self.fail(code.name());
        } else {
            self.info(code.name());
        }
    }
}

impl Drop for PendingSend {
    fn drop(&mut self) {
        if !self.completed {
            self.recorder.record(EventKind::SendInfo {
                process: self.process,
                op: self.op,
                error: "abandoned".into(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_from_many_threads_into_one_file_in_time_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("h.jsonl");
        let recorder = Recorder::create(&path, 100).expect("create");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let recorder = recorder.clone();
                std::thread::spawn(move || {
                    let process = recorder.process();
                    for _ in 0..250 {
                        let value = recorder.value();
                        recorder.send(process, 0, value).ok(0);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        recorder.flush().expect("flush");
        let history = History::read_jsonl(&path).expect("read");
        assert_eq!(history.events.len(), 4 * 250 * 2);
        assert!(history
            .events
            .windows(2)
            .all(|w| w[0].mono_ns <= w[1].mono_ns));
        let min_id = history.events.iter().filter_map(|e| e.kind.process()).min();
        assert!(min_id >= Some(100), "ids start at the base");
    }

    #[test]
    fn a_dropped_send_is_recorded_as_indefinite_and_codes_are_classified() {
        let recorder = Recorder::in_memory();
        drop(recorder.send(1, 0, 7));
        recorder
            .send(1, 0, 8)
            .error_code(ErrorCode::NotEnoughReplicas, 1);
        recorder
            .send(1, 0, 9)
            .error_code(ErrorCode::NotEnoughReplicas, 2);
        recorder
            .send(1, 0, 10)
            .error_code(ErrorCode::NotLeaderOrFollower, 1);
        let kinds: Vec<_> = recorder
            .history()
            .expect("memory")
            .events
            .into_iter()
            .map(|e| e.kind)
            .filter(|k| !matches!(k, EventKind::SendInvoke { .. }))
            .collect();
        assert!(matches!(&kinds[0], EventKind::SendInfo { error, .. } if error == "abandoned"));
        assert!(matches!(&kinds[1], EventKind::SendFail { .. }));
        assert!(
            matches!(&kinds[2], EventKind::SendInfo { .. }),
            "retried: indefinite"
        );
        assert!(matches!(&kinds[3], EventKind::SendInfo { .. }));
    }
}
