//! `PartitionLog`: one partition's log, its append path and its public API.
//!
//! Write contract (also in docs/storage-format.md):
//! - `append`: synchronous; checks headers, assigns offsets, stamps base offset and leader epoch,
//!   keeps the batches as `Bytes` (no copy). Nothing is on disk yet.
//! - flush: the flusher task copied the batches once into aligned buffers and wrote them with
//!   direct IO: they survive a process crash (kill -9), not a power loss.
//! - sync: fdatasync done: they survive a power loss.
//!
//! All file mutation of a partition (writes, fdatasync, roll, checkpoints, truncation, close)
//! happens in its one flusher task (`writer/`), so there is never more than one actor on the
//! files; public async methods hand it commands.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use borges_protocol::batch::{self, BatchHeader};
use borges_runtime::sync::Notify;
use bytes::{Bytes, BytesMut};

use crate::checkpoint::{LeaderEpochCache, RecoveryCheckpoint};
use crate::config::{Durability, LogConfig};
use crate::core::CoreStorage;
use crate::replica::ReplicationBound;
use crate::scan::BATCH_SIZE_BYTES_MAX;
use crate::segment::SegmentMeta;
use crate::StorageError;

/// How long a producer's acknowledgement waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckLevel {
    /// acks=1: the batches are flushed (written with direct IO).
    Leader,
    /// acks=all: per durability policy (synced under `Fsync`, flushed otherwise).
    All,
}

/// Where consumer reads stop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadBound {
    /// Consumers: the high watermark.
    HighWatermark,
    /// Followers: the log end (including batches not yet flushed, served from memory).
    LogEnd,
}

/// The three offsets of a partition log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogOffsets {
    /// First offset still in the log.
    pub log_start_offset: i64,
    /// Consumers read below this: the end of what the durability policy made safe.
    pub high_watermark: i64,
    /// Offset the next appended record gets.
    pub log_end_offset: i64,
}

/// What `append` did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first appended record.
    pub base_offset: i64,
    /// Offset of the last appended record.
    pub last_offset: i64,
    /// Largest batch max_timestamp among the appended batches.
    pub max_timestamp: i64,
    /// Bytes appended.
    pub size_bytes: u64,
}

/// What `tick` did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TickOutcome {
    /// The active segment was rolled because of `segment_ms`.
    pub rolled: bool,
    /// Segments deleted by retention.
    pub segments_deleted: usize,
    /// Bytes deleted by retention.
    pub bytes_deleted: u64,
}

/// What `verify` checked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Closed segments checked.
    pub segments_checked: usize,
    /// Batches whose CRC was checked.
    pub batches_checked: u64,
    /// Bytes read.
    pub bytes_checked: u64,
}

/// A position in the log: the offset after some batch, and where that batch ends on disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Point {
    pub offset: i64,
    pub segment_base: i64,
    pub position: u64,
}

/// A batch held in memory: not yet flushed (pending), or flushed and kept for tail reads.
#[derive(Clone, Debug)]
pub(crate) struct MemBatch {
    pub base_offset: i64,
    pub last_offset: i64,
    pub segment_base: i64,
    pub position: u64,
    pub bytes: Bytes,
}

impl MemBatch {
    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// Work handed to the flusher task.
pub(crate) enum CommandKind {
    Truncate(i64),
    RestartAt(i64),
    Close,
}

/// Where a command's result lands.
pub(crate) type Reply = Rc<RefCell<Option<Result<(), StorageError>>>>;

pub(crate) struct Command {
    pub kind: CommandKind,
    pub reply: Reply,
}

/// The mutable state of a partition log. Borrowed briefly, never across an await.
pub(crate) struct LogState {
    pub config: LogConfig,
    pub segments: BTreeMap<i64, SegmentMeta>,
    pub log_start_offset: i64,
    pub flushed: Point,
    pub synced: Point,
    pub hw: Point,
    /// In offset order: flushed batches kept for tail reads, then pending ones.
    pub mem: VecDeque<MemBatch>,
    pub unflushed_bytes: u64,
    pub cached_bytes: u64,
    pub epochs: LeaderEpochCache,
    pub epochs_dirty: bool,
    pub corrupt: Option<(PathBuf, u64, String)>,
    /// No appends (closing, closed, or truncating).
    pub gate: Gate,
    pub sync_target: i64,
    pub checkpoint_requested: bool,
    pub commands: VecDeque<Command>,
    pub truncations: Vec<(u64, i64)>,
    pub truncation_generation: u64,
    pub last_checkpoint: Option<RecoveryCheckpoint>,
    pub flusher_stopped: bool,
    /// Compaction settings and state (`cleaner/`).
    pub cleaner: crate::cleaner::CleanerLogState,
    /// Replication's bound on the high watermark (None: replication factor 1).
    pub replication: Option<ReplicationBound>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Gate {
    Open,
    Truncating,
    Closed,
}

impl LogState {
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }

