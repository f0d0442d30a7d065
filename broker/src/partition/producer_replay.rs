//! Rebuilding a partition's producer state: the newest usable snapshot, then the batch headers
//! of the log after it. Used when a partition opens (recovery) and after a truncation. Headers
//! are read through small windows of the segment files (records are skipped, not read), so the
//! cost is about one small read per large batch.

use borges_protocol::batch::{BatchHeader, BATCH_HEADER_SIZE_BYTES};
use borges_storage::{PartitionLog, ReadBound, ReadChunk, SegmentFile, StorageError};

use super::producer::{ProducerLimits, ProducerState};
use super::producer_snapshot;

/// Bytes of the log one replay step covers (the read returns file ranges, not data).
const REPLAY_STEP_BYTES: u64 = 64 << 20;
/// Window for reading headers when batches are small (several headers per read).
const HEADER_WINDOW_SMALL_BYTES: usize = 64 * 1024;
/// Window for reading headers after a large batch (the header and a little more).
const HEADER_WINDOW_LARGE_BYTES: usize = 4096;

/// What a rebuild did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rebuilt {
    /// Offset of the snapshot used; `None` when the log was replayed from its start.
    pub snapshot_offset: Option<i64>,
    /// Batches replayed after the snapshot.
    pub batches_replayed: u64,
    /// Log end the state covers.
    pub log_end_offset: i64,
}

/// Producer state of `log`: its newest snapshot at or below the log end, then every batch after
/// it, up to the log end as it is when this returns (appends that happen meanwhile are
/// replayed too).
pub async fn rebuild(
    log: &PartitionLog,
    limits: ProducerLimits,
) -> Result<(ProducerState, Rebuilt), StorageError> {
    let offsets = log.offsets();
    let snapshot = producer_snapshot::load_newest(log.dir(), offsets.log_end_offset, limits).await;
    let snapshot_offset = snapshot.as_ref().map(|(o, _)| *o);
    let (from, mut state) =
        snapshot.unwrap_or_else(|| (offsets.log_start_offset, ProducerState::new(limits)));
    let (end, batches) = replay_from(log, &mut state, from.max(offsets.log_start_offset)).await?;
    state.truncate_head(log.offsets().log_start_offset);
    Ok((
        state,
        Rebuilt {
            snapshot_offset,
            batches_replayed: batches,
            log_end_offset: end,
        },
    ))
}

/// Replays every batch from `from` to the current log end into `state`; returns (the log end
/// reached, batches replayed). The last check of the log end and the return happen without an
/// await in between, so nothing appended is missed.
pub async fn replay_from(
    log: &PartitionLog,
    state: &mut ProducerState,
    from: i64,
) -> Result<(i64, u64), StorageError> {
    let mut next = from;
    let mut batches = 0;
    loop {
        if next >= log.offsets().log_end_offset {
            return Ok((next, batches));
        }
        let read = log.read(next, REPLAY_STEP_BYTES, ReadBound::LogEnd).await?;
        if read.chunks.is_empty() {
            return Ok((next, batches));
        }
        for chunk in &read.chunks {
            let walked = match chunk {
                ReadChunk::Memory(bytes) => replay_memory(bytes, state, next)?,
                ReadChunk::File {
                    file,
                    position,
                    length,
                } => replay_file(file, *position, *length, state, next).await?,
            };
            assert!(walked.0 >= next, "replay moves forward");
            next = walked.0;
            batches += walked.1;
        }
    }
}

/// Applies the batches of one in-memory chunk at or after `from`: (next offset, batches).
fn replay_memory(
    bytes: &[u8],
    state: &mut ProducerState,
    from: i64,
) -> Result<(i64, u64), StorageError> {
    let mut at = 0;
    let (mut next, mut batches) = (from, 0);
    while at < bytes.len() {
        let h = BatchHeader::parse(&bytes[at..])?;
        if h.last_offset() >= from {
            state.replay(&h);
            batches += 1;
        }
        next = next.max(h.next_offset());
        at += h.size_bytes();
    }
    Ok((next, batches))
}

/// Applies the batches of `length` bytes at `position` of a segment file, reading headers only.
async fn replay_file(
    file: &SegmentFile,
    position: u64,
    length: u64,
    state: &mut ProducerState,
    from: i64,
) -> Result<(i64, u64), StorageError> {
    let end = position + length;
    let (mut pos, mut next, mut batches) = (position, from, 0);
    let mut window = HEADER_WINDOW_SMALL_BYTES;
    while pos < end {
        let want = (window as u64).min(end - pos) as usize;
        let buf = file
            .read_exact_at(pos, want)
            .await
            .map_err(|source| StorageError::Io {
                op: "read",
                path: file.path().to_path_buf(),
                source,
            })?;
        let mut at = 0usize;
        while at + BATCH_HEADER_SIZE_BYTES <= buf.len() {
            let h =
                BatchHeader::parse(&buf[at..]).map_err(|e| corrupt(file, pos + at as u64, e))?;
            if h.last_offset() >= from {
                state.replay(&h);
                batches += 1;
            }
            next = next.max(h.next_offset());
            at += h.size_bytes();
            window = if h.size_bytes() > HEADER_WINDOW_SMALL_BYTES / 4 {
                HEADER_WINDOW_LARGE_BYTES
            } else {
                HEADER_WINDOW_SMALL_BYTES
            };
        }
        if at == 0 {
            return Err(corrupt(
                file,
                pos,
                "a batch header crosses the end of the range",
            ));
        }
        pos += at as u64;
    }
    Ok((next, batches))
}

fn corrupt(file: &SegmentFile, position: u64, reason: impl std::fmt::Display) -> StorageError {
    StorageError::Corrupt {
        path: file.path().to_path_buf(),
        position,
        reason: format!("replaying producer state: {reason}"),
    }
}
