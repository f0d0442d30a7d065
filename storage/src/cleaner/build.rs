//! Planning a cleaning, building the offset map, and writing the cleaned segments beside the
//! ones they replace.

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::rc::Rc;

use borges_protocol::batch::{self, BatchHeader, Record, RecordBatch, BATCH_HEADER_SIZE_BYTES};
use borges_protocol::rewrite;
use borges_runtime::fs::{BufferedFile, DirectFile, ReadBuf};
use borges_runtime::task::{self, Task};
use bytes::{Bytes, BytesMut};

use super::map::OffsetMap;
use super::swap::{self, cleaned_path};
use super::{CleanOutcome, Cleaner, CleanerLag, CompactionConfig};
use crate::core::Share;
use crate::index::{SegmentIndex, NO_TIMESTAMP};
use crate::log::PartitionLog;
use crate::segment::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::writer::io_error;
use crate::StorageError;

/// One closed segment as the plan saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SegInfo {
    pub base: i64,
    pub next: i64,
    pub size: u64,
}

/// What a cleaning may touch, decided synchronously from the log's state.
pub(crate) struct Plan {
    pub lag: CleanerLag,
    /// The cleanable segments, from the log start.
    pub segments: Vec<SegInfo>,
    pub compaction: CompactionConfig,
    pub segment_size_bytes: u64,
    pub index_interval_bytes: u32,
}

/// The cleanable range of `log` at `now_ms`; None if the log is not compacted or is closed.
pub(crate) fn plan(log: &PartitionLog, now_ms: i64) -> Option<Plan> {
    let st = log.state.borrow();
    let compaction = st.cleaner.compaction?;
    if st.corrupt.is_some() || st.flusher_stopped {
        return None;
    }
    // The recovery checkpoint points into this segment: its positions must not move.
    let checkpoint_base = st.last_checkpoint.map_or(i64::MIN, |c| c.segment_base);
    let active_base = st.active().base_offset;
    let lag_horizon = now_ms.saturating_sub(compaction.min_compaction_lag_ms);
    let mut segments = Vec::new();
    for seg in st.segments.values() {
        let cleanable = seg.is_finalized()
            && seg.base_offset < active_base
            && seg.base_offset < checkpoint_base
            && seg.next_offset <= st.hw.offset
            && (compaction.min_compaction_lag_ms <= 0 || seg.max_timestamp <= lag_horizon);
        if !cleanable {
            break;
        }
        segments.push(SegInfo {
            base: seg.base_offset,
            next: seg.next_offset,
            size: seg.size_bytes,
        });
    }
    let end = segments.last().map_or(st.log_start_offset, |s| s.next);
    let first_dirty = st
        .cleaner
        .first_dirty
        .unwrap_or(st.log_start_offset)
        .clamp(st.log_start_offset, end.max(st.log_start_offset));
    let clean_bytes: u64 = segments
        .iter()
        .filter(|s| s.next <= first_dirty)
        .map(|s| s.size)
        .sum();
    let dirty: Vec<&SegInfo> = segments.iter().filter(|s| s.next > first_dirty).collect();
    let dirty_bytes: u64 = dirty.iter().map(|s| s.size).sum();
    let total = clean_bytes + dirty_bytes;
    let dirty_ratio = if total == 0 {
        0.0
    } else {
        dirty_bytes as f64 / total as f64
    };
    let overdue = dirty.first().is_some_and(|s| {
        let newest = st.segments[&s.base].max_timestamp;
        newest > NO_TIMESTAMP && now_ms.saturating_sub(newest) >= compaction.max_compaction_lag_ms
    });
    // A kept tombstone's delete horizon passed: a cleaning removes it even with nothing dirty.
    let horizon_due =
        !segments.is_empty() && st.cleaner.delete_horizon_ms.is_some_and(|h| now_ms >= h);
    let due = horizon_due
        || dirty_bytes > 0 && (dirty_ratio >= compaction.min_cleanable_dirty_ratio || overdue);
    Some(Plan {
        lag: CleanerLag {
            clean_bytes,
            dirty_bytes,
            dirty_ratio,
            due,
            first_dirty_offset: first_dirty,
        },
        segments,
        compaction,
        segment_size_bytes: st.config.segment_size_bytes,
        index_interval_bytes: st.config.index_interval_bytes,
    })
}

