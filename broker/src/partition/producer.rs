//! Idempotent-producer state of a partition (Kafka's `ProducerStateManager`, KIP-98).
//!
//! Per producer id: its epoch, the sequence numbers and offsets of its last
//! [`PRODUCER_BATCHES_KEPT`] batches, and the largest batch timestamp (for expiry).
//! [`ProducerState::check`] decides, before anything of a partition's data is appended, whether
//! its batches continue their producers' sequences, are a retry of batches already in the log
//! (duplicates, answered with the original offsets), or must be refused (a gap:
//! `OutOfOrderSequenceNumber`; an older epoch: `InvalidProducerEpoch`). After the append,
//! [`ProducerState::apply_appended`] records them. The state is a function of the log alone:
//! [`ProducerState::replay`] rebuilds it from batch headers (recovery, truncation, followers),
//! with no checks, and snapshots ([`super::producer_snapshot`]) keep that replay short.
//!
//! Rules for a batch with producer id `p`, epoch `e`, sequences `first..=last`:
//! - `p` unknown here (new, expired, or its batches are gone): any sequence is accepted (as
//!   Kafka does since KIP-360).
//! - `e` below `p`'s epoch: `InvalidProducerEpoch`.
//! - `e` equal and `first..=last` equal to one of the kept batches: a duplicate.
//! - `e` above `p`'s epoch (the producer bumped it): `first` must be 0.
//! - `e` equal: `first` must follow `p`'s last sequence (after `i32::MAX` comes 0).

use std::collections::HashMap;

use borges_protocol::batch::{increment_sequence, BatchHeader, NO_PRODUCER_ID};
use borges_protocol::ErrorCode;

use crate::failure::Failure;

/// Batches remembered per producer: a retry of any of them is recognised. The SDK keeps at most
/// this many batches per partition in flight, so every retry it can send is among them.
pub const PRODUCER_BATCHES_KEPT: usize = 5;

/// Limits of the producer state of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerLimits {
    /// A producer whose newest batch timestamp is this much older than now is forgotten.
    pub expiration_ms: i64,
    /// Producers remembered per partition; beyond it the least recently active are forgotten
    /// (their retries are then appended again, as after expiry).
    pub producers_max: usize,
}

/// One batch of a producer, as remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchMeta {
    /// Sequence of the first record.
    pub first_seq: i32,
    /// Sequence of the last record.
    pub last_seq: i32,
    /// Offset of the first record.
    pub base_offset: i64,
    /// Offset of the last record.
    pub last_offset: i64,
}

/// What a partition remembers of one producer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerEntry {
    /// The producer's current epoch.
    pub epoch: i16,
    /// Largest `max_timestamp` of its batches (expiry compares it with the clock).
    pub last_timestamp_ms: i64,
    /// Ring of the last batches: `len` valid entries, the newest at `newest`.
    batches: [BatchMeta; PRODUCER_BATCHES_KEPT],
    len: u8,
    newest: u8,
}

impl ProducerEntry {
    fn new(epoch: i16, last_timestamp_ms: i64) -> ProducerEntry {
        ProducerEntry {
            epoch,
            last_timestamp_ms,
            batches: [BatchMeta::default(); PRODUCER_BATCHES_KEPT],
            len: 0,
            newest: 0,
        }
    }

