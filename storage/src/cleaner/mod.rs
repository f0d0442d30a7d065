//! Log compaction (Kafka's LogCleaner) for partitions with `cleanup.policy` = compact.
//!
//! One [`Cleaner`] per core cleans that core's compacted logs, one log at a time, the dirtiest
//! first. A cleaning:
//! 1. plans (synchronously) the cleanable range: finalized closed segments below the active
//!    segment, the high watermark, the recovery checkpoint's segment and `min.compaction.lag.ms`;
//!    the dirty section starts at the log's first dirty offset (`cleaner-offset-checkpoint`);
//! 2. builds an [`map::OffsetMap`] (key -> latest offset) over the dirty section, within
//!    `cleaner_dedupe_buffer_bytes` (a full map ends the dirty section early);
//! 3. rewrites the segments from the log start to the end of the map, in groups of consecutive
//!    segments that fit `segment.bytes`, into `<base>.log.cleaned` (+ index files), keeping
//!    a record only if it is its key's latest; tombstones get a delete horizon
//!    (`delete.retention.ms` after the cleaner first saw them) and go once it passed;
//! 4. swaps each group in atomically ([`swap`]: a `.swap` manifest is the commit point), then
//!    records the new first dirty offset.
//!
//! All IO goes through the core's `Disk` and is rate limited (`cleaner_io_bytes_per_s_max`),
//! yielding between chunks so the core's produce path keeps running.

mod build;
mod map;
mod swap;
mod throttle;

use std::rc::Rc;

use crate::log::PartitionLog;
use crate::StorageError;

pub(crate) use swap::recover_swaps;
pub use swap::{CLEANED_SUFFIX, SWAP_SUFFIX};

/// File (in the partition directory) holding the log's first dirty offset.
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";

/// Per-partition compaction settings (topic configs, Kafka's names).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompactionConfig {
    /// `delete.retention.ms`: a tombstone stays at least this long after the cleaner first saw
    /// it.
    pub delete_retention_ms: i64,
    /// `min.cleanable.dirty.ratio`: clean when dirty bytes / cleanable bytes reach this.
    pub min_cleanable_dirty_ratio: f64,
    /// `min.compaction.lag.ms`: a segment whose newest record is younger is not cleaned.
    pub min_compaction_lag_ms: i64,
    /// `max.compaction.lag.ms`: clean regardless of the ratio once the oldest dirty segment's
    /// newest record is older than this.
    pub max_compaction_lag_ms: i64,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            delete_retention_ms: 24 * 3600 * 1000,
            min_cleanable_dirty_ratio: 0.5,
            min_compaction_lag_ms: 0,
            max_compaction_lag_ms: i64::MAX,
        }
    }
}

/// Per-core cleaner limits.
#[derive(Clone, Copy, Debug)]
pub struct CleanerConfig {
    /// `cleaner_dedupe_buffer_bytes`: memory of the offset map of one cleaning.
    pub dedupe_buffer_bytes: u64,
    /// `cleaner_io_bytes_per_s_max`: bytes read plus written per second by the core's cleaner.
    pub io_bytes_per_s_max: u64,
    /// `cleaner_io_buffer_bytes`: size of one read and of one write of the cleaner.
    pub io_buffer_bytes: usize,
}

/// Smallest `cleaner_dedupe_buffer_bytes` accepted: room for 32 Ki keys.
pub const CLEANER_DEDUPE_BUFFER_BYTES_MIN: u64 = 1 << 20;

impl Default for CleanerConfig {
    fn default() -> Self {
        CleanerConfig {
            dedupe_buffer_bytes: 16 << 20,
            io_bytes_per_s_max: 64 << 20,
            io_buffer_bytes: 1 << 20,
        }
    }
}

