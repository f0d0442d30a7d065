//! `CoreStorage`: what every partition log on one core shares — memory budgets, the open-file
//! cache and the descriptor budget, the tail-cache eviction order, and the state of the log
//! directory (writable, read-only because the disk is full, or failed).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};

use borges_runtime::fs::Disk;
use borges_runtime::sync::Notify;
use borges_runtime::time::Clock;

use crate::config::{StorageConfig, StorageTuning, DISK_FREE_RESUME_MARGIN_BYTES};
use crate::index::SegmentIndex;
use crate::log::PartitionLog;
use crate::segment::SegmentFile;
use crate::StorageError;

/// A segment opened for reading: its plain descriptor and, for finalized segments, its index
/// loaded from disk on first use. Lives on one core.
pub(crate) struct OpenSegment {
    pub file: Rc<SegmentFile>,
    pub index: RefCell<Option<Rc<SegmentIndex>>>,
}

type FileKey = (u64, i64);

/// Most bytes one tail-cache eviction ticket covers (the eviction granularity).
const TICKET_BYTES_MAX: u64 = 1 << 20;

/// LRU of open segment read descriptors, bounded by `open_files_max`.
#[derive(Default)]
struct FileCache {
    entries: HashMap<FileKey, (Rc<OpenSegment>, u64)>,
    order: BTreeMap<u64, FileKey>,
    tick: u64,
}

impl FileCache {
    fn get(&mut self, key: FileKey) -> Option<Rc<OpenSegment>> {
        self.tick += 1;
        let tick = self.tick;
        let (seg, used) = self.entries.get_mut(&key)?;
        self.order.remove(used);
        *used = tick;
        self.order.insert(tick, key);
        Some(seg.clone())
    }

    fn insert(&mut self, key: FileKey, seg: Rc<OpenSegment>, max: usize) {
        self.remove(key);
        while self.entries.len() >= max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
        self.tick += 1;
        self.order.insert(self.tick, key);
        self.entries.insert(key, (seg, self.tick));
    }

    fn remove(&mut self, key: FileKey) {
        if let Some((_, used)) = self.entries.remove(&key) {
            self.order.remove(&used);
        }
    }

    /// Drops the least recently used entry, returning it (to be dropped outside the borrow).
    fn evict_oldest(&mut self) -> Option<Rc<OpenSegment>> {
        let (_, oldest) = self.order.pop_first()?;
        self.entries.remove(&oldest).map(|(seg, _)| seg)
    }
}

/// Probes the free space of `core`'s directory every `disk_probe_interval_ms` of its clock,
/// for as long as the core exists.
fn spawn_disk_probe(core: &Rc<CoreStorage>) {
    let weak = Rc::downgrade(core);
    let clock = core.clock.clone();
    let interval = std::time::Duration::from_millis(core.config.disk_probe_interval_ms);
    borges_runtime::task::spawn(async move {
        loop {
            clock.sleep(interval).await;
            let Some(core) = weak.upgrade() else {
                return;
            };
            core.probe_disk();
        }
    })
    .detach();
}

/// The state of a core's log directory, as [`CoreStorage::disk_state`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DiskState {
    /// Appends are taken.
    Writable,
    /// The disk is full (an operation hit `ENOSPC`) or has less than `disk_free_bytes_min`
    /// free: appends and truncations are refused with `StorageError::DiskFull`; reads, and
    /// acknowledgements of what was already appended, go on. Becomes `Writable` by itself at
    /// the first free-space probe that sees `disk_free_bytes_min +
    /// DISK_FREE_RESUME_MARGIN_BYTES` free.
    ReadOnly {
        /// An operation hit `ENOSPC` (rather than the probe seeing too little space).
        out_of_space: bool,
        /// Free bytes the probe last saw.
        free_bytes: Option<u64>,
    },
    /// A write or fdatasync failed: every log on the core refuses appends and
    /// acknowledgements with `StorageError::LogDirFailed` until a restart.
    Failed {
        /// What failed.
        reason: String,
    },
}

