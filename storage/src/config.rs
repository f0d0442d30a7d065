//! Per-partition and per-core storage settings.

use crate::StorageError;

/// Durability policy of a partition log (topic config `durability`). See docs/storage-format.md
/// ("Write contract") for exactly what each promises.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Durability {
    /// Group commit: the flusher writes everything pending, then one fdatasync covers every
    /// append of that window. `AckLevel::All` waits for the fdatasync; the high watermark is the
    /// synced offset.
    #[default]
    Fsync,
    /// Flushes continuously, fdatasync every `flush_interval_ms`; acknowledgements wait for the
    /// flush only.
    Interval,
    /// Never fdatasync except on roll and close (durability left to replication);
    /// acknowledgements wait for the flush only.
    None,
}

/// Largest segment the 32-bit positions of the offset index can address, bytes. One batch may
/// still overshoot `segment_size_bytes`, so the cap leaves room for it.
pub const SEGMENT_SIZE_BYTES_MAX: u64 = 1 << 31;

/// Per-partition settings, derived by the broker from topic config + broker defaults.
#[derive(Clone, Debug)]
pub struct LogConfig {
    /// `segment.bytes`: roll when the active segment would grow past this.
    pub segment_size_bytes: u64,
    /// `segment.ms`: roll a non-empty active segment this long after its first append.
    pub segment_ms: u64,
    /// `index.interval.bytes`: bytes of batches between two offset-index entries.
    pub index_interval_bytes: u32,
    /// `segment.index.bytes`: roll when the offset index would grow past this.
    pub index_size_bytes_max: u32,
    /// `retention.ms`: delete closed segments whose newest record is older; -1 = forever.
    pub retention_ms: i64,
    /// `retention.bytes`: delete oldest closed segments while the log is larger; -1 = no cap.
    pub retention_bytes: i64,
    /// `durability`: fsync | interval | none.
    pub durability: Durability,
    /// `flush.ms`: fdatasync period under `Durability::Interval`.
    pub flush_interval_ms: u64,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            segment_size_bytes: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            index_size_bytes_max: 10 * 1024 * 1024,
            retention_ms: 168 * 3600 * 1000,
            retention_bytes: -1,
            durability: Durability::Fsync,
            flush_interval_ms: 1000,
        }
    }
}

impl LogConfig {
    /// Checks the ranges the log relies on.
    pub fn validate(&self) -> Result<(), StorageError> {
        let fail = |m: String| Err(StorageError::InvalidConfig(m));
        if self.segment_size_bytes < 4096 || self.segment_size_bytes > SEGMENT_SIZE_BYTES_MAX {
            return fail(format!(
                "segment_size_bytes {} outside [4096, {SEGMENT_SIZE_BYTES_MAX}]",
                self.segment_size_bytes
            ));
        }
        if self.segment_ms == 0 {
            return fail("segment_ms must be positive".into());
        }
        if self.index_interval_bytes == 0 {
            return fail("index_interval_bytes must be positive".into());
        }
        if self.index_size_bytes_max < 64 {
            return fail("index_size_bytes_max must be at least 64".into());
        }
        if self.retention_ms < -1 || self.retention_bytes < -1 {
            return fail("retention_ms and retention_bytes must be >= -1".into());
        }
        if self.flush_interval_ms == 0 {
            return fail("flush_interval_ms must be positive".into());
        }
        Ok(())
    }

    /// Most offset-index entries a segment may hold before it rolls.
    pub(crate) fn index_entries_max(&self) -> usize {
        (self.index_size_bytes_max as usize / crate::index::OFFSET_ENTRY_SIZE_BYTES).max(1)
    }
}

/// Per-core settings and shared state of every log on one core: memory budgets, open-file
/// cache, the failed flag of the log directory.
#[derive(Clone, Debug)]
pub struct StorageConfig {
    /// Appended but not yet flushed bytes allowed per core; `append` answers `Busy` beyond it.
    pub write_buffer_bytes_max: u64,
    /// Flushed batches kept in memory per core to serve tail reads (direct-IO writes bypass the
    /// page cache).
    pub tail_cache_bytes_max: u64,
    /// Read descriptors of segment files kept open per core (LRU).
    pub open_files_max: u32,
    /// Largest single direct-IO write, bytes (rounded down to the device alignment).
    pub write_size_bytes_max: usize,
    /// Period of the recovery-point checkpoint (which also fdatasyncs unsynced data).
    pub recovery_checkpoint_interval_ms: u64,
    /// Recovery checkpoints per second per core, at most: with many busy partitions each
    /// partition's period stretches to `partitions with open files / this` seconds (every
    /// checkpoint costs several fdatasyncs; 1000 partitions checkpointing every second cost
    /// more than half of a core's write throughput).
    pub recovery_checkpoints_per_s_max: u32,
    /// Flushers per core that hold their segment's three files open at once: above it idle
    /// flushers close their files at once (they reopen them on the next append).
    pub open_writers_max: u32,
    /// Below this many free bytes on the log directory's file system the core turns read-only
    /// (appends refused with `StorageError::DiskFull`) before the disk is actually full, so that
    /// what was already appended can still be written; 0 turns the early refusal off (an
    /// `ENOSPC` still makes the directory read-only).
    pub disk_free_bytes_min: u64,
    /// Period of the free-space probe (`statvfs`) of each core's log directory; a read-only
    /// directory becomes writable again at the first probe that sees
    /// `disk_free_bytes_min + DISK_FREE_RESUME_MARGIN_BYTES` free.
    pub disk_probe_interval_ms: u64,
}