    /// The kept batches, oldest first.
    pub fn batches(&self) -> impl Iterator<Item = BatchMeta> + '_ {
        let len = usize::from(self.len);
        let oldest =
            (usize::from(self.newest) + PRODUCER_BATCHES_KEPT + 1 - len) % PRODUCER_BATCHES_KEPT;
        (0..len).map(move |i| self.batches[(oldest + i) % PRODUCER_BATCHES_KEPT])
    }

    /// The newest batch.
    pub fn last(&self) -> Option<BatchMeta> {
        (self.len > 0).then(|| self.batches[usize::from(self.newest)])
    }

    fn push(&mut self, meta: BatchMeta) {
        if self.len > 0 {
            self.newest = ((usize::from(self.newest) + 1) % PRODUCER_BATCHES_KEPT) as u8;
        }
        self.batches[usize::from(self.newest)] = meta;
        self.len = (self.len + 1).min(PRODUCER_BATCHES_KEPT as u8);
    }

    fn find(&self, first_seq: i32, last_seq: i32) -> Option<BatchMeta> {
        self.batches()
            .find(|b| b.first_seq == first_seq && b.last_seq == last_seq)
    }

    /// Records a batch at `meta` with `epoch`: a new epoch forgets the old epoch's batches.
    fn record(&mut self, epoch: i16, meta: BatchMeta, max_timestamp: i64) {
        if epoch != self.epoch {
            self.epoch = epoch;
            self.len = 0;
            self.newest = 0;
        }
        self.push(meta);
        self.last_timestamp_ms = self.last_timestamp_ms.max(max_timestamp);
    }
}

/// What [`ProducerState::check`] decided for a partition's batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Append them (then [`ProducerState::apply_appended`]).
    Append,
    /// Every batch is already in the log, at these offsets (first record of the first batch,
    /// last record of the last).
    Duplicate {
        /// Offset of the first record.
        base_offset: i64,
        /// Offset of the last record.
        last_offset: i64,
    },
}

/// Producer state of one partition. Lives on the partition's owning core.
#[derive(Debug)]
pub struct ProducerState {
    limits: ProducerLimits,
    producers: HashMap<i64, ProducerEntry>,
    /// Bumped on every change (snapshots are written only when it moved).
    generation: u64,
}

impl ProducerState {
    /// An empty state.
    pub fn new(limits: ProducerLimits) -> ProducerState {
        assert!(limits.producers_max > 0 && limits.expiration_ms > 0);
        ProducerState {
            limits,
            producers: HashMap::new(),
            generation: 0,
        }
    }

