//! Small metadata files of a partition directory: the recovery-point checkpoint and the
//! leader-epoch cache. Formats in docs/storage-format.md.

/// File name of the recovery-point checkpoint.
pub const RECOVERY_CHECKPOINT_FILE: &str = "recovery-point.checkpoint";
/// File name of the clean-shutdown marker.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";
/// File name of the leader-epoch cache.
pub const LEADER_EPOCH_FILE: &str = "leader-epoch.checkpoint";

const MAGIC: &[u8; 8] = b"BRGSRCP1";
const VERSION: u32 = 1;
/// Encoded size of a [`RecoveryCheckpoint`].
pub const RECOVERY_CHECKPOINT_SIZE_BYTES: usize = 8 + 4 + 8 * 4 + 4 + 4 + 4;

/// Everything before `offset` is written and fdatasynced, and the index files of every segment
/// up to `segment_base` hold (at least) the entries for that data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecoveryCheckpoint {
    /// First offset of the log when written.
    pub log_start_offset: i64,
    /// The recovery point: offset after the last synced batch.
    pub offset: i64,
    /// Base offset of the segment holding the recovery point.
    pub segment_base: i64,
    /// Byte position of the recovery point in that segment.
    pub position: u64,
    /// Offset-index entries of that segment valid at the recovery point.
    pub index_entries: u32,
    /// Time-index entries of that segment valid at the recovery point.
    pub time_index_entries: u32,
}

impl RecoveryCheckpoint {
    /// Encodes with a trailing CRC-32C.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(RECOVERY_CHECKPOINT_SIZE_BYTES);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_be_bytes());
        out.extend_from_slice(&self.log_start_offset.to_be_bytes());
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&self.segment_base.to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
        out.extend_from_slice(&self.index_entries.to_be_bytes());
        out.extend_from_slice(&self.time_index_entries.to_be_bytes());
        let crc = crc32c::crc32c(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        debug_assert_eq!(out.len(), RECOVERY_CHECKPOINT_SIZE_BYTES);
        out
    }

    /// Decodes and checks magic, version, CRC and ranges.
    pub fn decode(src: &[u8]) -> Result<RecoveryCheckpoint, String> {
        if src.len() != RECOVERY_CHECKPOINT_SIZE_BYTES {
            return Err(format!(
                "size {} != {RECOVERY_CHECKPOINT_SIZE_BYTES}",
                src.len()
            ));
        }
        let body = &src[..src.len() - 4];
        let stored = u32::from_be_bytes(src[src.len() - 4..].try_into().map_err(|_| "crc")?);
        if crc32c::crc32c(body) != stored {
            return Err("CRC mismatch".into());
        }
        if &src[..8] != MAGIC {
            return Err("bad magic".into());
        }
        let u32_at =
            |at: usize| u32::from_be_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]]);
        let i64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&src[at..at + 8]);
            i64::from_be_bytes(b)
        };
        if u32_at(8) != VERSION {
            return Err(format!("unknown version {}", u32_at(8)));
        }
        let cp = RecoveryCheckpoint {
            log_start_offset: i64_at(12),
            offset: i64_at(20),
            segment_base: i64_at(28),
            position: i64_at(36) as u64,
            index_entries: u32_at(44),
            time_index_entries: u32_at(48),
        };
        if cp.log_start_offset < 0 || cp.segment_base < 0 || cp.offset < cp.segment_base {
            return Err(format!("inconsistent values {cp:?}"));
        }
        Ok(cp)
    }
}

/// The leader-epoch cache: (epoch, start offset) pairs, both strictly increasing. Lives on
/// the partition's core.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<(i32, i64)>,
}

