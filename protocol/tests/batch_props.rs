//! Property tests for record batches: arbitrary records round-trip through `BatchBuilder`,
//! `RecordBatch::parse` and `records`, with and without zstd; truncation and corruption at
//! every byte offset give errors, never panics.

use borges_protocol::batch::{
    self, field, BatchBuilder, BatchError, BatchIter, BatchOptions, Compression, Record,
    RecordBatch, RecordHeader, TimestampType,
};
use bytes::{Bytes, BytesMut};
use proptest::prelude::*;

const DECOMPRESSED_SIZE_BYTES_MAX: usize = 16 << 20;
const LIMITS: batch::ProduceLimits = batch::ProduceLimits {
    batch_size_bytes_max: 1 << 20,
    decompressed_size_bytes_max: DECOMPRESSED_SIZE_BYTES_MAX,
};

#[derive(Debug, Clone)]
struct Input {
    timestamp: i64,
    key: Option<Vec<u8>>,
    value: Option<Vec<u8>>,
    headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

fn bytes_strategy() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..16),
        prop::collection::vec(any::<u8>(), 0..300),
    ]
}

fn input_strategy() -> impl Strategy<Value = Input> {
    (
        prop_oneof![any::<i64>(), 0i64..2_000_000_000_000, Just(-1i64)],
        prop::option::of(bytes_strategy()),
        prop::option::of(bytes_strategy()),
        prop::collection::vec(
            (
                prop::collection::vec(any::<u8>(), 0..8),
                prop::option::of(bytes_strategy()),
            ),
            0..4,
        ),
    )
        .prop_map(|(timestamp, key, value, headers)| Input {
            timestamp,
            key,
            value,
            headers,
        })
}

fn options_strategy() -> impl Strategy<Value = BatchOptions> {
    (
        prop_oneof![Just(Compression::None), Just(Compression::Zstd)],
        any::<i64>(),
        any::<i16>(),
        any::<i32>(),
        any::<bool>(),
    )
        .prop_map(
            |(compression, producer_id, producer_epoch, base_sequence, is_transactional)| {
                BatchOptions {
                    compression,
                    compression_level: 1,
                    producer_id,
                    producer_epoch,
                    base_sequence,
                    is_transactional,
                }
            },
        )
}

fn build(options: BatchOptions, inputs: &[Input]) -> Bytes {
    let mut builder = BatchBuilder::new(options, 0);
    for input in inputs {
        let headers: Vec<(&[u8], Option<&[u8]>)> = input
            .headers
            .iter()
            .map(|(k, v)| (&k[..], v.as_deref()))
            .collect();
        let before = builder.size_bytes();
        let predicted = builder.record_size_bytes(
            input.timestamp,
            input.key.as_deref(),
            input.value.as_deref(),
            &headers,
        );
        builder.push(
            input.timestamp,
            input.key.as_deref(),
            input.value.as_deref(),
            &headers,
        );
        assert_eq!(builder.size_bytes() - before, predicted);
    }
    builder.build().unwrap()
}

fn expected_records(inputs: &[Input]) -> Vec<Record> {
    inputs
        .iter()
        .enumerate()
        .map(|(i, input)| Record {
            offset: i as i64,
            timestamp: input.timestamp,
            key: input.key.clone().map(Bytes::from),
            value: input.value.clone().map(Bytes::from),
            headers: input
                .headers
                .iter()
                .map(|(k, v)| RecordHeader {
                    key: Bytes::from(k.clone()),
                    value: v.clone().map(Bytes::from),
                })
                .collect(),
        })
        .collect()
}