    pub fn active(&self) -> &SegmentMeta {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    pub fn active_mut(&mut self) -> &mut SegmentMeta {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    /// Moves the high watermark to what the policy allows; true if it moved.
    pub fn advance_hw(&mut self) -> bool {
        let target = match self.config.durability {
            Durability::Fsync => self.synced,
            Durability::Interval | Durability::None => self.flushed,
        };
        let hw = self.hw;
        let target = match &mut self.replication {
            Some(r) => r.limit(target, hw),
            None => target,
        };
        if target.offset > self.hw.offset {
            self.hw = target;
            return true;
        }
        false
    }

    pub fn corrupt_error(&self) -> Option<StorageError> {
        self.corrupt
            .as_ref()
            .map(|(path, position, reason)| StorageError::Corrupt {
                path: path.clone(),
                position: *position,
                reason: reason.clone(),
            })
    }

    pub fn total_size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size_bytes).sum()
    }
}

/// One partition's log; lives on one core (`Rc`, not `Send`).
pub struct PartitionLog {
    pub(crate) core: Rc<CoreStorage>,
    pub(crate) id: u64,
    pub(crate) dir: PathBuf,
    pub(crate) state: RefCell<LogState>,
    /// Wakes the flusher.
    pub(crate) work: Rc<Notify>,
    /// Bumped when flushed/synced move, on append, on truncation and on close (ack waiters,
    /// replica long polls).
    pub(crate) progress: Notify,
    /// Bumped when the high watermark or the log start moves (fetch long polls).
    pub(crate) changes: Notify,
    /// Set by the flusher task when it exits.
    pub(crate) flusher_exited: Rc<std::cell::Cell<bool>>,
}

impl PartitionLog {
    /// Opens (or creates) `dir` (= `<data>/<topic>-<partition>`) and recovers it.
    pub async fn open(
        core: &Rc<CoreStorage>,
        dir: PathBuf,
        config: LogConfig,
    ) -> Result<Rc<PartitionLog>, StorageError> {
        config.validate()?;
        if dir.exists() {
            crate::truncation::restart_before_recovery(core, &dir).await?;
        }
        let log = crate::recovery::open_log(core, dir, config).await?;
        crate::truncation::finish_interrupted(&log).await?;
        Ok(log)
    }

    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn check_writable(&self, st: &LogState) -> Result<(), StorageError> {
        self.core.check_writable()?;
        if let Some(e) = st.corrupt_error() {
            return Err(e);
        }
        match st.gate {
            Gate::Open => Ok(()),
            Gate::Truncating => Err(StorageError::Busy {
                bytes_max: self.core.config.write_buffer_bytes_max,
            }),
            Gate::Closed => Err(StorageError::Closed),
        }
    }

    /// Synchronous (no await): checks each batch header (magic, length, count; CRC already
    /// checked by the broker but cheap header checks are redone), assigns offsets, stamps base
    /// offset and leader epoch into each batch (outside the CRC), keeps the batches as `Bytes`
    /// (no copy) for the flusher and the tail cache. Returns Busy when the core's write buffer
    /// budget is full.
    pub fn append(
        &self,
        batches: Vec<BytesMut>,
        leader_epoch: i32,
    ) -> Result<AppendInfo, StorageError> {
        self.append_placed(batches, Some(leader_epoch))
    }

