//! The follower side of one partition: what to send the leader next and what to do with its
//! answer, as plain logic over the local log's offsets and epochs (no IO: the owning core
//! runs the steps against its storage and its connection to the leader's core).
//!
//! - Fetch at the log end with the latest local epoch (`last_fetched_epoch`) and the leader
//!   epoch the follower knows; under `durability=fsync` only once everything appended is
//!   fdatasynced, so every offset the leader hears of is on disk (the ack promise).
//! - A diverging epoch in the answer: truncate (KIP-279: to the end of the leader's epoch if
//!   the follower knows that epoch, else to the end of its own largest epoch below it, and
//!   fetch again, which refines the point); an undefined one (the leader knows no epoch at
//!   or below the follower's latest: a stale leader) backs off.
//! - Records: every batch CRC-checked, the first at the log end and the rest contiguous,
//!   before anything is appended; the follower's high watermark is min(leader's, log end).
//! - Fenced leader epoch (the follower's metadata is old): wait for new metadata. Not leader,
//!   unknown leader epoch or partition from the broker this follower's image names as leader:
//!   that broker has not applied the image yet (the controller's own broker applies first,
//!   the leader a few ms later); ask again soon, after 5, 10, 20 ms ... up to the back-off
//!   (a new image wakes the fetcher anyway). Transient errors: back off. Offset out of range:
//!   below the leader's log start restart there (`restart_at`), above the leader's end
//!   truncate to the leader's high watermark.

use borges_protocol::batch;
use borges_protocol::ErrorCode;
use bytes::BytesMut;

use super::BrokerId;

/// What the fetcher needs to know of the local log.
pub trait LocalLog {
    /// First offset in the log.
    fn log_start_offset(&self) -> i64;
    /// Offset the next batch gets.
    fn log_end_offset(&self) -> i64;
    /// Every batch before it is fdatasynced.
    fn synced_end_offset(&self) -> i64;
    /// The latest epoch of the leader-epoch cache.
    fn latest_epoch(&self) -> Option<i32>;
    /// OffsetForLeaderEpoch on the local cache: (largest epoch <= `epoch`, its end).
    fn epoch_end_offset(&self, epoch: i32) -> Option<(i32, i64)>;
}

/// The first pause after the leader refused a fetch as not (yet) leading at the follower's
/// epoch; it doubles with every further such refusal, up to `back_off_ms`.
pub const LEADER_BEHIND_RETRY_MS_MIN: i64 = 5;

/// Settings of a follower's fetcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetcherSettings {
    /// Pause after a transient error; the longest pause while the leader catches up with the
    /// metadata.
    pub back_off_ms: i64,
    /// `durability=fsync`: report an offset only once it is synced.
    pub sync_before_fetch: bool,
}

/// The per-partition fields of a follower's Fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchPosition {
    /// The follower's log end.
    pub fetch_offset: i64,
    /// Its latest epoch (-1 none).
    pub last_fetched_epoch: i32,
    /// The leader epoch it follows.
    pub current_leader_epoch: i32,
    /// Its log start.
    pub log_start_offset: i64,
}

/// The leader's answer for one partition.
#[derive(Debug, Clone, Copy)]
pub struct FetchAnswer<'a> {
    /// The partition's error code.
    pub error: ErrorCode,
    /// The leader's high watermark (-1 unknown).
    pub high_watermark: i64,
    /// The leader's log start (-1 unknown).
    pub log_start_offset: i64,
    /// (epoch, end offset) when the follower's log diverged.
    pub diverging_epoch: Option<(i32, i64)>,
    /// Whole batches from the fetch offset.
    pub records: &'a [u8],
}

/// What the owning core does next for the partition.
#[derive(Debug, PartialEq, Eq)]
pub enum FollowerStep {
    /// Send a Fetch with these fields.
    Fetch(FetchPosition),
    /// fdatasync the log first.
    Sync,
    /// `truncate_to(offset)`, then ask again.
    Truncate(i64),
    /// `restart_at(offset)` (the log ends before the leader's log start), then ask again.
    RestartAt(i64),
    /// `append_as_follower(batches)` (possibly none), then bound the high watermark by
    /// `high_watermark` (= min(leader's high watermark, the new log end)).
    Append {
        /// Checked batches, in offset order.
        batches: Vec<BytesMut>,
        /// The follower's new high watermark bound.
        high_watermark: i64,
    },
    /// Nothing until new metadata names the leader (fenced or not the leader any more).
    AwaitMetadata,
    /// Nothing until this time.
    BackOff {
        /// Until when (ms).
        until_ms: i64,
    },
}

