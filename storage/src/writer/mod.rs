//! The flusher: the one task per partition that touches its files.
//!
//! Each flush round takes the pending batches of the writer's segment (up to
//! `write_size_bytes_max x writes_in_flight_max` bytes), copies them once into aligned buffers
//! behind the retained partial last block, and writes from the block boundary with direct IO;
//! batches appended while its writes are in flight join it. Rounds never overlap, and within a
//! round no block is in two writes at once, so a partial block rewritten later is never in
//! flight twice. Under `Durability::Fsync` every round is followed by one fdatasync covering
//! all of it (group commit). The same task rolls segments, writes recovery checkpoints,
//! truncates and closes.
//!
//! The parts, each with its own contract:
//! - this module: [`Writer`], the open files of the segment being written and where writing
//!   stands (opening them at a position, closing them);
//! - `flusher`: the task's loop — what to do next (roll, periodic sync and checkpoint, a write
//!   round, a command), idling and hibernation, and what a failure does to the log directory;
//! - `chunks`: one write round — the pending batches copied once into aligned chunks and
//!   written, then the flushed point advanced;
//! - `sync`: fdatasync and the recovery checkpoint — the synced point advances only after the
//!   fdatasync that covers it returned;
//! - `roll`: finalizing a full segment and opening the next, and the clean close.

mod chunks;
mod flusher;
mod roll;
mod sync;

use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use borges_runtime::fs::{BufferedFile, DirectFile, Disk};
use borges_runtime::time::Instant;

use crate::config::WRITER_DESCRIPTORS;
use crate::core::{CoreStorage, Descriptors, Share};
use crate::index::{OFFSET_ENTRY_SIZE_BYTES, TIME_ENTRY_SIZE_BYTES};
use crate::segment::{segment_path, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::StorageError;

pub(crate) use flusher::spawn_flusher;

/// The storage error for a failed file operation: out of descriptors (`EMFILE`, `ENFILE`) is
/// transient, out of space (`ENOSPC`, `EDQUOT`) makes the directory read-only, except from an
/// fdatasync or fsync, which like every other error takes the directory offline (after a failed
/// sync the kernel may have dropped the data, so nothing is retried as if it had succeeded).
pub(crate) fn io_error(op: &'static str, path: &Path, source: io::Error) -> StorageError {
    let path = path.to_path_buf();
    match source.raw_os_error() {
        Some(libc::EMFILE | libc::ENFILE) => StorageError::TooManyOpenFiles { op, path, source },
        Some(libc::ENOSPC | libc::EDQUOT) if !op.contains("sync") => {
            StorageError::NoSpace { op, path, source }
        }
        _ => StorageError::Io { op, path, source },
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
    /// The three descriptors, counted against the core's budget while open.
    _descriptors: Descriptors,
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
            _descriptors: _,
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

    /// Opens (creating if needed) the files of segment `base` to continue writing at
    /// `end_position`: drops any bytes after it (torn or pre-allocated tail), keeps
    /// `persisted_offsets` / `persisted_times` index entries, loads the partial last block.
    pub async fn open(
        core: &CoreStorage,
        dir: &Path,
        base: i64,
        end_position: u64,
        persisted_offsets: usize,
        persisted_times: usize,
    ) -> Result<Writer, StorageError> {
        let log_path = segment_path(dir, base, LOG_SUFFIX);
        let descriptors = core.descriptors(Share::Writers, WRITER_DESCRIPTORS, &log_path)?;
        Writer::open_counted(
            core,
            dir,
            (base, end_position),
            (persisted_offsets, persisted_times),
            descriptors,
        )
        .await
    }

    /// [`Writer::open`] of the writer that is to replace this one (roll, truncation): its
    /// descriptors are borrowed from the transient share while both are open and the new
    /// writer then takes over this one's place in the writers' share, so that a core whose
    /// writers' share is full can still roll.
    pub async fn open_replacement(
        &mut self,
        core: &CoreStorage,
        dir: &Path,
        (base, end_position): (i64, u64),
        persisted: (usize, usize),
    ) -> Result<Writer, StorageError> {
        let log_path = segment_path(dir, base, LOG_SUFFIX);
        let descriptors = core.descriptors(Share::Transient, WRITER_DESCRIPTORS, &log_path)?;
        let mut next =
            Writer::open_counted(core, dir, (base, end_position), persisted, descriptors).await?;
        std::mem::swap(&mut next._descriptors, &mut self._descriptors);
        Ok(next)
    }

    async fn open_counted(
        core: &CoreStorage,
        dir: &Path,
        (base, end_position): (i64, u64),
        (persisted_offsets, persisted_times): (usize, usize),
        descriptors: Descriptors,
    ) -> Result<Writer, StorageError> {
        let log_path = segment_path(dir, base, LOG_SUFFIX);
        let file = core
            .disk
            .open_direct_write(&log_path, true)
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
        let tail = read_tail(&file, end_position, &log_path).await?;
        let index_file = open_index(
            &core.disk,
            dir,
            base,
            INDEX_SUFFIX,
            persisted_offsets * OFFSET_ENTRY_SIZE_BYTES,
        )
        .await?;
        let time_file = open_index(
            &core.disk,
            dir,
            base,
            TIME_INDEX_SUFFIX,
            persisted_times * TIME_ENTRY_SIZE_BYTES,
        )
        .await?;
        let now = core.clock.now();
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
            _descriptors: descriptors,
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

/// The bytes of the partial last block before `end_position`,
/// `[align_down(end_position), end_position)`.
async fn read_tail(
    file: &DirectFile,
    end_position: u64,
    log_path: &Path,
) -> Result<Vec<u8>, StorageError> {
    let tail_start = align_down(end_position, file.alignment());
    if tail_start == end_position {
        return Ok(Vec::new());
    }
    let len = (end_position - tail_start) as usize;
    let got = file
        .read_at(tail_start, len)
        .await
        .map_err(|e| io_error("read", log_path, e))?;
    if got.len() != len {
        return Err(io_error(
            "read",
            log_path,
            io::Error::new(io::ErrorKind::UnexpectedEof, "short read of the last block"),
        ));
    }
    Ok(got.to_vec())
}

async fn open_index(
    disk: &Disk,
    dir: &Path,
    base: i64,
    suffix: &str,
    keep_bytes: usize,
) -> Result<BufferedFile, StorageError> {
    let path = segment_path(dir, base, suffix);
    let f = disk
        .open_buffered_write(&path, true)
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
