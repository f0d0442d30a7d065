//! Opening a partition directory: find the segments, trust what the recovery checkpoint
//! covers, revalidate batch by batch from the recovery point, cut a torn tail, rebuild indexes.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use borges_runtime::sync::Notify;

use crate::checkpoint::{
    LeaderEpochCache, RecoveryCheckpoint, CLEAN_SHUTDOWN_FILE, LEADER_EPOCH_FILE,
    RECOVERY_CHECKPOINT_FILE,
};
use crate::config::LogConfig;
use crate::core::CoreStorage;
use crate::index::{SegmentIndex, TIME_ENTRY_SIZE_BYTES};
use crate::log::{Gate, LogState, PartitionLog, Point};
use crate::scan::{scan_segment, ScanStop};
use crate::segment::{
    parse_segment_name, segment_path, SegmentMeta, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX,
};
use crate::writer::{io_error, spawn_flusher, Writer};
use crate::StorageError;

/// What is found in a partition directory before recovery.
struct DirListing {
    bases: Vec<i64>,
    clean: bool,
    checkpoint: Option<RecoveryCheckpoint>,
    /// None: the file is missing or invalid.
    epochs: Option<LeaderEpochCache>,
}

async fn list_dir(core: &CoreStorage, dir: &Path) -> Result<DirListing, StorageError> {
    let disk = &core.disk;
    if !dir.exists() {
        disk.create_dir_all(dir)
            .await
            .map_err(|e| io_error("create directory", dir, e))?;
        // The new directory's entry in its parent must survive a power loss too (found by the
        // power-loss test: without this fsync a new partition could vanish with its data).
        if let Some(parent) = dir.parent() {
            core.sync_dir(parent).await?;
        }
    }
    let mut bases = Vec::new();
    let mut indexes = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_error("list directory", dir, e))? {
        let entry = entry.map_err(|e| io_error("list directory", dir, e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(base) = parse_segment_name(&name, LOG_SUFFIX) {
            bases.push(base);
        } else if let Some(base) = parse_segment_name(&name, INDEX_SUFFIX)
            .or_else(|| parse_segment_name(&name, TIME_INDEX_SUFFIX))
        {
            indexes.push((base, entry.path()));
        } else if name.starts_with('.') && name.ends_with(".tmp") {
            let _ = disk.remove_file(entry.path()).await;
        }
    }
    bases.sort_unstable();
    for (base, path) in indexes {
        if bases.binary_search(&base).is_err() {
            tracing::info!(file = %path.display(), "removing index file without a segment");
            let _ = disk.remove_file(path).await;
        }
    }
    let checkpoint = match std::fs::read(dir.join(RECOVERY_CHECKPOINT_FILE)) {
        Ok(bytes) => match RecoveryCheckpoint::decode(&bytes) {
            Ok(cp) => Some(cp),
            Err(reason) => {
                tracing::warn!(dir = %dir.display(), "ignoring invalid recovery checkpoint: {reason}");
                None
            }
        },
        Err(_) => None,
    };
    let epochs = match std::fs::read(dir.join(LEADER_EPOCH_FILE)) {
        Ok(bytes) => LeaderEpochCache::decode(&bytes)
            .map_err(|reason| {
                tracing::warn!(dir = %dir.display(), "invalid leader-epoch file: {reason}");
            })
            .ok(),
        Err(_) => None,
    };
    Ok(DirListing {
        bases,
        clean: dir.join(CLEAN_SHUTDOWN_FILE).exists(),
        checkpoint,
        epochs,
    })
}

fn mtime_ms(path: &Path) -> i64 {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_millis() as i64)
}

fn file_size(path: &Path) -> Result<u64, StorageError> {
    std::fs::metadata(path)
        .map(|m| m.len())
        .map_err(|e| io_error("stat", path, e))
}

