//! The flusher task's loop.
//!
//! Contract: one task per partition owns the [`Writer`] and is the only code that mutates the
//! partition's files. Each step does one thing, in this order of priority: roll a finished
//! segment; the periodic fdatasync / recovery checkpoint when due (beside write rounds unless
//! durability is `fsync`); a write round (followed by its group-commit fdatasync under
//! `fsync`); one queued command (truncate, close). With nothing to do it waits for work or the
//! next deadline; idle for `HIBERNATE_AFTER` (at once when the core's writers are crowded) it
//! closes its files and reopens them on the next work. An error that left nothing half-done and
//! may go away — out of space (`NoSpace`: the core's directory turns read-only) or out of
//! descriptors (`TooManyOpenFiles`) — is retried after a back-off (`disk_probe_interval_ms`, or
//! sooner when the directory's state changes; `DESCRIPTORS_RETRY`); pending batches stay
//! pending and their acknowledgements wait. While the directory is read-only queued commands
//! (close) run before pending batches, which a close then abandons unacknowledged. Every other
//! error of a step fails the core's log directory: every waiter and queued command of this log
//! gets `LogDirFailed` and the task ends.

use std::path::Path;
use std::rc::{Rc, Weak};
use std::time::Duration;

use borges_runtime::sync::Notify;
use borges_runtime::time::Instant;

use super::Writer;
use crate::config::Durability;
use crate::core::CoreStorage;
use crate::log::{CommandKind, Gate, PartitionLog};
use crate::StorageError;

enum Step {
    Worked,
    Idle(Option<Duration>),
    /// An operation failed for want of space or descriptors: retry it after this long.
    Backoff(Duration),
    Stop,
}

/// Starts the flusher task of `log`, which owns `writer` from now on.
pub(crate) fn spawn_flusher(log: &Rc<PartitionLog>, writer: Writer) {
    let weak = Rc::downgrade(log);
    let work = log.work.clone();
    let exited = log.flusher_exited.clone();
    borges_runtime::task::spawn(async move {
        run_flusher(weak, work, writer).await;
        exited.set(true);
    })
    .detach();
}

/// How long a partition's flusher stays idle before it closes the segment files (they are
/// reopened on the next append), so that idle partitions hold no file descriptors.
const HIBERNATE_AFTER: Duration = Duration::from_secs(5);

/// The flusher's files: open, or closed while the partition is idle.
enum Files {
    /// The writer, and its place in the core's count of open writers.
    Open {
        writer: Box<Writer>,
        _counted: OpenWriter,
    },
    Dormant(Dormant),
}

/// What reopening a writer needs.
struct Dormant {
    dir: std::path::PathBuf,
    segment_base: i64,
    position: u64,
    persisted_offsets: usize,
    persisted_times: usize,
    last_sync: Instant,
    last_checkpoint: Instant,
}

impl Writer {
    /// Closes the files, keeping what is needed to reopen them where they were.
    async fn hibernate(self, dir: &Path) -> Result<Dormant, StorageError> {
        let dormant = Dormant {
            dir: dir.to_path_buf(),
            segment_base: self.segment_base,
            position: self.position,
            persisted_offsets: self.persisted_offsets,
            persisted_times: self.persisted_times,
            last_sync: self.last_sync,
            last_checkpoint: self.last_checkpoint,
        };
        self.close().await?;
        Ok(dormant)
    }
}

impl Dormant {
    async fn wake(&self, core: &CoreStorage) -> Result<Writer, StorageError> {
        let mut w = Writer::open(
            core,
            &self.dir,
            self.segment_base,
            self.position,
            self.persisted_offsets,
            self.persisted_times,
        )
        .await?;
        w.last_sync = self.last_sync;
        w.last_checkpoint = self.last_checkpoint;
        Ok(w)
    }
}

/// Counts a flusher's open files on its core for as long as they are open.
struct OpenWriter(Rc<crate::core::CoreStorage>);

impl OpenWriter {
    fn new(core: &Rc<crate::core::CoreStorage>) -> OpenWriter {
        core.open_writers.set(core.open_writers.get() + 1);
        OpenWriter(core.clone())
    }
}

impl Drop for OpenWriter {
    fn drop(&mut self) {
        self.0
            .open_writers
            .set(self.0.open_writers.get().saturating_sub(1));
    }
}

