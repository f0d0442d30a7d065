//! Repair of a replica whose recovery found mid-log corruption (issue 14, item 5; the NATS
//! lesson in shared/REPLICATION-NOTES.md: a corrupted node that became leader lost half the
//! acknowledged writes).
//!
//! When the storage refuses to open a replicated partition because of corrupt data before its
//! recovery point (`StorageError::Corrupt`), the broker does not serve that log and does not
//! cut it silently either: the directory is moved aside (`<topic>-<partition>.corrupt-<ms>`,
//! kept for inspection for `storage.quarantine_retention_ms` once the repair is over), an
//! empty log is opened in its place with the marker file
//! [`REPAIR_MARKER_FILE`], and the replica fetches everything from the leader as a follower.
//! While the marker exists (it survives restarts) the replica is *under repair*:
//!
//! - it never becomes leader: an image naming it leader leaves it offline (`Role::Offline`);
//! - its broker asks to stay fenced (heartbeats report no applied metadata), so the controller,
//!   which elects only running brokers and adds only running brokers to an ISR, neither elects
//!   this broker for any partition nor lets it rejoin an ISR;
//! - it is repaired once its log end reaches the high watermark of a leader's fetch answer: it
//!   then holds everything that was committed, like any ISR member. The marker goes, and once no
//!   partition of the broker is under repair its heartbeats let it be unfenced.
//!
//! What this cannot do from the broker: take the replica out of an ISR it is still in (a
//! kill -9 and a restart within the session timeout keep a broker in its ISRs; only the leader
//! shrinks them, after `replica_lag_time_max_ms`). The controller keeps it from leading because
//! it is fenced; a per-partition report to the controller (an ISR removal, Kafka's KIP-966
//! unclean-shutdown handling) would keep the rest of the broker available meanwhile.

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};

use borges_storage::{CoreStorage, StorageError};

use super::Partition;

/// Marks a partition directory whose log is being repaired from the leader.
pub const REPAIR_MARKER_FILE: &str = "repair-from-leader";

/// The repair state of one replica. Lives on its owning core.
#[derive(Default)]
pub struct RepairState {
    /// The marker file while the replica is under repair.
    marker: RefCell<Option<PathBuf>>,
    /// The highest high watermark a leader's fetch answer carried, -1 before any.
    leader_high_watermark: Cell<i64>,
}

impl RepairState {
    /// The state of `dir`'s replica: under repair when the marker file exists.
    pub fn of_dir(dir: &Path) -> RepairState {
        let marker = dir.join(REPAIR_MARKER_FILE);
        RepairState {
            marker: RefCell::new(marker.exists().then_some(marker)),
            leader_high_watermark: Cell::new(-1),
        }
    }
}

/// Moves the corrupt partition directory `dir` aside and leaves an empty one with the repair
/// marker in its place (both durable before it returns). Returns where the old one went.
pub async fn quarantine(
    storage: &CoreStorage,
    dir: &Path,
    cause: &StorageError,
) -> Result<PathBuf, StorageError> {
    let io = |op: &'static str, path: &Path, source: std::io::Error| StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let now_ms = storage.clock().now_ms();
    let aside = dir.with_file_name(format!("{name}.corrupt-{now_ms}"));
    storage
        .disk()
        .rename(dir, &aside)
        .await
        .map_err(|e| io("rename", dir, e))?;
    let text = format!(
        "recovery found corrupt data ({cause}); the log was moved to {} and is fetched again \
         from the leader\n",
        aside.display()
    );
    mark(storage, dir, text).await?;
    tracing::error!(
        dir = %dir.display(), moved_to = %aside.display(),
        "partition log corrupt before its recovery point: moved aside; the replica is repaired \
         from the leader and does not lead until then: {cause}"
    );
    Ok(aside)
}

/// Creates `dir` if it is missing and writes the repair marker into it, durably.
async fn mark(storage: &CoreStorage, dir: &Path, text: String) -> Result<(), StorageError> {
    let io = |op: &'static str, path: &Path, source: std::io::Error| StorageError::Io {
        op,
        path: path.to_path_buf(),
        source,
    };
    storage
        .disk()
        .create_dir_all(dir)
        .await
        .map_err(|e| io("create directory", dir, e))?;
    let marker = dir.join(REPAIR_MARKER_FILE);
    borges_runtime::fs::replace_file(&marker, text.into_bytes(), true)
        .await
        .map_err(|e| io("write", &marker, e))?;
    if let Some(parent) = dir.parent() {
        storage
            .disk()
            .sync_dir(parent)
            .await
            .map_err(|e| io("fsync directory", parent, e))?;
    }
    Ok(())
}

/// Finishes a [`quarantine`] that a crash cut short between moving the corrupt log aside and
/// writing the marker: `dir` holds no segment and no marker (or is missing) while a
/// `<name>.corrupt-*` sibling exists. Without this the next start would open an empty log
/// that is not under repair, and an empty replica still in the ISR could lead. True when it
/// marked `dir`.
pub async fn resume_interrupted(storage: &CoreStorage, dir: &Path) -> Result<bool, StorageError> {
    if dir.join(REPAIR_MARKER_FILE).exists() || holds_segments(dir) {
        return Ok(false);
    }
    let (Some(parent), Some(name)) = (dir.parent(), dir.file_name()) else {
        return Ok(false);
    };
    let prefix = format!("{}.corrupt-", name.to_string_lossy());
    let quarantined = std::fs::read_dir(parent)
        .map(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        })
        .unwrap_or(false);
    if !quarantined {
        return Ok(false);
    }
    tracing::error!(dir = %dir.display(),
        "a quarantine of this partition was cut short: the replica is repaired from the leader");
    let text = "a quarantine was cut short before this marker was written; the log is fetched \
                again from the leader\n"
        .to_string();
    mark(storage, dir, text).await?;
    Ok(true)
}