/// Reads both index files of a segment whose log holds `log_size` bytes: `None` if they are
/// missing, unreadable or invalid (to be rebuilt); an error only when descriptors ran out
/// (transient: rebuilding would not help).
pub(crate) async fn read_index_files(
    core: &CoreStorage,
    dir: &Path,
    base: i64,
    log_size: u64,
) -> Result<Option<SegmentIndex>, StorageError> {
    let read = |suffix: &'static str| {
        let path = segment_path(dir, base, suffix);
        async move {
            let _fd = core.descriptors(crate::core::Share::Transient, 1, &path)?;
            let f = match core.disk.open_buffered_read(&path).await {
                Ok(f) => f,
                Err(e) => {
                    return match io_error("open", &path, e) {
                        e @ StorageError::TooManyOpenFiles { .. } => Err(e),
                        _ => Ok(None),
                    }
                }
            };
            let size = f.size().await.ok();
            let bytes = match size {
                Some(size) => f.read_exact_at(0, size as usize).await.ok(),
                None => None,
            };
            let _ = f.close().await;
            Ok::<_, StorageError>(bytes)
        }
    };
    let Some(offsets) = read(INDEX_SUFFIX).await? else {
        return Ok(None);
    };
    let Some(times) = read(TIME_INDEX_SUFFIX).await? else {
        return Ok(None);
    };
    match SegmentIndex::decode(base, &offsets, &times, log_size.max(1)) {
        Ok(i) => Ok(Some(i)),
        Err(e) => {
            tracing::warn!(dir = %dir.display(), base, "invalid index files: {}", e.0);
            Ok(None)
        }
    }
}

/// Scans a whole closed segment (CRC included) and rewrites its index files. Anything but a
/// clean end at `expected_next` is corruption (this data is before the recovery point).
pub(crate) async fn rebuild_closed_index(
    core: &CoreStorage,
    dir: &Path,
    base: i64,
    expected_next: Option<i64>,
    interval: u32,
) -> Result<(SegmentIndex, u64), StorageError> {
    let path = segment_path(dir, base, LOG_SUFFIX);
    tracing::warn!(file = %path.display(), "rebuilding the indexes of a closed segment");
    let size = file_size(&path)?;
    let _fd = core.descriptors(crate::core::Share::Transient, 1, &path)?;
    let file = Rc::new(
        core.disk
            .open_direct_read(&path)
            .await
            .map_err(|e| io_error("open", &path, e))?,
    );
    let mut index = SegmentIndex::new();
    let mut on_batch = |pos: u64, h: &borges_protocol::batch::BatchHeader| {
        index.note_batch(
            interval,
            base,
            (h.base_offset - base) as u32,
            pos as u32,
            h.size_bytes() as u64,
            h.max_timestamp,
        );
    };
    let outcome = scan_segment(
        &file,
        size,
        0,
        base,
        core.tuning.scan_read_size_bytes,
        &mut on_batch,
    )
    .await
    .map_err(|e| io_error("read", &path, e))?;
    // A cleaned segment may end before the next segment's base (compaction holes).
    let clean_end = outcome.stop == ScanStop::EndOfFile
        && expected_next.is_none_or(|n| outcome.next_offset <= n);
    if !clean_end {
        return Err(corrupt(
            &path,
            outcome.end_position,
            &format!("{:?} (next offset {})", outcome.stop, outcome.next_offset),
        ));
    }
    index.push_time_entry(base, (outcome.next_offset - base) as u32);
    let mut w = Writer::open(core, dir, base, size, 0, 0).await?;
    w.persist_index(&index, index.offsets.len(), index.times.len())
        .await?;
    w.close().await?;
    Ok((index, size))
}

fn corrupt(path: &Path, position: u64, reason: &str) -> StorageError {
    tracing::error!(file = %path.display(), position, "corrupt data before the recovery point: {reason}; the partition will not be served");
    StorageError::Corrupt {
        path: path.to_path_buf(),
        position,
        reason: reason.to_string(),
    }
}