/// Reads a segment file batch by batch: direct-IO reads of `cleaner_io_buffer_bytes` (no page
/// cache copy, no cache pollution), [`READS_IN_FLIGHT`] of them ahead of the batch being
/// parsed, each copied once into a window that the batches are `Bytes` slices of.
struct SegmentReader<'a> {
    file: Rc<DirectFile>,
    path: std::path::PathBuf,
    size: u64,
    /// Position of the next batch.
    pos: u64,
    /// Bytes from `pos` on that have been read.
    window: Bytes,
    /// Position of the first byte not yet requested.
    next_read: u64,
    in_flight: VecDeque<(usize, Task<std::io::Result<ReadBuf>>)>,
    cleaner: &'a Cleaner,
    _fd: crate::core::Descriptors,
}

/// Reads a [`SegmentReader`] keeps in flight: one being parsed while the next arrives.
const READS_IN_FLIGHT: usize = 2;

impl<'a> SegmentReader<'a> {
    async fn open(
        log: &PartitionLog,
        cleaner: &'a Cleaner,
        seg: &SegInfo,
    ) -> Result<SegmentReader<'a>, StorageError> {
        let path = segment_path(&log.dir, seg.base, LOG_SUFFIX);
        let fd = log.core.descriptors(Share::Transient, 1, &path)?;
        let file = log
            .core
            .disk
            .open_direct_read(&path)
            .await
            .map_err(|e| io_error("open", &path, e))?;
        Ok(SegmentReader {
            file: Rc::new(file),
            path,
            size: seg.size,
            pos: 0,
            window: Bytes::new(),
            next_read: 0,
            in_flight: VecDeque::new(),
            cleaner,
            _fd: fd,
        })
    }

    /// Keeps [`READS_IN_FLIGHT`] reads going ahead of the window.
    fn read_ahead(&mut self) {
        while self.in_flight.len() < READS_IN_FLIGHT && self.next_read < self.size {
            let len = (self.cleaner.config.io_buffer_bytes as u64).min(self.size - self.next_read);
            let (file, position) = (self.file.clone(), self.next_read);
            let read = task::spawn(async move { file.read_at(position, len as usize).await });
            self.in_flight.push_back((len as usize, read));
            self.next_read += len;
        }
    }

    /// Extends the window until it holds `len` bytes from `pos` (the caller checked that the
    /// segment has them).
    async fn fill(&mut self, len: u64) -> Result<(), StorageError> {
        while (self.window.len() as u64) < len {
            self.read_ahead();
            let Some((want, read)) = self.in_flight.pop_front() else {
                return Err(self.corrupt("segment ends before its planned size".into()));
            };
            let data = read.await.map_err(|e| io_error("read", &self.path, e))?;
            if data.len() < want {
                return Err(self.corrupt(format!(
                    "short read of {} bytes where {want} exist",
                    data.len()
                )));
            }
            // The rest of the window (part of one batch at most) and the new chunk, in one
            // buffer: the only copy of the data on its way to the batches.
            let mut grown = BytesMut::with_capacity(self.window.len() + data.len());
            grown.extend_from_slice(&self.window);
            grown.extend_from_slice(&data);
            self.window = grown.freeze();
            self.read_ahead();
            self.cleaner.throttle.spend(want as u64).await;
        }
        Ok(())
    }

    fn corrupt(&self, reason: String) -> StorageError {
        StorageError::Corrupt {
            path: self.path.clone(),
            position: self.pos,
            reason: format!("cleaner: {reason}"),
        }
    }

    /// The next whole batch, CRC-checked, or None at the end of the segment.
    async fn next(&mut self) -> Result<Option<RecordBatch>, StorageError> {
        if self.pos >= self.size {
            return Ok(None);
        }
        let header_len = BATCH_HEADER_SIZE_BYTES as u64;
        if self.pos + header_len > self.size {
            return Err(self.corrupt("truncated batch header".into()));
        }
        self.fill(header_len).await?;
        let h = BatchHeader::parse(&self.window).map_err(|e| self.corrupt(e.to_string()))?;
        let len = h.size_bytes() as u64;
        if self.pos + len > self.size {
            return Err(self.corrupt("batch runs past the segment end".into()));
        }
        self.fill(len).await?;
        let bytes = self.window.split_to(len as usize);
        let b = RecordBatch::parse(bytes).map_err(|e| self.corrupt(e.to_string()))?;
        self.pos += len;
        Ok(Some(b))
    }

    async fn close(self) {
        // Reads still in flight finish before the file goes (their tasks hold it).
        for (_, read) in self.in_flight {
            let _ = read.await;
        }
    }
}

