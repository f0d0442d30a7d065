//! The partition's side of the idempotent producer: the check before an append, the record
//! after it, expiry and snapshots on the maintenance tick, the final snapshot at close,
//! truncation (rebuild from the newest snapshot below the cut), and the entry point for
//! followers' replicated batches.

use std::cell::Cell;
use std::rc::Rc;

#[cfg(test)]
use borges_protocol::batch::BatchError;
use borges_protocol::batch::{BatchHeader, NO_PRODUCER_ID};
use borges_protocol::ErrorCode;
use borges_runtime::sync::Semaphore;
use borges_storage::{AckLevel, StorageError};

use super::producer::{ProducerLimits, ProducerState, Verdict};
use super::{producer_replay, producer_snapshot, Partition, ValidatedBatch};
use crate::config::ProducerSettings;
use crate::failure::Failure;

/// What the producer check decided for an append.
pub(super) enum Idempotence {
    /// No batch has a producer id: nothing to check or record.
    None,
    /// Append, then record these headers.
    Append(Vec<BatchHeader>),
    /// Already in the log at these offsets: answer without appending.
    Duplicate {
        /// Offset of the first record.
        base_offset: i64,
        /// Offset of the last record.
        last_offset: i64,
    },
}

/// Timers and guards of the producer state's upkeep. Lives on the partition's core.
pub(super) struct ProducerUpkeep {
    settings: ProducerSettings,
    /// (state generation, time) of the last snapshot written.
    snapshotted: Cell<(u64, i64)>,
    last_expiry_check_ms: Cell<i64>,
    /// Set while the state is rebuilt after a truncation: idempotent appends wait (`Busy`).
    rebuilding: Cell<bool>,
    /// One snapshot write at a time (tick and close).
    writing: Rc<Semaphore>,
}

impl ProducerUpkeep {
    /// Upkeep of a state just rebuilt (its snapshot is as good as written).
    pub(super) fn new(settings: &ProducerSettings, state: &ProducerState, now_ms: i64) -> Self {
        ProducerUpkeep {
            settings: settings.clone(),
            snapshotted: Cell::new((state.generation(), now_ms)),
            last_expiry_check_ms: Cell::new(now_ms),
            rebuilding: Cell::new(false),
            writing: Rc::new(Semaphore::new(1)),
        }
    }

    /// The state holds batches no snapshot has: the next tick writes one.
    pub(super) fn mark_unsnapshotted(&self) {
        let (generation, _) = self.snapshotted.get();
        self.snapshotted
            .set((generation.wrapping_sub(1), i64::MIN / 2));
    }
}

/// The state's limits from the broker settings.
pub fn producer_limits(settings: &ProducerSettings) -> ProducerLimits {
    ProducerLimits {
        expiration_ms: settings.producer_id_expiration_ms.min(i64::MAX as u64) as i64,
        producers_max: settings.producers_per_partition_max as usize,
    }
}

impl Partition {
    /// Checks the batches of an append against the producer state. Call it with no await
    /// between it and the log append, so that the state it saw is the one the append changes.
    pub(super) fn check_producers(
        &self,
        batches: &[ValidatedBatch],
    ) -> Result<Idempotence, Failure> {
        if batches
            .iter()
            .all(|b| b.header().producer_id == NO_PRODUCER_ID)
        {
            return Ok(Idempotence::None);
        }
        if self.upkeep.rebuilding.get() {
            return Err(Failure::new(
                ErrorCode::Busy,
                "the partition's producer state is being rebuilt after a truncation; retry",
            ));
        }
        let headers: Vec<BatchHeader> = batches.iter().map(|b| *b.header()).collect();
        Ok(match self.producers.borrow().check(&headers)? {
            Verdict::Append => Idempotence::Append(headers),
            Verdict::Duplicate {
                base_offset,
                last_offset,
            } => Idempotence::Duplicate {
                base_offset,
                last_offset,
            },
        })
    }

    /// Records appended batches (`Idempotence::Append`'s headers), the first at `base_offset`.
    pub(super) fn record_producers(&self, headers: &[BatchHeader], base_offset: i64) {
        self.producers
            .borrow_mut()
            .apply_appended(headers, base_offset);
    }

    /// Producers this partition remembers.
    pub fn producer_count(&self) -> usize {
        self.producers.borrow().len()
    }