impl CleanerConfig {
    /// Checks the ranges the cleaner relies on.
    pub fn validate(&self) -> Result<(), StorageError> {
        if self.dedupe_buffer_bytes < CLEANER_DEDUPE_BUFFER_BYTES_MIN {
            return Err(StorageError::InvalidConfig(format!(
                "cleaner_dedupe_buffer_bytes {} below {CLEANER_DEDUPE_BUFFER_BYTES_MIN}",
                self.dedupe_buffer_bytes
            )));
        }
        if self.io_bytes_per_s_max < 4096 || self.io_buffer_bytes < 4096 {
            return Err(StorageError::InvalidConfig(
                "cleaner_io_bytes_per_s_max and cleaner_io_buffer_bytes must be >= 4096".into(),
            ));
        }
        Ok(())
    }
}

/// What one cleaning did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanOutcome {
    /// Segments read and replaced.
    pub segments_in: usize,
    /// Segments written in their place.
    pub segments_out: usize,
    /// Bytes of the replaced segments.
    pub bytes_in: u64,
    /// Bytes of the segments written.
    pub bytes_out: u64,
    /// Records removed (superseded, keyless, or tombstones past their horizon).
    pub records_removed: u64,
    /// Tombstones removed because their delete horizon had passed.
    pub tombstones_removed: u64,
    /// The log's first dirty offset afterwards.
    pub first_dirty_offset: i64,
}

/// A log's compaction state, for metrics and for choosing what to clean.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CleanerLag {
    /// Bytes of closed segments below the first dirty offset (already cleaned).
    pub clean_bytes: u64,
    /// Bytes of cleanable segments at or after the first dirty offset.
    pub dirty_bytes: u64,
    /// dirty / (clean + dirty), 0 when nothing is cleanable.
    pub dirty_ratio: f64,
    /// Whether a cleaning is due (ratio reached or `max.compaction.lag.ms` passed).
    pub due: bool,
    /// The first dirty offset.
    pub first_dirty_offset: i64,
}

/// A log's cleaner state, kept in the log's state. Lives on the log's core.
#[derive(Debug, Default)]
pub(crate) struct CleanerLogState {
    pub compaction: Option<CompactionConfig>,
    /// None until read from `cleaner-offset-checkpoint`.
    pub first_dirty: Option<i64>,
    /// A swap is replacing segment files: retention and truncation wait.
    pub swapping: bool,
    /// The earliest delete horizon of a tombstone the last cleaning kept (not persisted: after
    /// a restart such a tombstone goes at the next cleaning that dirt triggers).
    pub delete_horizon_ms: Option<i64>,
}

impl PartitionLog {
    /// Turns compaction on (Some) or off (None) for this log (topic `cleanup.policy`).
    pub fn set_compaction(&self, config: Option<CompactionConfig>) {
        self.state.borrow_mut().cleaner.compaction = config;
    }

    /// The compaction settings, if the log is compacted.
    pub fn compaction(&self) -> Option<CompactionConfig> {
        self.state.borrow().cleaner.compaction
    }

    /// Whether a cleaner swap is replacing segment files right now.
    pub(crate) fn swapping(&self) -> bool {
        self.state.borrow().cleaner.swapping
    }

    /// Waits until no cleaner swap is replacing segment files.
    pub(crate) async fn wait_swap(&self) {
        loop {
            let seen = self.progress.generation();
            if !self.swapping() {
                return;
            }
            self.progress.changed_since(seen).await;
        }
    }

    /// How dirty the log is, at wall-clock `now_ms`; None if the log is not compacted.
    pub async fn cleaner_lag(&self, now_ms: i64) -> Result<Option<CleanerLag>, StorageError> {
        if self.compaction().is_none() {
            return Ok(None);
        }
        self.load_first_dirty().await;
        Ok(build::plan(self, now_ms).map(|p| p.lag))
    }

    /// [`PartitionLog::cleaner_lag`] without reading the cleaner checkpoint (before the first
    /// cleaning of this process, the whole log counts as dirty).
    pub fn cleaner_lag_now(&self, now_ms: i64) -> Option<CleanerLag> {
        build::plan(self, now_ms).map(|p| p.lag)
    }

    /// Reads the first dirty offset from its checkpoint file once.
    async fn load_first_dirty(&self) {
        if self.state.borrow().cleaner.first_dirty.is_some() {
            return;
        }
        let path = self.dir.join(CLEANER_CHECKPOINT_FILE);
        let stored = std::fs::read(&path)
            .ok()
            .and_then(|b| decode_checkpoint(&b));
        let mut st = self.state.borrow_mut();
        st.cleaner.first_dirty = Some(stored.unwrap_or(st.log_start_offset));
    }

