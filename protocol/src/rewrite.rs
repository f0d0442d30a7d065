//! A record batch rebuilt with a subset of its records, as Kafka's log cleaner writes them.
//!
//! The rebuilt batch keeps the original's base offset, `last_offset_delta`, partition leader
//! epoch, producer id, producer epoch, base sequence, codec and timestamp type, and each kept
//! record keeps its offset and timestamp, so the offsets of the log do not move (removed
//! records leave holes) and an idempotent producer's state (last sequence = base sequence +
//! `last_offset_delta`) reads the same from the rebuilt batch. `records_count`, the max
//! timestamp, the length and the CRC-32C are recomputed.
//!
//! A delete horizon (KIP-534) may be set: attribute bit 6 and `base_timestamp` = the horizon
//! (ms); record timestamp deltas are then relative to it. Tombstones in such a batch may be
//! removed once the horizon has passed.

use bytes::{BufMut, Bytes};

use crate::batch::{
    compress_zstd, field, put_nullable, BatchError, BatchHeader, Compression, Record,
    TimestampType, ATTR_DELETE_HORIZON, BATCH_HEADER_SIZE_BYTES, BATCH_SIZE_BYTES_MAX,
    LOG_OVERHEAD_BYTES,
};
use crate::varint::{put_varint, put_varlong};

/// zstd level of rebuilt batches (the codec is kept; the original level is not recorded).
pub const REWRITE_ZSTD_LEVEL: i32 = 1;

/// The delete horizon of a batch (ms), if the cleaner set one.
pub fn delete_horizon_ms(header: &BatchHeader) -> Option<i64> {
    header.has_delete_horizon().then_some(header.base_timestamp)
}

