//! The partitions one core owns.
//!
//! - [`Partition`]: one partition: its log, its leadership (leader epoch, `min.insync.replicas`),
//!   the seam for replica state ([`replica`]) and its idempotent-producer state ([`producer`],
//!   snapshots in `producer_snapshot`, rebuilt by `producer_replay`, upkept by `idempotence`).
//!   It owns the one append path, used by produce requests and by group commits alike
//!   ([`Partition::append`]), and the read paths: fetch reads, long-poll waits, offsets by time.
//! - [`PartitionTable`]: every partition of the core, looked up by name, kept in line with the
//!   metadata image (opened, reconfigured, deleted).
//! - [`ValidatedBatch`]: a batch checked once on the receiving core, carried with its header.
//!
//! Everything here lives on the owning core and is reached from other cores only by message.

mod append;
mod batch;
mod compacted;
mod epochs;
mod follower;
mod idempotence;
#[cfg(test)]
mod idempotence_tests;
pub mod producer;
mod producer_replay;
mod producer_snapshot;
mod read;
pub mod repair;
pub mod replica;
mod table;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::Arc;
use std::thread::ThreadId;

use borges_runtime::time::Instant;
use borges_storage::{LogOffsets, PartitionLog, StorageError, TickOutcome};
use futures_channel::oneshot;

pub use append::{AppendItem, ProduceAck};
pub use batch::{validate, ValidatedBatch};
pub use epochs::{EpochEnd, EpochEndItem};
pub use read::{
    first_of, FetchItem, FetchOutcome, ListOffsetsItem, OffsetLookup, ReplicaFetchFields,
    MAX_TIMESTAMP,
};
pub use table::{unknown_topic, PartitionTable};

use crate::error::BrokerError;
use crate::failure::Failure;
use crate::metadata::MetadataImage;
use crate::metrics::PartitionStats;
use crate::types::{Acks, PartitionRef};
use idempotence::ProducerUpkeep;
use producer::ProducerState;
use replica::ReplicaState;

/// One partition this core leads. Lives on its owning core; other cores reach it only through
/// messages to that core.
pub struct Partition {
    id: PartitionRef,
    /// The core that owns it, and that core's thread: nothing else may touch it.
    core: usize,
    thread: ThreadId,
    log: Rc<PartitionLog>,
    /// The highest high watermark seen: it never moves backwards.
    high_watermark_seen: Cell<i64>,
    /// Stamped into every appended batch; from the metadata image.
    leader_epoch: Cell<i32>,
    /// `acks=all` is refused while the ISR is smaller; from the topic's configs.
    min_insync_replicas: Cell<i64>,
    replica: ReplicaState,
    /// Under repair from the leader after recovery found corruption (`repair`).
    repair: repair::RepairState,
    /// Idempotent producers' epochs and last batches; consulted and updated by every append.
    producers: RefCell<ProducerState>,
    upkeep: ProducerUpkeep,
}

impl Partition {
    /// A partition around its opened log, once its producer state is rebuilt (newest snapshot,
    /// then the log after it).
    pub(crate) async fn open(
        id: PartitionRef,
        core: usize,
        log: Rc<PartitionLog>,
        leader_epoch: i32,
        min_insync_replicas: i64,
        settings: &crate::config::ProducerSettings,
    ) -> Result<Partition, StorageError> {
        let limits = idempotence::producer_limits(settings);
        let (producers, rebuilt) = producer_replay::rebuild(&log, limits).await?;
        if rebuilt.batches_replayed > 0 || rebuilt.snapshot_offset.is_none() {
            tracing::debug!(
                partition = %id,
                snapshot_offset = rebuilt.snapshot_offset.unwrap_or(-1),
                batches_replayed = rebuilt.batches_replayed,
                producers = producers.len(),
                "producer state rebuilt"
            );
        }
        let upkeep = ProducerUpkeep::new(settings, &producers, borges_runtime::time::now_ms());
        if rebuilt.snapshot_offset != Some(rebuilt.log_end_offset) {
            upkeep.mark_unsnapshotted();
        }
        let repair = repair::RepairState::of_dir(log.dir());
        Ok(Partition {
            id,
            core,
            thread: std::thread::current().id(),
            high_watermark_seen: Cell::new(log.offsets().high_watermark),
            log,
            leader_epoch: Cell::new(leader_epoch),
            min_insync_replicas: Cell::new(min_insync_replicas),
            replica: ReplicaState::leader_only(),
            repair,
            producers: RefCell::new(producers),
            upkeep,
        })
    }

    /// The partition's name.
    pub fn id(&self) -> &PartitionRef {
        &self.id
    }

