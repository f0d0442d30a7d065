//! The flusher: the one task per partition that touches its files.
//!
//! Each flush round takes the pending batches of the writer's segment (up to
//! `write_size_bytes_max x writes_in_flight_max` bytes), copies them once into aligned buffers
//! behind the retained partial last block, and writes from the block boundary with direct IO.
//! Rounds never overlap, so the partial block rewritten by the next round is never in flight
//! twice. Under `Durability::Fsync` every round is followed by one fdatasync covering all of it
//! (group commit). The same task rolls segments, writes recovery checkpoints, truncates and
//! closes.

use std::io;
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};
use std::time::Duration;

use borges_runtime::fs::{AlignedBuf, BufferedFile, DirectFile};
use borges_runtime::sync::Notify;
use borges_runtime::time::Instant;
use bytes::Bytes;

use crate::checkpoint::{
    RecoveryCheckpoint, CLEAN_SHUTDOWN_FILE, LEADER_EPOCH_FILE, RECOVERY_CHECKPOINT_FILE,
};
use crate::config::Durability;
use crate::index::{SegmentIndex, OFFSET_ENTRY_SIZE_BYTES, TIME_ENTRY_SIZE_BYTES};
use crate::log::{CommandKind, Gate, PartitionLog, Point};
use crate::segment::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::StorageError;

pub(crate) fn io_error(op: &'static str, path: &Path, source: io::Error) -> StorageError {
    StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    }
}

fn align_down(v: u64, align: u64) -> u64 {
    v - v % align
}

fn align_up(v: u64, align: u64) -> u64 {
    v.div_ceil(align) * align
}

/// The open files of the segment being written and where writing stands. Owned by the flusher
/// task of one partition (one core).
pub(crate) struct Writer {
    pub segment_base: i64,
    pub log_path: PathBuf,
    pub file: Rc<DirectFile>,
    pub index_file: BufferedFile,
    pub time_file: BufferedFile,
    /// Bytes of the segment written to the device.
    pub position: u64,
    /// The bytes of the partial last block, `[align_down(position), position)`.
    pub tail: Vec<u8>,
    pub allocated_bytes: u64,
    pub align: u64,
    pub persisted_offsets: usize,
    pub persisted_times: usize,
    pub last_sync: Instant,
    pub last_checkpoint: Instant,
}

/// The parts of a [`Writer`] that writing batches uses: disjoint from [`IndexParts`], so a
/// recovery checkpoint can run while batches keep being written.
pub(crate) struct WriteParts<'a> {
    segment_base: i64,
    log_path: &'a Path,
    file: &'a Rc<DirectFile>,
    align: u64,
    position: &'a mut u64,
    tail: &'a mut Vec<u8>,
    allocated_bytes: &'a mut u64,
}

/// The parts of a [`Writer`] that syncing and checkpointing use.
pub(crate) struct IndexParts<'a> {
    segment_base: i64,
    log_path: &'a Path,
    file: &'a Rc<DirectFile>,
    index_file: &'a mut BufferedFile,
    time_file: &'a mut BufferedFile,
    persisted_offsets: &'a mut usize,
    persisted_times: &'a mut usize,
    last_sync: &'a mut Instant,
    last_checkpoint: &'a mut Instant,
}

impl IndexParts<'_> {
    /// Writes index entries `[persisted..upto)` of both files and fdatasyncs them.
    pub async fn persist_index(
        &mut self,
        index: &SegmentIndex,
        offsets_upto: usize,
        times_upto: usize,
    ) -> Result<(), StorageError> {
        let wrote_offsets = append_entries(
            self.index_file,
            self.persisted_offsets,
            offsets_upto,
            OFFSET_ENTRY_SIZE_BYTES,
            |from, to| index.encode_offsets(from, to),
            self.log_path,
        )
        .await?;
        let wrote_times = append_entries(
            self.time_file,
            self.persisted_times,
            times_upto,
            TIME_ENTRY_SIZE_BYTES,
            |from, to| index.encode_times(from, to),
            self.log_path,
        )
        .await?;
        if wrote_offsets || wrote_times {
            for file in [&*self.index_file, &*self.time_file] {
                file.sync_data()
                    .await
                    .map_err(|e| io_error("fdatasync", self.log_path, e))?;
            }
        }
        Ok(())
    }
}