/// Metadata of a closed segment that the checkpoint covers (not rescanned).
async fn load_closed(
    core: &CoreStorage,
    dir: &Path,
    base: i64,
    next_base: i64,
    config: &LogConfig,
) -> Result<SegmentMeta, StorageError> {
    let log_path = segment_path(dir, base, LOG_SUFFIX);
    let size = file_size(&log_path)?;
    let time_path = segment_path(dir, base, TIME_INDEX_SUFFIX);
    let index_ok =
        std::fs::metadata(segment_path(dir, base, INDEX_SUFFIX)).is_ok_and(|m| m.len() % 8 == 0);
    let time_len = std::fs::metadata(&time_path).map(|m| m.len()).ok();
    let last_time = match time_len {
        Some(len) if index_ok && len % TIME_ENTRY_SIZE_BYTES as u64 == 0 => {
            if len == 0 {
                Some((crate::index::NO_TIMESTAMP, -1))
            } else {
                let _fd = core.descriptors(crate::core::Share::Transient, 1, &time_path)?;
                let f = core
                    .disk
                    .open_buffered_read(&time_path)
                    .await
                    .map_err(|e| io_error("open", &time_path, e))?;
                let b = f
                    .read_exact_at(len - TIME_ENTRY_SIZE_BYTES as u64, TIME_ENTRY_SIZE_BYTES)
                    .await
                    .map_err(|e| io_error("read", &time_path, e))?;
                let _ = f.close().await;
                let ts = i64::from_be_bytes(b[..8].try_into().expect("8 bytes"));
                let rel = u32::from_be_bytes(b[8..].try_into().expect("4 bytes"));
                Some((ts, base + i64::from(rel)))
            }
        }
        _ => None,
    };
    let (max_timestamp, max_timestamp_offset) = match last_time {
        Some(t) => t,
        None => {
            let (index, _) = rebuild_closed_index(
                core,
                dir,
                base,
                Some(next_base),
                config.index_interval_bytes,
            )
            .await?;
            (index.max_timestamp, index.max_timestamp_offset)
        }
    };
    Ok(SegmentMeta {
        base_offset: base,
        next_offset: next_base,
        size_bytes: size,
        max_timestamp,
        max_timestamp_offset,
        first_append_ms: None,
        last_modified_ms: mtime_ms(&log_path),
        live: None,
        closed: true,
    })
}

/// Result of rescanning one segment.
struct Rescanned {
    meta: SegmentMeta,
    torn: bool,
    persisted: (usize, usize),
}

/// The index entries of segment `base` that the checkpoint `cp` vouches for (rebuilt from
/// scratch when the files hold fewer), and how many of each are on disk.
async fn trusted_index(
    core: &CoreStorage,
    path: &Path,
    base: i64,
    size: u64,
    cp: &RecoveryCheckpoint,
) -> Result<(SegmentIndex, (usize, usize)), StorageError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let (o, t) = (cp.index_entries as usize, cp.time_index_entries as usize);
    let found = match read_index_files(core, dir, base, size).await? {
        Some(mut idx) if idx.offsets.len() >= o && idx.times.len() >= t => {
            idx.truncate_entries(base, o, t);
            (idx, (o, t))
        }
        _ => {
            tracing::warn!(
                file = %path.display(),
                "index files shorter than the checkpoint says; rebuilding them"
            );
            (SegmentIndex::new(), (0, 0))
        }
    };
    if cp.position > size {
        return Err(corrupt(
            path,
            size,
            &format!("segment ends before the recovery point {}", cp.position),
        ));
    }
    Ok(found)
}

/// Scans the segment at `path` (`size` bytes) from `index`'s restart point, adding to `index`
/// and `epochs` every valid batch.
async fn scan_from_restart(
    core: &CoreStorage,
    path: &Path,
    (base, size): (i64, u64),
    index: &mut SegmentIndex,
    interval: u32,
    epochs: &mut LeaderEpochCache,
) -> Result<crate::scan::ScanOutcome, StorageError> {
    let (start_pos, start_offset) = index.restart_point(base);
    let _fd = core.descriptors(crate::core::Share::Transient, 1, path)?;
    let file = Rc::new(
        core.disk
            .open_direct_read(path)
            .await
            .map_err(|e| io_error("open", path, e))?,
    );
    let mut on_batch = |pos: u64, h: &borges_protocol::batch::BatchHeader| {
        // The restart batch already has its offset entry; noting it again only redoes the
        // running maximum (bytes_since_entry restarts at 0, so no second entry is added).
        index.note_batch(
            interval,
            base,
            (h.base_offset - base) as u32,
            pos as u32,
            h.size_bytes() as u64,
            h.max_timestamp,
        );
        epochs.assign(h.partition_leader_epoch, h.base_offset);
    };
    let read_size = core.tuning.scan_read_size_bytes;
    scan_segment(
        &file,
        size,
        start_pos,
        start_offset,
        read_size,
        &mut on_batch,
    )
    .await
    .map_err(|e| io_error("read", path, e))
}

