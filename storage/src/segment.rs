//! Segment files: names, per-segment metadata, and the plain read descriptor used by readers.

use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};

use borges_runtime::fs::{BufferedFile, Disk};

use crate::index::SegmentIndex;

/// Suffix of segment log files.
pub const LOG_SUFFIX: &str = "log";
/// Suffix of offset-index files.
pub const INDEX_SUFFIX: &str = "index";
/// Suffix of time-index files.
pub const TIME_INDEX_SUFFIX: &str = "timeindex";

/// `<dir>/<20-digit base offset>.<suffix>`.
pub fn segment_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}.{suffix}"))
}

/// The base offset encoded in a segment file name with `suffix`, if it is one.
pub fn parse_segment_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?.strip_suffix('.')?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// A segment's plain (not O_DIRECT) read-only descriptor kept open while a read uses it, so that
/// retention deleting the segment cannot pull the data away mid-send. Reads through it use the
/// page cache, which makes it the descriptor for `sendfile`. Lives on the partition's core.
pub struct SegmentFile {
    file: BufferedFile,
    path: PathBuf,
    /// Counted against the core's descriptor budget while open.
    _descriptors: crate::core::Descriptors,
}

impl SegmentFile {
    pub(crate) async fn open(
        disk: &Disk,
        path: PathBuf,
        descriptors: crate::core::Descriptors,
    ) -> std::io::Result<SegmentFile> {
        let file = disk.open_buffered_read(&path).await?;
        Ok(SegmentFile {
            file,
            path,
            _descriptors: descriptors,
        })
    }

    /// The segment file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads exactly `len` bytes at `position` (page cache, io_uring).
    pub async fn read_exact_at(&self, position: u64, len: usize) -> std::io::Result<Vec<u8>> {
        self.file.read_exact_at(position, len).await
    }

    pub(crate) async fn read_at(
        &self,
        position: u64,
        len: usize,
    ) -> std::io::Result<borges_runtime::fs::ReadBuf> {
        self.file.read_at(position, len).await
    }
}

impl AsRawFd for SegmentFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}

impl std::fmt::Debug for SegmentFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SegmentFile({})", self.path.display())
    }
}

/// What the log knows about one segment. Lives on the partition's core.
#[derive(Debug)]
pub(crate) struct SegmentMeta {
    /// Offset of the first batch (the file name).
    pub base_offset: i64,
    /// Offset after the last batch assigned to this segment.
    pub next_offset: i64,
    /// Bytes of batches assigned to this segment (appended, maybe not yet flushed).
    pub size_bytes: u64,
    /// Largest batch max_timestamp, `NO_TIMESTAMP` if none.
    pub max_timestamp: i64,
    /// Base offset of the first batch holding `max_timestamp`.
    pub max_timestamp_offset: i64,
    /// Wall-clock ms of the first append (or of recovery) for `segment_ms`; None while empty.
    pub first_append_ms: Option<i64>,
    /// Wall-clock ms of the last change (file mtime at open): retention's fallback when the
    /// segment has no timestamps.
    pub last_modified_ms: i64,
    /// The in-memory index while the segment is written; None once finalized (the index files
    /// are then complete and loaded on demand).
    pub live: Option<SegmentIndex>,
    /// No more appends go to this segment.
    pub closed: bool,
}

impl SegmentMeta {
    /// An empty active segment made at wall-clock `now_ms`.
    pub fn new_active(base_offset: i64, index: SegmentIndex, now_ms: i64) -> SegmentMeta {
        SegmentMeta {
            base_offset,
            next_offset: base_offset,
            size_bytes: 0,
            max_timestamp: index.max_timestamp,
            max_timestamp_offset: index.max_timestamp_offset,
            first_append_ms: None,
            last_modified_ms: now_ms,
            live: Some(index),
            closed: false,
        }
    }

    /// Finalized: closed, on disk with exact size and complete index files.
    pub fn is_finalized(&self) -> bool {
        self.closed && self.live.is_none()
    }

    pub fn is_empty(&self) -> bool {
        self.next_offset == self.base_offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let p = segment_path(Path::new("/d"), 42, LOG_SUFFIX);
        assert_eq!(p, Path::new("/d/00000000000000000042.log"));
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(parse_segment_name(name, LOG_SUFFIX), Some(42));
        assert_eq!(parse_segment_name(name, INDEX_SUFFIX), None);
        assert_eq!(parse_segment_name("0042.log", LOG_SUFFIX), None);
        assert_eq!(
            parse_segment_name("0000000000000000004x.log", LOG_SUFFIX),
            None
        );
    }
}
