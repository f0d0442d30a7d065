//! Periodic and administrative work: time-based roll, retention, scrubbing, truncation.

use std::rc::Rc;

use crate::checkpoint::RecoveryCheckpoint;
use crate::index::SegmentIndex;
use crate::log::{roll_active, PartitionLog, Point, TickOutcome, VerifyReport};
use crate::scan::{scan_segment, ScanStop};
use crate::segment::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::writer::{io_error, Writer};
use crate::StorageError;

impl PartitionLog {
    /// Periodic work from the core's background task: time-based segment roll (segment.ms),
    /// retention (delete whole closed segments older than retention.ms by their max timestamp,
    /// or while size > retention.bytes; never the active one; log start advances), and a
    /// wake-up of the flusher for the recovery checkpoint (which it also writes on its own
    /// timer, every `recovery_checkpoint_interval_ms`).
    pub async fn tick(&self, now_ms: i64) -> Result<TickOutcome, StorageError> {
        let mut outcome = TickOutcome::default();
        let doomed = {
            let mut st = self.state.borrow_mut();
            if st.corrupt.is_some() || st.flusher_stopped {
                return Ok(outcome);
            }
            let active = st.active();
            let expired = active
                .first_append_ms
                .is_some_and(|t| now_ms.saturating_sub(t) >= st.config.segment_ms as i64);
            if expired && !active.is_empty() {
                roll_active(&mut st, self.core.clock.now_ms());
                outcome.rolled = true;
            }
            // A cleaner swap is replacing closed segments: retention waits for the next tick.
            let doomed = if st.cleaner.swapping {
                Vec::new()
            } else {
                retention_victims(&st, now_ms)
            };
            for &base in &doomed {
                let seg = st.segments.remove(&base).expect("victim exists");
                outcome.segments_deleted += 1;
                outcome.bytes_deleted += seg.size_bytes;
            }
            if !doomed.is_empty() {
                let start = *st
                    .segments
                    .keys()
                    .next()
                    .expect("the active segment remains");
                st.log_start_offset = start;
                if st.epochs.truncate_from_start(start) {
                    st.epochs_dirty = true;
                }
                st.checkpoint_requested = true;
            }
            doomed
        };
        if !doomed.is_empty() {
            let start = self.offsets().log_start_offset;
            self.evict_cached_before(start);
            self.changes.notify_all();
        }
        for base in doomed {
            self.core.forget_file(self.id, base);
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                let path = segment_path(&self.dir, base, suffix);
                if let Err(e) = self.core.disk.remove_file(&path).await {
                    tracing::warn!(file = %path.display(), "retention could not remove: {e}");
                }
            }
            tracing::info!(dir = %self.dir.display(), base, "retention deleted segment");
        }
        // Only a roll or a deletion gives the flusher work; waking it otherwise would reopen
        // the files of every idle partition on every tick.
        if outcome.rolled || outcome.segments_deleted > 0 {
            self.work.notify_all();
        }
        Ok(outcome)
    }

    /// Scrub: CRC-check every closed segment; on a mismatch the partition is marked corrupt and
    /// refuses reads and appends with StorageError::Corrupt (reported with tracing::error!).
    pub async fn verify(&self) -> Result<VerifyReport, StorageError> {
        let closed: Vec<(i64, i64, u64)> = {
            let st = self.state.borrow();
            if let Some(e) = st.corrupt_error() {
                return Err(e);
            }
            st.segments
                .values()
                .filter(|s| s.is_finalized())
                .map(|s| (s.base_offset, s.next_offset, s.size_bytes))
                .collect()
        };
        let mut report = VerifyReport::default();
        for (base, next, size) in closed {
            let path = segment_path(&self.dir, base, LOG_SUFFIX);
            let _fd = self
                .core
                .descriptors(crate::core::Share::Transient, 1, &path)?;
            let file = match self.core.disk.open_direct_read(&path).await {
                Ok(f) => Rc::new(f),
                Err(_) if !self.state.borrow().segments.contains_key(&base) => continue,
                Err(e) => return Err(io_error("open", &path, e)),
            };
            let outcome = scan_segment(
                &file,
                size,
                0,
                base,
                self.core.tuning.scan_read_size_bytes,
                &mut |_, _| {},
            )
            .await
            .map_err(|e| io_error("read", &path, e))?;
            if outcome.stop != ScanStop::EndOfFile || outcome.next_offset > next {
                let reason = format!(
                    "{:?}, next offset {} (expected {next})",
                    outcome.stop, outcome.next_offset
                );
                return Err(self.mark_corrupt(&path, outcome.end_position, &reason));
            }
            report.segments_checked += 1;
            report.batches_checked += outcome.batches;
            report.bytes_checked += size;
        }
        Ok(report)
    }

    /// Runs in the flusher with nothing pending: see [`PartitionLog::truncate_to`].
    /// All or nothing across a crash: the truncation intent is durable before the first
    /// file changes and removed (durably) after the last (`truncation.rs`).
    pub(crate) async fn truncate_writer(
        &self,
        w: &mut Writer,
        offset: i64,
    ) -> Result<(), StorageError> {
        let (leo, log_start) = {
            let st = self.state.borrow();
            (st.log_end_offset(), st.log_start_offset)
        };
        if offset >= leo {
            return self.clear_truncation_intent().await;
        }
        self.write_truncation_intent(offset).await?;
        if offset <= log_start {
            self.reset_to(w, offset).await?;
        } else {
            self.cut_to(w, offset).await?;
        }
        self.clear_truncation_intent().await
    }

    /// [`PartitionLog::restart_at`], in the flusher, with its own intent.
    pub(crate) async fn restart_writer(
        &self,
        w: &mut Writer,
        offset: i64,
    ) -> Result<(), StorageError> {
        self.write_restart_intent(offset).await?;
        self.reset_to(w, offset).await?;
        self.clear_truncation_intent().await
    }

    /// Cuts the log at the batch holding `offset` (log start < `offset` < log end).
    async fn cut_to(&self, w: &mut Writer, offset: i64) -> Result<(), StorageError> {
        let log_start = self.state.borrow().log_start_offset;
        let (base, position, new_end) = self.locate(offset).await?;
        let mut index = self.segment_index(base, |i| i.clone()).await?;
        let kept_offsets = index.offsets_before(base, new_end);
        let restart_rel = kept_offsets
            .checked_sub(1)
            .map_or(0, |i| index.offsets[i].relative_offset + 1);
        let kept_times = index.times_before(base, base + i64::from(restart_rel));
        let (kept_offsets, kept_times) = if base == w.segment_base {
            (
                kept_offsets.min(w.persisted_offsets),
                kept_times.min(w.persisted_times),
            )
        } else {
            (kept_offsets, kept_times)
        };
        let cp = RecoveryCheckpoint {
            log_start_offset: log_start,
            offset: new_end,
            segment_base: base,
            position,
            index_entries: kept_offsets as u32,
            time_index_entries: kept_times as u32,
        };
        self.write_checkpoint_durable(&cp).await?;
        index.truncate_entries(base, kept_offsets, kept_times);
        self.rebuild_running(&mut index, base, position, new_end)
            .await?;
        self.drop_segments_after(base).await;
        let next = w
            .open_replacement(
                &self.core,
                &self.dir,
                (base, position),
                (kept_offsets, kept_times),
            )
            .await?;
        let old = std::mem::replace(w, next);
        old.close().await?;
        w.file
            .sync_data()
            .await
            .map_err(|e| io_error("fdatasync", &w.log_path, e))?;
        self.apply_truncation(base, position, new_end, index);
        self.checkpoint(w).await
    }

    /// Rescans `[restart point, end_position)` of segment `base` to rebuild the index's running
    /// state after its entries were cut.
    async fn rebuild_running(
        &self,
        index: &mut SegmentIndex,
        base: i64,
        end_position: u64,
        end_offset: i64,
    ) -> Result<(), StorageError> {
        let (start, start_offset) = index.restart_point(base);
        let path = segment_path(&self.dir, base, LOG_SUFFIX);
        let _fd = self
            .core
            .descriptors(crate::core::Share::Transient, 1, &path)?;
        let file = Rc::new(
            self.core
                .disk
                .open_direct_read(&path)
                .await
                .map_err(|e| io_error("open", &path, e))?,
        );
        let interval = self.state.borrow().config.index_interval_bytes;
        let outcome = scan_segment(
            &file,
            end_position,
            start,
            start_offset,
            self.core.tuning.scan_read_size_bytes,
            &mut |pos, h| {
                index.note_batch(
                    interval,
                    base,
                    (h.base_offset - base) as u32,
                    pos as u32,
                    h.size_bytes() as u64,
                    h.max_timestamp,
                );
            },
        )
        .await
        .map_err(|e| io_error("read", &path, e))?;
        if outcome.stop != ScanStop::EndOfFile || outcome.next_offset != end_offset {
            return Err(self.mark_corrupt(
                &path,
                outcome.end_position,
                &format!("{:?} while truncating", outcome.stop),
            ));
        }
        Ok(())
    }

    async fn write_checkpoint_durable(&self, cp: &RecoveryCheckpoint) -> Result<(), StorageError> {
        let path = self.dir.join(crate::checkpoint::RECOVERY_CHECKPOINT_FILE);
        self.core
            .replace_file("write checkpoint", &path, cp.encode(), true)
            .await?;
        self.state.borrow_mut().last_checkpoint = Some(*cp);
        Ok(())
    }

    /// Deletes every segment after `base` (state, descriptors, files).
    async fn drop_segments_after(&self, base: i64) {
        let later: Vec<i64> = {
            let mut st = self.state.borrow_mut();
            let later: Vec<i64> = st.segments.range(base + 1..).map(|(b, _)| *b).collect();
            for b in &later {
                st.segments.remove(b);
            }
            later
        };
        for b in later {
            self.core.forget_file(self.id, b);
            for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
                let _ = self
                    .core
                    .disk
                    .remove_file(segment_path(&self.dir, b, suffix))
                    .await;
            }
        }
        self.core.forget_file(self.id, base);
    }

    /// Makes segment `base`, cut at `position` / `end`, the active one in memory.
    fn apply_truncation(&self, base: i64, position: u64, end: i64, index: SegmentIndex) {
        let mut st = self.state.borrow_mut();
        self.drop_mem_from(&mut st, end);
        let seg = st
            .segments
            .get_mut(&base)
            .expect("truncation segment exists");
        seg.closed = false;
        seg.size_bytes = position;
        seg.next_offset = end;
        seg.max_timestamp = index.max_timestamp;
        seg.max_timestamp_offset = index.max_timestamp_offset;
        seg.live = Some(index);
        let point = Point {
            offset: end,
            segment_base: base,
            position,
        };
        st.flushed = point;
        st.synced = point;
        if st.hw.offset > end {
            st.hw = point;
        }
        if st.epochs.truncate_from_end(end) {
            st.epochs_dirty = true;
        }
        if let Some(r) = &mut st.replication {
            r.truncate(end);
        }
        st.truncation_generation += 1;
        let generation = st.truncation_generation;
        st.truncations.push((generation, end));
        if st.truncations.len() > 64 {
            st.truncations.remove(0);
        }
        drop(st);
        self.progress.notify_all();
        self.changes.notify_all();
        tracing::info!(dir = %self.dir.display(), log_end_offset = end, "log truncated");
    }

    /// Empties the log and restarts it at `offset` (truncation below the log start).
    async fn reset_to(&self, w: &mut Writer, offset: i64) -> Result<(), StorageError> {
        let cp = RecoveryCheckpoint {
            log_start_offset: offset,
            offset,
            segment_base: offset,
            position: 0,
            index_entries: 0,
            time_index_entries: 0,
        };
        self.write_checkpoint_durable(&cp).await?;
        let bases: Vec<i64> = self.state.borrow().segments.keys().copied().collect();
        let placeholder_base = i64::MIN;
        self.drop_segments_after(placeholder_base).await;
        let _ = bases;
        let next = w
            .open_replacement(&self.core, &self.dir, (offset, 0), (0, 0))
            .await?;
        let old = std::mem::replace(w, next);
        old.close().await?;
        self.core.sync_dir(&self.dir).await?;
        {
            let mut st = self.state.borrow_mut();
            st.segments.insert(
                offset,
                crate::segment::SegmentMeta::new_active(
                    offset,
                    SegmentIndex::new(),
                    self.core.clock.now_ms(),
                ),
            );
            st.log_start_offset = offset;
        }
        self.apply_truncation(offset, 0, offset, SegmentIndex::new());
        {
            let mut st = self.state.borrow_mut();
            let point = Point {
                offset,
                segment_base: offset,
                position: 0,
            };
            st.hw = point;
            st.epochs = Default::default();
            st.epochs_dirty = true;
        }
        self.checkpoint(w).await
    }
}

/// Closed, finalized segments retention deletes now, oldest first (a prefix of the log).
fn retention_victims(st: &crate::log::LogState, now_ms: i64) -> Vec<i64> {
    let mut victims = Vec::new();
    let mut size = st.total_size_bytes() as i64;
    let cfg = &st.config;
    for seg in st.segments.values() {
        if !seg.is_finalized() || seg.next_offset > st.hw.offset {
            break;
        }
        let newest = if seg.max_timestamp > crate::index::NO_TIMESTAMP {
            seg.max_timestamp
        } else {
            seg.last_modified_ms
        };
        let too_old = cfg.retention_ms >= 0 && now_ms.saturating_sub(newest) > cfg.retention_ms;
        let too_big =
            cfg.retention_bytes >= 0 && size - seg.size_bytes as i64 >= cfg.retention_bytes;
        if !(too_old || too_big) {
            break;
        }
        size -= seg.size_bytes as i64;
        victims.push(seg.base_offset);
    }
    victims
}
