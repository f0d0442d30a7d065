//! Reads: batch-aligned chunks by offset, copied bytes, lookups by timestamp.

use std::cell::RefCell;
use std::rc::Rc;

use borges_protocol::batch::{self, BatchHeader, RecordBatch, BATCH_HEADER_SIZE_BYTES};
use bytes::{Bytes, BytesMut};

use crate::core::OpenSegment;
use crate::index::SegmentIndex;
use crate::log::{LogOffsets, PartitionLog, ReadBound};
use crate::recovery::{read_index_files, rebuild_closed_index};
use crate::segment::{segment_path, SegmentFile, LOG_SUFFIX};
use crate::writer::io_error;
use crate::StorageError;

/// One piece of a read, batch-aligned. Memory for the recent tail, File for sendfile.
#[derive(Clone, Debug)]
pub enum ReadChunk {
    /// One whole batch held in memory.
    Memory(Bytes),
    /// `length` bytes of whole batches at `position` of a segment file.
    File {
        /// The segment's read descriptor, kept open while the chunk lives.
        file: Rc<SegmentFile>,
        /// Byte position in the file.
        position: u64,
        /// Bytes.
        length: u64,
    },
}

impl ReadChunk {
    /// Bytes in this chunk.
    pub fn len(&self) -> u64 {
        match self {
            ReadChunk::Memory(b) => b.len() as u64,
            ReadChunk::File { length, .. } => *length,
        }
    }

    /// Whether the chunk is empty (never produced by reads).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The result of [`PartitionLog::read`].
#[derive(Clone, Debug)]
pub struct LogRead {
    /// Whole batches, in offset order.
    pub chunks: Vec<ReadChunk>,
    /// Sum of the chunk lengths.
    pub size_bytes: u64,
    /// The log's offsets when the read started.
    pub offsets: LogOffsets,
}

/// Reads batch headers from a segment file through a window, to walk from an index entry to a
/// batch without one read per header.
struct HeaderReader<'a> {
    file: &'a SegmentFile,
    window_start: u64,
    window: Vec<u8>,
}

const HEADER_WINDOW_BYTES: usize = 64 * 1024;

impl HeaderReader<'_> {
    async fn header_at(&mut self, position: u64) -> Result<BatchHeader, StorageError> {
        let in_window = position >= self.window_start
            && position + BATCH_HEADER_SIZE_BYTES as u64
                <= self.window_start + self.window.len() as u64;
        if !in_window {
            let got = self
                .file
                .read_at(position, HEADER_WINDOW_BYTES)
                .await
                .map_err(|e| io_error("read", self.file.path(), e))?;
            self.window_start = position;
            self.window = got.to_vec();
        }
        let at = (position - self.window_start) as usize;
        BatchHeader::parse(&self.window[at.min(self.window.len())..]).map_err(|e| {
            StorageError::Corrupt {
                path: self.file.path().to_path_buf(),
                position,
                reason: format!("batch header unreadable where the index points: {e}"),
            }
        })
    }
}

/// Where a file read in one segment may go: up to this position / offset.
#[derive(Clone, Copy, Debug)]
struct FileLimit {
    segment_base: i64,
    position: u64,
    offset: i64,
}

