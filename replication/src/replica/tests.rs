//! Property tests of the replica logic against simple models: a leader with two followers
//! under random fetches, appends, time and controller answers; and a diverged follower
//! fetching from a leader (KIP-279) until their logs are the same.

use std::collections::BTreeMap;

use borges_protocol::batch::{self, BatchBuilder, BatchOptions};
use borges_protocol::ErrorCode;
use proptest::prelude::*;

use super::*;

const LAG_MAX_MS: i64 = 1000;
const MIN_ISR: usize = 2;

#[derive(Debug, Clone)]
enum LeaderOp {
    /// The leader appends this many offsets (acks=all when allowed).
    Append(u8),
    /// Follower 2 or 3 fetches, advancing by up to this many offsets toward the leader's end.
    Fetch(bool, u8),
    /// Time passes.
    Tick(u16),
    /// The periodic ISR check.
    Shrink,
    /// The controller commits the change in flight.
    Commit,
    /// The controller refuses it.
    Refuse,
}

fn leader_op() -> impl Strategy<Value = LeaderOp> {
    prop_oneof![
        3 => (1u8..5).prop_map(LeaderOp::Append),
        4 => (any::<bool>(), 0u8..8).prop_map(|(f, n)| LeaderOp::Fetch(f, n)),
        2 => (1u16..700).prop_map(LeaderOp::Tick),
        1 => Just(LeaderOp::Shrink),
        1 => Just(LeaderOp::Commit),
        1 => Just(LeaderOp::Refuse),
    ]
}

/// The leader and what the test knows independently of it.
struct LeaderCase {
    state: LeaderState,
    waiters: AckWaiters<i64>,
    leader_end: i64,
    now_ms: i64,
    partition_epoch: i32,
    /// Each follower's log end, and the last time it reached the leader's end.
    followers: BTreeMap<BrokerId, (i64, i64)>,
    hw: i64,
}

impl LeaderCase {
    fn new() -> LeaderCase {
        let settings = LeaderSettings {
            replica_lag_time_max_ms: LAG_MAX_MS,
            min_insync_replicas: MIN_ISR,
        };
        LeaderCase {
            state: LeaderState::new(1, (4, 0), &[1, 2, 3], &[1, 2, 3], (0, 0), 0, settings),
            waiters: AckWaiters::new(1024),
            leader_end: 0,
            now_ms: 0,
            partition_epoch: 0,
            // A new leader knows no follower's log end (-1) until it fetches; ISR members
            // count as caught up at the start (0 ms).
            followers: [(2, (-1, 0)), (3, (-1, 0))].into_iter().collect(),
            hw: 0,
        }
    }

    fn apply(&mut self, op: &LeaderOp) {
        let isr_before = self.state.isr();
        let moved = match *op {
            LeaderOp::Append(n) => self.append(n),
            LeaderOp::Fetch(second, n) => self.fetch(if second { 3 } else { 2 }, n),
            LeaderOp::Tick(ms) => {
                self.now_ms += i64::from(ms);
                None
            }
            LeaderOp::Shrink => self.shrink(),
            LeaderOp::Commit => self.commit(),
            LeaderOp::Refuse => {
                self.state.on_isr_change_failed();
                None
            }
        };
        if isr_before.len() < MIN_ISR && self.state.isr().len() < MIN_ISR {
            assert_eq!(moved, None, "no progress below min.insync.replicas");
        }
        self.check(moved);
    }

    fn append(&mut self, n: u8) -> Option<i64> {
        let acks_all = self.state.check_acks_all().is_ok();
        self.leader_end += i64::from(n);
        if acks_all {
            self.waiters
                .wait(self.leader_end - 1, self.leader_end - 1)
                .unwrap();
        }
        self.state.on_append(self.leader_end)
    }