    /// Producers remembered.
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// Whether no producer is remembered.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.producers.is_empty()
    }

    /// What is remembered of `producer_id`.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn entry(&self, producer_id: i64) -> Option<&ProducerEntry> {
        self.producers.get(&producer_id)
    }

    /// Bumped on every change.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// The limits.
    pub fn limits(&self) -> ProducerLimits {
        self.limits
    }

    /// Checks a partition's batches (in append order) against the state; changes nothing. See
    /// the module documentation for the rules. Duplicates are recognised only when every
    /// batch is one, of batches that follow each other in the log (a producer sends a retried
    /// batch alone); any other mix is `OutOfOrderSequenceNumber`.
    pub fn check(&self, batches: &[BatchHeader]) -> Result<Verdict, Failure> {
        // (producer id, epoch, last sequence) of batches earlier in this same data.
        let mut pending: Vec<(i64, i16, i32)> = Vec::new();
        let mut duplicates: Vec<BatchMeta> = Vec::new();
        let mut fresh = 0usize;
        for h in batches {
            if h.producer_id == NO_PRODUCER_ID {
                fresh += 1;
                continue;
            }
            check_fields(h)?;
            let earlier = pending.iter().rposition(|p| p.0 == h.producer_id);
            let stored = self.producers.get(&h.producer_id);
            if earlier.is_none() {
                if let Some(m) = stored
                    .filter(|e| e.epoch == h.producer_epoch)
                    .and_then(|e| e.find(h.base_sequence, h.last_sequence()))
                {
                    duplicates.push(m);
                    continue;
                }
            }
            let known = match earlier {
                Some(i) => Some((pending[i].1, pending[i].2)),
                None => stored.and_then(|e| e.last().map(|b| (e.epoch, b.last_seq))),
            };
            check_sequence(h, known)?;
            pending.push((h.producer_id, h.producer_epoch, h.last_sequence()));
            fresh += 1;
        }
        if duplicates.is_empty() {
            return Ok(Verdict::Append);
        }
        let contiguous = duplicates
            .windows(2)
            .all(|w| w[1].base_offset == w[0].last_offset + 1);
        if fresh > 0 || !contiguous {
            return Err(Failure::new(
                ErrorCode::OutOfOrderSequenceNumber,
                "the partition's data mixes batches already appended with new ones; send a \
                 retried batch alone",
            ));
        }
        Ok(Verdict::Duplicate {
            base_offset: duplicates[0].base_offset,
            last_offset: duplicates[duplicates.len() - 1].last_offset,
        })
    }

    /// Records batches that were just appended after [`ProducerState::check`] said `Append`:
    /// `headers` in append order, the first at `base_offset` (the log assigns offsets back to
    /// back).
    pub fn apply_appended(&mut self, headers: &[BatchHeader], base_offset: i64) {
        let mut offset = base_offset;
        for h in headers {
            let mut stamped = *h;
            stamped.base_offset = offset;
            offset = stamped.next_offset();
            self.replay(&stamped);
        }
    }

    /// Updates the state from one batch already in the log, `base_offset` stamped, without
    /// checks (recovery, truncation, a follower's replicated batches): the epoch it carries
    /// becomes the producer's epoch.
    pub fn replay(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 || h.producer_epoch < 0 || h.base_sequence < 0 {
            return;
        }
        let meta = BatchMeta {
            first_seq: h.base_sequence,
            last_seq: h.last_sequence(),
            base_offset: h.base_offset,
            last_offset: h.last_offset(),
        };
        if !self.producers.contains_key(&h.producer_id) {
            self.make_room();
        }
        self.producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry::new(h.producer_epoch, h.max_timestamp))
            .record(h.producer_epoch, meta, h.max_timestamp);
        self.generation += 1;
    }

    /// Forgets producers whose newest batch timestamp is `expiration_ms` or more before
    /// `now_ms`; returns how many.
    pub fn expire(&mut self, now_ms: i64) -> usize {
        let before = self.producers.len();
        let expiration_ms = self.limits.expiration_ms;
        self.producers
            .retain(|_, e| now_ms.saturating_sub(e.last_timestamp_ms) < expiration_ms);
        self.forgot(before)
    }

    /// Forgets producers whose batches all lie below `log_start_offset` (retention removed
    /// them); returns how many.
    pub fn truncate_head(&mut self, log_start_offset: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, e| e.last().is_some_and(|b| b.last_offset >= log_start_offset));
        self.forgot(before)
    }

    fn forgot(&mut self, before: usize) -> usize {
        let forgotten = before - self.producers.len();
        if forgotten > 0 {
            self.generation += 1;
            if self.producers.capacity() > 4 * self.producers.len().max(16) {
                self.producers.shrink_to_fit();
            }
        }
        forgotten
    }

    /// At `producers_max`, forgets the least recently active eighth (by batch timestamp), so
    /// that the cost of finding them is spread over many new producers.
    fn make_room(&mut self) {
        let max = self.limits.producers_max;
        if self.producers.len() < max {
            return;
        }
        let mut by_age: Vec<(i64, i64)> = self
            .producers
            .iter()
            .map(|(id, e)| (e.last_timestamp_ms, *id))
            .collect();
        let evict = (max / 8).max(1).min(by_age.len());
        by_age.select_nth_unstable(evict - 1);
        for (_, id) in &by_age[..evict] {
            self.producers.remove(id);
        }
        tracing::debug!(
            evicted = evict,
            producers_max = max,
            "producer state full: forgot the least recently active producers"
        );
    }

    /// Every entry, for snapshots (any order).
    pub fn entries(&self) -> impl Iterator<Item = (i64, &ProducerEntry)> + '_ {
        self.producers.iter().map(|(id, e)| (*id, e))
    }

    /// Restores one entry from a snapshot: `batches` oldest first, at most
    /// [`PRODUCER_BATCHES_KEPT`].
    pub fn restore(
        &mut self,
        producer_id: i64,
        epoch: i16,
        last_timestamp_ms: i64,
        batches: &[BatchMeta],
    ) {
        assert!(batches.len() <= PRODUCER_BATCHES_KEPT && !batches.is_empty());
        let mut entry = ProducerEntry::new(epoch, last_timestamp_ms);
        for b in batches {
            entry.push(*b);
        }
        self.producers.insert(producer_id, entry);
        self.generation += 1;
    }
}

