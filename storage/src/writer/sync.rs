//! fdatasync and the recovery checkpoint.
//!
//! Contract: the synced point moves only to a point that an fdatasync which returned success
//! covered (the flushed point read before that fdatasync started), and never backwards. A
//! recovery checkpoint describes the synced point: the index entries it counts are written and
//! fdatasynced before the checkpoint file is replaced (write, fdatasync, rename), so that
//! recovery may trust everything before it.

use std::path::Path;

use borges_runtime::fs::BufferedFile;

use super::{io_error, IndexParts, Writer};
use crate::checkpoint::{RecoveryCheckpoint, LEADER_EPOCH_FILE, RECOVERY_CHECKPOINT_FILE};
use crate::index::{SegmentIndex, OFFSET_ENTRY_SIZE_BYTES, TIME_ENTRY_SIZE_BYTES};
use crate::log::{PartitionLog, Point};
use crate::StorageError;

impl IndexParts<'_> {
    /// Writes index entries `[persisted..upto)` of both files and fdatasyncs them.
    pub async fn persist_index(
        &mut self,
        index: &SegmentIndex,
        offsets_upto: usize,
        times_upto: usize,
    ) -> Result<(), StorageError> {
        let wrote_offsets = append_entries(
            self.index_file,
            self.persisted_offsets,
            offsets_upto,
            OFFSET_ENTRY_SIZE_BYTES,
            |from, to| index.encode_offsets(from, to),
            self.log_path,
        )
        .await?;
        let wrote_times = append_entries(
            self.time_file,
            self.persisted_times,
            times_upto,
            TIME_ENTRY_SIZE_BYTES,
            |from, to| index.encode_times(from, to),
            self.log_path,
        )
        .await?;
        if wrote_offsets || wrote_times {
            for file in [&*self.index_file, &*self.time_file] {
                file.sync_data()
                    .await
                    .map_err(|e| io_error("fdatasync", self.log_path, e))?;
            }
        }
        Ok(())
    }
}

/// Writes entries `[*persisted..upto)` of one index file (encoded by `encode(from, to)`) at their
/// place and advances `*persisted`; false if there was nothing to write.
async fn append_entries(
    file: &BufferedFile,
    persisted: &mut usize,
    upto: usize,
    entry_size_bytes: usize,
    encode: impl FnOnce(usize, usize) -> Vec<u8>,
    log_path: &Path,
) -> Result<bool, StorageError> {
    if upto <= *persisted {
        return Ok(false);
    }
    file.write_all_at(
        encode(*persisted, upto),
        (*persisted * entry_size_bytes) as u64,
    )
    .await
    .map_err(|e| io_error("write", log_path, e))?;
    *persisted = upto;
    Ok(true)
}

impl Writer {
    /// Writes index entries `[persisted..upto)` of both files and fdatasyncs them.
    pub async fn persist_index(
        &mut self,
        index: &SegmentIndex,
        offsets_upto: usize,
        times_upto: usize,
    ) -> Result<(), StorageError> {
        self.parts()
            .1
            .persist_index(index, offsets_upto, times_upto)
            .await
    }
}

impl PartitionLog {
    /// fdatasync of everything flushed so far in the writer's segment.
    pub(super) async fn sync_writer(&self, w: &mut Writer) -> Result<(), StorageError> {
        self.sync_parts(&mut w.parts().1).await
    }

    pub(super) async fn sync_parts(&self, w: &mut IndexParts<'_>) -> Result<(), StorageError> {
        let target = self.state.borrow().flushed;
        let started = std::time::Instant::now();
        w.file
            .sync_data()
            .await
            .map_err(|e| io_error("fdatasync", w.log_path, e))?;
        self.core.observed_sync(started.elapsed());
        *w.last_sync = self.core.clock.now();
        self.mark_synced(target);
        Ok(())
    }

    pub(super) fn mark_synced(&self, target: Point) {
        let hw_moved = {
            let mut st = self.state.borrow_mut();
            // Later in offset, or at the same offset in a later segment (a roll).
            if (target.offset, target.segment_base) > (st.synced.offset, st.synced.segment_base) {
                st.synced = target;
            }
            st.advance_hw()
        };
        self.progress.notify_all();
        if hw_moved {
            self.changes.notify_all();
        }
    }

    /// Writes the recovery-point checkpoint for the synced point (index entries first).
    pub(crate) async fn checkpoint(&self, w: &mut Writer) -> Result<(), StorageError> {
        self.checkpoint_parts(&mut w.parts().1).await
    }

    pub(super) async fn checkpoint_parts(
        &self,
        w: &mut IndexParts<'_>,
    ) -> Result<(), StorageError> {
        let (cp, index, epochs) = {
            let mut st = self.state.borrow_mut();
            st.checkpoint_requested = false;
            let synced = st.synced;
            assert_eq!(
                synced.segment_base, w.segment_base,
                "synced point is in the writer's segment"
            );
            let seg = &st.segments[&w.segment_base];
            let index = seg.live.clone().unwrap_or_default();
            let cp = RecoveryCheckpoint {
                log_start_offset: st.log_start_offset,
                offset: synced.offset,
                segment_base: synced.segment_base,
                position: synced.position,
                index_entries: index.offsets_before(w.segment_base, synced.offset) as u32,
                time_index_entries: index.times_before(w.segment_base, synced.offset) as u32,
            };
            let epochs = st.epochs_dirty.then(|| st.epochs.encode());
            st.epochs_dirty = false;
            (cp, index, epochs)
        };
        w.persist_index(
            &index,
            cp.index_entries as usize,
            cp.time_index_entries as usize,
        )
        .await?;
        // The epochs first, durably (file and directory): recovery trusts the file for every
        // batch before the recovery point and rebuilds only the epochs after it. (Epochs
        // change only with leaders, truncation and retention: the extra fsync is rare.)
        if let Some(bytes) = epochs {
            let path = self.dir.join(LEADER_EPOCH_FILE);
            self.core
                .replace_file("write epochs", &path, bytes, true)
                .await?;
        }
        let path = self.dir.join(RECOVERY_CHECKPOINT_FILE);
        self.core
            .replace_file("write checkpoint", &path, cp.encode(), false)
            .await?;
        *w.last_checkpoint = self.core.clock.now();
        self.state.borrow_mut().last_checkpoint = Some(cp);
        Ok(())
    }
}