    /// `append` (`leader_epoch` Some: offsets and epoch stamped) or a follower's append (None:
    /// the batches keep the leader's, checked by `check_follower_batches`).
    pub(crate) fn append_placed(
        &self,
        batches: Vec<BytesMut>,
        leader_epoch: Option<i32>,
    ) -> Result<AppendInfo, StorageError> {
        let mut st = self.state.borrow_mut();
        self.check_writable(&st)?;
        let mut headers = Vec::with_capacity(batches.len());
        let mut total = 0u64;
        for b in &batches {
            let h = check_header(b)?;
            total += h.size_bytes() as u64;
            headers.push(h);
        }
        if headers.is_empty() {
            return Err(StorageError::InvalidBatch(batch::BatchError::Truncated {
                needed: batch::BATCH_HEADER_SIZE_BYTES as u64,
                available: 0,
            }));
        }
        if leader_epoch.is_none() {
            Self::check_follower_batches(&st, &batches, &headers)?;
        }
        if !self.core.has_room(total) {
            return Err(StorageError::Busy {
                bytes_max: self.core.config.write_buffer_bytes_max,
            });
        }
        let now_ms = self.core.clock.now_ms();
        let mut info = AppendInfo {
            base_offset: st.log_end_offset(),
            last_offset: 0,
            max_timestamp: crate::index::NO_TIMESTAMP,
            size_bytes: total,
        };
        for (b, h) in batches.into_iter().zip(headers) {
            let epoch = leader_epoch.unwrap_or(h.partition_leader_epoch);
            let placed = append_one(&mut st, b, &h, epoch, now_ms);
            info.last_offset = placed.last_offset;
            info.max_timestamp = info.max_timestamp.max(h.max_timestamp);
        }
        st.unflushed_bytes += total;
        self.core.add_unflushed(total);
        drop(st);
        self.work.notify_all();
        self.progress.notify_all();
        Ok(info)
    }

    /// Resolves when room for `size_bytes` exists in the core's write budget (or the log
    /// directory failed or is read-only: the next append then reports it).
    pub async fn wait_writable(&self, size_bytes: u64) {
        loop {
            let seen = self.core.writable.generation();
            let failed = self.core.failure.generation();
            if self.core.has_room(size_bytes) || self.core.check_writable().is_err() {
                return;
            }
            futures_lite::future::or(
                self.core.writable.changed_since(seen),
                self.core.failure.changed_since(failed),
            )
            .await;
        }
    }

    /// Resolves when `last_offset` is flushed (Leader) or per policy (All); error if the log
    /// dir failed, the log closed, or a truncation removed `last_offset` meanwhile. Call it
    /// right after `append` (no await in between) so that a truncation cannot slip in unseen.
    pub async fn wait_acked(&self, last_offset: i64, level: AckLevel) -> Result<(), StorageError> {
        let since = self.state.borrow().truncation_generation;
        loop {
            let seen = self.progress.generation();
            let failed = self.core.failure.generation();
            self.core.check_failed()?;
            {
                let st = self.state.borrow();
                if st
                    .truncations
                    .iter()
                    .any(|&(g, end)| g > since && end <= last_offset)
                {
                    return Err(StorageError::Truncated {
                        offset: last_offset,
                    });
                }
                let done = match (level, st.config.durability) {
                    (AckLevel::All, Durability::Fsync) => st.synced.offset,
                    _ => st.flushed.offset,
                };
                if done > last_offset {
                    return Ok(());
                }
                if st.gate == Gate::Closed {
                    return Err(StorageError::Closed);
                }
            }
            futures_lite::future::or(
                self.progress.changed_since(seen),
                self.core.failure.changed_since(failed),
            )
            .await;
        }
    }

    /// Log start, high watermark, log end.
    pub fn offsets(&self) -> LogOffsets {
        let st = self.state.borrow();
        LogOffsets {
            log_start_offset: st.log_start_offset,
            high_watermark: st.hw.offset,
            log_end_offset: st.log_end_offset(),
        }
    }

    /// Bumped whenever the high watermark (or log start) moves: for fetch long polls.
    pub fn changes(&self) -> &Notify {
        &self.changes
    }

    /// Bumped on every append and whenever the flushed or synced point moves: for replica
    /// fetches, which read to the log end.
    pub fn progress(&self) -> &Notify {
        &self.progress
    }

    /// Every batch before this offset is fdatasynced.
    pub fn synced_offset(&self) -> i64 {
        self.state.borrow().synced.offset
    }

    /// The durability policy (a follower under `Fsync` reports offsets only once synced).
    pub fn durability(&self) -> Durability {
        self.state.borrow().config.durability
    }

