//! The durable Raft log, vote and committed position (openraft's `RaftLogStorage`).
//!
//! On disk, under the node's `meta/` directory:
//! ```text
//! meta/quorum-state                 JSON: cluster id, node id, vote, committed, last purged
//! meta/raft-log/<first index>.log   entries, back to back (first index: 20 digits)
//! ```
//! An entry record is `body_size_bytes u32 | crc32c(body) u32 | body`, big-endian, where
//! `body = index u64 | term u64 | the openraft entry as JSON`. A segment holds consecutive
//! indexes starting at its name; a new segment starts once the active one reaches
//! `segment_size_bytes_max`.
//!
//! The contract openraft states (its `RaftLogStorage` documentation) and how it is kept:
//! - `append` writes the entries, fdatasyncs the segment (and fsyncs the directory when it
//!   created the segment), and only then reports `LogFlushed`; the entries are readable when it
//!   returns.
//! - `save_vote` returns once the vote is durable (`quorum-state` replaced atomically: temporary,
//!   fdatasync, rename, directory fsync). So does `save_committed`.
//! - No holes: an append must continue at the next index (an empty log that never purged starts
//!   at its first append; an append over existing entries replaces them); recovery stops at the
//!   first record that is torn, fails its CRC or breaks the index sequence, cuts the file there
//!   and removes later segments (nothing past that point was ever reported durable).
//! - IO is serialized: every method awaits its IO before returning and openraft awaits every
//!   call, so no write overtakes an earlier one.
//! - `purge` records the new log start durably before removing whole segments below it; entries
//!   at or below it that remain in a segment are skipped at open.
//!
//! All unpurged entries are also kept in memory (the metadata log is small and openraft purges
//! it behind each snapshot), so reads never touch the disk. After a failed write or sync the
//! store refuses all further writes (the file's state is unknown after a failed fsync).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use openraft::storage::{LogFlushed, LogState, RaftLogStorage};
use openraft::{AnyError, RaftLogReader, StorageIOError};
use serde::{Deserialize, Serialize};

use crate::disk::{Disk, LogFile};
use crate::error::ReplicationError;
use crate::types::{Entry, LogId, StateMachine, StorageError, TypeConfig, Vote};

/// Bytes of an entry record's header (size and CRC).
const RECORD_HEADER_SIZE_BYTES: usize = 8;
/// Bytes of an entry body's fixed part (index and term).
const BODY_FIXED_SIZE_BYTES: usize = 16;
/// Largest entry record accepted at recovery (a larger size field is a torn or corrupt tail).
pub const ENTRY_SIZE_BYTES_MAX: usize = 64 << 20;
/// Default `segment_size_bytes_max`.
pub const SEGMENT_SIZE_BYTES_MAX_DEFAULT: u64 = 16 << 20;
/// Version of the `quorum-state` file format.
const QUORUM_STATE_VERSION: u32 = 1;

/// The `quorum-state` file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QuorumState {
    /// File format version.
    pub version: u32,
    /// The cluster this directory belongs to.
    pub cluster_id: String,
    /// The node this directory belongs to.
    pub node_id: u64,
    /// The last vote saved.
    pub vote: Option<Vote>,
    /// The last committed log id saved.
    pub committed: Option<LogId>,
    /// The log start: entries up to here are purged.
    pub purged: Option<LogId>,
}

/// Where the node's Raft files are.
#[derive(Debug, Clone)]
pub struct MetaDir {
    /// `<data>/meta`.
    pub root: PathBuf,
}

impl MetaDir {
    /// The layout under `data_dir`.
    pub fn new(data_dir: &Path) -> MetaDir {
        MetaDir {
            root: data_dir.join("meta"),
        }
    }

    /// `meta/quorum-state`.
    pub fn quorum_state(&self) -> PathBuf {
        self.root.join("quorum-state")
    }

    /// `meta/raft-log/`.
    pub fn log_dir(&self) -> PathBuf {
        self.root.join("raft-log")
    }

    /// `meta/snapshots/`.
    pub fn snapshot_dir(&self) -> PathBuf {
        self.root.join("snapshots")
    }

    fn segment(&self, first_index: u64) -> PathBuf {
        self.log_dir().join(format!("{first_index:020}.log"))
    }
}

/// Reads `quorum-state`; `None` when the node never wrote one.
pub fn read_quorum_state(dir: &MetaDir) -> Result<Option<QuorumState>, ReplicationError> {
    let path = dir.quorum_state();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(ReplicationError::io(&path, e)),
    };
    let state: QuorumState =
        serde_json::from_slice(&bytes).map_err(|e| ReplicationError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
    if state.version != QUORUM_STATE_VERSION {
        return Err(ReplicationError::Corrupt {
            path,
            reason: format!("unknown quorum-state version {}", state.version),
        });
    }
    Ok(Some(state))
}

