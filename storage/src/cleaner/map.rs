//! The cleaner's offset map: key hash -> offset of the latest record with that key, bounded by
//! `cleaner_dedupe_buffer_bytes`. Lives on one core, for one cleaning.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher, RandomState};

/// Bytes one entry is charged against the dedupe buffer: a 16-byte key hash, an 8-byte
/// offset, and the hash table's control byte and spare capacity (Kafka charges 24 bytes of a
/// hash-plus-offset slot and sizes its table at a load factor of 0.9).
pub const OFFSET_MAP_ENTRY_BYTES: u64 = 32;

/// Keys are identified by two independent 64-bit SipHash digests (128 bits, as Kafka's MD5),
/// keyed at random for each map: a collision that would drop a key's latest record is
/// improbable (about n^2 / 2^129), and a producer cannot choose keys that collide.
struct KeyHasher {
    high: RandomState,
    low: RandomState,
}

impl KeyHasher {
    fn new() -> KeyHasher {
        KeyHasher {
            high: RandomState::new(),
            low: RandomState::new(),
        }
    }

    fn digest(&self, key: &[u8]) -> u128 {
        (u128::from(self.high.hash_one(key)) << 64) | u128::from(self.low.hash_one(key))
    }
}

/// The table's hasher: its keys are already randomly keyed 128-bit SipHash digests, so their
/// low 64 bits are the bucket hash (hashing them again with SipHash was a third of the map's
/// hashing). Lives on one core, inside one map.
#[derive(Default)]
struct DigestHasher(u64);

impl Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write_u128(&mut self, digest: u128) {
        self.0 = digest as u64;
    }

    /// Not reached for `u128` keys; folds any other input so the hasher stays correct.
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
}

/// Latest offset per key of the dirty section being cleaned.
pub(crate) struct OffsetMap {
    entries: HashMap<u128, i64, BuildHasherDefault<DigestHasher>>,
    entries_max: usize,
    hasher: KeyHasher,
}

impl OffsetMap {
    /// A map holding at most `buffer_bytes / OFFSET_MAP_ENTRY_BYTES` keys.
    pub fn new(buffer_bytes: u64) -> OffsetMap {
        let entries_max = (buffer_bytes / OFFSET_MAP_ENTRY_BYTES).max(1) as usize;
        OffsetMap {
            entries: HashMap::default(),
            entries_max,
            hasher: KeyHasher::new(),
        }
    }

    /// Whether `more` new keys certainly fit.
    pub fn has_room(&self, more: usize) -> bool {
        self.entries.len() + more <= self.entries_max
    }

    /// Records that `key`'s latest record (so far) is at `offset`; offsets come in order.
    pub fn put(&mut self, key: &[u8], offset: i64) {
        let slot = self
            .entries
            .entry(self.hasher.digest(key))
            .or_insert(offset);
        debug_assert!(*slot <= offset, "offset map fed out of order");
        *slot = offset;
        debug_assert!(self.entries.len() <= self.entries_max);
    }

    /// The latest offset of `key` in the mapped section.
    pub fn get(&self, key: &[u8]) -> Option<i64> {
        self.entries.get(&self.hasher.digest(key)).copied()
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