/// Writes entries `[*persisted..upto)` of one index file (encoded by `encode(from, to)`) at their
/// place and advances `*persisted`; false if there was nothing to write.
async fn append_entries(
    file: &BufferedFile,
    persisted: &mut usize,
    upto: usize,
    entry_size_bytes: usize,
    encode: impl FnOnce(usize, usize) -> Vec<u8>,
    log_path: &Path,
) -> Result<bool, StorageError> {
    if upto <= *persisted {
        return Ok(false);
    }
    file.write_all_at(
        encode(*persisted, upto),
        (*persisted * entry_size_bytes) as u64,
    )
    .await
    .map_err(|e| io_error("write", log_path, e))?;
    *persisted = upto;
    Ok(true)
}

impl Writer {
    /// Splits the writer into the parts used by batch writes and by sync/checkpoint.
    pub(crate) fn parts(&mut self) -> (WriteParts<'_>, IndexParts<'_>) {
        let Writer {
            segment_base,
            log_path,
            file,
            index_file,
            time_file,
            position,
            tail,
            allocated_bytes,
            align,
            persisted_offsets,
            persisted_times,
            last_sync,
            last_checkpoint,
        } = self;
        (
            WriteParts {
                segment_base: *segment_base,
                log_path,
                file,
                align: *align,
                position,
                tail,
                allocated_bytes,
            },
            IndexParts {
                segment_base: *segment_base,
                log_path,
                file,
                index_file,
                time_file,
                persisted_offsets,
                persisted_times,
                last_sync,
                last_checkpoint,
            },
        )
    }

    /// Writes index entries `[persisted..upto)` of both files and fdatasyncs them.
    pub async fn persist_index(
        &mut self,
        index: &SegmentIndex,
        offsets_upto: usize,
        times_upto: usize,
    ) -> Result<(), StorageError> {
        self.parts()
            .1
            .persist_index(index, offsets_upto, times_upto)
            .await
    }

    /// Opens (creating if needed) the files of segment `base` to continue writing at
    /// `end_position`: drops any bytes after it (torn or pre-allocated tail), keeps
    /// `persisted_offsets` / `persisted_times` index entries, loads the partial last block.
    pub async fn open(
        dir: &Path,
        base: i64,
        end_position: u64,
        persisted_offsets: usize,
        persisted_times: usize,
    ) -> Result<Writer, StorageError> {
        let log_path = segment_path(dir, base, LOG_SUFFIX);
        let file = DirectFile::open_write(&log_path, true)
            .await
            .map_err(|e| io_error("open", &log_path, e))?;
        let size = file
            .size()
            .await
            .map_err(|e| io_error("stat", &log_path, e))?;
        if size != end_position {
            file.truncate(end_position)
                .await
                .map_err(|e| io_error("truncate", &log_path, e))?;
        }
        let align = file.alignment();
        let tail_start = align_down(end_position, align);
        let tail = if tail_start < end_position {
            let len = (end_position - tail_start) as usize;
            let got = file
                .read_at(tail_start, len)
                .await
                .map_err(|e| io_error("read", &log_path, e))?;
            if got.len() != len {
                return Err(io_error(
                    "read",
                    &log_path,
                    io::Error::new(io::ErrorKind::UnexpectedEof, "short read of the last block"),
                ));
            }
            got.to_vec()
        } else {
            Vec::new()
        };
        let index_file = open_index(
            dir,
            base,
            INDEX_SUFFIX,
            persisted_offsets * OFFSET_ENTRY_SIZE_BYTES,
        )
        .await?;
        let time_file = open_index(
            dir,
            base,
            TIME_INDEX_SUFFIX,
            persisted_times * TIME_ENTRY_SIZE_BYTES,
        )
        .await?;
        let now = Instant::now();
        Ok(Writer {
            segment_base: base,
            log_path,
            file: Rc::new(file),
            index_file,
            time_file,
            position: end_position,
            tail,
            allocated_bytes: end_position,
            align,
            persisted_offsets,
            persisted_times,
            last_sync: now,
            last_checkpoint: now,
        })
    }

