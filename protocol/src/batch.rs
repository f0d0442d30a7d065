//! Kafka RecordBatch v2, byte for byte.
//!
//! ```text
//! offset size field                    (big-endian, as Kafka)
//!  0     8    base_offset              assigned by the broker; outside the CRC
//!  8     4    batch_length             bytes after this field
//! 12     4    partition_leader_epoch   assigned by the broker; outside the CRC
//! 16     1    magic                    2
//! 17     4    crc                      CRC-32C of bytes 21..end
//! 21     2    attributes               bits 0-2 compression, 3 timestamp type,
//!                                      4 transactional, 5 control, 6 delete horizon
//! 23     4    last_offset_delta
//! 27     8    base_timestamp
//! 35     8    max_timestamp
//! 43     8    producer_id
//! 51     2    producer_epoch
//! 53     4    base_sequence
//! 57     4    records_count
//! 61     ..   records (compressed as one block when the codec is not none)
//! ```
//!
//! Each record: `length varint, attributes i8, timestamp_delta varlong, offset_delta varint,
//! key_length varint (-1 = null), key, value_length varint (-1 = null), value,
//! headers_count varint, then per header key_length varint, key, value_length varint, value`.
//!
//! Three levels of checking, none of which copies, allocates per record or panics on any input:
//! - [`validate`] (and [`RecordBatch::parse`], [`BatchIter`], [`split_batches`]): the header,
//!   lengths, magic, counts and the CRC, in place. What storage checks when it reads its own
//!   files back.
//! - [`validate_produced`] ([`split_produced`]): what a broker accepts from a producer: the above,
//!   the attribute bits a producer may set, `records_count >= 1` with `last_offset_delta =
//!   records_count - 1`, and every record decoded and checked (docs/protocol.md section 5),
//!   zstd sections inflated through a fixed window up to `decompressed_size_bytes_max`.
//! - [`RecordBatch::records`]: decodes every record of a stored batch under the same record
//!   rules (offset deltas only need to increase: compaction leaves holes).

use std::cell::RefCell;
use std::io::Read;

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

use crate::error::ErrorCode;
use crate::records::{self, Deltas, RecordRule, Rules, SliceSource, Span, Visit};
use crate::varint::{put_varint, put_varlong, varint_size, varlong_size};

/// Bytes before `batch_length`'s coverage starts: base_offset (8) + batch_length (4).
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// Size of the v2 batch header, records excluded.
pub const BATCH_HEADER_SIZE_BYTES: usize = 61;
/// Smallest valid `batch_length` (a header with no records).
pub const BATCH_LENGTH_MIN: i32 = (BATCH_HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES) as i32;
/// The only supported magic value.
pub const MAGIC_V2: i8 = 2;
/// Default limit on the decompressed size of one batch's records.
pub const DECOMPRESSED_SIZE_BYTES_MAX_DEFAULT: usize = 64 * 1024 * 1024;
/// Largest batch a [`BatchBuilder`] builds: `batch_length` is an `i32`.
pub const BATCH_SIZE_BYTES_MAX: usize = i32::MAX as usize;
/// Producer id meaning "no idempotent producer".
pub const NO_PRODUCER_ID: i64 = -1;
/// Producer epoch meaning "no idempotent producer".
pub const NO_PRODUCER_EPOCH: i16 = -1;
/// Sequence meaning "no idempotent producer".
pub const NO_SEQUENCE: i32 = -1;
/// Leader epoch meaning "not assigned yet".
pub const NO_PARTITION_LEADER_EPOCH: i32 = -1;

/// Byte positions of the header fields.
pub mod field {
    /// base_offset, i64.
    pub const BASE_OFFSET: usize = 0;
    /// batch_length, i32.
    pub const BATCH_LENGTH: usize = 8;
    /// partition_leader_epoch, i32.
    pub const PARTITION_LEADER_EPOCH: usize = 12;
    /// magic, i8.
    pub const MAGIC: usize = 16;
    /// crc, u32.
    pub const CRC: usize = 17;
    /// attributes, i16; the CRC covers from here to the end.
    pub const ATTRIBUTES: usize = 21;
    /// last_offset_delta, i32.
    pub const LAST_OFFSET_DELTA: usize = 23;
    /// base_timestamp, i64.
    pub const BASE_TIMESTAMP: usize = 27;
    /// max_timestamp, i64.
    pub const MAX_TIMESTAMP: usize = 35;
    /// producer_id, i64.
    pub const PRODUCER_ID: usize = 43;
    /// producer_epoch, i16.
    pub const PRODUCER_EPOCH: usize = 51;
    /// base_sequence, i32.
    pub const BASE_SEQUENCE: usize = 53;
    /// records_count, i32.
    pub const RECORDS_COUNT: usize = 57;
    /// First record.
    pub const RECORDS: usize = 61;
}

pub(crate) const ATTR_COMPRESSION_MASK: i16 = 0x07;
const ATTR_TIMESTAMP_TYPE: i16 = 0x08;
const ATTR_TRANSACTIONAL: i16 = 0x10;
const ATTR_CONTROL: i16 = 0x20;
pub(crate) const ATTR_DELETE_HORIZON: i16 = 0x40;
/// Attribute bits 7-15: reserved, always 0.
const ATTR_RESERVED_MASK: i16 = !0x7f;

/// Compression codec of a batch (attribute bits 0-2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Compression {
    /// Uncompressed records.
    #[default]
    None = 0,
    /// gzip (recognised, not supported by Borges).
    Gzip = 1,
    /// snappy (recognised, not supported by Borges).
    Snappy = 2,
    /// lz4 (recognised, not supported by Borges).
    Lz4 = 3,
    /// zstd, the supported codec.
    Zstd = 4,
}

impl Compression {
    fn from_bits(bits: u8) -> Result<Compression, BatchError> {
        match bits {
            0 => Ok(Compression::None),
            1 => Ok(Compression::Gzip),
            2 => Ok(Compression::Snappy),
            3 => Ok(Compression::Lz4),
            4 => Ok(Compression::Zstd),
            other => Err(BatchError::UnknownCompression(other)),
        }
    }

    /// Whether Borges can decompress this codec.
    pub fn is_supported(self) -> bool {
        matches!(self, Compression::None | Compression::Zstd)
    }
}