impl PartitionLog {
    /// Batch-aligned chunks starting at the batch that contains `offset`, up to `max_bytes`
    /// (at least one whole batch even when larger, so consumers always progress), stopping at
    /// `bound`, or earlier when the core's read descriptors (`open_files_max`, held by reads
    /// not yet sent) run out; with none for even the first chunk, `TooManyOpenFiles`.
    /// offset == bound end → empty read. offset < log start or > log end → OffsetOutOfRange.
    pub async fn read(
        &self,
        offset: i64,
        max_bytes: u64,
        bound: ReadBound,
    ) -> Result<LogRead, StorageError> {
        let (offsets, end) = self.read_bounds(offset, bound)?;
        let mut chunks = Vec::new();
        let mut size = 0u64;
        let mut cur = offset;
        let mut swap_retries = 0;
        while cur < end && (chunks.is_empty() || size < max_bytes) {
            if self.read_memory(cur, end, max_bytes, &mut chunks, &mut size) {
                break;
            }
            // A cleaner swap replaces segment files: file reads wait for it (a few ms).
            self.wait_swap().await;
            let Some(limit) = self.file_limit(cur, end) else {
                break;
            };
            let read = self
                .read_file(
                    cur,
                    limit,
                    max_bytes.saturating_sub(size),
                    chunks.is_empty(),
                )
                .await;
            let (chunk, next) = match read {
                // The segment was swapped or deleted while this read opened it: look again.
                Err(e) if e.is_not_found() && swap_retries < 3 => {
                    swap_retries += 1;
                    continue;
                }
                // Each segment a read spans holds a read descriptor until the read is sent:
                // when the core's share is spent, this read ends with what it has.
                Err(StorageError::TooManyOpenFiles { .. }) if !chunks.is_empty() => break,
                other => other?,
            };
            let Some(chunk) = chunk else {
                if next > cur {
                    cur = next;
                    continue;
                }
                break;
            };
            size += chunk.len();
            chunks.push(chunk);
            if next <= cur {
                break;
            }
            cur = next;
        }
        Ok(LogRead {
            chunks,
            size_bytes: size,
            offsets,
        })
    }

    fn read_bounds(
        &self,
        offset: i64,
        bound: ReadBound,
    ) -> Result<(LogOffsets, i64), StorageError> {
        let st = self.state.borrow();
        if let Some(e) = st.corrupt_error() {
            return Err(e);
        }
        if st.flusher_stopped {
            return Err(StorageError::Closed);
        }
        let offsets = LogOffsets {
            log_start_offset: st.log_start_offset,
            high_watermark: st.hw.offset,
            log_end_offset: st.log_end_offset(),
        };
        if offset < offsets.log_start_offset || offset > offsets.log_end_offset {
            return Err(StorageError::OffsetOutOfRange {
                offset,
                log_start_offset: offsets.log_start_offset,
                log_end_offset: offsets.log_end_offset,
            });
        }
        let end = match bound {
            ReadBound::HighWatermark => offsets.high_watermark,
            ReadBound::LogEnd => offsets.log_end_offset,
        };
        Ok((offsets, end))
    }

    /// Serves from memory if `cur` is in the in-memory tail; true if it did (the tail reaches
    /// the end of the log, so nothing follows).
    fn read_memory(
        &self,
        cur: i64,
        end: i64,
        max_bytes: u64,
        chunks: &mut Vec<crate::ReadChunk>,
        size: &mut u64,
    ) -> bool {
        let st = self.state.borrow();
        if st.mem.front().is_none_or(|b| b.base_offset > cur) {
            return false;
        }
        let first = st.mem.partition_point(|b| b.last_offset < cur);
        for b in st.mem.range(first..) {
            if b.base_offset >= end || (!chunks.is_empty() && *size + b.size() > max_bytes) {
                break;
            }
            *size += b.size();
            chunks.push(ReadChunk::Memory(b.bytes.clone()));
        }
        true
    }

    /// How far a file read starting at `cur` may go in its segment.
    fn file_limit(&self, cur: i64, end: i64) -> Option<FileLimit> {
        let st = self.state.borrow();
        let (_, seg) = st.segments.range(..=cur).next_back()?;
        let flushed = st.flushed;
        let mut limit = if seg.base_offset < flushed.segment_base {
            FileLimit {
                segment_base: seg.base_offset,
                position: seg.size_bytes,
                offset: seg.next_offset,
            }
        } else if seg.base_offset == flushed.segment_base {
            FileLimit {
                segment_base: seg.base_offset,
                position: flushed.position,
                offset: flushed.offset,
            }
        } else {
            return None;
        };
        if let Some(m) = st.mem.front() {
            if m.segment_base == seg.base_offset && m.base_offset < limit.offset {
                limit.position = m.position;
                limit.offset = m.base_offset;
            }
        }
        if end < limit.offset && st.hw.offset == end && st.hw.segment_base == seg.base_offset {
            limit.position = st.hw.position;
            limit.offset = end;
        }
        (cur < limit.offset).then_some(limit)
    }