fn records_of(b: &RecordBatch) -> Result<Vec<Record>, StorageError> {
    Ok(b.records(batch::DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT)?)
}

/// The offset map over the dirty section, where it ends, and each producer's last batch.
struct Mapped {
    map: OffsetMap,
    end: i64,
    producer_last: HashMap<i64, i64>,
}

async fn build_map(
    cleaner: &Cleaner,
    log: &PartitionLog,
    plan: &Plan,
) -> Result<Mapped, StorageError> {
    let first_dirty = plan.lag.first_dirty_offset;
    let mut mapped = Mapped {
        map: OffsetMap::new(cleaner.config.dedupe_buffer_bytes),
        end: plan.segments.last().map_or(first_dirty, |s| s.next),
        producer_last: HashMap::new(),
    };
    for seg in plan.segments.iter().filter(|s| s.next > first_dirty) {
        let mut reader = SegmentReader::open(log, cleaner, seg).await?;
        while let Some(b) = reader.next().await? {
            if b.last_offset() < first_dirty {
                continue;
            }
            let records = records_of(&b)?;
            if !mapped.map.has_room(records.len()) {
                mapped.end = b.base_offset();
                reader.close().await;
                return Ok(mapped);
            }
            for r in &records {
                if let Some(key) = &r.key {
                    mapped.map.put(key, r.offset);
                }
            }
            if b.header().producer_id >= 0 {
                mapped
                    .producer_last
                    .insert(b.header().producer_id, b.base_offset());
            }
        }
        reader.close().await;
    }
    Ok(mapped)
}

/// What becomes of one batch.
enum Fate {
    Copy,
    Drop,
    Rebuild(Vec<Record>, Option<i64>),
}

#[derive(Default)]
struct Removed {
    records: u64,
    tombstones: u64,
    /// The earliest delete horizon of a tombstone kept.
    earliest_horizon: Option<i64>,
}

fn decide(
    b: &RecordBatch,
    mapped: &Mapped,
    config: &CompactionConfig,
    now_ms: i64,
    removed: &mut Removed,
) -> Result<Fate, StorageError> {
    let records = records_of(b)?;
    let horizon = rewrite::delete_horizon_ms(b.header());
    let tombstones_expire = horizon.is_some_and(|h| now_ms >= h);
    let total = records.len();
    let mut kept = Vec::with_capacity(total);
    for r in records {
        let Some(key) = &r.key else {
            continue;
        };
        if mapped.map.get(key).is_some_and(|latest| r.offset < latest) {
            continue;
        }
        if r.value.is_none() && tombstones_expire {
            removed.tombstones += 1;
            continue;
        }
        kept.push(r);
    }
    removed.records += (total - kept.len()) as u64;
    let has_tombstone = kept.iter().any(|r| r.value.is_none());
    let new_horizon = match horizon {
        Some(h) if has_tombstone => Some(h),
        _ if has_tombstone => Some(now_ms.saturating_add(config.delete_retention_ms)),
        _ => None,
    };
    if let Some(h) = new_horizon {
        removed.earliest_horizon = Some(removed.earliest_horizon.map_or(h, |e| e.min(h)));
    }
    if kept.len() == total && new_horizon == horizon {
        return Ok(Fate::Copy);
    }
    let pid = b.header().producer_id;
    let producer_needs_it = pid >= 0
        && mapped
            .producer_last
            .get(&pid)
            .is_none_or(|&last| last == b.base_offset());
    if kept.is_empty() && !producer_needs_it {
        return Ok(Fate::Drop);
    }
    Ok(Fate::Rebuild(kept, new_horizon))
}