    /// The leader epoch appended batches are stamped with.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch.get()
    }

    /// The core that owns it.
    pub fn core(&self) -> usize {
        self.core
    }

    /// Checks that the caller runs on the owning core's thread.
    fn check_owner(&self) {
        strict_assert_eq!(
            std::thread::current().id(),
            self.thread,
            "{} is owned by core {} and touched from another thread",
            self.id,
            self.core
        );
    }

    /// Log start, high watermark, log end; checks that log start <= high watermark <= log
    /// end and that the high watermark never moved backwards.
    pub fn offsets(&self) -> LogOffsets {
        self.check_owner();
        let o = self.log.offsets();
        self.check_offsets(&o);
        o
    }

    /// The invariants of the log's present offsets (a read's snapshot: `check_read_offsets`).
    fn check_offsets(&self, o: &LogOffsets) {
        strict_assert!(
            o.log_start_offset <= o.high_watermark && o.high_watermark <= o.log_end_offset,
            "{}: offsets out of order: {o:?}",
            self.id
        );
        let seen = self.high_watermark_seen.get();
        strict_assert!(
            o.high_watermark >= seen,
            "{}: high watermark moved backwards from {seen} to {}",
            self.id,
            o.high_watermark
        );
        self.high_watermark_seen.set(seen.max(o.high_watermark));
    }

    /// The invariants of the offsets a read took before it awaited its IO: in order. Such a
    /// snapshot may be older than what another request has seen since (an append moved the
    /// high watermark while this read waited), so it is not compared with the highest
    /// watermark seen; the log's present offsets are.
    fn check_read_offsets(&self, snapshot: &LogOffsets) {
        strict_assert!(
            snapshot.log_start_offset <= snapshot.high_watermark
                && snapshot.high_watermark <= snapshot.log_end_offset,
            "{}: offsets out of order: {snapshot:?}",
            self.id
        );
        self.offsets();
    }

    /// Figures for metrics.
    pub fn stats(&self) -> PartitionStats {
        let o = self.offsets();
        PartitionStats {
            topic: self.id.topic.to_string(),
            partition: self.id.partition,
            log_start_offset: o.log_start_offset,
            high_watermark: o.high_watermark,
            log_end_offset: o.log_end_offset,
            size_bytes: self.log.size_bytes(),
            segments: self.log.segment_count(),
            producers: self.producer_count(),
            cleaner_dirty_ratio: self.cleaner_dirty_ratio(),
        }
    }

    /// Time-driven maintenance: segment roll by age, retention, checkpoints; producer expiry
    /// and snapshots.
    pub async fn tick(&self, now_ms: i64) -> Result<TickOutcome, StorageError> {
        let outcome = self.log.tick(now_ms).await?;
        self.tick_producers(now_ms).await?;
        Ok(outcome)
    }

    /// Flushes, syncs and closes the log with its clean-shutdown marker, then snapshots the
    /// producer state at the log end (so the next start replays nothing).
    pub async fn close(&self) -> Result<(), StorageError> {
        self.log.close().await?;
        self.snapshot_producers(false, borges_runtime::time::now_ms())
            .await
    }

    /// Applies leadership and configs from a new metadata image.
    fn set_leadership(&self, leader_epoch: i32, min_isr: i64) {
        strict_assert!(
            leader_epoch >= self.leader_epoch.get(),
            "{}: leader epoch moved backwards from {} to {leader_epoch}",
            self.id,
            self.leader_epoch.get()
        );
        self.leader_epoch.set(leader_epoch);
        self.min_insync_replicas.set(min_isr);
    }
}

/// Work for the partitions of the receiving core, sent by the core a request arrived on.
pub enum PartitionMessage {
    /// Append to partitions owned by the receiving core.
    Append {
        /// Partitions and their batches.
        items: Vec<AppendItem>,
        /// What the producer waits for.
        acks: Acks,
        /// Time allowed for acknowledgements.
        timeout_ms: u32,
        /// One outcome per item, in order.
        reply: oneshot::Sender<Vec<Result<ProduceAck, Failure>>>,
    },
    /// Read from partitions owned by the receiving core.
    Read {
        /// Partitions to read.
        items: Vec<FetchItem>,
        /// Read into memory instead of returning file ranges.
        copy: bool,
        /// One outcome per item, in order.
        reply: oneshot::Sender<Vec<FetchOutcome>>,
    },
    /// Resolve when any partition's high watermark (log end, for replica fetches) passes its
    /// offset, or at the deadline.
    WaitForData {
        /// (partition, offset, to the log end).
        items: Vec<(PartitionRef, i64, bool)>,
        /// When to give up.
        deadline: Instant,
        /// Resolved when data arrived or the deadline passed.
        reply: oneshot::Sender<()>,
    },
    /// Where leader epochs end (OffsetForLeaderEpoch) in partitions of the receiving core.
    EpochEnds {
        /// Partitions and epochs.
        items: Vec<EpochEndItem>,
        /// One outcome per item, in order.
        reply: oneshot::Sender<Vec<Result<EpochEnd, Failure>>>,
    },
    /// Offsets by time.
    ListOffsets {
        /// Partitions and timestamps.
        items: Vec<ListOffsetsItem>,
        /// One outcome per item, in order.
        reply: oneshot::Sender<Vec<Result<OffsetLookup, Failure>>>,
    },
    /// A new metadata image: open, close or reconfigure the partitions this core owns (and
    /// load the consumer groups of its offsets partitions).
    ApplyMetadata {
        /// The image.
        image: Arc<MetadataImage>,
        /// Ok once every partition of this core is ready.
        reply: oneshot::Sender<Result<(), BrokerError>>,
    },
}