async fn run_flusher(weak: Weak<PartitionLog>, work: Rc<Notify>, writer: Writer) {
    let Some(log) = weak.upgrade() else {
        return;
    };
    let mut files = Files::Open {
        writer: Box::new(writer),
        _counted: OpenWriter::new(&log.core),
    };
    drop(log);
    // A partition that has nothing to do right after opening closes its files at once.
    let mut hibernate_after = Duration::ZERO;
    loop {
        let seen = work.generation();
        let Some(log) = weak.upgrade() else {
            return;
        };
        let step = match &mut files {
            Files::Dormant(d) => match d.wake(&log.core).await {
                Ok(w) => {
                    files = Files::Open {
                        writer: Box::new(w),
                        _counted: OpenWriter::new(&log.core),
                    };
                    continue;
                }
                Err(e) => log.wake_failed(e),
            },
            Files::Open { writer, .. } => {
                tracing::trace!(dir = %log.dir.display(), "flusher step");
                log.flusher_step(writer).await
            }
        };
        let dir = log.dir.clone();
        let crowded = log.core.writers_crowded();
        let core = log.core.clone();
        drop(log);
        match step {
            Step::Worked => {
                hibernate_after = HIBERNATE_AFTER;
                borges_runtime::task::yield_now().await
            }
            Step::Stop => {
                if let Files::Open { writer: w, .. } = files {
                    if let Err(e) = w.close().await {
                        tracing::warn!("closing segment files: {e}");
                    }
                }
                return;
            }
            Step::Idle(None) => {
                let wait = if crowded {
                    Duration::ZERO
                } else {
                    hibernate_after
                };
                if !idle_until_wanted(&core, &work, seen, wait).await {
                    let Some(dormant) = hibernate(files, &dir).await else {
                        return;
                    };
                    files = dormant;
                    work.changed_since(seen).await;
                }
            }
            Step::Idle(Some(d)) => {
                idle(&core, &work, seen, d).await;
            }
            Step::Backoff(d) => backoff(&core, d).await,
        }
    }
}

/// Closes the files of an idle flusher; `None` if they could not be closed (the flusher ends).
async fn hibernate(files: Files, dir: &Path) -> Option<Files> {
    let Files::Open { writer, .. } = files else {
        return Some(files);
    };
    match writer.hibernate(dir).await {
        Ok(d) => Some(Files::Dormant(d)),
        Err(e) => {
            tracing::warn!("closing idle segment files: {e}");
            None
        }
    }
}

/// Waits up to `wait` (of the core's clock) for work; true if work came.
async fn idle(core: &CoreStorage, work: &Notify, seen: u64, wait: Duration) -> bool {
    tracing::trace!(?wait, "flusher idle");
    core.clock
        .timeout(wait, work.changed_since(seen))
        .await
        .is_some()
}

/// [`idle`], but also ends (false) when another flusher of the core wants a writer's
/// descriptors: an idle flusher then closes its files.
async fn idle_until_wanted(core: &CoreStorage, work: &Notify, seen: u64, wait: Duration) -> bool {
    let wanted = core.writer_wanted.generation();
    let work_came = async { idle(core, work, seen, wait).await };
    let slot_wanted = async {
        core.writer_wanted.changed_since(wanted).await;
        false
    };
    futures_lite::future::or(work_came, slot_wanted).await
}

/// Waits `wait` (of the core's clock) before retrying an operation that failed for want of
/// space or descriptors, or less if the state of the log directory changes meanwhile.
async fn backoff(core: &CoreStorage, wait: Duration) {
    let seen = core.disk_state_changes().generation();
    core.clock
        .timeout(wait, core.disk_state_changes().changed_since(seen))
        .await;
}

/// How long a flusher waits before retrying after running out of descriptors.
const DESCRIPTORS_RETRY: Duration = Duration::from_millis(100);

impl PartitionLog {
    async fn flusher_step(self: &Rc<Self>, w: &mut Writer) -> Step {
        if self.state.borrow().flusher_stopped {
            return Step::Stop;
        }
        if self.core.is_failed() {
            self.stop_flusher(|| StorageError::LogDirFailed(self.core.data_dir().to_path_buf()));
            return Step::Stop;
        }
        match self.flusher_work(w).await {
            Ok(step) => step,
            Err(e) => match self.transient_backoff(&e) {
                Some(wait) => Step::Backoff(wait),
                None => {
                    self.core.fail(&e.to_string());
                    self.stop_flusher(|| {
                        StorageError::LogDirFailed(self.core.data_dir().to_path_buf())
                    });
                    Step::Stop
                }
            },
        }
    }