/// Consecutive segments cleaned into one: their source sizes fit `segment.bytes` and their
/// offsets fit the index's 32-bit relative offsets.
fn groups(segments: &[SegInfo], end: i64, segment_size_bytes: u64) -> Vec<Vec<SegInfo>> {
    let mut out: Vec<Vec<SegInfo>> = Vec::new();
    for s in segments.iter().filter(|s| s.base < end) {
        let fits = out.last().is_some_and(|g| {
            let size: u64 = g.iter().map(|x| x.size).sum();
            size + s.size <= segment_size_bytes && s.next - g[0].base < i64::from(i32::MAX)
        });
        match out.last_mut() {
            Some(g) if fits => g.push(*s),
            _ => out.push(vec![*s]),
        }
    }
    out
}

/// The cleaned files of one group, written and synced beside the originals.
pub(crate) struct Cleaned {
    pub group: Vec<SegInfo>,
    pub size: u64,
    pub index: SegmentIndex,
}

/// Buffered output of a `.log.cleaned` file.
struct Output<'a> {
    file: BufferedFile,
    path: std::path::PathBuf,
    pending: Vec<u8>,
    written: u64,
    cleaner: &'a Cleaner,
}

impl Output<'_> {
    async fn push(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        self.pending.extend_from_slice(bytes);
        if self.pending.len() >= self.cleaner.config.io_buffer_bytes {
            self.write_pending().await?;
        }
        Ok(())
    }

    async fn write_pending(&mut self) -> Result<(), StorageError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let buf = std::mem::take(&mut self.pending);
        let len = buf.len() as u64;
        self.file
            .write_all_at(buf, self.written)
            .await
            .map_err(|e| io_error("write", &self.path, e))?;
        self.written += len;
        self.cleaner.throttle.spend(len).await;
        Ok(())
    }
}

async fn open_output<'a>(
    log: &PartitionLog,
    cleaner: &'a Cleaner,
    path: std::path::PathBuf,
) -> Result<Output<'a>, StorageError> {
    let file = log
        .core
        .disk
        .open_buffered_write(&path, true)
        .await
        .map_err(|e| io_error("create", &path, e))?;
    file.truncate(0)
        .await
        .map_err(|e| io_error("truncate", &path, e))?;
    Ok(Output {
        file,
        path,
        pending: Vec::with_capacity(cleaner.config.io_buffer_bytes),
        written: 0,
        cleaner,
    })
}

/// Writes the cleaned log of `group` and its index files (all synced); the caller swaps them in.
async fn write_group(
    cleaner: &Cleaner,
    log: &PartitionLog,
    plan: &Plan,
    mapped: &Mapped,
    group: Vec<SegInfo>,
    now_ms: i64,
    removed: &mut Removed,
) -> Result<Cleaned, StorageError> {
    let base = group[0].base;
    let path = cleaned_path(&log.dir, base, LOG_SUFFIX);
    let _fds = log.core.descriptors(Share::Transient, 1, &path)?;
    let mut out = open_output(log, cleaner, path.clone()).await?;
    let mut index = SegmentIndex::new();
    for seg in &group {
        let mut reader = SegmentReader::open(log, cleaner, seg).await?;
        while let Some(b) = reader.next().await? {
            let bytes = match decide(&b, mapped, &plan.compaction, now_ms, removed)? {
                Fate::Drop => continue,
                Fate::Copy => b.as_bytes().clone(),
                Fate::Rebuild(kept, horizon) => rewrite::rebuild(b.header(), &kept, horizon)?,
            };
            let h = BatchHeader::parse(&bytes)?;
            let position = out.written + out.pending.len() as u64;
            index.note_batch(
                plan.index_interval_bytes,
                base,
                (h.base_offset - base) as u32,
                position as u32,
                bytes.len() as u64,
                h.max_timestamp,
            );
            out.push(&bytes).await?;
        }
        reader.close().await;
    }
    out.write_pending().await?;
    let end = group.last().expect("a group has a segment").next;
    index.push_time_entry(base, (end - base) as u32);
    out.file
        .sync_data()
        .await
        .map_err(|e| io_error("fdatasync", &path, e))?;
    let size = out.written;
    let _ = out.file.close().await;
    write_index_files(log, base, &index).await?;
    Ok(Cleaned { group, size, index })
}

