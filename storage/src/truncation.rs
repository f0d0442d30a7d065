//! The truncation intent: what makes `truncate_to` all-or-nothing across a crash.
//!
//! A truncation touches several files (recovery checkpoint, the cut segment, its indexes, the
//! segments after it, the leader-epoch file); a crash between those steps could leave a log
//! that is neither the old one nor the truncated one (say, with a later segment already gone
//! and the cut segment still whole). So before the first of them, the flusher writes the
//! intent file `truncate.intent` (offset to truncate to, CRC-32C; fsynced, and its directory
//! too); after the last, it removes it (and fsyncs the directory, before any append is let
//! in, so that a stale intent can never cut later data). `PartitionLog::open` finishes an
//! intent it finds: after a crash the log is the old one (no intent on disk yet) or the
//! truncated one (the intent was there, and recovery completed it).

use std::rc::Rc;

use crate::checkpoint::{
    LeaderEpochCache, RecoveryCheckpoint, LEADER_EPOCH_FILE, RECOVERY_CHECKPOINT_FILE,
};
use crate::core::CoreStorage;
use crate::log::{CommandKind, PartitionLog};
use crate::segment::{parse_segment_name, INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX};
use crate::StorageError;

/// File name of the truncation intent.
pub const TRUNCATION_INTENT_FILE: &str = "truncate.intent";

const MAGIC: &[u8; 8] = b"BRGSTRC1";
/// The intent of `restart_at` (empty the log, start at the offset).
const RESTART_MAGIC: &[u8; 8] = b"BRGSRST1";

/// What an intent asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// `truncate_to(offset)`.
    TruncateTo(i64),
    /// `restart_at(offset)`.
    RestartAt(i64),
}
/// Encoded size of an intent.
pub const TRUNCATION_INTENT_SIZE_BYTES: usize = 8 + 8 + 4;

/// Encodes "truncate to `offset`" with a trailing CRC-32C.
pub fn encode_intent(intent: Intent) -> Vec<u8> {
    let (magic, offset) = match intent {
        Intent::TruncateTo(o) => (MAGIC, o),
        Intent::RestartAt(o) => (RESTART_MAGIC, o),
    };
    let mut out = Vec::with_capacity(TRUNCATION_INTENT_SIZE_BYTES);
    out.extend_from_slice(magic);
    out.extend_from_slice(&offset.to_be_bytes());
    let crc = crc32c::crc32c(&out);
    out.extend_from_slice(&crc.to_be_bytes());
    out
}

/// Decodes an intent; checks size, magic and CRC.
pub fn decode_intent(src: &[u8]) -> Result<Intent, String> {
    if src.len() != TRUNCATION_INTENT_SIZE_BYTES {
        return Err(format!(
            "size {} != {TRUNCATION_INTENT_SIZE_BYTES}",
            src.len()
        ));
    }
    let (body, crc) = src.split_at(16);
    let stored = u32::from_be_bytes(crc.try_into().map_err(|_| "crc")?);
    if crc32c::crc32c(body) != stored {
        return Err("CRC mismatch".into());
    }
    let offset = i64::from_be_bytes(body[8..16].try_into().map_err(|_| "offset")?);
    if offset < 0 {
        return Err(format!("negative offset {offset}"));
    }
    match &body[..8] {
        m if m == MAGIC => Ok(Intent::TruncateTo(offset)),
        m if m == RESTART_MAGIC => Ok(Intent::RestartAt(offset)),
        _ => Err("bad magic".into()),
    }
}

impl PartitionLog {
    /// Writes the intent durably (file and directory): the first step of a truncation.
    pub(crate) async fn write_truncation_intent(&self, offset: i64) -> Result<(), StorageError> {
        self.write_intent(Intent::TruncateTo(offset)).await
    }

    /// Writes the intent of `restart_at` durably.
    pub(crate) async fn write_restart_intent(&self, offset: i64) -> Result<(), StorageError> {
        self.write_intent(Intent::RestartAt(offset)).await
    }