impl LeaderEpochCache {
    /// Records that `epoch` starts at `start_offset` if it is newer than the latest epoch.
    /// Returns whether the cache changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || self.entries.last().is_some_and(|&(e, _)| e >= epoch) {
            return false;
        }
        // An epoch that starts where the previous one starts replaces it (no records in it).
        while self.entries.last().is_some_and(|&(_, s)| s >= start_offset) {
            self.entries.pop();
        }
        self.entries.push((epoch, start_offset));
        true
    }

    /// Kafka's `endOffsetFor`: (largest epoch <= `epoch`, the start offset of the next epoch
    /// or `log_end_offset`); `None` when undefined.
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let &(latest, _) = self.entries.last()?;
        if epoch < 0 || epoch > latest {
            return None;
        }
        if epoch == latest {
            return Some((epoch, log_end_offset));
        }
        let higher = self.entries.partition_point(|&(e, _)| e <= epoch);
        let next_start = self.entries[higher].1;
        match higher {
            0 => Some((epoch, next_start)),
            _ => Some((self.entries[higher - 1].0, next_start)),
        }
    }

    /// Drops epochs that start at or after `offset` (log truncation).
    pub fn truncate_from_end(&mut self, offset: i64) -> bool {
        let n = self.entries.partition_point(|&(_, s)| s < offset);
        let changed = n != self.entries.len();
        self.entries.truncate(n);
        changed
    }

    /// Drops epochs wholly before `log_start`, moving the one that covers it to start there.
    pub fn truncate_from_start(&mut self, log_start: i64) -> bool {
        let covering = self.entries.partition_point(|&(_, s)| s <= log_start);
        if covering == 0 {
            return false;
        }
        let changed = covering > 1 || self.entries[0].1 != log_start;
        self.entries.drain(..covering - 1);
        self.entries[0].1 = log_start;
        changed
    }

    /// The latest epoch.
    pub fn latest(&self) -> Option<(i32, i64)> {
        self.entries.last().copied()
    }

    /// Kafka's text format: version line `0`, count line, then `epoch start_offset` lines.
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("0\n{}\n", self.entries.len());
        for (e, o) in &self.entries {
            s.push_str(&format!("{e} {o}\n"));
        }
        s.into_bytes()
    }

    /// Parses the text format; entries must be strictly increasing.
    pub fn decode(src: &[u8]) -> Result<LeaderEpochCache, String> {
        let text = std::str::from_utf8(src).map_err(|e| e.to_string())?;
        let mut lines = text.lines();
        if lines.next() != Some("0") {
            return Err("unknown version".into());
        }
        let count: usize = lines
            .next()
            .and_then(|l| l.trim().parse().ok())
            .ok_or("bad count")?;
        let mut cache = LeaderEpochCache::default();
        for _ in 0..count {
            let line = lines.next().ok_or("missing entry")?;
            let mut parts = line.split_whitespace();
            let e: i32 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or("bad epoch")?;
            let o: i64 = parts
                .next()
                .and_then(|p| p.parse().ok())
                .ok_or("bad offset")?;
            if cache
                .entries
                .last()
                .is_some_and(|&(pe, po)| pe >= e || po > o)
            {
                return Err("entries not increasing".into());
            }
            cache.entries.push((e, o));
        }
        Ok(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_round_trip_and_crc() {
        let cp = RecoveryCheckpoint {
            log_start_offset: 5,
            offset: 1234,
            segment_base: 1000,
            position: 4096 * 3 + 17,
            index_entries: 3,
            time_index_entries: 2,
        };
        let bytes = cp.encode();
        assert_eq!(RecoveryCheckpoint::decode(&bytes).unwrap(), cp);
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x10;
            assert!(RecoveryCheckpoint::decode(&bad).is_err(), "flip at {i}");
        }
        assert!(RecoveryCheckpoint::decode(&bytes[..10]).is_err());
    }

    #[test]
    fn epoch_cache_like_kafka() {
        let mut c = LeaderEpochCache::default();
        assert_eq!(c.end_offset_for(0, 10), None);
        assert!(c.assign(1, 0));
        assert!(!c.assign(1, 5));
        assert!(c.assign(3, 10));
        assert!(c.assign(4, 20));
        assert_eq!(c.end_offset_for(4, 25), Some((4, 25)));
        assert_eq!(c.end_offset_for(3, 25), Some((3, 20)));
        assert_eq!(c.end_offset_for(2, 25), Some((1, 10)));
        assert_eq!(c.end_offset_for(0, 25), Some((0, 0)));
        assert_eq!(c.end_offset_for(5, 25), None);
        let back = LeaderEpochCache::decode(&c.encode()).unwrap();
        assert_eq!(back, c);
        assert!(c.truncate_from_end(20));
        assert_eq!(c.latest(), Some((3, 10)));
        assert!(c.truncate_from_start(12));
        assert_eq!(c.latest(), Some((3, 12)));
        assert!(LeaderEpochCache::decode(b"0\n2\n3 10\n1 20\n").is_err());
    }
}
