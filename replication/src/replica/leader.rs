//! The leader's view of one partition's replicas: each follower's log end and last caught-up
//! time, the ISR (committed by the controller, plus the change in flight), the high watermark
//! they allow, and the ISR change to ask the controller for.
//!
//! Kafka's rules (cluster/Partition.scala, Replica.scala; KIP-497, KIP-966):
//! - a follower is caught up at a fetch when its fetch offset reaches the leader's log end at
//!   that fetch, or the leader's log end at its previous fetch (then it was caught up as of
//!   the previous fetch's time);
//! - out of sync: log end below the leader's and not caught up for `replica_lag_time_max_ms`;
//! - the leader never changes the ISR itself: it asks the controller (AlterPartition), one
//!   request in flight, and meanwhile uses the *maximal* ISR (old ∪ new) for the high
//!   watermark, so a shrink in flight never lets it advance early;
//! - high watermark = smallest log end over the maximal ISR, and it does not move at all while
//!   the committed ISR is smaller than `min_insync_replicas` (KIP-966's strict rule);
//! - a follower joins when its log end reaches the high watermark and the start of the
//!   leader's epoch.

use std::collections::{BTreeMap, BTreeSet};

use borges_protocol::ErrorCode;

/// A broker id (Kafka's node id).
pub type BrokerId = i32;

/// Settings of a leader's replica tracking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderSettings {
    /// A follower not caught up for this long leaves the ISR (`replica.lag.time.max.ms`).
    pub replica_lag_time_max_ms: i64,
    /// acks=all needs this many in-sync replicas; the high watermark does not move below it
    /// (`min.insync.replicas`).
    pub min_insync_replicas: usize,
}

/// What the leader knows of one follower. Kafka's `Replica` state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// The follower's log end (its last fetch offset), -1 before its first fetch.
    pub log_end_offset: i64,
    /// When it was last caught up (ms), or -1.
    pub last_caught_up_ms: i64,
    /// When it last fetched (ms), or -1.
    pub last_fetch_ms: i64,
    /// The leader's log end at that fetch.
    pub last_fetch_leader_log_end: i64,
    /// The follower broker's epoch as of its last fetch (-1 unknown).
    pub broker_epoch: i64,
}

impl FollowerState {
    fn unknown() -> FollowerState {
        FollowerState {
            log_end_offset: -1,
            last_caught_up_ms: -1,
            last_fetch_ms: -1,
            last_fetch_leader_log_end: -1,
            broker_epoch: -1,
        }
    }
}

/// An ISR change the leader asks the controller to commit (AlterPartition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsrChangeRequest {
    /// The leader (this broker).
    pub leader_id: BrokerId,
    /// Its leader epoch.
    pub leader_epoch: i32,
    /// The partition epoch the change is based on (the controller refuses a stale one).
    pub partition_epoch: i32,
    /// The proposed ISR, sorted, the leader included.
    pub new_isr: Vec<BrokerId>,
}

/// Why a replica fetch is refused (the error code to answer with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchRefusal {
    /// The fetcher's epoch is older than the leader's: it must refresh metadata.
    FencedLeaderEpoch,
    /// The fetcher's epoch is newer (the leader is stale), or it is not an assigned replica.
    UnknownLeaderEpoch,
    /// A fetch from a broker epoch older than one seen before (a restarted broker's old
    /// connection).
    StaleBrokerEpoch,
}

impl FetchRefusal {
    /// The wire code.
    pub fn error_code(self) -> ErrorCode {
        match self {
            FetchRefusal::FencedLeaderEpoch => ErrorCode::FencedLeaderEpoch,
            FetchRefusal::UnknownLeaderEpoch | FetchRefusal::StaleBrokerEpoch => {
                ErrorCode::UnknownLeaderEpoch
            }
        }
    }
}

/// A follower's fetch as the leader sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaFetch {
    /// The follower.
    pub replica_id: BrokerId,
    /// Its broker epoch (-1 unknown).
    pub broker_epoch: i64,
    /// The leader epoch it knows (-1 unknown: not checked).
    pub current_leader_epoch: i32,
    /// Its log end.
    pub fetch_offset: i64,
}