async fn write_index_files(
    log: &PartitionLog,
    base: i64,
    index: &SegmentIndex,
) -> Result<(), StorageError> {
    let files = [
        (INDEX_SUFFIX, index.encode_offsets(0, index.offsets.len())),
        (TIME_INDEX_SUFFIX, index.encode_times(0, index.times.len())),
    ];
    for (suffix, bytes) in files {
        let path = cleaned_path(&log.dir, base, suffix);
        write_synced(log, &path, bytes).await?;
    }
    Ok(())
}

async fn write_synced(log: &PartitionLog, path: &Path, bytes: Vec<u8>) -> Result<(), StorageError> {
    let _fd = log.core.descriptors(Share::Transient, 1, path)?;
    let f = log
        .core
        .disk
        .open_buffered_write(path, true)
        .await
        .map_err(|e| io_error("create", path, e))?;
    f.truncate(0)
        .await
        .map_err(|e| io_error("truncate", path, e))?;
    f.write_all_at(bytes, 0)
        .await
        .map_err(|e| io_error("write", path, e))?;
    f.sync_data()
        .await
        .map_err(|e| io_error("fdatasync", path, e))?;
    f.close().await.map_err(|e| io_error("close", path, e))
}

/// Runs a planned cleaning: map, rewrite group by group, swap each in. None if the map could
/// not hold even one batch of the dirty section.
pub(crate) async fn clean(
    cleaner: &Cleaner,
    log: &Rc<PartitionLog>,
    plan: Plan,
    now_ms: i64,
) -> Result<Option<CleanOutcome>, StorageError> {
    let mapped = build_map(cleaner, log, &plan).await?;
    if plan.lag.dirty_bytes > 0 && mapped.end <= plan.lag.first_dirty_offset {
        tracing::warn!(
            dir = %log.dir.display(),
            "cleaner_dedupe_buffer_bytes cannot hold the keys of one batch: not cleaning"
        );
        return Ok(None);
    }
    let mut outcome = CleanOutcome {
        first_dirty_offset: mapped.end,
        ..CleanOutcome::default()
    };
    let mut removed = Removed::default();
    for group in groups(&plan.segments, mapped.end, plan.segment_size_bytes) {
        let bytes_in: u64 = group.iter().map(|s| s.size).sum();
        let segments_in = group.len();
        let cleaned = write_group(cleaner, log, &plan, &mapped, group, now_ms, &mut removed);
        let cleaned = match cleaned.await {
            Ok(c) => c,
            Err(e) => {
                swap::discard(log).await;
                return Err(e);
            }
        };
        let size = cleaned.size;
        if !swap::commit(log, cleaned).await? {
            tracing::info!(dir = %log.dir.display(), "segments changed while cleaning: skipped");
            return Ok(None);
        }
        outcome.segments_in += segments_in;
        outcome.segments_out += 1;
        outcome.bytes_in += bytes_in;
        outcome.bytes_out += size;
    }
    outcome.records_removed = removed.records;
    outcome.tombstones_removed = removed.tombstones;
    log.state.borrow_mut().cleaner.delete_horizon_ms = removed.earliest_horizon;
    Ok(Some(outcome))
}