/// Rescans segment `base` from its restart point. `trusted` = (checkpoint) when the recovery
/// point lies in this segment: its index entries are kept and damage before its position is
/// corruption, not a torn tail.
async fn rescan(
    core: &CoreStorage,
    dir: &Path,
    base: i64,
    trusted: Option<&RecoveryCheckpoint>,
    config: &LogConfig,
    epochs: &mut LeaderEpochCache,
) -> Result<Rescanned, StorageError> {
    let path = segment_path(dir, base, LOG_SUFFIX);
    let size = file_size(&path)?;
    let (mut index, persisted) = match trusted {
        Some(cp) => trusted_index(core, &path, base, size, cp).await?,
        None => (SegmentIndex::new(), (0, 0)),
    };
    let trusted_end = trusted.map_or(0, |cp| cp.position);
    let interval = config.index_interval_bytes;
    let outcome =
        scan_from_restart(core, &path, (base, size), &mut index, interval, epochs).await?;
    if outcome.end_position < trusted_end {
        return Err(corrupt(
            &path,
            outcome.end_position,
            &format!("{:?}", outcome.stop),
        ));
    }
    let torn = matches!(outcome.stop, ScanStop::Invalid(_));
    if let ScanStop::Invalid(reason) = &outcome.stop {
        tracing::warn!(
            file = %path.display(),
            position = outcome.end_position,
            bytes_dropped = size - outcome.end_position,
            next_offset = outcome.next_offset,
            "recovery truncates a torn tail: {reason}"
        );
    }
    let now = core.clock.now_ms();
    let meta = SegmentMeta {
        base_offset: base,
        next_offset: outcome.next_offset,
        size_bytes: outcome.end_position,
        max_timestamp: index.max_timestamp,
        max_timestamp_offset: index.max_timestamp_offset,
        first_append_ms: (outcome.next_offset > base).then_some(now),
        last_modified_ms: mtime_ms(&path),
        live: Some(index),
        closed: true,
    };
    Ok(Rescanned {
        meta,
        torn,
        persisted,
    })
}

async fn remove_segment_files(core: &CoreStorage, dir: &Path, base: i64, why: &str) {
    tracing::warn!(dir = %dir.display(), base, "removing segment: {why}");
    for suffix in [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX] {
        let _ = core.disk.remove_file(segment_path(dir, base, suffix)).await;
    }
}

/// Finalizes a rescanned segment that is not the last one.
async fn finalize_rescanned(
    core: &CoreStorage,
    dir: &Path,
    r: &mut Rescanned,
) -> Result<(), StorageError> {
    let meta = &mut r.meta;
    let mut index = meta.live.take().expect("rescanned segment has an index");
    let mut w = Writer::open(
        core,
        dir,
        meta.base_offset,
        meta.size_bytes,
        r.persisted.0,
        r.persisted.1,
    )
    .await?;
    index.push_time_entry(
        meta.base_offset,
        (meta.next_offset - meta.base_offset) as u32,
    );
    meta.max_timestamp = index.max_timestamp;
    meta.max_timestamp_offset = index.max_timestamp_offset;
    w.trim_and_sync().await?;
    w.persist_index(&index, index.offsets.len(), index.times.len())
        .await?;
    w.close().await
}

/// The leader-epoch cache recovery starts from: the file's entries before the recovery point
/// (the file is durable before the checkpoint that covers its batches); the rescan adds the
/// epochs of the batches after it. Without a valid file every segment is rescanned.
fn trust_epochs(
    dir: &Path,
    listing: &DirListing,
    first_rescan: usize,
    cp: Option<RecoveryCheckpoint>,
) -> (usize, Option<RecoveryCheckpoint>, LeaderEpochCache) {
    match (&listing.epochs, cp) {
        (Some(epochs), Some(cp)) => {
            let mut epochs = epochs.clone();
            epochs.truncate_from_end(cp.offset);
            (first_rescan, Some(cp), epochs)
        }
        (None, Some(_)) => {
            let why = "no valid leader-epoch file";
            tracing::warn!(dir = %dir.display(), "{why}: revalidating every segment");
            (0, None, LeaderEpochCache::default())
        }
        (_, None) => (first_rescan, None, LeaderEpochCache::default()),
    }
}