/// Timestamp type of a batch (attribute bit 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimestampType {
    /// Set by the producer.
    #[default]
    CreateTime,
    /// Set by the broker on append.
    LogAppendTime,
}

/// What is wrong with a record batch. Every variant says exactly which check failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum BatchError {
    /// Fewer bytes than the structure needs.
    #[error("truncated record batch: need {needed} bytes, have {available}")]
    Truncated {
        /// Bytes needed.
        needed: u64,
        /// Bytes available.
        available: u64,
    },
    /// `batch_length` is below the header size or would overflow.
    #[error("invalid batch_length {batch_length} (minimum {BATCH_LENGTH_MIN})")]
    InvalidLength {
        /// The declared batch_length.
        batch_length: i32,
    },
    /// Magic other than 2.
    #[error("unsupported record batch magic {0} (only magic 2 is supported)")]
    UnsupportedMagic(i8),
    /// CRC-32C over attributes..end does not match.
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed over bytes 21..end.
        computed: u32,
    },
    /// Compression bits 5, 6 or 7.
    #[error("unknown compression codec bits {0}")]
    UnknownCompression(u8),
    /// A recognised codec Borges does not support (gzip, snappy, lz4).
    #[error("unsupported compression codec {0:?} (Borges supports none and zstd)")]
    UnsupportedCompression(Compression),
    /// records_count is negative or does not match last_offset_delta.
    #[error(
        "records_count {records_count} and last_offset_delta {last_offset_delta} disagree \
         (a producer's batch has records_count >= 1 and last_offset_delta = records_count - 1)"
    )]
    InvalidRecordCount {
        /// The header's records_count.
        records_count: i32,
        /// The header's last_offset_delta.
        last_offset_delta: i32,
    },
    /// base_offset + last_offset_delta overflows an i64.
    #[error("base_offset {base_offset} + last_offset_delta {last_offset_delta} overflows")]
    OffsetOverflow {
        /// The header's base_offset.
        base_offset: i64,
        /// The header's last_offset_delta.
        last_offset_delta: i32,
    },
    /// The batch is larger than the limit that applies (`max.message.bytes`).
    #[error("record batch of {size_bytes} bytes exceeds the limit of {size_bytes_max} bytes")]
    TooLarge {
        /// Size of the batch.
        size_bytes: u64,
        /// The limit.
        size_bytes_max: u64,
    },
    /// Decompressed records exceed the configured limit (decompression bomb guard).
    #[error("decompressed records exceed {size_bytes_max} bytes")]
    DecompressedTooLarge {
        /// The limit.
        size_bytes_max: u64,
    },
    /// The records could not be compressed.
    #[error("compression failed: {0}")]
    Compression(String),
    /// The compressed block could not be decompressed.
    #[error("decompression failed: {0}")]
    Decompression(String),
    /// A record is refused for a reason of the caller's (a policy outside the format rules).
    #[error("invalid record {index}: {reason}")]
    InvalidRecord {
        /// Zero-based index of the record in the batch.
        index: u32,
        /// What is wrong.
        reason: &'static str,
    },
    /// A record inside the batch breaks a rule of the record format.
    #[error("invalid record {index}{}: {rule}", offset_delta_suffix(*.offset_delta))]
    Record {
        /// Zero-based index of the record in the batch.
        index: u32,
        /// The record's offset delta, once it was read.
        offset_delta: Option<i32>,
        /// The rule it breaks.
        rule: RecordRule,
    },
    /// The records section does not end where the batch (or its decompressed records) ends.
    #[error("records section has {0} trailing bytes")]
    TrailingBytes(u64),
    /// Attribute bits that a producer's batch may not carry.
    #[error("attributes {attributes:#06x}: {reason}")]
    AttributesRefused {
        /// The batch's attributes.
        attributes: i16,
        /// Which bits and why.
        reason: &'static str,
    },
    /// max_timestamp is not the largest record timestamp.
    #[error("max_timestamp {max_timestamp} is not the largest record timestamp {largest}")]
    MaxTimestampMismatch {
        /// The header's max_timestamp.
        max_timestamp: i64,
        /// The largest timestamp of the records.
        largest: i64,
    },
    /// A batch after the first of a concatenation failed (the first fails unwrapped).
    #[error("batch {index} at byte {position}: {source}")]
    InBatch {
        /// Zero-based index of the batch.
        index: u32,
        /// Its first byte in the concatenation.
        position: u64,
        /// What is wrong with it.
        source: Box<BatchError>,
    },
}

fn offset_delta_suffix(offset_delta: Option<i32>) -> String {
    offset_delta.map_or_else(String::new, |d| format!(" (offset delta {d})"))
}

impl BatchError {
    /// The wire error code a broker answers this failure with.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            BatchError::CrcMismatch { .. } => ErrorCode::CorruptRecordBatch,
            BatchError::UnsupportedCompression(_) | BatchError::UnknownCompression(_) => {
                ErrorCode::UnsupportedCompression
            }
            BatchError::TooLarge { .. } => ErrorCode::RecordBatchTooLarge,
            BatchError::Record {
                rule: RecordRule::NegativeTimestamp { .. },
                ..
            } => ErrorCode::InvalidTimestamp,
            BatchError::InBatch { source, .. } => source.error_code(),
            _ => ErrorCode::InvalidRecordBatch,
        }
    }
}

fn be_i16(src: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([src[at], src[at + 1]])
}
fn be_i32(src: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([src[at], src[at + 1], src[at + 2], src[at + 3]])
}
fn be_i64(src: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&src[at..at + 8]);
    i64::from_be_bytes(b)
}

/// The parsed fixed header of a batch. Plain data, `Copy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the batch_length field.
    pub batch_length: i32,
    /// Leader epoch stamped by the broker.
    pub partition_leader_epoch: i32,
    /// Always 2 after parsing.
    pub magic: i8,
    /// Stored CRC-32C.
    pub crc: u32,
    /// Raw attributes.
    pub attributes: i16,
    /// Offset of the last record minus base_offset.
    pub last_offset_delta: i32,
    /// Timestamp of the first record.
    pub base_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
    /// Idempotent producer id, or -1.
    pub producer_id: i64,
    /// Idempotent producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence of the first record, or -1.
    pub base_sequence: i32,
    /// Number of records.
    pub records_count: i32,
}