impl DiskState {
    /// A short name for metrics and logs: `writable`, `read_only`, `failed`.
    pub fn name(&self) -> &'static str {
        match self {
            DiskState::Writable => "writable",
            DiskState::ReadOnly { .. } => "read_only",
            DiskState::Failed { .. } => "failed",
        }
    }
}

/// The three shares of a core's descriptor budget ([`StorageConfig::descriptors_max`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Share {
    /// Segment read descriptors (the read cache, and reads still holding evicted ones):
    /// `open_files_max`.
    Reads = 0,
    /// Writers' segment, index and time-index files: `WRITER_DESCRIPTORS x open_writers_max`.
    Writers = 1,
    /// Brief opens (checkpoints, directory fsyncs, scans, index loads):
    /// `TRANSIENT_DESCRIPTORS_MAX`.
    Transient = 2,
}

/// Descriptors counted against one share of the core's budget for as long as this lives.
pub(crate) struct Descriptors {
    core: Weak<CoreStorage>,
    share: Share,
    count: u64,
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        if let Some(core) = self.core.upgrade() {
            let open = &core.open_descriptors[self.share as usize];
            debug_assert!(open.get() >= self.count, "descriptor count underflow");
            open.set(open.get().saturating_sub(self.count));
        }
    }
}

/// Told the duration of each successful log fdatasync (see [`CoreStorage::observe_syncs`]).
type SyncObserver = Box<dyn Fn(std::time::Duration)>;

/// Per-core settings and shared state of every log on one core: memory budgets, open-file
/// cache, descriptor budget, the state of the log directory. Lives on one core (`Rc`, not
/// `Send`).
pub struct CoreStorage {
    data_dir: PathBuf,
    pub(crate) config: StorageConfig,
    pub(crate) tuning: StorageTuning,
    unflushed_bytes: Cell<u64>,
    tail_cache_bytes: Cell<u64>,
    state: RefCell<DiskState>,
    /// Bumped when the log directory fails.
    pub(crate) failure: Notify,
    /// Bumped on every change of [`DiskState`].
    state_changes: Notify,
    /// Bumped when a writer could not open for want of descriptors in the writers' share:
    /// idle flushers then close their files at once.
    pub(crate) writer_wanted: Notify,
    /// Storage descriptors open on this core per [`Share`] (counted by [`Descriptors`]).
    open_descriptors: [Cell<u64>; 3],
    /// Set on the core itself, to hand out [`Descriptors`] without an `Rc` in every call.
    this: RefCell<Weak<CoreStorage>>,
    /// Bumped when unflushed bytes shrink.
    pub(crate) writable: Notify,
    next_log_id: Cell<u64>,
    files: RefCell<FileCache>,
    /// Recycled full-size aligned write buffers, shared by the flushers of this core.
    pub(crate) write_buffers: RefCell<Vec<borges_runtime::fs::AlignedBuf>>,
    /// Eviction order of the tail cache: (log, cached up to this offset, bytes covered).
    tickets: RefCell<VecDeque<(Weak<PartitionLog>, i64, u64)>>,
    /// Flushers of this core holding their segment files open.
    pub(crate) open_writers: Cell<usize>,
    /// Where every file of this core's logs is opened, synced, renamed and removed.
    pub(crate) disk: Disk,
    /// Where this core's logs read the time and sleep.
    pub(crate) clock: Clock,
    /// Told the duration of every successful log fdatasync on this core (metrics).
    sync_observer: RefCell<Option<SyncObserver>>,
}

impl CoreStorage {
    /// Creates the per-core context; primes the device (runtime::fs::prime_device) in data_dir.
    pub async fn new(
        data_dir: &Path,
        config: StorageConfig,
    ) -> Result<Rc<CoreStorage>, StorageError> {
        CoreStorage::with_tuning(data_dir, config, StorageTuning::default()).await
    }