    /// For an error that leaves nothing half-done and may go away — out of space (the
    /// directory turns read-only) or out of descriptors — how long to wait before retrying;
    /// `None` for every other error, which fails the log directory.
    fn transient_backoff(&self, e: &StorageError) -> Option<Duration> {
        match e {
            StorageError::NoSpace { .. } => {
                self.core.out_of_space(&e.to_string());
                Some(Duration::from_millis(
                    self.core.config.disk_probe_interval_ms,
                ))
            }
            StorageError::TooManyOpenFiles { .. } => {
                tracing::warn!(dir = %self.dir.display(), "flusher retries later: {e}");
                Some(DESCRIPTORS_RETRY)
            }
            _ => None,
        }
    }

    /// Reopening a hibernated writer failed: retry later when it may go away (a queued close
    /// then gets the error instead of waiting for it), else fail the directory.
    fn wake_failed(&self, e: StorageError) -> Step {
        let Some(wait) = self.transient_backoff(&e) else {
            self.core.fail(&e.to_string());
            self.stop_flusher(|| StorageError::LogDirFailed(self.core.data_dir().to_path_buf()));
            return Step::Stop;
        };
        let closing = {
            let st = self.state.borrow();
            st.commands
                .iter()
                .any(|c| matches!(c.kind, CommandKind::Close))
        };
        // The process or system is out of descriptors: a close answers that at once. The
        // core's own budget frees up as idle writers close, so that is waited for.
        let os_limit = matches!(
            &e,
            StorageError::TooManyOpenFiles { source, .. } if source.raw_os_error().is_some()
        );
        if closing && os_limit {
            let message = e.to_string();
            self.stop_flusher(|| StorageError::TooManyOpenFiles {
                op: "reopen to close",
                path: self.dir.clone(),
                source: std::io::Error::other(message.clone()),
            });
            return Step::Stop;
        }
        Step::Backoff(wait)
    }

    fn stop_flusher(&self, err: impl Fn() -> StorageError) {
        let mut st = self.state.borrow_mut();
        st.flusher_stopped = true;
        st.gate = Gate::Closed;
        for c in st.commands.drain(..) {
            *c.reply.borrow_mut() = Some(Err(err()));
        }
        drop(st);
        self.progress.notify_all();
    }

    async fn flusher_work(self: &Rc<Self>, w: &mut Writer) -> Result<Step, StorageError> {
        let now = self.core.clock.now();
        // A read-only directory may never take the pending batches: commands (close) do not
        // wait for them.
        if self.core.is_read_only() && !self.state.borrow().commands.is_empty() {
            return self.run_queued_command(w).await;
        }
        if self.writer_segment_done(w) {
            self.roll_writer(w).await?;
            return Ok(Step::Worked);
        }
        let (sync_now, checkpoint_now) = self.periodic_due(w, now);
        if (sync_now || checkpoint_now)
            && self.state.borrow().config.durability != Durability::Fsync
        {
            self.periodic_while_writing(w, sync_now, checkpoint_now)
                .await?;
            return Ok(Step::Worked);
        }
        if sync_now {
            self.sync_writer(w).await?;
            return Ok(Step::Worked);
        }
        if checkpoint_now {
            self.checkpoint(w).await?;
            return Ok(Step::Worked);
        }
        if self.write_round(w).await? {
            if self.state.borrow().config.durability == Durability::Fsync {
                self.sync_writer(w).await?;
            }
            return Ok(Step::Worked);
        }
        if !self.state.borrow().commands.is_empty() {
            return self.run_queued_command(w).await;
        }
        Ok(Step::Idle(self.next_deadline(w, now)))
    }

    /// Runs the first queued command and replies to it. A transient failure (out of space or
    /// descriptors) is the command's answer only; any other fails the log directory.
    async fn run_queued_command(self: &Rc<Self>, w: &mut Writer) -> Result<Step, StorageError> {
        let Some(c) = self.state.borrow_mut().commands.pop_front() else {
            return Ok(Step::Worked);
        };
        let stop = matches!(c.kind, CommandKind::Close);
        let result = match c.kind {
            CommandKind::Close => self.close_writer(w).await,
            CommandKind::Truncate(offset) => self.truncate_writer(w, offset).await,
            CommandKind::RestartAt(offset) => self.restart_writer(w, offset).await,
        };
        let fatal = match &result {
            Err(e @ StorageError::NoSpace { .. }) => {
                self.core.out_of_space(&e.to_string());
                false
            }
            Err(e) => matches!(e, StorageError::Io { .. }),
            Ok(()) => false,
        };
        *c.reply.borrow_mut() = Some(result);
        self.progress.notify_all();
        if fatal {
            return Err(StorageError::LogDirFailed(
                self.core.data_dir().to_path_buf(),
            ));
        }
        if stop {
            self.stop_flusher(|| StorageError::Closed);
            return Ok(Step::Stop);
        }
        Ok(Step::Worked)
    }

