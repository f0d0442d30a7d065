//! What replication needs from a partition log (docs/storage-format.md "Replication"):
//!
//! - `append_as_follower`: a follower appends the leader's batches as they are (the leader's
//!   base offsets and partition leader epochs kept), every batch CRC-checked first, the first
//!   one at the log end, offsets contiguous, epochs never below the log's latest.
//! - `begin_epoch`: a new leader records where its epoch starts (Kafka's `makeLeader`).
//! - a replication bound on the high watermark (`set_replicated`, `set_replication_hw`): the
//!   high watermark is then the smallest of what the durability policy allows and what the
//!   replicas have (leader: the smallest log end over the ISR; follower: the leader's high
//!   watermark). Without it (replication factor 1) nothing changes: the policy point alone.
//! - `wait_committed`: acks=all under replication, resolved when the high watermark covers
//!   an offset.
//!
//! The high watermark is a `Point` (offset and where its batch ends on disk: reads from files
//! stop there), so the replication bound keeps the end points of the batches appended above
//! it, at most `REPLICATION_ENDS_MAX`; past that, every other one is dropped (the high
//! watermark may then stop at an earlier batch boundary than it could: lower, never higher,
//! and exact again once the bound reaches the newest kept end).

use std::collections::VecDeque;

use borges_protocol::batch::{self, BatchHeader};
use bytes::BytesMut;

use crate::log::{Gate, LogState, PartitionLog, Point};
use crate::{AppendInfo, StorageError};

/// Batch end points kept above the high watermark of a replicated log (24 bytes each).
pub const REPLICATION_ENDS_MAX: usize = 64 * 1024;

/// The replication bound of a log's high watermark. Lives in the log's state, on its core.
#[derive(Debug, Clone)]
pub(crate) struct ReplicationBound {
    /// The high watermark may not pass this offset.
    bound: i64,
    /// End points of batches above the high watermark, oldest first (strictly increasing).
    ends: VecDeque<Point>,
    ends_max: usize,
}

impl ReplicationBound {
    /// A bound at `hw` (nothing moves until replicas report), knowing the log end `end`.
    pub fn new(hw: Point, end: Point, ends_max: usize) -> ReplicationBound {
        assert!(ends_max >= 2, "room for at least two end points");
        let mut ends = VecDeque::new();
        if end.offset > hw.offset {
            ends.push_back(end);
        }
        ReplicationBound {
            bound: hw.offset,
            ends,
            ends_max,
        }
    }

    /// Records the end of a batch just appended (at the log end).
    pub fn note_end(&mut self, end: Point) {
        if let Some(last) = self.ends.back() {
            assert!(end.offset > last.offset, "batch ends increase");
        }
        if self.ends.len() >= self.ends_max {
            // Keep every other point, the newest always: the bound stays reachable.
            let mut i = 0;
            let n = self.ends.len();
            self.ends.retain(|_| {
                i += 1;
                (n - i).is_multiple_of(2)
            });
        }
        self.ends.push_back(end);
    }

    /// Moves the bound; true if it changed.
    pub fn set(&mut self, bound: i64) -> bool {
        let changed = bound != self.bound;
        self.bound = bound;
        changed
    }

    /// The high watermark the bound allows given the policy point `policy` and the current
    /// high watermark `hw`: the largest known batch end <= both, never below `hw`.
    pub fn limit(&mut self, policy: Point, hw: Point) -> Point {
        let cap = self.bound.min(policy.offset);
        let mut best = hw;
        if policy.offset <= cap && policy.offset > best.offset {
            best = policy;
        }
        while let Some(&front) = self.ends.front() {
            if front.offset > cap {
                break;
            }
            self.ends.pop_front();
            if front.offset > best.offset {
                best = front;
            }
        }
        best
    }

    /// Forgets ends at or after `end` (truncation) and everything when the log restarts.
    pub fn truncate(&mut self, end: i64) {
        while self.ends.back().is_some_and(|p| p.offset > end) {
            self.ends.pop_back();
        }
    }
}

impl PartitionLog {
    /// Appends batches fetched from the leader, as they are: every batch CRC-checked, the
    /// first at the log end, contiguous, with leader epochs that never go below the log's
    /// latest. Nothing is appended when one batch fails. Synchronous, like `append`.
    pub fn append_as_follower(&self, batches: Vec<BytesMut>) -> Result<AppendInfo, StorageError> {
        self.append_placed(batches, None)
    }

    /// Checks a follower's batches against the log (called with the headers parsed).
    pub(crate) fn check_follower_batches(
        st: &LogState,
        batches: &[BytesMut],
        headers: &[BatchHeader],
    ) -> Result<(), StorageError> {
        let mut next = st.log_end_offset();
        let mut latest = st.epochs.latest().map_or(-1, |(e, _)| e);
        for (b, h) in batches.iter().zip(headers) {
            batch::validate(b)?;
            if h.base_offset != next {
                return Err(StorageError::UnexpectedAppendOffset {
                    base_offset: h.base_offset,
                    expected_offset: next,
                });
            }
            if h.partition_leader_epoch < latest {
                return Err(StorageError::EpochRegression {
                    base_offset: h.base_offset,
                    epoch: h.partition_leader_epoch,
                    latest_epoch: latest,
                });
            }
            latest = h.partition_leader_epoch;
            next = h.next_offset();
        }
        Ok(())
    }

