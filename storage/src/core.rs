//! `CoreStorage`: what every partition log on one core shares — memory budgets, the open-file
//! cache, the tail-cache eviction order, and the failed flag of the log directory.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};

use borges_runtime::fs::Disk;
use borges_runtime::sync::Notify;
use borges_runtime::time::Clock;

use crate::config::{StorageConfig, StorageTuning};
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
}

/// Per-core settings and shared state of every log on one core: memory budgets, open-file
/// cache, the failed flag of the log directory. Lives on one core (`Rc`, not `Send`).
pub struct CoreStorage {
    data_dir: PathBuf,
    pub(crate) config: StorageConfig,
    pub(crate) tuning: StorageTuning,
    unflushed_bytes: Cell<u64>,
    tail_cache_bytes: Cell<u64>,
    failed: RefCell<Option<String>>,
    /// Bumped when the log directory fails.
    pub(crate) failure: Notify,
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
        Ok(Rc::new(CoreStorage {
            data_dir: data_dir.to_path_buf(),
            config,
            tuning,
            unflushed_bytes: Cell::new(0),
            tail_cache_bytes: Cell::new(0),
            failed: RefCell::new(None),
            failure: Notify::default(),
            writable: Notify::default(),
            next_log_id: Cell::new(1),
            files: RefCell::new(FileCache::default()),
            tickets: RefCell::new(VecDeque::new()),
            write_buffers: RefCell::new(Vec::new()),
            open_writers: Cell::new(0),
            disk,
            clock,
        }))
    }

    /// Flushers holding segment files open (3 descriptors each).
    pub fn open_writers(&self) -> usize {
        self.open_writers.get()
    }

    /// Whether idle flushers should close their files at once: more writers are open than a
    /// quarter of `open_files_max` allows.
    pub(crate) fn writers_crowded(&self) -> bool {
        self.open_writers.get() > (self.config.open_files_max as usize / 4).max(16)
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

    /// Whether a write or fsync failed on this core's log directory.
    pub fn is_failed(&self) -> bool {
        self.failed.borrow().is_some()
    }

    pub(crate) fn check_failed(&self) -> Result<(), StorageError> {
        match &*self.failed.borrow() {
            Some(_) => Err(StorageError::LogDirFailed(self.data_dir.clone())),
            None => Ok(()),
        }
    }

    /// Marks the log directory failed: every log on this core refuses appends and acks.
    pub(crate) fn fail(&self, what: &str) {
        let first = self.failed.borrow().is_none();
        if first {
            tracing::error!(
                data_dir = %self.data_dir.display(),
                "log directory failed: {what}; every log on this core refuses writes until restart"
            );
            *self.failed.borrow_mut() = Some(what.to_string());
            self.failure.notify_all();
        }
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
