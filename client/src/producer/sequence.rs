//! Sequence numbers of an idempotent producer, per partition (KIP-98, KIP-360).
//!
//! Pure logic, under the accumulator lock. Each partition has a producer id and epoch (the
//! producer's, until an epoch bump for that partition) and the next sequence; batches get their
//! sequence when they are first put into a request, in creation order, and keep it through
//! retries. A window of the batches sent since the oldest unresolved one is kept: at most
//! [`IN_FLIGHT_BATCHES_PER_PARTITION_MAX`], the batches the broker remembers per producer, so a
//! retry of any unresolved batch is always recognised as a duplicate if the broker has it.
//!
//! When the broker says `OutOfOrderSequenceNumber` for the oldest unresolved batch, it lost
//! (or never got) batches before it that the producer already gave up on: the partition's epoch
//! is bumped and its batches are renumbered from 0 once every batch sent with the old epoch is
//! back (KIP-360); at the last epoch the partition asks for a new producer id.

use std::collections::VecDeque;

use borges_protocol::batch::{increment_sequence, NO_PRODUCER_ID};
use borges_protocol::ErrorCode;

/// Batches of one partition sent since its oldest unresolved batch, at most. The broker
/// remembers the last 5 batches per producer and partition (Kafka's limit too).
pub(crate) const IN_FLIGHT_BATCHES_PER_PARTITION_MAX: usize = 5;

/// Producer id and epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Identity {
    pub producer_id: i64,
    pub epoch: i16,
}

/// The idempotence fields of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sequenced {
    pub identity: Identity,
    pub base_sequence: i32,
}

/// What to do with a batch the broker refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// Resend it as it is (same sequence), after the backoff.
    Retry,
    /// It was sent with an identity that is no longer the partition's (or just caused the
    /// bump): give it a new sequence and resend.
    Renumber,
    /// Fail it.
    Fail,
}

#[derive(Debug, Clone, Copy)]
struct Sent {
    batch_id: u64,
    identity: Identity,
    resolved: bool,
}

/// Sequence state of one partition.
#[derive(Debug, Clone)]
pub(crate) struct PartitionSequences {
    /// `NO_PRODUCER_ID` while the partition waits for a new producer id.
    identity: Identity,
    next_sequence: i32,
    /// Sent batches in sequence order, from the oldest unresolved one.
    window: VecDeque<Sent>,
}

impl PartitionSequences {
    pub fn new(identity: Identity) -> PartitionSequences {
        PartitionSequences {
            identity,
            next_sequence: 0,
            window: VecDeque::with_capacity(IN_FLIGHT_BATCHES_PER_PARTITION_MAX),
        }
    }

    /// Whether the partition waits for a new producer id.
    pub fn needs_producer_id(&self) -> bool {
        self.identity.producer_id == NO_PRODUCER_ID
    }

    /// Gives a partition that waited for one its new producer id (epoch 0, sequence 0).
    pub fn set_producer_id(&mut self, identity: Identity) {
        if self.needs_producer_id() {
            self.identity = identity;
            self.next_sequence = 0;
        }
    }

    /// Whether a new sequence can be handed out now: the identity is known, the window has
    /// room, and every batch sent with an older identity is back (renumbered or resolved).
    pub fn can_assign(&self) -> bool {
        !self.needs_producer_id()
            && self.window.len() < IN_FLIGHT_BATCHES_PER_PARTITION_MAX
            && self.window.iter().all(|s| s.identity == self.identity)
    }

    /// The sequence of batch `batch_id` of `records` records (call only when `can_assign`).
    pub fn assign(&mut self, batch_id: u64, records: i32) -> Sequenced {
        assert!(self.can_assign() && records > 0);
        assert!(self.window.back().is_none_or(|s| s.batch_id < batch_id));
        let sequenced = Sequenced {
            identity: self.identity,
            base_sequence: self.next_sequence,
        };
        self.next_sequence = increment_sequence(self.next_sequence, records);
        self.window.push_back(Sent {
            batch_id,
            identity: self.identity,
            resolved: false,
        });
        sequenced
    }

    /// The batch is done (acknowledged, or failed for good: its outcome no longer matters to
    /// the window).
    pub fn resolved(&mut self, batch_id: u64) {
        if let Some(s) = self.window.iter_mut().find(|s| s.batch_id == batch_id) {
            s.resolved = true;
        }
        while self.window.front().is_some_and(|s| s.resolved) {
            self.window.pop_front();
        }
    }

    /// Batch `batch_id`, sent with an older identity and waiting for its retry, will be
    /// renumbered: its old sequence is forgotten.
    pub fn renumbered(&mut self, batch_id: u64) {
        self.forget(batch_id);
    }

    /// The batch will be renumbered: its old sequence is forgotten.
    fn forget(&mut self, batch_id: u64) {
        self.window.retain(|s| s.batch_id != batch_id);
        while self.window.front().is_some_and(|s| s.resolved) {
            self.window.pop_front();
        }
    }