    /// The read descriptor (and cached index) of segment `base`, from the core's LRU.
    pub(crate) async fn open_segment(&self, base: i64) -> Result<Rc<OpenSegment>, StorageError> {
        if let Some(s) = self.core.cached_file(self.id, base) {
            return Ok(s);
        }
        let path = segment_path(&self.dir, base, LOG_SUFFIX);
        let descriptors = self.core.descriptors(crate::core::Share::Reads, 1, &path)?;
        let file = SegmentFile::open(&self.core.disk, path.clone(), descriptors)
            .await
            .map_err(|e| io_error("open", &path, e))?;
        let seg = Rc::new(OpenSegment {
            file: Rc::new(file),
            index: RefCell::new(None),
        });
        self.core.insert_file(self.id, base, seg.clone());
        Ok(seg)
    }

    /// Runs `f` on the index of segment `base`: the live one, or the finalized one from disk.
    async fn with_index<R>(
        &self,
        base: i64,
        open: &OpenSegment,
        f: impl Fn(&SegmentIndex) -> R,
    ) -> Result<R, StorageError> {
        let size = {
            let st = self.state.borrow();
            // Retention (or truncation) removed the segment while this read was under way.
            let seg = st
                .segments
                .get(&base)
                .ok_or_else(|| StorageError::OffsetOutOfRange {
                    offset: base,
                    log_start_offset: st.log_start_offset,
                    log_end_offset: st.log_end_offset(),
                })?;
            if let Some(live) = &seg.live {
                return Ok(f(live));
            }
            seg.size_bytes
        };
        if let Some(idx) = open.index.borrow().as_ref() {
            return Ok(f(idx));
        }
        let idx = match read_index_files(&self.core, &self.dir, base, size).await? {
            Some(i) => i,
            None => {
                let interval = self.state.borrow().config.index_interval_bytes;
                rebuild_closed_index(&self.core, &self.dir, base, None, interval)
                    .await?
                    .0
            }
        };
        let idx = Rc::new(idx);
        *open.index.borrow_mut() = Some(idx.clone());
        Ok(f(&idx))
    }

    /// The position and header of the batch containing `cur` in segment `base`, searching
    /// below `limit_position`.
    async fn find_batch(
        &self,
        open: &OpenSegment,
        reader: &mut HeaderReader<'_>,
        base: i64,
        cur: i64,
        limit_position: u64,
    ) -> Result<Option<(u64, BatchHeader)>, StorageError> {
        let (mut pos, mut off) = self.with_index(base, open, |i| i.lookup(base, cur)).await?;
        loop {
            if pos >= limit_position {
                return Ok(None);
            }
            let h = reader.header_at(pos).await?;
            // Offsets increase; compaction leaves holes between batches.
            if h.base_offset < off {
                return Err(StorageError::Corrupt {
                    path: open.file.path().to_path_buf(),
                    position: pos,
                    reason: format!(
                        "batch base offset {} where at least {off} was expected",
                        h.base_offset
                    ),
                });
            }
            if h.last_offset() >= cur {
                return Ok(Some((pos, h)));
            }
            pos += h.size_bytes() as u64;
            off = h.next_offset();
        }
    }

    /// Segment, position and base offset of the batch holding `offset` (flushed or in memory).
    pub(crate) async fn locate(&self, offset: i64) -> Result<(i64, u64, i64), StorageError> {
        {
            let st = self.state.borrow();
            let i = st.mem.partition_point(|b| b.last_offset < offset);
            if let Some(b) = st.mem.get(i) {
                if b.base_offset <= offset {
                    return Ok((b.segment_base, b.position, b.base_offset));
                }
            }
        }
        let limit = self
            .file_limit(offset, i64::MAX)
            .ok_or(StorageError::Closed)?;
        let open = self.open_segment(limit.segment_base).await?;
        let mut reader = HeaderReader {
            file: &open.file,
            window_start: 0,
            window: Vec::new(),
        };
        match self
            .find_batch(
                &open,
                &mut reader,
                limit.segment_base,
                offset,
                limit.position,
            )
            .await?
        {
            Some((pos, h)) => Ok((limit.segment_base, pos, h.base_offset)),
            None => Err(StorageError::Closed),
        }
    }