    /// A new leader's epoch starts at the log end: recorded in the leader-epoch cache (and in
    /// its file with the next checkpoint) before the leader serves, so that followers holding
    /// batches of a later stray epoch learn where to truncate. True if the cache changed.
    pub fn begin_epoch(&self, epoch: i32) -> bool {
        let mut st = self.state.borrow_mut();
        let end = st.log_end_offset();
        let changed = st.epochs.assign(epoch, end);
        if changed {
            st.epochs_dirty = true;
            st.checkpoint_requested = true;
            drop(st);
            self.work.notify_all();
        }
        changed
    }

    /// The latest epoch in the leader-epoch cache (a follower's `last_fetched_epoch`).
    pub fn latest_epoch(&self) -> Option<i32> {
        self.state.borrow().epochs.latest().map(|(e, _)| e)
    }

    /// Turns the replication bound on (at the current high watermark: it moves again only
    /// as replicas report) or off (the high watermark follows the policy alone).
    pub fn set_replicated(&self, replicated: bool) {
        let moved = {
            let mut st = self.state.borrow_mut();
            match (replicated, st.replication.is_some()) {
                (true, false) => {
                    let end = log_end_point(&st);
                    st.replication = Some(ReplicationBound::new(st.hw, end, REPLICATION_ENDS_MAX));
                    false
                }
                (false, true) => {
                    st.replication = None;
                    st.advance_hw()
                }
                _ => false,
            }
        };
        if moved {
            self.changes.notify_all();
        }
    }

    /// Whether the high watermark is bound by replication.
    pub fn is_replicated(&self) -> bool {
        self.state.borrow().replication.is_some()
    }

    /// Sets the replication bound of the high watermark (leader: the smallest log end over
    /// the ISR; follower: the leader's high watermark). The high watermark becomes the largest
    /// batch boundary at or below both this bound and the policy point, and never moves
    /// backwards. Returns whether it moved. No effect unless `set_replicated(true)`.
    pub fn set_replication_hw(&self, bound: i64) -> bool {
        let moved = {
            let mut st = self.state.borrow_mut();
            match &mut st.replication {
                Some(r) => {
                    r.set(bound);
                    st.advance_hw()
                }
                None => false,
            }
        };
        if moved {
            self.changes.notify_all();
            self.progress.notify_all();
        }
        moved
    }

    /// Resolves when the high watermark passes `last_offset` (acks=all under replication);
    /// errors when a truncation removed it, the log closed or the log directory failed.
    /// Call it right after `append` (no await in between), as `wait_acked`.
    pub async fn wait_committed(&self, last_offset: i64) -> Result<(), StorageError> {
        let since = self.state.borrow().truncation_generation;
        loop {
            let seen = self.progress.generation();
            let failed = self.core.failure.generation();
            self.core.check_failed()?;
            {
                let st = self.state.borrow();
                if st
                    .truncations
                    .iter()
                    .any(|&(g, end)| g > since && end <= last_offset)
                {
                    return Err(StorageError::Truncated {
                        offset: last_offset,
                    });
                }
                if st.hw.offset > last_offset {
                    return Ok(());
                }
                if st.gate == Gate::Closed {
                    return Err(StorageError::Closed);
                }
            }
            futures_lite::future::or(
                self.progress.changed_since(seen),
                self.core.failure.changed_since(failed),
            )
            .await;
        }
    }
}

/// The log end as a point.
fn log_end_point(st: &LogState) -> Point {
    let active = st.active();
    Point {
        offset: active.next_offset,
        segment_base: active.base_offset,
        position: active.size_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(offset: i64) -> Point {
        Point {
            offset,
            segment_base: 0,
            position: offset as u64 * 100,
        }
    }

    #[test]
    fn bound_stops_at_batch_ends_below_policy_and_bound() {
        let mut r = ReplicationBound::new(p(0), p(0), 8);
        for end in [3, 5, 9, 12] {
            r.note_end(p(end));
        }
        // Bound between two batch ends: the high watermark stops at the lower one.
        r.set(7);
        assert_eq!(r.limit(p(12), p(0)), p(5));
        // The policy point lower than the bound limits too.
        r.set(12);
        assert_eq!(r.limit(p(9), p(5)), p(9));
        assert_eq!(r.limit(p(12), p(9)), p(12));
        // Never backwards.
        r.set(1);
        assert_eq!(r.limit(p(12), p(12)), p(12));
    }

    #[test]
    fn thinning_keeps_the_newest_end() {
        let mut r = ReplicationBound::new(p(0), p(0), 4);
        for end in 1..=20 {
            r.note_end(p(end));
        }
        assert!(r.ends.len() <= 4);
        assert_eq!(r.ends.back(), Some(&p(20)));
        r.set(20);
        assert_eq!(r.limit(p(20), p(0)), p(20));
    }

    #[test]
    fn truncation_forgets_later_ends() {
        let mut r = ReplicationBound::new(p(0), p(0), 8);
        for end in [3, 5, 9] {
            r.note_end(p(end));
        }
        r.truncate(5);
        // A new batch after the cut ends below the removed one; the bound between them.
        r.note_end(p(7));
        r.set(6);
        assert_eq!(r.limit(p(7), p(0)), p(5));
        r.set(7);
        assert_eq!(r.limit(p(7), p(5)), p(7));
    }
}