    /// Cuts the segment file to the written bytes (drops pre-allocation) and fdatasyncs it.
    pub async fn trim_and_sync(&self) -> Result<(), StorageError> {
        self.file
            .truncate(self.position)
            .await
            .map_err(|e| io_error("truncate", &self.log_path, e))?;
        self.file
            .sync_data()
            .await
            .map_err(|e| io_error("fdatasync", &self.log_path, e))
    }

    /// Closes every file.
    pub async fn close(self) -> Result<(), StorageError> {
        let path = self.log_path.clone();
        let map = |e| io_error("close", &path, e);
        self.index_file.close().await.map_err(map)?;
        self.time_file.close().await.map_err(map)?;
        match Rc::try_unwrap(self.file) {
            Ok(f) => f.close().await.map_err(map),
            Err(_) => Ok(()),
        }
    }
}

async fn open_index(
    dir: &Path,
    base: i64,
    suffix: &str,
    keep_bytes: usize,
) -> Result<BufferedFile, StorageError> {
    let path = segment_path(dir, base, suffix);
    let f = BufferedFile::open_write(&path, true)
        .await
        .map_err(|e| io_error("open", &path, e))?;
    let size = f.size().await.map_err(|e| io_error("stat", &path, e))?;
    if size != keep_bytes as u64 {
        f.truncate(keep_bytes as u64)
            .await
            .map_err(|e| io_error("truncate", &path, e))?;
    }
    Ok(f)
}

/// Copies consecutive byte slices into consecutive destination buffers.
struct StreamCopy<'a> {
    parts: Vec<&'a [u8]>,
    part: usize,
    at: usize,
}

impl StreamCopy<'_> {
    fn copy(&mut self, dst: &mut [u8]) {
        let mut filled = 0;
        while filled < dst.len() {
            let p = self.parts[self.part];
            let n = (p.len() - self.at).min(dst.len() - filled);
            dst[filled..filled + n].copy_from_slice(&p[self.at..self.at + n]);
            filled += n;
            self.at += n;
            if self.at == p.len() {
                self.part += 1;
                self.at = 0;
            }
        }
    }
}

/// Builds the aligned buffers of one round: `tail` then `batches`, starting at the aligned
/// position, cut every `chunk_size_bytes` (aligned); the last buffer is zero-padded. Full-size
/// chunks come from `spare` when it has one.
fn build_chunks(
    file: &DirectFile,
    start: u64,
    tail: &[u8],
    batches: &[Bytes],
    chunk_size_bytes: u64,
    spare: &mut Vec<AlignedBuf>,
) -> (Vec<(u64, AlignedBuf)>, Vec<u8>) {
    let align = file.alignment();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(batches.len() + 1);
    if !tail.is_empty() {
        parts.push(tail);
    }
    parts.extend(batches.iter().map(|b| &b[..]).filter(|b| !b.is_empty()));
    let stream_len: u64 = parts.iter().map(|p| p.len() as u64).sum();
    let mut copy = StreamCopy {
        parts,
        part: 0,
        at: 0,
    };
    let mut chunks = Vec::new();
    let mut done = 0u64;
    let mut new_tail = Vec::new();
    while done < stream_len {
        let len = chunk_size_bytes.min(stream_len - done) as usize;
        let buf = match spare.pop() {
            Some(mut buf) if len as u64 == chunk_size_bytes && buf.len() == len => {
                copy.copy(buf.as_bytes_mut());
                buf
            }
            _ => file.alloc_with(align_up(len as u64, align) as usize, |dst| {
                copy.copy(&mut dst[..len]);
                len
            }),
        };
        if done + len as u64 == stream_len {
            let keep = len - (len as u64 % align) as usize;
            new_tail = buf.as_bytes()[keep..len].to_vec();
        }
        chunks.push((start + done, buf));
        done += len as u64;
    }
    (chunks, new_tail)
}