/// What a replica fetch changed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchUpdate {
    /// The high watermark moved to this offset.
    pub high_watermark_moved: Option<i64>,
    /// The ISR should grow: ask the controller.
    pub isr_change: Option<IsrChangeRequest>,
}

/// The leader's replica state of one partition. Lives on the partition's owning core; plain
/// data, no IO: the owner feeds it fetches, appends, time and committed ISR changes.
#[derive(Debug, Clone)]
pub struct LeaderState {
    local_id: BrokerId,
    leader_epoch: i32,
    partition_epoch: i32,
    /// Where this leader's epoch starts in the log.
    epoch_start_offset: i64,
    replicas: Vec<BrokerId>,
    /// The ISR as the controller committed it (the leader included).
    isr: BTreeSet<BrokerId>,
    /// The change in flight, if any.
    pending: Option<IsrChangeRequest>,
    followers: BTreeMap<BrokerId, FollowerState>,
    high_watermark: i64,
    settings: LeaderSettings,
}

impl LeaderState {
    /// Becomes leader of `replicas` at `leader_epoch` with the committed `isr`; the log ends at
    /// `log_end_offset` (where the epoch starts) and its high watermark is `high_watermark`.
    /// ISR members count as caught up now (Kafka's makeLeader).
    pub fn new(
        local_id: BrokerId,
        (leader_epoch, partition_epoch): (i32, i32),
        replicas: &[BrokerId],
        isr: &[BrokerId],
        (log_end_offset, high_watermark): (i64, i64),
        now_ms: i64,
        settings: LeaderSettings,
    ) -> LeaderState {
        assert!(replicas.contains(&local_id), "the leader is a replica");
        assert!(high_watermark <= log_end_offset, "hw <= log end");
        let isr: BTreeSet<BrokerId> = isr.iter().copied().chain([local_id]).collect();
        let followers = replicas
            .iter()
            .filter(|&&r| r != local_id)
            .map(|&r| {
                let mut f = FollowerState::unknown();
                if isr.contains(&r) {
                    f.last_caught_up_ms = now_ms;
                }
                (r, f)
            })
            .collect();
        LeaderState {
            local_id,
            leader_epoch,
            partition_epoch,
            epoch_start_offset: log_end_offset,
            replicas: replicas.to_vec(),
            isr,
            pending: None,
            followers,
            high_watermark,
            settings,
        }
    }

    /// The leader epoch.
    pub fn leader_epoch(&self) -> i32 {
        self.leader_epoch
    }

    /// The partition epoch of the committed ISR.
    pub fn partition_epoch(&self) -> i32 {
        self.partition_epoch
    }

    /// The settings in force.
    pub fn settings(&self) -> LeaderSettings {
        self.settings
    }

    /// New settings (a topic's `min.insync.replicas` changed); the high watermark may move.
    pub fn set_settings(&mut self, settings: LeaderSettings, leader_log_end: i64) -> Option<i64> {
        self.settings = settings;
        self.advance_high_watermark(leader_log_end)
    }

    /// The committed ISR, sorted.
    pub fn isr(&self) -> Vec<BrokerId> {
        self.isr.iter().copied().collect()
    }

    /// The committed ISR plus members a change in flight adds.
    pub fn maximal_isr(&self) -> BTreeSet<BrokerId> {
        let mut all = self.isr.clone();
        if let Some(p) = &self.pending {
            all.extend(p.new_isr.iter().copied());
        }
        all
    }