    /// Follower entry point for replication: updates the producer state from batches just
    /// appended as a follower (`stamped`: whole batches with their leader-assigned base offsets,
    /// in log order), without sequence checks, so that a retry reaching this replica after it
    /// became leader is still recognised. Call it right after the follower's log append.
    #[cfg(test)]
    pub fn note_replicated(&self, stamped: &[u8]) -> Result<(), BatchError> {
        let mut headers = Vec::new();
        let mut at = 0;
        while at < stamped.len() {
            let h = BatchHeader::parse(&stamped[at..])?;
            at += h.size_bytes();
            headers.push(h);
        }
        self.note_replicated_headers(&headers);
        Ok(())
    }

    /// `note_replicated` with the headers parsed: the follower's append path.
    pub(super) fn note_replicated_headers(&self, headers: &[BatchHeader]) {
        let mut state = self.producers.borrow_mut();
        for h in headers {
            state.replay(h);
        }
    }

    /// The maintenance tick's producer part: expiry (every
    /// `producer_id_expiration_check_interval_ms`), producers whose batches retention removed,
    /// and a snapshot when the state changed (at most every `producer_snapshot_interval_ms`).
    pub(super) async fn tick_producers(&self, now_ms: i64) -> Result<(), StorageError> {
        let s = &self.upkeep.settings;
        let log_start = self.log.offsets().log_start_offset;
        {
            let mut state = self.producers.borrow_mut();
            state.truncate_head(log_start);
            let since = now_ms.saturating_sub(self.upkeep.last_expiry_check_ms.get());
            if since >= s.producer_id_expiration_check_interval_ms as i64 {
                self.upkeep.last_expiry_check_ms.set(now_ms);
                let expired = state.expire(now_ms);
                if expired > 0 {
                    tracing::debug!(partition = %self.id, expired, "idle producers expired");
                }
            }
        }
        let (generation, at) = self.upkeep.snapshotted.get();
        let due = now_ms.saturating_sub(at) >= s.producer_snapshot_interval_ms as i64;
        if due && generation != self.producers.borrow().generation() {
            self.snapshot_producers(true, now_ms).await?;
        }
        Ok(())
    }

    /// Writes a snapshot of the producer state as of the log end now. With `wait_durable`, only
    /// once the log below that offset is as durable as the topic promises (skipped if a
    /// truncation removes part of it meanwhile); without, the log must be closed (all synced).
    pub(super) async fn snapshot_producers(
        &self,
        wait_durable: bool,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let writing = self.upkeep.writing.clone();
        let _one = writing.acquire_static_permit(1).await;
        let (offset, generation, bytes) = {
            let state = self.producers.borrow();
            let offset = self.log.offsets().log_end_offset;
            (
                offset,
                state.generation(),
                producer_snapshot::encode(&state, offset),
            )
        };
        if wait_durable && offset > self.log.offsets().log_start_offset {
            match self.log.wait_acked(offset - 1, AckLevel::All).await {
                Ok(()) => {}
                Err(StorageError::Truncated { .. }) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        producer_snapshot::write(self.log.dir(), offset, bytes)
            .await
            .map_err(|source| StorageError::Io {
                op: "write producer snapshot",
                path: producer_snapshot::snapshot_path(self.log.dir(), offset),
                source,
            })?;
        self.upkeep.snapshotted.set((generation, now_ms));
        Ok(())
    }

    /// Removes every record at or after `offset` (replication truncation, whole batches as
    /// `PartitionLog::truncate_to`), then rebuilds the producer state from the newest snapshot
    /// at or below the new log end and the log after it. Idempotent appends are refused with
    /// `Busy` until the state is rebuilt.
    pub async fn truncate_to(&self, offset: i64) -> Result<(), StorageError> {
        self.upkeep.rebuilding.set(true);
        let result = self.truncate_and_rebuild(offset).await;
        self.upkeep.rebuilding.set(false);
        result
    }

    async fn truncate_and_rebuild(&self, offset: i64) -> Result<(), StorageError> {
        self.log.truncate_to(offset).await?;
        // The one place the high watermark may move back: a follower's diverged tail is cut.
        let offsets = self.log.offsets();
        self.high_watermark_seen.set(offsets.high_watermark);
        let end = offsets.log_end_offset;
        producer_snapshot::remove_above(self.log.dir(), end).await;
        let limits = self.producers.borrow().limits();
        let (state, rebuilt) = producer_replay::rebuild(&self.log, limits).await?;
        tracing::info!(
            partition = %self.id,
            truncated_to = end,
            snapshot = ?rebuilt.snapshot_offset,
            batches_replayed = rebuilt.batches_replayed,
            producers = state.len(),
            "producer state rebuilt after truncation"
        );
        let generation = state.generation();
        *self.producers.borrow_mut() = state;
        self.upkeep.snapshotted.set((generation, 0));
        self.upkeep.mark_unsnapshotted();
        Ok(())
    }
}