impl BatchHeader {
    /// Parses the fixed header at the start of `src` and checks what the header alone can tell:
    /// length, magic, compression bits, record count. Does not check the CRC.
    pub fn parse(src: &[u8]) -> Result<BatchHeader, BatchError> {
        if src.len() < BATCH_HEADER_SIZE_BYTES {
            return Err(BatchError::Truncated {
                needed: BATCH_HEADER_SIZE_BYTES as u64,
                available: src.len() as u64,
            });
        }
        let header = BatchHeader {
            base_offset: be_i64(src, field::BASE_OFFSET),
            batch_length: be_i32(src, field::BATCH_LENGTH),
            partition_leader_epoch: be_i32(src, field::PARTITION_LEADER_EPOCH),
            magic: src[field::MAGIC] as i8,
            crc: be_i32(src, field::CRC) as u32,
            attributes: be_i16(src, field::ATTRIBUTES),
            last_offset_delta: be_i32(src, field::LAST_OFFSET_DELTA),
            base_timestamp: be_i64(src, field::BASE_TIMESTAMP),
            max_timestamp: be_i64(src, field::MAX_TIMESTAMP),
            producer_id: be_i64(src, field::PRODUCER_ID),
            producer_epoch: be_i16(src, field::PRODUCER_EPOCH),
            base_sequence: be_i32(src, field::BASE_SEQUENCE),
            records_count: be_i32(src, field::RECORDS_COUNT),
        };
        if header.batch_length < BATCH_LENGTH_MIN {
            return Err(BatchError::InvalidLength {
                batch_length: header.batch_length,
            });
        }
        if header.magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(header.magic));
        }
        Compression::from_bits((header.attributes & ATTR_COMPRESSION_MASK) as u8)?;
        if header
            .base_offset
            .checked_add(i64::from(header.last_offset_delta))
            .is_none()
        {
            return Err(BatchError::OffsetOverflow {
                base_offset: header.base_offset,
                last_offset_delta: header.last_offset_delta,
            });
        }
        if header.records_count < 0
            || header.last_offset_delta < 0
            || (header.records_count > 0 && header.last_offset_delta < header.records_count - 1)
        {
            return Err(BatchError::InvalidRecordCount {
                records_count: header.records_count,
                last_offset_delta: header.last_offset_delta,
            });
        }
        Ok(header)
    }

    /// Whole batch size on the wire and on disk: batch_length + 12.
    pub fn size_bytes(&self) -> usize {
        self.batch_length as usize + LOG_OVERHEAD_BYTES
    }

    /// Offset of the last record.
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// Offset after the last record.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    /// Sequence of the last record for an idempotent producer's batch (wrapping after
    /// `i32::MAX`); [`NO_SEQUENCE`] when the batch has none.
    pub fn last_sequence(&self) -> i32 {
        if self.base_sequence < 0 {
            return NO_SEQUENCE;
        }
        increment_sequence(self.base_sequence, self.last_offset_delta.max(0))
    }

    /// The compression codec.
    pub fn compression(&self) -> Compression {
        // Checked in parse; bits 5..7 cannot appear here.
        Compression::from_bits((self.attributes & ATTR_COMPRESSION_MASK) as u8)
            .unwrap_or(Compression::None)
    }

    /// The timestamp type.
    pub fn timestamp_type(&self) -> TimestampType {
        if self.attributes & ATTR_TIMESTAMP_TYPE != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    /// Transactional bit.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// Control-batch bit (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Delete-horizon bit (set by compaction).
    pub fn has_delete_horizon(&self) -> bool {
        self.attributes & ATTR_DELETE_HORIZON != 0
    }
}

/// Validates the one batch at the start of `src` in place: header checks, length within `src`,
/// CRC-32C. Returns its header; the batch occupies `src[..header.size_bytes()]`.
pub fn validate(src: &[u8]) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(src)?;
    check_length_and_crc(&header, src)?;
    Ok(header)
}

fn check_length_and_crc(header: &BatchHeader, src: &[u8]) -> Result<(), BatchError> {
    let size = header.size_bytes();
    if src.len() < size {
        return Err(BatchError::Truncated {
            needed: size as u64,
            available: src.len() as u64,
        });
    }
    let computed = crc32c::crc32c(&src[field::ATTRIBUTES..size]);
    if computed != header.crc {
        return Err(BatchError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Limits on the batches a producer sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProduceLimits {
    /// Largest batch, header included (the topic's `max.message.bytes`).
    pub batch_size_bytes_max: usize,
    /// Largest decompressed records section of one zstd batch.
    pub decompressed_size_bytes_max: usize,
}

/// The rules for a producer's records: offset deltas 0, 1, 2, ..., timestamps >= 0.
const PRODUCED: Rules = Rules {
    deltas: Deltas::Exact,
    producer_timestamps: true,
};
/// The rules for stored records: deltas increase (compaction leaves holes), any timestamp.
const STORED: Rules = Rules {
    deltas: Deltas::Increasing,
    producer_timestamps: false,
};

/// Validates the one batch at the start of `src` as a broker accepts it from a producer:
/// everything [`validate`] checks, the size limit (before the CRC is computed), the header rules
/// of [`check_produced_header`], and every record decoded and checked (zstd records inflated
/// through a fixed window, at most `limits.decompressed_size_bytes_max` bytes); the header's
/// max_timestamp must be the largest record timestamp. Returns the header; the batch occupies
/// `src[..header.size_bytes()]`.
pub fn validate_produced(src: &[u8], limits: ProduceLimits) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(src)?;
    if header.size_bytes() > limits.batch_size_bytes_max {
        return Err(BatchError::TooLarge {
            size_bytes: header.size_bytes() as u64,
            size_bytes_max: limits.batch_size_bytes_max as u64,
        });
    }
    check_length_and_crc(&header, src)?;
    check_produced_header(&header)?;
    let section = &src[field::RECORDS..header.size_bytes()];
    let summary = match header.compression() {
        Compression::Zstd => records::walk_zstd(
            &header,
            PRODUCED,
            section,
            limits.decompressed_size_bytes_max,
            &mut (),
        )?,
        _ => records::walk(&header, PRODUCED, &mut SliceSource::new(section), &mut ())?,
    };
    if summary.max_timestamp != header.max_timestamp {
        return Err(BatchError::MaxTimestampMismatch {
            max_timestamp: header.max_timestamp,
            largest: summary.max_timestamp,
        });
    }
    Ok(header)
}

/// The header rules for a producer's batch: a supported codec (none or zstd), attribute bits
/// 3-15 clear (reserved bits; LogAppendTime and the delete horizon are the broker's to set;
/// transactional and control batches are not supported yet), at least one record, and
/// `last_offset_delta = records_count - 1`.
pub fn check_produced_header(header: &BatchHeader) -> Result<(), BatchError> {
    let compression = header.compression();
    if !compression.is_supported() {
        return Err(BatchError::UnsupportedCompression(compression));
    }
    let refused = |reason| BatchError::AttributesRefused {
        attributes: header.attributes,
        reason,
    };
    if header.attributes & ATTR_RESERVED_MASK != 0 {
        return Err(refused("reserved bits 7-15 must be 0"));
    }
    if header.attributes & (ATTR_TRANSACTIONAL | ATTR_CONTROL) != 0 {
        return Err(refused(
            "transactional and control batches are not supported yet",
        ));
    }
    if header.attributes & ATTR_TIMESTAMP_TYPE != 0 {
        return Err(refused(
            "bit 3 (LogAppendTime) is the broker's to set; producers write CreateTime",
        ));
    }
    if header.attributes & ATTR_DELETE_HORIZON != 0 {
        return Err(refused(
            "bit 6 (delete horizon) is set by compaction, never by producers",
        ));
    }
    if header.records_count < 1 || header.last_offset_delta != header.records_count - 1 {
        return Err(BatchError::InvalidRecordCount {
            records_count: header.records_count,
            last_offset_delta: header.last_offset_delta,
        });
    }
    Ok(())
}

/// Writes `base_offset` into a batch header in place (outside the CRC).
pub fn set_base_offset(batch: &mut [u8], base_offset: i64) {
    batch[field::BASE_OFFSET..field::BASE_OFFSET + 8].copy_from_slice(&base_offset.to_be_bytes());
}

/// Writes `partition_leader_epoch` into a batch header in place (outside the CRC).
pub fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4]
        .copy_from_slice(&epoch.to_be_bytes());
}

