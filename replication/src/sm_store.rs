//! The state machine and its durable snapshots (openraft's `RaftStateMachine`).
//!
//! The state itself lives in memory and is not written on every apply: a node restarts from
//! its latest snapshot and openraft re-applies the committed entries after it from the log
//! (the committed id is saved by the log store). So a snapshot must be durable before openraft
//! is told about it, because openraft then purges the log behind it.
//!
//! Snapshot files, `meta/snapshots/<term>-<index>.snap` (both 20 digits), big-endian:
//! ```text
//! magic "BRGSNAP1" | meta_size_bytes u32 | data_size_bytes u64 | meta (JSON: last log id,
//! membership, snapshot id) | data (the state machine's encoding) | crc32c of all before, u32
//! ```
//! A file is written whole to a temporary, fdatasynced and renamed (`Disk::replace`); older
//! snapshots are removed after the new one is durable; at open the newest file that checks out
//! is used and the others are removed.

use std::cell::RefCell;
use std::io::Cursor;
use std::path::PathBuf;
use std::rc::Rc;

use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{AnyError, EntryPayload, RaftSnapshotBuilder, StorageIOError};

use crate::disk::Disk;
use crate::error::ReplicationError;
use crate::log_store::MetaDir;
use crate::types::{
    Entry, LogId, SnapshotMeta, StateMachine, StorageError, StoredMembership, TypeConfig,
};

const SNAPSHOT_MAGIC: &[u8; 8] = b"BRGSNAP1";
/// Largest snapshot file accepted at open.
pub const SNAPSHOT_SIZE_BYTES_MAX: u64 = 1 << 30;

/// Called on the node's executor after the state changed (entries applied or a snapshot
/// installed), with the state and the last applied log id: the hook through which a broker
/// publishes each new metadata image to its cores.
pub type ApplyObserver<S> = Rc<dyn Fn(&S, Option<LogId>)>;

struct StoredSnapshot {
    meta: SnapshotMeta,
    data: Vec<u8>,
}

struct Inner<S: StateMachine> {
    dir: MetaDir,
    disk: Disk,
    state: S,
    last_applied: Option<LogId>,
    membership: StoredMembership,
    current: Option<StoredSnapshot>,
    built: u64,
    observer: Option<ApplyObserver<S>>,
}

/// The state machine store of one node. Lives on the Raft node's executor; clones share it.
pub struct StateMachineStore<S: StateMachine> {
    inner: Rc<RefCell<Inner<S>>>,
}

impl<S: StateMachine> Clone for StateMachineStore<S> {
    fn clone(&self) -> Self {
        StateMachineStore {
            inner: self.inner.clone(),
        }
    }
}

fn snapshot_name(last: Option<LogId>) -> String {
    let (term, index) = last.map_or((0, 0), |l| (l.leader_id.term, l.index));
    format!("{term:020}-{index:020}.snap")
}

/// Encodes a snapshot file.
pub fn encode_snapshot(meta: &SnapshotMeta, data: &[u8]) -> Result<Vec<u8>, String> {
    let meta_json = serde_json::to_vec(meta).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(24 + meta_json.len() + data.len() + 4);
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&(meta_json.len() as u32).to_be_bytes());
    out.extend_from_slice(&(data.len() as u64).to_be_bytes());
    out.extend_from_slice(&meta_json);
    out.extend_from_slice(data);
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// Decodes a snapshot file; an error for anything [`encode_snapshot`] did not write.
pub fn decode_snapshot(bytes: &[u8]) -> Result<(SnapshotMeta, Vec<u8>), String> {
    if bytes.len() < 24 || &bytes[..8] != SNAPSHOT_MAGIC {
        return Err("not a snapshot file".into());
    }
    let (body, crc) = bytes.split_at(bytes.len() - 4);
    let stored = u32::from_be_bytes([crc[0], crc[1], crc[2], crc[3]]);
    if crc32c::crc32c(body) != stored {
        return Err("snapshot checksum mismatch".into());
    }
    let meta_size = u32::from_be_bytes([body[8], body[9], body[10], body[11]]) as usize;
    let data_size = u64::from_be_bytes(body[12..20].try_into().unwrap_or_default());
    let data_size = usize::try_from(data_size).map_err(|_| "snapshot too large".to_string())?;
    if 20usize.saturating_add(meta_size).saturating_add(data_size) != body.len() {
        return Err("snapshot sizes do not add up".into());
    }
    let meta_end = 20 + meta_size;
    let meta: SnapshotMeta =
        serde_json::from_slice(&body[20..meta_end]).map_err(|e| e.to_string())?;
    Ok((meta, body[meta_end..].to_vec()))
}

fn sm_error(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_snapshot(None, AnyError::error(e.to_string())).into()
}

