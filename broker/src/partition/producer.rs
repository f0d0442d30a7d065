//! Seam: idempotent-producer state of a partition.
//!
//! With the idempotent producer this holds, per producer id, its epoch and the sequence numbers
//! and offsets of its last few batches (Kafka keeps five), rebuilt from the log's batch headers
//! at open. `Partition::append` consults it before `PartitionLog::append`: a batch whose
//! sequence was already appended is answered with its original offset instead of being
//! appended again, a gap is refused with `OutOfOrderSequenceNumber`, an older epoch with
//! `InvalidProducerEpoch`. Compaction must keep the last batch of every live producer.

/// Producer state of one partition. Lives on the partition's owning core. Empty until the
/// idempotent producer exists: the broker ignores the producer fields of batches today (the
/// SDK sends `NO_PRODUCER_ID`).
#[derive(Debug, Default)]
pub struct ProducerState {
    _none_yet: (),
}