/// Rebuilds the batch `original` with `kept` (a subset of its records, in offset order; empty
/// keeps only the header, as Kafka keeps an idempotent producer's last batch).
/// `delete_horizon_ms`: set (or keep) a delete horizon; `None` writes none.
pub fn rebuild(
    original: &BatchHeader,
    kept: &[Record],
    delete_horizon_ms: Option<i64>,
) -> Result<Bytes, BatchError> {
    let base_timestamp = delete_horizon_ms.unwrap_or(original.base_timestamp);
    let mut buf = vec![0u8; BATCH_HEADER_SIZE_BYTES];
    let mut max_timestamp = i64::MIN;
    for r in kept {
        let offset_delta = r.offset - original.base_offset;
        assert!(
            (0..=i64::from(original.last_offset_delta)).contains(&offset_delta),
            "record {} outside batch {}..={}",
            r.offset,
            original.base_offset,
            original.last_offset()
        );
        put_record(&mut buf, r, offset_delta as i32, base_timestamp);
        max_timestamp = max_timestamp.max(r.timestamp);
    }
    if kept.is_empty() || original.timestamp_type() == TimestampType::LogAppendTime {
        max_timestamp = original.max_timestamp;
    }
    let mut attributes = original.attributes & !ATTR_DELETE_HORIZON;
    if delete_horizon_ms.is_some() {
        attributes |= ATTR_DELETE_HORIZON;
    }
    match original.compression() {
        Compression::None => {}
        Compression::Zstd => buf = compress_zstd(&buf, REWRITE_ZSTD_LEVEL)?,
        other => return Err(BatchError::UnsupportedCompression(other)),
    }
    if buf.len() > BATCH_SIZE_BYTES_MAX {
        return Err(BatchError::TooLarge {
            size_bytes: buf.len() as u64,
            size_bytes_max: BATCH_SIZE_BYTES_MAX as u64,
        });
    }
    let batch_length = (buf.len() - LOG_OVERHEAD_BYTES) as i32;
    let mut h = &mut buf[..BATCH_HEADER_SIZE_BYTES];
    h.put_i64(original.base_offset);
    h.put_i32(batch_length);
    h.put_i32(original.partition_leader_epoch);
    h.put_i8(original.magic);
    h.put_u32(0);
    h.put_i16(attributes);
    h.put_i32(original.last_offset_delta);
    h.put_i64(base_timestamp);
    h.put_i64(max_timestamp);
    h.put_i64(original.producer_id);
    h.put_i16(original.producer_epoch);
    h.put_i32(original.base_sequence);
    h.put_i32(kept.len() as i32);
    let crc = crc32c::crc32c(&buf[field::ATTRIBUTES..]);
    buf[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(Bytes::from(buf))
}

fn put_record(buf: &mut Vec<u8>, r: &Record, offset_delta: i32, base_timestamp: i64) {
    let mut body = Vec::with_capacity(32);
    body.push(0);
    put_varlong(&mut body, r.timestamp.wrapping_sub(base_timestamp));
    put_varint(&mut body, offset_delta);
    put_nullable(&mut body, r.key.as_deref());
    put_nullable(&mut body, r.value.as_deref());
    put_varint(&mut body, r.headers.len() as i32);
    for hdr in &r.headers {
        put_nullable(&mut body, Some(&hdr.key));
        put_nullable(&mut body, hdr.value.as_deref());
    }
    put_varint(buf, body.len() as i32);
    buf.extend_from_slice(&body);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, BatchOptions, RecordBatch};

    fn original(compression: Compression) -> RecordBatch {
        let mut b = BatchBuilder::new(
            BatchOptions {
                compression,
                producer_id: 7,
                producer_epoch: 2,
                base_sequence: 40,
                ..BatchOptions::default()
            },
            256,
        );
        b.push(1000, Some(b"a"), Some(b"1"), &[]);
        b.push(1005, Some(b"b"), None, &[(b"h", Some(b"x"))]);
        b.push(1002, Some(b"a"), Some(b"3"), &[]);
        let mut bytes = bytes::BytesMut::from(&b.build().unwrap()[..]);
        crate::batch::set_base_offset(&mut bytes, 100);
        crate::batch::set_partition_leader_epoch(&mut bytes, 9);
        RecordBatch::parse(bytes.freeze()).unwrap()
    }

    #[test]
    fn rebuilt_batch_keeps_offsets_producer_fields_and_gets_a_new_crc() {
        for compression in [Compression::None, Compression::Zstd] {
            let o = original(compression);
            let records = o.records(1 << 20).unwrap();
            let kept = vec![records[1].clone(), records[2].clone()];
            let bytes = rebuild(o.header(), &kept, None).unwrap();
            let r = RecordBatch::parse(bytes).unwrap();
            let (h, oh) = (r.header(), o.header());
            assert_eq!(r.records(1 << 20).unwrap(), kept);
            assert_eq!(h.base_offset, 100);
            assert_eq!(h.last_offset_delta, oh.last_offset_delta);
            assert_eq!(h.partition_leader_epoch, 9);
            assert_eq!(
                (h.producer_id, h.producer_epoch, h.base_sequence),
                (7, 2, 40)
            );
            assert_eq!(h.records_count, 2);
            assert_eq!(h.max_timestamp, 1005);
            assert_eq!(h.compression(), compression);
            assert_ne!(h.crc, oh.crc);
            assert_eq!(delete_horizon_ms(h), None);
        }
    }

    #[test]
    fn delete_horizon_moves_the_base_timestamp_not_the_record_timestamps() {
        let o = original(Compression::None);
        let records = o.records(1 << 20).unwrap();
        let bytes = rebuild(o.header(), &records, Some(5000)).unwrap();
        let r = RecordBatch::parse(bytes).unwrap();
        assert_eq!(delete_horizon_ms(r.header()), Some(5000));
        assert_eq!(r.records(1 << 20).unwrap(), records);
        let again = rebuild(r.header(), &records[2..], None).unwrap();
        let again = RecordBatch::parse(again).unwrap();
        assert_eq!(delete_horizon_ms(again.header()), None);
        assert_eq!(again.records(1 << 20).unwrap(), records[2..].to_vec());
    }
}