impl<S: StateMachine> StateMachineStore<S> {
    /// Opens the state machine of the node whose files are under `dir`: the newest valid
    /// snapshot, or the empty state.
    pub async fn open(
        dir: MetaDir,
        disk: Disk,
        observer: Option<ApplyObserver<S>>,
    ) -> Result<StateMachineStore<S>, ReplicationError> {
        let snap_dir = dir.snapshot_dir();
        std::fs::create_dir_all(&snap_dir).map_err(|e| ReplicationError::io(&snap_dir, e))?;
        let mut names: Vec<PathBuf> = std::fs::read_dir(&snap_dir)
            .map_err(|e| ReplicationError::io(&snap_dir, e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        names.sort();
        let mut current: Option<StoredSnapshot> = None;
        for path in names.iter().rev() {
            let is_snap = path.extension().is_some_and(|x| x == "snap");
            let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
            if current.is_none() && is_snap && size <= SNAPSHOT_SIZE_BYTES_MAX {
                let bytes = std::fs::read(path).map_err(|e| ReplicationError::io(path, e))?;
                match decode_snapshot(&bytes) {
                    Ok((meta, data)) => {
                        current = Some(StoredSnapshot { meta, data });
                        continue;
                    }
                    Err(reason) => {
                        tracing::warn!(path = %path.display(), %reason, "ignoring snapshot")
                    }
                }
            }
            disk.remove(path)
                .await
                .map_err(|e| ReplicationError::io(path, e))?;
        }
        let (state, last_applied, membership) = match &current {
            Some(s) => {
                let state = S::decode(&s.data).map_err(|reason| ReplicationError::Corrupt {
                    path: snap_dir.join(snapshot_name(s.meta.last_log_id)),
                    reason,
                })?;
                (state, s.meta.last_log_id, s.meta.last_membership.clone())
            }
            None => (S::default(), None, StoredMembership::default()),
        };
        let inner = Inner {
            dir,
            disk,
            state,
            last_applied,
            membership,
            current,
            built: 0,
            observer,
        };
        Ok(StateMachineStore {
            inner: Rc::new(RefCell::new(inner)),
        })
    }

    /// Runs `f` on the current state and its last applied log id.
    pub fn with_state<T>(&self, f: impl FnOnce(&S, Option<LogId>) -> T) -> T {
        let inner = self.inner.borrow();
        f(&inner.state, inner.last_applied)
    }

    fn notify(&self) {
        let (observer, last) = {
            let inner = self.inner.borrow();
            (inner.observer.clone(), inner.last_applied)
        };
        if let Some(observer) = observer {
            observer(&self.inner.borrow().state, last);
        }
    }

    /// Writes `snapshot` durably and makes it the current one, removing older ones.
    async fn persist(&self, meta: &SnapshotMeta, data: Vec<u8>) -> Result<(), StorageError> {
        let (disk, snap_dir) = {
            let inner = self.inner.borrow();
            (inner.disk.clone(), inner.dir.snapshot_dir())
        };
        let name = snapshot_name(meta.last_log_id);
        let bytes = encode_snapshot(meta, &data).map_err(sm_error)?;
        disk.replace(&snap_dir.join(&name), bytes)
            .await
            .map_err(sm_error)?;
        let older: Vec<PathBuf> = std::fs::read_dir(&snap_dir)
            .map_err(sm_error)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.file_name().is_some_and(|n| n.to_string_lossy() != name))
            .collect();
        for path in older {
            disk.remove(&path).await.map_err(sm_error)?;
        }
        disk.sync_dir(&snap_dir).await.map_err(sm_error)?;
        self.inner.borrow_mut().current = Some(StoredSnapshot {
            meta: meta.clone(),
            data,
        });
        Ok(())
    }
}

impl<S: StateMachine> RaftSnapshotBuilder<TypeConfig<S>> for StateMachineStore<S> {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig<S>>, StorageError> {
        // State and position are read together, before any await.
        let (meta, data) = {
            let mut inner = self.inner.borrow_mut();
            let data = inner.state.encode().map_err(sm_error)?;
            inner.built += 1;
            let last = inner.last_applied;
            let id = last.map_or(String::from("0-0"), |l| {
                format!("{}-{}", l.leader_id.term, l.index)
            });
            let meta = SnapshotMeta {
                last_log_id: last,
                last_membership: inner.membership.clone(),
                snapshot_id: format!("{id}-{}", inner.built),
            };
            (meta, data)
        };
        self.persist(&meta, data.clone()).await?;
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl<S: StateMachine> RaftStateMachine<TypeConfig<S>> for StateMachineStore<S> {
    type SnapshotBuilder = StateMachineStore<S>;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), StorageError> {
        let inner = self.inner.borrow();
        Ok((inner.last_applied, inner.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<S::Reply>, StorageError>
    where
        I: IntoIterator<Item = Entry<S>>,
    {
        let mut replies = Vec::new();
        {
            let mut inner = self.inner.borrow_mut();
            for entry in entries {
                debug_assert!(
                    inner.last_applied < Some(entry.log_id),
                    "applied out of order"
                );
                inner.last_applied = Some(entry.log_id);
                let reply = match &entry.payload {
                    EntryPayload::Blank => S::Reply::default(),
                    EntryPayload::Normal(command) => {
                        let (index, term) = (entry.log_id.index, entry.log_id.leader_id.term);
                        inner.state.apply(index, term, command)
                    }
                    EntryPayload::Membership(m) => {
                        inner.membership = StoredMembership::new(Some(entry.log_id), m.clone());
                        S::Reply::default()
                    }
                };
                replies.push(reply);
            }
        }
        self.notify();
        Ok(replies)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> Result<Box<Cursor<Vec<u8>>>, StorageError> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError> {
        let data = snapshot.into_inner();
        let state = S::decode(&data).map_err(|e| {
            StorageError::from(StorageIOError::read_snapshot(
                Some(meta.signature()),
                AnyError::error(e),
            ))
        })?;
        self.persist(meta, data).await?;
        {
            let mut inner = self.inner.borrow_mut();
            inner.state = state;
            inner.last_applied = meta.last_log_id;
            inner.membership = meta.last_membership.clone();
        }
        self.notify();
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig<S>>>, StorageError> {
        let inner = self.inner.borrow();
        Ok(inner.current.as_ref().map(|s| Snapshot {
            meta: s.meta.clone(),
            snapshot: Box::new(Cursor::new(s.data.clone())),
        }))
    }
}