/// Recomputes the CRC-32C of the batch at the start of `batch` (which must hold its whole
/// `batch_length`) in place: for tools and tests that build batches by hand.
pub fn set_crc(batch: &mut [u8]) {
    let size = BatchHeader::parse(batch).map_or(batch.len(), |h| h.size_bytes().min(batch.len()));
    let crc = crc32c::crc32c(&batch[field::ATTRIBUTES.min(size)..size]);
    batch[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// Rewrites the idempotent-producer fields of a finished batch (producer id, epoch, base
/// sequence) in place and recomputes its CRC: they are inside the CRC, unlike base offset and
/// leader epoch. `batch` must be one whole batch.
pub fn set_producer_fields(
    batch: &mut [u8],
    producer_id: i64,
    producer_epoch: i16,
    base_sequence: i32,
) {
    assert!(
        batch.len() >= BATCH_HEADER_SIZE_BYTES,
        "a batch has a whole header"
    );
    batch[field::PRODUCER_ID..field::PRODUCER_ID + 8].copy_from_slice(&producer_id.to_be_bytes());
    batch[field::PRODUCER_EPOCH..field::PRODUCER_EPOCH + 2]
        .copy_from_slice(&producer_epoch.to_be_bytes());
    batch[field::BASE_SEQUENCE..field::BASE_SEQUENCE + 4]
        .copy_from_slice(&base_sequence.to_be_bytes());
    set_crc(batch);
}

/// Sequence numbers run from 0 to `i32::MAX` and then wrap to 0, as in Kafka
/// (`DefaultRecordBatch.incrementSequence`): `sequence` advanced by `increment` (>= 0).
pub fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    debug_assert!(sequence >= 0 && increment >= 0);
    let wrapped = (i64::from(sequence) + i64::from(increment)) % (i64::from(i32::MAX) + 1);
    wrapped as i32
}

/// Iterates over the batches of a buffer of concatenated batches, validating each one (CRC
/// included). Stops after the first error.
pub struct BatchIter<'a> {
    src: &'a [u8],
    position: usize,
    failed: bool,
}

impl<'a> BatchIter<'a> {
    /// Iterates over `src`.
    pub fn new(src: &'a [u8]) -> BatchIter<'a> {
        BatchIter {
            src,
            position: 0,
            failed: false,
        }
    }
}

impl Iterator for BatchIter<'_> {
    /// The header and the byte range of the batch inside the source.
    type Item = Result<(BatchHeader, std::ops::Range<usize>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.src.len() {
            return None;
        }
        match validate(&self.src[self.position..]) {
            Ok(header) => {
                let start = self.position;
                self.position += header.size_bytes();
                Some(Ok((header, start..self.position)))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Splits a mutable buffer of concatenated batches into one `BytesMut` per batch without copying,
/// validating each (CRC included) and checking each against `batch_size_bytes_max`.
pub fn split_batches(
    mut src: BytesMut,
    batch_size_bytes_max: usize,
) -> Result<Vec<(BatchHeader, BytesMut)>, BatchError> {
    let mut out = Vec::new();
    while !src.is_empty() {
        let header = validate(&src)?;
        if header.size_bytes() > batch_size_bytes_max {
            return Err(BatchError::TooLarge {
                size_bytes: header.size_bytes() as u64,
                size_bytes_max: batch_size_bytes_max as u64,
            });
        }
        out.push((header, src.split_to(header.size_bytes())));
    }
    Ok(out)
}

/// Splits a producer's concatenated batches into one `BytesMut` per batch without copying,
/// validating each with [`validate_produced`]. A failure in a batch after the first names it
/// ([`BatchError::InBatch`]).
pub fn split_produced(
    mut src: BytesMut,
    limits: ProduceLimits,
) -> Result<Vec<(BatchHeader, BytesMut)>, BatchError> {
    let mut out = Vec::new();
    let mut position = 0u64;
    while !src.is_empty() {
        let header = validate_produced(&src, limits).map_err(|e| match out.len() {
            0 => e,
            index => BatchError::InBatch {
                index: index as u32,
                position,
                source: Box::new(e),
            },
        })?;
        position += header.size_bytes() as u64;
        out.push((header, src.split_to(header.size_bytes())));
    }
    Ok(out)
}

/// One record header (a key/value pair attached to a record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHeader {
    /// Header key (Kafka requires UTF-8 here; Borges keeps the bytes).
    pub key: Bytes,
    /// Header value; `None` is null.
    pub value: Option<Bytes>,
}

/// One decoded record with absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset.
    pub offset: i64,
    /// Absolute timestamp in milliseconds (the batch's max_timestamp for LogAppendTime batches).
    pub timestamp: i64,
    /// Key; `None` is null.
    pub key: Option<Bytes>,
    /// Value; `None` is null (a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order.
    pub headers: Vec<RecordHeader>,
}

/// A validated record batch: a `Bytes` view with typed accessors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordBatch {
    header: BatchHeader,
    bytes: Bytes,
}

impl RecordBatch {
    /// Validates `bytes`, which must hold exactly one batch.
    pub fn parse(bytes: Bytes) -> Result<RecordBatch, BatchError> {
        let header = validate(&bytes)?;
        if bytes.len() != header.size_bytes() {
            return Err(BatchError::TrailingBytes(
                (bytes.len() - header.size_bytes()) as u64,
            ));
        }
        Ok(RecordBatch { header, bytes })
    }