    /// Runs `f` on the index of segment `base` (public to the crate for truncation).
    pub(crate) async fn segment_index<R>(
        &self,
        base: i64,
        f: impl Fn(&SegmentIndex) -> R,
    ) -> Result<R, StorageError> {
        let open = self.open_segment(base).await?;
        self.with_index(base, &open, f).await
    }

    /// One File chunk from the batch containing `cur` up to `limit`, within `budget` bytes
    /// (or one batch if `first`). Returns the chunk and the offset after it.
    async fn read_file(
        &self,
        cur: i64,
        limit: FileLimit,
        budget: u64,
        first: bool,
    ) -> Result<(Option<ReadChunk>, i64), StorageError> {
        let base = limit.segment_base;
        let open = self.open_segment(base).await?;
        let mut reader = HeaderReader {
            file: &open.file,
            window_start: 0,
            window: Vec::new(),
        };
        let Some((pos, header)) = self
            .find_batch(&open, &mut reader, base, cur, limit.position)
            .await?
        else {
            // Nothing at or after `cur` in this segment (a hole left by compaction at its
            // end): the read goes on from where the segment's range ends.
            return Ok((None, limit.offset));
        };
        let start = pos;
        let budget_end = start.saturating_add(budget);
        let (end_pos, end_off) = if limit.position <= budget_end {
            (limit.position, limit.offset)
        } else {
            let from = self
                .with_index(base, &open, |i| {
                    i.last_entry_within(base, start, budget_end)
                })
                .await?
                .unwrap_or((start, header.base_offset));
            let (mut p, mut o) = from;
            while p < limit.position {
                let h = reader.header_at(p).await?;
                if p + h.size_bytes() as u64 > budget_end {
                    break;
                }
                p += h.size_bytes() as u64;
                o = h.next_offset();
            }
            if p == start && first {
                (start + header.size_bytes() as u64, header.next_offset())
            } else {
                (p, o)
            }
        };
        if end_pos == start {
            return Ok((None, cur));
        }
        let chunk = ReadChunk::File {
            file: open.file.clone(),
            position: start,
            length: end_pos - start,
        };
        Ok((Some(chunk), end_off))
    }

    /// Same range as `read`, in memory: the tail cache's chunks as they are (shared, not
    /// copied), file ranges read, every batch read from a file CRC-checked (a mismatch marks
    /// the partition corrupt). The copy path (TLS, `send_mode = "copy"`) sends these one after
    /// the other: a copy into one buffer here cost a TLS fetch of recent data 12% of the
    /// broker's CPU (docs/benchmarks.md section 10).
    pub async fn read_in_memory(
        &self,
        offset: i64,
        max_bytes: u64,
        bound: ReadBound,
    ) -> Result<(Vec<Bytes>, LogOffsets), StorageError> {
        let read = self.read(offset, max_bytes, bound).await?;
        let mut out = Vec::with_capacity(read.chunks.len());
        for chunk in read.chunks {
            match chunk {
                ReadChunk::Memory(b) => out.push(b),
                ReadChunk::File {
                    file,
                    position,
                    length,
                } => {
                    let bytes = file
                        .read_exact_at(position, length as usize)
                        .await
                        .map_err(|e| io_error("read", file.path(), e))?;
                    self.check_file_batches(&file, position, &bytes)?;
                    out.push(Bytes::from(bytes));
                }
            }
        }
        Ok((out, read.offsets))
    }