    /// Decides what to do after the broker refused batch `batch_id` sent as `sent` with
    /// `code` (`None`: no broker code, such as a connection failure); `retriable` says whether
    /// the error is retriable without idempotence.
    pub fn refused(
        &mut self,
        batch_id: u64,
        sent: Sequenced,
        code: Option<ErrorCode>,
        retriable: bool,
    ) -> Refusal {
        if sent.identity != self.identity {
            self.forget(batch_id);
            return Refusal::Renumber;
        }
        match code {
            Some(ErrorCode::OutOfOrderSequenceNumber) => {
                let earlier_unresolved = self
                    .window
                    .iter()
                    .take_while(|s| s.batch_id < batch_id)
                    .any(|s| !s.resolved && s.identity == sent.identity);
                if earlier_unresolved {
                    return Refusal::Retry;
                }
                self.bump();
                self.forget(batch_id);
                Refusal::Renumber
            }
            _ if retriable => Refusal::Retry,
            _ => {
                self.resolved(batch_id);
                Refusal::Fail
            }
        }
    }

    /// KIP-360: a new epoch for this partition (a new producer id after the last epoch),
    /// sequences from 0.
    fn bump(&mut self) {
        self.identity = match self.identity.epoch.checked_add(1) {
            Some(epoch) => Identity {
                producer_id: self.identity.producer_id,
                epoch,
            },
            None => Identity {
                producer_id: NO_PRODUCER_ID,
                epoch: 0,
            },
        };
        self.next_sequence = 0;
        tracing::debug!(
            identity = ?self.identity,
            "idempotent producer bumped a partition's epoch"
        );
    }

    /// Whether `sent` is the partition's current identity.
    pub fn is_current(&self, sent: Sequenced) -> bool {
        sent.identity == self.identity
    }

    /// Forgets `batch_id` if it was sent with an old identity, resolves it otherwise (a batch
    /// that fails without a broker answer about its sequence).
    pub fn abandoned(&mut self, batch_id: u64, sent: Sequenced) {
        if self.is_current(sent) {
            self.resolved(batch_id);
        } else {
            self.forget(batch_id);
        }
    }

    /// The current identity.
    #[cfg(test)]
    pub fn identity(&self) -> Identity {
        self.identity
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: Identity = Identity {
        producer_id: 9,
        epoch: 0,
    };

    #[test]
    fn sequences_follow_records_and_the_window_bounds_what_is_unresolved() {
        let mut s = PartitionSequences::new(ID);
        let a = s.assign(1, 3);
        let b = s.assign(2, 2);
        assert_eq!((a.base_sequence, b.base_sequence), (0, 3));
        for id in 3..=5 {
            s.assign(id, 1);
        }
        assert!(!s.can_assign(), "five unresolved");
        // A later batch acknowledged does not free the window: batch 1 is still unresolved.
        s.resolved(2);
        assert!(!s.can_assign());
        s.resolved(1);
        assert!(s.can_assign());
        assert_eq!(s.assign(6, 1).base_sequence, 8);
    }

    #[test]
    fn out_of_order_behind_an_unresolved_batch_is_retried_else_the_epoch_is_bumped() {
        let mut s = PartitionSequences::new(ID);
        let a = s.assign(1, 1);
        let b = s.assign(2, 1);
        let c = s.assign(3, 1);
        let ooo = Some(ErrorCode::OutOfOrderSequenceNumber);
        // `a` is being retried: `b` waits behind it.
        assert_eq!(s.refused(1, a, Some(ErrorCode::Busy), true), Refusal::Retry);
        assert_eq!(s.refused(2, b, ooo, false), Refusal::Retry);
        // `a` expires on the producer side: its outcome is unknown, `b` is now the oldest.
        s.abandoned(1, a);
        assert_eq!(s.refused(2, b, ooo, false), Refusal::Renumber);
        assert_eq!(
            s.identity(),
            Identity {
                producer_id: 9,
                epoch: 1
            }
        );
        // `c` was sent with the old epoch: it comes back and is renumbered, not bumped again.
        assert!(!s.can_assign(), "waits for batches of the old epoch");
        assert_eq!(
            s.refused(3, c, Some(ErrorCode::InvalidProducerEpoch), false),
            Refusal::Renumber
        );
        assert!(s.can_assign());
        assert_eq!(
            s.assign(2, 1),
            Sequenced {
                identity: Identity {
                    producer_id: 9,
                    epoch: 1
                },
                base_sequence: 0
            }
        );
        assert_eq!(s.assign(3, 1).base_sequence, 1);
    }

    #[test]
    fn the_last_epoch_asks_for_a_new_producer_id_and_failures_resolve() {
        let mut s = PartitionSequences::new(Identity {
            producer_id: 9,
            epoch: i16::MAX,
        });
        let a = s.assign(1, 1);
        assert_eq!(
            s.refused(1, a, Some(ErrorCode::OutOfOrderSequenceNumber), false),
            Refusal::Renumber
        );
        assert!(s.needs_producer_id() && !s.can_assign());
        s.set_producer_id(Identity {
            producer_id: 10,
            epoch: 0,
        });
        let b = s.assign(1, 1);
        assert_eq!(
            b,
            Sequenced {
                identity: Identity {
                    producer_id: 10,
                    epoch: 0
                },
                base_sequence: 0
            }
        );
        assert_eq!(
            s.refused(1, b, Some(ErrorCode::InvalidRecordBatch), false),
            Refusal::Fail
        );
        assert!(s.can_assign());
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        let mut s = PartitionSequences::new(ID);
        s.next_sequence = i32::MAX - 1;
        assert_eq!(s.assign(1, 3).base_sequence, i32::MAX - 1);
        assert_eq!(s.assign(2, 1).base_sequence, 1);
    }
}
