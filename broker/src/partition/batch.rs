//! `ValidatedBatch`: a record batch checked once, on the core that received it, and carried
//! with its parsed header from then on, so that no later step parses the header again.

use borges_protocol::batch::{self, BatchError, BatchHeader, Compression};
use borges_protocol::varint::get_varint;
use bytes::BytesMut;

/// One record batch that passed validation: header fields, lengths, CRC-32C, a supported
/// codec, no control or transactional flags, at least one record, and for uncompressed batches
/// a records section that holds exactly `records_count` records. Only [`validate`] makes one.
#[derive(Debug)]
pub struct ValidatedBatch {
    header: BatchHeader,
    bytes: BytesMut,
}

impl ValidatedBatch {
    /// Offsets the batch takes in the log (`last_offset_delta + 1`).
    pub fn offset_span(&self) -> i64 {
        i64::from(self.header.last_offset_delta) + 1
    }

    /// Whether the bytes still hold the header and CRC they were validated with (nothing wrote
    /// into them on the way to the owning core). Recomputes the CRC: for `strict_assert!`.
    pub fn is_intact(&self) -> bool {
        batch::validate(&self.bytes).is_ok_and(|h| h == self.header)
    }

    /// Size in bytes (header included).
    pub fn size_bytes(&self) -> u64 {
        self.bytes.len() as u64
    }

    /// Records in the batch.
    pub fn records(&self) -> u64 {
        u64::try_from(self.header.records_count).unwrap_or(0)
    }

    /// The bytes, for the log (which stamps base offset and leader epoch outside the CRC).
    pub fn into_bytes(self) -> BytesMut {
        self.bytes
    }
}

/// Cuts one partition's bytes into batches and validates each; nothing is returned unless
/// every batch is valid. `batch_size_bytes_max` is the topic's `max.message.bytes`.
pub fn validate(
    bytes: BytesMut,
    batch_size_bytes_max: usize,
) -> Result<Vec<ValidatedBatch>, BatchError> {
    let batches = batch::split_batches(bytes, batch_size_bytes_max)?;
    let mut out = Vec::with_capacity(batches.len());
    for (header, bytes) in batches {
        check_batch(&header, &bytes)?;
        out.push(ValidatedBatch { header, bytes });
    }
    Ok(out)
}

/// Checks what the CRC cannot: a supported codec, no control or transactional batches, and for
/// uncompressed batches that the records section holds exactly `records_count` records.
fn check_batch(header: &BatchHeader, bytes: &[u8]) -> Result<(), BatchError> {
    let compression = header.compression();
    if !compression.is_supported() {
        return Err(BatchError::UnsupportedCompression(compression));
    }
    if header.is_control() || header.is_transactional() {
        return Err(BatchError::InvalidRecord {
            index: 0,
            reason: "transactional and control batches are not supported yet",
        });
    }
    if header.records_count == 0 {
        return Err(BatchError::InvalidRecordCount {
            records_count: 0,
            last_offset_delta: header.last_offset_delta,
        });
    }
    if compression == Compression::None {
        check_record_framing(header, &bytes[batch::field::RECORDS..])?;
    }
    Ok(())
}

/// Walks the length prefixes of an uncompressed records section.
fn check_record_framing(header: &BatchHeader, mut records: &[u8]) -> Result<(), BatchError> {
    let mut index = 0u32;
    while !records.is_empty() {
        let (len, n) = get_varint(records).map_err(|_| BatchError::InvalidRecord {
            index,
            reason: "bad record length",
        })?;
        if len <= 0 || (len as usize) > records.len() - n {
            return Err(BatchError::InvalidRecord {
                index,
                reason: "record length exceeds the batch",
            });
        }
        records = &records[n + len as usize..];
        index += 1;
    }
    if index as i32 != header.records_count {
        return Err(BatchError::InvalidRecordCount {
            records_count: header.records_count,
            last_offset_delta: header.last_offset_delta,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use borges_protocol::batch::{BatchBuilder, BatchOptions};

    fn two_records() -> bytes::Bytes {
        let mut b = BatchBuilder::new(BatchOptions::default(), 64);
        b.push(1, Some(b"k"), Some(b"v"), &[]);
        b.push(2, None, Some(b"w"), &[]);
        b.build().unwrap()
    }

    #[test]
    fn record_framing_catches_a_lying_count() {
        let bytes = two_records();
        let header = batch::validate(&bytes).unwrap();
        assert!(check_batch(&header, &bytes).is_ok());
        let mut lying = header;
        lying.records_count = 3;
        lying.last_offset_delta = 2;
        assert!(check_record_framing(&lying, &bytes[batch::field::RECORDS..]).is_err());
        assert!(
            check_record_framing(&header, &bytes[batch::field::RECORDS..bytes.len() - 1]).is_err()
        );
    }

    #[test]
    fn validate_keeps_each_header_and_refuses_any_bad_batch() {
        let one = two_records();
        let mut both = BytesMut::from(&one[..]);
        both.extend_from_slice(&one);
        let batches = validate(both.clone(), 1 << 20).unwrap();
        assert_eq!(batches.len(), 2);
        assert!(batches.iter().all(|b| b.records() == 2));
        assert_eq!(batches[0].size_bytes(), one.len() as u64);
        assert_eq!(batches[1].header.crc, batch::validate(&one).unwrap().crc);
        assert!(batches.iter().all(ValidatedBatch::is_intact));
        assert_eq!(batches[0].offset_span(), 2);
        let mut tampered = validate(BytesMut::from(&one[..]), 1 << 20).unwrap();
        let last = tampered[0].bytes.len() - 1;
        tampered[0].bytes[last] ^= 1;
        assert!(!tampered[0].is_intact());
        let last = both.len() - 1;
        both[last] ^= 1;
        assert!(validate(both, 1 << 20).is_err());
        assert!(validate(BytesMut::from(&one[..]), one.len() - 1).is_err());
    }
}