    /// [`CoreStorage::new`] with non-default tuning (benchmarks).
    pub async fn with_tuning(
        data_dir: &Path,
        config: StorageConfig,
        tuning: StorageTuning,
    ) -> Result<Rc<CoreStorage>, StorageError> {
        CoreStorage::with_seams(data_dir, config, tuning, Disk::Real, Clock::System).await
    }

    /// [`CoreStorage::with_tuning`] on a chosen disk and clock: tests pass a
    /// `Disk::Faulty` to inject faults and simulate power loss, and a manual clock to move time
    /// (flush intervals, checkpoint periods, hibernation, `segment_ms`).
    pub async fn with_seams(
        data_dir: &Path,
        config: StorageConfig,
        tuning: StorageTuning,
        disk: Disk,
        clock: Clock,
    ) -> Result<Rc<CoreStorage>, StorageError> {
        config.validate()?;
        borges_runtime::fs::prime_device(data_dir)
            .await
            .map_err(|source| StorageError::Io {
                op: "prime device",
                path: data_dir.to_path_buf(),
                source,
            })?;
        let core = Rc::new(CoreStorage {
            data_dir: data_dir.to_path_buf(),
            config,
            tuning,
            unflushed_bytes: Cell::new(0),
            tail_cache_bytes: Cell::new(0),
            state: RefCell::new(DiskState::Writable),
            failure: Notify::default(),
            state_changes: Notify::default(),
            writer_wanted: Notify::default(),
            open_descriptors: Default::default(),
            this: RefCell::new(Weak::new()),
            writable: Notify::default(),
            next_log_id: Cell::new(1),
            files: RefCell::new(FileCache::default()),
            tickets: RefCell::new(VecDeque::new()),
            write_buffers: RefCell::new(Vec::new()),
            open_writers: Cell::new(0),
            disk,
            clock,
            sync_observer: RefCell::new(None),
        });
        *core.this.borrow_mut() = Rc::downgrade(&core);
        core.probe_disk();
        spawn_disk_probe(&core);
        Ok(core)
    }

    /// Flushers holding segment files open (3 descriptors each).
    pub fn open_writers(&self) -> usize {
        self.open_writers.get()
    }

    /// Whether idle flushers should close their files at once: `open_writers_max` writers are
    /// open (a flusher that wants to open more waits for one of them to close).
    pub(crate) fn writers_crowded(&self) -> bool {
        self.open_writers.get() >= self.config.open_writers_max as usize
    }

    /// The most descriptors this core's storage holds at once
    /// ([`StorageConfig::descriptors_max`]).
    pub fn descriptors_max(&self) -> u64 {
        self.config.descriptors_max()
    }

    /// Storage descriptors open on this core now (never above [`Self::descriptors_max`]).
    pub fn open_descriptors(&self) -> u64 {
        self.open_descriptors.iter().map(Cell::get).sum()
    }

    fn share_max(&self, share: Share) -> u64 {
        match share {
            Share::Reads => u64::from(self.config.open_files_max),
            Share::Writers => {
                crate::config::WRITER_DESCRIPTORS * u64::from(self.config.open_writers_max)
            }
            Share::Transient => crate::config::TRANSIENT_DESCRIPTORS_MAX,
        }
    }

    /// Counts `count` descriptors about to be opened for `path` against `share` of the budget
    /// (for reads, evicting idle descriptors from the read cache first); `TooManyOpenFiles`
    /// (transient) if that share is spent.
    pub(crate) fn descriptors(
        &self,
        share: Share,
        count: u64,
        path: &Path,
    ) -> Result<Descriptors, StorageError> {
        let max = self.share_max(share);
        let open = &self.open_descriptors[share as usize];
        while open.get() + count > max {
            let evicted = match share {
                Share::Reads => self.files.borrow_mut().evict_oldest(),
                Share::Writers | Share::Transient => None,
            };
            if evicted.is_none() {
                if share == Share::Writers {
                    self.writer_wanted.notify_all();
                }
                return Err(StorageError::TooManyOpenFiles {
                    op: "open",
                    path: path.to_path_buf(),
                    source: std::io::Error::other(format!(
                        "this core's storage descriptors for {share:?} ({max}) are all in use"
                    )),
                });
            }
            // Dropped here: its descriptor closes unless a read still holds it.
            drop(evicted);
        }
        open.set(open.get() + count);
        Ok(Descriptors {
            core: self.this.borrow().clone(),
            share,
            count,
        })
    }

