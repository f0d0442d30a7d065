//! The cleaner's offset map: key hash -> offset of the latest record with that key, bounded by
//! `cleaner_dedupe_buffer_bytes`. Lives on one core, for one cleaning.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};

/// Bytes one entry is charged against the dedupe buffer: a 16-byte key hash, an 8-byte
/// offset, and the hash table's control byte and spare capacity (Kafka charges 24 bytes of a
/// hash-plus-offset slot and sizes its table at a load factor of 0.9).
pub const OFFSET_MAP_ENTRY_BYTES: u64 = 32;

/// Keys are identified by two independent 64-bit SipHash digests (128 bits, as Kafka's MD5):
/// a collision that would drop a key's latest record is improbable (about n^2 / 2^129).
fn key_hash(key: &[u8]) -> u128 {
    let mut a = DefaultHasher::new();
    key.hash(&mut a);
    let mut b = DefaultHasher::new();
    0x9e37_79b9_7f4a_7c15u64.hash(&mut b);
    key.hash(&mut b);
    (u128::from(a.finish()) << 64) | u128::from(b.finish())
}

/// Latest offset per key of the dirty section being cleaned.
pub(crate) struct OffsetMap {
    entries: HashMap<u128, i64>,
    entries_max: usize,
}

impl OffsetMap {
    /// A map holding at most `buffer_bytes / OFFSET_MAP_ENTRY_BYTES` keys.
    pub fn new(buffer_bytes: u64) -> OffsetMap {
        let entries_max = (buffer_bytes / OFFSET_MAP_ENTRY_BYTES).max(1) as usize;
        OffsetMap {
            entries: HashMap::new(),
            entries_max,
        }
    }

    /// Whether `more` new keys certainly fit.
    pub fn has_room(&self, more: usize) -> bool {
        self.entries.len() + more <= self.entries_max
    }

    /// Records that `key`'s latest record (so far) is at `offset`; offsets come in order.
    pub fn put(&mut self, key: &[u8], offset: i64) {
        let slot = self.entries.entry(key_hash(key)).or_insert(offset);
        debug_assert!(*slot <= offset, "offset map fed out of order");
        *slot = offset;
        debug_assert!(self.entries.len() <= self.entries_max);
    }

    /// The latest offset of `key` in the mapped section.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.entries.get(&key_hash(key)).copied()
    }

    /// Keys held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_latest_offset_and_counts_its_room() {
        let mut m = OffsetMap::new(3 * OFFSET_MAP_ENTRY_BYTES);
        m.put(b"a", 1);
        m.put(b"b", 2);
        m.put(b"a", 5);
        assert_eq!(m.get(b"a"), Some(5));
        assert_eq!(m.get(b"b"), Some(2));
        assert_eq!(m.get(b"c"), None);
        assert_eq!(m.len(), 2);
        assert!(m.has_room(1));
        assert!(!m.has_room(2));
    }
}
