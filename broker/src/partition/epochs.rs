//! OffsetForLeaderEpoch on the leader: where a leader epoch ends in this partition's log
//! (Kafka's `lastOffsetForLeaderEpoch`), after the fetcher's view of the leader epoch is
//! checked (KIP-320 fencing).

use borges_protocol::ErrorCode;

use super::{Partition, PartitionTable};
use crate::failure::Failure;
use crate::types::PartitionRef;

/// One partition of an OffsetForLeaderEpoch request.
#[derive(Debug, Clone)]
pub struct EpochEndItem {
    /// The partition.
    pub partition: PartitionRef,
    /// The leader epoch the asker knows (-1: not checked).
    pub current_leader_epoch: i32,
    /// The epoch whose end is asked for.
    pub leader_epoch: i32,
}

/// The answer: (largest epoch <= the one asked, where it ends); (-1, -1) when this log has no
/// such epoch (it is empty, or the epoch is above its latest).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEnd {
    /// The epoch found.
    pub leader_epoch: i32,
    /// The start of the next epoch, or the log end for the latest.
    pub end_offset: i64,
}

impl Partition {
    /// Refuses a request routed on stale metadata (`current_leader_epoch` older than this
    /// partition's: FencedLeaderEpoch) or on metadata newer than this broker's
    /// (UnknownLeaderEpoch); -1 is not checked.
    pub fn check_leader_epoch(&self, current_leader_epoch: i32) -> Result<(), Failure> {
        let epoch = self.leader_epoch();
        if current_leader_epoch < 0 || current_leader_epoch == epoch {
            return Ok(());
        }
        let (code, relation) = if current_leader_epoch < epoch {
            (ErrorCode::FencedLeaderEpoch, "older than")
        } else {
            (ErrorCode::UnknownLeaderEpoch, "newer than")
        };
        Err(Failure::new(
            code,
            format!(
                "{}: leader epoch {current_leader_epoch} is {relation} the leader's {epoch}",
                self.id
            ),
        ))
    }

    /// Where `leader_epoch` ends in this log.
    pub fn epoch_end(
        &self,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<EpochEnd, Failure> {
        self.check_owner();
        self.check_leader_epoch(current_leader_epoch)?;
        let (leader_epoch, end_offset) =
            self.log.epoch_end_offset(leader_epoch).unwrap_or((-1, -1));
        strict_assert!(
            end_offset <= self.offsets().log_end_offset,
            "{}: epoch {leader_epoch} ends at {end_offset}, past the log end",
            self.id
        );
        Ok(EpochEnd {
            leader_epoch,
            end_offset,
        })
    }
}

impl PartitionTable {
    /// Epoch ends in partitions this core owns, one result per item, in order.
    pub fn epoch_ends(&self, items: &[EpochEndItem]) -> Vec<Result<EpochEnd, Failure>> {
        items
            .iter()
            .map(|item| {
                self.get(&item.partition)
                    .and_then(|p| p.epoch_end(item.current_leader_epoch, item.leader_epoch))
            })
            .collect()
    }
}