    /// The ISR change in flight.
    pub fn pending_isr_change(&self) -> Option<&IsrChangeRequest> {
        self.pending.as_ref()
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    /// A follower's state.
    pub fn follower(&self, id: BrokerId) -> Option<&FollowerState> {
        self.followers.get(&id)
    }

    /// acks=all before the append: refused with NotEnoughReplicas (nothing appended) while
    /// the committed ISR is smaller than `min_insync_replicas`.
    pub fn check_acks_all(&self) -> Result<(), ErrorCode> {
        if self.isr.len() < self.settings.min_insync_replicas {
            return Err(ErrorCode::NotEnoughReplicas);
        }
        Ok(())
    }

    /// Checks a follower's fetch against the leader's epoch and the assignment.
    pub fn check_fetch(&self, fetch: &ReplicaFetch) -> Result<(), FetchRefusal> {
        if fetch.current_leader_epoch >= 0 {
            if fetch.current_leader_epoch < self.leader_epoch {
                return Err(FetchRefusal::FencedLeaderEpoch);
            }
            if fetch.current_leader_epoch > self.leader_epoch {
                return Err(FetchRefusal::UnknownLeaderEpoch);
            }
        }
        let Some(f) = self.followers.get(&fetch.replica_id) else {
            return Err(FetchRefusal::UnknownLeaderEpoch);
        };
        if fetch.broker_epoch >= 0 && fetch.broker_epoch < f.broker_epoch {
            return Err(FetchRefusal::StaleBrokerEpoch);
        }
        Ok(())
    }

    /// A follower fetched at `fetch.fetch_offset` while the leader's log ends at
    /// `leader_log_end`: its state, then ISR expansion and the high watermark.
    pub fn on_fetch(
        &mut self,
        fetch: &ReplicaFetch,
        leader_log_end: i64,
        now_ms: i64,
    ) -> Result<FetchUpdate, FetchRefusal> {
        self.check_fetch(fetch)?;
        let f = self
            .followers
            .get_mut(&fetch.replica_id)
            .expect("checked: an assigned follower");
        let offset = fetch.fetch_offset.min(leader_log_end);
        if offset >= leader_log_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(now_ms);
        } else if f.last_fetch_ms >= 0 && offset >= f.last_fetch_leader_log_end {
            f.last_caught_up_ms = f.last_caught_up_ms.max(f.last_fetch_ms);
        }
        f.log_end_offset = offset;
        f.last_fetch_ms = now_ms;
        f.last_fetch_leader_log_end = leader_log_end;
        if fetch.broker_epoch >= 0 {
            f.broker_epoch = fetch.broker_epoch;
        }
        let isr_change = self.expansion(fetch.replica_id);
        let high_watermark_moved = self.advance_high_watermark(leader_log_end);
        Ok(FetchUpdate {
            high_watermark_moved,
            isr_change,
        })
    }

    /// The ISR change that adds `id` if it has caught up (and none is in flight).
    fn expansion(&mut self, id: BrokerId) -> Option<IsrChangeRequest> {
        if self.pending.is_some() || self.isr.contains(&id) {
            return None;
        }
        let f = self.followers[&id];
        let caught_up = f.log_end_offset >= self.high_watermark.max(self.epoch_start_offset);
        if !caught_up {
            return None;
        }
        let mut new_isr = self.isr.clone();
        new_isr.insert(id);
        Some(self.propose(new_isr))
    }

    fn propose(&mut self, new_isr: BTreeSet<BrokerId>) -> IsrChangeRequest {
        let request = IsrChangeRequest {
            leader_id: self.local_id,
            leader_epoch: self.leader_epoch,
            partition_epoch: self.partition_epoch,
            new_isr: new_isr.into_iter().collect(),
        };
        self.pending = Some(request.clone());
        request
    }

    /// The leader appended: its log now ends at `leader_log_end` (the high watermark may move
    /// when the leader is the whole ISR).
    pub fn on_append(&mut self, leader_log_end: i64) -> Option<i64> {
        self.advance_high_watermark(leader_log_end)
    }

    /// Followers out of sync at `now_ms`: log end below the leader's and not caught up for
    /// `replica_lag_time_max_ms`.
    pub fn lagging(&self, leader_log_end: i64, now_ms: i64) -> Vec<BrokerId> {
        self.isr
            .iter()
            .filter(|&&id| id != self.local_id)
            .filter(|id| {
                let f = &self.followers[id];
                f.log_end_offset < leader_log_end
                    && now_ms - f.last_caught_up_ms > self.settings.replica_lag_time_max_ms
            })
            .copied()
            .collect()
    }

