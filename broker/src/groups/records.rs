//! Records of the internal `__consumer_offsets` topic. A group's records all go to partition
//! `murmur2(group_id) mod partitions`, keyed by (group, topic, partition) so that compaction can
//! later keep only the latest commit per key; a null value (tombstone) deletes a commit.
//!
//! ```text
//! key   (big-endian) u16 version = 1 (offset commit)
//!                    u16 group length,  group bytes (UTF-8)
//!                    u16 topic length,  topic bytes (UTF-8)
//!                    i32 partition
//! value (big-endian) u16 version = 1
//!                    i64 committed offset
//!                    i32 leader epoch (-1 unknown)
//!                    u16 metadata length, metadata bytes (UTF-8)
//!                    i64 commit timestamp (ms since the epoch)
//! ```

use bytes::{Buf, BufMut};

/// Key version of an offset commit record.
pub const OFFSET_COMMIT_KEY_VERSION: u16 = 1;
/// Value version of an offset commit record.
pub const OFFSET_COMMIT_VALUE_VERSION: u16 = 1;

/// (group, topic, partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetKey {
    /// Group id.
    pub group: String,
    /// Topic.
    pub topic: String,
    /// Partition.
    pub partition: i32,
}

/// A committed position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetValue {
    /// Next offset to consume.
    pub offset: i64,
    /// Leader epoch, or -1.
    pub leader_epoch: i32,
    /// Client metadata.
    pub metadata: String,
    /// Commit time in ms.
    pub commit_timestamp_ms: i64,
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.put_u16(bytes.len() as u16);
    out.put_slice(bytes);
}

fn get_str(src: &mut &[u8]) -> Option<String> {
    if src.remaining() < 2 {
        return None;
    }
    let n = src.get_u16() as usize;
    if src.remaining() < n {
        return None;
    }
    let s = std::str::from_utf8(&src[..n]).ok()?.to_string();
    src.advance(n);
    Some(s)
}

impl OffsetKey {
    /// Encodes the key.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(10 + self.group.len() + self.topic.len());
        out.put_u16(OFFSET_COMMIT_KEY_VERSION);
        put_str(&mut out, &self.group);
        put_str(&mut out, &self.topic);
        out.put_i32(self.partition);
        out
    }

    /// Decodes a key; `None` for other record types or damaged bytes.
    pub fn decode(mut src: &[u8]) -> Option<OffsetKey> {
        if src.remaining() < 2 || src.get_u16() != OFFSET_COMMIT_KEY_VERSION {
            return None;
        }
        let group = get_str(&mut src)?;
        let topic = get_str(&mut src)?;
        if src.remaining() != 4 {
            return None;
        }
        Some(OffsetKey {
            group,
            topic,
            partition: src.get_i32(),
        })
    }
}

impl OffsetValue {
    /// Encodes the value.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + self.metadata.len());
        out.put_u16(OFFSET_COMMIT_VALUE_VERSION);
        out.put_i64(self.offset);
        out.put_i32(self.leader_epoch);
        put_str(&mut out, &self.metadata);
        out.put_i64(self.commit_timestamp_ms);
        out
    }

    /// Decodes a value; `None` for unknown versions or damaged bytes.
    pub fn decode(mut src: &[u8]) -> Option<OffsetValue> {
        if src.remaining() < 2 || src.get_u16() != OFFSET_COMMIT_VALUE_VERSION {
            return None;
        }
        if src.remaining() < 12 {
            return None;
        }
        let offset = src.get_i64();
        let leader_epoch = src.get_i32();
        let metadata = get_str(&mut src)?;
        if src.remaining() != 8 {
            return None;
        }
        Some(OffsetValue {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms: src.get_i64(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_truncation() {
        let k = OffsetKey {
            group: "billing".into(),
            topic: "orders".into(),
            partition: 7,
        };
        let v = OffsetValue {
            offset: 184_203,
            leader_epoch: 3,
            metadata: "m".into(),
            commit_timestamp_ms: 1_700_000_000_000,
        };
        let kb = k.encode();
        let vb = v.encode();
        assert_eq!(OffsetKey::decode(&kb), Some(k));
        assert_eq!(OffsetValue::decode(&vb), Some(v));
        for n in 0..kb.len() {
            assert_eq!(OffsetKey::decode(&kb[..n]), None);
        }
        for n in 0..vb.len() {
            assert_eq!(OffsetValue::decode(&vb[..n]), None);
        }
    }
}