    async fn store_first_dirty(&self, offset: i64) -> Result<(), StorageError> {
        self.state.borrow_mut().cleaner.first_dirty = Some(offset);
        let path = self.dir.join(CLEANER_CHECKPOINT_FILE);
        self.core
            .replace_file(
                "write cleaner checkpoint",
                &path,
                encode_checkpoint(offset),
                false,
            )
            .await
    }
}

impl StorageError {
    /// An IO error because the file is gone (a segment swapped or deleted meanwhile).
    pub(crate) fn is_not_found(&self) -> bool {
        matches!(
            self,
            StorageError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound
        )
    }
}

fn encode_checkpoint(offset: i64) -> Vec<u8> {
    let body = format!("1 {offset}");
    format!("{body} {:08x}\n", crc32c::crc32c(body.as_bytes())).into_bytes()
}

fn decode_checkpoint(bytes: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(bytes).ok()?.trim_end();
    let (body, crc) = text.rsplit_once(' ')?;
    if u32::from_str_radix(crc, 16).ok()? != crc32c::crc32c(body.as_bytes()) {
        return None;
    }
    let offset = body.strip_prefix("1 ")?;
    offset.parse().ok()
}

/// The cleaner of one core: its limits and IO throttle. Lives on that core.
pub struct Cleaner {
    config: CleanerConfig,
    throttle: throttle::Throttle,
}

impl Cleaner {
    /// A cleaner with `config` (checked).
    pub fn new(config: CleanerConfig) -> Result<Cleaner, StorageError> {
        config.validate()?;
        Ok(Cleaner {
            config,
            throttle: throttle::Throttle::new(config.io_bytes_per_s_max),
        })
    }

    /// Cleans the dirtiest log of `logs` whose cleaning is due; None if none is.
    pub async fn clean_dirtiest(
        &self,
        logs: &[Rc<PartitionLog>],
        now_ms: i64,
    ) -> Result<Option<(Rc<PartitionLog>, CleanOutcome)>, StorageError> {
        let mut best: Option<(f64, &Rc<PartitionLog>)> = None;
        for log in logs {
            let Some(lag) = log.cleaner_lag(now_ms).await? else {
                continue;
            };
            if lag.due && best.is_none_or(|(r, _)| lag.dirty_ratio > r) {
                best = Some((lag.dirty_ratio, log));
            }
        }
        let Some((_, log)) = best else {
            return Ok(None);
        };
        let outcome = self.clean(log, now_ms).await?;
        Ok(outcome.map(|o| (log.clone(), o)))
    }

    /// Cleans `log` now if anything is cleanable (whatever the dirty ratio); None if not.
    pub async fn clean(
        &self,
        log: &Rc<PartitionLog>,
        now_ms: i64,
    ) -> Result<Option<CleanOutcome>, StorageError> {
        if log.compaction().is_none() {
            return Ok(None);
        }
        log.load_first_dirty().await;
        let Some(plan) = build::plan(log, now_ms) else {
            return Ok(None);
        };
        if plan.segments.is_empty() {
            return Ok(None);
        }
        let outcome = build::clean(self, log, plan, now_ms).await?;
        if let Some(o) = &outcome {
            log.store_first_dirty(o.first_dirty_offset).await?;
            tracing::info!(
                dir = %log.dir.display(),
                segments_in = o.segments_in,
                segments_out = o.segments_out,
                bytes_in = o.bytes_in,
                bytes_out = o.bytes_out,
                records_removed = o.records_removed,
                "log cleaned"
            );
        }
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trips_and_refuses_damage() {
        let b = encode_checkpoint(1234);
        assert_eq!(decode_checkpoint(&b), Some(1234));
        let mut damaged = b.clone();
        damaged[3] = b'9';
        assert_eq!(decode_checkpoint(&damaged), None);
        assert_eq!(decode_checkpoint(b""), None);
    }
}