    /// The periodic ISR check (Kafka runs it every `replica_lag_time_max_ms / 2`): the change
    /// that removes lagging followers, if any and none is in flight.
    pub fn check_isr_shrink(
        &mut self,
        leader_log_end: i64,
        now_ms: i64,
    ) -> Option<IsrChangeRequest> {
        if self.pending.is_some() {
            return None;
        }
        let lagging = self.lagging(leader_log_end, now_ms);
        if lagging.is_empty() {
            return None;
        }
        let new_isr = self
            .isr
            .iter()
            .filter(|id| !lagging.contains(id))
            .copied()
            .collect();
        Some(self.propose(new_isr))
    }

    /// The controller committed the partition at `partition_epoch` with `isr` (from the new
    /// metadata image). Returns whether acks=all waiters must now fail with
    /// NotEnoughReplicasAfterAppend (the ISR fell below `min_insync_replicas`), and the high
    /// watermark if it moved.
    pub fn on_isr_committed(
        &mut self,
        isr: &[BrokerId],
        partition_epoch: i32,
        leader_log_end: i64,
    ) -> (bool, Option<i64>) {
        if partition_epoch < self.partition_epoch {
            return (false, None);
        }
        self.partition_epoch = partition_epoch;
        self.isr = isr.iter().copied().chain([self.local_id]).collect();
        self.isr.retain(|id| self.replicas.contains(id));
        self.pending = None;
        let below_min = self.isr.len() < self.settings.min_insync_replicas;
        (below_min, self.advance_high_watermark(leader_log_end))
    }

    /// The controller refused or lost the change in flight: the next check proposes again.
    pub fn on_isr_change_failed(&mut self) {
        self.pending = None;
    }