/// An idempotent batch needs an epoch and a sequence; producer ids below -1 do not exist.
fn check_fields(h: &BatchHeader) -> Result<(), Failure> {
    if h.producer_id < 0 || h.producer_epoch < 0 || h.base_sequence < 0 {
        return Err(Failure::new(
            ErrorCode::InvalidRecordBatch,
            format!(
                "producer id {}, epoch {}, base sequence {}: an idempotent batch needs an id, an \
                 epoch and a sequence >= 0 (a batch without producer has all three -1)",
                h.producer_id, h.producer_epoch, h.base_sequence
            ),
        ));
    }
    Ok(())
}

/// Whether `h` may follow what is known of its producer: (epoch, last sequence).
fn check_sequence(h: &BatchHeader, known: Option<(i16, i32)>) -> Result<(), Failure> {
    let Some((epoch, last_seq)) = known else {
        return Ok(());
    };
    if h.producer_epoch < epoch {
        return Err(Failure::new(
            ErrorCode::InvalidProducerEpoch,
            format!(
                "producer {} epoch {} is older than its current epoch {epoch}",
                h.producer_id, h.producer_epoch
            ),
        ));
    }
    let expected = if h.producer_epoch > epoch {
        0
    } else {
        increment_sequence(last_seq, 1)
    };
    if h.base_sequence != expected {
        return Err(Failure::new(
            ErrorCode::OutOfOrderSequenceNumber,
            format!(
                "producer {} epoch {}: sequence {} where {expected} was expected",
                h.producer_id, h.producer_epoch, h.base_sequence
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: ProducerLimits = ProducerLimits {
        expiration_ms: 60_000,
        producers_max: 1_000,
    };

    /// A header of `records` records from producer `pid`, `epoch`, starting at `seq`, at `base`.
    fn batch(pid: i64, epoch: i16, seq: i32, records: i32, base: i64) -> BatchHeader {
        BatchHeader {
            base_offset: base,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 1_000,
            max_timestamp: 1_000,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            records_count: records,
        }
    }

    fn code(r: Result<Verdict, Failure>) -> ErrorCode {
        match r {
            Ok(_) => ErrorCode::None,
            Err(f) => f.code,
        }
    }

    /// Appends `h` as the leader would: check, then record at `base`.
    fn append(s: &mut ProducerState, h: BatchHeader, base: i64) {
        assert_eq!(s.check(&[h]), Ok(Verdict::Append), "{h:?}");
        s.apply_appended(&[h], base);
    }

    #[test]
    fn sequences_must_follow_and_duplicates_give_the_original_offsets() {
        let mut s = ProducerState::new(LIMITS);
        // An unknown producer may start anywhere.
        append(&mut s, batch(7, 0, 10, 5, 0), 100);
        append(&mut s, batch(7, 0, 15, 2, 0), 110);
        // A retry of either batch is a duplicate with its offsets.
        assert_eq!(
            s.check(&[batch(7, 0, 10, 5, 0)]),
            Ok(Verdict::Duplicate {
                base_offset: 100,
                last_offset: 104
            })
        );
        assert_eq!(
            s.check(&[batch(7, 0, 15, 2, 0)]),
            Ok(Verdict::Duplicate {
                base_offset: 110,
                last_offset: 111
            })
        );
        // A gap, a repeat of a sequence with other bounds, an old sequence: out of order.
        for bad in [
            batch(7, 0, 18, 1, 0),
            batch(7, 0, 15, 1, 0),
            batch(7, 0, 3, 1, 0),
        ] {
            assert_eq!(
                code(s.check(&[bad])),
                ErrorCode::OutOfOrderSequenceNumber,
                "{bad:?}"
            );
        }
        append(&mut s, batch(7, 0, 17, 1, 0), 120);
        // Other producers are independent.
        append(&mut s, batch(8, 3, 0, 1, 0), 121);
        assert_eq!(s.len(), 2);
    }

    #[test]
    fn epochs_fence_older_ones_and_a_new_epoch_starts_at_zero() {
        let mut s = ProducerState::new(LIMITS);
        append(&mut s, batch(1, 2, 0, 3, 0), 0);
        assert_eq!(
            code(s.check(&[batch(1, 1, 3, 1, 0)])),
            ErrorCode::InvalidProducerEpoch
        );
        // A retry with an older epoch is refused too, not taken as a duplicate.
        assert_eq!(
            code(s.check(&[batch(1, 1, 0, 3, 0)])),
            ErrorCode::InvalidProducerEpoch
        );
        assert_eq!(
            code(s.check(&[batch(1, 3, 5, 1, 0)])),
            ErrorCode::OutOfOrderSequenceNumber
        );
        append(&mut s, batch(1, 3, 0, 1, 0), 3);
        // The new epoch forgot the old epoch's batches.
        assert_eq!(
            code(s.check(&[batch(1, 2, 0, 3, 0)])),
            ErrorCode::InvalidProducerEpoch
        );
        assert_eq!(s.entry(1).map(|e| e.batches().count()), Some(1));
    }

    #[test]
    fn sequences_wrap_at_i32_max_as_kafka_does() {
        let mut s = ProducerState::new(LIMITS);
        append(&mut s, batch(1, 0, i32::MAX - 2, 3, 0), 0);
        assert_eq!(
            s.entry(1).and_then(ProducerEntry::last).map(|b| b.last_seq),
            Some(i32::MAX)
        );
        assert_eq!(
            code(s.check(&[batch(1, 0, i32::MAX, 1, 0)])),
            ErrorCode::OutOfOrderSequenceNumber
        );
        append(&mut s, batch(1, 0, 0, 4, 0), 3);
        // A batch across the wrap: last sequence 1.
        append(&mut s, batch(1, 0, 4, 1, 0), 7);
        append(&mut s, batch(2, 0, i32::MAX, 3, 0), 8);
        assert_eq!(
            s.entry(2).and_then(ProducerEntry::last).map(|b| b.last_seq),
            Some(1)
        );
        append(&mut s, batch(2, 0, 2, 1, 0), 11);
    }

    #[test]
    fn only_the_last_five_batches_are_recognised() {
        let mut s = ProducerState::new(LIMITS);
        for i in 0..7 {
            append(&mut s, batch(1, 0, i, 1, 0), i64::from(i));
        }
        let dup = |s: &ProducerState, i: i32| s.check(&[batch(1, 0, i, 1, 0)]);
        for i in 2..7 {
            assert_eq!(
                dup(&s, i),
                Ok(Verdict::Duplicate {
                    base_offset: i64::from(i),
                    last_offset: i64::from(i)
                })
            );
        }
        assert_eq!(code(dup(&s, 1)), ErrorCode::OutOfOrderSequenceNumber);
    }

    #[test]
    fn several_batches_of_one_partition_are_checked_in_order() {
        let mut s = ProducerState::new(LIMITS);
        let plain = batch(NO_PRODUCER_ID, -1, -1, 2, 0);
        let run = [
            batch(1, 0, 0, 2, 0),
            plain,
            batch(1, 0, 2, 3, 0),
            batch(2, 0, 9, 1, 0),
        ];
        assert_eq!(s.check(&run), Ok(Verdict::Append));
        s.apply_appended(&run, 50);
        assert_eq!(
            s.entry(1).map(|e| e.batches().collect::<Vec<_>>()),
            Some(vec![
                BatchMeta {
                    first_seq: 0,
                    last_seq: 1,
                    base_offset: 50,
                    last_offset: 51
                },
                BatchMeta {
                    first_seq: 2,
                    last_seq: 4,
                    base_offset: 54,
                    last_offset: 56
                },
            ])
        );
        // A gap inside the data refuses all of it.
        assert_eq!(
            code(s.check(&[batch(1, 0, 5, 1, 0), batch(1, 0, 7, 1, 0)])),
            ErrorCode::OutOfOrderSequenceNumber
        );
        // Duplicates only alone: a duplicate with a new batch, or with one that is not next
        // to it in the log, is refused.
        assert_eq!(
            code(s.check(&[batch(1, 0, 2, 3, 0), batch(1, 0, 5, 1, 0)])),
            ErrorCode::OutOfOrderSequenceNumber
        );
        assert_eq!(
            code(s.check(&[batch(1, 0, 0, 2, 0), batch(1, 0, 2, 3, 0)])),
            ErrorCode::OutOfOrderSequenceNumber
        );
        assert_eq!(
            code(s.check(&[batch(1, 0, 0, 2, 0), plain])),
            ErrorCode::OutOfOrderSequenceNumber
        );
        // Malformed producer fields.
        for bad in [
            batch(-2, 0, 0, 1, 0),
            batch(3, -1, 0, 1, 0),
            batch(3, 0, -1, 1, 0),
        ] {
            assert_eq!(
                code(s.check(&[bad])),
                ErrorCode::InvalidRecordBatch,
                "{bad:?}"
            );
        }
    }

    #[test]
    fn replay_rebuilds_what_appends_built() {
        let mut leader = ProducerState::new(LIMITS);
        let mut follower = ProducerState::new(LIMITS);
        let mut offset = 0;
        for (pid, epoch, seq, n) in [
            (1, 0, 0, 3),
            (2, 0, 0, 1),
            (1, 0, 3, 2),
            (1, 1, 0, 1),
            (2, 0, 1, 4),
        ] {
            let h = batch(pid, epoch, seq, n, 0);
            append(&mut leader, h, offset);
            follower.replay(&batch(pid, epoch, seq, n, offset));
            offset += i64::from(n);
        }
        let dump = |s: &ProducerState| {
            let mut v: Vec<_> = s.entries().map(|(id, e)| (id, e.clone())).collect();
            v.sort_by_key(|(id, _)| *id);
            v
        };
        assert_eq!(dump(&leader), dump(&follower));
    }

    #[test]
    fn a_hundred_thousand_producers_expire_and_memory_stays_bounded() {
        let limits = ProducerLimits {
            expiration_ms: 10_000,
            producers_max: 100_000,
        };
        let mut s = ProducerState::new(limits);
        let at = |pid: i64| {
            let mut h = batch(pid, 0, 0, 1, pid);
            h.max_timestamp = pid;
            h
        };
        for pid in 0..100_000i64 {
            s.replay(&at(pid));
        }
        assert_eq!(s.len(), 100_000);
        // One more forgets the least recently active eighth.
        s.replay(&at(100_000));
        assert_eq!(s.len(), 100_000 - 12_500 + 1);
        assert!(s.entry(12_499).is_none() && s.entry(12_500).is_some());
        // Producers whose newest batch is 10 s or more before the clock expire.
        assert_eq!(s.expire(60_000), 50_001 - 12_500);
        assert!(s.entry(50_000).is_none() && s.entry(50_001).is_some());
        assert_eq!(s.expire(i64::MAX), 50_000);
        assert!(s.is_empty());
        assert!(s.producers.capacity() < 1_000, "memory is given back");
    }

    #[test]
    fn retention_forgets_producers_whose_batches_are_gone() {
        let mut s = ProducerState::new(LIMITS);
        append(&mut s, batch(1, 0, 0, 5, 0), 0);
        append(&mut s, batch(2, 0, 0, 5, 0), 5);
        assert_eq!(s.truncate_head(5), 1);
        assert!(s.entry(1).is_none() && s.entry(2).is_some());
    }
}