    /// Splits and validates a buffer of concatenated batches (a fetch response's records).
    /// A partial batch at the end (allowed in Kafka fetch responses) is dropped, not an error.
    pub fn parse_many(bytes: &Bytes) -> Result<Vec<RecordBatch>, BatchError> {
        let mut out = Vec::new();
        let mut position = 0;
        while position < bytes.len() {
            let rest = &bytes[position..];
            match BatchHeader::parse(rest) {
                Err(BatchError::Truncated { .. }) => break,
                Err(e) => return Err(e),
                Ok(h) if h.size_bytes() > rest.len() => break,
                Ok(h) => {
                    let batch =
                        RecordBatch::parse(bytes.slice(position..position + h.size_bytes()))?;
                    position += h.size_bytes();
                    out.push(batch);
                }
            }
        }
        Ok(out)
    }

    /// The parsed header.
    pub fn header(&self) -> &BatchHeader {
        &self.header
    }

    /// The whole batch bytes.
    pub fn as_bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// Consumes the view, returning its bytes.
    pub fn into_bytes(self) -> Bytes {
        self.bytes
    }

    /// Offset of the first record.
    pub fn base_offset(&self) -> i64 {
        self.header.base_offset
    }

    /// Offset of the last record.
    pub fn last_offset(&self) -> i64 {
        self.header.last_offset()
    }

    /// Number of records.
    pub fn records_count(&self) -> i32 {
        self.header.records_count
    }

    /// Decodes every record. Compressed records are inflated up to
    /// `decompressed_size_bytes_max`; beyond that the batch is refused.
    pub fn records(&self, decompressed_size_bytes_max: usize) -> Result<Vec<Record>, BatchError> {
        let section = self.bytes.slice(field::RECORDS..);
        let records = match self.header.compression() {
            Compression::None => section,
            Compression::Zstd => {
                records::check_zstd_frames(&section)?;
                Bytes::from(decompress_zstd(&section, decompressed_size_bytes_max)?)
            }
            other => return Err(BatchError::UnsupportedCompression(other)),
        };
        decode_records(&self.header, &records)
    }
}

thread_local! {
    /// One zstd compression context per thread (per core in the broker), reused across batches:
    /// creating a context costs more than compressing a 16 KiB batch.
    static ZSTD_COMPRESSOR: RefCell<Option<(i32, zstd::bulk::Compressor<'static>)>> =
        const { RefCell::new(None) };
    /// One zstd decompression context per thread, reused across batches.
    static ZSTD_DECOMPRESSOR: RefCell<Option<zstd::bulk::Decompressor<'static>>> =
        const { RefCell::new(None) };
}

/// Compresses the records after the header of `uncompressed` (a batch under construction) into
/// a new, right-sized buffer that starts with the same header bytes.
pub(crate) fn compress_zstd(uncompressed: &[u8], level: i32) -> Result<Vec<u8>, BatchError> {
    let records = &uncompressed[BATCH_HEADER_SIZE_BYTES..];
    let mut out = Vec::with_capacity(
        BATCH_HEADER_SIZE_BYTES + zstd::zstd_safe::compress_bound(records.len()),
    );
    out.extend_from_slice(&uncompressed[..BATCH_HEADER_SIZE_BYTES]);
    let compression = |e: std::io::Error| BatchError::Compression(e.to_string());
    ZSTD_COMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        let compressor = match slot.as_mut() {
            Some((current, compressor)) if *current == level => compressor,
            _ => {
                *slot = Some((
                    level,
                    zstd::bulk::Compressor::new(level).map_err(compression)?,
                ));
                match slot.as_mut() {
                    Some((_, compressor)) => compressor,
                    None => unreachable!("just stored"),
                }
            }
        };
        let mut cursor = std::io::Cursor::new(&mut out);
        cursor.set_position(BATCH_HEADER_SIZE_BYTES as u64);
        compressor
            .compress_to_buffer(records, &mut cursor)
            .map_err(compression)
    })?;
    Ok(out)
}

/// Decompresses a zstd records section, refusing more than `size_bytes_max` bytes of output.
/// Fast path: a single frame that declares its content size is inflated in one call into an
/// exactly-sized buffer with a reused context. Anything else (no declared size, several
/// frames) streams through a reader capped at the limit.
fn decompress_zstd(src: &[u8], size_bytes_max: usize) -> Result<Vec<u8>, BatchError> {
    if let Ok(Some(declared)) = zstd::zstd_safe::get_frame_content_size(src) {
        if declared > size_bytes_max as u64 {
            return Err(BatchError::DecompressedTooLarge {
                size_bytes_max: size_bytes_max as u64,
            });
        }
        if let Some(out) = decompress_zstd_declared(src, declared as usize) {
            return Ok(out);
        }
    }
    decompress_zstd_stream(src, size_bytes_max)
}