/// Which segments the checkpoint covers and where rescanning starts.
fn plan(
    dir: &Path,
    listing: &DirListing,
) -> Result<(usize, Option<RecoveryCheckpoint>), StorageError> {
    let Some(cp) = listing.checkpoint else {
        tracing::warn!(dir = %dir.display(), "no valid recovery checkpoint: revalidating every segment");
        return Ok((0, None));
    };
    match listing.bases.binary_search(&cp.segment_base) {
        Ok(i) => Ok((i, Some(cp))),
        Err(0) => {
            tracing::warn!(dir = %dir.display(), "recovery point is before the first segment: revalidating every segment");
            Ok((0, None))
        }
        Err(_) => Err(corrupt(
            &segment_path(dir, cp.segment_base, LOG_SUFFIX),
            cp.position,
            "the segment holding the recovery point is missing",
        )),
    }
}

/// A directory without segments: one empty active segment at the checkpointed offset.
async fn open_empty(
    core: &Rc<CoreStorage>,
    dir: PathBuf,
    config: LogConfig,
    listing: &DirListing,
) -> Result<Rc<PartitionLog>, StorageError> {
    let start = listing
        .checkpoint
        .map_or(0, |c| c.offset.max(c.log_start_offset));
    let writer = Writer::open(core, &dir, start, 0, 0, 0).await?;
    core.sync_dir(&dir).await?;
    let mut segments = BTreeMap::new();
    let active = SegmentMeta::new_active(start, SegmentIndex::new(), core.clock.now_ms());
    segments.insert(start, active);
    let epochs = listing.epochs.clone().unwrap_or_default();
    start_log(core, dir, config, segments, epochs, writer, false).await
}

/// Opens (or creates) a partition directory and recovers it. See the module docs.
pub(crate) async fn open_log(
    core: &Rc<CoreStorage>,
    dir: PathBuf,
    config: LogConfig,
) -> Result<Rc<PartitionLog>, StorageError> {
    let started = std::time::Instant::now();
    crate::cleaner::recover_swaps(core, &dir).await?;
    let listing = list_dir(core, &dir).await?;
    if listing.bases.is_empty() {
        return open_empty(core, dir, config, &listing).await;
    }
    let (first_rescan, cp) = plan(&dir, &listing)?;
    let (first_rescan, cp, mut epochs) = trust_epochs(&dir, &listing, first_rescan, cp);
    let bases = &listing.bases;
    let mut segments = BTreeMap::new();
    for i in 0..first_rescan {
        let meta = load_closed(core, &dir, bases[i], bases[i + 1], &config).await?;
        segments.insert(bases[i], meta);
    }
    let mut rescanned = rescan_all(
        core,
        &dir,
        bases,
        first_rescan,
        cp.as_ref(),
        &config,
        &mut epochs,
    )
    .await?;
    let mut last = rescanned.pop().expect("at least one segment is rescanned");
    for r in &mut rescanned {
        finalize_rescanned(core, &dir, r).await?;
    }
    for r in rescanned {
        segments.insert(r.meta.base_offset, r.meta);
    }
    let writer = Writer::open(
        core,
        &dir,
        last.meta.base_offset,
        last.meta.size_bytes,
        last.persisted.0,
        last.persisted.1,
    )
    .await?;
    writer
        .file
        .sync_data()
        .await
        .map_err(|e| io_error("fdatasync", &writer.log_path, e))?;
    last.meta.closed = false;
    segments.insert(last.meta.base_offset, last.meta);
    let log_start = cp.map_or(0, |c| c.log_start_offset);
    drop_below_log_start(core, &dir, &mut segments, log_start).await;
    let log = start_log(core, dir, config, segments, epochs, writer, listing.clean).await?;
    tracing::info!(
        dir = %log.dir.display(),
        clean = listing.clean,
        log_end_offset = log.offsets().log_end_offset,
        segments = log.segment_count(),
        elapsed_ms = started.elapsed().as_millis() as u64,
        "partition log opened"
    );
    Ok(log)
}