/// Why fetched records are refused (nothing of them is appended).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FetchedRecordsError {
    /// A batch is invalid (CRC mismatch, bad header, cut short).
    #[error("fetched batch at byte {position}: {reason}")]
    InvalidBatch {
        /// Its position in the records.
        position: usize,
        /// What is wrong.
        reason: String,
    },
    /// A batch does not continue the log.
    #[error("fetched batch at offset {base_offset}, expected {expected_offset}")]
    NotContiguous {
        /// Its base offset.
        base_offset: i64,
        /// Where it should start.
        expected_offset: i64,
    },
}

/// Splits fetched records into batches, each CRC-checked, the first at `fetch_offset` and the
/// rest contiguous.
pub fn check_fetched_records(
    records: &[u8],
    fetch_offset: i64,
) -> Result<Vec<BytesMut>, FetchedRecordsError> {
    let mut out = Vec::new();
    let mut position = 0;
    let mut expected = fetch_offset;
    while position < records.len() {
        let rest = &records[position..];
        let header = batch::validate(rest).map_err(|e| FetchedRecordsError::InvalidBatch {
            position,
            reason: e.to_string(),
        })?;
        if header.base_offset != expected {
            return Err(FetchedRecordsError::NotContiguous {
                base_offset: header.base_offset,
                expected_offset: expected,
            });
        }
        let size = header.size_bytes();
        out.push(BytesMut::from(&rest[..size]));
        expected = header.next_offset();
        position += size;
    }
    Ok(out)
}

