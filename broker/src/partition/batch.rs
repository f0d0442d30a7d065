//! `ValidatedBatch`: a record batch checked once, on the core that received it, and carried
//! with its parsed header from then on, so that no later step parses the header again.

use borges_protocol::batch::{self, BatchError, BatchHeader};
use bytes::BytesMut;

/// One record batch that passed validation (`batch::validate_produced`: header fields,
/// lengths, CRC-32C, a supported codec, the attribute bits a producer may set, at least one
/// record, and every record decoded and checked). Only [`validate`] makes one.
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

    /// The parsed header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// Records in the batch.
    pub fn records(&self) -> u64 {
        u64::try_from(self.header.records_count).unwrap_or(0)
    }

    /// The bytes as validated.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The bytes, for the log (which stamps base offset and leader epoch outside the CRC).
    pub fn into_bytes(self) -> BytesMut {
        self.bytes
    }
}

/// Cuts one partition's bytes into batches and validates each; nothing is returned unless
/// every batch is valid. `batch_size_bytes_max` is the topic's `max.message.bytes`; zstd
/// records may inflate to `batch::DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT`.
pub fn validate(
    bytes: BytesMut,
    batch_size_bytes_max: usize,
) -> Result<Vec<ValidatedBatch>, BatchError> {
    let limits = batch::ProduceLimits {
        batch_size_bytes_max,
        decompressed_size_bytes_max: batch::DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT,
    };
    let batches = batch::split_produced(bytes, limits)?;
    Ok(batches
        .into_iter()
        .map(|(header, bytes)| ValidatedBatch { header, bytes })
        .collect())
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