    /// Appended but not yet flushed bytes of every log on this core.
    pub fn unflushed_bytes(&self) -> u64 {
        self.unflushed_bytes.get()
    }

    /// Flushed batches held in memory for tail reads by every log on this core.
    pub fn tail_cache_bytes(&self) -> u64 {
        self.tail_cache_bytes.get()
    }

    /// Open segment read descriptors in the cache (not counting ones held by reads in progress).
    pub fn open_files(&self) -> usize {
        self.files.borrow().entries.len()
    }

    /// The directory this core primed.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// The settings.
    pub fn config(&self) -> &StorageConfig {
        &self.config
    }

    /// The disk this core's files are on.
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// The clock this core's logs use.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// Calls `observe` with the duration of every successful log fdatasync on this core
    /// from now on (the broker's fsync latency histogram).
    pub fn observe_syncs(&self, observe: impl Fn(std::time::Duration) + 'static) {
        *self.sync_observer.borrow_mut() = Some(Box::new(observe));
    }

    /// Reports one log fdatasync to the observer, if any.
    pub(crate) fn observed_sync(&self, elapsed: std::time::Duration) {
        if let Some(observe) = &*self.sync_observer.borrow() {
            observe(elapsed);
        }
    }

    /// Whether a write or fsync failed on this core's log directory.
    pub fn is_failed(&self) -> bool {
        matches!(*self.state.borrow(), DiskState::Failed { .. })
    }

    /// Whether the log directory is read-only because its disk is full.
    pub fn is_read_only(&self) -> bool {
        matches!(*self.state.borrow(), DiskState::ReadOnly { .. })
    }

    /// The state of this core's log directory (for metrics and logs).
    pub fn disk_state(&self) -> DiskState {
        self.state.borrow().clone()
    }

    /// Bumped on every change of [`CoreStorage::disk_state`]: await
    /// `disk_state_changes().changed_since(generation)` to follow the transitions.
    pub fn disk_state_changes(&self) -> &Notify {
        &self.state_changes
    }

    pub(crate) fn check_failed(&self) -> Result<(), StorageError> {
        match &*self.state.borrow() {
            DiskState::Failed { .. } => Err(StorageError::LogDirFailed(self.data_dir.clone())),
            _ => Ok(()),
        }
    }

    /// `LogDirFailed` if failed, `DiskFull` if read-only: what an append must check.
    pub(crate) fn check_writable(&self) -> Result<(), StorageError> {
        match &*self.state.borrow() {
            DiskState::Writable => Ok(()),
            DiskState::ReadOnly { free_bytes, .. } => Err(StorageError::DiskFull {
                data_dir: self.data_dir.clone(),
                free_bytes: *free_bytes,
                free_bytes_min: self.config.disk_free_bytes_min,
            }),
            DiskState::Failed { .. } => Err(StorageError::LogDirFailed(self.data_dir.clone())),
        }
    }

    /// Marks the log directory failed: every log on this core refuses appends and acks.
    pub(crate) fn fail(&self, what: &str) {
        if self.is_failed() {
            return;
        }
        tracing::error!(
            data_dir = %self.data_dir.display(),
            from = self.state.borrow().name(),
            "log directory failed: {what}; every log on this core refuses writes until restart"
        );
        *self.state.borrow_mut() = DiskState::Failed {
            reason: what.to_string(),
        };
        self.failure.notify_all();
        self.state_changes.notify_all();
        self.writable.notify_all();
    }