    /// Same range as [`PartitionLog::read_in_memory`], in one buffer (a single chunk is not
    /// copied).
    pub async fn read_bytes(
        &self,
        offset: i64,
        max_bytes: u64,
        bound: ReadBound,
    ) -> Result<(Bytes, LogOffsets), StorageError> {
        let (mut chunks, offsets) = self.read_in_memory(offset, max_bytes, bound).await?;
        if chunks.len() <= 1 {
            return Ok((chunks.pop().unwrap_or_default(), offsets));
        }
        let mut out = BytesMut::with_capacity(chunks.iter().map(Bytes::len).sum());
        for chunk in &chunks {
            out.extend_from_slice(chunk);
        }
        Ok((out.freeze(), offsets))
    }

    fn check_file_batches(
        &self,
        file: &SegmentFile,
        position: u64,
        bytes: &[u8],
    ) -> Result<(), StorageError> {
        let mut at = 0usize;
        for item in batch::BatchIter::new(bytes) {
            match item {
                Ok((_, range)) => at = range.end,
                Err(e) => {
                    return Err(self.mark_corrupt(
                        file.path(),
                        position + at as u64,
                        &e.to_string(),
                    ))
                }
            }
        }
        Ok(())
    }

    /// First offset whose record timestamp >= `timestamp_ms` (record-exact, as Kafka), with that
    /// record's timestamp; None if every record is older. Searches below the high watermark.
    pub async fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<(i64, i64)>, StorageError> {
        let candidate = {
            let st = self.state.borrow();
            st.segments
                .values()
                .find(|s| s.max_timestamp >= timestamp_ms && s.base_offset < st.hw.offset)
                .map(|s| {
                    (
                        s.base_offset,
                        s.live
                            .as_ref()
                            .map(|i| i.time_lookup(s.base_offset, timestamp_ms)),
                    )
                })
        };
        let Some((base, live_start)) = candidate else {
            return Ok(None);
        };
        let mut cur = match live_start {
            Some(start) => start,
            None => {
                let open = self.open_segment(base).await?;
                self.with_index(base, &open, |i| i.time_lookup(base, timestamp_ms))
                    .await?
            }
        };
        cur = cur.max(self.offsets().log_start_offset);
        loop {
            let (bytes, offsets) = self
                .read_bytes(cur, 1 << 20, ReadBound::HighWatermark)
                .await?;
            if bytes.is_empty() {
                return Ok(None);
            }
            for b in RecordBatch::parse_many(&bytes)? {
                cur = b.last_offset() + 1;
                if b.header().max_timestamp < timestamp_ms {
                    continue;
                }
                let records = b.records(batch::DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT)?;
                if let Some(r) = records.iter().find(|r| r.timestamp >= timestamp_ms) {
                    return Ok(Some((r.offset, r.timestamp)));
                }
            }
            if cur >= offsets.high_watermark {
                return Ok(None);
            }
        }
    }

    /// (offset, timestamp) of the record with the largest timestamp (ListOffsets -3); the
    /// earliest such record if several share it. Considers every appended record.
    pub async fn max_timestamp(&self) -> Result<Option<(i64, i64)>, StorageError> {
        let best = {
            let st = self.state.borrow();
            let mut best: Option<(i64, i64)> = None;
            for s in st.segments.values() {
                if s.max_timestamp > crate::index::NO_TIMESTAMP
                    && best.is_none_or(|(t, _)| s.max_timestamp > t)
                {
                    best = Some((s.max_timestamp, s.max_timestamp_offset));
                }
            }
            best
        };
        let Some((ts, offset)) = best else {
            return Ok(None);
        };
        let (bytes, _) = self.read_bytes(offset, 1, ReadBound::LogEnd).await?;
        for b in RecordBatch::parse_many(&bytes)? {
            let records = b.records(batch::DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT)?;
            if let Some(r) = records.iter().find(|r| r.timestamp == ts) {
                return Ok(Some((r.offset, r.timestamp)));
            }
        }
        Ok(Some((offset, ts)))
    }
}