/// Writes the chunks with at most `in_flight_max` writes at once; the first error wins.
/// Full-size buffers go back to the core's pool.
async fn write_chunks(
    file: &Rc<DirectFile>,
    chunks: Vec<(u64, AlignedBuf)>,
    in_flight_max: usize,
    chunk_size_bytes: u64,
    core: &crate::core::CoreStorage,
) -> io::Result<()> {
    type Write = borges_runtime::task::Task<(io::Result<()>, Option<AlignedBuf>)>;
    let mut tasks: std::collections::VecDeque<Write> = std::collections::VecDeque::new();
    let mut result = Ok(());
    let recycle = |r: (io::Result<()>, Option<AlignedBuf>), result: &mut io::Result<()>| {
        let (r, buf) = r;
        if let Some(buf) = buf.filter(|b| b.len() as u64 == chunk_size_bytes) {
            core.recycle_write_buffer(buf);
        }
        if result.is_ok() {
            *result = r;
        }
    };
    for (pos, buf) in chunks {
        if tasks.len() >= in_flight_max.max(1) {
            let done = tasks.pop_front().expect("non-empty").await;
            recycle(done, &mut result);
        }
        let f = file.clone();
        tasks.push_back(borges_runtime::task::spawn(async move {
            f.write_reusable_at(buf, pos).await
        }));
    }
    for t in tasks {
        let done = t.await;
        recycle(done, &mut result);
    }
    result
}