/// Quarantined logs in `data_dir` (`<topic>-<partition>.corrupt-<ms>`) that may go: moved aside
/// at least `retention_ms` before `now_ms`, and their partition no longer under repair (its
/// directory holds no marker; while it does, [`resume_interrupted`] may need the sibling).
/// `retention_ms` < 0 keeps them forever. Names that do not parse are kept.
pub fn expired_quarantines(data_dir: &Path, now_ms: i64, retention_ms: i64) -> Vec<PathBuf> {
    if retention_ms < 0 {
        return Vec::new();
    }
    let Ok(entries) = std::fs::read_dir(data_dir) else {
        return Vec::new();
    };
    let mut expired = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some((partition, at)) = name.rsplit_once(".corrupt-") else {
            continue;
        };
        let Ok(at_ms) = at.parse::<i64>() else {
            continue;
        };
        let repairing = data_dir.join(partition).join(REPAIR_MARKER_FILE).exists();
        if !repairing && now_ms.saturating_sub(at_ms) >= retention_ms {
            expired.push(entry.path());
        }
    }
    expired.sort();
    expired
}

/// Removes the [`expired_quarantines`] of `data_dir` (off the executor: a quarantined log can
/// be large). Returns how many went.
pub async fn remove_expired_quarantines(data_dir: &Path, now_ms: i64, retention_ms: i64) -> usize {
    let expired = expired_quarantines(data_dir, now_ms, retention_ms);
    let mut removed = 0;
    for dir in expired {
        let path = dir.clone();
        match borges_runtime::task::spawn_blocking(move || std::fs::remove_dir_all(&path)).await {
            Ok(()) => {
                removed += 1;
                tracing::warn!(dir = %dir.display(), retention_ms,
                    "quarantined corrupt log removed (quarantine_retention_ms passed)");
            }
            Err(e) => tracing::error!(dir = %dir.display(), "removing a quarantined log: {e}"),
        }
    }
    removed
}

/// Whether `dir` holds a segment file.
fn holds_segments(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".log"))
    })
}

impl Partition {
    /// Whether this replica is being repaired from the leader (it must not lead).
    pub fn is_repairing(&self) -> bool {
        self.repair.marker.borrow().is_some()
    }

    /// A leader's fetch answer carried `high_watermark`.
    pub fn note_leader_high_watermark(&self, high_watermark: i64) {
        let seen = &self.repair.leader_high_watermark;
        seen.set(seen.get().max(high_watermark));
    }

    /// Ends the repair when the log reaches the leader's high watermark: removes the marker.
    /// True when the repair ended now.
    pub async fn finish_repair_if_caught_up(&self) -> Result<bool, StorageError> {
        self.check_owner();
        let hw = self.repair.leader_high_watermark.get();
        let end = self.log.offsets().log_end_offset;
        if hw < 0 || end < hw {
            return Ok(false);
        }
        let Some(marker) = self.repair.marker.borrow_mut().take() else {
            return Ok(false);
        };
        if let Err(source) = borges_runtime::fs::remove_file(&marker).await {
            *self.repair.marker.borrow_mut() = Some(marker.clone());
            return Err(StorageError::Io {
                op: "remove",
                path: marker,
                source,
            });
        }
        if let Some(dir) = marker.parent() {
            if let Err(e) = borges_runtime::fs::sync_dir_async(dir).await {
                tracing::warn!(dir = %dir.display(), "fsync after removing the repair marker: {e}");
            }
        }
        tracing::warn!(partition = %self.id, log_end_offset = end, leader_high_watermark = hw,
            "replica repaired from the leader: it may lead again");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(root: &Path, name: &str) {
        std::fs::create_dir_all(root.join(name)).unwrap();
        std::fs::write(root.join(name).join("00000000000000000000.log"), b"x").unwrap();
    }

    /// Only quarantines past their retention whose partition is repaired go; a partition
    /// still under repair keeps its (possibly needed) sibling; unparsable names stay.
    /// Planted: the marker check removed -> t-1's quarantine listed too.
    #[test]
    fn expired_quarantines_are_old_ones_of_repaired_partitions() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path();
        dir(root, "t-0");
        dir(root, "t-0.corrupt-1000");
        dir(root, "t-1");
        std::fs::write(root.join("t-1").join(REPAIR_MARKER_FILE), b"repairing").unwrap();
        dir(root, "t-1.corrupt-1000");
        dir(root, "t-2.corrupt-9500");
        dir(root, "t-3.corrupt-x");
        dir(root, "deleted-topic-0.corrupt-2000");
        let expired = expired_quarantines(root, 10_000, 1_000);
        let names: Vec<String> = expired
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["deleted-topic-0.corrupt-2000", "t-0.corrupt-1000"]);
        assert_eq!(
            expired_quarantines(root, 10_000, 9_001),
            Vec::<PathBuf>::new()
        );
        assert_eq!(expired_quarantines(root, 10_000, -1), Vec::<PathBuf>::new());
        assert_eq!(expired_quarantines(root, 10_000, 500).len(), 3);
    }
}