    /// Bytes of all segments (appended data, flushed or not).
    pub fn size_bytes(&self) -> u64 {
        self.state.borrow().total_size_bytes()
    }

    /// Number of segments, the active one included.
    pub fn segment_count(&self) -> usize {
        self.state.borrow().segments.len()
    }

    /// Leader-epoch cache for replication: the end offset of `epoch` (Kafka's
    /// OffsetForLeaderEpoch): (largest epoch <= `epoch`, start of the next epoch or the log end).
    pub fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        let st = self.state.borrow();
        st.epochs.end_offset_for(epoch, st.log_end_offset())
    }

    /// Replaces the per-partition settings (applied from the next append / flush round).
    pub async fn update_config(&self, config: LogConfig) -> Result<(), StorageError> {
        config.validate()?;
        self.state.borrow_mut().config = config;
        self.work.notify_all();
        Ok(())
    }

    /// Drops cached (flushed) batches that end before `end` from the front of the tail cache.
    pub(crate) fn evict_cached_before(&self, end: i64) {
        let mut st = self.state.borrow_mut();
        let mut freed = 0;
        while let Some(b) = st.mem.front() {
            if b.base_offset >= st.flushed.offset || b.last_offset >= end {
                break;
            }
            freed += b.size();
            st.mem.pop_front();
        }
        st.cached_bytes -= freed;
        drop(st);
        self.core.sub_cached(freed);
    }

    /// Drops every in-memory batch at or after `offset` and returns (unflushed, cached) bytes freed.
    pub(crate) fn drop_mem_from(&self, st: &mut LogState, offset: i64) {
        let mut unflushed = 0;
        let mut cached = 0;
        while st.mem.back().is_some_and(|b| b.last_offset >= offset) {
            let b = st.mem.pop_back().expect("checked non-empty");
            if b.base_offset >= st.flushed.offset {
                unflushed += b.size();
            } else {
                cached += b.size();
            }
        }
        st.unflushed_bytes -= unflushed;
        st.cached_bytes -= cached;
        if unflushed > 0 {
            self.core.sub_unflushed(unflushed);
        }
        self.core.sub_cached(cached);
    }

    /// Queues a command for the flusher and waits for its result.
    pub(crate) async fn run_command(&self, kind: CommandKind) -> Result<(), StorageError> {
        let reply: Reply = Rc::new(RefCell::new(None));
        {
            let mut st = self.state.borrow_mut();
            if st.flusher_stopped {
                return Err(StorageError::Closed);
            }
            st.commands.push_back(Command {
                kind,
                reply: reply.clone(),
            });
        }
        self.work.notify_all();
        loop {
            let seen = self.progress.generation();
            if let Some(result) = reply.borrow_mut().take() {
                return result;
            }
            if self.state.borrow().flusher_stopped {
                return Err(StorageError::Closed);
            }
            self.progress.changed_since(seen).await;
        }
    }

    /// Waits until `done(state)` holds, waking the flusher first; errors on failure or close.
    async fn wait_for(&self, done: impl Fn(&LogState) -> bool) -> Result<(), StorageError> {
        self.work.notify_all();
        loop {
            let seen = self.progress.generation();
            let failed = self.core.failure.generation();
            self.core.check_failed()?;
            {
                let st = self.state.borrow();
                if done(&st) {
                    return Ok(());
                }
                if st.flusher_stopped {
                    return Err(StorageError::Closed);
                }
            }
            futures_lite::future::or(
                self.progress.changed_since(seen),
                self.core.failure.changed_since(failed),
            )
            .await;
        }
    }

    /// Waits until every batch appended so far is written with direct IO.
    pub async fn flush(&self) -> Result<(), StorageError> {
        let target = self.state.borrow().log_end_offset();
        self.wait_for(|st| st.flushed.offset >= target).await
    }

    /// Waits until every batch appended so far is fdatasynced.
    pub async fn sync(&self) -> Result<(), StorageError> {
        let target = {
            let mut st = self.state.borrow_mut();
            let target = st.log_end_offset();
            st.sync_target = st.sync_target.max(target);
            target
        };
        self.wait_for(|st| st.synced.offset >= target).await
    }

