//! The broker's produce-path validation (`batch::validate_produced`, `batch::split_produced`):
//! every record of a batch decoded and checked, zstd sections inflated through a fixed window.
//!
//! Nothing may panic, and the streaming validator must agree with the in-memory decoder
//! (`RecordBatch::records`, the field-by-field reading without the fast path, zstd inflated in
//! one piece): what `validate_produced` accepts decodes to exactly `records_count` records at
//! offset deltas 0, 1, 2, ... with valid timestamps; and what the decoder reads as a valid
//! producer's batch, `validate_produced` accepts (unless the zstd stream uses a window the
//! streaming decoder refuses, a stricter rule only the broker applies).
//!
//! The first input byte picks the mode:
//! - bit 0 clear: the rest is a batch (or several), header and CRC as given;
//! - bit 0 set: the rest after 4 bytes is a records section that the harness wraps in a valid
//!   header (CRC, length, attributes 0, records_count and max_timestamp from those 4 bytes), so
//!   that mutations reach the record walker;
//! - bit 1 (with bit 0): the section is zstd-compressed first (codec 4), so mutations of the
//!   records reach the streaming path through valid zstd;
//! - bit 2 (with bit 0): the section goes in as the compressed bytes themselves (codec 4), so
//!   mutations reach the frame checks and the decompressor.
#![no_main]

use borges_protocol::batch::{
    self, field, BatchError, ProduceLimits, RecordBatch, BATCH_HEADER_SIZE_BYTES,
    LOG_OVERHEAD_BYTES,
};
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;

/// Small enough that bombs hit it quickly, large enough for several windows of records.
const DECOMPRESSED_SIZE_BYTES_MAX: usize = 1 << 20;
const LIMITS: ProduceLimits = ProduceLimits {
    batch_size_bytes_max: 4 << 20,
    decompressed_size_bytes_max: DECOMPRESSED_SIZE_BYTES_MAX,
};

/// A producer-shaped header around `section` with a correct CRC.
fn wrap(params: [u8; 4], codec: u8, section: &[u8]) -> Vec<u8> {
    let records_count = i32::from(params[0] % 64);
    let max_timestamp = 1_000 + i64::from(params[1]) - 128;
    let mut b = vec![0u8; BATCH_HEADER_SIZE_BYTES];
    let batch_length = (BATCH_HEADER_SIZE_BYTES - LOG_OVERHEAD_BYTES + section.len()) as i32;
    b[field::BATCH_LENGTH..field::BATCH_LENGTH + 4].copy_from_slice(&batch_length.to_be_bytes());
    b[field::PARTITION_LEADER_EPOCH..field::MAGIC].copy_from_slice(&(-1i32).to_be_bytes());
    b[field::MAGIC] = 2;
    b[field::ATTRIBUTES + 1] = codec;
    let last = (records_count - 1).max(0) + i32::from(params[2] % 4 == 0);
    b[field::LAST_OFFSET_DELTA..field::LAST_OFFSET_DELTA + 4].copy_from_slice(&last.to_be_bytes());
    b[field::BASE_TIMESTAMP..field::BASE_TIMESTAMP + 8].copy_from_slice(&1_000i64.to_be_bytes());
    b[field::MAX_TIMESTAMP..field::MAX_TIMESTAMP + 8].copy_from_slice(&max_timestamp.to_be_bytes());
    b[field::PRODUCER_ID..field::RECORDS_COUNT].fill(0xff);
    b[field::RECORDS_COUNT..field::RECORDS].copy_from_slice(&records_count.to_be_bytes());
    b.extend_from_slice(section);
    let crc = crc32c::crc32c(&b[field::ATTRIBUTES..]);
    b[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    b
}

fn input_batches(data: &[u8]) -> Option<Vec<u8>> {
    let (&mode, rest) = data.split_first()?;
    if mode & 1 == 0 {
        return Some(rest.to_vec());
    }
    if rest.len() < 4 {
        return None;
    }
    let (params, section) = rest.split_at(4);
    let params = [params[0], params[1], params[2], params[3]];
    Some(if mode & 2 != 0 {
        let compressed = zstd::bulk::compress(section, i32::from(params[3] % 4)).ok()?;
        wrap(params, 4, &compressed)
    } else if mode & 4 != 0 {
        wrap(params, 4, section)
    } else {
        wrap(params, 0, section)
    })
}

/// What the in-memory decoder says about the one batch at the start of `bytes`, judged by the
/// producer rules: `Ok` when it reads as a valid producer's batch.
fn decoder_accepts(bytes: &[u8]) -> Result<(), BatchError> {
    let header = batch::validate(bytes)?;
    if header.size_bytes() > LIMITS.batch_size_bytes_max {
        return Err(BatchError::TooLarge {
            size_bytes: header.size_bytes() as u64,
            size_bytes_max: LIMITS.batch_size_bytes_max as u64,
        });
    }
    batch::check_produced_header(&header)?;
    let one = Bytes::copy_from_slice(&bytes[..header.size_bytes()]);
    let records = RecordBatch::parse(one)?.records(DECOMPRESSED_SIZE_BYTES_MAX)?;
    let mut largest = i64::MIN;
    for (i, r) in records.iter().enumerate() {
        if r.offset != header.base_offset + i as i64 || r.timestamp < 0 {
            return Err(BatchError::InvalidRecord {
                index: i as u32,
                reason: "decoder: delta or timestamp",
            });
        }
        largest = largest.max(r.timestamp);
    }
    if largest != header.max_timestamp {
        return Err(BatchError::MaxTimestampMismatch {
            max_timestamp: header.max_timestamp,
            largest,
        });
    }
    Ok(())
}

fuzz_target!(|data: &[u8]| {
    let Some(bytes) = input_batches(data) else {
        return;
    };
    let produced = batch::validate_produced(&bytes, LIMITS);
    let decoded = decoder_accepts(&bytes);
    match (&produced, &decoded) {
        (Ok(header), Ok(())) => {
            assert!(header.records_count >= 1);
            assert_eq!(header.last_offset_delta, header.records_count - 1);
        }
        (Ok(header), Err(e)) => {
            panic!("validate_produced accepted {header:?}; the decoder refuses it: {e}")
        }
        // The streaming decoder refuses windows above its limit ("Frame requires too much
        // memory for decoding"); one-shot decompression does not need a window.
        (Err(BatchError::Decompression(m)), Ok(())) if m.contains("memory") => {}
        (Err(e), Ok(())) => panic!("validate_produced refused what the decoder reads: {e}"),
        (Err(_), Err(_)) => {}
    }
    if let Err(e) = &produced {
        // Every refusal maps to a wire code and renders a message.
        assert_ne!(e.error_code(), borges_protocol::ErrorCode::None);
        assert!(!e.to_string().is_empty());
    }
    // The same batch twice: both accepted or the first error comes back (the second named).
    // No bytes at all are no batches, not an error: a Produce may carry an empty records range.
    let mut two = BytesMut::from(&bytes[..]);
    two.extend_from_slice(&bytes);
    match batch::split_produced(two, LIMITS) {
        Ok(parts) if bytes.is_empty() => assert!(parts.is_empty()),
        Ok(parts) => {
            assert!(produced.is_ok());
            assert_eq!(parts.len() % 2, 0);
        }
        Err(_) => assert!(!bytes.is_empty()),
    }
});