fn decompress_zstd_declared(src: &[u8], size_bytes: usize) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(size_bytes);
    ZSTD_DECOMPRESSOR.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = zstd::bulk::Decompressor::new().ok();
        }
        let decompressor = slot.as_mut()?;
        match decompressor.decompress_to_buffer(src, &mut out) {
            Ok(n) if n == size_bytes => Some(()),
            // Wrong declared size or several frames: let the streaming path decide.
            _ => None,
        }
    })?;
    Some(out)
}

fn decompress_zstd_stream(src: &[u8], size_bytes_max: usize) -> Result<Vec<u8>, BatchError> {
    let decoder = zstd::stream::read::Decoder::new(src)
        .map_err(|e| BatchError::Decompression(e.to_string()))?;
    let mut out = Vec::with_capacity(src.len().saturating_mul(4).min(size_bytes_max));
    let read = decoder
        .take(size_bytes_max as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| BatchError::Decompression(e.to_string()))?;
    if read > size_bytes_max {
        return Err(BatchError::DecompressedTooLarge {
            size_bytes_max: size_bytes_max as u64,
        });
    }
    Ok(out)
}

/// Collects the records of an in-memory section as `Bytes` views of it.
struct Collect<'a> {
    section: &'a Bytes,
    base_offset: i64,
    headers: Vec<RecordHeader>,
    out: Vec<Record>,
}

impl Collect<'_> {
    fn bytes(&self, span: Span) -> Option<Bytes> {
        match span {
            Span::At(range) => Some(self.section.slice(range)),
            Span::Null | Span::Skipped => None,
        }
    }
}

impl Visit for Collect<'_> {
    const WANTS_SPANS: bool = true;

    fn header(&mut self, key: Span, value: Span) {
        let header = RecordHeader {
            key: self.bytes(key).unwrap_or_default(),
            value: self.bytes(value),
        };
        self.headers.push(header);
    }

    fn record(&mut self, offset_delta: i32, timestamp: i64, key: Span, value: Span) {
        let record = Record {
            offset: self.base_offset + i64::from(offset_delta),
            timestamp,
            key: self.bytes(key),
            value: self.bytes(value),
            headers: std::mem::take(&mut self.headers),
        };
        self.out.push(record);
    }
}

fn decode_records(header: &BatchHeader, section: &Bytes) -> Result<Vec<Record>, BatchError> {
    let count = header.records_count.max(0) as usize;
    let mut collect = Collect {
        section,
        base_offset: header.base_offset,
        headers: Vec::new(),
        // Never pre-allocate from an unchecked count: each record takes at least 7 bytes.
        out: Vec::with_capacity(count.min(section.len() / 7 + 1)),
    };
    records::walk(header, STORED, &mut SliceSource::new(section), &mut collect)?;
    Ok(collect.out)
}

/// Options for a new batch.
#[derive(Debug, Clone, Copy)]
pub struct BatchOptions {
    /// Codec for the records section.
    pub compression: Compression,
    /// zstd level (ignored for other codecs).
    pub compression_level: i32,
    /// Idempotent producer id, or -1.
    pub producer_id: i64,
    /// Idempotent producer epoch, or -1.
    pub producer_epoch: i16,
    /// Sequence of the first record, or -1.
    pub base_sequence: i32,
    /// Transactional bit.
    pub is_transactional: bool,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            compression: Compression::None,
            compression_level: 1,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            base_sequence: NO_SEQUENCE,
            is_transactional: false,
        }
    }
}

/// Builds one record batch. Records are encoded as they are pushed, straight into the output
/// buffer after a reserved header; `build` fills the header, compresses if asked and computes
/// the CRC. Base offset 0, leader epoch -1: the broker stamps both.
#[derive(Debug)]
pub struct BatchBuilder {
    options: BatchOptions,
    buf: Vec<u8>,
    records_count: i32,
    base_timestamp: i64,
    max_timestamp: i64,
}

impl BatchBuilder {
    /// A builder with room for about `capacity_bytes` of records.
    pub fn new(options: BatchOptions, capacity_bytes: usize) -> BatchBuilder {
        let mut buf = Vec::with_capacity(BATCH_HEADER_SIZE_BYTES + capacity_bytes);
        buf.resize(BATCH_HEADER_SIZE_BYTES, 0);
        BatchBuilder {
            options,
            buf,
            records_count: 0,
            base_timestamp: 0,
            max_timestamp: -1,
        }
    }

    /// Number of records pushed.
    pub fn records_count(&self) -> i32 {
        self.records_count
    }

    /// Sets the idempotent-producer fields written by [`BatchBuilder::build`] (a producer
    /// learns the batch's sequence only when it sends it).
    pub fn set_producer(&mut self, producer_id: i64, producer_epoch: i16, base_sequence: i32) {
        self.options.producer_id = producer_id;
        self.options.producer_epoch = producer_epoch;
        self.options.base_sequence = base_sequence;
    }

    /// Whether no record was pushed.
    pub fn is_empty(&self) -> bool {
        self.records_count == 0
    }

    /// Uncompressed size of the batch so far, header included.
    pub fn size_bytes(&self) -> usize {
        self.buf.len()
    }