    fn fetch(&mut self, id: BrokerId, n: u8) -> Option<i64> {
        let (end, reached) = self.followers[&id];
        let offset = (end.max(0) + i64::from(n)).min(self.leader_end);
        let fetch = ReplicaFetch {
            replica_id: id,
            broker_epoch: 1,
            current_leader_epoch: 4,
            fetch_offset: offset,
        };
        let update = self
            .state
            .on_fetch(&fetch, self.leader_end, self.now_ms)
            .unwrap();
        let reached = if offset >= self.leader_end {
            self.now_ms
        } else {
            reached
        };
        self.followers.insert(id, (offset, reached));
        if let Some(change) = &update.isr_change {
            assert!(change.new_isr.contains(&id), "expansion adds the fetcher");
            assert!(
                offset >= self.hw,
                "a joining follower has reached the high watermark"
            );
        }
        update.high_watermark_moved
    }

    fn shrink(&mut self) -> Option<i64> {
        let before = self.state.isr();
        if let Some(change) = self.state.check_isr_shrink(self.leader_end, self.now_ms) {
            for removed in before.iter().filter(|id| !change.new_isr.contains(id)) {
                let (end, reached) = self.followers[removed];
                assert!(
                    end < self.leader_end,
                    "a follower at the leader's end stays"
                );
                assert!(
                    self.now_ms - reached > LAG_MAX_MS,
                    "removed {removed}: reached the end at {reached}, now {}",
                    self.now_ms
                );
            }
            assert!(change.new_isr.contains(&1), "the leader stays");
        }
        None
    }

    fn commit(&mut self) -> Option<i64> {
        let change = self.state.pending_isr_change()?.clone();
        self.partition_epoch += 1;
        let (fail, moved) =
            self.state
                .on_isr_committed(&change.new_isr, self.partition_epoch, self.leader_end);
        if fail {
            self.waiters.drain();
        }
        moved
    }

    fn check(&mut self, moved: Option<i64>) {
        let hw = self.state.high_watermark();
        assert!(hw >= self.hw, "the high watermark never moves back");
        assert_eq!(moved.is_some(), hw > self.hw, "moves are reported");
        assert!(hw <= self.leader_end);
        for id in self.state.maximal_isr() {
            // The initial high watermark (0) is the log's; every later one is covered.
            if id != 1 && hw > 0 {
                assert!(
                    hw <= self.followers[&id].0,
                    "hw <= log end of ISR member {id}"
                );
            }
        }
        self.hw = hw;
        for last in self.waiters.release(hw) {
            assert!(last < hw, "acks=all released only below the high watermark");
        }
        let isr = self.state.isr();
        assert!(isr.contains(&1) && isr.iter().all(|id| (1..=3).contains(id)));
    }
}

proptest! {
    #[test]
    fn leader_keeps_kafkas_rules(ops in prop::collection::vec(leader_op(), 1..200)) {
        let mut case = LeaderCase::new();
        for op in &ops {
            case.apply(op);
        }
    }
}

/// A log of single-record batches: the epoch of each offset.
#[derive(Debug, Clone, Default)]
struct ModelLog {
    epochs: Vec<i32>,
    synced: i64,
}

impl ModelLog {
    fn end_offset_for(&self, epoch: i32) -> Option<(i32, i64)> {
        let latest = *self.epochs.last()?;
        if epoch > latest {
            return None;
        }
        if epoch == latest {
            return Some((epoch, self.epochs.len() as i64));
        }
        let next = self.epochs.iter().position(|&e| e > epoch)? as i64;
        let floor = self.epochs.iter().rev().find(|&&e| e <= epoch).copied();
        Some((floor.unwrap_or(epoch), next))
    }

    fn batch(&self, offset: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new(BatchOptions::default(), 64);
        b.push(0, None, Some(format!("v{offset}").as_bytes()), &[]);
        let mut bytes = b.build().expect("builds").to_vec();
        batch::set_base_offset(&mut bytes, offset as i64);
        batch::set_partition_leader_epoch(&mut bytes, self.epochs[offset]);
        bytes
    }
}

impl LocalLog for ModelLog {
    fn log_start_offset(&self) -> i64 {
        0
    }
    fn log_end_offset(&self) -> i64 {
        self.epochs.len() as i64
    }
    fn synced_end_offset(&self) -> i64 {
        self.synced
    }
    fn latest_epoch(&self) -> Option<i32> {
        self.epochs.last().copied()
    }
    fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)> {
        self.end_offset_for(epoch)
    }
}