/// One segment file: its first index and, per entry, where the entry's record starts.
struct Segment {
    first_index: u64,
    size_bytes: u64,
}

struct Inner<S: StateMachine> {
    dir: MetaDir,
    disk: Disk,
    segment_size_bytes_max: u64,
    state: QuorumState,
    /// Unpurged entries with (segment first index, byte position of the record).
    entries: BTreeMap<u64, (Entry<S>, u64, u64)>,
    segments: Vec<Segment>,
    /// The last segment, open for appending.
    active: Option<LogFile>,
    /// Set after a failed write or sync: every later write fails.
    failed: bool,
}

/// The Raft log store of one node. Lives on the Raft node's executor; clones share the store.
pub struct LogStore<S: StateMachine> {
    inner: Rc<RefCell<Inner<S>>>,
}

impl<S: StateMachine> Clone for LogStore<S> {
    fn clone(&self) -> Self {
        LogStore {
            inner: self.inner.clone(),
        }
    }
}

fn io_error(e: std::io::Error) -> StorageError {
    StorageIOError::write_logs(AnyError::new(&e)).into()
}

fn encode_record<S: StateMachine>(entry: &Entry<S>) -> Result<Vec<u8>, StorageError> {
    let json = serde_json::to_vec(entry)
        .map_err(|e| StorageError::from(StorageIOError::write_logs(AnyError::new(&e))))?;
    let body_size = BODY_FIXED_SIZE_BYTES + json.len();
    let mut out = Vec::with_capacity(RECORD_HEADER_SIZE_BYTES + body_size);
    out.extend_from_slice(&(body_size as u32).to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&entry.log_id.index.to_be_bytes());
    out.extend_from_slice(&entry.log_id.leader_id.term.to_be_bytes());
    out.extend_from_slice(&json);
    let crc = crc32c::crc32c(&out[RECORD_HEADER_SIZE_BYTES..]);
    out[4..8].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Decodes the records of one segment; stops at the first record that is torn, corrupt or out
/// of sequence. Returns the entries with their positions and the length of the valid prefix.
fn decode_segment<S: StateMachine>(bytes: &[u8], first_index: u64) -> (Vec<(Entry<S>, u64)>, u64) {
    let mut out = Vec::new();
    let mut pos = 0usize;
    let mut next = first_index;
    while bytes.len() - pos >= RECORD_HEADER_SIZE_BYTES {
        let size = u32::from_be_bytes([bytes[pos], bytes[pos + 1], bytes[pos + 2], bytes[pos + 3]])
            as usize;
        let crc = u32::from_be_bytes([
            bytes[pos + 4],
            bytes[pos + 5],
            bytes[pos + 6],
            bytes[pos + 7],
        ]);
        let start = pos + RECORD_HEADER_SIZE_BYTES;
        if !(BODY_FIXED_SIZE_BYTES..=ENTRY_SIZE_BYTES_MAX).contains(&size)
            || bytes.len() - start < size
        {
            break;
        }
        let body = &bytes[start..start + size];
        if crc32c::crc32c(body) != crc {
            break;
        }
        let index = u64::from_be_bytes(body[0..8].try_into().unwrap_or_default());
        let term = u64::from_be_bytes(body[8..16].try_into().unwrap_or_default());
        let Ok(entry) = serde_json::from_slice::<Entry<S>>(&body[16..]) else {
            break;
        };
        if index != next || entry.log_id.index != index || entry.log_id.leader_id.term != term {
            break;
        }
        out.push((entry, pos as u64));
        pos = start + size;
        next += 1;
    }
    (out, pos as u64)
}

fn list_segments(dir: &Path) -> Result<Vec<u64>, ReplicationError> {
    let mut firsts = Vec::new();
    let read = std::fs::read_dir(dir).map_err(|e| ReplicationError::io(dir, e))?;
    for item in read {
        let item = item.map_err(|e| ReplicationError::io(dir, e))?;
        let name = item.file_name();
        let name = name.to_string_lossy();
        if let Some(first) = name
            .strip_suffix(".log")
            .and_then(|n| n.parse::<u64>().ok())
        {
            firsts.push(first);
        }
    }
    firsts.sort_unstable();
    Ok(firsts)
}

impl<S: StateMachine> LogStore<S> {
    /// Opens (or creates) the log of node `node_id` of cluster `cluster_id` under `dir`,
    /// recovering it: refuses a directory stamped for another cluster or node.
    pub async fn open(
        dir: MetaDir,
        cluster_id: &str,
        node_id: u64,
        disk: Disk,
        segment_size_bytes_max: u64,
    ) -> Result<LogStore<S>, ReplicationError> {
        for d in [dir.root.clone(), dir.log_dir(), dir.snapshot_dir()] {
            std::fs::create_dir_all(&d).map_err(|e| ReplicationError::io(&d, e))?;
        }
        let state = match read_quorum_state(&dir)? {
            Some(s) if s.cluster_id != cluster_id => {
                return Err(ReplicationError::ClusterIdMismatch {
                    path: dir.quorum_state(),
                    found: s.cluster_id,
                    expected: cluster_id.to_string(),
                })
            }
            Some(s) if s.node_id != node_id => {
                return Err(ReplicationError::NodeIdMismatch {
                    path: dir.quorum_state(),
                    found: s.node_id,
                    expected: node_id,
                })
            }
            Some(s) => s,
            None => QuorumState {
                version: QUORUM_STATE_VERSION,
                cluster_id: cluster_id.to_string(),
                node_id,
                vote: None,
                committed: None,
                purged: None,
            },
        };
        let inner = Inner {
            dir,
            disk,
            segment_size_bytes_max: segment_size_bytes_max.max(1),
            state,
            entries: BTreeMap::new(),
            segments: Vec::new(),
            active: None,
            failed: false,
        };
        let store = LogStore {
            inner: Rc::new(RefCell::new(inner)),
        };
        store
            .write_state()
            .await
            .map_err(|e| ReplicationError::Storage(e.to_string()))?;
        store.recover().await?;
        Ok(store)
    }

    /// Loads every segment, cutting the log at the first bad record.
    async fn recover(&self) -> Result<(), ReplicationError> {
        let (dir, disk, purged) = {
            let inner = self.inner.borrow();
            (inner.dir.clone(), inner.disk.clone(), inner.state.purged)
        };
        let purged_index = purged.map(|p| p.index);
        let mut expected: Option<u64> = None;
        let mut cut = false;
        for first in list_segments(&dir.log_dir())? {
            let path = dir.segment(first);
            let below_start = purged_index.is_some_and(|p| first <= p);
            if cut || expected.is_some_and(|e| e != first) && !below_start {
                // After a cut or a hole nothing is part of the log.
                cut = true;
                disk.remove(&path)
                    .await
                    .map_err(|e| ReplicationError::io(&path, e))?;
                continue;
            }
            let file = disk
                .open_append(&path, false)
                .await
                .map_err(|e| ReplicationError::io(&path, e))?;
            let bytes = file
                .read_all()
                .await
                .map_err(|e| ReplicationError::io(&path, e))?;
            let (decoded, valid) = decode_segment::<S>(&bytes, first);
            if valid < bytes.len() as u64 {
                tracing::warn!(
                    path = %path.display(), valid_bytes = valid, file_bytes = bytes.len(),
                    "raft log: cutting a torn or corrupt tail"
                );
                file.truncate(valid)
                    .await
                    .map_err(|e| ReplicationError::io(&path, e))?;
                file.sync()
                    .await
                    .map_err(|e| ReplicationError::io(&path, e))?;
                cut = true;
            }
            let count = decoded.len() as u64;
            self.load_segment(first, valid, decoded, file, purged_index);
            expected = Some(first + count);
        }
        disk.sync_dir(&dir.log_dir())
            .await
            .map_err(|e| ReplicationError::io(&dir.log_dir(), e))?;
        self.check_start(purged_index)
    }

    fn load_segment(
        &self,
        first: u64,
        size_bytes: u64,
        decoded: Vec<(Entry<S>, u64)>,
        file: LogFile,
        purged_index: Option<u64>,
    ) {
        let mut inner = self.inner.borrow_mut();
        for (entry, pos) in decoded {
            if purged_index.is_some_and(|p| entry.log_id.index <= p) {
                continue;
            }
            inner
                .entries
                .insert(entry.log_id.index, (entry, first, pos));
        }
        inner.segments.push(Segment {
            first_index: first,
            size_bytes,
        });
        inner.active = Some(file);
    }

    /// The first entry must follow the log start: anything else is a hole.
    fn check_start(&self, purged_index: Option<u64>) -> Result<(), ReplicationError> {
        let inner = self.inner.borrow();
        let first = inner.entries.keys().next().copied();
        match (first, purged_index) {
            (Some(f), Some(p)) if f != p + 1 => Err(ReplicationError::Corrupt {
                path: inner.dir.log_dir(),
                reason: format!("log starts at {f} but entries up to {p} were purged: a hole"),
            }),
            _ => Ok(()),
        }
    }

    /// The saved quorum state (vote, committed, log start).
    pub fn quorum_state(&self) -> QuorumState {
        self.inner.borrow().state.clone()
    }

    /// Persists the quorum state durably.
    async fn write_state(&self) -> Result<(), StorageError> {
        let (disk, path, bytes) = {
            let inner = self.inner.borrow();
            if inner.failed {
                return Err(io_error(std::io::Error::other("raft log failed earlier")));
            }
            let bytes = serde_json::to_vec_pretty(&inner.state)
                .map_err(|e| StorageError::from(StorageIOError::write_vote(AnyError::new(&e))))?;
            (inner.disk.clone(), inner.dir.quorum_state(), bytes)
        };
        if let Err(e) = disk.replace(&path, bytes).await {
            self.inner.borrow_mut().failed = true;
            return Err(StorageIOError::write_vote(AnyError::new(&e)).into());
        }
        Ok(())
    }

    fn next_index(&self) -> u64 {
        let inner = self.inner.borrow();
        match (inner.entries.keys().next_back(), inner.state.purged) {
            (Some(&last), _) => last + 1,
            (None, Some(p)) => p.index + 1,
            (None, None) => 0,
        }
    }

    /// Starts a new segment at `first_index` when there is none or the active one is full.
    async fn roll_if_needed(&self, first_index: u64) -> Result<(), StorageError> {
        let (needed, disk, dir) = {
            let inner = self.inner.borrow();
            let full = inner
                .segments
                .last()
                .is_none_or(|s| s.size_bytes >= inner.segment_size_bytes_max);
            (
                full || inner.active.is_none(),
                inner.disk.clone(),
                inner.dir.clone(),
            )
        };
        if !needed {
            return Ok(());
        }
        let path = dir.segment(first_index);
        let file = disk.open_append(&path, true).await.map_err(io_error)?;
        file.truncate(0).await.map_err(io_error)?;
        // The new name must be durable before any entry in it is reported durable.
        disk.sync_dir(&dir.log_dir()).await.map_err(io_error)?;
        let mut inner = self.inner.borrow_mut();
        inner.segments.push(Segment {
            first_index,
            size_bytes: 0,
        });
        inner.active = Some(file);
        Ok(())
    }

    /// Writes `entries` (consecutive, continuing the log) and makes them durable: what `append`
    /// does before it reports `LogFlushed`.
    pub async fn append_durably(&self, entries: Vec<Entry<S>>) -> Result<(), StorageError> {
        let Some(first) = entries.first().map(|e| e.log_id.index) else {
            return Ok(());
        };
        if entries
            .windows(2)
            .any(|w| w[1].log_id.index != w[0].log_id.index + 1)
        {
            return Err(io_error(std::io::Error::other(
                "append of non-consecutive entries",
            )));
        }
        // openraft truncates before it overwrites; an append over existing entries replaces
        // them the same way.
        if self.inner.borrow().entries.contains_key(&first) {
            self.truncate_from(first).await?;
        }
        let next = self.next_index();
        let empty = {
            let inner = self.inner.borrow();
            inner.entries.is_empty() && inner.state.purged.is_none()
        };
        // An empty log that never purged starts wherever its first append starts.
        if first != next && !empty {
            return Err(io_error(std::io::Error::other(format!(
                "append at {first} would leave a hole (next index {next})"
            ))));
        }
        self.roll_if_needed(first).await?;
        let mut buf = Vec::new();
        let mut positions = Vec::with_capacity(entries.len());
        let (start, segment_first) = {
            let inner = self.inner.borrow();
            let s = inner.segments.last().map(|s| (s.size_bytes, s.first_index));
            s.unwrap_or((0, first))
        };
        for e in &entries {
            positions.push(start + buf.len() as u64);
            buf.extend_from_slice(&encode_record(e)?);
        }
        let written = buf.len() as u64;
        let file = self.inner.borrow_mut().active.take();
        let Some(file) = file else {
            return Err(io_error(std::io::Error::other("no active segment")));
        };
        let result = async {
            file.write_at(buf, start).await?;
            file.sync().await
        }
        .await;
        let mut inner = self.inner.borrow_mut();
        inner.active = Some(file);
        if let Err(e) = result {
            inner.failed = true;
            return Err(io_error(e));
        }
        if let Some(s) = inner.segments.last_mut() {
            s.size_bytes += written;
        }
        for (e, pos) in entries.into_iter().zip(positions) {
            inner
                .entries
                .insert(e.log_id.index, (e, segment_first, pos));
        }
        Ok(())
    }

    /// Removes every entry from `index` on, on disk and in memory.
    async fn truncate_from(&self, index: u64) -> Result<(), StorageError> {
        let (disk, dir, cut_at, doomed) = {
            let inner = self.inner.borrow();
            let Some((_, seg, pos)) = inner.entries.get(&index) else {
                return Ok(());
            };
            let doomed: Vec<u64> = inner
                .segments
                .iter()
                .map(|s| s.first_index)
                .filter(|&f| f > *seg)
                .collect();
            (inner.disk.clone(), inner.dir.clone(), (*seg, *pos), doomed)
        };
        for first in &doomed {
            disk.remove(&dir.segment(*first)).await.map_err(io_error)?;
        }
        let (seg, pos) = cut_at;
        let file = disk
            .open_append(&dir.segment(seg), false)
            .await
            .map_err(io_error)?;
        let result = async {
            file.truncate(pos).await?;
            file.sync().await?;
            disk.sync_dir(&dir.log_dir()).await
        }
        .await;
        let mut inner = self.inner.borrow_mut();
        if let Err(e) = result {
            inner.failed = true;
            return Err(io_error(e));
        }
        inner.entries.split_off(&index);
        inner.segments.retain(|s| s.first_index <= seg);
        if let Some(s) = inner.segments.last_mut() {
            s.size_bytes = pos;
        }
        inner.active = Some(file);
        Ok(())
    }

    /// Makes `log_id` the log start: durable first, then whole segments below it go.
    async fn purge_to(&self, log_id: LogId) -> Result<(), StorageError> {
        {
            let mut inner = self.inner.borrow_mut();
            if inner.state.purged.is_some_and(|p| p.index >= log_id.index) {
                return Ok(());
            }
            inner.state.purged = Some(log_id);
        }
        self.write_state().await?;
        let (disk, dir, doomed, all_gone) = {
            let mut inner = self.inner.borrow_mut();
            let kept = inner.entries.split_off(&(log_id.index + 1));
            inner.entries = kept;
            let all_gone = inner.entries.is_empty();
            // A segment can go when the next one starts at or below the new start + 1.
            let firsts: Vec<u64> = inner.segments.iter().map(|s| s.first_index).collect();
            let mut doomed = Vec::new();
            for (i, &f) in firsts.iter().enumerate() {
                let next = firsts.get(i + 1).copied();
                if next.is_some_and(|n| n <= log_id.index + 1) || (next.is_none() && all_gone) {
                    doomed.push(f);
                }
            }
            inner.segments.retain(|s| !doomed.contains(&s.first_index));
            if all_gone {
                inner.active = None;
            }
            (inner.disk.clone(), inner.dir.clone(), doomed, all_gone)
        };
        for first in doomed {
            disk.remove(&dir.segment(first)).await.map_err(io_error)?;
        }
        if all_gone {
            disk.sync_dir(&dir.log_dir()).await.map_err(io_error)?;
        }
        Ok(())
    }
}

impl<S: StateMachine> RaftLogReader<TypeConfig<S>> for LogStore<S> {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry<S>>, StorageError> {
        let inner = self.inner.borrow();
        Ok(inner
            .entries
            .range(range)
            .map(|(_, (e, _, _))| e.clone())
            .collect())
    }
}

impl<S: StateMachine> RaftLogStorage<TypeConfig<S>> for LogStore<S> {
    type LogReader = LogStore<S>;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig<S>>, StorageError> {
        let inner = self.inner.borrow();
        let purged = inner.state.purged;
        let last = inner.entries.values().next_back().map(|(e, _, _)| e.log_id);
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last.or(purged),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        self.inner.borrow_mut().state.vote = Some(*vote);
        self.write_state().await
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.inner.borrow().state.vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        self.inner.borrow_mut().state.committed = committed;
        self.write_state().await
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        Ok(self.inner.borrow().state.committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig<S>>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry<S>>,
    {
        if self.inner.borrow().failed {
            let e = std::io::Error::other("raft log failed earlier");
            callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
            return Err(io_error(e));
        }
        match self.append_durably(entries.into_iter().collect()).await {
            Ok(()) => {
                // Only now, after the fdatasync, is the append durable.
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(e)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.truncate_from(log_id.index).await
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        self.purge_to(log_id).await
    }
}