/// KIP-279's truncation point for a diverging epoch `(epoch, end)` from the leader.
pub fn truncation_offset(log: &impl LocalLog, (epoch, end): (i32, i64)) -> i64 {
    let log_end = log.log_end_offset();
    match log.epoch_end_offset(epoch) {
        None => end.min(log_end),
        Some((local_epoch, local_end)) => {
            let intermediate = local_end.min(log_end);
            if local_epoch == epoch {
                end.min(intermediate)
            } else {
                intermediate
            }
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Ready,
    BackOff(i64),
    AwaitMetadata,
}

/// The fetcher state of one partition this broker follows. Lives on the partition's owning
/// core.
#[derive(Debug, Clone)]
pub struct FollowerFetcher {
    leader_id: BrokerId,
    leader_epoch: i32,
    phase: Phase,
    settings: FetcherSettings,
    /// Refusals in a row by a leader that does not lead at our epoch yet.
    leader_behind: u32,
}

impl FollowerFetcher {
    /// Follows `leader_id` at `leader_epoch`.
    pub fn new(leader_id: BrokerId, leader_epoch: i32, settings: FetcherSettings) -> Self {
        FollowerFetcher {
            leader_id,
            leader_epoch,
            phase: Phase::Ready,
            settings,
            leader_behind: 0,
        }
    }

    /// The leader followed.
    pub fn leader(&self) -> (BrokerId, i32) {
        (self.leader_id, self.leader_epoch)
    }

    /// New metadata: a (possibly) new leader and epoch; a newer epoch starts afresh.
    pub fn on_metadata(&mut self, leader_id: BrokerId, leader_epoch: i32) {
        if leader_epoch > self.leader_epoch || leader_id != self.leader_id {
            self.leader_id = leader_id;
            self.leader_epoch = leader_epoch.max(self.leader_epoch);
            self.phase = Phase::Ready;
            self.leader_behind = 0;
        }
    }

    /// The next step.
    pub fn next(&mut self, log: &impl LocalLog, now_ms: i64) -> FollowerStep {
        match self.phase {
            Phase::AwaitMetadata => return FollowerStep::AwaitMetadata,
            Phase::BackOff(until_ms) if until_ms > now_ms => {
                return FollowerStep::BackOff { until_ms };
            }
            Phase::BackOff(_) | Phase::Ready => self.phase = Phase::Ready,
        }
        if self.settings.sync_before_fetch && log.synced_end_offset() < log.log_end_offset() {
            return FollowerStep::Sync;
        }
        FollowerStep::Fetch(FetchPosition {
            fetch_offset: log.log_end_offset(),
            last_fetched_epoch: log.latest_epoch().unwrap_or(-1),
            current_leader_epoch: self.leader_epoch,
            log_start_offset: log.log_start_offset(),
        })
    }

    /// What to do with the leader's answer to a fetch sent at `position`.
    pub fn on_answer(
        &mut self,
        position: &FetchPosition,
        answer: &FetchAnswer<'_>,
        log: &impl LocalLog,
        now_ms: i64,
    ) -> FollowerStep {
        let behind = std::mem::take(&mut self.leader_behind);
        match answer.error {
            ErrorCode::None => self.on_data(position, answer, log, now_ms),
            ErrorCode::NotLeaderOrFollower
            | ErrorCode::UnknownLeaderEpoch
            | ErrorCode::UnknownTopicOrPartition => {
                self.leader_behind = behind.saturating_add(1);
                self.retry_soon(behind, now_ms)
            }
            ErrorCode::FencedLeaderEpoch => {
                self.phase = Phase::AwaitMetadata;
                FollowerStep::AwaitMetadata
            }
            ErrorCode::OffsetOutOfRange => self.out_of_range(answer, log, now_ms),
            _ => self.back_off(now_ms),
        }
    }

    fn on_data(
        &mut self,
        position: &FetchPosition,
        answer: &FetchAnswer<'_>,
        log: &impl LocalLog,
        now_ms: i64,
    ) -> FollowerStep {
        if let Some(diverging) = answer.diverging_epoch {
            if diverging.0 < 0 || diverging.1 < 0 {
                // The leader knows no epoch at or below ours: a stale leader; wait.
                return self.back_off(now_ms);
            }
            return FollowerStep::Truncate(truncation_offset(log, diverging));
        }
        if position.fetch_offset != log.log_end_offset() {
            // The log changed while the fetch was out (a truncation): ask again.
            return self.next(log, now_ms);
        }
        match check_fetched_records(answer.records, position.fetch_offset) {
            Ok(batches) => {
                let end = batches
                    .last()
                    .and_then(|b| batch::BatchHeader::parse(b).ok())
                    .map_or(position.fetch_offset, |h| h.next_offset());
                FollowerStep::Append {
                    batches,
                    high_watermark: answer.high_watermark.min(end),
                }
            }
            Err(e) => {
                tracing::error!(leader = self.leader_id, "refusing fetched records: {e}");
                self.back_off(now_ms)
            }
        }
    }

    fn out_of_range(
        &mut self,
        answer: &FetchAnswer<'_>,
        log: &impl LocalLog,
        now_ms: i64,
    ) -> FollowerStep {
        let log_end = log.log_end_offset();
        if answer.log_start_offset >= 0 && log_end < answer.log_start_offset {
            return FollowerStep::RestartAt(answer.log_start_offset);
        }
        if answer.high_watermark >= 0 && answer.high_watermark < log_end {
            return FollowerStep::Truncate(answer.high_watermark);
        }
        self.back_off(now_ms)
    }

    /// The pause after the `behind`-th refusal in a row by a leader that has not applied the
    /// image naming it: `LEADER_BEHIND_RETRY_MS_MIN` doubled `behind` times, at most
    /// `back_off_ms`.
    fn retry_soon(&mut self, behind: u32, now_ms: i64) -> FollowerStep {
        let pause_ms = LEADER_BEHIND_RETRY_MS_MIN
            .saturating_mul(1i64 << behind.min(20))
            .min(self.settings.back_off_ms.max(LEADER_BEHIND_RETRY_MS_MIN));
        let until_ms = now_ms + pause_ms;
        self.phase = Phase::BackOff(until_ms);
        FollowerStep::BackOff { until_ms }
    }

    fn back_off(&mut self, now_ms: i64) -> FollowerStep {
        let until_ms = now_ms + self.settings.back_off_ms;
        self.phase = Phase::BackOff(until_ms);
        FollowerStep::BackOff { until_ms }
    }
}