    async fn write_intent(&self, intent: Intent) -> Result<(), StorageError> {
        let path = self.dir.join(TRUNCATION_INTENT_FILE);
        let bytes = encode_intent(intent);
        self.core
            .replace_file("write truncation intent", &path, bytes, true)
            .await
    }

    /// Removes the intent durably: the last step of a truncation (also when there was
    /// nothing to cut).
    pub(crate) async fn clear_truncation_intent(&self) -> Result<(), StorageError> {
        let path = self.dir.join(TRUNCATION_INTENT_FILE);
        if !path.exists() {
            return Ok(());
        }
        self.core
            .disk
            .remove_file(&path)
            .await
            .map_err(|e| crate::writer::io_error("remove", &path, e))?;
        self.core.sync_dir(&self.dir).await
    }
}

/// Before recovery, an interrupted truncation is made recoverable on the files:
/// - `restart_at`: its checkpoint may name a segment not created yet, which recovery would call
///   corruption: every segment goes, the epoch file is emptied, the checkpoint points at the
///   offset, then the intent is removed; recovery then opens an empty log there.
/// - `truncate_to(offset)`: every segment whose base is above `offset` goes (the truncation
///   removes all of it anyway). A power loss can bring back such a segment whose removal was not
///   yet durable while the segment before it was already cut: recovery would then see a log
///   with an empty segment in its middle, where the batch holding `offset` cannot be found (a
///   crash test found it: the reopened log refused to open). The intent stays for
///   [`finish_interrupted`].
pub(crate) async fn restart_before_recovery(
    core: &CoreStorage,
    dir: &std::path::Path,
) -> Result<(), StorageError> {
    let path = dir.join(TRUNCATION_INTENT_FILE);
    let intent = std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| decode_intent(&b));
    match intent {
        Ok(Intent::RestartAt(offset)) => finish_restart(core, dir, offset).await,
        Ok(Intent::TruncateTo(offset)) => prepare_truncate(core, dir, offset).await,
        Err(_) => Ok(()),
    }
}