/// Free bytes above `disk_free_bytes_min` a read-only directory needs before it takes writes
/// again, so that it does not flap at the threshold (one pre-allocation step).
pub const DISK_FREE_RESUME_MARGIN_BYTES: u64 = 1 << 20;

/// Descriptors per core for files storage opens briefly (checkpoint replacement, directory
/// fsyncs, recovery scans, index loads), beyond the read cache and the open writers.
pub const TRANSIENT_DESCRIPTORS_MAX: u64 = 64;

/// Descriptors one open writer holds: the segment log, its offset index and its time index.
pub const WRITER_DESCRIPTORS: u64 = 3;

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            write_buffer_bytes_max: 256 * 1024 * 1024,
            tail_cache_bytes_max: 256 * 1024 * 1024,
            open_files_max: 4096,
            write_size_bytes_max: 4 * 1024 * 1024,
            recovery_checkpoint_interval_ms: 1000,
            recovery_checkpoints_per_s_max: 100,
            open_writers_max: 1024,
            disk_free_bytes_min: 64 * 1024 * 1024,
            disk_probe_interval_ms: 1000,
        }
    }
}

impl StorageConfig {
    /// Checks the ranges the storage relies on.
    pub fn validate(&self) -> Result<(), StorageError> {
        let fail = |m: &str| Err(StorageError::InvalidConfig(m.into()));
        if self.write_buffer_bytes_max == 0 {
            return fail("write_buffer_bytes_max must be positive");
        }
        if self.open_files_max == 0 {
            return fail("open_files_max must be positive");
        }
        if self.write_size_bytes_max < 4096 {
            return fail("write_size_bytes_max must be at least 4096");
        }
        if self.recovery_checkpoint_interval_ms == 0 {
            return fail("recovery_checkpoint_interval_ms must be positive");
        }
        if self.recovery_checkpoints_per_s_max == 0 {
            return fail("recovery_checkpoints_per_s_max must be positive");
        }
        if self.open_writers_max == 0 {
            return fail("open_writers_max must be positive");
        }
        if self.disk_probe_interval_ms == 0 {
            return fail("disk_probe_interval_ms must be positive");
        }
        Ok(())
    }

    /// The most file descriptors one core's storage holds at once: the read cache
    /// (`open_files_max`), the open writers (`WRITER_DESCRIPTORS x open_writers_max`) and the
    /// brief opens (`TRANSIENT_DESCRIPTORS_MAX`). Enforced: an open beyond it first evicts idle
    /// read descriptors, then fails with the transient `StorageError::TooManyOpenFiles`. A broker
    /// reserves `cores x descriptors_max()` of `RLIMIT_NOFILE` for storage.
    pub fn descriptors_max(&self) -> u64 {
        u64::from(self.open_files_max)
            + WRITER_DESCRIPTORS * u64::from(self.open_writers_max)
            + TRANSIENT_DESCRIPTORS_MAX
    }
}

/// Tuning knobs beyond the contract's `StorageConfig`, with measured defaults. Used by
/// benchmarks; the broker can keep the defaults.
#[derive(Clone, Debug)]
pub struct StorageTuning {
    /// Direct-IO writes of one partition in flight at once (chunks of one flush round).
    pub writes_in_flight_max: usize,
    /// Largest step by which the active segment file is pre-allocated.
    pub preallocate_step_bytes: u64,
    /// First step: a segment reserves as much again as it already has, from this size up to
    /// `preallocate_step_bytes`, so idle partitions reserve little and busy ones grow in big steps.
    pub preallocate_step_min_bytes: u64,
    /// Size of one read during recovery and verification scans, bytes.
    pub scan_read_size_bytes: usize,
}

impl Default for StorageTuning {
    fn default() -> Self {
        StorageTuning {
            writes_in_flight_max: 4,
            preallocate_step_bytes: 64 * 1024 * 1024,
            preallocate_step_min_bytes: 1024 * 1024,
            scan_read_size_bytes: 8 * 1024 * 1024,
        }
    }
}