    /// Clean shutdown: flush, sync, recovery checkpoint, clean-shutdown marker, close files.
    pub async fn close(&self) -> Result<(), StorageError> {
        {
            let mut st = self.state.borrow_mut();
            if st.flusher_stopped {
                drop(st);
                self.release_memory();
                // After a failed write nothing could be flushed: say so.
                return self.core.check_failed();
            }
            st.gate = Gate::Closed;
        }
        let result = self.run_command(CommandKind::Close).await;
        self.release_memory();
        result
    }

    /// Test hook: stops the flusher at once, abandoning unflushed batches and leaving the files
    /// as a process crash would (no trim, no checkpoint, no marker). Reopen the directory to
    /// run recovery.
    #[doc(hidden)]
    pub async fn crash_for_tests(&self) {
        {
            let mut st = self.state.borrow_mut();
            st.flusher_stopped = true;
            st.gate = Gate::Closed;
        }
        self.work.notify_all();
        while !self.flusher_exited.get() {
            borges_runtime::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        self.release_memory();
    }

    /// Frees the in-memory batches and forgets cached descriptors (after close).
    fn release_memory(&self) {
        let mut st = self.state.borrow_mut();
        self.drop_mem_from(&mut st, i64::MIN);
        let bases: Vec<i64> = st.segments.keys().copied().collect();
        drop(st);
        for base in bases {
            self.core.forget_file(self.id, base);
        }
        self.progress.notify_all();
        self.changes.notify_all();
    }

    /// Close and remove the partition directory.
    pub async fn delete(&self) -> Result<(), StorageError> {
        let closed = self.close().await;
        if let Err(e) = &closed {
            tracing::warn!(dir = %self.dir.display(), "deleting a log whose close failed: {e}");
        }
        let dir = self.dir.clone();
        borges_runtime::task::spawn_blocking(move || std::fs::remove_dir_all(&dir))
            .await
            .map_err(|source| StorageError::Io {
                op: "remove directory",
                path: self.dir.clone(),
                source,
            })?;
        if let Some(parent) = self.dir.parent() {
            let _ = self.core.sync_dir(parent).await;
        }
        Ok(())
    }

    /// Removes every record at or after `offset` (replication truncation). When `offset` falls
    /// inside a batch, that whole batch goes too (as Kafka): the log end becomes the batch's base
    /// offset, <= `offset`. Below the log start, the log is emptied and restarts at `offset`.
    /// Appends answer `Busy` while it runs.
    pub async fn truncate_to(&self, offset: i64) -> Result<(), StorageError> {
        // A cleaner swap replaces closed segment files: truncation waits for it to finish.
        self.wait_swap().await;
        {
            let mut st = self.state.borrow_mut();
            self.check_writable(&st)?;
            if offset >= st.log_end_offset() {
                // Nothing to cut, but an epoch begun at the log end (a former leader's) goes,
                // as Kafka does: else a follower would fetch with that epoch forever.
                if st.epochs.truncate_from_end(offset) {
                    st.epochs_dirty = true;
                    st.checkpoint_requested = true;
                }
                return Ok(());
            }
            st.gate = Gate::Truncating;
        }
        self.gated_command(CommandKind::Truncate(offset)).await
    }

    /// Empties the log and restarts it at `offset`, wherever that is (a follower whose log
    /// ends before the leader's log start: Kafka's `truncateFullyAndStartAt`). All or nothing
    /// across a crash, as `truncate_to`.
    pub async fn restart_at(&self, offset: i64) -> Result<(), StorageError> {
        {
            let mut st = self.state.borrow_mut();
            self.check_writable(&st)?;
            st.gate = Gate::Truncating;
        }
        self.gated_command(CommandKind::RestartAt(offset)).await
    }

    /// Runs a command with appends gated, reopening the gate afterwards.
    async fn gated_command(&self, kind: CommandKind) -> Result<(), StorageError> {
        let result = self.run_command(kind).await;
        let mut st = self.state.borrow_mut();
        if st.gate == Gate::Truncating {
            st.gate = Gate::Open;
        }
        result
    }

    /// Marks the partition corrupt: it refuses reads and appends from now on.
    pub(crate) fn mark_corrupt(&self, path: &Path, position: u64, reason: &str) -> StorageError {
        tracing::error!(
            dir = %self.dir.display(),
            file = %path.display(),
            position,
            "corrupt data in partition log: {reason}; the partition refuses to serve until repaired"
        );
        let mut st = self.state.borrow_mut();
        if st.corrupt.is_none() {
            st.corrupt = Some((path.to_path_buf(), position, reason.to_string()));
        }
        StorageError::Corrupt {
            path: path.to_path_buf(),
            position,
            reason: reason.to_string(),
        }
    }
}

/// Checks what `append` must know about a batch before assigning offsets.
fn check_header(b: &[u8]) -> Result<BatchHeader, StorageError> {
    let h = BatchHeader::parse(b)?;
    if h.size_bytes() != b.len() {
        return Err(if h.size_bytes() > b.len() {
            batch::BatchError::Truncated {
                needed: h.size_bytes() as u64,
                available: b.len() as u64,
            }
        } else {
            batch::BatchError::TrailingBytes((b.len() - h.size_bytes()) as u64)
        }
        .into());
    }
    if h.records_count == 0 {
        return Err(batch::BatchError::InvalidRecordCount {
            records_count: 0,
            last_offset_delta: h.last_offset_delta,
        }
        .into());
    }
    if h.size_bytes() > BATCH_SIZE_BYTES_MAX {
        return Err(batch::BatchError::TooLarge {
            size_bytes: h.size_bytes() as u64,
            size_bytes_max: BATCH_SIZE_BYTES_MAX as u64,
        }
        .into());
    }
    Ok(h)
}

/// Whether the active segment must roll before a batch of `size` bytes spanning
/// `last_offset_delta + 1` offsets is appended.
fn should_roll(st: &LogState, size: u64, last_offset_delta: i32, now_ms: i64) -> bool {
    let seg = st.active();
    if seg.is_empty() {
        return false;
    }
    let index_full = seg
        .live
        .as_ref()
        .is_some_and(|i| i.offsets.len() >= st.config.index_entries_max());
    let offsets_overflow =
        seg.next_offset + i64::from(last_offset_delta) - seg.base_offset > i64::from(u32::MAX / 2);
    let too_old = seg
        .first_append_ms
        .is_some_and(|t| now_ms.saturating_sub(t) >= st.config.segment_ms as i64);
    seg.size_bytes + size > st.config.segment_size_bytes
        || index_full
        || offsets_overflow
        || too_old
}

/// Closes the active segment and opens a new empty one at the log end (in memory; the
/// flusher creates the file).
pub(crate) fn roll_active(st: &mut LogState, now_ms: i64) {
    let leo = st.log_end_offset();
    st.active_mut().closed = true;
    st.segments.insert(
        leo,
        SegmentMeta::new_active(leo, crate::index::SegmentIndex::new(), now_ms),
    );
}

/// Places one checked batch at the log end.
fn append_one(
    st: &mut LogState,
    mut b: BytesMut,
    h: &BatchHeader,
    leader_epoch: i32,
    now_ms: i64,
) -> MemBatch {
    let size = h.size_bytes() as u64;
    if should_roll(st, size, h.last_offset_delta, now_ms) {
        roll_active(st, now_ms);
    }
    let interval = st.config.index_interval_bytes;
    let base_offset = st.log_end_offset();
    batch::set_base_offset(&mut b, base_offset);
    batch::set_partition_leader_epoch(&mut b, leader_epoch);
    let last_offset = base_offset + i64::from(h.last_offset_delta);
    let seg = st.active_mut();
    let position = seg.size_bytes;
    let segment_base = seg.base_offset;
    let index = seg
        .live
        .as_mut()
        .expect("the active segment has a live index");
    index.note_batch(
        interval,
        segment_base,
        (base_offset - segment_base) as u32,
        position as u32,
        size,
        h.max_timestamp,
    );
    seg.max_timestamp = index.max_timestamp;
    seg.max_timestamp_offset = index.max_timestamp_offset;
    seg.size_bytes += size;
    seg.next_offset = last_offset + 1;
    seg.first_append_ms.get_or_insert(now_ms);
    if st.epochs.assign(leader_epoch, base_offset) {
        st.epochs_dirty = true;
    }
    if let Some(r) = &mut st.replication {
        r.note_end(Point {
            offset: last_offset + 1,
            segment_base,
            position: position + size,
        });
    }
    let placed = MemBatch {
        base_offset,
        last_offset,
        segment_base,
        position,
        bytes: b.freeze(),
    };
    st.mem.push_back(placed.clone());
    placed
}
