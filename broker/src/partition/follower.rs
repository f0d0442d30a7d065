//! The follower side of a partition's log: what the fetcher (`replicate`) does with the
//! leader's answers, on the owning core: appends keeping the leader's offsets and epochs
//! (every batch CRC-checked by storage, producer state updated as on the leader), the high
//! watermark bound by the leader's, truncation to a divergence point and a restart at the
//! leader's log start (producer state rebuilt).

use borges_protocol::batch::BatchHeader;
use borges_replication::replica::LocalLog;
use borges_storage::{Durability, StorageError};
use bytes::BytesMut;

use super::replica::FollowTarget;
use super::Partition;

impl Partition {
    /// Appends the leader's batches (checked contiguous by the fetcher) if this replica still
    /// follows `target`; false when it does not (nothing appended). Waits for room in the
    /// core's write budget.
    pub async fn append_replicated(
        &self,
        target: FollowTarget,
        batches: Vec<BytesMut>,
    ) -> Result<bool, StorageError> {
        self.check_owner();
        let size_bytes: u64 = batches.iter().map(|b| b.len() as u64).sum();
        self.log.wait_writable(size_bytes).await;
        // No await from here to the append: the role cannot change in between.
        if self.follow_target() != Some(target) {
            return Ok(false);
        }
        let mut headers = Vec::with_capacity(batches.len());
        for b in &batches {
            headers.push(BatchHeader::parse(b)?);
        }
        let info = self.log.append_as_follower(batches)?;
        strict_assert!(
            headers
                .first()
                .is_some_and(|h| h.base_offset == info.base_offset)
                && headers
                    .last()
                    .is_some_and(|h| h.last_offset() == info.last_offset),
            "{}: follower append moved offsets",
            self.id
        );
        self.note_replicated_headers(&headers);
        Ok(true)
    }

    /// The follower's high watermark: min(leader's, own log end), never backwards.
    pub fn set_follower_high_watermark(&self, high_watermark: i64) {
        let end = self.log.offsets().log_end_offset;
        self.log.set_replication_hw(high_watermark.min(end));
    }

    /// fdatasyncs the log (a follower under `durability=fsync` before it reports an offset).
    pub async fn sync_log(&self) -> Result<(), StorageError> {
        self.log.sync().await
    }

    /// Empties the log and restarts it at `offset` (it ends before the leader's log start),
    /// then rebuilds the producer state.
    pub async fn restart_replica_at(&self, offset: i64) -> Result<(), StorageError> {
        self.log.restart_at(offset).await?;
        // The log restarts: the high watermark may move back with it.
        self.high_watermark_seen
            .set(self.log.offsets().high_watermark);
        self.truncate_to(offset).await
    }

    /// Whether the follower must sync before it reports an offset.
    pub fn syncs_before_fetch(&self) -> bool {
        self.log.durability() == Durability::Fsync
    }
}

impl LocalLog for Partition {
    fn log_start_offset(&self) -> i64 {
        self.log.offsets().log_start_offset
    }

    fn log_end_offset(&self) -> i64 {
        self.log.offsets().log_end_offset
    }

    fn synced_end_offset(&self) -> i64 {
        self.log.synced_offset()
    }

    fn latest_epoch(&self) -> Option<i32> {
        self.log.latest_epoch()
    }

    fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        self.log.epoch_end_offset(epoch)
    }
}
