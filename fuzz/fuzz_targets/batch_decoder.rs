//! Record batch decoding: validation (header, lengths, CRC-32C), record decoding (varints,
//! headers, zstd with a decompression limit), iteration and splitting of concatenated batches.
//!
//! The first input byte chooses a mode. In "repair" mode the header's batch_length, magic and
//! CRC are fixed up first, so that the fuzzer reaches the record decoder instead of stopping at
//! the CRC check.
#![no_main]

use borges_protocol::batch::{self, field, BatchIter, RecordBatch, BATCH_HEADER_SIZE_BYTES};
use bytes::{Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;

const DECOMPRESSED_SIZE_BYTES_MAX: usize = 1 << 20;

fn repair(bytes: &mut [u8]) {
    if bytes.len() < BATCH_HEADER_SIZE_BYTES {
        return;
    }
    let batch_length = (bytes.len() - 12) as i32;
    bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4]
        .copy_from_slice(&batch_length.to_be_bytes());
    bytes[field::MAGIC] = 2;
    let crc = crc32c(&bytes[field::ATTRIBUTES..]);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

/// CRC-32C (Castagnoli), bitwise: the fuzz crate does not depend on the `crc32c` crate.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0x82f6_3b78 & (!(crc & 1)).wrapping_add(1));
        }
    }
    !crc
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = rest.to_vec();
    if mode & 1 == 1 {
        repair(&mut bytes);
    }
    let bytes = Bytes::from(bytes);
    if let Ok(header) = batch::validate(&bytes) {
        assert!(header.size_bytes() <= bytes.len());
        assert_eq!(header.magic, 2);
    }
    if let Ok(parsed) = RecordBatch::parse(bytes.clone()) {
        if let Ok(records) = parsed.records(DECOMPRESSED_SIZE_BYTES_MAX) {
            assert_eq!(records.len(), parsed.records_count() as usize);
            for r in &records {
                assert!(r.offset >= parsed.base_offset() && r.offset <= parsed.last_offset());
            }
        }
    }
    for item in BatchIter::new(&bytes) {
        if item.is_err() {
            break;
        }
    }
    let _ = RecordBatch::parse_many(&bytes);
    let _ = batch::split_batches(BytesMut::from(&bytes[..]), 1 << 20);
});