/// The files' side of an interrupted `truncate_to(offset)` before recovery (see
/// [`restart_before_recovery`]): segments above `offset` go; a recovery checkpoint inside them
/// moves to the start of the last segment kept (recovery rescans it from there). At or below
/// the log start the truncation empties the log: that is a restart at `offset`.
async fn prepare_truncate(
    core: &CoreStorage,
    dir: &std::path::Path,
    offset: i64,
) -> Result<(), StorageError> {
    let cp_path = dir.join(RECOVERY_CHECKPOINT_FILE);
    let cp = match std::fs::read(&cp_path) {
        Ok(bytes) => RecoveryCheckpoint::decode(&bytes).ok(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(crate::writer::io_error("read", &cp_path, e)),
    };
    let log_start = cp.as_ref().map_or(0, |c| c.log_start_offset);
    if offset <= log_start {
        return finish_restart(core, dir, offset).await;
    }
    remove_segments(core, dir, |base| base > offset).await?;
    core.sync_dir(dir).await?;
    let Some(cp) = cp.filter(|c| c.segment_base > offset) else {
        return Ok(());
    };
    let kept = segment_bases(dir)?
        .into_iter()
        .filter(|&b| b <= offset)
        .max()
        .unwrap_or(log_start);
    let moved = RecoveryCheckpoint {
        log_start_offset: cp.log_start_offset,
        offset: kept,
        segment_base: kept,
        position: 0,
        index_entries: 0,
        time_index_entries: 0,
    };
    core.replace_file("write checkpoint", &cp_path, moved.encode(), true)
        .await
}

/// Base offsets of the segment log files in `dir`.
fn segment_bases(dir: &std::path::Path) -> Result<Vec<i64>, StorageError> {
    let list_error = |e| crate::writer::io_error("list directory", dir, e);
    let mut bases = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(list_error)? {
        let name = entry.map_err(list_error)?.file_name();
        if let Some(base) = parse_segment_name(&name.to_string_lossy(), LOG_SUFFIX) {
            bases.push(base);
        }
    }
    Ok(bases)
}

/// Removes the files of every segment whose base offset `doomed` picks.
async fn remove_segments(
    core: &CoreStorage,
    dir: &std::path::Path,
    doomed: impl Fn(i64) -> bool,
) -> Result<(), StorageError> {
    let list_error = |e| crate::writer::io_error("list directory", dir, e);
    for entry in std::fs::read_dir(dir).map_err(list_error)? {
        let name = entry.map_err(list_error)?.file_name();
        let name = name.to_string_lossy();
        let base = [LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX]
            .iter()
            .find_map(|s| parse_segment_name(&name, s));
        if base.is_some_and(&doomed) {
            let file = dir.join(&*name);
            core.disk
                .remove_file(&file)
                .await
                .map_err(|e| crate::writer::io_error("remove", &file, e))?;
        }
    }
    Ok(())
}

/// The files' side of an interrupted `restart_at(offset)` (see [`restart_before_recovery`]).
async fn finish_restart(
    core: &CoreStorage,
    dir: &std::path::Path,
    offset: i64,
) -> Result<(), StorageError> {
    tracing::warn!(dir = %dir.display(), offset, "finishing a restart interrupted by a crash");
    remove_segments(core, dir, |_| true).await?;
    let path = dir.join(TRUNCATION_INTENT_FILE);
    core.sync_dir(dir).await?;
    let epochs = LeaderEpochCache::default().encode();
    core.replace_file("write epochs", &dir.join(LEADER_EPOCH_FILE), epochs, true)
        .await?;
    let cp = RecoveryCheckpoint {
        log_start_offset: offset,
        offset,
        segment_base: offset,
        position: 0,
        index_entries: 0,
        time_index_entries: 0,
    };
    let cp_path = dir.join(RECOVERY_CHECKPOINT_FILE);
    core.replace_file("write checkpoint", &cp_path, cp.encode(), true)
        .await?;
    core.disk
        .remove_file(&path)
        .await
        .map_err(|e| crate::writer::io_error("remove", &path, e))?;
    core.sync_dir(dir).await
}

/// After recovery: finishes a truncation that a crash interrupted (its intent is on disk).
/// An unreadable intent was never completely written (it is replaced atomically), so the
/// truncation had not started: it is removed.
pub(crate) async fn finish_interrupted(log: &Rc<PartitionLog>) -> Result<(), StorageError> {
    let path = log.dir.join(TRUNCATION_INTENT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(crate::writer::io_error("read", &path, e)),
    };
    match decode_intent(&bytes) {
        Ok(intent) => {
            tracing::warn!(
                dir = %log.dir.display(),
                ?intent,
                "finishing a truncation interrupted by a crash"
            );
            log.run_command(match intent {
                Intent::TruncateTo(offset) => CommandKind::Truncate(offset),
                Intent::RestartAt(offset) => CommandKind::RestartAt(offset),
            })
            .await
        }
        Err(reason) => {
            let dir = log.dir.display();
            tracing::warn!(%dir, "removing an invalid truncation intent: {reason}");
            log.clear_truncation_intent().await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intent_round_trip_and_every_flip_refused() {
        for intent in [Intent::TruncateTo(4711), Intent::RestartAt(9)] {
            let bytes = encode_intent(intent);
            assert_eq!(bytes.len(), TRUNCATION_INTENT_SIZE_BYTES);
            assert_eq!(decode_intent(&bytes), Ok(intent));
            for i in 0..bytes.len() {
                let mut bad = bytes.clone();
                bad[i] ^= 0x01;
                assert!(decode_intent(&bad).is_err(), "flip at {i}");
            }
            assert!(decode_intent(&bytes[..19]).is_err());
        }
        assert!(decode_intent(&encode_intent(Intent::TruncateTo(-1))).is_err());
    }
}