/// What the leader answers a follower's fetch (Kafka's divergence check, then records).
fn leader_answer(leader: &ModelLog, position: &FetchPosition) -> (Option<(i32, i64)>, Vec<u8>) {
    if position.last_fetched_epoch >= 0 {
        let diverging = match leader.end_offset_for(position.last_fetched_epoch) {
            Some((e, end)) if e == position.last_fetched_epoch && end >= position.fetch_offset => {
                None
            }
            Some(answer) => Some(answer),
            None => Some((-1, -1)),
        };
        if diverging.is_some() {
            return (diverging, Vec::new());
        }
    }
    let from = position.fetch_offset as usize;
    let to = (from + 3).min(leader.epochs.len());
    (None, (from..to).flat_map(|o| leader.batch(o)).collect())
}

/// A legal history: a common prefix, an old leader's epoch the follower saw more (or less)
/// of than the new leader, then the new leader's own batches.
fn divergence() -> impl Strategy<Value = (ModelLog, ModelLog, usize)> {
    (
        prop::collection::vec(0i32..3, 0..6),
        0usize..6,
        0usize..6,
        1usize..6,
    )
        .prop_map(|(steps, follower_extra, leader_extra, leader_own)| {
            let mut prefix = Vec::new();
            let mut epoch = 1;
            for s in steps {
                epoch += s;
                prefix.push(epoch);
            }
            let old = epoch + 1;
            let new = old + 1;
            let mut follower = prefix.clone();
            follower.extend(std::iter::repeat_n(old, follower_extra));
            let mut leader = prefix.clone();
            leader.extend(std::iter::repeat_n(old, leader_extra));
            leader.extend(std::iter::repeat_n(new, leader_own));
            let common = prefix.len() + follower_extra.min(leader_extra);
            (
                ModelLog {
                    epochs: leader,
                    synced: 0,
                },
                ModelLog {
                    epochs: follower.clone(),
                    synced: follower.len() as i64,
                },
                common,
            )
        })
}