    /// Recomputes the high watermark; returns it if it moved.
    fn advance_high_watermark(&mut self, leader_log_end: i64) -> Option<i64> {
        if self.isr.len() < self.settings.min_insync_replicas {
            return None;
        }
        let mut hw = leader_log_end;
        for id in self.maximal_isr() {
            if id != self.local_id {
                hw = hw.min(self.followers[&id].log_end_offset);
            }
        }
        if hw > self.high_watermark {
            self.high_watermark = hw;
            return Some(hw);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SETTINGS: LeaderSettings = LeaderSettings {
        replica_lag_time_max_ms: 1000,
        min_insync_replicas: 2,
    };

    fn fetch(replica_id: BrokerId, fetch_offset: i64) -> ReplicaFetch {
        ReplicaFetch {
            replica_id,
            broker_epoch: 7,
            current_leader_epoch: 3,
            fetch_offset,
        }
    }

    fn leader(isr: &[BrokerId]) -> LeaderState {
        LeaderState::new(1, (3, 10), &[1, 2, 3], isr, (100, 100), 0, SETTINGS)
    }

    #[test]
    fn high_watermark_is_the_smallest_log_end_over_the_isr() {
        let mut l = leader(&[1, 2, 3]);
        assert_eq!(
            l.on_append(150),
            None,
            "followers have not fetched past 100"
        );
        let u = l.on_fetch(&fetch(2, 140), 150, 10).unwrap();
        assert_eq!(u.high_watermark_moved, None, "follower 3 is still at -1");
        let u = l.on_fetch(&fetch(3, 120), 150, 10).unwrap();
        assert_eq!(u.high_watermark_moved, Some(120));
        let u = l.on_fetch(&fetch(3, 150), 150, 20).unwrap();
        assert_eq!(u.high_watermark_moved, Some(140));
    }

    #[test]
    fn no_progress_and_no_acks_all_below_min_insync_replicas() {
        let mut l = leader(&[1]);
        assert_eq!(l.check_acks_all(), Err(ErrorCode::NotEnoughReplicas));
        assert_eq!(l.on_append(150), None, "KIP-966: no advance with ISR 1 < 2");
        let u = l.on_fetch(&fetch(2, 150), 150, 10).unwrap();
        let change = u.isr_change.expect("caught up: expand");
        assert_eq!(change.new_isr, vec![1, 2]);
        assert_eq!(change.partition_epoch, 10);
        assert_eq!(u.high_watermark_moved, None, "not committed yet");
        let (fail, moved) = l.on_isr_committed(&[1, 2], 11, 150);
        assert!(!fail);
        assert_eq!(moved, Some(150));
        assert_eq!(l.check_acks_all(), Ok(()));
    }

    #[test]
    fn a_lagging_follower_is_removed_after_the_lag_time_only() {
        let mut l = leader(&[1, 2, 3]);
        l.on_fetch(&fetch(2, 100), 100, 0).unwrap();
        l.on_fetch(&fetch(3, 100), 100, 0).unwrap();
        // Leader appends; follower 2 keeps up, follower 3 stops fetching.
        for t in (100..=1100).step_by(100) {
            let end = 100 + t;
            l.on_append(end);
            l.on_fetch(&fetch(2, end), end, t).unwrap();
            if t < 1000 {
                assert_eq!(l.check_isr_shrink(end, t), None, "at {t} ms");
            }
        }
        let change = l.check_isr_shrink(1200, 1100).expect("3 lagged > 1000 ms");
        assert_eq!(change.new_isr, vec![1, 2]);
        assert_eq!(l.maximal_isr().len(), 3, "until committed, HW counts 3");
        assert_eq!(l.check_isr_shrink(1200, 1200), None, "one change in flight");
        let (fail, moved) = l.on_isr_committed(&[1, 2], 11, 1200);
        assert!(!fail);
        assert_eq!(moved, Some(1200));
    }

    #[test]
    fn caught_up_as_of_the_previous_fetch() {
        let mut l = leader(&[1, 2, 3]);
        // Fetch at 0 ms while the leader ends at 100: caught up at 0.
        l.on_fetch(&fetch(2, 100), 100, 0).unwrap();
        // At 900 ms the leader ends at 200; the follower fetches 100 (= leader end at its
        // previous fetch): caught up as of 0 ms, not 900.
        l.on_fetch(&fetch(2, 100), 200, 900).unwrap();
        assert_eq!(l.follower(2).unwrap().last_caught_up_ms, 0);
        // At 1000 ms it fetches 200 (= leader end at its previous fetch, 900 ms).
        l.on_fetch(&fetch(2, 200), 300, 1000).unwrap();
        assert_eq!(l.follower(2).unwrap().last_caught_up_ms, 900);
    }

    #[test]
    fn stale_epochs_and_strangers_are_refused() {
        let mut l = leader(&[1, 2, 3]);
        let mut f = fetch(2, 100);
        f.current_leader_epoch = 2;
        assert_eq!(l.on_fetch(&f, 100, 0), Err(FetchRefusal::FencedLeaderEpoch));
        f.current_leader_epoch = 4;
        assert_eq!(
            l.on_fetch(&f, 100, 0),
            Err(FetchRefusal::UnknownLeaderEpoch)
        );
        assert_eq!(
            l.on_fetch(&fetch(9, 100), 100, 0),
            Err(FetchRefusal::UnknownLeaderEpoch)
        );
        l.on_fetch(&fetch(2, 100), 100, 0).unwrap();
        let mut old = fetch(2, 100);
        old.broker_epoch = 6;
        assert_eq!(
            l.on_fetch(&old, 100, 0),
            Err(FetchRefusal::StaleBrokerEpoch)
        );
    }

    #[test]
    fn shrinking_below_min_insync_fails_the_waiters() {
        let mut l = leader(&[1, 2]);
        let (fail, _) = l.on_isr_committed(&[1], 11, 100);
        assert!(fail, "acks=all waiters get NotEnoughReplicasAfterAppend");
        let (fail, _) = l.on_isr_committed(&[1, 2], 10, 100);
        assert!(!fail, "an older partition epoch is ignored");
        assert_eq!(l.isr(), vec![1]);
    }
}
