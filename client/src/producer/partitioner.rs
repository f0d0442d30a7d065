//! Partition choice: explicit, keyed (Kafka's murmur2, from the protocol crate) or sticky.
//!
//! Sticky partitioning for records without a key follows Kafka's KIP-794: keep sending to one
//! partition until about `batch_size_bytes` went to it, then move to another partition chosen
//! at random among those that have a leader. Batches fill up instead of every partition
//! getting a trickle of tiny batches.

use borges_protocol::partitioner::partition_for_key;

use crate::error::{ClientError, Result};
use crate::retry::splitmix64;

/// Per-topic state of the sticky partitioner. Lives in the producer's accumulator.
#[derive(Debug, Clone)]
pub(crate) struct StickyPartitioner {
    current: Option<u32>,
    bytes_since_switch: usize,
    rng: u64,
}

impl StickyPartitioner {
    /// A partitioner whose random choices start from `seed`.
    pub fn new(seed: u64) -> StickyPartitioner {
        StickyPartitioner {
            current: None,
            bytes_since_switch: 0,
            rng: seed,
        }
    }

    /// The partition for a keyless record of `record_size_bytes`. `available` lists the
    /// partitions with a leader, ascending (may be empty: then every partition of
    /// `partition_count` is a candidate). Called once per record: the current partition is
    /// looked up by binary search (a linear scan cost 10,000 comparisons per record at 10,000
    /// partitions).
    pub fn next(
        &mut self,
        available: &[u32],
        partition_count: u32,
        record_size_bytes: usize,
        batch_size_bytes: usize,
    ) -> u32 {
        debug_assert!(available.is_sorted(), "available partitions are ascending");
        let stale = self.current.is_none_or(|p| {
            p >= partition_count || (!available.is_empty() && available.binary_search(&p).is_err())
        });
        if stale || self.bytes_since_switch >= batch_size_bytes {
            self.switch(available, partition_count);
        }
        self.bytes_since_switch += record_size_bytes;
        self.current.unwrap_or(0)
    }

    fn switch(&mut self, available: &[u32], partition_count: u32) {
        self.rng = splitmix64(self.rng);
        let previous = self.current;
        let candidates = if available.is_empty() {
            partition_count.max(1)
        } else {
            available.len() as u32
        };
        let mut pick = (self.rng % u64::from(candidates)) as u32;
        let as_partition = |i: u32| {
            if available.is_empty() {
                i
            } else {
                available[i as usize]
            }
        };
        if candidates > 1 && Some(as_partition(pick)) == previous {
            pick = (pick + 1) % candidates;
        }
        self.current = Some(as_partition(pick));
        self.bytes_since_switch = 0;
    }
}

/// The partition for a record: explicit if given (checked against the count), by key if it
/// has one, else sticky.
pub(crate) fn choose_partition(
    explicit: Option<i32>,
    key: Option<&[u8]>,
    partition_count: u32,
    sticky: impl FnOnce() -> u32,
) -> Result<i32> {
    if partition_count == 0 {
        return Err(ClientError::InvalidArgument(
            "topic has no partitions".into(),
        ));
    }
    if let Some(p) = explicit {
        if p < 0 || p as u32 >= partition_count {
            return Err(ClientError::InvalidArgument(format!(
                "partition {p} does not exist (the topic has {partition_count})"
            )));
        }
        return Ok(p);
    }
    match key {
        Some(key) => Ok(partition_for_key(key, partition_count) as i32),
        None => Ok(sticky() as i32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_records_use_kafkas_partitioner() {
        // Kafka's seeds: user-1 and user-2 on partition 0, user-3 on partition 3 of four.
        for (key, expected) in [("user-1", 0), ("user-2", 0), ("user-3", 3)] {
            let p = choose_partition(None, Some(key.as_bytes()), 4, || unreachable!()).unwrap();
            assert_eq!(p, expected, "{key}");
        }
    }

    #[test]
    fn explicit_partition_wins_and_is_checked() {
        assert_eq!(
            choose_partition(Some(2), Some(b"user-3"), 4, || 0).unwrap(),
            2
        );
        assert!(choose_partition(Some(4), None, 4, || 0).is_err());
        assert!(choose_partition(Some(-1), None, 4, || 0).is_err());
        assert!(choose_partition(None, None, 0, || 0).is_err());
    }

    #[test]
    fn sticky_stays_for_a_batch_then_moves_to_another_partition() {
        let mut s = StickyPartitioner::new(1);
        let available = [0, 1, 2, 3];
        let first = s.next(&available, 4, 100, 1000);
        for _ in 0..9 {
            assert_eq!(s.next(&available, 4, 100, 1000), first);
        }
        let second = s.next(&available, 4, 100, 1000);
        assert_ne!(second, first);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..400 {
            seen.insert(s.next(&available, 4, 1000, 1000));
        }
        assert_eq!(seen.len(), 4, "every partition is used over time");
    }

    #[test]
    fn sticky_avoids_partitions_without_leader() {
        let mut s = StickyPartitioner::new(7);
        for _ in 0..200 {
            let p = s.next(&[1, 3], 4, 600, 1000);
            assert!(p == 1 || p == 3);
        }
        // The current partition losing its leader forces a switch at once.
        let p = s.next(&[1, 3], 4, 1, 1000);
        let other = if p == 1 { 3 } else { 1 };
        assert_eq!(s.next(&[other], 4, 1, 1000), other);
        assert_eq!(StickyPartitioner::new(3).next(&[], 1, 1, 1), 0);
    }
}