enum Step {
    Worked,
    Idle(Option<Duration>),
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
    async fn wake(&self) -> Result<Writer, StorageError> {
        let mut w = Writer::open(
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
        if let Files::Dormant(d) = &files {
            match d.wake().await {
                Ok(w) => {
                    files = Files::Open {
                        writer: Box::new(w),
                        _counted: OpenWriter::new(&log.core),
                    }
                }
                Err(e) => {
                    log.core.fail(&e.to_string());
                    log.stop_flusher(|| {
                        StorageError::LogDirFailed(log.core.data_dir().to_path_buf())
                    });
                    return;
                }
            }
        }
        let Files::Open { writer, .. } = &mut files else {
            return;
        };
        tracing::trace!(dir = %log.dir.display(), "flusher step");
        let step = log.flusher_step(writer).await;
        let dir = log.dir.clone();
        let crowded = log.core.writers_crowded();
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
                tracing::trace!("flusher idle");
                let wait = if crowded {
                    Duration::ZERO
                } else {
                    hibernate_after
                };
                let woke = borges_runtime::time::timeout(wait, work.changed_since(seen))
                    .await
                    .is_some();
                if !woke {
                    let Files::Open { writer: w, .. } = files else {
                        return;
                    };
                    match w.hibernate(&dir).await {
                        Ok(d) => files = Files::Dormant(d),
                        Err(e) => {
                            tracing::warn!("closing idle segment files: {e}");
                            return;
                        }
                    }
                    work.changed_since(seen).await;
                }
            }
            Step::Idle(Some(d)) => {
                tracing::trace!(?d, "flusher idle with deadline");
                borges_runtime::time::timeout(d, work.changed_since(seen)).await;
            }
        }
    }
}

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
            Err(e) => {
                let what = e.to_string();
                self.core.fail(&what);
                self.stop_flusher(|| {
                    StorageError::LogDirFailed(self.core.data_dir().to_path_buf())
                });
                Step::Stop
            }
        }
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
        let now = Instant::now();
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
        let command = self.state.borrow_mut().commands.pop_front();
        if let Some(c) = command {
            let stop = matches!(c.kind, CommandKind::Close);
            let result = match c.kind {
                CommandKind::Close => self.close_writer(w).await,
                CommandKind::Truncate(offset) => self.truncate_writer(w, offset).await,
            };
            let failed = result
                .as_ref()
                .err()
                .map(|e| matches!(e, StorageError::Io { .. }));
            *c.reply.borrow_mut() = Some(result);
            self.progress.notify_all();
            if failed == Some(true) {
                return Err(StorageError::LogDirFailed(
                    self.core.data_dir().to_path_buf(),
                ));
            }
            if stop {
                self.stop_flusher(|| StorageError::Closed);
                return Ok(Step::Stop);
            }
            return Ok(Step::Worked);
        }
        Ok(Step::Idle(self.next_deadline(w, now)))
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

    /// Writes one round of pending batches; false if there was nothing to write.
    async fn write_round(self: &Rc<Self>, w: &mut Writer) -> Result<bool, StorageError> {
        self.write_round_parts(&mut w.parts().0).await
    }

    async fn write_round_parts(
        self: &Rc<Self>,
        w: &mut WriteParts<'_>,
    ) -> Result<bool, StorageError> {
        let chunk = align_down(self.core.config.write_size_bytes_max as u64, w.align).max(w.align);
        let cap = chunk * self.core.tuning.writes_in_flight_max.max(1) as u64;
        let (batches, total, end_offset) = {
            let st = self.state.borrow();
            let mut batches = Vec::new();
            let mut total = 0u64;
            let mut end_offset = st.flushed.offset;
            for b in st.mem.range(st.first_pending()..) {
                if b.segment_base != w.segment_base || (total > 0 && total + b.size() > cap) {
                    break;
                }
                debug_assert_eq!(
                    b.position,
                    *w.position + total,
                    "pending batches are contiguous"
                );
                total += b.size();
                end_offset = b.last_offset + 1;
                batches.push(b.bytes.clone());
            }
            (batches, total, end_offset)
        };
        if batches.is_empty() {
            return Ok(false);
        }
        let needed = *w.position + total;
        self.ensure_allocated(w, needed).await?;
        let start = align_down(*w.position, w.align);
        let (chunks, new_tail) = {
            let mut spare = self.core.write_buffers.borrow_mut();
            build_chunks(w.file, start, w.tail, &batches, chunk, &mut spare)
        };
        drop(batches);
        let in_flight = self.core.tuning.writes_in_flight_max;
        write_chunks(w.file, chunks, in_flight, chunk, &self.core)
            .await
            .map_err(|e| io_error("write", w.log_path, e))?;
        *w.position += total;
        *w.tail = new_tail;
        debug_assert_eq!(w.tail.len() as u64, *w.position % w.align);
        self.complete_flush(w, total, end_offset);
        Ok(true)
    }

    /// Accounts a completed round: flushed point, budgets, tail cache, waiters.
    fn complete_flush(self: &Rc<Self>, w: &WriteParts<'_>, total: u64, end_offset: i64) {
        let hw_moved = {
            let mut st = self.state.borrow_mut();
            if st.flusher_stopped {
                return;
            }
            st.flushed = Point {
                offset: end_offset,
                segment_base: w.segment_base,
                position: *w.position,
            };
            st.unflushed_bytes -= total;
            st.cached_bytes += total;
            st.advance_hw()
        };
        self.core.sub_unflushed(total);
        self.core.add_cached(self, end_offset, total);
        self.core.enforce_tail_budget();
        self.progress.notify_all();
        if hw_moved {
            self.changes.notify_all();
        }
    }

    async fn ensure_allocated(
        &self,
        w: &mut WriteParts<'_>,
        needed: u64,
    ) -> Result<(), StorageError> {
        if needed <= *w.allocated_bytes {
            return Ok(());
        }
        // Grow by what the segment already holds (doubling), within [min step, max step]: the
        // space reserved ahead never exceeds what was written, so many quiet partitions cannot
        // fill a disk with reservations.
        let tuning = &self.core.tuning;
        let step = (*w.allocated_bytes)
            .clamp(
                tuning.preallocate_step_min_bytes,
                tuning
                    .preallocate_step_bytes
                    .max(tuning.preallocate_step_min_bytes),
            )
            .max(w.align);
        let target = align_up(needed.max(*w.allocated_bytes + step), w.align);
        w.file
            .pre_allocate(target, false)
            .await
            .map_err(|e| io_error("pre-allocate", w.log_path, e))?;
        *w.allocated_bytes = target;
        Ok(())
    }

    /// fdatasync of everything flushed so far in the writer's segment.
    async fn sync_writer(&self, w: &mut Writer) -> Result<(), StorageError> {
        self.sync_parts(&mut w.parts().1).await
    }

    async fn sync_parts(&self, w: &mut IndexParts<'_>) -> Result<(), StorageError> {
        let target = self.state.borrow().flushed;
        w.file
            .sync_data()
            .await
            .map_err(|e| io_error("fdatasync", w.log_path, e))?;
        *w.last_sync = Instant::now();
        self.mark_synced(target);
        Ok(())
    }

    fn mark_synced(&self, target: Point) {
        let hw_moved = {
            let mut st = self.state.borrow_mut();
            if target.offset > st.synced.offset
                || (target.offset == st.synced.offset
                    && target.segment_base > st.synced.segment_base)
            {
                st.synced = target;
            }
            st.advance_hw()
        };
        self.progress.notify_all();
        if hw_moved {
            self.changes.notify_all();
        }
    }

    /// Finalizes the writer's (closed, fully written) segment and opens the next one.
    async fn roll_writer(&self, w: &mut Writer) -> Result<(), StorageError> {
        let base = w.segment_base;
        let (mut index, next_base) = {
            let mut st = self.state.borrow_mut();
            let seg = st.segments.get_mut(&base).expect("writer segment exists");
            let index = seg
                .live
                .take()
                .expect("unfinalized segment has a live index");
            let next_base = st
                .segments
                .range(base + 1..)
                .next()
                .map(|(b, _)| *b)
                .expect("a closed segment has a successor");
            (index, next_base)
        };
        let next_rel = (next_base - base) as u32;
        index.push_time_entry(base, next_rel);
        w.trim_and_sync().await?;
        w.persist_index(&index, index.offsets.len(), index.times.len())
            .await?;
        let dir = self.dir.clone();
        let next = Writer::open(&dir, next_base, 0, 0, 0).await?;
        borges_runtime::fs::sync_dir_async(&dir)
            .await
            .map_err(|e| io_error("fsync directory", &dir, e))?;
        let old = std::mem::replace(w, next);
        old.close().await?;
        self.mark_synced(Point {
            offset: next_base,
            segment_base: next_base,
            position: 0,
        });
        {
            let mut st = self.state.borrow_mut();
            if st.flushed.offset == next_base {
                st.flushed = Point {
                    offset: next_base,
                    segment_base: next_base,
                    position: 0,
                };
            }
        }
        self.checkpoint(w).await
    }

    /// Writes the recovery-point checkpoint for the synced point (index entries first).
    pub(crate) async fn checkpoint(&self, w: &mut Writer) -> Result<(), StorageError> {
        self.checkpoint_parts(&mut w.parts().1).await
    }

    async fn checkpoint_parts(&self, w: &mut IndexParts<'_>) -> Result<(), StorageError> {
        let (cp, index, epochs) = {
            let mut st = self.state.borrow_mut();
            st.checkpoint_requested = false;
            let synced = st.synced;
            assert_eq!(
                synced.segment_base, w.segment_base,
                "synced point is in the writer's segment"
            );
            let seg = &st.segments[&w.segment_base];
            let index = seg.live.clone().unwrap_or_default();
            let cp = RecoveryCheckpoint {
                log_start_offset: st.log_start_offset,
                offset: synced.offset,
                segment_base: synced.segment_base,
                position: synced.position,
                index_entries: index.offsets_before(w.segment_base, synced.offset) as u32,
                time_index_entries: index.times_before(w.segment_base, synced.offset) as u32,
            };
            let epochs = st.epochs_dirty.then(|| st.epochs.encode());
            st.epochs_dirty = false;
            (cp, index, epochs)
        };
        w.persist_index(
            &index,
            cp.index_entries as usize,
            cp.time_index_entries as usize,
        )
        .await?;
        let path = self.dir.join(RECOVERY_CHECKPOINT_FILE);
        borges_runtime::fs::replace_file(&path, cp.encode(), false)
            .await
            .map_err(|e| io_error("write checkpoint", &path, e))?;
        if let Some(bytes) = epochs {
            let path = self.dir.join(LEADER_EPOCH_FILE);
            borges_runtime::fs::replace_file(&path, bytes, false)
                .await
                .map_err(|e| io_error("write epochs", &path, e))?;
        }
        *w.last_checkpoint = Instant::now();
        self.state.borrow_mut().last_checkpoint = Some(cp);
        Ok(())
    }

    /// Clean shutdown of the files: everything written and synced, file trimmed, checkpoint at
    /// the log end, clean-shutdown marker.
    async fn close_writer(&self, w: &mut Writer) -> Result<(), StorageError> {
        w.trim_and_sync().await?;
        let flushed = self.state.borrow().flushed;
        self.mark_synced(flushed);
        self.checkpoint(w).await?;
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        borges_runtime::fs::replace_file(&marker, Vec::new(), true)
            .await
            .map_err(|e| io_error("write marker", &marker, e))
    }
}