/// Recomputes the CRC so that structural corruption reaches the record decoder.
fn fix_crc(bytes: &mut [u8]) {
    let crc = crc32c::crc32c(&bytes[field::ATTRIBUTES..]);
    bytes[field::CRC..field::CRC + 4].copy_from_slice(&crc.to_be_bytes());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn batches_round_trip(
        options in options_strategy(),
        inputs in prop::collection::vec(input_strategy(), 0..12),
    ) {
        let bytes = build(options, &inputs);
        let batch = RecordBatch::parse(bytes.clone()).unwrap();
        let h = *batch.header();
        prop_assert_eq!(h.size_bytes(), bytes.len());
        prop_assert_eq!(h.base_offset, 0);
        prop_assert_eq!(h.partition_leader_epoch, -1);
        prop_assert_eq!(h.magic, 2);
        prop_assert_eq!(h.records_count as usize, inputs.len());
        prop_assert_eq!(h.last_offset_delta as usize, inputs.len().saturating_sub(1));
        prop_assert_eq!(h.compression(), options.compression);
        prop_assert_eq!(h.timestamp_type(), TimestampType::CreateTime);
        prop_assert_eq!(h.is_transactional(), options.is_transactional);
        prop_assert!(!h.is_control());
        prop_assert_eq!(h.producer_id, options.producer_id);
        prop_assert_eq!(h.producer_epoch, options.producer_epoch);
        prop_assert_eq!(h.base_sequence, options.base_sequence);
        if let Some(first) = inputs.first() {
            prop_assert_eq!(h.base_timestamp, first.timestamp);
            let max = inputs.iter().map(|i| i.timestamp).max().unwrap();
            prop_assert_eq!(h.max_timestamp, max);
        }
        let records = batch.records(DECOMPRESSED_SIZE_BYTES_MAX).unwrap();
        prop_assert_eq!(records, expected_records(&inputs));
    }

    #[test]
    fn stamped_batches_keep_their_crc(
        options in options_strategy(),
        inputs in prop::collection::vec(input_strategy(), 1..6),
        base_offset in 0i64..(1 << 62),
        epoch in any::<i32>(),
    ) {
        let mut bytes = BytesMut::from(&build(options, &inputs)[..]);
        batch::set_base_offset(&mut bytes, base_offset);
        batch::set_partition_leader_epoch(&mut bytes, epoch);
        let batch = RecordBatch::parse(bytes.freeze()).unwrap();
        prop_assert_eq!(batch.base_offset(), base_offset);
        prop_assert_eq!(batch.header().partition_leader_epoch, epoch);
        let records = batch.records(DECOMPRESSED_SIZE_BYTES_MAX).unwrap();
        prop_assert_eq!(records.len(), inputs.len());
        for (i, r) in records.iter().enumerate() {
            prop_assert_eq!(r.offset, base_offset + i as i64);
        }
    }

    #[test]
    fn truncation_and_corruption_never_panic(
        options in options_strategy(),
        inputs in prop::collection::vec(input_strategy(), 1..4),
        flip in 1u8..=255,
    ) {
        let bytes = build(options, &inputs);
        for len in 0..bytes.len() {
            prop_assert!(batch::validate(&bytes[..len]).is_err());
            prop_assert!(RecordBatch::parse(bytes.slice(..len)).is_err());
        }
        let mut bad = bytes.to_vec();
        for at in 0..bytes.len() {
            bad[at] ^= flip;
            let outside_crc = (field::BATCH_LENGTH..field::MAGIC).contains(&at);
            let base_offset_byte = at < field::BATCH_LENGTH;
            if !outside_crc && !base_offset_byte {
                prop_assert!(batch::validate(&bad).is_err(), "byte {} not detected", at);
            }
            // With the CRC fixed up, the corruption reaches the record decoder: any result
            // but a panic is fine.
            if at >= field::ATTRIBUTES {
                fix_crc(&mut bad);
                if let Ok(b) = RecordBatch::parse(Bytes::from(bad.clone())) {
                    let _ = b.records(DECOMPRESSED_SIZE_BYTES_MAX);
                }
            }
            bad.copy_from_slice(&bytes);
        }
    }

    /// Every batch our producer builds from valid input passes the broker's produce validation,
    /// and a corrupted one (CRC fixed up, so the damage reaches the records) either fails it or
    /// still decodes to exactly `records_count` records at offsets base, base + 1, ...: what the
    /// streaming validator accepts, the in-memory decoder reads.
    #[test]
    fn produce_validation_accepts_what_producers_build_and_only_what_decodes(
        compression in prop_oneof![Just(Compression::None), Just(Compression::Zstd)],
        inputs in prop::collection::vec(input_strategy(), 1..6),
        flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..4),
    ) {
        let options = BatchOptions { compression, ..BatchOptions::default() };
        let inputs: Vec<Input> = inputs
            .into_iter()
            .map(|i| Input { timestamp: i.timestamp.max(0), ..i })
            .collect();
        let bytes = build(options, &inputs);
        prop_assert!(batch::validate_produced(&bytes, LIMITS).is_ok());
        let mut bad = bytes.to_vec();
        for (at, flip) in flips {
            let at = field::ATTRIBUTES + at.index(bad.len() - field::ATTRIBUTES);
            bad[at] ^= flip;
        }
        fix_crc(&mut bad);
        if let Ok(header) = batch::validate_produced(&bad, LIMITS) {
            let records = RecordBatch::parse(Bytes::from(bad))
                .unwrap()
                .records(DECOMPRESSED_SIZE_BYTES_MAX)
                .unwrap();
            prop_assert_eq!(records.len(), header.records_count as usize);
            for (i, r) in records.iter().enumerate() {
                prop_assert_eq!(r.offset, i as i64);
                prop_assert!(r.timestamp >= 0 && r.timestamp <= header.max_timestamp);
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut bytes = bytes;
        if bytes.len() >= batch::BATCH_HEADER_SIZE_BYTES {
            // Make the header plausible so that the deeper checks run too.
            let batch_length = (bytes.len() - 12) as i32;
            bytes[field::BATCH_LENGTH..field::BATCH_LENGTH + 4]
                .copy_from_slice(&batch_length.to_be_bytes());
            bytes[field::MAGIC] = 2;
            fix_crc(&mut bytes);
        }
        let bytes = Bytes::from(bytes);
        for item in BatchIter::new(&bytes) {
            if item.is_err() {
                break;
            }
        }
        let _ = RecordBatch::parse_many(&bytes);
        let _ = batch::validate_produced(&bytes, LIMITS);
        if let Ok(b) = RecordBatch::parse(bytes) {
            let _ = b.records(DECOMPRESSED_SIZE_BYTES_MAX);
        }
    }
}

#[test]
fn every_truncated_concatenation_is_split_or_refused() {
    let inputs: Vec<Input> = (0..3)
        .map(|i| Input {
            timestamp: 1_000 + i,
            key: Some(vec![i as u8; 3]),
            value: Some(vec![7; 40]),
            headers: vec![],
        })
        .collect();
    let one = build(BatchOptions::default(), &inputs);
    let mut two = BytesMut::new();
    two.extend_from_slice(&one);
    two.extend_from_slice(&one);
    for len in 0..two.len() {
        let prefix = BytesMut::from(&two[..len]);
        match batch::split_batches(prefix, 1 << 20) {
            Ok(parts) => assert_eq!(parts.len() * one.len(), len, "split {len} bytes"),
            Err(BatchError::Truncated { .. }) => {}
            Err(e) => panic!("unexpected error at {len}: {e}"),
        }
        let parsed = RecordBatch::parse_many(&Bytes::copy_from_slice(&two[..len])).unwrap();
        assert_eq!(parsed.len(), len / one.len());
    }
}

#[test]
fn gzip_snappy_lz4_and_unknown_codecs_are_typed_errors() {
    let base = build(
        BatchOptions::default(),
        &[Input {
            timestamp: 5,
            key: None,
            value: Some(b"v".to_vec()),
            headers: vec![],
        }],
    );
    for (bits, expected) in [
        (1, Some(Compression::Gzip)),
        (2, Some(Compression::Snappy)),
        (3, Some(Compression::Lz4)),
        (5, None),
        (7, None),
    ] {
        let mut bytes = base.to_vec();
        bytes[field::ATTRIBUTES + 1] = bits;
        fix_crc(&mut bytes);
        match expected {
            Some(codec) => {
                let batch = RecordBatch::parse(Bytes::from(bytes)).unwrap();
                assert_eq!(
                    batch.records(1 << 20),
                    Err(BatchError::UnsupportedCompression(codec))
                );
            }
            None => assert_eq!(
                batch::validate(&bytes),
                Err(BatchError::UnknownCompression(bits))
            ),
        }
    }
}