proptest! {
    #[test]
    fn a_diverged_follower_converges_without_cutting_the_common_prefix(
        (leader, mut follower, common) in divergence(),
        sync_before_fetch in any::<bool>(),
    ) {
        let settings = FetcherSettings { back_off_ms: 50, sync_before_fetch };
        let mut fetcher = FollowerFetcher::new(1, 9, settings);
        for _round in 0..100 {
            if follower.epochs == leader.epochs {
                break;
            }
            let position = match fetcher.next(&follower, 0) {
                FollowerStep::Sync => {
                    follower.synced = follower.log_end_offset();
                    continue;
                }
                FollowerStep::Fetch(p) => p,
                other => panic!("unexpected {other:?}"),
            };
            prop_assert!(position.fetch_offset <= follower.synced || !sync_before_fetch);
            let (diverging, records) = leader_answer(&leader, &position);
            let answer = FetchAnswer {
                error: ErrorCode::None,
                high_watermark: common as i64,
                log_start_offset: 0,
                diverging_epoch: diverging,
                records: &records,
            };
            match fetcher.on_answer(&position, &answer, &follower, 0) {
                FollowerStep::Truncate(offset) => {
                    prop_assert!(offset as usize >= common, "cut {offset} < common {common}");
                    prop_assert!(offset < follower.log_end_offset(), "a truncation cuts");
                    follower.epochs.truncate(offset as usize);
                    follower.synced = follower.synced.min(offset);
                }
                FollowerStep::Append { batches, high_watermark } => {
                    for b in batches {
                        let h = batch::BatchHeader::parse(&b).unwrap();
                        prop_assert_eq!(h.base_offset, follower.log_end_offset());
                        follower.epochs.push(h.partition_leader_epoch);
                    }
                    prop_assert!(high_watermark <= follower.log_end_offset());
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        prop_assert_eq!(&follower.epochs, &leader.epochs, "converged");
    }
}

#[test]
fn a_corrupt_or_misplaced_batch_is_refused_whole() {
    let log = ModelLog {
        epochs: vec![1, 1, 2],
        synced: 3,
    };
    let mut records = log.batch(1);
    records.extend(log.batch(2));
    assert_eq!(check_fetched_records(&records, 1).unwrap().len(), 2);
    let err = check_fetched_records(&records, 0).unwrap_err();
    assert!(matches!(
        err,
        follower::FetchedRecordsError::NotContiguous { .. }
    ));
    let last = records.len() - 1;
    records[last] ^= 1;
    let err = check_fetched_records(&records, 1).unwrap_err();
    assert!(
        matches!(err, follower::FetchedRecordsError::InvalidBatch { .. }),
        "{err}"
    );
    let mut cut = log.batch(1);
    cut.pop();
    assert!(check_fetched_records(&cut, 1).is_err(), "a batch cut short");
}

/// A follower (50 ms back-off) of a 10-record log that has just sent its first Fetch.
fn fetching_follower() -> (FollowerFetcher, ModelLog, FetchPosition) {
    let settings = FetcherSettings {
        back_off_ms: 50,
        sync_before_fetch: false,
    };
    let mut f = FollowerFetcher::new(1, 3, settings);
    let log = ModelLog {
        epochs: vec![1; 10],
        synced: 10,
    };
    let FollowerStep::Fetch(p) = f.next(&log, 0) else {
        panic!("fetch")
    };
    (f, log, p)
}

/// An answer with `error` and no records.
fn answer(error: ErrorCode) -> FetchAnswer<'static> {
    FetchAnswer {
        error,
        high_watermark: 8,
        log_start_offset: 20,
        diverging_epoch: None,
        records: &[],
    }
}

#[test]
fn a_leader_behind_on_metadata_is_asked_again_soon() {
    let (mut f, log, p) = fetching_follower();
    // The broker named as leader has not applied that image yet: ask again soon, the pause
    // doubling from LEADER_BEHIND_RETRY_MS_MIN (5 ms) up to the back-off (50 ms here).
    assert_eq!(
        f.on_answer(&p, &answer(ErrorCode::NotLeaderOrFollower), &log, 0),
        FollowerStep::BackOff { until_ms: 5 }
    );
    assert_eq!(f.next(&log, 1), FollowerStep::BackOff { until_ms: 5 });
    assert!(matches!(f.next(&log, 5), FollowerStep::Fetch(_)));
    let mut now = 5;
    for (code, pause) in [
        (ErrorCode::UnknownLeaderEpoch, 10),
        (ErrorCode::UnknownTopicOrPartition, 20),
        (ErrorCode::NotLeaderOrFollower, 40),
        (ErrorCode::NotLeaderOrFollower, 50),
        (ErrorCode::NotLeaderOrFollower, 50),
    ] {
        assert_eq!(
            f.on_answer(&p, &answer(code), &log, now),
            FollowerStep::BackOff {
                until_ms: now + pause
            },
            "{code:?} at {now}"
        );
        now += pause;
        assert!(matches!(f.next(&log, now), FollowerStep::Fetch(_)));
    }
    assert_eq!(
        f.on_answer(&p, &answer(ErrorCode::RequestTimedOut), &log, now),
        FollowerStep::BackOff { until_ms: now + 50 },
        "another error: the back-off, and the next refusal starts short again"
    );
    assert_eq!(
        f.on_answer(&p, &answer(ErrorCode::NotLeaderOrFollower), &log, now),
        FollowerStep::BackOff { until_ms: now + 5 }
    );
}

#[test]
fn fenced_and_out_of_range_answers() {
    let (mut f, log, p) = fetching_follower();
    assert_eq!(
        f.on_answer(&p, &answer(ErrorCode::OffsetOutOfRange), &log, 60),
        FollowerStep::RestartAt(20),
        "behind the leader's log start: restart there"
    );
    assert_eq!(
        f.on_answer(&p, &answer(ErrorCode::FencedLeaderEpoch), &log, 60),
        FollowerStep::AwaitMetadata
    );
    assert_eq!(f.next(&log, 1000), FollowerStep::AwaitMetadata);
    f.on_metadata(2, 4);
    let FollowerStep::Fetch(p) = f.next(&log, 1000) else {
        panic!("fetch")
    };
    assert_eq!(p.current_leader_epoch, 4);
}