    /// An operation hit `ENOSPC`: the directory turns read-only (a failed one stays failed).
    pub(crate) fn out_of_space(&self, what: &str) {
        let free_bytes = match &*self.state.borrow() {
            DiskState::Failed { .. }
            | DiskState::ReadOnly {
                out_of_space: true, ..
            } => return,
            DiskState::ReadOnly { free_bytes, .. } => *free_bytes,
            DiskState::Writable => None,
        };
        tracing::warn!(
            data_dir = %self.data_dir.display(),
            "log directory read-only: disk full ({what}); appends are refused, reads go on, \
             writes resume once space is freed"
        );
        self.set_state(DiskState::ReadOnly {
            out_of_space: true,
            free_bytes,
        });
    }

    fn set_state(&self, state: DiskState) {
        *self.state.borrow_mut() = state;
        self.state_changes.notify_all();
        // Appenders waiting for room learn that they are refused.
        self.writable.notify_all();
    }

    /// Probes the free space of the log directory now (the core also does it every
    /// `disk_probe_interval_ms`): below `disk_free_bytes_min` a writable directory turns
    /// read-only; at `disk_free_bytes_min + DISK_FREE_RESUME_MARGIN_BYTES` or more a read-only
    /// one turns writable. Returns the state after the probe.
    pub fn probe_disk(&self) -> DiskState {
        let free = match self.disk.free_bytes(&self.data_dir) {
            Ok(free) => free,
            Err(e) => {
                tracing::warn!(data_dir = %self.data_dir.display(), "free-space probe failed: {e}");
                return self.disk_state();
            }
        };
        let min = self.config.disk_free_bytes_min;
        let next = match &*self.state.borrow() {
            DiskState::Failed { .. } => None,
            DiskState::Writable if free < min => Some(DiskState::ReadOnly {
                out_of_space: false,
                free_bytes: Some(free),
            }),
            DiskState::Writable => None,
            DiskState::ReadOnly { .. } if free >= min + DISK_FREE_RESUME_MARGIN_BYTES => {
                Some(DiskState::Writable)
            }
            DiskState::ReadOnly { out_of_space, .. } => Some(DiskState::ReadOnly {
                out_of_space: *out_of_space,
                free_bytes: Some(free),
            }),
        };
        if let Some(next) = next {
            self.log_transition(&next, free, min);
            self.set_state(next);
        }
        self.disk_state()
    }

    fn log_transition(&self, next: &DiskState, free: u64, min: u64) {
        let dir = self.data_dir.display();
        match (self.is_read_only(), next) {
            (false, DiskState::ReadOnly { .. }) => tracing::warn!(
                data_dir = %dir,
                free_bytes = free,
                disk_free_bytes_min = min,
                "log directory read-only: free space below disk_free_bytes_min; appends are refused"
            ),
            (true, DiskState::Writable) => tracing::info!(
                data_dir = %dir,
                free_bytes = free,
                "log directory writable again: free space is back"
            ),
            _ => {}
        }
    }

    /// Replaces `path` with `contents` through the disk (see `Disk::replace_file`), its
    /// descriptors counted; errors are `op`'s.
    pub(crate) async fn replace_file(
        &self,
        op: &'static str,
        path: &Path,
        contents: Vec<u8>,
        sync_parent: bool,
    ) -> Result<(), StorageError> {
        let _fds = self.descriptors(Share::Transient, 1 + u64::from(sync_parent), path)?;
        self.disk
            .replace_file(path, contents, sync_parent)
            .await
            .map_err(|e| crate::writer::io_error(op, path, e))
    }

