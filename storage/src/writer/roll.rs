//! Rolling to the next segment and the clean close.
//!
//! Contract: a segment is finalized only once it is closed (no more appends go to it) and every
//! byte of it is written: the file is cut to the exact size of its batches and fdatasynced, its
//! final time-index entry is added and both index files are written and fdatasynced, the next
//! segment's files are created and the directory fsynced, and only then does the flusher move
//! to the next segment and write a checkpoint. A clean close trims and syncs the active
//! segment, writes a checkpoint at the log end and then the clean-shutdown marker.

use super::Writer;
use crate::checkpoint::CLEAN_SHUTDOWN_FILE;
use crate::log::{PartitionLog, Point};
use crate::StorageError;

impl PartitionLog {
    /// Finalizes the writer's (closed, fully written) segment and opens the next one. Until
    /// the flusher has moved to the next segment nothing in memory changes, so a roll that
    /// failed for want of space or descriptors is simply run again.
    pub(super) async fn roll_writer(&self, w: &mut Writer) -> Result<(), StorageError> {
        let base = w.segment_base;
        let (mut index, next_base) = {
            let st = self.state.borrow();
            let seg = &st.segments[&base];
            let index = seg
                .live
                .clone()
                .expect("unfinalized segment has a live index");
            let next_base = st
                .segments
                .range(base + 1..)
                .next()
                .map(|(b, _)| *b)
                .expect("a closed segment has a successor");
            (index, next_base)
        };
        let next_rel = (next_base - base) as u32;
        index.push_time_entry(base, next_rel);
        w.trim_and_sync().await?;
        w.persist_index(&index, index.offsets.len(), index.times.len())
            .await?;
        let dir = self.dir.clone();
        let next = w
            .open_replacement(&self.core, &dir, (next_base, 0), (0, 0))
            .await?;
        self.core.sync_dir(&dir).await?;
        let old = std::mem::replace(w, next);
        if let Some(seg) = self.state.borrow_mut().segments.get_mut(&base) {
            // Finalized: readers load the complete index files from now on.
            seg.live = None;
        }
        old.close().await?;
        self.mark_synced(Point {
            offset: next_base,
            segment_base: next_base,
            position: 0,
        });
        {
            let mut st = self.state.borrow_mut();
            if st.flushed.offset == next_base {
                st.flushed = Point {
                    offset: next_base,
                    segment_base: next_base,
                    position: 0,
                };
            }
        }
        self.checkpoint(w).await
    }

    /// Clean shutdown of the files: everything written and synced, file trimmed, checkpoint at
    /// the log end, clean-shutdown marker.
    pub(super) async fn close_writer(&self, w: &mut Writer) -> Result<(), StorageError> {
        w.trim_and_sync().await?;
        let flushed = self.state.borrow().flushed;
        self.mark_synced(flushed);
        self.checkpoint(w).await?;
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        self.core
            .replace_file("write marker", &marker, Vec::new(), true)
            .await
    }
}