    /// The encoded size one more record would add.
    pub fn record_size_bytes(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> usize {
        let body = self.record_body_size(timestamp, key, value, headers);
        varint_size(body as i32) + body
    }

    fn record_body_size(
        &self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) -> usize {
        let base_timestamp = if self.records_count == 0 {
            timestamp
        } else {
            self.base_timestamp
        };
        let bytes_size = |b: Option<&[u8]>| match b {
            None => 1,
            Some(b) => varint_size(b.len() as i32) + b.len(),
        };
        let mut size = 1
            + varlong_size(timestamp.wrapping_sub(base_timestamp))
            + varint_size(self.records_count)
            + bytes_size(key)
            + bytes_size(value)
            + varint_size(headers.len() as i32);
        for (k, v) in headers {
            size += bytes_size(Some(k)) + bytes_size(*v);
        }
        size
    }

    /// Appends one record with a create-time `timestamp` in milliseconds.
    pub fn push(
        &mut self,
        timestamp: i64,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
        headers: &[(&[u8], Option<&[u8]>)],
    ) {
        if self.records_count == 0 {
            self.base_timestamp = timestamp;
            self.max_timestamp = timestamp;
        }
        let body = self.record_body_size(timestamp, key, value, headers);
        self.buf.reserve(body + 5);
        put_varint(&mut self.buf, body as i32);
        self.buf.push(0);
        put_varlong(&mut self.buf, timestamp.wrapping_sub(self.base_timestamp));
        put_varint(&mut self.buf, self.records_count);
        put_nullable(&mut self.buf, key);
        put_nullable(&mut self.buf, value);
        put_varint(&mut self.buf, headers.len() as i32);
        for (k, v) in headers {
            put_nullable(&mut self.buf, Some(k));
            put_nullable(&mut self.buf, *v);
        }
        self.records_count += 1;
        self.max_timestamp = self.max_timestamp.max(timestamp);
    }

    /// Finishes the batch.
    pub fn build(mut self) -> Result<Bytes, BatchError> {
        let mut attributes = self.options.compression as i16;
        if self.options.is_transactional {
            attributes |= ATTR_TRANSACTIONAL;
        }
        match self.options.compression {
            Compression::None => {}
            Compression::Zstd => {
                self.buf = compress_zstd(&self.buf, self.options.compression_level)?;
            }
            other => return Err(BatchError::UnsupportedCompression(other)),
        }
        if self.buf.len() > BATCH_SIZE_BYTES_MAX {
            return Err(BatchError::TooLarge {
                size_bytes: self.buf.len() as u64,
                size_bytes_max: BATCH_SIZE_BYTES_MAX as u64,
            });
        }
        let batch_length = (self.buf.len() - LOG_OVERHEAD_BYTES) as i32;
        let mut header = [0u8; BATCH_HEADER_SIZE_BYTES];
        {
            let mut h = &mut header[..];
            h.put_i64(0);
            h.put_i32(batch_length);
            h.put_i32(NO_PARTITION_LEADER_EPOCH);
            h.put_i8(MAGIC_V2);
            h.put_u32(0);
            h.put_i16(attributes);
            h.put_i32((self.records_count - 1).max(0));
            h.put_i64(self.base_timestamp);
            h.put_i64(self.max_timestamp.max(self.base_timestamp));
            h.put_i64(self.options.producer_id);
            h.put_i16(self.options.producer_epoch);
            h.put_i32(self.options.base_sequence);
            h.put_i32(self.records_count);
        }
        self.buf[..BATCH_HEADER_SIZE_BYTES].copy_from_slice(&header);
        let crc = crc32c::crc32c(&self.buf[field::ATTRIBUTES..]);
        self.buf[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Ok(Bytes::from(self.buf))
    }
}

pub(crate) fn put_nullable(dst: &mut Vec<u8>, value: Option<&[u8]>) {
    match value {
        None => put_varint(dst, -1),
        Some(b) => {
            put_varint(dst, b.len() as i32);
            dst.extend_from_slice(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(compression: Compression) -> Bytes {
        let mut b = BatchBuilder::new(
            BatchOptions {
                compression,
                ..BatchOptions::default()
            },
            1024,
        );
        b.push(1_000, Some(b"user-1"), Some(b"created order 100"), &[]);
        b.push(
            1_005,
            None,
            Some(b"v2"),
            &[(b"h", Some(b"x")), (b"n", None)],
        );
        b.push(999, Some(b"k3"), None, &[]);
        b.build().unwrap()
    }

    #[test]
    fn round_trip_uncompressed_and_zstd() {
        for c in [Compression::None, Compression::Zstd] {
            let bytes = sample(c);
            let batch = RecordBatch::parse(bytes).unwrap();
            assert_eq!(batch.records_count(), 3);
            assert_eq!(batch.header().compression(), c);
            assert_eq!(batch.header().max_timestamp, 1_005);
            let records = batch.records(1 << 20).unwrap();
            assert_eq!(records.len(), 3);
            assert_eq!(records[0].key.as_deref(), Some(&b"user-1"[..]));
            assert_eq!(records[1].offset, 1);
            assert_eq!(records[1].timestamp, 1_005);
            assert_eq!(records[1].headers.len(), 2);
            assert_eq!(records[1].headers[1].value, None);
            assert_eq!(records[2].value, None);
            assert_eq!(records[2].timestamp, 999);
        }
    }

    #[test]
    fn stamping_offset_and_epoch_keeps_crc_valid() {
        let mut bytes = BytesMut::from(&sample(Compression::None)[..]);
        set_base_offset(&mut bytes, 42);
        set_partition_leader_epoch(&mut bytes, 7);
        let h = validate(&bytes).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.partition_leader_epoch, 7);
        assert_eq!(h.last_offset(), 44);
    }

    #[test]
    fn every_single_bit_flip_after_offset_and_epoch_is_caught() {
        let bytes = sample(Compression::None);
        for i in 0..bytes.len() {
            if (field::BASE_OFFSET..field::BASE_OFFSET + 8).contains(&i)
                || (field::PARTITION_LEADER_EPOCH..field::PARTITION_LEADER_EPOCH + 4).contains(&i)
            {
                continue;
            }
            let mut bad = bytes.to_vec();
            bad[i] ^= 0x04;
            assert!(validate(&bad).is_err(), "flip at byte {i} not detected");
        }
    }

    #[test]
    fn truncation_at_every_length_is_an_error() {
        let bytes = sample(Compression::Zstd);
        for n in 0..bytes.len() {
            assert!(validate(&bytes[..n]).is_err());
            assert!(RecordBatch::parse(bytes.slice(..n)).is_err());
        }
    }

    #[test]
    fn decompression_bomb_is_refused() {
        let mut b = BatchBuilder::new(
            BatchOptions {
                compression: Compression::Zstd,
                ..BatchOptions::default()
            },
            0,
        );
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..8 {
            b.push(0, None, Some(&zeros), &[]);
        }
        let batch = RecordBatch::parse(b.build().unwrap()).unwrap();
        assert!(batch.as_bytes().len() < 4096);
        assert_eq!(
            batch.records(1 << 20),
            Err(BatchError::DecompressedTooLarge {
                size_bytes_max: 1 << 20
            })
        );
        assert_eq!(batch.records(16 << 20).unwrap().len(), 8);
    }

    /// Replaces the records section of a zstd batch with `section` and fixes length and CRC.
    fn with_zstd_section(section: &[u8]) -> Bytes {
        let mut bytes = sample(Compression::Zstd)[..BATCH_HEADER_SIZE_BYTES].to_vec();
        bytes.extend_from_slice(section);
        let batch_length = (bytes.len() - LOG_OVERHEAD_BYTES) as i32;
        bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4]
            .copy_from_slice(&batch_length.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
        bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
        Bytes::from(bytes)
    }

    #[test]
    fn zstd_streams_without_size_and_multi_frame_sections_decode() {
        let uncompressed = sample(Compression::None).slice(BATCH_HEADER_SIZE_BYTES..);
        let expected = RecordBatch::parse(sample(Compression::None))
            .unwrap()
            .records(1 << 20)
            .unwrap();
        // A streaming encoder (as Kafka's Java producer uses) declares no content size.
        let mut streamed = zstd::stream::write::Encoder::new(Vec::new(), 3).unwrap();
        std::io::Write::write_all(&mut streamed, &uncompressed).unwrap();
        let streamed = streamed.finish().unwrap();
        assert!(matches!(
            zstd::zstd_safe::get_frame_content_size(&streamed),
            Ok(None)
        ));
        // Two frames: the first declares only its own size.
        let (a, b) = uncompressed.split_at(10);
        let mut two = zstd::bulk::compress(a, 1).unwrap();
        two.extend_from_slice(&zstd::bulk::compress(b, 1).unwrap());
        for section in [streamed, two] {
            let batch = RecordBatch::parse(with_zstd_section(&section)).unwrap();
            assert_eq!(batch.records(1 << 20).unwrap(), expected);
            assert_eq!(
                batch.records(10),
                Err(BatchError::DecompressedTooLarge { size_bytes_max: 10 })
            );
        }
    }

    #[test]
    fn zstd_frame_that_understates_its_size_is_still_capped() {
        let zeros = vec![0u8; 64 * 1024];
        let mut frame = zstd::bulk::compress(&zeros, 1).unwrap();
        // Frame header: magic (4), descriptor (1); with a 64 KiB single-segment frame the
        // content size follows as 2 bytes (value - 256). Claim 1 KiB instead.
        let descriptor = frame[4];
        assert_eq!(descriptor >> 6, 1, "2-byte content size field");
        let single_segment = descriptor & 0x20 != 0;
        let at = if single_segment { 5 } else { 6 };
        frame[at..at + 2].copy_from_slice(&(1024u16 - 256).to_le_bytes());
        let batch = RecordBatch::parse(with_zstd_section(&frame)).unwrap();
        assert!(batch.records(4096).is_err());
    }

    #[test]
    fn split_batches_checks_size_and_crc() {
        let a = sample(Compression::None);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&a);
        buf.extend_from_slice(&a);
        let parts = split_batches(buf.clone(), 1 << 20).unwrap();
        assert_eq!(parts.len(), 2);
        assert_eq!(&parts[1].1[..], &a[..]);
        assert!(matches!(
            split_batches(buf.clone(), 10),
            Err(BatchError::TooLarge { .. })
        ));
        let last = buf.len() - 1;
        buf[last] ^= 1;
        assert!(matches!(
            split_batches(buf, 1 << 20),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    /// What the produce_validate fuzz target's first crash was about (a one-byte input, now the
    /// seed `empty_batch_mode`): an empty records range is no batches, not a truncated one,
    /// while `validate_produced` of nothing is an error. A Produce may carry an empty range.
    #[test]
    fn an_empty_produce_payload_is_no_batches() {
        let limits = ProduceLimits {
            batch_size_bytes_max: 1 << 20,
            decompressed_size_bytes_max: 1 << 20,
        };
        assert!(split_produced(BytesMut::new(), limits).unwrap().is_empty());
        assert!(split_batches(BytesMut::new(), 1 << 20).unwrap().is_empty());
        assert!(validate_produced(&[], limits).is_err());
    }

    #[test]
    fn parse_many_drops_partial_tail() {
        let a = sample(Compression::None);
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&a);
        buf.extend_from_slice(&a[..a.len() - 3]);
        let batches = RecordBatch::parse_many(&buf.freeze()).unwrap();
        assert_eq!(batches.len(), 1);
    }

    #[test]
    fn known_kafka_batch_header_layout() {
        // An empty-key single-record batch as Kafka's DefaultRecordBatch lays it out.
        let mut b = BatchBuilder::new(BatchOptions::default(), 16);
        b.push(1_700_000_000_000, None, Some(b"a"), &[]);
        let bytes = b.build().unwrap();
        assert_eq!(bytes[field::MAGIC], 2);
        // record: length=8 (attr, tsDelta, offDelta, keyLen=-1, valLen=1, 'a', headers=0)
        assert_eq!(
            &bytes[field::RECORDS..],
            &[0x0e, 0x00, 0x00, 0x00, 0x01, 0x02, b'a', 0x00]
        );
        assert_eq!(bytes.len(), 69);
    }

    #[test]
    fn sequences_wrap_after_i32_max_as_in_kafka() {
        assert_eq!(increment_sequence(0, 0), 0);
        assert_eq!(increment_sequence(5, 3), 8);
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        let mut b = BatchBuilder::new(BatchOptions::default(), 16);
        for i in 0..3 {
            b.push(i, None, Some(b"a"), &[]);
        }
        b.set_producer(7, 2, i32::MAX - 1);
        let header = validate(&b.build().unwrap()).unwrap();
        assert_eq!((header.producer_id, header.producer_epoch), (7, 2));
        assert_eq!(header.base_sequence, i32::MAX - 1);
        assert_eq!(header.last_sequence(), 0);
        let plain = validate(&sample(Compression::None)).unwrap();
        assert_eq!(plain.last_sequence(), NO_SEQUENCE);
    }

    #[test]
    fn producer_fields_can_be_rewritten_with_a_fresh_crc() {
        for compression in [Compression::None, Compression::Zstd] {
            let mut bytes = BytesMut::from(&sample(compression)[..]);
            let before = validate(&bytes).unwrap();
            set_producer_fields(&mut bytes, 42, 3, 1000);
            let after = validate(&bytes).unwrap();
            assert_ne!(after.crc, before.crc);
            assert_eq!((after.producer_id, after.producer_epoch), (42, 3));
            assert_eq!((after.base_sequence, after.last_sequence()), (1000, 1002));
            assert_eq!(after.records_count, before.records_count);
        }
    }
}