    /// fsyncs `dir` through the disk, its descriptor counted.
    pub(crate) async fn sync_dir(&self, dir: &Path) -> Result<(), StorageError> {
        let _fd = self.descriptors(Share::Transient, 1, dir)?;
        self.disk
            .sync_dir(dir)
            .await
            .map_err(|e| crate::writer::io_error("fsync directory", dir, e))
    }

    pub(crate) fn next_log_id(&self) -> u64 {
        let id = self.next_log_id.get();
        self.next_log_id.set(id + 1);
        id
    }

    /// Whether `size_bytes` more unflushed bytes fit (a lone request always fits when nothing is
    /// buffered, so that a batch larger than the budget cannot wait forever).
    pub(crate) fn has_room(&self, size_bytes: u64) -> bool {
        let used = self.unflushed_bytes.get();
        used == 0 || used + size_bytes <= self.config.write_buffer_bytes_max
    }

    pub(crate) fn add_unflushed(&self, size_bytes: u64) {
        self.unflushed_bytes
            .set(self.unflushed_bytes.get() + size_bytes);
    }

    pub(crate) fn sub_unflushed(&self, size_bytes: u64) {
        let used = self.unflushed_bytes.get();
        debug_assert!(used >= size_bytes);
        self.unflushed_bytes.set(used.saturating_sub(size_bytes));
        self.writable.notify_all();
    }

    /// Records that `log` cached batches up to `end_offset`. Consecutive rounds of one log share
    /// a ticket until it covers `TICKET_BYTES_MAX`, and tickets of dropped logs are pruned from
    /// the front, so the queue does not grow with every small flush round.
    pub(crate) fn add_cached(&self, log: &Rc<PartitionLog>, end_offset: i64, size_bytes: u64) {
        self.tail_cache_bytes
            .set(self.tail_cache_bytes.get() + size_bytes);
        let mut tickets = self.tickets.borrow_mut();
        while tickets.front().is_some_and(|t| t.0.strong_count() == 0) {
            tickets.pop_front();
        }
        if let Some((last, end, bytes)) = tickets.back_mut() {
            if std::ptr::eq(last.as_ptr(), Rc::as_ptr(log)) && *bytes < TICKET_BYTES_MAX {
                *end = end_offset;
                *bytes += size_bytes;
                return;
            }
        }
        tickets.push_back((Rc::downgrade(log), end_offset, size_bytes));
    }

    pub(crate) fn sub_cached(&self, size_bytes: u64) {
        let used = self.tail_cache_bytes.get();
        debug_assert!(used >= size_bytes);
        self.tail_cache_bytes.set(used.saturating_sub(size_bytes));
    }

    /// Evicts the oldest cached batches of this core until the tail cache fits its budget.
    /// Must be called with no log state borrowed.
    pub(crate) fn enforce_tail_budget(&self) {
        while self.tail_cache_bytes.get() > self.config.tail_cache_bytes_max {
            let Some((log, end, _)) = self.tickets.borrow_mut().pop_front() else {
                break;
            };
            if let Some(log) = log.upgrade() {
                log.evict_cached_before(end);
            }
        }
    }

    /// Keeps a full-size write buffer for reuse, up to `writes_in_flight_max` x 2 per core.
    pub(crate) fn recycle_write_buffer(&self, buf: borges_runtime::fs::AlignedBuf) {
        let mut pool = self.write_buffers.borrow_mut();
        if pool.len() < self.tuning.writes_in_flight_max.max(1) * 2 {
            pool.push(buf);
        }
    }

    pub(crate) fn cached_file(&self, log_id: u64, base: i64) -> Option<Rc<OpenSegment>> {
        self.files.borrow_mut().get((log_id, base))
    }

    pub(crate) fn insert_file(&self, log_id: u64, base: i64, seg: Rc<OpenSegment>) {
        let max = self.config.open_files_max as usize;
        self.files.borrow_mut().insert((log_id, base), seg, max);
    }

    pub(crate) fn forget_file(&self, log_id: u64, base: i64) {
        self.files.borrow_mut().remove((log_id, base));
    }
}