/// Rescans `bases[first..]` from the recovery point: removes segments after a torn one or after
/// a missing range; a gap after a cleaned segment (compaction hole) is kept.
async fn rescan_all(
    core: &CoreStorage,
    dir: &Path,
    bases: &[i64],
    first_rescan: usize,
    cp: Option<&RecoveryCheckpoint>,
    config: &LogConfig,
    epochs: &mut LeaderEpochCache,
) -> Result<Vec<Rescanned>, StorageError> {
    let mut rescanned: Vec<Rescanned> = Vec::new();
    let mut expected = bases[first_rescan];
    for (i, &base) in bases.iter().enumerate().skip(first_rescan) {
        let broken = rescanned.last().is_some_and(|r: &Rescanned| r.torn);
        if base > expected && !broken {
            // A hole left by compaction between a cleaned segment's last batch and the next
            // segment: the previous segment ends where the next one begins.
            if let Some(prev) = rescanned.last_mut() {
                prev.meta.next_offset = base;
            }
        } else if base != expected || broken {
            let why = "it follows a truncated or missing range";
            remove_segment_files(core, dir, base, why).await;
            continue;
        }
        let trusted = if i == first_rescan { cp } else { None };
        let r = rescan(core, dir, base, trusted, config, epochs).await?;
        expected = r.meta.next_offset;
        rescanned.push(r);
    }
    Ok(rescanned)
}

/// Removes whole segments that a checkpointed log start says are already deleted.
async fn drop_below_log_start(
    core: &CoreStorage,
    dir: &Path,
    segments: &mut BTreeMap<i64, SegmentMeta>,
    log_start: i64,
) {
    while segments.len() > 1 {
        let (&base, seg) = segments.iter().next().expect("non-empty");
        if seg.next_offset > log_start || !seg.closed {
            break;
        }
        segments.remove(&base);
        remove_segment_files(core, dir, base, "below the checkpointed log start").await;
    }
}

/// Builds the log around recovered segments, writes a fresh checkpoint, starts the flusher.
async fn start_log(
    core: &Rc<CoreStorage>,
    dir: PathBuf,
    config: LogConfig,
    segments: BTreeMap<i64, SegmentMeta>,
    mut epochs: LeaderEpochCache,
    mut writer: Writer,
    clean_marker: bool,
) -> Result<Rc<PartitionLog>, StorageError> {
    let (&first, _) = segments.iter().next().expect("non-empty");
    let active = segments.values().next_back().expect("non-empty");
    let end = Point {
        offset: active.next_offset,
        segment_base: active.base_offset,
        position: active.size_bytes,
    };
    epochs.truncate_from_end(end.offset);
    epochs.truncate_from_start(first);
    let state = LogState {
        config,
        segments,
        log_start_offset: first,
        flushed: end,
        synced: end,
        hw: end,
        mem: VecDeque::new(),
        unflushed_bytes: 0,
        cached_bytes: 0,
        epochs,
        epochs_dirty: true,
        corrupt: None,
        gate: Gate::Open,
        sync_target: 0,
        checkpoint_requested: false,
        commands: VecDeque::new(),
        truncations: Vec::new(),
        truncation_generation: 0,
        last_checkpoint: None,
        flusher_stopped: false,
        cleaner: Default::default(),
        replication: None,
    };
    let log = Rc::new(PartitionLog {
        core: core.clone(),
        id: core.next_log_id(),
        dir,
        state: RefCell::new(state),
        work: Rc::new(Notify::default()),
        progress: Notify::default(),
        changes: Notify::default(),
        flusher_exited: Rc::new(std::cell::Cell::new(false)),
    });
    log.checkpoint(&mut writer).await?;
    if clean_marker {
        let marker = log.dir.join(CLEAN_SHUTDOWN_FILE);
        core.disk
            .remove_file(&marker)
            .await
            .map_err(|e| io_error("remove", &marker, e))?;
        core.sync_dir(&log.dir).await?;
    }
    spawn_flusher(&log, writer);
    Ok(log)
}