    /// The periodic fdatasync and recovery checkpoint (several syncs of the log, index and
    /// checkpoint files) while write rounds go on beside them, so that acknowledgements waiting
    /// for their batches to be written are not held up by it. Under `Durability::Fsync` every
    /// round syncs anyway and this is not used.
    async fn periodic_while_writing(
        self: &Rc<Self>,
        w: &mut Writer,
        sync: bool,
        checkpoint: bool,
    ) -> Result<(), StorageError> {
        let (mut write, mut index) = w.parts();
        let done = std::cell::Cell::new(false);
        let periodic = async {
            let result = async {
                if sync {
                    self.sync_parts(&mut index).await?;
                }
                if checkpoint {
                    self.checkpoint_parts(&mut index).await?;
                }
                Ok::<(), StorageError>(())
            }
            .await;
            done.set(true);
            // Wakes the write loop below if it is waiting for appends.
            self.work.notify_all();
            result
        };
        let writes = async {
            while !done.get() {
                let seen = self.work.generation();
                if self.state.borrow().flusher_stopped {
                    break;
                }
                if !self.write_round_parts(&mut write).await? {
                    // Nothing to write: wait for an append or the end of the periodic work.
                    self.work.changed_since(seen).await;
                }
            }
            Ok::<(), StorageError>(())
        };
        let (periodic, writes) = futures_lite::future::zip(periodic, writes).await;
        periodic.and(writes)
    }

    /// The writer's segment is closed and fully written: time to finalize it and move on.
    fn writer_segment_done(&self, w: &Writer) -> bool {
        let st = self.state.borrow();
        let seg = &st.segments[&w.segment_base];
        seg.closed && w.position == seg.size_bytes
    }

    /// This partition's checkpoint period: `recovery_checkpoint_interval_ms`, stretched so that
    /// the partitions of a core with open files write at most `recovery_checkpoints_per_s_max`
    /// checkpoints a second between them.
    fn checkpoint_interval(&self) -> Duration {
        let config = &self.core.config;
        let writers = self.core.open_writers.get() as u64;
        let spread_ms =
            writers.saturating_mul(1000) / u64::from(config.recovery_checkpoints_per_s_max.max(1));
        Duration::from_millis(config.recovery_checkpoint_interval_ms.max(spread_ms))
    }

    /// (sync now, checkpoint now) from the timers and requests.
    fn periodic_due(&self, w: &Writer, now: Instant) -> (bool, bool) {
        let st = self.state.borrow();
        let unsynced = st.flushed.offset > st.synced.offset;
        let interval_due = st.config.durability == Durability::Interval
            && now.duration_since(w.last_sync)
                >= Duration::from_millis(st.config.flush_interval_ms);
        let requested = st.sync_target > st.synced.offset && st.flushed.offset >= st.sync_target;
        let checkpoint_due = st.checkpoint_requested
            || now.duration_since(w.last_checkpoint) >= self.checkpoint_interval();
        let checkpoint_useful = st.checkpoint_requested
            || st.epochs_dirty
            || unsynced
            || st.last_checkpoint.is_none_or(|c| {
                c.offset != st.synced.offset || c.log_start_offset != st.log_start_offset
            });
        let checkpoint_now = checkpoint_due && checkpoint_useful;
        (
            unsynced && (interval_due || requested || checkpoint_now),
            checkpoint_now,
        )
    }

    fn next_deadline(&self, w: &Writer, now: Instant) -> Option<Duration> {
        let st = self.state.borrow();
        let mut next: Option<Duration> = None;
        let mut consider = |at: Instant| {
            let d = at.saturating_duration_since(now);
            next = Some(next.map_or(d, |n| n.min(d)));
        };
        if st.config.durability == Durability::Interval && st.flushed.offset > st.synced.offset {
            consider(w.last_sync + Duration::from_millis(st.config.flush_interval_ms));
        }
        let stale = st.flushed.offset > st.synced.offset
            || st.epochs_dirty
            || st.last_checkpoint.is_none_or(|c| {
                c.offset != st.synced.offset || c.log_start_offset != st.log_start_offset
            });
        if stale {
            consider(w.last_checkpoint + self.checkpoint_interval());
        }
        next.map(|d| d.max(Duration::from_millis(1)))
    }
}
